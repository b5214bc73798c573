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
    # (one minor id, as a loop's times advanced to one frontier: the rows are in minor order already)
    by_minor = rows if n_minor <= 1 else _counting_pass(np.ascontiguousarray(minor, dtype=np.int64), int(n_minor), rows)
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


@njit(cache=True, nogil=True)
def _equal_pairs(x: np.ndarray, y: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`equal_pairs` of ``y``'s values all in ``lo .. hi`` (a short range): a counting pass
    numbers ``y``'s rows by value (stably), each ``x`` row then reads its value's run (``x``'s
    values compared with ``lo`` and ``hi`` before any subtraction: no overflow)."""
    span = hi - lo + 1
    start = np.zeros(span + 1, np.int64)
    for v in y:
        start[v - lo + 1] += 1
    for v in range(span):
        start[v + 1] += start[v]
    by_value = np.empty(len(y), np.int64)
    fill = start[:span].copy()
    for j in range(len(y)):
        v = y[j] - lo
        by_value[fill[v]] = j
        fill[v] += 1
    total = 0
    for v in x:
        if lo <= v <= hi:
            total += start[v - lo + 1] - start[v - lo]
    x_of = np.empty(total, np.int64)
    y_of = np.empty(total, np.int64)
    m = 0
    for i in range(len(x)):
        if lo <= x[i] <= hi:
            v = x[i] - lo
            for p in range(start[v], start[v + 1]):
                x_of[m] = i
                y_of[m] = by_value[p]
                m += 1
    return x_of, y_of


def equal_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Every pair of rows ``(i, j)`` with ``x[i] == y[j]`` (int64 values), as two arrays in the
    order of ``i`` and, for one ``i``, of ``j``; ``None`` when ``y``'s values span a range much
    larger than its rows (a sort is the way then).

    >>> [a.tolist() for a in equal_pairs(np.array([5, 7, 5]), np.array([5, 6, 5]))]
    [[0, 0, 2, 2], [0, 2, 0, 2]]
    """
    if len(x) == 0 or len(y) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(y.min()), int(y.max())
    if hi - lo > 4 * (len(x) + len(y)) + 1024:
        return None
    return _equal_pairs(np.ascontiguousarray(x, dtype=np.int64), np.ascontiguousarray(y, dtype=np.int64), lo, hi)


@njit(cache=True, nogil=True)
def _runs_of(codes: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, bool]:
    """:func:`runs_of`, and ``False`` (no positions) when ``wanted`` is not strictly ascending."""
    n = len(codes)
    out = np.empty(n, np.int64)
    k = 0
    p = 0
    for j in range(len(wanted)):
        w = wanted[j]
        if j > 0 and w <= wanted[j - 1]:
            return out[:0], False
        lo, hi = p, n  # the first position from p whose code is not below w (binary search)
        while lo < hi:
            mid = (lo + hi) // 2
            if codes[mid] < w:
                lo = mid + 1
            else:
                hi = mid
        p = lo
        while p < n and codes[p] == w:
            out[k] = p
            k += 1
            p += 1
    return out[:k], True


def runs_of(codes: np.ndarray, wanted: np.ndarray) -> np.ndarray | None:
    """The positions of ``codes`` (ascending int64) holding one of ``wanted`` (strictly ascending
    int64), ascending: a binary search from where the last one ended, for each; ``None`` when
    ``wanted`` is not strictly ascending.

    >>> runs_of(np.array([1, 3, 3, 5, 8]), np.array([3, 4, 8])).tolist()
    [1, 2, 4]
    """
    rows, ok = _runs_of(np.ascontiguousarray(codes, dtype=np.int64), np.ascontiguousarray(wanted, dtype=np.int64))
    return rows if ok else None


@njit(cache=True, nogil=True)
def _first_ids(values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """:func:`first_ids` of values all in ``lo .. hi`` (a short range): a table of the id of every value."""
    id_of = np.full(hi - lo + 1, -1, np.int64)
    out = np.empty(len(values), np.int64)
    n_ids = 0
    for i in range(len(values)):
        v = values[i] - lo
        if id_of[v] < 0:
            id_of[v] = n_ids
            n_ids += 1
        out[i] = id_of[v]
    return out


def first_ids(values: np.ndarray) -> np.ndarray | None:
    """Dense ids of int64 ``values`` numbered in the order the values first appear (as Arrow's
    ``dictionary_encode`` numbers its dictionary), or ``None`` when they spread over a range
    much wider than the rows.

    >>> first_ids(np.array([7, 3, 7, 5])).tolist()
    [0, 1, 0, 2]
    """
    if len(values) == 0:
        return np.zeros(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * len(values) + 1024:
        return None
    return _first_ids(np.ascontiguousarray(values, dtype=np.int64), lo, hi)
