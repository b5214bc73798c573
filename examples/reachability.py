"""Multi-root reachability over a changing graph (seed 004), the full history in one job.

Example::

    python examples/reachability.py --nodes 1000 --edges 2000 --roots 10 --changes 1000

prints the number of (root, node) reachability changes and the time taken.
``--check N`` compares with reachability recomputed from scratch at N sampled times.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _workload import edge_updates  # noqa: E402


def reach_at(edges: dict[tuple[int, int], int], roots: list[int]) -> set[tuple[int, int]]:
    adj: dict[int, list[int]] = {}
    for (s, d), m in edges.items():
        if m > 0:
            adj.setdefault(s, []).append(d)
    out = set()
    for r in roots:
        seen, stack = {r}, [r]
        while stack:
            n = stack.pop()
            for m in adj.get(n, ()):
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        out |= {(r, n) for n in seen}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--roots", type=int, default=10)
    ap.add_argument("--changes", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--master", default=None)
    ap.add_argument("--check", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)

    import logging

    import spark_differential as sd
    from spark_differential.algorithms import reachability

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("spark_differential").setLevel(logging.INFO)
    spark = sd.session(master=args.master)
    updates = edge_updates(args.nodes, args.edges, args.changes, args.batch, args.seed)
    edges = sd.collection(spark.createDataFrame(updates)).localCheckpoint()
    root_ids = list(range(args.roots))
    roots = spark.createDataFrame([(r, 0, 1) for r in root_ids], "root long, time long, diff long")
    started = time.time()
    reach = reachability(edges, roots, max_iterations=10_000)
    n = reach.count()
    print(f"reachability: {args.roots} roots, {args.changes} changes: {n} changes in {time.time() - started:.1f}s")
    if args.check:
        res = reach.toPandas().sort_values("time")
        times = np.unique(updates["time"].to_numpy())
        picked = sorted(set(np.random.default_rng(args.seed).choice(times, size=min(args.check, len(times)), replace=False).tolist()))
        for t in picked:
            e = updates[updates["time"] <= t].groupby(["src", "dst"])["diff"].sum().to_dict()
            r = res[res["time"] <= t].groupby(["root", "node"])["diff"].sum()
            got = {k for k, m in r.items() if m != 0}
            assert got == reach_at(e, root_ids), f"mismatch at time {t}"
        print(f"reachability: checked at {len(picked)} times: OK")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
