"""Launching an in-task loop from the driver: one job, one task (or one per partition).

On ``(data, time, diff)`` this computes what the distributed loop computes (the in-task
engine, :mod:`spark_differential.intask`); here the recorded program's sources are tagged
into one table (:mod:`.sources`), brought to one partition, and one ``mapInArrow`` runs
the task (:mod:`.task`); its report says how it ended; the answer stays in the job's local
checkpoint (or, small, comes back with the report as local rows), and the returned
DataFrame explodes its runs into ``(data, time, diff)`` in the loop's time type.
:func:`attempt` decides, from Spark's plan statistics, whether the loop may run this way.
"""

from __future__ import annotations

import dataclasses
import logging
import time as _time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, integral_sql, qcols, quoted
from spark_differential.core.lattice import Loop, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.names import PART
from spark_differential.core.session import is_connect, local_frame
from spark_differential.engine import chunks as _chunks
from spark_differential.engine.kernel_form import arrow_schema, bucket_labels
from spark_differential.errors import IterationLimitExceeded, from_job_failure
from spark_differential.intask.program import Program
from spark_differential.intask.record import record
from spark_differential.intask.relation import Untranslatable, leaves
from spark_differential.intask.sources import counted_rows, estimated_rows, tag_source
from spark_differential.intask.task import LIMIT, META, ROWS, TOO_LARGE, Reports, loop_task
from spark_differential.intask.task import metrics as read_metrics
from spark_differential.kernels.common import conform

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")
# an answer of at most this many rows (and task.LOCAL_RESULT_BYTES) comes back to the driver with the
# task's report on a classic session: the loop's DataFrame is then local rows
LOCAL_RESULT_ROWS = 10_000


def run_in_task(df: Any, cs: CollectionSchema, program: Program, sources: Sequence[Any], bar: Any = None,
        spread: Any = None, cheap: bool = False, parts: int = 0) -> Any | None:
    """Run the loop in one task; the result collection, or ``None`` when the input is too large.

    ``cheap``: every source only projects data Spark holds already (local rows,
    checkpoints, cached tables: :func:`_held`), so the loop's task reads them itself (``coalesce(1)``,
    one stage) instead of through a shuffle to one partition (two stages, the sources
    read in parallel: right when they are computed by a plan of their own).

    ``spread`` (:class:`spark_differential.engine.chunks.Spread`): the sources go in spread
    form, one slice of time a task, each task's answer that of its slice alone (no
    answer meets another's); the answer stays in the job's local checkpoint.

    ``parts`` (at least 2, at most the tasks the session runs at once): the sources go to
    that many tasks of one barrier stage, which run the program in key partitions,
    exchanging their changes (:mod:`.exchange`); the answer stays in the job's local
    checkpoint.

    Raises :class:`IterationLimitExceeded` as the distributed loop does."""


    spark = df.sparkSession
    ttype = cs.ttype
    data = list(cs.data_cols)

    sql_type = integral_sql(ttype)

    connect = is_connect(spark)
    union = None
    for j, (src, cols) in enumerate(zip(sources, program.sources)):
        if spread is not None:
            src = spread.spread(src)
        part = tag_source(src, j, [c for c in cols if c not in (DIFF, *leaves(program.width))], ttype,
                          part=spread is not None)
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    assert union is not None
    if spread is not None:
        # one slice a task: each slice's partition key is a value Spark's hash partitioning
        # sends to a partition of its own; a task meeting several slices anyway runs them in turn
        labels = F.expr("array(" + ", ".join(map(str, bucket_labels(spread.count, spread.count))) + ")")
        union = union.repartition(spread.count, F.element_at(labels, F.col(PART) + 1))
        # the slices are cut to hold about localRows rows: a task holding twice that is refused
        program = dataclasses.replace(program, drops=spread.drops(), threads=1, limit=2 * program.limit)
    elif parts > 1:
        union = union.repartition(parts)
        program = dataclasses.replace(program, parts=parts, threads=1, limit=settings.partition_rows(spark),
                                      input_schema=arrow_schema(spark, union.schema))
    else:
        union = union.coalesce(1) if cheap else union.repartition(1)
        if not connect:  # (on Spark Connect the answer is read from the checkpoint)
            program = dataclasses.replace(program, local_rows=LOCAL_RESULT_ROWS)
    data_fields = [T.StructField(c, cs.field(c).dataType, True) for c in data]
    row_fields = [*[T.StructField(n, T.LongType(), True) for n in leaves(program.width)],
                  T.StructField(DIFF, T.LongType(), True)]
    fields = [*data_fields, T.StructField(ROWS, T.ArrayType(T.StructType(row_fields), False), True)]
    if connect:
        # Spark Connect has no accumulators: each task's last row says how it ended (META),
        # kept in the checkpoint and read back (one small job)
        fields.append(T.StructField(META, T.StringType(), True))
    schema = T.StructType(fields)
    reports = None if connect else spark.sparkContext.accumulator([], Reports.param())
    out = union.mapInArrow(loop_task(program, arrow_schema(spark, schema), reports), schema, barrier=parts > 1)
    if parts > 1:
        # Spark retries a failed barrier stage whole only when it is a map stage (a barrier
        # result stage may have committed output): the answer crosses one shuffle
        out = out.repartition(parts)
    started = _time.time()
    try:
        kept = out.localCheckpoint(eager=True)
    except Exception as e:
        if reports is not None:
            Reports.take(reports)
        mine = from_job_failure(e)
        if mine is not None:
            raise mine from e
        raise
    small = None  # the answer as Arrow IPC bytes, where it came back with the job
    if reports is None:  # the task's status row, from the checkpoint (one small job reading it)
        metrics = read_metrics([r[0] for r in kept.where(F.col(META).isNotNull()).select(META).collect()])
        kept = kept.where(F.col(META).isNull())
    else:
        got = Reports.take(reports)
        metrics = read_metrics([m for m, _ in got])
        if spread is None and parts <= 1 and len(got) == 1:
            small = got[0][1]
    status, iters, changing = (int(metrics.get(k) or 0) for k in ("status", "iters", "changing"))
    if status == TOO_LARGE:
        log.info("dd_iterate: %s more than %d input rows (%s)",
                 "a task of a slice of time would hold" if spread is not None
                 else "a task of a key partition would hold" if parts > 1 else "one task would hold",
                 program.limit, settings.PARTITION_ROWS if parts > 1 else settings.LOCAL_ROWS)
        return None
    elapsed = _time.time() - started
    # one task or key partitions: the changes per iteration; slices: only the longest task's count is known
    history = [] if spread is not None else [int(x) for x in str(metrics.get("history") or "").split(",") if x]
    # seconds into the task's loop at each iteration's end, where it ran one loop (else the job's)
    clock = [float(x) for x in str(metrics.get("clock") or "").split(",") if x]
    where = f"in {parts} key partitions" if parts > 1 else "in one task"
    for i, n in enumerate(history, start=1):
        log.info("dd_iterate: iteration %d: %d changes (%s, %.1fs)", i, n, where,
                 clock[i - 1] if len(clock) == len(history) else elapsed)
    if bar is not None:
        bar.update(len(history))
        if history:
            bar.set_postfix(changes=history[-1])
    nchunks = int(metrics.get("chunks") or 0)
    if spread is not None:
        log.info("dd_iterate: %d iterations in %d slices of time, each inside a task of its own (%.1fs)", iters,
                 spread.count, elapsed)
    elif parts > 1:
        log.info("dd_iterate: %d iterations in %d key partitions, a task each%s (%.1fs)", iters, parts,
                 f", in {nchunks} time chunks" if nchunks else "", elapsed)
    else:
        reading, looping = (str(metrics.get("phases") or "0,0").split(",") + ["0"])[:2]
        log.info("dd_iterate: %d iterations inside one task%s (%.1fs; in the task %.2fs reading its input, %.2fs "
                 "iterating)", iters, f", in {nchunks} time chunks" if nchunks else "", elapsed, float(reading),
                 float(looping))
    if status == LIMIT:
        raise IterationLimitExceeded.of(program.max_iterations, iters, changing)
    if metrics.get("local"):  # the answer came back with the job: local rows, no job to read them
        rows = T.StructType([*data_fields, *row_fields])
        arrow = arrow_schema(spark, rows)
        table = pa.ipc.open_stream(small).read_all() if small else arrow.empty_table()
        kept = local_frame(spark, conform(table.select(arrow.names), arrow), rows, arrow)
    else:
        kept = kept.select(*qcols(data), F.inline(ROWS))
    if sql_type is not None:
        return kept.selectExpr(*map(quoted, data), f"CAST({leaves(program.width)[0]} AS {sql_type}) AS {TIME}", DIFF)
    time_col = ttype.decode_columns([F.col(n) for n in leaves(program.width)])
    return kept.select(*qcols(data), time_col.alias(TIME), F.col(DIFF))


def attempt(df: DataFrame, cs: CollectionSchema, body: Callable[[DataFrame], DataFrame], loop_t: Loop,
            check: Callable[[Any], DataFrame], max_iterations: int | None, bar: Any = None) -> DataFrame | None:
    """The loop run inside one task, or ``None`` (with the reason logged) to run it distributed."""
    limit = settings.local_rows(df.sparkSession)
    if limit == 0:
        return None
    started = _time.time()
    try:
        program, sources = record(df, loop_t, cs, body, check, max_iterations, limit)
    except Untranslatable as e:
        log.info("dd_iterate: running distributed, not inside one task: %s", e)
        return None
    log.debug("dd_iterate: body recorded in %.2fs", _time.time() - started)
    spark = df.sparkSession
    mode = settings.local_spread(spark)
    parts = settings.parallelism(spark)
    per_part = settings.partition_rows(spark)
    keyed = per_part * parts if parts > 1 else 0  # the input rows key partitions may hold
    estimate, held, known, bound = estimated_rows(sources)
    if mode in ("auto", "off") and not known:
        if bound is not None and bound <= limit:  # Python lists, within one task's rows
            estimate = bound
        else:  # no size known before a job: count the rows (one job), never start a task to abandon it
            estimate = counted_rows(sources)
            log.info("dd_iterate: Spark's plan statistics do not size the input: counted %d input rows (one job)",
                     estimate)
    if mode in ("auto", "off"):
        if estimate <= limit:
            result = run_in_task(df, cs, program, sources, bar, cheap=held)
            if result is not None:
                return result
            why = "more input rows than one task may hold"
        else:
            why = f"{estimate} input rows ({settings.LOCAL_ROWS}={limit})"
        if mode == "off":
            log.info("dd_iterate: running distributed, not inside one task: %s (%s=off)", why, settings.LOCAL_SPREAD)
            return None
        log.info("dd_iterate: not inside one task: %s", why)
    rows = estimate  # a lower estimate of the input rows (0: not known)
    at_least = max(estimate, limit + 1 if mode in ("auto", "off") else 0)  # the one task found more
    sliced = False  # slices of time tried

    def slices() -> Any:
        nonlocal rows, sliced
        sliced = True
        log.info("dd_iterate: spreading slices of time over tasks")
        spread, measured = _spread(program, cs, sources, limit, keyed, at_least)
        result = None if spread is None else run_in_task(df, cs, program, sources, bar, spread)
        rows = measured or rows  # the plan's count is exact
        if result is None:
            log.info("dd_iterate: not in slices of time: %s",
                     "a slice of time holds too many rows for a task" if spread is not None
                     else "its time cannot be sliced to fit a task")
        return result

    # key partitions first when the sizes known before a job say they hold the input (where
    # the input outgrows one task but not the session's tasks together they beat slices of
    # time, which pay a planning job); else slices of time, whose planning job counts the rows
    if mode == "always" or (mode == "auto" and not limit < estimate <= keyed):
        if (result := slices()) is not None:
            return result
    if parts < 2 or keyed == 0 or rows > keyed:
        log.info("dd_iterate: running distributed, not inside tasks: %s",
                 "the session runs one task at a time" if parts < 2
                 else f"{settings.PARTITION_ROWS}=0" if keyed == 0
                 else f"{rows} input rows, more than {parts} tasks of {per_part} hold ({settings.PARTITION_ROWS})")
        return None
    log.info("dd_iterate: running in %d key partitions, a task each, exchanging their changes", parts)
    result = run_in_task(df, cs, program, sources, bar, parts=parts)
    if result is None:
        log.info("dd_iterate: not in key partitions: a key partition holds too many rows")
        if mode == "auto" and not sliced:
            result = slices()
    if result is None:
        log.info("dd_iterate: running distributed, not inside tasks")
    return result


def _spread(program: Program, cs: CollectionSchema, sources: Sequence[Any], limit: int, keyed: int,
            at_least: int) -> tuple[Any, int]:
    """Slices of time planned to spread a loop too large for one task over tasks
    (:func:`spark_differential.engine.chunks.plan_spread`), or ``None``; and the input rows
    the plan counted (0: no job)."""
    if program.chunk_rows == 0 or program.width != 1 or not isinstance(cs.ttype, Total):
        return None, 0
    return _chunks.plan_spread(cs.ttype, list(sources), limit, settings.parallelism(sources[0].sparkSession),
                               at_least, keyed)
