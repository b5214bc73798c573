"""Seed 001's BFS benchmark: distances over a sliding window of edge changes.

Graph: ``--nodes`` nodes, ``--edges`` random edges; each change removes the oldest
edge and adds a new random one (``examples/_workload.py``).  For every size in
``--changes`` (all changes at distinct times), in the same run:

* **ours**: ``spark_differential.algorithms.bfs`` (``dd_iterate``), the full
  history of distances in one Spark job; per-iteration differences and seconds
  are recorded from the library's progress log;
* **(a) Python recompute**: single-process Python keeping an adjacency up to date
  and running a deque BFS from scratch at every time step;
* **(b) Pathway**: ``pw.iterate`` over the same updates (timestamps ``2t + 2``),
  in a child process so it can be stopped at the time limit.

Every participant is timed from its input in memory to its answer: ours from the
change log as a checkpointed Spark DataFrame to the result materialised and counted
(loading the generated changes into Spark is shown beside it, not in the ratio; a
garbage collection of the JVM, not timed, before each of our runs),
Python including its own BFS bookkeeping, Pathway without its child process's
start-up and imports.  ``--repeat N`` times every participant ``N`` times and keeps
the best (default 1).

Our output is verified against (a) (same number of distance changes; exact
distances at ``--check`` sampled times) and its change count compared with
Pathway's.  ``--batch-compare B`` reruns the largest size that finished with the
same changes in batches of ``B`` (coarser times) and prints the ratio
``distinct-times time / batched time``: each batched run follows one of that size's
distinct-times runs (interleaved, so both meet the JVM in the same state: Spark's
JIT compiler keeps compiling the query planner's code for dozens of runs, and a run
measured later in the session is faster for it alone; see docs/performance.md).  (Seed 004 measures the same question for
Rust differential dataflow: single-element updates ran at 1,245/s against 1,989/s in
batches of 10 and 1,563/s in batches of 100, one worker: resolution cost it 1.3-1.6x.
Seed 001's 1.75x is another comparison: the same distinct times offered in one piece
against in rounds of 1,000.)  Anything over ``--ours-limit`` / ``--time-limit`` seconds is cancelled
and shown as ``> limit``; Python recompute past the limit is extrapolated linearly
from the steps it did and marked so.

Example::

    .bench-venv/bin/python benchmarks/bfs.py --changes 10000 --json benchmarks/results/bfs.json
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections import deque
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import numpy as np  # noqa: E402
from _workload import edge_sequence, edge_updates  # noqa: E402
from common import (  # noqa: E402
    Measurement,
    Report,
    base_parser,
    finish,
    fmt_seconds,
    in_process,
    log,
    make_spark,
    measure,
    pick,
    run_spark_limited,
    warm_spark,
)

ROOT = 0


# ---------------------------------------------------------------------------------
# (a) recompute from scratch at every time step


def python_recompute(nodes: int, edges: int, changes: int, seed: int, limit: float | None) -> dict[str, Any]:
    """BFS from scratch after every change; returns the number of distance changes.

    Past ``limit`` seconds it stops and reports how many steps it did.
    """
    seq = [tuple(e) for e in edge_sequence(nodes, edges, changes, seed).tolist()]
    adj: dict[int, dict[int, int]] = {}

    def add(s: int, d: int, r: int) -> None:
        row = adj.setdefault(s, {})
        m = row.get(d, 0) + r
        if m:
            row[d] = m
        else:
            del row[d]

    def bfs() -> dict[int, int]:
        dist = {ROOT: 0}
        q = deque([ROOT])
        while q:
            n = q.popleft()
            nd = dist[n] + 1
            for m in adj.get(n, ()):
                if m not in dist:
                    dist[m] = nd
                    q.append(m)
        return dist

    started = time.perf_counter()
    for s, d in seq[:edges]:
        add(s, d, 1)
    prev = bfs()
    out_changes = len(prev)
    for i in range(1, changes + 1):
        s, d = seq[edges + i - 1]
        add(s, d, 1)
        s, d = seq[i - 1]
        add(s, d, -1)
        cur = bfs()
        out_changes += sum(1 for n, k in cur.items() if prev.get(n) != k)
        out_changes += sum(1 for n, k in prev.items() if cur.get(n) != k)
        prev = cur
        # checked at every step: one step over seed 001's large graph takes seconds
        if limit is not None and time.perf_counter() - started > limit:
            return {"steps": i, "seconds": time.perf_counter() - started, "changes": None}
    return {"steps": changes, "seconds": time.perf_counter() - started, "changes": out_changes}


# ---------------------------------------------------------------------------------
# (b) Pathway


def _pathway_child(nodes: int, edges: int, changes: int, seed: int, batch: int, conn: Any) -> None:
    import pandas as pd
    import pathway as pw

    seq = edge_sequence(nodes, edges, changes, seed)
    i = np.arange(1, changes + 1, dtype=np.int64)
    t = (i + batch - 1) // batch
    # rows are keyed in Pathway: change i removes the edge instance i - 1 (the oldest)
    add0 = pd.DataFrame({"eid": np.arange(edges), "src": seq[:edges, 0], "dst": seq[:edges, 1], "__time__": 0, "__diff__": 1})
    add = pd.DataFrame({"eid": edges + i - 1, "src": seq[edges:, 0], "dst": seq[edges:, 1], "__time__": t, "__diff__": 1})
    rem = pd.DataFrame({"eid": i - 1, "src": seq[:changes, 0], "dst": seq[:changes, 1], "__time__": t, "__diff__": -1})
    ed = pd.concat([add0, add, rem], ignore_index=True)
    ed["__time__"] = ed["__time__"] * 2 + 2  # Pathway wants even, positive timestamps
    started = time.perf_counter()
    e = pw.debug.table_from_pandas(ed, id_from=["eid"]).select(pw.this.src, pw.this.dst)
    roots = pw.debug.table_from_pandas(pd.DataFrame({"node": [ROOT], "dist": [0], "__time__": [2]}))

    def step(dist: Any, edges: Any) -> Any:
        cand = edges.join(dist, edges.src == dist.node).select(node=pw.left.dst, dist=pw.right.dist + 1)
        allc = dist.concat_reindex(cand)
        return allc.groupby(allc.node).reduce(allc.node, dist=pw.reducers.min(allc.dist))

    res = pw.iterate(step, dist=pw.iterate_universe(roots), edges=e)
    counter: dict[tuple[int, int, int], int] = {}

    def on_change(key: Any, row: dict, time: int, is_addition: bool) -> None:
        k = (row["node"], row["dist"], time)
        counter[k] = counter.get(k, 0) + (1 if is_addition else -1)

    pw.io.subscribe(res, on_change=on_change)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    seconds = time.perf_counter() - started
    conn.send({"seconds": seconds, "changes": sum(1 for v in counter.values() if v)})


def pathway_run(nodes: int, edges: int, changes: int, seed: int, batch: int, limit: float | None) -> dict[str, Any]:
    out: dict[str, Any] = in_process(_pathway_child, (nodes, edges, changes, seed, batch), limit)
    return out


# ---------------------------------------------------------------------------------
# ours


class _IterationLog(logging.Handler):
    """Collects ``dd_iterate: iteration i: n changes (s)`` records of the library."""

    # "(12.3s)" on the distributed path, "(in one task, 12.3s)" when the loop ran inside one task,
    # "(in 2 key partitions, 12.3s)" in key partitions
    pattern = re.compile(r"iteration (\d+): (\d+) changes \((?:in one task, |in \d+ key partitions, )?([\d.]+)s\)")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.rows: list[tuple[int, int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = self.pattern.search(record.getMessage())
        if m:
            self.rows.append((int(m[1]), int(m[2]), float(m[3])))


def ours_run(spark: Any, nodes: int, edges: int, changes: int, seed: int, batch: int, limit: float | None) -> dict[str, Any]:
    import spark_differential as sd
    from spark_differential.algorithms import bfs

    loading = time.perf_counter()
    updates = edge_updates(nodes, edges, changes, batch, seed)
    g = sd.collection(spark.createDataFrame(updates)).repartition(4).localCheckpoint()
    g.count()
    roots = spark.createDataFrame([(ROOT, 0, 1)], "node long, time long, diff long")
    handler = _IterationLog()
    lg = logging.getLogger("spark_differential")
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    settle(spark)
    try:
        started = time.perf_counter()
        # dd_iterate runs eagerly and returns its result materialised (a checkpoint): count it
        result = run_spark_limited(spark, lambda: bfs(g, roots, max_iterations=100_000), limit)
        n = result.count()
        seconds = time.perf_counter() - started
    finally:
        lg.removeHandler(handler)
    return {"seconds": seconds, "seconds_with_input_load": time.perf_counter() - loading, "changes": n,
            "result": result, "updates": updates, "iterations": handler.rows}


def forced_run(spark: Any, args: Any, n: int, partition_rows: int = 0) -> dict[str, Any]:
    """:func:`ours_run` with ``localRows`` at ``--cliff`` (and ``partitionRows`` at
    ``partition_rows``, where given): the loop forced out of one task (into key partitions,
    slices of time, or the distributed loop); ``paths`` says which, from the library's log."""
    keys = {"spark_differential.iterate.localRows": args.cliff}
    if partition_rows:
        keys["spark_differential.iterate.partitionRows"] = partition_rows
    for key, value in keys.items():
        spark.conf.set(key, str(value))
    handler = _Messages()
    lg = logging.getLogger("spark_differential.iterate")
    lg.addHandler(handler)
    try:
        out = ours_run(spark, args.nodes, args.edges, n, args.seed, 1, args.ours_limit)
    finally:
        for key in keys:
            spark.conf.unset(key)
        lg.removeHandler(handler)
    out["paths"] = [m for m in handler.messages
                    if "slices of time" in m or "key partitions, a task each" in m or "running distributed" in m][:3]
    return out


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def same_rows(a: Any, b: Any) -> bool:
    """Whether two answers hold the same rows: their row counts and the sums of a 64-bit hash
    of every row (as exact decimals) agree.  Both answers are consolidated (one row per node,
    distance and time), so this compares them as sets, one aggregate job each, where an
    ``exceptAll`` would sort ~80 M rows twice at 10^7 changes."""
    from pyspark.sql import functions as F

    def print_(df: Any) -> tuple:
        h = F.xxhash64("node", "dist", "time", "diff").cast("decimal(38,0)")
        return tuple(df.agg(F.count(F.lit(1)), F.sum(h)).first())

    return print_(a) == print_(b)


def at_samples(updates: Any, result: Any, samples: int, seed: int) -> Any:
    """The rows of ``result`` that :func:`check` reads (every row at or before its last sampled
    time), summed per sampled interval in Spark: a few rows per node instead of the whole
    answer on the driver (10^7 changes: ~80 M rows).  Each row is placed at the first sampled
    time at or after its own, which accumulates to the same answer at every sampled time."""
    import pandas as pd
    from pyspark.sql import functions as F

    times = np.unique(updates["time"].to_numpy())
    rng = np.random.default_rng(seed)  # the sample check() draws
    picked = sorted(set(rng.choice(times, size=min(samples, len(times)), replace=False).tolist()) | {int(times[-1])})
    edges = F.array(*[F.lit(int(t)) for t in picked])
    at = F.element_at(F.filter(edges, lambda t: t >= F.col("time")), 1)
    rows = (result.select("node", "dist", at.alias("time"), "diff").where(F.col("time").isNotNull())
            .groupBy("node", "dist", "time").agg(F.sum("diff").alias("diff")).where(F.col("diff") != 0))
    return pd.DataFrame(rows.collect(), columns=["node", "dist", "time", "diff"])


def settle(spark: Any) -> None:
    """A garbage collection of this process and of the JVM before one of our runs (not timed):
    each run starts with the heap as clean as the last one's, instead of paying for the
    garbage of the run before (a distinct-times run leaves ~7x the batched run's answer)."""
    import gc

    gc.collect()
    spark._jvm.System.gc()


def measure_ours(label: str, fn: Any, res: dict[str, Any], repeat: int) -> Measurement:
    """:func:`measure` of one of our runs, timed as the peers are: from the input
    collection in Spark (a checkpoint, as Python and Pathway hold theirs in memory) to
    the result materialised and counted.  Loading the input into Spark (pandas to a
    checkpointed DataFrame) is kept out of the time and reported beside it."""
    runs: list[float] = []
    loaded: list[float] = []

    def one() -> None:
        fn()
        runs.append(res["seconds"])
        loaded.append(res["seconds_with_input_load"])
        log(f"{label}: run {len(runs)}/{repeat}: {fmt_seconds(res['seconds'])}")

    m = measure(label, one, repeat=repeat, quiet=True, rss=True)
    if m.ok:
        m.extra["seconds_with_input_load"] = round(min(loaded), 3)
        m.runs, m.seconds = runs, min(runs)
        log(f"{label}: {fmt_seconds(m.seconds)} from the loaded input ({fmt_seconds(m.extra['seconds_with_input_load'])}"
            " with loading the input into Spark)")
    return m


def per_iteration(rows: list[tuple[int, int, float]]) -> list[dict[str, Any]]:
    out, prev = [], 0.0
    for i, n, s in rows:
        out.append({"iteration": i, "differences": n, "seconds": round(s - prev, 2)})
        prev = s
    return out


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(__doc__ or "")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--changes", default=None, help="comma-separated sizes (default 10000,100000,1000000)")
    ap.add_argument("--batch-compare", type=int, default=1000, help="batch size for the batched rerun (0: skip)")
    ap.add_argument("--ours-limit", type=float, default=3600.0, help="seconds before our run is cancelled")
    ap.add_argument("--check", type=int, default=20, help="sampled times at which distances are compared exactly")
    ap.add_argument("--no-pathway", action="store_true")
    ap.add_argument("--ours-up-to", type=int, default=None,
                    help="run ours only for sizes up to this many changes (larger: peers only, ours 'skipped')")
    ap.add_argument("--cliff", type=int, default=0, metavar="ROWS",
                    help="also run ours at every size with spark_differential.iterate.localRows=ROWS (far below the "
                         "input: forced out of one task) and report its time over the default run's (0: skip)")
    ap.add_argument("--cliff-partition-rows", type=int, default=0, metavar="ROWS",
                    help="with --cliff, also run ours with spark_differential.iterate.partitionRows=ROWS (below the "
                         "input over the session's tasks: out of key partitions too) and report its ratio (0: skip)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in (args.changes or ("2000" if args.quick else "10000,100000,1000000")).split(",")]
    limit = args.time_limit
    report = Report("bfs", args, {"nodes": args.nodes, "edges": args.edges, "changes": sizes, "root": ROOT,
                                  "ours_limit": args.ours_limit, "peer_limit": limit})
    repeat = pick(args, "repeat", 1, 1)
    spark = make_spark(args, **{"spark.sql.shuffle.partitions": "4"})
    warm_spark(spark)
    from bfs import check  # examples/bfs.py: exact distances at sampled times

    done: list[int] = []
    ran = [n for n in sizes if args.ours_up_to is None or n <= args.ours_up_to]
    compare = max(ran) if args.batch_compare and ran else None  # the size whose batched runs interleave
    res2: dict[str, Any] = {}
    batched_runs: list[float] = []
    for n in sizes:
        case = f"{n:,} changes, distinct times"
        res: dict[str, Any] = {}

        def ours(n: int = n, res: dict = res) -> None:
            res.update(ours_run(spark, args.nodes, args.edges, n, args.seed, 1, args.ours_limit))
            if n == compare:  # the batched run right after each distinct-times run
                res2.update(ours_run(spark, args.nodes, args.edges, n, args.seed, args.batch_compare, args.ours_limit))
                batched_runs.append(res2["seconds"])
                log(f"bfs (dd_iterate), {n:,} changes in batches of {args.batch_compare}: "
                    f"{fmt_seconds(res2['seconds'])} (interleaved)")

        if args.ours_up_to is None or n <= args.ours_up_to:
            m = measure_ours(f"bfs (dd_iterate), {n:,} changes", ours, res, repeat)
        else:
            m = Measurement(f"bfs (dd_iterate), {n:,} changes", status="skipped",
                            detail=f"not run (--ours-up-to {args.ours_up_to})")
            report.note(f"{case}: ours not run (--ours-up-to {args.ours_up_to})")
        if m.ok:
            m.extra.update(output_changes=res["changes"], iterations=per_iteration(res["iterations"]))
            done.append(n)
        py: dict[str, Any] = {}
        pm = measure("(a) Python BFS from scratch per step",
                     lambda n=n, py=py: py.update(python_recompute(args.nodes, args.edges, n, args.seed, limit)),
                     repeat=repeat)
        if pm.ok and py["changes"] is None:
            pm.status, pm.seconds = "extrapolated", py["seconds"] * n / py["steps"]
            pm.detail = f"stopped after {py['steps']:,} of {n:,} steps ({py['seconds']:.0f}s), linear extrapolation"
            report.note(f"{case}: (a) {pm.detail}")
        report.add(case, m, pm)
        if m.ok and py.get("changes") is not None:
            report.check(f"{case}: distance changes ours == Python recompute", res["changes"] == py["changes"],
                         f"{res['changes']} vs {py['changes']}")
        for part_rows in ([0, args.cliff_partition_rows] if args.cliff_partition_rows else [0]):
            if not (m.ok and args.cliff):
                break
            forced: dict[str, Any] = {}
            what = f"localRows={args.cliff:,}" + (f", partitionRows={part_rows:,}" if part_rows else "")
            fm = measure_ours(f"bfs (dd_iterate), {n:,} changes, {what}",
                              lambda n=n, forced=forced, p=part_rows: forced.update(forced_run(spark, args, n, p)),
                              forced, repeat)
            if fm.ok:
                fm.extra.update(output_changes=forced["changes"], paths=forced["paths"])
                report.check(f"{case}: {what} gives the default run's rows",
                             same_rows(res["result"], forced["result"]), f"{forced['changes']} vs {res['changes']}")
            report.add(f"{case}: {what} (forced out of one task) vs default", fm, m,
                       note="ratio = default time / forced time (no cliff: at least 0.5)" if not part_rows
                       else "ratio = default time / forced time (the key partitions refused: the distributed loop)")
        if m.ok and args.check:
            try:
                k = check(res["updates"], at_samples(res["updates"], res["result"], args.check, args.seed), args.check,
                          args.seed)
                report.check(f"{case}: exact distances at {k} sampled times", True)
            except AssertionError as e:  # recorded, and the run goes on to the peers
                report.check(f"{case}: exact distances at sampled times", False, str(e))
        if not args.no_pathway:
            pw: dict[str, Any] = {}
            pw_runs: list[float] = []

            def pathway(n: int = n, pw: dict = pw, pw_runs: list = pw_runs) -> None:
                pw.update(pathway_run(args.nodes, args.edges, n, args.seed, 1, limit))
                pw_runs.append(pw["seconds"])

            wm = measure("(b) Pathway pw.iterate", pathway, repeat=repeat)
            if wm.ok:
                wm.seconds = min(pw_runs)  # the dataflow run, without the child's start-up and imports
                wm.extra["output_changes"] = pw["changes"]
                if m.ok:
                    report.check(f"{case}: distance changes ours == Pathway", res["changes"] == pw["changes"],
                                 f"{res['changes']} vs {pw['changes']}")
            report.add(case, m, wm)
        if m.ok:
            for it in m.extra["iterations"]:
                log(f"  {case}: iteration {it['iteration']}: {it['differences']} differences, {it['seconds']}s")
    ours_at = {n: r.ours.seconds for n in done for r in report.rows
               if r.case == f"{n:,} changes, distinct times" and r.ours.ok}
    for small, large in zip(done, done[1:]):
        if small in ours_at and large in ours_at:
            report.note(f"ours: {large:,} changes took {ours_at[large] / ours_at[small]:.2f}x the time of {small:,} "
                        f"({large / small:.0f}x the changes)")
    if compare is not None and compare in done and batched_runs:
        n = compare
        b = args.batch_compare
        bm = Measurement(f"bfs (dd_iterate), {n:,} changes in batches of {b}", seconds=min(batched_runs),
                         runs=batched_runs, detail="each run right after a distinct-times run")
        log(f"{bm.label}: {fmt_seconds(bm.seconds)} from the loaded input (best of {len(batched_runs)}, interleaved)")
        first = next(r for r in report.rows if r.case.startswith(f"{n:,} changes"))
        if bm.ok:
            bm.extra.update(output_changes=res2["changes"], iterations=per_iteration(res2["iterations"]))
        # the "peer" here is our own distinct-times run: ratio = distinct / batched
        report.add(f"{n:,} changes: {n // b:,} batches of {b} vs distinct times", bm, first.ours,
                   note="ratio = distinct-times time / batched time")
        report.note(f"time resolution: the distinct-times run costs {first.ours.seconds / bm.seconds:.2f}x the batched run"
                    if bm.ok and first.ours.ok else "time resolution: batched run did not finish")
    spark.stop()
    return finish(report, [("our output changes", lambda r: str(r.ours.extra.get("output_changes", "-")))])


if __name__ == "__main__":
    raise SystemExit(main())
