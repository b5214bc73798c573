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
Spark task (:mod:`spark_differential.intask`): same kernels, same traces, one job
instead of several per iteration.

How a call reaches its loop: while the loop runs distributed it is a handler of
:mod:`spark_differential.engine.call` (:class:`~.handler.RunningLoop`); while its body is
recorded for the in-task path the recorder is (:mod:`spark_differential.intask.record`);
and ``dd_iterate`` itself passes the handlers first (an incremental view keeps a top-level
loop by per-iteration traces, a running loop recomputes a nested one), then runs here.

The loop stops at the first iteration whose changes consolidate to nothing.  A
``dd_iterate`` inside a body is recomputed from its accumulated inputs at every
iteration of the enclosing loop (correct, but not differential across the outer
loop); its body may use collections of the directly enclosing loop and from
outside all loops.
"""

from __future__ import annotations

import itertools
import logging
import time as _time
from collections.abc import Callable
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core import conf as _conf
from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, checked, inspect, qcols
from spark_differential.core.lattice import LOOP_OUTER, Loop, Total
from spark_differential.engine import call as seam
from spark_differential.engine import chunks as _chunks
from spark_differential.engine.call import LoopCall
from spark_differential.engine.chunks import Chunks
from spark_differential.errors import IterationError, IterationLimitExceeded, LoopRuleError, SchemaMismatchError
from spark_differential.intask import launch
from spark_differential.loop.handler import RunningLoop
from spark_differential.loop.packed import ITER
from spark_differential.loop.state import LoopContext, NotChunkable, stamp, strip
from spark_differential.trace.spark import checkpoint, consolidated_collection, counted, release

log = logging.getLogger("spark_differential.iterate")

_LOOP_IDS = itertools.count(1)


def new_loop_time(cs: CollectionSchema) -> Loop:
    """A fresh loop time over ``cs``'s time type (each loop has its own id)."""
    return Loop(cs.ttype, next(_LOOP_IDS))


_LOOP_RULES = (
    "Inside a dd_iterate body `time` is an internal loop time: pass it through untouched (select it as it "
    "is, never replace or compute it), and combine the loop collection with other collections only through "
    "dd_* operators (dd_concat instead of union/unionByName, dd_join/dd_semijoin instead of join)."
)


def rule_checked(body: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame], DataFrame]:
    """``body``, with Spark's analysis errors about the loop's internal time turned into
    :class:`LoopRuleError` (they name internal struct fields the user never wrote)."""
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


def check_body_output(out: Any, cs: CollectionSchema, loop_t: Loop, select: bool = True) -> DataFrame:
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


def plan_chunks(
    ctx: LoopContext, roots: DataFrame, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame], loop_t: Loop
) -> Chunks | None:
    """Time chunks for a top-level loop over a totally ordered time (``None``: run unsliced).

    The body is called once without running anything, to learn which collections
    enter the loop (their updates and live rows decide the number of chunks); a body
    that nests a loop, or uses an operator or time type chunks cannot serve, runs
    unsliced.
    """
    setting = settings.chunk_rows(ctx.spark)
    if setting == 0 or not isinstance(cs.ttype, Total):
        return None
    data = list(cs.data_cols)
    ctx.discovering = True
    ctx.begin(0)
    try:
        check_body_output(body(stamp(roots, data, loop_t, 0, time_col=F.col(TIME))), cs, loop_t)
        ctx.end()
    except NotChunkable as e:
        log.debug("dd_iterate: not sliced into time chunks: %s", e)
        return None
    finally:
        ctx.discovering = False
        entering, ctx.entering = ctx.entering, []
        ctx.release()
        ctx.slots = []
    return _chunks.plan(cs.ttype, [roots, *entering], setting)


def _run_loop(call: LoopCall) -> DataFrame:
    """Run a loop no handler took: inside one task when it can, else iteration by iteration."""
    with _conf.snapshot(call.df.sparkSession):  # the session's settings read once (Spark Connect)
        return _looped(call)


def _looped(call: LoopCall) -> DataFrame:
    df, cs, max_iterations, captured = call.df, call.cs, call.max_iterations, call.captured
    spark = df.sparkSession
    loop_t = new_loop_time(cs)
    body = rule_checked(call.body)
    restore = _loop_conf(spark)
    bar = _progress_bar(call.progress)
    try:
        if captured is None:
            local = launch.attempt(df, cs, body, loop_t, lambda out: check_body_output(out, cs, loop_t, select=False),
                                   max_iterations, bar)
            if local is not None:
                return local
        ctx = RunningLoop(loop_t, spark, captured)
        with seam.handling(ctx):
            try:
                return _distributed(ctx, df, cs, body, loop_t, max_iterations, bar)
            finally:
                ctx.release()
    finally:
        if bar is not None:
            bar.close()
        restore()


def _distributed(ctx: RunningLoop, df: DataFrame, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame],
                 loop_t: Loop, max_iterations: int | None, bar: Any) -> DataFrame:
    """The loop iteration by iteration on the cluster (the module docstring)."""
    started = _time.time()
    data = list(cs.data_cols)
    roots, ctx.weight = counted(checked(df, cs, "dd_iterate").select(*qcols(data), TIME, F.col(DIFF).cast("long").alias(DIFF)))
    if ctx.captured_store is None:
        ctx.chunks = plan_chunks(ctx, roots, cs, body, loop_t)
    if ctx.chunks is not None:
        unsliced = roots
        roots, ctx.weight = counted(ctx.chunks.chunked(roots))
        release(unsliced)
    entered = stamp(roots, data, loop_t, 0, time_col=F.col(TIME))
    parts = [roots]
    kept = [roots]  # the checkpoints behind parts
    v = entered
    i = 0
    while True:
        ctx.begin(i)
        raw = body(v)
        out = check_body_output(raw, cs, loop_t)
        ctx.end()
        held = next(((slot, n) for r, slot, n in ctx.resident if r is raw), None) if i > 0 else None
        if held is not None:
            # a packed dd_min's output, counted by its kernel's job and kept in its checkpoint
            # (moving with its trace batch when merged): no job of its own; the result
            # reads it there
            log.debug("dd_iterate: iteration %d: the body's result is consolidated already, counted and kept "
                      "by its kernel's job", i + 1)
            slot, changes = held
            nxt = stamp(out, data, loop_t, i + 1)
            slot.resident.append(i)
        elif i > 0 and ctx.is_consolidated(raw):  # e.g. a dd_min's output: no shuffle
            log.debug("dd_iterate: iteration %d: the body's result is consolidated already", i + 1)
            nxt, changes = counted(stamp(out, data, loop_t, i + 1))
        else:
            nxt = out if i > 0 else out.unionByName(entered.select(*qcols(data), TIME, (-F.col(DIFF)).alias(DIFF)))
            nxt, changes = counted(stamp(consolidated_collection(nxt, data), data, loop_t, i + 1))
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
            parts.append(strip(nxt, cs))
            kept.append(nxt)
        v = nxt
    for slot in ctx.slots:  # loop variables held in packed checkpoints (freed by ctx.release)
        if slot.resident and slot.emit is not None:
            parts += [strip(slot.emit(src.where(F.col(ITER).isin(slot.resident))), cs) for _, src in slot.packed.batches]
    result = parts[0]
    for p in parts[1:]:
        result = result.unionByName(p)
    if ctx.chunks is not None:
        # one shuffle by the data columns, materialised once, serves both aggregations
        # (per chunk, per time) partition by partition (one query reading the shuffle
        # twice instead, 10^6-change BFS: 8.5 s against 6.1 s)
        shuffled = checkpoint(result.repartition(ctx.nparts, *qcols(data)))
        kept.append(shuffled)
        result = ctx.chunks.unchunked(shuffled)
    final = checkpoint(consolidated_collection(result, data))
    for df_ in kept:  # read by the final result's jobs only (it has run): free them now
        release(df_)
    return final


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
    and the JVM keeps about a third of the memory a row per change would take.  Larger
    inputs over a totally ordered time run in slices of time, each inside a task of its
    own, all in one job (each slice starts from the inputs accumulated before it); a state
    too large to slice runs in key partitions, a task each of one barrier stage, the tasks
    exchanging their changes, each holding up to ``spark_differential.iterate.partitionRows``
    input rows (default three times the default ``localRows``; ``localSpread``: ``auto``,
    ``always``, ``keys`` or ``off``).  Otherwise (a nested ``dd_iterate``, an expression the
    translator does not cover, a state too large for the session's tasks together) the
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
    return seam.iterate(LoopCall(df, cs, body, max_iterations, progress), _run_loop)
