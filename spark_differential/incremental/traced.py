"""The traced strategy of an incremental view (``stage=2``): per-operator traces.

On ``(data, time, diff)``: a view with the traced strategy calls its query on the **new updates
only** (changes in, changes out: linear steps map changes to changes).  Every
stateful operator the query calls (``dd_join``, ``dd_semijoin``, ``dd_antijoin``
and the reductions: everything that runs a kernel through
:func:`spark_differential.engine.distributed.execute`) is intercepted here and identified
by its position in the query's calls, its name and the schemas of its inputs in
kernel form.  Each of its inputs has a **trace**: every update the input ever
received, in kernel form (bucket, keys, data, time leaves, ``_d``; the key hash is
recomputed when read rather than stored: 8 incompressible bytes a row), as
Parquet files under the view's path (a :class:`~spark_differential.trace.parquet.ParquetTrace`:
the last merge, advanced to the frontier of that moment with ``advance(t, F)`` and
consolidated by :func:`spark_differential.trace.spark.advanced`, plus one file per update
since, merged geometrically once there are more than ``compact_every``).  An update of the
operator

1. writes the prepared new updates of its inputs (one Parquet write: they are then
   evaluated once, read by the kernel, and become the traces' newest files),
2. hands its kernel the new updates (``_new`` true) plus the trace rows of the keys
   they touch (``_new`` false; a hash semi-join by bucket and key hash), as
   ``dd_iterate`` does between iterations, and returns what the kernel returns:
   ``F(trace + new) - F(trace)``.

Why it is exact.  After ``advance(t, F)`` a trace accumulates to the input's true
history at every time in the future of the view's frontier ``F`` (seed 004); the
new updates are all in the future of ``F``; so the kernel's output differences
accumulate to the true ones at every time in the future of ``F``, and to zero at
every other time (there the new updates accumulate to nothing).  The times not in
the future of ``F`` are a down-set, so the consolidated output has no update there.
The operator's output changes are thus exactly the changes of its output in the
future of ``F``, which is what the next operator's trace needs.

``dd_count`` and ``dd_sum`` over integers or decimals are kept differently
(:meth:`Run._totals`, :mod:`spark_differential.kernels.totals`, whose docstring has
the proof): their output at a time is a function of per-key totals (count, sum, number
of non-null values), each a sum over rows of the row's positive multiplicity.  They
keep two traces: the input rows, picked by the hash of the *whole row* (keys and data:
an update reads the old updates of the rows it changes, not of their keys), and the
totals ``(key, time, _cn, _cs, _cnn)`` of every key, advanced and consolidated like the
rows (:func:`advanced_totals`: one row per key and distinct advanced time).  So a count
per region whose every update touches all regions reads the changed rows and one
total per region, not every row of every region.

A top-level ``dd_iterate`` is one operator here, whose traces are per iteration
(:mod:`spark_differential.incremental.loop`).  A query whose output depends on history
(``differentiate``, ``dd_delay``, ``dd_asof_join``), a ``dd_iterate`` whose body
cannot run inside one task, or an operator working over another time type
than the view's inputs cannot be kept this way: :func:`probe` finds that out on
empty inputs and the view then takes the rerun strategy
(:mod:`spark_differential.incremental.rerun`).

An update (:func:`write`) is one write per stateful operator (its new input updates,
which become the newest files of its traces) plus the version's ``data`` write: what the
update returns (``o``: the output changes at times not in the future of the new frontier
``T``), the output changes still in the future of ``T`` (``p``, returned by the update
whose frontier passes them: so the union of all returned outputs telescopes to the
one-shot output), the totals traces' newest files and the traces' merges.  A query that is
one ``dd_iterate`` over an integral time, returning the loop's change as it is, is one job:
the loop's task writes the whole version (:func:`~spark_differential.incremental.loop_driver.write_version`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import integral_sql
from spark_differential.core.history import collecting
from spark_differential.core.lattice import Leaves, Loop, TimeType
from spark_differential.core.names import BUCKET, KEY_HASH
from spark_differential.core.settings import buckets, large_var_types, shuffle_partitions
from spark_differential.engine import call as seam
from spark_differential.engine.call import Below, Handler, LoopCall, StatefulCall
from spark_differential.engine.distributed import run_bucketed
from spark_differential.engine.kernel_form import Input, bucket_of, bucket_sql, finish, key_hash, prepare, time_fields
from spark_differential.engine.kernel_form import hashed_names as _hashed_names
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental import onetask
from spark_differential.incremental.inputs import Guarded, check_output, data_fields, resolved
from spark_differential.incremental.lift import in_future
from spark_differential.incremental.loop_driver import loop_in_view, write_version
from spark_differential.incremental.loop_query import prepared, record_loop_query
from spark_differential.incremental.manifest import NextFrontier, Update, Written
from spark_differential.incremental.storage import KIND, LOOP, ROWS, TOTALS, Operator, part, physical, tag, tagged
from spark_differential.incremental.store import Store
from spark_differential.intask.relation import Untranslatable
from spark_differential.intask.sources import estimated_rows
from spark_differential.kernels import reduce as kreduce
from spark_differential.kernels import totals as ktotals
from spark_differential.kernels.common import NEW, D, keys, names, times
from spark_differential.trace.parquet import ParquetPolicy
from spark_differential.trace.spark import advanced, consolidated_collection

# write(subdirectory, [(tag, prepared rows, their schema)]) -> the files written, by tag (absent: no rows)
Write = Callable[[str, Sequence[tuple[str, DataFrame, T.StructType]]], dict[str, str]]
# read(files, schema, tag) -> one stored collection
Read = Callable[[Sequence[str], T.StructType, str], DataFrame]


@dataclass(eq=False)
class Run(Handler):
    """One call of a view's query by the traced strategy (or a probe of it on empty inputs).

    ``probe``: nothing runs; each stateful operator returns an empty collection and
    is recorded, with the reasons the traced strategy cannot keep the query (``blockers``).
    Otherwise each operator runs as the module docstring says, against
    ``expected`` (the operators stored with the view), reading its traces from
    ``traces`` (files by :func:`tag`) and adding its new files to ``added``.

    A handler of :mod:`spark_differential.engine.call`, pushed for the extent of one call of
    the query: every stateful call outside a ``dd_iterate`` body runs here, and a top-level
    ``dd_iterate`` is kept by per-iteration traces (:mod:`spark_differential.incremental.loop`).
    """

    spark: SparkSession
    ttype: TimeType
    nbuckets: int
    nparts: int
    probe: bool = False
    expected: Sequence[Operator] = ()
    traces: dict[str, list[str]] = field(default_factory=dict)
    write: Write | None = None
    read: Read | None = None
    where: str = "the view"  # for messages: the view's path
    operators: list[Operator] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    added: dict[str, str] = field(default_factory=dict)
    # collections stored by the version's last write (tag, rows, schema): the newest files of totals traces
    stored: list[tuple[str, DataFrame, T.StructType]] = field(default_factory=list)
    kernel_inputs: list[tuple[str, list[DataFrame]]] = field(default_factory=list)
    # the update's new frontier (a loop's task advances its traces to it), or the loop's task finds it (NextFrontier)
    frontier: Sequence[Leaves] | NextFrontier = ()
    # write_task(subdirectory, rows, fn, wide) -> the files written, by tag: a loop's one write, the rows (tagged by
    # KIND, schema wide) computed by its task's mapInArrow function fn (Store.write_task)
    write_task: Callable[[str, DataFrame, Any, T.StructType], dict[str, str]] | None = None
    # stored directories as paths of this machine (None: not on it): a loop's task reads them itself
    local_dirs: Callable[[Sequence[str]], list[str] | None] = lambda rels: None
    # the traces of loops (spark_differential.incremental.loop) rewritten whole by this update: tag -> files
    replaced: dict[str, list[str]] = field(default_factory=dict)
    # a probe's: Spark's estimate of the first update's input rows (no job), which a loop's one task must hold
    first_rows: int = 0
    # the query is one loop over an integral time: its update is prepared, not run (loop_in_view), and kept
    # here with the collection it returned, so the whole version can be written in one job (write_version)
    defer_loop: bool = False
    deferred: tuple[Any, DataFrame] | None = None
    # with defer_loop: the inputs the query was given as they came (not guarded by projections), each with
    # the checks the loop's task makes of its rows (incremental.inputs.TaskCheck); its sources then unguarded too
    checks: list[tuple[DataFrame, Any]] | None = None

    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if call.in_loop:  # a body this view cannot keep (it would have been recorded, not run)
            if "dd_iterate" not in self.blockers:
                self.blockers.append("dd_iterate")
            return below(call)
        return self._stateful(call.op, call.kernel, call.params, call.inputs, call.out_fields, call.out_columns,
                              call.kernel_type)

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        if isinstance(call.cs.ttype, Loop):
            return below(call)
        return loop_in_view(self, call.df, call.cs, call.body, call.max_iterations)

    def _stateful(
        self,
        op: str,
        kernel: Callable[..., Any],
        params: Any,
        inputs: Sequence[Input],
        out_fields: Sequence[T.StructField],
        out_columns: Sequence[tuple[str, str]],
        kernel_type: TimeType,
    ) -> DataFrame:
        """One stateful operator of the query (see the module docstring)."""
        if _by_totals(kernel, params):
            return self._totals(op, params, inputs[0], out_fields, out_columns, kernel_type)
        slot = len(self.operators)
        # stored without the key hash (8 incompressible bytes a row): recomputed from the key columns when read
        prepared = [prepare(inp, self.nbuckets, self.nparts, op=op).drop(NEW, KEY_HASH) for inp in inputs]
        hashed = [_hashed_names(inp) for inp in inputs]
        me = Operator(op, tuple(p.schema for p in prepared))
        out_schema = T.StructType([*out_fields, *time_fields(kernel_type)])
        probed = self._enter(slot, me, out_schema, out_columns, kernel_type)
        if probed is not None:
            return probed
        assert self.write is not None and self.read is not None
        tags = [tag(slot, j) for j in range(len(prepared))]
        written = self.write(f"s{slot}", [(t, p, p.schema) for t, p in zip(tags, prepared)])
        if not written:  # no new updates: no output changes
            return self._empty(out_schema, out_columns, kernel_type)
        self.added.update(written)
        news = [self._keyed(self._read([written[t]] if t in written else [], p.schema, t, True), h)
                for t, p, h in zip(tags, prepared, hashed)]
        # the keys the new updates touch (not deduplicated: a semi-join needs no distinct keys,
        # and a distinct would cost one more shuffle, one more job)
        touched = news[0].select(BUCKET, KEY_HASH)
        for n in news[1:]:
            touched = touched.unionByName(n.select(BUCKET, KEY_HASH))
        sides = []
        for t, p, new, h in zip(tags, prepared, news, hashed):
            old = self._keyed(self._read(self.traces.get(t, []), p.schema, t, False), h)
            sides.append(old.join(touched, [BUCKET, KEY_HASH], "left_semi").unionByName(new))
        self.kernel_inputs.append((op, sides))
        out = run_bucketed(kernel, params, sides, out_schema)
        return finish(out, out_columns, kernel_type)

    def _totals(
        self,
        op: str,
        params: Any,
        inp: Input,
        out_fields: Sequence[T.StructField],
        out_columns: Sequence[tuple[str, str]],
        kernel_type: TimeType,
    ) -> DataFrame:
        """A ``dd_count`` or exact ``dd_sum`` from per-key totals (:mod:`spark_differential.kernels.totals`).

        Two traces: ``s<i>_0``, the input rows in kernel form with the hash of the whole
        row (keys and data) as ``_sd_h`` (the bucket still follows the key), and
        ``s<i>_1``, the totals ``(bucket, keys, time, _cn, _cs, _cnn)``.  The new
        rows are written (one job); one broadcast of their (bucket, row hash) and (bucket,
        key hash) picks the trace rows of the touched rows and the totals of the touched
        keys; the kernel's output (the operator's output changes and the totals' changes,
        tagged) goes to the rest of the query and, its totals' changes, to the version's last
        write (``Run.stored``), as the newest file of the totals trace."""
        slot = len(self.operators)
        w = kernel_type.width
        kcols, acols = keys(params.nkeys), names("_a", params.ndata)
        rows = prepare(inp, self.nbuckets, self.nparts, op=op).drop(NEW, KEY_HASH)
        key_fields = [rows.schema[c] for c in kcols]
        stype = out_fields[params.nkeys].dataType if params.agg == "sum" else T.LongType()
        tot_schema = T.StructType([
            rows.schema[BUCKET], *key_fields,
            *[T.StructField(c, T.LongType(), False) for c in times(w)],
            T.StructField(ktotals.CN, T.LongType(), True), T.StructField(ktotals.CS, stype, True),
            T.StructField(ktotals.CNN, T.LongType(), True),
        ])
        me = Operator(op, (rows.schema, tot_schema), (ROWS, TOTALS))
        out_schema = T.StructType([*out_fields, *time_fields(kernel_type)])
        probed = self._enter(slot, me, out_schema, out_columns, kernel_type)
        if probed is not None:
            return probed
        assert self.write is not None and self.read is not None
        t_rows, t_tot = tag(slot, 0), tag(slot, 1)
        written = self.write(f"s{slot}", [(t_rows, rows, rows.schema)])
        if not written:  # no new updates: no output changes
            return self._empty(out_schema, out_columns, kernel_type)
        self.added.update(written)
        new = self._keyed(self._read([written[t_rows]], rows.schema, t_rows, True), [*kcols, *acols], kcols)
        khash = key_hash([F.col(c) for c in kcols])
        # one broadcast for both semi-joins: the rows' hashes and the keys' hashes (a row hash
        # equal to a key hash by chance only adds rows the kernel finds unchanged)
        touched = new.select(BUCKET, KEY_HASH).unionByName(new.select(BUCKET, khash.alias(KEY_HASH)))
        old_rows = self._keyed(self._read(self.traces.get(t_rows, []), rows.schema, t_rows, False), [*kcols, *acols],
                               kcols)
        old_tot = self._keyed(self.read(self.traces.get(t_tot, []), tot_schema, t_tot), kcols)
        sides = [old_rows.join(touched, [BUCKET, KEY_HASH], "left_semi").unionByName(new),
                 old_tot.join(touched, [BUCKET, KEY_HASH], "left_semi")]
        self.kernel_inputs.append((op, sides))
        wide_schema = T.StructType([
            T.StructField(ktotals.TAG, T.IntegerType(), False), *key_fields, out_fields[params.nkeys],
            *[T.StructField(c, T.LongType(), False) for c in times(w)], T.StructField(D, T.LongType(), True),
            *tot_schema.fields[-3:],
        ])
        # the kernel runs in the version's one last write, twice: its output changes (through the rest of
        # the query) and the totals' changes (stored as the totals trace's newest file) read the same
        # shuffle and broadcast (Spark reuses both within one plan); a write of its own would be one
        # more query and job, which costs more than running the kernel again on the touched rows
        out = run_bucketed(ktotals.totals, params, sides, wide_schema)
        tot_cols = [F.expr(bucket_sql(kcols, self.nbuckets, self.nparts)),
                    *[F.col(c) for c in [*kcols, *times(w), *ktotals.TOTALS]]]
        self.stored.append((t_tot, out.where(F.col(ktotals.TAG) == 1).select(
            *[c.alias(f.name) for c, f in zip(tot_cols, tot_schema.fields)]), tot_schema))
        changes = out.where(F.col(ktotals.TAG) == 0).select(*[f.name for f in out_schema.fields])
        return finish(changes, out_columns, kernel_type)

    def _keyed(self, df: DataFrame, hashed: Sequence[str], bucketed: Sequence[str] | None = None) -> DataFrame:
        """Stored trace rows (kernel form) with their key hash ``_sd_h`` and bucket again, as
        :func:`~spark_differential.engine.kernel_form.prepare` computed them: the
        :func:`~spark_differential.engine.kernel_form.key_hash` of the columns ``hashed`` (kernel
        names), the bucket of that of ``bucketed`` (by default the same).  Neither is stored: the
        hash is 8 incompressible bytes a row, and a file an update wrote inside one task holds no
        bucket (its task does not compute Spark's hash)."""
        df = df.withColumn(KEY_HASH, key_hash([F.col(c) for c in hashed]))
        khash = F.col(KEY_HASH) if bucketed is None else key_hash([F.col(c) for c in bucketed])
        return df.withColumn(BUCKET, bucket_of(khash, self.nbuckets, self.nparts))

    def _read(self, files: Sequence[str], schema: T.StructType, name: str, new: bool) -> DataFrame:
        assert self.read is not None
        return self.read(files, schema, name).withColumn(NEW, F.lit(new))

    def _enter(self, slot: int, me: Operator, out_schema: T.StructType, out_columns: Sequence[tuple[str, str]],
               kernel_type: TimeType) -> DataFrame | None:
        """Record operator ``me`` at ``slot``.  On the probe: its empty output (and why the traced
        strategy cannot keep it, if so); otherwise ``None`` after checking it against the stored one."""
        self.operators.append(me)
        if self.probe:
            if kernel_type != self.ttype:
                self.blockers.append(f"{me.op} over {kernel_type.describe()} times")
            return self._empty(out_schema, out_columns, kernel_type)
        self._check(slot, me)
        return None

    def _empty(self, out_schema: T.StructType, out_columns: Sequence[tuple[str, str]],
               kernel_type: TimeType) -> DataFrame:
        """An operator's output with no changes."""
        return finish(self.spark.createDataFrame([], out_schema), out_columns, kernel_type)

    def _check(self, slot: int, me: Operator) -> None:
        if slot >= len(self.expected):
            raise IncrementalStateError(
                f"sd.incremental: the query called a stateful operator #{slot + 1}, {me.describe()}, but the view "
                f"stored under {self.where} was built by a query with {len(self.expected)}; the query must stay the "
                "same from update to update. Rebuild the view at a new path by replaying its inputs."
            )
        want = self.expected[slot]
        if not want.same(me):
            raise IncrementalStateError(
                f"sd.incremental: the query's stateful operator #{slot + 1} is {me.describe()} but the view stored "
                f"under {self.where} was built with {want.describe()}; the query must stay the same from update to "
                "update. Rebuild the view at a new path by replaying its inputs."
            )

    def finished(self) -> None:
        """Check that the query called every stored operator."""
        if not self.probe and len(self.operators) != len(self.expected):
            raise IncrementalStateError(
                f"sd.incremental: the query called {len(self.operators)} stateful operators but the view stored "
                f"under {self.where} was built with {len(self.expected)} "
                f"({', '.join(o.describe() for o in self.expected)}); the query must stay the same from update to "
                "update. Rebuild the view at a new path by replaying its inputs."
            )


def advanced_totals(trace: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:
    """A totals trace (:meth:`Run._totals`) advanced to ``frontier`` and consolidated: the
    changes ``(_cn, _cs, _cnn)`` summed per key and advanced time, rows summing to zero dropped
    (accumulations in the future of ``frontier`` are kept: seed 004)."""
    leaves = times(ttype.width)
    tot = list(ktotals.TOTALS)
    rest = [c for c in trace.columns if c not in (*leaves, *tot)]
    adv = [F.expr(e).alias(n) for e, n in zip(ttype.sql_advance(leaves, list(frontier)), leaves)]
    sums = [F.sum(c).cast(trace.schema[c].dataType).alias(c) for c in tot]
    nonzero = (F.col(tot[0]) != 0) | (F.col(tot[1]) != 0) | (F.col(tot[2]) != 0)
    return trace.select(*rest, *adv, *tot).groupBy(*rest, *leaves).agg(*sums).where(nonzero).select(*trace.columns)


def probe(spark: SparkSession, query: Callable[..., DataFrame], schemas: Mapping[str, T.StructType], ttype: TimeType,
          first: Sequence[DataFrame] = ()) -> tuple[list[str], tuple[int, int], tuple[Operator, ...]]:
    """What the traced strategy would keep of ``query``: ``(blockers, (key buckets, partitions), operators)``.

    The query is called once on empty inputs under a probing :class:`Run` (stateful operators
    return empty collections without running; a ``dd_iterate`` is recorded, not run), which sees
    what it uses: the strategy needs no history-dependent operator, no ``dd_iterate`` the in-task
    path cannot run (:mod:`spark_differential.incremental.loop`) or whose first update (``first``:
    its inputs) is larger than one task may hold, and every stateful operator over the inputs'
    time type.  ``blockers`` names what the query uses that it cannot keep (none: it can).

    >>> import spark_differential as sd
    >>> from spark_differential.core.lattice import Total
    >>> schema = sd.session().createDataFrame([], "src long, dst long, time long, diff long").schema
    >>> blockers, _, operators = probe(sd.session(), lambda edges: edges.dd_count(by="src"), {"edges": schema}, Total())
    >>> blockers, [o.op for o in operators]
    ([], ['dd_count'])
    >>> probe(sd.session(), lambda edges: edges.differentiate(), {"edges": schema}, Total())[0]
    ['differentiate']
    """
    nparts = shuffle_partitions(spark)
    run = Run(spark, ttype, buckets(spark), nparts, probe=True)
    run.first_rows = estimated_rows(first)[0]  # Spark's estimate of the first update's rows, no job
    empty = {n: spark.createDataFrame([], schema) for n, schema in schemas.items()}
    with collecting() as history_ops, seam.handling(run):
        query(**empty)
    return sorted(history_ops) + run.blockers, (run.nbuckets, nparts), tuple(run.operators)


def write(store: Store, query: Callable[..., DataFrame], policy: ParquetPolicy, up: Update,
          bucketing: tuple[int, int], operators: Sequence[Operator]) -> tuple[Written, list[tuple[str, list[DataFrame]]]]:
    """One update by the traced strategy: run the query on the new updates against the stored traces.

    Each stateful operator writes its new input updates (one write each, under
    ``directory/s<i>``); then one more write stores what the update returns (``o``), the
    output changes at times still in the future of ``upto`` (``p``, returned by a later
    update) and the traces' merges ``policy`` asks for (advanced to ``upto`` and
    consolidated).  Returns what was written and each stateful operator's kernel inputs.

    A query that is one loop over an integral time (``operators``) is first called with the
    loop deferred; if it returns the loop's change as it is, the loop's one task writes the
    version (one job); otherwise it is called again, the loop written apart."""
    state, ttype, directory, new_front = up.state, up.ttype, up.directory, up.new_front
    spark = store.spark
    old_traces = dict(state.trace_files) if state is not None else {}

    def new_run(defer: bool) -> Run:
        return Run(
            spark, ttype, bucketing[0], bucketing[1],
            expected=operators,
            traces=old_traces, write=lambda sub, parts: store.write_tagged(f"{directory}/{sub}", parts),
            read=store.read, where=up.where, frontier=new_front,
            write_task=lambda sub, rows, fn, wide: store.write_task(f"{directory}/{sub}", rows, fn, wide),
            local_dirs=store.local_dirs, defer_loop=defer,
        )

    def called(defer: bool) -> tuple[Run, DataFrame]:
        run = new_run(defer)
        # the loop's task checks the inputs' rows as they came (a projection each less to analyse), where it can
        given = up.incoming.task_checks() if defer and isinstance(up.incoming, Guarded) else None
        if given:
            run.checks = list(given.values())
        # (an input the update does not name: no changes; made here, as the one-task path needs none)
        changes = {n: (up.incoming.raw[n] if run.checks is not None else up.incoming[n])  # type: ignore[attr-defined]
                   if n in up.incoming else store.read([], up.schemas[n], n) for n in up.schemas}
        with collecting() as history_ops, seam.handling(run):
            result = query(**changes)
        run.finished()
        blockers = sorted(history_ops) + run.blockers
        if blockers:
            raise IncrementalStateError(
                f"{up.op}: the query uses {', '.join(blockers)} but the view stored under {up.where} runs in "
                "stage 2, which cannot keep it differential; the query must stay the same from update to update. "
                "Rebuild the view at a new path by replaying its inputs."
            )
        return run, result

    # a query that is one loop over an integral time: its task writes the whole version (one job)
    one_loop = (len(operators) == 1 and operators[0].op == "dd_iterate" and integral_sql(ttype) is not None
                and all(operators[0].side(j) == LOOP for j in range(len(operators[0].inputs))))
    if not one_loop:  # a small update: the whole query in one task (one job), if it can run there
        written = onetask.write(store, query, policy, up, operators)
        if written is not None:
            return written, []
    # recorded once, its task computing the loop's sources from the inputs as given (no call of the query)
    if one_loop and store.files.local_root() is not None and isinstance(up.incoming, Guarded):
        given = up.incoming.task_checks()
        lq = None
        if given is not None:
            try:
                lq = onetask.recorded(spark, query, up.schemas, ttype, large_var_types(spark), how=record_loop_query)
            except Untranslatable:
                pass  # (the query is called as below, which says why where it must)
        if lq is not None and given is not None and lq.operator.same(operators[0]):
            run = new_run(True)
            prepared(run, lq, given)
            written = _loop_version(store, up, run)
            front = store.found_front(new_front) if isinstance(new_front, NextFrontier) else list(new_front)
            return dataclasses.replace(written, frontier=front), []
    # the loop's one task may find it (its inputs as given; it writes the version itself: this machine's files)
    if isinstance(new_front, NextFrontier) and one_loop and store.files.local_root() is not None:
        run, result = called(True)
        if run.deferred is not None and result is run.deferred[1] and run.checks is not None:
            written = _loop_version(store, up, run)
            return dataclasses.replace(written, frontier=store.found_front(new_front)), run.kernel_inputs
    if isinstance(new_front, NextFrontier):  # found by a job first (Written.frontier says it)
        up = resolved(up)
        new_front = up.new_front
    run, result = called(one_loop)
    if one_loop:
        if run.deferred is not None and result is run.deferred[1]:
            return dataclasses.replace(_loop_version(store, up, run), frontier=list(new_front)), run.kernel_inputs
        run, result = called(False)  # the query does more than return its loop's change: the loop written apart
    out_schema = check_output(up.op, result, ttype, state, up.where)
    cols = [f.name for f in out_schema.fields]
    result = result.select(*cols)
    if state is not None and state.pending_files:
        result = result.unionByName(store.read(state.pending_files, out_schema, "o"))
    ready = consolidated_collection(result, [f.name for f in data_fields(out_schema)])
    kind = F.when(in_future(ready, ttype, new_front), F.lit("p")).otherwise(F.lit("o"))
    wide = ready.select(kind.alias(KIND), *[F.col(f.name).alias(c)
                                            for f, c in zip(out_schema.fields, physical("o", out_schema))])
    for t, df, schema in run.stored:  # totals traces' newest files
        wide = wide.unionByName(tagged(df, t, t, schema), allowMissingColumns=True)
        run.added[t] = part(directory, t)
    traces: dict[str, list[str]] = {}
    for slot, operator in enumerate(run.operators):
        for side, schema in enumerate(operator.inputs):
            t = tag(slot, side)
            old = old_traces.get(t, [])
            if operator.side(side) == LOOP:  # a loop's traces: rewritten whole by its task
                traces[t] = run.replaced.get(t, old)
                continue
            totals = operator.side(side) == TOTALS

            def merge(files: Sequence[str], t: str = t, schema: T.StructType = schema, totals: bool = totals
                      ) -> DataFrame:
                stored = store.read(files, schema, t)
                if totals:
                    return advanced_totals(stored, ttype, new_front)
                return advanced(stored, ttype, new_front, times(ttype.width))

            traces[t], merged = store.roll(old, run.added.get(t), directory, t, schema, policy, merge)
            if merged is not None:
                wide = wide.unionByName(merged, allowMissingColumns=True)
    present = store.write_data(directory, wide)
    written = Written(
        output=out_schema,
        output_exists=part(directory, "o") in present,
        input_files={},
        emitted_files=[],
        compacted=True,
        trace_files={t: [f for f in fs if not f.startswith(f"{directory}/data/") or f in present]
                     for t, fs in traces.items()},
        pending_files=[p for p in [part(directory, "p")] if p in present],
        operators=tuple(run.operators),
        frontier=list(new_front),
    )
    return written, run.kernel_inputs


def _loop_version(store: Store, up: Update, run: Run) -> Written:
    """The version of an update whose query returned its one loop's change, deferred
    (:func:`~spark_differential.incremental.loop_driver.write_version`: one job)."""
    assert run.deferred is not None
    lu, result = run.deferred
    state = up.state
    out_schema = check_output(up.op, result, up.ttype, state, up.where)
    pending = store.read(state.pending_files, out_schema, "o") if state is not None and state.pending_files else None
    files = write_version(run, lu, pending, out_schema)
    return Written(
        output=out_schema,
        output_exists="o" in files,
        input_files={},
        emitted_files=[],
        compacted=True,
        trace_files={t: list(fs) for t, fs in run.replaced.items()},
        pending_files=[files["p"]] if "p" in files else [],
        operators=tuple(run.operators),
    )


def _by_totals(kernel: Callable[..., Any], params: Any) -> bool:
    """Whether a stateful operator is a count or an exact sum (kept by per-key totals)."""

    return (kernel is kreduce.reduce and isinstance(params, kreduce.ReduceParams) and params.agg in ("count", "sum")
            and (params.agg == "count" or params.exact_sum))


__all__ = ["Run", "advanced_totals", "probe", "write"]
