"""Differential iteration: ``dd_iterate``.

On ``(data, time, diff)``: ``c.dd_iterate(body)`` accumulates, at every time ``t``,
to the fixed point of ``x = body(x)`` started from ``c`` at ``t`` (seed 000,
"Adding loops")::

    x[(t, 0)] = c[t];   x[(t, i)] = body(x[(t, i-1)]);   result[t] = x[(t, ∞)]

Inside the loop times are ``(t, i)`` under the product order (``Loop`` times).  The
loop runs iteration after iteration on the driver, but the work of iteration ``i``
follows the *differences* at ``i`` (semi-naive):

* ``body`` is called once per iteration with the loop variable's **changes** at
  that iteration.  Linear transformations (``select``/``where``/``withColumn``
  keeping ``time``/``diff``) map changes to changes.
* Each stateful operator in the body keeps a **trace** of its inputs across
  iterations (identified by the order in which the body calls operators, which
  must be the same every iteration).  At iteration ``i`` it is handed the new
  updates and, for the keys they touch only, its trace, and returns
  ``F(trace + new) - F(trace)``.  A join whose other input comes from outside the
  loop keeps no trace of its loop input: the join is bilinear, and that history
  would only meet changes of the other input, which happen at iteration 0 alone.
* All inputs of a batch job are closed, so the frontier at iteration ``i`` is
  ``{(⊥, i)}`` and ``advance((t, j), {(⊥, i)}) = (t, max(i, j))`` (seed 004): trace
  updates from earlier iterations advance to the current one, i.e. traces are kept
  over the outer time ``t`` only and consolidated in place (seed 001, "update in
  place").  Memory follows the distinct outer-time history, not the number of
  iterations.
* A reduction of the loop collection whose data columns are ``long`` keeps its trace
  *packed*: one row per key holding the key's consolidated updates as one binary
  value (:mod:`spark_differential.kernels.packed`).  Its kernel gets the new updates
  and the packed traces of the keys they touch, and returns its output and those
  keys' traces with the updates merged in, which replace them.  A touched key's
  history then crosses to Python as one value instead of one row per update.
* Collections from outside the loop (``edges``) enter at iteration 0 automatically
  (their changes are all at iteration 0).
* Lineage is cut every iteration (local checkpoints), so hundreds of iterations
  plan as fast as the first.  Each checkpoint is a Spark job, so an iteration writes
  its state in few of them: an operator's new trace batch together with the merge of
  older batches, a packed operator's output and trace blobs together (two filtered
  views of one checkpoint), and a consolidated packed output counted by that job is
  the next loop variable as it is.  A body of one join and one reduction runs 2 jobs
  per iteration (``tests/test_jobs.py``).
* A top-level loop over a totally ordered time runs in time chunks
  (:mod:`spark_differential.engine.chunks`): each chunk starts from a snapshot of the
  inputs, the chunk is one more key of every operator's state, and a key's trace
  holds one chunk of history instead of all of it.

Small loops (inputs up to ``spark_differential.iterate.localRows`` rows, bodies
whose linear steps translate to DuckDB) skip all of this and run whole inside one
Spark task (:mod:`spark_differential.intask.loop`): same kernels, same traces, one
job instead of several per iteration.

The loop stops at the first iteration whose changes consolidate to nothing.  A
``dd_iterate`` inside a body is recomputed from its accumulated inputs at every
iteration of the enclosing loop (correct, but not differential across the outer
loop); its body may use collections of the directly enclosing loop and from
outside all loops.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import logging
import threading
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings as _conf
from spark_differential.core.collection import (
    DIFF,
    TIME,
    CollectionSchema,
    checked,
    consolidate_spark,
    inspect,
    qcols,
)
from spark_differential.core.faults import fault_hook
from spark_differential.core.lattice import LOOP_OUTER, Loop, TimeType, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.scope import Entry, enter_column
from spark_differential.core.session import release_at_exit
from spark_differential.engine import chunks as _chunks
from spark_differential.engine.chunks import CHUNK, Chunks
from spark_differential.engine.distributed import (
    BUCKET,
    KEY_HASH,
    Input,
    arrow_schema,
    bucket_of,
    buckets,
    finish,
    key_hash,
    prepare,
    shuffle_partitions,
    time_fields,
)
from spark_differential.errors import (
    IterationError,
    IterationLimitExceeded,
    LoopRuleError,
    SchemaMismatchError,
    from_job_failure,
)
from spark_differential.kernels.common import NEW, D, keys, names, over_partition, times
from spark_differential.kernels.gather import ROWS, GatherParams, gather
from spark_differential.kernels.join import JoinParams
from spark_differential.kernels.packed import BLOB, SEQ, PackedParams
from spark_differential.kernels.packed import run as run_packed
from spark_differential.kernels.reduce import ReduceParams, ThresholdParams

pa = lazy("pyarrow")

log = logging.getLogger("spark_differential.iterate")

_LOOP_IDS = itertools.count(1)
_LOCAL = threading.local()
MERGE_RATIO = 2  # a trace batch is merged into the newer ones once it is at most this many times their size
MAX_BATCHES = 8  # and the oldest ones are merged beyond this many batches per trace
FEW_CHANGES = 20_000  # at most this many loop changes in an iteration: touched keys may be broadcast
BROADCAST_TRACE = 1_000_000  # ... when the trace they select from holds at least this many rows (estimated)
ITER = "_sd_it"  # in a packed operator's checkpoint: the iteration of an output row (null: a trace blob)
GC_SHARE = 0.25  # hint the driver GC once checkpoints dropped since the last hint are this share of all dropped


def _stack() -> list[LoopContext]:
    st = getattr(_LOCAL, "stack", None)
    if st is None:
        st = _LOCAL.stack = []
    return st


def _checkpoint(df: DataFrame) -> DataFrame:
    """Materialise ``df`` on the executors and cut its lineage."""
    release_at_exit(df)  # Spark Connect: the checkpoint's __del__ must not run at interpreter shutdown
    try:
        return df.localCheckpoint(eager=True)
    except Exception as e:
        mine = from_job_failure(e)
        if mine is not None:
            raise mine from e
        raise


def _observed(df: DataFrame, **metrics: Any) -> tuple[DataFrame, dict[str, int] | None]:
    """:func:`_checkpoint` and aggregate ``metrics`` (columns) of its rows, computed by the
    same job (observed metrics); ``None`` where the session reports none.

    Spark Connect: a checkpoint is a command, and its reply carries no observed metrics
    (the Observation stays empty)."""
    from pyspark.sql import Observation

    obs = Observation()
    try:
        observed = df.observe(obs, *[c.alias(n) for n, c in metrics.items()])
    except Exception:  # pragma: no cover - a session without observed metrics
        return _checkpoint(df), None
    out = _checkpoint(observed)
    got = obs.get
    if any(got.get(n) is None for n in metrics):
        return out, None
    return out, {n: int(got[n]) for n in metrics}


def _counted(df: DataFrame) -> tuple[DataFrame, int]:
    """:func:`_checkpoint` and the number of rows, counted by the same job (an observed
    metric) instead of a second one (Spark Connect: a second one)."""
    out, metrics = _observed(df, n=F.count(F.lit(1)))
    return out, (out.count() if metrics is None else metrics["n"])


def _broadcast(changes: int, trace_rows: int) -> bool:
    """Whether to broadcast an iteration's touched keys (``changes`` of them at most) to
    select a trace's rows (``trace_rows``, estimated) instead of hashing them per partition.

    A broadcast is a Spark job of its own, worth it only when it saves scanning work: a
    large trace probed by few keys (20 M trace rows, 1,000 touched keys, local[2]:
    1.8–2.4 s against 3.1–3.7 s).  Small traces take the partition-local hash join, inside
    the job that reads them."""
    return changes <= FEW_CHANGES and trace_rows >= BROADCAST_TRACE


def _cheap(df: DataFrame) -> bool:
    """Whether ``df`` only selects and filters checkpointed rows (the loop variable, an
    operator's output of this iteration kept as a checkpoint): reading it twice costs
    two scans, not two runs of a kernel.  ``False`` when the plan cannot be inspected
    (Spark Connect)."""
    try:
        tree = df._jdf.queryExecution().analyzed().treeString()
    except Exception:  # Spark Connect: no JVM plan here
        return False
    for line in tree.splitlines():
        node = line.lstrip(" :+-|").split(" ", 1)[0]
        if node and node not in ("Project", "Filter", "LogicalRDD", "SubqueryAlias"):
            return False
    return True


def _release(df: DataFrame) -> None:
    """Free the blocks of a checkpoint nothing reads any more, now (see :func:`_collect_garbage`).

    Only for checkpoints whose every reader has run: a later job reading one fails
    ("checkpoint block not found"), it never reads other data."""
    try:
        plan = df._jdf.queryExecution().analyzed()
        if plan.nodeName() == "LogicalRDD":
            plan.rdd().unpersist(False)
    except Exception:  # pragma: no cover - not a classic session's checkpoint: the driver GC frees it
        pass


def _collect_garbage(spark: Any) -> None:
    """Let Spark free the checkpoints of earlier iterations that nothing references any more.

    Spark drops an RDD's blocks only once the driver JVM has garbage-collected the RDD;
    with a large heap that may not happen for the whole loop, and dead checkpoints
    then crowd executor memory (10^4-change BFS: 86 stored RDDs, 167 MB without this;
    40 and 70 MB with it).  Python proxies go first, so the JVM objects are unreachable.
    """
    gc.collect()
    try:
        spark.sparkContext._jvm.System.gc()
    except Exception:  # pragma: no cover - e.g. a Spark Connect session: nothing to hint
        pass


def _cache(df: DataFrame) -> DataFrame:
    """Keep ``df`` (already partitioned by bucket) in executor memory, computed on first use."""
    return df.persist()


@dataclass
class Slot:
    """What one stateful operator call site of a body keeps across iterations."""

    op: str
    n_inputs: int
    traces: dict[int, list[DataFrame]] = field(default_factory=dict)
    weights: dict[int, list[int]] = field(default_factory=dict)  # estimated rows of each trace batch
    trace_src: dict[int, list[DataFrame]] = field(default_factory=dict)  # the checkpoint behind each trace batch
    outer: dict[int, DataFrame] = field(default_factory=dict)
    outer_rows: dict[int, int] = field(default_factory=dict)
    packed: list[DataFrame] = field(default_factory=list)  # the trace packed per key, in batches (newest last)
    packed_rows: list[int] = field(default_factory=list)  # rows (keys) of each packed batch
    packed_src: list[DataFrame] = field(default_factory=list)  # the checkpoint behind each packed batch
    resident: list[int] = field(default_factory=list)  # iterations whose loop variable is its output rows (ITER)
    emit: Callable[[DataFrame], DataFrame] | None = None  # a packed checkpoint's output rows as the collection
    nested: NestedState | None = None

    def cached(self) -> list[DataFrame]:
        return [b for bs in self.trace_src.values() for b in bs] + list(self.outer.values()) + self.packed_src


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
        self.nparts = shuffle_partitions(spark)
        self.nbuckets = buckets(spark)
        self.captured_store = captured  # accumulated captured collections, owned by the enclosing loop
        self.captured_now: dict[tuple[int, int], DataFrame] = {}
        self.transient: list[DataFrame] = []  # operator outputs of the current iteration
        self.consolidated: list[DataFrame] = []  # outputs of this iteration known to be consolidated
        self.resident: list[tuple[DataFrame, Slot, int]] = []  # of those, outputs held by a packed checkpoint, rows
        self.loose = False  # this iteration left materialised data for the driver GC to free
        self.chunks: Chunks | None = None  # time chunks the loop runs in (see spark_differential.engine.chunks)
        self.discovering = False  # a first call of the body that only records what enters the loop
        self.recording: Any = None  # a local_loop.Recorder while the body is recorded for the in-task path
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
            _collect_garbage(self.spark)
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
            _release(df)
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
        delta = _strip(df, cs)
        prev = self.captured_store.get(key)
        acc = _consolidate(delta if prev is None else prev.unionByName(delta), list(cs.data_cols))
        acc = _checkpoint(acc)
        self.captured_store[key] = acc
        self.captured_now[key] = acc
        return acc

    def release(self) -> None:
        """Free everything the loop kept: it is over (its result is materialised apart)."""
        self.drop_transient()
        for slot in self.slots:
            for df in slot.cached():
                df.unpersist()
                _release(df)

    def materialise(self, df: DataFrame) -> DataFrame:
        """Compute ``df`` now, once, and cut its lineage (nothing runs while discovering).

        An operator's new updates are read by its kernel, by the touched-key selection
        and later as trace; a cache filled lazily inside one job can be computed by
        several of its stages at once, so the upstream kernels would run again.
        """
        return _cache(df) if self.discovering else _checkpoint(df)

    def enters(self, df: DataFrame, ttype: TimeType) -> None:
        """Record, while discovering, a collection from outside all loops entering at ``ttype``."""
        if not self.discovering:
            return
        if ttype != inspect(df, op="dd_iterate").ttype:
            raise _NotChunkable(f"a collection enters at {ttype.describe()}, not its own time type")
        self.entering.append(df)


class _NotChunkable(Exception):
    """Raised while discovering a body that time chunks cannot serve (the loop runs unsliced)."""


def _chunk_mode(params: Any) -> str | None:
    """How a kernel takes the chunk: as one more key (``"key"``), data column (``"data"``), or not at all."""
    if isinstance(params, (JoinParams, ReduceParams)):
        return "key"
    if isinstance(params, ThresholdParams):
        return "data"
    return None


def _with_chunk(inp: Input, chunks: Chunks, mode: str, kernel_type: TimeType, outer: bool) -> Input:
    """``inp`` with its chunk as a key (or data) column; collections from outside the loop
    first get their chunked form (snapshots at chunk starts)."""
    df = chunks.chunked(inp.df) if outer else inp.df
    tcol = inp.time_col if inp.time_col is not None else F.col(TIME)
    df = df.withColumn(CHUNK, chunks.of(tcol, kernel_type))
    if mode == "key":
        return dataclasses.replace(inp, df=df, keys=[*inp.keys, CHUNK])
    return dataclasses.replace(inp, df=df, data=[*inp.data, CHUNK], hash_cols=[*(inp.hash_cols or inp.data), CHUNK])


def _chunk_params(params: Any, mode: str, out_fields: Sequence[T.StructField]) -> tuple[Any, list[T.StructField]]:
    """Kernel parameters and output fields with the chunk column added."""
    if mode == "key":
        name, params = keys(params.nkeys + 1)[-1], dataclasses.replace(params, nkeys=params.nkeys + 1)
    else:
        name, params = names("_a", params.ndata + 1)[-1], dataclasses.replace(params, ndata=params.ndata + 1)
    return params, [*out_fields, T.StructField(name, T.LongType(), True)]


def recording() -> bool:
    """Whether a body is being recorded for the in-task path (nothing it builds runs)."""
    return any(ctx.recording is not None for ctx in _stack())


def _current(loop_id: int, op: str) -> LoopContext:
    st = _stack()
    for ctx in reversed(st):
        if ctx.loop_id == loop_id:
            if ctx is not st[-1]:
                raise IterationError(
                    f"{op}: this collection belongs to an enclosing dd_iterate, not to the loop running now"
                )
            return ctx
    raise IterationError(
        f"{op}: the input is a collection from inside a dd_iterate body (its time is a loop time) but that "
        "loop is not running; use the result of dd_iterate, not collections captured from its body"
    )


def _strip(df: DataFrame, cs: CollectionSchema) -> DataFrame:
    """A loop collection's updates at their outer times (the iteration coordinate dropped)."""
    return df.select(*qcols(cs.data_cols), F.col(TIME).getField(LOOP_OUTER).alias(TIME), DIFF)


def _consolidate(df: DataFrame, data: Sequence[str]) -> DataFrame:
    return consolidate_spark(df, data)


def _stamp(df: DataFrame, data: Sequence[str], loop_t: Loop, iteration: int, time_col: Any = None) -> DataFrame:
    """Set the loop coordinate of ``df``'s times (``time_col`` gives the outer time)."""
    outer = F.col(TIME).getField(LOOP_OUTER) if time_col is None else time_col
    t = F.struct(outer.alias(LOOP_OUTER), F.lit(iteration).cast("int").alias(loop_t.iter_field))
    return df.select(*qcols(data), t.alias(TIME), F.col(DIFF).cast("long").alias(DIFF))


def _semi(trace: DataFrame, touched: DataFrame, few: bool) -> DataFrame:
    """Trace rows of the touched keys (by key hash: a collision only lets extra rows through,
    which the kernels ignore).  Both sides are hash-partitioned by bucket, so this is a
    partition-local hash join: nothing of the trace is shuffled.  When ``few`` keys are
    touched (the tail of a loop) they are broadcast instead: every task then probes one
    small hash table, which scans a large trace faster (20 M trace rows, 1,000 touched
    keys, local[2]: 1.8–2.4 s against 3.1–3.7 s)."""
    if few:
        return trace.join(F.broadcast(touched), [BUCKET, KEY_HASH], "left_semi")
    return trace.join(touched.hint("shuffle_hash"), [BUCKET, KEY_HASH], "left_semi")


def _tier_start(weights: Sequence[int]) -> int:
    """The oldest of the batches (sizes ``weights``, newest last) to merge with the newest:
    going back from the newest, an older batch joins while it is at most ``MERGE_RATIO``
    times the size of the batches gathered so far, or while more than ``MAX_BATCHES``
    would remain.  ``len(weights) - 1``: merge nothing."""
    start, gathered = len(weights) - 1, weights[-1]
    while start > 0 and (weights[start - 1] <= MERGE_RATIO * gathered or start >= MAX_BATCHES):
        start -= 1
        gathered += weights[start]
    return start


def _keeps_trace(params: Any, in_loop: Sequence[bool]) -> list[bool]:
    """Which inputs of an operator in a loop need a trace of their earlier updates.

    A join is bilinear: its change is ``ΔA ⋈ (B + ΔB) + A ⋈ ΔB``, so the history ``A``
    of one input is read only when the other input changes.  An input from outside
    the loop changes at iteration 0 alone, when nothing has a history yet, so a loop
    input joined with it (BFS: distances with edges) never needs its trace: it is
    neither kept nor sent to the kernel.  Every other operator reads the traces of
    all its loop inputs.
    """
    if isinstance(params, JoinParams) and params.mode in ("join", "semijoin", "antijoin") and len(in_loop) == 2:
        return [in_loop[1 - j] for j in range(2)]
    return [True] * len(in_loop)


def _touched_sides(news: Sequence[DataFrame | None], traces: Sequence[DataFrame | None], few: bool) -> list[DataFrame]:
    """Each kernel input: its new updates plus its trace's rows of the keys any new update touches."""
    present = [n for n in news if n is not None]
    touched = present[0].select(BUCKET, KEY_HASH)
    for n in present[1:]:
        touched = touched.unionByName(n.select(BUCKET, KEY_HASH))
    touched = touched.distinct()
    sides = []
    for new, trace in zip(news, traces):
        parts = []
        if trace is not None:
            parts.append(_semi(trace, touched, few=few))
        if new is not None:
            parts.append(new)
        side = parts[0]
        for p in parts[1:]:
            side = side.unionByName(p)
        sides.append(side)
    return sides


def _joins_outer(params: Any, entries: Sequence[Entry], loop_id: int) -> bool:
    """A ``dd_join`` of this loop's collection with a collection from outside all loops."""
    if not isinstance(params, JoinParams) or params.mode != "join" or len(entries) != 2:
        return False
    ids = sorted((e.loop_id is not None, e.loop_id == loop_id) for e in entries)
    return ids == [(False, False), (True, True)]


def _rows_per_key(prepared: DataFrame, nkeys: int, nparts: int) -> DataFrame:
    """A prepared collection (partitioned by bucket) as one row per key: its other
    columns, but ``_new``, gathered into the array ``_rows`` by a kernel
    (:mod:`spark_differential.kernels.gather`), then partitioned by bucket again.  Read
    by :func:`_pair_join`, whose every iteration then probes one row per key instead of
    one per update.  (For the 4 M edge updates of a 10^6-change BFS Spark's
    ``collect_list`` per key took 8.0 s, this 7.1 s, most of it the chunking itself.)"""
    on = [BUCKET, KEY_HASH, *keys(nkeys)]
    rest = [c for c in prepared.columns if c not in on and c != NEW]
    src = prepared.select(*on, *rest)
    item = T.StructType([src.schema[c] for c in rest])
    schema = T.StructType([
        *[T.StructField(c, src.schema[c].dataType, src.schema[c].nullable) for c in on],
        T.StructField(ROWS, T.ArrayType(item, False), False),
    ])
    params = GatherParams(tuple(on), arrow_schema(prepared.sparkSession, schema))
    fn = over_partition(functools.partial(fault_hook(prepared.sparkSession, gather), params))
    return src.mapInArrow(fn, schema).repartition(nparts, BUCKET)


def _pair_join(
    params: JoinParams,
    sides: Sequence[DataFrame],
    small: int,
    out_fields: Sequence[T.StructField],
    ttype: TimeType,
    few: bool,
) -> DataFrame:
    """``ΔA ⋈ B`` on the JVM, for a loop collection ``A`` joined with a collection ``B``
    from outside all loops, in a loop run in time chunks.

    Every pair of updates with equal keys meets at the lattice join of their times
    (the join's definition), consolidated per bucket.  ``B`` changes at iteration 0
    only, so at every iteration the change is this iteration's ``ΔA`` against all of
    ``B`` (at iteration 0 ``ΔA`` is all of ``A``).  Enumerating pairs is what the
    stabbing join of the join kernel avoids for long histories; in a time chunk a
    key's history in ``B`` is its snapshot plus one chunk of updates, so the pairs are
    about as many as the output, and the JVM forms them without moving rows to Python.
    Both sides are partitioned by bucket: a partition-local hash join building on the
    loop side (``sides[small]``), no shuffle; with ``few`` changes the loop side is
    broadcast instead, as in :func:`_semi`.  ``B`` comes one row per key
    (:func:`_rows_per_key`), its updates exploded after the join: at the peak of a
    10^6-change BFS (1.4 M changes against 4 M edge updates) 2.4-2.6 s against
    4.1-4.6 s for the join of rows.
    """
    nk, w = params.nkeys, ttype.width
    build = F.broadcast(sides[small]) if few else sides[small].hint("shuffle_hash")
    left, right = [build if j == small else df for j, df in enumerate(sides)]
    on = [BUCKET, KEY_HASH, *keys(nk)]
    r = right.select(*[F.col(c).alias(f"r{c}") for c in right.columns])
    cond = [left[c] == r[f"r{c}"] for c in on]
    tl, tr = times(w), [f"r{c}" for c in times(w)]
    joined = left.join(r, cond, "inner")
    gathered = ("r" if small == 0 else "") + ROWS
    if gathered in joined.columns:  # B's updates, one row each
        inner = [c for c in joined.columns if c != gathered]
        fields = [f.name for f in sides[1 - small].schema[ROWS].dataType.elementType.fields]  # type: ignore[attr-defined]
        prefix = gathered[: -len(ROWS)]
        joined = joined.select(*inner, F.explode(gathered).alias(ROWS)).select(
            *inner, *[F.col(f"{ROWS}.{c}").alias(prefix + c) for c in fields]
        )
    lub = [F.expr(e).alias(n) for e, n in zip(ttype.sql_join(tl, tr), times(w))]
    data = [F.col(c) for c in names("_a", params.na)] + [F.col(f"r{c}").alias(c) for c in names("_b", params.nb)]
    pairs = joined.select(BUCKET, *[F.col(k) for k in keys(nk)], *data, *lub, (F.col(D) * F.col(f"r{D}")).alias(D))
    group = [c for c in pairs.columns if c != D]
    out = pairs.groupBy(*group).agg(F.sum(D).cast("long").alias(D)).where(F.col(D) != 0)
    fields = [*out_fields, *time_fields(ttype)]
    return out.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in fields])


def _packs(params: Any, inputs: Sequence[Input], entries: Sequence[Entry], loop_id: int) -> bool:
    """Whether an operator keeps its trace packed per key: a reduction of one loop
    collection whose data columns are all ``long`` (times and diffs always are)."""
    if not isinstance(params, ReduceParams) or len(inputs) != 1 or entries[0].loop_id != loop_id:
        return False
    inp = inputs[0]
    return all(isinstance(inp.cs.field(c).dataType, T.LongType) for c in inp.data)


def _packed_in_loop(
    ctx: LoopContext,
    slot: Slot,
    kernel: Callable[..., pa.Table],
    params: ReduceParams,
    inp: Input,
    out_fields: Sequence[T.StructField],
    out_columns: Sequence[tuple[str, str]],
    kernel_type: TimeType,
) -> DataFrame:
    """A one-input operator whose trace is one packed row per key.

    The kernel gets this iteration's updates and the packed traces of the keys they
    touch, and returns its output and those keys' traces with the updates merged in.
    Each key's history is rewritten consolidated whenever it is touched, so the
    trace never holds two blobs of a key that need summing; it is kept in batches,
    a newer batch's blob of a key replacing the older ones (see :func:`_pack_merge`).

    Two jobs: the new updates (read by the kernel, the touched keys and their trace
    selection), then the kernel's result, output and blobs in one checkpoint
    partitioned by bucket (a merge of older trace batches, when due, in the same
    job).  The output and the new trace batch are two filtered views of it.
    """
    from spark_differential.engine.distributed import run_prepared

    staged = prepare(inp, ctx.nbuckets, ctx.nparts).repartition(ctx.nparts, BUCKET)
    new, incoming = (_cache(staged), 0) if ctx.discovering else _counted(staged)
    ctx.transient.append(new)  # read by this iteration's jobs only, then freed at once (no GC hint needed)
    k = keys(params.nkeys)
    cols = [*names("_a", params.ndata), *times(kernel_type.width), D]
    touched = new.select(BUCKET, KEY_HASH).distinct()
    side = new.withColumn(BLOB, F.lit(None).cast("binary"))
    several = len(slot.packed) > 1
    if several:
        side = side.withColumn(SEQ, F.lit(None).cast("int"))
    if slot.packed:
        batches = [b.withColumn(SEQ, F.lit(seq).cast("int")) if several else b for seq, b in enumerate(slot.packed)]
        trace = batches[0]
        for b in batches[1:]:  # co-partitioned by bucket: the union stays so, one semi-join reads all
            trace = trace.unionByName(b)
        sent = _semi(trace, touched, few=_broadcast(ctx.weight, sum(slot.packed_rows))).select(
            BUCKET, KEY_HASH, *k, *[F.lit(None).cast("long").alias(c) for c in cols], F.lit(False).alias(NEW), BLOB,
            *([SEQ] if several else []),
        )
        side = sent.unionByName(side)
    fields = [*out_fields, *[T.StructField(f.name, f.dataType, True) for f in time_fields(kernel_type)]]
    pp = PackedParams(kernel, params, params.nkeys, tuple(cols), arrow_schema(ctx.spark, T.StructType(fields)))
    schema = T.StructType([*fields, T.StructField(BLOB, T.BinaryType(), True)])
    # the kernel never sees _seq: _unpack keeps each key's newest blob and drops it
    out = run_prepared(run_packed, pp, [side], schema, partitions=ctx.nparts)
    # every row (output and blob) placed by its key's bucket: the blobs are the new trace
    # batch, which later semi-joins read partition by partition
    khash = key_hash([F.col(c) for c in k])
    it = F.when(F.col(BLOB).isNull(), F.lit(ctx.iteration))
    out = out.select(bucket_of(khash, ctx.nbuckets, ctx.nparts).alias(BUCKET), khash.alias(KEY_HASH), *out.columns,
                     it.alias(ITER))
    out = out.repartition(ctx.nparts, BUCKET)
    now = F.col(ITER) == ctx.iteration
    if ctx.discovering:
        out, metrics = ctx.materialise(out), None
        ctx.transient.append(out)
    else:
        start, out = _pack_merge(slot, out, touched, incoming)
        out, metrics = _observed(out, blobs=F.count(F.when(F.col(BLOB).isNotNull(), 1)), rows=F.count(F.when(now, 1)))
        rows = incoming if metrics is None else metrics["blobs"]  # Spark Connect: the bound estimate
        ctx.transient += _pack_commit(slot, start, out, rows, k)
    loop_t = Loop(kernel_type, ctx.loop_id)
    data = [user for _, user in out_columns]

    def emit(cp: DataFrame) -> DataFrame:
        rows = finish(cp.drop(BUCKET, KEY_HASH, BLOB), out_columns, kernel_type)
        return _stamp(rows, data, loop_t, ctx.iteration, time_col=F.col(TIME))

    slot.emit = emit
    result = emit(out.where(now))
    if ctx.discovering:
        return result
    if ctx.iteration == 0:
        log.debug("dd_iterate: %s keeps its trace packed, one row per key", params.op)
    if params.agg in ("min", "max") and kernel_type.is_total():
        # one value per key and time, keys distinct per row: nothing to consolidate; with
        # its number of rows counted by the job above, it can be the loop variable as it is
        ctx.consolidated.append(result)
        if metrics is not None:
            ctx.resident.append((result, slot, metrics["rows"]))
    return result


def _pack_merge(slot: Slot, out: DataFrame, touched: DataFrame, incoming: int) -> tuple[int, DataFrame]:
    """The packed kernel's result (``out``: output rows and the touched keys' new blobs),
    with the older trace batches it merges with, size-tiered: ``(start, rows)``, where
    the new batch replaces ``slot.packed[start:]`` (``start == len(slot.packed)``: a
    batch of its own).

    :func:`_tier_start` decides (``incoming``, the rows sent to the kernel, bounds the new
    batch's keys).  A merge keeps, of every older batch, the keys no newer batch has
    (by key hash: any key hashing like a touched key was sent to the kernel and is in
    the new batch).  So the tail of a loop, touching few keys, writes small batches
    instead of rewriting the whole trace every iteration.  Empty blobs (keys whose
    updates cancelled) shadow older batches; a batch reaching the oldest drops them.
    Everything stays partitioned by bucket (a union of co-partitioned inputs), so the
    merge runs in the kernel's job.  Output rows that are the loop variable of their
    iteration (``slot.resident``) move into the new batch with the blobs: the loop's
    result reads them where they are (see :func:`_run_loop`).
    """
    weights = [*slot.packed_rows, max(1, incoming)]
    start = _tier_start(weights)
    merged, seen, seen_rows = out, touched, incoming
    for batch, src, rows in zip(*(reversed(x[start:]) for x in (slot.packed, slot.packed_src, slot.packed_rows))):
        probe = F.broadcast(seen) if _broadcast(seen_rows, rows) else seen.hint("shuffle_hash")
        merged = merged.unionByName(batch.join(probe, [BUCKET, KEY_HASH], "left_anti"), allowMissingColumns=True)
        if slot.resident:  # loop variables kept in the batch move with it
            merged = merged.unionByName(src.where(F.col(ITER).isin(slot.resident)))
        seen, seen_rows = seen.unionByName(batch.select(BUCKET, KEY_HASH)), seen_rows + rows
    if start == 0:
        merged = merged.where(F.col(BLOB).isNull() | (F.length(BLOB) > 0))
    return start, merged


def _pack_commit(slot: Slot, start: int, out: DataFrame, rows: int, k: Sequence[str]) -> list[DataFrame]:
    """Record the checkpoint ``out`` of :func:`_pack_merge`'s result (its blobs: ``rows``
    keys, key columns ``k``) as the trace batch replacing ``slot.packed[start:]``;
    returns the checkpoints of those (to free once nothing of this iteration reads them)."""
    retired = slot.packed_src[start:]
    merged = len(slot.packed) - start
    slot.packed[start:] = [out.where(F.col(BLOB).isNotNull()).select(BUCKET, KEY_HASH, *k, BLOB)]
    slot.packed_src[start:] = [out]
    slot.packed_rows[start:] = [rows]
    if merged:
        log.debug("dd_iterate: %s's packed trace: %d of %d batches merged, %d keys", slot.op, merged + 1,
                  len(slot.packed) + merged, rows)
    else:
        log.debug("dd_iterate: %s's packed trace: %d batches, the newest of %d keys", slot.op, len(slot.packed), rows)
    return retired



def stateful_in_loop(
    op: str,
    kernel: Callable[..., pa.Table],
    params: Any,
    inputs: Sequence[Input],
    entries: Sequence[Entry],
    out_fields: Sequence[T.StructField],
    out_columns: Sequence[tuple[str, str]],
    kernel_type: TimeType,
) -> DataFrame:
    """One stateful operator call inside a ``dd_iterate`` body (see the module docstring)."""
    from spark_differential.engine.distributed import run_prepared

    loop_id = max(e.loop_id for e in entries if e.loop_id is not None)
    ctx = _current(loop_id, op)
    if ctx.recording is not None:
        return ctx.recording.stateful(op, kernel, params, inputs, entries, out_fields, out_columns, kernel_type)
    index, slot = ctx.next_slot(op, len(inputs))
    mode = _chunk_mode(params)
    if ctx.discovering:
        if mode is None:
            raise _NotChunkable(f"{op} does not key its state by chunk")
        if kernel_type != ctx.inner:
            raise _NotChunkable(f"{op} works over {kernel_type.describe()}, not the loop's outer time")
        for inp, e in zip(inputs, entries):
            if e.loop_id is None:
                ctx.enters(inp.df, kernel_type)
    chunks = ctx.chunks if mode is not None else None  # discovery guarantees a mode when chunks are set
    if chunks is not None:
        params, out_fields = _chunk_params(params, mode, out_fields)
    if _packs(params, inputs, entries, ctx.loop_id):
        inp = inputs[0]
        if chunks is not None:
            inp = _with_chunk(inp, chunks, mode, kernel_type, outer=False)
        return _packed_in_loop(ctx, slot, kernel, params, inp, out_fields, out_columns, kernel_type)
    news: list[DataFrame | None] = []
    traces: list[DataFrame | None] = []
    keep = _keeps_trace(params, [e.loop_id == ctx.loop_id for e in entries])
    pairs = chunks is not None and _joins_outer(params, entries, ctx.loop_id)
    ctx.loose = ctx.loose or not pairs
    trace_rows = 0
    for j, (inp, e) in enumerate(zip(inputs, entries)):
        if e.loop_id == ctx.loop_id:
            if chunks is not None:
                inp = _with_chunk(inp, chunks, mode, kernel_type, outer=False)
            new = prepare(inp, ctx.nbuckets, ctx.nparts).repartition(ctx.nparts, BUCKET)
            if keep[j]:
                new, trace = _new_batch(ctx, slot, j, new)
                trace_rows += sum(slot.weights[j])
            elif not pairs and not _cheap(inp.df):
                # read by the kernel and the touched keys: computed once (a cheap input,
                # e.g. the loop variable itself, is read twice instead: no job of its own)
                new, trace = ctx.materialise(new), None
            else:
                trace = None
            news.append(new)
            traces.append(trace)
            continue
        if j not in slot.outer:
            if e.loop_id is not None:  # captured from the enclosing loop: use its accumulation
                acc = ctx.captured((index, j), inp.df, inp.cs)
                inp = Input(acc, inspect(acc, op=op), inp.keys, inp.data, inp.prefix, kernel_type,
                            enter_column(F.col(TIME), inp.cs.ttype.inner, kernel_type),  # type: ignore[attr-defined]
                            key_casts=inp.key_casts, hash_cols=inp.hash_cols)
            elif chunks is not None:
                inp = _with_chunk(inp, chunks, mode, kernel_type, outer=True)
            # a collection from outside all loops is checked for null times and diffs here, as
            # where it enters the in-task loop (local_loop.run): the same NullValueError on both paths
            full = prepare(inp, ctx.nbuckets, ctx.nparts, op="dd_iterate").withColumn(NEW, F.lit(False))
            full = full.repartition(ctx.nparts, BUCKET)
            full = _rows_per_key(full, params.nkeys, ctx.nparts) if pairs else full
            slot.outer[j], slot.outer_rows[j] = (_cache(full), 0) if ctx.discovering else _counted(full)
            if pairs and not ctx.discovering:
                log.debug("dd_iterate: %s keeps the outer collection one row per key", op)
        full = slot.outer[j]
        trace_rows += slot.outer_rows[j]
        if ctx.iteration == 0:
            news.append(full.withColumn(NEW, F.lit(True)))
            traces.append(None)
        else:
            news.append(None)
            traces.append(full)
    few = _broadcast(ctx.weight, trace_rows)
    if pairs:
        small = next(j for j, e in enumerate(entries) if e.loop_id == ctx.loop_id)
        sides = [n if n is not None else t for n, t in zip(news, traces)]
        out = _pair_join(params, sides, small, out_fields, kernel_type, few=few)
    else:
        schema = T.StructType([*out_fields, *time_fields(kernel_type)])
        out = run_prepared(kernel, params, _touched_sides(news, traces, few), schema, partitions=ctx.nparts)
    result = finish(out, out_columns, kernel_type)
    loop_t = Loop(kernel_type, ctx.loop_id)
    data = [user for _, user in out_columns]
    # computed when the iteration's result is materialised (consumers cache what they keep)
    return _stamp(result, data, loop_t, ctx.iteration, time_col=F.col(TIME))


def _new_batch(ctx: LoopContext, slot: Slot, j: int, new: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """Materialise input ``j``'s new updates as the newest batch of its trace: ``(new
    updates, the trace before them)`` for this iteration's kernel.

    One job: when :func:`_tier_start` merges older batches into the new one (as
    differential dataflow's spine: each row merged O(log iterations) times, O(log
    iterations) batches per trace), they are consolidated in place by the same job
    that materialises the new updates, into the same checkpoint (all partitioned by
    bucket: the union stays so, the aggregation runs partition by partition).  The new
    batch is that whole checkpoint (updates flagged ``_new`` false), the new updates
    its rows flagged true.  Sizes are estimates (the loop's changes per iteration);
    they only decide when to merge, never what the trace holds.
    """
    batches = slot.traces.setdefault(j, [])
    weights = slot.weights.setdefault(j, [])
    weight = max(1, ctx.weight)
    start = _tier_start([*weights, weight]) if not ctx.discovering else len(batches)
    older = batches[start:]
    if older:
        union = older[0]
        for b in older[1:]:
            union = union.unionByName(b)
        cols = [c for c in union.columns if c != D]
        merged = union.groupBy(*cols).agg(F.sum(D).cast("long").alias(D)).where(F.col(D) != 0)
        new = new.unionByName(merged.select(*union.columns))
    cp = ctx.materialise(new)
    ctx.transient += slot.trace_src.get(j, [])[start:]  # read by nothing after this iteration
    trace = _union([*batches[:start], *([cp.where(~F.col(NEW))] if older else [])])
    ctx.drop(sum(weights[start:]))
    batches[start:] = [cp.withColumn(NEW, F.lit(False))]
    slot.trace_src.setdefault(j, [])[start:] = [cp]
    weights[start:] = [sum(weights[start:]) + weight]
    return (cp.where(F.col(NEW)) if older else cp), trace


def _union(dfs: Sequence[DataFrame]) -> DataFrame | None:
    """The union (by name) of ``dfs``; ``None`` for none."""
    if not dfs:
        return None
    out = dfs[0]
    for df in dfs[1:]:
        out = out.unionByName(df)
    return out


def concat_in_loop(op: str, dfs: Sequence[DataFrame], schemas: Sequence[CollectionSchema], entries: Sequence[Entry], target: TimeType) -> DataFrame:
    """``dd_concat`` inside a body: outer collections contribute only at iteration 0."""
    assert isinstance(target, Loop)
    ctx = _current(target.loop_id, op)
    if ctx.recording is not None:
        return ctx.recording.concat(dfs, schemas, entries)
    index, _ = ctx.next_slot(op, len(dfs))
    data = list(schemas[0].data_cols)
    out = None
    for j, (d, cs, e) in enumerate(zip(dfs, schemas, entries)):
        if e.loop_id == ctx.loop_id:
            part = d.select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF))
        elif ctx.iteration > 0:
            continue
        else:
            src = d
            if e.loop_id is not None:
                src = ctx.captured((index, j), d, cs)
            else:
                ctx.enters(d, target.inner)
                src = checked(d, cs, "dd_iterate")
                if ctx.chunks is not None:
                    src = ctx.chunks.chunked(src)
            tcol = enter_column(F.col(TIME), inspect(src, op=op).ttype, target.inner)
            part = _stamp(src, data, target, 0, time_col=tcol)
        out = part if out is None else out.unionByName(part)
    if out is None:  # pragma: no cover - a loop input is always present
        raise IterationError(f"{op}: nothing to concatenate")
    return out


_LOOP_RULES = (
    "Inside a dd_iterate body `time` is an internal loop time: pass it through untouched (select it as it "
    "is, never replace or compute it), and combine the loop collection with other collections only through "
    "dd_* operators (dd_concat instead of union/unionByName, dd_join/dd_semijoin instead of join)."
)


def _rule_checked(body: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame], DataFrame]:
    """``body``, with Spark's analysis errors about the loop's internal time turned into
    :class:`LoopRuleError` (they name internal struct fields the user never wrote)."""
    from pyspark.errors import AnalysisException

    def checked_body(v: DataFrame) -> DataFrame:
        try:
            return body(v)
        except AnalysisException as e:
            text = str(e)
            if LOOP_OUTER not in text and "_sd_iter" not in text:
                raise
            kind = getattr(e, "getCondition", getattr(e, "getErrorClass", lambda: None))()
            what = "a union of the loop collection with another DataFrame" if "UNION" in text.upper() else (
                "an operation on the loop collection that Spark rejected")
            raise LoopRuleError(
                f"dd_iterate: the body broke a rule of loops: {what} meets the loop's internal `time`"
                + (f" (Spark: {kind})" if kind else "") + f". {_LOOP_RULES}"
            ) from None

    return checked_body


def _check_body_output(out: Any, cs: CollectionSchema, loop_t: Loop, select: bool = True) -> DataFrame:
    """``out`` checked as the body's result, its columns in the loop variable's order
    (``select=False``: as it is; the in-task recorder picks the columns itself)."""
    if not isinstance(out, DataFrame):
        raise IterationError(f"dd_iterate: the body must return a DataFrame (a collection), got {type(out).__name__}")
    ocs = inspect(out, op="dd_iterate", side="body's result")
    if ocs.ttype != loop_t:
        if isinstance(ocs.ttype, Loop):
            raise IterationError(
                "dd_iterate: the body returned a collection of another dd_iterate loop; the body must return a "
                "collection derived from its argument, keeping `time`."
            )
        raise LoopRuleError(
            f"dd_iterate: the body's result has a `time` of type {ocs.ttype.describe()}, not the loop's own time: "
            f"the body replaced or recomputed `time`, or returned a collection not derived from its argument. "
            f"The body must return a collection derived from its argument, keeping `time`. {_LOOP_RULES}"
        )
    if set(ocs.data_cols) != set(cs.data_cols):
        raise SchemaMismatchError(
            f"dd_iterate: the body returns data columns {list(ocs.data_cols)} but the loop variable has "
            f"{list(cs.data_cols)}; the body must return the same columns it receives"
        )
    for c in cs.data_cols:
        if ocs.field(c).dataType != cs.field(c).dataType:
            raise SchemaMismatchError(
                f"dd_iterate: the body returns `{c}` as {ocs.field(c).dataType.simpleString()} but the loop variable "
                f"has {cs.field(c).dataType.simpleString()}; cast it in the body"
            )
    return out.select(*qcols(cs.data_cols), TIME, DIFF) if select else out


LOOP_CONF = {
    # one job per iteration instead of one per query stage; partitioning of traces is fixed anyway
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    # let traces partitioned by bucket alone serve joins on (bucket, key hash) without a shuffle
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
}


def _loop_conf(spark: Any) -> Callable[[], None]:
    """Set the loop's SQL configuration; returns a function restoring the previous values.
    (On Spark Connect: read from the call's settings snapshot, set in one request, restored
    in at most two.)"""
    saved: dict[str, Any] = {}
    try:
        saved = {k: _conf.get(spark, k, None) for k in LOOP_CONF}
        _conf.set_many(spark, LOOP_CONF)
    except Exception:  # pragma: no cover - a session refusing runtime conf: each setting on its own
        saved = {}
        for k, v in LOOP_CONF.items():
            try:
                saved[k] = spark.conf.get(k, None)
                spark.conf.set(k, v)
            except Exception:  # keep the session's setting
                continue

    def restore() -> None:
        try:
            _conf.set_many(spark, {k: v for k, v in saved.items() if v is not None})
            _conf.unset_many(spark, [k for k, v in saved.items() if v is None])
        except Exception:  # pragma: no cover - each setting on its own
            for k, v in saved.items():
                try:
                    if v is None:
                        spark.conf.unset(k)
                    else:
                        spark.conf.set(k, v)
                except Exception:
                    pass

    return restore


def _progress_bar(enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - optional
        log.warning("dd_iterate: progress=True needs tqdm (pip install tqdm); logging only")
        return None
    return tqdm(desc="dd_iterate", unit="iter")


def _plan_chunks(
    ctx: LoopContext, roots: DataFrame, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame], loop_t: Loop
) -> Chunks | None:
    """Time chunks for a top-level loop over a totally ordered time (``None``: run unsliced).

    The body is called once without running anything, to learn which collections
    enter the loop (their updates and live rows decide the number of chunks); a body
    that nests a loop, or uses an operator or time type chunks cannot serve, runs
    unsliced.
    """
    setting = _chunks.rows_setting(ctx.spark)
    if setting == 0 or not isinstance(cs.ttype, Total):
        return None
    data = list(cs.data_cols)
    ctx.discovering = True
    ctx.begin(0)
    try:
        _check_body_output(body(_stamp(roots, data, loop_t, 0, time_col=F.col(TIME))), cs, loop_t)
        ctx.end()
    except _NotChunkable as e:
        log.debug("dd_iterate: not sliced into time chunks: %s", e)
        return None
    finally:
        ctx.discovering = False
        entering, ctx.entering = ctx.entering, []
        ctx.release()
        ctx.slots = []
    return _chunks.plan(cs.ttype, [roots, *entering], setting)


def _settings_once(fn: Callable[..., DataFrame]) -> Callable[..., DataFrame]:
    """``fn(df, ...)`` with the session's settings read once for the whole call (one request
    on Spark Connect, where each read is one; see :mod:`spark_differential.core.settings`)."""

    @functools.wraps(fn)
    def run(df: DataFrame, *args: Any) -> DataFrame:
        with _conf.snapshot(df.sparkSession):
            return fn(df, *args)

    return run


@_settings_once
def _run_loop(
    df: DataFrame,
    cs: CollectionSchema,
    body: Callable[[DataFrame], DataFrame],
    max_iterations: int | None,
    captured: dict[tuple[int, int], DataFrame] | None,
    progress: bool,
) -> DataFrame:
    spark = df.sparkSession
    loop_t = Loop(cs.ttype, next(_LOOP_IDS))
    data = list(cs.data_cols)
    body = _rule_checked(body)
    ctx = LoopContext(loop_t, spark, captured)
    restore = _loop_conf(spark)
    _stack().append(ctx)
    bar = _progress_bar(progress)
    started = _time.time()
    try:
        if captured is None:
            from spark_differential.intask import (
                loop as _local_loop,  # on first use: keeps `import spark_differential` light
            )

            local = _local_loop.attempt(
                df, cs, body, loop_t, ctx, lambda out: _check_body_output(out, cs, loop_t, select=False), max_iterations, bar
            )
            if local is not None:
                return local
        roots, ctx.weight = _counted(checked(df, cs, "dd_iterate").select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF)))
        if captured is None:
            ctx.chunks = _plan_chunks(ctx, roots, cs, body, loop_t)
        if ctx.chunks is not None:
            unsliced = roots
            roots, ctx.weight = _counted(ctx.chunks.chunked(roots))
            _release(unsliced)
        entered = _stamp(roots, data, loop_t, 0, time_col=F.col(TIME))
        parts = [roots]
        kept = [roots]  # the checkpoints behind parts
        v = entered
        i = 0
        while True:
            ctx.begin(i)
            raw = body(v)
            out = _check_body_output(raw, cs, loop_t)
            ctx.end()
            held = next(((slot, n) for r, slot, n in ctx.resident if r is raw), None) if i > 0 else None
            if held is not None:
                # a packed dd_min's output, counted by its kernel's job and kept in its checkpoint
                # (moving with its trace batch when merged): no job of its own; the result
                # reads it there
                log.debug("dd_iterate: iteration %d: the body's result is consolidated already, counted and kept "
                          "by its kernel's job", i + 1)
                slot, changes = held
                nxt = _stamp(out, data, loop_t, i + 1)
                slot.resident.append(i)
            elif i > 0 and ctx.is_consolidated(raw):  # e.g. a dd_min's output: no shuffle
                log.debug("dd_iterate: iteration %d: the body's result is consolidated already", i + 1)
                nxt, changes = _counted(_stamp(out, data, loop_t, i + 1))
            else:
                nxt = out if i > 0 else out.unionByName(entered.select(*qcols(data), TIME, (-F.col(DIFF)).alias(DIFF)))
                nxt, changes = _counted(_stamp(_consolidate(nxt, data), data, loop_t, i + 1))
            ctx.drop_transient()
            if ctx.loose:  # this iteration's operator inputs and outputs, mostly dropped now
                ctx.drop(ctx.weight)
            ctx.collect_garbage()
            elapsed = _time.time() - started
            log.info("dd_iterate: iteration %d: %d changes (%.1fs)", i + 1, changes, elapsed)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(changes=changes)
            if changes == 0:
                break
            ctx.weight = changes
            i += 1
            if max_iterations is not None and i >= max_iterations:
                raise IterationLimitExceeded.of(max_iterations, i, changes)
            if held is None:
                parts.append(_strip(nxt, cs))
                kept.append(nxt)
            v = nxt
        for slot in ctx.slots:  # loop variables held in packed checkpoints (freed by ctx.release)
            if slot.resident and slot.emit is not None:
                parts += [_strip(slot.emit(src.where(F.col(ITER).isin(slot.resident))), cs) for src in slot.packed_src]
        result = parts[0]
        for p in parts[1:]:
            result = result.unionByName(p)
        if ctx.chunks is not None:
            # one shuffle by the data columns, materialised once, serves both aggregations
            # (per chunk, per time) partition by partition (one query reading the shuffle
            # twice instead, 10^6-change BFS: 8.5 s against 6.1 s)
            shuffled = _checkpoint(result.repartition(ctx.nparts, *qcols(data)))
            kept.append(shuffled)
            result = ctx.chunks.unchunked(shuffled)
        final = _checkpoint(_consolidate(result, data))
        for df in kept:  # read by the final result's jobs only (it has run): free them now
            _release(df)
        return final
    finally:
        if bar is not None:
            bar.close()
        _stack().pop()
        ctx.release()
        restore()


def dd_iterate(
    df: DataFrame,
    body: Callable[[DataFrame], DataFrame],
    max_iterations: int | None = None,
    progress: bool = False,
) -> DataFrame:
    """The fixed point of ``body``, per time, started from this collection.

    ``body`` receives a collection and returns one with the same columns; it may
    use any ``dd_*`` operator and linear DataFrame transformations that keep
    ``time`` and ``diff`` (``select``, ``where``, ``withColumn``), and may refer to
    collections from outside the loop, which enter it automatically.  Inside the
    body ``time`` is an internal loop time: pass it through untouched.  Combine
    the loop variable with outer collections only through ``dd_*`` operators
    (e.g. ``dd_concat``, not ``unionByName``).  The body is run once per iteration
    and must call the same operators in the same order each time.

    The loop stops when an iteration changes nothing.  With ``max_iterations`` it
    raises :class:`IterationLimitExceeded` (with the number of changes still
    happening) instead of running longer; it never returns a truncated answer.
    Progress (iteration, changes, elapsed time) is logged at INFO level on the
    ``spark_differential.iterate`` logger; ``progress=True`` also shows a tqdm bar.

    ``dd_iterate`` runs eagerly: it returns once the fixed point is computed and
    materialised (local checkpoints), so errors such as
    :class:`IterationLimitExceeded` surface here, not at a later action.

    **Small loops run inside one Spark task.**  A top-level loop is first recorded:
    ``body`` is called once on empty placeholders (nothing runs), its ``dd_*``
    operators are noted and the ``select``/``where``/``withColumn``/union steps
    between them are translated to DuckDB SQL.  When that succeeds and the roots and
    outer collections together hold at most ``spark_differential.iterate.localRows``
    rows (default 1,000,000, 2,500,000 on a ``local`` master; ``0`` or ``off`` disables it), every iteration runs inside
    one task with the same kernels: one Spark job for the whole loop instead of
    several per iteration, and identical rows.  On a classic session an answer of at
    most 10,000 rows (1 MiB) comes back to the driver with that job and the returned
    DataFrame holds it as local rows (a later ``collect`` runs no job; a join with it may
    broadcast it); a larger one stays in the job's local checkpoint, as one row per run of
    rows with equal data (their times and diffs in a list column) that the returned
    DataFrame explodes: its plan reads the checkpoint through a ``Generate`` (``inline``),
    and the JVM keeps about a third of the memory a row per change would take.  Otherwise (a nested
    ``dd_iterate``, an expression the translator does not cover, larger inputs) the
    loop runs iteration by iteration on the cluster; the reason is logged at INFO.
    On Spark Connect the steps are read from the client's plan, with the types
    checked against the server's schema; fewer kinds of expressions are read there
    (no division or floating point), the others run distributed.
    The body must therefore be a pure function of its argument: it may be called
    once (recorded) or once per iteration.

    Over a totally ordered time a top-level loop runs in time chunks when its inputs
    have many more updates than live rows (``spark_differential.iterate.chunkRows``:
    updates per chunk, ``auto`` or ``off``; ``auto`` is the live rows, at least 2,000,
    on the distributed path, and 16 times the live rows, at least 32,000, inside one
    task); to find the collections entering the
    loop, ``body`` is then called once more before the first iteration, without
    running anything.

    >>> import spark_differential as sd
    >>> from pyspark.sql import functions as F
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (1, 2, 5, -1)], "src long, dst long, time long, diff long")
    >>> roots = spark.createDataFrame([(0, 0, 0, 1)], "node long, dist long, time long, diff long")
    >>> dist = roots.dd_iterate(lambda d: d.dd_join(edges.withColumnRenamed("src", "node"), on="node")
    ...     .select(F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
    ...     .dd_concat(d).dd_min(by="node", col="dist"))
    >>> dist.orderBy("time", "node").show()
    +----+----+----+----+
    |node|dist|time|diff|
    +----+----+----+----+
    |   0|   0|   0|   1|
    |   1|   1|   0|   1|
    |   2|   2|   0|   1|
    |   2|   2|   5|  -1|
    +----+----+----+----+
    <BLANKLINE>
    """
    op = "dd_iterate"
    if not callable(body):
        raise TypeError(f"{op}: body must be callable, got {type(body).__name__}")
    if max_iterations is not None and (not isinstance(max_iterations, int) or max_iterations < 1):
        raise ValueError(f"{op}: max_iterations must be a positive int or None, got {max_iterations!r}")
    cs = inspect(df, op=op)
    if not isinstance(cs.ttype, Loop):
        from spark_differential.incremental.traced import current

        view = current()  # in an incremental view's update: kept by per-iteration traces
        if view is not None:
            return view.loop(df, cs, body, max_iterations)
        return _run_loop(df, cs, body, max_iterations, None, progress)
    # a loop inside another loop's body: recompute from the accumulated input each outer iteration
    ctx = _current(cs.ttype.loop_id, op)
    if ctx.recording is not None:
        from spark_differential.intask.translate import Untranslatable

        raise Untranslatable("the body nests a dd_iterate")
    if ctx.discovering:
        raise _NotChunkable("the body nests a dd_iterate")
    _, slot = ctx.next_slot(op, 1)
    ctx.loose = True
    if slot.nested is None:
        slot.nested = NestedState()
    st = slot.nested
    data = list(cs.data_cols)
    delta = _strip(df, cs)
    acc = delta if st.acc_input is None else st.acc_input.unionByName(delta)
    st.acc_input = _checkpoint(_consolidate(acc, data))
    inner_cs = inspect(st.acc_input, op=op)
    result = _run_loop(st.acc_input, inner_cs, body, max_iterations, st.captured, progress)
    change = result if st.previous is None else result.unionByName(
        st.previous.select(*qcols(data), TIME, (-F.col(DIFF)).alias(DIFF))
    )
    st.previous = result
    out = _consolidate(change, data)
    return _checkpoint(_stamp(out, data, cs.ttype, ctx.iteration, time_col=F.col(TIME)))
