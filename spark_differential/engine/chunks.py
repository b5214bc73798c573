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

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, qcols
from spark_differential.core.lattice import TimeType, Total

log = logging.getLogger("spark_differential.iterate")

CHUNK = "_sd_chunk"
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
    leaf = ttype.encode_column(F.col(TIME))[0]
    per_input = None
    for df in inputs:
        g = df.groupBy(*qcols(_data(df))).agg(
            F.sum(DIFF).alias("_s"), F.min(leaf).alias("_lo"), F.max(leaf).alias("_hi"), F.count(F.lit(1)).alias("_n")
        )
        r = g.agg(
            F.sum("_n").alias("n"), F.sum(F.when(F.col("_s") != 0, 1).otherwise(0)).alias("live"),
            F.min("_lo").alias("lo"), F.max("_hi").alias("hi"),
        )
        per_input = r if per_input is None else per_input.unionByName(r)
    assert per_input is not None
    rows = [r for r in per_input.collect() if r["n"] is not None and r["lo"] is not None]
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
