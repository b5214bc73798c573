"""Plain-table as-of joins in one stage, a key's timeline split into ranges of the match value.

On ``(data, time, diff)``: a plain table is one snapshot (every row once, at one time),
and the join of two snapshots is a plain table again; nothing here is differential.
Both tables, in kernel form, are placed by ``by`` key and joined by the kernel once per
partition (:func:`spark_differential.kernels.asof_merge.merge_asof`, its one-snapshot
path), which names the output columns itself.

Without ``by`` keys every row has one key: one task would hold both whole tables.  So a
key-less join (or any join asked to, ``ranges=``) is cut into ranges of the match value,
the range joining the key, each range one task.

*Key-less: cut at right rows.*  The bounds are match values of right rows (quantiles of
theirs: the ranges hold about equal numbers of right rows; taken where Spark's plan says the
right has at least a row per :data:`RIGHT_SHARE` left rows, so that left rows spread over
them).  A left row's pick then lies in its own range: a backward join's is at or after
the greatest bound at or below the left row, itself a right row; a forward join's at or
before the least bound at or above it.  So left rows go to the range of the bounds below
them, right rows to that of the bounds at or below them (backward) or below them
(forward); a join without exact matches turns the left's comparison around; a nearest
join sends a right row equal to a bound to the range below it as well.  Nothing is
carried between ranges, and equal values (ties) share a range.

*Keyed, or a decimal match value, or nearest without exact matches, or few right rows:
carried rows.*  A bound is then a value of some key's right rows, not every key's (or a
decimal's double may not order like the decimal, or a left row at a bound needs both
ranges, or the right's values are too few to cut the left's rows evenly), so the
bounds are quantiles of the left's values, and each range also gets, per key, the right
rows a left row of it may pick from another range: the *last* right row of the nearest
earlier range that has one (backward and nearest joins) and the *first* of the nearest
later one (forward and nearest).  Values equal to a boundary fall in one range on both
sides, so a pick never crosses more than that one row, and a range's task holds its own
rows and two carried rows per key.

The bounds are quantiles (``percentile_approx`` over their numeric order: microseconds,
days, doubles; an automatic split takes them from the one row in :data:`SAMPLE` whose
match value hashes to 0 modulo it, which keeps the ranges about equal and the
aggregation cheap) computed in the plan, not by a job of their own: a one-row aggregate
broadcast to both sides, each row's range found by a binary search written as nested
``CASE``\\ s.  The number of ranges follows the left's row count (:data:`RANGE_ROWS`
left rows per range, at least one per core once each holds :data:`MIN_RANGE_ROWS`):
from Spark's plan where it has counted them (a cached table: then the search is over
just those bounds), else counted in the same aggregate.  Right and full joins are not
split (a right row's fate depends on every range's picks), nor are string, binary or
boolean match values (no numeric order to take quantiles of).  Nor is a join whose left
side Spark's plan knows to be at most :data:`MIN_RANGE_ROWS` rows it holds already (local
rows, a cached table: :func:`few_rows`): it would be one range anyway.

A join placed by key and not cut keeps every shuffle partition once Spark's plan says its left
side holds :data:`SPREAD_ROWS` rows: adaptive execution would merge the partitions into fewer
tasks of unequal size (100 keys on 4 partitions became 3 tasks on 2 cores, the largest left
running alone).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import INTEGRAL_TYPES
from spark_differential.engine.distributed import run_pair_sql
from spark_differential.intask.sources import Estimate, estimated_rows
from spark_differential.kernels import asof_merge as kmerge
from spark_differential.kernels.common import keys, names

PROBES = 64  # quantiles computed: at most PROBES + 1 ranges
RANGE_ROWS = 1_000_000  # left rows per range of an automatically split join
MIN_RANGE_ROWS = 50_000  # fewer left rows per range than this: fewer ranges than cores
SAMPLE = 16  # an automatic split takes its quantiles from one row in SAMPLE (by hash)
RIGHT_SHARE = 16  # a key-less split is cut at right rows when they are at least one per RIGHT_SHARE left rows
SPREAD_ROWS = 200_000  # a join by key of at least this many left rows keeps every shuffle partition
_ACCURACY = 2_000
_BOUNDS, _RANGES = "sdasof_bounds", "sdasof_ranges"


def numeric_order(item: str, t: T.DataType) -> str | None:
    """SQL giving the match value's order as a number (None: no numeric order)."""
    if isinstance(t, INTEGRAL_TYPES):
        return f"CAST({item} AS BIGINT)"
    if isinstance(t, (T.FloatType, T.DoubleType, T.DecimalType)):
        return f"CAST({item} AS DOUBLE)"
    if isinstance(t, T.DateType):
        return f"unix_date({item})"
    if isinstance(t, T.TimestampType):
        return f"unix_micros({item})"
    if isinstance(t, T.TimestampNTZType):
        return f"unix_micros(CAST({item} AS TIMESTAMP))"
    return None


def _position(v: str, lo: int, hi: int, strict: bool = False) -> str:
    """How many of the bounds ``lo + 1 .. hi`` (1-based, ascending) are ``<= v`` (``strict``:
    ``< v``), plus ``lo``: a binary search as nested CASEs (``log2`` comparisons per row,
    compiled by Spark)."""
    if lo == hi:
        return str(lo)
    mid = (lo + hi) // 2
    below = "<=" if strict else "<"
    return (f"CASE WHEN {v} {below} element_at({_BOUNDS}, {mid + 1}) THEN {_position(v, lo, mid, strict)} "
            f"ELSE {_position(v, mid + 1, hi, strict)} END")


@dataclasses.dataclass(frozen=True)
class Split:
    """How to cut a plain-table join: the match value's type, the join's direction, and the
    number of ranges (None: from the left's row count)."""

    on_type: T.DataType
    ranges: int | None = None


def few_rows(estimate: Estimate) -> bool:
    """Whether Spark's plan says (``estimate``, no job) that the left side holds at most
    :data:`MIN_RANGE_ROWS` rows it has already (local rows, a cached table): a join of so few
    left rows is one range, and not cutting it spares the quantiles' and the carried rows' stages."""
    rows = estimate.rows if estimate.known else estimate.bound  # (a Python list's: bounded by its batches)
    return estimate.held and rows is not None and rows <= MIN_RANGE_ROWS


def automatic_ranges(rows: int, cores: int) -> int:
    """The ranges an automatic split cuts ``rows`` left rows into: one per :data:`RANGE_ROWS`, at
    least one per core once each holds :data:`MIN_RANGE_ROWS`, at most ``PROBES + 1``.

    >>> automatic_ranges(10**6, 2), automatic_ranges(10**7, 2), automatic_ranges(60_000, 8), automatic_ranges(10**9, 2)
    (2, 10, 2, 65)
    """
    cores = min(cores, -(-rows // MIN_RANGE_ROWS))
    return min(PROBES + 1, max(1, -(-rows // RANGE_ROWS), cores))


def splittable(p: kmerge.MergeAsofParams, split: Split | None, right_types: Sequence[T.DataType]) -> bool:
    """Whether the join can be cut into ranges (see the module docstring)."""
    if split is None or split.ranges == 1 or p.rule.how in ("right", "full"):
        return False
    if numeric_order("x", split.on_type) is None:
        return False
    return not any(isinstance(t, T.MapType) for t in right_types)


def run_static(p: kmerge.MergeAsofParams, out_columns: Sequence[tuple[str, str]], schema: T.StructType,
               sides: Sequence[tuple[DataFrame, Sequence[str], Sequence[str]]], split: Split | None = None,
               right_types: Sequence[T.DataType] = ()) -> DataFrame:
    """The joined rows of two plain tables (``sides``: each in kernel form as SQL items, its
    kernel column names), as ``schema`` (the output names of ``out_columns``); cut into
    ranges of the match value when ``split`` says so and the join allows it."""
    kernel = functools.partial(kmerge.renamed, kmerge.merge_asof, [i for i, _ in out_columns], schema.names)
    (ldf, litems, llabels), (rdf, ritems, rlabels) = sides
    estimate = estimated_rows([ldf])
    # the number of ranges where known before any job (asked for, or from Spark's plan); 1: not cut
    known = split.ranges if split is not None and splittable(p, split, right_types) else 1
    if known is None and few_rows(estimate):
        known = 1
    elif known is None and estimate.held and estimate.known:  # rows Spark holds and has counted (cached)
        known = automatic_ranges(estimate.rows, settings.parallelism(ldf.sparkSession))
    if split is None or known == 1:  # placed by key: every shuffle partition kept if large
        return run_pair_sql(kernel, p, sides, p.nkeys, schema,
                            every_partition=estimate.known and estimate.rows >= SPREAD_ROWS)
    cut = _Cut(split, known, settings.parallelism(ldf.sparkSession))
    nk = p.nkeys
    rk = keys(nk + 1)[-1]
    params = dataclasses.replace(p, nkeys=nk + 1)
    slots = None if nk else (rk, cut.probes + 1)
    if bounds_at_right_rows(p, split, right_types) and _right_rows_enough(estimate, estimated_rows([rdf])):
        # a backward join's pick for a left row is at or after the greatest bound at or below it (a right
        # row's value), a forward join's at or before the least bound at or above it: both in its range
        # when left rows go by the bounds below them and right rows by the bounds at or below them
        # (backward) or below them (forward); strict joins turn the left's comparison around
        lon, ron = (f"({items[list(labels).index(n)]})" for items, labels, n in
                    ((litems, llabels, "_a0"), (ritems, rlabels, "_b0")))
        valid = f"{ron} IS NOT NULL"
        if isinstance(split.on_type, (T.FloatType, T.DoubleType)):
            valid += f" AND NOT isnan({ron})"  # a NaN never matches (and must not be a bound)
        right = rdf.where(valid)
        v_left, v_right = numeric_order(lon, split.on_type), numeric_order(ron, split.on_type)
        over = right.selectExpr(f"{cut.sampled(v_right)} AS sdasof_v")
        if not known:  # the left's rows counted in the same pass
            over = ldf.selectExpr("1 AS sdasof_n").unionByName(over, allowMissingColumns=True)
        bounds = cut.bounds(over, "sdasof_v", "count(sdasof_n)")
        direction = p.rule.direction
        backward, forward = cut.range_of(v_right), cut.range_of(v_right, strict=True)
        place = {"backward": backward, "forward": forward,
                 # a bound's rows serve the range below it too (the first row at or after its left rows)
                 "nearest": f"explode(array_distinct(array({backward}, {forward})))"}[direction]
        return run_pair_sql(kernel, params, [
            (ldf.crossJoin(bounds), [*litems, cut.range_of(v_left, (direction == "forward") == p.rule.exact)],
             [*llabels, rk]),
            (right.crossJoin(bounds), [*ritems, place], [*rlabels, rk])], nk + 1, schema, slots=slots)
    left = ldf.selectExpr(*[f"{i} AS {n}" for i, n in zip(litems, llabels)])
    right = rdf.selectExpr(*[f"{i} AS {n}" for i, n in zip(ritems, rlabels)]).where("_b0 IS NOT NULL")
    v_left, v_right = numeric_order("_a0", split.on_type), numeric_order("_b0", split.on_type)
    bounds = cut.bounds(left.selectExpr(f"{cut.sampled(v_left)} AS sdasof_v"), "sdasof_v", "count(1)")
    left_r = left.crossJoin(bounds).selectExpr(*left.columns, f"{cut.range_of(v_left)} AS {rk}")
    right_r = right.crossJoin(bounds).selectExpr(*right.columns, f"{cut.range_of(v_right)} AS {rk}")
    carried = _carried(right_r, keys(nk), rk, names("_b", p.nb), p.rule.direction, cut.probes)
    lcols, rcols = left_r.columns, right_r.columns
    return run_pair_sql(kernel, params, [(left_r, lcols, lcols), (right_r.unionByName(carried), rcols, rcols)],
                        nk + 1, schema, slots=slots)


@dataclasses.dataclass(frozen=True)
class _Cut:
    """The bounds of a split and each row's range among them: ``known`` ranges (None: from the
    left's rows, counted where the bounds are computed) on ``cores`` cores."""

    split: Split
    known: int | None
    cores: int

    @property
    def probes(self) -> int:
        """The bounds: one fewer than the ranges when known, else :data:`PROBES` (their positions
        then grouped into the ranges)."""
        return self.known - 1 if self.known else PROBES

    def sampled(self, v: str) -> str:
        """The values whose quantiles are the bounds: every ``v`` when the ranges were asked for, else
        the one in :data:`SAMPLE` whose hash is 0 modulo it (so the same on a recomputation; ranges
        only need to be of about equal size)."""
        return v if self.split.ranges else f"CASE WHEN pmod(xxhash64({v}), {SAMPLE}) = 0 THEN {v} END"

    def bounds(self, over: DataFrame, value: str, counted: str) -> DataFrame:
        """The one-row aggregate over ``over``: the bounds (quantiles of ``value``) and the number of
        ranges (known, or from the left rows ``counted``: one per :data:`RANGE_ROWS`, at least one
        per core once each holds :data:`MIN_RANGE_ROWS`), broadcast."""
        fractions = ", ".join(repr((i + 1) / (self.probes + 1)) for i in range(self.probes))
        ranges = str(self.known) if self.known else (
            f"CAST(least({self.probes + 1}, greatest(1, ceil({counted} / {RANGE_ROWS}), "
            f"least({self.cores}, ceil({counted} / {MIN_RANGE_ROWS})))) AS INT)")
        return F.broadcast(over.selectExpr(f"percentile_approx({value}, array({fractions}), {_ACCURACY}) AS {_BOUNDS}",
                                           f"{ranges} AS {_RANGES}"))

    def range_of(self, v: str, strict: bool = False) -> str:
        """The range of a numeric order ``v``: its position among the bounds (see :func:`_position`),
        scaled to the ranges."""
        return f"CAST(({_position(v, 0, self.probes, strict)}) * {_RANGES} DIV {self.probes + 1} AS INT)"


def bounds_at_right_rows(p: kmerge.MergeAsofParams, split: Split, right_types: Sequence[T.DataType]) -> bool:
    """Whether a split's bounds are the right's match values, so that each left row finds its pick
    in its own range and nothing is carried between ranges: a key-less join (with keys, a bound
    is one key's value, not every key's), its two match values of one type with an exact numeric
    order (not decimals, cast to doubles), and not a nearest join without exact matches (a left
    row at a bound would need the range below it too)."""
    on = split.on_type
    return (p.nkeys == 0 and not isinstance(on, T.DecimalType) and (not right_types or right_types[0] == on)
            and not (p.rule.direction == "nearest" and not p.rule.exact))


def _right_rows_enough(left: Estimate, right: Estimate) -> bool:
    """Whether Spark's plan says the right has at least one row per :data:`RIGHT_SHARE` left rows
    (its row count or size known, the left's at least bounded):
    ranges cut at right rows then hold about equal left rows where the two sides spread alike (a
    right of a few rows, say a currency's rates against a year of trades, would leave most left
    rows in one range; its join carries rows between ranges cut at the left's quantiles instead)."""
    lrows = left.rows if left.known else left.bound  # at most this many (a Python list's: its batches')
    return right.known and lrows is not None and right.rows * RIGHT_SHARE >= lrows


def _carried(right: DataFrame, by: list[str], rk: str, data: list[str], direction: str, last: int) -> DataFrame:
    """Per key and range, the right rows a left row of the range may pick from other ranges:
    the last row of the nearest earlier range with rows, the first of the nearest later one."""
    row = F.struct(*[F.col(c) for c in data])  # ordered by the match value, then the other columns
    w = Window.partitionBy(*by).orderBy(rk)
    r = F.col(rk)
    per = right.groupBy(*by, rk).agg(F.max(row).alias("sdasof_last"), F.min(row).alias("sdasof_first")) \
        .withColumn("sdasof_next", F.lead(r).over(w)).withColumn("sdasof_prev", F.lag(r).over(w))
    parts: list[DataFrame] = []

    def rows(source: str, start: Column, stop: Column) -> DataFrame:
        span = F.sequence(start, F.greatest(start, stop))
        out = per.select(*by, F.col(source).alias("sdasof_row"), F.explode(span).alias(rk),
                         start.alias("sdasof_lo"), stop.alias("sdasof_hi"))
        out = out.where((F.col(rk) >= F.col("sdasof_lo")) & (F.col(rk) <= F.col("sdasof_hi")))
        return out.select(*by, *[F.col(f"sdasof_row.{c}").alias(c) for c in data], rk)

    if direction in ("backward", "nearest"):  # ranges after r, up to the next range with rows
        parts.append(rows("sdasof_last", r + 1, F.coalesce(F.col("sdasof_next"), F.lit(last))))
    if direction in ("forward", "nearest"):  # ranges before r, from the previous range with rows
        parts.append(rows("sdasof_first", F.coalesce(F.col("sdasof_prev"), F.lit(0)), r - 1))
    return functools.reduce(lambda a, b: a.unionByName(b), parts).select(*right.columns)
