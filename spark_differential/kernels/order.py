"""Row orders of dense integer ids by counting, not comparing.

Not about ``(data, time, diff)`` directly: the kernels number keys, (key, data)
rows and times densely (``0 ≤ id < n``) and then need the rows in ``(key, time)``
order.  With dense ids two stable counting passes (least significant column first)
give that order in ``O(rows + ids)``, several times faster than a comparison sort of
one packed int64 per row (``np.argsort``: ~70 ms for 10^6 rows against ~15 ms).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _counting_pass(values: np.ndarray, n_values: int, rows: np.ndarray) -> np.ndarray:
    """``rows`` reordered stably by ``values[rows]`` (each in ``0 .. n_values - 1``)."""
    start = np.zeros(n_values + 1, np.int64)
    for r in rows:
        start[values[r] + 1] += 1
    for v in range(n_values):
        start[v + 1] += start[v]
    out = np.empty(len(rows), np.int64)
    for r in rows:
        v = values[r]
        out[start[v]] = r
        start[v] += 1
    return out


def dense_order(major: np.ndarray, n_major: int, minor: np.ndarray, n_minor: int) -> np.ndarray:
    """Indices sorting rows by ``(major, minor)`` (ids in ``0 .. n - 1``), equal rows in
    their original order.

    >>> dense_order(np.array([1, 0, 1, 0]), 2, np.array([0, 2, 0, 1]), 3).tolist()
    [3, 1, 0, 2]
    """
    rows = np.arange(len(major), dtype=np.int64)
    if len(rows) == 0:
        return rows
    by_minor = _counting_pass(np.ascontiguousarray(minor, dtype=np.int64), int(n_minor), rows)
    return _counting_pass(np.ascontiguousarray(major, dtype=np.int64), int(n_major), by_minor)


def worth_counting(n_rows: int, *n_ids: int) -> bool:
    """Whether counting passes over ids of these ranges beat one comparison sort of
    ``n_rows`` rows (the id ranges are not much larger than the rows)."""
    return n_rows >= 1024 and all(n <= 4 * n_rows + 1024 for n in n_ids)


@njit(cache=True, nogil=True)
def _sort_within(order: np.ndarray, bounds: np.ndarray, minor: np.ndarray) -> None:
    """Sort each run ``order[bounds[g]:bounds[g + 1]]`` by ``minor`` (stably): insertion
    sort for short runs, a merge sort for long ones."""
    for g in range(len(bounds) - 1):
        s, e = bounds[g], bounds[g + 1]
        if e - s <= 32:
            for i in range(s + 1, e):
                x = order[i]
                mx = minor[x]
                j = i - 1
                while j >= s and minor[order[j]] > mx:
                    order[j + 1] = order[j]
                    j -= 1
                order[j + 1] = x
        else:
            sub = order[s:e].copy()
            idx = np.argsort(minor[sub], kind="mergesort")
            for i in range(e - s):
                order[s + i] = sub[idx[i]]


def grouped_order(major: np.ndarray, n_major: int, minor: np.ndarray) -> np.ndarray:
    """Indices sorting rows by ``(major, minor)``, ``major`` dense ids (``0 .. n_major - 1``)
    and ``minor`` any int64 values, equal rows in their original order: one counting
    pass by ``major``, then each id's (usually short) run sorted by ``minor``.

    >>> grouped_order(np.array([1, 0, 1, 0]), 2, np.array([9, 7, -3, 5])).tolist()
    [3, 1, 2, 0]
    """
    rows = np.arange(len(major), dtype=np.int64)
    if len(rows) == 0:
        return rows
    major = np.ascontiguousarray(major, dtype=np.int64)
    order = _counting_pass(major, int(n_major), rows)
    bounds = np.zeros(int(n_major) + 1, dtype=np.int64)
    np.cumsum(np.bincount(major, minlength=int(n_major)), out=bounds[1:])
    _sort_within(order, bounds, np.ascontiguousarray(minor, dtype=np.int64))
    return order


@njit(cache=True, nogil=True)
def sorted_sums(code: np.ndarray, order: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows consolidated by a sorted code: ``code`` ascending (``code[i]`` the code of row
    ``order[i]``), ``d`` each row's diff (in row order).  For every run of equal codes whose
    diffs do not sum to zero: its first row, its position in ``code`` and the sum, in code
    order; one pass, no gathered copy of the diffs."""
    n = len(code)
    rows = np.empty(n, np.int64)
    at = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    m = 0
    i = 0
    while i < n:
        c = code[i]
        s = 0
        j = i
        while j < n and code[j] == c:
            s += d[order[j]]
            j += 1
        if s != 0:
            rows[m] = order[i]
            at[m] = i
            sums[m] = s
            m += 1
        i = j
    return rows[:m], at[:m], sums[:m]


@njit(cache=True, nogil=True)
def _run_sums(code: np.ndarray, order: np.ndarray, d: np.ndarray, new: np.ndarray, i: int) -> tuple[int, int, int]:
    """The run of equal codes from position ``i``: where it ends, the sum of its rows'
    diffs and the sum of its old (not ``new``) rows' diffs."""
    n = len(code)
    c = code[i]
    s = 0
    o = 0
    j = i
    while j < n and code[j] == c:
        r = order[j]
        s += d[r]
        if not new[r]:
            o += d[r]
        j += 1
    return j, s, o


@njit(cache=True, nogil=True)
def sorted_sums_old(code: np.ndarray, order: np.ndarray, d: np.ndarray,
                    new: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sorted_sums` of every row and of the rows not ``new`` at once: for every run of
    equal codes where either sum is nonzero, its first row, its position in ``code``, the
    sum of all its diffs and the sum of its old rows' diffs, in code order."""
    n = len(code)
    rows = np.empty(n, np.int64)
    at = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    olds = np.empty(n, np.int64)
    m = 0
    i = 0
    while i < n:
        j, s, o = _run_sums(code, order, d, new, i)
        if s != 0 or o != 0:
            rows[m] = order[i]
            at[m] = i
            sums[m] = s
            olds[m] = o
            m += 1
        i = j
    return rows[:m], at[:m], sums[:m], olds[:m]


@njit(cache=True, nogil=True)
def distinct_changes(code: np.ndarray, order: np.ndarray, d: np.ndarray, new: np.ndarray,
                     span: int) -> tuple[np.ndarray, np.ndarray]:
    """``dd_distinct``'s output change in one pass over rows sorted by a code of ``(data,
    time)`` (``code`` ascending, ``code[i]`` the code of row ``order[i]``; ``code // span``
    the data): for every data row and time, ``[m > 0] - [m' > 0]`` of its multiplicity
    after (``m``) and before (``m'``) the time over every row, minus the same over the rows
    not ``new``.  The nonzero changes: a row of each time's run, and the change."""
    n = len(code)
    rows = np.empty(n, np.int64)
    out = np.empty(n, np.int64)
    m = 0
    i = 0
    key = -1
    c_all = 0
    c_old = 0
    while i < n:
        if code[i] // span != key:
            key = code[i] // span
            c_all = 0
            c_old = 0
        j, s, o = _run_sums(code, order, d, new, i)
        v = (1 if c_all + s > 0 else 0) - (1 if c_all > 0 else 0) - (1 if c_old + o > 0 else 0) + (1 if c_old > 0 else 0)
        c_all += s
        c_old += o
        if v != 0:
            rows[m] = order[i]
            out[m] = v
            m += 1
        i = j
    return rows[:m], out[:m]
