"""A BFS view's first update holding a long history, then later updates: the loop's work in its task.

What is measured
    ``benchmarks/incremental.py``'s ``bfs`` workload (seed 001's BFS over a sliding window
    of ``--edges`` edges on ``--nodes`` nodes, ``--changes`` edge changes per update): the
    changes of updates ``0 .. --history`` delivered as **one first update** of a view's loop
    (frontier ``history + 1``), then ``--later`` updates of ``--changes`` changes each.  The
    loop is recorded once as a view records it (``loop_driver.record``, no Spark job) and each
    update is :func:`spark_differential.incremental.loop.loop_update` called directly on Arrow
    tables in this process: what the view's one task does, without Spark's scheduling
    around it.  Per update: CPU seconds of this process (``time.process_time``), the rows
    the steps' kernels receive as new updates (``spark_differential.intask.step.kernel_input``), and the
    stored state's rows.  A later update recomputes the loop from its stored inputs where they
    hold at most ``--recompute`` times its changes (the view's ``loopRecompute`` setting; ``0``:
    every later update resumes it); with ``--both``, each later update is run both ways on the
    same state, and both CPU times are printed with their ratio (the resumed path's state goes on).

    Run it with the library under test on ``PYTHONPATH`` (e.g. the main branch's, for the
    state before a change, and a worktree's):

    PYTHONPATH=. python benchmarks/view_loop_first.py --history 100 --later 5
    PYTHONPATH=. python benchmarks/view_loop_first.py --history 3 --later 3 --nodes 10000 --edges 20000 --changes 100 --both
    PYTHONPATH=. python benchmarks/view_loop_first.py --history 100 --later 5 --spark   # through sd.incremental
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=100, help="updates whose changes make the first update")
    ap.add_argument("--later", type=int, default=5, help="updates after the first")
    ap.add_argument("--changes", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=1, help="updates' changes each later update holds (default 1)")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write the measurements as JSON")
    ap.add_argument("--recompute", type=int, default=None,
                    help="a later update recomputes the loop where its stored inputs hold at most this many times its "
                         "changes (default: the library's; 0: never)")
    ap.add_argument("--both", action="store_true", help="run each later update resumed and recomputed, same state")
    ap.add_argument("--spark", action="store_true",
                    help="through a view (sd.incremental, stage 2) instead: CPU seconds of the process tree and jobs")
    args = ap.parse_args()
    if args.spark:
        return through_spark(args)

    import pyarrow as pa
    from _workload import edge_updates
    from pyspark.sql import functions as F

    import spark_differential as sd
    from spark_differential.core import lattice as L
    from spark_differential.core.collection import inspect
    from spark_differential.core.settings import DEFAULT_LOOP_RECOMPUTE
    from spark_differential.incremental import loop as view_loop
    from spark_differential.incremental.loop_driver import record as record_loop
    from spark_differential.intask import step as intask_step

    spark = sd.session(master="local[1]")
    roots = spark.createDataFrame([], "node long, time long, diff long")
    edges = spark.createDataFrame([], "src long, dst long, time long, diff long")
    e = edges.withColumnRenamed("src", "node")
    start = roots.select("node", F.lit(0).cast("long").alias("dist"), "time", "diff")

    def body(d: Any) -> Any:
        return (d.dd_join(e, on="node")
                .select(F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
                .dd_concat(start, consolidate=False).dd_min(by="node", col="dist"))

    program, sources = record_loop(start, inspect(start, op="bench"), body, None)
    kinds = ["roots" if "dst" not in s.columns else "edges" for s in sources]
    ups = edge_updates(args.nodes, args.edges, args.changes * (args.history + args.later * args.batch),
                       batch=args.changes, seed=args.seed)
    lib = L.Total()

    def source(kind: str, lo: int, hi: int, cols: tuple[str, ...]) -> pa.Table:
        if kind == "roots":
            rows = {"node": [0], "dist": [0], "_sd_t0": [0], "diff": [1]} if lo == 0 else {c: [] for c in cols}
            return pa.table({c: pa.array(rows[c], pa.int64()) for c in cols})
        part = ups[(ups.time >= lo) & (ups.time < hi)]
        values = [part.src, part.dst, part.time, part["diff"]]  # the source's columns: src (renamed), dst, time, diff
        return pa.table({c: pa.array(v.to_numpy()) for c, v in zip(cols, values)})

    rows = [0]
    kernel_input = intask_step.kernel_input

    def counting(*a: Any, **k: Any) -> Any:
        out = kernel_input(*a, **k)
        rows[0] += out.num_rows
        return out

    intask_step.kernel_input = counting  # the loop's steps read it from the module at call time
    warm = [source(k, 0, 1, cols) for k, cols in zip(kinds, program.sources)]
    empty = [sp.schema.empty_table() for sp in view_loop.specs(program, [s.schema for s in warm])]
    recompute = DEFAULT_LOOP_RECOMPUTE if args.recompute is None else args.recompute

    def update(srcs: list[pa.Table], state: list[pa.Table], hi: int, r: int = recompute) -> Any:
        return view_loop.loop_update(program, srcs, state, lib, [(hi,)], kept=True, recompute=r)

    # warm-up (not reported): update 0 alone, then update 1 through the three paths (numba's compilation, DuckDB's
    # first queries)
    _, state, _ = update(warm, empty, 1)
    for r in (0, 10**12):
        update([source(k, 1, 2, cols) for k, cols in zip(kinds, program.sources)], state, 2, r)
    state = empty
    print(json.dumps({"library": os.path.dirname(sd.__file__)}), flush=True)
    spans = [(0, args.history + 1)] + [(t, t + args.batch) for t in
                                        range(args.history + 1, args.history + 1 + args.later * args.batch, args.batch)]
    results = []
    for lo, hi in spans:
        srcs = [source(k, lo, hi, cols) for k, cols in zip(kinds, program.sources)]
        other = None
        if args.both and lo > 0:  # the same update recomputed, from the same state (its result not kept)
            cpu = time.process_time()
            update(srcs, state, hi, 10**12)
            other = round(time.process_time() - cpu, 4)
        stored = sum(t.num_rows for sp, t in zip(view_loop.specs(program, [s.schema for s in srcs]), state)
                     if sp.kind == "source")
        rows[0] = 0
        cpu = time.process_time()
        wall = time.perf_counter()
        out, state, _ = update(srcs, state, hi, 0 if args.both else recompute)
        r = {"times": [lo, hi - 1], "changes": sum(s.num_rows for s in srcs), "stored_inputs": stored,
             "recomputes": lo > 0 and not args.both and view_loop.recomputed(stored, sum(s.num_rows for s in srcs),
                                                                             recompute),
             "cpu_s": round(time.process_time() - cpu, 4),
             "wall_s": round(time.perf_counter() - wall, 3), "kernel_rows": rows[0], "out_rows": out.num_rows,
             "state_rows": sum(t.num_rows for t in state),
             "iterations": 1 + max((int(max(t.column(view_loop.IT).to_pylist(), default=-1)) for sp, t in
                                    zip(view_loop.specs(program, [s.schema for s in srcs]), state) if sp.by_iteration),
                                   default=-1)}
        if other is not None:
            r.update({"resumed_cpu_s": r["cpu_s"], "recomputed_cpu_s": other,
                      "resumed_over_recomputed": round(r["cpu_s"] / other, 2) if other else None})
        _report(r, results)
    return _finish(args, results, spark)


def _report(r: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """One update's measurements, printed as a JSON line and kept."""
    print(json.dumps(r), flush=True)
    results.append(r)


def _finish(args: argparse.Namespace, results: list[dict[str, Any]], spark: Any) -> int:
    """Write ``--json`` (when given) and stop Spark."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "updates": results}, f, indent=1)
    spark.stop()
    return 0


def through_spark(args: argparse.Namespace) -> int:
    """The same updates through ``sd.incremental`` (the loop in one Spark task per update): per update
    the CPU seconds of the process tree (driver, JVM, Python workers; from /proc) and the jobs."""
    import tempfile

    from _workload import edge_updates
    from incremental import SCHEMAS, cpu_between, tree_cpu

    import spark_differential as sd
    from spark_differential.algorithms import bfs
    from spark_differential.core.jobs import count_jobs

    def view_query(roots: Any, edges: Any) -> Any:
        return bfs(edges, roots)

    spark = sd.session(master="local[2]")
    ups = edge_updates(args.nodes, args.edges, args.changes * (args.history + args.later), batch=args.changes,
                       seed=args.seed)
    print(json.dumps({"library": os.path.dirname(sd.__file__)}), flush=True)
    warm = sd.incremental(tempfile.mkdtemp(prefix="sd-warm-"), view_query, spark=spark, stage=2)
    for t in range(3):  # warm-up (not reported): the JVM's and the workers' first jobs
        new = {"edges": spark.createDataFrame(ups[ups.time == t], SCHEMAS["edges"])}
        if t == 0:
            new["roots"] = spark.createDataFrame([(0, 0, 1)], SCHEMAS["roots"])
        warm.update(upto=t + 1, **new).count()
    view = sd.incremental(tempfile.mkdtemp(prefix="sd-first-"), view_query, spark=spark, stage=2)
    spans = [(0, args.history + 1)] + [(t, t + 1) for t in range(args.history + 1, args.history + 1 + args.later)]
    results = []
    for lo, hi in spans:
        new = {"edges": spark.createDataFrame(ups[(ups.time >= lo) & (ups.time < hi)], SCHEMAS["edges"])}
        if lo == 0:
            new["roots"] = spark.createDataFrame([(0, 0, 1)], SCHEMAS["roots"])
        c0, w0 = tree_cpu(), time.perf_counter()
        with count_jobs(spark) as jobs:
            n_out = view.update(upto=hi, **new).count()
        r = {"times": [lo, hi - 1], "cpu_s": cpu_between(c0, tree_cpu()), "wall_s": round(time.perf_counter() - w0, 3),
             "jobs": jobs.jobs, "out_rows": n_out}
        _report(r, results)
    return _finish(args, results, spark)


if __name__ == "__main__":
    sys.exit(main())
