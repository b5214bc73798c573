"""Time chunks: a loop over totally ordered times run as independent slices of time.

On ``(data, time, diff)`` with a totally ordered time, cut the time axis into
``count`` chunks ``[s_c, s_c + width)`` with ``s_c = t0 + c * width``.  The
*chunked form* of a collection ``X`` holds, for every chunk ``c``:

* ``X``'s own updates at times inside the chunk, and
* at ``s_c``, ``X`` accumulated strictly before ``s_c`` (the chunk's snapshot).

Read as the updates of chunk ``c`` alone, it accumulates at every ``t`` of the
chunk to exactly ``acc(X, t)``.  A computation whose answer at ``t`` depends only
on its inputs accumulated at ``t`` (the fixed point of ``dd_iterate``, SPEC section
2) can therefore run on each chunk separately, provided chunks never meet: every
stateful operator adds the chunk (:meth:`Chunks.of`, a function of the time, as
every output time is the lub of input times of one chunk) to its key.
:meth:`Chunks.unchunked` turns the per-chunk answers into one collection: chunk
``c``'s answer, accumulated, is retracted at ``s_{c+1}`` where chunk ``c + 1``'s
snapshot takes over; where nothing changes at ``s_{c+1}`` the two cancel.

Why: with all changes present at once and every time distinct, an operator's
trace keeps a key's whole history (nothing compacts), so each iteration of a
loop meets that whole history.  Per chunk, a key's history is its snapshot plus
one chunk of changes: seed 001 gets the same effect by processing times in
order and compacting traces to the input frontier.  The snapshots cost about
``count`` times the live size of the inputs, which is why the number of chunks
follows ``updates / live rows``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, qcols
from spark_differential.core.lattice import TimeType, Total
from spark_differential.core.names import CHUNK, PART

log = logging.getLogger("spark_differential.iterate")

AUTO_MIN_ROWS = 2000  # below this many updates per chunk, slicing time costs more than it saves
# inside one task (spark_differential.intask) a chunk's fixed cost is its snapshot's rows met
# again at every iteration, while its gain (short key histories) is mostly taken by the traced
# dd_min's kept output and the join against unchanging edges: there the automatic chunk holds
# LOCAL_FACTOR times the live rows, at least LOCAL_MIN_ROWS updates.  BFS in-task CPU with 2
# threads, 2,000 live edges (benchmarks/bfs_task.py): 10^5 distinct times 1.10 s (101 chunks of
# the live size) against 0.85 s (7 chunks), 10^6 13.9 s (1,001 chunks) against 10.5 s (63), and
# 10^4 (22,001 updates) unchunked 0.06 against 0.21 s in 11 chunks
LOCAL_FACTOR = 16
LOCAL_MIN_ROWS = 32_000
_MAX_SPAN = 1 << 62  # encoded time spans beyond this are not sliced (int64 arithmetic must not overflow)


@dataclass(frozen=True)
class Chunks:
    """``count`` chunks of ``width`` (in the time's int64 encoding) starting at ``t0``."""

    ttype: Total
    t0: int
    width: int
    count: int

    @property
    def last(self) -> int:
        """Start of the last chunk."""
        return self.t0 + (self.count - 1) * self.width

    def of(self, time_col: Column, ttype: TimeType | None = None) -> Column:
        """The chunk of a time: its start ``s_c`` as a bigint (exact integer arithmetic)."""
        leaf = (ttype or self.ttype).encode_column(time_col)[0]
        return (leaf - F.pmod(leaf - F.lit(self.t0), F.lit(self.width))).cast("long")

    def _time(self, start: Column, like: DataFrame) -> Column:
        return self.ttype.decode_columns([start]).cast(like.schema[TIME].dataType)

    def chunked(self, df: DataFrame) -> DataFrame:
        """The chunked form of a collection from outside the loop (same columns)."""
        data = _data(df)
        # one shuffle by the data serves the sums per chunk and the window over chunks
        src = df.repartition(*qcols(data)) if data else df
        per = src.groupBy(*qcols(data), self.of(F.col(TIME)).alias(CHUNK)).agg(F.sum(DIFF).cast("long").alias("_s"))
        w = Window.partitionBy(*qcols(data)).orderBy(CHUNK)
        acc = per.select(
            *qcols(data),
            CHUNK,
            F.sum("_s").over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("_acc"),
            F.lead(CHUNK).over(w).alias("_next"),
        )
        # the accumulation after chunk c is the snapshot of every later chunk up to the next change
        first = F.col(CHUNK) + F.lit(self.width)
        stop = F.coalesce(F.col("_next"), F.lit(self.last))
        snap = acc.where((F.col("_acc") != 0) & (first <= stop)).select(
            *qcols(data), F.explode(F.sequence(first, stop, F.lit(self.width))).alias(CHUNK), F.col("_acc").alias(DIFF)
        )
        own = df.select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF))
        return own.unionByName(snap.select(*qcols(data), self._time(F.col(CHUNK), df).alias(TIME), DIFF))

    def unchunked(self, df: DataFrame) -> DataFrame:
        """Per-chunk answers (a collection in chunked form) as one collection (not consolidated)."""
        data = _data(df)
        ends = (
            df.groupBy(*qcols(data), self.of(F.col(TIME)).alias(CHUNK))
            .agg(F.sum(DIFF).cast("long").alias("_s"))
            .where((F.col("_s") != 0) & (F.col(CHUNK) < F.lit(self.last)))
        )
        retract = ends.select(
            *qcols(data), self._time(F.col(CHUNK) + F.lit(self.width), df).alias(TIME), (-F.col("_s")).alias(DIFF)
        )
        return df.select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF)).unionByName(retract)


def _sizes(ttype: Total, inputs: Sequence[DataFrame]) -> DataFrame:
    """One row per input: its updates ``n``, live rows (data with a nonzero accumulated
    count) ``live`` and encoded time range ``lo``..``hi`` (a plan, no job)."""
    leaf = ttype.encode_column(F.col(TIME))[0]
    out = None
    for df in inputs:
        g = df.groupBy(*qcols(_data(df))).agg(
            F.sum(DIFF).alias("_s"), F.min(leaf).alias("_lo"), F.max(leaf).alias("_hi"), F.count(F.lit(1)).alias("_n"))
        r = g.agg(
            F.sum("_n").alias("n"), F.sum(F.when(F.col("_s") != 0, 1).otherwise(0)).alias("live"),
            F.min("_lo").alias("lo"), F.max("_hi").alias("hi"),
        )
        out = r if out is None else out.unionByName(r)
    assert out is not None
    return out


def _data(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c not in (TIME, DIFF)]


def layout(n: int, live: int, lo: int | None, hi: int | None, setting: int | None, factor: int = 1,
           floor: int = AUTO_MIN_ROWS) -> tuple[int, int, int] | None:
    """``(start, width, count)`` of the chunks for ``n`` updates (``live`` rows live at the end)
    over encoded times ``lo..hi``, ``setting`` updates per chunk (``None``: ``factor`` times
    the live size, at least ``floor``); ``None`` when fewer than two chunks would do."""
    if lo is None or hi is None or hi - lo >= _MAX_SPAN:
        return None
    per_chunk = setting if setting is not None else max(factor * live, floor)
    wanted = n // max(1, per_chunk)
    if wanted < 2:
        return None
    width = max(1, -(-(hi - lo + 1) // wanted))
    count = (hi - lo) // width + 1
    return (lo, width, count) if count >= 2 else None


def plan(ttype: TimeType, inputs: Sequence[DataFrame], setting: int | None) -> Chunks | None:
    """Chunks for a loop whose entering collections are ``inputs`` (or ``None``: do not slice).

    One aggregate query over all inputs (one row per input, collected together) measures
    their updates, live rows (data with a nonzero accumulated count) and time range.
    ``setting`` is the number of updates per chunk (``None``: the live size, at least
    ``AUTO_MIN_ROWS``).
    """
    if setting == 0 or not isinstance(ttype, Total) or not inputs:
        return None
    rows = [r for r in _sizes(ttype, inputs).collect() if r["n"] is not None and r["lo"] is not None]
    n = sum(int(r["n"]) for r in rows)
    live = sum(int(r["live"]) for r in rows)
    lo = min((int(r["lo"]) for r in rows), default=None)
    hi = max((int(r["hi"]) for r in rows), default=None)
    shape = layout(n, live, lo, hi, setting)
    if shape is None:
        return None
    _, width, count = shape
    log.info(
        "dd_iterate: %d updates (%d live) over %d time chunks of width %d: chunks run independently",
        n, live, count, width,
    )
    return Chunks(ttype, lo, width, count)


SPREAD_PROBES = 512  # time quantiles the spread plan measures (its slices are cut at them)


@dataclass(frozen=True)
class Spread:
    """Time cut at ``starts`` (encoded, ascending; the first is the lowest time) into
    slices, each run by a task of its own.

    The *spread form* of a collection ``X`` holds, for slice ``g`` (column :data:`PART`):
    ``X``'s updates at times of the slice and, for every slice but the first, ``X``
    accumulated strictly before ``starts[g]``, at the time ``starts[g] - 1`` (its
    *snapshot*).  Read alone, a slice's rows accumulate at every time from
    ``starts[g] - 1`` on to exactly ``acc(X, t)``; a computation whose answer at ``t``
    depends only on its inputs accumulated at ``t`` then gives, on the slice alone, the
    answer's exact updates at every time of the slice (the update at ``starts[g]`` is
    the answer there minus the answer at ``starts[g] - 1``, which accumulates everything
    before).  Each slice's answer is the whole answer's rows at the slice's times once
    its rows at ``starts[g] - 1`` are dropped: no answer meets another slice's.
    """

    ttype: Total
    starts: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.starts)

    def drops(self) -> tuple[int | None, ...]:
        """For every slice, the encoded time of its snapshot (``None`` for the first)."""
        return (None, *(s - 1 for s in self.starts[1:]))

    def of(self, time_col: Column) -> Column:
        """The slice of a time (an int, ``0`` to ``count - 1``)."""
        leaf = self.ttype.encode_column(time_col)[0]
        cuts = F.array(*[F.lit(s) for s in self.starts[1:]]) if self.count > 1 else None
        if cuts is None:
            return F.lit(0)
        return F.size(F.filter(cuts, lambda c: c <= leaf)).cast("int")

    def spread(self, df: DataFrame) -> DataFrame:
        """The spread form of a collection from outside the loop: its columns and :data:`PART`."""
        data = _data(df)
        own = df.select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF), self.of(F.col(TIME)).alias(PART))
        if self.count < 2:
            return own
        per = own.groupBy(*qcols(data), PART).agg(F.sum(DIFF).cast("long").alias("_s"))
        w = Window.partitionBy(*qcols(data)).orderBy(PART)
        acc = per.select(
            *qcols(data), PART,
            F.sum("_s").over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("_acc"),
            F.lead(PART).over(w).alias("_next"),
        )
        # the accumulation after slice g is the snapshot of every later slice up to the next change
        first = F.col(PART) + F.lit(1)
        stop = F.coalesce(F.col("_next"), F.lit(self.count - 1))
        snap = acc.where((F.col("_acc") != 0) & (first <= stop)).select(
            *qcols(data), F.explode(F.sequence(first, stop)).alias(PART), F.col("_acc").alias(DIFF))
        before = F.array(*[F.lit(s - 1) for s in self.starts])
        at = self.ttype.decode_columns([F.element_at(before, F.col(PART) + 1)]).cast(df.schema[TIME].dataType)
        return own.unionByName(snap.select(*qcols(data), at.alias(TIME), DIFF, PART))


@dataclass(frozen=True)
class SpreadSizes:
    """What one job measures of a loop's entering collections to slice its time: updates,
    live rows (data with a nonzero accumulated count: ``exact``, or bounded above by the
    distinct data ever seen, counted by HyperLogLog), the first encoded time, and time
    quantiles."""

    n: int
    live: int
    lo: int
    quantiles: tuple[int, ...]
    exact: bool = False


# time values read (at least, in a sample) for a slices' plan's quantiles: 100 per probe
QUANTILE_SAMPLE = 100 * SPREAD_PROBES
# HyperLogLog's relative standard deviation for the distinct data of a slices' plan, and the
# margin over its count that bounds the live rows (three deviations)
DISTINCT_RSD = 0.02
DISTINCT_MARGIN = 1 + 3 * DISTINCT_RSD


def measure_spread(ttype: TimeType, inputs: Sequence[DataFrame], at_least: int = 0) -> SpreadSizes | None:
    """:class:`SpreadSizes` of ``inputs`` (a totally ordered time) in one job of partial
    aggregates (no shuffle of the updates): the live rows bounded by the distinct data;
    ``None`` when they hold no update.  :func:`exact_live` counts them exactly.

    ``at_least``: the inputs are known to hold at least that many updates; the time
    quantiles are then read from a sample of about :data:`QUANTILE_SAMPLE` of them (the
    quantile sketch costs more than the rest of the job: 3.4 of 5.6 s over 2 x 10^7
    updates, 0.7 s over a 2% sample)."""
    leaf = ttype.encode_column(F.col(TIME))[0]
    rows = None
    times = None
    for df in inputs:
        data = _data(df)
        distinct = (F.approx_count_distinct(F.xxhash64(*qcols(data)), DISTINCT_RSD) if data
                    else F.lit(1).cast("bigint"))
        r = df.agg(F.count(F.lit(1)).alias("n"), distinct.alias("live"), F.min(leaf).alias("lo"),
                   F.lit(None).cast("array<bigint>").alias("q"))
        rows = r if rows is None else rows.unionByName(r)
        t = df.select(leaf.alias("_t"))
        times = t if times is None else times.unionByName(t)
    assert rows is not None and times is not None
    if at_least > 2 * QUANTILE_SAMPLE:
        times = times.sample(QUANTILE_SAMPLE / at_least, seed=at_least)
    probes = [i / SPREAD_PROBES for i in range(1, SPREAD_PROBES)]
    q = times.agg(F.percentile_approx("_t", probes, 10 * SPREAD_PROBES).alias("q")).select(
        *[F.lit(None).cast("bigint").alias(c) for c in ("n", "live", "lo")], "q")
    got = rows.unionByName(q).collect()
    sizes = [r for r in got if r["q"] is None and r["n"] and r["lo"] is not None]
    if not sizes:
        return None
    quantiles = tuple(int(x) for r in got if r["q"] is not None for x in r["q"] if x is not None)
    bound = sum(min(int(r["n"]), math.ceil(int(r["live"]) * DISTINCT_MARGIN)) for r in sizes)
    return SpreadSizes(sum(int(r["n"]) for r in sizes), bound, min(int(r["lo"]) for r in sizes), quantiles)


def exact_live(ttype: TimeType, inputs: Sequence[DataFrame], sizes: SpreadSizes) -> SpreadSizes:
    """``sizes`` with the live rows counted exactly (one job: the updates grouped by data)."""
    assert isinstance(ttype, Total)
    live = sum(int(r["live"] or 0) for r in _sizes(ttype, inputs).select("live").collect())
    return dataclasses.replace(sizes, live=live, exact=True)


def spread_of(ttype: TimeType, sizes: SpreadSizes, per_task: int, tasks: int) -> Spread | None:
    """Slices of time for collections of ``sizes``: at most about ``per_task`` updates a
    slice, a multiple of ``tasks`` slices (each a task: the cores to keep busy), cut at time
    quantiles.  ``None`` when the live rows (every slice's snapshot) leave less than half of
    ``per_task`` for updates: slicing time cannot make such a loop fit a task."""
    n, live, lo, quantiles = sizes.n, sizes.live, sizes.lo, sizes.quantiles
    room = per_task - live
    if not fits(sizes, per_task):
        log.info("dd_iterate: %s%d live rows leave too little of a task's %d rows to slice time",
                 "" if sizes.exact else "up to ", live, per_task)
        return None
    count = max(tasks, -(-n // room))
    count = -(-count // tasks) * tasks  # whole rounds of tasks: no core idles through a last slice alone
    cuts = sorted({quantiles[min(len(quantiles) - 1, round(i * len(quantiles) / count))]
                   for i in range(1, count)} if quantiles else set())
    starts = (lo, *(c for c in cuts if c > lo))
    if len(starts) < 2:
        return None
    log.info("dd_iterate: %d updates (%s%d live) over %d slices of time, each in a task of its own",
             n, "" if sizes.exact else "at most ", live, len(starts))
    return Spread(ttype, starts)


def plan_spread(ttype: TimeType, inputs: Sequence[DataFrame], per_task: int, tasks: int, at_least: int = 0,
                keyed: int = 0) -> tuple[Spread | None, int]:
    """Slices of time for a loop too large for one task, planned over its entering
    collections (:func:`measure_spread`, :func:`spread_of`), and the updates the plan counted
    (0: none).  ``None`` when the time is not totally ordered or the loop cannot be sliced
    to fit a task.  Where the distinct data may not leave room, a second job counts the
    live rows exactly, unless the input holds at most ``keyed`` updates (key partitions
    hold it: they go next).  ``at_least``: see :func:`measure_spread`."""
    if not isinstance(ttype, Total) or not inputs or per_task <= 0:
        return None, 0
    sizes = measure_spread(ttype, inputs, at_least)
    if sizes is None:
        return None, 0
    if not fits(sizes, per_task):
        if sizes.n <= keyed:
            log.info("dd_iterate: up to %d live rows (distinct data) in %d input rows", sizes.live, sizes.n)
            return None, sizes.n
        sizes = exact_live(ttype, inputs, sizes)
    return spread_of(ttype, sizes, per_task, tasks), sizes.n


def fits(sizes: SpreadSizes, per_task: int) -> bool:
    """Whether the live rows leave at least half of a task's ``per_task`` rows for updates."""
    return per_task - sizes.live >= per_task // 2
