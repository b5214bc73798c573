"""Seed 001's worked BFS example in at most 3 Spark jobs (issue 20, "Must show").

The call and the collect together, counted with spark_differential._jobs.count_jobs.
Kept apart from tests/test_jobs.py: it holds only once small loops run inside a
single Spark task.
"""

from __future__ import annotations

from test_iterate import SEED_001_DISTS, SEED_001_EDGES

import spark_differential  # noqa: F401
from spark_differential._jobs import count_jobs
from spark_differential.algorithms import bfs

MAX_JOBS = 3


def test_seed_001_worked_example_in_at_most_three_jobs(spark):
    edges = spark.createDataFrame(
        [(s, d, t, r) for (s, d), t, r in SEED_001_EDGES], "src long, dst long, time long, diff long"
    )
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    with count_jobs(spark) as c:
        rows = bfs(edges, roots).collect()
    got = sorted(((r["node"], r["dist"]), r["time"], r["diff"]) for r in rows)
    assert got == sorted(SEED_001_DISTS)
    assert c.jobs <= MAX_JOBS, f"seed 001's worked BFS example ran {c} (at most {MAX_JOBS} jobs wanted)"
