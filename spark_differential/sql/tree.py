"""Syntax-tree helpers shared by the ``sd.sql`` compilers (sqlglot trees; no data).

They answer questions about where a node sits in a query (the CTEs it can see, the
``SELECT`` that owns a column reference, the conjuncts of a condition) and rewrite
column references in place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of

exp = lazy("sqlglot.expressions")
_errors = lazy("sqlglot.errors")
_scope = lazy("sqlglot.optimizer.scope")


def _unparen(e: exp.Expr) -> exp.Expr:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _conjuncts(e: exp.Expr) -> Iterator[exp.Expr]:
    e = _unparen(e)
    if isinstance(e, exp.And):
        yield from _conjuncts(e.this)
        yield from _conjuncts(e.expression)
    else:
        yield e


def _set_parts(col: exp.Column, parts: Sequence[exp.Identifier]) -> None:
    keys = ["catalog", "db", "table", "this"]
    if len(parts) > 4:  # pragma: no cover - deeper struct access is a Dot around the Column
        raise SqlError(f"{_OP}: column reference `{_sql_of(col)}` is too deeply qualified")
    for key in keys:
        if key != "this":
            col.set(key, None)
    for key, part in zip(keys[4 - len(parts) :], parts):
        col.set(key, part)


def _visible_ctes(node: exp.Expr) -> list[exp.CTE]:
    """The CTEs a node can refer to, outermost first (inner definitions shadow outer ones)."""
    levels: list[list[exp.CTE]] = []
    child: exp.Expr = node
    parent = node.parent
    while parent is not None:
        w = parent.args.get("with_") if isinstance(parent, exp.Expr) else None
        if isinstance(w, exp.With):
            ctes = list(w.expressions)
            if child is w:
                # inside the WITH: a CTE sees the ones before it (all of them when RECURSIVE)
                inner = next((c for c in ctes if c is node or _contains(c, node)), None)
                if inner is not None and not w.args.get("recursive"):
                    ctes = ctes[: ctes.index(inner)]  # WITH RECURSIVE: every CTE of the list (forward references too)
            levels.append(ctes)
        child, parent = parent, parent.parent
    seen: set[str] = set()
    out: list[exp.CTE] = []
    for level in levels:  # innermost first
        for c in reversed(level):
            key = c.alias.lower()
            if key not in seen:
                seen.add(key)
                out.append(c)
    return list(reversed(out))


def _contains(root: exp.Expr, node: exp.Expr) -> bool:
    p: exp.Expr | None = node
    while p is not None:
        if p is root:
            return True
        p = p.parent
    return False


def _scope_columns(select: exp.Select) -> list[exp.Column]:
    """Column references that belong to ``select``'s scope (incl. correlated ones from its subqueries)."""
    try:
        root_scope = _scope.build_scope(select.root())
    except _errors.SqlglotError:  # pragma: no cover - fall back to a walk that stops at nested queries
        root_scope = None
    for scope in root_scope.traverse() if root_scope is not None else []:
        if scope.expression is select:
            return [c for c in scope.columns if isinstance(c, exp.Column)]
    return [c for c in select.find_all(exp.Column) if _owner(c) is select and not isinstance(c.this, exp.Star)]


def _owner(node: exp.Expr) -> exp.Expr | None:
    p = node.parent
    while p is not None and not isinstance(p, exp.Query):
        p = p.parent
    return p
