"""Linear steps of a ``dd_iterate`` body as DuckDB SQL, for loops run inside one task.

On ``(data, time, diff)``: a linear step (``select``/``where``/``withColumn``/
``unionByName`` keeping ``time`` and ``diff``) maps each update on its own, so it
can run on Arrow tables of updates as well as on Spark DataFrames.  This module
reads the Spark plan between the leaves of a recorded body (the loop variable, the
outputs of its ``dd_*`` operators) and a DataFrame built from them, and writes the
same computation as one DuckDB query over tables named after those leaves.

Inside a loop ``time`` is passed through untouched (the body may not look into it),
so in the tables it is not one column but the encoded int64 leaves of the outer
time, ``_sd_t0 …`` (:func:`leaves`), and a projection of ``time`` expands to them.

Only what is translated exactly is accepted: ``Project``, ``Filter``, ``Union`` and
aliases over the leaves, with expressions made of columns, literals, casts,
arithmetic, comparisons, boolean logic, ``CASE``/``IF``, ``coalesce``, ``least``,
``greatest``, ``abs`` and a few string functions (sqlglot translates Spark SQL to
DuckDB's).  Anything else raises :class:`Untranslatable` with the reason, and the
loop runs on the distributed path instead.  This reader is for classic sessions (a
Spark Connect DataFrame has no analysed plan in this process);
:mod:`spark_differential.intask.translate_connect` reads a Connect client's plan into the
same :class:`Relation` s.

The parts: :class:`Translator` reads the analysed plan, from Spark's JSON of it
(:mod:`spark_differential.intask.plan_json`) or node by node over py4j; what it writes,
and the Connect reader too, is in :mod:`spark_differential.intask.relation`
(:class:`Relation`, the shared :class:`~spark_differential.intask.relation.RelationWriter`)
and :mod:`spark_differential.intask.arrow_program` (a relation's Arrow form,
:func:`evaluate`).  The names the in-task loop and pipeline import are all here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spark_differential.core.collection import TIME
from spark_differential.intask.plan_json import NoJson, expr_id, json_tree, kind_of, references, spark_sql
from spark_differential.intask.relation import (
    Projection,
    Relation,
    RelationWriter,
    Untranslatable,
)

__all__ = ["LEAF_KEY", "Translator", "placeholder", "plan_of"]

LEAF_KEY = "spark_differential.leaf"


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
    out = _seq(p.output())
    if not out:
        return None
    return json.loads(out[-1].metadata().json()).get(LEAF_KEY)


class Translator(RelationWriter):
    """Translate DataFrames built from leaves into :class:`Relation` s.

    ``jvm``: the session's py4j JVM view; ``tables``, ``width``, ``ansi``: as for
    :class:`~spark_differential.intask.relation.RelationWriter` (``tables``: each leaf's
    name -> (table name, its columns as in the Spark plan, ``time`` included)).
    """

    def __init__(self, jvm: Any, tables: Mapping[str, tuple[str, Sequence[str]]], width: int, ansi: bool = True,
                 use_json: bool = True) -> None:
        super().__init__(tables, width, ansi)
        self.jvm = jvm
        self.use_json = use_json  # False: read the plan over py4j node by node (the reference the JSON path is tested against)
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
            self.leaf_ids[expr_id(json_tree(nodes[0]["output"][-1]))] = name

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
        rel = self._node(jplan) if nodes is None else self._json_node(json_tree(nodes), lambda: jplan)
        return rel if columns is None else self._pick(rel, columns)

    def _node(self, p: Any) -> Relation:
        if self.node_plans:
            leaf = next((n for jp, n in self.node_plans.get(int(p.hashCode()), ()) if p.equals(jp)), None)
            if leaf is not None:
                return self._leaf(*self.tables[leaf])
        kind = p.nodeName()
        if kind == "LocalRelation":
            leaf = _leaf_name(p)
            if leaf is None or leaf not in self.tables:
                raise Untranslatable("the body reads a DataFrame from outside the loop other than through dd_* operators")
            name, cols = self.tables[leaf]
            names = [a.name() for a in _seq(p.output())]
            if names != list(cols):  # pragma: no cover - leaves are read whole
                raise Untranslatable("internal: a loop leaf read with other columns")
            return self._leaf(name, cols)
        if kind == "SubqueryAlias":
            return self._node(p.child())
        if kind == "Project":
            child = self._node(p.child())
            self._unique(child)
            proj = Projection(child)
            for e in _seq(p.projectList()):
                name = e.name()
                # one py4j round trip per JVM call: each kind asked once (nodeName, not getClass().getSimpleName())
                kind = e.nodeName()
                inner = e.child() if kind == "Alias" else e
                inner_kind = inner.nodeName() if kind == "Alias" else kind
                if inner_kind == "AttributeReference" and inner.name() == TIME:
                    if name != TIME:
                        raise Untranslatable("the body renames `time`")
                    proj.time(self.width)
                    continue
                sql, arrow = self._expr(inner)
                # the column's name asked for only while the projection still picks columns
                proj.add(sql, name, arrow, inner.name() if proj.picked is not None and inner_kind == "AttributeReference"
                         else None)
            return self._projected(proj)
        if kind == "Filter":
            child = self._node(p.child())
            self._unique(child)
            return self._filtered(child, lambda: self._expr(p.condition()))
        if kind == "Union":
            parts = [self._node(c) for c in _seq(p.children())]
            if p.byName() or p.allowMissingCol():  # pragma: no cover - resolved by the analyser
                raise Untranslatable("a union by name that the analyser left unresolved")
            return self._union(parts)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _json_node(self, p: dict[str, Any], jnode: Callable[[], Any]) -> Relation:
        """:meth:`_node` over Spark's JSON of the plan (``p``, from
        :func:`~spark_differential.intask.plan_json.json_tree`).

        ``jnode`` fetches the same node's JVM object, only for an expression the JSON
        reader does not cover (:func:`~spark_differential.intask.plan_json.spark_sql`
        raises :class:`~spark_differential.intask.plan_json.NoJson`)."""
        kind = kind_of(p["class"])
        kids = p["_children"]

        def child(i: int) -> Callable[[], Any]:
            return lambda: jnode().children().apply(i)

        if kind == "LocalRelation":
            out = [json_tree(a) for a in p.get("output") or []]
            # Spark's JSON drops column metadata: a leaf is known by the id of its last column,
            # or (a relation the analyser renumbered, e.g. one side of a self-union) asked for
            leaf = self.leaf_ids.get(expr_id(out[-1])) if out else None
            if leaf is None and out:
                leaf = _leaf_name(jnode())
            if leaf is None or leaf not in self.tables:
                raise Untranslatable("the body reads a DataFrame from outside the loop other than through dd_* operators")
            name, cols = self.tables[leaf]
            if [a.get("name") for a in out] != list(cols):  # pragma: no cover - leaves are read whole
                raise Untranslatable("internal: a loop leaf read with other columns")
            return self._leaf(name, cols)
        if kind == "SubqueryAlias":
            return self._json_node(kids[0], child(0))
        if kind == "Project":
            child_rel = self._json_node(kids[0], child(0))
            self._unique(child_rel)
            proj = Projection(child_rel)
            for j, flat in enumerate(p["projectList"]):
                e = json_tree(flat)
                name = e["name"]
                ekind = kind_of(e["class"])
                inner = e["_children"][0] if ekind == "Alias" else e
                inner_kind = kind_of(inner["class"])
                if inner_kind == "AttributeReference" and inner["name"] == TIME:
                    if name != TIME:
                        raise Untranslatable("the body renames `time`")
                    proj.time(self.width)
                    continue

                def jexpr(j: int = j, alias: bool = ekind == "Alias") -> Any:
                    item = jnode().projectList().apply(j)
                    return item.child() if alias else item

                sql, arrow = self._json_expr(inner, jexpr)
                proj.add(sql, name, arrow, inner["name"] if inner_kind == "AttributeReference" else None)
            return self._projected(proj)
        if kind == "Filter":
            child_rel = self._json_node(kids[0], child(0))
            self._unique(child_rel)
            return self._filtered(child_rel, lambda: self._json_expr(json_tree(p["condition"]), lambda: jnode().condition()))
        if kind == "Union":
            parts = [self._json_node(k, child(i)) for i, k in enumerate(kids)]
            if p.get("byName") or p.get("allowMissingCol"):  # pragma: no cover - resolved by the analyser
                raise Untranslatable("a union by name that the analyser left unresolved")
            return self._union(parts)
        raise Untranslatable(f"the body uses a {kind} step between dd_* operators (only select/where/withColumn/unions run in one task)")

    def _json_expr(self, e: dict[str, Any], jexpr: Callable[[], Any]) -> tuple[str, tuple[Any, ...] | None]:
        """:meth:`_expr` of an expression read from the plan's JSON; the JVM object
        (``jexpr()``) only where :func:`~spark_differential.intask.plan_json.spark_sql` does not cover it."""
        if references(e, TIME):
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        columns: dict[str, str] = {}
        try:
            text = spark_sql(e, columns)
        except NoJson:
            return self._expr(jexpr())
        return self._parsed(text, columns, lambda: jexpr().sql())

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

    def _expr(self, e: Any) -> tuple[str, tuple[Any, ...] | None]:
        """``e`` (a JVM expression) as DuckDB SQL, and as an Arrow expression (:func:`evaluate`) where it has one."""
        if any(a.name() == TIME for a in _seq(e.references().toSeq())):
            raise Untranslatable("the body computes with `time` (it may only pass it through)")
        # columns renamed to safe names first: Spark's SQL text quotes names only where
        # their characters need it, not keywords (a column `case`)
        columns: dict[str, str] = {}
        text = self._renamed(e, columns).sql()
        return self._parsed(text, columns, lambda: e.sql())
