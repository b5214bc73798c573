"""Calculus on collections (seed 003): ``differentiate``, ``integrate``, ``dd_delay``,
and the as-of join built from them, ``dd_asof_join``.

On ``(data, time, diff)`` over a time type ``T``:

* ``differentiate`` moves to ``AltNeu(T)``: each update ``(d, t, r)`` becomes
  ``(d, alt(t), r)`` and ``(d, neu(t), -r)``.  The result accumulates, at ``alt(t)``,
  to exactly the changes that happened at ``t``, and to nothing at any other time: a
  stream of blips.
* ``integrate`` keeps the ``alt`` updates and returns to ``T``.
  ``integrate(differentiate(x)) == x`` exactly (no "up to a constant": the neu
  retractions are dropped, not summed).
* Between the two, an operator sees each change only at its own moment.  Joining
  the blips of ``orders`` with a changing ``prices`` collection gives each order the
  price accumulated at the order's time, never revised by later price changes: an
  **as-of join**.

Homework from the seed (what a later retraction of an order does): the retraction
is itself a blip at its own time, so it is joined with the price *at the time of
the retraction*, not the price the order was billed at.  If prices moved in
between, the accumulated result keeps ``+ (order, old price)`` and gains
``- (order, new price)``: a negative row that never existed.  The as-of join is
therefore not incremental view maintenance of anything; it is a function of the
*history* of changes.  Retract orders at the moment they were placed (a correction
of history) or treat retractions as new events (a refund) deliberately.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import (
    DIFF,
    RESERVED_PREFIX,
    TIME,
    CollectionSchema,
    as_columns,
    checked,
    guard_expr,
    guarded_sql,
    inspect,
    integral_sql,
    may_be_null,
    null_guard_sql,
    qcol,
    qcols,
    quoted,
    require_columns,
)
from spark_differential.core.history import note as _note_history
from spark_differential.core.lattice import ALTNEU_NEU, ALTNEU_TIME, AltNeu, Loop, Total
from spark_differential.core.scope import unify
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.distributed import run_kernel
from spark_differential.engine.kernel_form import Input, finish, kernel_fields, key_casts, time_fields
from spark_differential.errors import SchemaMismatchError, TimeTypeError, TimeTypeMismatchError
from spark_differential.io.tables import UpsertLog, from_upserts, upsert_log
from spark_differential.kernels import asof as kasof
from spark_differential.kernels import join as kjoin
from spark_differential.kernels.common import keys, names
from spark_differential.operators.join import dd_antijoin, dd_join
from spark_differential.operators.reduce import dd_distinct


def _altneu(col: object, neu: bool) -> object:
    return F.struct(F.col(TIME).alias(ALTNEU_TIME) if col is None else col, F.lit(neu).alias(ALTNEU_NEU))


def differentiate(df: DataFrame) -> DataFrame:
    """The changes of a collection, each present only at the moment it happens.

    Returns a collection over ``AltNeu(T)`` (time ``struct<time: T, neu: boolean>``)
    with ``(d, alt(t), r)`` and ``(d, neu(t), -r)`` for every update ``(d, t, r)``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("bacon", 5, 1)], "item string, time long, diff long")
    >>> c.differentiate().orderBy("diff").show()
    +-----+----------+----+
    | item|      time|diff|
    +-----+----------+----+
    |bacon| {5, true}|  -1|
    |bacon|{5, false}|   1|
    +-----+----------+----+
    <BLANKLINE>
    """
    op = "differentiate"
    _note_history(op)  # incremental views keep the inputs of this query uncompacted
    cs = inspect(df, op=op)
    if isinstance(cs.ttype, Loop):
        raise TimeTypeError(f"{op}: differentiate inside a dd_iterate body is not supported; differentiate outside the loop")
    data = list(cs.data_cols)
    if integral_sql(cs.ttype) is not None:  # SQL text: Columns cost py4j round trips each
        schema = df.schema
        # one projection generating both rows of each update: the input is read once (a union of
        # two projections would compute it twice), and one selectExpr is one plan to analyse
        t, d = guard_expr(schema, TIME, op), f"CAST({guard_expr(schema, DIFF, op)} AS BIGINT)"

        def row(neu: bool, diff: str) -> str:
            return (f"named_struct('{TIME}', named_struct('{ALTNEU_TIME}', {t}, '{ALTNEU_NEU}', {str(neu).lower()}), "
                    f"'{DIFF}', {diff})")

        return df.selectExpr(*map(quoted, data), f"inline(array({row(False, d)}, {row(True, f'(-{d})')}))")
    df = checked(df, cs, op)
    alt = df.select(*qcols(data), _altneu(None, False).alias(TIME), F.col(DIFF).cast("long").alias(DIFF))
    neu = df.select(*qcols(data), _altneu(None, True).alias(TIME), (-F.col(DIFF).cast("long")).alias(DIFF))
    return alt.unionByName(neu)


def integrate(df: DataFrame) -> DataFrame:
    """Collect instantaneous changes back into a collection: keep ``alt`` updates, drop ``neu``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("bacon", 5, 1)], "item string, time long, diff long")
    >>> c.differentiate().integrate().show()
    +-----+----+----+
    | item|time|diff|
    +-----+----+----+
    |bacon|   5|   1|
    +-----+----+----+
    <BLANKLINE>
    """
    op = "integrate"
    cs = inspect(df, op=op)
    if not isinstance(cs.ttype, AltNeu):
        raise TimeTypeError(
            f"{op}: the input's time type is {cs.ttype.describe()}, not a differentiated (alt/neu) time; "
            "integrate undoes differentiate()"
        )
    if integral_sql(cs.ttype.inner) is not None:  # SQL text: Columns cost py4j round trips each
        schema = df.schema
        q = quoted(TIME)
        t = q
        if may_be_null(schema[TIME].dataType, schema[TIME].nullable):
            t = null_guard_sql(q, [f"{q}.{quoted(ALTNEU_TIME)}", f"{q}.{quoted(ALTNEU_NEU)}"], "time", op)
        d = guarded_sql(schema, DIFF, op)
        kept = df if t == q and d == quoted(DIFF) else df.selectExpr(*map(quoted, cs.data_cols), f"{t} AS {q}", d)
        return kept.where(f"NOT {q}.{quoted(ALTNEU_NEU)}").selectExpr(
            *map(quoted, cs.data_cols), f"{q}.{quoted(ALTNEU_TIME)} AS {q}", quoted(DIFF))
    t = F.col(TIME)
    df = checked(df, cs, op)
    return df.where(~t.getField(ALTNEU_NEU)).select(*qcols(cs.data_cols), t.getField(ALTNEU_TIME).alias(TIME), DIFF)


def dd_delay(df: DataFrame) -> DataFrame:
    """Move every update to the ``neu`` moment of its time.

    An ordinary collection enters the AltNeu time at ``neu(t)`` instead of
    ``alt(t)``; a differentiated one has ``neu`` set.  A delayed collection is
    invisible to changes at the same time (seed 003's "nudging").

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("e", 1, 1)], "x string, time long, diff long")
    >>> c.dd_delay().show()
    +---+---------+----+
    |  x|     time|diff|
    +---+---------+----+
    |  e|{1, true}|   1|
    +---+---------+----+
    <BLANKLINE>
    """
    op = "dd_delay"
    _note_history(op)  # incremental views keep the inputs of this query uncompacted
    cs = inspect(df, op=op)
    if isinstance(cs.ttype, Loop):
        raise TimeTypeError(f"{op}: dd_delay inside a dd_iterate body is not supported")
    if isinstance(cs.ttype, AltNeu):
        tcol = F.struct(F.col(TIME).getField(ALTNEU_TIME).alias(ALTNEU_TIME), F.lit(True).alias(ALTNEU_NEU))
    else:
        tcol = _altneu(None, True)
    df = checked(df, cs, op)
    return df.select(*qcols(cs.data_cols), tcol.alias(TIME), DIFF)


def dd_asof_join(
    orders: DataFrame,
    prices: DataFrame,
    on: str | Sequence[str] | None,
    how: str = "inner",
    strict: bool = False,
    method: str = "auto",
) -> DataFrame:
    """As-of join: each update of ``orders`` meets ``prices`` as accumulated at its time.

    Same rows as ``orders.differentiate().dd_join(prices, on).integrate()`` (with
    ``strict=True``: ``prices.dd_delay()``, so only changes strictly before the
    order count), computed as one lookup per order instead of through blips.
    ``how="left"`` keeps orders that find no price row for their key at their time,
    with nulls for the price columns.  Output columns: keys, the orders' other
    columns, the prices' other columns; time is the order's time.  Build ``prices``
    from a price-history table with :func:`spark_differential.from_upserts`.

    ``on=[]`` (or ``None``): no equality keys, as SQL's ``ASOF JOIN ... ON o.ts >= p.ts``.
    ``prices`` is then one global timeline: every order meets the whole of ``prices``
    as accumulated at its time (from ``sd.from_upserts(history, key=[])``: the log
    rows at the latest log time at or before the order).  Results are exact, but
    all rows of both sides land on a single key and so in **one task**: that task
    holds the whole of ``prices``' history (and sorts it with the orders), whatever
    the cluster's size.  Give a key wherever the data has one.

    ``method``:

    * ``"upserts"``: when ``prices`` is exactly what ``sd.from_upserts`` returned
      (and ``on`` names its key columns), each order looks up its key's latest log
      row at or before its time in the log itself; the collection's retractions are
      never built.  One shuffle of each side.
    * ``"kernel"``: any ``prices`` collection; each order meets ``prices``
      accumulated at its time (a stabbing lookup in the join kernel).
    * ``"calculus"``: the seed's differentiate/join/integrate form (for checking).
    * ``"auto"`` (default): ``"upserts"`` where it applies, else ``"kernel"``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> orders = spark.createDataFrame([("bacon", "ann", 3, 1)], "item string, who string, time long, diff long")
    >>> history = spark.createDataFrame([("bacon", 2, 1), ("bacon", 4, 5)], "item string, price int, ts long")
    >>> prices = sd.from_upserts(history, key="item", time="ts")
    >>> orders.dd_asof_join(prices, on="item").show()
    +-----+---+-----+----+----+
    | item|who|price|time|diff|
    +-----+---+-----+----+----+
    |bacon|ann|    2|   3|   1|
    +-----+---+-----+----+----+
    <BLANKLINE>

    Without keys, against one global timeline of exchange rates:

    >>> rates = sd.from_upserts(spark.createDataFrame([(1.1, 1), (1.2, 4)], "rate double, ts long"), key=[], time="ts")
    >>> orders.dd_asof_join(rates, on=[]).show()
    +-----+---+----+----+----+
    | item|who|rate|time|diff|
    +-----+---+----+----+----+
    |bacon|ann| 1.1|   3|   1|
    +-----+---+----+----+----+
    <BLANKLINE>
    """
    op = "dd_asof_join"
    _note_history(op)  # incremental views keep the inputs of this query uncompacted
    if how not in ("inner", "left"):
        raise ValueError(f"{op}: how must be 'inner' or 'left', got {how!r}")
    if method not in ("auto", "kernel", "calculus", "upserts"):
        raise ValueError(f"{op}: method must be 'auto', 'upserts', 'kernel' or 'calculus', got {method!r}")
    keys_ = as_columns(on, op=op, what="`on`")
    a = inspect(orders, op=op, side="orders")
    b = inspect(prices, op=op, side="prices")
    require_columns(a, keys_, op=op, side="orders", what="key columns")
    require_columns(b, keys_, op=op, side="prices", what="key columns")
    base_a = a.ttype.inner if isinstance(a.ttype, Loop) else a.ttype
    base_b = b.ttype.inner if isinstance(b.ttype, Loop) else b.ttype
    if base_a != base_b:
        raise TimeTypeMismatchError(
            f"{op}: orders have time type {a.ttype.describe()} but prices have {b.ttype.describe()}; "
            "cast one `time` column to match the other"
        )
    a_data = [c for c in a.data_cols if c not in keys_]
    b_data = [c for c in b.data_cols if c not in keys_]
    clash = sorted(set(a_data) & set(b_data))
    if clash:
        besides = "besides the keys" if keys_ else "(`on` names no key columns)"
        raise SchemaMismatchError(f"{op}: both inputs have data columns {clash} {besides}; rename one side's")
    if method == "calculus":
        if not keys_:  # dd_join needs a key: one constant key is the single global timeline
            name = _ONE_KEY
            while name in orders.columns or name in prices.columns:
                name += "_"
            one = F.lit(0).alias(name)
            out = _asof_calculus(
                orders.select(one, *orders.columns), prices.select(one, *prices.columns), [name], how, strict, a_data, b_data
            )
            return out.drop(name)
        return _asof_calculus(orders, prices, keys_, how, strict, a_data, b_data)
    if method in ("auto", "upserts"):
        log, why_not = _usable_log(prices, a, b, keys_)
        if log is not None:
            return _asof_upserts(orders, a, log, keys_, a_data, how, strict)
        if method == "upserts":
            raise SchemaMismatchError(f"{op}: method='upserts' cannot be used here: {why_not}; use method='kernel'")
    target, kernel_t, entries = unify(op, [a, b], ["orders", "prices"])
    if how == "left" and isinstance(target, Loop):
        raise TimeTypeError(f"{op}: how='left' is not supported inside a dd_iterate body")
    ca, cb = key_casts(op, a, b, keys_)
    cond = _keys_present(keys_)
    left_df = orders if how == "left" else orders.where(cond)
    ia = Input(left_df, a, keys_, a_data, "_a", kernel_t, entries[0].time_col, key_casts=ca)
    ib = Input(prices.where(cond), b, keys_, b_data, "_b", kernel_t, entries[1].time_col, key_casts=cb)
    params = kjoin.JoinParams(len(keys_), len(a_data), len(b_data), kernel_t, "asof", strict, how == "left")
    out_fields = kernel_fields(ia) + kernel_fields(ib, with_keys=False)
    cols = list(zip(keys(len(keys_)), keys_)) + list(zip(names("_a", len(a_data)), a_data))
    cols += list(zip(names("_b", len(b_data)), b_data))
    return execute(StatefulCall.of(op, kjoin.join, params, [ia, ib], entries, out_fields, cols, kernel_t))


def asof_join_history(
    orders: DataFrame,
    history: DataFrame,
    key: Sequence[str],
    time: str,
    how: str = "inner",
    strict: bool = False,
) -> DataFrame:
    """``dd_asof_join(orders, sd.from_upserts(history, key, time), on=key, how=how,
    strict=strict)`` for a caller that holds the upsert log ``history`` itself (``sd.sql``'s
    ``ASOF JOIN``): the same rows, read from the log as ``method="upserts"`` does, without
    building the collection ``from_upserts`` returns, whose retractions nothing here
    reads (about 800 of the 832 py4j round trips of planning an ``sd.sql`` as-of join).

    Where the log cannot be read directly (a time that is not totally ordered, or other
    than the orders'), this is exactly the ``from_upserts`` + ``dd_asof_join`` call,
    errors included."""
    op = "dd_asof_join"
    keys_ = list(key)
    data = [c for c in history.columns if c != time]
    a = inspect(orders, op=op, side="orders")
    htype = history.schema[time].dataType if time in history.columns else None
    usable = (
        how in ("inner", "left")
        and all(c in data for c in keys_)
        and all(c in a.data_cols for c in keys_)
        and isinstance(a.ttype, Total)
        and htype is not None
        and a.ttype.spark_type() == htype
        and not any(c in (TIME, DIFF) or c.startswith(RESERVED_PREFIX) for c in data)
    )
    if not usable:
        return dd_asof_join(orders, from_upserts(history, key=keys_, time=time), on=keys_, how=how, strict=strict)
    _note_history(op)  # incremental views keep the inputs of this query uncompacted
    values = [c for c in data if c not in keys_]
    a_data = [c for c in a.data_cols if c not in keys_]
    clash = sorted(set(a_data) & set(values))
    if clash:
        besides = "besides the keys" if keys_ else "(`on` names no key columns)"
        raise SchemaMismatchError(f"{op}: both inputs have data columns {clash} {besides}; rename one side's")
    # the log exactly as from_upserts attaches it to its collection
    rows = history.select(*qcols(data), qcol(time).alias(TIME), F.lit(1).cast("long").alias(DIFF))
    log = UpsertLog(rows, tuple(keys_), tuple(values), None)
    return _asof_upserts(orders, a, log, keys_, a_data, how, strict)


_ONE_KEY = "sdasof_all"  # the one key of a keyless as-of join in its calculus form


def _keys_present(keys_: list[str]) -> Column:
    """Every key column is non-null (a null key matches nothing); true with no keys."""
    if not keys_:
        return F.lit(True)
    cond = qcol(keys_[0]).isNotNull()
    for k in keys_[1:]:
        cond = cond & qcol(k).isNotNull()
    return cond


def _usable_log(
    prices: DataFrame, a: CollectionSchema, b: CollectionSchema, keys_: list[str]
) -> tuple[UpsertLog | None, str]:
    """The upsert log behind ``prices`` if the as-of join can read it directly, else why not."""
    log = upsert_log(prices)
    if log is None:
        return None, "`prices` is not a DataFrame returned by sd.from_upserts (or was transformed since)"
    if set(keys_) != set(log.keys):
        return None, f"`on` {keys_} is not the upsert key {list(log.keys)}"
    if a.ttype != b.ttype or not isinstance(a.ttype, Total):
        return None, f"orders have time type {a.ttype.describe()}, not the log's {b.ttype.describe()}"
    return log, ""


def _asof_upserts(
    orders: DataFrame,
    a: CollectionSchema,
    log: UpsertLog,
    keys_: list[str],
    a_data: list[str],
    how: str,
    strict: bool,
) -> DataFrame:
    """``dd_asof_join`` straight from the upsert log: one lookup per order, no retractions."""
    op = "dd_asof_join"
    h = inspect(log.rows, op=op, side="prices")
    values = list(log.values)
    h_data = values + ([log.deleted] if log.deleted else [])
    ca, cb = key_casts(op, a, h, keys_)
    cond = _keys_present(keys_)
    ia = Input(orders if how == "left" else orders.where(cond), a, keys_, a_data, "_a", key_casts=ca)
    ib = Input(log.rows.where(cond), h, keys_, h_data, "_b", key_casts=cb)
    params = kasof.UpsertAsofParams(len(keys_), len(a_data), len(values), strict, how == "left", log.deleted is not None)
    out_fields = kernel_fields(ia) + kernel_fields(ib, with_keys=False)[: len(values)]
    cols = list(zip(keys(len(keys_)), keys_)) + list(zip(names("_a", len(a_data)), a_data))
    cols += list(zip(names("_b", len(values)), values))
    out = run_kernel(kasof.asof_upserts, params, [ia, ib], T.StructType([*out_fields, *time_fields(a.ttype)]), op)
    return finish(out, cols, a.ttype)


def _asof_calculus(
    orders: DataFrame,
    prices: DataFrame,
    keys_: list[str],
    how: str,
    strict: bool,
    a_data: list[str],
    b_data: list[str],
) -> DataFrame:
    d_orders = differentiate(orders)
    p = dd_delay(prices) if strict else prices

    matched = integrate(dd_join(d_orders, p, keys_))
    if how == "inner":
        return matched
    present = dd_distinct(p.select(*qcols(keys_), TIME, DIFF))
    missing = integrate(dd_antijoin(d_orders, present, keys_))
    b_fields = {f.name: f.dataType for f in inspect(prices, op="dd_asof_join").data_fields}
    padded = missing.select(
        *qcols(keys_), *qcols(a_data), *[F.lit(None).cast(b_fields[c]).alias(c) for c in b_data], TIME, DIFF
    )
    return matched.select(*qcols(keys_), *qcols(a_data), *qcols(b_data), TIME, DIFF).unionByName(padded)
