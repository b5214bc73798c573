"""Our BFS alone, for comparing two versions of the library one run after another.

Runs ``spark_differential.algorithms.bfs`` on the workload of ``benchmarks/bfs.py``
(same graph, same changes, same Spark settings) and prints the seconds, the
machine's CPU seconds (user + system of every core) and steal seconds over the run,
read from ``/proc/stat`` (Linux), the output size and the differences and seconds
of every iteration.  No peer runs here: ``benchmarks/bfs.py`` is the benchmark with
peers; this script is for A/B runs of our own code, e.g. a frozen copy of another
version first on ``PYTHONPATH``::

    .bench-venv/bin/python benchmarks/bfs_ours.py --changes 1000000
    cd /tmp && PYTHONPATH=/tmp/other /path/to/checkout/.bench-venv/bin/python /path/to/checkout/benchmarks/bfs_ours.py --changes 1000000

Run the frozen copy from outside the checkout: Spark's Python workers put their
working directory first on ``sys.path``, so from the checkout's root they import its
``spark_differential`` (the kernels) whatever ``PYTHONPATH`` says, while the driver
imports the frozen copy.

``--conf key=value`` (repeatable) sets Spark configuration, e.g.
``--conf spark_differential.iterate.chunkRows=4000``.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bfs import ours_run  # noqa: E402  (benchmarks/bfs.py)
from common import base_parser, bfs_graph_args, conf_arg, make_spark, spark_conf, warm_spark  # noqa: E402


def machine_seconds() -> tuple[float, float]:
    """(user + nice + system, steal) seconds of all cores since boot, or zeros off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2]) / tick, (v[7] if len(v) > 7 else 0) / tick


def main(argv: list[str] | None = None) -> int:
    ap = conf_arg(bfs_graph_args(base_parser(__doc__ or "")))
    args = ap.parse_args(argv)
    spark = make_spark(args, **spark_conf(ap, args, **{"spark.sql.shuffle.partitions": "4"}))  # as benchmarks/bfs.py
    warm_spark(spark)
    import spark_differential as sd

    cpu0, steal0 = machine_seconds()
    res = ours_run(spark, args.nodes, args.edges, args.changes, args.seed, args.batch, None)
    cpu1, steal1 = machine_seconds()
    print(
        f"library {os.path.dirname(sd.__file__)}: {args.changes:,} changes in {res['seconds']:.1f} s, "
        f"CPU {cpu1 - cpu0:.0f} s, steal {steal1 - steal0:.0f} s, {res['changes']:,} output changes, "
        f"{len(res['iterations'])} iterations",
        flush=True,
    )
    prev = 0.0
    for i, n, s in res["iterations"]:
        print(f"  iteration {i}: {n} differences, {s - prev:.1f} s")
        prev = s
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
