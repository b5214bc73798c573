"""The sources of an in-task program: tagged into the one table a task reads, and their size.

On ``(data, time, diff)``: source ``j`` of a program (the loop's roots first, then every
outer collection its body reads) reaches the task as rows ``SRC = j`` of one table, its
columns under positional names (:func:`tag_name`) with the time's leaves and diff, null
times and diffs failing with the error every collection entering a loop gets.  Its size
is estimated from Spark's plan, before any job (:func:`estimated_rows`,
:func:`held_rows`): what decides whether one task should hold it.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from spark_differential.core.collection import DIFF, TIME, integral_sql, null_guard, null_guard_sql, qcol, quoted
from spark_differential.core.lazy import lazy
from spark_differential.core.names import PART, SRC
from spark_differential.core.projections import select_sql
from spark_differential.core.session import is_connect

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")


def tag_name(j: int, i: int) -> str:
    """The name of column ``i`` of source ``j`` in the one table a loop's task reads."""
    return f"_sd{j}_{i}"


def source_table(table: pa.Table, j: int, cols: Sequence[str]) -> pa.Table:
    return pa.Table.from_arrays([table.column(tag_name(j, i)) for i in range(len(cols))], names=list(cols))


def tag_source(d: Any, j: int, cols: Sequence[str], ttype: Any, part: bool = False, op: str = "dd_iterate",
               guarded: bool = True) -> Any:
    """Source ``j`` of a loop's task as rows of the one table the task reads: ``SRC = j``, its
    columns ``cols`` and the time's leaves and diff under positional names (:func:`tag_name`: user
    names may hold dots or backticks), with the null checks of every collection entering a loop
    (as iterate.py's on the distributed path, named for ``op``); ``part``: keep the column ``PART`` too.
    ``guarded=False`` (an integral time): no check at all, the
    columns renamed and cast (whose analysis costs Spark a third of a checked one's), for a task
    that checks the rows itself (an incremental view's: ``incremental.inputs.TaskCheck``)."""
    from pyspark.sql import functions as F


    sql_type = integral_sql(ttype)
    if sql_type is not None:  # SQL text: one selectExpr instead of a few py4j round trips per Column
        t = leaf = f"CAST({quoted(TIME)} AS BIGINT)"
        diff = f"CAST({quoted(DIFF)} AS BIGINT)"
        if guarded:
            t = null_guard_sql(leaf, [leaf], "time", op)
            diff = null_guard_sql(diff, [quoted(DIFF)], "diff", op)
        return select_sql(d, [f"{j} AS {SRC}", *[f"{quoted(c)} AS {tag_name(j, i)}" for i, c in enumerate(cols)],
                              f"{t} AS {tag_name(j, len(cols))}", f"{diff} AS {tag_name(j, len(cols) + 1)}",
                              *([quoted(PART)] if part else [])])
    if not guarded:
        raise ValueError("tag_source: guarded=False needs an integral time")
    enc = [null_guard(leaf, [leaf], "time", op) for leaf in ttype.encode_column(F.col(TIME))]
    return d.select(
        F.lit(j).alias(SRC),
        *[qcol(c).alias(tag_name(j, i)) for i, c in enumerate(cols)],
        *[leaf.alias(tag_name(j, len(cols) + i)) for i, leaf in enumerate(enc)],
        null_guard(F.col(DIFF).cast("long"), [F.col(DIFF)], "diff", op).alias(tag_name(j, len(cols) + len(enc))),
        *([F.col(PART)] if part else []),
    )


_runs: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # run_row's DataFrame, by session


def run_row(spark: Any) -> Any:
    """One row tagged ``SRC = -1`` (no source's), for a task that must run when no source has
    a row (it still reads stored state and writes a version): made once per session, as a
    DataFrame of local rows costs some 30 py4j round trips.  A range, not Python rows: Spark
    reads a DataFrame of Python rows through a second Python worker inside the task that
    reads it (0.1 s of a BFS view's 0.4 s update)."""
    try:
        return _runs[spark]
    except (KeyError, TypeError):
        df = spark.range(0, 1, 1, 1).selectExpr(f"CAST(-1 AS INT) AS {SRC}")
        try:
            _runs[spark] = df
        except TypeError:  # a session that cannot be weakly referenced: made each time
            pass
        return df


class Estimate(NamedTuple):
    """Spark's estimate of a loop's sources (:func:`estimated_rows`): ``rows``, a lower
    estimate of their rows (sources of unknown size left out); ``held``, whether every
    source only reads rows Spark holds already (:func:`_held`); ``known``, whether every
    source's size was known; ``bound``, at most how many rows they hold where the unknown
    ones are Python lists (:func:`held_rows`), else ``None``."""

    rows: int
    held: bool
    known: bool = True
    bound: int | None = None


def estimated_rows(sources: Sequence[Any]) -> Estimate:
    """:class:`Estimate` of the sources' rows from Spark's plan statistics (no job).

    A source's rows are its plan's row count where Spark knows it (cached and local data),
    else its size over a generous row width; on Spark Connect, its local rows or the
    server's statistics (one request).  Where neither is known (a checkpoint of an unsized
    plan, a Python list parallelised by ``createDataFrame``) the source is left out."""
    total = 0
    held = True
    unknown = []
    for df in sources:
        if is_connect(df):
            rows, ok = connect_held(df._plan)
            if rows == 0 and not ok:  # not local rows: the server's plan statistics (one request, no job)
                try:
                    rows = explained_rows(df._explain_string(mode="cost"), len(df.columns))
                except Exception:  # noqa: BLE001 - a server that does not explain: no estimate
                    rows = 0
                if rows == 0:
                    unknown.append(df)
            total += rows
            held = held and ok
            continue
        try:
            execution = df._jdf.queryExecution()
            local = _local_rows(execution.withCachedData())
            if local is not None:  # (what the optimizer makes of it: that relation, its rows known)
                rows = local
            else:
                plan = execution.optimizedPlan()
                held = held and _held(plan)
                stats = plan.stats()
                count = stats.rowCount()
                rows = int(str(count.get())) if count.isDefined() else _rows_of_size(
                    int(str(stats.sizeInBytes())), len(df.columns))
        except Exception:  # noqa: BLE001 - a session without plan statistics: no estimate
            held = False
            rows = 0
        total += rows
        if rows == 0:
            unknown.append(df)
    bounds = [held_rows(df) for df in unknown]
    bound = None if None in bounds else total + sum(b or 0 for b in bounds)
    return Estimate(total, held, not unknown, bound)


def _local_rows(plan: Any) -> int | None:
    """The rows of a plan (before optimisation) that only renames or projects a ``LocalRelation``
    (local rows: ``createDataFrame`` of pandas or Arrow); else ``None``.  The optimizer folds
    such a projection into a local relation of the same rows, so this is the optimized plan's
    row count, found without optimising (a few ms a source), in three round trips: the plan's
    tree as text (each line one of those nodes, else ``None``) and its ``maxRows``, which those
    nodes pass up from the relation's row count."""
    lines = [line for line in str(plan.treeString()).splitlines() if line.strip()]
    nodes = [_TREE_PREFIX.sub("", line).split(" ", 1)[0] for line in lines]
    if not nodes or nodes[-1] != "LocalRelation" or any(n not in ("Project", "SubqueryAlias") for n in nodes[:-1]):
        return None
    rows = plan.maxRows()
    return int(str(rows.get())) if rows.isDefined() else None


_TREE_PREFIX = re.compile(r"^[\s:|+-]*")  # a tree string's indentation and branches ("   +- ")


def _rows_of_size(size: int | float, columns: int) -> int:
    """Rows of a plan of ``size`` bytes by Spark's statistics: over a generous row width, at
    least one; 0 for Spark's "unknown" (``Long.MaxValue``, 8 EiB)."""
    if size <= 0 or size >= (1 << 62):
        return 0
    return max(1, int(size // (16 * (columns + 1))))  # a few bytes are a row, not none


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}


def explained_rows(text: str, columns: int) -> int:
    r""":func:`estimated_rows` of one plan from its ``explain(mode="cost")`` text (how a
    Spark Connect client reads plan statistics): the optimized plan's root row count,
    else its size over a generous row width; 0 where the text says nothing.

    >>> explained_rows("== Optimized Logical Plan ==\nLocalRelation [a#1], Statistics(sizeInBytes=1.5 KiB, "
    ...                "rowCount=1.00E+3)", 2)
    1000
    >>> explained_rows("== Optimized Logical Plan ==\nLogicalRDD [a#1], Statistics(sizeInBytes=8.0 EiB)", 2)
    0
    """
    _, _, optimized = text.partition("== Optimized Logical Plan ==")
    m = re.search(r"Statistics\(sizeInBytes=([0-9.Ee+-]+) ([KMGTPE]?i?B)(?:, rowCount=([0-9.Ee+-]+))?", optimized)
    if m is None:
        return 0
    if m.group(3) is not None:
        return int(float(m.group(3)))
    return _rows_of_size(float(m.group(1)) * _UNITS.get(m.group(2), 1), columns)


def counted_rows(sources: Sequence[Any]) -> int:
    """The sources' rows, counted in one job (where :func:`estimated_rows` knows nothing)."""
    from pyspark.sql import functions as F

    counts = None
    for df in sources:
        c = df.agg(F.count(F.lit(1)).alias("n"))
        counts = c if counts is None else counts.unionByName(c)
    return 0 if counts is None else sum(int(r["n"] or 0) for r in counts.collect())


HELD = {"LogicalRDD", "LocalRelation", "InMemoryRelation", "Project", "Filter", "SubqueryAlias", "Union"}


def _held(plan: Any) -> bool:
    """Whether a plan only reads rows Spark holds already (local rows, checkpoints, cached
    tables) and projects or filters them: no file scan, join or aggregate whose work one
    task should not do alone.  (A filter's estimated size is its input's, so a filter
    over more held rows than the loop's limit is already sent to the distributed path.)"""
    if plan.nodeName() not in HELD:
        return False
    children = plan.children()
    return all(_held(children.apply(i)) for i in range(children.size()))


CONNECT_PASS = {"Project", "Filter", "SubqueryAlias", "WithColumns", "WithColumnsRenamed", "Drop", "ToDF"}


# rows Spark Connect holds whose number the client's plan does not say (checkpoints, cached local data)
CONNECT_CACHED = {"CachedLocalRelation", "ChunkedCachedLocalRelation", "CachedRemoteRelation", "CachedRelation"}


CONNECT_HELD = {"LocalRelation", "SetOperation"} | CONNECT_PASS | CONNECT_CACHED


def connect_held(plan: Any, exact: bool = False) -> tuple[int, bool]:
    """:func:`_held` for a Spark Connect client's plan (no RPC): whether it only reads local
    rows or checkpoints (``CachedRemoteRelation``) through projections, filters and unions,
    and the rows of the local relations it reads (a union's sides summed; a checkpoint's
    rows are not known here: 0, the task's own count decides).  ``exact``: only local
    relations, whose rows the client holds, count as held (the rows are then a bound)."""
    kind = type(plan).__name__
    if kind not in CONNECT_HELD or getattr(plan, "_references", None) or (exact and kind in CONNECT_CACHED):
        return 0, False
    if kind == "SetOperation":
        if plan.set_op != "union":
            return 0, False
        a, b = connect_held(plan._child, exact), connect_held(plan.other, exact)
        return a[0] + b[0], a[1] and b[1]
    child = getattr(plan, "_child", None)
    if child is not None:
        return connect_held(child, exact)
    table = getattr(plan, "_table", None)
    return (table.num_rows if table is not None else 0), True


_PASS = {"Project", "Filter", "SubqueryAlias", "Repartition", "RepartitionByExpression"}  # rows kept as they are


def held_rows(df: Any) -> int | None:
    """At most how many rows ``df`` holds, where its plan says so without a job: local
    rows (and a Python list parallelised by ``createDataFrame``) through projections,
    filters and unions; ``None`` for anything else (a file scan, a join, an
    aggregate, a checkpoint, an operator's output)."""
    if is_connect(df):
        rows, held = connect_held(df._plan, exact=True)
        return rows if held else None
    try:
        return _classic_rows(df._jdf.queryExecution().analyzed(), df.sparkSession)
    except Exception:  # noqa: BLE001 - a plan read differently by this Spark: not known small
        return None


def _classic_rows(plan: Any, spark: Any) -> int | None:
    kind = plan.nodeName()
    if kind == "LocalRelation":
        return int(plan.data().size())
    if kind == "LogicalRDD":
        return _parallelised_rows(plan.rdd(), spark)
    children = plan.children()
    kids = [children.apply(i) for i in range(children.size())]
    if kind in _PASS or (kind == "Union" and kids):
        total = 0
        for k in kids:
            n = _classic_rows(k, spark)
            if n is None:
                return None
            total += n
        return total
    return None


def _parallelised_rows(rdd: Any, spark: Any) -> int | None:
    """A bound on the rows of a classic ``createDataFrame`` of a Python list: its RDD
    descends from the ``ParallelCollectionRDD`` of the list's pickled batches, each of
    at most ``max(1024, batchSize)`` rows (``SparkContext.parallelize``).  Read once per
    RDD (an RDD does not change; its lineage costs a few py4j round trips per step)."""
    sc = spark.sparkContext
    known = _RDD_ROWS.setdefault(sc, {})
    key = int(rdd.id())
    if key not in known:
        known[key] = _lineage_rows(rdd, sc)
    return known[key]


# SparkContext -> RDD id -> _lineage_rows (RDD ids restart with every SparkContext)
_RDD_ROWS: weakref.WeakKeyDictionary[Any, dict[int, int | None]] = weakref.WeakKeyDictionary()


def _lineage_rows(rdd: Any, sc: Any) -> int | None:
    for _ in range(8):
        if rdd.getClass().getSimpleName() == "ParallelCollectionRDD":
            parts = rdd.partitions()
            batches = sum(int(parts[i].values().size()) for i in range(len(parts)))
            size = int(getattr(sc, "_batchSize", 0) or 0)
            return batches * max(1024, size)
        deps = rdd.dependencies()
        if deps.size() != 1:
            return None
        rdd = deps.head().rdd()
    return None
