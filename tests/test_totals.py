"""The count/sum kernel of incremental views (``kernels/totals.py``) against the oracle, without Spark.

On ``(data, time, diff)``: a stage-2 view keeps, per ``dd_count``/``dd_sum``, the trace of
its input rows and the trace of per-key totals ``(count, sum, non-null count)``, both
advanced to the frontier at every step.  Each step hands the kernel the new updates, the
trace rows of the rows ``(key, data)`` they touch and the totals trace rows of the keys they
touch.  Simulated here over random inputs split at random into steps (updates at times in
the future of the previous frontier, some early), integer and product times, negative
multiplicities and null values included: the kernel's output changes of all steps add up
to the oracle's one-shot output, row for row.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from kernel_support import kernel_table, lib_type, to_leaves, updates_of
from oracle import Coll, Product, Total, antichain, assert_updates_equal, consolidate, random_coll, ref_count, ref_sum

from spark_differential.kernels import totals as K
from spark_differential.kernels.reduce import ReduceParams

LATS = {"int": Total(), "product2": Product([Total(), Total()])}


def _paths(monkeypatch: pytest.MonkeyPatch, sql: bool) -> dict[str, int]:
    """Counts the numpy path's answers (``sql``: the numpy path declines, so the DuckDB queries answer)."""
    taken = {"numpy": 0}
    for name in ("_changes_numpy", "_output_numpy"):
        real = getattr(K, name)

        def spy(*args: Any, real: Any = real) -> Any:
            got = None if sql else real(*args)
            taken["numpy"] += got is not None
            return got

        monkeypatch.setattr(K, name, spy)
    return taken


def frontiers(rng: random.Random, lat: Any, steps: int, hi: int) -> list[list]:
    out, prev = [], None
    for _ in range(steps):
        if isinstance(lat, Total):
            prev = [rng.randint(0 if prev is None else prev[0], hi)]
        else:
            picks = [lat.random(rng, 0, hi) for _ in range(rng.randint(1, 2))]
            prev = antichain(picks if prev is None else [lat.join(a, f) for a in picks for f in prev], lat)
        out.append(prev)
    return out


def in_future(lat: Any, front: list, t: Any) -> bool:
    return any(lat.leq(f, t) for f in front)


@pytest.mark.parametrize("agg", ["count", "sum"])
@pytest.mark.parametrize("name,path", [("int", "numpy"), ("int", "sql"), ("product2", "")])
@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_steps_add_up_to_the_one_shot_output(monkeypatch, agg: str, name: str, path: str, keyed: bool,
                                             seed: int) -> None:
    """Integer times by the numpy path and by the DuckDB queries; product times by the lub closure."""
    taken = _paths(monkeypatch, sql=path == "sql")
    lat = LATS[name]
    rng = random.Random(seed * 7 + len(name) + keyed)
    coll = random_coll(rng, ["k", "x", "y"], rng.randint(5, 40), lat, value_range=3, time_range=(0, 5))
    # some null values (dd_sum ignores them; a key whose values are all null sums to null)
    ups = [((k, None if rng.random() < 0.15 else x, y), t, r) for (k, x, y), t, r in coll.updates]
    coll = Coll(("k", "x", "y"), ups)
    keys, data = (["k"], ["x", "y"]) if keyed else ([], ["x", "k", "y"])
    p = ReduceParams(nkeys=len(keys), ndata=len(data), ttype=lib_type(lat), agg=agg, out_types=(pa.int64(),))
    fronts = frontiers(rng, lat, rng.randint(1, 4), 6)
    plan: list[list] = [[] for _ in fronts]
    for u in coll.updates:
        allowed = [0] + [i for i in range(1, len(fronts)) if in_future(lat, fronts[i - 1], u[1])]
        plan[rng.choice(allowed)].append(u)

    rows_trace: list = []  # (data, time, diff) of the operator's input, advanced
    totals_trace: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])  # (key, time) -> totals, advanced
    got: list = []
    for front, new in zip(fronts, plan):
        idx = {c: i for i, c in enumerate(coll.cols)}
        touched_rows = {tuple(d) for d, _, _ in new}
        touched_keys = {tuple(d[idx[c]] for c in keys) for d, _, _ in new}
        old = [u for u in rows_trace if tuple(u[0]) in touched_rows]
        table = kernel_table(Coll(coll.cols, old + new), lat, keys=keys, data=data,
                             new=[False] * len(old) + [True] * len(new))
        totals_rows = [(k, t, v) for (k, t), v in totals_trace.items() if k in touched_keys]
        w = len(to_leaves(lat, fronts[0][0]))
        old_totals = pa.table(
            {**{f"_k{j}": pa.array([k[j] for k, _, _ in totals_rows], pa.int64()) for j in range(len(keys))},
             **{f"_t{j}": pa.array([to_leaves(lat, t)[j] for _, t, _ in totals_rows], pa.int64()) for j in range(w)},
             **{c: pa.array([v[i] for _, _, v in totals_rows], pa.int64()) for i, c in enumerate(K.TOTALS)}}
        )
        out = K.totals(p, table, old_totals)
        tag = out.column(K.TAG).to_pylist()
        changes = out.filter(pa.array([x == 0 for x in tag], pa.bool_()))
        got += updates_of(changes, [*[f"_k{j}" for j in range(len(keys))], "_o0"], lat)
        deltas = out.filter(pa.array([x == 1 for x in tag], pa.bool_()))
        deltas = deltas.set_column(deltas.schema.get_field_index("_d"), "_d", pa.array([1] * deltas.num_rows, pa.int64()))
        for (*key, cn, cs, cnn), t, _ in updates_of(deltas, [*[f"_k{j}" for j in range(len(keys))], *K.TOTALS], lat):
            acc = totals_trace[(tuple(key), t)]
            for i, v in enumerate((cn, cs, cnn)):
                acc[i] += v
        # the traces take the new updates and are advanced to the new frontier (seed 004)
        rows_trace = consolidate((d, lat.advance(t, front), r) for d, t, r in rows_trace + new)
        moved: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        for (k, t), v in totals_trace.items():
            acc = moved[(k, lat.advance(t, front))]
            for i in range(3):
                acc[i] += v[i]
        totals_trace = defaultdict(lambda: [0, 0, 0], {kt: v for kt, v in moved.items() if any(v)})
    want = ref_count(coll, keys, lat) if agg == "count" else ref_sum(coll, keys, "x", lat)
    assert_updates_equal(consolidate(got), want.updates)
    if path:  # the path asked for was the one taken
        assert taken["numpy"] > 0 if path == "numpy" else taken["numpy"] == 0, taken
    # the totals trace is small: at most one row per key and distinct advanced time
    assert len(totals_trace) <= len({(tuple(d[idx[c]] for c in keys), t) for d, t, _ in rows_trace}) + 1


def _consolidated(table: pa.Table, value_cols: list[str]) -> list[tuple]:
    """The rows of ``table`` as sorted tuples, rows equal but for ``value_cols`` summed (zero sums dropped)."""
    keys_ = [c for c in table.column_names if c not in value_cols]
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0] * len(value_cols))
    for r in table.to_pylist():
        for i, c in enumerate(value_cols):
            acc[tuple(r[k] for k in keys_)][i] += int(r[c])
    return sorted(((*k, *v) for k, v in acc.items() if any(v)), key=repr)


@pytest.mark.parametrize("agg", ["count", "sum"])
@pytest.mark.parametrize("seed", range(30))
def test_the_numpy_path_answers_as_the_sql(agg: str, seed: int) -> None:
    """Both steps of a totally ordered count or sum, numpy against DuckDB, on random string
    and integer keys with nulls, null values, multiplicities of any sign, several rows of a
    ``(key, data, time)``, and old totals of any sign: the same rows."""
    rng = random.Random(seed)
    n, keyed = rng.randint(0, 40), seed % 5 != 0
    key = lambda: None if rng.random() < 0.1 else rng.choice(["a", "b", "c", ""])  # noqa: E731
    val = lambda: None if rng.random() < 0.2 else rng.randint(-3, 3)  # noqa: E731
    cols = {"_k0": [key() for _ in range(n)], "_k1": [rng.randint(0, 2) for _ in range(n)],
            "_a0": [val() for _ in range(n)], "_a1": [rng.choice(["x", "y"]) for _ in range(n)],
            "_t0": [rng.randint(0, 4) for _ in range(n)], "_d": [rng.choice([-2, -1, 1, 1, 2, 3]) for _ in range(n)],
            "_new": [rng.random() < 0.5 for _ in range(n)]}
    if not keyed:
        del cols["_k0"], cols["_k1"]
    rows = pa.table(cols, schema=pa.schema([f for f in [
        pa.field("_k0", pa.string()), pa.field("_k1", pa.int64()), pa.field("_a0", pa.int64()), pa.field("_a1", pa.string()),
        pa.field("_t0", pa.int64()), pa.field("_d", pa.int64()), pa.field("_new", pa.bool_())] if f.name in cols]))
    p = ReduceParams(nkeys=2 if keyed else 0, ndata=2, ttype=lib_type(Total()), agg=agg, out_types=(pa.int64(),))
    delta = K._changes_numpy(p, rows)
    assert delta is not None
    assert _consolidated(delta, list(K.TOTALS)) == _consolidated(K._changes_sql(p, rows), list(K.TOTALS))
    if delta.num_rows == 0:
        return
    m = rng.randint(0, 12)  # old totals of the same keys (any values: the function is checked, not the trace)
    old_cols = {c: delta.column(c).to_pylist() * 3 for c in delta.column_names if c not in K.TOTALS}
    old = pa.table({**{c: pa.array(v[:m], delta.schema.field(c).type) for c, v in old_cols.items()},
                    **{c: pa.array([rng.randint(-2, 3) for _ in range(min(m, len(old_cols["_t0"])))], pa.int64())
                       for c in K.TOTALS}})
    old = old.set_column(old.schema.get_field_index("_t0"), "_t0",
                         pa.array([rng.randint(0, 4) for _ in range(old.num_rows)], pa.int64()))
    delta = delta.cast(pa.schema([delta.schema.field(c) for c in delta.column_names]))
    got = K._output_numpy(p, delta, old)
    assert got is not None
    assert _consolidated(got, ["_d"]) == _consolidated(K._output_sql(p, delta, old), ["_d"])


def test_the_numpy_path_declines_what_it_cannot_answer_as_the_sql() -> None:
    """Floating-point data (SQL groups ``-0.0`` with ``0.0``), a sum over decimals, and
    multiplicities whose sums might leave int64 go to DuckDB."""
    rows = pa.table({"_k0": [1, 1], "_a0": [0.0, -0.0], "_t0": [0, 1], "_d": [1, -1], "_new": [True, True]})
    count = ReduceParams(nkeys=1, ndata=1, ttype=lib_type(Total()), agg="count", out_types=(pa.int64(),))
    assert K._changes_numpy(count, rows) is None
    # 0.0 and -0.0 are one row (counted at time 0, gone at 1); two rows would count 1 at time 0 and stay
    assert _consolidated(K.changes_total(count, rows), list(K.TOTALS)) == [(1, 0, 1, 0, 0), (1, 1, -1, 0, 0)]
    dec = ReduceParams(nkeys=1, ndata=1, ttype=lib_type(Total()), agg="sum", out_types=(pa.decimal128(10, 2),))
    assert K._changes_numpy(dec, rows.set_column(1, "_a0", pa.array([1, 2], pa.int64()))) is None
    big = rows.set_column(1, "_a0", pa.array([1, 2], pa.int64())).set_column(3, "_d", pa.array([2**62, 1], pa.int64()))
    assert K._changes_numpy(count, big) is None
