"""``dd_min`` / ``dd_max`` inside the in-task loop: the touched keys' trace read in place.

On ``(data, time, diff)``: an iteration's new updates (``_new`` true) change the
output of the keys they touch, by ``F(trace + new) − F(trace)`` (the same as
:func:`~spark_differential.kernels.extremum.min_max` on those keys' rows).
:func:`min_max_traced` computes it without building a table of the touched trace
rows: the trace's batches are kept sorted by key, the touched keys' rows are read
from them where they lie (:mod:`.extremum_rows`), and one compiled pass per key
(:func:`_traced_sweep`) sweeps them with the min-tree of
:func:`~spark_differential.kernels.extremum._sweep_key`.  With the step's
:class:`~spark_differential.kernels.extremum_cache.ExtremumCache` most keys are
answered from their kept output instead, and only the others' traces are swept.

Numba caches a compiled function by its own source file only: :func:`_traced_sweep`
calls compiled helpers of :mod:`.extremum` and :mod:`.extremum_rows`, so
after editing those, touch this file (or delete its numba caches,
``__pycache__/extremum_traced*.nbi``, ``*.nbc``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from spark_differential.kernels.common import keys
from spark_differential.kernels.extremum import _NONE, _outputs, _sweep_key
from spark_differential.kernels.extremum_cache import ExtremumCache
from spark_differential.kernels.extremum_rows import _gather, _gathered, _key_buffers, _key_rows, _numbered
from spark_differential.kernels.native import KeySorted, Radix
from spark_differential.kernels.stab import sort_order


@njit(cache=True, nogil=True)
def _traced_sweep(rows: tuple, largest: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(key index, time, value, diff)`` of ``F(old + new) − F(old)`` for every key ``j`` of
    ``rows`` (:data:`~spark_differential.kernels.extremum_rows.KeyRows`).  The same sweep as
    :func:`~spark_differential.kernels.extremum._sweep`, key by key: the rows
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
    """:func:`~spark_differential.kernels.extremum.min_max` of ``new`` (this iteration's updates, ``_new`` true) together with the
    trace rows of the keys it touches, the trace given as batches kept sorted by ``key``
    (:class:`~spark_differential.kernels.native.KeySorted`) and read in place: no table of
    the touched trace rows is built, no ids or time ranks computed over it.

    For one integer data column, one time leaf, integer keys; ``None`` otherwise (the
    caller then reads the trace and calls :func:`~spark_differential.kernels.extremum.min_max`).

    ``sorted_new``: ``new`` as :func:`~spark_differential.kernels.native.key_sorted` gives
    it (consolidated, sorted by ``key`` and then time; ``new`` is then its table): the rows
    are not sorted again, and the caller can keep the same batch as the trace's next one.

    ``cache``: the step's :class:`ExtremumCache`, which has seen every update of ``batches``
    (and nothing else): a key's output changes come from its kept steps and the new updates
    alone, its trace is read only where they cannot decide (the least value's count comes to
    zero; see :func:`~spark_differential.kernels.extremum_cache._cached_sweep`); the cache then holds ``new`` too.

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
