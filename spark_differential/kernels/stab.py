"""The stabbing join: updates of one collection against another *accumulated* at their times.

On ``(data, time, diff)`` for a totally ordered time: for every update
``p = (k, x, t, r)`` of ``P`` and every row ``y`` of ``Q`` whose accumulated
multiplicity ``c`` at ``t`` (strictly before ``t`` when ``strict``) is nonzero,
output ``(k, x, y, t, r * c)``.  This is seed 000's trace formulation of a join:
summed with the mirror image (``Q``'s updates against ``P`` strictly before), it
equals the pairwise join at lattice-join times, without ever pairing two long
histories update by update.

DuckDB consolidates both inputs and numbers their keys; numpy does the rest in
``O((|P| + |Q|) log n + output)``: ``Q``'s history becomes segments of constant
running count per (key, data), points and segment ends are placed on one sorted
axis of (key, time rank), and each segment's points are found with two binary
searches and expanded without a Python loop.  (DuckDB's IEJoin answered the same
question about five times slower on 10^6 points; see docs/performance.md.)
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck
from spark_differential.kernels.common import csv, key_eq, keys, times

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
orders = lazy("spark_differential.kernels.order")  # imports numba: loaded on first use


def packed(columns: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 key ordering rows as ``columns`` do lexicographically (first most
    significant), or ``None`` when their value ranges do not fit in 62 bits together.

    Sorting one int64 column is several times faster than ``np.lexsort`` over several."""
    key: np.ndarray | None = None
    span = 1
    for col in reversed(columns):
        if len(col) == 0:
            return np.zeros(0, dtype=np.int64)
        lo, hi = int(col.min()), int(col.max())
        if span * (hi - lo + 1) >= 1 << 62:
            return None
        part = (col.astype(np.int64) - lo) * span
        key = part if key is None else key + part
        span *= hi - lo + 1
    return key


def sort_order(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Indices sorting rows by ``columns`` lexicographically (first most significant), rows
    equal in every column in row order (as ``np.lexsort``)."""
    key = packed(columns)
    return argsort_packed(key) if key is not None else np.lexsort(tuple(reversed(columns)))


def argsort_packed(key: np.ndarray) -> np.ndarray:
    """Indices sorting ``key`` (non-negative int64, as :func:`packed` makes them), ties in row
    order (:func:`sort_packed`)."""
    return sort_packed(key)[0]


def sort_packed(key: np.ndarray, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(order, key[order])`` for non-negative int64 ``key``, ties in row order: where the
    key and the row number fit together in 62 bits, one plain sort of ``key << bits | row``
    (a sort of int64, SIMD where the machine has it: 767,000 random keys 5.5 against 16.7 ms
    for ``argsort``), which gives both; else a stable ``argsort`` and a gather.
    ``overwrite``: ``key`` may be used as scratch."""
    n = len(key)
    if n == 0:
        return np.zeros(0, dtype=np.int64), key
    shift = max(1, (n - 1).bit_length())
    if int(key.max()) >= (1 << (62 - shift)):
        order = np.argsort(key, kind="stable")
        return order, key[order]
    code = np.left_shift(key, shift, out=key if overwrite else None)
    code |= np.arange(n, dtype=np.int64)
    code.sort()
    order = code & ((1 << shift) - 1)
    np.right_shift(code, shift, out=code)
    return order, code


def dense_ranks(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """Dense ranks of rows under the lexicographic order of ``columns`` (first most significant)."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    key = columns[0] if len(columns) == 1 else packed(columns)
    if key is not None:
        lo, hi = int(key.min()), int(key.max())
        if hi - lo <= 4 * n + 1024:  # a dense range: count instead of sorting
            seen = np.zeros(hi - lo + 1, dtype=bool)
            seen[key - lo] = True
            rank_of = np.cumsum(seen) - 1
            return rank_of[key - lo], int(rank_of[-1]) + 1
        uniq, inv = np.unique(key, return_inverse=True)
        return inv.astype(np.int64).reshape(-1), len(uniq)
    order = np.lexsort(tuple(reversed(columns)))
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for col in columns:
        s = col[order]
        change[1:] |= s[1:] != s[:-1]
    ranks_sorted = np.cumsum(change) - 1
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = ranks_sorted
    return ranks, int(ranks_sorted[-1]) + 1


def run_starts(order: np.ndarray, columns: Sequence[np.ndarray]) -> np.ndarray:
    """Where each run of rows equal in every one of ``columns`` starts, in ``order`` (rows
    sorted by those columns).

    >>> run_starts(np.array([0, 1, 2, 3]), [np.array([1, 1, 2, 2]), np.array([5, 6, 6, 6])]).tolist()
    [0, 1, 2]
    """
    head = np.zeros(len(order), dtype=bool)
    if len(order):
        head[0] = True
        for col in columns:
            s = col[order]
            head[1:] |= s[1:] != s[:-1]
    return np.flatnonzero(head)


def running_sums(group: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The running sum of ``d`` within each run of equal ``group`` values (rows in order),
    each row's sum including itself.

    >>> running_sums(np.array([4, 4, 7, 7, 7]), np.array([1, 2, 1, -1, 3])).tolist()
    [1, 3, 1, 0, 3]
    """
    c = np.cumsum(d)
    n = len(d)
    if n == 0:
        return c
    first = np.ones(n, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    starts = np.nonzero(first)[0]
    c -= np.repeat((c - d)[starts], np.diff(np.append(starts, n)))  # the sum before each run
    return c


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct ``values``, ascending (a sort: numpy's hash-based ``unique`` is several
    times slower on millions of int64)."""
    s = np.sort(values)
    if len(s) == 0:
        return s
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def segments(
    group: np.ndarray, rank: np.ndarray, d: np.ndarray, open_end: int, order: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Updates ``d`` of each ``group`` in ``rank`` order as segments of constant running count.

    Returns ``(order, count, start, end)`` over the rows in ``order``: after the update
    ``order[i]`` the group's running count is ``count[i]`` on ``[start[i], end[i])``, where
    ``end`` is the group's next rank (``open_end`` after its last update).  ``order``, when
    given, already sorts the rows by ``(group, rank)``."""
    if order is None:
        order = sort_order([group, rank])
    g_s, r_s, d_s = group[order], rank[order], d[order]
    n = len(order)
    first = np.ones(n, dtype=bool)
    first[1:] = g_s[1:] != g_s[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    cs = np.cumsum(d_s)
    head = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    count = cs - cs[head] + d_s[head]
    end = np.empty(n, dtype=np.int64)
    end[:-1] = r_s[1:]
    end[last] = open_end
    return order, count, r_s, end


def expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[lo[i], hi[i])`` of a sorted axis: ``(range index, axis position)`` of
    every position they cover (empty or inverted ranges cover none)."""
    cnt = np.maximum(hi - lo, 0)
    total = int(cnt.sum())
    seg_of = np.repeat(np.arange(len(cnt)), cnt)
    pos = np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
    return seg_of, pos


def _numbered(P: pa.Table, Q: pa.Table, nkeys: int, p_data: Sequence[str], q_data: Sequence[str], width: int) -> tuple[pa.Table, pa.Table]:
    """Consolidated P with key ids, consolidated Q with key ids and (key, data) ids."""
    k = keys(nkeys)
    exact = all(exact_type(P.schema.field(c).type) for c in [*k, *p_data]) and all(
        exact_type(Q.schema.field(c).type) for c in [*k, *q_data]
    )
    if exact and all(P.schema.field(c).type == Q.schema.field(c).type for c in k):
        return _numbered_numpy(P, Q, nkeys, p_data, q_data, width)
    return _numbered_sql(P, Q, nkeys, p_data, q_data, width)


def exact_type(t: pa.DataType) -> bool:
    """Whether Arrow's equality of values of type ``t`` is plain value equality (what
    grouping in SQL and Spark means): not floating point (``-0.0``, NaN payloads), not nested."""
    return any(getattr(pa.types, f)(t) for f in _EXACT)


_EXACT = (  # names of pyarrow.types predicates (looked up on use: pyarrow loads lazily)
    "is_integer",
    "is_string",
    "is_large_string",
    "is_binary",
    "is_large_binary",
    "is_boolean",
    "is_date",
    "is_timestamp",
    "is_decimal",
)


def ids(columns: Sequence[pa.Array | pa.ChunkedArray], n: int) -> np.ndarray:
    """Equal ids for equal rows of ``columns`` (nulls equal to each other), dense: every
    id below the number of distinct rows is used (``0 ≤ id < n``)."""
    if not columns:
        return np.zeros(n, dtype=np.int64)
    codes = []
    for c in columns:
        code = _int_ids(c)
        if code is None:
            arr = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
            code = pc.dictionary_encode(arr, null_encoding="encode").indices.to_numpy(zero_copy_only=False).astype(np.int64)
        codes.append(code)
    return codes[0] if len(codes) == 1 else dense_ranks(codes)[0]


def _int_ids(column: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """``dictionary_encode``'s indices of a column of integers without nulls over a short range
    (the same ids: in order of first appearance), by one pass through a table of its values;
    ``None`` for other columns."""
    t = column.type
    if column.null_count or not (pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)):
        return None
    values = column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False)
    return orders.first_ids(np.asarray(values).astype(np.int64, copy=False))


def consolidated_by_key(T: pa.Table, kid: np.ndarray, data: Sequence[str], width: int,
                        in_order: bool = True) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``T`` summed per (key, data, time), zero sums dropped; with the kept rows' key ids and
    (key, data) ids.  The rows come in (key, data, time) order, or (``in_order`` false)
    in any order: ``T`` itself when it is consolidated already."""
    n = T.num_rows
    did = dense_ranks([kid, ids([T.column(c) for c in data], n)])[0] if data else kid
    cols = [did, *[T.column(c).to_numpy() for c in times(width)]]
    n_did = int(did.max()) + 1 if n else 0
    if width == 1 and n >= 1024 and n_did <= 4 * n + 1024:  # dense (key, data) ids: count, then sort each id's times
        key, order = None, orders.grouped_order(did, n_did, cols[1])
    else:
        key = packed(cols)
        order = np.argsort(key) if key is not None else sort_order(cols)
    starts = run_starts(order, [key] if key is not None else cols)  # (one comparison when the columns pack)
    d = np.add.reduceat(T.column("_d").to_numpy()[order], starts) if n else np.zeros(0, np.int64)
    keep = d != 0
    if not in_order and len(starts) == n and keep.all():  # consolidated already: the rows as they are
        return T.select([*[c for c in T.column_names if c != "_d"], "_d"]), kid, did
    rows = order[starts[keep]]
    out = T.select([c for c in T.column_names if c != "_d"]).take(pa.array(rows))
    return out.append_column("_d", pa.array(d[keep], pa.int64())), kid[rows], did[rows]


def _numbered_numpy(P: pa.Table, Q: pa.Table, nkeys: int, p_data: Sequence[str], q_data: Sequence[str], width: int) -> tuple[pa.Table, pa.Table]:
    k, t = keys(nkeys), times(width)
    P, Q = P.select([*k, *p_data, *t, "_d"]), Q.select([*k, *q_data, *t, "_d"])
    n_p = P.num_rows
    both = [pa.concat_arrays([P.column(c).combine_chunks(), Q.column(c).combine_chunks()]) for c in k]
    kid = ids(both, n_p + Q.num_rows)
    pk, p_kid, _ = consolidated_by_key(P, kid[:n_p], p_data, width, in_order=False)
    qk, q_kid, q_did = consolidated_by_key(Q, kid[n_p:], q_data, width, in_order=False)
    pk = pk.append_column("_kid", pa.array(p_kid, pa.int64()))
    qk = qk.append_column("_kid", pa.array(q_kid, pa.int64())).append_column("_did", pa.array(q_did, pa.int64()))
    return pk, qk


def _numbered_sql(P: pa.Table, Q: pa.Table, nkeys: int, p_data: Sequence[str], q_data: Sequence[str], width: int) -> tuple[pa.Table, pa.Table]:
    k, t = keys(nkeys), times(width)
    p_cols = [*k, *p_data, *t]
    q_cols = [*k, *q_data, *t]
    p_sql = f"SELECT {csv(p_cols)}, sum(_d)::BIGINT AS _d FROM $P GROUP BY ALL HAVING sum(_d) <> 0"
    q_sql = f"SELECT {csv(q_cols)}, sum(_d)::BIGINT AS _d FROM $Q GROUP BY ALL HAVING sum(_d) <> 0"
    kd = [*k, *q_data]
    dids = (
        f"(SELECT {csv(kd)}, (row_number() OVER () - 1)::BIGINT AS _did FROM (SELECT DISTINCT {csv(kd)} FROM q) AS _v)"
        if kd
        else "(SELECT 0::BIGINT AS _did)"
    )
    tables = {"P": P, "Q": Q}
    if nkeys:
        # key ids are computed once and shared by both queries: two evaluations of an
        # unordered row_number() need not number the keys alike
        kids = duck.query(
            f"SELECT {csv(k)}, (row_number() OVER () - 1)::BIGINT AS _kid FROM "
            f"(SELECT DISTINCT {csv(k)} FROM $P UNION SELECT DISTINCT {csv(k)} FROM $Q) AS _u",
            tables,
        )
        tables["I"] = kids
        p_full = f"WITH p AS ({p_sql}) SELECT p.*, ids._kid FROM p JOIN $I AS ids ON {key_eq(k, 'p', 'ids')}"
        q_full = (
            f"WITH q AS ({q_sql}), d AS {dids} SELECT q.*, ids._kid, d._did FROM q "
            f"JOIN $I AS ids ON {key_eq(k, 'q', 'ids')} JOIN d ON {key_eq(kd, 'q', 'd')}"
        )
    else:
        p_full = f"SELECT *, 0::BIGINT AS _kid FROM ({p_sql}) AS p"
        join_d = f"JOIN d ON {key_eq(kd, 'q', 'd')}" if kd else "CROSS JOIN d"
        q_full = f"WITH q AS ({q_sql}), d AS {dids} SELECT q.*, 0::BIGINT AS _kid, d._did FROM q {join_d}"
    return duck.query(p_full, tables), duck.query(q_full, tables)


def numbered(tables: Sequence[tuple[pa.Table, Sequence[str]]], nkeys: int, width: int) -> list[pa.Table] | None:
    """Each ``(table, data columns)`` consolidated, with ``_kid`` (key ids shared by all the
    tables) and ``_did`` ((key, data) ids): what :func:`stab_numbered` takes, numbered once
    for several stabbing joins of the same tables.  ``None`` where the numpy path does not
    apply (columns of inexact types, keys typed differently): :func:`stab` then."""
    k = keys(nkeys)
    if not tables:
        return []
    first = tables[0][0]
    for table, data in tables:
        if not all(exact_type(table.schema.field(c).type) for c in [*k, *data]):
            return None
        if any(table.schema.field(c).type != first.schema.field(c).type for c in k):
            return None
    t = times(width)
    chosen = [table.select([*k, *data, *t, "_d"]) for table, data in tables]
    sizes = [x.num_rows for x in chosen]
    both = [pa.concat_arrays([x.column(c).combine_chunks() for x in chosen]) for c in k]
    kid = ids(both, sum(sizes))
    out = []
    at = 0
    for x, (_, data), n in zip(chosen, tables, sizes):
        xk, x_kid, x_did = consolidated_by_key(x, kid[at:at + n], data, width, in_order=False)
        at += n
        out.append(xk.append_column("_kid", pa.array(x_kid, pa.int64())).append_column("_did", pa.array(x_did, pa.int64())))
    return out


def stab(
    P: pa.Table,
    Q: pa.Table,
    nkeys: int,
    p_data: Sequence[str],
    q_data: Sequence[str],
    width: int,
    *,
    strict: bool,
    out_data: Sequence[str],
) -> pa.Table:
    """Every update of ``P`` against ``Q`` accumulated at (``strict``: strictly before) its time.

    ``P`` and ``Q`` have ``_k*`` keys, their data columns, ``_t*`` leaves (of a totally
    ordered time: compared lexicographically) and ``_d``.  The result has ``_k*``,
    ``out_data`` (each column taken from whichever side has it), ``_t*`` (P's time) and
    ``_d``; it is consolidated when ``P`` rows are distinct (they are, after the internal
    consolidation) — rows are distinct per (P update, Q row).
    """
    pk, qk = _numbered(P, Q, nkeys, p_data, q_data, width)
    return stab_numbered(pk, qk, nkeys, width, strict=strict, out_data=out_data)


def stab_numbered(pk: pa.Table, qk: pa.Table, nkeys: int, width: int, *, strict: bool,
                  out_data: Sequence[str]) -> pa.Table:
    """:func:`stab` of ``P`` and ``Q`` already consolidated and numbered (``pk`` with ``_kid``,
    ``qk`` with ``_kid`` and ``_did``, the key ids shared: :func:`numbered`)."""
    k, t = keys(nkeys), times(width)
    out_cols = [*k, *out_data, *t, "_d"]
    if pk.num_rows == 0 or qk.num_rows == 0:
        return _empty(pk, qk, out_cols)
    n_p = pk.num_rows
    leaves = [np.concatenate([pk.column(c).to_numpy(), qk.column(c).to_numpy()]) for c in t]
    ranks, nranks = dense_ranks(leaves)
    p_rank, q_rank = ranks[:n_p], ranks[n_p:]
    R = nranks + 2  # ranks are < R - 1; R - 1 marks "open" (no later change)
    open_end = R - 1

    # Q: segments of constant running count per (key, data), [start, next change)
    did = qk.column("_did").to_numpy()
    q_d = qk.column("_d").to_numpy()
    q_order = _dense_order(did, q_rank, nranks)
    order, count, start, end = segments(did, q_rank, q_d, open_end, q_order)
    keep = count != 0
    seg_row, seg_count, seg_start, seg_end = order[keep], count[keep], start[keep], end[keep]
    seg_key = qk.column("_kid").to_numpy()[seg_row]

    # P: points on the (key, time rank) axis
    p_key = pk.column("_kid").to_numpy()
    p_pos = p_key * R + p_rank
    p_order = _dense_order(p_key, p_rank, nranks)
    if p_order is None:
        p_order = np.argsort(p_pos, kind="stable")
    axis = p_pos[p_order]
    side = "right" if strict else "left"
    lo = np.searchsorted(axis, seg_key * R + seg_start, side=side)
    hi = np.searchsorted(axis, seg_key * R + seg_end, side=side)
    seg_of, pos = expand(lo, hi)
    if len(pos) == 0:
        return _empty(pk, qk, out_cols)
    p_rows = pa.array(p_order[pos])
    q_rows = pa.array(seg_row[seg_of])
    cols = {c: pk.column(c).take(p_rows) for c in k}
    for c in out_data:
        cols[c] = pk.column(c).take(p_rows) if c in pk.column_names else qk.column(c).take(q_rows)
    for c in t:
        cols[c] = pk.column(c).take(p_rows)
    cols["_d"] = pa.array(pk.column("_d").to_numpy()[p_order[pos]] * seg_count[seg_of], pa.int64())
    return pa.table(cols)


def _dense_order(ids_: np.ndarray, rank: np.ndarray, nranks: int) -> np.ndarray | None:
    """Rows in ``(ids_, rank)`` order by counting (both dense ids), or ``None`` where a
    comparison sort is the faster way."""
    if len(ids_) == 0:
        return None
    n_ids = int(ids_.max()) + 1
    if not orders.worth_counting(len(ids_), n_ids, nranks):
        return None
    return orders.dense_order(ids_, n_ids, rank, nranks)


def _empty(pk: pa.Table, qk: pa.Table, out_cols: Sequence[str]) -> pa.Table:
    fields = []
    for c in out_cols:
        if c in pk.column_names:
            fields.append(pk.schema.field(c))
        elif c in qk.column_names:
            fields.append(qk.schema.field(c))
        else:
            fields.append(pa.field(c, pa.int64()))
    return pa.schema(fields).empty_table()
