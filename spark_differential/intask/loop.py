"""A ``dd_iterate`` loop run whole inside one Spark task.

On ``(data, time, diff)`` this computes exactly what the distributed loop of
:mod:`spark_differential.loop.iterate` computes: at every outer time the fixed point of
``x = body(x)`` started from the roots, as updates at the outer times.  Only where
the work happens differs.  A loop whose inputs are small pays Spark's scheduler
once per iteration on the distributed path (a job or more each, whatever its
data); here the whole loop is one task of one job:

* **Recording** (driver, no job): the body is called once on empty placeholder
  DataFrames.  Every ``dd_*`` operator it calls records a step (its kernel, its
  parameters, which of its inputs vary with the loop and which come from outside)
  and returns a fresh placeholder; the linear steps between them (``select``,
  ``where``, ``withColumn``, unions) are read from the Spark plan and translated to
  DuckDB SQL (:mod:`spark_differential.intask.translate` on a classic session; on Spark
  Connect :mod:`spark_differential.intask.translate_connect` reads the client's plan, the
  placeholders being empty local relations known by their plan node).  Anything the translator or the
  recorder does not cover raises :class:`~spark_differential.intask.translate.Untranslatable`
  and the loop runs distributed, with one log line saying why.
* **Running** (executor): the roots and every collection from outside the loop go
  to one task as one Arrow table (tagged by source); the task iterates the recorded
  program with the library's kernels called directly on Arrow tables, keeping each
  operator's trace in memory.  Iteration ``i`` gives each stateful step its new
  updates and the trace rows of the keys they touch (``_new`` flags), exactly as the
  distributed path does, and outer collections enter at iteration 0 only.
* Over a totally ordered time the task cuts the loop into **time chunks** itself
  (the rule of :mod:`spark_differential.engine.chunks`, planned from the rows at hand, with
  larger automatic chunks: ``chunks.LOCAL_FACTOR`` times the live rows, at least
  ``chunks.LOCAL_MIN_ROWS`` updates):
  chunked forms built in DuckDB, the chunk one more key of every operator, the
  answers un-chunked at the end.  With ``spark_differential.iterate.localThreads``
  above 1 (default: the cores of a ``local[N]`` master, at most 4; 1 elsewhere) the chunks are cut into that many groups of about equal rows,
  each group's loop run on a thread of the task.
* Each operator's trace is kept in batches consolidated and sorted by the operator's
  key, so an iteration finds the trace rows of the keys it touches by binary search.
* A join of the loop's updates with an outer collection reads, from iteration 1 on,
  that collection's trace prepared once (:mod:`spark_differential.kernels.fixed_join`:
  it no longer changes), not its touched rows gathered and numbered again.
* **The answer** (``(data, time, diff)`` at the outer times) leaves the task as it is
  known (a group of time chunks' answer as soon as its loop ends, while the others go
  on), one row per run of rows with equal data, their times and diffs in one list
  column (:data:`ROWS`), which the returned DataFrame explodes: the JVM makes and
  keeps a few large rows instead of one small row per change.  It stays in the job's
  local checkpoint; but an answer of at most :data:`LOCAL_RESULT_ROWS` rows
  (:data:`LOCAL_RESULT_BYTES`) on a classic session comes back to the driver with the
  task's result (an accumulator), and the returned DataFrame is then local rows: a
  later action on it runs no job for them.
* A task that receives more than ``spark_differential.iterate.localRows`` input
  rows (default :data:`DEFAULT_ROWS`, :data:`DEFAULT_ROWS_LOCAL` on a local master;
  ``0`` disables the path) stops reading and
  says so; the loop then runs distributed.  How the task ended (done, too large, or
  out of iterations; its changes per iteration) reaches the driver through a PySpark
  accumulator, which Spark merges from the successful attempt of the task only; on
  Spark Connect (no accumulators) through the task's last row (:data:`META`), read
  back from the checkpoint, one small job.
* ``spark_differential.iterate.localSpread=always`` instead plans the chunks on the
  driver and runs one task per partition over its chunks, the answers consolidated
  across chunks by Spark (measured slower than both other paths on the BFS benchmark,
  so never chosen by itself).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time as _time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_differential.core import settings as _conf
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, integral_sql, qcols
from spark_differential.core.lattice import Total
from spark_differential.core.lazy import lazy
from spark_differential.core.session import is_connect
from spark_differential.intask.translate import (
    NoArrow,
    Relation,
    Translator,
    Untranslatable,
    evaluate,
    leaves,
    placeholder,
)

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")

CONF = "spark_differential.iterate.localRows"
DEFAULT_ROWS = 1_000_000
# on a local master the task's Python worker shares the driver's machine, with no
# executor container whose memory limit it counts against: 10^6-change BFS
# (2,002,001 input rows) runs in one task at a peak of about 3.5 GB there
DEFAULT_ROWS_LOCAL = 2_500_000
SRC = "_sd_src"
# on Spark Connect (no accumulators) the task's one column besides the answer's: null on the
# answer's rows; on its last row (the status row, the answer's columns null) how the task ended,
# as JSON (_status_json)
META = "_sd_meta"
PART = "_sd_part"  # the chunk deciding which task a row goes to (spread mode)
# the task's answer leaves it as one row per run of rows with equal data (the answer comes
# sorted by its data where its columns pack), their times and diffs in this list column, at most
# RUN_ROWS to a row; the loop's DataFrame explodes it (inline).  The JVM then makes and keeps a
# few large rows instead of one small row per change: 762,695 BFS changes checkpointed in
# 0.16-0.19 s against 0.20-0.24 s, in a third of the memory, and with fewer objects for its GC
ROWS = "_sd_rows"
RUN_ROWS = 1 << 16
# an answer of at most this many rows and Arrow bytes comes back to the driver with the task's
# result (classic sessions: the accumulator of _Reports), and the loop's DataFrame is local rows
# (a later collect runs no Spark job); a larger one stays where the job left it (a local
# checkpoint on the executor)
LOCAL_RESULT_ROWS = 10_000
LOCAL_RESULT_BYTES = 1 << 20
SPREAD_CONF = "spark_differential.iterate.localSpread"
DONE, TOO_LARGE, LIMIT = 0, 1, 2


def master_of(spark: Any) -> str:
    """The session's master URL (``""`` when unknown): the SparkContext's on a classic
    session, the server's ``spark.master`` setting on Spark Connect."""
    if is_connect(spark):
        try:
            return str(_conf.get(spark, "spark.master", "") or "")
        except Exception:  # noqa: BLE001 - a server that does not say
            return ""
    try:
        return str(spark.sparkContext.master)
    except Exception:  # noqa: BLE001 - a session without a SparkContext
        return ""


def default_rows(spark: Any) -> int:
    """The default of ``localRows``: :data:`DEFAULT_ROWS`, or :data:`DEFAULT_ROWS_LOCAL`
    on a ``local``/``local-cluster`` master (executors on the driver's machine; on Spark
    Connect, the server's machine)."""
    return DEFAULT_ROWS_LOCAL if master_of(spark).startswith("local") else DEFAULT_ROWS


def rows_setting(spark: Any) -> int:
    """Input rows a loop may have to run inside one task (``0``: never)."""
    from spark_differential.errors import ConfigurationError

    default = default_rows(spark)
    try:
        raw = str(_conf.get(spark, CONF, str(default))).strip().lower()
    except Exception:  # pragma: no cover - a session without runtime conf
        return default
    if raw in ("off", "false", "none", ""):
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        raise ConfigurationError(f"{CONF} must be a number of rows (0 or 'off' to disable); got {raw!r}") from None


THREADS_CONF = "spark_differential.iterate.localThreads"
DEFAULT_THREADS = 1
# on a ``local[N]`` master the loop's one task leaves the other cores idle: 10^5-change BFS
# (distinct times) took 3.2-3.3 s with 2 threads against 4.5-5.2 s with one, on 2 cores
MAX_LOCAL_THREADS = 4
# below this many (chunked) input rows threads cost more than they save (10^4-change BFS, 22,001
# input rows: 1.02 s with 2 threads against 0.79 s with one)
THREAD_MIN_ROWS = 100_000


def default_threads(spark: Any) -> int:
    """The default of ``localThreads``: the cores of a ``local[N]``/``local[*]`` master (at
    most :data:`MAX_LOCAL_THREADS`), else :data:`DEFAULT_THREADS` (on a cluster, or
    ``local-cluster``, other tasks may use the executor's other cores)."""
    import os
    import re

    master = master_of(spark)
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master.strip())
    if m is None:
        return DEFAULT_THREADS
    cores = (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    return max(1, min(cores, MAX_LOCAL_THREADS))


def thread_min_rows(spark: Any) -> int:
    """Rows below which the loop runs on one thread: :data:`THREAD_MIN_ROWS` under the
    default thread count, none when ``localThreads`` is set explicitly."""
    try:
        explicit = _conf.get(spark, THREADS_CONF, None) is not None
    except Exception:  # noqa: BLE001 - a session without runtime conf
        explicit = False
    return 0 if explicit else THREAD_MIN_ROWS


def threads_setting(spark: Any) -> int:
    """Threads a loop inside one task may run its groups of time chunks on
    (``spark_differential.iterate.localThreads``, default :func:`default_threads`)."""
    from spark_differential.errors import ConfigurationError

    default = default_threads(spark)
    try:
        raw = str(_conf.get(spark, THREADS_CONF, str(default))).strip()
    except Exception:  # pragma: no cover - a session without runtime conf
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{THREADS_CONF} must be a positive number of threads; got {raw!r}")
    return value


# ---------------------------------------------------------------------------------
# the program a task runs (picklable)


@dataclass(frozen=True)
class Chunking:
    """Time chunks ``[t0 + c·width, t0 + (c+1)·width)`` (encoded time), ``count`` of them, and
    the kernel column an operator keys (or tags) its state with."""

    t0: int
    width: int
    count: int
    column: str = ""

    @property
    def last(self) -> int:
        return self.t0 + (self.count - 1) * self.width

    def of(self, leaf: Any) -> Any:
        """The chunk (its start) of encoded times, as a numpy array."""
        t = np.asarray(leaf, dtype=np.int64)
        return t - (t - self.t0) % self.width


@dataclass(frozen=True)
class StepInput:
    """One input of a stateful step: a relation of the loop, or an outer source."""

    relation: Relation | None  # over the loop's tables (None: an outer source)
    source: int | None  # index of the outer source (None: a loop relation)
    keys: tuple[str, ...]
    data: tuple[str, ...]
    prefix: str  # the kernel's names of the data columns (``_a`` or ``_b``)
    schema: pa.Schema  # the kernel's input columns (keys, data, times, _d, _new), typed
    keep: bool  # whether the step keeps a trace of this input's updates
    chunk: Chunking | None = None  # when the loop runs in time chunks: the chunk column to add


@dataclass(frozen=True)
class Stateful:
    name: str
    kernel: Callable[..., pa.Table]
    params: Any
    key_cols: tuple[str, ...]  # kernel columns deciding which trace rows a new update touches
    inputs: tuple[StepInput, ...]
    out_schema: pa.Schema  # the kernel's output (internal names, times, _d)
    out_columns: tuple[tuple[str, str], ...]  # internal name -> user name
    width: int


@dataclass(frozen=True)
class Concat:
    name: str
    parts: tuple[tuple[Relation | None, int | None], ...]  # loop relation, or outer source (iteration 0 only)
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Program:
    steps: tuple[Stateful | Concat, ...]
    output: Relation
    data: tuple[str, ...]
    width: int
    roots: pa.Schema  # data, time leaves, diff
    sources: tuple[tuple[str, ...], ...]  # each source's columns (data, leaves, diff); source 0: the roots
    max_iterations: int | None
    limit: int
    chunk_rows: int | None = 0  # updates per time chunk (None: auto; 0: never chunk)
    chunking: Chunking | None = None  # chunks planned on the driver: the sources arrive in chunked form
    threads: int = 1  # groups of time chunks run at once, each on a thread of the task
    thread_min_rows: int = 0  # fewer (chunked) input rows than this: one thread (the default's rule)
    local_rows: int = 0  # an answer of at most this many rows (and LOCAL_RESULT_BYTES) comes back with the task's report


# ---------------------------------------------------------------------------------
# recording (driver)


def translator_for(spark: Any, tables: dict[str, tuple[str, Sequence[str]]], width: int,
                   use_json: bool = True) -> Translator:
    """The session's reader of linear steps into DuckDB SQL over ``tables``: on Spark
    Connect the client's plan, read in this process (:mod:`spark_differential.intask.translate_connect`),
    else the analysed plan (``use_json``: in one py4j round trip, as Spark's JSON)."""
    ansi = str(_conf.get(spark, "spark.sql.ansi.enabled", "true")).lower() == "true"
    if is_connect(spark):
        from spark_differential.intask.translate_connect import ConnectTranslator

        return ConnectTranslator(spark, tables, width, ansi=ansi)
    return Translator(spark._jvm, tables, width, ansi=ansi, use_json=use_json)


class KernelSchemas:
    """The Arrow schemas of a recorded program's steps, with the session's settings (the
    large-types setting asked once).  Needs ``self.spark``."""

    spark: Any
    _large: bool | None = None

    def _schema(self, fields: Sequence[Any]) -> pa.Schema:
        from pyspark.sql import types as T

        from spark_differential.engine.distributed import arrow_schema, large_var_types

        if self._large is None:  # the session's setting, asked once per recording
            self._large = large_var_types(self.spark)
        return arrow_schema(self.spark, T.StructType(list(fields)), large=self._large)

    def _input_schema(self, inp: Any, kernel_type: Any) -> pa.Schema:
        """A step input's kernel columns: keys, data, time leaves, diff, ``_new``."""
        from pyspark.sql import types as T

        from spark_differential.engine.distributed import kernel_fields, time_fields
        from spark_differential.kernels.common import NEW

        return self._schema([*kernel_fields(inp), *time_fields(kernel_type), T.StructField(NEW, T.BooleanType())])


class Recorder(KernelSchemas):
    """Collects the steps of one body while it is called on placeholders."""

    def __init__(self, spark: Any, loop_t: Any, cs: CollectionSchema, roots: Any) -> None:
        from pyspark.sql import types as T

        self.spark = spark
        self.loop_t = loop_t
        self.width = loop_t.inner.width
        self.steps: list[Stateful | Concat] = []
        self.tables: dict[str, tuple[str, Sequence[str]]] = {}
        # (DataFrame, its CollectionSchema) of the roots (source 0, also when the body reads them
        # again, as BFS concatenates its roots) and of every outer collection the body reads
        self.sources: list[tuple[Any, Any]] = [(roots, cs)]
        self.connect = is_connect(spark)
        self.translator: Translator = translator_for(spark, self.tables, self.width)
        self._large: bool | None = None
        self.T = T
        self.loop_var = self.placeholder("v", [cs.field(c) for c in cs.data_cols])

    def placeholder(self, name: str, fields: Sequence[Any]) -> Any:
        T = self.T
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

    def source(self, df: Any, cs: CollectionSchema, ttype: Any) -> int:
        if ttype != self.loop_t.inner or cs.ttype != ttype:
            raise Untranslatable(f"an outer collection enters at {ttype.describe()}, not the loop's time type")
        for i, (d, _) in enumerate(self.sources):
            if d is df:
                return i
        self.sources.append((df, cs))
        return len(self.sources) - 1

    def stateful(
        self,
        op: str,
        kernel: Callable[..., pa.Table],
        params: Any,
        inputs: Sequence[Any],
        entries: Sequence[Any],
        out_fields: Sequence[Any],
        out_columns: Sequence[tuple[str, str]],
        kernel_type: Any,
    ) -> Any:
        from spark_differential.engine.distributed import time_fields
        from spark_differential.kernels.common import keys, names
        from spark_differential.kernels.join import JoinParams
        from spark_differential.kernels.reduce import ReduceParams, ThresholdParams
        from spark_differential.loop.iterate import _keeps_trace

        T = self.T
        if kernel_type != self.loop_t.inner:
            raise Untranslatable(f"{op} works over {kernel_type.describe()}, not the loop's outer time")
        if isinstance(params, JoinParams) and params.mode in ("join", "semijoin", "antijoin"):
            key_cols = tuple(keys(params.nkeys))
        elif isinstance(params, ReduceParams):
            key_cols = tuple(keys(params.nkeys))
        elif isinstance(params, ThresholdParams):
            key_cols = tuple(names("_a", params.ndata))
        else:
            raise Untranslatable(f"{op} has no in-task form")
        if any(e.loop_id not in (None, self.loop_t.loop_id) for e in entries):
            raise Untranslatable(f"{op} reads a collection of an enclosing loop")
        keep = _keeps_trace(params, [e.loop_id is not None for e in entries])
        step_inputs = []
        for inp, e, kp in zip(inputs, entries, keep):
            if inp.time_type != kernel_type:
                raise Untranslatable(f"{op}: an input enters through a time conversion")
            schema = self._input_schema(inp, kernel_type)
            if e.loop_id is None:
                rel, src = None, self.source(inp.df, inp.cs, kernel_type)
            else:
                rel, src = self.translator.relation(inp.df), None
            step_inputs.append(StepInput(rel, src, tuple(inp.keys), tuple(inp.data), inp.prefix, schema, kp))
        name = f"n{len(self.steps)}"
        out_schema = self._schema([*out_fields, *time_fields(kernel_type)])
        self.steps.append(Stateful(name, kernel, params, key_cols, tuple(step_inputs), out_schema,
                                   tuple(out_columns), self.width))
        by_internal = {f.name: f for f in out_fields}
        fields = [T.StructField(user, by_internal[internal].dataType, True) for internal, user in out_columns]
        return self.placeholder(name, fields)

    def concat(self, dfs: Sequence[Any], schemas: Sequence[CollectionSchema], entries: Sequence[Any]) -> Any:
        data = list(schemas[0].data_cols)
        parts: list[tuple[Relation | None, int | None]] = []
        for d, cs, e in zip(dfs, schemas, entries):
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
        return self.placeholder(name, [schemas[0].field(c) for c in data])

    def program(self, out: Any, cs: CollectionSchema, max_iterations: int | None, limit: int) -> Program:
        data = list(cs.data_cols)
        output = self.translator.relation(out, [*data, TIME, DIFF])
        roots = self._schema([
            *[cs.field(c) for c in data],
            *[self.T.StructField(c, self.T.LongType(), True) for c in leaves(self.width)],
            self.T.StructField(DIFF, self.T.LongType(), True),
        ])
        sources = tuple(
            (*scs.data_cols, *leaves(self.width), DIFF) for _, scs in self.sources
        )
        from spark_differential.engine.chunks import rows_setting

        chunk_rows = rows_setting(self.spark) if isinstance(cs.ttype, Total) else 0
        return Program(tuple(self.steps), output, tuple(data), self.width, roots, sources, max_iterations, limit,
                       chunk_rows, threads=threads_setting(self.spark), thread_min_rows=thread_min_rows(self.spark))


# ---------------------------------------------------------------------------------
# running (executor)


def _consolidate(table: pa.Table, cols: Sequence[str], diff: str = DIFF) -> pa.Table:
    from spark_differential.kernels import native

    if table.num_rows == 0:
        return table
    return native.consolidated(table, cols, diff)


def _relation(rel: Relation, tables: dict[str, pa.Table]) -> pa.Table:
    from spark_differential.kernels import duck

    if rel.picks is not None:  # columns of one table, renamed: no query
        source, picked = rel.picks
        table = tables[source]
        return pa.Table.from_arrays([table.column(c) for c in picked], names=list(rel.columns))

    if rel.arrow is not None:
        try:
            return evaluate(rel.arrow, tables)
        except NoArrow:
            pass
    used = {n: t for n, t in tables.items() if f"${n}" in rel.sql}
    return duck.query(rel.sql, used)


def _concat(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    from spark_differential.kernels.common import conform

    parts = [conform(t, schema) for t in tables if t.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _kernel_input(table: pa.Table, inp: StepInput, new: bool, width: int) -> pa.Table:
    """User-named rows (data, time leaves, diff) as the kernel's columns."""
    from spark_differential.kernels.common import NEW, D, conform, keys, names, times

    cols = [table.column(c) for c in (*inp.keys, *inp.data, *leaves(width), DIFF)]
    cols.append(pa.array(np.full(table.num_rows, new)))
    labels = [*keys(len(inp.keys)), *names(inp.prefix, len(inp.data)), *times(width), D, NEW]
    if inp.chunk is not None:
        cols.append(pa.array(inp.chunk.of(table.column(leaves(width)[0]).to_numpy(zero_copy_only=False))))
        labels.append(inp.chunk.column)
    return conform(pa.Table.from_arrays(cols, names=labels), inp.schema)


def _touching(trace: pa.Table, new: Sequence[pa.Table], key_cols: Sequence[str]) -> pa.Table:
    """Rows of ``trace`` whose key some row of ``new`` has."""
    from spark_differential.kernels import native

    if trace.num_rows == 0 or not key_cols:
        return trace
    present = [t.select(list(key_cols)) for t in new if t.num_rows]
    if not present:
        return trace.slice(0, 0)
    return native.touching(trace, pa.concat_tables(present), key_cols)


_TIME_LEAF = re.compile(r"_t\d+")  # a kernel's time leaf columns (kernels.common.times)
_LAZY_BATCHES = 32  # a trace's batches left unmerged while a dd_min's output is kept (_Trace.extremum)


@dataclass
class _Trace:
    """One input's earlier updates (kernel columns, ``_new`` false), merged size-tiered.

    A batch is kept consolidated and sorted by ``key`` where its columns allow
    (:func:`spark_differential.kernels.native.key_sorted`), so the rows of the keys an
    iteration touches are found by binary search instead of a pass over the trace."""

    schema: pa.Schema
    key: tuple[str, ...] = ()
    batches: list[Any] = field(default_factory=list)  # pa.Table, or native.KeySorted
    # the trace prepared as a join's side that no longer changes (kernels.fixed_join.Fixed;
    # False: it cannot be), made on first use and dropped when a batch is added
    fixed: Any = None
    # a traced dd_min/dd_max's output kept between iterations (kernels.extremum_cache.ExtremumCache),
    # made while the trace is empty; False once a batch was added without it (it no longer
    # describes the trace)
    extremum: Any = None

    @staticmethod
    def _rows(batch: Any) -> pa.Table:
        return batch if isinstance(batch, pa.Table) else batch.table

    def table(self) -> pa.Table:
        """Every update of the trace."""
        return pa.concat_tables([self._rows(b) for b in self.batches]) if self.batches else self.schema.empty_table()

    def touching(self, new: Sequence[pa.Table]) -> pa.Table:
        """The trace's updates whose key some row of ``new`` has (all of them: no key)."""
        from spark_differential.kernels import native
        from spark_differential.kernels.common import conform

        if not self.key:
            return self.table() if any(t.num_rows for t in new) else self.schema.empty_table()
        present = [t.select(list(self.key)) for t in new if t.num_rows]
        if not present or not self.batches:
            return self.schema.empty_table()
        keys_ = pa.concat_tables(present)
        distinct = native.distinct_keys(keys_, self.key)  # once for every batch
        parts = [_touching(b, [keys_], self.key) if isinstance(b, pa.Table)
                 else b.touching(keys_) if distinct is None else b.touching_distinct(distinct)
                 for b in self.batches]
        return _concat(parts, self.schema) if len(parts) > 1 else conform(parts[0], self.schema)

    def add(self, new: pa.Table) -> None:
        """Keep ``new``'s updates (as old ones from now on)."""
        if new.num_rows == 0:
            return
        self.add_batch(self.batch(new))

    def batch(self, new: pa.Table) -> Any:
        """``new``'s updates as the trace keeps a batch of them (``_new`` false; consolidated and
        sorted by key, a :class:`~spark_differential.kernels.native.KeySorted`, where the columns allow)."""
        from spark_differential.kernels.common import NEW

        old = new.set_column(new.schema.get_field_index(NEW), NEW, pa.array(np.zeros(new.num_rows, dtype=bool)))
        return self._sorted(old)

    def add_batch(self, batch: Any, cached: bool = False) -> None:
        """Keep a batch made by :meth:`batch` (as old updates from now on); ``cached``: the
        batch went through :attr:`extremum` already (else that is dropped)."""
        if self._rows(batch).num_rows == 0:
            return
        self.fixed = None
        if not cached:
            self.extremum = False
        self.batches.append(batch)
        # merge the newest batches while an older one is at most twice their size; with a
        # dd_min's output kept (extremum) the trace is read only for a few keys' sweeps, and
        # up to _LAZY_BATCHES batches stay as they came (each binary-searched by those sweeps)
        lazy = _LAZY_BATCHES if self.extremum else 1
        while len(self.batches) > lazy and self._rows(self.batches[-2]).num_rows <= 2 * self._rows(self.batches[-1]).num_rows:
            merged = pa.concat_tables([self._rows(b) for b in self.batches[-2:]])
            self.batches[-2:] = [self._sorted(merged, runs=True)]
            if self._rows(self.batches[-1]).num_rows == 0:
                self.batches.pop()

    def _sorted(self, table: pa.Table, runs: bool = False) -> Any:
        """``table`` as a batch of the trace; ``runs``: it is batches of the trace concatenated."""
        from spark_differential.kernels import native
        from spark_differential.kernels.common import conform

        if self.key:
            # within a key in time order: what a reduction's sweep reads (kernels.extremum_traced)
            kept = native.key_sorted(table, self.key, then=[c for c in table.column_names if _TIME_LEAF.fullmatch(c)],
                                     runs=runs)
            if kept is not None:
                # conform casts at most: the int64 values kept for KeySorted.values stay the same
                return dataclasses.replace(kept, table=conform(kept.table, self.schema))
        cols = [c for c in table.column_names if c != "_d"]
        return conform(_consolidate(table, cols, diff="_d"), self.schema)


def _run_step(step: Stateful, tables: dict[str, pa.Table], sources: Sequence[pa.Table], traces: list[_Trace],
              iteration: int, consolidated: set[str] | None = None,
              record: Callable[[int, pa.Table], None] | None = None) -> pa.Table:
    """One stateful step of iteration ``iteration``: its kernel over this iteration's new
    updates and the trace rows of the keys they touch; the new updates join the traces.

    An outer source enters as new updates at iteration 0 and is kept in its input's
    trace, the old updates of every later iteration.  ``consolidated`` (when given) gets
    the step's name when its output is known consolidated (a traced ``dd_min``/``dd_max``:
    one row per key, time and value, none with a zero diff).  ``record`` (when given) is
    called with each input's index and the new updates it receives at this iteration
    (kernel columns, not consolidated; inputs receiving none are skipped)."""
    from spark_differential.kernels.common import conform

    news: list[pa.Table | None] = []
    olds: list[_Trace | None] = []
    for inp, trace in zip(step.inputs, traces):
        if inp.relation is None:
            if iteration == 0:
                news.append(_kernel_input(sources[inp.source], inp, True, step.width))  # type: ignore[index]
                olds.append(None)
            else:
                news.append(None)
                olds.append(trace)
            continue
        new = _kernel_input(_relation(inp.relation, tables), inp, True, step.width)
        news.append(new)
        olds.append(trace if inp.keep else None)
    present = [n for n in news if n is not None]
    if record is not None:
        for k, n in enumerate(news):
            if n is not None and n.num_rows:
                record(k, n)
    traced = None
    batch = None  # the one loop input's new updates as its trace's next batch, made once (traced extremum)
    if not any(n.num_rows for n in present):
        out = step.out_schema.empty_table()
    elif (traced := _traced_extremum(step, news, olds)) is not None:
        traced, batch = traced
        out = conform(traced, step.out_schema)
        if consolidated is not None:
            consolidated.add(step.name)
    elif (joined := _fixed_join(step, news, olds)) is not None:
        out = conform(joined, step.out_schema)
    else:
        sides = []
        for inp, new, old in zip(step.inputs, news, olds):
            parts = []
            if old is not None:
                parts.append(old.touching(present))
            if new is not None:
                parts.append(new)
            sides.append(_concat(parts, inp.schema))
        out = conform(step.kernel(step.params, *sides), step.out_schema)
    for inp, new, trace in zip(step.inputs, news, traces):
        if batch is not None:
            trace.add_batch(batch, cached=True)
        elif new is not None and (inp.relation is None or inp.keep):
            trace.add(new)
    return user_named(step, out)


def user_named(step: Stateful, out: pa.Table) -> pa.Table:
    """A step's kernel output (internal names) as the body sees it: user names, time leaves, diff."""
    from spark_differential.kernels.common import D, times

    t = times(step.width)
    labels = {internal: user for internal, user in step.out_columns}
    labels.update(dict(zip(t, leaves(step.width))))
    labels[D] = DIFF
    keep = [internal for internal, _ in step.out_columns] + t + [D]
    out = out.select(keep)
    return out.rename_columns([labels[c] for c in keep])


def _traced_extremum(step: Stateful, news: Sequence[pa.Table | None],
                     olds: Sequence[_Trace | None]) -> tuple[pa.Table, Any] | None:
    """``dd_min``/``dd_max`` of one loop input read against its trace in place
    (:func:`spark_differential.kernels.extremum_traced.min_max_traced`: the touched trace rows
    are never gathered into a table, nor numbered), with the new updates as the trace's
    next batch (sorted once, for both: :meth:`_Trace.batch`), or ``None`` where that does
    not apply (the step then reads its trace and calls its kernel).

    The step's output is kept between iterations (:attr:`_Trace.extremum`, an
    ``ExtremumCache`` made at the first iteration): most keys' changes then come from their
    kept output and the new updates, without reading their trace."""
    from spark_differential.kernels.reduce import ReduceParams

    p = step.params
    if not (isinstance(p, ReduceParams) and p.agg in ("min", "max") and p.ndata == 1 and p.ttype.is_total()
            and step.width == 1 and len(news) == 1 and news[0] is not None and olds[0] is not None):
        return None
    from spark_differential.kernels.extremum_cache import ExtremumCache
    from spark_differential.kernels.extremum_traced import min_max_traced
    from spark_differential.kernels.native import KeySorted

    trace = olds[0]
    if trace.extremum is None and not trace.batches:
        trace.extremum = ExtremumCache(p.nkeys)
    cache = trace.extremum or None
    batch = trace.batch(news[0])
    if isinstance(batch, KeySorted):  # consolidated, in key and time order: the sweep needs no sort of its own
        out = min_max_traced(p.nkeys, p.agg == "max", p.out_types[0], batch.table, trace.batches, trace.key,
                             sorted_new=batch, cache=cache)
    else:
        out = min_max_traced(p.nkeys, p.agg == "max", p.out_types[0], news[0], trace.batches, trace.key,
                             cache=cache)
    return None if out is None else (out, batch)


def _fixed_join(step: Stateful, news: Sequence[pa.Table | None], olds: Sequence[_Trace | None]) -> pa.Table | None:
    """A join of the loop's new updates with an outer collection after iteration 0 (its
    updates all in its trace, none new: BFS's edges), by
    :func:`spark_differential.kernels.fixed_join.join_fixed` against the trace prepared once;
    ``None`` where that does not apply (the step then reads its trace and calls its kernel)."""
    from spark_differential.kernels.common import keys, names, times
    from spark_differential.kernels.join import JoinParams

    p = step.params
    if not (isinstance(p, JoinParams) and p.mode == "join" and p.ttype.is_total() and step.width == 1
            and len(news) == 2):
        return None
    loop = [j for j in range(2) if news[j] is not None and olds[j] is None]
    fixed = [j for j in range(2) if news[j] is None and olds[j] is not None]
    if len(loop) != 1 or len(fixed) != 1:
        return None
    new, trace = news[loop[0]], olds[fixed[0]]
    assert new is not None and trace is not None
    if not trace.batches or trace.fixed is False:
        return None
    from spark_differential.kernels import fixed_join

    inp_new, inp_fixed = step.inputs[loop[0]], step.inputs[fixed[0]]
    if trace.fixed is None:
        source = trace.batches[0] if len(trace.batches) == 1 else trace.table()
        trace.fixed = fixed_join.prepare(source, step.key_cols, names(inp_fixed.prefix, len(inp_fixed.data))) or False
        if trace.fixed is False:
            return None
    out_cols = [*keys(p.nkeys), *names("_a", p.na), *names("_b", p.nb), *times(1), "_d"]
    out = fixed_join.join_fixed(trace.fixed, new, names(inp_new.prefix, len(inp_new.data)), out_cols)
    if out is None or not p.consolidate:
        return out
    from spark_differential.kernels.join import consolidated

    return consolidated([out], out_cols[:-1])


def _run_concat(step: Concat, tables: dict[str, pa.Table], sources: Sequence[pa.Table], iteration: int) -> pa.Table:
    parts = []
    for rel, src in step.parts:
        if rel is not None:
            parts.append(_relation(rel, tables).rename_columns(list(step.columns)))
        elif iteration == 0:
            parts.append(sources[src].select(list(step.columns)))  # type: ignore[index]
    if len(parts) > 1:
        parts = [parts[0], *(_zones_like(p, parts[0].schema) for p in parts[1:])]
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})


def _zones_like(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with its timestamp columns in the time zones of ``schema``'s (a step
    translated to DuckDB returns them in DuckDB's zone name, ``Etc/UTC``, where the
    sources say ``UTC``): the same instants, which Arrow's concatenation would refuse
    to put in one column."""
    for i, (f, g) in enumerate(zip(table.schema, schema)):
        if pa.types.is_timestamp(f.type) and pa.types.is_timestamp(g.type) and f.type != g.type:
            table = table.set_column(i, f.name, table.column(i).cast(g.type))
    return table


def _plan_chunks(program: Program, sources: Sequence[pa.Table]) -> Chunking | None:
    """Time chunks for the loop (as :func:`spark_differential.engine.chunks.plan`, from the rows at hand;
    automatic chunks hold ``chunks.LOCAL_FACTOR`` times the live rows, at least
    ``chunks.LOCAL_MIN_ROWS`` updates: larger than the distributed loop's)."""
    import pyarrow.compute as pc

    from spark_differential.engine.chunks import LOCAL_FACTOR, LOCAL_MIN_ROWS, layout
    from spark_differential.kernels import duck, native

    if program.chunk_rows == 0 or program.width != 1:
        return None
    n = live = 0
    lo: int | None = None
    hi: int | None = None
    t = leaves(1)[0]
    for table, cols in zip(sources, program.sources):
        if table.num_rows == 0:
            continue
        data = [c for c in cols if c not in (t, DIFF)]
        if native.in_arrow(table, data, DIFF):  # no DuckDB query (its fixed cost is most of it on few rows)
            bounds = pc.min_max(table.column(t))
            r = {"live": native.consolidated(table.select([*data, DIFF]), data, DIFF).num_rows,
                 "lo": bounds["min"].as_py(), "hi": bounds["max"].as_py()}
        else:
            group = f"GROUP BY {duck.cols(data)}" if data else ""
            r = duck.query(
                f"SELECT count(*) FILTER (WHERE s <> 0) AS live, min(lo) AS lo, max(hi) AS hi FROM "
                f"(SELECT sum({DIFF}) AS s, min({t}) AS lo, max({t}) AS hi FROM $X {group}) AS g",
                {"X": table},
            ).to_pylist()[0]
        n += table.num_rows
        live += int(r["live"])
        lo = int(r["lo"]) if lo is None else min(lo, int(r["lo"]))
        hi = int(r["hi"]) if hi is None else max(hi, int(r["hi"]))
    shape = layout(n, live, lo, hi, program.chunk_rows, LOCAL_FACTOR, LOCAL_MIN_ROWS)
    return None if shape is None else Chunking(*shape)


def _chunked(table: pa.Table, cols: Sequence[str], ch: Chunking) -> pa.Table:
    """The chunked form of a source: its updates, and at every chunk's start the source
    accumulated before it (:mod:`spark_differential.engine.chunks`)."""
    from spark_differential.kernels import duck
    from spark_differential.kernels.common import conform, window

    t = leaves(1)[0]
    data = [c for c in cols if c not in (t, DIFF)]
    d = duck.cols(data)
    w = window([duck.quote(c) for c in data])
    sql = (
        f"WITH per AS (SELECT {d}{', ' if data else ''}{t} - ({t} - {ch.t0}) % {ch.width} AS _c, "
        f"sum({DIFF})::BIGINT AS _s FROM $X GROUP BY ALL), "
        f"acc AS (SELECT {d}{', ' if data else ''}_c, sum(_s) OVER ({w} ORDER BY _c ROWS UNBOUNDED PRECEDING) AS _a, "
        f"lead(_c) OVER ({w} ORDER BY _c) AS _nx FROM per) "
        f"SELECT {d}{', ' if data else ''}unnest(range(_c + {ch.width}, coalesce(_nx, {ch.last}) + 1, {ch.width})) AS {t}, "
        f"_a::BIGINT AS {DIFF} FROM acc WHERE _a <> 0 AND _c + {ch.width} <= coalesce(_nx, {ch.last})"
    )
    snap = duck.query(sql, {"X": table})
    schema = table.select(list(cols)).schema
    return pa.concat_tables([conform(table.select(list(cols)), schema), conform(snap.select(list(cols)), schema)])


def _unchunked(result: pa.Table, data: Sequence[str], ch: Chunking,
               hold: Sequence[int] = ()) -> tuple[pa.Table, pa.Table | None]:
    """Per-chunk answers as one collection: each chunk's answer, accumulated, is retracted
    where the next chunk's snapshot takes over.  Returns ``(answer, held)``: with ``hold``
    (starts of chunks but the first: where a group of chunks starts), the answer's rows at
    those times apart (``held``), else ``None``.

    Where the columns allow (integers: :func:`~spark_differential.kernels.native.key_sorted`)
    one sort consolidates the answer in ``(data, time)`` order, the retractions come from
    one pass over it (a chunk's rows of one data value are consecutive), and only the rows
    at the chunks' starts meet them; else DuckDB sums each chunk's rows."""
    from spark_differential.kernels import duck, native

    t = leaves(1)[0]
    cols = [*data, t, DIFF]
    ks = native.key_sorted(result.select(cols), list(data), diff=DIFF, then=[t]) if result.num_rows else None
    if ks is None:
        d = duck.cols(data)
        sep = ", " if data else ""
        sql = (
            f"SELECT {d}{sep}_c + {ch.width} AS {t}, -_s AS {DIFF} FROM (SELECT {d}{sep}{t} - ({t} - {ch.t0}) % {ch.width} AS _c, "
            f"sum({DIFF})::BIGINT AS _s FROM $X GROUP BY ALL) AS e WHERE _s <> 0 AND _c < {ch.last}"
        )
        ends = duck.query(sql, {"X": result})
        whole = _consolidate(pa.concat_tables([result.select(cols), ends.select(cols)], promote_options="permissive"),
                             cols[:-1])
        return _split_at(whole, hold) if hold else (whole, None)
    table = ks.table
    times = ks.values(t)
    diffs = ks.values(DIFF)
    assert times is not None and diffs is not None
    chunk = ch.of(times)
    head = np.ones(len(times), dtype=bool)
    head[1:] = (ks.codes[1:] != ks.codes[:-1]) | (chunk[1:] != chunk[:-1])
    starts = np.nonzero(head)[0]
    sums = np.add.reduceat(diffs, starts)
    keep = (sums != 0) & (chunk[starts] < ch.last)
    at = starts[keep]
    ends = table.take(pa.array(at)).select(cols)
    ends = ends.set_column(len(data), t, pa.array(chunk[at] + ch.width, ends.schema.field(t).type))
    ends = ends.set_column(len(data) + 1, DIFF, pa.array(-sums[keep], ends.schema.field(DIFF).type))
    meet = (chunk == times) & (times > ch.t0)  # the answer's rows at a chunk's start
    if not meet.any():
        return _split_at(pa.concat_tables([table, ends]), hold) if hold else (pa.concat_tables([table, ends]), None)
    edges = _consolidate(pa.concat_tables([table.filter(pa.array(meet)), ends]), cols[:-1])
    body = table.filter(pa.array(~meet))
    if not hold:
        return pa.concat_tables([body, edges]), None
    free, held = _split_at(edges, hold)
    return pa.concat_tables([body, free]), held


def _chunk_step(step: Stateful, ch: Chunking) -> Stateful:
    """``step`` with the chunk as one more key (joins, reductions) or data column (thresholds)."""
    import dataclasses

    from spark_differential.kernels.common import keys, names
    from spark_differential.kernels.reduce import ThresholdParams

    p = step.params
    if isinstance(p, ThresholdParams):
        column, params = names("_a", p.ndata + 1)[-1], dataclasses.replace(p, ndata=p.ndata + 1)
    else:
        column, params = keys(p.nkeys + 1)[-1], dataclasses.replace(p, nkeys=p.nkeys + 1)
    chunk = dataclasses.replace(ch, column=column)
    field_ = pa.field(column, pa.int64())
    inputs = tuple(dataclasses.replace(i, schema=i.schema.append(field_), chunk=chunk) for i in step.inputs)
    return dataclasses.replace(step, params=params, key_cols=(*step.key_cols, column), inputs=inputs,
                               out_schema=step.out_schema.append(field_))


def iterate(program: Program, sources: Sequence[pa.Table]) -> tuple[pa.Table, list[int], int]:
    """Run the loop from its sources (the roots first) to its fixed point: ``(result, changes of
    each iteration, number of time chunks)``; :func:`stream`'s pieces as one table.

    The last iteration's changes are nonzero only when ``max_iterations`` stopped the
    loop (the result is then empty)."""
    pieces: list[pa.Table] = []
    run = stream(program, sources)
    while True:
        try:
            pieces.append(next(run))
        except StopIteration as end:
            history, nchunks = end.value
            break
    if history[-1] or not pieces:
        return program.roots.empty_table(), history, nchunks
    return (pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)), history, nchunks


def stream(program: Program, sources: Sequence[pa.Table]) -> Generator[pa.Table, None, tuple[list[int], int]]:
    """Run the loop from its sources (the roots first) to its fixed point, yielding its
    answer in pieces (``program.roots``' columns; together one consolidated collection, no
    two pieces with a row of the same data and time) as they are known, and returning
    ``(changes of each iteration, number of time chunks)``.

    In time chunks with ``program.threads`` above one and at least ``program.thread_min_rows``
    rows (chunked), the chunks are cut into that many
    groups of about equal rows, each group's loop run on a thread of its own (the
    kernels spend most of their time in numpy, Arrow, DuckDB and numba code that
    releases the GIL); the groups never meet, so the changes of iteration ``i`` are the
    groups' changes of iteration ``i`` summed, and a group's answer is yielded as soon as
    its loop ends (while the others go on: a task's answer then travels to the JVM while
    the loop still runs), but for its rows at the times where a group starts, yielded
    last, consolidated with the other group's.

    The last iteration's changes are nonzero only when ``max_iterations`` stopped the
    loop; pieces yielded before then are not the loop's answer (there is none)."""
    from spark_differential.kernels.common import conform

    program = dataclasses.replace(program, steps=tuple(_unconsolidated(s) for s in program.steps))
    chunks = program.chunking
    if chunks is None:
        chunks = _plan_chunks(program, sources)
        if chunks is not None:
            sources = [_chunked(t, c, chunks) for t, c in zip(sources, program.sources)]
    if chunks is None:
        result, history = _loop(program, program.steps, sources)
        if not history[-1]:
            yield conform(_consolidate(result, program.roots.names[:-1]), program.roots)
        return history, 0
    steps = tuple(_chunk_step(s, chunks) if isinstance(s, Stateful) else s for s in program.steps)
    rows = sum(t.num_rows for t in sources)
    groups = _chunk_groups(sources, chunks, program.threads if rows >= program.thread_min_rows else 1)
    if len(groups) == 1:
        result, history = _loop(program, steps, sources)
        if not history[-1]:
            yield conform(_unchunked(result, program.data, chunks)[0], program.roots)
        return history, chunks.count
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    starts = _group_starts(groups, chunks)

    def one(group: list[pa.Table]) -> tuple[tuple[pa.Table, pa.Table | None] | None, list[int]]:
        # each group un-chunks its own answer on its thread: rows at times inside the
        # group's chunks are the group's alone; only the times where a group starts
        # (the previous group's last chunk hands over to it) meet rows of two groups
        res, hist = _loop(program, steps, group)
        return (None if hist[-1] else _unchunked(res, program.data, chunks, starts)), hist

    held: list[pa.Table] = []  # the groups' rows at the times where a group starts
    histories: list[list[int]] = []
    stopped = False
    with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="sd-chunks") as pool:
        running = {pool.submit(one, g) for g in groups}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                res, hist = f.result()
                histories.append(hist)
                stopped = stopped or bool(hist[-1])
                if res is None or stopped:
                    continue
                inner, edge = res
                if edge is not None:
                    held.append(edge)
                if inner.num_rows:
                    yield conform(inner, program.roots)
    history = [sum(h[i] for h in histories if i < len(h)) for i in range(max(len(h) for h in histories))]
    if not history[-1]:
        edges = pa.concat_tables(held, promote_options="permissive") if held else None
        if edges is not None and edges.num_rows:
            yield conform(_consolidate(edges, program.roots.names[:-1]), program.roots)
    return history, chunks.count


def _split_at(table: pa.Table, times: Sequence[int]) -> tuple[pa.Table, pa.Table]:
    """``table``'s rows at times other than ``times``, and its rows at ``times``."""
    import pyarrow.compute as pc

    t = leaves(1)[0]
    at = pc.is_in(table.column(t), value_set=pa.array(times, table.schema.field(t).type))
    return table.filter(pc.invert(at)), table.filter(at)


def _group_starts(groups: Sequence[Sequence[pa.Table]], ch: Chunking) -> list[int]:
    """The first chunk's start (encoded time) of every group of chunks but the first."""
    import pyarrow.compute as pc

    t = leaves(1)[0]
    starts = []
    for group in groups[1:]:
        lows = [pc.min(tb.column(t)).as_py() for tb in group if tb.num_rows]
        starts.append(int(ch.of([min(lows)])[0]))
    return starts


def _unconsolidated(step: Stateful | Concat) -> Stateful | Concat:
    """``step`` without the final consolidation of a join's output: inside the loop every
    consumer of a step's output consolidates it (kernels sum their input's rows, traces are
    kept consolidated, and so is each iteration's change of the loop variable)."""
    from spark_differential.kernels.join import JoinParams

    if isinstance(step, Stateful) and isinstance(step.params, JoinParams) and step.params.mode == "join":
        return dataclasses.replace(step, params=dataclasses.replace(step.params, consolidate=False))
    return step


def _chunk_groups(sources: Sequence[pa.Table], ch: Chunking, n: int) -> list[list[pa.Table]]:
    """The sources (in chunked form) cut into at most ``n`` groups of consecutive chunks
    holding about equal numbers of rows: each group's rows, source by source."""
    if n <= 1 or ch.count < 2:
        return [list(sources)]
    t = leaves(1)[0]
    index = [(t_.column(t).to_numpy(zero_copy_only=False) - ch.t0) // ch.width for t_ in sources]
    rows = np.zeros(ch.count, dtype=np.int64)
    for ix in index:
        rows += np.bincount(ix, minlength=ch.count)
    cum = np.cumsum(rows)
    # group g holds the chunks below cut[g]: the first chunk where the rows reach (g + 1) / n of all
    cuts = np.unique(np.searchsorted(cum, cum[-1] * np.arange(1, n) / n, side="left") + 1)
    cuts = [int(c) for c in cuts if 0 < c < ch.count]
    if not cuts:
        return [list(sources)]
    groups = []
    for lo, hi in zip([0, *cuts], [*cuts, ch.count]):
        groups.append([tb.filter(pa.array((ix >= lo) & (ix < hi))) for tb, ix in zip(sources, index)])
    return groups


def _loop(program: Program, steps: Sequence[Stateful | Concat], sources: Sequence[pa.Table],
          record: Callable[[int, int, int, pa.Table], None] | None = None) -> tuple[pa.Table, list[int]]:
    """Iterate ``steps`` from the sources to the fixed point: ``(the loop's updates, not
    consolidated (chunked form when the steps are chunked), changes per iteration)``; the
    result is empty, and the last count nonzero, when ``max_iterations`` stopped the loop.

    ``record`` (when given) is called as ``record(step, input, iteration, rows)`` with the
    new updates every input of every stateful step (``steps[step]``) receives at every
    iteration (:func:`_run_step`): what a view's loop stores (:mod:`spark_differential.incremental.loop`)."""
    from spark_differential.kernels.common import conform

    cols = [*program.data, *leaves(program.width), DIFF]
    traces = {s.name: [_Trace(i.schema, s.key_cols) for i in s.inputs] for s in steps if isinstance(s, Stateful)}
    roots = conform(sources[0], program.roots)
    parts = [roots]
    v = roots
    i = 0
    history: list[int] = []
    while True:
        tables = {"v": v}
        consolidated: set[str] = set()
        for s, step in enumerate(steps):
            if isinstance(step, Stateful):
                hook = None if record is None else (lambda k, rows, s=s, i=i: record(s, k, i, rows))
                tables[step.name] = _run_step(step, tables, sources, traces[step.name], i, consolidated, hook)
            else:
                tables[step.name] = _run_concat(step, tables, sources, i)
        out = conform(_relation(program.output, tables).rename_columns(cols), program.roots)
        if i == 0:
            import pyarrow.compute as pc

            back = conform(roots.set_column(len(cols) - 1, DIFF, pc.negate(roots.column(DIFF))), program.roots)
            out = pa.concat_tables([out, back])
            delta = conform(_consolidate(out, cols[:-1]), program.roots)
        elif _whole(program.output, tables, consolidated):
            delta = out  # a consolidated step's rows, every column kept: consolidated already
        else:
            delta = conform(_consolidate(out, cols[:-1]), program.roots)
        history.append(delta.num_rows)
        if delta.num_rows == 0:
            break
        i += 1
        if program.max_iterations is not None and i >= program.max_iterations:
            return program.roots.empty_table(), history
        parts.append(delta)
        v = delta
    return pa.concat_tables(parts), history


def _whole(rel: Relation, tables: dict[str, pa.Table], consolidated: set[str]) -> bool:
    """Whether ``rel`` renames every column of one step's output known consolidated (its
    rows then stay consolidated: a step's chunk column, dropped from its output, is a
    function of the time)."""
    if rel.picks is None:
        return False
    source, picked = rel.picks
    return source in consolidated and len(set(picked)) == len(picked) == tables[source].num_columns


_FROZEN_MODULES = 0  # how many modules the Python worker had when it last froze its heap


def _freeze_imports() -> None:
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


class _Reports:
    """The accumulator a classic session's loop tasks report through: each task adds one
    ``(status, answer)`` pair, the status as JSON (:func:`_status_json`), the answer as Arrow
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


def task(program: Program, out_schema: pa.Schema,
         reports: Any = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: read every source, iterate, yield the result.

    How the task ended (and a small answer) goes to ``reports`` (a classic session's
    accumulator, :class:`_Reports`), whose task output is the answer's rows alone; without
    one (Spark Connect) the task's last row is a status row (:data:`META`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from looped(batches)
        _freeze_imports()  # the task's tables are gone with looped's frame

    def report(status: int, iters: int, changing: int, history: Sequence[int] = (), chunks: int = 0,
               phases: str = "", local: bool = False, answer: pa.Table | None = None) -> Iterator[pa.RecordBatch]:
        meta = _status_json(status, iters, changing, history, chunks, phases, local)
        if reports is None:
            yield _status(out_schema, meta)
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

    def looped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

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
        tags = table.column(SRC)
        sources = [_source_table(table.filter(pc.equal(tags, j)), j, cols) for j, cols in enumerate(program.sources)]
        read = _time.perf_counter()
        # the answer's pieces go to the JVM as the loop yields them (stream), but for a small
        # answer, held until it is known small enough to come back with the job
        run = stream(program, sources)
        held: list[pa.Table] | None = []
        rows = nbytes = 0
        while True:
            try:
                piece = next(run)
            except StopIteration as end:
                history, nchunks = end.value
                break
            if held is not None:
                held.append(piece)
                rows, nbytes = rows + piece.num_rows, nbytes + piece.nbytes
                if rows <= program.local_rows and nbytes <= LOCAL_RESULT_BYTES:
                    continue
                pieces, held = held, None
            else:
                pieces = [piece]
            for p in pieces:
                yield from _runs(p, program.data, out_schema).to_batches()
        phases = f"{read - started:.3f},{_time.perf_counter() - read:.3f}"
        if history[-1]:
            yield from report(LIMIT, len(history), history[-1], history, nchunks, phases)
            return
        # program.local_rows is 0 without reports (Spark Connect): nothing is held there
        local = held is not None and program.local_rows > 0
        answer = (pa.concat_tables(held) if held else program.roots.empty_table()) if local else None
        yield from report(DONE, len(history), 0, history, nchunks, phases, local=local, answer=answer)

    return run


def _tag(j: int, i: int) -> str:
    """The name of column ``i`` of source ``j`` in the one table a loop's task reads."""
    return f"_sd{j}_{i}"


def _source_table(table: pa.Table, j: int, cols: Sequence[str]) -> pa.Table:
    return pa.Table.from_arrays([table.column(_tag(j, i)) for i in range(len(cols))], names=list(cols))


def _runs(result: pa.Table, data: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The answer's rows in the task's output schema: one row per run of consecutive rows of
    equal data (at most :data:`RUN_ROWS`), their time leaves and diffs in the list column
    :data:`ROWS`; :data:`META` (where the schema has it) null.  Rows equal in data but not
    consecutive go in runs of their own: exploded, the rows are the same."""
    import pyarrow.compute as pc

    from spark_differential.kernels.common import conform

    n = result.num_rows
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
    from spark_differential.kernels.native import int_values

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


def _status_json(status: int, iters: int, changing: int, history: Sequence[int] = (), chunks: int = 0,
                 phases: str = "", local: bool = False) -> str:
    """How a task ended, as JSON: status, iterations, changes of the last one, changes per
    iteration (comma-separated), time chunks, phases (seconds reading, iterating), whether
    the answer came back with the job."""
    import json

    return json.dumps({"status": status, "iters": iters, "changing": changing, "history": ",".join(map(str, history)),
                       "chunks": chunks, "phases": phases, "local": local})


def _status(schema: pa.Schema, meta: str) -> pa.RecordBatch:
    """The task's last row on Spark Connect: the answer's columns null, :data:`META` how it
    ended (:func:`_status_json`)."""
    arrays = [pa.array([meta if f.name == META else None], f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _metrics(statuses: Sequence[str | None]) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------------
# the driver's side


def record(roots: Any, loop_t: Any, cs: CollectionSchema, body: Callable[[Any], Any], ctx: Any,
           check: Callable[[Any], Any], max_iterations: int | None, limit: int) -> tuple[Program, list[Any]]:
    """Call ``body`` once on placeholders; the program and its sources (the roots first)."""
    spark = roots.sparkSession
    rec = Recorder(spark, loop_t, cs, roots)
    ctx.recording = rec
    try:
        out = check(body(rec.loop_var))
    finally:
        ctx.recording = None
    return rec.program(out, cs, max_iterations, limit), [d for d, _ in rec.sources]


def run(df: Any, cs: CollectionSchema, program: Program, sources: Sequence[Any], bar: Any = None,
        spread: Any = None, cheap: bool = False) -> Any | None:
    """Run the loop in one task; the result collection, or ``None`` when the input is too large.

    ``cheap``: every source only projects data Spark holds already (local rows,
    checkpoints, cached tables: :func:`_held`), so the loop's task reads them itself (``coalesce(1)``,
    one stage) instead of through a shuffle to one partition (two stages, the sources
    read in parallel: right when they are computed by a plan of their own).

    ``spread`` (:class:`spark_differential.engine.chunks.Chunks`): the sources go in chunked form
    to one task per partition, each running the loop over its chunks, and the answers
    are consolidated across chunks by Spark.

    Raises :class:`IterationLimitExceeded` as the distributed loop does."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_differential.core.collection import quoted
    from spark_differential.engine.distributed import arrow_schema
    from spark_differential.errors import IterationLimitExceeded, from_job_failure
    from spark_differential.kernels.common import conform

    spark = df.sparkSession
    ttype = cs.ttype
    data = list(cs.data_cols)

    sql_type = integral_sql(ttype)

    connect = is_connect(spark)
    if connect and spread is not None:  # its status rows are consolidated away before the checkpoint
        log.info("dd_iterate: %s=always is not available on Spark Connect", SPREAD_CONF)
        return None
    union = None
    for j, (src, cols) in enumerate(zip(sources, program.sources)):
        if spread is not None:
            src = spread.chunked(src).withColumn(PART, spread.of(F.col(TIME)))
        part = tag_source(src, j, [c for c in cols if c not in (DIFF, *leaves(program.width))], ttype,
                          part=spread is not None and PART in src.columns)
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    assert union is not None
    if spread is not None:
        from spark_differential.engine.distributed import shuffle_partitions

        program = dataclasses.replace(program, chunking=Chunking(spread.t0, spread.width, spread.count))
        union = union.repartition(shuffle_partitions(spark), PART).drop(PART)
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
    reports = None if connect else spark.sparkContext.accumulator([], _Reports.param())
    out = union.mapInArrow(task(program, arrow_schema(spark, schema), reports), schema)
    started = _time.time()
    if spread is not None:  # each chunk's answer meets the next chunk's at its start: consolidate
        names_ = [*data, *leaves(program.width)]
        out = out.select(*qcols(data), F.inline(ROWS)).groupBy(*qcols(names_)).agg(
            F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0)
    try:
        kept = out.localCheckpoint(eager=True)
    except Exception as e:
        if reports is not None:
            _Reports.take(reports)
        mine = from_job_failure(e)
        if mine is not None:
            raise mine from e
        raise
    small = None  # the answer as Arrow IPC bytes, where it came back with the job
    if reports is None:  # the task's status row, from the checkpoint (one small job reading it)
        metrics = _metrics([r[0] for r in kept.where(F.col(META).isNotNull()).select(META).collect()])
        kept = kept.where(F.col(META).isNull())
    else:
        got = _Reports.take(reports)
        metrics = _metrics([m for m, _ in got])
        if spread is None and len(got) == 1:
            small = got[0][1]
    status, iters, changing = (int(metrics.get(k) or 0) for k in ("status", "iters", "changing"))
    if status == TOO_LARGE:
        log.info("dd_iterate: %s more than %d input rows (%s)",
                 "a task of time chunks would hold" if spread is not None else "one task would hold",
                 program.limit, CONF)
        return None
    elapsed = _time.time() - started
    # one task: its changes per iteration; several: only the longest task's count is known
    history = [] if spread is not None else [int(x) for x in str(metrics.get("history") or "").split(",") if x]
    for i, n in enumerate(history, start=1):
        log.info("dd_iterate: iteration %d: %d changes (in one task, %.1fs)", i, n, elapsed)
    if bar is not None:
        bar.update(len(history))
        if history:
            bar.set_postfix(changes=history[-1])
    nchunks = int(metrics.get("chunks") or 0)
    if spread is not None:
        log.info("dd_iterate: %d iterations inside one task per partition, in %d time chunks (%.1fs)", iters,
                 spread.count, elapsed)
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
        kept = spark.createDataFrame(conform(table.select(arrow.names), arrow), rows)
    elif spread is None:
        kept = kept.select(*qcols(data), F.inline(ROWS))
    if sql_type is not None:
        return kept.selectExpr(*map(quoted, data), f"CAST({leaves(program.width)[0]} AS {sql_type}) AS {TIME}", DIFF)
    time_col = ttype.decode_columns([F.col(n) for n in leaves(program.width)])
    return kept.select(*qcols(data), time_col.alias(TIME), F.col(DIFF))


def tag_source(d: Any, j: int, cols: Sequence[str], ttype: Any, part: bool = False, op: str = "dd_iterate") -> Any:
    """Source ``j`` of a loop's task as rows of the one table the task reads: ``SRC = j``, its
    columns ``cols`` and the time's leaves and diff under positional names (:func:`_tag`: user
    names may hold dots or backticks), with the null checks of every collection entering a loop
    (as iterate.py's on the distributed path, named for ``op``); ``part``: keep the column ``PART`` too."""
    from pyspark.sql import functions as F

    from spark_differential.core.collection import null_guard, null_guard_sql, qcol, quoted

    sql_type = integral_sql(ttype)
    if sql_type is not None:  # SQL text: one selectExpr instead of a few py4j round trips per Column
        leaf = f"CAST({quoted(TIME)} AS BIGINT)"
        return d.selectExpr(
            f"{j} AS {SRC}",
            *[f"{quoted(c)} AS {_tag(j, i)}" for i, c in enumerate(cols)],
            f"{null_guard_sql(leaf, [leaf], 'time', op)} AS {_tag(j, len(cols))}",
            f"{null_guard_sql(f'CAST({quoted(DIFF)} AS BIGINT)', [quoted(DIFF)], 'diff', op)} "
            f"AS {_tag(j, len(cols) + 1)}",
            *([quoted(PART)] if part else []),
        )
    enc = [null_guard(leaf, [leaf], "time", op) for leaf in ttype.encode_column(F.col(TIME))]
    return d.select(
        F.lit(j).alias(SRC),
        *[qcol(c).alias(_tag(j, i)) for i, c in enumerate(cols)],
        *[leaf.alias(_tag(j, len(cols) + i)) for i, leaf in enumerate(enc)],
        null_guard(F.col(DIFF).cast("long"), [F.col(DIFF)], "diff", op).alias(_tag(j, len(cols) + len(enc))),
        *([F.col(PART)] if part else []),
    )


def attempt(df: Any, cs: CollectionSchema, body: Callable[[Any], Any], loop_t: Any, ctx: Any,
            check: Callable[[Any], Any], max_iterations: int | None, bar: Any = None) -> Any | None:
    """The loop run inside one task, or ``None`` (with the reason logged) to run it distributed."""
    limit = rows_setting(df.sparkSession)
    if limit == 0:
        return None
    started = _time.time()
    try:
        program, sources = record(df, loop_t, cs, body, ctx, check, max_iterations, limit)
    except Untranslatable as e:
        log.info("dd_iterate: running distributed, not inside one task: %s", e)
        return None
    log.debug("dd_iterate: body recorded in %.2fs", _time.time() - started)
    if not _spread_setting(df.sparkSession):
        estimate, held = _estimated_rows(sources)
        if estimate > limit:
            log.info("dd_iterate: running distributed, not inside one task: Spark estimates %d input rows (%s=%d)",
                     estimate, CONF, limit)
            return None
        result = run(df, cs, program, sources, bar, cheap=held)
        if result is None:
            log.info("dd_iterate: running distributed, not inside one task: too many rows for one task")
        return result
    spread = _spread(program, cs, sources)
    result = None if spread is None else run(df, cs, program, sources, bar, spread)
    if result is None:
        log.info("dd_iterate: running distributed, not inside tasks: %s",
                 "too many rows for one task per time chunk" if spread is not None else "the loop is not chunkable")
    return result


def _spread_setting(spark: Any) -> bool:
    """``spark_differential.iterate.localSpread``: ``off`` (the default: one task) or ``always``
    (time chunks planned on the driver, one task per partition).  Measured slower than one
    task at 10^5 BFS changes and than the distributed loop at 10^6 (docs/performance.md), so
    it is not chosen automatically."""
    from spark_differential.errors import ConfigurationError

    raw = str(_conf.get(spark, SPREAD_CONF, "off")).strip().lower()
    if raw not in ("off", "always"):
        raise ConfigurationError(f"{SPREAD_CONF} must be 'off' or 'always'; got {raw!r}")
    return raw == "always"


def _spread(program: Program, cs: CollectionSchema, sources: Sequence[Any]) -> Any:
    """Time chunks planned on the driver (one aggregate job per source) to spread a loop too
    large for one task over one task per partition, or ``None`` (not chunkable)."""
    from spark_differential.engine import chunks as _chunks

    if program.chunk_rows == 0 or program.width != 1 or not isinstance(cs.ttype, Total):
        return None
    return _chunks.plan(cs.ttype, list(sources), program.chunk_rows)


def _estimated_rows(sources: Sequence[Any]) -> tuple[int, bool]:
    """A lower estimate of the sources' rows from Spark's plan statistics (no job), and
    whether every source only reads rows Spark holds already (:func:`_held`).

    The estimate is the row count where Spark knows it (checkpoints, cached and local
    data), else the size over a generous row width; 0 where nothing is known (the task's
    own count then decides)."""
    total = 0
    held = True
    for df in sources:
        if is_connect(df):
            rows, ok = _connect_held(df._plan)
            total += rows
            held = held and ok
            continue
        try:
            plan = df._jdf.queryExecution().optimizedPlan()
            held = held and _held(plan)
            stats = plan.stats()
            rows = stats.rowCount()
            if rows.isDefined():
                total += int(str(rows.get()))
                continue
            size = int(str(stats.sizeInBytes()))
        except Exception:  # noqa: BLE001 - a session without plan statistics: no estimate
            held = False
            continue
        if size < (1 << 62):  # Spark's "unknown" is Long.MaxValue
            total += size // (16 * (len(df.columns) + 1))
    return total, held


_HELD = {"LogicalRDD", "LocalRelation", "InMemoryRelation", "Project", "Filter", "SubqueryAlias", "Union"}


def _held(plan: Any) -> bool:
    """Whether a plan only reads rows Spark holds already (local rows, checkpoints, cached
    tables) and projects or filters them: no file scan, join or aggregate whose work one
    task should not do alone.  (A filter's estimated size is its input's, so a filter
    over more held rows than the loop's limit is already sent to the distributed path.)"""
    if plan.nodeName() not in _HELD:
        return False
    children = plan.children()
    return all(_held(children.apply(i)) for i in range(children.size()))


_CONNECT_PASS = {"Project", "Filter", "SubqueryAlias", "WithColumns", "WithColumnsRenamed", "Drop", "ToDF"}
# rows Spark Connect holds whose number the client's plan does not say (checkpoints, cached local data)
_CONNECT_CACHED = {"CachedLocalRelation", "ChunkedCachedLocalRelation", "CachedRemoteRelation", "CachedRelation"}
_CONNECT_HELD = {"LocalRelation", "SetOperation"} | _CONNECT_PASS | _CONNECT_CACHED


def _connect_held(plan: Any, exact: bool = False) -> tuple[int, bool]:
    """:func:`_held` for a Spark Connect client's plan (no RPC): whether it only reads local
    rows or checkpoints (``CachedRemoteRelation``) through projections, filters and unions,
    and the rows of the local relations it reads (a union's sides summed; a checkpoint's
    rows are not known here: 0, the task's own count decides).  ``exact``: only local
    relations, whose rows the client holds, count as held (the rows are then a bound)."""
    kind = type(plan).__name__
    if kind not in _CONNECT_HELD or getattr(plan, "_references", None) or (exact and kind in _CONNECT_CACHED):
        return 0, False
    if kind == "SetOperation":
        if plan.set_op != "union":
            return 0, False
        a, b = _connect_held(plan._child, exact), _connect_held(plan.other, exact)
        return a[0] + b[0], a[1] and b[1]
    child = getattr(plan, "_child", None)
    if child is not None:
        return _connect_held(child, exact)
    table = getattr(plan, "_table", None)
    return (table.num_rows if table is not None else 0), True
