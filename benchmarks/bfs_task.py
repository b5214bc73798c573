"""The in-task BFS loop alone: CPU of the loop's task function, in this process.

Runs ``spark_differential.algorithms.bfs`` once on the workload of
``benchmarks/bfs.py`` with the whole loop in one task, captures the task's function
and its input as ``mapInArrow`` receives them, and calls the function again here
``--repeat`` times, printing the CPU seconds (``time.process_time``) of each call,
the answer's rows and a checksum of them.  No Spark job runs in the timed part, so
the figures are the loop's own work on ``(data, time, diff)``: what changes in the
kernels show, without the job, the input's loading or the answer's trip to the JVM.
``--profile`` prints a ``cProfile`` of one more call (CPU time; ``--profile-sort tottime``
for each function's own time).

``--threads`` sets ``spark_differential.iterate.localThreads`` (default 1: CPU
seconds comparable across runs).  Compare two versions one after the other, each
from its own checkout root, that checkout first on ``PYTHONPATH`` (Spark's Python
workers import from their directory, this process from ``PYTHONPATH``)::

    PYTHONPATH=. .bench-venv/bin/python benchmarks/bfs_task.py --changes 100000 --batch 1
    PYTHONPATH=. .bench-venv/bin/python benchmarks/bfs_task.py --changes 100000 --batch 1000
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, HERE)

from _workload import edge_updates  # noqa: E402
from common import base_parser, bfs_graph_args, conf_arg, make_spark, spark_conf  # noqa: E402


def capture(spark: Any, nodes: int, edges: int, changes: int, batch: int, seed: int) -> tuple[Callable[..., Any], list[Any]]:
    """The loop's ``mapInArrow`` function and its input batches (one BFS run)."""
    from pyspark.sql.dataframe import DataFrame as Base

    import spark_differential as sd
    from spark_differential.algorithms import bfs

    try:
        from pyspark.sql.classic.dataframe import DataFrame
    except ImportError:  # pragma: no cover - pyspark < 4
        DataFrame = Base  # noqa: N806
    updates = edge_updates(nodes, edges, changes, batch, seed)
    g = sd.collection(spark.createDataFrame(updates)).repartition(4).localCheckpoint()
    g.count()
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    seen: dict[str, Any] = {}
    original = DataFrame.mapInArrow

    def patched(self: Any, f: Any, schema: Any, *a: Any, **k: Any) -> Any:
        seen["f"], seen["df"] = f, self
        return original(self, f, schema, *a, **k)

    DataFrame.mapInArrow = patched  # type: ignore[method-assign]
    try:
        bfs(g, roots, max_iterations=100_000)
    finally:
        DataFrame.mapInArrow = original  # type: ignore[method-assign]
    if "f" not in seen:
        raise SystemExit("the loop did not run inside one task (raise spark_differential.iterate.localRows)")
    return seen["f"], seen["df"].toArrow().to_batches()


def checksum(batches: list[Any]) -> tuple[int, str]:
    """Rows of the answer (the status row left out) and a digest of them, sorted."""
    import pyarrow as pa

    table = pa.Table.from_batches(batches)
    body = table.slice(0, table.num_rows - 1)
    cols = [c for c in body.column_names if not c.startswith("_sd_") or c == "_sd_t0"]
    ordered = body.select(cols).sort_by([(c, "ascending") for c in cols])
    return ordered.num_rows, hashlib.md5(str(ordered.to_pydict()).encode()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    ap = bfs_graph_args(base_parser(__doc__ or ""))
    ap.add_argument("--threads", type=int, default=1, help="spark_differential.iterate.localThreads")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one more call")
    ap.add_argument("--profile-sort", default="cumulative", help="the profile's order (e.g. tottime)")
    args = conf_arg(ap).parse_args(argv)
    spark = make_spark(args, **spark_conf(ap, args, **{
        "spark.sql.shuffle.partitions": "4", "spark_differential.iterate.localRows": "50000000",
        "spark_differential.iterate.localThreads": str(args.threads)}))
    import spark_differential as sd

    f, batches = capture(spark, args.nodes, args.edges, args.changes, args.batch, args.seed)
    spark.stop()

    def call() -> list[Any]:
        out: Iterator[Any] = f(iter(batches))
        return list(out)

    call()  # warm: numba's cached compilations, DuckDB
    print(f"library {os.path.dirname(sd.__file__)}: {args.changes:,} changes, batch {args.batch}, "
          f"{args.threads} thread(s)", flush=True)
    for _ in range(args.repeat or 3):
        cpu, wall = time.process_time(), time.perf_counter()
        out = call()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows, digest = checksum(out)
        print(f"  CPU {cpu:.3f} s, wall {wall:.3f} s, {rows:,} answer rows, checksum {digest}", flush=True)
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)
        prof.enable()
        call()
        prof.disable()
        pstats.Stats(prof).sort_stats(args.profile_sort).print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
