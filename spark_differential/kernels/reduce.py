"""Reduction kernels: ``dd_reduce``, ``dd_count``, ``dd_sum``, ``dd_min``, ``dd_max``,
``dd_threshold`` and ``dd_distinct`` over one bucket of keys.

On ``(data, time, diff)``: for every key and every time ``s``, the output
accumulates to ``F(rows of the key in acc(input, s) with positive multiplicity)``
(``dd_threshold`` instead maps each row's nonzero multiplicity ``m`` to
``func(m)``).  For totally ordered times each key's history is scanned once in
time order: the key's input can only change at its own update times, the output
is evaluated there (snapshots), and each snapshot holds until the key's next
time; ``dd_min``/``dd_max`` over columns with exact equality take the numpy
path of :mod:`.extremum` instead.  Partially ordered times go through :mod:`.generic` (lub closure).  Inside
an iteration the kernel returns ``F(trace + new) − F(trace)`` for keys with new
updates only.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_differential.core.lattice import TimeType
from spark_differential.core.lazy import lazy
from spark_differential.errors import OutputSchemaError, UserFunctionError
from spark_differential.kernels import duck, generic, native
from spark_differential.kernels.common import NEW, StateShape, csv, keys, names, nexts, times, window
from spark_differential.kernels.stab import running_sums, sort_packed, stab

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
extremum = lazy("spark_differential.kernels.extremum")  # imports numba
orders = lazy("spark_differential.kernels.order")  # imports numba


@dataclass(frozen=True)
class ReduceParams:
    nkeys: int
    ndata: int
    ttype: TimeType
    agg: str  # "count" | "sum" | "min" | "max" | "func"
    out_types: tuple[pa.DataType, ...] = ()
    exact_sum: bool = True
    func: Callable[..., Any] | None = field(default=None, compare=False)
    key_names: tuple[str, ...] = ()
    data_names: tuple[str, ...] = ()
    out_names: tuple[str, ...] = ()
    op: str = "dd_reduce"

    def shape(self) -> StateShape:
        """Keyed by the ``by`` columns (see :class:`~.common.StateShape`)."""
        return StateShape(tuple(keys(self.nkeys)))

    def chunked(self) -> tuple[ReduceParams, str]:
        """The parameters with one more key column (a time chunk), and its name."""
        return dataclasses.replace(self, nkeys=self.nkeys + 1), keys(self.nkeys + 1)[-1]


@dataclass(frozen=True)
class ThresholdParams:
    ndata: int
    ttype: TimeType
    func: Callable[[int], int] | None = field(default=None, compare=False)  # None: distinct
    op: str = "dd_threshold"
    data_names: tuple[str, ...] = ()  # the user's names of the data columns (for messages)

    def shape(self) -> StateShape:
        """Keyed by the whole row (see :class:`~.common.StateShape`)."""
        return StateShape(tuple(names("_a", self.ndata)), chunk="data")

    def chunked(self) -> tuple[ThresholdParams, str]:
        """The parameters with one more data column (a time chunk), and its name."""
        return dataclasses.replace(self, ndata=self.ndata + 1), names("_a", self.ndata + 1)[-1]


# ---------------------------------------------------------------------------------
# helpers


def _split_new(X: pa.Table, nkeys: int) -> tuple[pa.Table, pa.Table | None]:
    """(rows of touched keys, old rows of touched keys or None when nothing is old)."""
    new = X.column(NEW)
    if len(new) == 0 or pc.all(new).as_py():
        return X, None
    touched = native.touching(X, X.filter(new), keys(nkeys))
    old = touched.filter(pc.invert(touched.column(NEW)))
    return touched, old


def _subtract(all_: pa.Table, old: pa.Table | None, cols: Sequence[str]) -> pa.Table:
    if old is None or old.num_rows == 0:
        return all_
    cols = list(cols)
    minus = old.select([*cols, "_d"])
    minus = minus.set_column(len(cols), "_d", pc.negate_checked(minus.column("_d")))
    return native.consolidated(pa.concat_tables([all_.select([*cols, "_d"]), minus], promote_options="permissive"), cols)


def _with_next(table: str, nkeys: int, width: int) -> str:
    """Distinct (key, time) pairs of ``table`` with the key's next time as ``_n*``."""
    k, t, n = keys(nkeys), times(width), nexts(width)
    w = window(k)
    leads = ", ".join(f"lead({tc}) OVER ({w} ORDER BY {csv(t)}) AS {nc}" for tc, nc in zip(t, n))
    return f"SELECT {csv([*k, *t])}, {leads}, 1::BIGINT AS _d FROM (SELECT DISTINCT {csv([*k, *t])} FROM {table}) AS _kt"


def _snapshot_diffs(S: pa.Table, cols: Sequence[str], width: int) -> pa.Table:
    t, n = times(width), nexts(width)
    return duck.run(
        "snapshot_diffs",
        {"S": S},
        cols=csv(cols),
        t=csv(t),
        n_as_t=csv([f"{nc} AS {tc}" for nc, tc in zip(n, t)]),
    )


def _alive(Y: pa.Table, nkeys: int, ndata: int, width: int) -> pa.Table:
    """Rows with positive multiplicity of every key at each of the key's times (with ``_n*``)."""
    a = names("_a", ndata)
    n = nexts(width)
    kt = duck.query(_with_next("$Y", nkeys, width), {"Y": Y})
    alive = stab(kt, Y, nkeys, n, a, width, strict=False, out_data=[*n, *a])
    return alive.filter(pc.greater(alive.column("_d"), 0))


# ---------------------------------------------------------------------------------
# reductions, totally ordered time


def _snapshots_sql_agg(p: ReduceParams, alive: pa.Table) -> pa.Table:
    k, t, n = keys(p.nkeys), times(p.ttype.width), nexts(p.ttype.width)
    group = csv([*k, *t, *n])
    if p.agg == "count":
        expr, where = "sum(_d)::BIGINT", "TRUE"
    elif p.agg == "sum":
        expr, where = "sum(_a0 * _d)", "TRUE"
    elif p.agg in ("min", "max"):
        expr, where = f"{p.agg}(_a0)", "_a0 IS NOT NULL"
    else:  # pragma: no cover - guarded by the caller
        raise ValueError(p.agg)
    sql = f"SELECT {group}, {expr} AS _o0, 1::BIGINT AS _m FROM $A WHERE {where} GROUP BY {group}"
    return duck.query(sql, {"A": alive})


def _count_sum_snapshots(p: ReduceParams, Y: pa.Table) -> pa.Table:
    k, a, t, n = keys(p.nkeys), names("_a", p.ndata), times(p.ttype.width), nexts(p.ttype.width)
    kw = window(k)
    n_lead = ", ".join(f"lead({tc}) OVER ({kw} ORDER BY {csv(t)}) AS {nc}" for tc, nc in zip(t, n))
    body = duck.render(
        "count_sum",
        X="$Y",
        kd_cols=csv([*k, *a]) if k or a else "0 AS _nodata",  # a collection of no data columns: one row
        t=csv(t),
        kd_window=window([*k, *a]),
        k_cols=csv(k) if k else "0 AS _nokey",
        val="_a0" if p.agg == "sum" else "NULL::BIGINT",
        k_window=kw,
        n_lead=n_lead,
    )
    out = "_cnt::BIGINT" if p.agg == "count" else "CASE WHEN _nn > 0 THEN _sum END"
    sel = csv([*k, *t, *n])
    return duck.query(f"SELECT {sel}, {out} AS _o0, 1::BIGINT AS _m FROM ({body}) AS _s WHERE _cnt > 0", {"Y": Y})


def _func_snapshots(p: ReduceParams, alive: pa.Table) -> list[dict[str, Any]]:
    """The user function's output at each (key, time) of ``alive``, as snapshot rows
    (``_k*``, ``_o*``, ``_t*``, ``_n*``, ``_m``): each holds from its time to the key's
    next time."""
    k, a, t, n = keys(p.nkeys), names("_a", p.ndata), times(p.ttype.width), nexts(p.ttype.width)
    outs = names("_o", len(p.out_names))
    if alive.num_rows == 0:
        return []
    alive = alive.sort_by([(c, "ascending") for c in [*k, *t]])
    # keys past the user's (a dd_iterate time chunk) stay out of what func sees
    user = k[: len(p.key_names)]
    pdf = alive.select([*user, *a, "_d"]).to_pandas()
    pdf.columns = [*p.key_names, *p.data_names, "diff"]
    # keys, times and next times are read from Arrow, not pandas: pandas turns an int64
    # column with nulls (a key's last time has no next time; a null key) into float64
    exact = {c: alive.column(c).to_pylist() for c in [*k, *t, *n]}
    pieces: list[dict[str, Any]] = []
    # the rows of one (key, time) are consecutive: cut at the changes, no pandas groupby
    group = list(zip(*[exact[c] for c in [*k, *t]]))
    starts = [i for i in range(len(group)) if i == 0 or not _same_group(group[i - 1], group[i])]
    for i0, i1 in zip(starts, [*starts[1:], len(group)]):
        key_vals = tuple(exact[c][i0] for c in k)
        tleaves = tuple(int(exact[c][i0]) for c in t)
        res = call_func(p, key_vals, tleaves, pdf.iloc[i0:i1].reset_index(drop=True))
        nvals = [exact[c][i0] for c in n]
        for vals, m in res:
            row = dict(zip(k, key_vals)) | dict(zip(outs, vals)) | dict(zip(t, tleaves)) | dict(zip(n, nvals)) | {"_m": m}
            pieces.append(row)
    return pieces


def _same_group(x: tuple[Any, ...], y: tuple[Any, ...]) -> bool:
    """Equal keys and times, a null equal to a null and NaN to NaN (as pandas groups them)."""
    return all(u == v or (u is None and v is None) or (u != u and v != v) for u, v in zip(x, y))


def _hashable(v: Any) -> Any:
    """``v`` as part of a dict key that groups as SQL's GROUP BY does (NaN with NaN)."""
    if isinstance(v, float) and v != v:
        return ("NaN",)
    return v


def _func_diffs(p: ReduceParams, like: pa.Table, pieces: list[dict[str, Any]]) -> pa.Table:
    """:func:`_snapshot_diffs` of the snapshot rows ``pieces`` computed in Python: each
    snapshot adds ``_m`` at its time and takes it back at the key's next time, summed
    per (key, output, time), zeros dropped.  The user function runs once per (key, time)
    anyway, so this is no slower than the snapshots it sums; on a few rows it saves a
    DuckDB query (about 4 ms).  Values that cannot be dict keys (arrays, maps) take
    the DuckDB query."""
    k, t, n = keys(p.nkeys), times(p.ttype.width), nexts(p.ttype.width)
    outs = names("_o", len(p.out_names))
    cols = [*k, *outs]
    sums: dict[tuple[Any, ...], int] = {}
    first: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    try:
        for r in pieces:
            vals = tuple(r[c] for c in cols)
            h = tuple(map(_hashable, vals))
            for at, m in ((tuple(r[c] for c in t), r["_m"]), (tuple(r[c] for c in n), -r["_m"])):
                if at[0] is None:
                    continue  # the key's last time: the snapshot holds for good
                key = (h, at)
                sums[key] = sums.get(key, 0) + m
                first.setdefault(key, vals)
    except TypeError:  # unhashable values
        S = _table_from_rows(p, like, pieces)
        return _snapshot_diffs(S, cols, p.ttype.width)
    rows = [dict(zip(cols, first[key])) | dict(zip(t, key[1])) | {"_m": m} for key, m in sums.items() if m != 0]
    return _table_from_rows(p, like, rows, nexts_=False, diff="_d")


def _table_from_rows(p: ReduceParams, like: pa.Table, rows: list[dict[str, Any]], nexts_: bool = True,
                     diff: str = "_m") -> pa.Table:
    """Snapshot rows (``_k*``, ``_o*``, ``_t*``, ``_n*``, ``_m``) as a table typed after ``like``'s
    keys and the declared output types; ``nexts_=False``: no ``_n*``, and the
    multiplicity (``rows``' ``_m``) named ``diff``."""
    k, t, n = keys(p.nkeys), times(p.ttype.width), nexts(p.ttype.width)
    outs = names("_o", len(p.out_names))
    fields = (
        [like.schema.field(c) for c in k]
        + [pa.field(o, typ) for o, typ in zip(outs, p.out_types)]
        + [pa.field(c, pa.int64()) for c in [*t, *(n if nexts_ else [])]]
        + [pa.field(diff, pa.int64())]
    )
    schema = pa.schema(fields)
    arrays = []
    for f in schema:
        vals = [r.get("_m" if f.name == diff else f.name) for r in rows]
        try:
            arrays.append(pa.array(vals, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            name = f.name
            if name.startswith("_o"):
                name = p.out_names[int(name[2:])]
            raise OutputSchemaError(
                f"{p.op}: func returned values for column `{name}` that do not fit its declared type {f.type}: {e}"
            ) from e
    return pa.Table.from_arrays(arrays, schema=schema)


def call_func(p: ReduceParams, key_vals: Sequence[Any], tleaves: Sequence[int], rows: Any) -> list[tuple[tuple, int]]:
    """Call the user's reduce function for one key at one time, checking what it returns.

    Anything but a pandas DataFrame with the declared columns and an integral ``diff``
    (``None`` from a forgotten ``return`` included; "no rows" is an empty DataFrame)
    raises :class:`OutputSchemaError` naming the key and the time."""
    import pandas as pd

    assert p.func is not None
    where = f"key {dict(zip(p.key_names, key_vals))} at time {p.ttype.decode_value(tleaves)!r}"
    try:
        res = p.func(rows)
    except Exception as e:
        raise UserFunctionError(f"{p.op}: func raised {type(e).__name__}: {e} for {where}") from e
    if res is None:
        raise OutputSchemaError(
            f"{p.op}: func returned None for {where}; it must return a pandas DataFrame with columns "
            f"{list(p.out_names)} and `diff` (a forgotten `return`?). Return an empty DataFrame for no rows."
        )
    if not isinstance(res, pd.DataFrame):
        raise OutputSchemaError(
            f"{p.op}: func must return a pandas DataFrame with columns {list(p.out_names)} and `diff`; "
            f"it returned {type(res).__name__} for {where}"
        )
    cols = list(res.columns)
    missing = [c for c in [*p.out_names, "diff"] if c not in cols]
    extra = [c for c in cols if c not in (*p.out_names, "diff", *p.key_names)]
    if missing or extra:
        raise OutputSchemaError(
            f"{p.op}: func returned columns {cols} for {where}; expected {list(p.out_names)} plus `diff`"
            + (f" (missing {missing})" if missing else "")
            + (f" (unexpected {extra})" if extra else "")
        )
    if len(res) == 0:
        return []
    for name, kv in zip(p.key_names, key_vals):
        if name in cols and not all((_isna(v) and kv is None) or _same(v, kv) for v in res[name]):
            raise OutputSchemaError(f"{p.op}: func returned `{name}` values other than the key's for {where}")
    diffs = res["diff"]
    if diffs.isna().any() or not all(float(x).is_integer() for x in diffs):
        raise OutputSchemaError(f"{p.op}: func returned a null or non-integral `diff` for {where}")
    out = []
    for vals, m in zip(res[list(p.out_names)].itertuples(index=False, name=None), diffs):
        if int(m) != 0:
            out.append((tuple(None if _isna(v) else v for v in vals), int(m)))
    return out


def _same(v: Any, kv: Any) -> bool:
    try:
        return bool(v == kv)
    except Exception:
        return False


def _isna(v: Any) -> bool:
    try:
        return bool(v != v) or v is None  # NaN or None
    except Exception:
        return False


def _reduce_total_diffs(p: ReduceParams, Y: pa.Table) -> pa.Table:
    cols = [*keys(p.nkeys), *names("_o", len(p.out_names) or 1)]
    if p.agg in ("count", "sum") and (p.agg == "count" or p.exact_sum):
        S = _count_sum_snapshots(p, Y)
    else:
        alive = _alive(Y, p.nkeys, p.ndata, p.ttype.width)
        if p.agg == "func":
            return _func_diffs(p, alive, _func_snapshots(p, alive))
        S = _snapshots_sql_agg(p, alive)
    return _snapshot_diffs(S, cols, p.ttype.width)


# ---------------------------------------------------------------------------------
# reductions, any lattice


def _evaluator(p: ReduceParams) -> Callable[[Hashable, Counter, tuple[int, ...]], Counter]:
    import pandas as pd

    def evaluate(key: Hashable, acc: Counter, s: tuple[int, ...]) -> Counter:
        rows = generic.positive(acc)
        if not rows:
            return Counter()
        if p.agg == "count":
            return Counter({(sum(m for _, m in rows),): 1})
        if p.agg == "sum":
            vals = [(d[0], m) for d, m in rows if d[0] is not None]
            return Counter({((sum(v * m for v, m in vals) if vals else None),): 1})
        if p.agg in ("min", "max"):
            vals = [d[0] for d, _ in rows if d[0] is not None]
            if not vals:
                return Counter()
            return Counter({((min(vals) if p.agg == "min" else max(vals)),): 1})
        key_vals = key  # type: ignore[assignment]
        data = [list(key_vals) + list(d) + [m] for d, m in rows]
        frame = pd.DataFrame(data, columns=[*p.key_names, *p.data_names, "diff"])
        res = call_func(p, key_vals, s, frame)
        out: Counter = Counter()
        for vals, m in res:
            out[vals] += m
        return out

    return evaluate


def _generic_reduce(p: ReduceParams, X: pa.Table) -> pa.Table:
    k, t = keys(p.nkeys), times(p.ttype.width)
    rows = generic.keyed_rows(X, k, names("_a", p.ndata), t)
    res = generic.per_key(p.ttype, rows, _evaluator(p))
    outs = names("_o", len(p.out_names) or 1)
    return generic.keyed_table(res, [X.schema.field(c) for c in k],
                               [pa.field(o, typ) for o, typ in zip(outs, p.out_types)], t)


def reduce(p: ReduceParams, X: pa.Table) -> pa.Table:
    """Kernel for one bucket: ``X`` has ``_k*, _a*, _t*, _d, _new``; returns ``_k*, _o*, _t*, _d``."""
    if X.num_rows == 0:
        cols = [*keys(p.nkeys), *names("_o", len(p.out_names) or 1), *times(p.ttype.width), "_d"]
        return pa.schema([pa.field(c, pa.null()) for c in cols]).empty_table()
    if not p.ttype.is_total():
        return _generic_reduce(p, X)
    if p.agg in ("min", "max"):
        fast = extremum.min_max(p.nkeys, p.ndata, p.ttype.width, p.agg == "max", p.out_types[0], X)
        if fast is not None:
            return fast
    return _reduce_total(p, X)


def _reduce_total(p: ReduceParams, X: pa.Table) -> pa.Table:
    """``F(all) − F(old)`` for keys with new updates, by snapshots (any aggregate, total order)."""
    touched, old = _split_new(X, p.nkeys)
    cols = [*keys(p.nkeys), *names("_o", len(p.out_names) or 1), *times(p.ttype.width)]
    all_diffs = _reduce_total_diffs(p, touched)
    old_diffs = _reduce_total_diffs(p, old) if old is not None and old.num_rows else None
    return _subtract(all_diffs, old_diffs, cols)


# ---------------------------------------------------------------------------------
# threshold / distinct


def _apply_threshold(
    func: Callable[[int], int] | None, values: np.ndarray, op: str, where: Callable[[int], str] = lambda i: ""
) -> np.ndarray:
    """``func`` of every multiplicity (called once per distinct value); ``where(i)`` names the
    row and time of ``values[i]`` for error messages."""
    if func is None:
        return (values > 0).astype(np.int64)
    uniq = np.unique(values)
    mapped = {}
    for m in uniq.tolist():
        if m == 0:
            mapped[m] = 0
            continue
        try:
            r = func(int(m))
        except Exception as e:
            at = where(int(np.argmax(values == m)))
            raise UserFunctionError(f"{op}: func raised {type(e).__name__}: {e} for multiplicity {m}{at}") from e
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            at = where(int(np.argmax(values == m)))
            raise OutputSchemaError(
                f"{op}: func must return an int multiplicity; it returned {r!r} for multiplicity {m}{at}"
                + (" (a forgotten `return`?)" if r is None else "")
            )
        mapped[m] = int(r)
    return np.array([mapped[v] for v in values.tolist()], dtype=np.int64)


def _row_at(p: ThresholdParams, data: Sequence[Any], tleaves: Sequence[int]) -> str:
    """`` (row {...} at time t)``: where a threshold function was called, in the user's names."""
    names_ = list(p.data_names) or names("_a", p.ndata)
    row = dict(zip(names_, data))
    return f" (row {row} at time {p.ttype.decode_value(tuple(int(x) for x in tleaves))!r})"


def _running(Y: pa.Table, a: Sequence[str], t: Sequence[str]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``sql/running.sql``: per data row ``a`` (the whole row is the key), its updates summed
    by time ``t`` (zero sums dropped), and the multiplicity after (``_c``) and just before
    (``_p``) each: ``(rows with columns a and t, _c, _p)``.

    Where the data and time columns are integers (or booleans) without nulls that pack
    into one int64 (:func:`native.key_sorted`), by one sort and a cumulative sum, without
    a DuckDB query (whose fixed cost, a few milliseconds, is most of the work on a loop's
    small updates); otherwise the SQL.  The same rows either way, in another order."""
    a, t = list(a), list(t)
    ks = native.key_sorted(Y.select([*a, *t, "_d"]), a, then=t) if Y.num_rows else None
    if ks is not None:  # sorted by (a, t), each (a, t) once
        d = ks.table.column("_d").to_numpy()
        c = running_sums(ks.codes, d)
        return ks.table.select([*a, *t]), c, c - d
    r = duck.run("running", {"X": Y}, d_cols=csv(a) if a else "0 AS _nodata", t=csv(t), d_window=window(a))
    return r.select([*a, *t]), r.column("_c").to_numpy(), r.column("_p").to_numpy()


def _threshold_total_diffs(p: ThresholdParams, Y: pa.Table) -> pa.Table:
    a, t = names("_a", p.ndata), times(p.ttype.width)
    r, c, prev = _running(Y, a, t)

    def where(i: int) -> str:
        return _row_at(p, [r.column(x)[i].as_py() for x in a], [r.column(x)[i].as_py() for x in t])

    d = _apply_threshold(p.func, c, p.op, where) - _apply_threshold(p.func, prev, p.op, where)
    keep = np.nonzero(d)[0]
    out = r.select([*a, *t]).take(pa.array(keep)) if a else r.select(t).take(pa.array(keep))
    return out.append_column("_d", pa.array(d[keep], pa.int64()))


def threshold(p: ThresholdParams, X: pa.Table) -> pa.Table:
    """Kernel for one bucket: ``X`` has ``_a*, _t*, _d, _new``; returns ``_a*, _t*, _d``."""
    a, t = names("_a", p.ndata), times(p.ttype.width)
    if X.num_rows == 0:
        return X.select([*a, *t, "_d"])
    if not p.ttype.is_total():
        rows = [(d, d, tl, r, new) for _, d, tl, r, new in
                generic.keyed_rows(X, [], names("_a", p.ndata), times(p.ttype.width))]

        def evaluate(key: Hashable, acc: Counter, s: tuple[int, ...]) -> Counter:
            m = acc.get(key, 0)
            if m == 0:
                return Counter()
            v = int(_apply_threshold(p.func, np.array([m], dtype=np.int64), p.op, lambda i: _row_at(p, key, s))[0])
            return Counter({key: v}) if v else Counter()

        res = generic.per_key(p.ttype, rows, evaluate)
        fields = [X.schema.field(c) for c in a] + [pa.field(c, pa.int64()) for c in t] + [pa.field("_d", pa.int64())]
        cols: list[list[Any]] = [[] for _ in fields]
        for _, d, tl, r in res:
            for i, v in enumerate([*d, *tl, r]):
                cols[i].append(v)
        schema = pa.schema(fields)
        return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)
    # the whole row is the key
    packed = _threshold_packed(p, X)
    if packed is not None:
        return packed
    touched, old = _split_threshold(X, a)
    all_diffs = _threshold_total_diffs(p, touched)
    old_diffs = _threshold_total_diffs(p, old) if old is not None and old.num_rows else None
    return _subtract(all_diffs, old_diffs, [*a, *t])


def _threshold_packed(p: ThresholdParams, X: pa.Table) -> pa.Table | None:
    """:func:`threshold` over a total order by one sort, where the data and time columns are
    integers (or booleans) without nulls that pack into one int64 (else ``None``).

    The rows sorted by ``(data, time)`` and summed there twice, over every row and over
    the old rows (``_new`` false), give each data row's multiplicity after and before each
    of its times in ``trace + new`` and in ``trace``; the output at a time is
    ``func(after) - func(before)`` of the first minus that of the second.  A data row
    without new updates has equal sums and gives nothing, so the rows need not be cut to
    the touched keys first, and the two collections are never consolidated apart."""
    a, t = names("_a", p.ndata), times(p.ttype.width)
    if not a or not native.can_sum(X, "_d"):
        return None
    packing = native.packed_codes(X, [*a, *t])
    if packing is None:
        return None
    code, _, size, arrays = packing
    order, code = sort_packed(code, overwrite=True)
    diffs, new = native.int_values(X.column("_d")), X.column(NEW).to_numpy(zero_copy_only=False)
    span = 1
    for w in size[len(a):]:
        span *= w
    if p.func is None:  # distinct: the whole change in one pass
        keep, d = orders.distinct_changes(code, order, diffs, new, span)
        return _gathered(X, arrays, keep, [*a, *t], d)
    rows, at, s_all, s_old = orders.sorted_sums_old(code, order, diffs, new)
    data = code[at] // span
    del code, order
    n = len(rows)
    c_all, c_old = running_sums(data, s_all), running_sums(data, s_old)

    def where(i: int) -> str:
        r = int(rows[i % n])
        return _row_at(p, [arrays[x][r].item() for x in a], [arrays[x][r].item() for x in t])

    f = _apply_threshold(p.func, np.concatenate([c_all, c_all - s_all, c_old, c_old - s_old]), p.op, where)
    d = f[:n] - f[n: 2 * n] - f[2 * n: 3 * n] + f[3 * n:]
    return _gathered(X, arrays, rows[d != 0], [*a, *t], d[d != 0])


def _gathered(X: pa.Table, arrays: dict[str, np.ndarray], rows: np.ndarray, cols: Sequence[str],
              d: np.ndarray) -> pa.Table:
    """``X``'s ``cols`` (their numpy ``arrays``) at ``rows``, with the diffs ``d``."""
    out = [pa.array(arrays[x][rows], type=X.schema.field(x).type) for x in cols]
    return pa.Table.from_arrays([*out, pa.array(d, pa.int64())], names=[*cols, "_d"])


def _split_threshold(X: pa.Table, a: list[str]) -> tuple[pa.Table, pa.Table | None]:
    new = X.column(NEW)
    if pc.all(new).as_py():
        return X, None
    touched = native.touching(X, X.filter(new), a)
    return touched, touched.filter(pc.invert(touched.column(NEW)))
