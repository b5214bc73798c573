"""Kernel-level tests against the oracle, without Spark.

The kernels (``spark_differential.kernels``) are plain functions over Arrow tables
in positional internal names.  Each test builds those tables from random oracle
collections (tests/kernel_support.py), calls the kernel directly and compares the
rows with the brute-force oracle (tests/oracle.py), exactly (consolidated form).

Inside an iteration a kernel sees old updates (its trace, ``_new = False``) and
new ones (``_new = True``) and must return ``F(old + new) − F(old)``; for the
bilinear join that is ``(A_old + ΔA) ⋈ (B_old + ΔB) − A_old ⋈ B_old``.  The
``in_loop`` draws check that against the oracle evaluated on both and subtracted.

Covered: consolidate (random frontiers), join / semijoin / antijoin, as-of join
(inner / left / strict), reduce count / sum / min / max / user func, threshold /
distinct, for integer, 2- and 3-field product, nested product, AltNeu(int) and
AltNeu(product) times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_support import LATTICES, difference, kernel_table, lib_type, split, to_leaves, updates_of
from oracle import (
    Coll,
    assert_updates_equal,
    ref_antijoin,
    ref_asof_join,
    ref_consolidate,
    ref_count,
    ref_distinct,
    ref_from_upsert_log,
    ref_join,
    ref_max,
    ref_min,
    ref_reduce,
    ref_semijoin,
    ref_sum,
    ref_threshold,
    st_coll,
    st_frontier,
)

from spark_differential.kernels import asof as kasof
from spark_differential.kernels import consolidate as kcons
from spark_differential.kernels import extremum as kextremum
from spark_differential.kernels import gather as kgather
from spark_differential.kernels import join as kjoin
from spark_differential.kernels import packed as kpacked
from spark_differential.kernels import reduce as kreduce
from spark_differential.kernels import stab as kstab

NAMES = list(LATTICES)
# SD_HYPOTHESIS_EXAMPLES=500 for a deeper (slower) search
SETTINGS = settings(max_examples=int(os.environ.get("SD_HYPOTHESIS_EXAMPLES", "30")), deadline=None)
TIMES = (0, 4)


def _coll(data: st.DataObject, cols: tuple[str, ...], lat: Any, max_size: int = 10, nulls: bool = False) -> Coll:
    c = data.draw(st_coll(cols, lat, max_size=max_size, time_range=TIMES))
    if nulls:  # value 0 of the last column becomes a null
        c = Coll(c.cols, [((*d[:-1], None if d[-1] == 0 else d[-1]), t, r) for d, t, r in c.updates])
    return c


def _loop_input(data: st.DataObject, c: Coll, in_loop: bool) -> tuple[Coll, list[bool]]:
    """``c`` with ``_new`` flags: all new outside a loop; inside, random flags, and some
    updates repeated with the other flag so that old and new share ``(data, time)``."""
    n = len(c.updates)
    if not in_loop:
        return c, [True] * n
    flags = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if n:
        again = data.draw(st.lists(st.integers(0, n - 1), max_size=3))
        diffs = data.draw(st.lists(st.sampled_from([-1, 1, 2]), min_size=len(again), max_size=len(again)))
        c = Coll(c.cols, [*c.updates, *[(c.updates[i][0], c.updates[i][1], r) for i, r in zip(again, diffs)]])
        flags = [*flags, *[not flags[i] for i in again]]
    return c, flags


def _reference(ref: Any, colls: list[Coll], flags: list[list[bool]], in_loop: bool) -> Coll:
    """``ref(*colls)``, or inside a loop ``ref(*colls) − ref(*old parts)``."""
    full = ref(*colls)
    if not in_loop:
        return full
    old = [split(c, f)[0] for c, f in zip(colls, flags)]
    return difference(full, ref(*old))


# ---------------------------------------------------------------------------------
# consolidate


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_consolidate(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    c = _coll(data, ("x", "y"), lat, max_size=14)
    fr = data.draw(st.none() | st_frontier(lat, *TIMES))
    params = kcons.ConsolidateParams(2, lib_type(lat), None if fr is None else tuple(to_leaves(lat, f) for f in fr))
    out = kcons.consolidate(params, kernel_table(c, lat))
    assert_updates_equal(updates_of(out, ["_a0", "_a1"], lat), ref_consolidate(c, lat, fr).updates)


# ---------------------------------------------------------------------------------
# joins


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_join_modes(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    mode = data.draw(st.sampled_from(["join", "semijoin", "antijoin"]))
    two_keys = data.draw(st.booleans())
    in_loop = data.draw(st.booleans())
    on = ["k", "j"] if two_keys else ["k"]
    a, fa = _loop_input(data, _coll(data, (*on, "x"), lat), in_loop)
    b, fb = _loop_input(data, _coll(data, (*on, "y"), lat), in_loop)
    A = kernel_table(a, lat, on, new=fa)
    b_data = ["y"] if mode == "join" else []
    B = kernel_table(b, lat, on, data=b_data, prefix="_b", new=fb)
    p = kjoin.JoinParams(len(on), 1, len(b_data), lib_type(lat), mode)
    out = kjoin.join(p, A, B)
    keys = [f"_k{i}" for i in range(len(on))]
    if mode == "join":
        got = updates_of(out, [*keys, "_a0", "_b0"], lat)
        expected = _reference(lambda x, y: ref_join(x, y, on, lat), [a, b], [fa, fb], in_loop)
    else:
        got = updates_of(out, [*keys, "_a0"], lat)
        ref = ref_semijoin if mode == "semijoin" else ref_antijoin
        expected = _reference(lambda x, y: ref(x, y, on, lat), [a, b], [fa, fb], in_loop)
    assert_updates_equal(got, expected.updates)


@SETTINGS
@given(data=st.data())
def test_join_of_times_apart_is_one_plain_join(data: st.DataObject) -> None:
    """A totally ordered join whose sides' times do not interleave (every time of one side at
    most, or before, every time of the other: a view's new updates against its advanced trace)
    takes ``_crossed``'s plain join, and still equals the oracle, in and out of a loop."""
    lat = LATTICES["int"]
    in_loop = data.draw(st.booleans())
    split_at = data.draw(st.integers(0, 4))
    low, high = (0, split_at), (split_at, 4)
    a_low = data.draw(st.booleans())
    a, fa = _loop_input(data, data.draw(st_coll(("k", "x"), lat, max_size=10, time_range=low if a_low else high)),
                        in_loop)
    b, fb = _loop_input(data, data.draw(st_coll(("k", "y"), lat, max_size=10, time_range=high if a_low else low)),
                        in_loop)
    A, B = kernel_table(a, lat, ["k"], new=fa), kernel_table(b, lat, ["k"], data=["y"], prefix="_b", new=fb)
    if A.num_rows and B.num_rows and not (a_low and min(t for _, t, _ in b.updates) == split_at ==
                                          max(t for _, t, _ in a.updates)):
        assert kjoin._crossed(A, B, 1, ["_a0"], ["_b0"], 1) is not None
    out = kjoin.join(kjoin.JoinParams(1, 1, 1, lib_type(lat)), A, B)
    expected = _reference(lambda x, y: ref_join(x, y, ["k"], lat), [a, b], [fa, fb], in_loop)
    assert_updates_equal(updates_of(out, ["_k0", "_a0", "_b0"], lat), expected.updates)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_asof_join(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    strict = data.draw(st.booleans())
    left = data.draw(st.booleans())
    in_loop = not left and data.draw(st.booleans())  # how="left" is not offered inside loops
    orders, fa = _loop_input(data, _coll(data, ("k", "x"), lat), in_loop)
    prices, fb = _loop_input(data, _coll(data, ("k", "y", "z"), lat), in_loop)
    A = kernel_table(orders, lat, ["k"], new=fa)
    B = kernel_table(prices, lat, ["k"], prefix="_b", new=fb)
    p = kjoin.JoinParams(1, 1, 2, lib_type(lat), "asof", strict=strict, left=left)
    out = kjoin.join(p, A, B)
    how = "left" if left else "inner"
    expected = _reference(
        lambda o, q: ref_asof_join(o, q, "k", lat, strict=strict, how=how), [orders, prices], [fa, fb], in_loop
    )
    assert_updates_equal(updates_of(out, ["_k0", "_a0", "_b0", "_b1"], lat), expected.updates)


@pytest.mark.parametrize("name", ["int", "product2", "altneu"])
@SETTINGS
@given(data=st.data())
def test_asof_join_without_keys(name: str, data: st.DataObject) -> None:
    """``nkeys=0`` (``dd_asof_join(on=[])``): every order meets all of B, one global timeline."""
    lat = LATTICES[name]
    strict, left = data.draw(st.booleans()), data.draw(st.booleans())
    in_loop = not left and data.draw(st.booleans())
    orders, fa = _loop_input(data, _coll(data, ("x",), lat), in_loop)
    prices, fb = _loop_input(data, _coll(data, ("y", "z"), lat), in_loop)
    A = kernel_table(orders, lat, [], new=fa)
    B = kernel_table(prices, lat, [], prefix="_b", new=fb)
    out = kjoin.join(kjoin.JoinParams(0, 1, 2, lib_type(lat), "asof", strict=strict, left=left), A, B)
    how = "left" if left else "inner"
    expected = _reference(lambda o, q: ref_asof_join(o, q, [], lat, strict=strict, how=how), [orders, prices], [fa, fb], in_loop)
    assert_updates_equal(updates_of(out, ["_a0", "_b0", "_b1"], lat), expected.updates)


@pytest.mark.parametrize("name", ["int", "product2", "altneu_product2"])
def test_asof_join_in_loop_shared_rows(name: str) -> None:
    """An order update that is both in the trace and new (same data and time) counts once per copy."""
    lat = LATTICES[name]
    t0, t1 = lat.grid(0, 1)[0], lat.grid(0, 1)[-1]
    orders = Coll(("k", "x"), [((1, 10), t1, 1), ((1, 10), t1, 1)])
    prices = Coll(("k", "y"), [((1, 3), t0, 1), ((1, 4), t1, 1), ((1, 4), t1, 1)])
    fa, fb = [False, True], [False, False, True]
    A = kernel_table(orders, lat, ["k"], new=fa)
    B = kernel_table(prices, lat, ["k"], prefix="_b", new=fb)
    out = kjoin.join(kjoin.JoinParams(1, 1, 1, lib_type(lat), "asof"), A, B)
    ref = lambda o, q: ref_asof_join(o, q, "k", lat)  # noqa: E731
    expected = _reference(ref, [orders, prices], [fa, fb], True)
    # by hand: ΔA ⋈ B_all + A_old ⋈ ΔB = (3 + 2·4) + 4
    assert sorted(expected.updates) == [((1, 10, 3), t1, 1), ((1, 10, 4), t1, 3)]
    assert_updates_equal(updates_of(out, ["_k0", "_a0", "_b0"], lat), expected.updates)


def test_asof_join_by_hand() -> None:
    """Prices change at 2 (3 -> 4); orders at 1, 2 and 3, one retracted later."""
    lat = LATTICES["int"]
    orders = Coll(("k", "x"), [((1, 10), 1, 1), ((1, 11), 2, 1), ((1, 12), 3, 2), ((2, 13), 3, 1)])
    prices = Coll(("k", "y"), [((1, 3), 0, 1), ((1, 3), 2, -1), ((1, 4), 2, 1)])
    A, B = kernel_table(orders, lat, ["k"]), kernel_table(prices, lat, ["k"], prefix="_b")
    tt = lib_type(lat)
    got = updates_of(kjoin.join(kjoin.JoinParams(1, 1, 1, tt, "asof"), A, B), ["_k0", "_a0", "_b0"], lat)
    assert_updates_equal(got, [((1, 10, 3), 1, 1), ((1, 11, 4), 2, 1), ((1, 12, 4), 3, 2)])
    got = updates_of(kjoin.join(kjoin.JoinParams(1, 1, 1, tt, "asof", strict=True), A, B), ["_k0", "_a0", "_b0"], lat)
    assert_updates_equal(got, [((1, 10, 3), 1, 1), ((1, 11, 3), 2, 1), ((1, 12, 4), 3, 2)])
    got = updates_of(kjoin.join(kjoin.JoinParams(1, 1, 1, tt, "asof", left=True), A, B), ["_k0", "_a0", "_b0"], lat)
    assert_updates_equal(got, [((1, 10, 3), 1, 1), ((1, 11, 4), 2, 1), ((1, 12, 4), 3, 2), ((2, 13, None), 3, 1)])


# ---------------------------------------------------------------------------------
# as-of join straight from an upsert log (what dd_asof_join reads for sd.from_upserts)


def _log_tables(
    orders: list[tuple[tuple, int, int]], log: list[tuple[tuple, tuple, int, bool]], nkeys: int, key_type: pa.DataType
) -> tuple[pa.Table, pa.Table]:
    """Kernel tables: orders ``(key..., x), t, r`` and log rows ``(key, (y,), t, deleted)``."""
    A = {f"_k{i}": pa.array([d[i] for d, _, _ in orders], key_type) for i in range(nkeys)}
    A["_a0"] = pa.array([d[nkeys] for d, _, _ in orders], pa.int64())
    A["_t0"] = pa.array([t for _, t, _ in orders], pa.int64())
    A["_d"] = pa.array([r for _, _, r in orders], pa.int64())
    H = {f"_k{i}": pa.array([k[i] for k, _, _, _ in log], key_type) for i in range(nkeys)}
    H["_b0"] = pa.array([v[0] for _, v, _, _ in log], pa.int64())
    H["_t0"] = pa.array([t for _, _, t, _ in log], pa.int64())
    H["_b1"] = pa.array([dl for *_, dl in log], pa.bool_())
    return pa.table(A), pa.table(H)


@SETTINGS
@given(data=st.data())
def test_asof_upserts_vs_oracle(data: st.DataObject) -> None:
    """Sorted lookup and DuckDB SQL against ref_asof_join over ref_from_upsert_log.

    Draws cover: no key column (one global timeline), one or two key columns, int
    or string keys, null order keys (left),
    logs with several rows at one (key, time) (the multiset case), deletions, orders
    that repeat or cancel (consolidation) and times spanning the whole int64 range
    (the rank-compressed packing).
    """
    nkeys = data.draw(st.sampled_from([0, 1, 2]))
    strs = data.draw(st.booleans())
    key_type = pa.string() if strs else pa.int64()
    key_vals = ["a", "b", "c"] if strs else [0, 1, 2]
    wide = data.draw(st.booleans())
    tv = st.sampled_from([-(2**62), -5, 0, 3, 2**62]) if wide else st.integers(0, 6)
    key = st.tuples(*[st.sampled_from(key_vals) for _ in range(nkeys)])
    log = data.draw(st.lists(st.tuples(key, st.tuples(st.integers(0, 3)), tv, st.booleans()), max_size=12))
    okey = st.tuples(*[st.sampled_from([*key_vals, None]) for _ in range(nkeys)])
    orders = data.draw(
        st.lists(st.tuples(okey.map(tuple), st.integers(0, 2), tv, st.integers(-2, 2)), min_size=1, max_size=12)
    )
    orders = [((*k, x), t, r) for k, x, t, r in orders]
    strict, left = data.draw(st.booleans()), data.draw(st.booleans())
    deletions = any(dl for *_, dl in log)
    p = kasof.UpsertAsofParams(nkeys, 1, 1, strict=strict, left=left, deleted=deletions)
    A, H = _log_tables(orders, log, nkeys, key_type)
    if not deletions:
        H = H.drop_columns(["_b1"])
    kcols = [f"k{i}" for i in range(nkeys)]
    prices = ref_from_upsert_log(log, (*kcols, "y"))
    lat = LATTICES["int"]
    if not left:  # the operator drops orders with null keys before the kernel on inner joins
        orders = [u for u in orders if None not in u[0][:nkeys]]
        A = kernel_cut(A, nkeys)
    expected = ref_asof_join(Coll((*kcols, "x"), orders), prices, kcols, lat, strict=strict, how="left" if left else "inner")
    cols = [*[f"_k{i}" for i in range(nkeys)], "_a0", "_b0"]
    got = kasof.asof_upserts(p, A, H)
    assert_updates_equal(updates_of(got, cols, lat), expected.updates)
    by_sql = kasof.duck.query(kasof._sql(p), {"A": A, "H": H})
    assert_updates_equal(updates_of(by_sql, cols, lat), expected.updates)


def kernel_cut(A: pa.Table, nkeys: int) -> pa.Table:
    """Rows of A whose keys are all non-null."""
    mask = None
    for i in range(nkeys):
        m = A.column(f"_k{i}").is_valid()
        mask = m if mask is None else pa.compute.and_(mask, m)
    return A if mask is None else A.filter(mask)


def test_asof_upserts_paths_by_hand() -> None:
    """Which path answers: one row per (key, time) sorts; a multiset moment goes to SQL."""
    orders = [((1, 10), 2, 1), ((1, 11), 5, 1), ((1, 11), 5, 1), ((2, 12), 5, 1), ((1, 13), 7, 1), ((1, 14), 7, -1)]
    log = [((1,), (3,), 1, False), ((1,), (4,), 5, False), ((2,), (9,), 6, False), ((1,), (0,), 7, True)]
    A, H = _log_tables(orders, log, 1, pa.int64())
    p = kasof.UpsertAsofParams(1, 1, 1, deleted=True)
    lat = LATTICES["int"]
    fast = kasof._by_sort(p, A, H)
    assert fast is not None
    # 11 twice at 5: consolidated to diff 2; the key deleted at 7: orders at 7 meet nothing
    assert_updates_equal(updates_of(fast, ["_k0", "_a0", "_b0"], lat), [((1, 10, 3), 2, 1), ((1, 11, 4), 5, 2)])
    strict = kasof.asof_upserts(kasof.UpsertAsofParams(1, 1, 1, strict=True, deleted=True), A, H)
    assert_updates_equal(updates_of(strict, ["_k0", "_a0", "_b0"], lat), [((1, 10, 3), 2, 1), ((1, 11, 3), 5, 2), ((1, 13, 4), 7, 1), ((1, 14, 4), 7, -1)])
    # a log row with a null key (the operator filters them; the kernel must not let one
    # hide key 0's own row at an earlier time)
    zero_orders = [((0, 20), 4, 1)]
    A0, H0 = _log_tables(zero_orders, [((0,), (8,), 1, False), ((None,), (9,), 3, False)], 1, pa.int64())
    for got in (kasof._by_sort(p, A0, H0), kasof.asof_upserts(kasof.UpsertAsofParams(1, 1, 1, deleted=True, left=True), A0, H0)):
        assert got is not None
        assert_updates_equal(updates_of(got, ["_k0", "_a0", "_b0"], lat), [((0, 20, 8), 4, 1)])
    multi = log + [((1,), (5,), 5, False), ((1,), (5,), 5, False)]
    A2, H2 = _log_tables(orders, multi, 1, pa.int64())
    assert kasof._by_sort(p, A2, H2) is None
    got = kasof.asof_upserts(p, A2, H2)
    assert_updates_equal(
        updates_of(got, ["_k0", "_a0", "_b0"], lat),
        [((1, 10, 3), 2, 1), ((1, 11, 4), 5, 2), ((1, 11, 5), 5, 4)],
    )


# ---------------------------------------------------------------------------------
# reductions


def _top2(key: tuple, rows: list) -> list:
    # rows: ((y, x), m) with m > 0
    return [((v,), 1) for v in sorted({d[1] for d, _ in rows}, reverse=True)[:2]]


def _lib_top2(g: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"x": sorted(set(g["x"]), reverse=True)[:2]}).assign(diff=1)


def _median(key: tuple, rows: list) -> list:
    vals = sorted(x for (_y, x), m in rows for _ in range(m))
    return [((vals[(len(vals) - 1) // 2], len(vals)), 2)]


def _lib_median(g: pd.DataFrame) -> pd.DataFrame:
    vals = sorted(v for v, m in zip(g["x"], g["diff"]) for _ in range(int(m)))
    return pd.DataFrame({"med": [vals[(len(vals) - 1) // 2]], "n": [len(vals)], "diff": [2]})


AGGS = ["count", "sum", "min", "max", "top2", "median"]


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_reduce(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    agg = data.draw(st.sampled_from(AGGS))
    in_loop = data.draw(st.booleans())
    nulls = agg in ("count", "sum", "min", "max") and data.draw(st.booleans())
    global_key = agg == "count" and data.draw(st.booleans())
    by = [] if global_key else ["k"]
    c, flags = _loop_input(data, _coll(data, ("k", "y", "x"), lat, max_size=12, nulls=nulls), in_loop)
    tt = lib_type(lat)
    # the value column goes first (as the operators arrange it)
    data_cols = ["x", "y"] if agg != "count" else [c_ for c_ in c.cols if c_ not in by]
    if global_key:
        data_cols = ["k", "y", "x"]
    X = kernel_table(c, lat, by, data=data_cols, new=flags)
    out_names: tuple[str, ...]
    func = None
    if agg == "count":
        out_names, ref = ("count",), lambda x: ref_count(x, by, lat)
    elif agg in ("sum", "min", "max"):
        out_names = ("x",)
        fn = {"sum": ref_sum, "min": ref_min, "max": ref_max}[agg]
        ref = lambda x: fn(x, by, "x", lat)  # noqa: E731
    elif agg == "top2":
        out_names, func = ("x",), _lib_top2
        ref = lambda x: ref_reduce(x, ["k"], _top2, lat, ["x"])  # noqa: E731
    else:
        out_names, func = ("med", "n"), _lib_median
        ref = lambda x: ref_reduce(x, ["k"], _median, lat, ["med", "n"])  # noqa: E731
    p = kreduce.ReduceParams(
        nkeys=len(by),
        ndata=len(data_cols),
        ttype=tt,
        agg="func" if func else agg,
        out_types=tuple(pa.int64() for _ in out_names),
        func=func,
        key_names=tuple(by),
        data_names=tuple(data_cols),
        out_names=out_names,
    )
    out = kreduce.reduce(p, X)
    keys = [f"_k{i}" for i in range(len(by))]
    got = updates_of(out, [*keys, *[f"_o{i}" for i in range(len(out_names))]], lat)
    expected = _reference(ref, [c], [flags], in_loop)
    assert_updates_equal(got, expected.updates)


def _rows(t: pa.Table) -> list[tuple]:
    return sorted(zip(*[t.column(c).to_pylist() for c in t.column_names]), key=repr)


@SETTINGS
@given(data=st.data())
def test_min_max_vectorised_matches_snapshot_path(data: st.DataObject) -> None:
    """dd_min/dd_max's compiled path (kernels.extremum) gives exactly the general snapshot
    path's rows on wider tables than the oracle draws: string and two-column keys with
    nulls, string or int values with nulls, a second data column, int and AltNeu times,
    old and new updates sharing rows."""
    n = data.draw(st.integers(0, 80))
    width = data.draw(st.sampled_from([1, 2]))
    strings = data.draw(st.booleans())
    draw = lambda s: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    vals = st.sampled_from(["a", "b", "ab", None]) if strings else st.one_of(st.none(), st.integers(-3, 3))
    cols: dict[str, Any] = {
        "_k0": pa.array(draw(st.sampled_from(["x", "y", None])), pa.string()),
        "_k1": pa.array(draw(st.integers(0, 2)), pa.int64()),
        "_a0": pa.array(draw(vals), pa.string() if strings else pa.int64()),
        "_a1": pa.array(draw(st.integers(0, 1)), pa.int64()),
    }
    for i in range(width):
        cols[f"_t{i}"] = pa.array(draw(st.integers(0, 5 if i == 0 else 1)), pa.int64())
    cols["_d"] = pa.array(draw(st.sampled_from([-2, -1, 1, 2])), pa.int64())
    cols["_new"] = pa.array(draw(st.booleans()), pa.bool_())
    X = pa.table(cols)
    agg = data.draw(st.sampled_from(["min", "max"]))
    out_type = X.schema.field("_a0").type
    ttype = lib_type(LATTICES["int" if width == 1 else "altneu"])
    p = kreduce.ReduceParams(nkeys=2, ndata=2, ttype=ttype, agg=agg, out_types=(out_type,), op=f"dd_{agg}")
    fast = kextremum.min_max(2, 2, width, agg == "max", out_type, X)
    assert fast is not None
    slow = kreduce._reduce_total(p, X)
    assert _rows(fast) == _rows(slow.select(fast.column_names).cast(fast.schema))


def _consolidated_rows(t: pa.Table) -> list[tuple]:
    """Rows of ``t`` summed over every column but ``_d`` (zero sums dropped), sorted."""
    acc: dict[tuple, int] = {}
    cols = [c for c in t.column_names if c not in ("_d", "_new", kpacked.BLOB)]
    for row in zip(*[t.column(c).to_pylist() for c in [*cols, "_d"]]):
        acc[row[:-1]] = acc.get(row[:-1], 0) + row[-1]
    return sorted(((*k, v) for k, v in acc.items() if v), key=repr)


@pytest.mark.parametrize("name", ["int", "product2"])
@SETTINGS
@given(data=st.data())
def test_packed_trace_runs_the_kernel_as_rows(name: str, data: st.DataObject) -> None:
    """kernels.packed: the trace of earlier updates packed one blob per key, sent with the
    new updates, gives the reduction kernel's answer (against the oracle, F(all) − F(old))
    and returns every received key's trace with the new updates merged, consolidated;
    keys whose updates cancel come back with an empty blob.  With the trace in two
    batches (``_seq``), a key's newest blob replaces its older one: the older batch holds
    a stale trace (a random part of the true one) that must not be read."""
    lat = LATTICES[name]
    agg = data.draw(st.sampled_from(["min", "max", "count", "sum"]))
    c, flags = _loop_input(data, _coll(data, ("k", "x"), lat, max_size=14), True)
    tt = lib_type(lat)
    X = kernel_table(c, lat, ["k"], data=["x"], new=flags)
    p = kreduce.ReduceParams(nkeys=1, ndata=1, ttype=tt, agg=agg, out_types=(pa.int64(),), out_names=("x",))
    cols = ("_a0", *[f"_t{i}" for i in range(tt.width)], "_d")
    out_schema = pa.schema([pa.field("_k0", pa.int64()), pa.field("_o0", pa.int64()), *[pa.field(c, pa.int64()) for c in cols[1:]]])
    pp = kpacked.PackedParams(kreduce.reduce, p, 1, cols, out_schema)
    new = pc.equal(X.column("_new"), True)
    old, fresh = X.filter(pc.invert(new)), X.filter(new)
    batches = data.draw(st.booleans())
    schema = fresh.schema.append(pa.field(kpacked.BLOB, pa.binary()))
    if batches:
        schema = schema.append(pa.field(kpacked.SEQ, pa.int32()))

    def as_trace(key: pa.ChunkedArray | pa.Array, blobs: pa.ChunkedArray | pa.Array, seq: int | None = None) -> pa.Table:
        # what the loop sends for packed traces: keys and blob (and batch), every other column null
        n = len(key)
        cols = {"_k0": key, "_new": pa.array([False] * n), kpacked.BLOB: blobs, kpacked.SEQ: pa.array([seq] * n, pa.int32())}
        return pa.table([cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema], schema=schema)

    def packed_trace(rows: pa.Table, seq: int | None = None) -> pa.Table:
        key_rows, pieces = kpacked._pack(pp, rows)
        blobs = pa.chunked_array(pieces, pa.binary()) if pieces else pa.chunked_array([], pa.binary())
        return as_trace(key_rows.column("_k0"), blobs, seq)

    sent = [packed_trace(old, 1 if batches else None)]
    if batches:  # an older batch (listed after the newer one) with a stale trace of some keys
        stale = old.filter(pa.array(data.draw(st.lists(st.booleans(), min_size=old.num_rows, max_size=old.num_rows)), pa.bool_()))
        sent.append(packed_trace(stale, 0))
    fresh_side = fresh.append_column(kpacked.BLOB, pa.nulls(fresh.num_rows, pa.binary()))
    if batches:
        fresh_side = fresh_side.append_column(kpacked.SEQ, pa.nulls(fresh.num_rows, pa.int32()))
    out = kpacked.run(pp, pa.concat_tables([*sent, fresh_side]))
    got_rows = out.filter(pc.is_null(out.column(kpacked.BLOB))).drop_columns([kpacked.BLOB])
    if agg == "count":
        reference = lambda x: ref_count(x, ["k"], lat)  # noqa: E731
    else:
        fn = {"min": ref_min, "max": ref_max, "sum": ref_sum}[agg]
        reference = lambda x: fn(x, ["k"], "x", lat)  # noqa: E731
    expected = _reference(reference, [c], [flags], True)
    assert_updates_equal(updates_of(got_rows, ["_k0", "_o0"], lat), expected.updates)
    back = out.filter(pc.is_valid(out.column(kpacked.BLOB)))
    received = set(X.column("_k0").to_pylist())
    assert sorted(back.column("_k0").to_pylist()) == sorted(received)  # one blob per key received
    unpacked = kpacked._unpack(pp, as_trace(back.column("_k0"), back.column(kpacked.BLOB), 0 if batches else None))
    assert _consolidated_rows(unpacked) == _consolidated_rows(X.select(["_k0", *cols]))


@SETTINGS
@given(data=st.data())
def test_gather_keeps_every_row_of_every_key(data: st.DataObject) -> None:
    """kernels.gather: one row per distinct key (two key columns, nulls a key value like
    any other), holding exactly that key's rows, none summed or dropped."""
    n = data.draw(st.integers(0, 25))
    draw = lambda s: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    X = pa.table({
        "_k0": pa.array(draw(st.sampled_from([0, 1, 2])), pa.int64()),
        "_k1": pa.array(draw(st.sampled_from(["x", "y", None])), pa.string()),
        "_b0": pa.array(draw(st.sampled_from([5, 6, None])), pa.int64()),
        "_t0": pa.array(draw(st.integers(0, 4)), pa.int64()),
        "_d": pa.array(draw(st.sampled_from([-1, 1, 1])), pa.int64()),
    })
    item = pa.struct([("_b0", pa.int64()), ("_t0", pa.int64()), ("_d", pa.int64())])
    schema = pa.schema([pa.field("_k0", pa.int64()), pa.field("_k1", pa.string()), pa.field(kgather.ROWS, pa.list_(item))])
    out = kgather.gather(kgather.GatherParams(("_k0", "_k1"), schema), X)
    assert out.schema == schema
    got = [((r["_k0"], r["_k1"]), sorted((tuple(x.values()) for x in r[kgather.ROWS]), key=repr)) for r in out.to_pylist()]
    expected: dict = {}
    for r in X.to_pylist():
        expected.setdefault((r["_k0"], r["_k1"]), []).append((r["_b0"], r["_t0"], r["_d"]))
    assert len(got) == len(expected)  # one row per key
    assert dict(got) == {k: sorted(v, key=repr) for k, v in expected.items()}


@SETTINGS
@given(data=st.data())
def test_stab_numbering_numpy_matches_sql(data: st.DataObject) -> None:
    """The stabbing join's numpy numbering (exact column types) consolidates like the SQL
    one and numbers keys alike on both sides: string and two-column keys with nulls."""
    def table(data_col: str) -> pa.Table:
        n = data.draw(st.integers(0, 30))
        draw = lambda s: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
        return pa.table({
            "_k0": pa.array(draw(st.sampled_from(["x", "y", None])), pa.string()),
            "_k1": pa.array(draw(st.sampled_from([0, 1, None])), pa.int64()),
            data_col: pa.array(draw(st.sampled_from(["a", "b", None])), pa.string()),
            "_t0": pa.array(draw(st.integers(0, 3)), pa.int64()),
            "_d": pa.array(draw(st.sampled_from([-1, 1, 2])), pa.int64()),
        })

    P, Q = table("_a0"), table("_b0")
    results = [f(P, Q, 2, ["_a0"], ["_b0"], 1) for f in (kstab._numbered_numpy, kstab._numbered_sql)]

    def described(pk: pa.Table, qk: pa.Table) -> tuple:
        p_rows, q_rows = pk.to_pylist(), qk.to_pylist()
        kid: dict = {}
        did: dict = {}
        for r in p_rows + q_rows:  # one id per key, shared by both sides; one per (key, data) of Q
            assert kid.setdefault((r["_k0"], r["_k1"]), r["_kid"]) == r["_kid"]
        for r in q_rows:
            assert did.setdefault((r["_k0"], r["_k1"], r["_b0"]), r["_did"]) == r["_did"]
        assert len(set(kid.values())) == len(kid) and len(set(did.values())) == len(did)
        strip = lambda rows, drop: sorted((tuple((c, v) for c, v in r.items() if c not in drop) for r in rows), key=repr)  # noqa: E731
        return strip(p_rows, ("_kid",)), strip(q_rows, ("_kid", "_did"))

    assert described(*results[0]) == described(*results[1])


@pytest.mark.parametrize("spread", [10, 1 << 15, 1 << 40])
def test_dense_ranks_packed_or_not(spread: int) -> None:
    """Ranks by counting (a packed key over a dense range), by sorting one packed int64
    key (a sparse range) and by lexsort (ranges too wide to pack) all follow the
    lexicographic order of the rows."""
    import numpy as np

    rng = np.random.default_rng(spread)
    cols = [rng.integers(-spread, spread, 200), rng.integers(0, 3, 200), rng.integers(-spread, spread, 200)]
    assert (kstab.packed(cols) is None) == (spread > 1 << 15)
    ranks, n = kstab.dense_ranks(cols)
    rows = list(zip(*[c.tolist() for c in cols]))
    expected = {r: i for i, r in enumerate(sorted(set(rows)))}
    assert n == len(expected) and ranks.tolist() == [expected[r] for r in rows]
    order = kstab.sort_order(cols)
    assert [rows[i] for i in order] == sorted(rows)


@pytest.mark.parametrize(("n", "n_major", "n_minor"), [(0, 1, 1), (1, 1, 1), (5000, 40, 3), (3000, 2000, 9000)])
def test_dense_order_sorts_stably_by_both_ids(n: int, n_major: int, n_minor: int) -> None:
    """Counting passes order rows by (major, minor) ids exactly as a stable lexicographic sort."""
    import numpy as np

    from spark_differential.kernels.order import dense_order

    rng = np.random.default_rng(n)
    major, minor = rng.integers(0, n_major, n), rng.integers(0, n_minor, n)
    assert dense_order(major, n_major, minor, n_minor).tolist() == np.lexsort((minor, major)).tolist()


def test_unique_sorted_matches_numpy() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    for values in (np.zeros(0, np.int64), rng.integers(-5, 5, 100), rng.integers(-(1 << 60), 1 << 60, 1000)):
        assert kstab.unique_sorted(values).tolist() == np.unique(values).tolist()


@pytest.mark.parametrize("kinds", [("int",), ("int", "int"), ("int_null", "int"), ("str", "int"), ("big", "int")])
def test_ids_equal_exactly_for_equal_rows(kinds: tuple[str, ...]) -> None:
    """Row ids (dictionary codes, ranked together when there are several columns) are
    equal exactly when the rows are equal (nulls equal to each other), within ``[0, n)``:
    integer, nullable, string and widely spread columns."""
    import numpy as np

    rng = np.random.default_rng(len(kinds))
    n = 300

    def column(kind: str) -> pa.Array:
        v = rng.integers(0, 6, n)
        if kind == "str":
            return pa.array([f"s{x}" for x in v])
        if kind == "big":
            return pa.array(v * (1 << 58) - (1 << 60), pa.int64())
        return pa.array([None if kind == "int_null" and x == 0 else int(x) for x in v], pa.int64())

    cols = [column(k) for k in kinds]
    got = kstab.ids(cols, n)
    rows = list(zip(*[c.to_pylist() for c in cols]))
    assert got.min() >= 0 and got.max() < n
    for i in range(n):
        for j in range(0, n, 7):
            assert (got[i] == got[j]) == (rows[i] == rows[j])


def test_min_max_vectorised_declines_float_columns() -> None:
    """Floating point columns (-0.0, NaN) are left to the general path."""
    X = pa.table({"_k0": [1, 1], "_a0": [0.0, -0.0], "_t0": [0, 1], "_d": [1, 1], "_new": [True, True]})
    assert kextremum.min_max(1, 1, 1, False, pa.float64(), X) is None


def _halve(m: int) -> int:
    return m // 2


def _lib_square_sign(m: int) -> int:
    return m * m if m > 0 else -1


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_threshold_distinct(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    which = data.draw(st.sampled_from(["distinct", "halve", "square_sign"]))
    in_loop = data.draw(st.booleans())
    c, flags = _loop_input(data, _coll(data, ("x", "y"), lat, max_size=12, nulls=data.draw(st.booleans())), in_loop)
    func = {"distinct": None, "halve": _halve, "square_sign": _lib_square_sign}[which]
    p = kreduce.ThresholdParams(2, lib_type(lat), func)
    out = kreduce.threshold(p, kernel_table(c, lat, new=flags))
    if func is None:
        ref = lambda x: ref_distinct(x, lat)  # noqa: E731
    else:
        ref = lambda x: ref_threshold(x, func, lat)  # noqa: E731
    expected = _reference(ref, [c], [flags], in_loop)
    assert_updates_equal(updates_of(out, ["_a0", "_a1"], lat), expected.updates)


def test_distinct_seed000_interesting_time() -> None:
    """(cat, (0,3)) and (cat, (1,2)): distinct must correct at (1,3)."""
    lat = LATTICES["product2"]
    c = Coll(("x",), [((7,), (0, 3), 1), ((7,), (1, 2), 1)])
    out = kreduce.threshold(kreduce.ThresholdParams(1, lib_type(lat)), kernel_table(c, lat))
    assert_updates_equal(updates_of(out, ["_a0"], lat), [((7,), (0, 3), 1), ((7,), (1, 2), 1), ((7,), (1, 3), -1)])


def test_sql_templates_found_beside_an_uninstalled_package(monkeypatch) -> None:
    """A source tree on ``sys.path`` that is not installed (an unpacked sdist whose Python
    workers start in its directory) has no ``spark_differential._sql``: the templates are
    read from ``sql/`` beside the package instead."""
    from importlib import resources

    from spark_differential.kernels import duck

    installed = duck._template_text("consolidate")

    def missing(name: str):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(resources, "files", missing)
    # the package as if imported from this tree (the checkout, or the unpacked sdist)
    root = Path(__file__).resolve().parent.parent
    monkeypatch.setattr(duck, "__file__", str(root / "spark_differential" / "kernels" / "duck.py"))
    beside = duck._template_text("consolidate")
    assert beside == installed and "$" in beside
    with pytest.raises(ModuleNotFoundError):
        duck._template_text("no_such_template")


@SETTINGS
@given(data=st.data())
def test_running_multiplicity_numpy_matches_sql(data: st.DataObject) -> None:
    """dd_threshold/dd_distinct's running multiplicities (``kreduce._running``) by one sort
    of packed integer columns give exactly ``sql/running.sql``'s rows; so does the whole
    threshold kernel (its one-sort path, ``_threshold_packed``), for distinct and other
    functions, old and new updates.  Columns with
    nulls, or too wide to pack, take the SQL in both runs."""
    n = data.draw(st.integers(0, 60))
    ndata = data.draw(st.integers(0, 3))
    width = data.draw(st.sampled_from([1, 2]))
    draw = lambda s: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    cols: dict[str, Any] = {}
    kinds = []
    for i in range(ndata):
        kind = data.draw(st.sampled_from(["int64", "int32", "bool", "wide", "nulls"]))
        kinds.append(kind)
        if kind == "bool":
            cols[f"_a{i}"] = pa.array(draw(st.booleans()), pa.bool_())
        elif kind == "wide":
            cols[f"_a{i}"] = pa.array(draw(st.integers(-(1 << 62), 1 << 62)), pa.int64())
        elif kind == "nulls":
            cols[f"_a{i}"] = pa.array(draw(st.one_of(st.none(), st.integers(-2, 2))), pa.int64())
        else:
            cols[f"_a{i}"] = pa.array(draw(st.integers(-3, 3)), pa.int64() if kind == "int64" else pa.int32())
    for i in range(width):
        cols[f"_t{i}"] = pa.array(draw(st.integers(0, 6 if i == 0 else 1)), pa.int64())
    cols["_d"] = pa.array(draw(st.sampled_from([-2, -1, 1, 2, 3])), pa.int64())
    cols["_new"] = pa.array(draw(st.booleans()), pa.bool_())
    X = pa.table(cols)
    a, t = [f"_a{i}" for i in range(ndata)], [f"_t{i}" for i in range(width)]

    def running_rows(r: pa.Table, c: Any, p: Any) -> list:
        return sorted(zip(*[r.column(x).to_pylist() for x in [*a, *t]], [int(v) for v in c], [int(v) for v in p]), key=repr)

    func = data.draw(st.sampled_from([None, _halve, _lib_square_sign]))
    params = kreduce.ThresholdParams(ndata, lib_type(LATTICES["int" if width == 1 else "altneu"]), func)
    if n and not {"wide", "nulls"} & set(kinds):  # the sort's path is taken
        assert kreduce.native.key_sorted(X.select([*a, *t, "_d"]), a, then=t) is not None
        # and the kernel's own one-sort path, where there is a data column
        assert (kreduce._threshold_packed(params, X) is not None) == bool(ndata)
    fast_running = running_rows(*kreduce._running(X, a, t))
    fast = kreduce.threshold(params, X)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kreduce.native, "key_sorted", lambda *args, **kw: None)
        m.setattr(kreduce, "_threshold_packed", lambda *args, **kw: None)
        slow_running = running_rows(*kreduce._running(X, a, t))
        slow = kreduce.threshold(params, X)
    assert fast_running == slow_running
    assert _rows(fast) == _rows(slow.cast(fast.schema))
