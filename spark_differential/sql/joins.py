"""The ``FROM`` clause of a recursive ``sd.sql`` query: joins and ``WHERE`` on collections.

On ``(data, time, diff)``:

* an inner join (``JOIN ... ON``, ``USING``, ``NATURAL``, a comma, ``CROSS JOIN``) is
  ``dd_join`` on the equalities between the two sides (expressions are computed into key
  columns first; no equality: one constant key), then the other conditions as a filter.
  Without outer joins, ``WHERE`` conditions on one table filter it before it is joined and
  equalities between tables become join keys (``FROM a, b WHERE a.x = b.y`` is an equi-join);
* ``A LEFT JOIN B ON keys`` is ``dd_join(A, B)`` plus the rows of ``A`` whose key ``B`` does
  not hold, ``dd_antijoin(A, distinct(keys of B))``, padded with NULLs (``RIGHT``: mirrored;
  ``FULL``: both).  A condition on ``B`` alone filters ``B`` first; one on ``A`` alone sends
  the rows of ``A`` failing it straight to the padded part.

Keys with a NULL never match, as in SQL, so at every time the result is the SQL join of the
two sides' snapshots.  A recursive CTE may be read on the preserved side of an outer join,
never on its NULL side (that would negate it: the rows it does *not* match).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.names import Scope, internal_ref, reject_unsupported
from spark_differential.sql.rel import Col, Ctx, Flow, Rel, concat, derive, fresh_copy, project, same, where
from spark_differential.sql.tree import _conjuncts, _unparen

exp = lazy("sqlglot.expressions")


def from_clause(flow: Flow, select: exp.Select) -> tuple[Rel, Scope]:
    """The relation of ``FROM ... [JOIN ...] [WHERE ...]`` and the scope of its columns."""
    from_ = select.args.get("from_")
    where_ = select.args.get("where")
    conds = list(_conjuncts(where_.this)) if where_ is not None else []
    for c in conds:
        reject_unsupported(c, "the WHERE clause", loop_names=sorted(flow.active()))
    if from_ is None:
        if select.args.get("joins"):
            raise SqlError(f"{_OP}: JOIN without FROM")
        rel = flow.ctx.always()
        return (_filter(flow, rel, conds, "the WHERE clause") if conds else rel), Scope([], flow.norm, "the query")
    items = [(from_.this, None)] + [(j.this, j) for j in select.args.get("joins") or []]
    rels: list[Rel] = []
    for node, _ in items:
        r = flow.from_item(node)
        if set(r.internals) & {i for x in rels for i in x.internals}:  # the same relation twice (a self-join)
            r = fresh_copy(flow.ctx, r)
        seen = {c.qual for x in rels for c in x.cols if c.qual is not None}
        if r.cols and r.cols[0].qual is not None and r.cols[0].qual in seen:
            raise SqlError(f"{_OP}: two FROM items are called `{node.alias_or_name}`; give one an alias")
        rels.append(r)
    outer = any(j is not None and (j.side or str(j.args.get("kind") or "").upper() in ("SEMI", "ANTI")) for _, j in items)
    if not outer:
        rel = _inner_joins(flow, items, rels, conds)
    else:
        rel = rels[0]
        for (_, j), r in zip(items[1:], rels[1:]):
            rel = _join(flow, rel, r, j)
        if conds:
            rel = _filter(flow, rel, conds, "the WHERE clause")
    return rel, Scope(rel.cols, flow.norm, "the query")


def _scope(flow: Flow, *rels: Rel) -> Scope:
    return Scope([c for r in rels for c in r.cols], flow.norm, "the query")


def _filter(flow: Flow, rel: Rel, conds: list[exp.Expr], what: str) -> Rel:
    scope = _scope(flow, rel)
    text = " AND ".join(f"({scope.text(c)})" for c in conds)
    return where(flow.ctx, rel, text, what=f" (in {what})")


def _conditions(flow: Flow, j: exp.Join | None, left: Rel, right: Rel) -> tuple[list[exp.Expr], Rel, list[Col]]:
    """A join's ON conjuncts (with ``USING``/``NATURAL`` as equalities), its right side (the
    ``USING`` copies hidden) and the columns ``*`` lists first (the ``USING`` columns)."""
    if j is None:
        return [], right, []
    on = j.args.get("on")
    conds = list(_conjuncts(on)) if on is not None else []
    if str(j.args.get("method") or "").upper() == "NATURAL":
        lnames = {flow.norm(c.name) for c in left.visible()}
        using = [c.name for c in right.visible() if flow.norm(c.name) in lnames]
    else:
        using = [u.name for u in j.args.get("using") or []]
    first: list[Col] = []
    hide: set[str] = set()
    lscope = _scope(flow, left)
    for n in using:
        lc = lscope.resolve(exp.column(n))[0]
        rs = [c for c in right.visible() if flow.norm(c.name) == flow.norm(n)]
        if not rs:
            raise SqlError(f"{_OP}: USING ({n}): `{_sql_of(j.this)}` has no column `{n}`")
        conds.append(exp.EQ(this=internal_ref(lc.internal), expression=internal_ref(rs[0].internal)))
        hide.add(rs[0].internal)
        first.append(lc)
    right = replace(right, cols=[replace(c, hidden=True) if c.internal in hide else c for c in right.cols])
    for c in conds:
        reject_unsupported(c, "a join condition", loop_names=sorted(flow.active()))
    return conds, right, first


def _split(scope: Scope, conds: list[exp.Expr], lset: set[str], rset: set[str]) -> tuple[list[tuple[Any, Any]], list[exp.Expr]]:
    """Equalities between an expression of the left columns and one of the right columns
    (as (left, right) pairs), and the other conditions."""
    keys, rest = [], []
    for c in conds:
        c0 = _unparen(c)
        if isinstance(c0, exp.EQ):
            a = {x.internal for x in scope.cols_of(c0.this)}
            b = {x.internal for x in scope.cols_of(c0.expression)}
            if a and b and a <= lset and b <= rset:
                keys.append((c0.this, c0.expression))
                continue
            if a and b and a <= rset and b <= lset:
                keys.append((c0.expression, c0.this))
                continue
        rest.append(c)
    return keys, rest


def _reads(scope: Scope, e: exp.Expr) -> set[str]:
    return {x.internal for x in scope.cols_of(e)}


def _inner_joins(flow: Flow, items: list[Any], rels: list[Rel], conds: list[exp.Expr]) -> Rel:
    """Inner joins and WHERE together: single-table conditions first, equalities as keys."""
    pending: list[exp.Expr] = list(conds)
    first: list[Col] = []
    for i in range(1, len(rels)):
        on, rels[i], using_first = _conditions(flow, items[i][1], Rel([c for x in rels[:i] for c in x.cols]), rels[i])
        pending.extend(on)
        first += using_first
    scope = _scope(flow, *rels)
    owner = {i_: k for k, r in enumerate(rels) for i_ in r.internals}
    later: list[exp.Expr] = []
    for c in pending:  # conditions on one table: applied to it before it is joined
        owners = {owner[i] for i in _reads(scope, c)}
        if len(owners) <= 1:
            k = owners.pop() if owners else 0
            rels[k] = _filter(flow, rels[k], [c], "the WHERE clause")
        else:
            later.append(c)
    rel = rels[0]
    for r in rels[1:]:
        lset, rset = set(rel.internals), set(r.internals)
        joined = _scope(flow, rel, r)
        usable = [c for c in later if _reads(joined, c) <= lset | rset]
        keys, rest = _split(joined, usable, lset, rset)
        rel = _equi_join(flow, rel, r, keys, joined, share=True)
        later = [c for c in later if all(c is not u for u in usable)]
        if rest:
            rel = _filter(flow, rel, rest, "a join condition")
    return _using_first(rel, first)


def _using_first(rel: Rel, first: list[Col]) -> Rel:
    if not first:
        return rel
    ids = {id(c) for c in first}
    names = {(c.qual, c.name) for c in first}
    kept = [c for c in rel.cols if (c.qual, c.name) in names]
    return replace(rel, cols=[*kept, *[c for c in rel.cols if (c.qual, c.name) not in names and id(c) not in ids]])


def _keyed(flow: Flow, rel: Rel, exprs: list[Any], scope: Scope, names: list[str], share: bool) -> Rel:
    """``rel`` with its key columns ``names``: with ``share``, a key that is one of its
    columns is that column renamed (both sides' columns then answer to the one key column,
    right for an inner join); otherwise each key is a new hidden column."""
    renamed: dict[str, str] = {}
    extra: list[tuple[str, Col]] = []
    for e, n in zip(exprs, names):
        e0 = _unparen(e)
        if share and isinstance(e0, exp.Column):
            c, fields = scope.resolve(e0)
            if not fields and c.internal in rel.internals and c.internal not in renamed:
                renamed[c.internal] = n
                continue
        extra.append((scope.text(e), Col("", n, hidden=True)))
    cols = [replace(c, internal=renamed.get(c.internal, c.internal)) for c in rel.cols]
    items = [(old, Col("", renamed.get(old, old))) for old in rel.internals] + extra
    out = project(flow.ctx, rel, items)
    return replace(out, cols=[*cols, *[c for _, c in extra]])


def _equi_join(flow: Flow, left: Rel, right: Rel, keys: list[tuple[Any, Any]], scope: Scope, share: bool) -> Rel:
    """``dd_join`` on the key pairs (none: one constant key, a cross join)."""
    ctx = flow.ctx
    if not keys:
        k = ctx.fresh("cross join")
        lk = project(ctx, left, [*[(i, Col("", i)) for i in left.internals], ("0", Col("", k))])
        rk = project(ctx, right, [*[(i, Col("", i)) for i in right.internals], ("0", Col("", k))])
        hidden = Col("", k, hidden=True)
        return _joined(ctx, replace(lk, cols=[*left.cols, hidden]), replace(rk, cols=[*right.cols, hidden]), [k])
    names = [ctx.fresh("join key") for _ in keys]
    lk = _keyed(flow, left, [a for a, _ in keys], scope, names, share)
    rk = _keyed(flow, right, [b for _, b in keys], scope, names, share)
    return _joined(ctx, lk, rk, names)


def _joined(ctx: Ctx, left: Rel, right: Rel, on: list[str], *, right_first: bool = False) -> Rel:
    loops = [r for r in (left, right) if r.loop]
    linear = len(loops) == 1 and loops[0].linear
    cols = [*right.cols, *left.cols] if right_first else [*left.cols, *right.cols]
    # an inner join is empty when either side is
    return derive(ctx, [left, right], cols, lambda a, b: a.dd_join(b, on=on), linear=linear,
                  strict=any(r.strict for r in (left, right)), consolidated=True,
                  dry=lambda a, b: a.drop(TIME, DIFF).join(b, on=on))


def _join(flow: Flow, left: Rel, right: Rel, j: exp.Join) -> Rel:
    """One join of a FROM clause that has outer joins (its inner joins too, in order)."""
    side = str(j.side or "").upper()
    kind = str(j.args.get("kind") or "").upper()
    if kind in ("SEMI", "ANTI"):
        raise SqlError(f"{_OP}: {kind} JOIN is not supported in a recursive query; use an inner JOIN")
    on, right, first = _conditions(flow, j, left, right)
    scope = _scope(flow, left, right)
    lset, rset = set(left.internals), set(right.internals)
    keys, rest = _split(scope, on, lset, rset)
    if not side:
        rel = _equi_join(flow, left, right, keys, scope, share=True)
        if rest:
            rel = _filter(flow, rel, rest, "a join condition")
    else:
        rel = _outer(flow, left, right, side, keys, rest, scope, j)
    return _using_first(rel, first)


def _outer(flow: Flow, left: Rel, right: Rel, side: str, keys: list[tuple[Any, Any]], rest: list[exp.Expr],
           scope: Scope, j: exp.Join) -> Rel:
    """LEFT / RIGHT / FULL [OUTER] JOIN on key equalities (plus conditions on one side)."""
    ctx = flow.ctx
    for r in {"LEFT": [right], "RIGHT": [left], "FULL": [left, right]}[side]:
        if r.loop:
            raise SqlError(
                f"{_OP}: the recursive CTE is read on the NULL side of a {side} JOIN (`{_sql_of(j.this)}`): its "
                "unmatched rows would depend on what the recursive CTE does *not* contain (a negation, which has "
                "no fixed point in general). Read it on the preserved side, or with an inner JOIN"
            )
    lset, rset = set(left.internals), set(right.internals)
    lonly = [c for c in rest if _reads(scope, c) <= lset]
    ronly = [c for c in rest if _reads(scope, c) <= rset and all(c is not x for x in lonly)]
    other = [c for c in rest if all(c is not x for x in [*lonly, *ronly])]
    if other or (side == "FULL" and rest):
        raise SqlError(
            f"{_OP}: {side} JOIN ON `{_sql_of((other or rest)[0])}`: in a recursive query an outer join's ON may "
            "only hold key equalities between the two sides"
            + (" and conditions on one side" if side != "FULL" else "") + "; move other conditions into a subquery"
        )
    if not keys:
        raise SqlError(f"{_OP}: {side} JOIN needs at least one equality between the two sides in a recursive query")
    names = [ctx.fresh("join key") for _ in keys]
    lk = _keyed(flow, left, [a for a, _ in keys], scope, names, share=False)
    rk = _keyed(flow, right, [b for _, b in keys], scope, names, share=False)
    if side == "RIGHT":
        p, n, p_only, n_only = rk, lk, ronly, lonly
    else:
        p, n, p_only, n_only = lk, rk, lonly, ronly
    if n_only:  # a condition on the NULL side alone filters it first
        n = _filter(flow, n, n_only, "a join condition")
    failing = None
    if p_only:
        cond = " AND ".join(f"({_scope(flow, p).text(c)})" for c in p_only)
        failing = where(ctx, p, f"NOT coalesce(({cond}), false)")
        p = where(ctx, p, cond)
    n_keys = project(ctx, n, [(k, Col("", k)) for k in names])
    p_keys = project(ctx, p, [(k, Col("", k)) for k in names])
    p_cols = [c for c in p.cols if c.internal not in names]
    n_cols = [c for c in n.cols if c.internal not in names]
    keycols = [c for c in p.cols if c.internal in names]
    n_plain = replace(n, cols=n_cols)
    matched = _joined(ctx, p, n_plain, names, right_first=side == "RIGHT")
    order = matched.cols

    def padded(rel: Rel, other: Rel) -> Rel:
        types = _types(other)
        have = set(rel.internals)
        items = [(c.internal if c.internal in have else f"CAST(NULL AS {types[c.internal].simpleString()})", c)
                 for c in order]
        return project(ctx, rel, items)

    unmatched = derive(ctx, [p, n_keys], [*p_cols, *keycols], lambda a, b: a.dd_antijoin(b.dd_distinct(), on=names), dry=same)
    parts = [matched, padded(unmatched, n)]
    if failing is not None:
        parts.append(padded(failing, n))
    if side == "FULL":
        n_un = derive(ctx, [n, p_keys], n.cols, lambda a, b: a.dd_antijoin(b.dd_distinct(), on=names))
        parts.append(padded(n_un, p))
    return concat(ctx, parts)


def _types(rel: Rel) -> dict[str, T.DataType]:
    """The types of a relation's columns outside the loop (the NULL side never reads it)."""
    assert rel.df is not None
    return {f.name: f.dataType for f in rel.df.schema.fields}
