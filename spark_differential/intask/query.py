"""A whole query over named collections recorded as a program one task can run (an incremental view's).

On ``(data, time, diff)`` nothing runs here.  The query is called once on empty
placeholder DataFrames, one per named input, while a :class:`QueryRecorder` is the
innermost handler of :mod:`spark_differential.engine.call`: every top-level stateful call
becomes a :class:`~.program.Stateful` step, every ``dd_concat`` a
:class:`~.program.Concat` step, and the linear steps between them (``select``, ``where``,
``withColumn``, unions) are read from the Spark plan and translated to DuckDB SQL, as a
loop body's are (:mod:`.record`).  The result, a :class:`QueryProgram`, names its inputs'
tables ``$q0``, ``$q1``… (user columns: data, the time's int64 leaves ``_sd_t*``, diff) and
its steps' outputs ``$n0``, ``$n1``…, so a task can run it over any updates of its inputs
(:mod:`spark_differential.incremental.onetask` runs it against a view's stored traces).

Anything the task cannot run raises :class:`~.relation.Untranslatable`: a ``dd_iterate``,
an operator without an in-task form, a time conversion, a collection built from anything
but the inputs, an expression the translator does not cover.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lattice import TimeType
from spark_differential.core.session import is_connect
from spark_differential.engine.call import Below, ConcatCall, Handler, LoopCall, StatefulCall, handling
from spark_differential.engine.kernel_form import time_fields
from spark_differential.intask.program import Concat, Stateful, StepInput
from spark_differential.intask.record import KernelSchemas, translator_for
from spark_differential.intask.relation import Relation, Untranslatable, leaves
from spark_differential.intask.translate import placeholder


@dataclass(frozen=True)
class QueryProgram:
    """A recorded query: its steps in call order (``ops``: each :class:`~.program.Stateful`
    step's operator name, in order), the relation giving its output over the steps' and
    inputs' tables, the output's data columns, the time's width, and each input's table name and columns
    (data, leaves, diff), in the order of ``names``."""

    steps: tuple[Stateful | Concat, ...]
    ops: tuple[str, ...]
    output: Relation
    data: tuple[str, ...]
    width: int
    names: tuple[str, ...]
    tables: tuple[str, ...]
    columns: tuple[tuple[str, ...], ...]


class QueryRecorder(Handler, KernelSchemas):
    """Collects the steps of one query while it is called on placeholders (every top-level
    call; a loop is refused)."""

    records = True

    def __init__(self, spark: Any, width: int) -> None:
        self.spark = spark
        self.width = width
        self.steps: list[Stateful | Concat] = []
        self.ops: list[str] = []
        self.tables: dict[str, tuple[str, Sequence[str]]] = {}
        self.connect = is_connect(spark)
        self.translator = translator_for(spark, self.tables, width)
        self._large: bool | None = None

    def placeholder(self, name: str, fields: Sequence[T.StructField]) -> DataFrame:
        """An empty collection of ``fields`` (data, ``time``, ``diff``) that plans built on it read as ``$name``."""
        schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in fields])
        df = self.spark.createDataFrame([], schema) if self.connect else placeholder(self.spark, schema, name)
        self.translator.known(df, name)
        self.tables[name] = (name, [f.name for f in fields])
        return df

    # -- the seam -------------------------------------------------------------------------
    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if call.in_loop:
            return below(call)
        if call.shape is None:
            raise Untranslatable(f"{call.op} has no in-task form")
        step_inputs = []
        for inp in call.inputs:
            if inp.time_type != call.kernel_type or inp.time_col is not None or inp.new is not None:
                raise Untranslatable(f"{call.op}: an input enters through a time conversion")
            step_inputs.append(StepInput(self.translator.relation(inp.df), None, tuple(inp.keys), tuple(inp.data),
                                         inp.prefix, self._input_schema(inp, call.kernel_type), True))
        name = f"n{len(self.steps)}"
        out_schema = self._schema([*call.out_fields, *time_fields(call.kernel_type)])
        self.steps.append(Stateful(name, call.kernel, call.params, call.shape.key, tuple(step_inputs), out_schema,
                                   call.out_columns, self.width))
        self.ops.append(call.op)
        return self.placeholder(name, call.user_fields())

    def concat(self, call: ConcatCall, below: Below) -> DataFrame:
        if call.in_loop:
            return below(call)
        data = list(call.schemas[0].data_cols)
        parts: list[tuple[Relation | None, int | None]] = [
            (self.translator.relation(d, [*data, TIME, DIFF]), None) for d in call.dfs]
        name = f"n{len(self.steps)}"
        self.steps.append(Concat(name, tuple(parts), (*data, *leaves(self.width), DIFF)))
        return self.placeholder(name, [*[call.schemas[0].field(c) for c in data], T.StructField(TIME, call.target.spark_type(), True),
                                       T.StructField(DIFF, T.LongType(), True)])

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        raise Untranslatable("the query runs a dd_iterate")


def record_query(spark: Any, query: Callable[..., DataFrame], schemas: Mapping[str, T.StructType],
                 ttype: TimeType) -> tuple[QueryProgram, DataFrame]:
    """Call ``query(**inputs)`` once on placeholders of ``schemas`` (each a collection over
    ``ttype``), the recorder the innermost handler: the :class:`QueryProgram` and the query's
    result on the placeholders (empty; its schema is the output's).  Raises
    :class:`~.relation.Untranslatable` for a query one task cannot run."""
    rec = QueryRecorder(spark, ttype.width)
    names = tuple(schemas)
    tables = tuple(f"q{j}" for j in range(len(names)))
    with handling(rec):
        inputs = {n: rec.placeholder(t, list(schemas[n].fields)) for n, t in zip(names, tables)}
        out = query(**inputs)
        if not isinstance(out, DataFrame) and not hasattr(out, "schema"):
            raise Untranslatable("the query did not return a DataFrame")
        data = [c for c in out.columns if c not in (TIME, DIFF)]
        output = rec.translator.relation(out, [*data, TIME, DIFF])
    columns = tuple(tuple(c for c in s.fieldNames() if c not in (TIME, DIFF)) + (*leaves(ttype.width), DIFF)
                    for s in (schemas[n] for n in names))
    program = QueryProgram(tuple(rec.steps), tuple(rec.ops), output, tuple(data),
                           ttype.width, names, tables, columns)
    return program, out


__all__ = ["QueryProgram", "QueryRecorder", "record_query"]
