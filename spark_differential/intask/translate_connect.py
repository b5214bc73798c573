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
  objects first (:func:`_from_sql`).  Anything else (division, floating point,
  string<->number conversions, non-ANSI sessions) raises
  :class:`~spark_differential.intask.translate.Untranslatable`.
* The inferred output schema of every translated DataFrame is checked against the
  server's (``df.schema``: one RPC per step): a step whose names or types differ is
  refused, and each computed column is cast to its Spark type in the query.

The Spark SQL text built here goes through the same sqlglot translation as the
classic reader's (:meth:`Translator._parsed`), so both readers produce the same kind
of :class:`~spark_differential.intask.translate.Relation`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core import conf as _conf
from spark_differential.core.collection import TIME
from spark_differential.intask.translate import Relation, Translator, Untranslatable, leaves, quote

_INTEGRAL = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_SQL = {"byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "string": "STRING",
        "boolean": "BOOLEAN", "date": "DATE", "double": "DOUBLE"}
# a type's name as a CastExpression, a schema's JSON or simpleString writes it -> its JSON name
_TYPE_NAMES = {"tinyint": "byte", "byte": "byte", "smallint": "short", "short": "short", "int": "integer",
               "integer": "integer", "bigint": "long", "long": "long", "string": "string", "boolean": "boolean",
               "date": "date", "double": "double", "null": "void", "void": "void"}
_ARITH = {"+": "+", "-": "-", "*": "*"}
_COMPARE = {"==": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
_SAME_TYPE = {"string", "boolean", "date"}  # compared, chosen or coalesced only with their own type
TIME_TYPE = "time"  # the loop's time: passed through, never computed with


def _type_name(t: Any) -> str:
    """A type (or its DDL / JSON name) as its schema JSON name (``"long"``, ``"integer"``, ``"string"``, ...)."""
    name = (t if isinstance(t, str) else str(t.simpleString())).strip().lower()
    return _TYPE_NAMES.get(name, name)


def _wider(types: Sequence[str]) -> str | None:
    """The type Spark widens ``types`` to where that is the same in DuckDB (integral: the
    widest; one of :data:`_SAME_TYPE`: itself), else ``None``."""
    if all(t in _INTEGRAL for t in types):
        return max(types, key=lambda t: _INTEGRAL[t])
    if len(set(types)) == 1 and types[0] in _SAME_TYPE:
        return types[0]
    return None


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
            case_sensitive = str(_conf.get(spark, "spark.sql.caseSensitive", "false")).strip().lower() == "true"
        self.case_sensitive = case_sensitive
        self.leaf_plans: dict[int, tuple[Any, str, list[str]]] = {}  # plan id -> (plan node, leaf name, types)
        self.schema_checks = 0  # server schema RPCs made (one per translated DataFrame)

    def known(self, df: Any, name: str) -> None:
        """Remember the placeholder ``df`` (an empty local relation) as the leaf ``name``."""
        plan = df._plan
        fields = json.loads(plan._schema)["fields"] if getattr(plan, "_schema", None) else None
        if fields is None:  # pragma: no cover - placeholders are built from a schema
            raise Untranslatable("internal: a placeholder without a schema")
        types = [TIME_TYPE if f["name"] == TIME else _type_name(_json_type(f["type"])) for f in fields]
        self.leaf_plans[plan._plan_id] = (plan, name, types)

    def known_plan(self, plan: Any, name: str, fields: Sequence[Any]) -> None:
        """Remember ``plan`` (a pipeline's operator output, :mod:`spark_differential.intask.pipeline`) as
        the leaf ``name`` whose columns are the Spark fields ``fields``."""
        types = [TIME_TYPE if f.name == TIME else _type_name(f.dataType) for f in fields]
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
        got = [(f.name, TIME_TYPE if f.name == TIME else _type_name(f.dataType)) for f in fields]
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
            expanded = self._expand(cols)
            rel = Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded, (name, expanded),
                           ("leaf", name, expanded))
            return _Scope(rel, list(cols), types, frozenset(), frozenset({pid}))
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
                    items.append(_from_sql(e._expr, top=True))
                else:
                    raise Untranslatable(f"an unnamed computed column ({e}): name it with .alias()")
            return self._project(child, items, pid)
        if kind == "WithColumns":
            child = self._plan(p._child)
            if p._metadata is not None:
                raise Untranslatable("withColumns with metadata")
            items: list[tuple[str | None, Any]] = [(None, _Ref(n)) for n in child.names]
            for name, col in zip(p._columnNames, p._columns):
                at = self._find(child, name)
                if at is None:
                    items.append((name, col._expr))
                else:
                    items[at] = (name, col._expr)
            return self._project(child, items, pid)
        if kind == "WithColumnsRenamed":
            child = self._plan(p._child)
            items = [(None, _Ref(n)) for n in child.names]
            for old, new in p._colsMap.items():
                at = self._find(child, old)
                if at is not None:
                    items[at] = (new, _Ref(child.names[at]))
            return self._project(child, items, pid)
        if kind == "Drop":
            child = self._plan(p._child)
            if any(not isinstance(c, str) for c in p._columns):
                raise Untranslatable("drop() of a Column (only names are read)")
            gone = {self._find(child, c) for c in p._columns} - {None}
            return self._project(child, [(None, _Ref(n)) for i, n in enumerate(child.names) if i not in gone], pid)
        if kind == "Filter":
            child = self._plan(p._child)
            self._unique(child.rel)
            sql, typ = self._expr(p.filter._expr, child)
            if typ != "boolean":
                raise Untranslatable(f"a filter condition of type {typ}")
            text, arrow = self._sql(sql, child)
            program = None if arrow is None or child.rel.arrow is None else ("filter", child.rel.arrow, arrow)
            rel = Relation(f"SELECT * FROM ({child.rel.sql}) AS {self._alias()} WHERE {text}", child.rel.columns, None,
                           program)
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
                right = self._project(right, [(None, _Ref(right.names[i])) for i in order], None)  # type: ignore[index]
            if left.types != right.types:
                raise Untranslatable("a union of columns of different types (Spark would widen them)")
            if [n == TIME for n in left.names] != [n == TIME for n in right.names]:
                raise Untranslatable("a union that moves `time` to another column")
            parts = [left.rel, right.rel]
            sql = " UNION ALL ".join(f"SELECT * FROM ({r.sql}) AS {self._alias()}" for r in parts)
            program = (None if any(r.arrow is None for r in parts)
                       else ("union", left.rel.columns, tuple(r.arrow for r in parts)))
            return _Scope(Relation(sql, left.rel.columns, None, program), left.names, left.types)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _project(self, child: _Scope, items: Sequence[tuple[str | None, Any]], pid: int | None) -> _Scope:
        """A projection of ``items`` (output name or ``None`` for a column's own name, expression)."""
        self._unique(child.rel)
        out: list[str] = []
        names: list[str] = []
        types: list[str] = []
        arrows: list[Any] | None = [] if child.rel.arrow is not None else None
        picked: list[str] | None = [] if child.rel.picks is not None else None
        for name, e in items:
            ref = self._column(e, child) if type(e).__name__ in ("ColumnReference", "_Ref") else None
            if ref is not None and child.names[ref] == TIME:
                if (name or TIME) != TIME:
                    raise Untranslatable("the body renames `time`")
                self._time_items(out, names, arrows, picked)
                types.append(TIME_TYPE)
                continue
            if ref is not None:
                col = child.names[ref]
                # unaliased: the name as written (Spark Connect keeps `N` for a column `n`)
                label = name or (_parts(e._unparsed_identifier)[-1] if type(e).__name__ == "ColumnReference" else col)
                out.append(f"{quote(col)} AS {quote(label)}")
                names.append(label)
                types.append(child.types[ref])
                if arrows is not None:
                    arrows.append(("col", col))
                if picked is not None and child.rel.picks is not None:
                    picked.append(child.rel.picks[1][child.rel.columns.index(col)])
                continue
            if name is None:  # pragma: no cover - only named items reach here
                raise Untranslatable("an unnamed computed column")
            if name == TIME:
                raise Untranslatable("the body computes `time` (it may only pass it through)")
            sql, typ = self._expr(e, child)
            if typ not in _SQL:
                raise Untranslatable(f"a computed column `{name}` of type {typ}")
            text, arrow = self._sql(f"CAST({sql} AS {_SQL[typ]})", child)
            out.append(f"{text} AS {quote(name)}")
            names.append(name)
            types.append(typ)
            if arrows is not None:
                arrows = None if arrow is None else [*arrows, arrow]
            picked = None
        out_names = _unexpand(names, self.width)
        folded = [n if self.case_sensitive else n.lower() for n in out_names]
        if len(set(folded)) != len(folded):
            raise Untranslatable("two columns of one step share a name")
        picks = (child.rel.picks[0], tuple(picked)) if picked is not None and child.rel.picks is not None else None
        program = None if arrows is None else ("project", child.rel.arrow, tuple(names), tuple(arrows))
        rel = Relation(f"SELECT {', '.join(out)} FROM ({child.rel.sql}) AS {self._alias()}", tuple(names), picks, program)
        return _Scope(rel, out_names, types, frozenset(), frozenset({pid}) if pid is not None else frozenset())

    # -- names --------------------------------------------------------------------

    def _find(self, scope: _Scope, name: str) -> int | None:
        """The index of the column ``name`` in ``scope`` (Spark's case rule), ``None`` if absent."""
        fold = (lambda s: s) if self.case_sensitive else str.lower
        hits = [i for i, n in enumerate(scope.names) if fold(n) == fold(name)]
        if len(hits) > 1:
            raise Untranslatable(f"the column name `{name}` is ambiguous")
        return hits[0] if hits else None

    def _column(self, e: Any, scope: _Scope) -> int:
        """The column a ``ColumnReference`` (or :class:`_Ref`) names in ``scope``."""
        if isinstance(e, _Ref):
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
        """Spark SQL text of ``e`` with every implicit cast written out, and its Spark type."""
        kind = type(e).__name__
        if kind in ("ColumnReference", "_Ref"):
            at = self._column(e, scope)
            if scope.names[at] == TIME:
                raise Untranslatable("the body computes with `time` (it may only pass it through)")
            return f"_sdc{at}", scope.types[at]
        if kind == "LiteralExpression":
            return _literal(e._value, _type_name(e._dataType))
        if kind == "CastExpression":
            if e._eval_mode not in (None, "ansi"):
                raise Untranslatable(f"a cast in {e._eval_mode} mode")
            sql, src = self._expr(e._expr, scope)
            dst = _type_name(e._data_type)
            if dst not in _SQL or not (src == dst or (src in _INTEGRAL and dst in (*_INTEGRAL, "string", "double"))):
                raise Untranslatable(f"a cast from {src} to {dst} (its meaning may differ in DuckDB)")
            return f"CAST({sql} AS {_SQL[dst]})", dst
        if kind == "CaseWhen":
            conds = []
            values = []
            for cond, value in e._branches:
                c, ct = self._expr(cond, scope)
                if ct != "boolean":
                    raise Untranslatable(f"a CASE WHEN condition of type {ct}")
                conds.append(c)
                values.append(self._expr(value, scope))
            if e._else_value is not None:
                values.append(self._expr(e._else_value, scope))
            typ, cast = self._common(values)
            parts = ["CASE", *[f"WHEN {c} THEN {cast(v)}" for c, v in zip(conds, values)]]
            if e._else_value is not None:
                parts.append(f"ELSE {cast(values[-1])}")
            return " ".join([*parts, "END"]), typ
        if kind == "SQLExpression":
            return self._expr(_from_sql(e._expr, top=False)[1], scope)
        if kind != "UnresolvedFunction" or e._is_distinct:
            raise Untranslatable(f"the expression {e} ({kind}) is not translated in one task")
        name = e._name if e._name in _ARITH or e._name in _COMPARE else e._name.lower()
        args = [self._expr(a, scope) for a in e._args]
        types = [t for _, t in args]
        if name in _ARITH and len(args) == 2:
            typ = _wider(types) if all(t in _INTEGRAL for t in types) else None
            if typ is None:
                raise Untranslatable(f"{name} on {types[0]} and {types[1]} (only integer arithmetic runs in one task)")
            a, b = (_cast(s, t, typ) for s, t in args)
            return f"({a} {_ARITH[name]} {b})", typ
        if name == "%" and len(args) == 2:
            lit = e._args[1]
            if not (type(lit).__name__ == "LiteralExpression" and isinstance(lit._value, int) and lit._value != 0
                    and all(t in _INTEGRAL for t in types)):
                raise Untranslatable("% other than by a nonzero integer literal")
            typ = _wider(types)
            a, b = (_cast(s, t, typ) for s, t in args)  # type: ignore[arg-type]
            return f"({a} % {b})", typ  # type: ignore[return-value]
        if name == "negative" and len(args) == 1 and types[0] in _INTEGRAL:
            return f"(- {args[0][0]})", types[0]
        if name == "abs" and len(args) == 1 and types[0] in _INTEGRAL:
            return f"abs({args[0][0]})", types[0]
        if name in _COMPARE and len(args) == 2:
            typ = _wider(types)
            if typ is None:
                raise Untranslatable(f"{name} between {types[0]} and {types[1]} (an implicit cast, or floating point)")
            a, b = (_cast(s, t, typ) for s, t in args)
            return f"({a} {_COMPARE[name]} {b})", "boolean"
        if name in ("and", "or") and len(args) == 2 and types == ["boolean", "boolean"]:
            return f"({args[0][0]} {name.upper()} {args[1][0]})", "boolean"
        if name == "not" and len(args) == 1 and types[0] == "boolean":
            return f"(NOT {args[0][0]})", "boolean"
        if name in ("isnull", "isnotnull") and len(args) == 1:
            return f"({args[0][0]} IS {'NOT ' if name == 'isnotnull' else ''}NULL)", "boolean"
        if name == "in" and len(args) >= 2:
            typ = _wider(types)
            if typ is None:
                raise Untranslatable(f"IN over {types} (an implicit cast, or floating point)")
            first, *rest = (_cast(s, t, typ) for s, t in args)
            return f"({first} IN ({', '.join(rest)}))", "boolean"
        if name in ("coalesce", "least", "greatest") and args:
            typ, cast = self._common(args)
            return f"{name}({', '.join(cast(a) for a in args)})", typ
        raise Untranslatable(f"the expression {e} is not translated in one task")

    @staticmethod
    def _common(values: Sequence[tuple[str, str]]) -> tuple[str, Any]:
        """The common type of ``values`` (see :func:`_wider`) and a function casting one to it."""
        typ = _wider([t for _, t in values if t != "void"] or ["void"])
        if typ is None:
            raise Untranslatable(f"values of types {[t for _, t in values]} (Spark would cast them implicitly)")
        return typ, lambda v: f"CAST(NULL AS {_SQL[typ]})" if v[1] == "void" else _cast(v[0], v[1], typ)


@dataclass(frozen=True)
class _Ref:
    """A column named by the translator itself (``withColumn``'s kept columns, renames)."""

    name: str


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


def _cast(sql: str, typ: str, to: str) -> str:
    return sql if typ == to else f"CAST({sql} AS {_SQL[to]})"


def _literal(value: Any, typ: str) -> tuple[str, str]:
    """A literal's Spark SQL text and type (``void`` for an untyped null)."""
    if value is None:
        if typ in ("void", "null"):
            return "NULL", "void"
        if typ in _SQL:
            return f"CAST(NULL AS {_SQL[typ]})", typ
    elif typ in _INTEGRAL and isinstance(value, int) and not isinstance(value, bool):
        suffix = {"byte": "Y", "short": "S", "integer": "", "long": "L"}[typ]
        return f"{value}{suffix}", typ
    elif typ == "boolean" and isinstance(value, bool):
        return ("true" if value else "false"), typ
    elif typ == "string" and isinstance(value, str) and value.isprintable() and not any(c in value for c in "'\\$"):
        return f"'{value}'", typ
    raise Untranslatable(f"a literal {value!r} of type {typ} (only integers, booleans, plain strings and nulls)")


# sqlglot's nodes (Spark dialect) -> the Connect client's function names
_SQL_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Mod": "%", "EQ": "==", "GT": ">", "GTE": ">=", "LT": "<",
               "LTE": "<=", "NullSafeEQ": "<=>", "And": "and", "Or": "or"}
_SQL_FUNCTIONS = {"Abs": "abs", "Least": "least", "Greatest": "greatest", "Coalesce": "coalesce"}


def _from_sql(text: str, top: bool) -> tuple[str | None, Any]:
    """Spark SQL text (``F.expr``, ``selectExpr``, a string ``where``) as the Connect client's
    expression objects, which :meth:`ConnectTranslator._expr` then types; ``top``: a
    projection item, whose ``AS name`` gives ``(name, expression)``.  Parsed by sqlglot's
    Spark dialect; only the forms the Column reader covers are accepted (Spark SQL's
    numeric literals: integers as ``INT``, or ``BIGINT`` beyond its range)."""
    import sqlglot
    from pyspark.sql.connect import expressions as X
    from pyspark.sql.types import BooleanType, IntegerType, LongType, NullType, StringType

    if "\\" in text:
        raise Untranslatable(f"SQL text with a backslash ({text!r}): Spark's escapes are not read in one task")
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except Exception as err:  # noqa: BLE001 - any parse failure means: not ours to run
        raise Untranslatable(f"cannot read the SQL text {text!r} ({err})") from None

    def conv(n: Any) -> Any:
        kind = type(n).__name__
        if kind == "Paren":
            return conv(n.this)
        if kind == "Column":
            return X.ColumnReference(".".join("`" + p.name.replace("`", "``") + "`" for p in n.parts))
        if kind == "Literal":
            raw = str(n.this)
            if n.is_string:
                if "$" in raw:  # the in-task SQL names its tables $name (string.Template)
                    raise Untranslatable(f"SQL text with a '$' in a string literal ({text!r})")
                return X.LiteralExpression(raw, StringType())
            if raw.isdigit() and int(raw) < (1 << 63):
                return X.LiteralExpression(int(raw), IntegerType() if int(raw) < (1 << 31) else LongType())
            raise Untranslatable(f"the numeric literal {raw} in {text!r} (only integers run in one task)")
        if kind == "Boolean":
            return X.LiteralExpression(bool(n.this), BooleanType())
        if kind == "Null":
            return X.LiteralExpression(None, NullType())
        if kind in ("Cast", "TryCast"):
            # sqlglot reads Spark's CAST as TRY_CAST (non-ANSI Spark); in ANSI mode (the
            # only one read here) it is a CAST
            return X.CastExpression(conv(n.this), n.args["to"].sql(dialect="spark"))
        if kind in _SQL_BINARY:
            return X.UnresolvedFunction(_SQL_BINARY[kind], [conv(n.this), conv(n.expression)])
        if kind == "NEQ":
            return X.UnresolvedFunction("not", [X.UnresolvedFunction("==", [conv(n.this), conv(n.expression)])])
        if kind == "Neg":
            inner = conv(n.this)
            if type(inner).__name__ == "LiteralExpression" and isinstance(inner._value, int):
                value = -inner._value
                return X.LiteralExpression(value, IntegerType() if -(1 << 31) <= value else LongType())
            return X.UnresolvedFunction("negative", [inner])
        if kind == "Not":
            return X.UnresolvedFunction("not", [conv(n.this)])
        if kind == "Is" and type(n.expression).__name__ == "Null":
            return X.UnresolvedFunction("isnull", [conv(n.this)])
        if kind in _SQL_FUNCTIONS:
            return X.UnresolvedFunction(_SQL_FUNCTIONS[kind], [conv(a) for a in [n.this, *n.expressions]])
        if kind == "In" and not n.args.get("query") and not n.args.get("unnest") and n.expressions:
            return X.UnresolvedFunction("in", [conv(n.this), *[conv(a) for a in n.expressions]])
        if kind == "Between":
            v = conv(n.this)
            return X.UnresolvedFunction("and", [X.UnresolvedFunction(">=", [v, conv(n.args["low"])]),
                                                X.UnresolvedFunction("<=", [v, conv(n.args["high"])])])
        if kind == "Case" and n.this is None:
            branches = [(conv(i.this), conv(i.args["true"])) for i in n.args["ifs"]]
            default = n.args.get("default")
            return X.CaseWhen(branches, None if default is None else conv(default))
        if kind == "If":
            false = n.args.get("false")
            return X.CaseWhen([(conv(n.this), conv(n.args["true"]))], None if false is None else conv(false))
        raise Untranslatable(f"the SQL text {text!r} uses {kind}, which the in-task path does not translate on Connect")

    if top and type(tree).__name__ == "Alias":
        return tree.alias, conv(tree.this)
    if top and type(tree).__name__ == "Column":
        return None, conv(tree)
    if top:
        raise Untranslatable(f"an unnamed computed column ({text}): name it with AS")
    return None, conv(tree)
