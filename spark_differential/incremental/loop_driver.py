"""A ``dd_iterate`` inside an incremental view, on the driver: its body recorded, its one task
prepared and run, its traces and output written (the task's side: :mod:`spark_differential.incremental.loop`,
whose docstring says what an update of the loop means on ``(data, time, diff)`` and why it is exact).

On ``(data, time, diff)``: the traced strategy calls a view's query on the changes of its
inputs; a ``dd_iterate`` call in it (:func:`loop_in_view`) records the body as for the in-task
path (:func:`record`: no Spark job), tags the loop's sources' changes (its roots' and the
outer collections') and, where the stored traces are on this machine, lets the task read them
itself; the task returns the change of the loop's fixed point and writes the loop's new
traces (:class:`LoopUpdate`).

A query that *is* one loop over an integral time (it returns the loop's change as it is)
costs one Spark job an update: the loop is prepared but not run where the query calls it
(:class:`LoopUpdate`), and its task then also reads the output held back by earlier updates
and writes what the update returns and holds back
(:func:`~spark_differential.incremental.loop.version_output`) with the new traces, as the
version's one write (:func:`write_version`).  Otherwise the loop's change and traces are
written apart and the traced strategy writes the query's output after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, integral_sql, quoted
from spark_differential.core.names import SRC
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.inputs import TaskCheck
from spark_differential.incremental.loop import Check, Derived, Local, specs, task
from spark_differential.incremental.manifest import NextFrontier
from spark_differential.incremental.storage import KIND, LOOP, Operator, physical, tag
from spark_differential.intask.program import Program
from spark_differential.intask.record import record as record_body
from spark_differential.intask.relation import Untranslatable, leaves
from spark_differential.intask.sources import run_row, tag_name, tag_source
from spark_differential.loop.iterate import check_body_output, new_loop_time, rule_checked

if TYPE_CHECKING:
    import pyarrow as pa


def _spark_schema(schema: pa.Schema) -> T.StructType:
    return T.StructType([T.StructField(f.name, from_arrow_type(f.type), True) for f in schema])


def loop_operator(program: Program, held: Sequence[T.StructType], kept: bool = True) -> Operator:
    """What a view stores of a loop: its traces (:func:`~spark_differential.incremental.loop.specs`;
    with ``kept``, over a totally ordered time, each source's accumulated value and the fixed point
    too) and each source's held-back changes (``held``, as the task's table holds them), all
    rewritten whole by every update."""
    schemas = [_spark_schema(sp.schema) for sp in specs(program)]
    if kept and program.width == 1:
        schemas += [T.StructType([T.StructField(c, f.dataType, True) for c, f in zip(cols, h.fields)])
                    for cols, h in zip(program.sources, held)]
        schemas.append(_spark_schema(program.roots))
    return Operator("dd_iterate", (*schemas, *held), (LOOP,) * (len(schemas) + len(held)))


def stored_operator(run: Any, slot: int, program: Program, held: Sequence[T.StructType],
                    me: Operator | None = None) -> Operator:
    """The loop's :func:`loop_operator` (``me``, when made already) as the view stores it in
    ``slot``: the sources' values and the fixed point kept, unless the view was stored before
    loops kept them (then its loop is always resumed, never recomputed)."""
    me = loop_operator(program, held) if me is None else me
    if slot < len(run.expected) and not run.expected[slot].same(me):
        before = loop_operator(program, held, kept=False)
        if run.expected[slot].same(before):
            return before
    return me


def layout(slot: int, program: Program, operator: Operator) -> tuple[list[str], list[str], bool]:
    """The tags of a loop's stored traces and of its sources' held-back changes as ``operator``
    (:func:`stored_operator`) stores them in ``slot``, and whether the traces keep the sources'
    values and the fixed point."""
    n = len(program.sources)
    ntraces = len(operator.inputs) - n
    return ([tag(slot, k) for k in range(ntraces)], [tag(slot, ntraces + j) for j in range(n)],
            ntraces > len(specs(program)))


def record(df: DataFrame, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame],
           max_iterations: int | None) -> tuple[Program, list[DataFrame]]:
    """``df.dd_iterate(body)`` recorded as for the in-task path (no Spark job): its
    :class:`~spark_differential.intask.program.Program`, in one task and without time chunks, and its
    sources (the roots first).  Raises :class:`~spark_differential.intask.translate.Untranslatable` for
    a body the in-task path cannot run.  The recorder is the innermost handler while the body is
    called: the body's calls on the loop's collections are recorded, the others reach the view."""
    loop_t = new_loop_time(cs)
    program, sources = record_body(df, loop_t, cs, rule_checked(body),
                                   lambda out: check_body_output(out, cs, loop_t, select=False), max_iterations, 0)
    return dataclasses.replace(program, chunk_rows=0, threads=1, local_rows=0), sources


@dataclasses.dataclass
class LoopUpdate:
    """One update of a view's loop, prepared (no job yet): its recorded program, the union its
    one task reads (``SRC``: the sources' changes and those held back, then the stored traces)
    and the names and schemas of what the task writes."""

    program: Any
    cs: CollectionSchema
    union: DataFrame
    data: list[str]
    tags: list[str]
    schemas: list[Any]
    held_tags: list[str]
    held_schemas: list[Any]
    out_tag: str
    out_schema: T.StructType  # the loop's change: the user's data columns, the time leaves, diff
    local: Local | None = None  # the task reads the traces and held changes itself (not in union)
    checks: list[Check] = dataclasses.field(default_factory=list)  # of the sources tagged unchecked
    derived: Derived | None = None  # the sources computed by the task from the view's inputs (then in checks)
    kept: bool = False  # the traces keep the sources' values and the fixed point (loop.specs)
    recompute: int = 0  # the loop is recomputed where its inputs hold at most this many times the changes

    def written(self, run: Any, sub: str, output: tuple[str, T.StructType], union: DataFrame | None = None,
                final: bool = False, checks: Sequence[Check] = ()) -> dict[str, str]:
        """Run the loop's one task over ``union`` (by default the prepared one) and write, in one
        Parquet write under the version's ``sub``, its output (``output``: the physical prefix and
        schema of the loop's change, or with ``final`` of the view's output: :func:`~spark_differential.incremental.loop.task`), the
        new traces and the changes held back; the files written, by kind (the traces' put in
        ``run.replaced``).  ``coalesce``, not ``repartition``: the one task reads the changes and
        the stored traces itself (no shuffle, one job less); the changes are an update's (small)
        and the traces must fit the task anyway.  ``checks``: of rows of ``union``, made before the
        sources' (:func:`~spark_differential.incremental.loop.task`)."""
        fields = [T.StructField(KIND, T.StringType(), True)]
        for t, schema in [output, *zip(self.tags, self.schemas), *zip(self.held_tags, self.held_schemas)]:
            fields += [T.StructField(p, f.dataType, True) for p, f in zip(physical(t, schema), schema.fields)]
        wide = T.StructType(fields)
        rows = self.union if union is None else union
        front = run.frontier if isinstance(run.frontier, NextFrontier) else list(run.frontier)
        given = [j for j, _, _ in checks] + (list(self.derived.tables) if self.derived is not None else [])
        fn = task(self.program, self.cs.ttype, front, self.out_tag, self.tags, self.held_tags,
                  final=final, local=self.local, checks=[*checks, *self.checks], inputs=given, derived=self.derived,
                  kept=self.kept, recompute=self.recompute)
        files = run.write_task(sub, rows.coalesce(1), fn, wide)
        for t in [*self.tags, *self.held_tags]:
            run.replaced[t] = [files[t]] if t in files else []
        return files

    def decoded(self, out: DataFrame) -> DataFrame:
        """The loop's change read back (time leaves) as a collection in the loop's time type."""
        leaf_names = leaves(self.program.width)
        sql_type = integral_sql(self.cs.ttype)
        if sql_type is not None:
            return out.selectExpr(*map(quoted, self.data), f"CAST({leaf_names[0]} AS {sql_type}) AS {TIME}", DIFF)
        time_col = self.cs.ttype.decode_columns([F.col(c) for c in leaf_names])
        return out.select(*[F.col(quoted(c)) for c in self.data], time_col.alias(TIME), F.col(DIFF))


def loop_in_view(run: Any, df: Any, cs: CollectionSchema, body: Callable[[Any], Any],
                 max_iterations: int | None) -> Any:
    """``df.dd_iterate(body)`` in a view's query (``run``: the :class:`~spark_differential.incremental.traced.Run`
    of this update, or its probe): the change of the loop's fixed point, its traces read from and
    written to the view's version (the module docstring).

    Where ``run.defer_loop`` (the view's query is one loop over an integral time), nothing runs
    here: the prepared update is kept in ``run.deferred`` with the empty collection returned,
    and if the query returns that very collection, :func:`write_version` runs the loop and
    writes the whole version in one job."""
    spark = df.sparkSession
    data = list(cs.data_cols)
    user = T.StructType([df.schema[c] for c in (*data, TIME, DIFF)])
    try:
        program, sources = record(df, cs, body, max_iterations)
    except Untranslatable as e:
        why = f"dd_iterate (its body cannot run inside one task: {e})"
        if run.probe:
            run.blockers.append(why)
            return spark.createDataFrame([], user)
        raise IncrementalStateError(
            f"sd.incremental: the view stored under {run.where} keeps a {why}; the query must stay the same from "
            "update to update. Rebuild the view at a new path by replaying its inputs.") from e
    if cs.ttype != run.ttype:
        if run.probe:
            run.blockers.append(f"dd_iterate over {cs.ttype.describe()} times")
            return spark.createDataFrame([], user)
    if run.probe:
        # the loop's state lives in one task: a first update larger than an in-task loop may hold
        # (the one-shot path's threshold) keeps the view in the rerun strategy, whose loop runs distributed
        limit = settings.local_rows(spark)
        estimate = run.first_rows
        if limit == 0 or estimate > limit:
            why = (f"{settings.LOCAL_ROWS} is 0: loops never run inside one task" if limit == 0 else
                   f"the first update has {estimate} input rows by Spark's estimate, more than "
                   f"{settings.LOCAL_ROWS}={limit} lets one task hold")
            run.blockers.append(f"dd_iterate ({why})")
            return spark.createDataFrame([], user)
    n = len(sources)
    # the view's inputs came unchecked (traced.Run.checks): the task checks them, and the sources (dd_iterate's)
    unchecked = run.defer_loop and run.deferred is None and run.checks is not None
    parts = [tag_source(src, j, [c for c in cols if c not in (DIFF, *leaves(program.width))], cs.ttype,
                        guarded=not unchecked) for j, (src, cols) in enumerate(zip(sources, program.sources))]
    # each source's changes held back (at times in the future of the frontier: loop_update), as the task reads them
    held_schemas = [T.StructType([f for f in p.schema.fields if f.name != SRC]) for p in parts]
    slot = len(run.operators)
    me = stored_operator(run, slot, program, held_schemas)
    tags, held_tags, kept = layout(slot, program, me)
    schemas = list(me.inputs[:len(tags)])
    run.operators.append(me)
    if run.probe:
        return spark.createDataFrame([], user)
    run._check(slot, me)

    # one task: the changes of the sources and the stored traces in, the loop's change and the new traces out
    traces = [run.local_dirs(run.traces.get(t, [])) for t in [*tags, *held_tags]]
    local = None
    union: DataFrame | None = None
    if all(d is not None for d in traces):  # on this machine: the task reads them itself
        local = Local(traces[:len(tags)], traces[len(tags):])  # type: ignore[arg-type]
        union = run_row(spark)  # (the task runs when nothing is new)
    for j, (part, t, schema) in enumerate(zip(parts, held_tags, held_schemas)):
        if local is None:
            before = run.read(run.traces.get(t, []), schema, t).select(F.lit(j).alias(SRC), *schema.names)
            part = part.unionByName(before)
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    for k, (t, schema) in enumerate(zip(tags, schemas)):
        if local is not None:
            break
        stored = run.read(run.traces.get(t, []), schema, t)
        part = stored.select(F.lit(n + k).alias(SRC),
                             *[F.col(f.name).alias(tag_name(n + k, i)) for i, f in enumerate(schema.fields)])
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    leaf_names = leaves(program.width)
    out_schema = T.StructType([*[T.StructField(f.name, f.dataType, True) for f in user.fields if f.name in data],
                               *[T.StructField(c, T.LongType(), True) for c in leaf_names],
                               T.StructField(DIFF, T.LongType(), True)])
    assert union is not None and run.write_task is not None
    lu = LoopUpdate(program, cs, union, data, tags, schemas, held_tags, held_schemas, f"s{slot}_out", out_schema,
                    local, [(j, cols, TaskCheck("dd_iterate")) for j, cols in enumerate(program.sources)] if unchecked
                    else [], kept=kept, recompute=settings.loop_recompute(spark))
    if run.defer_loop and run.deferred is None:
        result = run.read([], user, "o")  # (an empty collection, made once per schema)
        run.deferred = (lu, result)
        return result
    files = lu.written(run, f"s{slot}", (lu.out_tag, out_schema))
    return lu.decoded(run.read([files[lu.out_tag]] if lu.out_tag in files else [], out_schema, lu.out_tag))


def write_version(run: Any, lu: LoopUpdate, pending: DataFrame | None, view_schema: T.StructType) -> dict[str, str]:
    """The deferred loop of a view whose query is that loop (:func:`loop_in_view`), run and
    written with the whole version in one job: its task also reads the output held back by
    earlier updates (``pending``, the view's ``view_schema``: an integral time) and writes what
    the update returns and holds back (kinds ``o`` and ``p``) with the new traces, under the
    version's last write (``data``).  The files written, by kind; the loop's traces are put in
    ``run.replaced``."""
    j = len(lu.program.sources) + len(lu.tags)
    names = [f.name for f in view_schema.fields]
    union = lu.union
    if pending is not None:
        t_col = names[len(lu.data)]
        cast = [f"CAST({quoted(c)} AS BIGINT)" if c == t_col else quoted(c) for c in names]
        union = union.unionByName(pending.selectExpr(f"{j} AS {SRC}", *[f"{e} AS {tag_name(j, i)}"
                                                                         for i, e in enumerate(cast)]),
                                  allowMissingColumns=True)
    checks: list[Check] = []  # the view's inputs as they came (traced.Run.checks): their time and diff
    for k, (raw, check) in enumerate(run.checks or []):
        union = union.unionByName(tag_source(raw, j + 1 + k, [], lu.cs.ttype, guarded=False), allowMissingColumns=True)
        checks.append((j + 1 + k, [*leaves(lu.program.width), DIFF], check))
    return lu.written(run, "data", ("o", view_schema), union, final=True, checks=checks)


__all__ = ["LoopUpdate", "layout", "loop_in_view", "loop_operator", "record", "stored_operator", "write_version"]
