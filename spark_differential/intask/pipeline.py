"""Small pipelines of ``dd_*`` operators run whole inside one Spark task.

On ``(data, time, diff)`` nothing changes: a stateful operator's output is its kernel
over all the updates of its inputs, wherever that runs.  What changes is the cost of a
pipeline on a small input.  Run operator by operator, each ``dd_*`` call is a shuffle
and a Python worker round trip of its own; a pipeline of a join and a count on ten
rows paid 1.55x, and a join, a count, a join and a min 2.12x the plain Spark pipeline
(``benchmarks/latency.py``), most of it Spark's fixed cost per stage, not data.  Here
the whole pipeline is one task of one stage, as a small ``dd_iterate`` loop is
(:mod:`spark_differential.intask`, whose recorded steps and kernels it reuses):

* **Remembering** (driver, no job): this module's :class:`Pipelines` is a base handler of
  :mod:`spark_differential.engine.call`.  A top-level stateful operator whose inputs may be
  small local rows (their plans only read local rows, through projections, filters and
  unions) is remembered: its kernel, parameters, inputs and output DataFrame (the
  latest 64 such operators, and the operators fused after them).
* **Fusing**: an operator with an input built on a remembered output (directly or
  through ``select``/``where``/``withColumn``/unions, read from the Spark plan and
  translated to DuckDB SQL as a loop body's linear steps are,
  :mod:`spark_differential.intask.translate`) returns, instead of its own stage, one
  ``mapInArrow`` over its sources tagged and brought to one partition, which runs
  every operator of the pipeline, in order, on Arrow tables (:func:`evaluate`).  The
  first operator of a pipeline runs as it always did (a single operator gains
  nothing: 0.7-1.3x its plain equivalent); from the second on the pipeline is fused.
* A pipeline's sources must be known small before any job (:func:`held_rows`: local
  rows, and a Python list given to ``createDataFrame``, together at most
  ``spark_differential.pipeline.localRows`` rows).
* Anything not covered (a source not known to be small, an operator without an
  in-task form, an expression the translator does not cover, a time conversion)
  leaves the operator on the distributed path; one debug log line says why.  The
  result is the same rows either way (``tests/test_fused.py`` runs pipelines on both
  paths against the oracle).

``spark_differential.pipeline.localRows`` (default :data:`DEFAULT_ROWS`; ``0``: never
fuse) bounds the rows of a fused pipeline's sources, so that one Python worker holds
them; it is checked before any job, from the plan: a fused pipeline has no fallback
at run time (it is a lazy DataFrame like any other).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, integral_sql, qcols, quoted
from spark_differential.core.lazy import lazy
from spark_differential.core.names import SRC
from spark_differential.core.session import is_connect
from spark_differential.engine.call import Below, Handler, StatefulCall
from spark_differential.engine.kernel_form import time_fields
from spark_differential.intask.program import Stateful, StepInput, fault_hooked
from spark_differential.intask.record import KernelSchemas, translator_for
from spark_differential.intask.relation import Relation, Untranslatable, leaves, quote
from spark_differential.intask.sources import CONNECT_CACHED, CONNECT_HELD, HELD, held_rows, source_table, tag_source
from spark_differential.intask.step import kernel_input, relation_rows, user_named
from spark_differential.intask.translate import plan_of
from spark_differential.kernels.common import conform
from spark_differential.trace.arrow import consolidated

pc = lazy("pyarrow.compute")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.fused")

MAX_STEPS = 64  # operators in one fused pipeline (each later operator's call replays them all)
KEEP = 64  # remembered operator outputs (and the operators fused after them)
_NAME = re.compile(r"\$(p\d+)\b")
_COUNTER = itertools.count()


@dataclass(eq=False)
class Remembered:
    """A top-level stateful call whose output a later operator may read as a pipeline's step."""

    call: StatefulCall
    df: DataFrame | None = None  # the output, once known (on Spark Connect plans know it by its plan node)
    name: str = field(default_factory=lambda: f"p{next(_COUNTER)}")
    key: tuple[Any, int] | None = None  # classic: its analysed plan and that plan's hash code (read on first use)
    dead: bool = False  # it cannot be part of a pipeline (its sources or steps): not read as a leaf
    # its inputs once read (_Builder.inputs): a relation over remembered outputs, or a source's rows
    read: list[tuple[Relation | None, int]] | None = None
    deps: dict[str, Remembered] = field(default_factory=dict)  # the remembered outputs its relations read

    def answer_fields(self, width: int) -> list[T.StructField]:
        """The fused task's output fields: the data's, the time's ``width`` leaves, diff."""
        return [*self.call.user_fields()[:-2], *[T.StructField(n, T.LongType(), True) for n in leaves(width)],
                T.StructField(DIFF, T.LongType(), True)]


class Pipelines(Handler):
    """The handler fusing small pipelines of top-level operators into one task (a base handler
    of :mod:`spark_differential.engine.call`, above the distributed executor).

    It remembers the latest :data:`KEEP` top-level operator outputs whose inputs may be small
    local rows: a pipeline's later operators read the plan of an output, which outlives the
    DataFrame object the operator returned, so nothing tells when an output is no longer read.
    An operator reading a remembered output becomes, with the operators it is built on, one
    task (:func:`_fused`); any other call goes below unchanged."""

    def __init__(self) -> None:
        self._remembered: OrderedDict[str, Remembered] = OrderedDict()
        self._lock = threading.Lock()

    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if call.in_loop or call.shape is None:
            return below(call)
        r = Remembered(call)
        one_task, keep = self._attempt(r)
        r.df = one_task if one_task is not None else below(call)
        if keep:
            self._remember(r)
        return r.df

    def _remember(self, r: Remembered) -> None:
        """Remember ``r``: plans built on its output read it as a leaf (no py4j round trip here:
        a classic output's plan is read when first needed)."""
        with self._lock:
            self._remembered[r.name] = r
            while len(self._remembered) > KEEP:
                self._remembered.popitem(last=False)

    def used(self, r: Remembered) -> None:
        with self._lock:
            if r.name in self._remembered:
                self._remembered.move_to_end(r.name)

    def alive(self, spark: Any) -> list[Remembered]:
        with self._lock:
            kept = list(self._remembered.values())
        return [r for r in kept if r.df is not None and r.df.sparkSession is spark and not r.dead]

    def _attempt(self, last: Remembered) -> tuple[DataFrame | None, bool]:
        """``(the call's output as a fused pipeline, or None; whether to remember its output)``:
        ``None, True`` when the operator may start a pipeline (its inputs may be small
        sources), ``None, False`` when it cannot be part of one."""
        call = last.call
        spark = call.inputs[0].df.sparkSession
        connect = is_connect(spark)
        alive = self.alive(spark)
        plans = [_kinds(inp.df) for inp in call.inputs]
        if not alive or not any(_reads_remembered(k, i, alive, connect) for k, i in plans):
            # it may start a pipeline: remembered (no cost until a later operator reads it)
            return None, all(_may_be_small(k, connect) for k, _ in plans)
        limit = settings.pipeline_rows(spark)
        if limit == 0:
            return None, False
        builder = _Builder(self, spark, call.kernel_type.width, limit)
        try:
            pipeline = builder.pipeline(last)
        except Untranslatable as e:
            log.debug("%s: not fused into one task: %s", call.op, e)
            return None, False
        if len(pipeline.steps) < 2:
            return None, True
        out = _dataframe(spark, last, pipeline, builder.sources, builder.readers)
        log.info("%s: a pipeline of %d operators runs inside one task (at most %d source rows)", call.op,
                 len(pipeline.steps), builder.rows)
        return out, True


# plans that may only read local rows (their rows are counted when a pipeline is built):
# what a loop's task reads itself, but for cached tables (whose rows no plan says)
_HELD_KINDS = HELD - {"InMemoryRelation"}
_CONNECT_HELD_KINDS = CONNECT_HELD - CONNECT_CACHED
_CONNECT_CHILDREN = ("_child", "other", "left", "right")
_TREE_LINE = re.compile(r"^[\s:|+\-]*(\w+)", re.MULTILINE)


def _kinds(df: Any) -> tuple[set[str], set[int]]:
    """The kinds of the nodes of ``df``'s plan (classic: the analysed plan's, from its text,
    three py4j round trips; Spark Connect: the client's plan, no RPC) and, on Spark
    Connect, the ids of its plan nodes."""
    if is_connect(df):
        kinds: set[str] = set()
        ids: set[int] = set()
        todo = [df._plan]
        while todo:
            p = todo.pop()
            kinds.add(type(p).__name__)
            ids.add(id(p))
            todo += [c for c in (getattr(p, a, None) for a in _CONNECT_CHILDREN) if c is not None]
        return kinds, ids
    try:
        return set(_TREE_LINE.findall(str(plan_of(df).toString()))), set()
    except Exception:  # noqa: BLE001 - not read: nothing is known of it
        return {"?"}, set()


def _reads_remembered(kinds: set[str], ids: set[int], recipes: Sequence[Remembered], connect: bool) -> bool:
    """Whether a plan (:func:`_kinds`) may read a remembered output: on Spark Connect, whether
    one of its nodes is one; on a classic session, whether it runs a ``mapInArrow`` (every
    operator's output does)."""
    if connect:
        return any(id(r.df._plan) in ids for r in recipes)
    return "MapInArrow" in kinds


def _may_be_small(kinds: set[str], connect: bool) -> bool:
    """Whether a plan (:func:`_kinds`) only reads local rows through projections, filters and
    unions (its rows are counted when a pipeline is built: :func:`held_rows`)."""
    if connect:
        return kinds <= _CONNECT_HELD_KINDS
    return kinds <= _HELD_KINDS


@dataclass(frozen=True)
class Pipeline:
    """What the task runs: the steps in order (``intask.program.Stateful``, sources indexed
    into the task's sources), the output relation, its data columns and time width."""

    steps: tuple[Any, ...]
    output: Relation
    data: tuple[str, ...]
    width: int
    out_schema: Any  # pa.Schema: data, time leaves, diff
    sources: tuple[tuple[str, ...], ...]  # each source's columns (data, leaves, diff)


# ---------------------------------------------------------------------------------
# sources known small without a job


# ---------------------------------------------------------------------------------
# building a pipeline (driver)


class _TooLarge(Untranslatable):
    """The pipeline's sources may hold more rows than one task should."""


class _Builder(KernelSchemas):
    """The steps of a pipeline ending at one operator, from the remembered outputs."""

    def __init__(self, handler: Pipelines, spark: Any, width: int, limit: int) -> None:
        self.handler = handler
        self.spark = spark
        self.width = width
        self.limit = limit
        self.connect = is_connect(spark)
        self.tables: dict[str, tuple[str, list[str]]] = {}
        self.sources: list[tuple[Any, CollectionSchema]] = []
        self.readers: list[str] = []
        self.rows = 0
        self.steps: list[Any] = []
        self.done: set[str] = set()
        self.recipes: dict[str, Remembered] = {}
        self.translator: Any = None

    def _know(self) -> None:
        """A translator that reads every live remembered output as a leaf."""
        if self.translator is not None:
            return
        # classic: node by node over py4j, not Spark's JSON of the plan, which writes the whole
        # plan under an operator's output (about 75 KB for one operator: 70-100 ms)
        self.translator = translator_for(self.spark, self.tables, self.width, use_json=False)
        for r in self.handler.alive(self.spark):
            if r.call.kernel_type.width != self.width:
                continue
            fields = r.call.user_fields()
            self.tables[r.name] = (r.name, [f.name for f in fields])
            self.recipes[r.name] = r
            if self.connect:
                self.translator.known_plan(r.df._plan, r.name, fields)
                continue
            if r.key is None:
                plan = plan_of(r.df)
                r.key = (plan, int(plan.hashCode()))
            self.translator.known_node(r.key[0], r.key[1], r.name)

    def source(self, df: Any, cs: CollectionSchema, rows: int, op: str) -> int:
        for i, (d, _) in enumerate(self.sources):
            if d is df:
                return i
        self.rows += rows
        if self.rows > self.limit:
            raise _TooLarge(f"its sources may hold more than {self.limit} rows ({settings.PIPELINE_ROWS})")
        self.sources.append((df, cs))
        self.readers.append(op)  # the operator a null time or diff of this source is reported for
        return len(self.sources) - 1

    def inputs(self, recipe: Remembered) -> list[tuple[Relation | None, int | None]]:
        """Each input of ``recipe`` as a small source, or a relation over remembered outputs
        (whose steps are added first); raises :class:`Untranslatable` otherwise.  What an
        input is, once read, is kept with the recipe: a later operator's pipeline re-reads
        no plan of the operators before it."""
        if recipe.read is None:
            read: list[tuple[Relation | None, int]] = []
            deps: dict[str, Remembered] = {}
            for inp in recipe.call.inputs:
                if inp.time_type != recipe.call.kernel_type or inp.time_col is not None or inp.new is not None:
                    raise Untranslatable(f"{recipe.call.op}: an input enters through a time conversion")
                rows = held_rows(inp.df)
                if rows is not None:
                    read.append((None, rows))
                    continue
                self._know()
                if not self.recipes:
                    raise Untranslatable(f"{recipe.call.op}: an input is neither small local rows nor built on an "
                                         "operator's output")
                rel = self.translator.relation(inp.df)
                deps.update({name: self.recipes[name] for name in _NAME.findall(rel.sql)})
                read.append((rel, 0))
            recipe.read, recipe.deps = read, deps
        out: list[tuple[Relation | None, int | None]] = []
        for inp, (rel, rows) in zip(recipe.call.inputs, recipe.read):
            if rel is None:
                out.append((None, self.source(inp.df, inp.cs, rows, recipe.call.op)))
                continue
            for name in dict.fromkeys(_NAME.findall(rel.sql)):
                self.add(recipe.deps[name])
            out.append((rel, None))
        return out

    def add(self, recipe: Remembered) -> None:
        """Add ``recipe``'s step (after the steps it reads)."""
        call = recipe.call
        if recipe.name in self.done:
            return
        if len(self.done) >= MAX_STEPS:
            raise _TooLarge(f"a pipeline of more than {MAX_STEPS} operators")
        shape = call.shape
        if shape is None:
            raise Untranslatable(f"{call.op} has no in-task form")
        if call.kernel_type.width != self.width:
            raise Untranslatable(f"{call.op} works over another time type")
        try:
            read = self.inputs(recipe)
        except _TooLarge:
            raise
        except Untranslatable:
            recipe.dead = True  # whatever reads it later: it is not small local rows through operators
            raise
        step_inputs = []
        for inp, (rel, src) in zip(call.inputs, read):
            step_inputs.append(StepInput(rel, src, tuple(inp.keys), tuple(inp.data), inp.prefix,
                                         self._input_schema(inp, call.kernel_type), False))
        out_schema = self._schema([*call.out_fields, *time_fields(call.kernel_type)])
        self.steps.append(Stateful(recipe.name, call.kernel, call.params, shape.key, tuple(step_inputs), out_schema,
                                   call.out_columns, self.width))
        self.done.add(recipe.name)
        self.handler.used(recipe)
        self.tables.setdefault(recipe.name, (recipe.name, [f.name for f in call.user_fields()]))

    def pipeline(self, recipe: Remembered) -> Pipeline:
        self.add(recipe)
        fields = recipe.call.user_fields()
        cols = self.tables[recipe.name][1]
        expanded = tuple(c for n in cols for c in (leaves(self.width) if n == TIME else [n]))
        output = Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${recipe.name}", expanded,
                          (recipe.name, expanded), ("leaf", recipe.name, expanded))
        data = tuple(f.name for f in fields[:-2])
        out_schema = self._schema(recipe.answer_fields(self.width))
        sources = tuple((*cs.data_cols, *leaves(self.width), DIFF) for _, cs in self.sources)
        return Pipeline(tuple(self.steps), output, data, self.width, out_schema, sources)


def _dataframe(spark: Any, recipe: Remembered, pipeline: Pipeline, sources: Sequence[tuple[Any, CollectionSchema]],
               readers: Sequence[str]) -> Any:
    """The lazy DataFrame running ``pipeline`` in one task over ``sources`` (``readers``: the
    operator reading each, named by its null checks)."""

    ttype = recipe.call.kernel_type
    union = None
    for j, ((df, cs), cols, op) in enumerate(zip(sources, pipeline.sources, readers)):
        part = tag_source(df, j, [c for c in cols if c not in (DIFF, *leaves(pipeline.width))], cs.ttype, op=op)
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    assert union is not None
    schema = T.StructType(recipe.answer_fields(pipeline.width))
    pipeline = dataclasses.replace(pipeline, steps=fault_hooked(spark, pipeline.steps))  # (a test-only switch)
    out = union.coalesce(1).mapInArrow(pipeline_task(pipeline, pipeline.out_schema), schema)
    data = list(pipeline.data)
    sql_type = integral_sql(ttype)
    if sql_type is not None:
        return out.selectExpr(*map(quoted, data), f"CAST({leaves(pipeline.width)[0]} AS {sql_type}) AS {TIME}", DIFF)
    time_col = ttype.decode_columns([F.col(n) for n in leaves(pipeline.width)])
    return out.select(*qcols(data), time_col.alias(TIME), F.col(DIFF))


# ---------------------------------------------------------------------------------
# running (executor)


def evaluate(pipeline: Pipeline, sources: Sequence[pa.Table]) -> pa.Table:
    """Every step of ``pipeline`` once, over all the updates of its inputs: the output
    collection, consolidated (``pipeline.out_schema``)."""

    tables: dict[str, pa.Table] = {}
    for step in pipeline.steps:
        sides = [kernel_input(sources[inp.source] if inp.relation is None else relation_rows(inp.relation, tables), inp,
                               True, pipeline.width) for inp in step.inputs]
        if any(s.num_rows for s in sides):
            out = conform(step.kernel(step.params, *sides), step.out_schema)
        else:
            out = step.out_schema.empty_table()
        tables[step.name] = user_named(step, out)
    result = relation_rows(pipeline.output, tables).rename_columns(pipeline.out_schema.names)
    return conform(consolidated(result, pipeline.out_schema.names[:-1]), pipeline.out_schema)


def pipeline_task(pipeline: Pipeline, out_schema: pa.Schema) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: read every source (tagged), run the pipeline, yield its output."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seen = list(batches)
        table = pa.Table.from_batches(seen) if seen else None
        if table is None or table.num_rows == 0:
            return
        tags = table.column(SRC)
        sources = [source_table(table.filter(pc.equal(tags, j)), j, cols) for j, cols in enumerate(pipeline.sources)]
        result = evaluate(pipeline, sources)
        yield from conform(result, out_schema).to_batches()

    return run


__all__ = ["KEEP", "MAX_STEPS", "Pipeline", "Pipelines", "Remembered", "evaluate"]
