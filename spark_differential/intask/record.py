"""Recording a ``dd_iterate`` body as a program one task can run.

On ``(data, time, diff)`` nothing runs here.  The body is called once on empty placeholder
DataFrames while a :class:`Recorder` is the innermost handler of
:mod:`spark_differential.engine.call`: every stateful call on the loop's collections
becomes a :class:`~.program.Stateful` step (its kernel, its parameters, which of its
inputs vary with the loop and which come from outside) and returns a fresh placeholder,
every ``dd_concat`` a :class:`~.program.Concat` step; the linear steps between them
(``select``, ``where``, ``withColumn``, unions) are read from the Spark plan and translated
to DuckDB SQL (:mod:`.translate` on a classic session, :mod:`.translate_connect` on Spark
Connect).  Calls on collections from outside the loop pass to the handler below (they
become sources of the program).  Anything not covered raises
:class:`~.translate.Untranslatable`: the loop then runs distributed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema
from spark_differential.core.lattice import Loop, TimeType, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.session import is_connect
from spark_differential.engine.call import Below, ConcatCall, Handler, LoopCall, StatefulCall, handling
from spark_differential.engine.kernel_form import Input, arrow_schema, kernel_fields, time_fields
from spark_differential.intask.program import Concat, Program, Stateful, StepInput
from spark_differential.intask.relation import Relation, Untranslatable, leaves
from spark_differential.intask.translate import Translator, placeholder
from spark_differential.intask.translate_connect import ConnectTranslator
from spark_differential.kernels.common import NEW

pa = lazy("pyarrow")


def translator_for(spark: Any, tables: dict[str, tuple[str, Sequence[str]]], width: int,
                   use_json: bool = True) -> Translator:
    """The session's reader of linear steps into DuckDB SQL over ``tables``: on Spark
    Connect the client's plan, read in this process (:mod:`.translate_connect`), else the
    analysed plan (``use_json``: in one py4j round trip, as Spark's JSON)."""
    ansi = settings.ansi(spark)
    if is_connect(spark):
        return ConnectTranslator(spark, tables, width, ansi=ansi)
    return Translator(spark._jvm, tables, width, ansi=ansi, use_json=use_json)


class KernelSchemas:
    """The Arrow schemas of a recorded program's steps, with the session's settings (the
    large-types setting asked once).  Needs ``self.spark``."""

    spark: Any
    _large: bool | None = None

    def _schema(self, fields: Sequence[Any]) -> pa.Schema:
        if self._large is None:  # the session's setting, asked once per recording
            self._large = settings.large_var_types(self.spark)
        return arrow_schema(self.spark, T.StructType(list(fields)), large=self._large)

    def _input_schema(self, inp: Input, kernel_type: TimeType) -> pa.Schema:
        """A step input's kernel columns: keys, data, time leaves, diff, ``_new``."""
        return self._schema([*kernel_fields(inp), *time_fields(kernel_type), T.StructField(NEW, T.BooleanType())])


class Recorder(Handler, KernelSchemas):
    """Collects the steps of one body while it is called on placeholders (a handler of the
    loop's calls; the rest pass below)."""

    records = True

    def __init__(self, spark: Any, loop_t: Loop, cs: CollectionSchema, roots: DataFrame) -> None:
        self.spark = spark
        self.loop_t = loop_t
        self.width = loop_t.inner.width
        self.steps: list[Stateful | Concat] = []
        self.tables: dict[str, tuple[str, Sequence[str]]] = {}
        # (DataFrame, its CollectionSchema) of the roots (source 0, also when the body reads them
        # again, as BFS concatenates its roots) and of every outer collection the body reads
        self.sources: list[tuple[DataFrame, CollectionSchema]] = [(roots, cs)]
        self.connect = is_connect(spark)
        self.translator: Translator = translator_for(spark, self.tables, self.width)
        self._large: bool | None = None
        self.loop_var = self.placeholder("v", [cs.field(c) for c in cs.data_cols])

    # -- the seam -------------------------------------------------------------------------
    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if not call.in_loop:
            return below(call)
        return self._stateful(call)

    def concat(self, call: ConcatCall, below: Below) -> DataFrame:
        if not call.in_loop:
            return below(call)
        return self._concat(call)

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        if isinstance(call.cs.ttype, Loop):
            raise Untranslatable("the body nests a dd_iterate")
        return below(call)

    # -- recording ------------------------------------------------------------------------
    def placeholder(self, name: str, fields: Sequence[T.StructField]) -> DataFrame:
        schema = T.StructType([
            *[T.StructField(f.name, f.dataType, True) for f in fields],
            T.StructField(TIME, self.loop_t.spark_type(), True),
            T.StructField(DIFF, T.LongType(), True),
        ])
        # Connect: an empty local relation, known by its plan node (no RPC to build it)
        df = self.spark.createDataFrame([], schema) if self.connect else placeholder(self.spark, schema, name)
        self.translator.known(df, name)
        self.tables[name] = (name, [*[f.name for f in fields], TIME, DIFF])
        return df

    def source(self, df: DataFrame, cs: CollectionSchema, ttype: TimeType) -> int:
        if ttype != self.loop_t.inner or cs.ttype != ttype:
            raise Untranslatable(f"an outer collection enters at {ttype.describe()}, not the loop's time type")
        for i, (d, _) in enumerate(self.sources):
            if d is df:
                return i
        self.sources.append((df, cs))
        return len(self.sources) - 1

    def _stateful(self, call: StatefulCall) -> DataFrame:
        op, kernel_type = call.op, call.kernel_type
        if kernel_type != self.loop_t.inner:
            raise Untranslatable(f"{op} works over {kernel_type.describe()}, not the loop's outer time")
        shape = call.shape
        if shape is None:
            raise Untranslatable(f"{op} has no in-task form")
        if any(e.loop_id not in (None, self.loop_t.loop_id) for e in call.entries):
            raise Untranslatable(f"{op} reads a collection of an enclosing loop")
        keep = shape.keeps([e.loop_id is not None for e in call.entries])
        step_inputs = []
        for inp, e, kp in zip(call.inputs, call.entries, keep):
            if inp.time_type != kernel_type:
                raise Untranslatable(f"{op}: an input enters through a time conversion")
            schema = self._input_schema(inp, kernel_type)
            if e.loop_id is None:
                rel, src = None, self.source(inp.df, inp.cs, kernel_type)
            else:
                rel, src = self.translator.relation(inp.df), None
            step_inputs.append(StepInput(rel, src, tuple(inp.keys), tuple(inp.data), inp.prefix, schema, kp))
        name = f"n{len(self.steps)}"
        out_schema = self._schema([*call.out_fields, *time_fields(kernel_type)])
        self.steps.append(Stateful(name, call.kernel, call.params, shape.key, tuple(step_inputs), out_schema,
                                   call.out_columns, self.width))
        return self.placeholder(name, call.user_fields()[:-2])

    def _concat(self, call: ConcatCall) -> DataFrame:
        data = list(call.schemas[0].data_cols)
        parts: list[tuple[Relation | None, int | None]] = []
        for d, cs, e in zip(call.dfs, call.schemas, call.entries):
            if e.loop_id is None:
                parts.append((None, self.source(d, cs, cs.ttype)))
            elif e.loop_id == self.loop_t.loop_id:
                rel = self.translator.relation(d, [*data, TIME, DIFF])  # no select DataFrame built to be read
                parts.append((rel, None))
            else:
                raise Untranslatable("dd_concat reads a collection of an enclosing loop")
        name = f"n{len(self.steps)}"
        cols = (*data, *leaves(self.width), DIFF)
        self.steps.append(Concat(name, tuple(parts), cols))
        return self.placeholder(name, [call.schemas[0].field(c) for c in data])

    def program(self, out: DataFrame, cs: CollectionSchema, max_iterations: int | None, limit: int) -> Program:
        data = list(cs.data_cols)
        output = self.translator.relation(out, [*data, TIME, DIFF])
        roots = self._schema([
            *[cs.field(c) for c in data],
            *[T.StructField(c, T.LongType(), True) for c in leaves(self.width)],
            T.StructField(DIFF, T.LongType(), True),
        ])
        sources = tuple((*scs.data_cols, *leaves(self.width), DIFF) for _, scs in self.sources)
        chunk_rows = settings.chunk_rows(self.spark) if isinstance(cs.ttype, Total) else 0
        return Program(tuple(self.steps), output, tuple(data), self.width, roots, sources, max_iterations, limit,
                       chunk_rows, threads=settings.local_threads(self.spark),
                       thread_min_rows=settings.thread_min_rows(self.spark))


def record(roots: DataFrame, loop_t: Loop, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame],
           check: Callable[[Any], DataFrame], max_iterations: int | None,
           limit: int) -> tuple[Program, list[DataFrame]]:
    """Call ``body`` once on placeholders, the recorder the innermost handler; the program and
    its sources (the roots first).  ``check`` checks the body's result."""
    rec = Recorder(roots.sparkSession, loop_t, cs, roots)
    with handling(rec):
        out = check(body(rec.loop_var))
    return rec.program(out, cs, max_iterations, limit), [d for d, _ in rec.sources]
