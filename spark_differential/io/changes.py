"""Change logs in, interval histories out.

On ``(data, time, diff)``: each reader here turns one common shape of change data
into a collection whose updates say which data rows were added (``diff > 0``) or
removed (``diff < 0``) at which time, so that the collection accumulated at any
time ``s`` is the table as of ``s``:

* :func:`from_change_feed` -- Delta Lake's change data feed (and Iceberg's
  changelog view): one row per changed row with ``_change_type``;
  ``insert`` / ``update_postimage`` add the row (+1), ``delete`` /
  ``update_preimage`` remove it (-1), at the commit version (or timestamp).
* :func:`from_cdc` -- Debezium-style envelopes ``before``, ``after``, ``op``,
  ``ts_ms``: ``c``/``r`` add ``after``; ``u`` removes ``before`` and adds ``after``;
  ``d`` removes ``before``.
* :func:`from_intervals` -- slowly changing dimension (type 2) tables: a row valid
  on ``[valid_from, valid_to)`` is added at ``valid_from`` and removed at
  ``valid_to`` (never, when ``valid_to`` is null).

and :func:`dd_to_intervals` writes a collection with non-negative multiplicities
back as such a table: one row per maximal time interval over which a data row's
multiplicity is constant and positive.  ``from_intervals(dd_to_intervals(x))``
is ``x`` consolidated.

Every result is consolidated (no two updates share ``(data, time)``, no zero
``diff``).  Shape problems (missing or mistyped columns, names that clash with
``time``/``diff``) raise before any Spark job; problems only the data shows (an
unknown change type, an update without its before image, an interval that ends
before it starts, a negative multiplicity) fail the job with a message naming
:class:`~spark_differential.errors.ChangeDataError` or
:class:`~spark_differential.errors.NegativeMultiplicityError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import (
    DIFF,
    INTEGRAL_TYPES,
    TIME,
    checked,
    inspect,
    null_guard,
    qcol,
    qcols,
)
from spark_differential.core.lattice import RESERVED_PREFIX, TimeType, Total, from_spark_type
from spark_differential.errors import (
    DiffTypeError,
    MissingColumnError,
    ReservedNameError,
    SchemaMismatchError,
    TimeTypeError,
    TimeTypeMismatchError,
)
from spark_differential.io.arrow import is_arrow, to_spark
from spark_differential.trace.spark import consolidated_collection

#: the metadata columns of Delta's change data feed and Iceberg's changelog view
FEED_METADATA = ("_change_type", "_commit_version", "_commit_timestamp", "_change_ordinal", "_commit_snapshot_id")
_ADDS = ("insert", "update_postimage", "update_after")
_REMOVES = ("delete", "update_preimage", "update_before")


def _require_df(df: object, op: str) -> DataFrame:
    if not isinstance(df, DataFrame):
        raise TypeError(f"{op}: expected a pyspark DataFrame, got {type(df).__name__}")
    return df


def _column_type(df: DataFrame, path: str, op: str, what: str) -> T.DataType:
    """The type of a top-level column or of a dotted path into structs (``source.ts_ms``)."""
    dtype: T.DataType = df.schema
    for part in path.split(".") if path not in df.columns else [path]:
        if not isinstance(dtype, T.StructType) or part not in dtype.fieldNames():
            raise MissingColumnError(f"{op}: no column `{path}` to use as {what} (columns: {df.columns})")
        dtype = dtype[part].dataType
    return dtype


def _path_col(df: DataFrame, path: str) -> Column:
    """The column named exactly ``path``, else the dotted path into structs (``source.ts_ms``)."""
    return qcol(path) if path in df.columns else F.col(path)


def _time_type(dtype: T.DataType, col: str, op: str, *, total: bool = False) -> TimeType:
    try:
        ttype = from_spark_type(dtype, where=col, allow_internal=False)
    except TimeTypeError as e:
        raise TimeTypeError(f"{op}: {e}") from None
    if total and not isinstance(ttype, Total):
        raise TimeTypeError(
            f"{op}: `{col}` has type {ttype.describe()}; it must be totally ordered "
            "(an integral type, date or timestamp)"
        )
    return ttype


def _check_data_names(names: Sequence[str], op: str) -> None:
    for c in names:
        if c in (TIME, DIFF) or c.startswith(RESERVED_PREFIX):
            raise ReservedNameError(
                f"{op}: the data column `{c}` clashes with the collection's `time`/`diff` columns or the reserved "
                f"prefix {RESERVED_PREFIX!r}; rename it first (e.g. df.withColumnRenamed('{c}', '{c}_value'))"
            )


def _fail(op: str, cls: str, *parts: Column | str) -> Column:
    """A Column that fails the task with ``<cls>: <op>: <parts...>`` (read back by :func:`spark_differential.unwrap`)."""
    pieces = [F.lit(f"{cls}: {op}: ")]
    pieces += [F.lit(p) if isinstance(p, str) else F.coalesce(p.cast("string"), F.lit("null")) for p in parts]
    return F.raise_error(F.concat(*pieces))


def _guarded_time(col: Column, ttype: TimeType) -> Column:
    return null_guard(col, ttype.encode_column(col), "time")


def from_change_feed(df: DataFrame | Any, time: str = "_commit_version") -> DataFrame:
    """A Delta change data feed (or Iceberg changelog) to a collection.

    Each row of ``df`` is one changed row of the table, with the table's columns and
    the feed's metadata: ``_change_type`` (``insert``, ``delete``,
    ``update_preimage``, ``update_postimage``; Iceberg's ``UPDATE_BEFORE`` /
    ``UPDATE_AFTER`` are read as the pre-/post-images, case does not matter),
    ``_commit_version`` and ``_commit_timestamp``.  Inserts and post-images add the
    row (``diff = +1``), deletes and pre-images remove it (``diff = -1``), at the
    ``time`` column: ``_commit_version`` (the default) or ``_commit_timestamp``
    (any column of a supported time type may be named; for Iceberg's changelog
    view, ``_change_ordinal``).  The metadata columns
    present (``_change_type``, ``_commit_version``, ``_commit_timestamp``,
    ``_change_ordinal``, ``_commit_snapshot_id``) and the ``time`` column are
    dropped from the data.  A feed read from the table's first version accumulates
    at every version to the table at that version; Iceberg's copy-on-write
    "carry-over" rows (a row deleted and re-inserted by one commit) cancel out.

    Read a feed with ``spark.read.format("delta").option("readChangeFeed", "true")
    .option("startingVersion", 0).table(name)``, or without Spark's Delta connector
    through delta-rs: ``sd.from_change_feed(DeltaTable(path).load_cdf(starting_version=0))``
    (Arrow data, any Arrow stream, becomes a DataFrame of the active session, with the
    types Spark takes: :mod:`spark_differential.io.arrow`).  An unknown or null
    ``_change_type`` fails the job with :class:`ChangeDataError`.

    >>> import spark_differential as sd
    >>> from pyspark.sql import functions as F
    >>> spark = sd.session()
    >>> feed = spark.createDataFrame(
    ...     [("ann", 5, "insert", 1, "2024-01-01 00:00:00"), ("ann", 5, "update_preimage", 2, "2024-01-02 00:00:00"),
    ...      ("ann", 7, "update_postimage", 2, "2024-01-02 00:00:00"), ("bob", 3, "insert", 2, "2024-01-02 00:00:00")],
    ...     "who string, pts long, _change_type string, _commit_version long, _commit_timestamp string",
    ... ).withColumn("_commit_timestamp", F.to_timestamp("_commit_timestamp"))
    >>> sd.from_change_feed(feed).orderBy("time", "who", "diff").show()
    +---+---+----+----+
    |who|pts|time|diff|
    +---+---+----+----+
    |ann|  5|   1|   1|
    |ann|  5|   2|  -1|
    |ann|  7|   2|   1|
    |bob|  3|   2|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    op = "from_change_feed"
    df = _require_df(to_spark(df, op) if is_arrow(df) else df, op)
    if "_change_type" not in df.columns:
        raise MissingColumnError(
            f"{op}: no `_change_type` column (columns: {df.columns}); read the table's change feed, e.g. "
            "spark.read.format('delta').option('readChangeFeed', 'true').option('startingVersion', 0).table(name)"
        )
    if not isinstance(df.schema["_change_type"].dataType, T.StringType):
        raise SchemaMismatchError(
            f"{op}: `_change_type` has type {df.schema['_change_type'].dataType.simpleString()}; it must be a string "
            "(insert, delete, update_preimage or update_postimage)"
        )
    if time not in df.columns:
        raise MissingColumnError(
            f"{op}: no column `{time}` to use as the time (columns: {df.columns}); name the commit version or "
            "commit timestamp column with time=..."
        )
    ttype = _time_type(df.schema[time].dataType, time, op)
    data = [c for c in df.columns if c not in FEED_METADATA and c != time]
    _check_data_names(data, op)
    kind = F.lower(F.col("_change_type"))
    sign = (
        F.when(kind.isin(*_ADDS), F.lit(1))
        .when(kind.isin(*_REMOVES), F.lit(-1))
        .otherwise(
            _fail(
                op, "ChangeDataError", "unknown _change_type '", F.col("_change_type"),
                "'; expected insert, delete, update_preimage or update_postimage",
            )
        )
    )
    rows = df.select(*qcols(data), _guarded_time(_path_col(df, time), ttype).alias(TIME), sign.cast("long").alias(DIFF))
    return consolidated_collection(rows, data)


def from_cdc(
    df: DataFrame,
    time: str = "ts_ms",
    *,
    op: str = "op",
    before: str = "before",
    after: str = "after",
) -> DataFrame:
    """Debezium-style change events (``before``, ``after``, ``op``, ``ts_ms``) to a collection.

    ``before`` and ``after`` are struct columns with the same fields (the row before
    and after the change; their fields become the data columns); ``op`` is ``c``
    (create), ``r`` (read: a snapshot row), ``u`` (update) or ``d`` (delete);
    ``time`` names the time column (``ts_ms`` by default; a dotted path such as
    ``source.ts_ms`` reads a struct field).  ``c`` and ``r`` add ``after``, ``u``
    removes ``before`` and adds ``after``, ``d`` removes ``before``.  Every other
    column (``source``, ``transaction``…) is dropped.  Events serialised with a
    ``payload`` wrapper are unwrapped first: ``df.select("payload.*")``.

    The job fails with :class:`ChangeDataError` on an ``op`` outside c/r/u/d (also
    a null ``op``: filter out Kafka tombstones first, ``df.where("op IS NOT NULL")``)
    and on an update or delete without a ``before`` image (PostgreSQL sends one only
    with ``REPLICA IDENTITY FULL``; without it, key the ``after`` rows with
    :func:`~spark_differential.from_upserts` instead).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> events = spark.createDataFrame(
    ...     [(None, ("ann", 5), "c", 10), (("ann", 5), ("ann", 7), "u", 20), (("ann", 7), None, "d", 30)],
    ...     "before struct<who: string, pts: long>, after struct<who: string, pts: long>, op string, ts_ms long",
    ... )
    >>> sd.from_cdc(events).orderBy("time", "diff").show()
    +---+---+----+----+
    |who|pts|time|diff|
    +---+---+----+----+
    |ann|  5|  10|   1|
    |ann|  5|  20|  -1|
    |ann|  7|  20|   1|
    |ann|  7|  30|  -1|
    +---+---+----+----+
    <BLANKLINE>
    """
    fn = "from_cdc"
    df = _require_df(df, fn)
    for c, what in ((op, "the operation (c/r/u/d)"), (before, "the before image"), (after, "the after image")):
        if c not in df.columns:
            raise MissingColumnError(
                f"{fn}: no `{c}` column for {what} (columns: {df.columns}); unwrap a `payload` struct first "
                "(df.select('payload.*')) or name the columns with op=, before=, after="
            )
    if not isinstance(df.schema[op].dataType, T.StringType):
        raise SchemaMismatchError(f"{fn}: `{op}` has type {df.schema[op].dataType.simpleString()}; it must be a string")
    b_t, a_t = df.schema[before].dataType, df.schema[after].dataType
    for c, dt in ((before, b_t), (after, a_t)):
        if not isinstance(dt, T.StructType):
            raise SchemaMismatchError(
                f"{fn}: `{c}` has type {dt.simpleString()}; it must be a struct of the table's columns"
            )
    assert isinstance(b_t, T.StructType) and isinstance(a_t, T.StructType)
    if b_t.simpleString() != a_t.simpleString():
        raise SchemaMismatchError(
            f"{fn}: `{before}` ({b_t.simpleString()}) and `{after}` ({a_t.simpleString()}) must have the same "
            "fields and types"
        )
    fields = a_t.fieldNames()
    if not fields:
        raise SchemaMismatchError(f"{fn}: `{after}` has no fields, so the changes carry no data")
    _check_data_names(fields, fn)
    ttype = _time_type(_column_type(df, time, fn, "the time"), time, fn)

    def image(name: str, sign: int) -> Column:
        row = F.struct(*[_path_col(df, name).getField(f).alias(f) for f in fields])
        return F.struct(row.alias("v"), F.lit(sign).cast("long").alias("d"))

    def missing(col: str, which: str) -> Column:
        hint = (
            "; PostgreSQL sends before images only with REPLICA IDENTITY FULL, otherwise read the after images "
            "with sd.from_upserts" if col == before else ""
        )
        return _fail(fn, "ChangeDataError", f"an '{which}' event has a null `{col}`{hint}")

    o = _path_col(df, op)
    b_null, a_null = _path_col(df, before).isNull(), _path_col(df, after).isNull()
    changes = (
        F.when(o.isin("c", "r"), F.when(a_null, missing(after, "c/r")).otherwise(F.array(image(after, 1))))
        .when(
            o == "u",
            F.when(b_null, missing(before, "u"))
            .when(a_null, missing(after, "u"))
            .otherwise(F.array(image(before, -1), image(after, 1))),
        )
        .when(o == "d", F.when(b_null, missing(before, "d")).otherwise(F.array(image(before, -1))))
        .otherwise(
            _fail(
                fn, "ChangeDataError", f"unknown `{op}` value '", o,
                "'; expected c, r, u or d (filter out tombstones and truncate events first)",
            )
        )
    )
    steps = df.select(F.explode(changes).alias("_sd_c"), _guarded_time(_path_col(df, time), ttype).alias(TIME))
    rows = steps.select(*[F.col("_sd_c.v").getField(f).alias(f) for f in fields], TIME, F.col("_sd_c.d").alias(DIFF))
    return consolidated_collection(rows, fields)


def from_intervals(
    df: DataFrame,
    valid_from: str = "valid_from",
    valid_to: str = "valid_to",
    multiplicity: str | None = None,
) -> DataFrame:
    """A slowly changing dimension (type 2) table to a collection.

    Each row is valid on ``[valid_from, valid_to)``: it is added at ``valid_from``
    and removed at ``valid_to``; a null ``valid_to`` is an open interval (the row
    is still valid).  The two columns must have the same totally ordered type (an
    integral type, date or timestamp); the result's ``time`` has that type.  With
    ``multiplicity`` naming an integral column, a row stands for that many copies
    (default 1).  Every other column is data.  A row with ``valid_to <
    valid_from`` fails the job with :class:`ChangeDataError`; ``valid_to ==
    valid_from`` is an empty interval and adds nothing.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> dim = spark.createDataFrame([("ann", "Oslo", 1, 4), ("ann", "Rome", 4, None)],
    ...                             "who string, city string, valid_from long, valid_to long")
    >>> sd.from_intervals(dim).orderBy("time", "diff").show()
    +---+----+----+----+
    |who|city|time|diff|
    +---+----+----+----+
    |ann|Oslo|   1|   1|
    |ann|Oslo|   4|  -1|
    |ann|Rome|   4|   1|
    +---+----+----+----+
    <BLANKLINE>
    """
    op = "from_intervals"
    df = _require_df(df, op)
    for c, what in ((valid_from, "the interval start"), (valid_to, "the interval end")):
        if c not in df.columns:
            raise MissingColumnError(
                f"{op}: no column `{c}` for {what} (columns: {df.columns}); name it with "
                f"{'valid_from' if c == valid_from else 'valid_to'}=..."
            )
    if valid_from == valid_to:
        raise SchemaMismatchError(f"{op}: valid_from and valid_to must be different columns")
    ttype = _time_type(df.schema[valid_from].dataType, valid_from, op, total=True)
    from_t, to_t = df.schema[valid_from].dataType, df.schema[valid_to].dataType
    if from_t != to_t:
        raise TimeTypeMismatchError(
            f"{op}: `{valid_from}` has type {from_t.simpleString()} but `{valid_to}` has type {to_t.simpleString()}; "
            f"cast one to the other (e.g. F.col('{valid_to}').cast('{from_t.simpleString()}'))"
        )
    if multiplicity is not None:
        if multiplicity not in df.columns:
            raise MissingColumnError(f"{op}: no column `{multiplicity}` for the multiplicity (columns: {df.columns})")
        mt = df.schema[multiplicity].dataType
        if not isinstance(mt, INTEGRAL_TYPES):
            raise DiffTypeError(
                f"{op}: the multiplicity `{multiplicity}` has type {mt.simpleString()}; it must be integral "
                f"(cast it, e.g. F.col('{multiplicity}').cast('long'))"
            )
    data = [c for c in df.columns if c not in (valid_from, valid_to, multiplicity)]
    _check_data_names(data, op)
    start, end = qcol(valid_from), qcol(valid_to)
    if multiplicity is None:
        m = F.lit(1).cast("long")
    else:
        mcol = qcol(multiplicity)
        m = null_guard(mcol.cast("long"), [mcol], "multiplicity")
    add = F.struct(_guarded_time(start, ttype).alias("t"), m.alias("d"))
    remove = F.struct(end.alias("t"), (-m).alias("d"))
    steps = (
        F.when(end.isNull(), F.array(add))
        .when(end < start, _fail(op, "ChangeDataError", "an interval ends (", end, ") before it starts (", start, ")"))
        .otherwise(F.array(add, remove))
    )
    rows = df.select(*qcols(data), F.explode(steps).alias("_sd_s")).select(
        *qcols(data), F.col("_sd_s.t").alias(TIME), F.col("_sd_s.d").alias(DIFF)
    )
    return consolidated_collection(rows, data)


def dd_to_intervals(
    df: DataFrame,
    valid_from: str = "valid_from",
    valid_to: str = "valid_to",
    multiplicity: str = "multiplicity",
) -> DataFrame:
    """A collection as a slowly changing dimension (type 2) table: the inverse of :func:`from_intervals`.

    For each data row, every maximal interval of time over which its accumulated
    multiplicity is constant and positive becomes one output row: the data columns,
    ``valid_from`` (where the interval starts), ``valid_to`` (where it ends, null
    while it is still open) and ``multiplicity`` (a bigint, ``> 0``).  Consecutive
    intervals of one data row have different multiplicities.  The time must be
    totally ordered (an integral type, date or timestamp).  A multiplicity that
    accumulates to a negative count fails the job with
    :class:`NegativeMultiplicityError`, naming the row and time.  Runs as a Spark
    aggregation and a window over time per data row (one shuffle).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 1), ("a", 3, 1), ("a", 6, -2), ("b", 2, 1)],
    ...                           "x string, time long, diff long")
    >>> c.dd_to_intervals().orderBy("x", "valid_from").show()
    +---+----------+--------+------------+
    |  x|valid_from|valid_to|multiplicity|
    +---+----------+--------+------------+
    |  a|         1|       3|           1|
    |  a|         3|       6|           2|
    |  b|         2|    NULL|           1|
    +---+----------+--------+------------+
    <BLANKLINE>
    """
    op = "dd_to_intervals"
    cs = inspect(df, op=op)
    if not isinstance(cs.ttype, Total):
        raise TimeTypeError(
            f"{op}: the time type is {cs.ttype.describe()}; intervals need a totally ordered time "
            "(an integral type, date or timestamp)"
        )
    outs = [valid_from, valid_to, multiplicity]
    if len(set(outs)) != 3:
        raise SchemaMismatchError(f"{op}: valid_from, valid_to and multiplicity must be three different names")
    clash = [c for c in outs if c in cs.data_cols]
    if clash:
        raise SchemaMismatchError(
            f"{op}: output column(s) {clash} clash with data columns; pass other names "
            "(valid_from=..., valid_to=..., multiplicity=...)"
        )
    data = list(cs.data_cols)
    per_time = consolidated_collection(checked(df, cs, op), data)
    w = Window.partitionBy(*qcols(data)).orderBy(TIME)
    running = F.sum(DIFF).over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    segments = per_time.select(*qcols(data), TIME, running.alias("_sd_m"), F.lead(TIME).over(w).alias("_sd_next"))
    row = F.to_json(F.struct(*qcols(data))) if data else F.lit("()")
    mult = F.when(
        F.col("_sd_m") < 0,
        _fail(
            op, "NegativeMultiplicityError", "row ", row, " has multiplicity ", F.col("_sd_m"), " from time ",
            F.col(TIME), "; intervals need non-negative counts (dd_distinct() or dd_threshold() first if that is meant)",
        ),
    ).otherwise(F.col("_sd_m"))
    return segments.where(F.col("_sd_m") != 0).select(
        *qcols(data),
        F.col(TIME).alias(valid_from),
        F.col("_sd_next").alias(valid_to),
        mult.cast("long").alias(multiplicity),
    )


__all__ = ["FEED_METADATA", "dd_to_intervals", "from_cdc", "from_change_feed", "from_intervals"]
