"""A join whose one side no longer changes: that side prepared once, the other met key by key.

On ``(data, time, diff)`` for a totally ordered time (one time leaf): the join of
new updates ``P`` (``(k, x, t, r)``) with a collection ``S`` that has all its updates
already (``(k, y, s, c)``, none new) is, as :func:`spark_differential.kernels.join.join_total`
computes it, ``Σ (k, x, y, max(t, s), r·c)`` over pairs with equal keys, split as two
stabbing joins:

* every update of ``P`` meets ``S`` accumulated *at* its time ``t``: ``(k, x, y, t, r·n)``
  for every ``y`` whose running count ``n`` at ``t`` is nonzero;
* every update of ``S`` at ``s`` meets ``P`` accumulated *strictly before* ``s``:
  ``(k, x, y, s, c·m)`` for every ``x`` whose running count ``m`` before ``s`` is nonzero.

Inside a loop an outer collection (BFS's edges) is such an ``S`` from iteration 1 on:
it enters at iteration 0 and never changes again, while the loop variable's changes
``P`` meet it at every iteration.  :func:`prepare` turns ``S`` once into its rows in
``(key, time)`` order and its segments of constant running count per ``(key, data)``;
:func:`join_fixed` then finds each new update's key among them by binary search and
walks that key's rows and segments in one compiled pass, instead of gathering,
consolidating and numbering ``S``'s touched rows again at every iteration.  The
output rows are not consolidated (a row may repeat, as with ``consolidate=False``):
summed, they are the join's.

A key with many new updates against many rows of ``S`` would make the per-key walk
quadratic; :func:`join_fixed` returns ``None`` when its work would exceed a multiple of
the rows involved (the caller then runs the general stabbing join).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit

from spark_differential.kernels.native import KeySorted, Radix, int_values, key_sorted
from spark_differential.kernels.stab import dense_ranks, exact_type, ids, sort_order

_OPEN = np.iinfo(np.int64).max  # a segment that no later update ends

# the per-key walk may do this many steps per row involved (new updates, touched rows
# of the prepared side, output rows) before the general stabbing join is the better way
WORK_PER_ROW = 16
WORK_SLACK = 100_000


@dataclass(frozen=True)
class Fixed:
    """One side of a join prepared for :func:`join_fixed`: its rows (consolidated, in key
    and time order, their keys packed by ``radix`` into ascending ``codes``) and its
    segments of constant nonzero running count per ``(key, data)``, ordered by key and,
    within a key, by their starts."""

    table: pa.Table  # the side's rows (kernel columns), in (key, time) order
    key: tuple[str, ...]
    radix: Radix
    codes: np.ndarray  # key code of every row, ascending
    t: np.ndarray  # time of every row
    d: np.ndarray  # diff of every row
    seg_code: np.ndarray  # key code of every segment, ascending
    seg_row: np.ndarray  # a row of the segment's (key, data): where its data columns are taken from
    seg_start: np.ndarray  # the segment holds on [seg_start, seg_end)
    seg_end: np.ndarray
    seg_count: np.ndarray  # the running count on it (nonzero)
    # where each key code's rows and segments start (key codes 0 .. len - 2; the last entry
    # the end), when the codes are dense enough for a table of them; else binary searches
    offsets: np.ndarray | None = None
    seg_offsets: np.ndarray | None = None


def prepare(table: pa.Table | KeySorted, key: Sequence[str], data: Sequence[str], time: str = "_t0",
            diff: str = "_d") -> Fixed | None:
    """``table`` (kernel columns: ``key``, ``data``, ``time``, ``diff``; or a
    :class:`~spark_differential.kernels.native.KeySorted` of them sorted by key and then
    time) prepared for :func:`join_fixed`, or ``None`` where its key columns are not
    integers without nulls that pack into one int64, or it sums to nothing.

    >>> import pyarrow as pa
    >>> f = prepare(pa.table({"_k0": [1, 1, 1], "_b0": [7, 7, 8], "_t0": [0, 5, 2], "_d": [1, -1, 1]}), ["_k0"], ["_b0"])
    >>> list(zip(f.seg_start.tolist(), f.seg_end.tolist(), f.seg_count.tolist()))
    [(0, 5, 1), (2, 9223372036854775807, 1)]
    """
    key = tuple(key)
    if isinstance(table, KeySorted):
        ks: KeySorted | None = table if table.key == key else None
    else:
        ks = None
    if ks is None:
        raw = table.table if isinstance(table, KeySorted) else table
        if raw.num_rows == 0:
            return None
        ks = key_sorted(raw, key, diff=diff, then=[time])
        if ks is None:
            return None
    rows = ks.table
    n = rows.num_rows
    t = int_values(rows.column(time))
    d = int_values(rows.column(diff))
    if t is None or d is None or n == 0:
        return None
    codes = ks.codes
    # (key, data) groups: dense ids, the rows in (group, time) order
    did = dense_ranks([codes, ids([rows.column(c) for c in data], n)])[0] if data else dense_ranks([codes])[0]
    order = sort_order([did, t])
    g, ts, ds = did[order], t[order], d[order]
    first = np.ones(n, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    cs = np.cumsum(ds)
    head = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    count = cs - cs[head] + ds[head]
    end = np.empty(n, dtype=np.int64)
    end[:-1] = ts[1:]
    end[np.append(first[1:], True)] = _OPEN
    keep = count != 0
    seg_row = order[keep]
    # did orders groups by key code first, so the segments are in key order already
    seg_code = codes[seg_row]
    span = 1
    for size in ks.radix.size:
        span *= size
    offsets = seg_offsets = None
    if span <= 4 * n + 1024:  # codes 0 .. span - 1
        every = np.arange(span + 1, dtype=np.int64)
        offsets = np.searchsorted(codes, every, side="left")
        seg_offsets = np.searchsorted(seg_code, every, side="left")
    # within a key, the segments in order of their starts: a stabbing pass over them stops
    # at the first that starts after the time it looks for
    by_start = sort_order([seg_code, ts[keep]])
    seg_row = seg_row[by_start]
    return Fixed(rows, key, ks.radix, codes, t, d, seg_code, seg_row, ts[keep][by_start], end[keep][by_start],
                 count[keep][by_start], offsets, seg_offsets)


@njit(cache=True, nogil=True)
def _walk(p_grp: np.ndarray, p_t: np.ndarray, p_d: np.ndarray, p_bound: np.ndarray, a0: np.ndarray, a1: np.ndarray,
          b0: np.ndarray, b1: np.ndarray, s_t: np.ndarray, s_d: np.ndarray, seg_row: np.ndarray,
          seg_start: np.ndarray, seg_end: np.ndarray, seg_count: np.ndarray, out_p: np.ndarray, out_s: np.ndarray,
          out_t: np.ndarray, out_d: np.ndarray) -> int:
    """Both stabbing joins of ``P`` against the prepared side, key by key: key ``k``'s new
    updates are ``P[p_bound[k]:p_bound[k + 1]]`` in ``(group, time)`` order (``p_grp``: the
    row's ``(key, data)`` group), its segments ``[a0[k], a1[k])`` in order of their starts,
    its rows ``[b0[k], b1[k])`` in time order.
    Writes ``(P row, S row, time, diff)`` of every output row; returns how many."""
    m = 0
    for k in range(len(p_bound) - 1):
        i, j = p_bound[k], p_bound[k + 1]
        # P's updates against S accumulated at their times (the key's segments by start)
        for p in range(i, j):
            if p_d[p] == 0:
                continue
            tp = p_t[p]
            for s in range(a0[k], a1[k]):
                if seg_start[s] > tp:
                    break
                if tp < seg_end[s]:
                    out_p[m] = p
                    out_s[m] = seg_row[s]
                    out_t[m] = tp
                    out_d[m] = p_d[p] * seg_count[s]
                    m += 1
        # S's updates against each (key, data) group of P accumulated strictly before them:
        # from S's first update after the group's first, while some of the group counts
        g0 = i
        while g0 < j:
            g1 = g0
            while g1 < j and p_grp[g1] == p_grp[g0]:
                g1 += 1
            x, y = b0[k], b1[k]
            while x < y:
                mid = (x + y) // 2
                if s_t[mid] <= p_t[g0]:
                    x = mid + 1
                else:
                    y = mid
            q = g0
            acc = 0
            for s in range(x, b1[k]):
                ts = s_t[s]
                while q < g1 and p_t[q] < ts:
                    acc += p_d[q]
                    q += 1
                if acc == 0:
                    if q == g1:
                        break
                    continue
                if s_d[s] != 0:
                    out_p[m] = g0
                    out_s[m] = s
                    out_t[m] = ts
                    out_d[m] = s_d[s] * acc
                    m += 1
            g0 = g1
    return m


def _ranges(sorted_codes: np.ndarray, offsets: np.ndarray | None, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi)`` of each wanted code (ascending, ``-1``: none) among ascending codes."""
    if offsets is not None:
        w = np.where(wanted < 0, len(offsets) - 1, wanted)
        return offsets[w], offsets[np.minimum(w + 1, len(offsets) - 1)]
    return np.searchsorted(sorted_codes, wanted, side="left"), np.searchsorted(sorted_codes, wanted, side="right")


def join_fixed(fixed: Fixed, new: pa.Table, new_data: Sequence[str], out_cols: Sequence[str],
               time: str = "_t0", diff: str = "_d") -> pa.Table | None:
    """The join of ``new`` (updates: the fixed side's key columns, ``new_data``, ``time``,
    ``diff``) with the side :func:`prepare` made: columns ``out_cols`` (keys, data of
    either side, the time, the diff), taken from whichever side has each; not consolidated.
    ``None`` where this does not apply (keys not integers without nulls, or a walk that
    would be quadratic in some key): the caller runs the general join.

    >>> import pyarrow as pa
    >>> f = prepare(pa.table({"_k0": [1, 1], "_b0": [7, 7], "_t0": [0, 5], "_d": [1, -1]}), ["_k0"], ["_b0"])
    >>> new = pa.table({"_k0": [1, 1], "_a0": [3, 3], "_t0": [2, 4], "_d": [1, -1]})
    >>> out = join_fixed(f, new, ["_a0"], ["_k0", "_a0", "_b0", "_t0", "_d"])
    >>> sorted(tuple(r.values()) for r in out.to_pylist())
    [(1, 3, 7, 2, 1), (1, 3, 7, 4, -1)]

    (edge 1→7 lives on ``[0, 5)``; the value 3 on ``[2, 4)``: the pair on ``[2, 4)``)
    """
    if not all(exact_type(new.schema.field(c).type) for c in new_data):
        return None  # groups of new updates by data need plain value equality
    n = new.num_rows
    key_values = [int_values(new.column(c)) for c in fixed.key]
    t = int_values(new.column(time))
    d = int_values(new.column(diff))
    if any(v is None for v in key_values) or t is None or d is None:
        return None
    empty = pa.schema([_field(c, new, fixed.table) for c in out_cols]).empty_table()
    if n == 0:
        return empty
    code, inside = fixed.radix.codes(key_values)  # type: ignore[arg-type]
    if inside is not None:  # keys the fixed side does not have meet nothing
        code = np.where(inside, code, -1)
    grp = ids([new.column(c) for c in new_data], n) if new_data else np.zeros(n, dtype=np.int64)
    order = sort_order([code + 1, grp, t])  # (key, group, time); key code -1: none
    p_code, p_grp, p_t, p_d = code[order], grp[order], t[order], d[order]
    head = np.ones(n, dtype=bool)
    head[1:] = p_code[1:] != p_code[:-1]
    firsts = np.nonzero(head)[0]
    kcodes = p_code[firsts]
    per_key = np.diff(np.append(firsts, n))
    a0, a1 = _ranges(fixed.seg_code, fixed.seg_offsets, kcodes)
    b0, b1 = _ranges(fixed.codes, fixed.offsets, kcodes)
    segs, rows = a1 - a0, b1 - b0
    ghead = head.copy()
    ghead[1:] |= p_grp[1:] != p_grp[:-1]
    groups = np.add.reduceat(ghead.astype(np.int64), firsts)
    # the walk's work, and a bound on its output: every new update against its key's
    # segments, every group of new updates against its key's rows
    work = int((per_key * segs).sum() + (groups * rows).sum())
    if work > WORK_PER_ROW * (n + int(rows.sum()) + int(segs.sum())) + WORK_SLACK:
        return None
    out_p, out_s, out_t, out_d = (np.empty(work, np.int64) for _ in range(4))
    m = _walk(p_grp, p_t, p_d, np.append(firsts, n).astype(np.int64), a0, a1, b0, b1, fixed.t, fixed.d,
              fixed.seg_row, fixed.seg_start, fixed.seg_end, fixed.seg_count, out_p, out_s, out_t, out_d)
    if m == 0:
        return empty
    out_p, out_s, out_t, out_d = out_p[:m], out_s[:m], out_t[:m], out_d[:m]
    p_rows = order[out_p]
    known = dict(zip(fixed.key, key_values))  # the new side's key columns, as int64 values already
    cols = []
    for c in out_cols:
        if c == time:
            cols.append(pa.array(out_t).cast(new.schema.field(time).type))
        elif c == diff:
            cols.append(pa.array(out_d))
        elif c in new.column_names:
            cols.append(_taken(new.column(c), p_rows, known.get(c)))
        else:
            cols.append(_taken(fixed.table.column(c), out_s, None))
    return pa.Table.from_arrays(cols, schema=empty.schema)


def _taken(column: pa.ChunkedArray, rows: np.ndarray, values: np.ndarray | None) -> pa.Array:
    """``column``'s values at ``rows``: gathered by numpy where they are integers without
    nulls (``values``: them as int64, when the caller has them), else by Arrow."""
    t = column.type
    if values is None and not column.null_count and pa.types.is_integer(t):
        values = np.asarray((column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
                            .to_numpy(zero_copy_only=False))
    if values is not None:
        return pa.array(values[rows]).cast(t)
    return column.take(pa.array(rows))


def _field(c: str, new: pa.Table, other: pa.Table) -> pa.Field:
    if c == "_d":
        return pa.field(c, pa.int64())
    return new.schema.field(c) if c in new.column_names else other.schema.field(c)
