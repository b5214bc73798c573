"""A traced ``dd_min``/``dd_max``'s rows of each key, read where they lie in its trace.

On ``(data, time, diff)``: inside the in-task loop a ``dd_min`` step's trace is a few
batches of consolidated updates, each sorted by key
(:class:`~spark_differential.kernels.native.KeySorted`), and an iteration's new updates
touch a few keys.  The compiled sweeps of those keys
(:func:`~spark_differential.kernels.extremum_traced._traced_sweep`,
:meth:`~spark_differential.kernels.extremum_cache.ExtremumCache.rebuild`) read each
key's updates (time, value, diff) from the batches in place (:func:`_gathered` finds
them by binary search on the packed key codes, :data:`KeyRows` is what it hands over)
and, key by key, gather them into scratch arrays (:func:`_gather`), number the key's
distinct values by slots and put its rows in time order (:func:`_numbered`).

Numba caches a compiled function by its own source file only: this module's compiled
functions read ``_NONE`` of :mod:`.extremum`, and those of :mod:`.extremum_traced` and
:mod:`.extremum_cache` call them (their code compiled into the callers').  After editing compiled code that another
module's compiled code calls, touch the calling modules' files (or delete their numba
caches, ``__pycache__/*.nbi``, ``*.nbc``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from spark_differential.kernels.extremum import _NONE


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


def _gathered(batches: list, distinct: list[np.ndarray],
              nk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The trace rows of keys ``distinct`` (one row per key, in key order) as
    :func:`~spark_differential.kernels.extremum_traced._traced_sweep` reads them: ``(old_t, old_v, old_d, starts, counts)``, key ``j``'s
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
