"""Count and sum from per-key totals: the kernel of ``dd_count``/``dd_sum`` in an incremental view (stage 2).

On ``(data, time, diff)``: ``dd_count`` and ``dd_sum`` see, per key ``k`` and time
``s``, the rows ``d`` of the key with positive accumulated multiplicity ``m(k, d, s)``.
Both are sums over rows of the *positive part* ``pos(m) = max(m, 0)``:

* ``cnt(k, s) = sum_d pos(m(k, d, s))`` (the count; the key has an output iff ``cnt > 0``),
* ``sum(k, s) = sum_d v(d) * pos(m(k, d, s))`` over rows whose value ``v(d)`` is not null,
  and ``nn(k, s)``, the same with ``v = 1`` (the sum is null when ``nn = 0``).

So the key's output at ``s`` is a function of three *totals* ``(cnt, sum, nn)``, each an
accumulation (a sum over times ``t <= s``) of per-key changes ``(_cn, _cs, _cnn)`` at
times ``t``.  An incremental view keeps, per count/sum operator, two traces
(:mod:`spark_differential.incremental.traced`): the operator's input rows (so that the positive part
of a row can be recomputed when the row changes) and the **totals**: ``(key, time, _cn,
_cs, _cnn)`` rows, advanced to the frontier and consolidated (one row per key and
distinct advanced time; for totally ordered times one row per key).  An update's kernel
gets, per bucket of keys,

* ``rows``: the new input updates (``_new`` true) and the trace rows of the *rows*
  ``(k, d)`` they touch (``_new`` false; not of the whole key), and
* ``totals``: the totals trace rows of the keys they touch,

and returns both the operator's output changes and the totals' changes.  It never reads
the other rows of a key: the work follows the changes, as differential dataflow's
``count_total`` does.

Why it is exact.  Let ``F`` be the view's frontier: the traces accumulate to the true
histories at every time in the future of ``F``, and the new updates lie there.

1. Per touched row ``(k, d)``, ``pos(m_trace + m_new) - pos(m_trace)`` as changes at
   times (snapshots for a total order, the lub closure otherwise) is zero wherever the
   new updates accumulate to zero, in particular on the times not in the future of ``F``
   (a down-set: the changes vanish there too); in the future of ``F`` it accumulates to
   the true change of ``pos(m)``.  Untouched rows (and rows picked by a hash collision)
   do not change.  Summed per key and time (``_cn``, and ``v``- or 1-weighted for ``_cs``,
   ``_cnn``) this is ``Delta``, the exact change of the totals in the future of ``F``,
   supported there.
2. The totals trace ``A`` is the sum of earlier updates' ``Delta``, each exact in the
   future of its own frontier (which contains the future of ``F``), advanced by ``F``:
   advancing keeps accumulations in the future of ``F`` (seed 004).  So ``A + Delta``
   and ``A`` accumulate to the true totals after and before this update there.
3. The output change ``out(A + Delta) - out(A)`` (per key; snapshots, or the Moebius
   inversion over the lub closure) then accumulates to the true output change in the
   future of ``F`` and to zero elsewhere (``Delta`` accumulates to zero there), so it is
   supported on the future of ``F``: it is the unique such collection, the true one.

The kernels (:func:`totals`) are plain functions over Arrow tables, run per partition by
:func:`spark_differential.engine.distributed.run_bucketed`: for totally ordered times numpy
(sorts and running sums; DuckDB's two queries where a column's type or a sum's size asks
for SQL's grouping and arithmetic), :mod:`.generic` (lub closure) for product-ordered ones.  Integer and decimal values only:
floating-point sums are not associative, so a ``dd_sum`` over a float column keeps the
rows trace of the whole key instead (see ``spark_differential.incremental.traced.Run``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck, generic, native, stab
from spark_differential.kernels.common import NEW, D, csv, keys, names, times, window
from spark_differential.kernels.reduce import ReduceParams

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

TAG = "_sd_tag"  # 0: a row of the operator's output changes; 1: a change of the totals
CN, CS, CNN = "_cn", "_cs", "_cnn"  # changes of the count, the sum of non-null values, their number
TOTALS = (CN, CS, CNN)
_NOKEY = "_nokey"


def sum_type(p: ReduceParams) -> pa.DataType:
    """The Arrow type of ``_cs``: the output column's for ``dd_sum``, int64 for ``dd_count``."""
    return p.out_types[0] if p.agg == "sum" else pa.int64()


def _key_cols(p: ReduceParams) -> list[str]:
    return keys(p.nkeys) or [_NOKEY]


def _with_nokey(t: pa.Table, p: ReduceParams) -> pa.Table:
    return t if p.nkeys else t.append_column(_NOKEY, pa.array([0] * t.num_rows, pa.int64()))


def changes_total(p: ReduceParams, rows: pa.Table) -> pa.Table:
    """Totally ordered times: per key and time, the change of ``(cnt, sum, nn)`` that the new
    rows make (``_cn, _cs, _cnn``), from the new rows and the old rows of the same ``(k, d)``
    (numpy where it applies: :func:`_changes_numpy`; else DuckDB: :func:`_changes_sql`).

    >>> import pyarrow as pa
    >>> from spark_differential.core.lattice import Total
    >>> p = ReduceParams(nkeys=1, ndata=1, ttype=Total(), agg="count", out_types=(pa.int64(),))
    >>> old = {"_k0": [1, 1], "_a0": [5, 6], "_t0": [0, 0], "_d": [1, -1], "_new": [False, False]}
    >>> new = {"_k0": [1, 1], "_a0": [5, 6], "_t0": [2, 3], "_d": [1, 1], "_new": [True, True]}
    >>> t = pa.Table.from_pydict({c: old[c] + new[c] for c in old})
    >>> sorted(changes_total(p, t).select(["_k0", "_t0", "_cn"]).to_pylist(), key=lambda r: r["_t0"])
    [{'_k0': 1, '_t0': 2, '_cn': 1}]
    """
    got = _changes_numpy(p, rows)
    return got if got is not None else _changes_sql(p, rows)


def _changes_sql(p: ReduceParams, rows: pa.Table) -> pa.Table:
    """:func:`changes_total` by one DuckDB query (any column types)."""
    k, a, t = _key_cols(p), names("_a", p.ndata), times(p.ttype.width)
    kd = [*k, *a]
    val = "_a0" if p.agg == "sum" else "NULL::BIGINT"
    sql = f"""
    WITH cons AS (SELECT {csv(kd)}, {csv(t)}, sum(_d)::BIGINT AS _d,
                         sum(CASE WHEN {NEW} THEN 0 ELSE _d END)::BIGINT AS _do
                  FROM $X GROUP BY ALL),
    rc AS (SELECT *, sum(_d) OVER ({window(kd)} ORDER BY {csv(t)} ROWS UNBOUNDED PRECEDING) AS _c,
                     sum(_do) OVER ({window(kd)} ORDER BY {csv(t)} ROWS UNBOUNDED PRECEDING) AS _co
           FROM cons),
    dl AS (SELECT {csv(k)}, {csv(t)}, {val} AS _v,
                  (greatest(_c, 0) - greatest(_c - _d, 0)) - (greatest(_co, 0) - greatest(_co - _do, 0)) AS _dp
           FROM rc)
    SELECT {csv(k)}, {csv(t)}, sum(_dp)::BIGINT AS {CN}, coalesce(sum(_dp * _v), 0) AS {CS},
           sum(CASE WHEN _v IS NULL THEN 0 ELSE _dp END)::BIGINT AS {CNN}
    FROM dl GROUP BY ALL
    HAVING sum(_dp) <> 0 OR coalesce(sum(_dp * _v), 0) <> 0 OR sum(CASE WHEN _v IS NULL THEN 0 ELSE _dp END) <> 0
    """
    return duck.query(sql, {"X": _with_nokey(rows, p)})


def output_total(p: ReduceParams, delta: pa.Table, old: pa.Table) -> pa.Table:
    """Totally ordered times: ``out(A + delta) - out(A)`` per key of ``delta`` (``A``: the
    totals trace rows ``old`` of those keys), as ``_k*, _o0, _t*, _d`` (numpy where it
    applies: :func:`_output_numpy`; else DuckDB: :func:`_output_sql`)."""
    old = native.touching(old, delta, _key_cols(p))
    got = _output_numpy(p, delta, old)
    return got if got is not None else _output_sql(p, delta, old)


def _output_sql(p: ReduceParams, delta: pa.Table, old: pa.Table) -> pa.Table:
    """:func:`output_total` by one DuckDB query (``old``: the keys' totals rows alone)."""
    k, t = _key_cols(p), times(p.ttype.width)
    cols = [*k, *t, *TOTALS]
    value = {"count": "{n}", "sum": "CASE WHEN {nn} > 0 THEN {s} END"}[p.agg]
    w = f"OVER ({window(k)} ORDER BY {csv(t)} ROWS UNBOUNDED PRECEDING)"
    snaps = []
    for sign, which in ((1, "al"), (-1, "ol")):  # all (trace + new) and old (trace) totals
        n, s, nn = (f"{which}{x}" for x in ("n", "s", "nn"))
        for sign2, suffix in ((1, ""), (-1, "p")):  # at t, and just before t (the key's previous snapshot)
            v = value.format(n=n + suffix, s=s + suffix, nn=nn + suffix)
            snaps.append(f"SELECT {csv(k)}, {v} AS _o0, {csv(t)}, {sign * sign2}::BIGINT AS _m FROM r "
                         f"WHERE {n + suffix} > 0")
    sql = f"""
    WITH u AS (SELECT {csv(cols)}, 1 AS _w FROM $D UNION ALL SELECT {csv(cols)}, 0 AS _w FROM $A),
    g AS (SELECT {csv(k)}, {csv(t)}, sum({CN}) AS gal_n, sum({CS}) AS gal_s, sum({CNN}) AS gal_nn,
                 sum({CN} * (1 - _w)) AS gol_n, sum({CS} * (1 - _w)) AS gol_s, sum({CNN} * (1 - _w)) AS gol_nn
          FROM u GROUP BY ALL),
    c AS (SELECT *, sum(gal_n) {w} AS aln, sum(gal_s) {w} AS als, sum(gal_nn) {w} AS alnn,
                    sum(gol_n) {w} AS oln, sum(gol_s) {w} AS ols, sum(gol_nn) {w} AS olnn FROM g),
    r AS (SELECT *, aln - gal_n AS alnp, als - gal_s AS alsp, alnn - gal_nn AS alnnp,
                    oln - gol_n AS olnp, ols - gol_s AS olsp, olnn - gol_nn AS olnnp FROM c)
    SELECT {csv(k)}, _o0, {csv(t)}, sum(_m)::BIGINT AS {D}
    FROM ({" UNION ALL ".join(snaps)}) AS _s GROUP BY ALL HAVING sum(_m) <> 0
    """
    return duck.query(sql, {"D": delta, "A": old})


# ---------------------------------------------------------------------------------
# totally ordered times in numpy: the same answers as the two queries above, without a
# DuckDB query's fixed cost (about 15 ms each in a task; a small update runs both)


def _numpy_applies(p: ReduceParams, table: pa.Table, cols: list[str]) -> bool:
    """Whether the numpy path gives the SQL's answer: one time leaf, grouping columns whose
    Arrow equality is SQL's (:func:`~.stab.exact_type`), and a count or a sum over integers
    that stays in int64."""
    if p.ttype.width != 1 or not all(stab.exact_type(table.schema.field(c).type) for c in cols):
        return False
    return p.agg == "count" or (p.agg == "sum" and pa.types.is_integer(sum_type(p)) and sum_type(p).bit_width == 64)


def _runs(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting rows by ``columns`` (first most significant) and where each run of
    equal rows starts in it."""
    order = stab.sort_order(list(columns))
    return order, stab.run_starts(order, columns)


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.int64)


def _changes_numpy(p: ReduceParams, rows: pa.Table) -> pa.Table | None:
    """:func:`changes_total` in numpy, or ``None`` where it does not apply
    (:func:`_numpy_applies`, or multiplicities and values whose sums might leave int64)."""
    k, a, t = _key_cols(p), names("_a", p.ndata), times(p.ttype.width)
    rows = _with_nokey(rows, p)
    if not _numpy_applies(p, rows, [*k, *a]) or not native.can_sum(rows, D) or rows.column(t[0]).null_count:
        return None
    n = rows.num_rows
    d = _ints(rows.column(D))
    v = vnull = None
    if p.agg == "sum":
        col = rows.column(a[0])
        vnull = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        v = np.asarray(col.fill_null(0).to_numpy(), dtype=np.int64)
        if n and int(np.abs(v).max()) * int(np.abs(d).sum()) >= 1 << 62:
            return None
    kid = stab.ids([rows.column(c) for c in k], n)
    rid = stab.dense_ranks([kid, stab.ids([rows.column(c) for c in a], n)])[0] if a and n else kid
    time = _ints(rows.column(t[0]))
    old = np.where(np.asarray(rows.column(NEW).to_numpy(), dtype=bool), 0, d)
    # per row (k, d) and time: the change of its multiplicity, all and old; their running sums
    order, starts = _runs(rid, time)
    g_d, g_do = (np.add.reduceat(x[order], starts) if n else x[:0] for x in (d, old))
    g_rid = rid[order][starts]
    c, co = stab.running_sums(g_rid, g_d), stab.running_sums(g_rid, g_do)
    pos = np.maximum
    dp = (pos(c, 0) - pos(c - g_d, 0)) - (pos(co, 0) - pos(co - g_do, 0))
    first = order[starts]  # a row of each (k, d, time)
    moved = dp != 0
    dp, first = dp[moved], first[moved]
    # per key and time: the changes of the count, the sum and the non-null count
    order2, starts2 = _runs(kid[first], time[first])
    at = first[order2]
    cn = np.add.reduceat(dp[order2], starts2) if len(at) else dp[:0]
    if v is not None and vnull is not None:
        counted = np.where(vnull[at], 0, dp[order2])
        cs = np.add.reduceat(counted * v[at], starts2) if len(at) else cn
        cnn = np.add.reduceat(counted, starts2) if len(at) else cn
    else:
        cs = cnn = np.zeros(len(starts2), dtype=np.int64)
    keep = (cn != 0) | (cs != 0) | (cnn != 0)
    which = pa.array(at[starts2][keep])
    return pa.Table.from_arrays(
        [*[rows.column(c).take(which) for c in k], rows.column(t[0]).take(which).cast(pa.int64()),
         pa.array(cn[keep], pa.int64()), pa.array(cs[keep], pa.int64()), pa.array(cnn[keep], pa.int64())],
        names=[*k, *t, *TOTALS])


def _output_numpy(p: ReduceParams, delta: pa.Table, old: pa.Table) -> pa.Table | None:
    """:func:`output_total` in numpy (``old``: the keys' totals rows alone), or ``None`` where
    it does not apply (:func:`_numpy_applies`, key columns of two types, sums that might
    leave int64)."""
    k, t = _key_cols(p), times(p.ttype.width)
    cols = [*k, *t, *TOTALS]
    if not _numpy_applies(p, delta, k) or any(delta.schema.field(c).type != old.schema.field(c).type for c in cols):
        return None
    both = pa.Table.from_arrays([pa.chunked_array([*delta.column(c).chunks, *old.column(c).chunks],
                                                  delta.schema.field(c).type) for c in cols], names=cols)
    if any(both.column(c).null_count for c in (*t, *TOTALS)):
        return None
    n, n_new = both.num_rows, delta.num_rows
    tot = [_ints(both.column(c)) for c in TOTALS]
    if n and max(int(np.abs(x).sum()) for x in tot) >= 1 << 62:
        return None
    kid = stab.ids([both.column(c) for c in k], n)
    time = _ints(both.column(t[0]))
    is_old = np.arange(n) >= n_new
    # per key and time: the totals' changes, all (trace + new) and old (trace); their running sums
    order, starts = _runs(kid, time)
    g_kid, first = kid[order][starts], order[starts]
    snaps = []  # (row of the key, value, value is null, time, multiplicity) of each snapshot change
    for sign, pick in ((1, None), (-1, is_old)):
        changes = [np.add.reduceat((x if pick is None else np.where(pick, x, 0))[order], starts) if n else x[:0]
                   for x in tot]
        now = [stab.running_sums(g_kid, x) for x in changes]
        for sign2, (cnt, s, nn) in ((1, now), (-1, [a - b for a, b in zip(now, changes)])):  # at t, just before
            live = cnt > 0
            value, null = (cnt, np.zeros(len(cnt), dtype=bool)) if p.agg == "count" else (s, nn <= 0)
            snaps.append((first[live], np.where(null, 0, value)[live], null[live],
                          np.full(int(live.sum()), sign * sign2, dtype=np.int64)))
    row, value, null, m = (np.concatenate(x) for x in zip(*snaps))
    order2, starts2 = _runs(kid[row], time[row], null.astype(np.int64), value)
    total = np.add.reduceat(m[order2], starts2) if len(order2) else m[:0]
    keep = total != 0
    at = order2[starts2][keep]
    which = pa.array(row[at])
    out_type = p.out_types[0] if p.out_types else pa.int64()
    return pa.Table.from_arrays(
        [*[both.column(c).take(which) for c in k], pa.array(value[at], pa.int64(), mask=null[at]).cast(out_type),
         both.column(t[0]).take(which), pa.array(total[keep], pa.int64())],
        names=[*k, "_o0", *t, D])


def _generic_changes(p: ReduceParams, rows: pa.Table) -> dict[tuple[Hashable, tuple[int, ...]], list[Any]]:
    """Any lattice: per (key, time), ``[_cn, _cs, _cnn]`` (see :func:`changes_total`), by the
    lub closure of each touched row's times (:func:`generic.per_key`, a row ``(k, d)`` as the key)."""
    k, a, t = keys(p.nkeys), names("_a", p.ndata), times(p.ttype.width)
    cols = {c: rows.column(c).to_pylist() for c in [*k, *a, *t, D, NEW]}
    per_row = (
        ((tuple(cols[c][i] for c in k), tuple(cols[c][i] for c in a)), None, tuple(int(cols[c][i]) for c in t),
         int(cols[D][i]), bool(cols[NEW][i]))
        for i in range(rows.num_rows)
    )

    def positive(_: Hashable, acc: Counter, s: tuple[int, ...]) -> Counter:
        m = acc.get(None, 0)
        return Counter({(): m}) if m > 0 else Counter()

    out: dict[tuple[Hashable, tuple[int, ...]], list[Any]] = defaultdict(lambda: [0, 0, 0])
    for (key, data), _, tl, r in generic.per_key(p.ttype, per_row, positive):
        acc = out[(key, tl)]
        acc[0] += r
        v = data[0] if p.agg == "sum" else 1
        if v is not None:
            acc[1] += v * r if p.agg == "sum" else 0
            acc[2] += r
    return {kt: v for kt, v in out.items() if any(x != 0 for x in v)}


def _generic_output(
    p: ReduceParams, delta: dict[tuple[Hashable, tuple[int, ...]], list[Any]], old: pa.Table
) -> list[tuple[Hashable, Any, tuple[int, ...], int]]:
    """Any lattice: ``out(A + delta) - out(A)`` per key of ``delta`` (Moebius inversion over
    the lub closure of the key's times, :func:`generic.moebius`)."""
    k, t = keys(p.nkeys), times(p.ttype.width)
    by_key: dict[Hashable, list[tuple[tuple[int, ...], list[Any], bool]]] = defaultdict(list)
    for (key, tl), v in delta.items():
        by_key[key].append((tl, v, True))
    cols = {c: old.column(c).to_pylist() for c in [*k, *t, *TOTALS]}
    for i in range(old.num_rows):
        key = tuple(cols[c][i] for c in k)
        if key in by_key:
            by_key[key].append((tuple(int(cols[c][i]) for c in t), [cols[c][i] for c in TOTALS], False))

    out: list[tuple[Hashable, Any, tuple[int, ...], int]] = []
    for key, ups in by_key.items():
        total: Counter = Counter()
        for sign, chosen in ((1, ups), (-1, [u for u in ups if not u[2]])):
            vals = [v for _, v, _ in chosen]

            def snapshot(acc: Counter, s: tuple[int, ...], vals: list[list[Any]] = vals) -> Counter:
                n = sum(vals[i][0] for i in acc)
                if n <= 0:
                    return Counter()
                if p.agg == "count":
                    return Counter({n: 1})
                nn = sum(vals[i][2] for i in acc)
                return Counter({(sum(vals[i][1] for i in acc) if nn > 0 else None): 1})

            for value, tl, r in generic.moebius(p.ttype, [(i, tl, 1) for i, (tl, _, _) in enumerate(chosen)], snapshot):
                total[(value, tl)] += sign * r
        out.extend((key, value, tl, r) for (value, tl), r in total.items() if r != 0)
    return out


def totals(p: ReduceParams, rows: pa.Table, old: pa.Table) -> pa.Table:
    """Kernel for a partition of buckets: the output changes (``_sd_tag`` 0: ``_k*, _o0, _t*,
    _d``) and the totals' changes (``_sd_tag`` 1: ``_k*, _t*, _cn, _cs, _cnn``) of a count or
    sum, from ``rows`` (``_k*, _a*, _t*, _d, _new``: the new updates and the trace rows of
    the rows they touch) and ``old`` (``_k*, _t*, _cn, _cs, _cnn``: the totals trace rows of
    the keys they touch); see the module docstring."""
    k, t = keys(p.nkeys), times(p.ttype.width)
    stype = sum_type(p)
    key_fields = [rows.schema.field(c) for c in k]
    out_schema = pa.schema([pa.field(TAG, pa.int32()), *key_fields, pa.field("_o0", p.out_types[0]),
                            *[pa.field(c, pa.int64()) for c in t], pa.field(D, pa.int64()),
                            pa.field(CN, pa.int64()), pa.field(CS, stype), pa.field(CNN, pa.int64())])
    if rows.num_rows == 0 or not pc.any(rows.column(NEW)).as_py():
        return out_schema.empty_table()
    if p.ttype.is_total():
        delta = changes_total(p, rows)
        old_k = _with_nokey(old.select([*k, *t, *TOTALS]), p)
        if delta.num_rows == 0:
            return out_schema.empty_table()
        delta = delta.cast(pa.schema([delta.schema.field(c) if c not in TOTALS else
                                      pa.field(c, stype if c == CS else pa.int64()) for c in delta.column_names]))
        old_k = old_k.cast(pa.schema([old_k.schema.field(c) if c not in TOTALS else
                                      pa.field(c, stype if c == CS else pa.int64()) for c in old_k.column_names]))
        outs = output_total(p, delta, old_k)
        parts = [_tagged(outs, 0, out_schema), _tagged(delta, 1, out_schema)]
        return pa.concat_tables(parts)
    deltas = _generic_changes(p, rows)
    outs_g = _generic_output(p, deltas, old)
    data: dict[str, list[Any]] = {f.name: [] for f in out_schema}
    for key, value, tl, r in outs_g:
        _append(data, k, t, key, tl, {TAG: 0, "_o0": value, D: r})
    for (key, tl), (n, s, nn) in deltas.items():
        _append(data, k, t, key, tl, {TAG: 1, CN: n, CS: s, CNN: nn})
    return pa.Table.from_arrays([pa.array(data[f.name], type=f.type) for f in out_schema], schema=out_schema)


def _append(data: dict[str, list[Any]], k: list[str], t: list[str], key: Any, tl: Any, values: dict[str, Any]) -> None:
    for c, v in zip(k, key):
        data[c].append(v)
    for c, v in zip(t, tl):
        data[c].append(v)
    for c in (TAG, "_o0", D, CN, CS, CNN):
        data[c].append(values.get(c))


def _tagged(table: pa.Table, tag: int, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema`` (the others null), with ``_sd_tag`` = ``tag``."""
    n = table.num_rows
    arrays = []
    for f in schema:
        if f.name == TAG:
            arrays.append(pa.array([tag] * n, pa.int32()))
        elif f.name in table.column_names:
            arrays.append(table.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


__all__ = ["CN", "CNN", "CS", "TAG", "TOTALS", "changes_total", "output_total", "sum_type", "totals"]
