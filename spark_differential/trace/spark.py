"""A trace as DataFrames on the executors, partitioned by key bucket: the distributed loop's.

On ``(data, time, diff)``: see :mod:`spark_differential.trace`.  Here a batch is a local
checkpoint in kernel form (bucket, key hash, keys, data, time leaves, ``_d``, ``_new``),
partitioned by bucket, so that selecting the rows of the keys an iteration touches is a
partition-local hash join (:func:`touched_rows`) and merging batches is an aggregation
partition by partition.  :func:`consolidated` is "advance to a frontier and consolidate"
on DataFrames, used wherever a collection is consolidated by Spark.

A checkpoint is a Spark job: a new batch is written together with the merge of the older
batches the policy picks (:meth:`SparkTrace.push`), in one job and one checkpoint.  The
helpers here own the life of checkpoints: :func:`checkpoint`, :func:`counted`,
:func:`observed` (metrics computed by the checkpoint's own job), :func:`release` (free
one whose readers have all run) and :func:`collect_garbage`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, qcols, quoted
from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.names import BUCKET, KEY_HASH
from spark_differential.core.session import release_at_exit
from spark_differential.errors import from_job_failure
from spark_differential.kernels.common import NEW, D
from spark_differential.trace.spine import Spine, default_policy

FEW_CHANGES = 20_000  # at most this many loop changes in an iteration: touched keys may be broadcast
BROADCAST_TRACE = 1_000_000  # ... when the trace they select from holds at least this many rows (estimated)


# ---------------------------------------------------------------------------------
# advance and consolidate


def consolidated(df: DataFrame, cols: Sequence[str], diff: str = DIFF, ttype: TimeType | None = None,
                 frontier: Sequence[Leaves] = (), leaves: Sequence[str] = ()) -> DataFrame:
    """``df`` with the diffs of rows equal in ``cols`` summed (as ``bigint``) and zero sums
    dropped, its columns in their order; with a ``frontier``, the time leaves ``leaves``
    (int64 columns among ``cols``) first advanced to it (``advance(t, F)``, seed 004)."""
    order = df.columns
    if frontier:
        assert ttype is not None
        adv = dict(zip(leaves, ttype.sql_advance(list(leaves), list(frontier))))
        df = df.select(*[F.expr(adv[c]).alias(c) if c in adv else F.col(quoted(c)) for c in order])
    summed = df.groupBy(*qcols(cols)).agg(F.expr(f"CAST(sum({quoted(diff)}) AS BIGINT) AS {quoted(diff)}"))
    out = summed.where(f"{quoted(diff)} != 0")
    return out if list(out.columns) == list(order) else out.select(*qcols(order))


def consolidated_collection(df: DataFrame, data: Sequence[str]) -> DataFrame:
    """A collection consolidated: ``(data, time, diff)`` with diffs summed per data and time
    and zero sums dropped (SQL text where a Column costs py4j round trips)."""
    return df.groupBy(*qcols(data), TIME).agg(F.expr(f"CAST(sum({quoted(DIFF)}) AS BIGINT) AS {quoted(DIFF)}")).where(
        f"{quoted(DIFF)} != 0")


def consolidated_sql(df: DataFrame, data: Sequence[str], time_sql: str, diff_sql: str) -> DataFrame:
    """:func:`consolidated_collection` of ``df`` projected to ``(data, time_sql AS time,
    diff_sql AS diff)`` (SQL expressions: a null check, a negation, a cast), the projection
    inside the aggregation: the plan of a plain ``groupBy(...).agg(sum(...)).where(...)``,
    the checks evaluated where the rows are first read (the partial aggregation)."""
    return df.groupBy(*qcols(data), F.expr(f"{time_sql} AS {quoted(TIME)}")).agg(
        F.expr(f"CAST(sum({diff_sql}) AS BIGINT) AS {quoted(DIFF)}")).where(f"{quoted(DIFF)} != 0")


def advanced(trace: DataFrame, ttype: TimeType, frontier: Sequence[Leaves], leaves: Sequence[str]) -> DataFrame:
    """A trace in kernel form (time leaves ``leaves``, ``_d``) advanced to ``frontier`` and
    consolidated (seed 004)."""
    rest = [c for c in trace.columns if c != D]
    return consolidated(trace, rest, D, ttype, frontier, leaves)


def union_all(dfs: Sequence[DataFrame]) -> DataFrame | None:
    """The union (by name) of ``dfs``; ``None`` for none."""
    if not dfs:
        return None
    out = dfs[0]
    for df in dfs[1:]:
        out = out.unionByName(df)
    return out


# ---------------------------------------------------------------------------------
# checkpoints


def checkpoint(df: DataFrame) -> DataFrame:
    """Materialise ``df`` on the executors and cut its lineage (one job)."""
    release_at_exit(df)  # Spark Connect: the checkpoint's __del__ must not run at interpreter shutdown
    try:
        return df.localCheckpoint(eager=True)
    except Exception as e:
        mine = from_job_failure(e)
        if mine is not None:
            raise mine from e
        raise


def observed(df: DataFrame, **metrics: Any) -> tuple[DataFrame, dict[str, int] | None]:
    """:func:`checkpoint` and aggregate ``metrics`` (columns) of its rows, computed by the
    same job (observed metrics); ``None`` where the session reports none.

    Spark Connect: a checkpoint is a command, and its reply carries no observed metrics
    (the Observation stays empty)."""
    obs = Observation()
    try:
        watched = df.observe(obs, *[c.alias(n) for n, c in metrics.items()])
    except Exception:  # pragma: no cover - a session without observed metrics
        return checkpoint(df), None
    out = checkpoint(watched)
    got = obs.get
    if any(got.get(n) is None for n in metrics):
        return out, None
    return out, {n: int(got[n]) for n in metrics}


def counted(df: DataFrame) -> tuple[DataFrame, int]:
    """:func:`checkpoint` and the number of rows, counted by the same job (an observed
    metric) instead of a second one (Spark Connect: a second one)."""
    out, metrics = observed(df, n=F.count(F.lit(1)))
    return out, (out.count() if metrics is None else metrics["n"])


def cache(df: DataFrame) -> DataFrame:
    """Keep ``df`` (already partitioned by bucket) in executor memory, computed on first use."""
    return df.persist()


def cheap(df: DataFrame) -> bool:
    """Whether ``df`` only selects and filters checkpointed rows (the loop variable, an
    operator's output of this iteration kept as a checkpoint): reading it twice costs
    two scans, not two runs of a kernel.  ``False`` when the plan cannot be inspected
    (Spark Connect)."""
    try:
        tree = df._jdf.queryExecution().analyzed().treeString()
    except Exception:  # noqa: BLE001 - Spark Connect: no JVM plan here
        return False
    for line in tree.splitlines():
        node = line.lstrip(" :+-|").split(" ", 1)[0]
        if node and node not in ("Project", "Filter", "LogicalRDD", "SubqueryAlias"):
            return False
    return True


def release(df: DataFrame) -> None:
    """Free the blocks of a checkpoint nothing reads any more, now (see :func:`collect_garbage`).

    Only for checkpoints whose every reader has run: a later job reading one fails
    ("checkpoint block not found"), it never reads other data."""
    try:
        plan = df._jdf.queryExecution().analyzed()
        if plan.nodeName() == "LogicalRDD":
            plan.rdd().unpersist(False)
    except Exception:  # noqa: BLE001 - not a classic session's checkpoint: the driver GC frees it
        pass


def collect_garbage(spark: Any) -> None:
    """Let Spark free the checkpoints of earlier iterations that nothing references any more.

    Spark drops an RDD's blocks only once the driver JVM has garbage-collected the RDD;
    with a large heap that may not happen for the whole loop, and dead checkpoints
    then crowd executor memory (10^4-change BFS: 86 stored RDDs, 167 MB without this;
    40 and 70 MB with it).  Python proxies go first, so the JVM objects are unreachable.
    """
    gc.collect()
    try:
        spark.sparkContext._jvm.System.gc()
    except Exception:  # noqa: BLE001 - e.g. a Spark Connect session: nothing to hint
        pass


# ---------------------------------------------------------------------------------
# reading a trace


def broadcast_worth(changes: int, trace_rows: int) -> bool:
    """Whether to broadcast an iteration's touched keys (``changes`` of them at most) to
    select a trace's rows (``trace_rows``, estimated) instead of hashing them per partition.

    A broadcast is a Spark job of its own, worth it only when it saves scanning work: a
    large trace probed by few keys (20 M trace rows, 1,000 touched keys, local[2]:
    1.8-2.4 s against 3.1-3.7 s).  Small traces take the partition-local hash join, inside
    the job that reads them."""
    return changes <= FEW_CHANGES and trace_rows >= BROADCAST_TRACE


def touched_rows(trace: DataFrame, touched: DataFrame, few: bool) -> DataFrame:
    """Trace rows of the touched keys (by key hash: a collision only lets extra rows through,
    which the kernels ignore).  Both sides are hash-partitioned by bucket, so this is a
    partition-local hash join: nothing of the trace is shuffled.  When ``few`` keys are
    touched (the tail of a loop) they are broadcast instead: every task then probes one
    small hash table, which scans a large trace faster."""
    if few:
        return trace.join(F.broadcast(touched), [BUCKET, KEY_HASH], "left_semi")
    return trace.join(touched.hint("shuffle_hash"), [BUCKET, KEY_HASH], "left_semi")


# ---------------------------------------------------------------------------------
# the trace


@dataclass
class SparkTrace:
    """One input's earlier updates in a distributed loop: a :class:`~.spine.Spine` of batches,
    each a view (``_new`` false) of the checkpoint behind it; sizes are estimates (the loop's
    changes per iteration), which decide when to merge, never what the trace holds."""

    spine: Spine[tuple[DataFrame, DataFrame]] = field(default_factory=lambda: Spine(default_policy()))

    @property
    def rows(self) -> int:
        """The estimated rows of the trace."""
        return sum(self.spine.sizes)

    def checkpoints(self) -> list[DataFrame]:
        return [cp for _, cp in self.spine.batches]

    def push(self, new: DataFrame, weight: int, materialise: Callable[[DataFrame], DataFrame],
             merge: bool = True) -> tuple[DataFrame, DataFrame | None, list[DataFrame], int]:
        """Materialise the new updates ``new`` (kernel form, ``_new`` true, about ``weight``
        rows) as the newest batch: ``(the new updates, the trace before them, the checkpoints
        no longer part of the trace, their estimated rows)``.

        One job: when the policy merges older batches into the new one (``merge``), they are
        consolidated in place by the same job that materialises the new updates, into the
        same checkpoint (all partitioned by bucket: the union stays so, the aggregation runs
        partition by partition).  The new batch is that whole checkpoint (updates flagged
        ``_new`` false), the new updates its rows flagged true."""
        spine = self.spine
        weight = max(1, weight)
        start = spine.merge_start(weight) if merge else len(spine)
        older = [view for view, _ in spine.batches[start:]]
        if older:
            union = union_all(older)
            assert union is not None
            cols = [c for c in union.columns if c != D]
            new = new.unionByName(consolidated(union, cols, D))
        cp = materialise(new)
        before = union_all([view for view, _ in spine.batches[:start]] + ([cp.where(~F.col(NEW))] if older else []))
        dropped = sum(spine.sizes[start:])
        retired = spine.replace(start, (cp.withColumn(NEW, F.lit(False)), cp), dropped + weight)
        return (cp.where(F.col(NEW)) if older else cp), before, [c for _, c in retired], dropped
