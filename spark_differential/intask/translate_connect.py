"""Linear steps of a ``dd_iterate`` body read from a Spark Connect client's plan.

On ``(data, time, diff)`` this computes what :mod:`spark_differential.intask.translate`
computes on a classic session: a linear step (``select``/``where``/``withColumn``/
``withColumnRenamed``/``drop``/unions keeping ``time`` and ``diff``) between the
leaves of a recorded body, as one DuckDB query (and, where one exists, an Arrow
program) over tables named after those leaves, with ``time`` passed through as its
encoded leaves ``_sd_t0 …``.

A Connect DataFrame has no analysed plan in this process: its plan is the client's
tree of ``pyspark.sql.connect.plan`` nodes (``Project``, ``Filter``, ``WithColumns``,
``SetOperation``, ``SubqueryAlias``, …) over unresolved expressions
(``ColumnReference``, ``LiteralExpression``, ``UnresolvedFunction``, ``CaseWhen``,
``CastExpression``, ``ColumnAlias``).  :class:`ConnectTranslator` resolves it itself:

* **Leaves** are the recorder's placeholders (empty local relations), known by the
  identity of their plan node, never by column metadata.
* **Names** are resolved as Spark's analyser resolves them (case-insensitively unless
  ``spark.sql.caseSensitive``; ``alias.column`` through a ``SubqueryAlias``; ``df["x"]``
  only against the DataFrame the step reads); an ambiguous name, ``*`` or a nested
  field is refused.
* **Types** are inferred from the leaves' schemas for a small expression language
  whose meaning is the same in Spark (ANSI mode) and DuckDB once every implicit cast is
  written out: integral arithmetic (``+``, ``-``, ``*``, ``%`` by a nonzero literal,
  negation, ``abs``) with Spark's widening as explicit casts, comparisons of integers,
  strings, booleans or dates, Kleene logic, null tests, ``IN``, ``CASE WHEN``,
  ``coalesce``/``least``/``greatest`` and a few exact casts.  SQL text (``F.expr``,
  ``selectExpr``, a string ``where``) is parsed by sqlglot into the same expression
  objects first (:func:`~spark_differential.intask.connect_expressions.from_sql`).  Anything else (division, floating point,
  string<->number conversions, non-ANSI sessions) raises
  :class:`~spark_differential.intask.translate.Untranslatable`.
* The inferred output schema of every translated DataFrame is checked against the
  server's (``df.schema``: one RPC per step): a step whose names or types differ is
  refused, and each computed column is cast to its Spark type in the query.

The Spark SQL text built here goes through the same sqlglot translation as the
classic reader's, and the relations are written by the same
:class:`~spark_differential.intask.relation.RelationWriter`, so both readers produce the
same kind of :class:`~spark_differential.intask.relation.Relation`.  The expressions are
typed and written in :mod:`spark_differential.intask.connect_expressions`; this module
reads the plan and resolves names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core import settings
from spark_differential.core.collection import TIME
from spark_differential.intask.connect_expressions import SQL_TYPES, Ref, from_sql, type_name, typed
from spark_differential.intask.relation import Projection, Relation, Untranslatable, leaves, quote
from spark_differential.intask.translate import Translator

TIME_TYPE = "time"  # the loop's time: passed through, never computed with


def _parts(identifier: str) -> list[str]:
    """A column's unparsed identifier (``a.b``, ```a.b```) as its name parts, as Spark's
    ``UnresolvedAttribute.parseAttributeName`` reads it."""
    parts: list[str] = []
    cur = ""
    i = 0
    quoted = False
    while i < len(identifier):
        c = identifier[i]
        if quoted:
            if c == "`" and identifier[i + 1:i + 2] == "`":
                cur += "`"
                i += 1
            elif c == "`":
                quoted = False
            else:
                cur += c
        elif c == "`":
            quoted = True
        elif c == ".":
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if quoted:
        raise Untranslatable(f"cannot read the column name {identifier!r}")
    parts.append(cur)
    return parts


@dataclass
class _Scope:
    """A translated plan node: its relation and what names resolve against it."""

    rel: Relation
    names: list[str]  # output columns, ``time`` unexpanded
    types: list[str]  # Spark simpleString of each (``time``: :data:`TIME_TYPE`)
    qualifiers: frozenset[str] = frozenset()  # SubqueryAlias names visible here
    plan_ids: frozenset[int] = frozenset()  # plans whose ``df["x"]`` columns resolve here


class ConnectTranslator(Translator):
    """:class:`Translator` for Spark Connect: reads the client's plan (see the module docstring).

    ``spark``: the Connect session (asked for ``spark.sql.caseSensitive`` once);
    ``tables``, ``width``, ``ansi`` as for :class:`Translator`.  A non-ANSI session is
    refused at every step (overflow and casts would mean something else)."""

    def __init__(self, spark: Any, tables: Mapping[str, tuple[str, Sequence[str]]], width: int, ansi: bool = True,
                 case_sensitive: bool | None = None) -> None:
        super().__init__(None, tables, width, ansi=ansi, use_json=False)
        if case_sensitive is None:
            case_sensitive = settings.case_sensitive(spark)
        self.case_sensitive = case_sensitive
        self.leaf_plans: dict[int, tuple[Any, str, list[str]]] = {}  # plan id -> (plan node, leaf name, types)
        self.schema_checks = 0  # server schema RPCs made (one per translated DataFrame)

    def known(self, df: Any, name: str) -> None:
        """Remember the placeholder ``df`` (an empty local relation) as the leaf ``name``."""
        plan = df._plan
        fields = json.loads(plan._schema)["fields"] if getattr(plan, "_schema", None) else None
        if fields is None:  # pragma: no cover - placeholders are built from a schema
            raise Untranslatable("internal: a placeholder without a schema")
        types = [TIME_TYPE if f["name"] == TIME else type_name(_json_type(f["type"])) for f in fields]
        self.leaf_plans[plan._plan_id] = (plan, name, types)

    def known_plan(self, plan: Any, name: str, fields: Sequence[Any]) -> None:
        """Remember ``plan`` (a pipeline's operator output, :mod:`spark_differential.intask.pipeline`) as
        the leaf ``name`` whose columns are the Spark fields ``fields``."""
        types = [TIME_TYPE if f.name == TIME else type_name(f.dataType) for f in fields]
        self.leaf_plans[plan._plan_id] = (plan, name, types)

    def relation(self, df: Any, columns: Sequence[str] | None = None) -> Relation:
        if not self.ansi:
            raise Untranslatable("spark.sql.ansi.enabled is false: overflow and casts would differ from DuckDB's")
        scope = self._plan(df._plan)
        self._check_schema(df, scope)
        return scope.rel if columns is None else self._pick(scope.rel, columns)

    def _check_schema(self, df: Any, scope: _Scope) -> None:
        """The server's schema of ``df`` must be the one inferred (names and types)."""
        self.schema_checks += 1
        try:
            fields = df.schema.fields
        except Exception as err:  # noqa: BLE001 - the server cannot analyse it: not ours to run
            raise Untranslatable(f"the server cannot analyse the step ({type(err).__name__})") from None
        got = [(f.name, TIME_TYPE if f.name == TIME else type_name(f.dataType)) for f in fields]
        want = list(zip(scope.names, scope.types))
        if got != want:
            raise Untranslatable(f"the step's columns on the server {got} are not the ones read from its plan {want}")

    # -- plan nodes ---------------------------------------------------------------

    def _plan(self, p: Any) -> _Scope:
        kind = type(p).__name__
        pid = getattr(p, "_plan_id", None)
        known = self.leaf_plans.get(pid)
        if known is not None and known[0] is p:  # a placeholder, or a pipeline's operator output (fused)
            _, leaf, types = known
            name, cols = self.tables[leaf]
            return _Scope(self._leaf(name, cols), list(cols), types, frozenset(), frozenset({pid}))
        if kind == "LocalRelation":
            raise Untranslatable("the body reads a DataFrame from outside the loop other than through dd_* operators")
        if getattr(p, "_references", None):
            raise Untranslatable("the step reads a subquery")
        if kind == "SubqueryAlias":
            child = self._plan(p._child)
            return _Scope(child.rel, child.names, child.types, child.qualifiers | {p._alias}, child.plan_ids | {pid})
        if kind == "Project":
            child = self._plan(p._child)
            items = []
            for c in p._columns:
                e = c._expr
                if type(e).__name__ == "ColumnAlias":
                    if len(e._alias) != 1 or e._metadata is not None:
                        raise Untranslatable("a multi-name alias or one with metadata")
                    items.append((e._alias[0], e._child))
                elif type(e).__name__ == "ColumnReference":
                    items.append((None, e))
                elif type(e).__name__ == "UnresolvedStar":
                    raise Untranslatable("`*` in a step (name the columns)")
                elif type(e).__name__ == "SQLExpression":
                    items.append(from_sql(e._expr, top=True))
                else:
                    raise Untranslatable(f"an unnamed computed column ({e}): name it with .alias()")
            return self._project(child, items, pid)
        if kind == "WithColumns":
            child = self._plan(p._child)
            if p._metadata is not None:
                raise Untranslatable("withColumns with metadata")
            items: list[tuple[str | None, Any]] = [(None, Ref(n)) for n in child.names]
            for name, col in zip(p._columnNames, p._columns):
                at = self._find(child, name)
                if at is None:
                    items.append((name, col._expr))
                else:
                    items[at] = (name, col._expr)
            return self._project(child, items, pid)
        if kind == "WithColumnsRenamed":
            child = self._plan(p._child)
            items = [(None, Ref(n)) for n in child.names]
            for old, new in p._colsMap.items():
                at = self._find(child, old)
                if at is not None:
                    items[at] = (new, Ref(child.names[at]))
            return self._project(child, items, pid)
        if kind == "Drop":
            child = self._plan(p._child)
            if any(not isinstance(c, str) for c in p._columns):
                raise Untranslatable("drop() of a Column (only names are read)")
            gone = {self._find(child, c) for c in p._columns} - {None}
            return self._project(child, [(None, Ref(n)) for i, n in enumerate(child.names) if i not in gone], pid)
        if kind == "Filter":
            child = self._plan(p._child)
            self._unique(child.rel)
            sql, typ = self._expr(p.filter._expr, child)
            if typ != "boolean":
                raise Untranslatable(f"a filter condition of type {typ}")
            condition = self._sql(sql, child)  # written before the filter's alias is taken
            rel = self._filtered(child.rel, lambda: condition)
            return _Scope(rel, child.names, child.types, child.qualifiers, child.plan_ids | {pid})
        if kind == "SetOperation":
            if p.set_op != "union" or not p.is_all or p.allow_missing_columns:
                raise Untranslatable(f"a {p.set_op} set operation other than union(ByName)")
            left, right = self._plan(p._child), self._plan(p.other)
            if len(left.names) != len(right.names):
                raise Untranslatable("a union of steps with different numbers of columns")
            if p.by_name:
                order = [self._find(right, n) for n in left.names]
                if None in order or len(set(order)) != len(order):
                    raise Untranslatable("a unionByName whose sides do not have the same columns")
                right = self._project(right, [(None, Ref(right.names[i])) for i in order], None)  # type: ignore[index]
            if left.types != right.types:
                raise Untranslatable("a union of columns of different types (Spark would widen them)")
            if [n == TIME for n in left.names] != [n == TIME for n in right.names]:
                raise Untranslatable("a union that moves `time` to another column")
            return _Scope(self._union([left.rel, right.rel]), left.names, left.types)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _project(self, child: _Scope, items: Sequence[tuple[str | None, Any]], pid: int | None) -> _Scope:
        """A projection of ``items`` (output name or ``None`` for a column's own name, expression)."""
        self._unique(child.rel)
        proj = Projection(child.rel)
        types: list[str] = []
        for name, e in items:
            ref = self._column(e, child) if type(e).__name__ in ("ColumnReference", "Ref") else None
            if ref is not None and child.names[ref] == TIME:
                if (name or TIME) != TIME:
                    raise Untranslatable("the body renames `time`")
                proj.time(self.width)
                types.append(TIME_TYPE)
                continue
            if ref is not None:
                col = child.names[ref]
                # unaliased: the name as written (Spark Connect keeps `N` for a column `n`)
                label = name or (_parts(e._unparsed_identifier)[-1] if type(e).__name__ == "ColumnReference" else col)
                proj.add(quote(col), label, ("col", col), col)
                types.append(child.types[ref])
                continue
            if name is None:  # pragma: no cover - only named items reach here
                raise Untranslatable("an unnamed computed column")
            if name == TIME:
                raise Untranslatable("the body computes `time` (it may only pass it through)")
            sql, typ = self._expr(e, child)
            if typ not in SQL_TYPES:
                raise Untranslatable(f"a computed column `{name}` of type {typ}")
            text, arrow = self._sql(f"CAST({sql} AS {SQL_TYPES[typ]})", child)
            proj.add(text, name, arrow, None)
            types.append(typ)
        out_names = _unexpand(proj.names, self.width)
        folded = [n if self.case_sensitive else n.lower() for n in out_names]
        if len(set(folded)) != len(folded):
            raise Untranslatable("two columns of one step share a name")
        plan_ids = frozenset({pid}) if pid is not None else frozenset()
        return _Scope(self._projected(proj), out_names, types, frozenset(), plan_ids)

    # -- names --------------------------------------------------------------------

    def _find(self, scope: _Scope, name: str) -> int | None:
        """The index of the column ``name`` in ``scope`` (Spark's case rule), ``None`` if absent."""
        fold = (lambda s: s) if self.case_sensitive else str.lower
        hits = [i for i, n in enumerate(scope.names) if fold(n) == fold(name)]
        if len(hits) > 1:
            raise Untranslatable(f"the column name `{name}` is ambiguous")
        return hits[0] if hits else None

    def _column(self, e: Any, scope: _Scope) -> int:
        """The column a ``ColumnReference`` (or a
        :class:`~spark_differential.intask.connect_expressions.Ref`) names in ``scope``."""
        if isinstance(e, Ref):
            at = self._find(scope, e.name)
            if at is None:  # pragma: no cover - built from the scope's own names
                raise Untranslatable(f"internal: no column `{e.name}`")
            return at
        if e._is_metadata_column:
            raise Untranslatable("a metadata column")
        if e._plan_id is not None and e._plan_id not in scope.plan_ids:
            raise Untranslatable("a column of another DataFrame (df['x'] of a DataFrame the step does not read directly)")
        parts = _parts(e._unparsed_identifier)
        if parts == ["*"] or parts[-1] == "*":
            raise Untranslatable("`*` in a step (name the columns)")
        if len(parts) == 2 and (parts[0] in scope.qualifiers or (not self.case_sensitive and parts[0].lower() in
                                                                 {q.lower() for q in scope.qualifiers})):
            if self._find(scope, ".".join(parts)) is not None:
                raise Untranslatable(f"the column name `{e._unparsed_identifier}` is ambiguous")
            parts = parts[1:]
        if len(parts) != 1:
            raise Untranslatable(f"a qualified or nested column `{e._unparsed_identifier}`")
        at = self._find(scope, parts[0])
        if at is None:
            raise Untranslatable(f"no column `{parts[0]}` in the step")
        return at

    # -- expressions --------------------------------------------------------------

    def _sql(self, text: str, scope: _Scope) -> tuple[str, tuple[Any, ...] | None]:
        """Spark SQL text over the scope's columns (``_sdc<i>``) as DuckDB SQL and its Arrow form."""
        safe = {n: f"_sdc{i}" for i, n in enumerate(scope.names)}
        return self._parsed(text, safe, lambda: text)

    def _expr(self, e: Any, scope: _Scope) -> tuple[str, str]:
        """Spark SQL text of ``e`` with every implicit cast written out, and its Spark type
        (:func:`~spark_differential.intask.connect_expressions.typed`, its columns resolved in ``scope``)."""
        return typed(e, lambda c: self._operand(c, scope))

    def _operand(self, e: Any, scope: _Scope) -> tuple[str, str]:
        """The safe name and Spark type of the column ``e`` names in ``scope`` (never ``time``)."""
        at = self._column(e, scope)
        if scope.names[at] == TIME:
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        return f"_sdc{at}", scope.types[at]


def _json_type(t: Any) -> str:
    """A schema JSON field type (a name, or a nested type's dict) as a name."""
    return t if isinstance(t, str) else str(t.get("type"))


def _unexpand(names: Sequence[str], width: int) -> list[str]:
    """Output column names with the time leaves folded back into ``time``."""
    lv = leaves(width)
    out: list[str] = []
    for n in names:
        if n in lv:
            if n == lv[0]:
                out.append(TIME)
            continue
        out.append(n)
    return out
