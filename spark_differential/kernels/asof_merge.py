"""``dd_merge_asof``'s kernel: the relational as-of join, over one bucket of ``by`` keys.

On ``(data, time, diff)``: for every time ``s``, the output accumulates to the as-of
join (:mod:`spark_differential.kernels.asof_match`) of the two inputs accumulated at
``s``, each taken as the table of its rows with a positive multiplicity (a row present
``m`` times is ``m`` rows).  The join of a key changes only at the key's own update
times (a totally ordered time) or at their lub closure (a partial order), where the
kernel puts the corrections.

* Plain tables and collections whose call holds one time (every update new and
  positive): one snapshot, each row as it comes, one sort of the right side and a
  binary search per left row for all keys at once.
* A totally ordered time with several times: the rows are consolidated (DuckDB), each
  key's snapshots at its update times are laid out side by side as groups of one batch
  (a row appears in every snapshot it lives in), joined at once, and each snapshot's
  rows are added at its time and retracted at the key's next.  Only snapshots at or
  after a key's first new update are built (earlier ones are equal with and without
  the new updates), so an update at the end of a long history costs one snapshot.
* A partially ordered time: per key, the snapshot at every time of the lub closure
  (:func:`spark_differential.kernels.generic.per_key`).

Given a trace (rows with ``_new`` false) and new updates the kernel returns
``F(trace + new) - F(trace)`` for the keys with new updates, as every stateful kernel.
Columns: inputs ``_k*`` (the ``by`` keys), ``_a*``/``_b*`` (left/right data, the match
value first), the time leaves ``_t*``, ``_d``, ``_new``; output ``_k*``, ``_kr*`` (the
right's own copy of the keys listed in ``right_keys``), ``_a*``, ``_b*`` (not for semi
and anti joins), ``_t*``, ``_d``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.lattice import TimeType
from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck, generic, native
from spark_differential.kernels.asof_match import Codes, Joined, Rule, join, order_codes, tie_order
from spark_differential.kernels.common import NEW, D, StateShape, keys, names, times

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")


@dataclass(frozen=True)
class MergeAsofParams:
    """``nkeys`` keys, ``na``/``nb`` data columns per side (the match value first).

    ``right_keys``: keys whose right-side value is also output (``_kr<i>``; then ``_k<i>``
    is null where a row has no left part; by columns named differently on each side).
    ``coalesce_on``: a row with no left part takes the right's match value as its left
    one (one shared ``on`` column).  ``static``: the inputs are plain rows (one time,
    every diff 1), output unconsolidated."""

    nkeys: int
    na: int
    nb: int
    ttype: TimeType
    rule: Rule
    nulls_equal: bool = False
    right_keys: tuple[int, ...] = ()
    coalesce_on: bool = False
    static: bool = False

    def shape(self) -> StateShape:
        """Keyed by the ``by`` columns (see :class:`~.common.StateShape`)."""
        return StateShape(tuple(keys(self.nkeys)))

    def chunked(self) -> tuple[MergeAsofParams, str]:
        """The parameters with one more key column (a time chunk), and its name."""
        return dataclasses.replace(self, nkeys=self.nkeys + 1), keys(self.nkeys + 1)[-1]

    @property
    def with_right(self) -> bool:
        return self.rule.how not in ("semi", "anti")


def output_names(p: MergeAsofParams) -> list[str]:
    """The kernel's output data columns, in order."""
    kr = [f"_kr{i}" for i in p.right_keys]
    return [*keys(p.nkeys), *kr, *names("_a", p.na), *(names("_b", p.nb) if p.with_right else [])]


# ----------------------------------------------------------------------------- keys


def key_groups(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense ids of the key values over ``A`` then ``B``, and which ids can match (a key
    with a null matches nothing unless keys compare null-safely)."""
    n = A.num_rows + B.num_rows
    ids = np.zeros(n, dtype=np.int64)
    nulls = np.zeros(n, dtype=bool)
    for c in keys(p.nkeys):
        both = pa.chunked_array([*A.column(c).chunks, *B.column(c).chunks], type=A.schema.field(c).type)
        col, width, null = _encoded(both)
        nulls |= null
        if int(ids.max(initial=0)) * width >= 1 << 40:  # keep the combined id small: densify first
            ids = np.unique(ids, return_inverse=True)[1].astype(np.int64).reshape(-1)
        ids = ids * np.int64(width) + col
    if p.nkeys > 1 and n and int(ids.max()) >= 1 << 31:
        ids = np.unique(ids, return_inverse=True)[1].astype(np.int64).reshape(-1)
    count = int(ids.max(initial=-1)) + 1
    matchable = np.ones(count, dtype=bool)
    if not p.nulls_equal:
        matchable[ids[nulls]] = False
    return ids[: A.num_rows], ids[A.num_rows:], matchable


def _encoded(col: pa.ChunkedArray) -> tuple[np.ndarray, int, np.ndarray]:
    """A column's values as dense codes (null: its own code), the number of codes, the nulls."""
    arr = col.combine_chunks()
    null = ~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    try:
        enc = pc.dictionary_encode(arr)
        codes = np.asarray(enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False), dtype=np.int64)
        return codes, len(enc.dictionary) + 1, null
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        seen: dict[Hashable, int] = {}
        codes = np.fromiter((seen.setdefault(_frozen(v), len(seen)) for v in arr.to_pylist()), dtype=np.int64,
                            count=len(arr))
        return codes, max(1, len(seen)), null


def _frozen(v: Any) -> Hashable:
    """A hashable stand-in for a nested value (struct, list, map)."""
    if isinstance(v, dict):
        return tuple((k, _frozen(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


# ----------------------------------------------------------------------------- output


def assemble(p: MergeAsofParams, A: pa.Table, B: pa.Table, li: np.ndarray, ri: np.ndarray, mult: np.ndarray,
             leaves: Sequence[np.ndarray]) -> pa.Table:
    """Output rows from left rows ``li`` of ``A`` and right rows ``ri`` of ``B`` (-1: none)."""
    has_l, has_r = li >= 0, ri >= 0
    take_l = pa.array(np.where(has_l, li, 0), mask=~has_l)
    take_r = pa.array(np.where(has_r, ri, 0), mask=~has_r)
    all_l = bool(has_l.all())
    out: dict[str, Any] = {}
    left_flag = pa.array(has_l)
    for i, c in enumerate(keys(p.nkeys)):
        mine = A.column(c).take(pa.array(li) if all_l else take_l)
        if i in p.right_keys or all_l:
            out[c] = mine
        else:
            out[c] = pc.if_else(left_flag, mine, B.column(c).take(take_r))
    for i in p.right_keys:
        out[f"_kr{i}"] = B.column(keys(p.nkeys)[i]).take(take_r)
    for c in names("_a", p.na):
        out[c] = A.column(c).take(pa.array(li) if all_l else take_l)
    if p.coalesce_on and not all_l:
        right_on = B.column("_b0").take(take_r).cast(A.schema.field("_a0").type)
        out["_a0"] = pc.if_else(left_flag, out["_a0"], right_on)
    if p.with_right:
        for c in names("_b", p.nb):
            out[c] = B.column(c).take(take_r)
    for c, v in zip(times(len(leaves)), leaves):
        out[c] = pa.array(np.asarray(v, dtype=np.int64))
    out[D] = pa.array(np.asarray(mult, dtype=np.int64))
    return pa.table(out)


def _empty(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> pa.Table:
    width = p.ttype.width
    return assemble(p, A.slice(0, 0), B.slice(0, 0), np.zeros(0, np.int64), np.zeros(0, np.int64),
                    np.zeros(0, np.int64), [np.zeros(0, np.int64)] * width)


# ----------------------------------------------------------------------------- the kernel


def merge_asof(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> pa.Table:
    """Kernel for one bucket (see the module docstring)."""
    if A.num_rows == 0 and (B.num_rows == 0 or p.rule.how not in ("right", "full")):
        return _empty(p, A, B)
    if p.static:
        return _one_snapshot(p, A, B)
    if not p.ttype.is_total():
        return _partial(p, A, B)
    leaves = [A.column(c).to_numpy() for c in times(p.ttype.width)]
    one_time = all(len(np.unique(np.concatenate([x, B.column(c).to_numpy()]))) <= 1
                   for x, c in zip(leaves, times(p.ttype.width)))
    if one_time and _all_new_positive(A) and _all_new_positive(B):
        return _one_snapshot(p, A, B)
    return _total(p, A, B)


def _all_new_positive(X: pa.Table) -> bool:
    if X.num_rows == 0:
        return True
    if NEW in X.column_names and not pc.all(X.column(NEW)).as_py():
        return False
    return bool(pc.min(X.column(D)).as_py() > 0)


def _diffs(X: pa.Table) -> np.ndarray:
    """The rows' multiplicities (plain tables come without ``_d``: one each)."""
    if D not in X.column_names:
        return np.ones(X.num_rows, dtype=np.int64)
    return np.asarray(X.column(D).to_numpy(), dtype=np.int64)


def _codes_at(codes: Codes, rows: np.ndarray) -> Codes:
    return Codes(codes.code[rows], codes.ok[rows], None if codes.dist is None else codes.dist[rows])


def _one_snapshot(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> pa.Table:
    """Every row as it comes, all at the one time of the call."""
    ga, gb, matchable = key_groups(p, A, B)
    la, lb = order_codes(A.column("_a0"), B.column("_b0"))
    ties = tie_order(B, names("_b", p.nb)[1:])
    j = join(p.rule, np.where(matchable[ga], ga, -1), _diffs(A), la, np.where(matchable[gb], gb, -1), _diffs(B), lb,
             ties, ga, gb)
    first = A if A.num_rows else B
    leaves = [np.full(len(j.mult), first.column(c)[0].as_py() if c in first.column_names and first.num_rows else 0,
                      dtype=np.int64) for c in times(p.ttype.width)]
    out = assemble(p, A, B, j.left, j.right, j.mult, leaves)
    if p.static:
        return out
    return native.consolidated(out, [c for c in out.column_names if c != D])


# ----------------------------------------------------------------------------- several times


def _consolidated(p: MergeAsofParams, X: pa.Table, data: list[str]) -> tuple[pa.Table, pa.Table]:
    """``X`` summed per (key, data, time): the distinct (key, data) rows (row ``i`` has id
    ``i``), and the updates ``_id, _t*, _d`` (all) and ``_o`` (the trace's alone)."""
    cols = [*keys(p.nkeys), *data]
    tcols = times(p.ttype.width)
    q = duck.quote
    if NEW in X.column_names:
        old = f"sum(CASE WHEN {NEW} THEN 0 ELSE {D} END)::BIGINT"
    else:
        old = "0::BIGINT"
    group = ", ".join(q(c) for c in [*cols, *tcols])
    order = ", ".join(q(c) for c in cols) or "1"
    sql = (f"SELECT {group}, sum({D})::BIGINT AS {D}, {old} AS _o, "
           f"dense_rank() OVER (ORDER BY {order}) - 1 AS _id FROM $X GROUP BY {group} "
           f"HAVING sum({D}) <> 0 OR {old} <> 0")
    rows = duck.query(sql, {"X": X.select([*cols, *tcols, D, *([NEW] if NEW in X.column_names else [])])})
    ids = np.asarray(rows.column("_id").to_numpy(), dtype=np.int64)
    _, first = np.unique(ids, return_index=True)
    distinct = rows.select(cols).take(pa.array(first))
    return distinct, rows.select(["_id", *tcols, D, "_o"])


def _time_codes(p: MergeAsofParams, ua: pa.Table, ub: pa.Table) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Both sides' update times as ranks of one lexicographic order, and the leaves of each rank."""
    tcols = times(p.ttype.width)
    mat = np.stack([np.concatenate([ua.column(c).to_numpy(), ub.column(c).to_numpy()]).astype(np.int64)
                    for c in tcols], axis=1)
    uniq, inv = np.unique(mat, axis=0, return_inverse=True)
    inv = np.asarray(inv, dtype=np.int64).reshape(-1)
    return inv[: ua.num_rows], inv[ua.num_rows:], [uniq[:, i] for i in range(len(tcols))]


@dataclass
class _Side:
    ident: np.ndarray  # distinct row of each update
    group: np.ndarray  # key id of each update
    time: np.ndarray  # time rank of each update
    all: np.ndarray  # diff (all updates)
    old: np.ndarray  # diff (the trace's)


def _snapshots(side: _Side, values: np.ndarray, snap_g: np.ndarray, snap_t: np.ndarray,
               ntimes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(snapshot, distinct row, multiplicity) of every row alive with a positive multiplicity
    in a snapshot; snapshots are ``(snap_g, snap_t)`` pairs sorted by key then time."""
    if len(side.ident) == 0 or len(snap_g) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    order = np.lexsort((side.time, side.ident))
    ident, t, g, v = side.ident[order], side.time[order], side.group[order], values[order]
    cum = np.cumsum(v)
    starts = np.r_[True, ident[1:] != ident[:-1]]
    base = np.maximum.accumulate(np.where(starts, np.arange(len(v)), 0))
    cum = cum - (cum[base] - v[base])
    last = np.r_[ident[1:] != ident[:-1], True]
    t_next = np.where(last, ntimes, np.r_[t[1:], 0])
    width = np.int64(ntimes + 1)
    keys_s = snap_g * width + snap_t
    lo = np.searchsorted(keys_s, g * width + t, side="left")
    hi = np.searchsorted(keys_s, g * width + t_next, side="left")
    keep = (cum > 0) & (hi > lo)
    lo, hi, ident, cum = lo[keep], hi[keep], ident[keep], cum[keep]
    lengths = hi - lo
    rep = np.repeat(np.arange(len(lo)), lengths)
    offset = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return lo[rep] + offset, ident[rep], cum[rep]


def _side(p: MergeAsofParams, upd: pa.Table, groups: np.ndarray, trank: np.ndarray) -> _Side:
    ident = np.asarray(upd.column("_id").to_numpy(), dtype=np.int64)
    return _Side(ident, groups[ident], trank, np.asarray(upd.column(D).to_numpy(), dtype=np.int64),
                 np.asarray(upd.column("_o").to_numpy(), dtype=np.int64))


def _total(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> pa.Table:
    """A totally ordered time with several times (see the module docstring)."""
    da, ua = _consolidated(p, A, names("_a", p.na))
    db, ub = _consolidated(p, B, names("_b", p.nb))
    ga, gb, matchable = key_groups(p, da, db)
    ta, tb, leaves = _time_codes(p, ua, ub)
    sa, sb = _side(p, ua, ga, ta), _side(p, ub, gb, tb)
    ntimes = len(leaves[0])
    # keys with new updates, and the first time of each one's new updates
    first_new = np.full(len(matchable), ntimes, dtype=np.int64)
    for s in (sa, sb):
        moved = s.all != s.old
        np.minimum.at(first_new, s.group[moved], s.time[moved])
    pairs = np.concatenate([np.stack([s.group, s.time], axis=1) for s in (sa, sb)])
    pairs = pairs[pairs[:, 1] >= first_new[pairs[:, 0]]] if len(pairs) else pairs.reshape(0, 2)
    if len(pairs) == 0:
        return _empty(p, da, db)
    snaps = np.unique(pairs, axis=0)
    snap_g, snap_t = snaps[:, 0].astype(np.int64), snaps[:, 1].astype(np.int64)
    codes_a, codes_b = order_codes(da.column("_a0"), db.column("_b0"))
    ties_b = tie_order(db, names("_b", p.nb)[1:])
    parts = []
    for which, sign in (("all", 1), ("old", -1)):
        sl, il, ml = _snapshots(sa, getattr(sa, which), snap_g, snap_t, ntimes)
        sr, ir, mr = _snapshots(sb, getattr(sb, which), snap_g, snap_t, ntimes)
        if len(ml) == 0 and (len(mr) == 0 or p.rule.how not in ("right", "full")):
            continue
        live_l = matchable[snap_g[sl]]
        live_r = matchable[snap_g[sr]]
        j = join(p.rule, np.where(live_l, sl, -1), ml, _codes_at(codes_a, il), np.where(live_r, sr, -1), mr,
                 _codes_at(codes_b, ir), _ties_of(ties_b, ir), sl, sr)
        parts.append(_differenced(j, il, ir, sign, snap_g))
    if not parts:
        return _empty(p, da, db)
    li, ri, snap, mult = (np.concatenate([x[i] for x in parts]) for i in range(4))
    li, ri, tr, mult = _summed(li, ri, snap_t[snap], mult)
    return assemble(p, da, db, li, ri, mult, [lv[tr] for lv in leaves])


def _ties_of(ties: Callable[[np.ndarray], np.ndarray], ident: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: ties(ident[rows])


def _differenced(j: Joined, il: np.ndarray, ir: np.ndarray, sign: int,
                 snap_g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each joined row at its snapshot's time, retracted at the key's next snapshot."""
    li = _mapped(j.left, il)
    ri = _mapped(j.right, ir)
    nxt = j.group + 1
    more = nxt < len(snap_g)
    more[more] &= snap_g[nxt[more]] == snap_g[j.group[more]]
    return (np.concatenate([li, li[more]]), np.concatenate([ri, ri[more]]),
            np.concatenate([j.group, nxt[more]]), np.concatenate([sign * j.mult, -sign * j.mult[more]]))


def _mapped(rows: np.ndarray, ident: np.ndarray) -> np.ndarray:
    """Snapshot rows (-1: none) as distinct rows."""
    out = np.full(len(rows), -1, dtype=np.int64)
    hit = rows >= 0
    out[hit] = ident[rows[hit]]
    return out


def _summed(li: np.ndarray, ri: np.ndarray, t: np.ndarray, mult: np.ndarray) -> tuple[np.ndarray, ...]:
    """Consolidated (left row, right row, time) entries, zero sums dropped."""
    if len(mult) == 0:
        return li, ri, t, mult
    order = np.lexsort((t, ri, li))
    li, ri, t, mult = li[order], ri[order], t[order], mult[order]
    start = np.r_[True, (li[1:] != li[:-1]) | (ri[1:] != ri[:-1]) | (t[1:] != t[:-1])]
    at = np.nonzero(start)[0]
    sums = np.add.reduceat(mult, at)
    keep = sums != 0
    return li[at][keep], ri[at][keep], t[at][keep], sums[keep]


# ----------------------------------------------------------------------------- partial orders


def _partial(p: MergeAsofParams, A: pa.Table, B: pa.Table) -> pa.Table:
    """Per key, the join at every time of the lub closure (small histories)."""
    k_cols, tcols = keys(p.nkeys), times(p.ttype.width)
    a_cols, b_cols = names("_a", p.na), names("_b", p.nb)
    rows: list[tuple[Hashable, Hashable, tuple[int, ...], int, bool]] = []
    for side, X, cols in ((0, A, a_cols), (1, B, b_cols)):
        data = {c: X.column(c).to_pylist() for c in [*k_cols, *cols, *tcols, D]}
        new = X.column(NEW).to_pylist() if NEW in X.column_names else [True] * X.num_rows
        for i in range(X.num_rows):
            key = tuple(_frozen(data[c][i]) for c in k_cols)
            row = tuple(data[c][i] for c in [*k_cols, *cols])
            rows.append((key, (side, _frozen(row), i), tuple(int(data[c][i]) for c in tcols), int(data[D][i]),
                         bool(new[i])))
    # rows equal as values are one data item: index the first occurrence of each
    canon: dict[tuple[int, Hashable], int] = {}
    rows = [(k, (s, canon.setdefault((s, fr), i)), t, r, n) for k, (s, fr, i), t, r, n in rows]

    def evaluate(key: Hashable, acc: Counter, s: tuple[int, ...]) -> Counter:
        lrows = [(i, m) for (side, i), m in acc.items() if side == 0 and m > 0]
        rrows = [(i, m) for (side, i), m in acc.items() if side == 1 and m > 0]
        return _snapshot(p, A, B, lrows, rrows)

    result = generic.per_key(p.ttype, rows, evaluate)
    if not result:
        return _empty(p, A, B)
    li = np.array([d[0] for _, d, _, _ in result], dtype=np.int64)
    ri = np.array([d[1] for _, d, _, _ in result], dtype=np.int64)
    mult = np.array([r for *_, r in result], dtype=np.int64)
    leaves = [np.array([t[w] for _, _, t, _ in result], dtype=np.int64) for w in range(p.ttype.width)]
    return assemble(p, A, B, li, ri, mult, leaves)


def _snapshot(p: MergeAsofParams, A: pa.Table, B: pa.Table, lrows: list[tuple[int, int]],
              rrows: list[tuple[int, int]]) -> Counter:
    """One key's join at one time: ``(left row, right row)`` of ``A``/``B`` -> multiplicity."""
    il = np.array([i for i, _ in lrows], dtype=np.int64)
    ir = np.array([i for i, _ in rrows], dtype=np.int64)
    ml = np.array([m for _, m in lrows], dtype=np.int64)
    mr = np.array([m for _, m in rrows], dtype=np.int64)
    sub_a, sub_b = A.take(pa.array(il)), B.take(pa.array(ir))
    ga, gb, matchable = key_groups(p, sub_a, sub_b)
    la, lb = order_codes(sub_a.column("_a0"), sub_b.column("_b0"))
    j = join(p.rule, np.where(matchable[ga], ga, -1), ml, la, np.where(matchable[gb], gb, -1), mr, lb,
             tie_order(sub_b, names("_b", p.nb)[1:]), ga, gb)
    out: Counter = Counter()
    for lj, rj, m in zip(j.left.tolist(), j.right.tolist(), j.mult.tolist()):
        out[(int(il[lj]) if lj >= 0 else -1, int(ir[rj]) if rj >= 0 else -1)] += m
    return out


def renamed(kernel: Callable[..., pa.Table], sources: Sequence[str], labels: Sequence[str], p: Any,
            *tables: pa.Table) -> pa.Table:
    """``kernel``'s output columns ``sources`` under the names ``labels`` (plain rows: no time, no diff)."""
    out = kernel(p, *tables)
    return pa.Table.from_arrays([out.column(c) for c in sources], names=list(labels))
