"""SQL queries compiled to differential operators: the relational core of recursive ``sd.sql``.

On ``(data, time, diff)``: every query node becomes a collection (:class:`~spark_differential.sql.rel.Rel`)
whose snapshot at every time is the node's SQL result on the inputs' snapshots at that time:

* ``SELECT`` lists, ``WHERE``/``ON`` conditions and every expression are evaluated row by row
  on the updates (linear: the same on a collection as on each snapshot);
* joins are ``dd_join`` (outer joins add the ``dd_antijoin`` of the preserved side; see
  :mod:`spark_differential.sql.joins`); ``GROUP BY`` and aggregates are the ``dd_*``
  reductions (:mod:`spark_differential.sql.aggregate`);
* ``DISTINCT`` and ``UNION`` are ``dd_distinct``; ``UNION ALL`` is ``dd_concat``; ``EXCEPT``
  and ``INTERSECT`` [``ALL``] are ``dd_threshold`` of signed sums;
* constant rows (``VALUES``, ``SELECT`` without ``FROM``) are present from the first time any
  input has an update (:meth:`~spark_differential.sql.rel.Ctx.always`);
* a ``WITH RECURSIVE`` (or ``WITH MUTUALLY RECURSIVE``) CTE is one ``dd_iterate``
  (:mod:`spark_differential.sql.fixpoint`).

:class:`Dataflow` walks the syntax tree.  Tables are the keyword collections and the query's
CTEs.  On plain tables (no ``time``/``diff``) only the recursive CTEs are compiled here: every
part of them that does not read the recursion (a ``FROM`` item, a whole non-recursive term) is
run by Spark SQL through ``leaf`` and enters as a collection at time 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql import aggregate, fixpoint, joins, setops
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.names import Scope, output_name, reject_unsupported
from spark_differential.sql.rel import Col, Ctx, DryEnv, Rel, distinct, relabeled

exp = lazy("sqlglot.expressions")

# clauses of a SELECT this compiler cannot give a meaning on collections
_UNSUPPORTED = {
    "laterals": "LATERAL VIEW", "windows": "WINDOW", "qualify": "QUALIFY", "distribute": "DISTRIBUTE BY",
    "cluster": "CLUSTER BY", "sort": "SORT BY", "into": "INTO", "kind": "SELECT AS STRUCT", "connect": "CONNECT BY",
}


@dataclass
class CteEntry:
    """One CTE in scope: its definition, its relation once compiled, and, while its
    recursive CTE group is being compiled into a loop, the reference to the loop variable."""

    cte: exp.CTE
    depth: int  # the index of its frame in Dataflow.frames
    group: Any = None  # fixpoint.Group when it is recursive
    rel: Rel | None = None
    ref: Rel | None = None
    busy: bool = False


class Dataflow:
    """Compiles query nodes to :class:`Rel` s (see the module docstring)."""

    def __init__(
        self,
        ctx: Ctx,
        views: dict[str, DataFrame],
        leaf: Callable[[exp.Expr], DataFrame] | None = None,
    ) -> None:
        self.ctx = ctx
        self.views = views  # normalized name -> keyword collection
        self.leaf = leaf  # plain tables: a node that does not read a loop variable, run by Spark SQL
        self.frames: list[dict[str, CteEntry]] = []
        self.dry_env: DryEnv = DryEnv()  # empty stand-ins of the loop variables (for types)
        self._view_rels: dict[str, Rel] = {}

    @property
    def norm(self) -> Callable[[str], str]:
        return self.ctx.norm

    # ----------------------------------------------------------------- scopes

    def lookup(self, name: str) -> CteEntry | None:
        key = self.norm(name)
        for frame in reversed(self.frames):
            if key in frame:
                return frame[key]
        return None

    def active(self) -> set[str]:
        """Names of the CTEs whose loop is being compiled (their references are loop variables)."""
        out = set()
        for frame in self.frames:
            out |= {k for k, e in frame.items() if e.ref is not None}
        return out

    def reads_loop(self, node: exp.Expr, seen: set[int] | None = None) -> bool:
        """Does ``node`` read a CTE whose loop is being compiled (directly, or through the
        definitions of the CTEs it reads)?"""
        if not self.active():
            return False
        seen = set() if seen is None else seen
        for t in node.find_all(exp.Table):
            if t.args.get("db") or _defined_inside(t, node, self.norm):
                continue
            e = self.lookup(t.name)
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            if e.ref is not None or (e.rel is None and self.reads_loop(e.cte.this, seen)) or (
                e.rel is not None and bool(e.rel.loop)
            ):
                return True
        return False

    def with_clause(self, with_: exp.With) -> list[Any]:
        frame: dict[str, CteEntry] = {}
        for cte in with_.expressions:
            key = self.norm(cte.alias)
            if key in frame:
                raise SqlError(f"{_OP}: the WITH clause defines `{cte.alias}` twice")
            frame[key] = CteEntry(cte, len(self.frames))
        self.frames.append(frame)
        return fixpoint.declare(self, with_, frame)

    def cte_rel(self, entry: CteEntry) -> Rel:
        """The relation of a CTE (compiled on first use, in the scope of its definition)."""
        if entry.ref is not None:
            return entry.ref
        if entry.rel is None:
            if entry.group is not None:
                fixpoint.solve(self, entry.group)
            else:
                if entry.busy:  # pragma: no cover - declare() orders non-recursive CTEs
                    raise SqlError(f"{_OP}: CTE `{entry.cte.alias}` refers to itself; write WITH RECURSIVE")
                entry.busy = True
                saved = self.frames
                self.frames = self.frames[: entry.depth + 1]
                try:
                    rel = self.query(entry.cte.this)
                    names = [c.name for c in entry.cte.args["alias"].columns] if entry.cte.args["alias"].columns else None
                    entry.rel = rel.qualified(None, names)
                finally:
                    self.frames = saved
                    entry.busy = False
        assert entry.rel is not None
        return entry.rel

    # ----------------------------------------------------------------- queries

    def query(self, node: exp.Expr) -> Rel:
        """The relation of a query node (``SELECT``, set operation, ``VALUES``, parenthesised)."""
        if self.leaf is not None and not self.reads_loop(node):
            return self.from_leaf(node)
        pushed = False
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With):
            self.with_clause(with_)
            pushed = True
        try:
            for key in ("limit", "offset", "fetch"):
                if node.args.get(key):
                    raise SqlError(
                        f"{_OP}: {key.upper()} is not supported in a recursive query over collections (a collection "
                        "has no order); filter with WHERE instead"
                    )
            if isinstance(node, exp.Subquery):
                return self.query(node.this)
            if isinstance(node, exp.Select):
                return self.select(node)
            if isinstance(node, (exp.Union, exp.Except, exp.Intersect)):
                return setops.setop(self, node)
            if isinstance(node, exp.Values):
                return setops.values(self, node)
            raise SqlError(f"{_OP}: a {node.key.upper()} statement cannot be part of a recursive query")
        finally:
            if pushed:
                self.frames.pop()

    def from_leaf(self, node: exp.Expr) -> Rel:
        """A node that reads no loop variable, run by Spark SQL on plain tables: a collection at time 0."""
        assert self.leaf is not None
        df = self.leaf(node)
        cols = [Col(n, self.ctx.fresh(n)) for n in df.columns]
        out = df.toDF(*[c.internal for c in cols]).select(
            *[c.internal for c in cols], F.lit(0).cast("long").alias(TIME), F.lit(1).cast("long").alias(DIFF)
        )
        return Rel(cols, df=out)

    def select(self, node: exp.Select) -> Rel:
        for key, label in _UNSUPPORTED.items():
            if node.args.get(key):
                raise SqlError(f"{_OP}: {label} is not supported in a recursive query")
        distinct_ = node.args.get("distinct")
        if distinct_ is not None and distinct_.args.get("on"):
            raise SqlError(f"{_OP}: DISTINCT ON is not supported in a recursive query; use GROUP BY")
        window = next((n for e in node.expressions for n in e.find_all(exp.Window)), None)
        if window is not None:
            raise SqlError(f"{_OP}: window functions (`{_sql_of(window)}`) are not supported in a recursive query")
        rel, scope = joins.from_clause(self, node)
        if node.args.get("group") or node.args.get("having") or any(
            isinstance(n, exp.AggFunc) for e in node.expressions for n in e.walk()
        ):
            out = aggregate.group(self, node, rel, scope)
        else:
            out = self.projection(node, rel, scope)
        return distinct(self.ctx, out) if distinct_ is not None else out

    def select_items(self, node: exp.Select, scope: Scope) -> list[tuple[exp.Expr | None, Col]]:
        """The ``SELECT`` list with ``*`` and ``t.*`` expanded: (expression or None for a
        column taken as it is, source column) pairs."""
        items: list[tuple[exp.Expr | None, Col]] = []
        for e in node.expressions:
            if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
                star = e if isinstance(e, exp.Star) else e.this
                if any(star.args.get(k) for k in ("except_", "replace", "rename", "except", "ilike")):
                    raise SqlError(f"{_OP}: `{_sql_of(e)}` is not supported in a recursive query: list the columns")
                if isinstance(e, exp.Column):
                    q = self.norm(e.table)
                    cols = [c for c in scope.cols if c.qual == q]
                    if not cols:
                        raise SqlError(f"{_OP}: `{_sql_of(e)}`: no table `{e.table}` in {scope.what}")
                else:
                    cols = [c for c in scope.cols if not c.hidden]
                items.extend((None, c) for c in cols)
            else:
                items.append((e, Col(output_name(e), "")))
        return items

    def projection(self, node: exp.Select, rel: Rel, scope: Scope) -> Rel:
        out: list[tuple[str, Col]] = []
        for e, c in self.select_items(node, scope):
            if e is None:
                text = c.internal
                name = c.name
            else:
                reject_unsupported(e, "the SELECT list", loop_names=sorted(self.active()))
                inner = e.this if isinstance(e, exp.Alias) else e
                text = scope.text(inner)
                name = c.name
            out.append((text, Col(name, self.ctx.fresh(name))))
        return relabeled(self.ctx, rel, out, what=" (in a SELECT list)")

    # ----------------------------------------------------------------- FROM items

    def from_item(self, node: exp.Expr) -> Rel:
        """One ``FROM`` item (table, CTE, subquery, ``VALUES``) under its alias."""
        if self.leaf is not None and not self.reads_loop(node):
            alias = node.args.get("alias")
            rel = self.from_leaf(_bare(node))
            return rel.qualified(self.norm(node.alias_or_name) if node.alias_or_name else None,
                                 [c.name for c in alias.columns] if alias is not None and alias.columns else None)
        alias = node.args.get("alias")
        names = [c.name for c in alias.columns] if alias is not None and alias.columns else None
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier) or node.args.get("db") or node.args.get("catalog"):
                raise SqlError(f"{_OP}: `{_sql_of(node)}` is not a keyword collection or a CTE of the query")
            rel = self.table(node.name)
            return rel.qualified(self.norm(node.alias_or_name), names)
        if isinstance(node, (exp.Subquery, exp.Values)):
            rel = self.query(node.this if isinstance(node, exp.Subquery) else node)
            if isinstance(node, exp.Values):
                names = None  # the VALUES alias named its columns already
            q = node.alias_or_name
            return rel.qualified(self.norm(q) if q else None, names)
        raise SqlError(f"{_OP}: `{_sql_of(node)}` in FROM is not supported in a recursive query")

    def table(self, name: str) -> Rel:
        entry = self.lookup(name)
        if entry is not None:
            return self.cte_rel(entry)
        key = self.norm(name)
        if key in self.views:
            if key not in self._view_rels:
                df = self.views[key]
                names = [c for c in df.columns if c not in (TIME, DIFF)]
                cols = [Col(n, self.ctx.fresh(n)) for n in names]
                self._view_rels[key] = Rel(cols, df=df.select(*[F.col(f"`{n}`").alias(c.internal) for n, c in zip(names, cols)],
                                                              TIME, DIFF))
            return self._view_rels[key]
        raise SqlError(
            f"{_OP}: unknown table `{name}`: in a recursive query over collections every table is a keyword "
            f"collection ({sorted(self.views) or 'none given'}) or a CTE of the query"
        )


def _defined_inside(table: exp.Table, root: exp.Expr, norm: Callable[[str], str]) -> bool:
    """Is ``table`` a reference to a CTE defined between it and ``root`` (shadowing)?"""
    if table is root:
        return False
    p = table.parent
    while p is not None:
        w = p.args.get("with_") if isinstance(p, exp.Expr) else None
        if isinstance(w, exp.With) and any(norm(c.alias) == norm(table.name) for c in w.expressions):
            return True
        if p is root:
            return False
        p = p.parent
    return False


def _bare(node: exp.Expr) -> exp.Expr:
    out = node.copy()
    if isinstance(out, (exp.Table, exp.Subquery)):
        out.set("alias", None)
    return out
