"""Spark jobs per operator (issue 20): counted with spark_differential.core.jobs.count_jobs.

Counts, not timings: how many Spark jobs a ``dd_*`` call runs before the user's
action (none, except ``dd_iterate``, which is eager and says so) and how many the
action runs, next to the plain Spark DataFrame equivalent on the same rows.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import spark_differential as sd
from spark_differential.algorithms import bfs
from spark_differential.core.jobs import JobCountError, count_jobs, count_round_trips
from spark_differential.errors import SparkDifferentialError


@pytest.fixture(scope="module")
def small(spark):
    a = spark.createDataFrame(
        [("a", 1, 0, 1), ("a", 2, 1, 1), ("b", 1, 0, 1), ("b", 1, 2, -1)],
        "k string, v long, time long, diff long",
    )
    b = spark.createDataFrame(
        [("a", 10, 0, 1), ("b", 20, 1, 1), ("c", 30, 0, 1)], "k string, w long, time long, diff long"
    )
    history = spark.createDataFrame([("a", 10, 0), ("b", 20, 1), ("a", 11, 3)], "k string, w long, ts long")
    orders = spark.createDataFrame([("a", "o1", 1), ("a", "o2", 4), ("b", "o3", 2)], "k string, oid string, ts long")
    return {"a": a, "b": b, "history": history, "orders": orders}


def test_count_jobs_counts_what_ran(spark):
    df = spark.range(0, 10, numPartitions=3)
    with count_jobs(spark) as nothing:
        pass
    assert (nothing.jobs, nothing.stages, nothing.tasks) == (0, 0, 0)
    with count_jobs(spark) as one:
        assert len(df.collect()) == 10
    assert (one.jobs, one.stages, one.tasks) == (1, 1, 3)
    assert one.seconds > 0 and len(one.job_ids) == 1


def test_count_jobs_restores_the_job_group(spark):
    sc = spark.sparkContext
    sc.setJobGroup("outer-group", "the caller's group")
    try:
        with count_jobs(spark) as c:
            assert sc.getLocalProperty("spark.jobGroup.id") == c.group
            spark.range(3).collect()
        assert sc.getLocalProperty("spark.jobGroup.id") == "outer-group"
        assert c.jobs == 1
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)


def test_count_jobs_counts_jobs_of_a_block_that_raises(spark):
    with pytest.raises(ZeroDivisionError):
        with count_jobs(spark) as c:
            spark.range(4, numPartitions=2).collect()
            1 / 0  # noqa: B018
    assert (c.jobs, c.tasks) == (1, 2)


def test_count_jobs_needs_a_classic_session():
    class NoContext:
        @property
        def sparkContext(self):
            raise AttributeError("sparkContext is not supported in Spark Connect")

    with pytest.raises(JobCountError, match="Spark Connect") as e:
        with count_jobs(NoContext()):
            pass
    assert isinstance(e.value, SparkDifferentialError)


def test_count_jobs_with_library_defaults_ui_disabled(spark):
    # sd.session() turns the web UI off; the status tracker must still see jobs
    assert spark.conf.get("spark.ui.enabled") == "false"
    with count_jobs(spark) as c:
        spark.range(5, numPartitions=1).collect()
    assert (c.jobs, c.tasks) == (1, 1)


def test_dd_count_runs_no_job_until_collect_and_no_more_than_plain(small, spark):
    a = small["a"]
    with count_jobs(spark) as call:
        out = a.dd_count("k")
    with count_jobs(spark) as action:
        rows = out.collect()
    with count_jobs(spark) as plain:
        a.drop("time", "diff").groupBy("k").count().collect()
    assert call.jobs == 0
    # adaptive execution runs one job per query stage: the input's shuffle, then the
    # result - as for the plain groupBy().count()
    assert action.jobs == plain.jobs == 2
    assert action.tasks <= plain.tasks
    got = sorted((r["k"], r["count"], r["time"], r["diff"]) for r in rows)
    assert got == [("a", 1, 0, 1), ("a", 1, 1, -1), ("a", 2, 1, 1), ("b", 1, 0, 1), ("b", 1, 2, -1)]


# py4j round trips of the driver-side call a.dd_count("k") (a 4-column collection, one
# key): 190 before the plan was built with fewer DataFrames and Column calls
# (docs/performance.md, "Where an operator's call and its Python task go"); 109 then; 65
# since its kernel input is one selectExpr of SQL text ("sd.sql's as-of join and dd_join").
DD_COUNT_ROUND_TRIPS = 75


def test_dd_count_call_stays_under_its_py4j_round_trips(small, spark):
    """The fixed cost of building an operator's plan, counted (not timed): every PySpark
    call is a py4j round trip, every DataFrame an analysis in the JVM."""
    a = small["a"]
    a.dd_count("k")  # the first call in a process may look up things the next ones reuse
    counts = []
    for _ in range(2):
        with count_round_trips() as trips:
            a.dd_count("k")
        counts.append(trips.count)
    assert counts[0] == counts[1], counts  # deterministic
    assert 0 < counts[0] <= DD_COUNT_ROUND_TRIPS, counts


# sd.sql with one ASOF JOIN: 832 round trips while it built sd.from_upserts' collection
# (the history with its retractions, which the as-of join never reads); 538 once it read
# the log directly (calculus.asof_join_history); 105 since each side goes into the as-of
# kernel's form by one filter and one selectExpr and the rewritten SELECT runs without
# spark.sql's temporary view (docs/performance.md, "sd.sql's as-of join and dd_join"); 129
# since it reads the left's row count from Spark's plan (a large join by key keeps every
# shuffle partition: operators.asof_ranges.SPREAD_ROWS); 132 since that estimate first looks
# for local rows under projections in the plan before optimisation (two round trips where
# there are none, as here; an optimizer run less, 3-4 ms, where there are: intask.sources).
SQL_ASOF_ROUND_TRIPS = 132


def test_sql_asof_join_call_stays_under_its_py4j_round_trips(small, spark):
    history, orders = small["history"], small["orders"]
    query = "SELECT o.oid, o.ts, p.w FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k"
    sd.sql(query, orders=orders, prices=history)
    counts = []
    for _ in range(2):
        with count_round_trips() as trips:
            out = sd.sql(query, orders=orders, prices=history)
        counts.append(trips.count)
    assert counts[0] == counts[1], counts
    assert 0 < counts[0] <= SQL_ASOF_ROUND_TRIPS, counts
    assert sorted(tuple(r) for r in out.collect()) == [("o1", 1, 10), ("o2", 4, 11), ("o3", 2, 20)]


# dd_join / dd_semijoin / dd_antijoin of two 4-column collections on one key: 191 / 203 /
# 203 round trips while the kernel's inputs were built from Columns; 87 / 87 / 86 from SQL text.
JOIN_ROUND_TRIPS = 100


@pytest.mark.parametrize("op", ["dd_join", "dd_semijoin", "dd_antijoin"])
def test_join_call_stays_under_its_py4j_round_trips(small, spark, op):
    a, b = small["a"], small["b"]
    right = b if op == "dd_join" else b.select("k", "time", "diff")
    right.schema  # noqa: B018 - the benchmark's inputs: schemas read once already
    call = getattr(a, op)
    call(right, on="k")
    counts = []
    for _ in range(2):
        with count_round_trips() as trips:
            call(right, on="k")
        counts.append(trips.count)
    assert counts[0] == counts[1], counts
    assert 0 < counts[0] <= JOIN_ROUND_TRIPS, counts


def _lazy_calls(small, spark):
    a, b, history, orders = small["a"], small["b"], small["history"], small["orders"]
    prices = sd.from_upserts(history, key="k", time="ts")
    ords = sd.collection(orders, time="ts", check_nulls=False)
    keys_b = b.select("k", "time", "diff")
    return {
        "dd_consolidate": lambda: a.dd_consolidate(),
        "dd_consolidate(frontier)": lambda: a.dd_consolidate(frontier=[1]),
        "dd_consolidate(kernel)": lambda: a.dd_consolidate(method="kernel"),
        "dd_as_of": lambda: a.dd_as_of(1),
        "dd_negate": lambda: a.dd_negate(),
        "dd_concat": lambda: a.dd_concat(a),
        "dd_join": lambda: a.dd_join(b, on="k"),
        "dd_semijoin": lambda: a.dd_semijoin(keys_b, on="k"),
        "dd_antijoin": lambda: a.dd_antijoin(keys_b, on="k"),
        "dd_reduce": lambda: a.dd_reduce("k", lambda g: g.nlargest(1, "v")[["v"]].assign(diff=1), "v long"),
        "dd_sum": lambda: a.dd_sum("k", "v"),
        "dd_min": lambda: a.dd_min("k", "v"),
        "dd_max": lambda: a.dd_max("k", "v"),
        "dd_distinct": lambda: a.dd_distinct(),
        "dd_threshold": lambda: a.dd_threshold(lambda m: min(m, 1)),
        "differentiate": lambda: a.differentiate(),
        "integrate": lambda: a.differentiate().integrate(),
        "dd_asof_join": lambda: ords.dd_asof_join(prices, on="k"),
        "dd_asof_join(kernel)": lambda: ords.dd_asof_join(prices, on="k", method="kernel"),
        "sd.sql ASOF JOIN": lambda: sd.sql(
            "SELECT o.oid, p.w FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k",
            orders=orders,
            prices=history,
        ),
        "sd.collection(check_nulls=False)": lambda: sd.collection(orders, time="ts", check_nulls=False),
        "sd.from_upserts": lambda: sd.from_upserts(history, key="k", time="ts"),
        "select on a collection": lambda: a.dd_count("k").where(F.col("count") > 1),
    }


def test_no_operator_runs_a_job_before_the_action(small, spark):
    ran = {}
    for name, call in _lazy_calls(small, spark).items():
        with count_jobs(spark) as c:
            out = call()
        ran[name] = c.jobs
        with count_jobs(spark) as action:
            out.collect()
        assert action.jobs >= 1, name  # the work happens at the action
    assert ran == {name: 0 for name in ran}


def test_join_runs_no_more_jobs_than_the_plain_join(small, spark):
    a, b = small["a"], small["b"]
    with count_jobs(spark) as ours:
        a.dd_join(b, on="k").collect()
    with count_jobs(spark) as plain:
        a.drop("time", "diff").join(b.drop("time", "diff"), on="k").collect()
    assert ours.jobs <= plain.jobs
    assert ours.jobs == 2  # one shuffle of both inputs (tagged by side), then the kernel per partition


def test_methods_restore_pyspark_origin_tracking(small):
    from pyspark.errors import utils as perr

    before = perr._enable_debugging_cache
    small["a"].dd_count("k")
    assert perr._enable_debugging_cache == before
    perr._enable_debugging_cache = True
    try:
        with pytest.raises(SparkDifferentialError):
            small["a"].dd_count("nope")
        assert perr._enable_debugging_cache is True  # restored after an error too
    finally:
        perr._enable_debugging_cache = before


def test_seed_001_worked_example_in_at_most_three_jobs(spark):
    """Seed 001's worked BFS example, call and collect: the loop runs inside one task
    (one job during the call, eager), and its small answer came back with that job: the
    user's collect runs none."""
    from test_iterate import SEED_001_DISTS, SEED_001_EDGES

    edges = spark.createDataFrame(
        [(s, d, t, r) for (s, d), t, r in SEED_001_EDGES], "src long, dst long, time long, diff long"
    )
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    with count_jobs(spark) as call:
        result = bfs(edges, roots)
    with count_jobs(spark) as action:
        rows = result.collect()
    got = sorted(((r["node"], r["dist"]), r["time"], r["diff"]) for r in rows)
    assert got == sorted(SEED_001_DISTS)
    assert call.jobs == 1 and action.jobs == 0, (call, action)


# py4j round trips of the eager dd_iterate calls below (recording the body, building and
# running the loop's one task): 725 (reach) and 840 (BFS) while the recorder walked each
# plan over py4j node by node; 256 and 302 since it reads a plan from one toJSON() call and
# builds the task's input from SQL text (docs/performance.md, "Round trips of recording a
# loop body"); 299 and 346 since sources without plan statistics (Python lists) are bounded
# from their batches before any task starts, where the task used to count them.  The
# bounds leave room for a few, not for a walk of the plan.
REACH_ROUND_TRIPS = 305
BFS_ROUND_TRIPS = 355


def _reach_join(edges, roots):
    """``benchmarks/latency.py``'s reach: ``dd_join`` + select + ``dd_concat`` + ``dd_distinct``."""
    e = edges.withColumnRenamed("src", "node")
    start = roots.select("node", "time", "diff")
    return start.dd_iterate(
        lambda r: r.dd_join(e, on="node").select(F.col("dst").alias("node"), "time", "diff").dd_concat(start).dd_distinct()
    )


@pytest.mark.parametrize(("name", "bound"), [("reach", REACH_ROUND_TRIPS), ("bfs", BFS_ROUND_TRIPS)])
def test_loop_call_stays_under_its_py4j_round_trips(spark, name, bound):
    """The driver's fixed cost of an eager loop on seed 001's graph, counted (not timed):
    it runs inside one task, and its call is mostly py4j round trips."""
    from test_iterate import SEED_001_DISTS, SEED_001_EDGES

    edges = spark.createDataFrame(
        [(s, d, t, r) for (s, d), t, r in SEED_001_EDGES], "src long, dst long, time long, diff long"
    )
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    call = (lambda: _reach_join(edges, roots)) if name == "reach" else (lambda: bfs(edges, roots))
    call()  # the first call in a process may look up things the next ones reuse
    counts = []
    for _ in range(2):
        with count_jobs(spark) as jobs, count_round_trips() as trips:
            out = call()
        counts.append(trips.count)
        assert jobs.jobs == 1  # the in-task path ran (the distributed one runs a job per iteration)
    assert counts[0] == counts[1], counts  # deterministic
    assert 0 < counts[0] <= bound, counts
    if name == "bfs":
        got = sorted(((r["node"], r["dist"]), r["time"], r["diff"]) for r in out.collect())
        assert got == sorted(SEED_001_DISTS)
    else:
        assert {r["node"] for r in out.collect()} == {0, 1, 2}


def _reach_semi(edges, roots):
    """Nodes reachable from ``roots``: a body of one ``dd_semijoin`` and one ``dd_distinct``."""
    e = edges.withColumnRenamed("src", "node")
    start = roots.select("node", "time", "diff")

    def step(r):
        return (
            e.dd_semijoin(r, on="node")
            .select(F.col("dst").alias("node"), "time", "diff")
            .dd_concat(start, consolidate=False)
            .dd_distinct()
        )

    return start.dd_iterate(step)


def _chain_run(spark, caplog, body, length: int, chunked: bool):
    """``body`` over a chain ``0 → 1 → … → length`` (one more node per iteration) on the
    distributed path; with ``chunked``, unreachable edges change at 20 later times and the
    loop runs in time chunks.  Returns (jobs, tasks, iterations, rows)."""
    rows = [(i, i + 1, 0, 1) for i in range(length)]
    rows += [(100 + t % 3, 200 + t % 5, t, 1 if t % 2 else -1) for t in range(1, 21)] if chunked else []
    edges = spark.createDataFrame(rows, "src long, dst long, time long, diff long").localCheckpoint()
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long").localCheckpoint()
    caplog.clear()
    with count_jobs(spark) as c:
        out = body(edges, roots)
    got = out.collect()
    messages = [r.getMessage() for r in caplog.records]
    assert any("time chunks" in m for m in messages) == chunked, messages
    iterations = sum("changes (" in m for m in messages)
    return c.jobs, c.tasks, iterations, got


@pytest.mark.parametrize("chunked", [False, True], ids=["unsliced", "time-chunks"])
@pytest.mark.parametrize("name", ["bfs", "reach_semijoin"])
def test_distributed_loop_runs_two_jobs_per_iteration(spark, caplog, name, chunked):
    """Issue 20: on the distributed path (``localRows=0``) an iteration of a body with one
    join and one reduction runs 2 Spark jobs (BFS: ``dd_join`` + ``dd_min``; reach:
    ``dd_semijoin`` + ``dd_distinct``), with and without time chunks: the difference
    between two runs whose iteration counts differ, per iteration, so the fixed part
    (roots, chunk planning, the result) drops out.  Merges of trace batches happen in
    the same jobs."""
    import logging

    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    body = bfs if name == "bfs" else _reach_semi
    spark.conf.set("spark_differential.iterate.localRows", "0")
    spark.conf.set("spark_differential.iterate.chunkRows", "4" if chunked else "off")
    try:
        short = _chain_run(spark, caplog, body, 2, chunked)
        long_ = _chain_run(spark, caplog, body, 5, chunked)
    finally:
        spark.conf.unset("spark_differential.iterate.localRows")
        spark.conf.unset("spark_differential.iterate.chunkRows")
    for length, (_, _, iterations, got) in ((2, short), (5, long_)):
        assert iterations == length + 1  # one iteration per node of the chain, one that changes nothing
        data = sorted((tuple(v for c, v in r.asDict().items() if c not in ("time", "diff")), r["time"], r["diff"]) for r in got)
        assert data == [((i, i) if name == "bfs" else (i,), 0, 1) for i in range(length + 1)]  # node i at distance i
    per_iteration = (long_[0] - short[0]) / (long_[2] - short[2])
    assert per_iteration == 2, (short, long_)
