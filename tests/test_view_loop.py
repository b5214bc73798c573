"""``dd_iterate`` in an incremental view (stage 2): per-iteration traces (``spark_differential.incremental.loop``).

On ``(data, time, diff)``: a loop kept in a view receives the changes of its roots and
outer collections at each update and returns the change of its fixed point, reading and
rewriting its per-iteration traces.  Checked here:

* without Spark jobs (the loop recorded once on placeholders, then
  :func:`~spark_differential.incremental.loop.loop_update` called directly on Arrow tables): for
  random changing graphs split at random into successive updates (integer and
  product-order times, multi-element frontiers), the changes every update returned add up
  to the one-shot loop's answer over all the inputs, row for row (and to the oracle's);
* through Spark: BFS and reachability views over changing graphs against the oracle,
  each update resumed from the stored manifest, in stage 2; a body the in-task path
  cannot run keeps its view in stage 1, and ``stage=2`` then says why.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers import time_type
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import Coll, Product, Total, assert_updates_equal, consolidate, ref_bfs, ref_reachable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from test_incremental import expected, run_view, schedule, stage_of, toggling_edges

import spark_differential as sd
from spark_differential.core import lattice as L
from spark_differential.core.collection import inspect
from spark_differential.core.settings import LOOP_RECOMPUTE
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental import loop as view_loop
from spark_differential.incremental import loop_driver, loop_query
from spark_differential.incremental.files import Files
from spark_differential.incremental.loop_driver import record as record_loop
from spark_differential.intask import iteration
from spark_differential.intask import step as intask_step

P2 = Product([Total(), Total()])
LATS = {"int": (Total(), L.Total()), "product2": (P2, L.Product((("a", L.Total()), ("b", L.Total()))))}


def bfs_body(roots: DataFrame, edges: DataFrame) -> tuple[DataFrame, Callable[[DataFrame], DataFrame]]:
    """Seed 001's BFS: the loop's roots and body (join, concat, min)."""
    e = edges.withColumnRenamed("src", "node")
    start = roots.select("node", F.lit(0).cast("long").alias("dist"), "time", "diff")
    return start, lambda d: (d.dd_join(e, on="node")
                             .select(F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
                             .dd_concat(start).dd_min(by="node", col="dist"))


def reach_body(roots: DataFrame, edges: DataFrame) -> tuple[DataFrame, Callable[[DataFrame], DataFrame]]:
    """Reachability: the edges whose source is reached (a semijoin with the loop variable), concat, distinct."""
    return roots, lambda d: (edges.dd_semijoin(d.withColumnRenamed("node", "src"), on="src")
                             .select(F.col("dst").alias("node"), "time", "diff").dd_concat(roots).dd_distinct())


def reach_whole_body(roots: DataFrame, edges: DataFrame) -> tuple[DataFrame, Callable[[DataFrame], DataFrame]]:
    """Reachability whose body ends in a step without key columns: the top 1,000 nodes of the
    whole collection (all of them: the same answer), so every new update of that step touches
    every stored row of it."""
    start, body = reach_body(roots, edges)
    return start, lambda d: body(d).dd_top_k(by=None, col="node", k=1000)


BODIES = {"bfs": bfs_body, "reach": reach_body, "reach_whole": reach_whole_body}


def reference(body: str, edges: Coll, roots: Coll, lat: Any) -> Coll:
    e = Coll(("src", "dst"), consolidate(edges.updates))
    if body == "near":
        got = ref_bfs(e, roots, lat)
        return Coll(got.cols, [(d, t, r) for d, t, r in got.updates if d[1] < 3])
    return ref_bfs(e, roots, lat) if body == "bfs" else ref_reachable(e, roots, lat)  # (reach, reach_whole)


@pytest.fixture(scope="module")
def recorded(spark) -> dict[tuple[str, str], tuple[Any, list[str]]]:
    """Each body recorded over each time type (no Spark job): its program and which input each
    source is (``roots`` or ``edges``)."""
    out = {}
    for name, (lat, _) in LATS.items():
        tt = time_type(lat).simpleString()
        roots = spark.createDataFrame([], f"node long, time {tt}, diff long")
        edges = spark.createDataFrame([], f"src long, dst long, time {tt}, diff long")
        for body_name, make in BODIES.items():
            start, body = make(roots, edges)
            program, sources = record_loop(start, inspect(start, op="test"), body, None)
            kinds = ["roots" if "dst" not in s.columns else "edges" for s in sources]
            out[(name, body_name)] = (program, kinds)
    return out


def arrow(cols: tuple[str, ...], updates: list, lat: Any, body: str, kind: str) -> Any:
    """Oracle updates as a loop source's Arrow table (``cols``: data, time leaves, diff)."""
    import pyarrow as pa

    rows = []
    for d, t, r in updates:
        data = (*d, 0) if kind == "roots" and body == "bfs" else d
        rows.append((*data, *((t,) if isinstance(lat, Total) else t), r))
    return pa.table({c: pa.array([row[i] for row in rows], pa.int64()) for i, c in enumerate(cols)})


def as_updates(table: Any, lat: Any, width: int) -> list:
    cols = table.column_names
    rows = table.to_pylist()
    ndata = len(cols) - width - 1
    out = []
    for r in rows:
        v = [r[c] for c in cols]
        t = v[ndata] if isinstance(lat, Total) else tuple(v[ndata: ndata + width])
        out.append((tuple(v[:ndata]), t, v[-1]))
    return out


def kept_state(program: Any, kinds: list[str], name: str, body: str) -> tuple[list[pa.Schema], list[pa.Table]]:
    """The schemas of a recorded loop's sources and its empty state, keeping the sources' values
    and the fixed point (``view_loop.specs`` with the sources)."""
    lat = LATS[name][0]
    schemas = [arrow(cols, [], lat, body, k).schema for cols, k in zip(program.sources, kinds)]
    return schemas, [sp.schema.empty_table() for sp in view_loop.specs(program, schemas)]


def split_run(program: Any, kinds: list[str], name: str, body: str, seed: int,
              recompute: int = 0) -> tuple[list, list, list]:
    """A random changing graph, split at random into successive updates of a view's loop:
    ``(every update's changes, the one-shot loop's answer, the oracle's)``, each at the times not
    in the future of the last frontier (the changes at later times are held back: loop_update).  The loop is capped
    at 100 iterations (these graphs need at most 8), so a loop that would not stop fails.  Half the
    runs deliver the first few updates' changes as one first update (run semi-naively over an
    empty state: view_loop._first), the later ones against the state it stored: resumed, or
    with ``recompute`` (over a total order) recomputed from the stored inputs."""
    lat, lib = LATS[name]
    program = dataclasses.replace(program, max_iterations=100)
    rng = random.Random(seed)
    hi = 6
    inputs = random_inputs(rng, lat, hi)
    steps = schedule(rng, lat, inputs, rng.randint(2, 4), hi)
    if rng.random() < 0.5:  # a long history as one first update (run semi-naively), then the later ones
        k = rng.randint(2, len(steps))
        merged = {n: [u for _, plan in steps[:k] for u in plan[n]] for n in inputs}
        steps = [(steps[k - 1][0], merged), *steps[k:]]
    schemas, state = kept_state(program, kinds, name, body)
    returned: list = []
    held = None
    for upto, new in steps:
        sources = [arrow(cols, new[k], lat, body, k) for cols, k in zip(program.sources, kinds)]
        if held is not None:  # the changes held back by the last update come again
            sources = [pa.concat_tables([h, src]) for h, src in zip(held, sources)]
        frontier = [lib.encode_value(f) for f in upto]
        out, state, held = view_loop.loop_update(program, sources, state, lib, frontier, kept=True,
                                                 recompute=recompute)
        returned += as_updates(out, lat, program.width)
        for sp, table in zip(view_loop.specs(program, schemas), state, strict=True):
            assert table.schema == sp.schema
    edges, roots = inputs["edges"], inputs["roots"]
    whole = [arrow(cols, inputs[k].updates, lat, body, k) for cols, k in zip(program.sources, kinds)]
    once, _, _ = iteration.fixed_point(program, whole)
    last = steps[-1][0]  # what the view returned and what it owes: the times not in the future of the last frontier

    def done(updates: list) -> list:
        return [u for u in updates if not any(lat.leq(f, u[1]) for f in last)]

    return (done(consolidate(returned)), done(as_updates(once, lat, program.width)),
            done(reference(body, edges, roots, lat).updates))


def random_inputs(rng: random.Random, lat: Any, hi: int) -> dict[str, Coll]:
    """A random changing graph on 7 nodes (edges toggled on and off at times up to ``hi``) and its roots."""
    if isinstance(lat, Total):
        edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 7, rng.randint(3, 12), hi).updates))
        roots = Coll(("node",), [((0,), 0, 1)] + ([((rng.randrange(7),), rng.randint(1, hi), 1)] if rng.random() < 0.5 else []))
    else:
        ups = []
        for _ in range(rng.randint(3, 12)):
            e = (rng.randrange(7), rng.randrange(7))
            t1 = (rng.randint(0, hi), rng.randint(0, hi))
            ups.append((e, t1, 1))
            if rng.random() < 0.5:
                ups.append((e, (rng.randint(t1[0], hi), rng.randint(t1[1], hi)), -1))
            elif max(t1) < hi and rng.random() < 0.5:  # retracted at two incomparable times, inserted again at their lub
                a, b = rng.randint(t1[0] + 1, hi), rng.randint(t1[1] + 1, hi)
                ups += [(e, (a, t1[1]), -1), (e, (t1[0], b), -1), (e, (a, b), 1)]
        edges = Coll(("src", "dst"), consolidate(ups))
        roots = Coll(("node",), [((0,), (0, 0), 1)])
    return {"roots": roots, "edges": edges}


@pytest.mark.parametrize("name,recompute", [("int", 0), ("int", 10**9), ("product2", 0)])
@pytest.mark.parametrize("body", sorted(BODIES))
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_updates_add_up_to_the_one_shot_loop(recorded, name: str, recompute: int, body: str, seed: int) -> None:
    """Resumed updates (``recompute`` 0) and, over integer times, updates recomputed from the
    stored inputs (``recompute`` larger than any input: every update with changes)."""
    program, kinds = recorded[(name, body)]
    returned, once, want = split_run(program, kinds, name, body, seed, recompute)
    assert_updates_equal(returned, once)
    assert_updates_equal(returned, want)


@pytest.mark.parametrize("body", sorted(BODIES))
def test_recomputing_a_loop_returns_and_stores_what_resuming_it_does(recorded, monkeypatch, body: str) -> None:
    """Two chains of the same updates over random graphs, one always resuming the loop, one always
    recomputing it: after every update the same change, table for table the same state (the
    kept sources and fixed point included), and each chain took its own path (counted)."""
    lat, lib = LATS["int"]
    program, kinds = recorded[("int", body)]
    program = dataclasses.replace(program, max_iterations=100)
    calls = {"_resumed": 0, "_first": 0}

    def counted(name: str) -> Callable[..., pa.Table]:
        fn = getattr(view_loop, name)

        def call(*args: Any) -> pa.Table:
            calls[name] += 1
            return fn(*args)
        return call

    for name in calls:
        monkeypatch.setattr(view_loop, name, counted(name))
    for seed in range(6):
        rng = random.Random(seed)
        inputs = random_inputs(rng, lat, 6)
        steps = schedule(rng, lat, inputs, rng.randint(2, 4), 6)
        chains = {r: (kept_state(program, kinds, "int", body)[1], None) for r in (0, 10**9)}
        for n, (upto, new) in enumerate(steps):
            got = {}
            for r, (state, held) in chains.items():
                sources = [arrow(cols, new[k], lat, body, k) for cols, k in zip(program.sources, kinds)]
                if held is not None:
                    sources = [pa.concat_tables([h, src]) for h, src in zip(held, sources)]
                # the rows fed to this update: at times before its frontier (the others are held back)
                due = sum(pc.sum(pc.less(src.column(src.column_names[-2]), upto[0])).as_py() or 0 for src in sources)
                before, stored = dict(calls), any(t.num_rows for t in state)
                out, state, held = view_loop.loop_update(program, sources, state, lib,
                                                         [lib.encode_value(f) for f in upto], kept=True, recompute=r)
                if stored and due:  # an update with changes against a stored state: resumed, or recomputed
                    took = "_first" if r else "_resumed"
                    assert calls == {**before, took: before[took] + 1}, (seed, n, r, calls, before)
                chains[r] = (state, held)
                got[r] = (sorted_rows(out), [sorted_rows(t) for t in state])
            (out_a, state_a), (out_b, state_b) = got[0], got[10**9]
            assert out_a.equals(out_b), (seed, n, out_a.to_pylist(), out_b.to_pylist())
            for a, b in zip(state_a, state_b, strict=True):
                assert a.equals(b), (seed, n, a.to_pylist(), b.to_pylist())
    assert calls["_resumed"] and calls["_first"]


def test_a_loop_computes_only_at_complete_times(recorded) -> None:
    """Reachability over product times where the lub of two complete times is not complete yet.
    The edge ``b -> c`` is retracted at ``(1, 0)`` and at ``(0, 1)`` and inserted again at
    ``(1, 1)``; the first update (frontier ``{(1, 1)}``) delivers all but that insertion, so at
    ``(1, 1)`` the delivered edges hold ``b -> c`` with multiplicity -1, over which
    ``a -> c -> b -> c`` oscillates forever (``c`` reached, then ``b``, then ``c`` cancelled...).
    Before the loop held back its steps' outputs at incomplete times, this update raised
    ``IterationLimitExceeded`` (without ``max_iterations``: it never returned).  Now it returns the
    answer at the complete times, holds the rest, and the update completing ``(1, 1)`` adds up
    to the oracle's history."""
    lat, lib = LATS["product2"]
    program, kinds = recorded[("product2", "reach")]
    program = dataclasses.replace(program, max_iterations=100)
    a, b, c = 0, 1, 2
    edges = [((a, c), (0, 0), 1), ((c, b), (0, 0), 1), ((b, c), (0, 0), 1),
             ((b, c), (1, 0), -1), ((b, c), (0, 1), -1), ((b, c), (1, 1), 1)]
    roots = [((a,), (0, 0), 1)]
    state = [sp.schema.empty_table() for sp in view_loop.specs(program)]
    assert any(sp.held for sp in view_loop.specs(program))
    returned = []
    held = None
    for upto, new in [((1, 1), {"roots": roots, "edges": edges}), ((3, 3), {"roots": [], "edges": []})]:
        sources = [arrow(cols, new[k], lat, "reach", k) for cols, k in zip(program.sources, kinds)]
        if held is not None:
            sources = [pa.concat_tables([h, s]) for h, s in zip(held, sources)]
        out, state, held = view_loop.loop_update(program, sources, state, lib, [lib.encode_value(upto)])
        got = as_updates(out, lat, program.width)
        assert all(not lat.leq(upto, t) for _, t, _ in got), got  # only complete times are returned
        returned += got
        if upto == (1, 1):  # the first update held back the edge's insertion and the outputs at (1, 1)
            assert sum(h.num_rows for h in held) == 1
            assert sum(t.num_rows for sp, t in zip(view_loop.specs(program), state) if sp.held) > 0
    want = ref_reachable(Coll(("src", "dst"), consolidate(edges)), Coll(("node",), roots), lat).updates
    assert_updates_equal(consolidate(returned), [u for u in want if not lat.leq((3, 3), u[1])])


def test_state_is_the_loops_live_size_not_its_history(recorded) -> None:
    """One edge toggled on and off 40 times: the loop's stored traces, advanced to each new
    frontier, stay as small as one state of the graph."""
    lat, lib = LATS["int"]
    program, kinds = recorded[("int", "bfs")]
    state = [sp.schema.empty_table() for sp in view_loop.specs(program)]
    sizes = []
    base = [((0, 1), 0, 1), ((1, 2), 0, 1)]
    for step in range(40):
        ups = base if step == 0 else []
        ups = ups + [((2, 3), step, 1 if step % 2 == 0 else -1)]
        new = {"roots": [((0,), 0, 1)] if step == 0 else [], "edges": ups}
        sources = [arrow(cols, new[k], lat, "bfs", k) for cols, k in zip(program.sources, kinds)]
        _, state, _ = view_loop.loop_update(program, sources, state, lib, [lib.encode_value(step + 1)])
        sizes.append(sum(t.num_rows for t in state))
    assert max(sizes[5:]) <= max(sizes[:5]), sizes


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


@pytest.mark.parametrize("body", sorted(BODIES))
@pytest.mark.parametrize("name", sorted(LATS))
def test_first_update_stores_what_a_resumed_update_stores(recorded, name: str, body: str) -> None:
    """The first update (semi-naive, over an empty state) stores the per-iteration traces the
    update against a stored state reaches for the same inputs: the roots at time 0 first (their
    state is not empty; the later roots held back), then the edges (all at later times) and the
    held roots, give the same state at the last frontier, table for table, and together the
    same change of the fixed point."""
    lat, lib = LATS[name]
    program, kinds = recorded[(name, body)]
    program = dataclasses.replace(program, max_iterations=100)
    if isinstance(lat, Total):
        early, last = [0 + 1], [8]
    else:
        early, last = [(1, 0), (0, 1)], [(8, 8)]
    early = [lib.encode_value(f) for f in early]
    last = [lib.encode_value(f) for f in last]
    for seed in range(4):
        inputs = random_inputs(random.Random(seed), lat, 6)
        later = [(d, t + 1 if isinstance(lat, Total) else (t[0] + 1, t[1] + 1), r) for d, t, r in inputs["edges"].updates]
        inputs["edges"] = Coll(inputs["edges"].cols, later)  # after the first frontier
        empty = [sp.schema.empty_table() for sp in view_loop.specs(program)]

        def sources(which: set[str], inputs: dict[str, Coll] = inputs) -> list[pa.Table]:
            return [arrow(cols, inputs[k].updates if k in which else [], lat, body, k)
                    for cols, k in zip(program.sources, kinds)]

        once, state, _ = view_loop.loop_update(program, sources({"roots", "edges"}), empty, lib, last)
        first, half, held = view_loop.loop_update(program, sources({"roots"}), empty, lib, early)
        assert sum(t.num_rows for t in half) > 0
        then, resumed, _ = view_loop.loop_update(
            program, [pa.concat_tables([h, s]) for h, s in zip(held, sources({"edges"}))], half, lib, last)
        assert len(state) == len(resumed)
        for a, b in zip(state, resumed):
            assert sorted_rows(a).equals(sorted_rows(b)), (seed, a.to_pylist(), b.to_pylist())
        assert_updates_equal(consolidate(as_updates(once, lat, program.width)),
                             consolidate(as_updates(first, lat, program.width) + as_updates(then, lat, program.width)))


def test_a_first_update_is_semi_naive(recorded, monkeypatch) -> None:
    """A path of ``n`` edges needs ``n`` iterations; its first update feeds the kernels each
    iteration's change of the loop variable (a node or two), not the whole of it: the rows the
    steps receive as new updates are linear in ``n`` (242 at ``n = 80``; feeding the whole loop
    variable at every iteration, as an update against a stored state does, gave 6,802: about
    ``n²/2`` for each of BFS's ``dd_join`` and ``dd_min``)."""
    lat, lib = LATS["int"]
    program, kinds = recorded[("int", "bfs")]
    n = 80
    counted = [0]
    kernel_input = intask_step.kernel_input

    def counting(*args: Any, **kwargs: Any) -> pa.Table:
        out = kernel_input(*args, **kwargs)
        counted[0] += out.num_rows
        return out

    monkeypatch.setattr(intask_step, "kernel_input", counting)
    new = {"roots": [((0,), 0, 1)], "edges": [((i, i + 1), 0, 1) for i in range(n)]}
    sources = [arrow(cols, new[k], lat, "bfs", k) for cols, k in zip(program.sources, kinds)]
    state = [sp.schema.empty_table() for sp in view_loop.specs(program)]
    out, state, _ = view_loop.loop_update(program, sources, state, lib, [(1,)])
    assert sorted(as_updates(out, lat, 1)) == [((i, i), 0, 1) for i in range(n + 1)]
    assert counted[0] <= 5 * n, counted[0]
    # a later update (one more edge at the path's end) still reads only what it touches
    counted[0] = 0
    sources = [arrow(cols, {"roots": [], "edges": [((n, n + 1), 1, 1)]}[k], lat, "bfs", k)
               for cols, k in zip(program.sources, kinds)]
    out, state, _ = view_loop.loop_update(program, sources, state, lib, [(2,)])
    assert sorted(as_updates(out, lat, 1)) == [((n + 1, n + 1), 1, 1)]
    assert counted[0] <= 8, counted[0]


# -- through Spark -------------------------------------------------------------------------


def reach_view(roots: DataFrame, edges: DataFrame) -> DataFrame:
    start, body = reach_body(roots, edges)
    return start.dd_iterate(body)


def bfs_view(roots: DataFrame, edges: DataFrame) -> DataFrame:
    start, body = bfs_body(roots, edges)
    return start.dd_iterate(body)


def near_view(roots: DataFrame, edges: DataFrame) -> DataFrame:
    """BFS then a filter: the query does more than return its loop's change."""
    return bfs_view(roots, edges).where(F.col("dist") < 3)


VIEWS = {"bfs": bfs_view, "reach": reach_view, "near": near_view}


@pytest.mark.parametrize("body,name,remote,recompute", [
    ("bfs", "product2", False, None), pytest.param("reach", "int", False, None, marks=pytest.mark.connect),
    ("bfs", "int", False, "0"), ("near", "int", False, None), ("bfs", "int", True, None), ("near", "int", True, "0")])
def test_loop_views_against_the_oracle(spark, tmp_path, monkeypatch, body: str, name: str, remote: bool,
                                       recompute: str | None) -> None:
    """A loop view over changing graphs against the oracle.  Over an integral time a query
    that is one loop writes each version in the loop's one job (``write_version``); over
    product times, or a query doing more than returning its loop's change (``near``), the
    loop is written apart and the query's output after it.  The loop's task reads its
    traces and writes its files itself where the view is on this machine's filesystem;
    ``remote``: as on HDFS or S3A, through Spark's scan and writer.  ``recompute``: the
    ``loopRecompute`` setting (by default these small graphs' updates recompute their loop;
    ``0``: every update resumes it)."""
    if remote:
        monkeypatch.setattr(Files, "local_root", lambda self: None)

    lat = LATS[name][0]
    rng = random.Random(41 + len(name))
    if isinstance(lat, Total):
        edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 7, 12, 8).updates))
        roots = Coll(("node",), [((0,), 0, 1), ((4,), 3, 1)])
    else:
        ups = []
        for _ in range(10):
            e = (rng.randrange(6), rng.randrange(6))
            t1 = (rng.randint(0, 4), rng.randint(0, 4))
            ups += [(e, t1, 1)] + ([(e, (t1[0] + 1, t1[1] + 2), -1)] if rng.random() < 0.5 else [])
        # an edge retracted at two incomparable times and inserted again at their lub: an update
        # whose frontier completes both but not the lub holds back its steps' outputs there (_Held)
        ups += [((1, 2), (0, 0), 1), ((1, 2), (2, 0), -1), ((1, 2), (0, 2), -1), ((1, 2), (2, 2), 1)]
        edges = Coll(("src", "dst"), consolidate(ups))
        roots = Coll(("node",), [((0,), (0, 0), 1)])
    inputs = {"roots": roots, "edges": edges}
    steps = schedule(rng, lat, inputs, 3, 8 if isinstance(lat, Total) else 5)
    path = tmp_path / "view"
    if recompute is not None:
        spark.conf.set(LOOP_RECOMPUTE, recompute)
    try:
        got = run_view(spark, str(path), VIEWS[body], inputs, steps, lat)
    finally:
        spark.conf.unset(LOOP_RECOMPUTE)
    assert stage_of(path) == 2
    want = expected(lambda c: reference(body, c["edges"], c["roots"], lat), inputs, steps[-1][0], lat)
    assert want, "the graph should give some answer"
    assert_updates_equal(consolidate(got), want)


def test_a_loop_view_stored_before_loops_kept_their_inputs_still_resumes(spark, tmp_path, monkeypatch) -> None:
    """A BFS view whose first two updates were stored as before loops kept their sources' values
    and fixed point (``loop_operator(..., kept=False)``): the later updates, by the code of
    today, find that layout, keep it (the manifest's operator keeps its 5 traces, not 8) and
    resume the loop; every answer matches the oracle."""
    lat = LATS["int"][0]
    rng = random.Random(43)
    edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 7, 12, 8).updates))
    roots = Coll(("node",), [((0,), 0, 1), ((4,), 3, 1)])
    inputs = {"roots": roots, "edges": edges}
    steps = schedule(rng, lat, inputs, 4, 8)
    today = loop_driver.loop_operator

    def before(i: int) -> None:
        if i == 0:
            for module in (loop_driver, loop_query):
                monkeypatch.setattr(module, "loop_operator", lambda p, h, kept=True: today(p, h, kept=False))
        if i == 2:
            monkeypatch.undo()

    path = tmp_path / "view"
    got = run_view(spark, str(path), bfs_view, inputs, steps, lat, before=before)
    operators = json.loads(sorted((path / "_manifests").glob("v*.json"))[-1].read_text())["operators"]
    assert [(o["op"], len(o["inputs"])) for o in operators] == [("dd_iterate", 5)]
    want = expected(lambda c: reference("bfs", c["edges"], c["roots"], lat), inputs, steps[-1][0], lat)
    assert_updates_equal(consolidate(got), want)


@pytest.mark.parametrize("stage", [1, 2])
def test_a_loop_view_over_product_times_computes_only_at_complete_times(spark, tmp_path, stage: int) -> None:
    """The case of ``test_a_loop_computes_only_at_complete_times`` through a view, with the
    insertion at ``(1, 1)`` coming in the second update (not early): after the first
    (``upto={(1, 1)}``) the edge ``b -> c`` has multiplicity -1 at ``(1, 1)`` in what the view
    received.  Stage 2 holds its loop's outputs at incomplete times (``_Held``); stage 1 re-runs
    the query on the inputs' ``complete_part`` (empty at incomplete times).  Before, both looped
    until ``max_iterations``."""
    lat = LATS["product2"][0]
    a, b, c = 0, 1, 2
    edges = [((a, c), (0, 0), 1), ((c, b), (0, 0), 1), ((b, c), (0, 0), 1),
             ((b, c), (1, 0), -1), ((b, c), (0, 1), -1), ((b, c), (1, 1), 1)]
    roots = [((a,), (0, 0), 1)]
    inputs = {"roots": Coll(("node",), roots), "edges": Coll(("src", "dst"), edges)}
    steps = [([(1, 1)], {"roots": roots, "edges": edges[:-1]}), ([(3, 3)], {"roots": [], "edges": edges[-1:]})]

    def view(roots: DataFrame, edges: DataFrame) -> DataFrame:
        start, body = reach_body(roots, edges)
        return start.dd_iterate(body, max_iterations=50)

    got = run_view(spark, str(tmp_path / "v"), view, inputs, steps, lat, stage=stage)
    assert stage_of(tmp_path / "v") == stage
    want = expected(lambda c: reference("reach", c["edges"], c["roots"], lat), inputs, steps[-1][0], lat)
    assert_updates_equal(consolidate(got), want)


def pmod_loop(roots: DataFrame) -> DataFrame:
    """A loop whose body the in-task path cannot run (``pmod`` is not translated)."""
    return roots.dd_iterate(
        lambda d: d.select(F.pmod(F.col("node") + 1, F.lit(3)).alias("node"), "time", "diff").dd_concat(d).dd_distinct())


def test_a_loop_the_task_cannot_run_keeps_its_view_in_stage_1(spark, tmp_path) -> None:
    roots = spark.createDataFrame([(0, 0, 1), (5, 2, 1)], "node long, time long, diff long")
    view = sd.incremental(str(tmp_path / "v"), pmod_loop)
    got = sorted(view.update(upto=1, roots=roots).collect())
    assert [(r.node, r.time, r.diff) for r in got] == [(0, 0, 1), (1, 0, 1), (2, 0, 1)]
    assert stage_of(tmp_path / "v") == 1
    with pytest.raises(IncrementalStateError, match=r"stage=2 was asked but the query uses dd_iterate \(its body "
                                                    r"cannot run inside one task: .*pmod"):
        sd.incremental(str(tmp_path / "w"), pmod_loop, stage=2).update(upto=1, roots=roots)


def test_a_first_update_larger_than_one_task_keeps_a_loop_view_in_stage_1(spark, tmp_path) -> None:
    """The loop's state lives in one task: a first update over more rows than
    ``spark_differential.iterate.localRows`` lets one task hold (by Spark's estimate, no job)
    keeps the view in stage 1, whose loop runs distributed, and ``stage=2`` is refused, saying
    why; the answer is the same."""
    def inputs() -> dict[str, DataFrame]:
        star = spark.range(1, 40).selectExpr("0L AS src", "id AS dst", "CAST(id % 3 AS LONG) AS time", "1L AS diff")
        return {"edges": star, "roots": spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")}

    old = spark.conf.get("spark_differential.iterate.localRows", None)
    spark.conf.set("spark_differential.iterate.localRows", "3")
    try:
        view = sd.incremental(str(tmp_path / "v"), bfs_view)
        got = [((r.node, r.dist), r.time, r.diff) for r in view.update(upto=4, **inputs()).collect()]
        assert stage_of(tmp_path / "v") == 1
        with pytest.raises(IncrementalStateError, match=r"stage=2 was asked but the query uses dd_iterate \(the first "
                                                        r"update has \d+ input rows by Spark's estimate, more than "
                                                        r"spark_differential.iterate.localRows=3 lets one task hold"):
            sd.incremental(str(tmp_path / "w"), bfs_view, stage=2).update(upto=4, **inputs())
    finally:
        if old is None:
            spark.conf.unset("spark_differential.iterate.localRows")
        else:
            spark.conf.set("spark_differential.iterate.localRows", old)
    e = Coll(("src", "dst"), [((0, d), d % 3, 1) for d in range(1, 40)])
    assert_updates_equal(consolidate(got), ref_bfs(e, Coll(("node",), [((0,), 0, 1)]), Total()).updates)


def test_jobs_of_one_update_of_a_bfs_view(spark, tmp_path) -> None:
    """Counts, not timings: an update of a BFS view (a query that is one loop, over an integral
    time) is one job: the loop's task reads its changes and stored traces and writes the new
    traces, what the update returns and what it holds back, all in one write, and the rows it
    returns come back with that job's result, so reading them is no job.  A query doing more
    than returning the loop (``near_view``) writes the loop apart, then consolidates and writes
    its output: 3 jobs, and one more reading it (none when it returned nothing)."""
    from spark_differential.core.jobs import count_jobs

    schema = "src long, dst long, time long, diff long"
    edges = [(0, 1, 0, 1), (1, 2, 0, 1), (2, 3, 1, 1), (0, 3, 2, 1), (1, 2, 2, -1), (3, 4, 3, 1)]
    e = Coll(("src", "dst"), [((s, d), t, r) for s, d, t, r in edges])
    want = ref_bfs(e, Coll(("node",), [((0,), 0, 1)]), Total()).updates
    for query, per_update, per_read in [(bfs_view, 1, 0), (near_view, 3, 1)]:
        view = sd.incremental(str(tmp_path / query.__name__), query)
        jobs, reads, got, sizes = [], [], [], []
        for t in range(4):
            new = {"edges": spark.createDataFrame([e for e in edges if e[2] == t], schema)}
            if t == 0:
                new["roots"] = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
            with count_jobs(spark) as counted:
                out = view.update(upto=t + 1, **new)
            jobs.append(counted.jobs)
            with count_jobs(spark) as counted:
                rows = [((r.node, r.dist), r.time, r.diff) for r in out.collect()]
            got += rows
            reads.append(counted.jobs)
            sizes.append(len(rows))
        assert_updates_equal(consolidate(got), [u for u in want if query is bfs_view or u[0][1] < 3])
        assert stage_of(tmp_path / query.__name__) == 2
        # (an update returning nothing returns local rows: reading them is no job either)
        assert jobs == [per_update] * 4 and reads == [per_read if n else 0 for n in sizes], (query.__name__, jobs,
                                                                                              reads, sizes)


@pytest.mark.parametrize("query", [bfs_view, near_view])
def test_a_malformed_loop_recompute_setting_is_an_error_before_any_job(spark, tmp_path, query: Callable) -> None:
    """``loopRecompute``: 10 unless set, ``off`` 0, a whole number of times as given; any other
    value makes the next update of a loop view a ``ConfigurationError`` naming the key, before
    any job and without a version written, and the view updates again once it is fixed."""
    from spark_differential.core import settings as sd_settings
    from spark_differential.core.jobs import count_jobs
    from spark_differential.errors import ConfigurationError

    assert sd_settings.loop_recompute(spark) == 10
    for raw, want in (("off", 0), ("25", 25)):
        spark.conf.set(LOOP_RECOMPUTE, raw)
        try:
            assert sd_settings.loop_recompute(spark) == want
        finally:
            spark.conf.unset(LOOP_RECOMPUTE)
    schema = "src long, dst long, time long, diff long"
    path = tmp_path / query.__name__
    view = sd.incremental(str(path), query)
    view.update(upto=1, roots=spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long"),
                edges=spark.createDataFrame([(0, 1, 0, 1)], schema)).collect()
    edges = spark.createDataFrame([(1, 2, 1, 1)], schema)
    spark.conf.set(LOOP_RECOMPUTE, "lots")
    try:
        with count_jobs(spark) as counted, pytest.raises(ConfigurationError, match=LOOP_RECOMPUTE):
            sd.incremental(str(path), query).update(upto=2, edges=edges)
    finally:
        spark.conf.unset(LOOP_RECOMPUTE)
    assert counted.jobs == 0
    assert len(list((path / "_manifests").glob("v*.json"))) == 1
    rows = sorted(tuple(r) for r in sd.incremental(str(path), query).update(upto=2, edges=edges).collect())
    assert rows == [(2, 2, 1, 1)]


def test_the_row_that_runs_a_one_task_update_is_made_in_the_jvm(spark) -> None:
    """The row a one-task update adds so that its task runs when nothing is new (``run_row``) is
    one row in one partition, computed by the JVM: a DataFrame of Python rows is an RDD that a
    second Python worker must unpickle inside the update's task (measured: 0.1 s of a BFS view's
    0.4 s update)."""
    from spark_differential.intask.sources import SRC, run_row

    df = run_row(spark)
    assert df.columns == [SRC] and [tuple(r) for r in df.collect()] == [(-1,)]
    plan = df._jdf.queryExecution().executedPlan()
    assert plan.execute().getNumPartitions() == 1
    assert "ExistingRDD" not in plan.toString() and "Python" not in plan.toString(), plan.toString()


@pytest.mark.parametrize("query", [bfs_view, near_view])
def test_bad_input_to_a_loop_view_is_a_named_error(spark, tmp_path, query: Callable[..., DataFrame]) -> None:
    """A loop view's inputs get the errors every view's get, on its first update and on later
    ones, with either ``late`` mode: a null time or diff is a :class:`NullValueError` (naming the
    input, but on ``near_view``'s first update), an update before the frontier a :class:`LateUpdateError` (``late="error"``) or counted
    from the frontier on (``late="advance"``); a failed update stores nothing.  ``bfs_view``'s
    task checks its inputs' rows itself (one job an update), ``near_view``'s are checked by
    projections (its loop is written apart)."""
    from spark_differential.errors import LateUpdateError, NullValueError

    path = str(tmp_path / query.__name__)
    view = sd.incremental(path, query)
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    nullable = "src long, dst long, time long, diff long"
    for bad, what in [([(0, 1, None, 1)], "time"), ([(0, 1, 0, None)], "diff")]:  # a first update
        with pytest.raises(Exception) as raw:
            view.update(upto=1, roots=roots, edges=spark.createDataFrame(bad, nullable)).collect()
        err = sd.unwrap(raw.value)
        assert isinstance(err, NullValueError) and f"a null {what}" in str(err), str(err)
        # (bfs_view's task names the input; near_view's first update meets dd_iterate's own check)
        assert ("`edges`" in str(err)) == (query is bfs_view), str(err)
        assert view.frontier is None
    view.update(upto=5, roots=roots, edges=spark.createDataFrame([(0, 1, 0, 1)], nullable)).collect()
    for late in ("error", "advance"):
        for bad, what in [([(1, 2, None, 1), (1, 3, 6, 1)], "time"), ([(1, 2, 7, None)], "diff")]:
            with pytest.raises(Exception) as raw:
                view.update(upto=8, late=late, edges=spark.createDataFrame(bad, nullable)).collect()
            err = sd.unwrap(raw.value)
            assert isinstance(err, NullValueError) and f"a null {what}" in str(err) and "`edges`" in str(err), \
                (late, str(err))
            assert view.frontier == 5
    late_edges = spark.createDataFrame([(1, 2, 3, 1), (1, 3, 6, 1)], nullable)
    with pytest.raises(LateUpdateError, match=r"input `edges` has an update at time 3, not in the future of the "
                                              r"view's frontier 5"):
        view.update(upto=8, edges=late_edges)
    assert view.frontier == 5
    got = sorted((r.node, r.dist, r.time, r.diff) for r in view.update(upto=8, late="advance", edges=late_edges).collect())
    assert got == [(2, 2, 5, 1), (3, 2, 6, 1)]


def test_foreach_batch_into_a_bfs_view_is_one_job_a_micro_batch(spark, tmp_path) -> None:
    """Counts, not timings: a micro-batch into a BFS view (a query that is one loop) is one job: the
    loop's task reads the batch as it came, finds the new frontier (its largest time + 1) and writes
    the version.  The outputs add up to the oracle's, and the frontier is the batches' largest time + 1."""
    from spark_differential.core.jobs import count_jobs

    view = sd.incremental(str(tmp_path / "v"), bfs_view)
    view.update(upto=0, roots=spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long"),
                edges=spark.createDataFrame([], "src long, dst long, time long, diff long"))
    got: list = []
    fn = view.foreach_batch(lambda out, i: got.extend(((r.node, r.dist), r.time, r.diff) for r in out.collect()),
                            time="ts", diff="diff", input="edges")
    edges = [(0, 1, 0, 1), (1, 2, 0, 1), (2, 3, 1, 1), (0, 3, 2, 1), (1, 2, 2, -1), (3, 4, 3, 1)]
    jobs = []
    for t in range(4):
        path = str(tmp_path / f"b{t}")  # read from a file, as a file source's micro-batch is
        spark.createDataFrame([e for e in edges if e[2] == t], "src long, dst long, ts long, diff long").write.parquet(path)
        batch = spark.read.parquet(path)  # (its schema read by a job of its own, outside the count)
        with count_jobs(spark) as counted:
            fn(batch, t + 1)
        jobs.append(counted.jobs)
        assert view.frontier == t + 1
    e = Coll(("src", "dst"), [((s, d), t, r) for s, d, t, r in edges])
    assert_updates_equal(consolidate(got), ref_bfs(e, Coll(("node",), [((0,), 0, 1)]), Total()).updates)
    assert jobs == [1, 1, 1, 1], jobs


@pytest.mark.parametrize("seed", [3, 8])
def test_a_one_loop_view_records_its_query_once(spark, tmp_path, seed: int) -> None:
    """A query that is one loop over an integral time is called twice in the view's life, both at
    its first update (the probe, and the recording :mod:`~spark_differential.incremental.loop_query`
    keeps): every later update's task computes the loop's sources from the inputs' rows.  Its
    sources here filter, rename and compute (self-loops dropped, a computed weight kept); each
    update resumes from the stored manifest (a fresh view object), some give one input only, some
    deliver changes early (held back); the answer against the oracle."""
    calls = []

    def view(roots: DataFrame, edges: DataFrame) -> DataFrame:
        calls.append(1)
        e = edges.where(F.col("src") != F.col("dst")).select(
            F.col("src").alias("node"), "dst", (F.col("dst") * 2 - F.col("dst")).alias("w"), "time", "diff")
        start = roots.select("node", F.lit(0).cast("long").alias("dist"), "time", "diff")
        return start.dd_iterate(lambda d: (d.dd_join(e, on="node")
                                           .select(F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"),
                                                   "time", "diff")
                                           .dd_concat(start).dd_min(by="node", col="dist")))

    lat = Total()
    rng = random.Random(seed)
    edges = Coll(("src", "dst"), consolidate(toggling_edges(rng, 7, 14, 8).updates
                                             + [((2, 2), 0, 1), ((0, 0), 1, 1)]))
    roots = Coll(("node",), [((0,), 0, 1), ((4,), 3, 1)])
    inputs = {"roots": roots, "edges": edges}
    steps = schedule(rng, lat, inputs, 4, 8)
    got = run_view(spark, str(tmp_path / "v"), view, inputs, steps, lat)
    assert stage_of(tmp_path / "v") == 2
    assert len(calls) == 2, len(calls)  # (the repeats of a batch id return the stored output: no call)
    loops = Coll(("src", "dst"), [u for u in edges.updates if u[0][0] != u[0][1]])
    want = expected(lambda c: ref_bfs(loops, c["roots"], lat), inputs, steps[-1][0], lat)
    assert want, "the graph should give some answer"
    assert_updates_equal(consolidate(got), want)


def test_a_loop_query_recorded_once_refuses_what_it_cannot_keep(spark) -> None:
    """:func:`~spark_differential.incremental.loop_query.record_loop_query` records only a query
    that is one loop returned as it is, over the inputs alone (else the view calls its query at
    every update, as before): each refusal says why."""
    from spark_differential.core.lattice import Total as LTotal
    from spark_differential.incremental.loop_query import record_loop_query
    from spark_differential.intask.relation import Untranslatable

    schemas = {"roots": spark.createDataFrame([], "node long, time long, diff long").schema,
               "edges": spark.createDataFrame([], "src long, dst long, time long, diff long").schema}
    other = spark.createDataFrame(pd.DataFrame({"src": [0], "dst": [5], "time": [0], "diff": [1]}))
    lq = record_loop_query(spark, bfs_view, schemas, LTotal())
    assert [n for n in lq.names] == ["roots", "edges"] and len(lq.sources) == len(lq.program.sources) == 2
    assert lq.operator.op == "dd_iterate"
    for query, why in [(near_view, "does more than return its dd_iterate's change"),
                       (lambda roots, edges: roots, "runs no dd_iterate"),
                       (lambda roots, edges: bfs_view(roots, edges.dd_distinct()), "calls dd_distinct outside"),
                       (lambda roots, edges: bfs_view(roots, other), "reads a DataFrame from outside")]:
        with pytest.raises(Untranslatable, match=why):
            record_loop_query(spark, query, schemas, LTotal())


@pytest.mark.parametrize("keys", [[3, 1, 2, 1, 3, 2], ["c", "a", "b", "a", "c", "b"]])
def test_stored_rows_as_of_an_iteration(keys: list) -> None:
    """A view loop's stored rows of one step input (``_Stored``, no Spark): the rows of ``O_i``
    whose key some new row has are the stored rows of those keys whose iteration is at most
    ``i``, in the kernel's columns (``_new`` false), whether the keys sort into one int64
    (binary search) or not (strings: a join)."""
    from spark_differential.incremental.loop import IT, _Stored

    key_type = pa.int64() if isinstance(keys[0], int) else pa.string()
    schema = pa.schema([("_k0", key_type), ("_t0", pa.int64()), ("_d", pa.int64()), ("_new", pa.bool_())])
    rows = pa.table({"_k0": pa.array(keys, key_type), "_t0": [0, 1, 2, 3, 4, 5], "_d": [1, -1, 1, 2, 1, 1],
                     IT: [0, 2, 1, 0, 3, 2]})
    stored = _Stored(rows, ("_k0",), schema)
    assert (stored.sorted is not None) == (key_type == pa.int64())
    new = [pa.table({"_k0": pa.array([keys[1], keys[0], keys[1]], key_type)})]
    for i, want in [(0, {(keys[0], 0, 1), (keys[1], 3, 2)}), (2, {(keys[0], 0, 1), (keys[1], 3, 2), (keys[1], 1, -1)}),
                    (3, {(keys[0], 0, 1), (keys[1], 3, 2), (keys[1], 1, -1), (keys[0], 4, 1)})]:
        got = stored.touching(*_Stored.keys(new, ("_k0",)), i)
        assert got.schema == schema
        assert {(r["_k0"], r["_t0"], r["_d"]) for r in got.to_pylist()} == want, i
        assert not any(got.column("_new").to_pylist())
    assert stored.touching(*_Stored.keys([pa.table({"_k0": pa.array([], key_type)})], ("_k0",)), 3).num_rows == 0


def test_version_output_returns_the_past_and_holds_the_future() -> None:
    """``version_output`` (no Spark): a loop's change and the output held back before,
    consolidated together, split at the new frontier."""
    out = pa.table({"node": [1, 2, 3], "_sd_t0": [0, 4, 6], "diff": [1, 1, 1]})
    pending = pa.table({"node": [2, 3], "_sd_t0": [4, 7], "diff": [-1, 1]})
    returned, kept = view_loop.version_output(out, pending, L.Total(), [(5,)], 1)
    assert sorted(returned.to_pylist(), key=str) == [{"node": 1, "_sd_t0": 0, "diff": 1}]
    assert sorted(kept.to_pylist(), key=lambda r: r["_sd_t0"]) == [{"node": 3, "_sd_t0": 6, "diff": 1},
                                                                   {"node": 3, "_sd_t0": 7, "diff": 1}]


def test_a_loop_past_max_iterations_raises(recorded) -> None:
    """``max_iterations`` counts a view's loop as the one-shot loop: a chain of 5 edges needs 5
    iterations, so 2 raise :class:`IterationLimitExceeded` (inside the task: the update fails and
    commits nothing)."""
    from spark_differential.errors import IterationLimitExceeded

    lat, lib = LATS["int"]
    program, kinds = recorded[("int", "bfs")]
    new = {"roots": [((0,), 0, 1)], "edges": [((i, i + 1), 0, 1) for i in range(5)]}
    sources = [arrow(cols, new[k], lat, "bfs", k) for cols, k in zip(program.sources, kinds)]
    state = [sp.schema.empty_table() for sp in view_loop.specs(program)]
    out, _, _ = view_loop.loop_update(dataclasses.replace(program, max_iterations=7), sources, state, lib, [(1,)])
    assert sorted(as_updates(out, lat, 1)) == [((i, i), 0, 1) for i in range(6)]
    with pytest.raises(IterationLimitExceeded, match="max_iterations=2"):
        view_loop.loop_update(dataclasses.replace(program, max_iterations=2), sources, state, lib, [(1,)])
