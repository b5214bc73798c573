"""Ours only, on the distributed loop path: Spark jobs, tasks and CPU of ``benchmarks/bfs.py``'s BFS.

Builds the input as ``benchmarks/bfs.py``'s ``ours_run`` does (1,000 nodes, 2,000
edges, every change at its own time), forces the distributed path
(``spark_differential.iterate.localRows=0``) and runs ``algorithms.bfs(...).count()``
inside :func:`spark_differential.core.jobs.count_jobs` in this thread (``ours_run`` runs
it in another thread, whose jobs the job group does not see).  CPU is summed over the
live processes under this one (the JVM and its Python workers) from ``/proc``: wall
seconds on a shared machine mean little, CPU and counts do.  One line per size::

    .venv/bin/python benchmarks/bfs_distributed.py --changes 10000,100000 [--chunk-rows auto] [--broadcast-trace N]

prints ``RESULT {...}`` with jobs, stages, tasks, iterations, output changes and CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from common import make_spark, warm_spark  # noqa: E402


def _bench_module():
    """``benchmarks/bfs.py`` (its name clashes with ``examples/bfs.py``)."""
    spec = importlib.util.spec_from_file_location("bfs_bench", os.path.join(HERE, "bfs.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def tree_cpu() -> float:
    """CPU seconds of every live descendant of this process (the JVM, Python workers)."""
    tck = os.sysconf("SC_CLK_TCK")
    procs = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                procs[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tck)
            except OSError:
                continue
    total, todo, seen = 0.0, [os.getpid()], set()
    while todo:
        parent = todo.pop()
        for child, (pp, cpu) in procs.items():
            if pp == parent and child not in seen:
                seen.add(child)
                total += cpu
                todo.append(child)
    return total


class Iterations(logging.Handler):
    """The loop's per-iteration progress lines."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "changes (" in record.getMessage():
            self.seen.append(record.getMessage())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", default="10000", help="comma-separated sizes")
    ap.add_argument("--chunk-rows", default="auto", help="spark_differential.iterate.chunkRows")
    ap.add_argument("--broadcast-trace", type=int, default=None, help="override spark_differential.trace.spark.BROADCAST_TRACE")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    bench = _bench_module()
    spark = make_spark(argparse.Namespace(master="local[2]", driver_memory=args.driver_memory),
                       **{"spark.sql.shuffle.partitions": "4", "spark.ui.retainedJobs": "100000",
                          "spark.ui.retainedStages": "100000"})
    spark.sparkContext.setLogLevel("ERROR")
    warm_spark(spark)
    import spark_differential as sd
    from spark_differential.algorithms import bfs
    from spark_differential.core.jobs import count_jobs
    from spark_differential.trace import spark as trace_spark

    spark.conf.set("spark_differential.iterate.localRows", "0")
    spark.conf.set("spark_differential.iterate.chunkRows", args.chunk_rows)
    if args.broadcast_trace is not None:
        trace_spark.BROADCAST_TRACE = args.broadcast_trace
    for n in [int(x) for x in args.changes.split(",")]:
        updates = bench.edge_updates(1000, 2000, n, 1, args.seed)
        g = sd.collection(spark.createDataFrame(updates)).repartition(4).localCheckpoint()
        g.count()
        roots = spark.createDataFrame([(bench.ROOT, 0, 1)], "node long, time long, diff long")
        handler = Iterations()
        lg = logging.getLogger("spark_differential")
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        cpu0, py0, t0 = tree_cpu(), time.process_time(), time.perf_counter()
        try:
            with count_jobs(spark) as c:
                out = bfs(g, roots).count()
        finally:
            lg.removeHandler(handler)
        print("RESULT", json.dumps({
            "changes": n, "chunkRows": args.chunk_rows, "seconds": round(time.perf_counter() - t0, 2),
            "output": out, "iterations": len(handler.seen), "jobs": c.jobs, "stages": c.stages, "tasks": c.tasks,
            "driver_python_cpu": round(time.process_time() - py0, 2), "jvm_and_workers_cpu": round(tree_cpu() - cpu0, 2),
        }), flush=True)


if __name__ == "__main__":
    main()
