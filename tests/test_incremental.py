"""Incremental views (``sd.incremental``) against the oracle.

On ``(data, time, diff)``: inputs arrive in successive updates, each with a new
frontier ``T``; every update returns the output at the times that became complete
(in the future of the old frontier, not of ``T``).  The meaning checked here: for
random inputs split at random into successive updates (rows may arrive before their
time is complete, never after), the union of everything returned, consolidated,
equals the oracle's one-shot output restricted to the times not in the future of
the last ``T``, row for row.

* Pure Python (no Spark): :func:`lift_updates` keeps accumulations exactly in the
  future of a frontier, and the update rule (stored inputs and returned output
  advanced to the frontier, ``lift(query(stored ∪ new) - returned)``) is exact, with
  multi-element antichain frontiers over product times.
* Spark: joins and every reduction (many operators in one view, integer and product
  times), as-of joins, BFS with ``dd_iterate``; batch ids; late updates; resuming;
  schema checks before any job; an update killed before its manifest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import rows_of
from hypothesis import given, settings
from oracle import (
    Coll,
    Product,
    Total,
    acc,
    antichain,
    assert_updates_equal,
    consolidate,
    is_consolidated,
    ref_antijoin,
    ref_asof_join,
    ref_bfs,
    ref_consolidate,
    ref_count,
    ref_distinct,
    ref_join,
    ref_max,
    ref_min,
    ref_semijoin,
    ref_sum,
    st_coll,
    st_frontier,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from spark_support import no_spark_job, sdf

import spark_differential as sd
from spark_differential.algorithms import bfs
from spark_differential.core import lattice as L
from spark_differential.core.settings import INCREMENTAL_ROWS, INDEX_ROWS
from spark_differential.errors import (
    FrontierError,
    IncrementalStateError,
    LateUpdateError,
    SchemaMismatchError,
    TimeTypeMismatchError,
)
from spark_differential.incremental.arrow_cache import INDEX_SUFFIX, ArrowCache
from spark_differential.incremental.files import Files
from spark_differential.incremental.view import KILL_ENV, lift_updates

P2 = Product([Total(), Total()])
LIB = {"int": L.Total(), "product2": L.Product((("a", L.Total()), ("b", L.Total())))}
LAT = {"int": Total(), "product2": P2}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def leaves(lat: Any, t: Any) -> tuple[int, ...]:
    return (t,) if isinstance(lat, Total) else tuple(t)


def unleaves(lat: Any, t: Sequence[int]) -> Any:
    return t[0] if isinstance(lat, Total) else tuple(t)


def in_future(lat: Any, frontier: Sequence[Any], t: Any) -> bool:
    return any(lat.leq(f, t) for f in frontier)


# -- pure Python: the claims the update rule rests on -----------------------------------


@settings(max_examples=150, deadline=None)
@given(st_coll(["x"], P2, max_size=10, time_range=(0, 4)), st_frontier(P2, 0, 4, max_size=3))
def test_lift_is_the_collection_supported_on_the_future_with_equal_accumulations(coll: Coll, frontier: list) -> None:
    lifted = lift_updates(LIB["product2"], [(d, leaves(P2, t), r) for d, t, r in coll.updates], frontier)
    out = [(d, unleaves(P2, t), r) for d, t, r in lifted]
    assert is_consolidated(out)
    assert all(in_future(P2, frontier, t) for _, t, _ in out)
    for g in P2.grid(0, 6):
        if in_future(P2, frontier, g):
            assert acc(out, g, P2) == acc(coll, g, P2), g
    # advancing (seed 004) also keeps those accumulations, but may leave the future of a 2-element frontier
    advanced = ref_consolidate(coll, P2, frontier)
    for g in P2.grid(0, 6):
        if in_future(P2, frontier, g):
            assert acc(advanced, g, P2) == acc(coll, g, P2)


def next_frontier(rng: random.Random, lat: Any, prev: list | None, hi: int) -> list:
    """A random frontier whose future lies inside ``prev``'s (any frontier when ``prev`` is None)."""
    if isinstance(lat, Total):
        lo = 0 if prev is None else prev[0]
        return [rng.randint(lo, hi)]
    picks = [lat.random(rng, 0, hi) for _ in range(rng.randint(1, 2))]
    if prev is None:
        return antichain(picks, lat)
    return antichain([lat.join(a, f) for a in picks for f in prev], lat)


def schedule(rng: random.Random, lat: Any, inputs: dict[str, Coll], steps: int, hi: int) -> list[tuple[list, dict[str, list]]]:
    """Frontiers ``T_1 .. T_steps`` moving forward, and which updates each step delivers.

    An update at time ``t`` is delivered at a random step whose old frontier has ``t``
    in its future (the first step always qualifies): never late, sometimes early.
    """
    fronts: list[list] = []
    prev = None
    for _ in range(steps):
        prev = next_frontier(rng, lat, prev, hi)
        fronts.append(prev)
    plan: list[dict[str, list]] = [{n: [] for n in inputs} for _ in range(steps)]
    for n, c in inputs.items():
        for u in c.updates:
            allowed = [0] + [i for i in range(1, steps) if in_future(lat, fronts[i - 1], u[1])]
            plan[rng.choice(allowed)][n].append(u)
    return list(zip(fronts, plan))


def simulate(
    query: Callable[[dict[str, Coll]], Coll], inputs: dict[str, Coll], steps: list[tuple[list, dict[str, list]]], name: str
) -> list:
    """The update rule of ``spark_differential.incremental`` on oracle collections."""
    lat, lib = LAT[name], LIB[name]
    stored: dict[str, list] = {n: [] for n in inputs}
    emitted: list = []
    returned: list = []
    front: list | None = None
    for upto, new in steps:
        cur = {n: Coll(c.cols, stored[n] + new[n]) for n, c in inputs.items()}
        q = query(cur).updates
        diff = consolidate(q + [(d, t, -r) for d, t, r in emitted])
        if front is not None:
            lifted = lift_updates(lib, [(d, leaves(lat, t), r) for d, t, r in diff], [leaves(lat, f) for f in front])
            diff = [(d, unleaves(lat, t), r) for d, t, r in lifted]
        out = [u for u in diff if not in_future(lat, upto, u[1])]
        returned += out
        emitted = consolidate((d, lat.advance(t, upto), r) for d, t, r in emitted + out)
        stored = {n: ref_consolidate(cur[n], lat, upto).updates for n in inputs}
        front = upto
    return returned


def expected(query: Callable[[dict[str, Coll]], Coll], inputs: dict[str, Coll], last: list, lat: Any) -> list:
    return [u for u in query(inputs).updates if not in_future(lat, last, u[1])]


ON = ("case", "k")


def ref_many(lat: Any) -> Callable[[dict[str, Coll]], Coll]:
    """Joins and reductions of ``a (case, k, x)`` and ``b (case, k, y)``, tagged by operator."""

    def q(c: dict[str, Coll]) -> Coll:
        a, b = c["a"], c["b"]
        parts = {
            "join": ref_join(a, b, ON, lat),
            "count": ref_count(a, ON, lat),
            "sum": ref_sum(a, ON, "x", lat),
            "min": ref_min(b, ON, "y", lat),
            "max": ref_max(b, ON, "y", lat),
            "distinct": ref_distinct(a, lat),
            "semijoin": ref_semijoin(a, b, ON, lat),
            "antijoin": ref_antijoin(a, b, ON, lat),
        }
        ups = []
        for op, part in parts.items():
            for d, t, r in part.updates:
                ups.append(((op, d[0], d[1], d[2], d[3] if len(d) > 3 else 0), t, r))
        return Coll(("op", "case", "k", "v1", "v2"), consolidate(ups))

    return q


def many(a: DataFrame, b: DataFrame) -> DataFrame:
    """The same operators through spark_differential, in one output collection."""
    on = list(ON)
    zero = F.lit(0).cast("long")

    def tag(df: DataFrame, op: str, v1: Any, v2: Any) -> DataFrame:
        return df.select(F.lit(op).alias("op"), "case", "k", v1.alias("v1"), v2.alias("v2"), "time", "diff")

    x, y = F.col("x"), F.col("y")
    return tag(a.dd_join(b, on=on), "join", x, y).dd_concat(
        tag(a.dd_count(by=on), "count", F.col("count"), zero),
        tag(a.dd_sum(by=on, col="x"), "sum", x, zero),
        tag(b.dd_min(by=on, col="y"), "min", y, zero),
        tag(b.dd_max(by=on, col="y"), "max", y, zero),
        tag(a.dd_distinct(), "distinct", x, zero),
        tag(a.dd_semijoin(b, on=on), "semijoin", x, zero),
        tag(a.dd_antijoin(b, on=on), "antijoin", x, zero),
    )


def random_inputs(seed: int, lat: Any, n_cases: int, n: int, hi: int) -> dict[str, Coll]:
    from oracle import random_coll

    rng = random.Random(seed)
    out: dict[str, list] = {"a": [], "b": []}
    for case in range(n_cases):
        for name, col in (("a", "x"), ("b", "y")):
            c = random_coll(rng, ["k", col], rng.randint(0, n), lat, time_range=(0, hi))
            out[name] += [((case, *d), t, r) for d, t, r in c.updates]
    return {"a": Coll(("case", "k", "x"), out["a"]), "b": Coll(("case", "k", "y"), out["b"])}


@pytest.mark.parametrize("name", ["int", "product2"])
@pytest.mark.parametrize("seed", range(12))
def test_update_rule_is_exact_pure_python(name: str, seed: int) -> None:
    lat = LAT[name]
    inputs = random_inputs(1000 + seed, lat, 3, 7, 4)
    steps = schedule(random.Random(seed), lat, inputs, 4, 5)
    got = simulate(ref_many(lat), inputs, steps, name)
    assert is_consolidated(consolidate(got))
    assert_updates_equal(consolidate(got), expected(ref_many(lat), inputs, steps[-1][0], lat))


# -- Spark: the view against the oracle -----------------------------------------------------


def run_view(
    spark: Any, path: str, query: Callable[..., DataFrame], inputs: dict[str, Coll], steps: list, lat: Any,
    stage: int | None = None, before: Callable[[int], None] | None = None,
) -> list:
    """Every update through a fresh view object (so each resumes from the stored manifest).

    ``compact_every=2``: the stored inputs (stage 1) or traces (stage 2) and output are
    merged and compacted every other update, so both the deltas and the merged state are
    read by later updates.  Each update has a batch id and is then repeated with it (as
    ``foreachBatch`` may): the repeat returns the same rows and changes nothing."""
    got: list = []
    for i, (upto, new) in enumerate(steps):
        if before is not None:
            before(i)
        view = sd.incremental(path, query, compact_every=2, stage=stage)
        dfs = {n: sdf(spark, Coll(inputs[n].cols, ups), lat) for n, ups in new.items() if ups or i == 0}
        out = view.update(upto=upto[0] if isinstance(lat, Total) else upto, batch_id=i, **dfs)
        rows = rows_of(out)
        assert is_consolidated(rows)
        assert all(not in_future(lat, upto, t) for _, t, _ in rows)
        if i > 0:
            assert all(in_future(lat, steps[i - 1][0], t) for _, t, _ in rows)
        got += rows
        again = sd.incremental(path, query, compact_every=2).update(upto=upto[0] if isinstance(lat, Total) else upto,
                                                                    batch_id=i, **dfs)
        assert sorted(rows_of(again)) == sorted(rows)
        front = sd.incremental(path, query).frontier
        assert front == (upto[0] if isinstance(lat, Total) else sorted(upto))
    return got


@contextlib.contextmanager
def update_path(spark: Any, path: str, caplog: Any = None) -> Iterator[None]:
    """A traced view's updates in one task (``one_task``: ``spark_differential.incremental.localRows``
    left at its default, and the log must say each update took that path) or distributed (``0``)."""
    if path == "distributed":
        spark.conf.set(INCREMENTAL_ROWS, "0")
    if path == "one_task_indexed":  # every trace file read by key through its index
        spark.conf.set(INDEX_ROWS, "1")
    if caplog is not None:
        caplog.set_level(logging.INFO, logger="spark_differential.incremental")
        caplog.clear()
    try:
        yield
    finally:
        spark.conf.unset(INCREMENTAL_ROWS)
        spark.conf.unset(INDEX_ROWS)
    if caplog is not None:
        said = [r.getMessage() for r in caplog.records if r.name == "spark_differential.incremental"]
        taken = [m for m in said if "runs inside one task" in m]
        if path == "alternating":  # each path reads the files the other wrote
            assert taken and len(taken) < len(said), said
        else:
            assert (taken and len(taken) == len(said)) if path.startswith("one_task") else not taken, said


@pytest.fixture
def distributed_updates(spark: Any) -> Iterator[None]:
    """A traced view's updates distributed (what a test of its kernels' inputs reads)."""
    with update_path(spark, "distributed"):
        yield


def stage_of(path: Any) -> int:
    """The stage the view stored under ``path`` runs in (its newest manifest says)."""
    manifest = sorted((Path(path) / "_manifests").glob("v*.json"))[-1]
    return int(json.loads(manifest.read_text())["stage"])


@pytest.mark.parametrize("name,stage,where", [("int", 2, "one_task"), ("product2", 2, "one_task"),
                                              ("int", 2, "one_task_indexed"), ("int", 2, "one_task_remote"),
                                              ("int", 2, "alternating"), ("product2", 2, "alternating"),
                                              ("int", 2, "distributed"), ("product2", 2, "distributed"),
                                              ("int", 1, "")])
def test_joins_and_reductions_in_successive_updates(spark, tmp_path, caplog, monkeypatch, name: str, stage: int,
                                                     where: str) -> None:
    """Every join and reduction in one view, random inputs split at random into updates.

    Stage 2 (chosen for this query) keeps each operator's traces, its updates inside one
    task (reading and writing the files itself; ``_indexed``: every trace file read by key;
    ``_remote``: as on HDFS or S3A, through Spark's scan and writer) or distributed, or
    ``alternating`` between the two (each reads the other's files); stage 1
    (asked for) re-runs the query on the stored inputs.  All against the oracle, and the
    one-shot run."""
    if where == "one_task_remote":
        monkeypatch.setattr(Files, "local_root", lambda self: None)
    lat = LAT[name]
    inputs = random_inputs(7 + len(name) + stage, lat, 12, 7, 4)
    # each update runs eight operators: three updates with integer times, two with product times
    steps = schedule(random.Random(len(name) + stage), lat, inputs, 3 if name == "int" else 2, 5)
    path = tmp_path / "view"
    started = time.time()

    def before(i: int) -> None:  # alternating: odd updates distributed, even ones in one task
        if where == "alternating":
            spark.conf.set(INCREMENTAL_ROWS, "0" if i % 2 else str(10**7))

    with update_path(spark, where, caplog if where else None):
        got = run_view(spark, str(path), many, inputs, steps, lat, stage=None if stage == 2 else 1, before=before)
    assert stage_of(path) == stage
    if where == "one_task_indexed":  # the traces were read through indexes, built by these updates
        cache = ArrowCache.default(1)
        assert cache is not None
        built = [e for folder in os.scandir(cache.directory) if folder.is_dir() for e in os.scandir(folder.path)
                 if e.name.endswith(INDEX_SUFFIX) and e.stat().st_mtime >= started - 1]
        assert built
    want = expected(ref_many(lat), inputs, steps[-1][0], lat)
    assert_updates_equal(consolidate(got), want)
    one_shot = rows_of(many(sdf(spark, inputs["a"], lat), sdf(spark, inputs["b"], lat)))
    assert_updates_equal(consolidate(got), [u for u in one_shot if not in_future(lat, steps[-1][0], u[1])])


def test_asof_join_in_successive_updates(spark, tmp_path) -> None:
    lat = Total()
    rng = random.Random(5)
    orders = Coll(("item", "qty"), [((rng.randrange(3), rng.randrange(4)), rng.randint(0, 9), 1) for _ in range(25)])
    price_ups = []
    for item in range(3):  # each item's price changes at a few times: -old, +new
        cur = None
        for t in sorted(rng.sample(range(10), 4)):
            new = rng.randrange(50)
            if cur is not None:
                price_ups.append(((item, cur), t, -1))
            price_ups.append(((item, new), t, 1))
            cur = new
    inputs = {"orders": orders, "prices": Coll(("item", "price"), price_ups)}
    steps = schedule(rng, lat, inputs, 3, 10)

    def ref(c: dict[str, Coll]) -> Coll:
        return ref_asof_join(c["orders"], c["prices"], "item", lat)

    path = tmp_path / "asof"
    got = run_view(spark, str(path), lambda orders, prices: orders.dd_asof_join(prices, on="item"), inputs, steps, lat)
    assert_updates_equal(consolidate(got), expected(ref, inputs, steps[-1][0], lat))
    # an as-of join reads its orders' changes, not their accumulation: the view keeps the full history
    manifest = sorted((path / "_manifests").glob("v*.json"))[-1]
    assert json.loads(manifest.read_text())["compacted"] is False
    assert stage_of(path) == 1
    with pytest.raises(IncrementalStateError, match="uses dd_asof_join.*compact=False"):
        sd.incremental(str(tmp_path / "strict"), lambda orders, prices: orders.dd_asof_join(prices, on="item"), compact=True).update(
            upto=1, orders=sdf(spark, inputs["orders"], lat), prices=sdf(spark, inputs["prices"], lat)
        )


def bfs_view(roots: DataFrame, edges: DataFrame) -> DataFrame:
    """Seed 001's BFS distances from ``roots`` (column ``node``): the library's ``algorithms.bfs``."""
    return bfs(edges, roots)


def toggling_edges(rng: random.Random, nodes: int, pairs: int, hi: int) -> Coll:
    """Edges that appear and disappear (diffs +1, -1, +1, … at increasing times)."""
    ups = []
    for _ in range(pairs):
        s, d = rng.randrange(nodes), rng.randrange(nodes)
        for i, t in enumerate(sorted(rng.sample(range(hi + 1), rng.randint(1, 3)))):
            ups.append(((s, d), t, 1 if i % 2 == 0 else -1))
    return Coll(("src", "dst"), ups)


def test_bfs_with_dd_iterate_over_a_changing_graph(spark, tmp_path) -> None:
    lat = Total()
    rng = random.Random(11)
    edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 8, 14, 9).updates))
    roots = Coll(("node",), [((0,), 0, 1)])
    inputs = {"roots": roots, "edges": edges}
    steps = schedule(rng, lat, inputs, 4, 10)

    def ref(c: dict[str, Coll]) -> Coll:
        return ref_bfs(Coll(("src", "dst"), consolidate(c["edges"].updates)), c["roots"], lat)

    got = run_view(spark, str(tmp_path / "bfs"), bfs_view, inputs, steps, lat)
    assert stage_of(tmp_path / "bfs") == 2  # dd_iterate: per-iteration traces (view_loop)
    want = expected(ref, inputs, steps[-1][0], lat)
    assert want, "the graph should give some distances"
    assert_updates_equal(consolidate(got), want)


def test_deleted_versions_take_their_arrow_copies_with_them(spark, tmp_path, monkeypatch) -> None:
    """A one-task update leaves Arrow copies of the files it writes (``arrow_cache``), in a folder
    per stored directory; deleting an old version deletes its copies too, so the copies a
    long-running view holds follow its live versions, not every version it wrote.  A loop's
    files, rewritten whole by every update and so read once, get no copies (``loop.Local``)."""
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 30)
    monkeypatch.setattr(ArrowCache, "default", staticmethod(lambda *a, **k: cache))
    rng = random.Random(11)
    edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 8, 14, 9).updates))
    inputs = {"roots": Coll(("node",), [((0,), 0, 1)]), "edges": edges}
    steps = schedule(rng, Total(), inputs, 6, 10)

    def folders() -> set[str]:
        return {e.path for e in os.scandir(cache.directory) if e.is_dir()} if os.path.isdir(cache.directory) else set()

    run_view(spark, str(tmp_path / "bfs"), bfs_view, inputs, steps, Total())
    assert stage_of(tmp_path / "bfs") == 2
    assert not folders(), "a loop's task kept Arrow copies of its files"
    path = tmp_path / "degrees"
    run_view(spark, str(path), lambda roots, edges: edges.dd_count(by="src"), inputs, steps, Total())
    stored = {cache._folder(root) for root, _, files in os.walk(os.path.realpath(path))
              if any(f.endswith(".parquet") for f in files)}
    assert folders(), "the updates ran in one task and kept copies"
    assert folders() <= stored, "copies of deleted versions' files are left"
    assert len([d for d in os.listdir(path) if d.startswith("v")]) < len(steps)  # old versions were deleted


# -- batch ids, late updates, resuming, schemas ------------------------------------------------

SCHEMA = "k long, x long, time long, diff long"


def counts(a: DataFrame) -> DataFrame:
    return a.dd_count(by="k")


def test_repeated_batch_id_changes_nothing(spark, tmp_path) -> None:
    path = str(tmp_path / "v")
    view = sd.incremental(path, counts)
    first = spark.createDataFrame([(1, 1, 0, 1), (1, 2, 1, 1)], SCHEMA)
    out0 = sorted(rows_of(view.update(upto=2, batch_id=0, a=first)))
    other = spark.createDataFrame([(1, 3, 2, 1)], SCHEMA)
    again = sorted(rows_of(view.update(upto=9, batch_id=0, a=other)))  # a replay: returns batch 0's output
    assert again == out0 == [((1, 1), 0, 1), ((1, 1), 1, -1), ((1, 2), 1, 1)]
    assert view.frontier == 2 and view.batch_id == 0
    out1 = sorted(rows_of(view.update(upto=3, batch_id=1, a=other)))
    assert out1 == [((1, 2), 2, -1), ((1, 3), 2, 1)]
    assert rows_of(view.update(upto=7, batch_id=0, a=other)) == []  # an older batch: nothing
    assert view.frontier == 3 and view.batch_id == 1


@pytest.mark.parametrize("stage,where", [(1, ""), (2, "distributed"), (2, "one_task")])
def test_jobs_of_one_update_of_a_join_count_view(spark, tmp_path, caplog, stage: int, where: str) -> None:
    """Counts, not timings: the Spark jobs of one update of ``orders ⋈ customers``, count per region.

    Stage 1: one write stages the new updates of both inputs; then the query's two
    shuffles (the join's, the count's), one shuffle subtracting the output already
    returned, and one write storing what the update returns: 5 jobs (stage 1 first ran
    6, and 12 when merging state).  Merging the state (here every third update) adds one
    shuffle per merged collection: both inputs and the output returned so far, 8 jobs.

    Stage 2: one write stores the join's new input updates; per operator, one job
    broadcasts the keys they touch (to pick those keys' trace rows; for the count, the
    touched rows' and keys' hashes in one) and one shuffles new and trace rows by key
    bucket for the kernel; the join's output (the count's new input) is one more write;
    then one shuffle consolidates the output and one write stores it with the count's
    new totals (the count's kernel runs twice there, on one shuffle): 8 jobs.  Merging
    (every third update) adds one shuffle per trace (the join's two, the count's rows
    and totals): 12 jobs.

    Stage 2 in one task (the default for an update this small): one job, merges included
    (:mod:`spark_differential.incremental.onetask`), and reading what it returns is no job
    (the rows come back with that job's result); elsewhere reading it is one job (a scan).
    """

    def per_region(orders: DataFrame, customers: DataFrame) -> DataFrame:
        return orders.dd_join(customers, on="cid").dd_count(by="region")

    o_schema, c_schema = "oid long, cid long, time long, diff long", "cid long, region string, time long, diff long"
    rng = random.Random(3)
    orders = [(j, rng.randrange(6), 0, 1) for j in range(20)]
    customers = [(c, f"r{c % 3}", 0, 1) for c in range(6)]
    view = sd.incremental(str(tmp_path / "v"), per_region, compact_every=3, stage=stage)
    jobs, got, reads = [], [], []
    with update_path(spark, where, caplog if where else None):
        for i in range(5):
            _one_update(spark, view, rng, i, orders, customers, o_schema, c_schema, jobs, got, reads)
    want = rows_of(per_region(spark.createDataFrame(orders, o_schema), spark.createDataFrame(customers, c_schema)))
    assert want and sorted(consolidate(got)) == sorted(want)
    # the fourth update (3 stored deltas + 1 new > compact_every) also merges the state
    assert stage_of(tmp_path / "v") == stage
    # (distributed, the first update's traces are empty local rows: Spark skips the jobs reading them)
    assert jobs == {"": [5, 5, 5, 8, 5], "distributed": [6, 8, 8, 12, 8], "one_task": [1] * 5}[where], jobs
    assert reads == [0 if where == "one_task" else 1] * 5, reads


def test_a_one_task_update_records_the_query_once(spark, tmp_path, caplog, monkeypatch) -> None:
    """The one-task path records a view's query (calls it on placeholders: about 60 py4j round
    trips) at its first update over the inputs' schemas and keeps the program for the next
    ones (``onetask.recorded``), and checks the inputs' late times in its tagging projection,
    not in projections of their own (``inputs.late_guard``); the answers stay those of the query."""
    from spark_differential.incremental import inputs

    calls = []
    guards = []
    real_guard = inputs.late_guard
    monkeypatch.setattr(inputs, "late_guard", lambda *a, **k: guards.append(a[1]) or real_guard(*a, **k))

    def per_region(orders: DataFrame, customers: DataFrame) -> DataFrame:
        calls.append(1)
        return orders.dd_join(customers, on="cid").dd_count(by="region")

    o_schema, c_schema = "oid long, cid long, time long, diff long", "cid long, region string, time long, diff long"
    rng = random.Random(5)
    orders = [(j, rng.randrange(6), 0, 1) for j in range(20)]
    customers = [(c, f"r{c % 3}", 0, 1) for c in range(6)]
    view = sd.incremental(str(tmp_path / "v"), per_region, stage=2)
    jobs: list = []
    got: list = []
    seen = []
    with update_path(spark, "one_task", caplog):
        for i in range(4):
            _one_update(spark, view, rng, i, orders, customers, o_schema, c_schema, jobs, got)
            seen.append(len(calls))
    assert seen[1] == seen[2] == seen[3], seen  # updates 2 and 3 call the query no more
    assert guards == [], guards
    want = rows_of(per_region(spark.createDataFrame(orders, o_schema), spark.createDataFrame(customers, c_schema)))
    assert want and sorted(consolidate(got)) == sorted(want)


def _one_update(spark: Any, view: Any, rng: random.Random, i: int, orders: list, customers: list, o_schema: str,
                c_schema: str, jobs: list, got: list, reads: list | None = None) -> None:
    """Update ``i`` of the join + count view of the test above: its jobs, output and (``reads``)
    the jobs reading the output appended."""
    from spark_differential.core.jobs import count_jobs

    if i > 0:  # an order moves to another customer, a customer to another region
        oid, cid = rng.randrange(20), rng.randrange(6)
        old = [r for r in orders if r[0] == oid]
        orders += [(oid, old[-1][1], i, -1), (oid, cid, i, 1)] if sum(r[3] for r in old) else [(oid, cid, i, 1)]
        cur = {}
        for c, reg, _, r in customers:
            cur[(c, reg)] = cur.get((c, reg), 0) + r
        c = rng.randrange(6)
        reg = next(k[1] for k, v in cur.items() if k[0] == c and v > 0)
        customers += [(c, reg, i, -1), (c, f"r{(int(reg[1:]) + 1) % 3}", i, 1)]
    o = spark.createDataFrame([r for r in orders if r[2] == i], o_schema)
    c_df = spark.createDataFrame([r for r in customers if r[2] == i], c_schema)
    with count_jobs(spark) as counted:
        out = view.update(upto=i + 1, orders=o, customers=c_df)
    jobs.append(counted.jobs)
    with count_jobs(spark) as counted:
        got += rows_of(out)
    if reads is not None:
        reads.append(counted.jobs)


@pytest.mark.parametrize("one_task", [True, False])
def test_updates_given_empty_inputs_keep_every_trace(spark, tmp_path, one_task: bool) -> None:
    """Every third update names its input with no rows (an empty DataFrame): the traces still
    merge when their policy says, on either path, and the answer stays the one-shot count.
    (The one-task path's task used to run only when it read some row, so such an update
    dropped the trace files due to merge: wrong counts from then on.)"""
    rng = random.Random(1)
    view = sd.incremental(str(tmp_path / "v"), counts)
    total: dict[int, int] = {}
    got: dict[tuple, int] = {}
    with update_path(spark, "one_task" if one_task else "distributed"):
        for i in range(16):
            rows = [] if i % 3 == 2 else [(rng.randrange(4), rng.randrange(100), i, 1) for _ in range(3)]
            for k, *_ in rows:
                total[k] = total.get(k, 0) + 1
            for d, _, r in rows_of(view.update(upto=i + 1, a=spark.createDataFrame(rows, SCHEMA))):
                got[d] = got.get(d, 0) + r
    assert {d for d, r in got.items() if r} == set(total.items())
    manifest = json.loads(sorted((tmp_path / "v" / "_manifests").glob("v*.json"))[-1].read_text())
    assert any(f[-1] in "cm" for fs in manifest["files"]["traces"].values() for f in fs), manifest["files"]


def test_late_updates_error_or_advance(spark, tmp_path) -> None:
    path = str(tmp_path / "v")
    view = sd.incremental(path, counts)
    view.update(upto=5, a=spark.createDataFrame([(1, 1, 0, 1)], SCHEMA))
    late = spark.createDataFrame([(1, 2, 3, 1), (2, 1, 6, 1)], SCHEMA)
    with pytest.raises(LateUpdateError, match=r"input `a` has an update at time 3, not in the future of the view's frontier 5"):
        view.update(upto=8, a=late)
    assert view.frontier == 5  # nothing stored; the next update works
    out = sorted(rows_of(view.update(upto=8, late="advance", a=late)))
    # the update at time 3 counts from the frontier (5) on; the one at 6 where it is
    assert out == [((1, 1), 5, -1), ((1, 2), 5, 1), ((2, 1), 6, 1)]


@pytest.mark.parametrize("stage", [2, 1])
def test_null_time_or_diff_in_a_later_update_is_a_named_error(spark, tmp_path, stage: int) -> None:
    """A null ``time`` (or ``diff``) in an update after the first fails with NullValueError with
    either ``late`` mode: never dropped by the late guard or the lift, never a null message."""
    from spark_differential.errors import NullValueError

    path = str(tmp_path / "v")
    view = sd.incremental(path, counts, stage=None if stage == 2 else 1)
    view.update(upto=5, a=spark.createDataFrame([(1, 1, 0, 1)], SCHEMA))
    nullable = "k long, x long, time long, diff long"
    for late in ("error", "advance"):
        for bad in ([(1, 2, None, 1), (2, 1, 6, 1)], [(1, 2, 7, None)]):
            df = spark.createDataFrame(bad, nullable)
            with pytest.raises(Exception) as raw:
                view.update(upto=8, late=late, a=df).collect()
            err = sd.unwrap(raw.value)
            what = "time" if bad[0][2] is None else "diff"
            assert isinstance(err, NullValueError) and f"a null {what}" in str(err), (late, str(raw.value)[:500])
            assert view.frontier == 5  # nothing stored
    assert sorted(rows_of(view.update(upto=8, a=spark.createDataFrame([(2, 1, 6, 1)], SCHEMA)))) == [((2, 1), 6, 1)]


def test_late_advance_over_a_two_element_frontier(spark, tmp_path) -> None:
    """A late row counts at every time in the future of the frontier, and nowhere else."""
    schema = "k long, x long, time struct<a: long, b: long>, diff long"
    view = sd.incremental(str(tmp_path / "v"), counts)
    view.update(upto=[(0, 2), (2, 0)], a=spark.createDataFrame([], schema))
    late = spark.createDataFrame([(1, 1, (0, 0), 1)], schema)
    out = sorted(rows_of(view.update(upto=[(9, 9)], late="advance", a=late)))
    lat = P2
    want = lift_updates(LIB["product2"], [((1, 1), (0, 0), 1)], [(0, 2), (2, 0)])
    assert out == sorted((d, unleaves(lat, t), r) for d, t, r in want)
    for g in lat.grid(0, 4):
        assert acc(out, g, lat) == (acc([((1, 1), (0, 0), 1)], g, lat) if in_future(lat, [(0, 2), (2, 0)], g) else {})


def test_bad_calls_are_named_errors_before_any_job(spark, tmp_path) -> None:
    path = str(tmp_path / "v")
    view = sd.incremental(path, lambda a, b: a.dd_join(b, on="k"))
    a = spark.createDataFrame([(1, 1, 0, 1)], SCHEMA)
    b = spark.createDataFrame([(1, 5, 0, 1)], "k long, y long, time long, diff long")
    with no_spark_job(spark):
        with pytest.raises(IncrementalStateError, match=r"takes \['a', 'b'\] but the update gave \['a'\]"):
            view.update(upto=1, a=a)
        with pytest.raises(TimeTypeMismatchError, match="`a` and `b` have different time types"):
            view.update(upto=1, a=a, b=b.withColumn("time", F.col("time").cast("int")))
        with pytest.raises(FrontierError, match="upto is required"):
            view.update(upto=None, a=a, b=b)
    view.update(upto=1, a=a, b=b)
    resumed = sd.incremental(path, lambda a, b: a.dd_join(b, on="k"))
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError, match=r"input `a` has data columns \{k: bigint, x: string\}"):
            resumed.update(upto=2, a=a.withColumn("x", F.col("x").cast("string")))
        with pytest.raises(TimeTypeMismatchError, match="input `b` has time type int"):
            resumed.update(upto=2, b=b.withColumn("time", F.col("time").cast("int")))
        with pytest.raises(IncrementalStateError, match="no input `c`"):
            resumed.update(upto=2, c=a)
        with pytest.raises(FrontierError, match="earlier than the view's frontier 1"):
            resumed.update(upto=0, a=a)
    assert resumed.frontier == 1


@pytest.mark.parametrize("every", [1, 3])
def test_old_versions_are_cleaned_up(spark, tmp_path, every: int) -> None:
    """Two manifests stay; every directory one of them names stays, no other."""
    path = tmp_path / "v"
    view = sd.incremental(str(path), counts, compact_every=every)
    got = []
    for i in range(4):
        got += rows_of(view.update(upto=i + 1, a=spark.createDataFrame([(1, i, i, 1)], SCHEMA)))
    assert_updates_equal(consolidate(got), [((1, 1), 0, 1), ((1, 1), 1, -1), ((1, 2), 1, 1), ((1, 2), 2, -1),
                                            ((1, 3), 2, 1), ((1, 3), 3, -1), ((1, 4), 3, 1)])
    dirs = sorted(p.name[:9] for p in path.iterdir() if p.name.startswith("v"))
    manifests = sorted(p.name for p in (path / "_manifests").iterdir() if p.name.endswith(".json"))
    assert manifests == ["v00000003.json", "v00000004.json"]
    named = set()
    for m in manifests:
        files = json.loads((path / "_manifests" / m).read_text())["files"]
        stored = [*files["inputs"].get("a", []), *[p for fs in files["traces"].values() for p in fs], *files["pending"]]
        named |= {p.split("/")[0][:9] for p in [files["output"], *files["emitted"], *stored]}
    assert dirs == sorted(named)
    # compact_every=1 merges at every update; with 3, version 3 still names the deltas of versions 1-3
    assert dirs == (["v00000003", "v00000004"] if every == 1 else ["v00000001", "v00000002", "v00000003", "v00000004"])
    last = json.loads((path / "_manifests" / manifests[-1]).read_text())
    assert last["frontier"] == [[4]]


def test_state_of_another_format_is_a_named_error(spark, tmp_path) -> None:
    """A manifest written by format 1 (each collection in its own directory) is refused, saying what to do."""
    path = tmp_path / "v"
    (path / "_manifests").mkdir(parents=True)
    (path / "_manifests" / "v00000001.json").write_text(json.dumps({"format": 1, "version": 1}))
    with no_spark_job(spark), pytest.raises(IncrementalStateError, match=r"format 1.*reads formats 2, 3 and 4.*Rebuild the view"):
        _ = sd.incremental(str(path), counts).frontier


def test_state_of_format_3_is_read_and_updated(spark, tmp_path) -> None:
    """A view whose manifest says format 3 (written by the version before format 4, whose trace
    files held their key bucket) is read and updated; the next manifest says format 4."""
    path = tmp_path / "v"
    schema = "k long, x long, time long, diff long"
    first = [(k, x, 0, 1) for k, x in [(1, 1), (1, 2), (2, 5)]]
    view = sd.incremental(str(path), counts)
    got = rows_of(view.update(upto=1, a=spark.createDataFrame(first, schema)))
    newest = sorted((path / "_manifests").glob("v*.json"))[-1]
    m = json.loads(newest.read_text())
    assert m["format"] == 4
    newest.write_text(json.dumps({**m, "format": 3}))
    later = [(1, 3, 1, 1), (2, 5, 1, -1)]
    got += rows_of(sd.incremental(str(path), counts).update(upto=2, a=spark.createDataFrame(later, schema)))
    assert json.loads(sorted((path / "_manifests").glob("v*.json"))[-1].read_text())["format"] == 4
    assert_updates_equal(consolidate(got), rows_of(counts(spark.createDataFrame(first + later, schema))))


KILLED = r"""
import json, sys
import spark_differential as sd
from pyspark.sql import functions as F
spark = sd.session(master="local[1]", conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
path, out, stage = sys.argv[1], sys.argv[2], int(sys.argv[3])
view = sd.incremental(path, lambda a: a.dd_count(by="k"), stage=stage)
rows = [(k, x, t, 1) for k, x, t in [(1, 1, 0), (1, 2, 1), (2, 1, 2)]]
got = view.update(upto=2, a=spark.createDataFrame(rows, "k long, x long, time long, diff long"))
json.dump([[list(r[:-2]), r[-2], r[-1]] for r in got.collect()], open(out, "w"))
import os
os.environ["SPARK_DIFFERENTIAL_INCREMENTAL_EXIT_AT"] = "before-manifest"
more = [(3, 1, 3, 1), (1, 9, 4, 1)]
view.update(upto=5, a=spark.createDataFrame(more, "k long, x long, time long, diff long"))
print("not killed")
"""


@pytest.mark.parametrize("stage", [1, 2])
def test_update_killed_before_its_manifest_then_resumed(spark, tmp_path, stage: int) -> None:
    path, out = str(tmp_path / "v"), str(tmp_path / "first.json")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(KILL_ENV, None)
    proc = subprocess.run([sys.executable, "-c", KILLED, path, out, str(stage)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 77, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "not killed" not in proc.stdout
    assert len([d for d in os.listdir(path) if d.startswith("v")]) == 2  # the killed update's files, no manifest
    first = [(tuple(d), t, r) for d, t, r in json.load(open(out))]
    view = sd.incremental(path, lambda a: a.dd_count(by="k"))
    assert view.frontier == 2 and stage_of(path) == stage
    more = spark.createDataFrame([(3, 1, 3, 1), (1, 9, 4, 1)], SCHEMA)
    second = rows_of(view.update(upto=5, a=more))
    assert len([d for d in os.listdir(path) if d.startswith("v")]) == 2  # the leftover is cleaned up
    all_a = Coll(("k", "x"), [((1, 1), 0, 1), ((1, 2), 1, 1), ((2, 1), 2, 1), ((3, 1), 3, 1), ((1, 9), 4, 1)])
    assert_updates_equal(consolidate(first + second), ref_count(all_a, "k", Total()).updates)


def test_structured_streaming_example_keeps_the_view_current(spark, tmp_path) -> None:
    """examples/incremental_stream.py: change-log files through foreachBatch, against the one-shot query."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("incremental_stream", os.path.join(ROOT, "examples", "incremental_stream.py"))
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    res = example.run(spark, str(tmp_path / "stream"), files=2, rows=40, customers=6)
    assert res["frontier"] >= 11  # the last file's times are 10..19
    assert res["updates"] > 0 and res["mismatches"] == 0
    batches = sorted(p.name for p in (tmp_path / "stream" / "out").iterdir() if p.name.startswith("batch="))
    assert batches == ["batch=0", "batch=1"]


def test_doctests(spark) -> None:
    """The examples of every module of the incremental package (``sd.incremental`` is the
    function of the same name; the package's modules hold the docstrings)."""
    import doctest
    import importlib
    import pkgutil

    package = sys.modules["spark_differential.incremental"]  # the attribute sd.incremental is the function
    attempted = failed = 0
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        res = doctest.testmod(importlib.import_module(info.name), optionflags=doctest.NORMALIZE_WHITESPACE)
        attempted, failed = attempted + res.attempted, failed + res.failed
    assert attempted > 10 and failed == 0


def test_foreach_batch_replay_hands_the_same_output_again(spark, tmp_path) -> None:
    """foreachBatch is at-least-once: a replayed micro-batch changes nothing and the sink sees the same rows."""
    view = sd.incremental(str(tmp_path / "v"), counts)
    seen: list[tuple[int, list]] = []
    fn = view.foreach_batch(lambda out, i: seen.append((i, sorted(rows_of(out)))), time="ts")
    batch0 = spark.createDataFrame([(1, 1, 0), (1, 2, 1)], "k long, x long, ts long")
    fn(batch0, 0)
    assert view.frontier == 2  # the batch's largest time + 1
    fn(batch0, 0)  # replayed
    fn(spark.createDataFrame([(2, 1, 3)], "k long, x long, ts long"), 1)
    fn(spark.createDataFrame([], "k long, x long, ts long"), 2)  # empty: nothing happens
    first = [((1, 1), 0, 1), ((1, 1), 1, -1), ((1, 2), 1, 1)]
    assert seen == [(0, first), (0, first), (1, [((2, 1), 3, 1)])]
    assert view.frontier == 4 and view.batch_id == 1


# -- stage 2: per-operator traces ------------------------------------------------------------


def test_stage2_work_follows_the_size_of_the_changes(spark, tmp_path, distributed_updates) -> None:
    """Counts, not timings: a 10-change update over a large state hands its kernels the new
    updates and the trace rows of the keys they touch, a small fraction of the state."""
    path = str(tmp_path / "v")
    q = lambda orders, customers: orders.dd_join(customers, on="cid").select("region", "time", "diff").dd_count(  # noqa: E731
        by="region")
    n_orders, n_customers = 20_000, 2_000
    orders = spark.range(n_orders).select(F.col("id").alias("oid"), (F.col("id") % n_customers).alias("cid"),
                                          F.lit(0).cast("long").alias("time"), F.lit(1).cast("long").alias("diff"))
    customers = spark.range(n_customers).select(F.col("id").alias("cid"), (F.col("id") % 500).cast("string").alias(
        "region"), F.lit(0).cast("long").alias("time"), F.lit(1).cast("long").alias("diff"))
    view = sd.incremental(path, q)
    view.update(upto=1, orders=orders, customers=customers)
    assert stage_of(path) == 2
    rng = random.Random(4)
    moved = rng.sample(range(n_orders), 5)  # five orders move to another customer: 10 changes
    change = [(o, o % n_customers, 1, -1) for o in moved] + [(o, (o + 7) % n_customers, 1, 1) for o in moved]
    o_schema = "oid long, cid long, time long, diff long"
    out = rows_of(view.update(upto=2, orders=spark.createDataFrame(change, o_schema)))
    handed = {op: [side.count() for side in sides] for op, sides in view.last_kernel_inputs}
    state = n_orders + n_customers  # the join's traces; the count's trace holds its 20,000 joined rows
    # the new orders and the other orders of the customers they touch; those customers
    assert handed["dd_join"][0] <= 10 + 10 * (n_orders // n_customers) and handed["dd_join"][1] <= 10, handed
    assert handed["dd_count"][0] <= 10 + 10 * (n_orders // 500), handed  # new joined rows; the touched regions' rows
    assert sum(handed["dd_join"]) + handed["dd_count"][0] < 0.1 * state
    # against the one-shot run
    all_orders = orders.unionByName(spark.createDataFrame(change, o_schema))
    want = rows_of(q(all_orders, customers))
    assert_updates_equal(consolidate(out), [u for u in want if u[1] == 1])


def test_stage2_pending_output_is_returned_when_its_time_completes(spark, tmp_path) -> None:
    """Updates may arrive before their time is complete: their output waits in the view."""
    path = str(tmp_path / "v")
    view = sd.incremental(path, counts)
    early = spark.createDataFrame([(1, 1, 0, 1), (1, 2, 5, 1), (2, 1, 7, 1)], SCHEMA)
    assert sorted(rows_of(view.update(upto=3, a=early))) == [((1, 1), 0, 1)]
    assert stage_of(path) == 2
    assert sorted(rows_of(view.update(upto=6, a=spark.createDataFrame([], SCHEMA)))) == [((1, 1), 5, -1), ((1, 2), 5, 1)]
    resumed = sd.incremental(path, counts)
    assert sorted(rows_of(resumed.update(upto=9, a=spark.createDataFrame([(2, 2, 8, 1)], SCHEMA)))) == [
        ((2, 1), 7, 1), ((2, 1), 8, -1), ((2, 2), 8, 1)]


def test_stage2_refuses_a_query_whose_operators_changed(spark, tmp_path) -> None:
    path = str(tmp_path / "v")
    a = spark.createDataFrame([(1, 1, 0, 1)], SCHEMA)
    sd.incremental(path, counts).update(upto=1, a=a)
    with pytest.raises(IncrementalStateError, match=r"operator #1 is dd_sum.*built with dd_count.*Rebuild the view"):
        sd.incremental(path, lambda a: a.dd_sum(by="k", col="x")).update(upto=2, a=a.withColumn("time", F.lit(1).cast("long")))
    with pytest.raises(IncrementalStateError, match=r"stateful operator #2.*built by a query with 1.*Rebuild"):
        sd.incremental(path, lambda a: counts(a).dd_distinct()).update(upto=2, a=a.withColumn("time", F.lit(1).cast("long")))
    with pytest.raises(IncrementalStateError, match=r"runs in stage 2"):
        sd.incremental(path, counts, stage=1).update(upto=2, a=a.withColumn("time", F.lit(1).cast("long")))
    assert sd.incremental(path, counts).frontier == 1


@pytest.mark.connect
@pytest.mark.parametrize("where", ["one_task", "distributed"])
def test_stage2_view_on_the_session(spark, tmp_path, caplog, where: str) -> None:
    """A join + reductions view in stage 2 on the test session (also a Spark Connect one), its
    updates in one task or distributed, against the oracle."""
    lat = Total()
    inputs = random_inputs(31, lat, 4, 6, 4)
    steps = schedule(random.Random(31), lat, inputs, 3, 5)

    def q(a: DataFrame, b: DataFrame) -> DataFrame:
        return a.dd_join(b, on=list(ON)).select("case", "time", "diff").dd_count(by="case").dd_concat(
            a.dd_distinct().dd_max(by="case", col="x").withColumnRenamed("x", "count"))

    def ref(c: dict[str, Coll]) -> Coll:
        j = ref_join(c["a"], c["b"], ON, lat)
        counted = ref_count(Coll(("case",), [((d[0],), t, r) for d, t, r in j.updates]), ("case",), lat)
        top = ref_max(ref_distinct(c["a"], lat), ("case",), "x", lat)
        return Coll(("case", "count"), consolidate(counted.updates + top.updates))

    path = tmp_path / "view"
    with update_path(spark, where, caplog):
        got = run_view(spark, str(path), q, inputs, steps, lat)
    assert stage_of(path) == 2
    assert_updates_equal(consolidate(got), expected(ref, inputs, steps[-1][0], lat))


def test_stage2_count_and_sum_read_the_touched_rows_and_the_keys_totals(spark, tmp_path, distributed_updates) -> None:
    """Counts, not timings: ``dd_count``/``dd_sum`` in stage 2 keep per-key totals, so a few
    changes under few keys (every update touches every region here) hand their kernels the
    changed rows, those rows' old updates and the regions' totals, not the regions' rows.
    Against the one-shot run, over updates that merge the traces (``compact_every=3``: the
    large traces merge their small deltas alone, the small ones all their files), the sum
    over a decimal column (exact, so kept by totals too)."""
    path = str(tmp_path / "v")

    def q(orders: DataFrame, customers: DataFrame) -> DataFrame:
        joined = orders.dd_join(customers, on="cid")
        return joined.dd_count(by="region").select("region", F.col("count").cast("decimal(22,2)").alias("v"),
                                                    F.lit("count").alias("what"), "time", "diff").dd_concat(
            joined.dd_sum(by="region", col="amount").select("region", F.col("amount").alias("v"),
                                                            F.lit("sum").alias("what"), "time", "diff"))

    n_orders, n_customers, regions = 3_000, 300, 3
    o_schema = "oid long, cid long, amount decimal(12,2), time long, diff long"
    orders = spark.range(n_orders).select(F.col("id").alias("oid"), (F.col("id") % n_customers).alias("cid"),
                                          (F.col("id") % 97).cast("decimal(12,2)").alias("amount"),
                                          F.lit(0).cast("long").alias("time"), F.lit(1).cast("long").alias("diff"))
    customers = spark.range(n_customers).select(F.col("id").alias("cid"), (F.col("id") % regions).cast("string").alias(
        "region"), F.lit(0).cast("long").alias("time"), F.lit(1).cast("long").alias("diff"))
    view = sd.incremental(path, q, compact_every=3)
    got = rows_of(view.update(upto=1, orders=orders, customers=customers))
    assert stage_of(path) == 2
    rng = random.Random(5)
    changes = []
    for t in (1, 2, 3):  # each time: three orders change their amount, one is deleted; the third merges
        moved = rng.sample(range(n_orders), 4)
        change = [(o, o % n_customers, Decimal(o % 97), t, -1) for o in moved] + [(o, o % n_customers, Decimal(100 + t), t, 1)
                                                                              for o in moved[:3]]
        change = [r for r in change if all(r[0] != c[0] for c in changes)]
        changes += change
        got += rows_of(view.update(upto=t + 1, orders=spark.createDataFrame(change, o_schema)))
        handed = {op: [side.count() for side in sides] for op, sides in view.last_kernel_inputs}
        # the new joined rows (at most 7) and the old updates of the rows they retract
        assert handed["dd_count"][0] <= 14 and handed["dd_sum"][0] <= 14, handed
        # each region's totals: at most one row per stored file (the first, and one per update since)
        assert handed["dd_count"][1] <= regions * 3 and handed["dd_sum"][1] <= regions * 3, handed
    manifest = json.loads(sorted((Path(path) / "_manifests").glob("v*.json"))[-1].read_text())
    assert [o["sides"] for o in manifest["operators"]] == [[], ["rows", "totals"], ["rows", "totals"]]
    merged = {t: fs[0].rsplit("=", 1)[1] for t, fs in manifest["files"]["traces"].items()}
    # the orders' trace (3,000 rows) kept its first file and merged its two small deltas; the
    # count's totals (3 regions) merged all their files into one
    assert merged["s0_0"] == "s0_0" and manifest["files"]["traces"]["s0_0"][1].endswith("s0_0m"), manifest["files"]
    assert merged["s1_1"] == "s1_1c", manifest["files"]
    all_orders = orders.unionByName(spark.createDataFrame(changes, o_schema))
    assert_updates_equal(consolidate(got), rows_of(q(all_orders, customers)))


@pytest.mark.parametrize("time_kind", ["long", "timestamp"])
def test_stage2_one_task_and_distributed_agree_on_every_column_type(spark, tmp_path, caplog, time_kind: str) -> None:
    """The one-task update writes the files the distributed one would (and reads them with
    pyarrow): a view over strings, decimals, dates, timestamps and doubles, with an integer or a
    timestamp time, updated through both paths in turn, equals the one-shot run at every update."""
    import datetime as dt

    def q(a: DataFrame, b: DataFrame) -> DataFrame:
        sums = a.dd_sum(by="k", col="amount").select("k", F.col("amount").alias("total"), "time", "diff")
        return a.dd_join(b, on="k").dd_distinct().dd_join(sums, on="k")

    def at(i: int) -> Any:
        return i if time_kind == "long" else dt.datetime(2026, 1, 1, 0, 0, i)

    tt = "long" if time_kind == "long" else "timestamp"
    a_schema = f"k string, amount decimal(12,2), day date, ts timestamp, x double, time {tt}, diff long"
    b_schema = f"k string, name string, time {tt}, diff long"
    rng = random.Random(11)
    a_rows, b_rows = [], [(f"k{j}", f"n{j % 3}", at(0), 1) for j in range(5)]
    view = sd.incremental(str(tmp_path / "v"), q, compact_every=2)
    got: list = []
    for i in range(4):
        new_a = [(f"k{rng.randrange(5)}", Decimal(rng.randrange(1000)) / 100, dt.date(2026, 1, 1 + rng.randrange(9)),
                  dt.datetime(2026, 1, 1, rng.randrange(24)), rng.random(), at(i), 1) for _ in range(6)]
        if a_rows:
            gone = rng.choice([r for r in a_rows if r[-1] == 1])
            new_a.append((*gone[:-2], at(i), -1))
            a_rows.remove(gone)
        a_rows += [r for r in new_a if r[-1] == 1]
        new_b = list(b_rows) if i == 0 else [(f"k{i % 5}", "n9", at(i), 1)]
        if i:
            b_rows.append(new_b[0])
        where = "one_task" if i % 2 == 0 else "distributed"
        with update_path(spark, where, caplog):
            out = view.update(upto=at(i + 1), a=spark.createDataFrame(new_a, a_schema),
                              b=spark.createDataFrame(new_b, b_schema))
            got += rows_of(out)
        assert stage_of(tmp_path / "v") == 2
        whole_a = spark.createDataFrame([(*r[:-2], at(0), 1) for r in a_rows], a_schema)
        whole_b = spark.createDataFrame([(*r[:-2], at(0), 1) for r in b_rows], b_schema)
        # snapshots: the accumulated output equals the one-shot output of the inputs so far
        snap = {}
        for d, _, r in got:
            snap[d] = snap.get(d, 0) + r
        want = {}
        for d, _, r in rows_of(q(whole_a, whole_b)):
            want[d] = want.get(d, 0) + r
        assert {d: r for d, r in snap.items() if r} == want, i


@pytest.mark.parametrize("how", ["small", "unsized", "distributed"])
def test_foreach_batch_finds_a_small_batchs_frontier_in_its_update(spark, tmp_path, monkeypatch, how: str) -> None:
    """Counts, not timings: a micro-batch Spark estimates small is read once, by the update's one
    task, which also finds the new frontier (its largest time + 1: ``NEXT_FRONTIER``): **1 job**.
    One it cannot size is cached first and its largest time found by a job (adaptive execution
    materializes the cache as a job of its own: 3 jobs).  An update that runs distributed finds
    the frontier by a job of its own first.  All give the same output and frontier; a batch at
    times before the frontier (``late="advance"``: its updates lifted to the frontier) leaves the
    frontier where it is, its output held back until a later batch moves it."""
    from spark_differential.core.jobs import count_jobs
    from spark_differential.incremental import streaming
    from spark_differential.intask.sources import Estimate

    if how == "unsized":
        monkeypatch.setattr(streaming, "estimated_rows", lambda dfs: Estimate(0, False, False, None))
    view = sd.incremental(str(tmp_path / "v"), counts)
    seen: list = []
    fn = view.foreach_batch(lambda out, i: seen.append(sorted(rows_of(out))), time="ts")

    def batch(i: int, rows: list) -> DataFrame:  # read from a file, as a file source's micro-batch is
        spark.createDataFrame(rows, "k long, x long, ts long").write.parquet(str(tmp_path / f"b{i}"))
        return spark.read.parquet(str(tmp_path / f"b{i}"))

    fn(batch(0, [(1, 1, 0)]), 0)
    assert view.frontier == 1
    second = batch(1, [(1, 2, 3), (2, 5, 2)])
    if how == "distributed":
        spark.conf.set(INCREMENTAL_ROWS, "0")
    try:
        with count_jobs(spark) as counted:
            fn(second, 1)
    finally:
        spark.conf.unset(INCREMENTAL_ROWS)
    assert seen[1] == [((1, 1), 3, -1), ((1, 2), 3, 1), ((2, 1), 2, 1)]
    assert view.frontier == 4
    if how != "distributed":
        assert counted.jobs == (1 if how == "small" else 3), counted.jobs
    lifting = view.foreach_batch(lambda out, i: seen.append(sorted(rows_of(out))), time="ts", late="advance")
    lifting(batch(2, [(3, 1, 1)]), 2)  # late: counted from the frontier on, which stays
    assert seen[2] == [] and view.frontier == 4
    fn(batch(3, [(4, 1, 5)]), 3)
    assert seen[3] == [((3, 1), 4, 1), ((4, 1), 5, 1)] and view.frontier == 6


def test_reading_an_update_that_returned_nothing_runs_no_job(spark, tmp_path) -> None:
    """An update whose output is empty returns local rows (an empty Arrow table), which reading
    costs no Spark job, as reading a one-task update's rows does."""
    from spark_differential.core.jobs import count_jobs

    view = sd.incremental(str(tmp_path / "v"), counts)
    view.update(upto=1, a=spark.createDataFrame([(1, 1, 0, 1)], SCHEMA))
    out = view.update(upto=3)  # no input named: no new updates, nothing returned
    with count_jobs(spark) as counted:
        assert out.collect() == []
    assert counted.jobs == 0 and out.columns == ["k", "count", "time", "diff"], (counted.jobs, out.columns)
