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
            return Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded, (name, expanded))
        if kind == "SubqueryAlias":
            return self._node(p.child())
        if kind == "Project":
            child = self._node(p.child())
            self._unique(child)
            items: list[str] = []
            names: list[str] = []
            picked: list[str] | None = [] if child.picks is not None else None
            for e in _seq(p.projectList()):
                name = e.name()
                if self._is_time(e):
                    if name != TIME:
                        raise Untranslatable("the body renames `time`")
                    items.extend(quote(c) for c in leaves(self.width))
                    names.extend(leaves(self.width))
                    if picked is not None:
                        picked.extend(leaves(self.width))
                    continue
                inner = e.child() if e.getClass().getSimpleName() == "Alias" else e
                items.append(f"{self._expr(inner)} AS {quote(name)}")
                names.append(name)
                if picked is not None and child.picks is not None and inner.getClass().getSimpleName() == "AttributeReference":
                    picked.append(child.picks[1][child.columns.index(inner.name())])
                else:
                    picked = None
            a = self._alias()
            picks = (child.picks[0], tuple(picked)) if picked is not None and child.picks is not None else None
            return Relation(f"SELECT {', '.join(items)} FROM ({child.sql}) AS {a}", tuple(names), picks)
        if kind == "Filter":
            child = self._node(p.child())
            self._unique(child)
            a = self._alias()
            return Relation(f"SELECT * FROM ({child.sql}) AS {a} WHERE {self._expr(p.condition())}", child.columns)
        if kind == "Union":
            parts = [self._node(c) for c in _seq(p.children())]
            if p.byName() or p.allowMissingCol():  # pragma: no cover - resolved by the analyser
                raise Untranslatable("a union by name that the analyser left unresolved")
            sql = " UNION ALL ".join(f"SELECT * FROM ({r.sql}) AS {self._alias()}" for r in parts)
            return Relation(sql, parts[0].columns)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _renamed(self, e: Any, columns: dict[str, str]) -> Any:
        """``e`` with every column reference renamed ``_sdc<i>`` (``columns``: name -> safe name)."""
        kind = e.getClass().getSimpleName()
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

    @staticmethod
    def _is_time(e: Any) -> bool:
        kind = e.getClass().getSimpleName()
        if kind == "Alias":
            e = e.child()
            kind = e.getClass().getSimpleName()
        return kind == "AttributeReference" and e.name() == TIME

    def _expr(self, e: Any) -> str:
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
        return tree.sql(dialect="duckdb")
