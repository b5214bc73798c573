"""Incremental views: a query's output kept up to date from stored, compacted state.

On ``(data, time, diff)``: a view over named input collections receives their
updates in successive calls of :meth:`IncrementalView.update`.  Each call brings
new updates of some inputs (at times in the future of the view's frontier ``F``)
and a new frontier ``T`` (``upto``), declaring the inputs complete at every time
that is not in the future of ``T``.  It returns the output updates at the times
that became complete: those in the future of ``F`` but not of ``T``.  For any
split of the inputs into successive updates, the union of everything returned,
consolidated, is the one-shot ``query(all inputs)`` restricted to the times not
in the future of the last ``T``, row for row.

A view keeps its state by one of two **strategies**, fixed when it is created (stored in
its manifest as the ``stage`` number, which :func:`incremental`'s ``stage=`` also takes):

* the **traced** strategy (``stage=2``, :mod:`spark_differential.incremental.traced`):
  the query is called on the *new updates only*; each stateful operator (joins,
  reductions) keeps a trace of each of its inputs under ``path`` and hands its kernel
  the new updates plus the trace rows of the keys they touch, so an update's kernels
  work on the size of the changes.  A top-level ``dd_iterate`` keeps per-iteration
  traces of the operators of its body and runs inside one task on the changes of its
  inputs (:mod:`spark_differential.incremental.loop`).  Chosen when the query's
  operators allow it (seen by calling the query once on empty inputs at the first
  update: :func:`~spark_differential.incremental.traced.probe`).
* the **rerun** strategy (``stage=1``, :mod:`spark_differential.incremental.rerun`): the
  query is re-run on the stored (compacted) inputs plus the new updates at every update,
  and the output already returned is subtracted; an update costs the live size of the
  inputs.  Used when the query has a ``dd_iterate`` whose body cannot run inside one task
  (a nested loop, an expression the in-task path does not translate), reads changes
  rather than states (``differentiate``, ``dd_delay``, ``dd_asof_join``), or has an
  operator over another time type; one log line says why.  ``stage=1`` asks for it.

Each module argues why its strategy is exact.  The state is Parquet under ``path``, one
directory per committed version (:mod:`spark_differential.incremental.store`; what the
files hold: :mod:`spark_differential.incremental.storage`; the traces and when they merge:
:mod:`spark_differential.trace.parquet`).  Each committed version ends with one manifest
file (JSON, written to a temporary name and renamed; :mod:`spark_differential.incremental.manifest`)
naming the strategy, the frontier, the state files, the stateful operators (traced) and
the last batch id; readers take the newest manifest.  An update that fails or is killed
before its manifest leaves the previous version current.  A resumed traced view checks
that the query calls the same stateful operators (name and input schemas, in order) and
refuses another query with :class:`IncrementalStateError` (rebuild the view at a new path
by replaying its inputs).  What an update accepts is checked before any Spark job
(:mod:`spark_differential.incremental.inputs`); a view is fed from Structured Streaming
with :meth:`IncrementalView.foreach_batch` (:mod:`spark_differential.incremental.streaming`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_differential.core.collection import TIME, integral_sql
from spark_differential.core.lattice import Leaves, Loop, TimeType, Total
from spark_differential.errors import (
    FrontierError,
    IncrementalStateError,
    SparkDifferentialError,
    TimeTypeMismatchError,
    from_job_failure,
)
from spark_differential.incremental import rerun, traced
from spark_differential.incremental.inputs import (
    Guarded,
    as_frontier,
    check_forward,
    check_inputs,
    check_late,
    frontier_value,
    resolved,
)
from spark_differential.incremental.lift import lift, lift_updates, upset_coefficients
from spark_differential.incremental.lock import WriterLock
from spark_differential.incremental.manifest import NEXT_FRONTIER, RERUN, TRACED, NextFrontier, State, Update
from spark_differential.incremental.storage import Operator
from spark_differential.incremental.store import Store
from spark_differential.incremental.streaming import batch_function
from spark_differential.trace.parquet import ParquetPolicy

_log = logging.getLogger("spark_differential.incremental")
KILL_ENV = "SPARK_DIFFERENTIAL_INCREMENTAL_EXIT_AT"  # test hook: os._exit at a named point


_PASSES: dict[str, int] = {}  # how many times this process reached each hook point


def _hook(point: str) -> None:
    """Test hook: end the process abruptly at ``point`` when the environment asks for it
    (``KILL_ENV`` = ``point``, or ``point:n`` for the ``n``-th time this process reaches it)."""
    want = os.environ.get(KILL_ENV)
    if not want:
        return
    _PASSES[point] = _PASSES.get(point, 0) + 1
    name, _, nth = want.partition(":")
    if name == point and _PASSES[point] == int(nth or 1):
        os._exit(77)


class IncrementalView:
    """A query's output kept up to date under ``path``; made by :func:`incremental`."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        query: Callable[..., DataFrame],
        keep: int = 2,
        compact: bool | None = None,
        compact_every: int = 8,
        stage: int | None = None,
    ) -> None:
        if not callable(query):
            raise TypeError(f"sd.incremental: query must be a function of named collections, got {type(query).__name__}")
        if keep < 2:
            raise ValueError("sd.incremental: keep must be at least 2 (the current version and the one before)")
        self.spark = spark
        self.query = query
        self.keep = keep
        self.compact = compact
        if compact_every < 1:
            raise ValueError("sd.incremental: compact_every must be at least 1")
        self.compact_every = compact_every
        if stage not in (None, RERUN, TRACED):
            raise ValueError(f"sd.incremental: stage must be 1, 2 or None (chosen from the query), got {stage!r}")
        self.stage = stage
        # traced strategy: each stateful operator's kernel inputs of the last update (name, DataFrames), for inspection
        self.last_kernel_inputs: list[tuple[str, list[DataFrame]]] = []
        self._store = Store(spark, path)
        self._lock = WriterLock(self._store.files)
        self.path = self._store.root

    @property
    def frontier(self) -> Any:
        """The stored frontier: the view's inputs are complete at every time not in its future.

        ``None`` before the first update; for totally ordered times one time, for
        struct times a list of times (an antichain).
        """
        state = self._store.state()
        if state is None:
            return None
        return frontier_value(state.ttype, state.frontier)

    @property
    def batch_id(self) -> int | None:
        """The batch id of the last committed update that had one (``None`` if none had)."""
        state = self._store.state()
        return None if state is None else state.batch_id

    def update(self, upto: Any, batch_id: int | None = None, late: str = "error", **inputs: DataFrame) -> DataFrame:
        """Apply new updates of the named inputs and return the output that became complete.

        ``inputs`` are collections (``time``, ``diff`` and the data columns the view's
        input had on its first update) of updates at times in the future of the
        current :attr:`frontier`; inputs not named get no new updates.  The first
        update must name every input of ``query`` (an empty collection is fine); it
        fixes their schemas and the time type.  ``upto`` is the new frontier (a time,
        or a list of times for struct times), not earlier than the current one: the
        inputs are declared complete at every time not in its future.

        Returns the output updates at times in the future of the old frontier but
        not of ``upto`` (read from the stored version: consume it before the
        next-but-one update, which deletes that version's files).

        ``late`` says what an update at a time not in the future of the frontier
        does: ``"error"`` raises :class:`LateUpdateError` (nothing is stored);
        ``"advance"`` moves it into the future of the frontier (for totally ordered
        times: to the frontier), so it counts from there on; the output already
        returned for earlier times is not corrected.

        With ``batch_id`` (an int that grows from update to update, like
        ``foreachBatch``'s), an update whose id is not above the last committed one
        changes nothing: repeating the last committed id returns that update's
        output again, an older id returns an empty collection.

        >>> import spark_differential as sd, tempfile
        >>> spark = sd.session()
        >>> view = sd.incremental(tempfile.mkdtemp(), lambda edges: edges.dd_count(by="src"))
        >>> e = spark.createDataFrame([(1, 2, 0, 1), (1, 3, 1, 1)], "src long, dst long, time long, diff long")
        >>> view.update(upto=1, edges=e).collect()
        [Row(src=1, count=1, time=0, diff=1)]
        >>> more = spark.createDataFrame([(1, 4, 1, 1)], "src long, dst long, time long, diff long")
        >>> view.update(upto=5, edges=more).orderBy("diff").collect()
        [Row(src=1, count=1, time=1, diff=-1), Row(src=1, count=3, time=1, diff=1)]
        >>> view.frontier
        5
        """
        op = "IncrementalView.update"
        check_late(op, late)
        if batch_id is not None and (isinstance(batch_id, bool) or not isinstance(batch_id, int)):
            raise TypeError(f"{op}: batch_id must be an int (e.g. foreachBatch's batch id), got {batch_id!r}")
        self._lock.acquire()  # one writer per path (spark_differential.incremental.lock)
        try:
            return self._update(op, upto, batch_id, late, inputs)
        finally:
            self._lock.release()

    def break_lock(self) -> dict[str, object] | None:
        """Break the lock of a writer that was killed while updating this view on another host
        (one killed on this host is broken by the next update): what the lock said, or ``None``.

        Only when that writer is surely gone: a live writer and this one would then race, and
        the later to commit would fail.

        >>> import spark_differential as sd, tempfile
        >>> sd.incremental(tempfile.mkdtemp(), lambda edges: edges).break_lock() is None
        True
        """
        return self._lock.break_()

    def _update(self, op: str, upto: Any, batch_id: int | None, late: str, inputs: dict[str, DataFrame]) -> DataFrame:
        store = self._store
        state = store.state()
        if batch_id is not None and state is not None and state.batch_id is not None and batch_id <= state.batch_id:
            if batch_id == state.batch_id:  # the last committed update, repeated: its output again
                return store.output(state, store.files.exists(store.files.join(state.output_file)))
            return store.output(state, False)

        # -- checks on schemas alone (no Spark job) ---------------------------------------
        new = check_inputs(op, self.query, state, inputs, self.path)
        ttype = state.ttype if state is not None else next(iter(new.values()))[1]
        if isinstance(ttype, Loop):
            raise TimeTypeMismatchError(f"{op}: inputs of an incremental view cannot have dd_iterate loop times")
        old_front = state.frontier if state is not None else None
        new_front: list[Leaves] | NextFrontier
        if upto is NEXT_FRONTIER:  # (foreach_batch's: the new updates' largest time + 1, found where they are read)
            if not (isinstance(ttype, Total) and integral_sql(ttype) is not None and old_front):
                raise FrontierError(f"{op}: upto=NEXT_FRONTIER needs an integral time and a view with a frontier")
            new_front = NextFrontier(int(old_front[0][0]))
        else:
            new_front = as_frontier(op, ttype, upto)
            check_forward(op, ttype, old_front, new_front)
        names = list(state.inputs) if state is not None else list(new)
        schemas = state.inputs if state is not None else {n: new[n][0] for n in names}
        time_type = state.time_type if state is not None else schemas[names[0]][TIME].dataType

        # -- the new version ---------------------------------------------------------------
        version = (state.version if state is not None else 0) + 1
        directory = f"v{version:08d}-{uuid.uuid4().hex[:8]}"
        if state is None:
            stage, bucketing, operators = self._strategy(op, schemas, ttype, [v[2] for v in new.values()])
        else:
            stage, bucketing, operators = state.stage, state.buckets, state.operators
            if self.stage is not None and self.stage != stage:
                raise IncrementalStateError(
                    f"{op}: stage={self.stage} was asked but the view stored under {self.path} runs in stage {stage} "
                    "(fixed when it was created); leave stage unset, or rebuild the view at a new path"
                )
        store.mkdirs(directory)
        up = Update(
            op, self.path, state, schemas,
            Guarded(op, {n: _in_order(new[n][2], schemas[n].names) for n in names if n in new}, ttype, old_front,
                    late),
            ttype, old_front, new_front, directory,
        )
        try:
            if stage == TRACED:
                written, self.last_kernel_inputs = traced.write(
                    store, self.query, ParquetPolicy(self.compact_every, geometric=True), up, bucketing, operators)
            else:
                up = resolved(up)
                written = rerun.write(store, self.query, self.compact, ParquetPolicy(self.compact_every), up)
        except SparkDifferentialError:
            raise
        except Exception as exc:  # e.g. a late update caught by the guard
            known = from_job_failure(exc)
            if known is not None:
                raise known from None
            raise
        committed = State(
            version=version,
            directory=directory,
            time_type=time_type,
            frontier=list(written.frontier if written.frontier is not None else up.new_front),  # type: ignore[arg-type]
            batch_id=batch_id if batch_id is not None else (state.batch_id if state is not None else None),
            inputs=dict(schemas),
            output=written.output,
            input_files=written.input_files,
            emitted_files=written.emitted_files,
            compacted=written.compacted,
            stage=stage,
            operators=written.operators,
            trace_files=written.trace_files,
            pending_files=written.pending_files,
            buckets=bucketing,
        )
        output = store.output(committed, written.output_exists)
        _hook("before-manifest")
        store.commit(committed)
        _hook("after-manifest")
        store.clean_up(self.keep)
        return output

    def _strategy(
        self, op: str, schemas: Mapping[str, T.StructType], ttype: TimeType, first: Sequence[DataFrame] = ()
    ) -> tuple[int, tuple[int, int], tuple[Operator, ...]]:
        """The strategy a new view takes (its ``stage`` number) and, for the traced one, the key buckets
        of its traces and its stateful operators: traced when the query allows it
        (:func:`~spark_differential.incremental.traced.probe`) and the view asks for no other."""
        if self.stage == RERUN or self.compact is False:
            return RERUN, (0, 0), ()
        blockers, bucketing, operators = traced.probe(self.spark, self.query, schemas, ttype, first)
        if not blockers:
            return TRACED, bucketing, operators
        why = f"the query uses {', '.join(blockers)}, which stage 2 (per-operator traces) cannot keep differential"
        if self.stage == TRACED:
            raise IncrementalStateError(f"{op}: stage=2 was asked but {why}; leave stage unset (or pass stage=1)")
        _log.warning("%s: %s; the view under %s runs in stage 1 (the query re-runs on the stored inputs)", op, why,
                     self.path)
        return RERUN, (0, 0), ()

    # -- Structured Streaming ---------------------------------------------------------------
    def foreach_batch(
        self,
        sink: Callable[[DataFrame, int], Any] | None = None,
        *,
        time: str = TIME,
        diff: str | None = None,
        input: str | None = None,
        upto: Callable[[DataFrame, int], Any] | None = None,
        late: str = "error",
    ) -> Callable[[DataFrame, int], None]:
        """A function for ``writeStream.foreachBatch`` that applies each micro-batch to the view.

        Each micro-batch is a change log of the input named ``input`` (the query's only
        parameter when it has one): ``time`` names its time column and ``diff`` its
        multiplicity column (omitted: every row is an insertion), as for
        :func:`spark_differential.collection`.  The batch is applied with the
        micro-batch id as ``batch_id`` (so a replayed batch changes nothing) and
        ``upto`` = the batch's largest time + 1 (the smallest unit of a date or
        timestamp), never earlier than the frontier; ``upto`` may instead be a
        function ``(batch_df, batch_id) -> frontier``, e.g. reading the stream's
        watermark, and must be one for struct times.  The output updates go to
        ``sink(output_df, batch_id)``.  An empty micro-batch leaves the frontier where it
        is: a batch Spark sizes small (a file source's) is an update of no rows (one job, found
        empty by the update's task, which finds the largest time of a batch that has rows), the
        sink handed its empty output; another is skipped, the sink not called.

        >>> import spark_differential as sd, tempfile
        >>> view = sd.incremental(tempfile.mkdtemp(), lambda edges: edges.dd_count(by="src"))
        >>> fn = view.foreach_batch(lambda out, i: print(i, out.select("src", "count", "time").collect()))
        >>> fn(sd.session().createDataFrame([(1, 2, 3)], "src long, dst long, time long"), 0)
        0 [Row(src=1, count=1, time=3)]
        """

        return batch_function(self.query, self.update, self._stored_frontier, sink, time=time, diff=diff,
                              input=input, upto=upto, late=late)

    def _stored_frontier(self) -> list[Leaves] | None:
        """The stored frontier's elements (time leaves), ``None`` before the first update."""
        state = self._store.state()
        return None if state is None else state.frontier


def incremental(
    path: str,
    query: Callable[..., DataFrame],
    *,
    spark: SparkSession | None = None,
    keep: int = 2,
    compact: bool | None = None,
    compact_every: int = 8,
    stage: int | None = None,
) -> IncrementalView:
    """A view of ``query`` kept up to date from state stored under ``path``.

    ``query`` is a function of named collections (its parameter names are the
    view's inputs), the same code a one-shot run would call: any ``dd_*`` operators,
    ``dd_iterate`` included, and linear DataFrame steps.  Feed it with
    :meth:`IncrementalView.update`; on an existing ``path`` the view resumes from the
    newest committed version (give the same query).  ``keep`` committed versions
    are kept (at least 2: the current one and the one before).  One writer per
    ``path`` at a time.

    ``stage`` picks the strategy (see the module docstring): left unset, a new view
    takes the traced strategy (``stage=2``, per-operator traces: an update's kernels
    see the changes and the trace rows of the keys they touch) when its query allows
    it, else the rerun strategy (``stage=1``, the query re-run on the stored inputs),
    with one log line saying why; ``stage=1`` asks for the rerun strategy, ``stage=2``
    makes a query the traced one cannot keep an :class:`IncrementalStateError`.  The
    strategy is fixed when the view is created.  A traced update that reads at most
    ``spark_differential.incremental.localRows`` rows (by Spark's estimate, no job; by
    default 3,000,000, and 7,500,000 on a local master) runs whole inside one
    Spark task, one job (:mod:`spark_differential.incremental.onetask`), and on this
    machine's filesystem the DataFrame it returns holds the rows that job sent back (reading
    it is no further job); a larger one runs operator by operator on the cluster; one INFO
    log line says which.  A ``dd_iterate`` over an integral time is resumed from its
    per-iteration traces, or, where its stored inputs hold at most
    ``spark_differential.incremental.loopRecompute`` times an update's changed rows (default
    10; ``0``: never), recomputed from them in the same task: the same answer and state.

    Each update stores its new updates as one more Parquet directory per stored
    collection (the rerun strategy: per input, and one for the output returned so far;
    the traced one: per stateful operator's input); when one would have more than
    ``compact_every`` directories, older ones are merged into one, advanced to the
    frontier and consolidated (the traced strategy merges geometrically:
    :mod:`spark_differential.trace.parquet`).

    ``compact`` says whether the rerun strategy's stored inputs are compacted to the
    frontier (their size then follows the live data, not its history).  Left unset,
    they are, unless the query uses ``differentiate``, ``dd_delay`` or
    ``dd_asof_join``: those read the *changes* of their input, so the output at later
    times depends on when earlier updates happened, and the view then keeps the
    inputs' full history (exact; each update then costs the size of that history; a
    warning is logged).  ``compact=True`` makes that case an
    :class:`IncrementalStateError`; ``compact=False`` never compacts the inputs (and
    takes the rerun strategy).  The returned output is exact in every case.

    >>> import spark_differential as sd, tempfile
    >>> spark = sd.session()
    >>> path = tempfile.mkdtemp()
    >>> q = lambda orders, customers: orders.dd_join(customers, on="cid").dd_count(by="region")
    >>> o = spark.createDataFrame([(1, 10, 0, 1)], "oid long, cid long, time long, diff long")
    >>> c = spark.createDataFrame([(10, "eu", 0, 1)], "cid long, region string, time long, diff long")
    >>> sd.incremental(path, q).update(upto=1, orders=o, customers=c).collect()
    [Row(region='eu', count=1, time=0, diff=1)]
    >>> o2 = spark.createDataFrame([(2, 10, 3, 1)], "oid long, cid long, time long, diff long")
    >>> sd.incremental(path, q).update(upto=4, orders=o2).orderBy("diff").collect()   # resumed
    [Row(region='eu', count=1, time=3, diff=-1), Row(region='eu', count=2, time=3, diff=1)]
    """
    if not isinstance(path, str) or not path:
        raise TypeError(f"sd.incremental: path must be a non-empty string, got {path!r}")
    if spark is None:
        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    return IncrementalView(spark, path, query, keep=keep, compact=compact, compact_every=compact_every, stage=stage)


def _in_order(df: DataFrame, names: list[str]) -> DataFrame:
    """``df``'s columns ``names``, in that order (``df`` itself when they are its columns: a
    projection costs a py4j round trip or two per column)."""
    return df if df.columns == names else df.select(*names)


__all__ = ["KILL_ENV", "IncrementalView", "incremental", "lift", "lift_updates", "upset_coefficients"]
