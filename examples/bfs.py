"""BFS distances over a changing graph (seed 001), the full history in one Spark job.

Example::

    python examples/bfs.py --nodes 1000 --edges 2000 --changes 10000 --batch 1

prints the number of distance changes and the time taken.  ``--check`` also
recomputes BFS from scratch (single-process Python) at a sample of times and
compares.  ``--master local-cluster[2,1,1024]`` runs on separate executor processes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _workload import edge_updates  # noqa: E402


def bfs_at(edges: dict[tuple[int, int], int], root: int = 0) -> dict[int, int]:
    adj: dict[int, list[int]] = {}
    for (s, d), m in edges.items():
        if m > 0:
            adj.setdefault(s, []).append(d)
    dist = {root: 0}
    q = deque([root])
    while q:
        n = q.popleft()
        for m in adj.get(n, ()):
            if m not in dist:
                dist[m] = dist[n] + 1
                q.append(m)
    return dist


def check(updates, result, samples: int, seed: int) -> int:
    """Compare the accumulated result with BFS recomputed from scratch at sampled times."""
    times = np.unique(updates["time"].to_numpy())
    rng = np.random.default_rng(seed)
    picked = sorted(set(rng.choice(times, size=min(samples, len(times)), replace=False).tolist()) | {int(times[-1])})
    res = result.sort_values("time")
    upd = updates.sort_values("time")
    edges: dict[tuple[int, int], int] = {}
    dists: dict[tuple[int, int], int] = {}
    ui = ri = 0
    u_t, r_t = upd["time"].to_numpy(), res["time"].to_numpy()
    u_rows = upd[["src", "dst", "diff"]].to_numpy()
    r_rows = res[["node", "dist", "diff"]].to_numpy()
    for t in picked:
        while ui < len(u_t) and u_t[ui] <= t:
            s, d, r = u_rows[ui]
            edges[(s, d)] = edges.get((s, d), 0) + int(r)
            ui += 1
        while ri < len(r_t) and r_t[ri] <= t:
            n, k, r = r_rows[ri]
            dists[(n, k)] = dists.get((n, k), 0) + int(r)
            ri += 1
        got = {n: k for (n, k), m in dists.items() if m != 0}
        assert all(m == 1 for m in dists.values() if m != 0), f"multiplicity other than 1 at time {t}"
        want = bfs_at(edges)
        if got != want:
            raise AssertionError(f"BFS mismatch at time {t}: {len(got)} vs {len(want)} labelled nodes")
    return len(picked)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--changes", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=1, help="changes per time step (1 = every change at its own time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--master", default=None, help="Spark master (default local[*])")
    ap.add_argument("--partitions", type=int, default=None, help="spark.sql.shuffle.partitions")
    ap.add_argument("--check", type=int, default=0, metavar="N", help="verify against Python BFS at N sampled times")
    ap.add_argument("--progress", action="store_true", help="show a progress bar per iteration")
    ap.add_argument("--local-rows", default=None, metavar="N",
                    help="spark_differential.iterate.localRows: loops with at most N input rows run inside one "
                         "task (0: always iteration by iteration on the cluster)")
    args = ap.parse_args(argv)

    import logging

    import spark_differential as sd
    from spark_differential.algorithms import bfs

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("spark_differential").setLevel(logging.INFO)
    conf = {}
    if args.partitions:
        conf["spark.sql.shuffle.partitions"] = str(args.partitions)
    if args.local_rows is not None:
        conf["spark_differential.iterate.localRows"] = str(args.local_rows)
    spark = sd.session(master=args.master, conf=conf)
    updates = edge_updates(args.nodes, args.edges, args.changes, args.batch, args.seed)
    edges = sd.collection(spark.createDataFrame(updates)).localCheckpoint()
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    started = time.time()
    dist = bfs(edges, roots, max_iterations=10_000)
    changes = dist.count()
    elapsed = time.time() - started
    print(f"bfs: nodes={args.nodes} edges={args.edges} changes={args.changes} batch={args.batch}: "
          f"{changes} distance changes in {elapsed:.1f}s")
    if args.check:
        n = check(updates, dist.toPandas(), args.check, args.seed)
        print(f"bfs: checked against Python BFS at {n} times: OK")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
