"""A reduction in a distributed loop whose trace is packed: one row per key.

On ``(data, time, diff)``: an operator in a loop keeps every update it has seen (its trace)
and, at each iteration, hands its kernel the new updates with the trace of the keys they
touch.  Kept as rows, each touched key's whole history goes to Python again every
iteration, one row at a time.  Packed (:mod:`spark_differential.kernels.packed`), a key's
trace is one row: its key columns and a blob of its consolidated updates; the kernel gets
the new updates and the packed traces of the keys they touch and returns its output and
those keys' traces with the updates merged in, which replace them (the newest blob of a key
wins).  The packed batches follow the trace merge policy
(:class:`~spark_differential.trace.spine.Spine`), merged by replacement instead of sums.
Used for a reduction of one loop collection whose data columns are all ``long``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import TIME
from spark_differential.core.lattice import Loop, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.core.names import BUCKET, KEY_HASH
from spark_differential.core.scope import Entry
from spark_differential.engine.distributed import run_prepared
from spark_differential.engine.kernel_form import Input, arrow_schema, bucket_of, finish, key_hash, prepare, time_fields
from spark_differential.kernels.common import NEW, D, keys, names, times
from spark_differential.kernels.packed import BLOB, SEQ, PackedParams
from spark_differential.kernels.packed import run as run_packed
from spark_differential.kernels.reduce import ReduceParams
from spark_differential.loop.state import LoopContext, Slot, stamp
from spark_differential.trace.spark import broadcast_worth, cache, counted, observed, touched_rows

pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")

ITER = "_sd_it"  # in a packed operator's checkpoint: the iteration of an output row (null: a trace blob)


def packs(params: Any, inputs: Sequence[Input], entries: Sequence[Entry], loop_id: int) -> bool:
    """Whether an operator keeps its trace packed per key: a reduction of one loop
    collection whose data columns are all ``long`` (times and diffs always are)."""
    if not isinstance(params, ReduceParams) or len(inputs) != 1 or entries[0].loop_id != loop_id:
        return False
    inp = inputs[0]
    return all(isinstance(inp.cs.field(c).dataType, T.LongType) for c in inp.data)


def packed_in_loop(
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
    staged = prepare(inp, ctx.nbuckets, ctx.nparts).repartition(ctx.nparts, BUCKET)
    new, incoming = (cache(staged), 0) if ctx.discovering else counted(staged)
    ctx.transient.append(new)  # read by this iteration's jobs only, then freed at once (no GC hint needed)
    k = keys(params.nkeys)
    cols = [*names("_a", params.ndata), *times(kernel_type.width), D]
    touched = new.select(BUCKET, KEY_HASH).distinct()
    side = new.withColumn(BLOB, F.lit(None).cast("binary"))
    packed = [view for view, _ in slot.packed.batches]
    several = len(packed) > 1
    if several:
        side = side.withColumn(SEQ, F.lit(None).cast("int"))
    if packed:
        batches = [b.withColumn(SEQ, F.lit(seq).cast("int")) if several else b for seq, b in enumerate(packed)]
        trace = batches[0]
        for b in batches[1:]:  # co-partitioned by bucket: the union stays so, one semi-join reads all
            trace = trace.unionByName(b)
        sent = touched_rows(trace, touched, few=broadcast_worth(ctx.weight, sum(slot.packed.sizes))).select(
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
        out, metrics = observed(out, blobs=F.count(F.when(F.col(BLOB).isNotNull(), 1)), rows=F.count(F.when(now, 1)))
        rows = incoming if metrics is None else metrics["blobs"]  # Spark Connect: the bound estimate
        ctx.transient += _pack_commit(slot, start, out, rows, k)
    loop_t = Loop(kernel_type, ctx.loop_id)
    data = [user for _, user in out_columns]

    def emit(cp: DataFrame) -> DataFrame:
        rows = finish(cp.drop(BUCKET, KEY_HASH, BLOB), out_columns, kernel_type)
        return stamp(rows, data, loop_t, ctx.iteration, time_col=F.col(TIME))

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
    with the older trace batches it merges with: ``(start, rows)``, where the new batch
    replaces ``slot.packed.batches[start:]`` (``start == len(slot.packed)``: a batch of its own).

    The trace's merge policy decides (``incoming``, the rows sent to the kernel, bounds the
    new batch's keys).  A merge keeps, of every older batch, the keys no newer batch has
    (by key hash: any key hashing like a touched key was sent to the kernel and is in
    the new batch).  So the tail of a loop, touching few keys, writes small batches
    instead of rewriting the whole trace every iteration.  Empty blobs (keys whose
    updates cancelled) shadow older batches; a batch reaching the oldest drops them.
    Everything stays partitioned by bucket (a union of co-partitioned inputs), so the
    merge runs in the kernel's job.  Output rows that are the loop variable of their
    iteration (``slot.resident``) move into the new batch with the blobs: the loop's
    result reads them where they are (see :func:`spark_differential.loop.iterate.dd_iterate`).
    """
    spine = slot.packed
    start = spine.merge_start(incoming)
    merged, seen, seen_rows = out, touched, incoming
    for (batch, src), rows in zip(reversed(spine.batches[start:]), reversed(spine.sizes[start:])):
        probe = F.broadcast(seen) if broadcast_worth(seen_rows, rows) else seen.hint("shuffle_hash")
        merged = merged.unionByName(batch.join(probe, [BUCKET, KEY_HASH], "left_anti"), allowMissingColumns=True)
        if slot.resident:  # loop variables kept in the batch move with it
            merged = merged.unionByName(src.where(F.col(ITER).isin(slot.resident)))
        seen, seen_rows = seen.unionByName(batch.select(BUCKET, KEY_HASH)), seen_rows + rows
    if start == 0:
        merged = merged.where(F.col(BLOB).isNull() | (F.length(BLOB) > 0))
    return start, merged


def _pack_commit(slot: Slot, start: int, out: DataFrame, rows: int, k: Sequence[str]) -> list[DataFrame]:
    """Record the checkpoint ``out`` of :func:`_pack_merge`'s result (its blobs: ``rows``
    keys, key columns ``k``) as the trace batch replacing ``slot.packed.batches[start:]``;
    returns the checkpoints of those (to free once nothing of this iteration reads them)."""
    merged = len(slot.packed) - start
    view = out.where(F.col(BLOB).isNotNull()).select(BUCKET, KEY_HASH, *k, BLOB)
    retired = [cp for _, cp in slot.packed.replace(start, (view, out), rows)]
    if merged:
        log.debug("dd_iterate: %s's packed trace: %d of %d batches merged, %d keys", slot.op, merged + 1,
                  len(slot.packed) + merged, rows)
    else:
        log.debug("dd_iterate: %s's packed trace: %d batches, the newest of %d keys", slot.op, len(slot.packed), rows)
    return retired
