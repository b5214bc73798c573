"""The state of one running ``dd_iterate`` loop on the distributed path.

On ``(data, time, diff)``: inside a loop times are ``(t, i)`` (outer time, iteration) under
the product order.  The loop runs iteration after iteration; every stateful operator call
site of its body (identified by the order of the body's calls, which must be the same every
iteration) keeps a :class:`Slot`: the trace of each loop input
(:class:`~spark_differential.trace.spark.SparkTrace`, advanced in place to the current
iteration: all inputs are closed, so ``advance((t, j), {(bottom, i)}) = (t, max(i, j))``,
seed 004, and traces are kept over the outer time only, seed 001's "update in place"), the
prepared collections from outside the loop (which change at iteration 0 alone), or a packed
trace (:mod:`.packed`).  :class:`LoopContext` holds the slots and the iteration's
bookkeeping (what to free, what is known consolidated).  :func:`stamp` and :func:`strip`
put and take away the iteration coordinate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, inspect, qcols
from spark_differential.core.lattice import LOOP_OUTER, Loop, TimeType
from spark_differential.engine.chunks import Chunks
from spark_differential.errors import IterationError
from spark_differential.trace.spark import (
    SparkTrace,
    cache,
    checkpoint,
    collect_garbage,
    consolidated_collection,
    release,
)
from spark_differential.trace.spine import Spine, default_policy

GC_SHARE = 0.25  # hint the driver GC once checkpoints dropped since the last hint are this share of all dropped


@dataclass
class Slot:
    """What one stateful operator call site of a body keeps across iterations."""

    op: str
    n_inputs: int
    traces: dict[int, SparkTrace] = field(default_factory=dict)  # each loop input's trace
    outer: dict[int, DataFrame] = field(default_factory=dict)  # each outer input, prepared once
    outer_rows: dict[int, int] = field(default_factory=dict)
    # the trace packed per key (one blob per key, loop.packed): batches of (its blobs, the checkpoint
    # behind them), newest last, sized in keys
    packed: Spine[tuple[DataFrame, DataFrame]] = field(default_factory=lambda: Spine(default_policy()))
    resident: list[int] = field(default_factory=list)  # iterations whose loop variable is its output rows (ITER)
    emit: Callable[[DataFrame], DataFrame] | None = None  # a packed checkpoint's output rows as the collection
    nested: NestedState | None = None

    def cached(self) -> list[DataFrame]:
        """Everything the slot keeps materialised."""
        return ([cp for t in self.traces.values() for cp in t.checkpoints()] + list(self.outer.values())
                + [cp for _, cp in self.packed.batches])


@dataclass
class NestedState:
    """A ``dd_iterate`` called inside another loop's body (recomputed per outer iteration)."""

    acc_input: DataFrame | None = None
    previous: DataFrame | None = None
    captured: dict[tuple[int, int], DataFrame] = field(default_factory=dict)


class LoopContext:
    """The state of one running loop: its iteration and its operators' traces."""

    def __init__(self, loop_t: Loop, spark: Any, captured: dict[tuple[int, int], DataFrame] | None) -> None:
        self.loop_id = loop_t.loop_id
        self.inner = loop_t.inner
        self.spark = spark
        self.iteration = 0
        self.slots: list[Slot] = []
        self.cursor = 0
        self.nparts = settings.shuffle_partitions(spark)
        self.nbuckets = settings.buckets(spark)
        self.captured_store = captured  # accumulated captured collections, owned by the enclosing loop
        self.captured_now: dict[tuple[int, int], DataFrame] = {}
        self.transient: list[DataFrame] = []  # operator outputs of the current iteration
        self.consolidated: list[DataFrame] = []  # outputs of this iteration known to be consolidated
        self.resident: list[tuple[DataFrame, Slot, int]] = []  # of those, outputs held by a packed checkpoint, rows
        self.loose = False  # this iteration left materialised data for the driver GC to free
        self.chunks: Chunks | None = None  # time chunks the loop runs in (see spark_differential.engine.chunks)
        self.discovering = False  # a first call of the body that only records what enters the loop
        self.entering: list[DataFrame] = []  # collections from outside all loops, seen while discovering
        self.weight = 1  # changes of the loop variable this iteration: the size estimate of new trace batches
        self.churned = 0  # rows (estimated) the loop has materialised and dropped so far
        self.dropped = 0  # of those, rows dropped since the last GC hint

    def drop(self, rows: int) -> None:
        """Record an estimate of materialised rows nothing references any more."""
        self.churned += rows
        self.dropped += rows

    def collect_garbage(self) -> None:
        """Hint the driver GC when what was dropped since the last hint is a large share of
        all the loop dropped (each hint is a full driver GC: 1-2 s with large caches).

        Iterations whose changes still grow drop about as much as everything before them and
        hint every time; the long tail of small iterations, and merges of small batches,
        wait until their garbage adds up to ``GC_SHARE`` of the loop's rows.  Nothing
        dropped (every checkpoint of the iteration freed explicitly): no hint.
        """
        if self.dropped and self.dropped >= GC_SHARE * self.churned:
            collect_garbage(self.spark)
            self.dropped = 0

    def begin(self, iteration: int) -> None:
        self.iteration = iteration
        self.cursor = 0
        self.consolidated = []
        self.resident = []
        self.loose = False

    def is_consolidated(self, df: DataFrame) -> bool:
        """Whether ``df`` is an operator output of this iteration already consolidated."""
        return any(df is c for c in self.consolidated)

    def drop_transient(self) -> None:
        for df in self.transient:
            df.unpersist()
            release(df)
        self.transient = []

    def end(self) -> None:
        if self.cursor != len(self.slots):
            raise IterationError(
                f"dd_iterate: the body called {self.cursor} stateful operators at iteration {self.iteration} but "
                f"{len(self.slots)} before; the body must call the same operators in the same order every time"
            )

    def next_slot(self, op: str, n_inputs: int) -> tuple[int, Slot]:
        i = self.cursor
        self.cursor += 1
        if i < len(self.slots):
            slot = self.slots[i]
            if slot.op != op or slot.n_inputs != n_inputs:
                raise IterationError(
                    f"dd_iterate: at iteration {self.iteration} the body's operator #{i + 1} is {op} but it was "
                    f"{slot.op} before; the body must call the same operators in the same order every time"
                )
            return i, slot
        if self.iteration > 0:
            raise IterationError(
                f"dd_iterate: at iteration {self.iteration} the body called a new operator ({op}); the body must "
                "call the same operators in the same order every time"
            )
        slot = Slot(op, n_inputs)
        self.slots.append(slot)
        return i, slot

    def captured(self, key: tuple[int, int], df: DataFrame, cs: CollectionSchema) -> DataFrame:
        """The accumulated form (outer time) of a collection captured from the enclosing loop."""
        if key in self.captured_now:
            return self.captured_now[key]
        if self.captured_store is None:  # pragma: no cover - guarded by the caller
            raise IterationError("dd_iterate: internal error: no enclosing loop for a captured collection")
        delta = strip(df, cs)
        prev = self.captured_store.get(key)
        acc = checkpoint(consolidated_collection(delta if prev is None else prev.unionByName(delta), list(cs.data_cols)))
        self.captured_store[key] = acc
        self.captured_now[key] = acc
        return acc

    def release(self) -> None:
        """Free everything the loop kept: it is over (its result is materialised apart)."""
        self.drop_transient()
        for slot in self.slots:
            for df in slot.cached():
                df.unpersist()
                release(df)

    def materialise(self, df: DataFrame) -> DataFrame:
        """Compute ``df`` now, once, and cut its lineage (nothing runs while discovering).

        An operator's new updates are read by its kernel, by the touched-key selection
        and later as trace; a cache filled lazily inside one job can be computed by
        several of its stages at once, so the upstream kernels would run again.
        """
        return cache(df) if self.discovering else checkpoint(df)

    def enters(self, df: DataFrame, ttype: TimeType) -> None:
        """Record, while discovering, a collection from outside all loops entering at ``ttype``."""
        if not self.discovering:
            return
        if ttype != inspect(df, op="dd_iterate").ttype:
            raise NotChunkable(f"a collection enters at {ttype.describe()}, not its own time type")
        self.entering.append(df)


class NotChunkable(Exception):
    """Raised while discovering a body that time chunks cannot serve (the loop runs unsliced)."""


def strip(df: DataFrame, cs: CollectionSchema) -> DataFrame:
    """A loop collection's updates at their outer times (the iteration coordinate dropped)."""
    return df.select(*qcols(cs.data_cols), F.col(TIME).getField(LOOP_OUTER).alias(TIME), DIFF)


def stamp(df: DataFrame, data: Sequence[str], loop_t: Loop, iteration: int, time_col: Any = None) -> DataFrame:
    """Set the loop coordinate of ``df``'s times (``time_col`` gives the outer time)."""
    outer = F.col(TIME).getField(LOOP_OUTER) if time_col is None else time_col
    t = F.struct(outer.alias(LOOP_OUTER), F.lit(iteration).cast("int").alias(loop_t.iter_field))
    return df.select(*qcols(data), t.alias(TIME), F.col(DIFF).cast("long").alias(DIFF))
