"""Plain-table as-of joins in one stage, a key's timeline split into ranges of the match value.

On ``(data, time, diff)``: a plain table is one snapshot (every row once, at one time),
and the join of two snapshots is a plain table again; nothing here is differential.
Both tables, in kernel form, are placed by ``by`` key and joined by the kernel once per
partition (:func:`spark_differential.kernels.asof_merge.merge_asof`, its one-snapshot
path), which names the output columns itself.

Without ``by`` keys every row has one key: one task would hold both whole tables.  So a
key-less join (or any join asked to, ``ranges=``) is cut into ranges of the match value,
the range joining the key: left rows go to the range of their match value, right rows
too, and each range also gets the right rows a left row of it may pick from another
range: the *last* right row of the nearest earlier range that has one (backward and
nearest joins) and the *first* of the nearest later one (forward and nearest).  Values
equal to a boundary fall in one range on both sides, so a pick never crosses more than
that one row, and a range's task holds its own rows and two carried rows per key.

The boundaries are quantiles of the left's match values (``percentile_approx`` over
their numeric order: microseconds, days, doubles; an automatic split takes them from the
one left row in :data:`SAMPLE` whose match value hashes to 0 modulo it, which keeps the
ranges about equal and the aggregation cheap) computed in the plan, not by a job of
their own: a one-row aggregate broadcast to both sides, the number of ranges following
its row count (:data:`RANGE_ROWS` left rows per range), each row's range found by a
binary search written as nested ``CASE``\\ s.  Right and full joins are not split (a
right row's fate depends on every range's picks), nor are string, binary or boolean
match values (no numeric order to take quantiles of).  Nor is a join whose left side Spark's
plan knows to be at most :data:`MIN_RANGE_ROWS` rows it holds already (local rows, a cached
table: :func:`few_rows`): it would be one range anyway.
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
from spark_differential.intask.sources import estimated_rows
from spark_differential.kernels import asof_merge as kmerge
from spark_differential.kernels.common import keys, names

PROBES = 64  # quantiles computed: at most PROBES + 1 ranges
RANGE_ROWS = 1_000_000  # left rows per range of an automatically split join
MIN_RANGE_ROWS = 50_000  # fewer left rows per range than this: fewer ranges than cores
SAMPLE = 16  # an automatic split takes its quantiles from one left row in SAMPLE (by hash)
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


def _position(v: str, lo: int, hi: int) -> str:
    """How many of the bounds ``lo + 1 .. hi`` (1-based, ascending) are ``<= v``, plus ``lo``:
    a binary search as nested CASEs (``log2`` comparisons per row, compiled by Spark)."""
    if lo == hi:
        return str(lo)
    mid = (lo + hi) // 2
    return (f"CASE WHEN {v} < element_at({_BOUNDS}, {mid + 1}) THEN {_position(v, lo, mid)} "
            f"ELSE {_position(v, mid + 1, hi)} END")


def _range_of(v: str, probes: int) -> str:
    """The range of a numeric order ``v``: its position among the bounds, scaled to the ranges."""
    return f"CAST(({_position(v, 0, probes)}) * {_RANGES} DIV {probes + 1} AS INT)"


@dataclasses.dataclass(frozen=True)
class Split:
    """How to cut a plain-table join: the match value's type, the join's direction, and the
    number of ranges (None: from the left's row count)."""

    on_type: T.DataType
    ranges: int | None = None


def few_rows(df: DataFrame) -> bool:
    """Whether Spark's plan says, without a job, that ``df`` holds at most :data:`MIN_RANGE_ROWS`
    rows it has already (local rows, a cached table): a join of so few left rows is one range,
    and not cutting it spares the quantiles' and the carried rows' stages."""
    estimate = estimated_rows([df])
    rows = estimate.rows if estimate.known else estimate.bound  # (a Python list's: bounded by its batches)
    return estimate.held and rows is not None and rows <= MIN_RANGE_ROWS


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
    if split is None or not splittable(p, split, right_types) or (split.ranges is None and few_rows(sides[0][0])):
        return run_pair_sql(kernel, p, sides, p.nkeys, schema)
    (ldf, litems, llabels), (rdf, ritems, rlabels) = sides
    left = ldf.selectExpr(*[f"{i} AS {n}" for i, n in zip(litems, llabels)])
    right = rdf.selectExpr(*[f"{i} AS {n}" for i, n in zip(ritems, rlabels)]).where("_b0 IS NOT NULL")
    probes = max(PROBES, (split.ranges or 0) - 1)
    v_left = numeric_order("_a0", split.on_type)
    v_right = numeric_order("_b0", split.on_type)
    fractions = ", ".join(repr((i + 1) / (probes + 1)) for i in range(probes))
    count = F.count(F.lit(1))
    # at least a range per core once each holds MIN_RANGE_ROWS left rows: a key-less join keeps them busy
    cores = F.least(F.lit(settings.parallelism(ldf.sparkSession)), F.ceil(count / F.lit(MIN_RANGE_ROWS)))
    ranges = F.lit(split.ranges) if split.ranges else F.least(
        F.lit(probes + 1), F.greatest(F.lit(1), F.ceil(count / F.lit(RANGE_ROWS)), cores)).cast("int")
    # the quantiles of an automatic split from a sample of 1 left row in SAMPLE, chosen by the hash of its
    # match value (so the same on a recomputation); ranges only need to be of about equal size
    sample = v_left if split.ranges else f"CASE WHEN pmod(xxhash64({v_left}), {SAMPLE}) = 0 THEN {v_left} END"
    stats = left.agg(F.expr(f"percentile_approx({sample}, array({fractions}), {_ACCURACY})").alias(_BOUNDS),
                     ranges.alias(_RANGES))
    nk = p.nkeys
    rk = keys(nk + 1)[-1]
    bounds = F.broadcast(stats)
    left_r = left.crossJoin(bounds).selectExpr(*left.columns, f"{_range_of(v_left, probes)} AS {rk}")
    right_r = right.crossJoin(bounds).selectExpr(*right.columns, f"{_range_of(v_right, probes)} AS {rk}")
    carried = _carried(right_r, keys(nk), rk, names("_b", p.nb), p.rule.direction, probes)
    params = dataclasses.replace(p, nkeys=nk + 1)
    lcols, rcols = left_r.columns, right_r.columns
    return run_pair_sql(kernel, params, [(left_r, lcols, lcols), (right_r.unionByName(carried), rcols, rcols)],
                        nk + 1, schema, slots=None if nk else (rk, probes + 1))


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
