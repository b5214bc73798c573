"""Fixed cost per step: Spark jobs, tasks and seconds of every operator on ~10 rows (issue 20).

What is measured
    Each public operator on a ~10-row input (``dd_consolidate`` with and without a
    frontier, ``dd_as_of``, ``dd_negate``, ``dd_concat``, ``dd_join``,
    ``dd_semijoin``, ``dd_antijoin``, the reductions, ``dd_distinct``,
    ``dd_threshold``, ``differentiate``, ``integrate``, ``dd_asof_join``, the as-of
    join through ``sd.sql`` and a small ``dd_iterate``), next to its plain Spark
    DataFrame equivalent on the same rows (``groupBy().count()`` for ``dd_count``,
    ``df.join`` for ``dd_join``, ...), and seed 001's worked BFS example (5 nodes,
    15 edge changes; ``spark_differential.algorithms.bfs``) next to one plain
    ``groupBy().count().collect()``.

    One run of a case is: build the DataFrame (the ``dd_*`` call, timed and counted
    on its own), then ``.collect()`` it.  For each run: Spark jobs, stages and tasks
    (``spark_differential.core.jobs.count_jobs``: a job group + the status tracker) and
    wall-clock seconds, and the py4j round trips of building the DataFrame
    (``spark_differential.core.jobs.count_round_trips``: deterministic, where the call's
    seconds are not).  ``--warmup`` untimed runs, then ``--repeat`` timed runs, ours
    and the plain equivalent alternating (so a change of load on a shared machine hits
    both); the table shows the median seconds and the jobs/tasks of the last timed run
    (they do not vary between warm runs).  Every run builds a fresh plan: collecting
    the same DataFrame twice would reuse its shuffle files and skip stages.  ``ratio`` = our seconds / plain seconds (here below
    1 is better; the target is <= 1.5 for single operators).

    Two small pipelines (``dd_join`` + ``select`` + ``dd_count``; and then ``dd_join`` +
    ``dd_min`` on that) are measured the same way against the same plain pipeline, with
    no time target ("info"): what several operators cost together.  From their second
    operator on they run inside one task (``spark_differential.intask.pipeline``); the same two
    "operator by operator" (``spark_differential.pipeline.localRows=0`` while the
    pipeline is built) show what that saves, in the same run.

    Targets, printed as pass/fail (the script still exits 0 when one fails: it is a
    measurement, not a test; see tests/test_jobs.py for the job counts asserted):

    * BFS worked example: <= 3 Spark jobs and <= 4x one plain
      ``groupBy().count().collect()``;
    * every single operator: <= 1.5x its plain equivalent's seconds;
    * no ``dd_*`` call except ``dd_iterate`` (eager, documented) runs a Spark job.

    The BFS result is checked against seed 001's 7 distance changes.

    python benchmarks/latency.py --quick
    python benchmarks/latency.py --json benchmarks/results/latency.json
    python benchmarks/latency.py --cases dd_count,dd_join --repeat 9
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from common import base_parser, describe_env, environment, log, make_spark
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import spark_differential as sd
from spark_differential.algorithms import bfs
from spark_differential.core.jobs import count_jobs, count_round_trips

SEED_001_EDGES = [
    ((1, 1), 0, 1),
    ((2, 1), 0, 1),
    ((0, 1), 0, 1),
    ((0, 2), 0, 1),
    ((1, 0), 0, 1),
    ((2, 0), 1, 1),
    ((1, 1), 1, -1),
    ((1, 2), 2, 1),
    ((2, 1), 2, -1),
    ((1, 2), 3, 1),
    ((0, 1), 3, -1),
    ((2, 1), 4, 1),
    ((0, 2), 4, -1),
    ((0, 2), 5, 1),
    ((1, 0), 5, -1),
]
SEED_001_DISTS = sorted(
    [
        (0, 0, 0, 1),
        (1, 1, 0, 1),
        (2, 1, 0, 1),
        (1, 1, 3, -1),
        (2, 1, 4, -1),
        (1, 2, 5, 1),
        (2, 1, 5, 1),
    ]
)

OP_TARGET = 1.5  # single operator: at most this times its plain equivalent
BFS_TARGET = 4.0  # BFS worked example: at most this times one plain groupBy().count()
BFS_JOBS = 3


@dataclass
class Run:
    """One measured run: seconds and jobs of the call and of the collect."""

    call_s: float
    collect_s: float
    call_jobs: int
    jobs: int
    stages: int
    tasks: int
    call_trips: int = 0  # py4j round trips of the call (classic sessions; deterministic)

    @property
    def seconds(self) -> float:
        return self.call_s + self.collect_s


@dataclass
class Side:
    label: str
    runs: list[Run] = field(default_factory=list)
    error: str = ""

    @property
    def seconds(self) -> float | None:
        return statistics.median(r.seconds for r in self.runs) if self.runs else None

    @property
    def last(self) -> Run | None:
        return self.runs[-1] if self.runs else None


@dataclass
class Case:
    name: str
    ours: Callable[[], DataFrame]
    plain: Callable[[], DataFrame]
    ours_label: str
    plain_label: str
    target: float | None = OP_TARGET  # None: measured, no time target (shown as "info")
    max_jobs: int | None = None
    eager: bool = False  # the call itself may run jobs (dd_iterate)
    check: Callable[[list[Any]], str] | None = None  # returns "" when the result is right
    same_rows: bool = False  # the plain equivalent computes exactly our rows (checked)


def one_run(spark: Any, build: Callable[[], DataFrame]) -> tuple[Run, list[Any]]:
    """Build the DataFrame, then collect it; jobs and seconds of both parts."""
    with count_jobs(spark) as c0, count_round_trips() as trips:
        t0 = time.perf_counter()
        df = build()
        t1 = time.perf_counter()
    with count_jobs(spark) as c1:
        rows = df.collect()
        t2 = time.perf_counter()
    run = Run(t1 - t0, t2 - t1, c0.jobs, c0.jobs + c1.jobs, c0.stages + c1.stages, c0.tasks + c1.tasks, trips.count)
    return run, rows


def measure_pair(spark: Any, c: Case, warmup: int, repeat: int) -> tuple[Side, Side, str]:
    """``warmup`` + ``repeat`` runs of ours and of the plain equivalent, alternating
    (ours, plain, ours, plain, ...) so that a change of load on the machine hits both."""
    ours, plain = Side(c.ours_label), Side(c.plain_label)
    rows: list[Any] = []
    plain_rows: list[Any] = []
    for i in range(warmup + repeat):
        for side, build in ((ours, c.ours), (plain, c.plain)):
            if side.error:
                continue
            try:
                run, got = one_run(spark, build)
            except Exception as e:  # reported, not fatal
                side.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                log(f"{side.label}: FAILED: {side.error}")
                continue
            if i >= warmup:
                side.runs.append(run)
            if side is ours:
                rows = got
            else:
                plain_rows = got
    problem = c.check(rows) if c.check is not None and not ours.error else ""
    if c.same_rows and not (ours.error or plain.error) and sorted(map(tuple, rows)) != sorted(map(tuple, plain_rows)):
        problem = f"the plain equivalent's rows differ from ours: {sorted(map(tuple, plain_rows))} vs {sorted(map(tuple, rows))}"
    return ours, plain, problem


def small_inputs(spark: Any) -> dict[str, DataFrame]:
    """~10-row collections (and their plain-table counterparts), cached as local relations."""
    a = spark.createDataFrame(
        [
            ("a", 1, 0, 1),
            ("a", 2, 1, 1),
            ("b", 1, 0, 1),
            ("b", 1, 2, -1),
            ("b", 3, 2, 1),
            ("c", 5, 1, 1),
            ("c", 5, 3, 1),
            ("d", 2, 0, 1),
            ("d", 2, 4, -1),
            ("e", 7, 2, 1),
        ],
        "k string, v long, time long, diff long",
    )
    b = spark.createDataFrame(
        [
            ("a", 10, 0, 1),
            ("b", 20, 1, 1),
            ("c", 30, 0, 1),
            ("c", 30, 2, -1),
            ("c", 31, 2, 1),
            ("f", 60, 0, 1),
            ("a", 11, 3, 1),
            ("b", 21, 3, 1),
            ("d", 40, 1, 1),
            ("g", 70, 2, 1),
        ],
        "k string, w long, time long, diff long",
    )
    history = spark.createDataFrame(
        [("a", 10, 0), ("b", 20, 1), ("c", 30, 0), ("c", 31, 2), ("a", 11, 3), ("d", 40, 1)],
        "k string, w long, ts long",
    )
    orders = spark.createDataFrame(
        [
            ("a", "o1", 1),
            ("a", "o2", 4),
            ("b", "o3", 2),
            ("c", "o4", 1),
            ("c", "o5", 3),
            ("d", "o6", 0),
            ("d", "o7", 5),
            ("e", "o8", 2),
            ("b", "o9", 0),
            ("a", "o10", 2),
        ],
        "k string, oid string, ts long",
    )
    edges = spark.createDataFrame(
        [(s, d, t, r) for (s, d), t, r in SEED_001_EDGES], "src long, dst long, time long, diff long"
    )
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    return {"a": a, "b": b, "history": history, "orders": orders, "edges": edges, "roots": roots}


def bfs_check(rows: list[Any]) -> str:
    got = sorted((r["node"], r["dist"], r["time"], r["diff"]) for r in rows)
    return "" if got == SEED_001_DISTS else f"BFS rows differ from seed 001's: {got}"


def cases(spark: Any, x: dict[str, DataFrame]) -> list[Case]:
    a, b, history, orders, edges, roots = (x[k] for k in ("a", "b", "history", "orders", "edges", "roots"))
    a_plain = a.drop("time", "diff")
    b_plain = b.drop("time", "diff")
    prices = sd.from_upserts(history, key="k", time="ts")
    ords = sd.collection(orders, time="ts", check_nulls=False)
    views = {"orders": orders, "prices": history}
    asof_sql = "SELECT o.oid, o.ts, p.w FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k"

    def plain_asof() -> DataFrame:  # a fresh plan every run (a reused one reuses its shuffle files)
        return (
            orders.alias("o")
            .join(history.alias("p"), (F.col("o.k") == F.col("p.k")) & (F.col("p.ts") <= F.col("o.ts")))
            .groupBy("o.oid", "o.ts")
            .agg(F.max("p.ts").alias("pts"))
        )

    e = edges.withColumnRenamed("src", "node")

    def reach() -> DataFrame:
        start = roots.select("node", "time", "diff")
        return start.dd_iterate(
            lambda r: (
                r.dd_join(e, on="node")
                .select(F.col("dst").alias("node"), "time", "diff")
                .dd_concat(start)
                .dd_distinct()
            )
        )

    def plain_sum(df: DataFrame, by: list[str]) -> DataFrame:
        return df.groupBy(*by).agg(F.sum("diff").alias("diff")).where(F.col("diff") != 0)

    # the two small pipelines (in one task, and operator by operator) and their plain equivalents
    def join_count() -> DataFrame:
        return a.dd_join(b, on="k").select("k", "w", "time", "diff").dd_count(by="k")

    def join_count_plain() -> DataFrame:
        return a_plain.join(b_plain, "k").groupBy("k").count()

    def join_min() -> DataFrame:
        return join_count().dd_join(b, on="k").dd_min(by="k", col="w")

    def join_min_plain() -> DataFrame:
        return join_count_plain().join(b_plain, "k").groupBy("k").agg(F.min("w"))

    return [
        Case(
            "dd_consolidate",
            lambda: a.dd_consolidate(),
            lambda: plain_sum(a, ["k", "v", "time"]),
            "a.dd_consolidate()",
            "groupBy(k,v,time).sum(diff)",
            same_rows=True,
        ),
        Case(
            "dd_consolidate(frontier)",
            lambda: a.dd_consolidate(frontier=[2]),
            lambda: plain_sum(a.withColumn("time", F.greatest("time", F.lit(2))), ["k", "v", "time"]),
            "a.dd_consolidate(frontier=[2])",
            "greatest(time,2) + groupBy.sum",
            same_rows=True,
        ),
        Case(
            "dd_as_of",
            lambda: a.dd_as_of(2),
            lambda: plain_sum(a.where("time <= 2"), ["k", "v"]),
            "a.dd_as_of(2)",
            "where(time<=2).groupBy(k,v).sum",
        ),
        Case(
            "dd_negate",
            lambda: a.dd_negate(),
            lambda: plain_sum(a.withColumn("diff", -F.col("diff")), ["k", "v", "time"]),
            "a.dd_negate()",
            "withColumn(diff, -diff).groupBy(k,v,time).sum",
            same_rows=True,
        ),
        Case(
            "dd_concat",
            lambda: a.dd_concat(a),
            lambda: plain_sum(a.unionByName(a), ["k", "v", "time"]),
            "a.dd_concat(a)",
            "unionByName.groupBy(k,v,time).sum",
            same_rows=True,
        ),
        Case(
            "dd_join",
            lambda: a.dd_join(b, on="k"),
            lambda: a_plain.join(b_plain, on="k"),
            "a.dd_join(b, on=k)",
            "a.join(b, on=k)",
        ),
        Case(
            "dd_semijoin",
            lambda: a.dd_semijoin(b.select("k", "time", "diff"), on="k"),
            lambda: a_plain.join(b_plain, on="k", how="left_semi"),
            "a.dd_semijoin(b, on=k)",
            "join left_semi",
        ),
        Case(
            "dd_antijoin",
            lambda: a.dd_antijoin(b.select("k", "time", "diff"), on="k"),
            lambda: a_plain.join(b_plain, on="k", how="left_anti"),
            "a.dd_antijoin(b, on=k)",
            "join left_anti",
        ),
        Case(
            "dd_reduce",
            lambda: a.dd_reduce("k", lambda g: g.nlargest(1, "v")[["v"]].assign(diff=1), "v long"),
            lambda: a_plain.groupBy("k").agg(F.max("v")),
            "a.dd_reduce(k, top-1)",
            "groupBy(k).max(v)",
        ),
        Case(
            "dd_count",
            lambda: a.dd_count("k"),
            lambda: a_plain.groupBy("k").count(),
            "a.dd_count(k)",
            "groupBy(k).count()",
        ),
        Case(
            "dd_sum",
            lambda: a.dd_sum("k", "v"),
            lambda: a_plain.groupBy("k").sum("v"),
            "a.dd_sum(k, v)",
            "groupBy(k).sum(v)",
        ),
        Case(
            "dd_min",
            lambda: a.dd_min("k", "v"),
            lambda: a_plain.groupBy("k").min("v"),
            "a.dd_min(k, v)",
            "groupBy(k).min(v)",
        ),
        Case(
            "dd_max",
            lambda: a.dd_max("k", "v"),
            lambda: a_plain.groupBy("k").max("v"),
            "a.dd_max(k, v)",
            "groupBy(k).max(v)",
        ),
        Case("dd_distinct", lambda: a.dd_distinct(), lambda: a_plain.distinct(), "a.dd_distinct()", "distinct()"),
        Case(
            "dd_threshold",
            lambda: a.dd_threshold(lambda m: min(m, 1)),
            lambda: plain_sum(a, ["k", "v"]),
            "a.dd_threshold(min(m,1))",
            "groupBy(k,v).sum(diff)",
        ),
        Case(
            "differentiate",
            lambda: a.differentiate(),
            lambda: a.unionByName(a.withColumn("diff", -F.col("diff"))),
            "a.differentiate()",
            "a union negated a",
        ),
        Case(
            "integrate",
            lambda: a.differentiate().integrate(),
            lambda: plain_sum(a, ["k", "v", "time"]),
            "a.differentiate().integrate()",
            "groupBy(k,v,time).sum(diff)",
        ),
        Case(
            "dd_asof_join",
            lambda: ords.dd_asof_join(prices, on="k"),
            plain_asof,
            "orders.dd_asof_join(from_upserts(history))",
            "join(p.ts<=o.ts) + groupBy max",
        ),
        Case(
            "sd.sql ASOF JOIN",
            lambda: sd.sql(asof_sql, **views),
            plain_asof,
            "sd.sql(... ASOF JOIN ...)",
            "join(p.ts<=o.ts) + groupBy max",
        ),
        Case("pipeline: join+count", join_count, join_count_plain, "a.dd_join(b).select.dd_count",
             "join + groupBy().count()", target=None),
        Case("pipeline: join+count+join+min", join_min, join_min_plain, "... .dd_count.dd_join(b).dd_min",
             "join + count + join + min", target=None),
        Case("pipeline: join+count, operator by operator", unfused(spark, join_count), join_count_plain,
             "the same, localRows=0", "join + groupBy().count()", target=None),
        Case("pipeline: join+count+join+min, operator by operator", unfused(spark, join_min), join_min_plain,
             "the same, localRows=0", "join + count + join + min", target=None),
        Case(
            "dd_iterate (reach)",
            reach,
            lambda: roots.join(e, on="node").select("dst").distinct(),
            "roots.dd_iterate(join,concat,distinct)",
            "one join + distinct",
            eager=True,
        ),
        Case(
            "BFS seed 001 worked example",
            lambda: bfs(edges, roots),
            lambda: edges.groupBy().count(),
            "algorithms.bfs(edges, roots)",
            "groupBy().count()",
            target=BFS_TARGET,
            max_jobs=BFS_JOBS,
            eager=True,
            check=bfs_check,
        ),
    ]


def unfused(spark: Any, build: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
    """``build`` with small pipelines run operator by operator (``spark_differential.pipeline.localRows=0``
    while it builds the plan)."""

    def run() -> DataFrame:
        spark.conf.set("spark_differential.pipeline.localRows", "0")
        try:
            return build()
        finally:
            spark.conf.unset("spark_differential.pipeline.localRows")

    return run


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    p.set_defaults(driver_memory=os.environ.get("SD_DRIVER_MEMORY", "2g"))
    args = p.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    spark = make_spark(args)
    x = small_inputs(spark)
    todo = cases(spark, x)
    if args.cases:
        wanted = {c.strip() for c in args.cases.split(",")}
        todo = [c for c in todo if c.name in wanted]
    results: list[dict[str, Any]] = []
    for c in todo:
        log(f"{c.name}: {warmup} warm-up + {repeat} timed runs each side, alternating")
        ours, plain, problem = measure_pair(spark, c, warmup, repeat)
        ratio = ours.seconds / plain.seconds if ours.seconds and plain.seconds else None
        lo, lp = ours.last, plain.last
        fails = []
        if c.target is not None and (ratio is None or ratio > c.target):
            fails.append(f"time {ratio:.2f}x > {c.target}x" if ratio else "not measured")
        if c.max_jobs is not None and (lo is None or lo.jobs > c.max_jobs):
            fails.append(f"{lo.jobs if lo else '?'} jobs > {c.max_jobs}")
        if not c.eager and lo is not None and lo.call_jobs:
            fails.append(f"the call ran {lo.call_jobs} jobs")
        if problem:
            fails.append(problem)
        results.append(
            {
                "case": c.name,
                "ours": asdict(ours),
                "plain": asdict(plain),
                "ours_seconds": ours.seconds,
                "plain_seconds": plain.seconds,
                "ratio": ratio,
                "ours_call_seconds": statistics.median(r.call_s for r in ours.runs) if ours.runs else None,
                "ours_jobs": lo.jobs if lo else None,
                "ours_call_jobs": lo.call_jobs if lo else None,
                "ours_tasks": lo.tasks if lo else None,
                "ours_call_py4j": lo.call_trips if lo else None,
                "plain_call_py4j": lp.call_trips if lp else None,
                "plain_jobs": lp.jobs if lp else None,
                "plain_tasks": lp.tasks if lp else None,
                "target": c.target,
                "max_jobs": c.max_jobs,
                "pass": not fails,
                "why": "; ".join(fails),
            }
        )
    print_table(args, results, repeat, warmup)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "benchmark": "latency",
                    "environment": environment(args),
                    "config": {
                        "repeat": repeat,
                        "warmup": warmup,
                        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                        "adaptive": spark.conf.get("spark.sql.adaptive.enabled"),
                    },
                    "rows": results,
                },
                f,
                indent=2,
                default=str,
            )
        log(f"results written to {args.json}")
    return 0


def print_table(args: Any, results: list[dict[str, Any]], repeat: int, warmup: int) -> None:
    def ms(s: float | None) -> str:
        return "-" if s is None else f"{s * 1000:.0f} ms"

    header = [
        "case",
        "jobs (call)",
        "tasks",
        "time (call)",
        "plain jobs",
        "plain tasks",
        "plain time",
        "ratio",
        "py4j (call)",
        "target",
    ]
    body = []
    for r in results:
        body.append(
            [
                r["case"],
                f"{r['ours_jobs']} ({r['ours_call_jobs']})",
                str(r["ours_tasks"]),
                f"{ms(r['ours_seconds'])} ({ms(r['ours_call_seconds'])})",
                str(r["plain_jobs"]),
                str(r["plain_tasks"]),
                ms(r["plain_seconds"]),
                "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                f"{r['ours_call_py4j']} / {r['plain_call_py4j']}",
                ("pass" if r["target"] is not None else "info") if r["pass"] else "FAIL: " + r["why"],
            ]
        )
    widths = [max(len(str(v)) for v in col) for col in zip(header, *body)]
    line = "  ".join("-" * w for w in widths)
    print()
    print(f"== latency: ~10-row inputs ==  ({describe_env(args)}; median of {repeat} runs after {warmup} warm-up)")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print(line)
    for b in body:
        print("  ".join(str(v).ljust(w) for v, w in zip(b, widths)))
    print(line)
    print(
        "jobs/tasks: Spark jobs and tasks of call + collect (of the call alone in parentheses); ratio = our time / plain time"
    )
    print("py4j (call): py4j round trips of building the DataFrame, ours / plain (deterministic; the time it takes varies)")
    print(
        f"targets: single operators <= {OP_TARGET}x plain; BFS <= {BFS_JOBS} jobs and <= {BFS_TARGET}x one plain "
        "groupBy().count().collect(); no dd_* call but dd_iterate runs a job"
    )
    print("info: small pipelines of several operators, measured against the same plain pipeline (no time target)")
    bad = [r["case"] for r in results if not r["pass"]]
    targeted = [r for r in results if r["target"] is not None or not r["pass"]]
    print(f"  {len(targeted) - len(bad)}/{len(targeted)} targets met" + (f"; missed: {', '.join(bad)}" if bad else ""))
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
