"""Linear steps of a ``dd_iterate`` body as DuckDB SQL, for loops run inside one task.

On ``(data, time, diff)``: a linear step (``select``/``where``/``withColumn``/
``unionByName`` keeping ``time`` and ``diff``) maps each update on its own, so it
can run on Arrow tables of updates as well as on Spark DataFrames.  This module
reads the Spark plan between the leaves of a recorded body (the loop variable, the
outputs of its ``dd_*`` operators) and a DataFrame built from them, and writes the
same computation as one DuckDB query over tables named after those leaves.

Inside a loop ``time`` is passed through untouched (the body may not look into it),
so in the tables it is not one column but the encoded int64 leaves of the outer
time, ``_sd_t0 …`` (:data:`LEAF`), and a projection of ``time`` expands to them.

Only what is translated exactly is accepted: ``Project``, ``Filter``, ``Union`` and
aliases over the leaves, with expressions made of columns, literals, casts,
arithmetic, comparisons, boolean logic, ``CASE``/``IF``, ``coalesce``, ``least``,
``greatest``, ``abs`` and a few string functions (sqlglot translates Spark SQL to
DuckDB's).  Anything else raises :class:`Untranslatable` with the reason, and the
loop runs on the distributed path instead.  This reader is for classic sessions (a
Spark Connect DataFrame has no analysed plan in this process);
:mod:`spark_differential.intask.translate_connect` reads a Connect client's plan into the
same :class:`Relation` s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.collection import TIME

LEAF = "_sd_t"
LEAF_KEY = "spark_differential.leaf"

_EXPRESSIONS = {
    "Paren", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Column", "Identifier", "Literal", "Cast", "TryCast",
    "DataType", "Not", "Is", "Null", "Boolean", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "And", "Or", "Case",
    "If", "Least", "Greatest", "Coalesce", "Abs", "Concat", "Lower", "Upper", "NullSafeEQ", "In", "Between",
    "Length", "Round", "Floor", "Ceil",
}


class Untranslatable(Exception):
    """A body step the in-task path cannot run exactly (the reason is the message)."""


@dataclass(frozen=True)
class Relation:
    """A DuckDB query over named tables (``$name``) and the names of its columns.

    ``picks``: when the query only picks (and renames) columns of one table, that
    table's name and the picked column of each output column: the in-task path then
    selects them from the Arrow table without a query."""

    sql: str
    columns: tuple[str, ...]
    picks: tuple[str, tuple[str, ...]] | None = None
    arrow: tuple[Any, ...] | None = None  # the same step as an Arrow program (:func:`evaluate`), where one exists


def leaves(width: int) -> list[str]:
    """The column names of an encoded time in the in-task tables."""
    return [f"{LEAF}{i}" for i in range(width)]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _seq(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def plan_of(df: Any) -> Any:
    """The analysed logical plan of a classic DataFrame (``Untranslatable`` on Spark Connect)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise Untranslatable("the session is Spark Connect (no analysed plan to translate)")
    return jdf.queryExecution().analyzed()


def placeholder(spark: Any, schema: Any, name: str) -> Any:
    """An empty DataFrame of ``schema`` that plans built on it know as the leaf ``name``.

    The name rides in the metadata of its last column (``diff``), which Spark keeps
    when it renumbers the columns of a relation read twice (a self-union).  Built on
    the JVM directly: one call instead of Python's ``createDataFrame`` round trips."""
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T

    if getattr(spark, "_jsparkSession", None) is None:
        raise Untranslatable("the session is Spark Connect (no analysed plan to translate)")
    fields = list(schema.fields)
    fields[-1] = T.StructField(fields[-1].name, fields[-1].dataType, fields[-1].nullable, {LEAF_KEY: name})
    jschema = spark._jsparkSession.parseDataType(T.StructType(fields).json())
    jdf = spark._jsparkSession.createDataFrame(spark._jvm.java.util.ArrayList(), jschema)
    return DataFrame(jdf, spark)


def _leaf_name(p: Any) -> str | None:
    import json

    out = _seq(p.output())
    if not out:
        return None
    return json.loads(out[-1].metadata().json()).get(LEAF_KEY)


def _json_tree(flat: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Spark's JSON of a tree (``TreeNode.toJSON``: its nodes in pre-order, each with
    ``num-children``) as nested dicts, each node's children under ``_children``."""

    def read(pos: int) -> tuple[dict[str, Any], int]:
        node = dict(flat[pos])
        pos += 1
        kids = []
        for _ in range(int(node.get("num-children") or 0)):
            kid, pos = read(pos)
            kids.append(kid)
        node["_children"] = kids
        return node, pos

    return read(0)[0]


def _expr_id(e: dict[str, Any]) -> Any:
    """The expression id of a JSON attribute (its number and the JVM that numbered it)."""
    i = e.get("exprId") or {}
    return (i.get("id"), i.get("jvmId"))


def _short(cls: str) -> str:
    """A JSON node's class without its package (Spark's ``nodeName`` for the nodes read here)."""
    return cls.rsplit(".", 1)[-1]


def _references(e: dict[str, Any], name: str) -> bool:
    """Whether the JSON expression ``e`` reads a column named ``name``."""
    if _short(e["class"]) == "AttributeReference" and e.get("name") == name:
        return True
    return any(_references(c, name) for c in e["_children"])


class _NoJson(Exception):
    """An expression the JSON reader does not write as SQL: read it from the JVM instead."""


# Spark's own ``sql`` of the expressions :func:`_spark_sql` covers (the JVM path parses that text)
_BINARY = {
    "Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Remainder": "%", "EqualTo": "=",
    "EqualNullSafe": "<=>", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
    "LessThanOrEqual": "<=", "And": "AND", "Or": "OR",
}
_POSTFIX = {"IsNull": "IS NULL", "IsNotNull": "IS NOT NULL"}
_FUNCTIONS = {"Coalesce": "coalesce", "Least": "least", "Greatest": "greatest", "Abs": "abs"}
_SQL_TYPES = {
    "long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT", "double": "DOUBLE", "float": "FLOAT",
    "string": "STRING", "boolean": "BOOLEAN", "date": "DATE",
}
_LITERAL_SUFFIX = {"integer": "", "long": "L", "short": "S", "byte": "Y"}


def _spark_sql(e: dict[str, Any], columns: dict[str, str]) -> str:
    """The Spark SQL text of the JSON expression ``e`` as Spark's ``Expression.sql`` writes
    it, every column reference renamed to a safe name (``columns``: name -> safe name,
    filled as met).  Raises :class:`_NoJson` for anything else: the JSON drops some of
    an expression's fields, so only these kinds are read from it."""
    kind = _short(e["class"])
    kids = e["_children"]
    if kind == "AttributeReference":
        return columns.setdefault(e["name"], f"_sdc{len(columns)}")
    if kind == "Literal":
        value, dtype = e.get("value"), e.get("dataType")
        if value is None:
            if dtype == "void":
                return "NULL"
            if dtype in _SQL_TYPES:
                return f"CAST(NULL AS {_SQL_TYPES[dtype]})"
            raise _NoJson(kind)
        if dtype in _LITERAL_SUFFIX and str(value).lstrip("-").isdigit():
            return f"{value}{_LITERAL_SUFFIX[dtype]}"
        if dtype == "boolean" and value in ("true", "false"):
            return str(value)
        if dtype == "string" and isinstance(value, str) and value.isprintable() and not any(c in value for c in "'\\$"):
            return f"'{value}'"
        raise _NoJson(kind)
    if kind in _BINARY and len(kids) == 2:
        return f"({_spark_sql(kids[0], columns)} {_BINARY[kind]} {_spark_sql(kids[1], columns)})"
    if kind in _POSTFIX and len(kids) == 1:
        return f"({_spark_sql(kids[0], columns)} {_POSTFIX[kind]})"
    if kind == "Not" and len(kids) == 1:
        return f"(NOT {_spark_sql(kids[0], columns)})"
    if kind == "Cast" and len(kids) == 1 and e.get("dataType") in _SQL_TYPES:
        # also a try_cast (the JSON drops the cast's mode): Spark's text says TRY_CAST, but
        # sqlglot reads Spark's CAST as a TRY_CAST too, so the translation is the same
        return f"CAST({_spark_sql(kids[0], columns)} AS {_SQL_TYPES[e['dataType']]})"
    if kind == "In" and len(kids) >= 2:
        return f"({_spark_sql(kids[0], columns)} IN ({', '.join(_spark_sql(k, columns) for k in kids[1:])}))"
    if kind == "If" and len(kids) == 3:
        return f"(IF({', '.join(_spark_sql(k, columns) for k in kids)}))"
    if kind == "CaseWhen" and len(kids) >= 2:
        pairs = len(kids) // 2
        parts = ["CASE"]
        for i in range(pairs):
            parts.append(f"WHEN {_spark_sql(kids[2 * i], columns)} THEN {_spark_sql(kids[2 * i + 1], columns)}")
        if len(kids) % 2:
            parts.append(f"ELSE {_spark_sql(kids[-1], columns)}")
        parts.append("END")
        return " ".join(parts)
    if kind in _FUNCTIONS and kids and (kind != "Abs" or len(kids) == 1):
        return f"{_FUNCTIONS[kind]}({', '.join(_spark_sql(k, columns) for k in kids)})"
    raise _NoJson(kind)


class Translator:
    """Translate DataFrames built from leaves into :class:`Relation` s.

    ``jvm``: the session's py4j JVM view; ``tables``: each leaf's name -> (table name, its columns as in the Spark plan,
    ``time`` included); ``width``: the number of encoded time leaves; ``ansi``:
    whether Spark's casts fail on bad input (DuckDB ``CAST``) or give null (``TRY_CAST``).
    """

    def __init__(self, jvm: Any, tables: Mapping[str, tuple[str, Sequence[str]]], width: int, ansi: bool = True,
                 use_json: bool = True) -> None:
        self.jvm = jvm
        self.use_json = use_json  # False: read the plan over py4j node by node (the reference the JSON path is tested against)
        self.tables = tables  # read at translation time: the recorder adds leaves as it goes
        self.width = width
        self.ansi = ansi
        self._n = 0
        self.leaf_ids: dict[Any, str] = {}  # the expression id of a leaf's last column -> its name
        # a pipeline's operator outputs (spark_differential.intask.pipeline), read as leaves where a plan
        # node equals one (the same subtree: its nodes, expressions and their ids), by hash code:
        # [(analysed plan, leaf name)] (the py4j walk only)
        self.node_plans: dict[int, list[tuple[Any, str]]] = {}

    def known(self, df: Any, name: str) -> None:
        """Remember the placeholder ``df`` (:func:`placeholder`) as the leaf ``name``, by
        the id of its last column (the plan's JSON, which :meth:`relation` reads, has
        no column metadata)."""
        if self.use_json:
            nodes = json.loads(plan_of(df).toJSON())
            self.leaf_ids[_expr_id(_json_tree(nodes[0]["output"][-1]))] = name

    def known_node(self, plan: Any, code: int, name: str) -> None:
        """Remember the analysed plan ``plan`` (hash code ``code``) of a pipeline's operator
        output (:mod:`spark_differential.intask.pipeline`) as the leaf ``name``: a plan node equal to
        it is that output (a side the analyser renumbered, as in a self-union, is not).  Read
        by the node-by-node reader (``use_json=False``); the JSON reader does not look for them
        (an unknown node there is :class:`Untranslatable`, never misread)."""
        self.node_plans.setdefault(code, []).append((plan, name))

    def relation(self, df: Any, columns: Sequence[str] | None = None) -> Relation:
        """``df`` as a relation over the leaves; ``columns``: only these columns of it, in
        this order (``time`` among them), as ``df.select(*columns)`` would give without
        building that DataFrame.

        The analysed plan comes in one py4j round trip, as Spark's JSON of the tree
        (:meth:`_json_node`); only an expression the JSON reader does not cover is
        read from the JVM objects, node by node (:meth:`_node`, hundreds of round trips
        for a body)."""
        jplan = plan_of(df)
        nodes = None
        if self.use_json:
            try:
                nodes = json.loads(jplan.toJSON())
            except Exception:  # noqa: BLE001 - a plan Spark cannot write as JSON: read it node by node
                nodes = None
        rel = self._node(jplan) if nodes is None else self._json_node(_json_tree(nodes), lambda: jplan)
        return rel if columns is None else self._pick(rel, columns)

    def _pick(self, child: Relation, columns: Sequence[str]) -> Relation:
        """``child``'s columns ``columns`` (``time`` expanded to its leaves), as a projection."""
        self._unique(child)
        names = self._expand(columns)
        missing = [n for n in names if n not in child.columns]
        if missing:  # pragma: no cover - the body's output and dd_concat's inputs were checked
            raise Untranslatable(f"internal: columns {missing} are not in the step")
        items = [quote(n) for n in names]
        picks = None
        if child.picks is not None:
            picks = (child.picks[0], tuple(child.picks[1][child.columns.index(n)] for n in names))
        program = None if child.arrow is None else ("project", child.arrow, names, tuple(("col", n) for n in names))
        return Relation(f"SELECT {', '.join(items)} FROM ({child.sql}) AS {self._alias()}", names, picks, program)

    def _alias(self) -> str:
        self._n += 1
        return f"_s{self._n}"

    def _expand(self, names: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for n in names:
            out.extend(leaves(self.width) if n == TIME else [n])
        return tuple(out)

    def _node(self, p: Any) -> Relation:
        if self.node_plans:
            leaf = next((n for jp, n in self.node_plans.get(int(p.hashCode()), ()) if p.equals(jp)), None)
            if leaf is not None:
                name, cols = self.tables[leaf]
                expanded = self._expand(cols)
                return Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded,
                                (name, expanded), ("leaf", name, expanded))
        kind = p.nodeName()
        if kind == "LocalRelation":
            leaf = _leaf_name(p)
            if leaf is None or leaf not in self.tables:
                raise Untranslatable("the body reads a DataFrame from outside the loop other than through dd_* operators")
            name, cols = self.tables[leaf]
            names = [a.name() for a in _seq(p.output())]
            if names != list(cols):  # pragma: no cover - leaves are read whole
                raise Untranslatable("internal: a loop leaf read with other columns")
            expanded = self._expand(cols)
            return Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded, (name, expanded),
                            ("leaf", name, expanded))
        if kind == "SubqueryAlias":
            return self._node(p.child())
        if kind == "Project":
            child = self._node(p.child())
            self._unique(child)
            items: list[str] = []
            names: list[str] = []
            arrows: list[Any] | None = [] if child.arrow is not None else None
            picked: list[str] | None = [] if child.picks is not None else None
            for e in _seq(p.projectList()):
                name = e.name()
                # one py4j round trip per JVM call: each kind asked once (nodeName, not getClass().getSimpleName())
                kind = e.nodeName()
                inner = e.child() if kind == "Alias" else e
                inner_kind = inner.nodeName() if kind == "Alias" else kind
                if inner_kind == "AttributeReference" and inner.name() == TIME:
                    if name != TIME:
                        raise Untranslatable("the body renames `time`")
                    self._time_items(items, names, arrows, picked)
                    continue
                sql, arrow = self._expr(inner)
                items.append(f"{sql} AS {quote(name)}")
                names.append(name)
                if arrows is not None:
                    arrows = None if arrow is None else [*arrows, arrow]
                if picked is not None and child.picks is not None and inner_kind == "AttributeReference":
                    picked.append(child.picks[1][child.columns.index(inner.name())])
                else:
                    picked = None
            a = self._alias()
            picks = (child.picks[0], tuple(picked)) if picked is not None and child.picks is not None else None
            program = None if arrows is None else ("project", child.arrow, tuple(names), tuple(arrows))
            return Relation(f"SELECT {', '.join(items)} FROM ({child.sql}) AS {a}", tuple(names), picks, program)
        if kind == "Filter":
            child = self._node(p.child())
            self._unique(child)
            a = self._alias()
            sql, arrow = self._expr(p.condition())
            program = None if arrow is None or child.arrow is None else ("filter", child.arrow, arrow)
            return Relation(f"SELECT * FROM ({child.sql}) AS {a} WHERE {sql}", child.columns, None, program)
        if kind == "Union":
            parts = [self._node(c) for c in _seq(p.children())]
            if p.byName() or p.allowMissingCol():  # pragma: no cover - resolved by the analyser
                raise Untranslatable("a union by name that the analyser left unresolved")
            sql = " UNION ALL ".join(f"SELECT * FROM ({r.sql}) AS {self._alias()}" for r in parts)
            program = (None if any(r.arrow is None for r in parts)
                       else ("union", parts[0].columns, tuple(r.arrow for r in parts)))
            return Relation(sql, parts[0].columns, None, program)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _json_node(self, p: dict[str, Any], jnode: Callable[[], Any]) -> Relation:
        """:meth:`_node` over Spark's JSON of the plan (``p``, from :func:`_json_tree`).

        ``jnode`` fetches the same node's JVM object, only for an expression the JSON
        reader does not cover (:func:`_spark_sql` raises :class:`_NoJson`)."""
        kind = _short(p["class"])
        kids = p["_children"]

        def child(i: int) -> Callable[[], Any]:
            return lambda: jnode().children().apply(i)

        if kind == "LocalRelation":
            out = [_json_tree(a) for a in p.get("output") or []]
            # Spark's JSON drops column metadata: a leaf is known by the id of its last column,
            # or (a relation the analyser renumbered, e.g. one side of a self-union) asked for
            leaf = self.leaf_ids.get(_expr_id(out[-1])) if out else None
            if leaf is None and out:
                leaf = _leaf_name(jnode())
            if leaf is None or leaf not in self.tables:
                raise Untranslatable("the body reads a DataFrame from outside the loop other than through dd_* operators")
            name, cols = self.tables[leaf]
            if [a.get("name") for a in out] != list(cols):  # pragma: no cover - leaves are read whole
                raise Untranslatable("internal: a loop leaf read with other columns")
            expanded = self._expand(cols)
            return Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded, (name, expanded),
                            ("leaf", name, expanded))
        if kind == "SubqueryAlias":
            return self._json_node(kids[0], child(0))
        if kind == "Project":
            child_rel = self._json_node(kids[0], child(0))
            self._unique(child_rel)
            items: list[str] = []
            names: list[str] = []
            arrows: list[Any] | None = [] if child_rel.arrow is not None else None
            picked: list[str] | None = [] if child_rel.picks is not None else None
            for j, flat in enumerate(p["projectList"]):
                e = _json_tree(flat)
                name = e["name"]
                ekind = _short(e["class"])
                inner = e["_children"][0] if ekind == "Alias" else e
                inner_kind = _short(inner["class"])
                if inner_kind == "AttributeReference" and inner["name"] == TIME:
                    if name != TIME:
                        raise Untranslatable("the body renames `time`")
                    self._time_items(items, names, arrows, picked)
                    continue

                def jexpr(j: int = j, alias: bool = ekind == "Alias") -> Any:
                    item = jnode().projectList().apply(j)
                    return item.child() if alias else item

                sql, arrow = self._json_expr(inner, jexpr)
                items.append(f"{sql} AS {quote(name)}")
                names.append(name)
                if arrows is not None:
                    arrows = None if arrow is None else [*arrows, arrow]
                if picked is not None and child_rel.picks is not None and inner_kind == "AttributeReference":
                    picked.append(child_rel.picks[1][child_rel.columns.index(inner["name"])])
                else:
                    picked = None
            a = self._alias()
            picks = (child_rel.picks[0], tuple(picked)) if picked is not None and child_rel.picks is not None else None
            program = None if arrows is None else ("project", child_rel.arrow, tuple(names), tuple(arrows))
            return Relation(f"SELECT {', '.join(items)} FROM ({child_rel.sql}) AS {a}", tuple(names), picks, program)
        if kind == "Filter":
            child_rel = self._json_node(kids[0], child(0))
            self._unique(child_rel)
            a = self._alias()
            sql, arrow = self._json_expr(_json_tree(p["condition"]), lambda: jnode().condition())
            program = None if arrow is None or child_rel.arrow is None else ("filter", child_rel.arrow, arrow)
            return Relation(f"SELECT * FROM ({child_rel.sql}) AS {a} WHERE {sql}", child_rel.columns, None, program)
        if kind == "Union":
            parts = [self._json_node(k, child(i)) for i, k in enumerate(kids)]
            if p.get("byName") or p.get("allowMissingCol"):  # pragma: no cover - resolved by the analyser
                raise Untranslatable("a union by name that the analyser left unresolved")
            sql = " UNION ALL ".join(f"SELECT * FROM ({r.sql}) AS {self._alias()}" for r in parts)
            program = (None if any(r.arrow is None for r in parts)
                       else ("union", parts[0].columns, tuple(r.arrow for r in parts)))
            return Relation(sql, parts[0].columns, None, program)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _json_expr(self, e: dict[str, Any], jexpr: Callable[[], Any]) -> tuple[str, tuple[Any, ...] | None]:
        """:meth:`_expr` of an expression read from the plan's JSON; the JVM object
        (``jexpr()``) only where :func:`_spark_sql` does not cover it."""
        if _references(e, TIME):
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        columns: dict[str, str] = {}
        try:
            text = _spark_sql(e, columns)
        except _NoJson:
            return self._expr(jexpr())
        return self._parsed(text, columns, lambda: jexpr().sql())

    def _time_items(self, items: list[str], names: list[str], arrows: list[Any] | None,
                    picked: list[str] | None) -> None:
        """A projection of ``time``: the loop's time leaves, passed through."""
        cols = leaves(self.width)
        items.extend(quote(c) for c in cols)
        names.extend(cols)
        if arrows is not None:
            arrows.extend(("col", c) for c in cols)
        if picked is not None:
            picked.extend(cols)

    def _renamed(self, e: Any, columns: dict[str, str]) -> Any:
        """``e`` with every column reference renamed ``_sdc<i>`` (``columns``: name -> safe name)."""
        kind = e.nodeName()
        if kind == "AttributeReference":
            return e.withName(columns.setdefault(e.name(), f"_sdc{len(columns)}"))
        children = _seq(e.children())
        if not children:
            return e
        renamed = self.jvm.java.util.ArrayList()
        for c in children:
            renamed.add(self._renamed(c, columns))
        return e.withNewChildren(self.jvm.org.apache.spark.api.python.PythonUtils.toSeq(renamed))

    @staticmethod
    def _unique(rel: Relation) -> None:
        if len(set(rel.columns)) != len(rel.columns):
            raise Untranslatable("two columns of one step share a name")

    def _expr(self, e: Any) -> tuple[str, tuple[Any, ...] | None]:
        """``e`` (a JVM expression) as DuckDB SQL, and as an Arrow expression (:func:`evaluate`) where it has one."""
        if any(a.name() == TIME for a in _seq(e.references().toSeq())):
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        # columns renamed to safe names first: Spark's SQL text quotes names only where
        # their characters need it, not keywords (a column `case`)
        columns: dict[str, str] = {}
        text = self._renamed(e, columns).sql()
        return self._parsed(text, columns, lambda: e.sql())

    def _parsed(self, text: str, columns: Mapping[str, str], original: Callable[[], str]) -> tuple[str, tuple[Any, ...] | None]:
        """Spark SQL ``text`` over the safe column names ``columns`` (name -> safe name) as
        DuckDB SQL and its Arrow form; ``original()``: the expression's own SQL, for messages."""
        import sqlglot
        from sqlglot import exp

        users = {safe: name for name, safe in columns.items()}
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except Exception as err:  # noqa: BLE001 - any parse failure means: not ours to run
            raise Untranslatable(f"cannot read the expression {text!r} ({err})") from None
        for node in tree.walk():
            kind = type(node).__name__
            if kind not in _EXPRESSIONS:
                raise Untranslatable(f"the expression {original()!r} uses {kind}, which the in-task path does not translate")
            if isinstance(node, exp.Literal) and node.is_string and "$" in node.this:
                # the in-task SQL names its tables $name (string.Template): not a literal's text
                raise Untranslatable(f"the expression {original()!r} has a string literal with a '$'")
            if isinstance(node, exp.Column):
                if node.name not in users:  # pragma: no cover - every column was renamed
                    raise Untranslatable(f"the expression {original()!r} reads an unknown column")
                node.set("table", None)
                node.set("this", exp.to_identifier(users[node.name], quoted=True))
            if self.ansi and isinstance(node, (exp.Div, exp.Mod)) and not _nonzero_literal(node.expression):
                raise Untranslatable(
                    f"the expression {original()!r} divides by a value that may be zero (Spark raises "
                    "DIVIDE_BY_ZERO under ANSI mode where DuckDB returns NULL)")
        if self.ansi:
            tree = tree.transform(lambda n: exp.Cast(this=n.this, to=n.args["to"]) if isinstance(n, exp.TryCast) else n)
        return tree.sql(dialect="duckdb"), (_arrow_expr(tree) if self.ansi else None)



def _nonzero_literal(node: Any) -> bool:
    """Whether the sqlglot expression ``node`` is a numeric literal other than zero (under casts and parentheses)."""
    from sqlglot import exp

    while isinstance(node, (exp.Cast, exp.TryCast, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Neg):
        return _nonzero_literal(node.this)
    if not (isinstance(node, exp.Literal) and not node.is_string):
        return False
    try:
        return float(node.this) != 0
    except ValueError:
        return False


# ---------------------------------------------------------------------------------
# The Arrow form of a relation: for the few shapes that loops use at every iteration
# (a projection that renames and does integer arithmetic, a null filter), one
# DuckDB query's fixed cost is most of the step's cost.  A program is nested tuples
# (``leaf``, ``project``, ``filter``, ``union`` over expressions of ``col``, ``lit``,
# integer arithmetic and casts, comparisons and Kleene logic), each with exactly
# Spark's ANSI meaning on the types it accepts.  Where a value's type is one it
# does not cover, evaluation raises :class:`NoArrow` and the caller runs the SQL.

_ARITH = {"Add": "add_checked", "Sub": "subtract_checked", "Mul": "multiply_checked"}
_COMPARE = {"EQ": "equal", "NEQ": "not_equal", "GT": "greater", "GTE": "greater_equal", "LT": "less",
            "LTE": "less_equal"}
_LOGIC = {"And": "and_kleene", "Or": "or_kleene"}
_INTEGERS = {"BIGINT": "int64", "INT": "int32", "SMALLINT": "int16", "TINYINT": "int8"}


class NoArrow(Exception):
    """A value of a type the Arrow form does not cover: run the relation's SQL instead."""


def _arrow_expr(node: Any) -> tuple[Any, ...] | None:
    """The Arrow form of a (DuckDB-dialect) sqlglot expression, or ``None``."""
    from sqlglot import exp

    kind = type(node).__name__
    if isinstance(node, exp.Paren):
        return _arrow_expr(node.this)
    if isinstance(node, exp.Column):
        return ("col", node.name)
    if isinstance(node, exp.Literal):
        if node.is_string or not node.this.lstrip("-").isdigit():
            return None  # strings and decimals: the SQL path
        value = int(node.this)
        return ("lit", value, "int32" if -(1 << 31) <= value < (1 << 31) else "int64")
    if isinstance(node, exp.Boolean):
        return ("lit", bool(node.this), "bool")
    if isinstance(node, exp.Cast):
        target = _INTEGERS.get(node.args["to"].this.name if hasattr(node.args["to"].this, "name") else str(node.args["to"].this))
        inner = _arrow_expr(node.this)
        if target is None or inner is None:
            return None
        return ("cast", inner, target)
    if kind in _ARITH or kind in _COMPARE or kind in _LOGIC:
        left, right = _arrow_expr(node.this), _arrow_expr(node.expression)
        if left is None or right is None:
            return None
        return ("call", _ARITH.get(kind) or _COMPARE.get(kind) or _LOGIC[kind], left, right)
    if isinstance(node, exp.Neg):
        inner = _arrow_expr(node.this)
        return None if inner is None else ("call1", "negate_checked", inner)
    if isinstance(node, exp.Not):
        inner = _arrow_expr(node.this)
        return None if inner is None else ("call1", "invert", inner)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = _arrow_expr(node.this)
        return None if inner is None else ("call1", "is_null", inner)
    return None


def _value(e: tuple[Any, ...], table: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    op = e[0]
    if op == "col":
        return table.column(e[1])
    if op == "lit":
        return pa.scalar(e[1], getattr(pa, e[2])())
    if op == "cast":
        inner = _value(e[1], table)
        if not pa.types.is_integer(inner.type):
            raise NoArrow(f"a cast from {inner.type}")
        return pc.cast(inner, getattr(pa, e[2])(), safe=True)  # out of range raises, as ANSI Spark does
    if op == "call1":
        inner = _value(e[2], table)
        if e[1] == "negate_checked" and not pa.types.is_integer(inner.type):
            raise NoArrow(f"arithmetic on {inner.type}")
        if e[1] == "invert" and not pa.types.is_boolean(inner.type):
            raise NoArrow(f"NOT on {inner.type}")
        return getattr(pc, e[1])(inner)
    left, right = _value(e[2], table), _value(e[3], table)
    lt, rt = left.type, right.type
    if e[1] in _LOGIC.values():
        ok = pa.types.is_boolean(lt) and pa.types.is_boolean(rt)
    elif e[1] in _ARITH.values():
        ok = lt == rt and pa.types.is_integer(lt)  # Spark's analyser casts both sides to one type
    else:  # comparisons: no floating point (Spark orders NaN above every number and NaN = NaN)
        ok = lt == rt and (pa.types.is_integer(lt) or pa.types.is_string(lt) or pa.types.is_boolean(lt)
                           or pa.types.is_date(lt))
    if not ok:
        raise NoArrow(f"{e[1]} on {lt} and {rt}")
    return getattr(pc, e[1])(left, right)


def evaluate(program: tuple[Any, ...], tables: Mapping[str, Any]) -> Any:
    """Run the Arrow form of a relation over ``tables`` (name -> Arrow table); raises :class:`NoArrow`."""
    import pyarrow as pa

    op = program[0]
    if op == "leaf":
        table = tables[program[1]]
        return pa.Table.from_arrays([table.column(c) for c in program[2]], names=list(program[2]))
    if op == "project":
        child = evaluate(program[1], tables)
        n = child.num_rows
        arrays = []
        for e in program[3]:
            v = _value(e, child)
            arrays.append(pa.repeat(v, n) if isinstance(v, pa.Scalar) else v)
        return pa.Table.from_arrays(arrays, names=list(program[2]))
    if op == "filter":
        child = evaluate(program[1], tables)
        mask = _value(program[2], child)
        if isinstance(mask, pa.Scalar) or not pa.types.is_boolean(mask.type):
            raise NoArrow("a filter that is not a boolean column")
        return child.filter(mask)  # null: the row is dropped, as SQL's WHERE does
    parts = [evaluate(p, tables) for p in program[2]]
    first = parts[0].schema
    if any(p.schema.types != first.types for p in parts[1:]):
        raise NoArrow("a union of differently typed parts")
    return pa.concat_tables([p.rename_columns(list(program[1])) for p in parts])
