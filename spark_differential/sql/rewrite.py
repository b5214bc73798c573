"""Rewriting an ``sd.sql`` query for ``spark.sql``: keyword tables and as-of joins.

No data of its own: :class:`_Compiler` rewrites one query's syntax tree so that Spark SQL can
run it.  Tables named like keyword DataFrames become placeholders for them; each
``o ASOF JOIN p`` is computed by :mod:`spark_differential.sql.asof` and replaced by one
relation (the rest of the query is generated back as Spark SQL, see
:mod:`spark_differential.sql.compile`).  The DataFrames travel as ``spark.sql`` arguments.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.asof import _asof_frame, _AsofClauses, _rel_alias, _Side
from spark_differential.sql.asof_correlated import hoist_correlated
from spark_differential.sql.columns import _rewrite_columns
from spark_differential.sql.dialect import _OP, _is_asof, _sql_of
from spark_differential.sql.runner import _first_line, _spark_sql, _user_names
from spark_differential.sql.tree import _visible_ctes

exp = lazy("sqlglot.expressions")

_log = logging.getLogger("spark_differential.sql")

# the clauses of a SELECT that :meth:`_Compiler.run_simple` runs without spark.sql
_SIMPLE_ARGS = ("expressions", "from_", "where")


class _Compiler:
    """Rewrites one query's syntax tree; DataFrames travel as ``{placeholder}`` arguments."""

    def __init__(self, spark: Any, views: Mapping[str, DataFrame]) -> None:
        self.spark = spark
        try:
            self.case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
        except Exception:  # pragma: no cover - defensive
            self.case_sensitive = False
        self.views = {self.norm(k): v for k, v in views.items()}
        self.bindings: dict[str, DataFrame] = {}
        self.names: dict[str, str] = {}  # internal name in the rewritten query -> the user's name
        self._prefix = "sdv" + uuid.uuid4().hex[:12]
        self._counter = itertools.count()
        self.clauses = _AsofClauses(self.norm)

    def norm(self, name: str) -> str:
        return name if self.case_sensitive else name.lower()

    def token(self, df: DataFrame, label: str) -> str:
        """A placeholder for ``df`` in the query text; ``label`` is what error messages call it."""
        tok = f"{self._prefix}_{next(self._counter):06d}"  # fixed width: no token is a prefix of another
        self.bindings[tok] = df
        self.names[tok] = label
        return tok

    # ----------------------------------------------------------------- driving

    def compile_top(self, tree: exp.Query) -> DataFrame:
        self.bind_views(tree)
        return self.compile(tree)

    def compile(self, tree: exp.Expr, what: str = "") -> DataFrame:
        while True:
            pending = [j for j in tree.find_all(exp.Join, bfs=False) if _is_asof(j)]
            if not pending:
                break
            # the last in pre-order has no ASOF JOIN below it; within one FROM clause,
            # chained as-of joins (a ASOF JOIN b ... ASOF JOIN c ...) go left to right
            last = pending[-1]
            siblings = last.parent.args.get("joins") if last.parent is not None else None
            self.replace(next((j for j in siblings or [] if _is_asof(j)), last))
        return self.run(tree, what)

    def run(self, tree: exp.Expr, what: str = "") -> DataFrame:
        simple = self.run_simple(tree, what)
        if simple is not None:
            return simple
        used = {t.name for t in tree.find_all(exp.Table)} & set(self.bindings)
        text = _sql_of(tree)
        if used:
            # spark.sql(text, **dfs) formats `text` like str.format: escape the braces
            # the query itself holds, then mark our placeholders (unique identifiers
            # put there through the syntax tree).
            text = text.replace("{", "{{").replace("}", "}}")
            for tok in used:
                text = text.replace(tok, "{" + tok + "}")
        return _spark_sql(self.spark, text, {t: self.bindings[t] for t in used}, rewritten=True, what=what,
                          names=self.names)

    def run_simple(self, tree: exp.Expr, what: str) -> DataFrame | None:
        """``SELECT <expressions> FROM <one of our DataFrames> [alias] [WHERE ...]`` and nothing
        else (no other table, subquery, join, grouping, ordering, limit, hint, ...) as that
        DataFrame's own ``alias``, ``where`` and ``selectExpr`` (the same parser and analyser
        over the same expressions); ``None`` for any other query.  ``spark.sql`` with a
        DataFrame argument registers and drops a temporary view on a classic session: about
        half the JVM time of planning a small ``sd.sql`` as-of join."""
        if not isinstance(tree, exp.Select) or any(v for k, v in tree.args.items() if k not in _SIMPLE_ARGS):
            return None
        from_ = tree.args.get("from_")
        table = from_.this if from_ is not None else None
        if (not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier)
                or table.args.get("db") or table.args.get("catalog") or table.name not in self.bindings):
            return None
        alias = table.args.get("alias")
        if (alias is not None and alias.columns) or any(tree.find_all(exp.Subquery, exp.Lateral, exp.Join)):
            return None
        if sum(1 for _ in tree.find_all(exp.Table)) != 1 or sum(1 for _ in tree.find_all(exp.Query)) != 1:
            return None
        from pyspark.errors import AnalysisException, ParseException

        try:
            df = self.bindings[table.name].alias(table.alias_or_name)
            where = tree.args.get("where")
            if where is not None:
                df = df.where(_sql_of(where.this))
            df = df.selectExpr(*[_sql_of(e) for e in tree.expressions])
            df.schema  # noqa: B018 - Spark Connect analyses lazily: surface errors here, still before any job
            return df
        except ParseException as e:
            _log.debug("sd.sql: the rewritten query Spark could not parse: %s", _sql_of(tree))
            raise SqlError(f"{_OP}: Spark could not parse the query{what}: {_user_names(_first_line(e), self.names)}") from e
        except AnalysisException as e:
            _log.debug("sd.sql: the rewritten query Spark rejected: %s", _sql_of(tree))
            raise SqlError(f"{_OP}: Spark rejected the query{what}: {_user_names(_first_line(e), self.names)}") from e

    def bind_views(self, tree: exp.Expr) -> None:
        """Point every table named like a keyword DataFrame (and not a CTE) at it."""
        if not self.views:
            return
        tokens: dict[str, str] = {}
        for table in list(tree.find_all(exp.Table)):
            if table.args.get("db") or table.args.get("catalog") or not isinstance(table.this, exp.Identifier):
                continue
            key = self.norm(table.name)
            if key not in self.views or key in {self.norm(c.alias) for c in _visible_ctes(table)}:
                continue
            if key not in tokens:
                tokens[key] = self.token(self.views[key], table.name)
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(tokens[key]))

    # ----------------------------------------------------------------- one join

    def replace(self, join: exp.Join) -> None:
        select = join.parent
        if not isinstance(select, exp.Select) or join.arg_key != "joins":
            raise SqlError(f"{_OP}: ASOF JOIN is only supported in the FROM clause of a SELECT")
        joins = select.args["joins"]
        if joins[0] is not join:
            raise SqlError(
                f"{_OP}: ASOF JOIN must directly follow the first table of its FROM clause "
                f"(`{_sql_of(join.this)}` comes after another join); put the other joins after the "
                "ASOF JOIN, or move the earlier joins into a subquery or CTE"
            )
        from_ = select.args.get("from_")
        if from_ is None:
            raise SqlError(f"{_OP}: ASOF JOIN without a FROM table")
        left_rel, right_rel = from_.this, join.this
        la, ra = _rel_alias(left_rel, "left"), _rel_alias(right_rel, "right")
        if self.norm(la) == self.norm(ra):
            raise SqlError(f"{_OP}: both sides of the ASOF JOIN are called `{la}`; give one an alias")
        hoisted = hoist_correlated(join, left_rel, right_rel, la)  # a left side on an outer query
        left = self.side(left_rel, la, "left")
        right = self.side(right_rel, ra, "right")
        spec = self.clauses.analyse(join, left, right)
        r_names = self.clauses.right_names(left, right)
        _rewrite_columns(self.norm, select, join, left, right, r_names, spec)  # validates before any plan is built
        view_df = _asof_frame(left, right, spec, r_names)
        for n, v in r_names.items():
            if v != n:  # a right column renamed apart from a left one: messages say `p`.`ts`
                self.names[v] = f"{ra}.{n}"
        token = self.token(view_df, f"{la} ASOF JOIN {ra}")
        from_.set("this", exp.Table(this=exp.to_identifier(token), alias=exp.TableAlias(this=exp.to_identifier(la))))
        join.pop()
        for cond in hoisted:
            select.where(cond, copy=False)

    def side(self, rel: exp.Expr, alias: str, which: str) -> _Side:
        if isinstance(rel, exp.Table) and rel.name in self.bindings and not rel.args.get("db"):
            df = self.bindings[rel.name]
            if rel.alias and rel.args["alias"].columns:
                df = self.relation_df(rel, which)
        else:
            df = self.relation_df(rel, which)
        fields = list(df.schema.fields)
        s = _Side(alias, df, fields)
        for f in fields:
            k = self.norm(f.name)
            if k in s.by_name:
                raise SqlError(
                    f"{_OP}: the {which} side of the ASOF JOIN (`{alias}`) has two columns named "
                    f"`{f.name}`; alias them apart in a subquery"
                )
            s.by_name[k] = f.name
            s.by_type[f.name] = f.dataType
        return s

    def relation_df(self, rel: exp.Expr, which: str) -> DataFrame:
        """``WITH <visible CTEs> SELECT * FROM <rel>`` as a DataFrame (its ASOF JOINs compiled too)."""
        q = exp.select("*").from_(rel.copy(), copy=False)
        ctes = _visible_ctes(rel)
        if ctes:
            q.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
        try:
            return self.compile(q, what=f" (reading the {which} side of an ASOF JOIN, `{_sql_of(rel)}`)")
        except SqlError as e:
            cause = e.__cause__
            cond = getattr(cause, "getCondition", lambda: None)() if cause is not None else None
            if cond == "TABLE_OR_VIEW_NOT_FOUND":
                bare = rel.copy()
                bare.set("alias", None)
                raise SqlError(
                    f"{_OP}: unknown table `{_sql_of(bare)}` on the {which} side of the ASOF JOIN: it is not a "
                    f"keyword DataFrame ({sorted(self.views) or 'none given'}), a CTE of the query or a "
                    f"table or view in the Spark catalog"
                ) from cause
            raise

