"""The relational as-of join, ``dd_merge_asof``, with pandas ``merge_asof``'s options.

On ``(data, time, diff)``: at every time ``s`` the output accumulates to the as-of join
of the two inputs accumulated at ``s`` (each the table of its rows with a positive
multiplicity): every left row picks at most one right row with equal ``by`` keys by the
match columns ``on`` (``direction``, ``allow_exact_matches``, ``tolerance``), as
:mod:`spark_differential.kernels.asof_match` says.  The output changes only where an
input does, where the kernel (:mod:`spark_differential.kernels.asof_merge`) puts the
corrections; the operator runs through the seam like every stateful one (its own stage,
a fused pipeline, a loop, an incremental view).

Plain tables (DataFrames without both ``time`` and ``diff`` columns) are joined as they
are, once, into a plain DataFrame, as pandas and DuckDB do: one stage, the kernel per
partition of both tables placed by ``by`` key (:mod:`spark_differential.operators.asof_ranges`
splits key-less and heavy keys by ranges of the match column).

This module reads the arguments into a :class:`Plan` (checked before any Spark job) and
builds the call; the temporal as-of join of the calculus is ``dd_asof_join``
(:mod:`spark_differential.operators.calculus`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import (
    DIFF,
    FRACTIONAL_TYPES,
    INTEGRAL_TYPES,
    TIME,
    CollectionSchema,
    as_columns,
    inspect,
    qcol,
    quoted,
    require_columns,
)
from spark_differential.core.lattice import Total
from spark_differential.core.scope import unify
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.kernel_form import Input, entry_time, key_casts
from spark_differential.errors import OptionError, SchemaMismatchError
from spark_differential.kernels import asof_match
from spark_differential.kernels import asof_merge as kmerge
from spark_differential.kernels.common import keys, names
from spark_differential.operators import asof_ranges

OP = "dd_merge_asof"
_TEMPORAL = (T.DateType, T.TimestampType, T.TimestampNTZType)
_ORDERABLE = (*INTEGRAL_TYPES, *FRACTIONAL_TYPES, T.DecimalType, T.StringType, T.BinaryType, T.BooleanType,
              *_TEMPORAL)


@dataclass
class Plan:
    """One ``dd_merge_asof`` call read from its arguments and the inputs' schemas."""

    lon: str
    ron: str
    lby: list[str]
    rby: list[str]
    left_data: list[str]  # the kernel's ``_a*``: the match column first
    right_data: list[str]  # ``_b*``
    on_type: T.DataType  # the type both match columns are compared as
    params: kmerge.MergeAsofParams
    out_columns: list[tuple[str, str]]  # (kernel column, output name)
    key_types: list[T.DataType] = field(default_factory=list)
    key_casts_l: dict[str, T.DataType] = field(default_factory=dict)
    key_casts_r: dict[str, T.DataType] = field(default_factory=dict)


def is_collection(df: DataFrame) -> bool:
    """Whether ``df`` is read as a collection (it has ``time`` and ``diff``) or as a plain table."""
    cols = df.columns
    return TIME in cols and DIFF in cols


def _static_schema(df: DataFrame) -> CollectionSchema:
    fields = tuple(df.schema.fields)
    return CollectionSchema(tuple(f.name for f in fields), fields, Total("long"))


def common_on_type(lt: T.DataType, rt: T.DataType, where: str) -> T.DataType:
    """The type two match columns are compared as (same type, or both numeric, or a date and a
    timestamp); a :class:`SchemaMismatchError` otherwise."""
    for t in (lt, rt):
        if not isinstance(t, _ORDERABLE):
            raise SchemaMismatchError(
                f"{OP}: {where}: a match column of type {t.simpleString()} cannot be ordered; use a number, "
                "decimal, string, date or timestamp column")
    if lt == rt:
        return lt
    if isinstance(lt, INTEGRAL_TYPES) and isinstance(rt, INTEGRAL_TYPES):
        return T.LongType()
    numeric = (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)
    if isinstance(lt, numeric) and isinstance(rt, numeric):
        return T.DoubleType()
    if isinstance(lt, T.DecimalType) or isinstance(rt, T.DecimalType):
        ds = [t for t in (lt, rt) if isinstance(t, T.DecimalType)]
        if all(isinstance(t, (T.DecimalType, *INTEGRAL_TYPES)) for t in (lt, rt)):
            scale = max(d.scale for d in ds)
            whole = max([d.precision - d.scale for d in ds] + ([19] if len(ds) == 1 else []))
            return T.DecimalType(min(38, whole + scale), scale)
        if all(isinstance(t, (T.DecimalType, *FRACTIONAL_TYPES)) for t in (lt, rt)):
            return T.DoubleType()
    pair = {type(lt), type(rt)}
    if pair == {T.DateType, T.TimestampType}:
        return T.TimestampType()
    if pair == {T.DateType, T.TimestampNTZType}:
        return T.TimestampNTZType()
    raise SchemaMismatchError(
        f"{OP}: {where}: the match columns have types {lt.simpleString()} and {rt.simpleString()}, which do not "
        "compare; cast one of them to the other's type")


def tolerance_units(tolerance: Any, t: T.DataType) -> int | float | str | None:
    """The tolerance in the unit the kernel compares distances in (see :class:`~.asof_match.Rule`)."""
    if tolerance is None:
        return None
    what = f"{OP}: tolerance {tolerance!r}"
    if isinstance(t, (T.StringType, T.BinaryType, T.BooleanType)):
        raise OptionError(f"{what}: a {t.simpleString()} match column has no distance; drop the tolerance")
    if isinstance(t, _TEMPORAL):
        if hasattr(tolerance, "to_pytimedelta") and not isinstance(tolerance, dt.timedelta):
            tolerance = tolerance.to_pytimedelta()  # numpy / pandas timedeltas
        if not isinstance(tolerance, dt.timedelta):
            raise OptionError(f"{what}: a {t.simpleString()} match column needs a datetime.timedelta tolerance "
                              "(e.g. datetime.timedelta(milliseconds=10))")
        if tolerance < dt.timedelta(0):
            raise OptionError(f"{what}: the tolerance must not be negative")
        unit = dt.timedelta(days=1) if isinstance(t, T.DateType) else dt.timedelta(microseconds=1)
        return tolerance // unit
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, Decimal)):
        raise OptionError(f"{what}: a {t.simpleString()} match column needs a number as tolerance")
    if tolerance < 0:
        raise OptionError(f"{what}: the tolerance must not be negative")
    if isinstance(t, INTEGRAL_TYPES):
        if not isinstance(tolerance, int):
            raise OptionError(f"{what}: an integral match column needs an int tolerance")
        return int(tolerance)
    if isinstance(t, T.DecimalType):
        scaled = Decimal(str(tolerance)).scaleb(t.scale)
        if t.precision <= 18:
            return int(scaled.to_integral_value(rounding="ROUND_FLOOR"))
        return str(Decimal(str(tolerance)))
    return float(tolerance)


def _check_options(direction: str, allow_exact_matches: bool, how: str, suffixes: Sequence[str | None],
                   nulls_equal: bool) -> None:
    if direction not in asof_match.DIRECTIONS:
        raise OptionError(f"{OP}: direction must be one of {list(asof_match.DIRECTIONS)}, got {direction!r}")
    if how not in asof_match.HOWS:
        raise OptionError(f"{OP}: how must be one of {list(asof_match.HOWS)}, got {how!r}")
    for name, v in (("allow_exact_matches", allow_exact_matches), ("nulls_equal", nulls_equal)):
        if not isinstance(v, bool):
            raise OptionError(f"{OP}: {name} must be a bool, got {v!r}")
    if not isinstance(suffixes, (tuple, list)) or len(suffixes) != 2:
        raise OptionError(f"{OP}: suffixes must be a pair of strings (or None), got {suffixes!r}")


def _sides(on: str | None, left_on: str | None, right_on: str | None, by: Any, left_by: Any,
           right_by: Any) -> tuple[str, str, list[str], list[str]]:
    if on is not None and (left_on is not None or right_on is not None):
        raise OptionError(f"{OP}: give either `on` or `left_on` and `right_on`, not both")
    lon, ron = (on, on) if on is not None else (left_on, right_on)
    if not isinstance(lon, str) or not isinstance(ron, str):
        raise OptionError(f"{OP}: name the match column with `on` (or `left_on` and `right_on`): one column name "
                          f"each, got on={on!r}, left_on={left_on!r}, right_on={right_on!r}")
    if by is not None and (left_by is not None or right_by is not None):
        raise OptionError(f"{OP}: give either `by` or `left_by` and `right_by`, not both")
    lby = as_columns(by if by is not None else left_by, op=OP, what="`by`")
    rby = as_columns(by if by is not None else right_by, op=OP, what="`by`")
    if len(lby) != len(rby):
        raise OptionError(f"{OP}: left_by {lby} and right_by {rby} must name as many columns")
    for side, match, by_ in (("left", lon, lby), ("right", ron, rby)):
        if match in by_:
            raise OptionError(f"{OP}: `{match}` is both the {side} match column and a `by` column")
        if len(set(by_)) != len(by_):
            raise OptionError(f"{OP}: the {side} `by` columns {by_} repeat a column")
    return lon, ron, lby, rby


def plan(a: CollectionSchema, b: CollectionSchema, lon: str, ron: str, lby: list[str], rby: list[str],
         tolerance: Any, direction: str, exact: bool, how: str, suffixes: Sequence[str | None],
         nulls_equal: bool, ttype: Any, static: bool) -> Plan:
    """Check the columns and options against the inputs' schemas and say what to compute."""
    require_columns(a, [lon, *lby], op=OP, side="left input", what="`on`/`by` columns")
    require_columns(b, [ron, *rby], op=OP, side="right input", what="`on`/`by` columns")
    ca, cb = key_casts(OP, a, b, lby, rby)
    on_type = common_on_type(a.field(lon).dataType, b.field(ron).dataType, f"`{lon}` and `{ron}`")
    if direction == "nearest" and isinstance(on_type, (T.StringType, T.BinaryType, T.BooleanType)):
        raise OptionError(f"{OP}: direction='nearest' needs a distance, which a {on_type.simpleString()} match "
                          "column has not; use 'backward' or 'forward'")
    rule = asof_match.Rule(direction, exact, tolerance_units(tolerance, on_type), how)
    left_data = [lon, *[c for c in a.data_cols if c not in lby and c != lon]]
    right_data = [ron, *[c for c in b.data_cols if c not in rby and c != ron]]
    right_keys = tuple(i for i, (x, y) in enumerate(zip(lby, rby)) if x != y)
    params = kmerge.MergeAsofParams(len(lby), len(left_data), len(right_data), ttype, rule, nulls_equal,
                                    right_keys if how not in ("semi", "anti") else (), lon == ron, static)
    a_int = dict(zip(left_data, names("_a", len(left_data))))
    left_out = [(keys(len(lby))[lby.index(c)] if c in lby else a_int[c], c) for c in a.data_cols]
    right_out: list[tuple[str, str]] = []
    if how not in ("semi", "anti"):
        b_int = dict(zip(right_data, names("_b", len(right_data))))
        for c in b.data_cols:
            if c in rby:
                i = rby.index(c)
                if i in right_keys:
                    right_out.append((f"_kr{i}", c))
            elif c != ron or lon != ron:
                right_out.append((b_int[c], c))
    clash = {n for _, n in left_out} & {n for _, n in right_out}
    ls, rs = suffixes
    left_out = [(i, n + (ls or "") if n in clash else n) for i, n in left_out]
    right_out = [(i, n + (rs or "") if n in clash else n) for i, n in right_out]
    out = [*left_out, *right_out]
    taken = [n for _, n in out]
    dup = sorted({n for n in taken if taken.count(n) > 1})
    if dup or (not static and {TIME, DIFF} & set(taken)):
        bad = dup or sorted({TIME, DIFF} & set(taken))
        raise SchemaMismatchError(f"{OP}: the output would have the columns {bad} twice (or a column named "
                                  f"time/diff in a collection); rename a column or choose other suffixes")
    key_types = [ca.get(k, a.field(k).dataType) for k in lby]
    return Plan(lon, ron, lby, rby, left_data, right_data, on_type, params, out, key_types, ca, cb)


def _fields(p: Plan, a: CollectionSchema, b: CollectionSchema) -> list[T.StructField]:
    """The kernel's output data fields (internal names, Spark types)."""
    types: dict[str, T.DataType] = dict(zip(keys(len(p.lby)), p.key_types))
    for i in p.params.right_keys:
        types[f"_kr{i}"] = p.key_types[i]
    for c, n in zip(p.left_data, names("_a", len(p.left_data))):
        types[n] = p.on_type if c == p.lon else a.field(c).dataType
    for c, n in zip(p.right_data, names("_b", len(p.right_data))):
        types[n] = p.on_type if c == p.ron else b.field(c).dataType
    return [T.StructField(n, types[n], True) for n in kmerge.output_names(p.params)]


def dd_merge_asof(
    left: DataFrame,
    right: DataFrame,
    on: str | None = None,
    by: str | Sequence[str] | None = None,
    tolerance: Any = None,
    direction: str = "backward",
    allow_exact_matches: bool = True,
    how: str = "left",
    *,
    left_on: str | None = None,
    right_on: str | None = None,
    left_by: str | Sequence[str] | None = None,
    right_by: str | Sequence[str] | None = None,
    suffixes: Sequence[str | None] = ("_x", "_y"),
    nulls_equal: bool = False,
    ranges: int | None = None,
) -> DataFrame:
    """As-of join, as pandas ``merge_asof``: each left row picks at most one right row
    with equal ``by`` keys, by the match column ``on``.

    * ``direction="backward"`` picks the right row with the greatest ``on`` at or before the
      left row's, ``"forward"`` the least at or after it, ``"nearest"`` the closer of the two
      (the backward one on a tie in distance).
    * ``allow_exact_matches=False``: strictly before / after.
    * ``tolerance``: at most this far (inclusive): a number, or a ``datetime.timedelta``
      for a date or timestamp ``on``.
    * ``how``: ``"left"`` keeps left rows that pick nothing (nulls for the right's columns),
      ``"inner"`` drops them, ``"semi"``/``"anti"`` keep the left rows with / without a pick
      (left columns only), ``"right"`` and ``"full"`` add the right rows no left row picks
      (nulls for the left's columns).
    * ``on`` (or ``left_on``/``right_on``): a column of a number, decimal, string, date or
      timestamp type (``nearest`` and ``tolerance`` need a distance: not strings).  Nulls
      (and NaN) never match.
    * ``by`` (or ``left_by``/``right_by``): equality keys; a null key matches nothing unless
      ``nulls_equal=True`` (SQL's ``IS NOT DISTINCT FROM``).

    Right rows sharing the picked ``on`` value are taken in the order of their other
    columns (ascending, nulls first): backward takes the last of them, forward the first
    (pandas takes the last / first in the right table's row order; sorted that way, the
    answers are the same).  Columns (as pandas): all the left's, then the right's but its
    ``by`` and ``on`` columns when they have the left's names; other names both sides have
    get ``suffixes``.

    Inputs: two **plain tables** (DataFrames without both ``time`` and ``diff``) give a
    plain DataFrame, computed once.  Two **collections** give a collection whose snapshot
    at every time is the as-of join of the inputs' snapshots (rows with a positive
    multiplicity; a row present ``m`` times is ``m`` rows), updated where the inputs change.

    ``ranges`` (plain tables): cut each key's timeline into this many ranges of ``on``,
    one task each (key-less: cut at right rows' values, so that each left row's pick is
    in its range; keyed: every range also gets the right rows next to it that its left
    rows may pick); the default cuts key-less joins by their size (about 10^6 left rows
    a range) and nothing else; 1 never cuts.  Give it for a few huge keys.  Right and full
    joins, and string, binary or boolean ``on`` columns, are not cut.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> trades = spark.createDataFrame(
    ...     [(23, "MSFT", 51.95), (38, "MSFT", 51.95), (48, "GOOG", 720.77), (48, "AAPL", 98.0)],
    ...     "ms long, ticker string, price double")
    >>> quotes = spark.createDataFrame(
    ...     [(23, "GOOG", 720.50), (23, "MSFT", 51.95), (30, "MSFT", 51.97), (41, "MSFT", 51.99),
    ...      (48, "GOOG", 720.50), (49, "AAPL", 97.99)], "ms long, ticker string, bid double")
    >>> trades.dd_merge_asof(quotes, on="ms", by="ticker").orderBy("ms", "ticker").show()
    +---+------+------+-----+
    | ms|ticker| price|  bid|
    +---+------+------+-----+
    | 23|  MSFT| 51.95|51.95|
    | 38|  MSFT| 51.95|51.97|
    | 48|  AAPL|  98.0| NULL|
    | 48|  GOOG|720.77|720.5|
    +---+------+------+-----+
    <BLANKLINE>

    Within 10 ms, exact matches excluded, inner; then the nearest quote, and forward:

    >>> trades.dd_merge_asof(quotes, on="ms", by="ticker", tolerance=10, allow_exact_matches=False,
    ...                      how="inner").show()
    +---+------+-----+-----+
    | ms|ticker|price|  bid|
    +---+------+-----+-----+
    | 38|  MSFT|51.95|51.97|
    +---+------+-----+-----+
    <BLANKLINE>
    >>> [(r.ms, r.ticker, r.bid) for r in trades.dd_merge_asof(quotes, on="ms", by="ticker", direction="nearest")
    ...  .orderBy("ms", "ticker").collect()]
    [(23, 'MSFT', 51.95), (38, 'MSFT', 51.99), (48, 'AAPL', 97.99), (48, 'GOOG', 720.5)]
    >>> [(r.ms, r.ticker, r.bid) for r in trades.dd_merge_asof(quotes, on="ms", by="ticker", direction="forward")
    ...  .orderBy("ms", "ticker").collect()]
    [(23, 'MSFT', 51.95), (38, 'MSFT', 51.99), (48, 'AAPL', 97.99), (48, 'GOOG', 720.5)]

    Semi, anti, right and full joins; columns named apart (``left_on``/``right_on``),
    a timestamp ``on`` with a ``timedelta`` tolerance:

    >>> trades.dd_merge_asof(quotes, on="ms", by="ticker", how="anti").show()
    +---+------+-----+
    | ms|ticker|price|
    +---+------+-----+
    | 48|  AAPL| 98.0|
    +---+------+-----+
    <BLANKLINE>
    >>> trades.dd_merge_asof(quotes, on="ms", by="ticker", how="semi").count()
    3
    >>> sorted((r.ms, r.ticker, r.price, r.bid) for r in trades.dd_merge_asof(quotes, on="ms", by="ticker",
    ...        how="right").collect() if r.price is None)
    [(23, 'GOOG', None, 720.5), (41, 'MSFT', None, 51.99), (49, 'AAPL', None, 97.99)]
    >>> trades.dd_merge_asof(quotes, on="ms", by="ticker", how="full").count()
    7
    >>> import datetime as dt
    >>> ticks = spark.createDataFrame([(dt.datetime(2024, 1, 1, 9, 0, 5), "a")], "at timestamp, x string")
    >>> rates = spark.createDataFrame([(dt.datetime(2024, 1, 1, 9, 0, 0), 1.5)], "since timestamp, rate double")
    >>> ticks.dd_merge_asof(rates, left_on="at", right_on="since", tolerance=dt.timedelta(seconds=10)).show()
    +-------------------+---+-------------------+----+
    |                 at|  x|              since|rate|
    +-------------------+---+-------------------+----+
    |2024-01-01 09:00:05|  a|2024-01-01 09:00:00| 1.5|
    +-------------------+---+-------------------+----+
    <BLANKLINE>

    A key-less join cut into ranges (here forced: ``ranges=2``), the same rows:

    >>> trades.dd_merge_asof(quotes.drop("ticker"), on="ms", ranges=2, suffixes=("", "_q")).count()
    4

    Null keys matched null-safely:

    >>> l = spark.createDataFrame([(None, 5)], "k string, t long")
    >>> r = spark.createDataFrame([(None, 1, "x")], "k string, t long, v string")
    >>> [x.v for x in l.dd_merge_asof(r, on="t", by="k").collect()], \\
    ...     [x.v for x in l.dd_merge_asof(r, on="t", by="k", nulls_equal=True).collect()]
    ([None], ['x'])

    On collections: the join of the snapshots at every time.  The quote of 30 ms arrives at
    time 1, so the trade of 38 ms is re-joined then:

    >>> t = spark.createDataFrame([(38, "MSFT", 0, 1)], "ms long, ticker string, time long, diff long")
    >>> q = spark.createDataFrame([(23, "MSFT", 51.95, 0, 1), (30, "MSFT", 51.97, 1, 1)],
    ...                           "ms long, ticker string, bid double, time long, diff long")
    >>> t.dd_merge_asof(q, on="ms", by="ticker").orderBy("time", "diff").show()
    +---+------+-----+----+----+
    | ms|ticker|  bid|time|diff|
    +---+------+-----+----+----+
    | 38|  MSFT|51.95|   0|   1|
    | 38|  MSFT|51.95|   1|  -1|
    | 38|  MSFT|51.97|   1|   1|
    +---+------+-----+----+----+
    <BLANKLINE>
    """
    _check_options(direction, allow_exact_matches, how, suffixes, nulls_equal)
    if ranges is not None and (isinstance(ranges, bool) or not isinstance(ranges, int) or ranges < 1):
        raise OptionError(f"{OP}: ranges must be a positive int or None, got {ranges!r}")
    lon, ron, lby, rby = _sides(on, left_on, right_on, by, left_by, right_by)
    for side, df in (("left", left), ("right", right)):
        if not isinstance(df, DataFrame):
            raise TypeError(f"{OP}: the {side} input must be a pyspark DataFrame, got {type(df).__name__}")
    kinds = (is_collection(left), is_collection(right))
    if kinds[0] != kinds[1]:
        which = "left" if kinds[0] else "right"
        raise SchemaMismatchError(
            f"{OP}: the {which} input is a collection (it has `time` and `diff` columns) but the other is a plain "
            "table; make both collections (sd.collection(df, time=...)) or join two plain tables")
    if not kinds[0]:
        return _static(left, right, lon, ron, lby, rby, tolerance, direction, allow_exact_matches, how, suffixes,
                       nulls_equal, ranges)
    a = inspect(left, op=OP, side="left input")
    b = inspect(right, op=OP, side="right input")
    _, kernel_t, entries = unify(OP, [a, b], ["left input", "right input"])
    p = plan(a, b, lon, ron, lby, rby, tolerance, direction, allow_exact_matches, how, suffixes, nulls_equal,
             kernel_t, False)
    for df, cs, col in ((left, a, lon), (right, b, ron)):
        if cs.field(col).dataType != p.on_type:
            cast = df.withColumn(col, qcol(col).cast(p.on_type))
            if df is left:
                left, a = cast, inspect(cast, op=OP, side="left input")
            else:
                right, b = cast, inspect(cast, op=OP, side="right input")
    ia = Input(left, a, lby, p.left_data, "_a", kernel_t, entry_time(entries[0], a, kernel_t), key_casts=p.key_casts_l)
    ib = Input(right, b, rby, p.right_data, "_b", kernel_t, entry_time(entries[1], b, kernel_t),
               key_casts=p.key_casts_r)
    call = StatefulCall.of(OP, kmerge.merge_asof, p.params, [ia, ib], entries, _fields(p, a, b), p.out_columns,
                           kernel_t)
    return execute(call)


@dataclass
class StaticSide:
    """One plain table in the kernel's form, as SQL items over its columns: the keys (the
    kernel's ``_k*``), the match value (``_a0``/``_b0``) and the other data columns, each
    with its Spark type."""

    df: DataFrame
    keys: list[tuple[str, T.DataType]]
    on: tuple[str, T.DataType]
    data: list[tuple[str, T.DataType]]


def static_join(left: StaticSide, right: StaticSide, rule: asof_match.Rule, nulls_equal: bool,
                out_columns: Sequence[tuple[str, str]], right_keys: tuple[int, ...] = (),
                coalesce_on: bool = False, ranges: int | None = 1) -> DataFrame:
    """The as-of join of two plain tables given as :class:`StaticSide` s: one stage, plain rows
    named ``out_columns`` (kernel column, output name); ``ranges``: cut every key into this many
    ranges of the match value (None: as many as the left's row count asks for, see
    :mod:`~spark_differential.operators.asof_ranges`; 1: not cut)."""
    nk = len(left.keys)
    params = kmerge.MergeAsofParams(nk, 1 + len(left.data), 1 + len(right.data), Total("long"), rule, nulls_equal,
                                    right_keys if rule.how not in ("semi", "anti") else (), coalesce_on, True)
    types: dict[str, T.DataType] = {}
    for prefix, side in (("_a", left), ("_b", right)):
        for n, (_, t) in zip(names(prefix, 1 + len(side.data)), [side.on, *side.data]):
            types[n] = t
    for i, (_, t) in enumerate(left.keys):
        types[keys(nk)[i]] = t
        types[f"_kr{i}"] = right.keys[i][1]
    schema = T.StructType([T.StructField(user, types[internal], True) for internal, user in out_columns])
    sides = []
    for prefix, side in (("_a", left), ("_b", right)):
        # plain rows: no time, diff or new flag to ship (the kernel takes one time, diff 1, all new)
        items = [item for item, _ in [*side.keys, side.on, *side.data]]
        sides.append((side.df, items, [*keys(nk), *names(prefix, 1 + len(side.data))]))
    split = asof_ranges.Split(left.on[1], ranges)
    return asof_ranges.run_static(params, list(out_columns), schema, sides, split,
                                  [right.on[1], *[t for _, t in right.data]])


def _static(left: DataFrame, right: DataFrame, lon: str, ron: str, lby: list[str], rby: list[str], tolerance: Any,
            direction: str, exact: bool, how: str, suffixes: Sequence[str | None], nulls_equal: bool,
            ranges: int | None) -> DataFrame:
    """Two plain tables: one stage, the kernel per partition, plain rows out."""
    a, b = _static_schema(left), _static_schema(right)
    for side, cs in (("left", a), ("right", b)):
        dup = sorted({c for c in cs.data_cols if cs.data_cols.count(c) > 1})
        if dup:
            raise SchemaMismatchError(f"{OP}: the {side} input has duplicate column names {dup}; rename them first")
    p = plan(a, b, lon, ron, lby, rby, tolerance, direction, exact, how, suffixes, nulls_equal, Total("long"), True)
    sides = []
    for df, cs, by_, casts, data in ((left, a, lby, p.key_casts_l, p.left_data), (right, b, rby, p.key_casts_r,
                                                                                 p.right_data)):
        key_items = [(_cast(quoted(k), casts.get(k)), casts.get(k, cs.field(k).dataType)) for k in by_]
        on = (_cast(quoted(data[0]), p.on_type if cs.field(data[0]).dataType != p.on_type else None), p.on_type)
        sides.append(StaticSide(df, key_items, on, [(quoted(c), cs.field(c).dataType) for c in data[1:]]))
    return static_join(sides[0], sides[1], p.params.rule, nulls_equal, p.out_columns, p.params.right_keys,
                       p.params.coalesce_on, ranges if ranges is not None or not lby else 1)


def _cast(item: str, t: T.DataType | None) -> str:
    return item if t is None else f"CAST({item} AS {t.simpleString()})"
