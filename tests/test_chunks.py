"""Time chunks (spark_differential.engine.chunks): the chunked form of a collection accumulates
to the collection inside every chunk, un-chunking gives the collection back, and loops
run in chunks agree with the oracle for every kind of stateful operator in a body."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
from collections.abc import Iterator

import pytest
from helpers import assert_matches, to_df
from oracle import Coll, Product, Total, acc, consolidate, ref_bfs, ref_distinct, ref_reachable
from pyspark.sql import functions as F
from test_iterate import batched_graphs, bfs, interval_edges, prefixed

import spark_differential as sd
from spark_differential.core import lattice
from spark_differential.core.settings import CHUNK_ROWS as CONF
from spark_differential.engine.chunks import Chunks, Spread, plan_spread
from spark_differential.errors import ConfigurationError
from spark_differential.intask import chunking
from spark_differential.loop import distributed as loop_distributed
from spark_differential.loop import packed as loop_packed
from spark_differential.trace import spark as trace_spark


@pytest.fixture(autouse=True)
def distributed(spark) -> Iterator[None]:
    """Time chunks belong to the distributed loop: keep small loops from running in one task."""
    spark.conf.set("spark_differential.iterate.localRows", "0")
    yield
    spark.conf.unset("spark_differential.iterate.localRows")


@contextlib.contextmanager
def chunk_rows(spark, value: str) -> Iterator[None]:
    old = spark.conf.get(CONF, None)
    spark.conf.set(CONF, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, old)


def _random_updates(rng: random.Random, n: int, hi: int) -> list:
    return [((rng.randrange(4), rng.randrange(3)), rng.randint(0, hi), rng.choice([-2, -1, 1, 1, 2])) for _ in range(n)]


def test_chunked_form_accumulates_per_chunk_and_unchunks(spark):
    rng = random.Random(3)
    lat = Total()
    hi = 23
    cases = [_random_updates(rng, rng.randint(1, 25), hi) for _ in range(12)]
    coll = Coll(("case", "k", "v"), [((c, *d), t, r) for c, ups in enumerate(cases) for d, t, r in ups])
    df = to_df(spark, coll, lat)
    for width in (1, 4, 7, 30):
        chunks = Chunks(lattice.Total("long"), 0, width, hi // width + 1)
        form = chunks.chunked(df).withColumn("_c", chunks.of(F.col("time"))).collect()
        assert all(r["_c"] == r["time"] - r["time"] % width for r in form)
        for c in range(chunks.count):
            start = c * width
            mine = [((r["case"], r["k"], r["v"]), r["time"], r["diff"]) for r in form if r["_c"] == start]
            for t in range(start, start + width):
                assert acc(mine, t, lat) == acc(coll, t, lat), (width, c, t)
        back = chunks.unchunked(chunks.chunked(df))
        assert_matches(back.dd_consolidate(), Coll(coll.cols, consolidate(coll.updates)))


@pytest.mark.parametrize("starts", [(0, 5, 6, 17), (0, 1), (0, 23)])
def test_spread_form_accumulates_per_slice_from_its_snapshot(spark, starts):
    """Slice ``g``'s rows alone accumulate, at every time of the slice and at its snapshot's
    time ``starts[g] - 1``, to the collection itself; its other times hold nothing."""
    rng = random.Random(4)
    lat = Total()
    hi = 23
    cases = [_random_updates(rng, rng.randint(1, 25), hi) for _ in range(12)]
    coll = Coll(("case", "k", "v"), [((c, *d), t, r) for c, ups in enumerate(cases) for d, t, r in ups])
    spread = Spread(lattice.Total("long"), starts)
    form = spread.spread(to_df(spark, coll, lat)).collect()
    ends = (*starts[1:], hi + 1)
    for g, (lo, end) in enumerate(zip(starts, ends)):
        mine = [((r["case"], r["k"], r["v"]), r["time"], r["diff"]) for r in form if r["_sd_part"] == g]
        assert all(lo <= t < end or (g and t == lo - 1) for _, t, _ in mine), (g, mine)
        for t in range(lo - 1 if g else lo, end):
            assert acc(mine, t, lat) == acc(coll, t, lat), (starts, g, t)
    assert spread.drops() == (None, *(s - 1 for s in starts[1:]))


def test_spread_plan_cuts_time_at_quantiles_and_refuses_a_large_state(spark):
    rows = [(k % 50, t, 1) for t in range(400) for k in (t, t + 1)]
    df = sd.collection(spark.createDataFrame(rows, "k long, time long, diff long"))
    plan, counted = plan_spread(lattice.Total("long"), [df], per_task=300, tasks=2)
    assert counted == 800
    assert plan is not None and plan.starts[0] == 0 and list(plan.starts) == sorted(set(plan.starts))
    assert 3 <= plan.count <= 5, plan  # 800 updates, 50 live: about 250 a slice
    assert plan_spread(lattice.Total("long"), [df], per_task=300, tasks=8)[0].count >= 7  # a slice per core
    assert plan_spread(lattice.Total("long"), [df], per_task=90, tasks=2)[0] is None  # 50 live of 90: no room
    # the distinct data leave no room, but key partitions of 800 updates hold the input: no exact count
    assert plan_spread(lattice.Total("long"), [df], per_task=90, tasks=2, keyed=800) == (None, 800)


def test_chunked_form_of_dates(spark):
    base = dt.date(2024, 1, 1)
    rows = [("a", base + dt.timedelta(days=d), r) for d, r in [(0, 1), (3, 1), (5, -1), (9, 1), (9, 1)]]
    df = sd.collection(spark.createDataFrame(rows, "k string, time date, diff long"))
    chunks = Chunks(lattice.Total("date"), (base - dt.date(1970, 1, 1)).days, 4, 3)
    form = chunks.chunked(df)
    assert form.schema["time"].dataType == df.schema["time"].dataType
    snaps = sorted((r["time"], r["diff"]) for r in form.collect() if r["time"] in (base + dt.timedelta(days=4), base + dt.timedelta(days=8)))
    # at day 4: 1 + 1 (days 0 and 3); at day 8: 1 (day 5 retracted one)
    assert snaps == [(base + dt.timedelta(days=4), 2), (base + dt.timedelta(days=8), 1)]
    assert sorted(tuple(r) for r in chunks.unchunked(form).dd_consolidate().collect()) == sorted(
        tuple(r) for r in df.dd_consolidate().collect()
    )


def _sliced(caplog) -> bool:
    return any("time chunks" in r.getMessage() for r in caplog.records)


def test_bfs_in_time_chunks(spark, caplog):
    caplog.set_level(logging.INFO, logger="spark_differential")
    lat = Total()
    edges, roots, per_case = batched_graphs(31, 8, lat, n=12)
    expected = []
    for c, (e, r) in enumerate(per_case):
        expected += prefixed(c, ref_bfs(e, r, lat))
    with chunk_rows(spark, "4"):
        got = bfs(to_df(spark, roots, lat), to_df(spark, edges, lat), keys=("case", "node"))
        assert_matches(got, Coll(("case", "node", "dist"), consolidate(expected)))
    assert _sliced(caplog)


def test_reachability_and_reduce_in_time_chunks(spark, caplog):
    """dd_distinct (threshold kernel: the chunk is a data column) and a user reduce function
    (which must not see the chunk) inside chunked loops."""
    caplog.set_level(logging.INFO, logger="spark_differential")
    lat = Total()
    edges, roots, per_case = batched_graphs(37, 8, lat, n=12)
    e = to_df(spark, edges, lat).withColumnRenamed("src", "node")
    r = to_df(spark, roots, lat).select("case", "node", "time", "diff")
    def smallest(rows):
        # runs on the executors: a chunk column leaking into func's rows fails the job
        if set(rows.columns) != {"case", "node", "dist", "diff"}:
            raise AssertionError(f"func sees columns {list(rows.columns)}")
        return rows.nsmallest(1, "dist")[["dist"]].assign(diff=1)

    with chunk_rows(spark, "3"):
        reach = r.dd_iterate(
            lambda x: x.dd_join(e, on=["case", "node"])
            .select("case", F.col("dst").alias("node"), "time", "diff")
            .dd_concat(x)
            .dd_distinct()
        )
        dist = to_df(spark, roots, lat).dd_iterate(
            lambda d: d.dd_join(e, on=["case", "node"])
            .select("case", F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
            .dd_concat(d)
            .dd_reduce(by=["case", "node"], func=smallest, schema="dist long")
        )
        exp_reach, exp_dist = [], []
        for c, (ec, rc) in enumerate(per_case):
            exp_reach += prefixed(c, ref_reachable(ec, rc, lat))
            exp_dist += prefixed(c, ref_bfs(ec, rc, lat))
        assert_matches(reach, Coll(("case", "node"), consolidate(exp_reach)))
        assert_matches(dist, Coll(("case", "node", "dist"), consolidate(exp_dist)))
    assert _sliced(caplog)


@pytest.mark.parametrize("few", [True, False], ids=["broadcast", "shuffle-hash"])
def test_join_with_outer_collection_forms_pairs_on_the_jvm(spark, monkeypatch, few):
    """In a chunked loop, a join of the loop collection with a collection from outside the
    loop runs as a JVM pair join (``loop_distributed._pair_join``), whichever side the loop
    collection is on and whether its changes are broadcast or hashed per partition."""
    lat = Total()
    edges, roots, per_case = batched_graphs(43, 6, lat, n=12)
    calls = []
    pair_join = loop_distributed._pair_join
    monkeypatch.setattr(loop_distributed, "_pair_join", lambda *a, **k: calls.append(k["few"]) or pair_join(*a, **k))
    monkeypatch.setattr(trace_spark, "FEW_CHANGES", 10**9 if few else 0)
    monkeypatch.setattr(trace_spark, "BROADCAST_TRACE", 0)  # whatever the trace's size
    e = to_df(spark, edges, lat).withColumnRenamed("src", "node")
    expected = []
    for c, (ec, rc) in enumerate(per_case):
        expected += prefixed(c, ref_bfs(ec, rc, lat))
    with chunk_rows(spark, "4"):
        got = to_df(spark, roots, lat).dd_iterate(
            lambda d: e.dd_join(d, on=["case", "node"])  # the loop collection on the right
            .select("case", F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
            .dd_concat(d)
            .dd_min(by=["case", "node"], col="dist")
        )
        assert_matches(got, Coll(("case", "node", "dist"), consolidate(expected)))
    assert calls and set(calls) == {few}


@pytest.mark.parametrize("rows", ["6", "off"], ids=["sliced", "unsliced"])
def test_library_bfs_runs_kernels_per_partition_without_a_shuffle(spark, monkeypatch, caplog, rows):
    """``algorithms.bfs`` (roots concatenated in the loop, as differential dataflow's
    ``examples/bfs.rs``) against the oracle; its ``dd_min`` kernel runs once per partition
    (``mapInArrow``) over the packed trace and new updates, with no shuffle below the
    kernel, and the loop takes ``dd_min``'s output as consolidated."""
    caplog.set_level(logging.DEBUG, logger="spark_differential.iterate")
    from spark_differential import algorithms

    lat = Total()
    rng = random.Random(11)
    edges = Coll(("src", "dst"), interval_edges(rng, 7, 14, lat, hi=9))
    roots = Coll(("node",), [((0,), 0, 1), ((3,), 2, 1), ((3,), 6, -1)])
    plans: list[str] = []
    run_prepared = loop_distributed.run_prepared

    def spy(*a, **k):
        out = run_prepared(*a, **k)
        plans.append(out._jdf.queryExecution().executedPlan().toString())
        return out

    monkeypatch.setattr(loop_distributed, "run_prepared", spy)
    monkeypatch.setattr(loop_packed, "run_prepared", spy)  # dd_min's packed kernel runs from there
    with chunk_rows(spark, rows):
        got = algorithms.bfs(to_df(spark, edges, lat), to_df(spark, roots, lat))
        assert_matches(got, ref_bfs(edges, roots, lat))
    # the plan of dd_min's kernel down to materialised inputs (checkpoints; caches while the
    # body is discovered).  The join's kernel shuffles the loop variable it reads (a cheap
    # checkpoint, read twice in the job instead of materialised by one of its own)
    kernels = [p.split("InMemoryRelation")[0] for p in plans if "MapInArrow" in p and "_blob" in p]
    assert len(kernels) > 2, plans
    assert all("Exchange hashpartitioning" not in p for p in kernels), kernels
    messages = [r.getMessage() for r in caplog.records]
    assert any("dd_min keeps its trace packed" in m for m in messages), messages
    assert any("consolidated already" in m for m in messages), messages
    if rows == "6":  # a kernel reads a packed trace of two batches, still without a shuffle
        assert any("packed trace: 2 batches" in m for m in messages), messages
        assert any("dd_join keeps the outer collection one row per key" in m for m in messages), messages


def test_nested_and_product_loops_run_unsliced(spark, caplog):
    """A body nesting a loop, and partially ordered times, are not sliced (and stay exact)."""
    caplog.set_level(logging.INFO, logger="spark_differential")
    lat = Product([Total(), Total()])
    edges, roots, per_case = batched_graphs(41, 3, lat)
    expected = []
    for c, (e, r) in enumerate(per_case):
        expected += prefixed(c, ref_bfs(e, r, lat))
    rng = random.Random(2)
    xs = Coll(("x",), [((rng.randrange(5),), rng.randint(0, 9), 1) for _ in range(12)])
    with chunk_rows(spark, "2"):
        got = bfs(to_df(spark, roots, lat), to_df(spark, edges, lat), keys=("case", "node"))
        assert_matches(got, Coll(("case", "node", "dist"), consolidate(expected)))
        nested = to_df(spark, xs, Total()).dd_iterate(lambda x: x.dd_iterate(lambda y: y.dd_distinct()).dd_distinct())
        assert_matches(nested, ref_distinct(xs, Total()))
    assert not _sliced(caplog)


@pytest.mark.parametrize("value", ["many", "-x"])
def test_bad_chunk_setting_is_a_clear_error(spark, value):
    roots = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    with chunk_rows(spark, value), pytest.raises(ConfigurationError, match="chunkRows"):
        roots.dd_iterate(lambda x: x.dd_distinct())


def test_chunks_inside_one_task_are_larger():
    """The in-task loop's automatic chunks (``LOCAL_FACTOR`` times the live rows, at least
    ``LOCAL_MIN_ROWS`` updates) against the distributed loop's (the live rows, at least
    ``AUTO_MIN_ROWS``), on BFS's shapes: 10^5 changes over 2,000 live edges, and 10^4."""
    from types import SimpleNamespace

    import pyarrow as pa

    from spark_differential.engine import chunks

    assert chunks.layout(202_001, 2_000, 0, 100_000, None) == (0, 991, 101)
    local = chunks.layout(202_001, 2_000, 0, 100_000, None, chunks.LOCAL_FACTOR, chunks.LOCAL_MIN_ROWS)
    assert local is not None and local[2] == 202_001 // 32_000
    assert chunks.layout(22_001, 2_000, 0, 10_000, None, chunks.LOCAL_FACTOR, chunks.LOCAL_MIN_ROWS) is None
    assert chunks.layout(22_001, 2_000, 0, 10_000, 4_000, chunks.LOCAL_FACTOR, chunks.LOCAL_MIN_ROWS)[2] == 5

    def source(n: int) -> pa.Table:  # n updates of 2,000 edges over times 0..n/2, 2,000 live
        return pa.table({"_sd_k": [i % 2_000 for i in range(n)], "_sd_t0": [i // 2 for i in range(n)],
                         "diff": [1 if i < 2_000 or i % 2 else -1 for i in range(n)]})

    for n, count in ((202_000, 6), (22_000, None)):
        program = SimpleNamespace(chunk_rows=None, width=1, sources=(("_sd_k", "_sd_t0", "diff"),))
        planned = chunking.plan_chunks(program, [source(n)])  # type: ignore[arg-type]
        assert (planned and planned.count) == count, (n, planned)
