"""Tables and collections: ordinary DataFrames in, accumulated collections out.

On ``(data, time, diff)``: :func:`collection` checks and names a DataFrame of updates;
:func:`from_snapshots` turns full snapshots per version into the updates between them and
:func:`from_upserts` a log of keyed upserts into the updates that replace each key's value,
so that the collection accumulated at any time is the table as of that time;
:func:`dd_as_of` reads a collection back at one time (its accumulation: data and
multiplicity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import (
    DIFF,
    INTEGRAL_TYPES,
    TIME,
    as_columns,
    checked,
    guard_expr,
    inspect,
    integral_sql,
    may_be_null,
    null_guard,
    null_guard_sql,
    qcol,
    qcols,
    quoted,
    time_leaf_names,
)
from spark_differential.core.lattice import RESERVED_PREFIX, Antichain, TimeType, Total, from_spark_type
from spark_differential.errors import (
    DiffTypeError,
    FrontierError,
    MissingColumnError,
    NullValueError,
    ReservedNameError,
    SchemaMismatchError,
    TimeTypeError,
)
from spark_differential.trace.spark import consolidated_collection


def collection(
    df: DataFrame,
    time: str = TIME,
    diff: str | None = None,
    check_nulls: bool = True,
) -> DataFrame:
    """Validate and name an update DataFrame as a collection.

    ``time`` names the column holding each update's time (renamed to ``time``);
    ``diff`` names the multiplicity column (renamed to ``diff`` and cast to
    ``bigint``); when ``diff`` is omitted and there is no ``diff`` column, every row
    is an insertion (``diff = 1``).

    With ``check_nulls`` (the default) a null ``time`` or ``diff`` raises
    :class:`NullValueError` here, at the cost of one scan of ``df`` (skipped when
    the schema says the columns cannot be null).  Without it, or for DataFrames that
    reach operators without this function, a null fails the job that meets it, with
    a message naming ``NullValueError``; it is never silently dropped.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> orders = spark.createDataFrame([("bacon", 3), ("eggs", 5)], "item string, ts long")
    >>> sd.collection(orders, time="ts").orderBy("item").show()
    +-----+----+----+
    | item|time|diff|
    +-----+----+----+
    |bacon|   3|   1|
    | eggs|   5|   1|
    +-----+----+----+
    <BLANKLINE>
    """
    op = "sd.collection"
    if not isinstance(df, DataFrame):
        raise TypeError(f"{op}: expected a pyspark DataFrame, got {type(df).__name__}")
    names = df.columns
    if time not in names:
        raise MissingColumnError(f"{op}: no column `{time}` to use as the time (columns: {names})")
    if diff is not None and diff not in names:
        raise MissingColumnError(f"{op}: no column `{diff}` to use as the diff (columns: {names})")
    if time != TIME and TIME in names:
        raise SchemaMismatchError(
            f"{op}: `{time}` is the time column but the DataFrame already has a data column named "
            f"`{TIME}`; rename that column first"
        )
    diff_src = diff if diff is not None else (DIFF if DIFF in names else None)
    if diff_src is not None and diff_src != DIFF and DIFF in names:
        raise SchemaMismatchError(
            f"{op}: `{diff_src}` is the diff column but the DataFrame already has a data column named "
            f"`{DIFF}`; rename that column first"
        )
    try:
        ttype = from_spark_type(df.schema[time].dataType, where=time)
    except TimeTypeError as e:
        raise type(e)(f"{op}: {e}") from None
    if diff_src is not None:
        dt = df.schema[diff_src].dataType
        if not isinstance(dt, INTEGRAL_TYPES):
            raise DiffTypeError(
                f"{op}: the diff column `{diff_src}` has type {dt.simpleString()}; it must be integral "
                f"(cast it, e.g. F.col('{diff_src}').cast('long'))"
            )
    data = [c for c in names if c not in (time, diff_src)]
    for c in data:
        if c.startswith(RESERVED_PREFIX):
            raise ReservedNameError(f"{op}: column `{c}` uses the reserved prefix {RESERVED_PREFIX!r}; rename it")
    if check_nulls:
        _check_nulls(df, time, diff_src, op)
    if integral_sql(ttype) is not None:  # SQL text: one selectExpr, not a few py4j round trips per Column
        t = quoted(time)
        d = "CAST(1 AS BIGINT)" if diff_src is None else null_guard_sql(
            f"CAST({quoted(diff_src)} AS BIGINT)", [quoted(diff_src)], "diff", op)
        return df.selectExpr(*map(quoted, data), f"{null_guard_sql(t, [t], 'time', op)} AS {quoted(TIME)}",
                             f"{d} AS {quoted(DIFF)}")
    tcol = qcol(time)
    tcol = null_guard(tcol, ttype.encode_column(tcol), "time", op)
    if diff_src is None:
        dcol = F.lit(1).cast("long")
    else:
        dcol = null_guard(qcol(diff_src).cast("long"), [qcol(diff_src)], "diff", op)
    return df.select(*qcols(data), tcol.alias(TIME), dcol.alias(DIFF))


def _leaf_nulls(col: Column, dtype: T.DataType) -> Column:
    if isinstance(dtype, T.StructType):
        cond = col.isNull()
        for f in dtype.fields:
            cond = cond | _leaf_nulls(col.getField(f.name), f.dataType)
        return cond
    return col.isNull()


def _check_nulls(df: DataFrame, time: str, diff: str | None, op: str) -> None:
    """One scan (a single aggregate job) counting null times and diffs; raise on any."""
    schema = df.schema
    checks = [(time, "time")] + ([(diff, "diff")] if diff else [])
    checks = [(c, w) for c, w in checks if may_be_null(schema[c].dataType, schema[c].nullable)]
    if not checks:
        return
    counts = df.select(*[F.count_if(_leaf_nulls(qcol(c), schema[c].dataType)) for c, _ in checks]).first()
    for (name, what), n in zip(checks, counts or []):
        if n:
            raise NullValueError(
                f"{op}: column `{name}` (the {what}) has null values; every update needs a {what}. "
                f"Filter them out or fill them before building the collection "
                f"(e.g. df.where(F.col('{name}').isNotNull()))."
            )


def _total_time_of(df: DataFrame, col: str, *, op: str) -> TimeType:
    if col not in df.columns:
        raise MissingColumnError(f"{op}: no column `{col}` (columns: {df.columns})")
    try:
        ttype = from_spark_type(df.schema[col].dataType, where=col, allow_internal=False)
    except TimeTypeError as e:
        raise type(e)(f"{op}: {e}") from None
    if not isinstance(ttype, Total):
        raise TimeTypeError(
            f"{op}: `{col}` has type {ttype.describe()}; versions must be totally ordered "
            "(an integral type, date or timestamp)"
        )
    return ttype


def from_snapshots(df: DataFrame, version: str = "version") -> DataFrame:
    """Full snapshots, one per version, to the updates between consecutive versions.

    Each row of ``df`` is one copy of a data row in the snapshot named by its
    ``version`` (rows are a multiset: two equal rows are two copies).  The result
    accumulates, at each listed version, to exactly that version's snapshot.  A
    version is known only through its rows, so an empty snapshot cannot be listed.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> snaps = spark.createDataFrame([("a", 1), ("b", 1), ("b", 2), ("c", 2)], "x string, version long")
    >>> sd.from_snapshots(snaps).orderBy("time", "x").show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  a|   1|   1|
    |  b|   1|   1|
    |  a|   2|  -1|
    |  c|   2|   1|
    +---+----+----+
    <BLANKLINE>
    """
    op = "sd.from_snapshots"
    _total_time_of(df, version, op=op)
    data = [c for c in df.columns if c != version]
    if not data:
        raise SchemaMismatchError(f"{op}: the snapshots have no data columns besides `{version}`")
    for c in data:
        if c in (TIME, DIFF) or c.startswith(RESERVED_PREFIX):
            raise ReservedNameError(f"{op}: rename the data column `{c}` (it clashes with `time`/`diff`/`_sd_`)")
    v = qcol(version)
    df = df.select(*qcols(data), null_guard(v, [v], "version", op).alias("_sd_ver"))
    counts = df.groupBy(*qcols(data), "_sd_ver").agg(F.count(F.lit(1)).alias("_sd_c"))
    # the versions from the counts, not from ``df``: one scan of the input serves both
    versions = counts.select(F.col("_sd_ver").alias("_sd_v")).distinct()
    nxt = versions.select("_sd_v", F.lead("_sd_v").over(Window.orderBy("_sd_v")).alias("_sd_next"))
    joined = counts.join(nxt, counts["_sd_ver"] == nxt["_sd_v"])
    plus = joined.select(*qcols(data), F.col("_sd_ver").alias(TIME), F.col("_sd_c").alias(DIFF))
    minus = joined.where(F.col("_sd_next").isNotNull()).select(
        *qcols(data), F.col("_sd_next").alias(TIME), (-F.col("_sd_c")).alias(DIFF)
    )
    return consolidated_collection(plus.unionByName(minus), data)


def from_upserts(
    df: DataFrame,
    key: str | Sequence[str] | None,
    time: str = TIME,
    deleted: str | None = None,
) -> DataFrame:
    """A log of "key now has these values from time t" rows to a collection.

    Each row says that from ``time`` on, the key (``key`` columns) has the row's
    other columns as its value; the key's previous values are retracted at that
    moment.  Several rows for the same key and time are all the key's values
    from then on (a multiset).  With ``deleted`` naming a boolean column, a row
    with ``deleted = true`` retracts the key's values without inserting any.
    This is how an ordinary price-history table becomes a collection for as-of
    joins.  With ``key=[]`` (or ``None``) the whole table is one timeline (one
    value, e.g. an exchange rate, that changes over time): each time's rows
    replace all rows before it.  That builds the history in a single task.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> prices = spark.createDataFrame([("bacon", 3, 1), ("bacon", 4, 5)], "item string, price int, ts long")
    >>> sd.from_upserts(prices, key="item", time="ts").orderBy("time", "diff").show()
    +-----+-----+----+----+
    | item|price|time|diff|
    +-----+-----+----+----+
    |bacon|    3|   1|   1|
    |bacon|    3|   5|  -1|
    |bacon|    4|   5|   1|
    +-----+-----+----+----+
    <BLANKLINE>
    """
    op = "sd.from_upserts"
    keys = as_columns(key, op=op, what="key")
    _total_time_of(df, time, op=op)
    for c in keys + ([deleted] if deleted else []):
        if c not in df.columns:
            raise MissingColumnError(f"{op}: no column `{c}` (columns: {df.columns})")
    if deleted is not None and not isinstance(df.schema[deleted].dataType, T.BooleanType):
        raise TypeError(f"{op}: the deleted flag `{deleted}` must be a boolean column")
    data = [c for c in df.columns if c not in (time, deleted)]
    for c in data:
        if c in (TIME, DIFF) or c.startswith(RESERVED_PREFIX):
            raise ReservedNameError(f"{op}: rename the data column `{c}` (it clashes with `time`/`diff`/`_sd_`)")
    values = [c for c in data if c not in keys]
    # one shuffle: everything below is partition-local once rows are partitioned by key
    tcol = qcol(time)
    guarded = df.withColumn(time, null_guard(tcol, [tcol], "time", op))
    # no keys: one timeline, in one partition (which every step below accepts as is)
    rows = guarded.repartition(*qcols(keys)) if keys else guarded.repartition(1)
    value = F.struct(*qcols(values)) if values else F.lit(True)
    if deleted is not None:
        value = F.when(~F.coalesce(qcol(deleted), F.lit(False)), value)
    now = rows.groupBy(*qcols(keys), tcol).agg(F.collect_list(value).alias("_sd_now"))  # nulls (deletions) dropped
    w = Window.partitionBy(*(qcols(keys) or [F.lit(0)])).orderBy(tcol)
    now = now.select(*qcols(keys), tcol, "_sd_now", F.lag("_sd_now").over(w).alias("_sd_prev"))
    prev = F.coalesce(F.col("_sd_prev"), F.slice(F.col("_sd_now"), 1, 0))  # [] at the key's first time
    sign = F.concat(
        F.transform(F.col("_sd_now"), lambda x: F.struct(x.alias("v"), F.lit(1).cast("long").alias("d"))),
        F.transform(prev, lambda x: F.struct(x.alias("v"), F.lit(-1).cast("long").alias("d"))),
    )
    steps = now.select(*qcols(keys), tcol.alias(TIME), F.explode(sign).alias("_sd_s"))
    summed = (
        steps.groupBy(*qcols(keys), F.col("_sd_s.v").alias("_sd_v"), TIME)
        .agg(F.sum("_sd_s.d").cast("long").alias(DIFF))
        .where(F.col(DIFF) != 0)
    )
    picked = [qcol(c) if c in keys else F.col("_sd_v").getField(c).alias(c) for c in data]
    out = summed.select(*picked, TIME, DIFF)
    log = df.select(*qcols(data), *qcols([deleted] if deleted else []), tcol.alias(TIME), F.lit(1).cast("long").alias(DIFF))
    vars(out)[_UPSERTS] = UpsertLog(log, tuple(keys), tuple(values), deleted)
    return out


_UPSERTS = "_sd_upsert_log"


@dataclass(frozen=True)
class UpsertLog:
    """The log a :func:`from_upserts` collection was made from, for operators that can use it directly.

    ``rows`` holds one update per log row: the key and value columns, the deletion
    flag (if any), ``time`` and ``diff = 1``.  It is attached to the DataFrame that
    ``from_upserts`` returns (and so to that object only: any transformation of it
    is an ordinary collection again).
    """

    rows: DataFrame
    keys: tuple[str, ...]
    values: tuple[str, ...]
    deleted: str | None


def upsert_log(df: DataFrame) -> UpsertLog | None:
    """The upsert log behind ``df`` when ``df`` is exactly what :func:`from_upserts` returned."""
    found = getattr(df, "__dict__", {}).get(_UPSERTS)
    return found if isinstance(found, UpsertLog) else None


def dd_as_of(df: DataFrame, t: Any) -> DataFrame:
    """The accumulated collection at time ``t``: data columns plus ``diff`` (the multiplicity).

    Rows whose updates cancel by ``t`` are absent.  For struct times ``t`` is a tuple,
    dict or Row and "updates at or before ``t``" uses the product order.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 1), ("a", 3, -1), ("b", 2, 2)], "x string, time long, diff long")
    >>> c.dd_as_of(2).orderBy("x").show()
    +---+----+
    |  x|diff|
    +---+----+
    |  a|   1|
    |  b|   2|
    +---+----+
    <BLANKLINE>
    """
    op = "dd_as_of"
    cs = inspect(df, op=op)
    try:
        at = Antichain.from_values(cs.ttype, [t]).elements[0]
    except FrontierError as e:
        raise FrontierError(
            f"{op}: t={t!r} is not a time of the collection's time type {cs.ttype.describe()}: {e}"
        ) from None
    if integral_sql(cs.ttype) is not None:  # SQL text: the checks inside the filter and the aggregation
        schema = df.schema
        (cond,) = [cs.ttype.sql_leq([f"CAST({guard_expr(schema, TIME, op)} AS BIGINT)"], [str(at[0])])]
        return df.where(cond).groupBy(*qcols(cs.data_cols)).agg(
            F.expr(f"CAST(sum({guard_expr(schema, DIFF, op)}) AS BIGINT) AS {quoted(DIFF)}")).where(f"{quoted(DIFF)} != 0")
    leaves = time_leaf_names(cs.ttype.width)
    df = checked(df, cs, op)
    enc = df.select(*qcols(cs.data_cols), *[c.alias(n) for c, n in zip(cs.ttype.encode_column(F.col(TIME)), leaves)], DIFF)
    cond = cs.ttype.sql_leq(leaves, [str(x) for x in at])
    return (
        enc.where(F.expr(cond))
        .groupBy(*qcols(cs.data_cols))
        .agg(F.sum(DIFF).cast("long").alias(DIFF))
        .where(F.col(DIFF) != 0)
    )
