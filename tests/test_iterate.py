"""dd_iterate against the oracle: seed 001's worked example, BFS / reachability /
connected components on random changing graphs (integer and product times),
nested loops, and the loop's errors."""

from __future__ import annotations

import contextlib
import logging
import random
import re
from collections import Counter

import pytest
from helpers import CONNECT, assert_matches, connect_params, rows_of, to_df
from oracle import Coll, Product, Total, consolidate, ref_bfs, ref_iterate, ref_reachable
from pyspark.sql import functions as F

import spark_differential  # noqa: F401
from spark_differential.core import settings
from spark_differential.errors import IterationError, IterationLimitExceeded, NullValueError, SchemaMismatchError
from spark_differential.loop import packed as loop_packed
from spark_differential.loop import state as loop_state
from spark_differential.trace import spark as trace_spark
from spark_differential.trace import spine

SEED_001_EDGES = [
    ((1, 1), 0, 1), ((2, 1), 0, 1), ((0, 1), 0, 1), ((0, 2), 0, 1), ((1, 0), 0, 1),
    ((2, 0), 1, 1), ((1, 1), 1, -1), ((1, 2), 2, 1), ((2, 1), 2, -1), ((1, 2), 3, 1),
    ((0, 1), 3, -1), ((2, 1), 4, 1), ((0, 2), 4, -1), ((0, 2), 5, 1), ((1, 0), 5, -1),
]
SEED_001_DISTS = [
    ((0, 0), 0, 1), ((1, 1), 0, 1), ((2, 1), 0, 1), ((1, 1), 3, -1),
    ((2, 1), 4, -1), ((1, 2), 5, 1), ((2, 1), 5, 1),
]


def bfs(roots, edges, keys=("node",)):
    """BFS distances, written as in seed 001 (join, +1, concat, min)."""
    keys = list(keys)
    e = edges.withColumnRenamed("src", "node")
    return roots.dd_iterate(
        lambda d: d.dd_join(e, on=keys)
        .select(*keys[:-1], F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
        .dd_concat(d)
        .dd_min(by=keys, col="dist")
    )


@pytest.mark.connect
def test_seed_001_worked_example(spark, path):
    edges = spark.createDataFrame([(s, d, t, r) for (s, d), t, r in SEED_001_EDGES], "src long, dst long, time long, diff long")
    roots = spark.createDataFrame([(0, 0, 0, 1)], "node long, dist long, time long, diff long")
    got = rows_of(bfs(roots, edges))
    assert sorted(got) == sorted(SEED_001_DISTS)


def interval_edges(rng: random.Random, nodes: int, n: int, lat, hi: int = 5) -> list:
    """Edges present over random intervals [t1, t2) (t2 >= t1), so multiplicities stay >= 0."""
    ups = []
    for _ in range(n):
        e = (rng.randrange(nodes), rng.randrange(nodes))
        if isinstance(lat, Total):
            t1 = rng.randint(0, hi)
            ups.append((e, t1, 1))
            if rng.random() < 0.6:
                ups.append((e, rng.randint(t1, hi + 1), -1))
        else:
            t1 = tuple(rng.randint(0, hi) for _ in lat.fields)
            ups.append((e, t1, 1))
            if rng.random() < 0.6:
                ups.append((e, tuple(rng.randint(x, hi + 1) for x in t1), -1))
    return ups


def batched_graphs(seed: int, cases: int, lat, nodes: int = 6, n: int = 9):
    """Many random graphs in one collection (a leading ``case`` column), with their roots."""
    rng = random.Random(seed)
    zero = 0 if isinstance(lat, Total) else tuple(0 for _ in lat.fields)
    edges, roots, per_case = [], [], []
    for c in range(cases):
        ups = interval_edges(rng, nodes, rng.randint(3, n), lat)
        rts = [((0,), zero, 1)]
        if rng.random() < 0.5:  # a second root that comes and goes
            later = rng.randint(1, 4) if isinstance(lat, Total) else (rng.randint(1, 4), 0)
            rts += [((1,), zero, 1), ((1,), later, -1)]
        edges += [((c, s, d), t, r) for (s, d), t, r in ups]
        roots += [((c, n_, 0), t, r) for (n_,), t, r in rts]
        per_case.append((Coll(("src", "dst"), [((s, d), t, r) for (s, d), t, r in ups]), Coll(("node",), rts)))
    return Coll(("case", "src", "dst"), edges), Coll(("case", "node", "dist"), roots), per_case


def prefixed(case: int, coll: Coll) -> list:
    return [((case, *d), t, r) for d, t, r in coll.updates]


LATTICES = {"int": Total(), "product2": Product([Total(), Total()])}
LOCAL_ROWS = "spark_differential.iterate.localRows"
PARTITION_ROWS = "spark_differential.iterate.partitionRows"


@contextlib.contextmanager
def rows_limits(spark, local: int, partition: int):
    """``localRows`` and ``partitionRows`` set for the block (unset after)."""
    spark.conf.set(LOCAL_ROWS, str(local))
    spark.conf.set(PARTITION_ROWS, str(partition))
    try:
        yield
    finally:
        spark.conf.unset(LOCAL_ROWS)
        spark.conf.unset(PARTITION_ROWS)


@pytest.fixture(params=["in_task", "keys"] if CONNECT else ["in_task", "keys", "distributed"])
def path(request, spark, caplog):
    """Run the test on every loop path: whole loops inside one task, in key partitions (a
    task each, exchanging their changes), and iteration by iteration on the cluster; the
    in-task runs must really have taken their path.  On Spark Connect not the distributed
    path (tested there by the fallback test below)."""
    spark.conf.set(LOCAL_ROWS, "0" if request.param == "distributed" else "1000000")
    if request.param == "keys":
        spark.conf.set("spark_differential.iterate.localSpread", "keys")
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    try:
        yield request.param
    finally:
        spark.conf.unset(LOCAL_ROWS)
        spark.conf.unset("spark_differential.iterate.localSpread")
    messages = [r.getMessage() for r in caplog.get_records("call")]
    ran = [m for m in messages if "iterations inside one task" in m]
    keyed = [m for m in messages if "key partitions, a task each" in m]
    if request.param == "in_task":
        assert ran and not keyed and not any("running distributed" in m for m in messages), messages
    elif request.param == "keys":
        assert keyed and not ran and not any("running distributed" in m for m in messages), messages
    else:
        assert not ran and not keyed, ran


@pytest.fixture
def distributed(spark):
    """Tests of the distributed path's own machinery (traces, batches, broadcast selection)."""
    spark.conf.set(LOCAL_ROWS, "0")
    yield
    spark.conf.unset(LOCAL_ROWS)


def check_random_bfs(spark, lat, seed: int, cases: int, dist_type: str | None = None) -> None:
    """BFS over ``cases`` random changing graphs in one collection, against the oracle."""
    edges, roots, per_case = batched_graphs(seed, cases, lat)
    r, e = to_df(spark, roots, lat), to_df(spark, edges, lat)
    if dist_type is not None:
        r = r.withColumn("dist", F.col("dist").cast(dist_type))
    got = bfs(r, e, keys=("case", "node"))
    expected = []
    for c, (e, rr) in enumerate(per_case):
        expected += prefixed(c, ref_bfs(e, rr, lat))
    assert_matches(got, Coll(("case", "node", "dist"), consolidate(expected)))


@pytest.mark.parametrize("few", [True, False], ids=["broadcast-touched", "partition-local-touched"])
@pytest.mark.parametrize("name", list(LATTICES))
def test_bfs_random_graphs(spark, distributed, monkeypatch, name, few):
    """Both ways of selecting the touched keys' trace rows: broadcast (iterations with
    few changes, which is every iteration of a small test) and the partition-local hash join."""

    if not few:
        monkeypatch.setattr(trace_spark, "FEW_CHANGES", -1)
    monkeypatch.setattr(trace_spark, "BROADCAST_TRACE", 0)  # whatever the trace's size
    check_random_bfs(spark, LATTICES[name], 11, 10)


@pytest.mark.parametrize("name", connect_params(list(LATTICES), "product2"))
def test_bfs_random_graphs_both_paths(spark, path, name):
    check_random_bfs(spark, LATTICES[name], 13, 10)


@pytest.mark.parametrize("name", list(LATTICES))
def test_bfs_random_graphs_with_packed_trace_batches(spark, distributed, monkeypatch, caplog, name):
    """``dd_min``'s packed trace in several batches (never merged by size, at most 2):
    the kernel reads each key's newest blob, against the oracle."""

    monkeypatch.setattr(spine, "MERGE_RATIO", 0)
    monkeypatch.setattr(spine, "MAX_BATCHES", 2)
    caplog.set_level(logging.DEBUG, logger="spark_differential.iterate")
    check_random_bfs(spark, LATTICES[name], 17, 10)
    messages = [rec.getMessage() for rec in caplog.records]
    assert any("packed trace: 2 batches" in m for m in messages), messages
    assert any("batches merged" in m for m in messages), messages


@pytest.mark.parametrize("name", list(LATTICES))
def test_bfs_random_graphs_with_row_traces(spark, distributed, caplog, name):
    """Distances as ``int``: ``dd_min``'s trace is kept as rows (only ``long`` data packs)."""
    caplog.set_level(logging.DEBUG, logger="spark_differential.iterate")
    check_random_bfs(spark, LATTICES[name], 12, 6, dist_type="int")
    assert not any("packed" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("name", connect_params(list(LATTICES), "int"))
def test_reachability_random_graphs(spark, path, name):
    lat = LATTICES[name]
    edges, roots, per_case = batched_graphs(23, 10, lat)
    e = to_df(spark, edges, lat).withColumnRenamed("src", "node")
    r = to_df(spark, roots, lat).select("case", "node", "time", "diff")
    got = r.dd_iterate(
        lambda x: x.dd_join(e, on=["case", "node"])
        .select("case", F.col("dst").alias("node"), "time", "diff")
        .dd_concat(x)
        .dd_distinct()
    )
    expected = []
    for c, (ec, rc) in enumerate(per_case):
        expected += prefixed(c, ref_reachable(ec, rc, lat))
    assert_matches(got, Coll(("case", "node"), consolidate(expected)))


@pytest.mark.parametrize("name", list(LATTICES))
def test_transitive_closure_by_squaring(spark, path, name):
    """A body joining the loop variable with itself: both join inputs change in every
    iteration, so both keep their traces (a join with a collection from outside the
    loop keeps none for its loop side)."""
    lat = LATTICES[name]
    rng = random.Random(31)
    edges = Coll(("src", "dst"), consolidate(interval_edges(rng, 6, 9, lat)))
    paths = to_df(spark, edges, lat)
    got = paths.dd_iterate(
        lambda p: p.withColumnRenamed("dst", "mid")
        .dd_join(p.withColumnRenamed("src", "mid").withColumnRenamed("dst", "far"), on="mid")
        .select("src", F.col("far").alias("dst"), "time", "diff")
        .dd_concat(p)
        .dd_distinct()
    )

    def step(x: Counter) -> Counter:
        have = {d for d, m in x.items() if m > 0}
        return Counter({d: 1 for d in have | {(a, c) for (a, b) in have for (b2, c) in have if b == b2}})

    assert_matches(got, ref_iterate(edges, step, lat))


def test_connected_components_min_label(spark, path):
    """A reduce-heavy body: every node takes the smallest label among itself and its neighbours."""
    lat = Total()
    rng = random.Random(5)
    ups = interval_edges(rng, 8, 12, lat)
    sym = [((s, d), t, r) for (s, d), t, r in ups] + [((d, s), t, r) for (s, d), t, r in ups]
    edges = Coll(("src", "dst"), consolidate(sym))
    nodes = Coll(("node", "label"), [((n, n), 0, 1) for n in range(8)])
    e = to_df(spark, edges, lat).withColumnRenamed("src", "node")
    got = to_df(spark, nodes, lat).dd_iterate(
        lambda x: x.dd_join(e, on="node")
        .select(F.col("dst").alias("node"), "label", "time", "diff")
        .dd_concat(x)
        .dd_min(by="node", col="label")
    )

    def body(x: Counter, ed: Counter) -> Counter:
        best = {}
        for (n, lab), m in x.items():
            if m > 0:
                best[n] = min(best.get(n, lab), lab)
        for (s, d), m in ed.items():
            if m > 0 and s in best:
                best[d] = min(best.get(d, best[s]), best[s])
        return Counter({(n, lab): 1 for n, lab in best.items()})

    assert_matches(got, ref_iterate(nodes, body, lat, others=[edges]))


@pytest.mark.connect
def test_nested_iterate(spark):
    """An inner loop (reachability within a subgraph, restricted to the outer set) inside an outer loop."""
    lat = Total()
    rng = random.Random(9)
    e1 = Coll(("src", "dst"), consolidate(interval_edges(rng, 7, 8, lat)))
    e2 = Coll(("src", "dst"), consolidate(interval_edges(rng, 7, 8, lat)))
    roots = Coll(("node",), [((0,), 0, 1), ((3,), 0, 1), ((3,), 3, -1)])
    d1 = to_df(spark, e1, lat).withColumnRenamed("src", "node")
    d2 = to_df(spark, e2, lat).withColumnRenamed("src", "node")

    def outer(x):
        grown = x.dd_join(d1, on="node").select(F.col("dst").alias("node"), "time", "diff").dd_concat(x).dd_distinct()
        # inner: close `grown` under e2 edges whose source is in the outer set x (captured)
        return grown.dd_iterate(
            lambda z: z.dd_join(d2, on="node").dd_semijoin(x, on="node")
            .select(F.col("dst").alias("node"), "time", "diff")
            .dd_concat(z)
            .dd_distinct()
        )

    got = to_df(spark, roots, lat).dd_iterate(outer)

    def step(x: Counter, a: Counter, b: Counter) -> Counter:
        xs = {n for (n,), m in x.items() if m > 0}
        grown = set(xs) | {d for (s, d), m in a.items() if m > 0 and s in xs}
        while True:
            more = {d for (s, d), m in b.items() if m > 0 and s in grown and s in xs} - grown
            if not more:
                break
            grown |= more
        return Counter({(n,): 1 for n in grown})

    assert_matches(got, ref_iterate(roots, step, lat, others=[e1, e2]))


def test_non_converging_body_raises(spark, path):
    roots = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    with pytest.raises(IterationLimitExceeded) as err:
        roots.dd_iterate(lambda d: d.select((F.col("x") + 1).alias("x"), "time", "diff").dd_distinct(), max_iterations=4)
    assert err.value.iterations == 4 and err.value.changing > 0
    assert "max_iterations=4" in str(err.value)


@pytest.mark.parametrize("what", connect_params(["time", "diff"]))
def test_null_entering_a_loop(spark, path, what):
    """A null time or diff in the roots or in a collection entering the body fails the loop
    with the same NullValueError on both paths (never a dropped row)."""
    good = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1)], "src long, dst long, time long, diff long")
    row = (2, 3, None, 1) if what == "time" else (2, 3, 0, None)
    bad = good.union(spark.createDataFrame([row], "src long, dst long, time long, diff long"))
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    bad_roots = roots.union(spark.createDataFrame([(5, *row[2:])], "node long, time long, diff long"))

    def body(edges, extra=None):
        def step(d):
            nxt = (d.dd_join(edges.withColumnRenamed("src", "node"), on="node")
                   .select(F.col("dst").alias("node"), "time", "diff"))
            if extra is not None:
                nxt = nxt.dd_concat(extra)
            return nxt.dd_concat(d).dd_distinct()
        return step

    # null in the roots; in a collection joined in the body; in one concatenated in the body
    for r, b in ((bad_roots, body(good)), (roots, body(bad)), (roots, body(good, bad_roots))):
        with pytest.raises(NullValueError) as err:
            r.dd_iterate(b)
        assert str(err.value).startswith(f"dd_iterate: a null {what} reached the operator")
    if path == "in_task":  # the fixture checks that the in-task path ran: one loop without nulls
        assert sorted(rows_of(roots.dd_iterate(body(good)))) == [((0,), 0, 1), ((1,), 0, 1), ((2,), 0, 1)]


def test_body_schema_mismatch(spark):
    roots = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    with pytest.raises(SchemaMismatchError, match="same columns"):
        roots.dd_iterate(lambda d: d.select(F.col("x").alias("y"), "time", "diff"))
    with pytest.raises(SchemaMismatchError, match="cast it"):
        roots.dd_iterate(lambda d: d.select(F.col("x").cast("int").alias("x"), "time", "diff"))
    other = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    with pytest.raises(IterationError, match="derived from its argument"):
        roots.dd_iterate(lambda d: other)


def test_body_must_call_same_operators(spark, distributed):
    roots = spark.createDataFrame([(0, 0, 1), (1, 0, 1)], "x long, time long, diff long")
    calls = []

    def body(d):
        calls.append(1)
        nxt = d.select(F.least(F.col("x") + 1, F.lit(3)).alias("x"), "time", "diff")
        out = nxt.dd_concat(d).dd_distinct()
        return out.dd_distinct() if len(calls) == 2 else out

    with pytest.raises(IterationError, match="same operators in the same order"):
        roots.dd_iterate(body)


def test_progress_is_logged(spark, path, caplog):
    roots = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    with caplog.at_level(logging.INFO, logger="spark_differential.iterate"):
        out = roots.dd_iterate(
            lambda d: d.select(F.least(F.col("x") + 1, F.lit(2)).alias("x"), "time", "diff").dd_concat(d).dd_distinct()
        )
    assert sorted(rows_of(out)) == [((0,), 0, 1), ((1,), 0, 1), ((2,), 0, 1)]
    msgs = [r.getMessage() for r in caplog.records if "dd_iterate: iteration" in r.getMessage()]
    assert msgs and msgs[-1].endswith("s)") and " 0 changes" in msgs[-1]


def test_gc_hints_follow_the_share_of_dropped_rows(monkeypatch):
    """The driver GC is hinted while iterations drop as much as all before them, and in a
    tail of small iterations only once their drops reach GC_SHARE of everything dropped."""
    from spark_differential.core.lattice import Loop
    from spark_differential.core.lattice import Total as LibTotal

    hints = []
    monkeypatch.setattr(loop_state, "collect_garbage", lambda spark: hints.append(spark))
    ctx = loop_state.LoopContext(Loop(LibTotal("long"), 10_000), None, None)
    assert loop_state.GC_SHARE == 0.25
    for rows in (10, 20):  # growing: each iteration drops at least a quarter of all dropped
        ctx.drop(rows)
        ctx.collect_garbage()
    assert len(hints) == 2
    for _ in range(9):  # the tail: 9 rows dropped is below a quarter of 39
        ctx.drop(1)
        ctx.collect_garbage()
    assert len(hints) == 2
    ctx.drop(1)  # 10 of 40 dropped since the last hint: a quarter
    ctx.collect_garbage()
    assert len(hints) == 3
    ctx.drop(0)  # nothing dropped since: no hint
    ctx.collect_garbage()
    assert len(hints) == 3


def test_packed_trace_batches_newest_blob_wins(spark, distributed, monkeypatch):
    """A packed trace kept in batches (``loop_packed._pack_merge``, ``_pack_commit``): appended while small,
    merged size-tiered; read back with each key's newest blob winning, it always holds
    exactly the latest blob of every key, and an empty blob (a key whose updates
    cancelled) hides the key's older blobs until a merge reaching the oldest batch drops
    both."""
    from spark_differential.core.names import BUCKET, KEY_HASH
    from spark_differential.engine.kernel_form import bucket_of, key_hash
    from spark_differential.kernels.packed import BLOB

    nparts = settings.shuffle_partitions(spark)
    nbuckets = settings.buckets(spark)

    def blobs(kv: dict) -> tuple:
        """(new blobs as the kernel returns them, touched keys): keyed, bucketed, partitioned."""
        df = spark.createDataFrame([(k, v.encode()) for k, v in kv.items()], f"_k0 long, {BLOB} binary")
        h = key_hash([F.col("_k0")])
        df = df.select(bucket_of(h, nbuckets, nparts).alias(BUCKET), h.alias(KEY_HASH), "_k0", BLOB)
        df = df.repartition(nparts, BUCKET)
        return df, df.select(BUCKET, KEY_HASH).distinct()

    def resolved(slot) -> dict:
        latest: dict = {}
        for batch, _ in slot.packed.batches:  # oldest first: newer blobs overwrite
            for r in batch.collect():
                latest[r["_k0"]] = bytes(r[BLOB]).decode()
        return {k: v for k, v in latest.items() if v}

    def step(slot, kv: dict, ratio: float, most: int) -> None:
        monkeypatch.setattr(spine, "MERGE_RATIO", ratio)
        monkeypatch.setattr(spine, "MAX_BATCHES", most)
        back, touched = blobs(kv)
        start, merged = loop_packed._pack_merge(slot, back, touched, len(kv))
        batch, rows = trace_spark.counted(merged)
        for old in loop_packed._pack_commit(slot, start, batch, rows, ["_k0"]):
            trace_spark.release(old)

    slot = loop_state.Slot("dd_min", 1)
    step(slot, {1: "a", 2: "b", 3: ""}, 2, 8)  # the first batch drops empty blobs
    assert resolved(slot) == {1: "a", 2: "b"} and slot.packed.sizes == [2]
    step(slot, {2: "", 4: "d"}, 0, 8)  # never merged by size: a second batch
    assert resolved(slot) == {1: "a", 4: "d"} and slot.packed.sizes == [2, 2]
    step(slot, {4: "d2", 5: "e"}, 0, 8)  # a third batch
    assert resolved(slot) == {1: "a", 4: "d2", 5: "e"} and len(slot.packed) == 3
    step(slot, {1: "a2"}, 0, 2)  # at most 2 batches: the three newest merge, the oldest stays
    assert resolved(slot) == {1: "a2", 4: "d2", 5: "e"} and len(slot.packed) == 2
    # the merged batch keeps key 2's empty blob: it still hides the oldest batch's "b"
    assert [r[BLOB] for r in slot.packed.batches[1][0].collect() if r["_k0"] == 2] == [bytearray()]
    step(slot, {6: "f"}, 10**9, 8)  # everything merges into one batch, empty blobs dropped
    assert resolved(slot) == {1: "a2", 4: "d2", 5: "e", 6: "f"} and len(slot.packed) == 1
    assert sorted(r["_k0"] for r in slot.packed.batches[0][0].collect()) == [1, 4, 5, 6]
    assert slot.packed.sizes == [4]


def test_body_expressions_on_both_paths(spark, path):
    """A body whose linear steps use CASE, casts, arithmetic, strings, coalesce and filters
    (each translated to DuckDB on the in-task path), against the fixed point computed here."""
    roots = spark.createDataFrame(
        [(0, "a", 0, 1), (3, "b", 0, 1), (1, None, 2, 1), (3, "b", 4, -1)],
        "x long, s string, time long, diff long",
    )

    def body(d):
        step = d.select(
            F.when(F.col("x") < 5, F.col("x") + F.lit(1).cast("int")).otherwise(F.col("x")).alias("x"),
            F.coalesce(F.concat(F.col("s"), F.lit("")), F.lit("z")).alias("s"),
            "time",
            "diff",
        ).where((F.col("x") % 2 == 0) | (F.col("s") != "q"))
        return step.dd_concat(d).dd_distinct()

    got = sorted(rows_of(roots.dd_iterate(body)), key=repr)

    def closure(start):
        out = set(start)
        while True:
            more = {(min(x + 1, 5) if x < 5 else x, s if s is not None else "z") for x, s in out} - out
            if not more:
                return out
            out |= more

    def at(t):
        live = Counter()
        for x, s, tt, r in [(0, "a", 0, 1), (3, "b", 0, 1), (1, None, 2, 1), (3, "b", 4, -1)]:
            if tt <= t:
                live[(x, s)] += r
        return closure({k for k, m in live.items() if m > 0})

    expected = []
    prev = set()
    for t in range(5):
        now = at(t)
        expected += [((x, s), t, 1) for x, s in now - prev] + [((x, s), t, -1) for x, s in prev - now]
        prev = now
    assert got == sorted(expected, key=repr)


def test_reduce_heavy_body_on_both_paths(spark, path):
    """dd_reduce (a Python function), dd_count and dd_sum in one body, on both paths."""
    roots = spark.createDataFrame([("k", 0, 0, 1), ("j", 2, 0, 1), ("k", 10, 2, 1)], "k string, v long, time long, diff long")

    def body(d):
        grown = d.select("k", F.least(F.col("v") + 1, F.lit(4)).cast("long").alias("v"), "time", "diff").dd_concat(d)
        best = grown.dd_reduce(by="k", func=lambda g: g.nlargest(1, "v")[["v"]].assign(diff=1), schema="v long")
        sizes = best.dd_count("k").dd_sum("k", "count")  # one row per key: every count is 1
        return best.dd_semijoin(sizes.select("k", "time", "diff"), on="k")

    got = sorted(rows_of(roots.dd_iterate(body)))
    assert got == sorted([(("j", 4), 0, 1), (("k", 4), 0, 1), (("k", 4), 2, -1), (("k", 10), 2, 1)])


@pytest.mark.connect
def test_untranslatable_body_runs_distributed_and_says_why(spark, caplog):
    """An expression the translator does not cover (pmod) sends the loop to the distributed
    path, with one log line naming it, and the answer is the same (on Spark Connect too)."""
    roots = spark.createDataFrame([(0, 0, 1)], "x long, time long, diff long")
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    out = roots.dd_iterate(
        lambda d: d.select(F.pmod(F.col("x") + 1, F.lit(3)).alias("x"), "time", "diff").dd_concat(d).dd_distinct()
    )
    assert sorted(rows_of(out)) == [((0,), 0, 1), ((1,), 0, 1), ((2,), 0, 1)]
    why = [r.getMessage() for r in caplog.records if "running distributed" in r.getMessage()]
    assert len(why) == 1 and "pmod" in why[0].lower(), why


@pytest.mark.parametrize("chunk_rows", connect_params(["5", "12"]))
def test_bfs_in_time_chunks_on_both_paths(spark, path, caplog, chunk_rows):
    """Time chunks (a few updates each) inside one task and on the cluster, against the oracle."""
    spark.conf.set("spark_differential.iterate.chunkRows", chunk_rows)
    try:
        check_random_bfs(spark, Total(), 21, 8)
        rng = random.Random(5)
        edges = Coll(("src", "dst"), consolidate(interval_edges(rng, 7, 30, Total(), hi=12)))
        roots = Coll(("node",), [((0,), 0, 1), ((3,), 2, 1), ((3,), 9, -1)])
        got = bfs(to_df(spark, roots, Total()).withColumn("dist", F.lit(0).cast("long")).select("node", "dist", "time", "diff"),
                  to_df(spark, edges, Total()))
        assert_matches(got, ref_bfs(edges, roots, Total()))
    finally:
        spark.conf.unset("spark_differential.iterate.chunkRows")
    if path == "in_task":
        ran = [r.getMessage() for r in caplog.records if "inside one task" in r.getMessage()]
        assert ran and all("time chunks" in m for m in ran), ran


@pytest.mark.parametrize("seed", connect_params([23, 31]))
def test_bfs_spread_over_slices_of_time(spark, caplog, seed):
    """``localSpread=always``: slices of time planned by one job, a task each (its loop
    from the slice's snapshot), no answer meeting another's: against the oracle."""
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    spark.conf.set("spark_differential.iterate.localSpread", "always")
    try:
        check_random_bfs(spark, Total(), seed, 8)
    finally:
        spark.conf.unset("spark_differential.iterate.localSpread")
    ran = [r.getMessage() for r in caplog.records if "slices of time, each inside a task" in r.getMessage()]
    assert ran, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("kind", ["date", "timestamp", "int"])
def test_spread_over_slices_of_other_time_types_matches_one_task(spark, caplog, kind):
    """Dates, timestamps and ints as times: the loop in slices of time gives one task's rows
    (each slice's snapshot lands at the time just before the slice, in the time's own type)."""
    edges, roots, _ = batched_graphs(37, 8, Total())
    day = F.lit("2021-03-01").cast("date")
    as_time = {"date": lambda c: F.date_add(day, c.cast("int")),
               "timestamp": lambda c: F.timestamp_micros(F.lit(1_600_000_000_000_000) + c * 1000),
               "int": lambda c: c.cast("int")}[kind]
    e, r = (to_df(spark, x, Total()).withColumn("time", as_time(F.col("time"))) for x in (edges, roots))
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    got = {}
    for mode in ("off", "always"):
        spark.conf.set("spark_differential.iterate.localSpread", mode)
        try:
            got[mode] = sorted(tuple(x) for x in bfs(r, e, keys=("case", "node")).collect())
        finally:
            spark.conf.unset("spark_differential.iterate.localSpread")
    assert got["always"] == got["off"] and got["off"]
    assert any(re.search(r"in [2-9] slices of time, each inside a task", m.getMessage()) for m in caplog.records)


@pytest.mark.parametrize("case", ["auto-sized", "auto", "off", "partitions-off"])
def test_loop_too_large_for_one_task_moves_on(spark, caplog, monkeypatch, case):
    """Input (~100 rows) above localRows (60), within two key partitions' share
    (``partitionRows`` 180 each).  With ``auto``: in key partitions at once, where Spark's
    plan statistics size the input (here made to say 100 rows) and where they do not (local
    rows parallelised from a Python list carry no size in their plans): then one job counts
    the rows first, and no task is started to be abandoned.  With ``partitionRows=0``: in
    slices of time (few distinct edges).  With ``off``: distributed.  The same answer each
    time."""
    from spark_differential.intask import launch
    from spark_differential.intask.sources import Estimate

    if case == "auto-sized":
        monkeypatch.setattr(launch, "estimated_rows", lambda sources: Estimate(100, False, True))
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    spark.conf.set("spark_differential.iterate.localSpread", "off" if case == "off" else "auto")
    try:
        with rows_limits(spark, 60, 0 if case == "partitions-off" else 180):
            check_random_bfs(spark, Total(), 29, 8)
    finally:
        spark.conf.unset("spark_differential.iterate.localSpread")
    messages = [r.getMessage() for r in caplog.records]
    keyed = case in ("auto-sized", "auto")
    assert any("key partitions, a task each (" in m for m in messages) == keyed, messages
    assert any("slices of time, each inside a task" in m for m in messages) == (case == "partitions-off"), messages
    assert any("running distributed" in m for m in messages) == (case == "off"), messages
    assert not any("one task would hold more than" in m for m in messages), messages
    counted = [m for m in messages if "do not size the input: counted" in m]
    assert bool(counted) == (case != "auto-sized"), messages


def test_many_changes_over_few_edges_run_in_slices_of_time(spark, caplog):
    """150 changes toggling 8 edges, ``localRows=20``: more rows than two key partitions hold
    (``partitionRows`` 60 each), few enough distinct edges for slices of time: ``auto``
    slices time, a task each, against the oracle."""
    rng = random.Random(7)
    edges = [(rng.randrange(5), rng.randrange(1, 6)) for _ in range(8)]
    present: set = set()
    ups = []
    for t in range(150):
        e = rng.choice(edges)
        ups.append((e, t, -1 if e in present else 1))
        present ^= {e}
    e_coll, r_coll = Coll(("src", "dst"), ups), Coll(("node",), [((0,), 0, 1)])
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    with rows_limits(spark, 20, 60):
        roots = to_df(spark, r_coll, Total()).select("node", F.lit(0).cast("long").alias("dist"), "time", "diff")
        got = bfs(roots, to_df(spark, e_coll, Total()))
        assert_matches(got, ref_bfs(e_coll, r_coll, Total()))
    messages = [r.getMessage() for r in caplog.records]
    assert any(re.search(r"iterations in \d+ slices of time, each inside a task", m) for m in messages), messages


@pytest.mark.parametrize("name", connect_params(list(LATTICES), "product2"))
def test_bfs_in_key_partitions(spark, caplog, name):
    """``localSpread=keys``: the loop in key partitions, a task each of one barrier stage,
    each step's changes sent to the task owning their keys: against the oracle, on integer
    and product times."""
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    spark.conf.set("spark_differential.iterate.localSpread", "keys")
    try:
        check_random_bfs(spark, LATTICES[name], 41, 8)
    finally:
        spark.conf.unset("spark_differential.iterate.localSpread")
    messages = [r.getMessage() for r in caplog.records]
    assert any("key partitions, a task each" in m for m in messages), messages


def test_a_state_too_large_to_slice_runs_in_key_partitions(spark, caplog, monkeypatch):
    """``auto`` with the live rows over half of ``localRows`` (slicing time cannot help: every
    slice would carry them) and the input within the tasks' share (``partitionRows`` 3 x
    ``localRows`` each), where Spark's statistics put it above that share (as they may: a
    filter keeps its input's size): the slices' planning job counts the rows and finds the
    state too large to slice; key partitions, exact."""
    from spark_differential.intask import launch
    from spark_differential.intask.sources import Estimate

    edges, roots, per_case = batched_graphs(43, 10, Total())
    n = len(edges.updates) + len(roots.updates)
    live = sum(1 for s in _sums(edges).values() if s) + sum(1 for s in _sums(roots).values() if s)
    limit = min(2 * live - 2, n - 1)
    assert limit - live < limit // 2 and n > limit and n <= 2 * 3 * limit, (n, live, limit)  # the seed's shape
    monkeypatch.setattr(launch, "estimated_rows", lambda sources: Estimate(2 * 3 * limit + 1, False, True))
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    with rows_limits(spark, limit, 3 * limit):
        check_random_bfs(spark, Total(), 43, 10)
    messages = [r.getMessage() for r in caplog.records]
    assert any(re.search(r"up to \d+ live rows \(distinct data\)", m) for m in messages), messages
    assert any("iterations in 2 key partitions, a task each" in m for m in messages), messages


def _sums(coll: Coll) -> Counter:
    out: Counter = Counter()
    for d, _, r in coll.updates:
        out[d] += r
    return out
