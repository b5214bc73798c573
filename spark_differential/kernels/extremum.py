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

The sweep here (:func:`_sweep_key`, the min-tree) is shared by the kernels of the
in-task loop, which read a ``dd_min``'s trace where it lies instead of in one table:
:func:`~spark_differential.kernels.extremum_traced.min_max_traced` (the touched keys'
rows read from the trace's key-sorted batches, :mod:`.extremum_rows`) and
:class:`~spark_differential.kernels.extremum_cache.ExtremumCache` (each key's output
kept between iterations).

Numba caches a compiled function by its own source file only, and the compiled
functions of :mod:`.extremum_rows`, :mod:`.extremum_traced` and :mod:`.extremum_cache`
call this module's compiled helpers (their code compiled into the callers') and read
``_NONE``: after editing those here, touch the three files (or delete their numba
caches, ``__pycache__/*.nbi``, ``*.nbc``), else they keep running the cached old code.
"""

from __future__ import annotations

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
    """One key's sweep of ``F(all) − F(old)``, shared by :func:`_sweep` and
    :func:`~spark_differential.kernels.extremum_traced._traced_sweep`.

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
    if any(col.num_chunks > 1 for col in X.columns):  # (a trace's rows and new ones: one chunk, read in one pass)
        X = X.combine_chunks()
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
    d = X.column("_d").to_numpy().astype(np.int64, copy=False)  # (read only: gathered below)
    nkeys_ = int(kid.max()) + 1
    if worth_counting(n, nkeys_, ntimes):  # kid and trank are dense ids: two counting passes
        order = dense_order(kid, nkeys_, trank, ntimes)
    else:
        order = sort_order([kid, trank]).astype(np.int64)
    rows, vrows, diff = _sweep(order, kid[order], trank[order], slot[order], d[order], new[order], val_of, row_of)
    at, vat = pa.array(rows), pa.array(vrows)
    taken = X.select([*k, *t]).take(at)  # (one gather of the key and time columns)
    cols = dict(zip([*k, *t], taken.columns))
    value = X.column("_a0").take(vat)
    cols["_o0"] = value if value.type == out_type else value.cast(out_type)
    cols["_d"] = pa.array(diff, pa.int64())
    return pa.table({c: cols[c] for c in out_cols})
