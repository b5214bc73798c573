"""Join kernels: ``dd_join``, ``dd_semijoin`` and ``dd_antijoin`` over one bucket of keys.

On ``(data, time, diff)``: every pair of updates ``(k, x, t1, r1)`` and
``(k, y, t2, r2)`` with equal keys contributes ``((k, x, y), t1 ⊔ t2, r1 * r2)``;
the output is that sum, consolidated.  For a totally ordered time the same sum is
computed without enumerating pairs: an update of one side meets the other side
*accumulated* at its time (the trace formulation), so a blip costs one lookup and
a long history on one side is never crossed with a long history on the other.
Inside an iteration (``_new`` flags mark this iteration's updates, the rest is the
operators' trace) only pairs involving a new update are formed:
``ΔA ⋈ (B_old + ΔB) + A_old ⋈ ΔB``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from spark_differential.core.lattice import AltNeu, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck, native
from spark_differential.kernels.common import NEW, StateShape, conform, csv, key_eq, keys, names, times
from spark_differential.kernels.stab import exact_type, expand, ids, numbered, stab, stab_numbered

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
orders = lazy("spark_differential.kernels.order")  # imports numba: loaded by the first plain join


@dataclass(frozen=True)
class JoinParams:
    nkeys: int
    na: int
    nb: int
    ttype: TimeType
    mode: str = "join"  # "join" | "semijoin" | "antijoin" | "asof"
    strict: bool = False  # asof: only updates of B strictly before an update of A count
    left: bool = False  # asof: keep updates of A that meet nothing, with nulls for B's columns
    # whether the output of a totally ordered join is consolidated: the in-task loop, whose
    # every consumer consolidates its input anyway, turns it off (rows may then repeat)
    consolidate: bool = True

    def shape(self) -> StateShape | None:
        """Keyed by the join keys, bilinear (see :class:`~.common.StateShape`); an as-of join
        (``mode="asof"``) has no in-task form."""
        return StateShape(tuple(keys(self.nkeys)), bilinear=True) if self.mode != "asof" else None

    def chunked(self) -> tuple[JoinParams, str]:
        """The parameters with one more key column (a time chunk), and its name."""
        return dataclasses.replace(self, nkeys=self.nkeys + 1), keys(self.nkeys + 1)[-1]

    def unconsolidated(self) -> JoinParams:
        """The same join whose output may repeat a row (a consumer that consolidates its
        input anyway then skips a pass)."""
        return dataclasses.replace(self, consolidate=False) if self.mode == "join" else self


def _with_new(table: pa.Table, new: bool) -> pa.Table:
    """The rows whose ``_new`` flag is ``new`` (the flag itself as the filter: a third of
    ``pc.equal``'s cost on a few hundred rows)."""
    flag = table.column(NEW)
    spans = _uniform_spans(flag, new)
    if spans is not None:  # (the trace's rows and the new ones concatenated: slices, no filter)
        if len(spans) == 1:
            return table.slice(*spans[0])
        return pa.concat_tables([table.slice(at, n) for at, n in spans]) if spans else table.slice(0, 0)
    return table.filter(flag if new else pc.invert(flag))


def _uniform_spans(flag: pa.ChunkedArray, value: bool) -> list[tuple[int, int]] | None:
    """The row ranges ``(offset, length)`` holding ``value``, adjacent ones merged, where every
    chunk of ``flag`` holds one value only (no nulls); else ``None``."""
    if flag.null_count or not pa.types.is_boolean(flag.type):
        return None
    spans: list[tuple[int, int]] = []
    at = 0
    for chunk in flag.chunks:
        n = len(chunk)
        true = chunk.true_count
        if true == (n if value else 0):
            if n and spans and spans[-1][0] + spans[-1][1] == at:
                spans[-1] = (spans[-1][0], spans[-1][1] + n)
            elif n:
                spans.append((at, n))
        elif true != (0 if value else n):
            return None
        at += n
    return spans


def consolidated(parts: Sequence[pa.Table], cols: Sequence[str]) -> pa.Table:
    """The sum of several update tables with the same columns, consolidated."""
    parts = [t.select([*cols, "_d"]) for t in parts if t.num_rows]
    if not parts:
        return pa.schema([pa.field(c, pa.null()) for c in cols] + [pa.field("_d", pa.int64())]).empty_table()
    return native.consolidated(pa.concat_tables(parts, promote_options="permissive"), cols)


def join_total(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> pa.Table:
    """``ΔA ⋈ B_all + A_old ⋈ ΔB`` for a totally ordered time, by stabbing joins.

    ``X ⋈ Y`` splits into pairs where Y's update is not later (X's update meets Y
    accumulated at its time) and pairs where it is later (Y's update meets X
    accumulated strictly before).
    """
    a, b = names("_a", p.na), names("_b", p.nb)
    out, w = [*a, *b], p.ttype.width
    a_new = _with_new(A, True) if has_old else A
    pairs = [(a_new, B)]
    if has_old:
        pairs.append((_with_new(A, False), _with_new(B, True)))
    parts = []
    for x, y in pairs:
        if x.num_rows == 0 or y.num_rows == 0:
            continue
        crossed = _crossed(x, y, p.nkeys, a, b, w)
        if crossed is not None:
            parts.append(crossed)
            continue
        # both directions of a pair share one consolidation and numbering of its tables
        done = numbered([(x, a), (y, b)], p.nkeys, w)
        if done is None:
            parts += [stab(x, y, p.nkeys, a, b, w, strict=False, out_data=out),
                      stab(y, x, p.nkeys, b, a, w, strict=True, out_data=out)]
        else:
            xn, yn = done
            parts += [stab_numbered(xn, yn, p.nkeys, w, strict=False, out_data=out),
                      stab_numbered(yn, xn, p.nkeys, w, strict=True, out_data=out)]
    cols = [*keys(p.nkeys), *out, *times(w)]
    parts = [t for t in parts if t.num_rows]
    if len(parts) > 1:  # (a plain join's columns are its sides', a stabbing join's may be DuckDB's: one type each)
        schema = pa.schema([*[A.schema.field(c) for c in [*keys(p.nkeys), *a]], *[B.schema.field(c) for c in b],
                            *[A.schema.field(c) for c in times(w)], pa.field("_d", pa.int64())])
        parts = [conform(t.select([*cols, "_d"]), schema) for t in parts]
    if not p.consolidate and parts:
        return pa.concat_tables([t.select([*cols, "_d"]) for t in parts], promote_options="permissive")
    return consolidated(parts, cols)


def _crossed(x: pa.Table, y: pa.Table, nkeys: int, a: Sequence[str], b: Sequence[str], width: int) -> pa.Table | None:
    """``x ⋈ y`` of a totally ordered time whose two sides' times do not interleave: every
    pair of rows with equal keys, at the later side's time, multiplicities multiplied (not
    consolidated).  When no time of ``y`` is after a time of ``x``, every update of ``x``
    meets all of ``y`` and no update of ``y`` meets an earlier ``x``; when every time of ``x``
    is before every time of ``y``, the other way round: the two stabbing joins of
    :func:`join_total` are then one plain join, which costs a counting pass over ``y``'s keys
    (:func:`~spark_differential.kernels.order.equal_pairs`; a sort where they spread wide)
    instead of both sides' consolidation and the time ranks.  The common case inside a view's update:
    the new updates at the update's time against the trace, advanced to the frontier below it.
    ``None``: the times interleave (or a time of more than one leaf, or keys :func:`numbered`
    does not number)."""
    k, t = keys(nkeys), times(width)
    if width != 1 or not all(exact_type(x.schema.field(c).type) and x.schema.field(c).type == y.schema.field(c).type
                              for c in k):
        return None
    xt, yt = _time_range(x.column(t[0])), _time_range(y.column(t[0]))
    if xt is None or yt is None:
        return None
    if yt[1] <= xt[0]:
        at_x = True
    elif xt[1] < yt[0]:
        at_x = False
    else:
        return None
    n = x.num_rows
    kid = _key_codes(x, y, k)
    found = orders.equal_pairs(kid[:n], kid[n:])
    if found is not None:
        x_of, y_of = found
    else:  # keys spread over a range far wider than the rows: by a sort of y's
        y_order = np.argsort(kid[n:], kind="stable")
        y_kid = kid[n:][y_order]
        x_of, pos = expand(np.searchsorted(y_kid, kid[:n], "left"), np.searchsorted(y_kid, kid[:n], "right"))
        y_of = y_order[pos]
    x_rows, y_rows = pa.array(x_of), pa.array(y_of)
    xs = x.select([*k, *a, t[0]] if at_x else [*k, *a]).take(x_rows)
    ys = y.select([*b] if at_x else [*b, t[0]]).take(y_rows)
    cols = [*xs.columns[:len(k) + len(a)], *ys.columns[:len(b)], xs.column(t[0]) if at_x else ys.column(t[0]),
            pa.array(x.column("_d").to_numpy()[x_of] * y.column("_d").to_numpy()[y_of], pa.int64())]
    return pa.Table.from_arrays(cols, names=[*k, *a, *b, t[0], "_d"])


def _time_range(column: pa.ChunkedArray) -> tuple[int, int] | None:
    """The smallest and largest value of a time leaf (not empty), ``None`` when all are null."""
    values = native.int_values(column)
    if values is not None:
        return int(values.min()), int(values.max())
    found = pc.min_max(column)
    lo, hi = found["min"].as_py(), found["max"].as_py()
    return None if lo is None else (lo, hi)


def _key_codes(x: pa.Table, y: pa.Table, k: Sequence[str]) -> np.ndarray:
    """One int64 per row of ``x`` then of ``y``, equal exactly where the rows' ``k`` columns are
    (nulls equal to nulls): the values of one integer column without nulls, integer columns
    without nulls packed (:class:`~spark_differential.kernels.native.Radix`), else :func:`ids`."""
    values = []
    for c in k:
        xv, yv = native.int_values(x.column(c)), native.int_values(y.column(c))
        if xv is None or yv is None:
            break
        values.append(np.concatenate([xv, yv]))
    else:
        if len(values) == 1:
            return values[0]
        radix = native.Radix.of(values) if values else None
        if radix is not None:
            return radix.codes(values)[0]
    return ids([pa.concat_arrays([x.column(c).combine_chunks(), y.column(c).combine_chunks()]) for c in k],
               x.num_rows + y.num_rows)


def join_pairs_sql(p: JoinParams, A: str, B: str) -> str:
    k, a, b, t = keys(p.nkeys), names("_a", p.na), names("_b", p.nb), times(p.ttype.width)
    tj = p.ttype.sql_join([f"a.{c}" for c in t], [f"b.{c}" for c in t])
    return duck.render(
        "join_pairs",
        out_cols=csv([*[f"a.{c}" for c in k], *[f"a.{c}" for c in a], *[f"b.{c}" for c in b]]),
        time_join=csv([f"{e} AS {n}" for e, n in zip(tj, t)]),
        A=A,
        B=B,
        key_eq=key_eq(k, "a", "b"),
    )


def asof_total(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> pa.Table:
    """Each update of A against B accumulated at (or strictly before) its time, at A's time."""
    a, b = names("_a", p.na), names("_b", p.nb)
    w = p.ttype.width
    a_new = _with_new(A, True) if has_old else A
    parts = [stab(a_new, B, p.nkeys, a, b, w, strict=p.strict, out_data=[*a, *b])]
    if has_old:
        parts.append(stab(_with_new(A, False), _with_new(B, True), p.nkeys, a, b, w, strict=p.strict, out_data=[*a, *b]))
    return consolidated(parts, [*keys(p.nkeys), *a, *b, *times(w)])


def asof_pairs_sql(p: JoinParams, A: str, B: str) -> str:
    """The as-of join for any lattice: B's updates at times <= (strict: <) each A update's time."""
    k, a, b, t = keys(p.nkeys), names("_a", p.na), names("_b", p.nb), times(p.ttype.width)
    at, bt = [f"pc.{c}" for c in t], [f"qc.{c}" for c in t]
    cond = p.ttype.sql_leq(bt, at)
    if p.strict:
        cond += " AND NOT (" + " AND ".join(f"{x} = {y}" for x, y in zip(bt, at)) + ")"
    group = [*[f"pc.{c}" for c in [*k, *a]], *[f"qc.{c}" for c in b], *at]
    # old and new updates are consolidated separately: inside an iteration the result is
    # the bilinear difference ΔA ⋈ B + A_old ⋈ ΔB, so an update's flag must stay its own
    return (
        f"WITH pc AS (SELECT {csv([*k, *a, *t])}, {NEW}, sum(_d)::BIGINT AS _d FROM {A} GROUP BY ALL HAVING sum(_d) <> 0), "
        f"qc AS (SELECT {csv([*k, *b, *t])}, {NEW}, sum(_d)::BIGINT AS _d FROM {B} GROUP BY ALL HAVING sum(_d) <> 0) "
        f"SELECT {csv(group)}, sum(pc._d * qc._d)::BIGINT AS _d "
        f"FROM pc JOIN qc ON {key_eq(k, 'pc', 'qc')} AND {cond} "
        f"WHERE pc.{NEW} OR qc.{NEW} GROUP BY {csv(group)} HAVING sum(pc._d * qc._d) <> 0"
    )


def join(p: JoinParams, A: pa.Table, B: pa.Table) -> pa.Table:
    """Kernel for one bucket.

    ``A``: ``_k*, _a*, _t*, _d, _new``; ``B``: ``_k*, _b*, _t*, _d, _new`` (for the
    semi/antijoin modes ``B`` has no data columns).  Output: ``_k*, _a*, _b*, _t*, _d``
    (``_b*`` only for ``mode="join"``).
    """
    if A.num_rows == 0:
        return _empty_out(p)
    has_old = (not _all_true(A.column(NEW))) or (not _all_true(B.column(NEW)))
    if p.mode == "asof":
        return _asof(p, A, B, has_old)
    side = _blip_side(p, A, B, has_old)
    if side is not None:
        joined = blip_join(p, A, B) if side == "A" else blip_join(p, B, A, blip_side="B")
    elif p.ttype.is_total():
        joined = join_total(p, A, B, has_old)
    else:
        joined = duck.query(join_pairs_sql(p, "$A", "$B"), {"A": A, "B": B})
    if p.mode != "antijoin":
        return joined
    # A − semijoin(A, B): the new updates of A, minus their semijoined part
    cols = [*keys(p.nkeys), *names("_a", p.na), *times(p.ttype.width)]
    negated = joined.set_column(joined.schema.get_field_index("_d"), "_d", pc.negate(joined.column("_d")))
    return consolidated([_with_new(A, True), negated], cols)


def is_blip_stream(table: str, p: JoinParams, prefix: str, ndata: int) -> str:
    """SQL counting violations of *pure blip form* in ``table`` (AltNeu time, last leaf = neu).

    A pure blip stream (what ``differentiate`` makes) has, for every (key, data, time),
    an ``alt`` update exactly cancelled by a ``neu`` update and nothing else: it
    accumulates to something only at the instants ``alt(t)``.
    """
    k, d, t = keys(p.nkeys), names(prefix, ndata), times(p.ttype.width)
    inner, neu = t[:-1], t[-1]
    cols = [*k, *d, *inner]
    return (
        f"SELECT count(*) AS bad FROM (SELECT {csv(cols)}, sum(_d) AS s, "
        f"count(*) FILTER (WHERE {neu} = 0) AS na, count(*) AS c FROM "
        f"(SELECT {csv([*k, *d, *t])}, sum(_d)::BIGINT AS _d FROM {table} GROUP BY ALL HAVING sum(_d) <> 0) AS _c "
        f"GROUP BY {csv(cols)}) AS _g WHERE s <> 0 OR na <> 1 OR c <> 2"
    )


def blip_join(p: JoinParams, blips: pa.Table, other: pa.Table, blip_side: str = "A") -> pa.Table:
    """Join of a pure blip stream with any collection, by lookups only.

    Each blip's ``alt`` update meets ``other`` accumulated at ``alt(t)``; the full
    bilinear join then has exactly those rows at ``alt(t)`` and their negations at
    ``neu(t)`` (pairs with any other time cancel).  The blip stream is only ever
    *streamed* through the lookup, never arranged into segments.
    """
    a, b = names("_a", p.na), names("_b", p.nb)
    w = p.ttype.width
    t = times(w)
    alt = blips.filter(pc.equal(blips.column(t[-1]), 0))
    mine, theirs = (a, b) if blip_side == "A" else (b, a)
    at_alt = stab(alt, other, p.nkeys, mine, theirs, w, strict=False, out_data=[*a, *b])
    i_neu, i_d = at_alt.schema.get_field_index(t[-1]), at_alt.schema.get_field_index("_d")
    at_neu = at_alt.set_column(i_neu, t[-1], pa.array([1] * at_alt.num_rows, pa.int64()))
    at_neu = at_neu.set_column(i_d, "_d", pc.negate(at_alt.column("_d")))
    return consolidated([at_alt, at_neu], [*keys(p.nkeys), *a, *b, *t])


def _blip_side(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> str | None:
    """Which input (if any) is a pure blip stream, so that the other alone is arranged."""
    if has_old or not isinstance(p.ttype, AltNeu) or not p.ttype.is_total():
        return None
    for side, table, prefix, n in (("A", A, "_a", p.na), ("B", B, "_b", p.nb)):
        if table.num_rows and duck.query(is_blip_stream("$X", p, prefix, n), {"X": table}).column("bad")[0].as_py() == 0:
            return side
    return None


def _asof(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> pa.Table:
    if p.ttype.is_total():
        matched = asof_total(p, A, B, has_old)
    else:
        matched = duck.query(asof_pairs_sql(p, "$A", "$B"), {"A": A, "B": B})
    if not p.left:
        return matched
    # left: updates of A meeting no row of B keep going, with nulls for B's columns
    k, a, b, t = keys(p.nkeys), names("_a", p.na), names("_b", p.nb), times(p.ttype.width)
    own = [*k, *a, *t]
    nulls = ", ".join(f"NULL AS {c}" for c in b)
    full = (
        f"WITH pc AS (SELECT {csv(own)}, sum(_d)::BIGINT AS _d FROM $A GROUP BY ALL HAVING sum(_d) <> 0) "
        f"SELECT {csv([*k, *a, *b, *t])}, _d FROM $M UNION ALL "
        f"SELECT {csv([*k, *a])}{', ' + nulls if nulls else ''}, {csv(t)}, _d FROM pc "
        f"WHERE NOT EXISTS (SELECT 1 FROM $M AS m WHERE {key_eq(own, 'm', 'pc')})"
    )
    return duck.query(full, {"A": A, "M": matched})


def _all_true(col: pa.ChunkedArray) -> bool:
    if not col.null_count and pa.types.is_boolean(col.type):  # (counted per chunk: no compute call)
        return sum(chunk.true_count for chunk in col.chunks) == len(col)
    return len(col) == 0 or bool(pc.all(col).as_py())


def _empty_out(p: JoinParams) -> pa.Table:
    cols = [*keys(p.nkeys), *names("_a", p.na)] + (names("_b", p.nb) if p.mode in ("join", "asof") else [])
    fields = [pa.field(c, pa.null()) for c in cols] + [pa.field(c, pa.int64()) for c in times(p.ttype.width)]
    return pa.schema([*fields, pa.field("_d", pa.int64())]).empty_table()
