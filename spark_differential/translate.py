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
loop runs on the distributed path instead.  Classic sessions only: a Spark
Connect DataFrame has no analysed plan to read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .collection import TIME

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


class Translator:
    """Translate DataFrames built from leaves into :class:`Relation` s.

    ``jvm``: the session's py4j JVM view; ``tables``: each leaf's name -> (table name, its columns as in the Spark plan,
    ``time`` included); ``width``: the number of encoded time leaves; ``ansi``:
    whether Spark's casts fail on bad input (DuckDB ``CAST``) or give null (``TRY_CAST``).
    """

    def __init__(self, jvm: Any, tables: Mapping[str, tuple[str, Sequence[str]]], width: int, ansi: bool = True) -> None:
        self.jvm = jvm
        self.tables = tables  # read at translation time: the recorder adds leaves as it goes
        self.width = width
        self.ansi = ansi
        self._n = 0

    def relation(self, df: Any) -> Relation:
        return self._node(plan_of(df))

    def _alias(self) -> str:
        self._n += 1
        return f"_s{self._n}"

    def _expand(self, names: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for n in names:
            out.extend(leaves(self.width) if n == TIME else [n])
        return tuple(out)

    def _node(self, p: Any) -> Relation:
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
                    items.extend(quote(c) for c in leaves(self.width))
                    names.extend(leaves(self.width))
                    if arrows is not None:
                        arrows.extend(("col", c) for c in leaves(self.width))
                    if picked is not None:
                        picked.extend(leaves(self.width))
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
        """``e`` as DuckDB SQL, and as an Arrow expression (:func:`evaluate`) where it has one."""
        import sqlglot
        from sqlglot import exp

        if any(a.name() == TIME for a in _seq(e.references().toSeq())):
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        # columns renamed to safe names first: Spark's SQL text quotes names only where
        # their characters need it, not keywords (a column `case`)
        columns: dict[str, str] = {}
        text = self._renamed(e, columns).sql()
        users = {safe: name for name, safe in columns.items()}
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except Exception as err:  # noqa: BLE001 - any parse failure means: not ours to run
            raise Untranslatable(f"cannot read the expression {text!r} ({err})") from None
        for node in tree.walk():
            kind = type(node).__name__
            if kind not in _EXPRESSIONS:
                raise Untranslatable(f"the expression {e.sql()!r} uses {kind}, which the in-task path does not translate")
            if isinstance(node, exp.Column):
                if node.name not in users:  # pragma: no cover - every column was renamed
                    raise Untranslatable(f"the expression {e.sql()!r} reads an unknown column")
                node.set("table", None)
                node.set("this", exp.to_identifier(users[node.name], quoted=True))
        if self.ansi:
            tree = tree.transform(lambda n: exp.Cast(this=n.this, to=n.args["to"]) if isinstance(n, exp.TryCast) else n)
        return tree.sql(dialect="duckdb"), (_arrow_expr(tree) if self.ansi else None)



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
