"""The join of new updates with a side that no longer changes (``kernels.fixed_join``).

Checked on random tables against the join's definition, pair by pair: every pair of
updates with equal keys at the later of their two times, the product of their
diffs, summed; and against the general stabbing join (``kernels.join.join``) the
in-task loop runs otherwise.  The tables are small and their keys, data and times
drawn from few values, so keys repeat, histories overlap and times tie.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_differential.core.lattice import Total
from spark_differential.kernels import fixed_join
from spark_differential.kernels.join import JoinParams, join


def summed(rows: Any) -> Counter:
    out: Counter = Counter()
    for *row, d in rows:
        out[tuple(row)] += d
    return Counter({k: v for k, v in out.items() if v})


@st.composite
def updates(draw: Any, prefix: str, nkeys: int, ndata: int, null_data: bool = False) -> pa.Table:
    n = draw(st.integers(0, 25))
    small = st.integers(-1, 3)
    cols: dict[str, pa.Array] = {}
    for i in range(nkeys):
        cols[f"_k{i}"] = pa.array(draw(st.lists(small, min_size=n, max_size=n)), pa.int64())
    for i in range(ndata):
        values = st.one_of(st.none(), st.integers(0, 3)) if null_data else st.integers(0, 3)
        cols[f"{prefix}{i}"] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), pa.int32())
    cols["_t0"] = pa.array(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), pa.int64())
    cols["_d"] = pa.array(draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)), pa.int64())
    return pa.table(cols)


def pairwise(new: pa.Table, fixed: pa.Table, nkeys: int, new_data: list[str], fixed_data: list[str],
             out: list[str]) -> Counter:
    k = [f"_k{i}" for i in range(nkeys)]
    rows = []
    for p in new.to_pylist():
        for s in fixed.to_pylist():
            if all(p[c] == s[c] for c in k):
                merged = {**s, **p, "_t0": max(p["_t0"], s["_t0"]), "_d": p["_d"] * s["_d"]}
                rows.append(tuple(merged[c] for c in out))
    return summed(rows)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), nkeys=st.integers(1, 2), fixed_is_b=st.booleans())
def test_join_fixed_is_the_pairwise_join(data: st.DataObject, nkeys: int, fixed_is_b: bool) -> None:
    """Either side may be the fixed one; the new side's data may hold nulls (equal to each
    other when grouped); keys of the new side may be missing from the fixed side."""
    na, nb = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    a = data.draw(updates("_a", nkeys, na, null_data=fixed_is_b))
    b = data.draw(updates("_b", nkeys, nb, null_data=not fixed_is_b))
    new, fixed = (a, b) if fixed_is_b else (b, a)
    new_data = [f"_a{i}" for i in range(na)] if fixed_is_b else [f"_b{i}" for i in range(nb)]
    fixed_data = [f"_b{i}" for i in range(nb)] if fixed_is_b else [f"_a{i}" for i in range(na)]
    key = [f"_k{i}" for i in range(nkeys)]
    out_cols = [*key, *[f"_a{i}" for i in range(na)], *[f"_b{i}" for i in range(nb)], "_t0", "_d"]
    prepared = fixed_join.prepare(fixed, key, fixed_data)
    want = pairwise(new, fixed, nkeys, new_data, fixed_data, out_cols)
    if prepared is None:  # nothing to prepare: a side that sums to nothing
        assert not summed(tuple(r.values()) for r in fixed.to_pylist())
        return
    got = fixed_join.join_fixed(prepared, new, new_data, out_cols)
    assert got is not None
    assert got.column_names == out_cols
    assert summed(tuple(r.values()) for r in got.to_pylist()) == want


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_join_fixed_equals_the_general_join(data: st.DataObject) -> None:
    """Against ``kernels.join.join`` with the fixed side as old updates (``_new`` false)."""
    a = data.draw(updates("_a", 1, 1))
    b = data.draw(updates("_b", 1, 1))
    p = JoinParams(1, 1, 1, Total(), consolidate=True)
    general = join(p, a.append_column("_new", pa.array([True] * a.num_rows)),
                   b.append_column("_new", pa.array([False] * b.num_rows)))
    out_cols = ["_k0", "_a0", "_b0", "_t0", "_d"]
    prepared = fixed_join.prepare(b, ["_k0"], ["_b0"])
    if prepared is None:
        assert not summed(tuple(r.values()) for r in b.to_pylist())
        return
    got = fixed_join.join_fixed(prepared, a, ["_a0"], out_cols)
    assert got is not None
    assert summed(tuple(r.values()) for r in got.to_pylist()) == summed(
        tuple(r[c] for c in out_cols) for r in general.to_pylist())


def test_a_quadratic_walk_is_left_to_the_general_join(monkeypatch: Any) -> None:
    """One key with long histories on both sides: the walk would pair them update by update."""
    n = 400
    fixed = pa.table({"_k0": [1] * n, "_b0": list(range(n)), "_t0": list(range(n)), "_d": [1] * n})
    new = pa.table({"_k0": [1] * n, "_a0": list(range(n)), "_t0": list(range(n)), "_d": [1] * n})
    prepared = fixed_join.prepare(fixed, ["_k0"], ["_b0"])
    assert prepared is not None
    monkeypatch.setattr(fixed_join, "WORK_SLACK", 0)
    assert fixed_join.join_fixed(prepared, new, ["_a0"], ["_k0", "_a0", "_b0", "_t0", "_d"]) is None
    monkeypatch.setattr(fixed_join, "WORK_SLACK", 10**9)  # allowed: then exact all the same
    got = fixed_join.join_fixed(prepared, new, ["_a0"], ["_k0", "_a0", "_b0", "_t0", "_d"])
    assert got is not None and sum(got.column("_d").to_pylist()) == n * n


def test_keys_that_do_not_pack_are_refused() -> None:
    fixed = pa.table({"_k0": [0, 1 << 62], "_k1": [0, 1 << 40], "_t0": [0, 1], "_d": [1, 1]})
    assert fixed_join.prepare(fixed, ["_k0", "_k1"], []) is None
