"""Seed 001-style worked BFS example on a local Spark Connect session or a classic one:
wall time, Spark jobs and tasks, driver CPU of each run.

    .venv/bin/python benchmarks/worked_example_connect.py connect 4
    .venv/bin/python benchmarks/worked_example_connect.py classic 4

Jobs and tasks are read from the Spark status store of the SparkContext in this process
(on ``remote="local[2]"`` the Connect server runs in this process, with a classic
SparkContext of its own).  The first run of a process loads the kernels' caches in a
fresh Python worker: compare the later ones.
"""

from __future__ import annotations

import sys
import time

import spark_differential as sd
from spark_differential.algorithms import bfs


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "connect"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    s = sd.session(remote="local[2]") if kind == "connect" else sd.session(master="local[2]")
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context  # the server's context on a local Connect session

    def counts() -> tuple[int, int]:
        jobs = sc._jsc.sc().statusStore().jobsList(None)
        n = jobs.length()
        return n, sum(jobs.apply(i).numTasks() for i in range(n))

    edges = s.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (2, 3, 0, 1), (3, 4, 0, 1), (0, 4, 1, 1), (3, 4, 2, -1)],
                              "src long, dst long, time long, diff long")
    roots = s.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    for i in range(runs):
        jobs0, tasks0 = counts()
        cpu = time.process_time()
        started = time.perf_counter()
        rows = bfs(edges, roots).collect()
        wall = time.perf_counter() - started
        time.sleep(0.5)  # the status store hears of a job's end asynchronously
        jobs1, tasks1 = counts()
        print(f"{kind} run {i}: {wall:.3f} s, {jobs1 - jobs0} jobs, {tasks1 - tasks0} tasks, "
              f"driver CPU {time.process_time() - cpu:.2f} s, {len(rows)} rows", flush=True)


if __name__ == "__main__":
    main()
