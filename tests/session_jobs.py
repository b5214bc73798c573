"""Jobs that ``tests/test_sessions.py`` runs in a separate Python process, on a master
the test process's own SparkContext cannot switch to (``local-cluster[2,1,1024]``:
separate executor JVMs; ``local[2,3]``: up to 3 attempts per task).

    python tests/session_jobs.py --master 'local[2,3]' --plain join_count,reduce --faults join_count,reduce

runs the ``--plain`` jobs as they are and the ``--faults`` jobs with every kernel task
failing its first attempt (the test-only ``spark_differential.testing.failFirstAttempt``
for the library's kernels; for ``reduce`` and ``bfs_in_task`` the user's function
fails instead), and prints one line ``RESULT <json>``: per job and run, the rows,
the loop's per-iteration change counts (from the library's log) and the number of
failed task attempts (from the status tracker).  The inputs are seeded: the test
computes the oracle's answers from :func:`inputs`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers import cases, rows_of, to_df  # noqa: E402
from oracle import Coll, Total, consolidate  # noqa: E402

# join_count runs as one task (a small pipeline: spark_differential.intask.pipeline); join_count_by_operator
# the same operator by operator (spark_differential.pipeline.localRows=0)
# view_join_count: the same join and count as an incremental view fed in three updates, each run
# inside one task (spark_differential.incremental.onetask), which then also writes the version's files
JOBS = ("join_count", "join_count_by_operator", "reduce", "bfs", "bfs_in_task", "bfs_chunked", "bfs_sliced", "bfs_keys",
        "view_join_count")
KEYS = ["case", "k"]
LOCAL_ROWS = "spark_differential.iterate.localRows"
PIPELINE_ROWS = "spark_differential.pipeline.localRows"
CHUNK_ROWS = "spark_differential.iterate.chunkRows"
SPREAD = "spark_differential.iterate.localSpread"


def _graph(seed: int, nodes: int = 12, n: int = 30) -> tuple[Coll, Coll]:
    """Edges present over random intervals (multiplicities stay 0 or 1 per edge and time)
    and two roots, one of which comes and goes."""
    rng = random.Random(seed)
    ups = []
    for _ in range(n):
        e = (rng.randrange(nodes), rng.randrange(nodes))
        t1 = rng.randint(0, 5)
        ups.append((e, t1, 1))
        if rng.random() < 0.5:
            ups.append((e, rng.randint(t1, 6), -1))
    roots = [((0,), 0, 1), ((1,), 0, 1), ((1,), 3, -1)]
    return Coll(("src", "dst"), consolidate(ups)), Coll(("node",), roots)


def inputs() -> dict[str, Any]:
    """The seeded oracle collections every job reads (integer times)."""
    edges, roots = _graph(5)
    return {
        "a": cases(41, 12, ["k", "x"], 8, Total()),
        "b": cases(42, 12, ["k", "y"], 8, Total()),
        "c": cases(43, 12, ["k", "x"], 8, Total()),
        "edges": edges,
        "roots": roots,
    }


def top2(x: list[int]) -> list[int]:
    """The two largest distinct values (the reduction both the job and the oracle apply)."""
    return sorted(set(x), reverse=True)[:2]


# a task's first attempt leaves a mark here (by stage and partition) before failing: a barrier
# stage (a loop in key partitions) is retried whole as a new stage attempt, whose tasks' attempt
# numbers start at 0 again, and PySpark tells tasks no stage attempt number
_MARKS = tempfile.mkdtemp(prefix="sd-session-faults-")


def _fail_on_first_attempt() -> None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return
    try:
        os.close(os.open(os.path.join(_MARKS, f"{ctx.stageId()}-{ctx.partitionId()}"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    raise RuntimeError("session_jobs: a user function fails its first attempt on purpose")


def _top2_func(fail: bool) -> Any:
    import pandas as pd

    def func(g: pd.DataFrame) -> pd.DataFrame:
        if fail:
            _fail_on_first_attempt()
        return pd.DataFrame({"x": top2(list(g["x"]))}).assign(diff=1)

    return func


def _min_func(fail: bool) -> Any:
    import pandas as pd

    def func(g: pd.DataFrame) -> pd.DataFrame:
        if fail:
            _fail_on_first_attempt()
        return pd.DataFrame({"dist": [int(g["dist"].min())], "diff": [1]})

    return func


def _bfs(edges: Any, roots: Any, fail_user: bool) -> Any:
    """BFS as seed 001 writes it; with ``fail_user`` the minimum is a user ``dd_reduce``
    function that fails its first attempt (the loop runs inside one task there, where
    only a user function can fail)."""
    from pyspark.sql import functions as F

    e = edges.withColumnRenamed("src", "node")
    start = roots.select("node", F.lit(0).cast("long").alias("dist"), "time", "diff")

    def body(d: Any) -> Any:
        step = d.dd_join(e, on="node").select(
            F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff"
        ).dd_concat(start)
        if fail_user:
            return step.dd_reduce(by="node", func=_min_func(True), schema="dist long")
        return step.dd_min(by="node", col="dist")

    return start.dd_iterate(body)


class _Log(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _failed_attempts(spark: Any, job_ids: list[int]) -> int:
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for jid in job_ids:
        info = tracker.getJobInfo(jid)
        for sid in info.stageIds if info else []:
            stage = tracker.getStageInfo(sid)
            failed += int(stage.numFailedTasks) if stage else 0
    return failed


def _view_join_count(spark: Any, data: dict[str, Any]) -> list[tuple[tuple, Any, int]]:
    """``a ⋈ b``, count per key, as an incremental view fed the inputs in three updates (times
    below 3, below 6, the rest): every update's output, consolidated (the one-shot answer)."""
    import spark_differential as sd

    view = sd.incremental(tempfile.mkdtemp(prefix="sd-session-view-"),
                          lambda a, b: a.dd_join(b, on=KEYS).dd_count(KEYS))
    got: list[tuple[tuple, Any, int]] = []
    for lo, hi in ((None, 3), (3, 6), (6, None)):
        part = {n: Coll(data[n].cols, [u for u in data[n].updates if (lo is None or u[1] >= lo)
                                       and (hi is None or u[1] < hi)]) for n in ("a", "b")}
        got += rows_of(view.update(upto=hi if hi is not None else 1000,
                                   **{n: to_df(spark, c, Total()) for n, c in part.items()}))
    return consolidate(got)


def run_job(spark: Any, name: str, faults: bool) -> dict[str, Any]:
    """One job; its rows, the loop's log and the failed task attempts it caused."""
    from spark_differential.core.faults import FAIL_FIRST_ATTEMPT
    from spark_differential.core.jobs import count_jobs

    data = inputs()
    kernels_fail = name in ("join_count", "join_count_by_operator", "bfs", "bfs_chunked", "view_join_count")
    spark.conf.set(FAIL_FIRST_ATTEMPT, "true" if faults and kernels_fail else "false")
    spark.conf.set(LOCAL_ROWS, "1000000" if name in ("bfs_in_task", "bfs_sliced", "bfs_keys") else "0")
    # in slices of time, a task each (engine.chunks.Spread); in key partitions, a task each (intask.exchange)
    spark.conf.set(SPREAD, {"bfs_sliced": "always", "bfs_keys": "keys"}.get(name, "auto"))
    spark.conf.set(PIPELINE_ROWS, "0" if name == "join_count_by_operator" else "100000")
    # the distributed loop in time chunks: its join gathers the edges per key (kernels.gather)
    spark.conf.set(CHUNK_ROWS, "8" if name == "bfs_chunked" else "auto")
    handler = _Log()
    marks = len(os.listdir(_MARKS))
    loggers = [logging.getLogger(f"spark_differential.{n}") for n in ("iterate", "fused", "incremental")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        with count_jobs(spark, f"session_jobs {name}") as jobs:
            if name in ("join_count", "join_count_by_operator"):
                a, b = to_df(spark, data["a"], Total()), to_df(spark, data["b"], Total())
                rows = rows_of(a.dd_join(b, on=KEYS).dd_count(KEYS))
            elif name == "view_join_count":
                rows = _view_join_count(spark, data)
            elif name == "reduce":
                c = to_df(spark, data["c"], Total())
                rows = rows_of(c.dd_reduce(by=KEYS, func=_top2_func(faults), schema="x long"))
            else:
                edges, roots = to_df(spark, data["edges"], Total()), to_df(spark, data["roots"], Total())
                rows = rows_of(_bfs(edges, roots, fail_user=faults and name in ("bfs_in_task", "bfs_sliced", "bfs_keys")))
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        spark.conf.set(FAIL_FIRST_ATTEMPT, "false")
        spark.conf.unset(LOCAL_ROWS)
        spark.conf.unset(PIPELINE_ROWS)
        spark.conf.unset(CHUNK_ROWS)
        spark.conf.unset(SPREAD)
    return {
        "rows": sorted([list(d), t, r] for d, t, r in rows),
        "log": [m for m in handler.messages
                if "changes" in m or "inside one task" in m or "distributed" in m or "time chunks" in m
                or "slices of time" in m or "key partitions" in m],
        # Spark's status tracker knows a stage's latest attempt only: a barrier stage's failed
        # attempt is seen by the marks its failing tasks left
        "failed_attempts": max(_failed_attempts(spark, jobs.job_ids), len(os.listdir(_MARKS)) - marks),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", required=True)
    ap.add_argument("--plain", default="", help=f"jobs to run as they are (of {', '.join(JOBS)})")
    ap.add_argument("--faults", default="", help="jobs to run with every task failing its first attempt")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import spark_differential as sd

    spark = sd.session(master=args.master, conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
    })
    out: dict[str, Any] = {}
    for run, names in (("plain", args.plain), ("faults", args.faults)):
        for name in filter(None, names.split(",")):
            if name not in JOBS:
                ap.error(f"unknown job {name!r}")
            out.setdefault(name, {})[run] = run_job(spark, name, run == "faults")
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
