"""A side of ``sd.sql``'s as-of join that refers to an outer query (a correlated subquery).

No data here, and nothing changes on ``(data, time, diff)``: the as-of join of a left
table restricted by a condition on the outer query's row equals the as-of join of the
whole left table restricted afterwards, for every join that keeps left rows by their own
picks (inner, left, semi, anti: a left row's pick does not depend on the other left
rows).  So ``(SELECT * FROM events x WHERE x.value = outer.value) e ASOF JOIN ...``
becomes ``events e ASOF JOIN ... WHERE e.value = outer.value`` in the query around it,
where Spark handles the correlation as for any subquery.  A right side's correlation
changes which rows are candidates, and right/full joins keep right rows by what every
left row picks: those are refused, with the rewriting that works.
"""

from __future__ import annotations

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.tree import _conjuncts

exp = lazy("sqlglot.expressions")
_scope = lazy("sqlglot.optimizer.scope")


def _external(rel: exp.Expr) -> tuple[exp.Select | None, list[exp.Column], set[str]]:
    """The subquery's SELECT, its columns that refer to an outer query, and its own sources."""
    if not isinstance(rel, exp.Subquery) or not isinstance(rel.this, exp.Select):
        return None, [], set()
    scope = _scope.build_scope(rel.this.copy())
    if scope is None:  # pragma: no cover - sqlglot always builds a scope for a SELECT
        return None, [], set()
    sources = {s.lower() for s in scope.sources}
    # qualified by a name the subquery does not define (an unqualified column is its own)
    outer = [c for c in scope.external_columns if isinstance(c, exp.Column) and c.table
             and c.table.lower() not in sources]
    return rel.this, outer, sources


def hoist_correlated(join: exp.Join, left_rel: exp.Expr, right_rel: exp.Expr, la: str) -> list[exp.Expr]:
    """Take the conditions on an outer query out of the left side's WHERE (see the module
    docstring), rewritten over the side's columns (``la.<column>``), for the WHERE around
    the as-of join.  Raises :class:`SqlError` for the correlations that cannot move."""
    _, outer_r, _ = _external(right_rel)
    if outer_r:
        raise SqlError(
            f"{_OP}: the right side of the ASOF JOIN (`{_sql_of(right_rel)}`) refers to the outer query "
            f"(`{_sql_of(outer_r[0])}`): a correlated right side is not supported; join the outer table inside the "
            "subquery, or move the as-of join out of the correlated subquery")
    select, outer_l, sources = _external(left_rel)
    if not outer_l or select is None:
        return []
    side = str(join.args.get("side") or "").upper()
    if side in ("RIGHT", "FULL"):
        raise SqlError(
            f"{_OP}: the left side of a {side} ASOF JOIN refers to the outer query (`{_sql_of(outer_l[0])}`): only "
            "inner, left, semi and anti as-of joins can have a correlated left side")
    names = {c.sql() for c in outer_l}
    where = select.args.get("where")
    conds = list(_conjuncts(where.this)) if where is not None else []
    moved = [c for c in conds if any(col.sql() in names for col in c.find_all(exp.Column))]
    kept = [c for c in conds if c not in moved]
    if sum(1 for col in select.find_all(exp.Column) if col.sql() in names) != sum(
            1 for c in moved for col in c.find_all(exp.Column) if col.sql() in names):
        raise SqlError(
            f"{_OP}: the left side of the ASOF JOIN refers to the outer query outside its WHERE clause "
            f"(`{_sql_of(outer_l[0])}`); only conditions of its WHERE can refer to the outer query")
    out = [_over_output(c.copy(), select, names, sources, la) for c in moved]
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return out


def _over_output(cond: exp.Expr, select: exp.Select, outer: set[str], sources: set[str], la: str) -> exp.Expr:
    """``cond`` with the subquery's own columns as the side's output columns ``la.<name>``."""
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
               for e in select.expressions)
    for col in list(cond.find_all(exp.Column)):
        if col.sql() in outer or (col.table and col.table.lower() not in sources):
            continue
        name = None
        for e in select.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            if isinstance(inner, exp.Column) and inner.name.lower() == col.name.lower():
                name = e.alias_or_name
        if name is None and star:
            name = col.name
        if name is None:
            raise SqlError(
                f"{_OP}: the condition `{_sql_of(cond)}` on the outer query uses `{_sql_of(col)}`, which the left "
                "side of the ASOF JOIN does not select; select it too")
        col.replace(exp.column(exp.to_identifier(name), table=exp.to_identifier(la)))
    return cond
