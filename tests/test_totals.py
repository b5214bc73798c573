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
@pytest.mark.parametrize("name", ["int", "product2"])
@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_steps_add_up_to_the_one_shot_output(agg: str, name: str, keyed: bool, seed: int) -> None:
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
    # the totals trace is small: at most one row per key and distinct advanced time
    assert len(totals_trace) <= len({(tuple(d[idx[c]] for c in keys), t) for d, t, _ in rows_trace}) + 1
