"""Tests of the brute-force oracle itself (pure Python, fast)."""

from __future__ import annotations

import datetime as dt
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:  # importmode=importlib etc.
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle import (  # noqa: E402
    AltNeu,
    Coll,
    Lattice,
    Product,
    Total,
    acc,
    antichain,
    assert_updates_equal,
    consolidate,
    is_consolidated,
    linear_extension,
    moebius,
    random_coll,
    ref_antijoin,
    ref_as_of,
    ref_asof_join,
    ref_bfs,
    ref_concat,
    ref_consolidate,
    ref_count,
    ref_differentiate,
    ref_distinct,
    ref_from_snapshots,
    ref_from_upserts,
    ref_integrate,
    ref_iterate,
    ref_join,
    ref_max,
    ref_min,
    ref_negate,
    ref_reachable,
    ref_reduce,
    ref_semijoin,
    ref_sum,
    ref_threshold,
    ref_triangles,
    sort_key,
    st_coll,
    st_frontier,
    st_time,
    times_closure,
)

FAST = settings(max_examples=30, deadline=None)

P2 = Product([Total(), Total()])
LATTICES: dict[str, Lattice] = {
    "total": Total(),
    "product2": P2,
    "product3": Product([Total(), Total(), Total()]),
    "product_nested": Product([P2, Total()]),
    "altneu_total": AltNeu(Total()),
    "altneu_product2": AltNeu(P2),
}
LAT_IDS = list(LATTICES)
HI = 3  # leaves of lattice-law test times lie in [0, HI]; the grid is a sublattice


# ---------------------------------------------------------------------------
# Lattice laws
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", LAT_IDS)
@FAST
@given(data=st.data())
def test_partial_order(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    a, b, c = (data.draw(st_time(lat, 0, HI)) for _ in range(3))
    assert lat.leq(a, a)
    if lat.leq(a, b) and lat.leq(b, a):
        assert a == b
    if lat.leq(a, b) and lat.leq(b, c):
        assert lat.leq(a, c)


@pytest.mark.parametrize("name", LAT_IDS)
@FAST
@given(data=st.data())
def test_join_is_lub_meet_is_glb(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    universe = lat.grid(0, HI)
    a, b = data.draw(st_time(lat, 0, HI)), data.draw(st_time(lat, 0, HI))
    j, m = lat.join(a, b), lat.meet(a, b)
    assert j in universe and m in universe
    assert lat.leq(a, j) and lat.leq(b, j)
    assert lat.leq(m, a) and lat.leq(m, b)
    for u in universe:
        if lat.leq(a, u) and lat.leq(b, u):
            assert lat.leq(j, u), (a, b, j, u)
        if lat.leq(u, a) and lat.leq(u, b):
            assert lat.leq(u, m), (a, b, m, u)
    # Consistency of leq with join / meet.
    assert lat.leq(a, b) == (j == b) == (m == a)


@pytest.mark.parametrize("name", LAT_IDS)
@FAST
@given(data=st.data())
def test_lattice_identities(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    a, b, c = (data.draw(st_time(lat, 0, HI)) for _ in range(3))
    assert lat.join(a, lat.meet(a, b)) == a
    assert lat.meet(a, lat.join(a, b)) == a
    assert lat.join(a, b) == lat.join(b, a)
    assert lat.meet(a, b) == lat.meet(b, a)
    assert lat.join(a, a) == a == lat.meet(a, a)
    assert lat.join(lat.join(a, b), c) == lat.join(a, lat.join(b, c))
    assert lat.meet(lat.meet(a, b), c) == lat.meet(a, lat.meet(b, c))


def test_altneu_order_by_hand() -> None:
    lat = AltNeu(Total())
    assert lat.leq((1, False), (1, True))
    assert not lat.leq((1, True), (1, False))
    assert lat.leq((1, True), (2, False))
    assert lat.join((1, True), (2, False)) == (2, False)
    assert lat.join((1, True), (1, False)) == (1, True)
    assert lat.meet((1, True), (2, False)) == (1, True)
    assert lat.meet((2, True), (2, False)) == (2, False)
    pl = AltNeu(P2)
    assert pl.join(((0, 1), True), ((1, 0), True)) == ((1, 1), False)
    assert pl.meet(((0, 1), True), ((1, 0), True)) == ((0, 0), True)


def test_total_dates_and_datetimes() -> None:
    lat = Total()
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 3, 1)
    assert lat.join(d1, d2) == d2 and lat.meet(d1, d2) == d1
    t1, t2 = dt.datetime(2024, 1, 1, 5), dt.datetime(2024, 1, 1, 6)
    c = Coll(("x",), [(("a",), t1, 1), (("a",), t2, -1), (("b",), t2, 2)])
    assert acc(c, t1, lat) == Counter({("a",): 1})
    assert acc(c, t2, lat) == Counter({("b",): 2})
    assert ref_count(c, [], lat).updates == [((1,), t1, 1), ((1,), t2, -1), ((2,), t2, 1)]


def test_antichain_and_closure() -> None:
    assert antichain([(1, 2), (0, 3), (1, 3), (2, 0), (0, 3)], P2) == [(0, 3), (1, 2), (2, 0)]
    assert antichain([3, 1, 2, 1], Total()) == [1]
    assert times_closure([(0, 3), (1, 2)], P2) == [(0, 3), (1, 2), (1, 3)]
    p3 = LATTICES["product3"]
    cl = times_closure([(0, 2, 0), (1, 0, 0), (0, 0, 1)], p3)
    assert len(cl) == 7  # joins of all non-empty subsets of three incomparable times
    for i, a in enumerate(cl):
        for b in cl[i + 1 :]:
            assert not p3.lt(b, a)


@FAST
@given(ts=st.lists(st_time(P2, 0, 4), max_size=8))
def test_closure_is_closed_and_linear(ts: list) -> None:
    cl = times_closure(ts, P2)
    assert set(ts) <= set(cl) and len(set(cl)) == len(cl)
    for a in cl:
        for b in cl:
            assert P2.join(a, b) in cl
    for i, a in enumerate(cl):
        for b in cl[:i]:
            assert not P2.lt(a, b)
    assert linear_extension(cl, P2) == cl


# ---------------------------------------------------------------------------
# Frontier compaction (seed 004)
# ---------------------------------------------------------------------------

COMPACTION_LATTICES = ["total", "product2", "product_nested", "altneu_total", "altneu_product2"]


@pytest.mark.parametrize("name", COMPACTION_LATTICES)
@FAST
@given(data=st.data())
def test_advance_correctness(name: str, data: st.DataObject) -> None:
    """For all g >= F: s <= g iff advance(s, F) <= g (g over a grid that suffices)."""
    lat = LATTICES[name]
    fr = data.draw(st_frontier(lat, 0, HI))
    s = data.draw(st_time(lat, 0, HI))
    t = lat.advance(s, fr)
    assert lat.leq(s, t)
    assert lat.advance(t, fr) == t  # idempotent
    for g in lat.grid(0, HI):
        if any(lat.leq(f, g) for f in fr):
            assert lat.leq(s, g) == lat.leq(t, g), (s, t, fr, g)


@pytest.mark.parametrize("name", COMPACTION_LATTICES)
@FAST
@given(data=st.data())
def test_advance_optimality(name: str, data: st.DataObject) -> None:
    """Times indistinguishable by every g >= F advance to the same time.

    The grid [0, HI] suffices: if some g >= F separates s1, s2 then so does
    meet(g, join(s1, s2, F)), which lies in the grid.
    """
    lat = LATTICES[name]
    fr = data.draw(st_frontier(lat, 0, HI))
    grid = lat.grid(0, HI)
    future = [g for g in grid if any(lat.leq(f, g) for f in fr)]
    classes: dict[tuple, set] = {}
    for s in grid:
        sig = tuple(lat.leq(s, g) for g in future)
        classes.setdefault(sig, set()).add(lat.advance(s, fr))
    for advanced in classes.values():
        assert len(advanced) == 1
    # Distinguishable times never collapse (follows from correctness).
    assert len({next(iter(v)) for v in classes.values()}) == len(classes)


SEED004 = Coll(
    ("src", "dst"),
    [
        (("a", "b"), (0, 0), 1),
        (("b", "c"), (0, 1), 1),
        (("a", "c"), (1, 0), 1),
        (("b", "c"), (1, 1), -1),
    ],
)


@pytest.mark.parametrize(
    ("frontier", "mapping", "expected"),
    [
        (
            [(0, 3), (1, 2), (2, 0)],
            {(0, 0): (0, 0), (0, 1): (0, 1), (1, 0): (1, 0), (1, 1): (1, 1)},
            SEED004.updates,
        ),
        (
            [(1, 2), (2, 0)],
            {(0, 0): (1, 0), (0, 1): (1, 1), (1, 0): (1, 0), (1, 1): (1, 1)},
            [(("a", "b"), (1, 0), 1), (("a", "c"), (1, 0), 1)],
        ),
        (
            [(0, 3), (1, 1)],
            {(0, 0): (0, 1), (0, 1): (0, 1), (1, 0): (1, 1), (1, 1): (1, 1)},
            [
                (("a", "b"), (0, 1), 1),
                (("b", "c"), (0, 1), 1),
                (("a", "c"), (1, 1), 1),
                (("b", "c"), (1, 1), -1),
            ],
        ),
        (
            [(1, 1)],
            {(0, 0): (1, 1), (0, 1): (1, 1), (1, 0): (1, 1), (1, 1): (1, 1)},
            [(("a", "b"), (1, 1), 1), (("a", "c"), (1, 1), 1)],
        ),
    ],
)
def test_seed004_worked_example(frontier: list, mapping: dict, expected: list) -> None:
    for s, t in mapping.items():
        assert P2.advance(s, frontier) == t
    out = ref_consolidate(SEED004, P2, frontier)
    assert out.updates == consolidate(expected)
    assert_updates_equal(out.updates, expected)


@pytest.mark.parametrize("name", ["total", "product2", "altneu_total"])
@FAST
@given(data=st.data())
def test_consolidate_frontier_preserves_future(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    c = data.draw(st_coll(("x",), lat, time_range=(0, HI)))
    fr = data.draw(st_frontier(lat, 0, HI))
    out = ref_consolidate(c, lat, fr)
    assert is_consolidated(out.updates)
    for g in lat.grid(0, HI):
        if any(lat.leq(f, g) for f in fr):
            assert acc(out, g, lat) == acc(c, g, lat)


# ---------------------------------------------------------------------------
# Seeds 000 and 001
# ---------------------------------------------------------------------------


def test_seed000_distinct_interesting_time() -> None:
    c = Coll(("animal",), [(("cat",), (0, 3), 1), (("cat",), (1, 2), 1)])
    assert ref_distinct(c, P2).updates == [
        (("cat",), (0, 3), 1),
        (("cat",), (1, 2), 1),
        (("cat",), (1, 3), -1),
    ]


SEED001_EDGES = Coll(
    ("src", "dst"),
    [
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
    ],
)
SEED001_OUT = [
    ((0, 0), 0, 1),
    ((1, 1), 0, 1),
    ((2, 1), 0, 1),
    ((1, 1), 3, -1),
    ((2, 1), 4, -1),
    ((1, 2), 5, 1),
    ((2, 1), 5, 1),
]


def _bfs_body(x: Counter, edges: Counter) -> Counter:
    """The seed-001 loop body on multisets: min over (x ∪ x ⋈ edges)."""
    props: Counter = Counter(x)
    for (n, d), m in x.items():
        for (s, t), me in edges.items():
            if s == n:
                props[(t, d + 1)] += m * me
    best: dict = {}
    for (n, d), m in props.items():
        if m > 0:
            best[n] = min(d, best.get(n, d))
    return Counter({(n, d): 1 for n, d in best.items()})


def test_seed001_bfs_worked_example() -> None:
    roots = Coll(("node",), [((0,), 0, 1)])
    out = ref_bfs(SEED001_EDGES, roots, Total())
    assert out.cols == ("node", "dist")
    assert out.updates == consolidate(SEED001_OUT)
    # Same answer through the generic iterate reference and the BFS body.
    roots2 = Coll(("node", "dist"), [((0, 0), 0, 1)])
    it = ref_iterate(roots2, _bfs_body, Total(), others=[SEED001_EDGES])
    assert it.updates == consolidate(SEED001_OUT)
    reach = ref_reachable(SEED001_EDGES, roots, Total())
    assert reach.updates == [
        ((0,), 0, 1),
        ((1,), 0, 1),
        ((1,), 3, -1),
        ((1,), 5, 1),
        ((2,), 0, 1),
        ((2,), 4, -1),
        ((2,), 5, 1),
    ]


@pytest.mark.parametrize("name", ["total", "product2"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_bfs_matches_iterate(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    edges = data.draw(st_coll(("src", "dst"), lat, max_size=8, value_range=4, positive_only=True))
    rts = data.draw(st_coll(("node",), lat, max_size=2, value_range=4, positive_only=True))
    roots2 = Coll(("node", "dist"), [((n, 0), t, r) for (n,), t, r in rts.updates])
    expected = ref_bfs(edges, rts, lat)
    assert ref_iterate(roots2, _bfs_body, lat, others=[edges]).updates == expected.updates


# ---------------------------------------------------------------------------
# Moebius inversion and linear operators
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["total", "product2", "product_nested", "altneu_product2"])
@FAST
@given(data=st.data())
def test_moebius_of_accumulation_is_consolidation(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    c = data.draw(st_coll(("x", "y"), lat, max_size=6, time_range=(0, 2)))
    out = moebius(lambda s: acc(c, s, lat), c.times(), lat)
    assert is_consolidated(out)
    for s in times_closure(c.times(), lat):
        assert acc(out, s, lat) == acc(c, s, lat)
    assert out == ref_consolidate(c, lat).updates


@pytest.mark.parametrize("name", ["total", "product2", "altneu_total"])
@FAST
@given(data=st.data())
def test_integrate_differentiate_roundtrip(name: str, data: st.DataObject) -> None:
    lat = LATTICES[name]
    c = data.draw(st_coll(("x",), lat))
    d, alt = ref_differentiate(c, lat)
    assert isinstance(alt, AltNeu)
    assert is_consolidated(d.updates)
    assert ref_integrate(d).updates == ref_consolidate(c, lat).updates
    # The differentiated collection is a pulse: visible at (t, False) only.
    for s in {t for _, t, _ in c.updates}:
        assert acc(d, (s, True), alt) == Counter()


def test_linear_operators() -> None:
    lat = Total()
    a = Coll(("x",), [((1,), 0, 1), ((1,), 0, 1), ((2,), 1, -1)])
    b = Coll(("x",), [((1,), 0, -2), ((3,), 2, 1)])
    assert ref_negate(a).updates == [((1,), 0, -2), ((2,), 1, 1)]
    assert ref_concat(a, b).updates == [((2,), 1, -1), ((3,), 2, 1)]
    assert ref_as_of(a, 1, lat) == Counter({(1,): 2, (2,): -1})
    with pytest.raises(ValueError):
        ref_concat(a, Coll(("y",), []))


def test_sort_key_mixed_types() -> None:
    vals = [3, None, "a", (1, None), dt.date(2020, 1, 1), True, 2.5, dt.datetime(2020, 1, 1)]
    out = sorted(vals, key=sort_key)
    assert out[0] is None and out[1] is True
    ups = consolidate([((None, 1), 0, 1), (("x", 1), 0, 1), ((None, 1), 0, 1), ((2, "z"), 1, -1)])
    assert ups == [((None, 1), 0, 2), ((2, "z"), 1, -1), (("x", 1), 0, 1)]


def test_assert_updates_equal() -> None:
    assert_updates_equal([((1,), 0, 1)], [((1,), 0, 2), ((1,), 0, -1)])
    with pytest.raises(AssertionError, match="duplicate"):
        assert_updates_equal([((1,), 0, 1), ((1,), 0, 1)], [((1,), 0, 2)])
    with pytest.raises(AssertionError, match="missing"):
        assert_updates_equal([], [((1,), 0, 1)])


# ---------------------------------------------------------------------------
# Pointwise correctness of every operator at all grid times (closure or not)
# ---------------------------------------------------------------------------


def _naive_join(x: Counter, y: Counter) -> Counter:
    out: Counter = Counter()
    for (k, v), m in x.items():
        for (k2, w), m2 in y.items():
            if k == k2:
                out[(k, v, w)] += m * m2
    return _clean(out)


def _clean(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v})


def _naive_semijoin(x: Counter, y: Counter) -> Counter:
    keys: Counter = Counter()
    for (k, _), m in y.items():
        keys[k] += m
    return _clean(Counter({(k, v): m * keys[k] for (k, v), m in x.items()}))


def _naive_min(x: Counter) -> Counter:
    best: dict = {}
    for (k, v), m in x.items():
        if m > 0:
            best[k] = min(v, best.get(k, v))
    return Counter({(k, v): 1 for k, v in best.items()})


def _naive_max(x: Counter) -> Counter:
    best: dict = {}
    for (k, v), m in x.items():
        if m > 0:
            best[k] = max(v, best.get(k, v))
    return Counter({(k, v): 1 for k, v in best.items()})


def _naive_top(x: Counter) -> Counter:
    """Largest positive value per key, with its multiplicity."""
    return Counter({(k, v): x[(k, v)] for (k, v) in _naive_max(x)})


def _naive_count(x: Counter) -> Counter:
    cnt: Counter = Counter()
    for (k, _), m in x.items():
        if m > 0:
            cnt[(k,)] += m
    return Counter({(k, n): 1 for (k,), n in cnt.items()})


def _naive_sum(x: Counter) -> Counter:
    tot: dict = {}
    for (k, v), m in x.items():
        if m > 0:
            tot[k] = tot.get(k, 0) + v * m
    return Counter({(k, n): 1 for k, n in tot.items()})


def _naive_triangles(e: Counter) -> Counter:
    out: Counter = Counter()
    for (a, b), m1 in e.items():
        for (a2, c), m2 in e.items():
            if a == a2 and e.get((b, c)):
                out[(a, b, c)] += m1 * m2 * e[(b, c)]
    return _clean(out)


OPS = {
    "join": (lambda a, b, lat: ref_join(a, b, "k", lat), lambda x, y: _naive_join(x, y)),
    "semijoin": (lambda a, b, lat: ref_semijoin(a, b, ["k"], lat), _naive_semijoin),
    "antijoin": (
        lambda a, b, lat: ref_antijoin(a, b, "k", lat),
        lambda x, y: _clean(Counter({d: m - _naive_semijoin(x, y)[d] for d, m in x.items()})),
    ),
    "min": (lambda a, b, lat: ref_min(a, "k", "v", lat), lambda x, y: _naive_min(x)),
    "max": (lambda a, b, lat: ref_max(a, "k", "v", lat), lambda x, y: _naive_max(x)),
    "count": (lambda a, b, lat: ref_count(a, "k", lat), lambda x, y: _naive_count(x)),
    "sum": (lambda a, b, lat: ref_sum(a, ["k"], "v", lat), lambda x, y: _naive_sum(x)),
    "distinct": (
        lambda a, b, lat: ref_distinct(a, lat),
        lambda x, y: Counter({d: 1 for d, m in x.items() if m > 0}),
    ),
    "threshold": (
        lambda a, b, lat: ref_threshold(a, lambda m: m * m - 1, lat),
        lambda x, y: _clean(Counter({d: m * m - 1 for d, m in x.items()})),
    ),
    "reduce_top": (
        lambda a, b, lat: ref_reduce(a, "k", lambda k, rows: [rows[-1]], lat, ["v"]),
        lambda x, y: _naive_top(x),
    ),
    "triangles": (
        lambda a, b, lat: ref_triangles(Coll(("src", "dst"), a.updates), lat),
        lambda x, y: _naive_triangles(x),
    ),
}


@pytest.mark.parametrize("name", ["total", "product2", "altneu_total"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_operators_pointwise_everywhere(name: str, data: st.DataObject) -> None:
    """acc(ref_op(A, B), s) == op(acc(A, s), acc(B, s)) at EVERY grid time s,
    including times outside the closure (checks the m(s) argument)."""
    lat = LATTICES[name]
    a = data.draw(st_coll(("k", "v"), lat, max_size=6, time_range=(1, 3)))
    b = data.draw(st_coll(("k", "w"), lat, max_size=6, time_range=(1, 3)))
    grid = lat.grid(0, 4)
    acc_a = {s: acc(a, s, lat) for s in grid}
    acc_b = {s: acc(b, s, lat) for s in grid}
    for op, (ref, naive) in OPS.items():
        out = ref(a, b, lat)
        assert out.updates == consolidate(out.updates), op
        for s in grid:
            assert acc(out, s, lat) == naive(acc_a[s], acc_b[s]), (op, s)


def test_join_columns_and_hand_example() -> None:
    lat = Total()
    a = Coll(("x", "k", "y"), [((1, "p", 2), 0, 1), ((3, "q", 4), 1, 2)])
    b = Coll(("z", "k"), [((9, "p"), 1, 1), ((8, "q"), 0, -1), ((7, None), 0, 1)])
    out = ref_join(a, b, "k", lat)
    assert out.cols == ("k", "x", "y", "z")
    assert out.updates == [(("p", 1, 2, 9), 1, 1), (("q", 3, 4, 8), 1, -2)]
    a2 = Coll(("k",), [((None,), 0, 1), ((1,), 0, 1)])
    assert ref_join(a2, Coll(("k",), [((None,), 0, 1)]), "k", lat).updates == []
    assert ref_join(a2, Coll(("k",), [((None,), 0, 1)]), "k", lat, null_eq=True).updates == [((None,), 0, 1)]
    assert ref_antijoin(a2, Coll(("k",), [((None,), 0, 1)]), "k", lat).updates == a2.updates


def test_semijoin_antijoin_multiplicities() -> None:
    lat = Total()
    a = Coll(("k", "v"), [((1, "a"), 0, 1), ((2, "b"), 0, 1)])
    b = Coll(("k", "w"), [((1, "x"), 0, 1), ((1, "y"), 1, 1), ((2, "z"), 0, 1), ((2, "z"), 2, -1)])
    assert ref_semijoin(a, b, "k", lat).updates == [
        ((1, "a"), 0, 1),
        ((1, "a"), 1, 1),
        ((2, "b"), 0, 1),
        ((2, "b"), 2, -1),
    ]
    assert ref_antijoin(a, b, "k", lat).updates == [((1, "a"), 1, -1), ((2, "b"), 2, 1)]


def test_reduce_ignores_non_positive_rows() -> None:
    lat = Total()
    a = Coll(("k", "v"), [((1, 5), 0, 1), ((1, 3), 0, -1), ((1, None), 0, 1), ((2, None), 1, 2)])
    assert ref_count(a, "k", lat).updates == [((1, 2), 0, 1), ((2, 2), 1, 1)]
    assert ref_sum(a, "k", "v", lat).updates == [((1, 5), 0, 1), ((2, None), 1, 1)]
    assert ref_min(a, "k", "v", lat).updates == [((1, 5), 0, 1)]
    assert ref_max(a, ["k"], "v", lat).cols == ("k", "v")
    seen = []
    ref_reduce(a, "k", lambda k, rows: seen.append((k, rows)) or [], lat)
    # Called once per key per closure time (0 and 1), rows sorted, None first.
    assert seen == [
        ((1,), [((None,), 1), ((5,), 1)]),
        ((1,), [((None,), 1), ((5,), 1)]),
        ((2,), [((None,), 2)]),
    ]


def test_sum_drops_other_columns_and_global_key() -> None:
    lat = P2
    a = Coll(("k", "v", "junk"), [((1, 2, "x"), (0, 1), 1), ((1, 3, "y"), (1, 0), 2)])
    out = ref_sum(a, [], "v", lat)
    assert out.cols == ("v",)
    assert out.updates == [
        ((2,), (0, 1), 1),
        ((2,), (1, 1), -1),
        ((6,), (1, 0), 1),
        ((6,), (1, 1), -1),
        ((8,), (1, 1), 1),
    ]


# ---------------------------------------------------------------------------
# Iterate
# ---------------------------------------------------------------------------


def test_iterate_transitive_closure_and_errors() -> None:
    lat = P2
    edges = Coll(("s", "d"), [((1, 2), (0, 0), 1), ((2, 3), (0, 1), 1), ((3, 4), (1, 0), 1)])

    def body(x: Counter, e: Counter) -> Counter:
        out = Counter({d: 1 for d, m in x.items() if m > 0})
        for (a, b), m in x.items():
            for (c, d), m2 in e.items():
                if b == c and m > 0 and m2 > 0:
                    out[(a, d)] = 1
        return out

    out = ref_iterate(edges, body, lat, others=[edges])
    assert acc(out, (1, 1), lat) == Counter({(1, 2): 1, (2, 3): 1, (3, 4): 1, (1, 3): 1, (2, 4): 1, (1, 4): 1})
    assert acc(out, (1, 0), lat) == Counter({(1, 2): 1, (3, 4): 1})
    with pytest.raises(RuntimeError):
        ref_iterate(edges, lambda x: Counter({(a + 1, b): m for (a, b), m in x.items()}), lat, max_iter=20)
    with pytest.raises(ValueError):
        ref_iterate(edges, lambda x: Counter({(0, 0): 1}), lat)


# ---------------------------------------------------------------------------
# As-of join (direct definition)
# ---------------------------------------------------------------------------


def test_asof_join_hand_example() -> None:
    lat = Total()
    prices = Coll(
        ("item", "price"),
        [(("a", 10), 1, 1), (("a", 10), 3, -1), (("a", 12), 3, 1), (("b", 5), 2, 1)],
    )
    orders = Coll(
        ("item", "qty"),
        [(("a", 1), 0, 1), (("a", 2), 1, 1), (("a", 3), 3, 1), (("b", 4), 2, 2), (("c", 9), 5, 1)],
    )
    inner = ref_asof_join(orders, prices, "item", lat)
    assert inner.cols == ("item", "qty", "price")
    assert inner.updates == [
        (("a", 2, 10), 1, 1),
        (("a", 3, 12), 3, 1),
        (("b", 4, 5), 2, 2),
    ]
    strict = ref_asof_join(orders, prices, "item", lat, strict=True)
    assert strict.updates == [(("a", 3, 10), 3, 1)]
    left = ref_asof_join(orders, prices, "item", lat, how="left")
    assert left.updates == [
        (("a", 1, None), 0, 1),
        (("a", 2, 10), 1, 1),
        (("a", 3, 12), 3, 1),
        (("b", 4, 5), 2, 2),
        (("c", 9, None), 5, 1),
    ]


@pytest.mark.parametrize("name", ["total", "product2"])
@FAST
@given(data=st.data())
def test_asof_join_equals_calculus_form(name: str, data: st.DataObject) -> None:
    """differentiate -> join (AltNeu times, prices at (t, False)) -> integrate == direct."""
    lat = LATTICES[name]
    orders = data.draw(st_coll(("k", "q"), lat, max_size=5))
    prices = data.draw(st_coll(("k", "p"), lat, max_size=5))
    dorders, alt = ref_differentiate(orders, lat)
    # Non-strict: prices enter at (t, False); strict: at (t, True).
    for strict in (False, True):
        lifted = Coll(prices.cols, [(d, (t, strict), r) for d, t, r in prices.updates])
        via = ref_integrate(ref_join(dorders, lifted, "k", alt))
        assert via.updates == ref_asof_join(orders, prices, "k", lat, strict=strict).updates


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def test_from_snapshots() -> None:
    rows = [(("a", 1), 1), (("b", 1), 1), (("a", 1), 2), (("a", 1), 2), (("c", 2), 4)]
    out = ref_from_snapshots(rows, ("x", "y"))
    assert out.cols == ("x", "y")
    assert out.updates == [
        (("a", 1), 1, 1),
        (("a", 1), 2, 1),
        (("a", 1), 4, -2),
        (("b", 1), 1, 1),
        (("b", 1), 2, -1),
        (("c", 2), 4, 1),
    ]
    assert ref_from_snapshots([]).updates == []


def test_from_upserts() -> None:
    rows = [
        (("k1",), (1,), 0),
        (("k1",), (2,), 3),
        (("k1",), (3,), 3),
        (("k2",), (7,), 1),
        (("k1",), (2,), 5),
        (("k2",), (7,), 4),
    ]
    out = ref_from_upserts(rows, ("key", "val"))
    assert out.updates == [
        (("k1", 1), 0, 1),
        (("k1", 1), 3, -1),
        (("k1", 2), 3, 1),
        (("k1", 3), 3, 1),
        (("k1", 3), 5, -1),
        (("k2", 7), 1, 1),
    ]


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------


def test_random_generators_reproducible() -> None:
    for lat in LATTICES.values():
        c1 = random_coll(random.Random(7), ("a", "b"), 10, lat)
        c2 = random_coll(random.Random(7), ("a", "b"), 10, lat)
        assert c1 == c2 and len(c1.updates) == 10
        assert all(r != 0 and -2 <= r <= 2 for _, _, r in c1.updates)
        assert all(t in lat.grid(0, 5) for t in c1.times())
    pos = random_coll(random.Random(1), ("a",), 20, P2, positive_only=True)
    assert all(r > 0 for _, _, r in pos.updates)


@FAST
@given(fr=st_frontier(LATTICES["altneu_product2"]))
def test_st_frontier_is_antichain(fr: list) -> None:
    lat = LATTICES["altneu_product2"]
    assert fr and antichain(fr, lat) == fr
