"""Brute-force reference ("oracle") for spark_differential.

This module is a deliberately naive, pure-Python, *independent* implementation
of the semantics in SPEC.md section 2.  It does not import Spark, pandas or
spark_differential, so it can catch bugs in the library.

What the oracle means on ``(data, time, diff)``
-----------------------------------------------
* A collection is a list of updates ``(data, time, diff)``: ``data`` is a tuple
  of column values, ``time`` an element of a lattice (see below), ``diff`` a
  nonzero ``int``.  An update adds ``diff`` copies of ``data`` at ``time``.
* ``acc(C, s)`` is the multiset (a ``Counter`` data -> multiplicity, zero entries
  removed, negative entries *kept*) of all updates with ``time <= s``.
* An operator ``F`` is correct iff for every time ``s``
  ``acc(output, s) == F(acc(input, s))`` and the output is *consolidated*: no
  two updates share ``(data, time)`` and no diff is zero.  The consolidated
  form is unique, so reference outputs can be compared row for row.
* Reference method (:func:`moebius`): take the lub closure ``C`` of all input
  times (close under pairwise join), evaluate the snapshot
  ``F(acc(inputs, s))`` at every ``s`` in ``C``, and Moebius-invert in a linear
  extension of ``C``: ``out(s) = snapshot(s) - sum_{s' in C, s' < s} out(s')``.
  This is correct at *every* time ``s`` (not only closure times): the times in
  ``C`` below ``s`` have a greatest element ``m(s)`` (their join, which is in
  ``C``), the inputs accumulate identically at ``s`` and ``m(s)``, and the output
  accumulates at ``s`` to ``snapshot(m(s))``.  If no closure time is ``<= s`` the
  inputs and the output are empty there, which needs ``F(empty) == empty``
  (true for every operator here; :func:`ref_iterate` checks it).

Times
-----
* :class:`Total` -- any Python values with ``<=`` (ints, dates, datetimes).
* :class:`Product` -- plain tuples, product order, field-wise join/meet; a field
  may itself be a ``Product`` or ``AltNeu`` (then that field is a nested tuple).
* :class:`AltNeu` -- tuples ``(t, neu)`` with ``neu: bool`` (dogsdogsdogs).

Canonical order
---------------
Consolidated update lists are sorted by ``(sort_key(data), sort_key(time))``.
:func:`sort_key` maps values to comparable keys so ``None`` and mixed types
sort: ``None`` < bools < numbers < strings < dates < datetimes < tuples/lists
(element-wise) < anything else (by type name then ``repr``).  The order only
makes output canonical; equality of update lists should be checked as
multisets (see :func:`assert_updates_equal`).  Note that Python treats
``1 == 1.0 == True`` as equal dictionary keys, so such data values merge.

Nulls
-----
Equi-joins (join, semijoin, antijoin, as-of join) follow SQL/Spark: a key
containing ``None`` never matches (``null_eq=True`` makes ``None`` match
``None``).  Grouping (reduce and friends) treats ``None`` as an ordinary key
value, like Spark's ``groupBy``.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Number
from typing import Any

Time = Any
Data = tuple
Update = tuple[Data, Time, int]

__all__ = [
    "AltNeu",
    "Coll",
    "Lattice",
    "Product",
    "Total",
    "acc",
    "antichain",
    "assert_updates_equal",
    "consolidate",
    "is_consolidated",
    "linear_extension",
    "moebius",
    "plain",
    "random_coll",
    "random_lattice_time",
    "ref_antijoin",
    "ref_as_of",
    "ref_asof_join",
    "ref_bfs",
    "ref_concat",
    "ref_consolidate",
    "ref_count",
    "ref_differentiate",
    "ref_distinct",
    "ref_from_snapshots",
    "ref_from_upsert_log",
    "ref_from_upserts",
    "ref_integrate",
    "ref_iterate",
    "ref_join",
    "ref_max",
    "ref_min",
    "ref_negate",
    "ref_reachable",
    "ref_reduce",
    "ref_semijoin",
    "ref_sum",
    "ref_threshold",
    "ref_triangles",
    "sort_key",
    "st_coll",
    "st_frontier",
    "st_time",
    "times_closure",
]


# ---------------------------------------------------------------------------
# Canonical ordering and small helpers
# ---------------------------------------------------------------------------


def sort_key(v: Any) -> tuple:
    """A total-order sort key for ``v`` that tolerates ``None`` and mixed types.

    ``None`` < ``bool`` < numbers < ``str`` < ``date`` < ``datetime`` <
    tuples/lists (compared element-wise, recursively) < anything else (by type
    name, then ``repr``).
    """
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, int(v))
    if isinstance(v, Number):
        return (2, v)
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, _dt.datetime):
        return (5, v)
    if isinstance(v, _dt.date):
        return (4, v)
    if isinstance(v, (tuple, list)):
        return (6, tuple(sort_key(x) for x in v))
    return (9, type(v).__name__, repr(v))


def plain(v: Any) -> Any:
    """Recursively convert tuple subclasses (e.g. ``pyspark.sql.Row``) and lists to plain tuples."""
    if isinstance(v, (tuple, list)):
        return tuple(plain(x) for x in v)
    return v


def _clean(m: Mapping[Any, int]) -> Counter:
    """Copy a mapping into a ``Counter`` without zero entries (negatives kept)."""
    out: Counter = Counter()
    for k, r in m.items():
        if r != 0:
            out[k] = r
    return out


def _names(on: str | Sequence[str]) -> tuple[str, ...]:
    return (on,) if isinstance(on, str) else tuple(on)


def _index(cols: Sequence[str], names: Sequence[str]) -> list[int]:
    missing = [n for n in names if n not in cols]
    if missing:
        raise KeyError(f"columns {missing} not in {tuple(cols)}")
    return [list(cols).index(n) for n in names]


def _rest(cols: Sequence[str], names: Sequence[str]) -> list[int]:
    return [i for i, c in enumerate(cols) if c not in names]


def _proj(d: tuple, idx: Sequence[int]) -> tuple:
    return tuple(d[i] for i in idx)


# ---------------------------------------------------------------------------
# Lattices
# ---------------------------------------------------------------------------


class Lattice:
    """Base class: a lattice of times.  Subclasses define ``leq``, ``join``, ``meet``
    and the generators ``random``, ``grid``, ``strategy``."""

    def leq(self, a: Time, b: Time) -> bool:
        raise NotImplementedError

    def join(self, a: Time, b: Time) -> Time:
        raise NotImplementedError

    def meet(self, a: Time, b: Time) -> Time:
        raise NotImplementedError

    def lt(self, a: Time, b: Time) -> bool:
        """Strictly less: ``a <= b and a != b``."""
        return a != b and self.leq(a, b)

    def join_all(self, times: Iterable[Time]) -> Time:
        it = iter(times)
        acc_t = next(it)
        for t in it:
            acc_t = self.join(acc_t, t)
        return acc_t

    def meet_all(self, times: Iterable[Time]) -> Time:
        it = iter(times)
        acc_t = next(it)
        for t in it:
            acc_t = self.meet(acc_t, t)
        return acc_t

    def advance(self, t: Time, frontier: Iterable[Time]) -> Time:
        """``meet_{f in frontier} join(t, f)`` (seed 004).  ``frontier`` must be non-empty."""
        fr = list(frontier)
        if not fr:
            raise ValueError("advance needs a non-empty frontier")
        return self.meet_all(self.join(t, f) for f in fr)

    def random(self, rng: random.Random, lo: int = 0, hi: int = 5) -> Time:
        """A random time whose integer leaves lie in ``[lo, hi]``."""
        raise NotImplementedError

    def grid(self, lo: int = 0, hi: int = 5) -> list[Time]:
        """Every time whose integer leaves lie in ``[lo, hi]`` (a finite sublattice)."""
        raise NotImplementedError

    def strategy(self, lo: int = 0, hi: int = 5) -> Any:
        """A hypothesis strategy for times with integer leaves in ``[lo, hi]``."""
        raise NotImplementedError


class Total(Lattice):
    """A total order on Python values (ints, dates, datetimes): join = max, meet = min."""

    def leq(self, a: Time, b: Time) -> bool:
        return a <= b

    def join(self, a: Time, b: Time) -> Time:
        return max(a, b)

    def meet(self, a: Time, b: Time) -> Time:
        return min(a, b)

    def random(self, rng: random.Random, lo: int = 0, hi: int = 5) -> int:
        return rng.randint(lo, hi)

    def grid(self, lo: int = 0, hi: int = 5) -> list[int]:
        return list(range(lo, hi + 1))

    def strategy(self, lo: int = 0, hi: int = 5) -> Any:
        from hypothesis import strategies as st

        return st.integers(lo, hi)

    def __repr__(self) -> str:
        return "Total()"


class Product(Lattice):
    """Product partial order over tuples; ``fields`` are the lattices of the coordinates."""

    def __init__(self, fields: Sequence[Lattice]) -> None:
        self.fields: tuple[Lattice, ...] = tuple(fields)
        if not self.fields:
            raise ValueError("Product needs at least one field")

    def _check(self, a: Time, b: Time) -> None:
        n = len(self.fields)
        if len(a) != n or len(b) != n:
            raise ValueError(f"{self!r}: times {a!r}, {b!r} do not have {n} fields")

    def leq(self, a: Time, b: Time) -> bool:
        self._check(a, b)
        return all(f.leq(x, y) for f, x, y in zip(self.fields, a, b, strict=True))

    def join(self, a: Time, b: Time) -> tuple:
        self._check(a, b)
        return tuple(f.join(x, y) for f, x, y in zip(self.fields, a, b, strict=True))

    def meet(self, a: Time, b: Time) -> tuple:
        self._check(a, b)
        return tuple(f.meet(x, y) for f, x, y in zip(self.fields, a, b, strict=True))

    def random(self, rng: random.Random, lo: int = 0, hi: int = 5) -> tuple:
        return tuple(f.random(rng, lo, hi) for f in self.fields)

    def grid(self, lo: int = 0, hi: int = 5) -> list[tuple]:
        return list(itertools.product(*(f.grid(lo, hi) for f in self.fields)))

    def strategy(self, lo: int = 0, hi: int = 5) -> Any:
        from hypothesis import strategies as st

        return st.tuples(*(f.strategy(lo, hi) for f in self.fields))

    def __repr__(self) -> str:
        return f"Product({list(self.fields)!r})"


class AltNeu(Lattice):
    """dogsdogsdogs ``AltNeu``: times ``(t, neu)`` with ``neu: bool`` over an inner lattice.

    ``(t1,n1) <= (t2,n2)`` iff ``t1 == t2 ? n1 <= n2 : inner.leq(t1, t2)``.
    """

    def __init__(self, inner: Lattice) -> None:
        self.inner = inner

    def leq(self, a: Time, b: Time) -> bool:
        (t1, n1), (t2, n2) = a, b
        if t1 == t2:
            return (not n1) or bool(n2)
        return self.inner.leq(t1, t2)

    def join(self, a: Time, b: Time) -> tuple:
        (t1, n1), (t2, n2) = a, b
        t = self.inner.join(t1, t2)
        return (t, bool((t == t1 and n1) or (t == t2 and n2)))

    def meet(self, a: Time, b: Time) -> tuple:
        (t1, n1), (t2, n2) = a, b
        t = self.inner.meet(t1, t2)
        return (t, bool((t != t1 or n1) and (t != t2 or n2)))

    def random(self, rng: random.Random, lo: int = 0, hi: int = 5) -> tuple:
        return (self.inner.random(rng, lo, hi), rng.random() < 0.5)

    def grid(self, lo: int = 0, hi: int = 5) -> list[tuple]:
        return [(t, n) for t in self.inner.grid(lo, hi) for n in (False, True)]

    def strategy(self, lo: int = 0, hi: int = 5) -> Any:
        from hypothesis import strategies as st

        return st.tuples(self.inner.strategy(lo, hi), st.booleans())

    def __repr__(self) -> str:
        return f"AltNeu({self.inner!r})"


def antichain(times: Iterable[Time], lat: Lattice) -> list[Time]:
    """The minimal elements of ``times`` (deduplicated, sorted by :func:`sort_key`)."""
    uniq = list(dict.fromkeys(times))
    mins = [t for t in uniq if not any(lat.lt(u, t) for u in uniq)]
    return sorted(mins, key=sort_key)


def linear_extension(times: Iterable[Time], lat: Lattice) -> list[Time]:
    """The distinct ``times`` sorted so that ``a < b`` implies ``a`` comes first.

    Sort key: the number of elements of the set below-or-equal (strictly grows
    along ``<``), ties broken by :func:`sort_key`.
    """
    uniq = list(dict.fromkeys(times))
    below = {t: sum(1 for u in uniq if lat.leq(u, t)) for t in uniq}
    return sorted(uniq, key=lambda t: (below[t], sort_key(t)))


def times_closure(times: Iterable[Time], lat: Lattice) -> list[Time]:
    """The lub closure of ``times`` (closed under pairwise join), in a linear extension."""
    closed = set(times)
    fresh = list(closed)
    while fresh:
        new: set = set()
        for a in fresh:
            for b in list(closed):
                j = lat.join(a, b)
                if j not in closed:
                    new.add(j)
        closed |= new
        fresh = list(new)
    return linear_extension(closed, lat)


# ---------------------------------------------------------------------------
# Collections
# ---------------------------------------------------------------------------


@dataclass
class Coll:
    """A collection: column names of ``data`` and a list of ``(data, time, diff)`` updates."""

    cols: tuple[str, ...]
    updates: list[Update] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cols = tuple(self.cols)
        ups = []
        for u in self.updates:
            d, t, r = u
            d = tuple(d)
            if len(d) != len(self.cols):
                raise ValueError(f"data {d!r} does not match columns {self.cols}")
            ups.append((d, t, r))
        self.updates = ups

    def times(self) -> list[Time]:
        return [t for _, t, _ in self.updates]


def consolidate(updates: Iterable[Update]) -> list[Update]:
    """Sum diffs per ``(data, time)``, drop zeros, sort by ``(sort_key(data), sort_key(time))``."""
    sums: dict[tuple[Data, Time], int] = {}
    for d, t, r in updates:
        k = (tuple(d), t)
        sums[k] = sums.get(k, 0) + r
    out = [(d, t, r) for (d, t), r in sums.items() if r != 0]
    out.sort(key=lambda u: (sort_key(u[0]), sort_key(u[1])))
    return out


def is_consolidated(updates: Sequence[Update]) -> bool:
    """True iff no diff is zero and no two updates share ``(data, time)``."""
    keys = [(tuple(d), t) for d, t, _ in updates]
    return all(r != 0 for _, _, r in updates) and len(set(keys)) == len(keys)


def assert_updates_equal(actual: Iterable[Update], expected: Iterable[Update]) -> None:
    """Assert ``actual`` is consolidated and equals ``expected`` as a multiset of rows.

    ``expected`` is consolidated first; ``actual`` is *not* (it must already be).
    Tuple subclasses (Spark ``Row``) are converted with :func:`plain`.
    """
    act = [(plain(d), plain(t), r) for d, t, r in actual]
    exp = consolidate((plain(d), plain(t), r) for d, t, r in expected)
    problems = []
    zeros = [u for u in act if u[2] == 0]
    if zeros:
        problems.append(f"zero diffs: {zeros}")
    dup = [k for k, n in Counter((d, t) for d, t, _ in act).items() if n > 1]
    if dup:
        problems.append(f"duplicate (data, time): {dup}")
    ca, ce = Counter(act), Counter(exp)
    missing = sorted((ce - ca).elements(), key=sort_key)
    extra = sorted((ca - ce).elements(), key=sort_key)
    if missing:
        problems.append(f"missing rows: {missing}")
    if extra:
        problems.append(f"unexpected rows: {extra}")
    if problems:
        raise AssertionError("\n".join(problems))


def acc(coll: Coll | Iterable[Update], s: Time, lat: Lattice) -> Counter:
    """The accumulated multiset at ``s``: data -> sum of diffs of updates with time <= s (nonzero only)."""
    ups = coll.updates if isinstance(coll, Coll) else coll
    out: Counter = Counter()
    for d, t, r in ups:
        if lat.leq(t, s):
            out[tuple(d)] += r
    return _clean(out)


def moebius(snapshot_fn: Callable[[Time], Mapping[Data, int]], times: Iterable[Time], lat: Lattice) -> list[Update]:
    """Consolidated updates whose accumulation at every ``s`` in the lub closure of
    ``times`` equals ``snapshot_fn(s)`` (a mapping data -> multiplicity).

    ``out(s) = snapshot(s) - sum_{s' in closure, s' < s} out(s')``.
    """
    order = times_closure(times, lat)
    outs: list[tuple[Time, Counter]] = []
    for s in order:
        diff: Counter = Counter()
        for d, r in snapshot_fn(s).items():
            diff[tuple(d)] += r
        for s2, o in outs:
            if lat.lt(s2, s):
                for d, r in o.items():
                    diff[d] -= r
        outs.append((s, _clean(diff)))
    return consolidate((d, s, r) for s, o in outs for d, r in o.items())


def _pointwise(
    inputs: Sequence[Coll],
    lat: Lattice,
    cols: Sequence[str],
    snap: Callable[..., Mapping[Data, int]],
) -> Coll:
    """Apply ``snap(acc(in_1, s), ..., acc(in_k, s))`` at every closure time, Moebius-invert."""
    times = [t for c in inputs for t in c.times()]
    return Coll(tuple(cols), moebius(lambda s: snap(*(acc(c, s, lat) for c in inputs)), times, lat))


# ---------------------------------------------------------------------------
# Linear operators
# ---------------------------------------------------------------------------


def ref_consolidate(coll: Coll, lat: Lattice, frontier: Iterable[Time] | None = None) -> Coll:
    """Advance every time by ``frontier`` (if given), then consolidate."""
    if frontier is None:
        return Coll(coll.cols, consolidate(coll.updates))
    fr = list(frontier)
    return Coll(coll.cols, consolidate((d, lat.advance(t, fr), r) for d, t, r in coll.updates))


def ref_as_of(coll: Coll, t: Time, lat: Lattice) -> Counter:
    """The accumulated collection at ``t``: data -> multiplicity (nonzero only)."""
    return acc(coll, t, lat)


def ref_negate(coll: Coll) -> Coll:
    """Negate every diff (consolidated)."""
    return Coll(coll.cols, consolidate((d, t, -r) for d, t, r in coll.updates))


def ref_concat(*colls: Coll) -> Coll:
    """Union of updates of collections with identical columns (consolidated)."""
    if not colls:
        raise ValueError("ref_concat needs at least one collection")
    cols = colls[0].cols
    for c in colls[1:]:
        if c.cols != cols:
            raise ValueError(f"ref_concat: columns {c.cols} != {cols}")
    return Coll(cols, consolidate(u for c in colls for u in c.updates))


def ref_differentiate(coll: Coll, lat: Lattice) -> tuple[Coll, AltNeu]:
    """Each ``(d, t, r)`` becomes ``(d, (t, False), r)`` and ``(d, (t, True), -r)``."""
    ups = [(d, (t, neu), -r if neu else r) for d, t, r in coll.updates for neu in (False, True)]
    return Coll(coll.cols, consolidate(ups)), AltNeu(lat)


def ref_integrate(coll: Coll) -> Coll:
    """Keep updates whose AltNeu time has ``neu == False`` and unwrap the time."""
    return Coll(coll.cols, consolidate((d, t[0], r) for d, t, r in coll.updates if not t[1]))


# ---------------------------------------------------------------------------
# Joins
# ---------------------------------------------------------------------------


def _matches(key: tuple, null_eq: bool) -> bool:
    return null_eq or all(v is not None for v in key)


def _join_snapshot(
    a: Mapping[Data, int],
    b: Mapping[Data, int],
    ia: list[int],
    ib: list[int],
    ra: list[int],
    rb: list[int],
    null_eq: bool,
) -> Counter:
    bidx: dict[tuple, list[tuple[Data, int]]] = {}
    for db, mb in b.items():
        k = _proj(db, ib)
        if _matches(k, null_eq):
            bidx.setdefault(k, []).append((db, mb))
    out: Counter = Counter()
    for da, ma in a.items():
        k = _proj(da, ia)
        for db, mb in bidx.get(k, ()):
            out[k + _proj(da, ra) + _proj(db, rb)] += ma * mb
    return out


def ref_join(a: Coll, b: Coll, on: str | Sequence[str], lat: Lattice, *, null_eq: bool = False) -> Coll:
    """Inner equi-join of the accumulated multisets; multiplicity = product.

    Output columns: ``on``, then ``a``'s non-key columns, then ``b``'s non-key
    columns (each in their own order; duplicate names are kept as they are).
    """
    on = _names(on)
    ia, ib = _index(a.cols, on), _index(b.cols, on)
    ra, rb = _rest(a.cols, on), _rest(b.cols, on)
    cols = on + _proj(a.cols, ra) + _proj(b.cols, rb)
    return _pointwise([a, b], lat, cols, lambda x, y: _join_snapshot(x, y, ia, ib, ra, rb, null_eq))


def _semijoin_snapshot(
    a: Mapping[Data, int], b: Mapping[Data, int], ia: list[int], ib: list[int], null_eq: bool
) -> Counter:
    keys: Counter = Counter()
    for db, mb in b.items():
        keys[_proj(db, ib)] += mb
    keys = _clean(keys)
    out: Counter = Counter()
    for da, ma in a.items():
        k = _proj(da, ia)
        if k in keys and _matches(k, null_eq):
            out[da] += ma * keys[k]
    return out


def ref_semijoin(a: Coll, b: Coll, on: str | Sequence[str], lat: Lattice, *, null_eq: bool = False) -> Coll:
    """Rows of ``acc(a)`` whose key occurs in ``acc(b)`` projected to ``on``.

    A row's multiplicity is multiplied by the key's total multiplicity in ``b``
    (sum over ``b``'s rows with that key; keys summing to 0 are absent).
    Output columns are ``a``'s.
    """
    on = _names(on)
    ia, ib = _index(a.cols, on), _index(b.cols, on)
    return _pointwise([a, b], lat, a.cols, lambda x, y: _semijoin_snapshot(x, y, ia, ib, null_eq))


def ref_antijoin(a: Coll, b: Coll, on: str | Sequence[str], lat: Lattice, *, null_eq: bool = False) -> Coll:
    """``a - semijoin(a, b)`` snapshot-wise (may go negative if ``b`` multiplicities differ from 1)."""
    on = _names(on)
    ia, ib = _index(a.cols, on), _index(b.cols, on)

    def snap(x: Counter, y: Counter) -> Counter:
        out = Counter(x)
        for d, r in _semijoin_snapshot(x, y, ia, ib, null_eq).items():
            out[d] -= r
        return out

    return _pointwise([a, b], lat, a.cols, snap)


def ref_asof_join(
    orders: Coll,
    prices: Coll,
    on: str | Sequence[str],
    lat: Lattice,
    strict: bool = False,
    how: str = "inner",
    *,
    null_eq: bool = False,
) -> Coll:
    """As-of join, by its direct definition (not via differentiate/integrate).

    Each order update ``(d, t, r)`` meets the prices accumulated at ``t`` (with
    ``strict``: over price times ``< t``).  For every price row ``p`` with the
    same key and multiplicity ``m != 0`` there, output ``(keys, order non-key
    cols, price non-key cols)`` at ``t`` with diff ``r * m``.  With
    ``how="left"``, an order whose key has no such price row is output with
    ``None`` for the price columns, at ``t`` with diff ``r``.  Consolidated.
    """
    if how not in ("inner", "left"):
        raise ValueError(f"how must be 'inner' or 'left', not {how!r}")
    on = _names(on)
    io, ip = _index(orders.cols, on), _index(prices.cols, on)
    ro, rp = _rest(orders.cols, on), _rest(prices.cols, on)
    cols = on + _proj(orders.cols, ro) + _proj(prices.cols, rp)
    out = []
    for d, t, r in orders.updates:
        k = _proj(d, io)
        seen: Counter = Counter()
        for dp, tp, rr in prices.updates:
            if lat.leq(tp, t) and not (strict and tp == t):
                seen[tuple(dp)] += rr
        matched = False
        if _matches(k, null_eq):
            for dp, m in _clean(seen).items():
                if _proj(dp, ip) == k:
                    matched = True
                    out.append((k + _proj(d, ro) + _proj(dp, rp), t, r * m))
        if how == "left" and not matched:
            out.append((k + _proj(d, ro) + (None,) * len(rp), t, r))
    return Coll(cols, consolidate(out))


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------


ReduceFunc = Callable[[tuple, list[tuple[Data, int]]], Iterable[tuple[Data, int]]]


def _reduce_snapshot(x: Mapping[Data, int], ib: list[int], rest: list[int], func: ReduceFunc) -> Counter:
    groups: dict[tuple, list[tuple[Data, int]]] = {}
    for d, m in x.items():
        if m > 0:
            groups.setdefault(_proj(d, ib), []).append((_proj(d, rest), m))
    out: Counter = Counter()
    for k in sorted(groups, key=sort_key):
        rows = sorted(groups[k], key=sort_key)
        for od, om in func(k, rows):
            out[k + tuple(od)] += om
    return out


def ref_reduce(
    a: Coll,
    by: str | Sequence[str],
    func: ReduceFunc,
    lat: Lattice,
    out_cols: Sequence[str] | None = None,
) -> Coll:
    """General per-key reduction.

    At each time, for each key (tuple of ``by`` values) with at least one row of
    positive multiplicity, ``func(key, rows)`` is called with ``rows`` = sorted
    list of ``(non-key data tuple, multiplicity > 0)`` and returns an iterable of
    ``(out_data_without_key, multiplicity)``.  Output rows are ``key + out_data``;
    output columns ``by + out_cols`` (default ``out_cols``: ``a``'s non-key columns).
    """
    by = _names(by)
    ib, rest = _index(a.cols, by), _rest(a.cols, by)
    oc = _proj(a.cols, rest) if out_cols is None else tuple(out_cols)
    return _pointwise([a], lat, by + oc, lambda x: _reduce_snapshot(x, ib, rest, func))


def ref_count(a: Coll, by: str | Sequence[str], lat: Lattice) -> Coll:
    """Columns ``by + ("count",)``: count = sum of the key's positive multiplicities."""
    return ref_reduce(a, by, lambda k, rows: [((sum(m for _, m in rows),), 1)], lat, ("count",))


_ABSENT = object()


def _agg(a: Coll, by: str | Sequence[str], col: str, lat: Lattice, fn: Callable) -> Coll:
    by = _names(by)
    rest = _rest(a.cols, by)
    j = [a.cols[i] for i in rest].index(col)

    def func(k: tuple, rows: list[tuple[Data, int]]) -> list[tuple[Data, int]]:
        vals = [(d[j], m) for d, m in rows if d[j] is not None]
        res = fn(vals)
        return [] if res is _ABSENT else [((res,), 1)]

    return ref_reduce(a, by, func, lat, (col,))


def ref_sum(a: Coll, by: str | Sequence[str], col: str, lat: Lattice) -> Coll:
    """Columns ``by + (col,)``: sum of ``value * multiplicity`` over positive rows.

    ``None`` values are ignored; if every value of the key is ``None`` the sum is ``None``.
    """
    return _agg(a, by, col, lat, lambda vals: sum(v * m for v, m in vals) if vals else None)


def ref_min(a: Coll, by: str | Sequence[str], col: str, lat: Lattice) -> Coll:
    """Columns ``by + (col,)``: minimum of non-``None`` ``col`` over positive rows (key absent if none)."""
    return _agg(a, by, col, lat, lambda vals: min(v for v, _ in vals) if vals else _ABSENT)


def ref_max(a: Coll, by: str | Sequence[str], col: str, lat: Lattice) -> Coll:
    """Columns ``by + (col,)``: maximum of non-``None`` ``col`` over positive rows (key absent if none)."""
    return _agg(a, by, col, lat, lambda vals: max(v for v, _ in vals) if vals else _ABSENT)


def ref_distinct(a: Coll, lat: Lattice) -> Coll:
    """Every row with positive multiplicity, once."""
    return _pointwise([a], lat, a.cols, lambda x: {d: 1 for d, m in x.items() if m > 0})


def ref_threshold(a: Coll, func: Callable[[int], int], lat: Lattice) -> Coll:
    """Every row with nonzero multiplicity ``m`` (positive or negative) gets multiplicity ``func(m)``."""
    return _pointwise([a], lat, a.cols, lambda x: {d: func(m) for d, m in x.items()})


# ---------------------------------------------------------------------------
# Iteration
# ---------------------------------------------------------------------------


def _fixpoint(x: Counter, body: Callable[..., Mapping[Data, int]], others: Sequence[Counter], max_iter: int) -> Counter:
    x = _clean(x)
    for _ in range(max_iter):
        nx: Counter = Counter()
        for d, r in body(x, *others).items():
            nx[tuple(d)] += r
        nx = _clean(nx)
        if nx == x:
            return x
        x = nx
    raise RuntimeError(f"ref_iterate: no fixed point within {max_iter} iterations")


def ref_iterate(
    roots: Coll,
    body: Callable[..., Mapping[Data, int]],
    lat: Lattice,
    others: Sequence[Coll] = (),
    max_iter: int = 1000,
    cols: Sequence[str] | None = None,
) -> Coll:
    """Pointwise fixed point: at every closure time ``s`` of ``roots`` and ``others``,
    ``x = acc(roots, s)``, then ``x = body(x, *[acc(o, s) for o in others])`` until
    ``x`` stops changing; the snapshot at ``s`` is that ``x``.

    ``body`` maps ``Counter`` s (data -> multiplicity) to a mapping.  Raises
    ``RuntimeError`` if some time does not converge within ``max_iter``
    applications, and ``ValueError`` if the fixed point from all-empty inputs is
    non-empty (not representable as updates).  Output columns: ``cols`` or
    ``roots.cols``.
    """
    others = list(others)
    if _fixpoint(Counter(), body, [Counter() for _ in others], max_iter):
        raise ValueError("ref_iterate: body has a non-empty fixed point on empty inputs")
    return _pointwise(
        [roots, *others],
        lat,
        roots.cols if cols is None else cols,
        lambda x, *os: _fixpoint(x, body, os, max_iter),
    )


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _default_cols(n: int) -> tuple[str, ...]:
    return tuple(f"c{i}" for i in range(n))


def ref_from_snapshots(rows: Iterable[tuple[Data, Time]], cols: Sequence[str] | None = None) -> Coll:
    """Full snapshots per (totally ordered) version -> updates between consecutive versions.

    The snapshot at version ``v`` is the multiset of data rows listed with ``v``;
    only versions that appear in ``rows`` count.  The first snapshot is diffed
    against the empty collection.  Default columns: ``c0, c1, ...``.
    """
    snaps: dict[Time, Counter] = {}
    for d, v in rows:
        snaps.setdefault(v, Counter())[tuple(d)] += 1
    out = []
    prev: Counter = Counter()
    for v in sorted(snaps):
        cur = snaps[v]
        for d in set(cur) | set(prev):
            r = cur.get(d, 0) - prev.get(d, 0)
            if r:
                out.append((d, v, r))
        prev = cur
    width = len(out[0][0]) if out else 0
    return Coll(_default_cols(width) if cols is None else cols, consolidate(out))


def ref_from_upserts(rows: Iterable[tuple[tuple, tuple, Time]], cols: Sequence[str] | None = None) -> Coll:
    """Upserts ``(key, values, time)`` (times totally ordered) -> updates of ``key + values``.

    From time ``t`` the key's values are exactly the multiset of rows listed for
    that key at ``t``; the previous values (if any) are retracted at ``t``.
    Default columns: ``c0, c1, ...``.
    """
    return ref_from_upsert_log(((k, v, t, False) for k, v, t in rows), cols)


def ref_from_upsert_log(rows: Iterable[tuple[tuple, tuple, Time, bool]], cols: Sequence[str] | None = None) -> Coll:
    """:func:`ref_from_upserts` with deletions: rows ``(key, values, time, deleted)``.

    A key's state at one of its log times is the multiset of its non-deleted rows at
    that time (a moment with only deleted rows leaves the key with no values).
    """
    by_key: dict[tuple, dict[Time, Counter]] = {}
    for k, v, t, deleted in rows:
        by_key.setdefault(tuple(k), {}).setdefault(t, Counter())
        if not deleted:
            by_key[tuple(k)][t][tuple(v)] += 1
    out = []
    for k, moments in by_key.items():
        prev: Counter = Counter()
        for t in sorted(moments):
            cur = moments[t]
            for v in set(cur) | set(prev):
                r = cur.get(v, 0) - prev.get(v, 0)
                if r:
                    out.append((k + v, t, r))
            prev = cur
    width = len(out[0][0]) if out else 0
    return Coll(_default_cols(width) if cols is None else cols, consolidate(out))


# ---------------------------------------------------------------------------
# Graph references
# ---------------------------------------------------------------------------


def _bfs_snapshot(edges: Mapping[Data, int], roots: Mapping[Data, int]) -> dict[tuple, int]:
    adj: dict[Any, list[Any]] = {}
    for (src, dst), m in edges.items():
        if m > 0:
            adj.setdefault(src, []).append(dst)
    dist: dict[Any, int] = {}
    layer = [n for (n,), m in roots.items() if m > 0]
    for n in layer:
        dist[n] = 0
    d = 0
    while layer:
        d += 1
        nxt = []
        for n in layer:
            for m in adj.get(n, ()):
                if m not in dist:
                    dist[m] = d
                    nxt.append(m)
        layer = nxt
    return {(n, k): 1 for n, k in dist.items()}


def ref_bfs(edges: Coll, roots: Coll, lat: Lattice) -> Coll:
    """Columns ``(node, dist)``: BFS distances from the roots (positive multiplicity) over
    the set of edges ``(src, dst)`` with positive multiplicity, pointwise in time."""
    return _pointwise([edges, roots], lat, ("node", "dist"), _bfs_snapshot)


def ref_reachable(edges: Coll, roots: Coll, lat: Lattice) -> Coll:
    """Columns ``(node,)``: nodes reachable from the roots, pointwise (see :func:`ref_bfs`)."""
    return _pointwise([edges, roots], lat, ("node",), lambda e, r: {(n,): 1 for n, _ in _bfs_snapshot(e, r)})


def ref_triangles(edges: Coll, lat: Lattice, positive_only: bool = False) -> Coll:
    """Columns ``(a, b, c)``: ``edges(a,b) ⋈_a edges(a,c)``, semijoined on ``(b,c)`` with edges.

    Multiplicity = ``m(a,b) * m(a,c) * m(b,c)`` over edges with nonzero
    accumulated multiplicity (the naive join-join-semijoin composition).  With
    ``positive_only`` only edges of positive multiplicity count.  The two agree
    whenever the accumulated edge multiplicities are non-negative.
    """

    def snap(e: Counter) -> Counter:
        es = {k: m for k, m in e.items() if m > 0 or (m != 0 and not positive_only)}
        out_ = {}
        by_src: dict[Any, list[tuple[Any, int]]] = {}
        for (s, d), m in es.items():
            by_src.setdefault(s, []).append((d, m))
        for a_, outs in by_src.items():
            for b_, m1 in outs:
                for c_, m2 in outs:
                    m3 = es.get((b_, c_), 0)
                    if m3:
                        out_[(a_, b_, c_)] = m1 * m2 * m3
        return out_

    return _pointwise([edges], lat, ("a", "b", "c"), snap)


# ---------------------------------------------------------------------------
# Random generators
# ---------------------------------------------------------------------------


def random_lattice_time(rng: random.Random, lat: Lattice, lo: int = 0, hi: int = 5) -> Time:
    """A random time of ``lat`` with integer leaves in ``[lo, hi]``."""
    return lat.random(rng, lo, hi)


def random_coll(
    rng: random.Random,
    cols: Sequence[str],
    n: int,
    lat: Lattice,
    value_range: int = 3,
    diff_range: tuple[int, int] = (-2, 2),
    positive_only: bool = False,
    time_range: tuple[int, int] = (0, 5),
) -> Coll:
    """``n`` random (unconsolidated) updates: values in ``range(value_range)``, diffs in
    ``diff_range`` without 0 (only ``1..diff_range[1]`` with ``positive_only``),
    times with integer leaves in ``time_range``."""
    lo_d, hi_d = (1, max(1, diff_range[1])) if positive_only else diff_range
    diffs = [r for r in range(lo_d, hi_d + 1) if r != 0]
    ups = [
        (
            tuple(rng.randrange(value_range) for _ in cols),
            lat.random(rng, *time_range),
            rng.choice(diffs),
        )
        for _ in range(n)
    ]
    return Coll(tuple(cols), ups)


def st_time(lat: Lattice, lo: int = 0, hi: int = 5) -> Any:
    """Hypothesis strategy for times of ``lat`` with integer leaves in ``[lo, hi]``."""
    return lat.strategy(lo, hi)


def st_coll(
    cols: Sequence[str],
    lat: Lattice,
    max_size: int = 8,
    value_range: int = 3,
    diff_range: tuple[int, int] = (-2, 2),
    positive_only: bool = False,
    time_range: tuple[int, int] = (0, 5),
) -> Any:
    """Hypothesis strategy for (unconsolidated) :class:`Coll` s as in :func:`random_coll`."""
    from hypothesis import strategies as st

    lo_d, hi_d = (1, max(1, diff_range[1])) if positive_only else diff_range
    diffs = [r for r in range(lo_d, hi_d + 1) if r != 0]
    upd = st.tuples(
        st.tuples(*(st.integers(0, value_range - 1) for _ in cols)),
        lat.strategy(*time_range),
        st.sampled_from(diffs),
    )
    return st.lists(upd, max_size=max_size).map(lambda ups: Coll(tuple(cols), ups))


def st_frontier(lat: Lattice, lo: int = 0, hi: int = 5, max_size: int = 3) -> Any:
    """Hypothesis strategy for non-empty antichains (frontiers) of ``lat``."""
    from hypothesis import strategies as st

    return st.lists(lat.strategy(lo, hi), min_size=1, max_size=max_size).map(lambda ts: antichain(ts, lat))
