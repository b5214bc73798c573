"""The ``mapInArrow`` function of an in-task loop, and how it reports back.

On ``(data, time, diff)``: the task reads every source of the program (one table, rows
tagged by source), runs the loop (:func:`~.iteration.stream`) and yields its answer as one
row per run of rows with equal data (their times and diffs in the list column
:data:`ROWS`), which the loop's DataFrame explodes: exploded, the rows are the answer.
How the task ended (done, too large, out of iterations; changes per iteration) reaches the
driver through an accumulator (:class:`Reports`) on a classic session, through the task's
last row (:data:`META`) on Spark Connect; a small answer comes back with the report.
"""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.core.names import PART, SRC
from spark_differential.intask.exchange import Exchange, barrier_exchange
from spark_differential.intask.iteration import stream
from spark_differential.intask.program import Program
from spark_differential.intask.relation import leaves
from spark_differential.intask.sources import source_table
from spark_differential.kernels.common import conform
from spark_differential.kernels.native import int_values

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")


# on Spark Connect (no accumulators) the task's one column besides the answer's: null on the
# answer's rows; on its last row (the status row, the answer's columns null) how the task ended,
# as JSON (status_json)
META = "_sd_meta"


# the task's answer leaves it as one row per run of rows with equal data (the answer comes
# sorted by its data where its columns pack), their times and diffs in this list column, at most
# RUN_ROWS to a row; the loop's DataFrame explodes it (inline).  The JVM then makes and keeps a
# few large rows instead of one small row per change: 762,695 BFS changes checkpointed in
# 0.16-0.19 s against 0.20-0.24 s, in a third of the memory, and with fewer objects for its GC
ROWS = "_sd_rows"


RUN_ROWS = 1 << 16


# an answer of at most this many rows and Arrow bytes comes back to the driver with the task's
# result (classic sessions: the accumulator of Reports), and the loop's DataFrame is local rows
# (a later collect runs no Spark job); a larger one stays where the job left it (a local
# checkpoint on the executor)


LOCAL_RESULT_BYTES = 1 << 20  # (and at most LOCAL_RESULT_ROWS rows: spark_differential.intask.launch)
DONE, TOO_LARGE, LIMIT = 0, 1, 2  # how a task ended


_FROZEN_MODULES = 0  # how many modules the Python worker had when it last froze its heap


def freeze_imports() -> None:
    """Exempt what this Python worker holds now (after the loop's task: chiefly the modules
    it imported, pyarrow, numpy, numba's, DuckDB's) from the cyclic garbage collector.

    A reused PySpark worker runs ``gc.collect()`` after every task (``pyspark/daemon.py``),
    and with those modules loaded a collection scans ~10^5 objects: 20-45 ms of CPU per
    task, during which the worker cannot start the next one (the loop's task itself reads
    its sources' partitions one after another through such workers).  After a collection
    that frees what is garbage now, ``gc.freeze()`` moves every surviving object to the
    permanent generation, which later collections skip; objects are still freed when their
    last reference goes.  Again only when the worker imported more modules since."""
    import gc
    import sys

    global _FROZEN_MODULES
    if len(sys.modules) > _FROZEN_MODULES:
        gc.collect()
        gc.freeze()
        _FROZEN_MODULES = len(sys.modules)


class Reports:
    """The accumulator a classic session's loop tasks report through: each task adds one
    ``(status, answer)`` pair, the status as JSON (:func:`status_json`), the answer as Arrow
    IPC bytes when it is small enough to come back with the job (else ``None``: it is in
    the job's output).  PySpark sends a task's additions back with its result, and the
    driver merges only those of the attempts that succeeded (a retried task's failed
    attempts add nothing)."""

    @staticmethod
    def param() -> Any:
        from pyspark.accumulators import AccumulatorParam

        class _Param(AccumulatorParam):  # type: ignore[type-arg]
            def zero(self, value: list) -> list:
                return []

            def addInPlace(self, a: list, b: list) -> list:  # noqa: N802 - pyspark's name
                a.extend(b)
                return a

        return _Param()

    @staticmethod
    def take(acc: Any) -> list:
        """What the tasks added, and ``acc`` forgotten: PySpark's registry of accumulators
        keeps every one for the driver's life, and a report holds up to
        :data:`LOCAL_RESULT_BYTES` of answer (no task adds to it once its job ended)."""
        from pyspark.accumulators import _accumulatorRegistry

        value = list(acc.value)
        _accumulatorRegistry.pop(acc.aid, None)
        return value


def loop_task(program: Program, out_schema: pa.Schema,
         reports: Any = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: read every source, iterate, yield the result.

    How the task ended (and a small answer) goes to ``reports`` (a classic session's
    accumulator, :class:`Reports`), whose task output is the answer's rows alone; without
    one (Spark Connect) the task's last row is a status row (:data:`META`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if program.drops:  # spread over tasks: each slice of time its own loop (one report each)
            yield from sliced(batches)
        else:
            yield from looped(batches)
        freeze_imports()  # the task's tables are gone with looped's frame

    def sliced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        part = table.column(PART)
        for value in pc.unique(part).to_pylist():
            yield from looped(iter(table.filter(pc.equal(part, value)).to_batches()), program.drops[value])

    def report(status: int, iters: int, changing: int, history: Sequence[int] = (), chunks: int = 0,
               phases: str = "", local: bool = False, answer: pa.Table | None = None,
               clock: Sequence[float] = ()) -> Iterator[pa.RecordBatch]:
        meta = status_json(status, iters, changing, history, chunks, phases, local, clock)
        if reports is None:
            yield status_row(out_schema, meta)
            return
        blob = None
        if answer is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, answer.schema) as w:
                w.write_table(answer)
            blob = sink.getvalue().to_pybytes()
        reports.add([(meta, blob)])
        return
        yield  # a generator

    def looped(batches: Iterator[pa.RecordBatch], drop: int | None = None) -> Iterator[pa.RecordBatch]:
        """The loop over the task's rows; ``drop``: the time of a slice's snapshot, whose answer
        is not the slice's (:class:`spark_differential.engine.chunks.Spread`)."""
        if program.parts > 1:  # one of the loop's key partitions: the tasks decide and run together
            exchange = barrier_exchange()
            try:
                yield from keyed(batches, exchange)
            finally:
                exchange.close()
            return
        seen: list[pa.RecordBatch] = []
        rows = 0
        started = _time.perf_counter()
        for b in batches:
            rows += b.num_rows
            if rows > program.limit:
                yield from report(TOO_LARGE, 0, rows)
                return
            seen.append(b)
        table = pa.Table.from_batches(seen) if seen else None
        if table is None or table.num_rows == 0:
            yield from report(DONE, 0, 0, local=program.local_rows > 0)
            return
        yield from answered(table, started, drop)

    def keyed(batches: Iterator[pa.RecordBatch], exchange: Exchange) -> Iterator[pa.RecordBatch]:
        """This task's part of a loop in key partitions: too large if any task's part is."""
        seen: list[pa.RecordBatch] = []
        rows = 0
        started = _time.perf_counter()
        for b in batches:
            rows += b.num_rows
            if rows <= program.limit:
                seen.append(b)
            else:
                seen.clear()
        largest = max(v[0] for v in exchange.gather([rows]))
        if largest > program.limit:
            yield from report(TOO_LARGE, 0, largest)
            return
        table = pa.Table.from_batches(seen) if seen else program.input_schema.empty_table()
        yield from answered(table, started, None, exchange)

    def answered(table: pa.Table, started: float, drop: int | None,
                 exchange: Exchange | None = None) -> Iterator[pa.RecordBatch]:
        """The loop over the task's input rows, its answer yielded, its report last."""
        import pyarrow.compute as pc

        tags = table.column(SRC)
        sources = [source_table(table.filter(pc.equal(tags, j)), j, cols) for j, cols in enumerate(program.sources)]
        read = _time.perf_counter()
        # the answer's pieces go to the JVM as the loop yields them (stream), but for a small
        # answer, held until it is known small enough to come back with the job
        clock: list[float] = []  # seconds into the loop at the end of each iteration
        run = stream(program, sources, exchange, clock)
        held: list[pa.Table] | None = []
        rows = nbytes = 0
        while True:
            try:
                piece = next(run)
            except StopIteration as end:
                history, nchunks = end.value
                break
            if drop is not None:  # the answer at the slice's snapshot time is not this slice's
                piece = piece.filter(pc.not_equal(piece.column(leaves(program.width)[0]), drop))
            if held is not None:
                held.append(piece)
                rows, nbytes = rows + piece.num_rows, nbytes + piece.nbytes
                if rows <= program.local_rows and nbytes <= LOCAL_RESULT_BYTES:
                    continue
                pieces, held = held, None
            else:
                pieces = [piece]
            for p in pieces:
                yield from runs(p, program.data, out_schema).to_batches()
        phases = f"{read - started:.3f},{_time.perf_counter() - read:.3f}"
        if history[-1]:
            yield from report(LIMIT, len(history), history[-1], history, nchunks, phases, clock=clock)
            return
        # program.local_rows is 0 without reports (Spark Connect): nothing is held there
        local = held is not None and program.local_rows > 0
        answer = (pa.concat_tables(held) if held else program.roots.empty_table()) if local else None
        yield from report(DONE, len(history), 0, history, nchunks, phases, local=local, answer=answer, clock=clock)

    return run


def runs(result: pa.Table, data: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The answer's rows in the task's output schema: one row per run of consecutive rows of
    equal data (at most :data:`RUN_ROWS`), their time leaves and diffs in the list column
    :data:`ROWS`; :data:`META` (where the schema has it) null.  Rows equal in data but not
    consecutive go in runs of their own: exploded, the rows are the same."""
    import pyarrow.compute as pc


    n = result.num_rows
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True

    for c in data:
        col = result.column(c)
        values = int_values(col)  # integers without nulls: numpy compares them
        if values is not None:
            start[1:] |= values[1:] != values[:-1]
            continue
        a, b = col.slice(1), col.slice(0, n - 1)
        try:  # equal, or both null
            same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # no equality: runs of one row
            start[:] = True
            break
        start[1:] |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    heads = np.nonzero(start)[0]
    if n and (np.diff(np.append(heads, n)) > RUN_ROWS).any():  # long runs cut every RUN_ROWS rows
        run = np.cumsum(start) - 1
        start |= (np.arange(n) - heads[run]) % RUN_ROWS == 0
        heads = np.nonzero(start)[0]
    row_type = schema.field(ROWS).type
    values = pa.StructArray.from_arrays(
        [conform(result.select([f.name]), pa.schema([f])).column(0).combine_chunks() for f in row_type.value_type],
        fields=list(row_type.value_type))
    lists = pa.ListArray.from_arrays(pa.array(np.append(heads, n).astype(np.int32)), values, type=row_type)
    at = pa.array(heads)
    arrays = [lists if f.name == ROWS else pa.nulls(len(heads), pa.string()) if f.name == META
              else result.column(f.name).take(at) for f in schema]
    return conform(pa.Table.from_arrays(arrays, names=schema.names), schema)


def status_json(status: int, iters: int, changing: int, history: Sequence[int] = (), chunks: int = 0,
                 phases: str = "", local: bool = False, clock: Sequence[float] = ()) -> str:
    """How a task ended, as JSON: status, iterations, changes of the last one, changes per
    iteration (comma-separated), time chunks, phases (seconds reading, iterating), whether
    the answer came back with the job, seconds into the loop at each iteration's end
    (comma-separated; empty where groups of chunks ran on threads)."""
    import json

    return json.dumps({"status": status, "iters": iters, "changing": changing, "history": ",".join(map(str, history)),
                       "chunks": chunks, "phases": phases, "local": local,
                       "clock": ",".join(f"{c:.3f}" for c in clock)})


def status_row(schema: pa.Schema, meta: str) -> pa.RecordBatch:
    """The task's last row on Spark Connect: the answer's columns null, :data:`META` how it
    ended (:func:`status_json`)."""
    arrays = [pa.array([meta if f.name == META else None], f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def metrics(statuses: Sequence[str | None]) -> dict[str, Any]:
    """The tasks' status rows (:data:`META`, JSON) as one: each number's maximum over the
    tasks, the strings of one of them, ``local`` if any was."""
    import json

    rows = [json.loads(x) for x in statuses if x]
    if not rows:
        return {}
    out = dict(rows[0])
    for k in ("status", "iters", "changing", "chunks"):
        out[k] = max(int(r.get(k) or 0) for r in rows)
    out["local"] = any(r.get("local") for r in rows)
    return out
