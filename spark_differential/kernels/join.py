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

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..lattice import TimeType
from . import duck
from .common import NEW, csv, hash_of, key_eq, keys, names, times, window


@dataclass(frozen=True)
class JoinParams:
    nkeys: int
    na: int
    nb: int
    ttype: TimeType
    mode: str = "join"  # "join" | "semijoin" | "antijoin" | "asof"
    strict: bool = False  # asof: only updates of B strictly before an update of A count
    left: bool = False  # asof: keep updates of A that meet nothing, with nulls for B's columns


def stab_sql(
    P: str,
    Q: str,
    nkeys: int,
    p_data: Sequence[str],
    q_data: Sequence[str],
    width: int,
    *,
    strict: bool,
    out_data: Sequence[str],
) -> str:
    """SQL for: every update of ``P`` against ``Q`` accumulated at (``strict``: before) its time.

    ``P`` and ``Q`` are table expressions with columns ``_k*``, their data columns,
    ``_t*`` and ``_d``.  The result has ``_k*``, ``out_data`` (each taken from
    whichever side has it), ``_t*`` (P's time) and ``_d``.
    """
    k = keys(nkeys)
    t = times(width)
    side = {c: "pp" for c in p_data} | {c: "qi" for c in q_data}
    out_cols = [f"pp.{c}" for c in k] + [f"{side[c]}.{c}" for c in out_data] + [f"pp.{c}" for c in t]
    rng = "qi._lo < pp._pos AND pp._pos <= qi._hi" if strict else "qi._lo <= pp._pos AND pp._pos < qi._hi"
    return duck.render(
        "stab",
        P=P,
        Q=Q,
        p_cols=csv([*k, *p_data, *t]),
        q_cols=csv([*k, *q_data, *t]),
        t=csv(t),
        q_window=window([*k, *q_data]),
        q_hash=hash_of(k),
        p_hash=hash_of(k),
        out_cols=csv(out_cols),
        range=rng,
        key_eq=key_eq(k, "pp", "qi"),
    )


def _sub(table: str, where: str | None) -> str:
    return f"(SELECT * FROM {table} WHERE {where})" if where else table


def join_total_sql(p: JoinParams, A: str, B: str, has_old: bool) -> str:
    a, b = names("_a", p.na), names("_b", p.nb)
    out = [*a, *b]
    w = p.ttype.width

    def stab(P: str, Q: str, pd: list[str], qd: list[str], strict: bool) -> str:
        return stab_sql(P, Q, p.nkeys, pd, qd, w, strict=strict, out_data=out)

    a_new, b_new, b_all = _sub(A, NEW), _sub(B, NEW), B
    parts = [stab(a_new, b_all, a, b, False), stab(b_all, a_new, b, a, True)]
    if has_old:
        a_old = _sub(A, f"NOT {NEW}")
        parts += [stab(a_old, b_new, a, b, False), stab(b_new, a_old, b, a, True)]
    return _union_consolidated(parts, [*keys(p.nkeys), *out, *times(w)])


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


def asof_total_sql(p: JoinParams, A: str, B: str, has_old: bool) -> str:
    """Each update of A against B accumulated at (or strictly before) its time, at A's time."""
    a, b = names("_a", p.na), names("_b", p.nb)
    w = p.ttype.width
    parts = [stab_sql(_sub(A, NEW), B, p.nkeys, a, b, w, strict=p.strict, out_data=[*a, *b])]
    if has_old:
        parts.append(stab_sql(_sub(A, f"NOT {NEW}"), _sub(B, NEW), p.nkeys, a, b, w, strict=p.strict, out_data=[*a, *b]))
    return _union_consolidated(parts, [*keys(p.nkeys), *a, *b, *times(w)])


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


def _union_consolidated(parts: list[str], cols: list[str]) -> str:
    body = "\nUNION ALL\n".join(f"SELECT {csv(cols)}, _d FROM ({q}) AS _p{i}" for i, q in enumerate(parts))
    return f"SELECT {csv(cols)}, sum(_d)::BIGINT AS _d FROM (\n{body}\n) AS _u GROUP BY ALL HAVING sum(_d) <> 0"


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
        sql = _union_consolidated(
            [blip_sql(p, "$A", "$B", "A") if side == "A" else blip_sql(p, "$B", "$A", "B")],
            [*keys(p.nkeys), *names("_a", p.na), *names("_b", p.nb), *times(p.ttype.width)],
        )
    elif p.ttype.is_total():
        sql = join_total_sql(p, "$A", "$B", has_old)
    else:
        sql = join_pairs_sql(p, "$A", "$B")
    if p.mode == "antijoin":
        # A − semijoin(A, B): the new updates of A, minus their semijoined part
        k, a, t = keys(p.nkeys), names("_a", p.na), times(p.ttype.width)
        cols = [*k, *a, *t]
        sql = (
            f"SELECT {csv(cols)}, sum(_d)::BIGINT AS _d FROM ("
            f"SELECT {csv(cols)}, _d FROM $A WHERE {NEW} UNION ALL "
            f"SELECT {csv(cols)}, -_d AS _d FROM ({sql}) AS _s) AS _u GROUP BY ALL HAVING sum(_d) <> 0"
        )
    return duck.query(sql, {"A": A, "B": B})


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


def blip_sql(p: JoinParams, blips: str, other: str, blip_side: str) -> str:
    """Join of a pure blip stream with any collection, by lookups only.

    Each blip's ``alt`` update meets ``other`` accumulated at ``alt(t)``; the full
    bilinear join then has exactly those rows at ``alt(t)`` and their negations at
    ``neu(t)`` (pairs with any other time cancel).  The blip stream is only ever
    *streamed* through the lookup, never arranged into segments.
    """
    a, b = names("_a", p.na), names("_b", p.nb)
    w = p.ttype.width
    t = times(w)
    alt = f"(SELECT * FROM {blips} WHERE {t[-1]} = 0)"
    mine, theirs = (a, b) if blip_side == "A" else (b, a)
    q = stab_sql(alt, other, p.nkeys, mine, theirs, w, strict=False, out_data=[*a, *b])
    cols = [*keys(p.nkeys), *a, *b]
    neu = [*t[:-1], f"1 AS {t[-1]}"]
    return (
        f"SELECT {csv([*cols, *t])}, _d FROM ({q}) AS _h UNION ALL "
        f"SELECT {csv([*cols, *neu])}, -_d AS _d FROM ({q}) AS _h2"
    )


def _blip_side(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> str | None:
    """Which input (if any) is a pure blip stream, so that the other alone is arranged."""
    from ..lattice import AltNeu

    if has_old or not isinstance(p.ttype, AltNeu) or not p.ttype.is_total():
        return None
    for side, table, prefix, n in (("A", A, "_a", p.na), ("B", B, "_b", p.nb)):
        if table.num_rows and duck.query(is_blip_stream("$X", p, prefix, n), {"X": table}).column("bad")[0].as_py() == 0:
            return side
    return None


def _asof(p: JoinParams, A: pa.Table, B: pa.Table, has_old: bool) -> pa.Table:
    sql = asof_total_sql(p, "$A", "$B", has_old) if p.ttype.is_total() else asof_pairs_sql(p, "$A", "$B")
    if not p.left:
        return duck.query(sql, {"A": A, "B": B})
    # left: updates of A meeting no row of B keep going, with nulls for B's columns
    k, a, b, t = keys(p.nkeys), names("_a", p.na), names("_b", p.nb), times(p.ttype.width)
    own = [*k, *a, *t]
    nulls = ", ".join(f"NULL AS {c}" for c in b)
    full = (
        f"WITH m AS ({sql}), "
        f"pc AS (SELECT {csv(own)}, sum(_d)::BIGINT AS _d FROM $A GROUP BY ALL HAVING sum(_d) <> 0) "
        f"SELECT {csv([*k, *a, *b, *t])}, _d FROM m UNION ALL "
        f"SELECT {csv([*k, *a])}{', ' + nulls if nulls else ''}, {csv(t)}, _d FROM pc "
        f"WHERE NOT EXISTS (SELECT 1 FROM m WHERE {key_eq(own, 'm', 'pc')})"
    )
    return duck.query(full, {"A": A, "B": B})


def _all_true(col: pa.ChunkedArray) -> bool:
    import pyarrow.compute as pc

    return len(col) == 0 or bool(pc.all(col).as_py())


def _empty_out(p: JoinParams) -> pa.Table:
    cols = [*keys(p.nkeys), *names("_a", p.na)] + (names("_b", p.nb) if p.mode in ("join", "asof") else [])
    fields = [pa.field(c, pa.null()) for c in cols] + [pa.field(c, pa.int64()) for c in times(p.ttype.width)]
    return pa.schema([*fields, pa.field("_d", pa.int64())]).empty_table()
