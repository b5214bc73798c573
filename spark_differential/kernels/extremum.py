"""``dd_min`` / ``dd_max`` over a totally ordered time: one compiled sweep per key.

On ``(data, time, diff)``: for every key and time, the output accumulates to the
smallest (largest) value among the key's rows with positive accumulated
multiplicity (rows whose value is null never count).  The general reduction path
(:func:`.reduce.reduce`) gives the same answer with a dozen SQL queries per call;
here the rows are numbered (keys, times and data rows become integer ids, values
comparable int64s) and sorted by ``(key, time)`` once, and a function compiled with
numba walks each key's history in time order:

* a row of the key (its data columns) is alive while its running count is positive;
* a min-tree over the key's distinct rows, ordered by value, gives the least live
  value after each time's updates in ``O(log rows)``;
* the output changes where the key's extremum changes from one time to the next.

Inside an iteration (``_new`` marks this iteration's updates, the rest is trace)
the kernel returns ``F(trace + new) − F(trace)`` for keys with new updates: both
are swept together (the trace's rows counted twice: in both trees), and only times
at or after a key's earliest new update are compared.  Before that time the two
inputs accumulate alike, their outputs agree and cancel, so at the key's first
compared time only the two current values are emitted.

Columns of a type whose equality is not plain value equality in Arrow (floating
point: ``-0.0``, NaN payloads; nested types) are left to the general path
(:func:`min_max` returns ``None``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from spark_differential.kernels.common import NEW, keys, names, times
from spark_differential.kernels.order import dense_order, worth_counting
from spark_differential.kernels.stab import dense_ranks, exact_type, ids, sort_order

_NONE = np.iinfo(np.int64).max  # an empty tree node: no live row


@njit(cache=True, nogil=True)
def _set(tree: np.ndarray, size: int, slot: int, live: bool) -> None:
    """Mark ``slot`` live or not in a min-tree of slot indices (leaves at ``size + slot``)."""
    pos = size + slot
    tree[pos] = slot if live else _NONE
    pos //= 2
    while pos >= 1:
        a, b = tree[2 * pos], tree[2 * pos + 1]
        tree[pos] = a if a < b else b
        pos //= 2


@njit(cache=True, nogil=True, inline="always")
def _outputs(cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Room for ``cap`` output changes: key index, time, value, diff."""
    return np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)


@njit(cache=True, nogil=True, inline="always")
def _merge_events(ev_val: np.ndarray, ev_d: np.ndarray, ne: int) -> None:
    """Consolidate one time's ``ne`` output changes by value: each value's diffs summed into
    its first change, the others' set to zero."""
    for a in range(ne):
        if ev_d[a] == 0:
            continue
        for b in range(a + 1, ne):
            if ev_d[b] != 0 and ev_val[b] == ev_val[a]:
                ev_d[a] += ev_d[b]
                ev_d[b] = 0


@njit(cache=True, nogil=True, inline="always")
def _sweep_key(
    order: np.ndarray,
    lo: int,
    hi: int,
    t_of: np.ndarray,
    slot_of: np.ndarray,
    d_of: np.ndarray,
    new_of: np.ndarray,
    start: int,
    base: int,
    val: np.ndarray,
    cnt_all: np.ndarray,
    cnt_old: np.ndarray,
    tree_all: np.ndarray,
    tree_old: np.ndarray,
    size: int,
    ev_val: np.ndarray,
    ev_slot: np.ndarray,
    ev_d: np.ndarray,
    out_pos: np.ndarray,
    out_slot: np.ndarray,
    out_d: np.ndarray,
    m: int,
) -> int:
    """One key's sweep of ``F(all) − F(old)``, shared by :func:`_sweep` and :func:`_traced_sweep`.

    The key's rows are ``order[lo:hi]`` in time order (``t_of[x]``: the time of row ``x``,
    ``slot_of[x]``: its value slot, ``d_of``/``new_of``: its diff and whether it is new).
    Slot ``g`` holds the comparable value ``val[g]``; ``cnt_*`` are indexed by the slot,
    the trees (cleared by the caller, ``size`` leaves) by ``g - base``.  Only times at or
    after ``start`` (the key's earliest new update) are compared.  Appends each change
    as ``(position in order of the time's last row, slot of its value, diff)`` at
    ``out_*[m:]``; returns the new ``m``."""
    first = True
    had_all = had_old = False
    prev_all = prev_old = 0
    prev_all_slot = prev_old_slot = 0
    i = lo
    while i < hi:
        t = t_of[order[i]]
        q = i
        while q < hi and t_of[order[q]] == t:
            x = order[q]
            g = slot_of[x]
            s = g - base
            before = cnt_all[g] > 0
            cnt_all[g] += d_of[x]
            if (cnt_all[g] > 0) != before:
                _set(tree_all, size, s, not before)
            if not new_of[x]:
                before = cnt_old[g] > 0
                cnt_old[g] += d_of[x]
                if (cnt_old[g] > 0) != before:
                    _set(tree_old, size, s, not before)
            q += 1
        i = q
        if t < start:
            continue
        sa, so = tree_all[1], tree_old[1]
        has_all, has_old = sa != _NONE, so != _NONE
        ga = base + sa if has_all else 0
        go = base + so if has_old else 0
        va = val[ga] if has_all else 0
        vo = val[go] if has_old else 0
        ne = 0
        if first or has_all != had_all or va != prev_all:
            if has_all:
                ev_val[ne], ev_slot[ne], ev_d[ne] = va, ga, 1
                ne += 1
            if not first and had_all:
                ev_val[ne], ev_slot[ne], ev_d[ne] = prev_all, prev_all_slot, -1
                ne += 1
        if first or has_old != had_old or vo != prev_old:
            if has_old:
                ev_val[ne], ev_slot[ne], ev_d[ne] = vo, go, -1
                ne += 1
            if not first and had_old:
                ev_val[ne], ev_slot[ne], ev_d[ne] = prev_old, prev_old_slot, 1
                ne += 1
        _merge_events(ev_val, ev_d, ne)
        for a in range(ne):
            if ev_d[a] != 0:
                out_pos[m], out_slot[m], out_d[m] = q - 1, ev_slot[a], ev_d[a]
                m += 1
        if has_all:
            prev_all, prev_all_slot = va, ga
        if has_old:
            prev_old, prev_old_slot = vo, go
        had_all, had_old, first = has_all, has_old, False
    return m


@njit(cache=True, nogil=True)
def _sweep(
    order: np.ndarray,
    kid: np.ndarray,
    trank: np.ndarray,
    slot: np.ndarray,
    d: np.ndarray,
    new: np.ndarray,
    val_of: np.ndarray,
    row_of: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row of the key and time, row of the value, diff)`` of ``F(all) − F(old)``.

    Rows come sorted by ``(kid, trank)`` (``order[i]``: the row of position ``i``);
    ``slot`` numbers the data rows of each key densely in value order (a key's slots
    are consecutive), ``val_of``/``row_of`` give a slot's comparable value and a row
    holding it."""
    n = len(order)
    cap = 4 * n + 4
    out_pos = np.empty(cap, np.int64)
    out_slot = np.empty(cap, np.int64)
    out_d = np.empty(cap, np.int64)
    m = 0
    ev_val = np.empty(4, np.int64)
    ev_slot = np.empty(4, np.int64)
    ev_d = np.empty(4, np.int64)
    cnt_all = np.zeros(len(val_of), np.int64)
    cnt_old = np.zeros(len(val_of), np.int64)
    tree_all = np.empty(2, np.int64)
    tree_old = np.empty(2, np.int64)
    ident = np.arange(n)  # the rows arrive in (kid, trank) order already
    g0 = 0
    while g0 < n:
        k = kid[g0]
        g1 = g0 + 1
        start = trank[g0] if new[g0] else _NONE
        base = top = slot[g0]
        while g1 < n and kid[g1] == k:
            if new[g1] and trank[g1] < start:
                start = trank[g1]
            base = min(base, slot[g1])
            top = max(top, slot[g1])
            g1 += 1
        if start == _NONE:  # no new update: the key's output does not change
            g0 = g1
            continue
        size = 1
        while size < top - base + 1:
            size *= 2
        if len(tree_all) < 2 * size:
            tree_all = np.empty(2 * size, np.int64)
            tree_old = np.empty(2 * size, np.int64)
        tree_all[: 2 * size] = _NONE
        tree_old[: 2 * size] = _NONE
        m = _sweep_key(ident, g0, g1, trank, slot, d, new, start, base, val_of, cnt_all, cnt_old, tree_all, tree_old,
                       size, ev_val, ev_slot, ev_d, out_pos, out_slot, out_d, m)
        g0 = g1
    out_row = np.empty(m, np.int64)
    out_vrow = np.empty(m, np.int64)
    for i in range(m):
        out_row[i] = order[out_pos[i]]
        out_vrow[i] = row_of[out_slot[i]]
    return out_row, out_vrow, out_d[:m]


def _comparable(column: pa.ChunkedArray | pa.Array, largest: bool) -> np.ndarray:
    """int64s ordered as the values (reversed for ``largest``), equal exactly when they are."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if pa.types.is_integer(t) and (pa.types.is_signed_integer(t) or t.bit_width < 64):
        v = arr.to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        v = pc.rank(arr, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
    return ~v if largest else v  # ~v = -v - 1: order reversed, no overflow


def min_max(nkeys: int, ndata: int, width: int, largest: bool, out_type: pa.DataType, X: pa.Table) -> pa.Table | None:
    """``_k*, _o0, _t*, _d``: ``F(all) − F(old)`` of the min (``largest``: max) of ``_a0``
    per key, for keys with new updates; ``None`` when a column's type is not supported."""
    k, a, t = keys(nkeys), names("_a", ndata), times(width)
    if not all(exact_type(X.schema.field(c).type) for c in [*k, *a]):
        return None
    if X.column("_a0").null_count:
        X = X.filter(pc.is_valid(X.column("_a0")))
    n = X.num_rows
    out_cols = [*k, "_o0", *t, "_d"]
    if n == 0:
        fields = [X.schema.field(c) for c in k] + [pa.field("_o0", out_type)] + [pa.field(c, pa.int64()) for c in [*t, "_d"]]
        return pa.schema(fields).empty_table()
    kid = ids([X.column(c) for c in k], n)
    trank, ntimes = dense_ranks([X.column(c).to_numpy() for c in t])
    val = _comparable(X.column("_a0"), largest)
    # slots: a key's distinct data rows, numbered consecutively in value order
    by_value = [kid, val] if ndata == 1 else [kid, val, ids([X.column(c) for c in a], n)]
    slot, nslots = dense_ranks(by_value)
    val_of = np.empty(nslots, np.int64)
    val_of[slot] = val
    row_of = np.empty(nslots, np.int64)
    row_of[slot] = np.arange(n, dtype=np.int64)
    new = X.column(NEW).to_numpy(zero_copy_only=False).astype(np.bool_)
    d = X.column("_d").to_numpy().astype(np.int64)
    nkeys_ = int(kid.max()) + 1
    if worth_counting(n, nkeys_, ntimes):  # kid and trank are dense ids: two counting passes
        order = dense_order(kid, nkeys_, trank, ntimes)
    else:
        order = sort_order([kid, trank]).astype(np.int64)
    rows, vrows, diff = _sweep(order, kid[order], trank[order], slot[order], d[order], new[order], val_of, row_of)
    at, vat = pa.array(rows), pa.array(vrows)
    cols = {c: X.column(c).take(at) for c in [*k, *t]}
    cols["_o0"] = X.column("_a0").take(vat).cast(out_type)
    cols["_d"] = pa.array(diff, pa.int64())
    return pa.table({c: cols[c] for c in out_cols})


# ---------------------------------------------------------------------------------
# inside the in-task loop: the trace read in place, one compiled pass per key


@njit(cache=True, nogil=True)
def _time_order(t: np.ndarray, m: int, out: np.ndarray) -> None:
    """``out[:m]``: positions ``0 .. m - 1`` ordered by ``t`` (insertion sort for short runs)."""
    if m <= 24:
        for i in range(m):
            out[i] = i
        for i in range(1, m):
            x = out[i]
            tx = t[x]
            j = i - 1
            while j >= 0 and t[out[j]] > tx:
                out[j + 1] = out[j]
                j -= 1
            out[j + 1] = x
    else:
        out[:m] = np.argsort(t[:m], kind="mergesort")


@njit(cache=True, nogil=True)
def _key_buffers(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scratch for one key's ``n`` rows: times, values, diffs, new-or-not, time order, value
    slots, the distinct values (:func:`_gather`, :func:`_slots`)."""
    return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.bool_),
            np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64))


@njit(cache=True, nogil=True, inline="always")
def _slots(sv: np.ndarray, m: int, scratch: int, vals: np.ndarray, slot: np.ndarray) -> int:
    """Number the key's ``m`` values ``sv`` by slots in ascending order: ``slot[i]`` for row ``i``,
    ``vals[:u]`` the values (offsets from the least when their range is small, else the distinct
    values sorted).  Returns ``u``."""
    lo = hi = sv[0]
    for i in range(1, m):
        if sv[i] < lo:
            lo = sv[i]
        elif sv[i] > hi:
            hi = sv[i]
    if hi - lo < min(scratch, 4 * m + 64):
        u = hi - lo + 1
        for i in range(u):
            vals[i] = lo + i
        for i in range(m):
            slot[i] = sv[i] - lo
        return u
    vals[:m] = np.sort(sv[:m])
    u = 0
    for i in range(m):
        if u == 0 or vals[i] != vals[u - 1]:
            vals[u] = vals[i]
            u += 1
    for i in range(m):
        slot[i] = np.searchsorted(vals[:u], sv[i])
    return u


# The rows of several keys as the traced sweeps read them, one tuple:
# ``(old_t, old_v, old_d, starts, counts, new_t, new_v, new_d, bound)``.  Key ``j``'s new updates
# are ``new_*[bound[j]:bound[j + 1]]`` (in time order for the cached sweep); its old ones (the
# trace) ``old_*[starts[b, j]:starts[b, j] + counts[b, j]]`` for every trace batch ``b``
# (:func:`_gathered` makes the old part).
KeyRows = tuple


@njit(cache=True, nogil=True, inline="always")
def _gather(j: int, rows: tuple, largest: bool, st: np.ndarray, sv: np.ndarray, sd: np.ndarray, sn: np.ndarray) -> int:
    """Key ``j``'s rows (``rows``: :data:`KeyRows`) into ``st``/``sv``/``sd`` (values complemented
    for a maximum) and ``sn`` (new or not): its trace batches' rows, then its new updates.
    Returns the least time of the new updates (``_NONE`` when it has none)."""
    old_t, old_v, old_d, starts, counts, new_t, new_v, new_d, bound = rows
    r = 0
    for b in range(counts.shape[0]):
        s0 = starts[b, j]
        for i in range(s0, s0 + counts[b, j]):
            st[r], sv[r], sd[r], sn[r] = old_t[i], ~old_v[i] if largest else old_v[i], old_d[i], False
            r += 1
    start = _NONE
    for i in range(bound[j], bound[j + 1]):
        st[r], sv[r], sd[r], sn[r] = new_t[i], ~new_v[i] if largest else new_v[i], new_d[i], True
        if new_t[i] < start:
            start = new_t[i]
        r += 1
    return start


@njit(cache=True, nogil=True, inline="always")
def _key_rows(j: int, rows: tuple) -> int:
    """Key ``j``'s number of rows (``rows``: :data:`KeyRows`): its new updates and its rows in
    every trace batch."""
    counts, bound = rows[4], rows[8]
    m = bound[j + 1] - bound[j]
    for b in range(counts.shape[0]):
        m += counts[b, j]
    return m


@njit(cache=True, nogil=True, inline="always")
def _numbered(st: np.ndarray, sv: np.ndarray, m: int, scratch: int, vals: np.ndarray, slot: np.ndarray,
              order: np.ndarray) -> tuple[int, int]:
    """A gathered key's values numbered by slots (:func:`_slots`) and its rows put in time order
    (``order``): ``(number of values, size of the min-tree over them)``."""
    u = _slots(sv, m, scratch, vals, slot)
    size = 1
    while size < u:
        size *= 2
    _time_order(st, m, order)
    return u, size


@njit(cache=True, nogil=True)
def _traced_sweep(rows: tuple, largest: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(key index, time, value, diff)`` of ``F(old + new) − F(old)`` for every key ``j`` of
    ``rows`` (:data:`KeyRows`).  The same sweep as :func:`_sweep`, key by key: the rows
    ordered by time, a min-tree over the key's distinct values."""
    nk = rows[4].shape[1]
    total = len(rows[0]) + len(rows[5])
    cap = 4 * total + 4
    out_k, out_t, out_v, out_d = _outputs(cap)
    out_pos = np.empty(cap, np.int64)
    out_slot = np.empty(cap, np.int64)
    m_out = 0
    scratch = 64
    st, sv, sd, sn, order, slot, vals = _key_buffers(scratch)
    cnt_all = np.empty(scratch, np.int64)
    cnt_old = np.empty(scratch, np.int64)
    tree_all = np.empty(2 * scratch, np.int64)
    tree_old = np.empty(2 * scratch, np.int64)
    ev_val = np.empty(4, np.int64)
    ev_slot = np.empty(4, np.int64)
    ev_d = np.empty(4, np.int64)
    for j in range(nk):
        m = _key_rows(j, rows)
        if m > scratch:
            while scratch < m:
                scratch *= 2
            st, sv, sd, sn, order, slot, vals = _key_buffers(scratch)
            cnt_all = np.empty(scratch, np.int64)
            cnt_old = np.empty(scratch, np.int64)
            tree_all = np.empty(2 * scratch, np.int64)
            tree_old = np.empty(2 * scratch, np.int64)
        start = _gather(j, rows, largest, st, sv, sd, sn)
        if start == _NONE:
            continue
        u, size = _numbered(st, sv, m, scratch, vals, slot, order)
        tree_all[: 2 * size] = _NONE
        tree_old[: 2 * size] = _NONE
        cnt_all[:u] = 0
        cnt_old[:u] = 0
        m0 = m_out
        m_out = _sweep_key(order, 0, m, st, slot, sd, sn, start, 0, vals, cnt_all, cnt_old, tree_all, tree_old, size,
                           ev_val, ev_slot, ev_d, out_pos, out_slot, out_d, m_out)
        for e in range(m0, m_out):
            out_k[e] = j
            out_t[e] = st[order[out_pos[e]]]
            out_v[e] = ~vals[out_slot[e]] if largest else vals[out_slot[e]]
    return out_k[:m_out], out_t[:m_out], out_v[:m_out], out_d[:m_out]


def _int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """Integers without nulls (not ``uint64``) as int64 values, else ``None``."""
    t = column.type
    if column.null_count or not (pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)):
        return None
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)


def min_max_traced(nkeys: int, largest: bool, out_type: pa.DataType, new: pa.Table, batches: list,
                   key: tuple[str, ...], sorted_new: Any = None, cache: ExtremumCache | None = None) -> pa.Table | None:
    """:func:`min_max` of ``new`` (this iteration's updates, ``_new`` true) together with the
    trace rows of the keys it touches, the trace given as batches kept sorted by ``key``
    (:class:`~spark_differential.kernels.native.KeySorted`) and read in place: no table of
    the touched trace rows is built, no ids or time ranks computed over it.

    For one integer data column, one time leaf, integer keys; ``None`` otherwise (the
    caller then reads the trace and calls :func:`min_max`).

    ``sorted_new``: ``new`` as :func:`~spark_differential.kernels.native.key_sorted` gives
    it (consolidated, sorted by ``key`` and then time; ``new`` is then its table): the rows
    are not sorted again, and the caller can keep the same batch as the trace's next one.

    ``cache``: the step's :class:`ExtremumCache`, which has seen every update of ``batches``
    (and nothing else): a key's output changes come from its kept steps and the new updates
    alone, its trace is read only where they cannot decide (the least value's count comes to
    zero; see :func:`_cached_sweep`); the cache then holds ``new`` too.

    >>> import pyarrow as pa
    >>> from spark_differential.kernels import native
    >>> old = native.key_sorted(pa.table({"_k0": [1, 1], "_a0": [5, 3], "_t0": [0, 2], "_d": [1, 1]}), ["_k0"])
    >>> new = pa.table({"_k0": [1], "_a0": [4], "_t0": [1], "_d": [1], "_new": [True]})
    >>> out = min_max_traced(1, False, pa.int64(), new, [old], ("_k0",))
    >>> [(r["_t0"], r["_o0"], r["_d"]) for r in out.sort_by([("_t0", "ascending"), ("_o0", "ascending")]).to_pylist()]
    [(1, 4, 1), (1, 5, -1), (2, 4, -1), (2, 5, 1)]

    (the min was 5, then 3 at time 2; a 4 at time 1 makes it 4 from time 1, and the
    change at time 2 is then from 4 to 3 instead of from 5 to 3)
    """
    from spark_differential.kernels.native import KeySorted, Radix

    k = keys(nkeys)
    if not key or tuple(key) != tuple(k) or "_t0" not in new.column_names or "_t1" in new.column_names:
        return None
    if any(not isinstance(b, KeySorted) or b.key != tuple(key) for b in batches):
        return None
    if new.column("_a0").null_count:  # null values never count
        new = new.filter(pc.is_valid(new.column("_a0")))
    if not (pa.types.is_signed_integer(new.schema.field("_a0").type)
            or (pa.types.is_unsigned_integer(new.schema.field("_a0").type) and new.schema.field("_a0").type.bit_width < 64)):
        return None
    out_cols = [*k, "_o0", "_t0", "_d"]
    if new.num_rows == 0:
        fields = [new.schema.field(c) for c in k] + [pa.field("_o0", out_type)] + [pa.field(c, pa.int64()) for c in ["_t0", "_d"]]
        return pa.schema(fields).empty_table()
    key_values = [_int64(new.column(c)) for c in k]
    cols = [_int64(new.column(c)) for c in ("_t0", "_a0", "_d")]
    if any(v is None for v in key_values) or any(v is None for v in cols):
        return None
    presorted = isinstance(sorted_new, KeySorted) and sorted_new.key == tuple(key) and sorted_new.table is new
    if presorted and cache is not None:  # the steps need each key's updates in time order
        sc, t_ = sorted_new.codes, cols[0]
        presorted = not np.any((t_[1:] < t_[:-1]) & (sc[1:] == sc[:-1]))  # type: ignore[index]
    if presorted:
        sc = sorted_new.codes  # already in key order (and time order within a key)
        order = np.arange(len(sc), dtype=np.int64)
    else:
        radix = Radix.of(key_values)  # type: ignore[arg-type]
        if radix is None:
            return None
        code, _ = radix.codes(key_values)  # type: ignore[arg-type]
        # the steps need each key's updates in time order; the sweep orders them itself
        order = sort_order([code, cols[0]]) if cache is not None else np.argsort(code, kind="stable")
        sc = code[order]
    head = np.ones(len(sc), dtype=bool)
    head[1:] = sc[1:] != sc[:-1]
    firsts = np.nonzero(head)[0]
    nk = len(firsts)
    bound = np.append(firsts, len(sc)).astype(np.int64)
    distinct = [v[order[firsts]] for v in key_values]  # type: ignore[index]
    new_t, new_v, new_d = (v if presorted else v[order] for v in cols)  # type: ignore[index]
    if any(b.table.num_rows and any(b.values(c) is None or pa.types.is_boolean(b.table.schema.field(c).type)
                                    for c in ("_t0", "_a0", "_d")) for b in batches):
        return None
    if cache is None:
        kj, t, v, d = _traced_sweep((*_gathered(batches, distinct, nk), new_t, new_v, new_d, bound), largest)
    else:
        ks = cache.slots(distinct)
        kj, t, v, d, failed = cache.sweep(ks, new_t, new_v, new_d, bound, largest)
        if failed.any():  # those keys' traces swept, and their steps made again
            fj = np.nonzero(failed)[0].astype(np.int64)
            lens = bound[fj + 1] - bound[fj]
            total = int(lens.sum())
            rows = np.arange(total, dtype=np.int64) + np.repeat(bound[fj] - (np.cumsum(lens) - lens), lens)
            sub_bound = np.append(0, np.cumsum(lens)).astype(np.int64)
            sub = (new_t[rows], new_v[rows], new_d[rows])
            failing = (*_gathered(batches, [x[fj] for x in distinct], len(fj)), *sub, sub_bound)
            kj2, t2, v2, d2 = _traced_sweep(failing, largest)
            cache.rebuild(ks[fj], failing, largest)
            kj, t, v, d = (np.concatenate(p) for p in ((kj, fj[kj2]), (t, t2), (v, v2), (d, d2)))
        cache.compact()
    at = order[bound[kj]]  # a new row of each output's key
    out = {c: pa.array(v[at]).cast(new.schema.field(c).type) for c, v in zip(k, key_values)}  # type: ignore[index]
    out["_o0"] = pa.array(v, pa.int64()).cast(new.schema.field("_a0").type).cast(out_type)
    out["_t0"] = pa.array(t, pa.int64())
    out["_d"] = pa.array(d, pa.int64())
    return pa.table({c: out[c] for c in out_cols})


def _gathered(batches: list, distinct: list[np.ndarray],
              nk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The trace rows of keys ``distinct`` (one row per key, in key order) as
    :func:`_traced_sweep` reads them: ``(old_t, old_v, old_d, starts, counts)``, key ``j``'s
    rows of batch ``b`` at ``starts[b, j]:starts[b, j] + counts[b, j]``.  Every batch's
    columns must be int64-readable (:meth:`~spark_differential.kernels.native.KeySorted.values`)."""
    nb = len(batches)
    starts = np.zeros((nb, nk), dtype=np.int64)
    counts = np.zeros((nb, nk), dtype=np.int64)
    olds: list[list[np.ndarray]] = [[], [], []]
    base = 0
    for b, batch in enumerate(batches):
        if batch.table.num_rows == 0 or nk == 0:
            continue
        wanted, inside = batch.radix.codes(distinct)
        lo = np.searchsorted(batch.codes, wanted, side="left")
        cnt = np.searchsorted(batch.codes, wanted, side="right") - lo
        if inside is not None:
            cnt[~inside] = 0
        total = int(cnt.sum())
        if total == 0:
            continue
        excl = np.cumsum(cnt) - cnt
        rows = np.arange(total, dtype=np.int64) + np.repeat(lo - excl, cnt)
        for i, c in enumerate(("_t0", "_a0", "_d")):
            olds[i].append(batch.values(c)[rows])
        starts[b] = base + excl
        counts[b] = cnt
        base += total
    old_t, old_v, old_d = (np.concatenate(o) if o else np.zeros(0, np.int64) for o in olds)
    return old_t, old_v, old_d, starts, counts


# ---------------------------------------------------------------------------------
# inside the in-task loop: each key's output kept between iterations


_MAX_DELTA = 64  # a key's distinct new values per iteration above this: the sweep over its trace


@njit(cache=True, nogil=True)
def _hash_put(table: np.ndarray, q: np.ndarray, slots: np.ndarray, used: int) -> tuple[np.ndarray, int]:
    """The slot of each row of ``q`` (key columns) in the open-addressed ``table`` (rows: the
    key columns, then the slot; slot ``-1``: an empty row; a power-of-two number of rows),
    inserting missing keys with slot ``slots[i]`` (``slots[i] < 0``: the next slot, ``used``,
    counted up).  Returns ``(slots, used)``."""
    cap, w = table.shape
    nc = w - 1
    mask = np.uint64(cap - 1)
    n = q.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        h = np.uint64(0x9E3779B97F4A7C15)
        for c in range(nc):
            h = (h ^ np.uint64(q[i, c])) * np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(29)
        p = np.int64(h & mask)
        while True:
            s = table[p, nc]
            if s < 0:
                for c in range(nc):
                    table[p, c] = q[i, c]
                if slots[i] >= 0:
                    s = slots[i]
                else:
                    s = used
                    used += 1
                table[p, nc] = s
                out[i] = s
                break
            same = True
            for c in range(nc):
                if table[p, c] != q[i, c]:
                    same = False
                    break
            if same:
                out[i] = s
                break
            p = (p + 1) & (cap - 1)
    return out, used


# a key's kept steps: rows of ``pool`` (time, least value, its count), ``meta[k]`` says where
_OFF, _LEN, _CAP, _DIRTY = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def _reserve(pool: np.ndarray, top: int, need: int) -> np.ndarray:
    """The pool with room for ``need`` more steps after ``top``."""
    if top + need <= len(pool):
        return pool
    grown = np.empty((max(2 * len(pool), top + need), 3), np.int64)
    grown[:top] = pool[:top]
    return grown


@njit(cache=True, nogil=True)
def _store(k: int, keep: int, steps: np.ndarray, nn: int, meta: np.ndarray, pool: np.ndarray,
           top: int) -> tuple[np.ndarray, int]:
    """Key ``k``'s steps: its first ``keep`` kept, then ``steps[:nn]`` (moved to the pool's end,
    at twice the room, when they do not fit where they are)."""
    size = keep + nn
    o = meta[k, _OFF]
    if size > meta[k, _CAP]:
        room = max(2 * size, 4)
        pool = _reserve(pool, top, room)
        for i in range(keep):
            pool[top + i, 0], pool[top + i, 1], pool[top + i, 2] = pool[o + i, 0], pool[o + i, 1], pool[o + i, 2]
        o = meta[k, _OFF] = top
        meta[k, _CAP] = room
        top += room
    for i in range(nn):
        pool[o + keep + i, 0], pool[o + keep + i, 1], pool[o + keep + i, 2] = steps[i, 0], steps[i, 1], steps[i, 2]
    meta[k, _LEN] = size
    return pool, top


@njit(cache=True, nogil=True)
def _cached_sweep(
    ks: np.ndarray,
    new_t: np.ndarray,
    new_v: np.ndarray,
    new_d: np.ndarray,
    bound: np.ndarray,
    largest: bool,
    meta: np.ndarray,
    pool: np.ndarray,
    top: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """``(key index, time, value, diff)`` of ``F(old + new) − F(old)`` from each key's kept
    steps instead of its trace, for the keys where that is exact; ``failed[j]`` marks the
    others (their steps are left as they were: the caller sweeps their trace).

    Key ``j`` (cache slot ``k = ks[j]``) has new updates ``new_*[bound[j]:bound[j + 1]]`` in
    time order.  Its steps, ``pool[meta[k, 0]:meta[k, 0] + meta[k, 1]]`` as ``(time, least
    value, count)``, say what ``F(old)`` is from each time on (count ``0``: no live value),
    and every value below the least has count exactly zero (before the first step: no value
    counts).  The new updates accumulated up to a time (``D``, a few values) then decide
    ``F(old + new)``: a positive value of ``D`` below the least is the new least (its count
    ``D``'s), else the least stays with its count plus ``D``'s.  When that count comes to zero
    or less, or a value below the new least has a negative count, the key's other values
    decide: it fails.  The cost follows the new updates and the key's steps from its first
    new update on, not its trace.  Returns the outputs, ``failed`` and the pool, ``top``."""
    nk = len(ks)
    cap = 1024
    out_k, out_t, out_v, out_d = _outputs(cap)
    failed = np.zeros(nk, np.bool_)
    m_out = 0
    dv = np.empty(_MAX_DELTA, np.int64)
    dc = np.empty(_MAX_DELTA, np.int64)
    ev_val = np.empty(4, np.int64)
    ev_d = np.empty(4, np.int64)
    steps = np.empty((64, 3), np.int64)
    for j in range(nk):
        k = ks[j]
        if meta[k, _DIRTY]:
            failed[j] = True
            continue
        r0, r1 = bound[j], bound[j + 1]
        o, L = meta[k, _OFF], meta[k, _LEN]
        t0 = new_t[r0]
        i0 = 0
        hi = L
        while i0 < hi:  # the first step at or after t0
            mid = (i0 + hi) // 2
            if pool[o + mid, 0] < t0:
                i0 = mid + 1
            else:
                hi = mid
        m = c = 0
        if i0 > 0:
            m, c = pool[o + i0 - 1, 1], pool[o + i0 - 1, 2]
        pn_m, pn_has = m, c > 0  # the outputs just before t0: the same
        po_m, po_has = m, c > 0
        last_m, last_c = m, c
        need = (r1 - r0) + (L - i0)
        if need > len(steps):
            steps = np.empty((2 * need, 3), np.int64)
        if m_out + 4 * need > cap:
            while cap < m_out + 4 * need:
                cap *= 2
            a, b, e, f = _outputs(cap)
            a[:m_out], b[:m_out], e[:m_out], f[:m_out] = out_k[:m_out], out_t[:m_out], out_v[:m_out], out_d[:m_out]
            out_k, out_t, out_v, out_d = a, b, e, f
        m0 = m_out
        nd = nn = 0
        ok = True
        # D's least positive value (its count) and least negative one; D at one value (dm_v)
        has_pos = has_neg = False
        pos_v = pos_c = neg_v = 0
        dm_ok = False
        dm_v = dm_c = 0
        p, q = r0, i0
        while p < r1 or q < L:
            if p < r1 and (q >= L or new_t[p] <= pool[o + q, 0]):
                s = new_t[p]
            else:
                s = pool[o + q, 0]
                # an old step alone, the outputs in step (F(old + new) = F(old) so far), and D
                # cannot move the least there (no value of D at or below it): the step stays
                # as it is and no output changes
                m2, c2 = pool[o + q, 1], pool[o + q, 2]
                if (c2 > 0 and pn_has and po_has and pn_m == po_m and (not has_pos or pos_v > m2)
                        and (not has_neg or neg_v > m2)):
                    q += 1
                    m, c = m2, c2
                    pn_m = po_m = m
                    dm_ok = False
                    if c != last_c or m != last_m:
                        steps[nn, 0], steps[nn, 1], steps[nn, 2] = s, m, c
                        nn += 1
                        last_m, last_c = m, c
                    continue
            if p < r1 and new_t[p] == s:
                while p < r1 and new_t[p] == s:
                    v = ~new_v[p] if largest else new_v[p]
                    x = 0
                    while x < nd and dv[x] != v:
                        x += 1
                    if x == nd:
                        if nd == _MAX_DELTA:
                            ok = False
                            break
                        dv[nd], dc[nd] = v, 0
                        nd += 1
                    dc[x] += new_d[p]
                    p += 1
                if not ok:
                    break
                has_pos = has_neg = dm_ok = False
                for x in range(nd):
                    if dc[x] > 0 and (not has_pos or dv[x] < pos_v):
                        has_pos, pos_v, pos_c = True, dv[x], dc[x]
                    elif dc[x] < 0 and (not has_neg or dv[x] < neg_v):
                        has_neg, neg_v = True, dv[x]
            if q < L and pool[o + q, 0] == s:
                m, c = pool[o + q, 1], pool[o + q, 2]
                q += 1
            # the new least and its count
            if has_pos and (c == 0 or pos_v < m):
                nm, ncnt = pos_v, pos_c
            elif c == 0:
                nm, ncnt = 0, 0
            else:
                if not dm_ok or dm_v != m:
                    dm_ok, dm_v, dm_c = True, m, 0
                    for x in range(nd):
                        if dv[x] == m:
                            dm_c = dc[x]
                nm, ncnt = m, c + dm_c
                if ncnt <= 0:
                    ok = False
                    break
            if has_neg and (ncnt == 0 or neg_v < nm):  # below the new least every count stays zero
                ok = False
                break
            has_n, has_o = ncnt > 0, c > 0
            ne = 0
            if has_n != pn_has or (has_n and nm != pn_m):
                if has_n:
                    ev_val[ne], ev_d[ne] = nm, 1
                    ne += 1
                if pn_has:
                    ev_val[ne], ev_d[ne] = pn_m, -1
                    ne += 1
            if has_o != po_has or (has_o and m != po_m):
                if has_o:
                    ev_val[ne], ev_d[ne] = m, -1
                    ne += 1
                if po_has:
                    ev_val[ne], ev_d[ne] = po_m, 1
                    ne += 1
            _merge_events(ev_val, ev_d, ne)
            for a_ in range(ne):
                if ev_d[a_] != 0:
                    out_k[m_out], out_t[m_out] = j, s
                    out_v[m_out] = ~ev_val[a_] if largest else ev_val[a_]
                    out_d[m_out] = ev_d[a_]
                    m_out += 1
            pn_m, pn_has, po_m, po_has = nm, has_n, m, has_o
            if ncnt != last_c or (ncnt > 0 and nm != last_m):
                steps[nn, 0], steps[nn, 1], steps[nn, 2] = s, nm, ncnt
                nn += 1
                last_m, last_c = nm, ncnt
        if not ok:
            failed[j] = True
            m_out = m0
            continue
        pool, top = _store(k, i0, steps, nn, meta, pool, top)
    return out_k[:m_out], out_t[:m_out], out_v[:m_out], out_d[:m_out], failed, pool, top


@njit(cache=True, nogil=True)
def _rebuild(ks: np.ndarray, rows: tuple, largest: bool, meta: np.ndarray, pool: np.ndarray,
             top: int) -> tuple[np.ndarray, int]:
    """Key ``j``'s steps (cache slot ``ks[j]``) swept from all its rows (``rows``: :data:`KeyRows`): ``(time, least value, its count)`` wherever they change; a key where some
    value's count is ever negative is marked dirty (its steps cannot say that values below
    the least count zero: it is swept from its trace from then on)."""
    scratch = 64
    st, sv, sd, sn, order, slot, vals = _key_buffers(scratch)
    cnt = np.empty(scratch, np.int64)
    tree = np.empty(2 * scratch, np.int64)
    steps = np.empty((scratch, 3), np.int64)
    for j in range(len(ks)):
        k = ks[j]
        m = _key_rows(j, rows)
        if m > scratch:
            while scratch < m:
                scratch *= 2
            st, sv, sd, sn, order, slot, vals = _key_buffers(scratch)
            cnt = np.empty(scratch, np.int64)
            tree = np.empty(2 * scratch, np.int64)
            steps = np.empty((scratch, 3), np.int64)
        _gather(j, rows, largest, st, sv, sd, sn)
        u, size = _numbered(st, sv, m, scratch, vals, slot, order)
        tree[: 2 * size] = _NONE
        cnt[:u] = 0
        negative = 0
        ever = False
        nn = 0
        last_m = last_c = 0
        i = 0
        while i < m:
            t = st[order[i]]
            while i < m and st[order[i]] == t:
                x = order[i]
                g = slot[x]
                before = cnt[g]
                cnt[g] += sd[x]
                if (cnt[g] > 0) != (before > 0):
                    _set(tree, size, g, cnt[g] > 0)
                if cnt[g] < 0 and before >= 0:
                    negative += 1
                elif cnt[g] >= 0 and before < 0:
                    negative -= 1
                i += 1
            if negative > 0:
                ever = True
            g = tree[1]
            cm, cc = (vals[g], cnt[g]) if g != _NONE else (0, 0)
            if cc != last_c or (cc > 0 and cm != last_m):
                steps[nn, 0], steps[nn, 1], steps[nn, 2] = t, cm, cc
                nn += 1
                last_m, last_c = cm, cc
        meta[k, _DIRTY] = ever
        pool, top = _store(k, 0, steps, nn, meta, pool, top)
    return pool, top


@njit(cache=True, nogil=True)
def _compact(meta: np.ndarray, used: int, pool: np.ndarray) -> tuple[np.ndarray, int]:
    """The pool with its abandoned room dropped (every key's steps moved, at 1.5 times their room)."""
    total = 0
    for k in range(used):
        total += meta[k, _LEN] + meta[k, _LEN] // 2 + 2
    fresh = np.empty((total + 64, 3), np.int64)
    top = 0
    for k in range(used):
        o, n = meta[k, _OFF], meta[k, _LEN]
        fresh[top:top + n] = pool[o:o + n]
        meta[k, _OFF] = top
        meta[k, _CAP] = n + n // 2 + 2
        top += meta[k, _CAP]
    return fresh, top


class ExtremumCache:
    """A traced ``dd_min``/``dd_max``'s output kept between the in-task loop's iterations.

    For each key (of integer columns), its output as steps over time: ``(time, least value,
    count of that value)`` from each time on, in the kernel's comparable values (``~v`` for a
    max), every value below the least counting exactly zero.  It describes the sum of every
    update the step has seen, so it stays exact only if every batch of the trace passed
    through :func:`min_max_traced` with it (``local_loop._Trace`` drops it otherwise).

    ``fast_keys``/``fallback_keys`` count the keys answered from the steps and from a sweep
    of their trace; ``trace_rows`` the trace rows read for the latter.

    >>> import numpy as np
    >>> c = ExtremumCache(1)
    >>> ks = c.slots([np.array([7, 9])])
    >>> out = c.sweep(ks, np.array([0, 3, 1]), np.array([5, 4, 2]), np.array([1, 1, 1]), np.array([0, 2, 3]), False)
    >>> [a.tolist() for a in out]  # key 7: 5 from time 0, 4 from time 3; key 9: 2 from time 1
    [[0, 0, 0, 1], [0, 3, 3, 1], [5, 4, 5, 2], [1, 1, -1, 1], [False, False]]
    """

    def __init__(self, nkeys: int) -> None:
        self.nkeys = nkeys
        self.table = np.full((1024, nkeys + 1), -1, np.int64)
        self.used = 0
        self.meta = np.zeros((1024, 4), np.int64)
        self.pool = np.empty((4096, 3), np.int64)
        self.top = 0
        self.fast_keys = self.fallback_keys = self.trace_rows = 0

    def slots(self, distinct: list[np.ndarray]) -> np.ndarray:
        """Each key's slot (``distinct``: the key columns, one row per key), new keys added
        with no steps (no value counts at any time)."""
        n = len(distinct[0])
        if 2 * (self.used + n) > len(self.table):
            cap = len(self.table)
            while 2 * (self.used + n) > cap:
                cap *= 2
            old = self.table[self.table[:, -1] >= 0]
            self.table = np.full((cap, self.nkeys + 1), -1, np.int64)
            _hash_put(self.table, np.ascontiguousarray(old[:, :-1]), old[:, -1].copy(), 0)
        q = np.ascontiguousarray(np.stack(distinct, axis=1).astype(np.int64, copy=False))
        ks, self.used = _hash_put(self.table, q, np.full(n, -1, np.int64), self.used)
        if self.used > len(self.meta):
            grown = np.zeros((max(2 * len(self.meta), self.used), 4), np.int64)
            grown[: len(self.meta)] = self.meta
            self.meta = grown
        return ks

    def sweep(self, ks: np.ndarray, new_t: np.ndarray, new_v: np.ndarray, new_d: np.ndarray, bound: np.ndarray,
              largest: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`_cached_sweep` on the kept steps: ``(key index, time, value, diff, failed)``."""
        kj, t, v, d, failed, self.pool, self.top = _cached_sweep(ks, new_t, new_v, new_d, bound, largest,
                                                                 self.meta, self.pool, self.top)
        self.fast_keys += len(ks) - int(failed.sum())
        return kj, t, v, d, failed

    def rebuild(self, ks: np.ndarray, rows: tuple, largest: bool) -> None:
        """The steps of keys ``ks`` swept again from all their rows (:data:`KeyRows`; :func:`_rebuild`)."""
        self.fallback_keys += len(ks)
        self.trace_rows += len(rows[0])
        self.pool, self.top = _rebuild(ks, rows, largest, self.meta, self.pool, self.top)

    @property
    def dirty(self) -> np.ndarray:
        """Whether each key (by slot) is swept from its trace from now on."""
        return self.meta[: self.used, _DIRTY] != 0

    def compact(self) -> None:
        """Drop the pool's abandoned room once it is most of the pool."""
        live = int(self.meta[: self.used, _CAP].sum())
        if self.top > 2 * live + 65536:
            self.pool, self.top = _compact(self.meta, self.used, self.pool)
