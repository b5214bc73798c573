"""A view whose query is one ``dd_iterate``, recorded once: an update is its loop's task alone.

On ``(data, time, diff)``: the same update as a loop kept in a view always makes
(:mod:`spark_differential.incremental.loop`, whose docstring argues why it is exact): the
change of the loop's fixed point from the changes of its sources (its roots and the outer
collections its body reads) and its stored per-iteration traces, in one task that writes the
whole version (:func:`~spark_differential.incremental.loop_driver.write_version`).

What differs is the driver's work.  There the query is called at every update on the
update's changes, and the loop's body recorded again (about a quarter of a small update's
time), because the sources are DataFrames built from those changes.  Here the query is
recorded once per session (:func:`record_loop_query`, kept by
:func:`spark_differential.incremental.onetask.recorded`), on placeholders of the view's
inputs, and each source is kept as a relation over the inputs' tables (DuckDB SQL or an
Arrow program: :mod:`spark_differential.intask.translate`): the task computes the sources
from the inputs' rows it reads and checks (:class:`~spark_differential.incremental.loop.Derived`).
The sources are linear in the inputs (the query calls no other operator), so the source
computed from an update's changes is the change of the source.  An update then costs the
driver the inputs' tagging and one ``mapInArrow``.

A query this cannot record (another operator outside the loop, a loop that is not what the
query returns, a source built from anything but the inputs, an expression the translator
does not cover) raises :class:`~spark_differential.intask.relation.Untranslatable`, and the
view's update calls its query as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema
from spark_differential.core.lattice import Loop, TimeType
from spark_differential.core.names import SRC
from spark_differential.engine.call import Below, ConcatCall, LoopCall, StatefulCall, handling
from spark_differential.engine.kernel_form import arrow_schema
from spark_differential.incremental.inputs import TaskCheck
from spark_differential.incremental.loop import Derived, Local
from spark_differential.incremental.loop_driver import LoopUpdate, layout, loop_operator, record, stored_operator
from spark_differential.incremental.storage import Operator
from spark_differential.intask.program import Program
from spark_differential.intask.query import QueryRecorder
from spark_differential.intask.relation import Relation, Untranslatable, leaves
from spark_differential.intask.sources import run_row, tag_source


@dataclass(frozen=True)
class LoopQuery:
    """A view's query that is one loop, recorded: the loop's program, its roots' schema (``cs``)
    and each source as a relation over the inputs' tables (``sources``, ``program.sources``'
    columns); the inputs (``names``), their tables and columns in the task (data, time leaves,
    diff) and Arrow schemas; each source's held-back changes as stored (``held``, Spark's and
    Arrow's schemas); what the view stores of the loop (``operator``); the query's result on
    the placeholders (``out``: its schema is the output's)."""

    program: Program
    cs: CollectionSchema
    sources: tuple[Relation, ...]
    names: tuple[str, ...]
    tables: tuple[str, ...]
    columns: tuple[tuple[str, ...], ...]
    input_schemas: tuple[Any, ...]  # pa.Schema
    held: tuple[T.StructType, ...]
    held_arrow: tuple[Any, ...]  # pa.Schema
    operator: Operator
    out: DataFrame


class _Recorder(QueryRecorder):
    """Records a query that is one ``dd_iterate`` over the inputs' time type (the loop's body by
    :func:`~spark_differential.incremental.loop_driver.record`); any other operator is refused."""

    def __init__(self, spark: Any, ttype: TimeType) -> None:
        super().__init__(spark, ttype.width)
        self.ttype = ttype
        self.loop: tuple[Program, list[DataFrame], CollectionSchema] | None = None
        self.result: DataFrame | None = None

    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if call.in_loop:
            return below(call)
        raise Untranslatable(f"the query calls {call.op} outside its dd_iterate")

    def concat(self, call: ConcatCall, below: Below) -> DataFrame:
        if call.in_loop:
            return below(call)
        raise Untranslatable("the query calls dd_concat outside its dd_iterate")

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        if isinstance(call.cs.ttype, Loop):
            return below(call)
        if self.loop is not None:
            raise Untranslatable("the query runs more than one dd_iterate")
        if call.cs.ttype != self.ttype:
            raise Untranslatable(f"its dd_iterate runs over {call.cs.ttype.describe()} times")
        program, sources = record(call.df, call.cs, call.body, call.max_iterations)
        self.loop = (program, sources, call.cs)
        self.result = self.placeholder("n0", [call.df.schema[c] for c in (*call.cs.data_cols, TIME, DIFF)])
        return self.result


def record_loop_query(spark: Any, query: Callable[..., DataFrame], schemas: Mapping[str, T.StructType],
                      ttype: TimeType) -> LoopQuery:
    """Call ``query(**inputs)`` once on placeholders of ``schemas`` (each a collection over
    ``ttype``): its :class:`LoopQuery`.  Raises :class:`~spark_differential.intask.relation.Untranslatable`
    for a query that is not one loop returned as it is, or whose loop one task cannot run."""
    rec = _Recorder(spark, ttype)
    names = tuple(schemas)
    tables = tuple(f"q{j}" for j in range(len(names)))
    with handling(rec):
        inputs = {n: rec.placeholder(t, list(schemas[n].fields)) for n, t in zip(names, tables)}
        out = query(**inputs)
    if rec.loop is None or rec.result is None:
        raise Untranslatable("the query runs no dd_iterate")
    if out is not rec.result:
        raise Untranslatable("the query does more than return its dd_iterate's change")
    program, sources, cs = rec.loop
    width = ttype.width
    relations, held = [], []
    for j, (src, cols) in enumerate(zip(sources, program.sources)):
        data = list(cols[:-width - 1])
        relations.append(rec.translator.relation(src, [*data, TIME, DIFF]))
        part = tag_source(src, j, data, ttype, guarded=False)  # (its schema only: as loop_in_view stores it)
        held.append(T.StructType([f for f in part.schema.fields if f.name != SRC]))
    columns = tuple((*[c for c in schemas[n].fieldNames() if c not in (TIME, DIFF)], *leaves(width), DIFF)
                    for n in names)
    long = [T.StructField(c, T.LongType(), True) for c in (*leaves(width), DIFF)]
    input_schemas = tuple(arrow_schema(spark, T.StructType([*[schemas[n][c] for c in cols[:-width - 1]], *long]))
                          for n, cols in zip(names, columns))
    return LoopQuery(program, cs, tuple(relations), names, tables, columns, input_schemas, tuple(held),
                     tuple(arrow_schema(spark, h) for h in held), loop_operator(program, held), out)


def prepared(run: Any, lq: LoopQuery, given: Mapping[str, tuple[DataFrame, TaskCheck]]) -> None:
    """The update of a view whose query is ``lq``, prepared as the traced strategy's call of the
    query would prepare it (``run``: the update's :class:`~spark_differential.incremental.traced.Run`,
    whose ``deferred`` it sets; no job): the task reads the view's inputs as given (``given``:
    each input's new updates and the checks its task makes of them) and its stored traces and
    held-back changes from this machine's files, which every stored directory must be on."""
    program, cs = lq.program, lq.cs
    slot = len(run.operators)
    operator = stored_operator(run, slot, program, lq.held, lq.operator)
    run.operators.append(operator)
    run._check(slot, operator)
    n = len(program.sources)
    tags, held_tags, kept = layout(slot, program, operator)
    dirs = [run.local_dirs(run.traces.get(t, [])) for t in [*tags, *held_tags]]
    if any(d is None for d in dirs):
        raise ValueError("prepared: the view's stored directories must be on this machine")
    local = Local(dirs[:len(tags)], dirs[len(tags):])  # type: ignore[arg-type]
    width = program.width
    first = n + len(tags) + 1  # after the sources, the traces and the output held back (write_version)
    union = run_row(run.spark)
    checks, tables = [], {}
    for k, name in enumerate(lq.names):
        if name not in given:
            continue
        df, check = given[name]
        j = first + k
        union = union.unionByName(tag_source(df, j, lq.columns[k][:-width - 1], cs.ttype, guarded=False),
                                  allowMissingColumns=True)
        checks.append((j, lq.columns[k], check))
        tables[j] = lq.tables[k]
    derived = Derived(lq.sources, tables, tuple(zip(lq.tables, lq.input_schemas)), lq.held_arrow)
    data = list(cs.data_cols)
    out_schema = T.StructType([*[lq.out.schema[c] for c in data],
                               *[T.StructField(c, T.LongType(), True) for c in (*leaves(width), DIFF)]])
    lu = LoopUpdate(program, cs, union, data, tags, list(operator.inputs[:len(tags)]), held_tags,
                    list(lq.held), f"s{slot}_out", out_schema, local, checks, derived,
                    kept=kept, recompute=settings.loop_recompute(run.spark))
    run.deferred = (lu, lq.out)


__all__ = ["LoopQuery", "prepared", "record_loop_query"]
