"""``dd_min`` / ``dd_max`` over a totally ordered time, vectorised in numpy.

On ``(data, time, diff)``: for every key and time, the output accumulates to the
smallest (largest) value among the key's rows with positive accumulated
multiplicity (rows whose value is null never count).  The general reduction path
(:func:`.reduce.reduce`) gives the same answer with a dozen SQL queries per call;
here every column becomes integer ids and the work is a few sorts:

* each (key, row) becomes *segments* of constant positive running count
  ``[t, next change)`` on a dense time axis;
* the times at which a key's input changes are *points* on one sorted
  ``(key, time)`` axis; each segment finds the points it covers with two binary
  searches (as in :mod:`.stab`), and each point keeps the least value covering it;
* the output changes where a key's extremum changes from one point to the next.

Inside an iteration (``_new`` marks this iteration's updates, the rest is trace)
the kernel returns ``F(trace + new) − F(trace)`` for keys with new updates, and
evaluates only points at or after a key's earliest new update: before it the two
inputs accumulate alike, so their outputs agree and cancel.  A key's older history
still counts, through the segments that cover those points.

Columns of a type whose equality is not plain value equality in Arrow (floating
point: ``-0.0``, NaN payloads; nested types) are left to the general path
(:func:`min_max` returns ``None``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .common import NEW, keys, names, times
from .stab import dense_ranks, exact_type, expand, ids, segments, sort_order, unique_sorted

_NONE = np.iinfo(np.int64).max  # "no value alive" at a point


def _representatives(ids: np.ndarray) -> np.ndarray:
    """For every id value ``i`` in ``ids`` (shifted to start at 0), one row index having it."""
    rep = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.int64)
    rep[ids] = np.arange(len(ids), dtype=np.int64)
    return rep


def _least_at(
    points: np.ndarray,
    stride: int,
    kid: np.ndarray,
    row: np.ndarray,
    value: np.ndarray,
    t: np.ndarray,
    d: np.ndarray,
    order: np.ndarray,
) -> np.ndarray:
    """For every point ``kid * stride + t`` in sorted ``points``: the least ``value`` among
    rows whose running count (summed in time order per ``row``; ``order`` sorts the rows
    by ``(row, t)``) is positive there."""
    least = np.full(len(points), _NONE, dtype=np.int64)
    if len(row) == 0 or len(points) == 0:
        return least
    order, count, start, end = segments(row, t, d, stride - 1, order)  # open: beyond every time rank
    keep = (count > 0) & (end > start)
    base = kid[order][keep] * stride
    lo = np.searchsorted(points, base + start[keep], side="left")
    hi = np.searchsorted(points, base + end[keep], side="left")
    seg_of, at = expand(lo, hi)
    if len(at):
        np.minimum.at(least, at, value[order][keep][seg_of])
    return least


def _changes(least: np.ndarray, first: np.ndarray, sign: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(point index, value, diff)`` where the extremum changes from one point to the next.

    At a key's first point only the new value is emitted: the value before it is the
    same for both inputs of the difference and cancels."""
    prev = np.empty_like(least)
    prev[1:] = least[:-1]
    changed = first | (least != prev)
    plus = np.nonzero(changed & (least != _NONE))[0]
    minus = np.nonzero(changed & ~first & (prev != _NONE))[0]
    idx = np.concatenate([plus, minus])
    val = np.concatenate([least[plus], prev[minus]])
    diff = np.concatenate([np.full(len(plus), sign, np.int64), np.full(len(minus), -sign, np.int64)])
    return idx, val, diff


def min_max(nkeys: int, ndata: int, width: int, largest: bool, out_type: pa.DataType, X: pa.Table) -> pa.Table | None:
    """``_k*, _o0, _t*, _d``: ``F(all) − F(old)`` of the min (``largest``: max) of ``_a0``
    per key, for keys with new updates; ``None`` when a column's type is not supported."""
    k, a, t = keys(nkeys), names("_a", ndata), times(width)
    if not all(exact_type(X.schema.field(c).type) for c in [*k, *a]):
        return None
    if X.column("_a0").null_count:
        X = X.filter(pc.is_valid(X.column("_a0")))
    n = X.num_rows
    kid = ids([X.column(c) for c in k], n)
    trank, ntimes = dense_ranks([X.column(c).to_numpy() for c in t]) if n else (np.zeros(0, np.int64), 0)
    new = X.column(NEW).to_numpy(zero_copy_only=False).astype(bool)
    start = np.full(int(kid.max()) + 1 if n else 0, _NONE, dtype=np.int64)
    np.minimum.at(start, kid[new], trank[new])
    touched = start[kid] != _NONE
    if not touched.all():
        X, kid, trank, new = X.filter(pa.array(touched)), kid[touched], trank[touched], new[touched]
        n = X.num_rows
    out_cols = [*k, "_o0", *t, "_d"]
    if n == 0:
        fields = [X.schema.field(c) for c in k] + [pa.field("_o0", out_type)] + [pa.field(c, pa.int64()) for c in [*t, "_d"]]
        return pa.schema(fields).empty_table()
    rank = pc.rank(X.column("_a0").combine_chunks(), sort_keys="ascending", tiebreaker="dense").to_numpy()
    value = rank.astype(np.int64) * (-1 if largest else 1)
    row = dense_ranks([kid, ids([X.column(c) for c in a], n)])[0]
    d = X.column("_d").to_numpy()
    stride = ntimes + 1
    pos = kid * stride + trank
    points = unique_sorted(pos[trank >= start[kid]])
    first = np.ones(len(points), dtype=bool)
    p_kid = points // stride
    first[1:] = p_kid[1:] != p_kid[:-1]
    old = ~new
    order = sort_order([row, trank])
    # the old rows in the same order (a subsequence of a sorted order is sorted), renumbered
    order_old = (np.cumsum(old) - 1)[order[old[order]]]
    parts = [
        _changes(_least_at(points, stride, kid, row, value, trank, d, order), first, 1),
        _changes(_least_at(points, stride, kid[old], row[old], value[old], trank[old], d[old], order_old), first, -1),
    ]
    idx = np.concatenate([p[0] for p in parts])
    val = np.concatenate([p[1] for p in parts])
    diff = np.concatenate([p[2] for p in parts])
    # consolidate (point, value)
    order = sort_order([idx, val])
    idx, val, diff = idx[order], val[order], diff[order]
    if len(idx):
        head = np.ones(len(idx), dtype=bool)
        head[1:] = (idx[1:] != idx[:-1]) | (val[1:] != val[:-1])
        starts = np.nonzero(head)[0]
        idx, val, diff = idx[starts], val[starts], np.add.reduceat(diff, starts)
        keep = diff != 0
        idx, val, diff = idx[keep], val[keep], diff[keep]
    key_rows = _representatives(kid)[p_kid[idx]]
    time_rows = _representatives(trank)[points[idx] % stride]
    shift = int(value.min())
    value_rows = _representatives(value - shift)[val - shift]
    cols = {c: X.column(c).take(pa.array(key_rows)) for c in k}
    cols["_o0"] = X.column("_a0").take(pa.array(value_rows)).cast(out_type)
    for c in t:
        cols[c] = X.column(c).take(pa.array(time_rows))
    cols["_d"] = pa.array(diff, pa.int64())
    return pa.table({c: cols[c] for c in out_cols})
