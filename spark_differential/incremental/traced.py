"""Per-operator traces of an incremental view (stage 2 of :mod:`spark_differential.incremental`).

On ``(data, time, diff)``: a view in stage 2 calls its query on the **new updates
only** (changes in, changes out: linear steps map changes to changes).  Every
stateful operator the query calls (``dd_join``, ``dd_semijoin``, ``dd_antijoin``
and the reductions: everything that runs a kernel through
:func:`spark_differential.engine.distributed.execute`) is intercepted here and identified
by its position in the query's calls, its name and the schemas of its inputs in
kernel form.  Each of its inputs has a **trace**: every update the input ever
received, in kernel form (bucket, keys, data, time leaves, ``_d``; the key hash is
recomputed when read rather than stored: 8 incompressible bytes a row), as
Parquet files under the view's path (the last merge, advanced to the frontier of
that moment with ``advance(t, F)`` and consolidated, plus one file per update
since).  An update of the operator

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
empty inputs and the view then runs in stage 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.lattice import Leaves, Loop, TimeType
from spark_differential.core.names import BUCKET, KEY_HASH
from spark_differential.engine.call import Below, Handler, LoopCall, StatefulCall
from spark_differential.engine.distributed import run_bucketed
from spark_differential.engine.kernel_form import Input, bucket_sql, finish, key_hash, prepare, time_fields
from spark_differential.engine.kernel_form import hashed_names as _hashed_names
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.loop import loop_in_view
from spark_differential.incremental.storage import ROWS, TOTALS, Operator, tag
from spark_differential.kernels import reduce as kreduce
from spark_differential.kernels import totals as ktotals
from spark_differential.kernels.common import NEW, D, keys, names, times

# write(subdirectory, [(tag, prepared rows, their schema)]) -> the files written, by tag (absent: no rows)
Write = Callable[[str, Sequence[tuple[str, DataFrame, T.StructType]]], dict[str, str]]
# read(files, schema, tag) -> one stored collection
Read = Callable[[Sequence[str], T.StructType, str], DataFrame]


@dataclass(eq=False)
class Run(Handler):
    """One call of a view's query in stage 2 (or a probe of it on empty inputs).

    ``probe``: nothing runs; each stateful operator returns an empty collection and
    is recorded, with the reasons the query cannot run in stage 2 (``blockers``).
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
    frontier: Sequence[Leaves] = ()  # the update's new frontier (a loop's task advances its traces to it)
    # write_wide(subdirectory, rows tagged by KIND) -> the files written, by tag (a loop's one write)
    write_wide: Callable[[str, DataFrame], dict[str, str]] | None = None
    # the traces of loops (spark_differential.incremental.loop) rewritten whole by this update: tag -> files
    replaced: dict[str, list[str]] = field(default_factory=dict)
    # a probe's: Spark's estimate of the first update's input rows (no job), which a loop's one task must hold
    first_rows: int = 0

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
        news = [_with_hash(self._read([written[t]] if t in written else [], p.schema, t, True), h)
                for t, p, h in zip(tags, prepared, hashed)]
        # the keys the new updates touch (not deduplicated: a semi-join needs no distinct keys,
        # and a distinct would cost one more shuffle, one more job)
        touched = news[0].select(BUCKET, KEY_HASH)
        for n in news[1:]:
            touched = touched.unionByName(n.select(BUCKET, KEY_HASH))
        sides = []
        for t, p, new, h in zip(tags, prepared, news, hashed):
            old = _with_hash(self._read(self.traces.get(t, []), p.schema, t, False), h)
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
        new = _with_hash(self._read([written[t_rows]], rows.schema, t_rows, True), [*kcols, *acols])
        khash = key_hash([F.col(c) for c in kcols])
        # one broadcast for both semi-joins: the rows' hashes and the keys' hashes (a row hash
        # equal to a key hash by chance only adds rows the kernel finds unchanged)
        touched = new.select(BUCKET, KEY_HASH).unionByName(new.select(BUCKET, khash.alias(KEY_HASH)))
        old_rows = _with_hash(self._read(self.traces.get(t_rows, []), rows.schema, t_rows, False), [*kcols, *acols])
        old_tot = _with_hash(self.read(self.traces.get(t_tot, []), tot_schema, t_tot), kcols)
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

    def _read(self, files: Sequence[str], schema: T.StructType, name: str, new: bool) -> DataFrame:
        assert self.read is not None
        return self.read(files, schema, name).withColumn(NEW, F.lit(new))

    def _enter(self, slot: int, me: Operator, out_schema: T.StructType, out_columns: Sequence[tuple[str, str]],
               kernel_type: TimeType) -> DataFrame | None:
        """Record operator ``me`` at ``slot``.  On the probe: its empty output (and why stage 2
        cannot keep it, if so); otherwise ``None`` after checking it against the stored one."""
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
        if (want.op != me.op or [s.simpleString() for s in want.inputs] != [s.simpleString() for s in me.inputs]
                or [want.side(j) for j in range(len(want.inputs))] != [me.side(j) for j in range(len(me.inputs))]):
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


def advanced(trace: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:
    """A trace (kernel form) advanced to ``frontier`` with ``advance(t, F)`` and consolidated (seed 004)."""
    leaves = times(ttype.width)
    rest = [c for c in trace.columns if c not in (*leaves, D)]
    adv = [F.expr(e).alias(n) for e, n in zip(ttype.sql_advance(leaves, list(frontier)), leaves)]
    return (
        trace.select(*rest, *adv, D)
        .groupBy(*rest, *leaves)
        .agg(F.sum(D).cast("long").alias(D))
        .where(F.col(D) != 0)
        .select(*trace.columns)
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


def _with_hash(df: DataFrame, hashed: Sequence[str]) -> DataFrame:
    """Stored trace rows (kernel form, no key hash) with their key hash ``_sd_h`` again: the
    :func:`~spark_differential.engine.distributed.key_hash` of the columns ``hashed`` (kernel names),
    as :func:`~spark_differential.engine.distributed.prepare` computed it."""
    return df.withColumn(KEY_HASH, key_hash([F.col(c) for c in hashed]))


def _by_totals(kernel: Callable[..., Any], params: Any) -> bool:
    """Whether a stateful operator is a count or an exact sum (kept by per-key totals)."""

    return (kernel is kreduce.reduce and isinstance(params, kreduce.ReduceParams) and params.agg in ("count", "sum")
            and (params.agg == "count" or params.exact_sum))


__all__ = ["Operator", "Run", "advanced", "advanced_totals", "tag"]
