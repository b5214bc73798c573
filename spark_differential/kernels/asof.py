"""As-of join against an upsert log, over one bucket of keys.

On ``(data, time, diff)``: the collection :func:`spark_differential.from_upserts`
builds from a log of ``(key, value, time)`` rows accumulates, at time ``t``, to the
key's non-deleted log rows at its latest log time ``s <= t``.  So an update
``(k, x, t, r)`` of the orders meets exactly those rows: output
``((k, x, y), t, r * m)`` for each value ``y`` present ``m`` times at ``(k, s)``
(``strict``: ``s < t``; ``left``: an order meeting nothing keeps going with nulls).
The log's retractions are never built.

The common case (one log row per key and time) is a single sort: keys become dense
ids, ``(key id, time, side)`` is packed into one int64 so that every order sorts
right after the log rows it may see, and a running maximum carries the latest log
row forward.  Logs with several rows at one (key, time), and key types Arrow cannot
dictionary-encode, go through DuckDB's ``ASOF JOIN`` (``sql/asof_upserts.sql``).

With no key columns (``nkeys == 0``) the log is one global timeline: every order
meets the log rows at the latest log time ``s <= t`` over the whole log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck, native
from spark_differential.kernels.common import D, csv, keys, names

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

_BITS = 62  # bits available for (key id, time, side) in a non-negative int64


@dataclass(frozen=True)
class UpsertAsofParams:
    """As-of join of orders against an upsert log, for a time of width 1 (leaf ``_t0``)."""

    nkeys: int
    na: int
    nb: int  # the log's value columns ``_b0 .. _b{nb-1}``
    strict: bool = False
    left: bool = False
    deleted: bool = False  # the log's column ``_b{nb}`` flags rows that delete the key


def asof_upserts(p: UpsertAsofParams, A: pa.Table, H: pa.Table) -> pa.Table:
    """Kernel for one bucket.

    ``A`` (the orders): ``_k*, _a*, _t0, _d``; ``H`` (one row per log row): ``_k*, _b*,
    _t0`` and the deletion flag ``_b{nb}`` when ``p.deleted``.  Output: ``_k*, _a*,
    _b*, _t0, _d`` (the order's time), consolidated.
    """
    k, a, b = keys(p.nkeys), names("_a", p.na), names("_b", p.nb)
    out_cols = [*k, *a, *b, "_t0", D]
    if A.num_rows == 0:
        return pa.schema([pa.field(c, pa.int64() if c in ("_t0", D) else pa.null()) for c in out_cols]).empty_table()
    fast = _by_sort(p, A, H)
    if fast is not None:
        return fast
    return duck.query(_sql(p), {"A": A, "H": H})


def expanded(
    kernel: Callable[..., pa.Table], sources: Sequence[str], labels: Sequence[str], p: Any, *tables: pa.Table
) -> pa.Table:
    """``kernel``'s output as ordinary rows: each row repeated ``_d`` times (a positive
    number of copies: every order is an insertion), the columns ``sources`` named
    ``labels``.  ``sd.sql``'s ``ASOF JOIN`` of two tables, in the task that joins them.

    >>> import pyarrow as pa
    >>> t = pa.table({"_a0": ["x", "y"], "_b0": [1, 2], "_t0": [5, 6], "_d": [2, 1]})
    >>> expanded(lambda p, a: a, ["_a0", "_b0"], ["who", "price"], None, t).to_pydict()
    {'who': ['x', 'x', 'y'], 'price': [1, 1, 2]}
    """
    out = kernel(p, *tables)
    copies = np.asarray(out.column(D).to_numpy(), dtype=np.int64)
    rows = pa.array(np.repeat(np.arange(out.num_rows, dtype=np.int64), copies))
    return pa.Table.from_arrays([out.column(c).take(rows) for c in sources], names=list(labels))


def _sql(p: UpsertAsofParams) -> str:
    k, a, b = keys(p.nkeys), names("_a", p.na), names("_b", p.nb)
    return duck.render(
        "asof_upserts",
        A="$A",
        H="$H",
        a_cols=csv([*k, *a, "_t0"]),
        k_lead="".join(f"{c}, " for c in k),
        kv_lead="".join(f"{c}, " for c in [*k, *b]),
        live=f"WHERE NOT coalesce(_b{p.nb}, false)" if p.deleted else "",
        how="LEFT" if p.left else "",
        k_eq="".join(f"a.{c} = s.{c} AND " for c in k),
        cmp=">" if p.strict else ">=",
        mv_eq="".join(f"m.{c} = v.{c} AND " for c in k),
        out_lead="".join(f"{c}, " for c in [*[f"m.{c}" for c in k], *[f"m.{c}" for c in a], *[f"v.{c}" for c in b]]),
        mult="coalesce(v._m, 1)" if p.left else "v._m",
    )


def _key_ids(p: UpsertAsofParams, A: pa.Table, H: pa.Table) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Dense ids of the keys over A then H (null keys: id -1), and how many; None if unsupported."""
    n = A.num_rows + H.num_rows
    ids = np.zeros(n, dtype=np.int64)
    nulls = np.zeros(n, dtype=bool)
    count = 1
    for c in keys(p.nkeys):
        try:
            both = pa.chunked_array([*A.column(c).chunks, *H.column(c).chunks], type=A.schema.field(c).type)
            enc = pc.dictionary_encode(both.combine_chunks())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        idx = enc.indices
        nulls |= np.asarray(idx.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        col = np.asarray(idx.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        width = max(1, len(enc.dictionary))
        if count * width >= 1 << 40:  # keep the combined id small: densify first
            ids = np.unique(ids, return_inverse=True)[1].astype(np.int64)
            count = int(ids.max()) + 1 if n else 1
        ids = ids * width + col
        count *= width
    if p.nkeys > 1 and n:
        ids = np.unique(ids, return_inverse=True)[1].astype(np.int64)
        count = int(ids.max()) + 1
    ids[nulls] = -1
    return ids, count


def _by_sort(p: UpsertAsofParams, A: pa.Table, H: pa.Table, consolidated: bool = False) -> pa.Table | None:
    """The one-sort as-of lookup; None when the log has several rows at one (key, time)."""
    found = _key_ids(p, A, H)
    if found is None:
        return None
    ids, nkeys = found
    n_a = A.num_rows
    t = np.concatenate([A.column("_t0").to_numpy(), H.column("_t0").to_numpy()])
    lo, hi = int(t.min()), int(t.max())  # Python ints: the span may not fit an int64
    if (nkeys + 1).bit_length() + (hi - lo).bit_length() + 1 > _BITS:
        t = np.unique(t, return_inverse=True)[1].astype(np.int64)  # ranks keep the order
    else:
        t = t - lo
    # at equal (key, time) a log row sorts before an order that sees it (not strict),
    # after an order that does not (strict)
    side = np.zeros(len(t), dtype=np.int64)
    side[n_a:] = 1 if p.strict else 0
    side[:n_a] = 0 if p.strict else 1
    # key ids shifted by one: rows with a null key form their own group 0 and never hit
    packed = ((ids + 1) << (int(t.max()).bit_length() + 1)) | (t << 1) | side
    order = np.argsort(packed)  # ties are rejected or consolidated below: stability is not needed
    packed_s = packed[order]
    is_log = order >= n_a
    same = packed_s[1:] == packed_s[:-1]
    if np.any(same & is_log[1:] & is_log[:-1]):
        return None  # a log with several rows at one (key, time): the multiset case
    if not consolidated:
        # orders sharing (key, time) may be copies of one another: consolidate, then look up
        if np.any(same & ~is_log[1:] & ~is_log[:-1]) or np.any(A.column(D).to_numpy() == 0):
            cols = [*keys(p.nkeys), *names("_a", p.na), "_t0"]
            merged = native.consolidated(A, cols)
            return _by_sort(p, merged, H, consolidated=True) if merged.num_rows else None
    return _lookup(p, A, H, ids, order, is_log)


def _lookup(p: UpsertAsofParams, A: pa.Table, H: pa.Table, ids: np.ndarray, order: np.ndarray, is_log: np.ndarray) -> pa.Table:
    """Each order meets the last log row sorted before it, if that row has the order's key."""
    n_a = A.num_rows
    positions = np.arange(len(order))
    last = np.maximum.accumulate(np.where(is_log, positions, -1))
    at = np.nonzero(~is_log)[0]
    # back to A's own row order: A's columns are then filtered (inner) or kept (left), not taken
    j = np.empty(n_a, dtype=np.int64)
    j[order[at]] = last[at]
    hit = j >= 0
    hpos = order[np.where(hit, j, 0)]
    hit &= (ids[hpos] == ids[:n_a]) & (ids[:n_a] >= 0)
    hrow = np.where(hit, hpos - n_a, 0)
    if p.deleted and H.num_rows:
        gone = pc.fill_null(H.column(f"_b{p.nb}"), False).to_numpy(zero_copy_only=False)
        hit &= ~np.asarray(gone, dtype=bool)[hrow]
    own = A.select([*keys(p.nkeys), *names("_a", p.na)])
    if p.left:
        hidx = pa.array(hrow, mask=~hit)
    else:
        own, hidx = own.filter(pa.array(hit)), pa.array(hrow[hit])
    out = {c: own.column(c) for c in own.column_names}
    for c in names("_b", p.nb):
        out[c] = H.column(c).take(hidx)
    rest = A.select(["_t0", D])
    if not p.left:
        rest = rest.filter(pa.array(hit))
    out["_t0"], out[D] = rest.column("_t0"), rest.column(D)
    return pa.table(out)
