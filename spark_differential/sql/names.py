"""Column names in ``sd.sql``'s recursive queries: resolving SQL references to internal columns.

No data here.  A :class:`Scope` is the list of columns a clause can see (the ``FROM`` items'
columns, each under its table alias).  :meth:`Scope.text` turns one SQL expression into
Spark SQL text over the internal column names of the relation's collection (see
:mod:`spark_differential.sql.rel`), which Spark then evaluates row by row on the updates:
on ``(data, time, diff)`` a per-row expression maps every update on its own (a linear
step), so it means the same on a collection as on each of its snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.rel import Col

exp = lazy("sqlglot.expressions")

# the aggregate functions a recursive query may use (others: SqlError)
AGGREGATES = ("Count", "Sum", "Min", "Max", "Avg")


def is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc)


def output_name(e: exp.Expr) -> str:
    """The name SQL gives a ``SELECT`` item: its alias, its column's name, else its text."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
        return e.name
    if isinstance(e, exp.Dot):
        return e.name
    return _sql_of(e)


def reject_unsupported(e: exp.Expr, what: str, *, aggregates: bool = False, loop_names: Sequence[str] = ()) -> None:
    """Refuse what a row-by-row expression of a recursive query cannot hold: subqueries
    (and the recursive CTE inside one: its own message), window functions, aggregates
    outside an aggregation."""
    for node in e.walk():
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query")):
            inner = [t.name for t in node.find_all(exp.Table)]
            hit = [n for n in inner if n.lower() in {x.lower() for x in loop_names}]
            if hit:
                raise SqlError(
                    f"{_OP}: the recursive reference to `{hit[0]}` is inside a subquery in {what} (`{_sql_of(node)}`); "
                    "a recursive CTE may only be read in the FROM clause of its recursive term (joined, not "
                    "negated or nested in IN/EXISTS/scalar subqueries): write the condition as a JOIN"
                )
            raise SqlError(
                f"{_OP}: subqueries in expressions (`{_sql_of(node)}` in {what}) are not supported in the parts of a "
                "recursive query sd.sql compiles itself (the recursive terms; over collections, the whole query): "
                "write them as JOINs, or compute them in a CTE"
            )
        if isinstance(node, exp.Window):
            raise SqlError(f"{_OP}: window functions (`{_sql_of(node)}` in {what}) are not supported in a recursive query")
        if isinstance(node, exp.AggFunc) and not aggregates:
            raise SqlError(f"{_OP}: aggregate `{_sql_of(node)}` is not allowed in {what}")


class Scope:
    """The columns a clause sees, for resolving ``x``, ``t.x`` and ``t.x.field`` references."""

    def __init__(self, cols: Sequence[Col], norm: Callable[[str], str], what: str) -> None:
        self.cols = list(cols)
        self.norm = norm
        self.what = what

    def quals(self) -> set[str]:
        return {c.qual for c in self.cols if c.qual is not None}

    def _named(self, name: str, qual: str | None = None) -> list[Col]:
        k = self.norm(name)
        if qual is None:
            return [c for c in self.cols if not c.hidden and self.norm(c.name) == k]
        return [c for c in self.cols if c.qual == qual and self.norm(c.name) == k]

    def resolve(self, column: exp.Column) -> tuple[Col, list[str]]:
        """The column a reference names, and the struct fields it then reads."""
        parts = [p.name for p in column.parts]
        if len(parts) == 1 and column.this.meta.get("sq_internal"):  # made by internal_ref
            return next(c for c in self.cols if c.internal == parts[0]), []
        quals = self.quals()
        at = 0 if len(parts) >= 2 and self.norm(parts[0]) in quals else 1 if len(parts) >= 3 and self.norm(parts[1]) in quals else -1
        if at >= 0:  # t.x[.field...] or db.t.x[.field...]
            q = self.norm(parts[at])
            found = self._named(parts[at + 1], q)
            if not found:
                cols = [c.name for c in self.cols if c.qual == q]
                raise SqlError(f"{_OP}: `{_sql_of(column)}`: `{parts[at]}` has no column `{parts[at + 1]}` (columns: {cols})")
            return found[0], parts[at + 2 :]
        found = self._named(parts[0])
        if len(found) > 1:
            tables = sorted({c.qual or "?" for c in found})
            raise SqlError(f"{_OP}: column `{parts[0]}` in {self.what} is ambiguous (it is in {tables}); qualify it")
        if not found:
            seen = sorted({c.name for c in self.cols if not c.hidden})
            raise SqlError(f"{_OP}: unknown column `{_sql_of(column)}` in {self.what} (columns: {seen})")
        return found[0], parts[1:]

    def cols_of(self, e: exp.Expr) -> list[Col]:
        """The columns an expression reads (lambda variables left out)."""
        out = []
        for col in e.find_all(exp.Column):
            if isinstance(col.this, exp.Star) or _lambda_var(col):
                continue
            out.append(self.resolve(col)[0])
        return out

    def rewrite(self, e: exp.Expr) -> exp.Expr:
        """A copy of ``e`` with every column reference replaced by its internal column."""
        e = e.copy()
        for col in list(e.find_all(exp.Column)):
            if isinstance(col.this, exp.Star) or _lambda_var(col):
                continue
            c, fields = self.resolve(col)
            new: exp.Expr = exp.column(c.internal)
            if fields:
                new = exp.Dot.build([new, *(exp.to_identifier(f) for f in fields)])
            if col is e:
                return new
            col.replace(new)
        return e

    def text(self, e: exp.Expr) -> str:
        """``e`` as Spark SQL over the internal column names."""
        return _sql_of(self.rewrite(e))


def internal_ref(internal: str) -> exp.Column:
    """A column reference to the internal column ``internal`` (resolved without its SQL name)."""
    ident = exp.to_identifier(internal)
    ident.meta["sq_internal"] = True
    return exp.Column(this=ident)


def _lambda_var(col: exp.Column) -> bool:
    """A column that is a variable of an enclosing lambda (``x -> x + 1``)."""
    if len(col.parts) != 1:
        return False
    p = col.parent
    while p is not None:
        if isinstance(p, exp.Lambda) and col.name in {i.name for i in p.expressions}:
            return True
        p = p.parent
    return False
