"""Hypothesis tests of the library's lattice module (``spark_differential.core.lattice``).

No Spark.  For every time type exercised by the library (integers, 2- and 3-field
products, a nested product, AltNeu over integers and over a product, the loop
wrapper) these check, on the library's int64 *leaves*:

* the lattice laws of ``leq``/``join``/``meet``;
* that the numpy (``np_*``) and DuckDB SQL (``sql_*``) versions agree with the
  Python ones, row by row;
* seed 004's compaction: ``advance(s, F)`` compares with every ``g >= F`` exactly
  as ``s`` does, and times no such ``g`` tells apart advance to the same time;
* ``Antichain`` keeps exactly the minimal elements;
* ``encode_value``/``decode_value`` round trips (ints, dates, timestamps, structs);
* agreement with the independent oracle lattice (tests/oracle.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_support import LATTICES, from_leaves, lib_type, to_leaves
from oracle import Product, Total, antichain, st_frontier, times_closure
from pyspark.sql import Row

from spark_differential.core import lattice as L
from spark_differential.errors import FrontierError, ReservedNameError, TimeTypeError

HI = 3  # random leaves lie in [0, HI]
# SD_HYPOTHESIS_EXAMPLES=500 for a deeper (slower) search
SETTINGS = settings(max_examples=int(os.environ.get("SD_HYPOTHESIS_EXAMPLES", "40")), deadline=None)

# name -> (oracle lattice describing the leaves, library time type)
CASES: dict[str, tuple[Any, L.TimeType]] = {name: (lat, lib_type(lat)) for name, lat in LATTICES.items()}
# the loop wrapper is the product (outer, iteration) on its leaves
CASES["loop"] = (Product([Total(), Total()]), L.Loop(L.Total("long")))
NAMES = list(CASES)


def _grid(lat: Any, hi: int) -> list[tuple[int, ...]]:
    return [to_leaves(lat, t) for t in lat.grid(0, hi)]


def _times(lat: Any, n: int | None = None, hi: int = HI) -> Any:
    leaf = lat.strategy(0, hi).map(lambda t: to_leaves(lat, t))
    return leaf if n is None else st.lists(leaf, min_size=1, max_size=n)


def _frontier(lat: Any) -> Any:
    return st_frontier(lat, 0, HI).map(lambda fr: [to_leaves(lat, f) for f in fr])


# ---------------------------------------------------------------------------------
# laws


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_lattice_laws(name: str, data: st.DataObject) -> None:
    lat, tt = CASES[name]
    a, b, c = (data.draw(_times(lat)) for _ in range(3))
    assert tt.width == len(a)
    # partial order
    assert tt.leq(a, a)
    if tt.leq(a, b) and tt.leq(b, a):
        assert a == b
    if tt.leq(a, b) and tt.leq(b, c):
        assert tt.leq(a, c)
    assert tt.lt(a, b) == (a != b and tt.leq(a, b))
    j, m = tt.join(a, b), tt.meet(a, b)
    assert isinstance(j, tuple) and isinstance(m, tuple)
    # algebraic identities
    assert j == tt.join(b, a) and m == tt.meet(b, a)
    assert tt.join(a, a) == a == tt.meet(a, a)
    assert tt.join(a, tt.meet(a, b)) == a and tt.meet(a, tt.join(a, b)) == a
    assert tt.join(j, c) == tt.join(a, tt.join(b, c))
    assert tt.meet(m, c) == tt.meet(a, tt.meet(b, c))
    assert tt.leq(a, b) == (j == tuple(b)) == (m == tuple(a))
    # least upper bound / greatest lower bound over the whole grid (a sublattice)
    assert tt.leq(a, j) and tt.leq(b, j) and tt.leq(m, a) and tt.leq(m, b)
    for u in _grid(lat, HI):
        if tt.leq(a, u) and tt.leq(b, u):
            assert tt.leq(j, u), (a, b, j, u)
        if tt.leq(u, a) and tt.leq(u, b):
            assert tt.leq(u, m), (a, b, m, u)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_agrees_with_oracle_lattice(name: str, data: st.DataObject) -> None:
    lat, tt = CASES[name]
    a, b = data.draw(lat.strategy(0, 6)), data.draw(lat.strategy(0, 6))
    la, lb = to_leaves(lat, a), to_leaves(lat, b)
    assert tt.leq(la, lb) == lat.leq(a, b)
    assert from_leaves(lat, tt.join(la, lb)) == lat.join(a, b)
    assert from_leaves(lat, tt.meet(la, lb)) == lat.meet(a, b)
    fr = data.draw(st_frontier(lat, 0, 6))
    assert from_leaves(lat, tt.advance(la, [to_leaves(lat, f) for f in fr])) == lat.advance(a, fr)
    ts = data.draw(st.lists(lat.strategy(0, 3), min_size=1, max_size=5))
    closure = L.lub_closure(tt, [to_leaves(lat, t) for t in ts])
    assert sorted(closure) == sorted(to_leaves(lat, t) for t in times_closure(ts, lat))
    order = L.topological(tt, closure)
    assert sorted(order) == sorted(closure)
    for i, x in enumerate(order):
        for y in order[:i]:
            assert not tt.lt(x, y), f"topological order puts {y} before {x} although {x} < {y}"


# ---------------------------------------------------------------------------------
# numpy and SQL agree with Python


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_numpy_agrees(name: str, data: st.DataObject) -> None:
    lat, tt = CASES[name]
    xs = data.draw(_times(lat, 8))
    ys = data.draw(st.lists(_times(lat), min_size=len(xs), max_size=len(xs)))
    a = np.array(xs, dtype=np.int64).reshape(len(xs), tt.width)
    b = np.array(ys, dtype=np.int64).reshape(len(ys), tt.width)
    le, jn, mt = tt.np_leq(a, b), tt.np_join(a, b), tt.np_meet(a, b)
    assert le.shape == (len(xs),) and jn.shape == a.shape and mt.shape == a.shape
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert bool(le[i]) == tt.leq(x, y)
        assert tuple(int(v) for v in jn[i]) == tt.join(x, y)
        assert tuple(int(v) for v in mt[i]) == tt.meet(x, y)
    # broadcasting, as the generic kernels use it: (len(ys), len(xs)) pairs
    cross = tt.np_leq(a[None, :, :], b[:, None, :])
    assert cross.shape == (len(ys), len(xs))
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            assert bool(cross[i, j]) == tt.leq(x, y)
    cj = tt.np_join(a[None, :, :], b[:, None, :])
    assert tuple(int(v) for v in cj[-1, 0]) == tt.join(xs[0], ys[-1])
    fr = data.draw(_frontier(lat))
    adv = tt.np_advance(a, fr)
    for i, x in enumerate(xs):
        assert tuple(int(v) for v in adv[i]) == tt.advance(x, fr)
    assert np.array_equal(tt.np_advance(a, []), a)


_DUCK = duckdb.connect()


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_sql_agrees(name: str, data: st.DataObject) -> None:
    lat, tt = CASES[name]
    w = tt.width
    xs = data.draw(_times(lat, 8))
    ys = data.draw(st.lists(_times(lat), min_size=len(xs), max_size=len(xs)))
    fr = data.draw(_frontier(lat))
    ac, bc = [f"a{i}" for i in range(w)], [f"b{i}" for i in range(w)]
    cols = {c: pa.array([x[i] for x in xs], pa.int64()) for i, c in enumerate(ac)}
    cols |= {c: pa.array([y[i] for y in ys], pa.int64()) for i, c in enumerate(bc)}
    cols["row"] = pa.array(range(len(xs)), pa.int64())
    tbl = pa.table(cols)  # noqa: F841  (read by DuckDB's replacement scan)
    exprs = (
        [f"({tt.sql_leq(ac, bc)}) AS le"]
        + [f"({e})::BIGINT AS j{i}" for i, e in enumerate(tt.sql_join(ac, bc))]
        + [f"({e})::BIGINT AS m{i}" for i, e in enumerate(tt.sql_meet(ac, bc))]
        + [f"({e})::BIGINT AS v{i}" for i, e in enumerate(tt.sql_advance(ac, fr))]
    )
    rows = _DUCK.sql(f"SELECT row, {', '.join(exprs)} FROM tbl ORDER BY row").fetchall()
    assert len(rows) == len(xs)
    for (_row, le, *rest), x, y in zip(rows, xs, ys):
        assert bool(le) == tt.leq(x, y), (x, y)
        assert tuple(rest[:w]) == tt.join(x, y), (x, y)
        assert tuple(rest[w : 2 * w]) == tt.meet(x, y), (x, y)
        assert tuple(rest[2 * w :]) == tt.advance(x, fr), (x, fr)
    assert tt.sql_advance(ac, []) == ac


# ---------------------------------------------------------------------------------
# compaction (seed 004)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_advance_is_correct_and_optimal(name: str, data: st.DataObject) -> None:
    """advance(s, F) compares with every g >= F as s does; indistinguishable times coincide.

    Times and frontier leaves lie in [0, HI]; a g with a leaf beyond HI + 1 compares
    with them exactly as the g clamped to HI + 1, so the grid [0, HI + 1] is every
    future time that matters.
    """
    lat, tt = CASES[name]
    hi = HI if tt.width <= 2 else 2
    fr = data.draw(st_frontier(lat, 0, hi).map(lambda f: [to_leaves(lat, x) for x in f]))
    future = np.array([g for g in _grid(lat, hi + 1) if any(tt.leq(f, g) for f in fr)], dtype=np.int64)
    assert len(future)
    grid = _grid(lat, hi)
    advanced = [tt.advance(s, fr) for s in grid]
    # signatures "s <= g" for every future g (np_leq agrees with leq, see test_numpy_agrees)
    sig_s = tt.np_leq(np.array(grid, dtype=np.int64)[:, None, :], future[None, :, :])
    sig_t = tt.np_leq(np.array(advanced, dtype=np.int64)[:, None, :], future[None, :, :])
    classes: dict[bytes, set[tuple[int, ...]]] = {}
    for i, (s, t) in enumerate(zip(grid, advanced)):
        assert tt.leq(s, t)
        assert tt.advance(t, fr) == t  # idempotent
        assert np.array_equal(sig_s[i], sig_t[i]), (s, t, fr)
        classes.setdefault(sig_s[i].tobytes(), set()).add(t)
    for advanced in classes.values():
        assert len(advanced) == 1, advanced
    # the Antichain object advances identically
    chain = L.Antichain(tt, fr)
    s = data.draw(_times(lat))
    assert chain.advance(s) == tt.advance(s, fr)


def test_seed004_advance_by_hand() -> None:
    tt = L.Product((("a", L.Total("long")), ("b", L.Total("long"))))
    cases = {
        ((0, 3), (1, 2), (2, 0)): {(0, 0): (0, 0), (0, 1): (0, 1), (1, 0): (1, 0), (1, 1): (1, 1)},
        ((1, 2), (2, 0)): {(0, 0): (1, 0), (0, 1): (1, 1), (1, 0): (1, 0), (1, 1): (1, 1)},
        ((0, 3), (1, 1)): {(0, 0): (0, 1), (0, 1): (0, 1), (1, 0): (1, 1), (1, 1): (1, 1)},
        ((1, 1),): {(0, 0): (1, 1), (0, 1): (1, 1), (1, 0): (1, 1), (1, 1): (1, 1)},
    }
    for fr, mapping in cases.items():
        for s, t in mapping.items():
            assert tt.advance(s, list(fr)) == t


def test_altneu_by_hand() -> None:
    tt = L.AltNeu(L.Total("long"))
    assert tt.leq((3, 0), (3, 1)) and not tt.leq((3, 1), (3, 0))
    assert tt.leq((3, 1), (4, 0))  # neu(3) < alt(4)
    assert tt.join((3, 1), (4, 0)) == (4, 0)
    assert tt.join((4, 0), (4, 1)) == (4, 1)
    assert tt.meet((3, 1), (4, 0)) == (3, 1)
    p = L.AltNeu(L.Product((("a", L.Total("long")), ("b", L.Total("long")))))
    # incomparable inner times: join is alt of the inner join, meet is neu of the inner meet
    assert p.join((0, 1, 1), (1, 0, 1)) == (1, 1, 0)
    assert p.meet((0, 1, 0), (1, 0, 0)) == (0, 0, 1)
    assert not p.leq((0, 1, 1), (1, 0, 0)) and not p.leq((1, 0, 0), (0, 1, 1))


# ---------------------------------------------------------------------------------
# antichains


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_antichain_keeps_minimal_elements(name: str, data: st.DataObject) -> None:
    lat, tt = CASES[name]
    ts = data.draw(st.lists(lat.strategy(0, HI), min_size=1, max_size=8))
    chain = L.Antichain(tt, [to_leaves(lat, t) for t in ts])
    expected = sorted(to_leaves(lat, t) for t in antichain(ts, lat))
    assert chain.elements == expected
    assert len(chain) == len(expected) and list(chain) == expected
    for x, y in itertools.combinations(chain.elements, 2):
        assert not tt.leq(x, y) and not tt.leq(y, x)
    g = data.draw(_times(lat))
    assert chain.less_equal(g) == any(lat.leq(f, from_leaves(lat, g)) for f in ts)
    # inserting something already dominated changes nothing
    assert chain.insert(tt.join(chain.elements[0], g)) is False
    assert chain.elements == expected


def test_antichain_from_values() -> None:
    p2 = L.Product((("a", L.Total("long")), ("b", L.Total("long"))))
    assert L.Antichain.from_values(L.Total("long"), 5).elements == [(5,)]
    assert L.Antichain.from_values(L.Total("long"), [5, 3, 7]).elements == [(3,)]
    assert L.Antichain.from_values(p2, (1, 2)).elements == [(1, 2)]  # a bare tuple is one time
    assert L.Antichain.from_values(p2, [(1, 2), (2, 1), (2, 2)]).elements == [(1, 2), (2, 1)]
    assert L.Antichain.from_values(p2, {"a": 1, "b": 2}).elements == [(1, 2)]
    assert L.Antichain.from_values(p2, Row(a=1, b=2)).elements == [(1, 2)]
    with pytest.raises(FrontierError, match="empty frontier"):
        L.Antichain.from_values(L.Total("long"), [])
    with pytest.raises(FrontierError):
        L.Antichain.from_values(L.Total("long"), None)


# ---------------------------------------------------------------------------------
# Python values


@settings(max_examples=60, deadline=None)
@given(v=st.integers(-(2**62), 2**62), kind=st.sampled_from(["long", "int", "short", "byte"]))
def test_int_roundtrip(v: int, kind: str) -> None:
    tt = L.Total(kind)
    assert tt.encode_value(v) == (v,)
    assert tt.decode_value(tt.encode_value(v)) == v
    assert tt.encode_value(np.int64(7)) == (7,)


@settings(max_examples=60, deadline=None)
@given(d=st.dates())
def test_date_roundtrip(d: dt.date) -> None:
    tt = L.Total("date")
    (days,) = tt.encode_value(d)
    assert days == (d - dt.date(1970, 1, 1)).days
    assert tt.decode_value((days,)) == d


_TS = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))


@settings(max_examples=60, deadline=None)
@given(naive=_TS, offset_minutes=st.integers(-14 * 60, 14 * 60))
def test_timestamp_roundtrip(naive: dt.datetime, offset_minutes: int) -> None:
    tt = L.Total("timestamp")
    aware = naive.replace(tzinfo=dt.timezone(dt.timedelta(minutes=offset_minutes)))
    (us,) = tt.encode_value(aware)
    utc_epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert us == (aware - utc_epoch) // dt.timedelta(microseconds=1)
    back = tt.decode_value((us,))
    assert back == aware and back.tzinfo is not None  # the same instant
    # a naive value for a (zoned) timestamp is read as UTC
    (us_naive,) = tt.encode_value(naive)
    assert tt.decode_value((us_naive,)) == naive.replace(tzinfo=dt.timezone.utc)
    # timestamp_ntz: wall-clock microseconds, no zone
    ntz = L.Total("timestamp_ntz")
    (w,) = ntz.encode_value(naive)
    assert w == us_naive
    assert ntz.decode_value((w,)) == naive
    # order is preserved
    later = naive + dt.timedelta(microseconds=1)
    assert tt.leq(tt.encode_value(naive), tt.encode_value(later))
    assert not tt.leq(tt.encode_value(later), tt.encode_value(naive))


_STRUCT = L.Product(
    (
        ("d", L.Total("date")),
        ("n", L.Total("int")),
        ("inner", L.Product((("ts", L.Total("timestamp")), ("i", L.Total("long"))))),
    )
)


@settings(max_examples=40, deadline=None)
@given(d=st.dates(), n=st.integers(-(2**31), 2**31 - 1), ts=_TS, i=st.integers(-100, 100))
def test_struct_roundtrip(d: dt.date, n: int, ts: dt.datetime, i: int) -> None:
    ts = ts.replace(tzinfo=dt.timezone.utc)
    as_tuple = (d, n, (ts, i))
    leaves = _STRUCT.encode_value(as_tuple)
    assert len(leaves) == _STRUCT.width == 4
    assert _STRUCT.decode_value(leaves) == as_tuple
    assert _STRUCT.encode_value({"inner": {"i": i, "ts": ts}, "n": n, "d": d}) == leaves
    assert _STRUCT.encode_value(Row(d=d, n=n, inner=Row(ts=ts, i=i))) == leaves
    assert _STRUCT.encode_value([d, n, [ts, i]]) == leaves
    an = L.AltNeu(_STRUCT)
    assert an.decode_value(an.encode_value((as_tuple, True))) == (as_tuple, True)
    assert an.encode_value({"time": as_tuple, "neu": False}) == (*leaves, 0)


def test_bad_values_raise() -> None:
    with pytest.raises(FrontierError):
        L.Total("long").encode_value(True)
    with pytest.raises(FrontierError):
        L.Total("long").encode_value(1.5)
    with pytest.raises(FrontierError):
        L.Total("date").encode_value(dt.datetime(2020, 1, 1))
    with pytest.raises(FrontierError):
        L.Total("timestamp").encode_value(dt.date(2020, 1, 1))
    with pytest.raises(FrontierError, match="fields"):
        _STRUCT.encode_value((dt.date(2020, 1, 1), 1))
    with pytest.raises(FrontierError, match="fields"):
        _STRUCT.encode_value({"d": dt.date(2020, 1, 1), "n": 1, "inner": (dt.datetime(2020, 1, 1), 1), "x": 2})
    with pytest.raises(FrontierError):
        _STRUCT.encode_value(5)
    with pytest.raises(FrontierError, match="neu"):
        L.AltNeu(L.Total("long")).encode_value((1, 1))
    with pytest.raises(TimeTypeError):
        L.Total("string")


def test_from_spark_type() -> None:
    from pyspark.sql import types as T

    assert L.from_spark_type(T.LongType()) == L.Total("long")
    assert L.from_spark_type(T.ShortType()) == L.Total("short")
    assert L.from_spark_type(T.DateType()) == L.Total("date")
    assert L.from_spark_type(T.TimestampType()) == L.Total("timestamp")
    assert L.from_spark_type(T.TimestampNTZType()) == L.Total("timestamp_ntz")
    st_ = T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.DateType())])
    assert L.from_spark_type(st_) == L.Product((("a", L.Total("long")), ("b", L.Total("date"))))
    an = T.StructType([T.StructField("time", T.LongType()), T.StructField("neu", T.BooleanType())])
    assert L.from_spark_type(an) == L.AltNeu(L.Total("long"))
    with pytest.raises(TimeTypeError):  # a user struct with a boolean field is no time
        L.from_spark_type(an, allow_internal=False)
    for bad in (T.StringType(), T.DoubleType(), T.BooleanType(), T.StructType([])):
        with pytest.raises(TimeTypeError):
            L.from_spark_type(bad)
    with pytest.raises(ReservedNameError):
        L.from_spark_type(T.StructType([T.StructField("_sd_x", T.LongType())]))
    assert L.from_spark_type(L.Loop(L.Total("long")).spark_type()) == L.Loop(L.Total("long"))
