"""A traced ``dd_min`` / ``dd_max``'s output kept between the in-task loop's iterations.

On ``(data, time, diff)``: the output of a ``dd_min`` step at a key, from each time
on, is the least value whose accumulated count is positive.  :class:`ExtremumCache`
keeps it per key as steps ``(time, least value, its count)`` describing the sum of
every update the step has seen, and :func:`_cached_sweep` computes an iteration's
``F(old + new) − F(old)`` from a key's steps and its new updates alone wherever that
is exact (its cost follows the new updates, not the trace); the other keys are swept
from their trace (:func:`~spark_differential.kernels.extremum_traced._traced_sweep`)
and their steps rebuilt from all their rows (:func:`_rebuild`).  Keys are numbered by
an open-addressed hash table of their integer columns (:func:`_hash_put`); the steps of
all keys live in one pool of rows (:func:`_store`, :func:`_compact`).

Numba caches a compiled function by its own source file only: :func:`_cached_sweep` and
:func:`_rebuild` call compiled helpers of :mod:`.extremum` and
:mod:`.extremum_rows`, so after editing those, touch this file (or delete its numba
caches, ``__pycache__/extremum_cache*.nbi``, ``*.nbc``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from spark_differential.kernels.extremum import _NONE, _merge_events, _outputs, _set
from spark_differential.kernels.extremum_rows import _gather, _key_buffers, _key_rows, _numbered

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
    """Key ``j``'s steps (cache slot ``ks[j]``) swept from all its rows (``rows``:
    :data:`~spark_differential.kernels.extremum_rows.KeyRows`): ``(time, least value, its
    count)`` wherever they change; a key where some value's count is ever negative is marked dirty (its steps cannot say that values below
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
    through :func:`~spark_differential.kernels.extremum_traced.min_max_traced` with it (the in-task loop's trace,
    ``trace.arrow.ArrowTrace``, drops it otherwise).

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
        """The steps of keys ``ks`` swept again from all their rows (:data:`~spark_differential.kernels.extremum_rows.KeyRows`;
        :func:`_rebuild`)."""
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
