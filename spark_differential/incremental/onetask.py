"""A traced view's update run whole inside one Spark task: one job an update.

On ``(data, time, diff)``: the same update as the traced strategy's distributed one
(:mod:`spark_differential.incremental.traced`, whose docstring argues why it is exact):
each stateful operator's kernel gets its new input updates and the stored trace rows of
the keys they touch and returns ``F(trace + new) - F(trace)``; a ``dd_count``/exact
``dd_sum`` gets the stored rows of the rows it changes and its keys' totals
(:mod:`spark_differential.kernels.totals`); the new updates become the traces' newest
files; the output is split into what the update returns (``o``: times not in the future
of the new frontier) and what it holds back (``p``).  The stored files are the same, so
a view's updates may take either path, one after the other.

What differs is where it runs.  The query is recorded on the driver (no job:
:mod:`spark_differential.intask.query`), and one ``mapInArrow`` task reads the update's
changes, the output held back before and every stored trace, runs every operator in
order on Arrow tables (:func:`update_tables`), merges the traces the view's merge policy
asks for (advanced to the new frontier and consolidated, as the distributed merge), and
returns every collection the version stores, the traces' rows without their key bucket
(the distributed path computes it where it reads them: Spark's hash, which the task does
not compute).  On this machine's filesystem, with an integral time, the task writes them
itself as it computes them (:meth:`~spark_differential.incremental.store.Store.write_task`);
otherwise a projection gives the output its time type on the way to the version's one
Parquet write: **one Spark job** either way.  On this machine's filesystem the writing
task also sends back the rows the update returns
(:func:`~spark_differential.incremental.store.writer`), so reading them is no second job.
The task reads a large trace file by key, through an index kept beside its Arrow copy
(:class:`Kept`, :meth:`~spark_differential.incremental.arrow_cache.ArrowCache.index`).

The task holds the whole stored state, so the path is taken when Spark's estimate of
what it reads is at most ``spark_differential.incremental.localRows`` rows
(:func:`spark_differential.core.settings.incremental_rows`); else, or when the query
cannot run inside one task (a ``dd_iterate`` with other operators, an expression the
translator does not cover, a time conversion), the update runs distributed, and one log
line says which and why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, integral_sql
from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.core.names import BUCKET, SRC
from spark_differential.engine.kernel_form import arrow_schema
from spark_differential.incremental.arrow_cache import ArrowCache
from spark_differential.incremental.inputs import Guarded, TaskCheck, check_output, resolved
from spark_differential.incremental.loop import version_output
from spark_differential.incremental.manifest import NextFrontier, Update, Written
from spark_differential.incremental.storage import KIND, ROWS, TOTALS, Operator, part, physical, tag
from spark_differential.incremental.store import Part, Store, front_part, read_local_files, widened
from spark_differential.intask.program import Concat, Stateful, fault_hooked
from spark_differential.intask.query import QueryProgram, record_query
from spark_differential.intask.relation import Untranslatable, leaves
from spark_differential.intask.sources import estimated_rows, run_row, tag_name, tag_source
from spark_differential.intask.step import kernel_input, relation_rows, run_concat, user_named
from spark_differential.kernels import native
from spark_differential.kernels import totals as ktotals
from spark_differential.kernels.common import NEW, D, conform, times
from spark_differential.trace.arrow import advanced, concat_tables, consolidated, consolidated_sums
from spark_differential.trace.parquet import ParquetPolicy, ParquetTrace

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
log = logging.getLogger("spark_differential.incremental")

OP = "sd.incremental"  # what null checks of the task's inputs name
RECORDED_KEPT = 16  # queries whose recording :func:`recorded` keeps (the least recently used go first)
_recorded: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # recorded's answers (or Untranslatable)


@dataclass(frozen=True)
class StoredTrace:
    """One trace the task reads and extends: operator ``slot``'s input ``side``, holding
    ``kind`` (rows or totals), stored with ``schema`` (Arrow: the bucket first);
    ``merged``: the kind its merging files are written under in this update (``<tag>c``: all
    of them, ``<tag>m``: the deltas after the first; ``None``: no merge)."""

    tag: str
    slot: int
    side: int
    kind: str
    schema: Any  # pa.Schema
    merged: str | None = None
    # on the local filesystem: the directories of its kept and merging files, read by the task with pyarrow
    # (else both are read by Spark's scan into the task's input)
    kept: tuple[str, ...] | None = None
    merging: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------
# the task (plain functions over Arrow tables)


def _with_new(table: pa.Table, schema: pa.Schema, new: bool) -> pa.Table:
    """Stored trace rows (bucket first, no ``_new``) as a kernel's input rows (``schema``)."""
    rows = table.drop_columns([BUCKET]) if BUCKET in table.column_names else table
    return conform(rows.append_column(NEW, pa.array(np.full(rows.num_rows, new))), schema)


def _stored(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Kernel rows (no bucket; ``_new`` dropped) as rows of a stored trace (``schema``: the bucket
    first, null here: it is computed where the distributed path reads the rows)."""
    rows = rows.drop_columns([NEW]) if NEW in rows.column_names else rows
    return conform(rows.add_column(0, BUCKET, pa.nulls(rows.num_rows, schema.field(0).type)), schema)


@dataclass(frozen=True)
class Kept:
    """A stored trace as the task has it: each file's path and rows (as ``schema``; one part
    with no path when Spark's scan brought the rows), read by key through ``cache``'s indexes
    of its large files on this machine
    (:meth:`~spark_differential.incremental.arrow_cache.ArrowCache.index`)."""

    files: Sequence[tuple[str, pa.Table]]
    schema: pa.Schema
    cache: ArrowCache | None = None

    @property
    def table(self) -> pa.Table:
        """All the rows."""
        return concat_tables([t for _, t in self.files], self.schema)

    def touching(self, keys: pa.Table, cols: Sequence[str]) -> pa.Table:
        """The rows whose ``cols`` some row of ``keys`` has (:func:`~spark_differential.kernels.native.touching`):
        binary search in the index of a file the cache indexes (one of at least its ``index_rows``
        rows), a scan of the others."""
        parts, scanned = [], []
        for f, t in self.files:
            index = self.cache.index(f, t, cols) if self.cache is not None and f else None
            if index is not None:
                parts.append(index.touching(t, keys))
            else:
                scanned.append(t)
        if scanned:  # one scan over the others together
            parts.append(native.touching(concat_tables(scanned, self.schema), keys, cols))
        return concat_tables(parts, self.schema)


def _touching(old: Kept, news: Sequence[pa.Table], cols: Sequence[str]) -> pa.Table:
    """The rows of ``old`` whose ``cols`` some row of ``news`` has (no ``cols``: every row, if any is new)."""
    present = [n.select(list(cols)) for n in news if n.num_rows]
    if not present:
        return old.schema.empty_table()
    if not cols:
        return old.table
    return old.touching(pa.concat_tables(present), cols)


def update_tables(program: QueryProgram, operators: Sequence[Operator], sources: Sequence[pa.Table],
                  pending: pa.Table, stored: Mapping[str, Kept], traces: Sequence[StoredTrace],
                  merging: Mapping[str, pa.Table], ttype: TimeType, frontier: Sequence[Leaves]
                  ) -> tuple[pa.Table, pa.Table, dict[str, pa.Table], dict[str, pa.Table]]:
    """One update of a traced view over Arrow tables (the module docstring).

    ``sources``: each input's changes (user columns: data, time leaves, diff, in the order of
    ``program.names``); ``pending``: the output held back by earlier updates (the output's
    columns); ``stored``: every trace's rows by tag (its files', ``merging``'s included, read
    by key);
    ``merging``: the rows of the files that merge, by tag.  Returns what the update returns
    and holds back (both consolidated), each trace's new rows (its newest file) and each
    merging trace's merged rows (advanced to ``frontier`` and consolidated)."""
    width = program.width
    by_tag = {t.tag: t for t in traces}
    tables: dict[str, pa.Table] = dict(zip(program.tables, sources))
    new_rows: dict[str, pa.Table] = {}
    slot = 0
    for step in program.steps:
        if isinstance(step, Concat):
            tables[step.name] = run_concat(step, tables, [], 0)
            continue
        assert isinstance(step, Stateful)
        news = [kernel_input(relation_rows(inp.relation, tables), inp, True, width)  # type: ignore[arg-type]
                for inp in step.inputs]
        operator = operators[slot]
        if operator.side(1) == TOTALS:
            out = _by_totals(step, slot, news[0], stored, by_tag, new_rows)
        else:
            sides = []
            for k, (inp, new) in enumerate(zip(step.inputs, news)):
                t = tag(slot, k)
                old = _with_new(_touching(stored[t], news, step.key_cols), inp.schema, False)  # (the few rows)
                sides.append(concat_tables([old, new], inp.schema))
                if new.num_rows:
                    new_rows[t] = _stored(new, by_tag[t].schema)
            if any(n.num_rows for n in news):
                out = conform(step.kernel(step.params, *sides), step.out_schema)
            else:
                out = step.out_schema.empty_table()
        tables[step.name] = user_named(step, out)
        slot += 1
    cols = [*program.data, *leaves(width), DIFF]
    out = consolidated(relation_rows(program.output, tables).rename_columns(cols), cols[:-1])
    out = conform(out, pending.schema)
    returned, kept = version_output(out, pending, ttype, frontier, width)
    merged = {}
    for t, rows in merging.items():
        trace = by_tag[t]
        tcols = times(width)
        if trace.kind == TOTALS:
            merged[t] = consolidated_sums(advanced(rows, ttype, frontier, tcols), list(ktotals.TOTALS))
        else:
            merged[t] = consolidated(rows, [c for c in rows.column_names if c != D], D, ttype, frontier, tcols)
    return returned, kept, new_rows, merged


def _by_totals(step: Stateful, slot: int, new: pa.Table, stored: Mapping[str, Kept],
               by_tag: Mapping[str, StoredTrace], new_rows: dict[str, pa.Table]) -> pa.Table:
    """A count or exact sum (:mod:`spark_differential.kernels.totals`): its kernel over the new rows
    and the stored rows of the rows they change, and the totals of the keys they touch; its
    output changes (the step's kernel columns).  The new rows and the totals' changes are put in
    ``new_rows`` (the two traces' newest files)."""
    t_rows, t_tot = tag(slot, 0), tag(slot, 1)
    inp = step.inputs[0]
    kcols = [c for c in inp.schema.names if c.startswith("_k")]
    row_cols = [c for c in inp.schema.names if c not in (*times(step.width), D, NEW)]
    tot_schema = by_tag[t_tot].schema
    if new.num_rows == 0:
        return step.out_schema.empty_table()
    old = _with_new(_touching(stored[t_rows], [new], row_cols), inp.schema, False)  # (the few rows)
    rows = concat_tables([old, new], inp.schema)
    out = ktotals.totals(step.params, rows, _touching(stored[t_tot], [new], kcols).drop_columns([BUCKET]))
    tags = out.column(ktotals.TAG)
    new_rows[t_rows] = _stored(new, by_tag[t_rows].schema)
    changes = out.filter(pc.equal(tags, 1)).select([c for c in tot_schema.names if c != BUCKET])
    if changes.num_rows:
        new_rows[t_tot] = _stored(changes, tot_schema)
    return conform(out.filter(pc.equal(tags, 0)).select(step.out_schema.names), step.out_schema)


def _part(table: pa.Table, j: int, schema: pa.Schema) -> pa.Table:
    """The rows of ``SRC`` ``j`` of the task's input, as ``schema``'s columns (none there: no rows)."""
    if table.num_rows == 0 or tag_name(j, 0) not in table.column_names:
        return schema.empty_table()
    rows = table.filter(pc.equal(table.column(SRC), j))
    return conform(pa.Table.from_arrays([rows.column(tag_name(j, i)) for i in range(len(schema))],
                                        names=schema.names), schema)


def task(program: QueryProgram, operators: Sequence[Operator], traces: Sequence[StoredTrace],
         sources: Sequence[Any], out_schema: pa.Schema, ttype: TimeType, frontier: Sequence[Leaves] | NextFrontier,
         cache: ArrowCache | None = None, stored_out: pa.Schema | None = None,
         checks: Sequence[TaskCheck | None] = ()) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Part]]:
    """The function of the update's task (:meth:`~spark_differential.incremental.store.Store.write_task`):
    its input tagged by ``SRC`` (the inputs'
    changes ``0 .. n-1``, of ``sources``' schemas; the output held back, ``n``; then each
    trace's kept files ``n + 1 + 2k`` and merging files ``n + 2 + 2k``), its output the
    version's collections by kind (:data:`~spark_differential.incremental.store.Part`): ``o`` and ``p`` (``out_schema``: the
    output's data, time leaves, diff, under the prefix ``ol``), each trace's newest file
    (its tag) and merged files (:attr:`StoredTrace.merged`).  ``cache``: the traces' files on
    this machine are read through their memory-mapped Arrow copies.  ``stored_out`` (an
    integral time): ``o`` and ``p`` come as the version stores them instead, the view's
    columns under the prefix ``o``, the time leaf cast to the view's time type.  ``checks``: for each
    input, the checks of its rows the task makes (:class:`~spark_differential.incremental.inputs.TaskCheck`;
    ``None``: checked before).  ``frontier``: the new frontier, or (:class:`NextFrontier`) found from
    the inputs' largest time and sent back as a :func:`~spark_differential.incremental.store.front_part`."""
    n = len(program.names)
    time_cols = leaves(program.width)

    def as_stored(rows: pa.Table) -> pa.Table:
        assert stored_out is not None
        nd = len(stored_out) - 2
        cols = [*rows.columns[:nd], rows.column(nd).cast(stored_out.field(nd).type), rows.column(rows.num_columns - 1)]
        return conform(pa.Table.from_arrays(cols, names=stored_out.names), stored_out)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[Part]:
        seen = list(batches)
        if not seen:  # nothing stored, nothing new
            return
        table = pa.Table.from_batches(seen)
        inputs = [_part(table, j, s) for j, s in enumerate(sources)]
        for rows, check in zip(inputs, checks):
            if check is not None:
                check(rows, time_cols, DIFF)
        front = frontier
        if isinstance(frontier, NextFrontier):
            front, sent = front_part(frontier, inputs, time_cols[0])
            yield sent
        pending = _part(table, n, out_schema)
        stored: dict[str, Kept] = {}
        merging: dict[str, pa.Table] = {}
        for k, tr in enumerate(traces):
            if tr.kept is not None:  # read here, file by file
                files = read_local_files(tr.kept, tr.tag, tr.schema, cache)
                merged_files = read_local_files(tr.merging, tr.tag, tr.schema, cache) if tr.merged else []
            else:  # brought by Spark's scan
                files = [("", _part(table, n + 1 + 2 * k, tr.schema))]
                merged_files = [("", _part(table, n + 2 + 2 * k, tr.schema))] if tr.merged else []
            if tr.merged is not None:
                merging[tr.tag] = concat_tables([t for _, t in merged_files], tr.schema)
            stored[tr.tag] = Kept([*files, *merged_files], tr.schema, cache)
        returned, held, new_rows, merged = update_tables(program, operators, inputs, pending, stored, traces,
                                                         merging, ttype, front)
        kinds = {tr.tag: tr.merged for tr in traces}
        outs = [("o", "ol", returned), ("p", "ol", held)] if stored_out is None else [
            ("o", "o", as_stored(returned)), ("p", "o", as_stored(held))]
        parts = [*outs, *[(t, t, rows) for t, rows in new_rows.items()],
                 *[(kinds[t], t, rows) for t, rows in merged.items()]]
        for kind, prefix, rows in parts:
            yield str(kind), rows, prefix

    return run


# ---------------------------------------------------------------------------------
# the driver


def write(store: Store, query: Callable[..., DataFrame], policy: ParquetPolicy, up: Update,
          operators: Sequence[Operator]) -> Written | None:
    """The update ``up`` of a traced view in one task, if it may run there (the module
    docstring): what it wrote; ``None`` (after a log line saying why) when it runs
    distributed instead (:func:`spark_differential.incremental.traced.write`)."""
    spark = store.spark
    where = f"{up.op}: the update of the view under {up.where}"
    limit = settings.incremental_rows(spark)
    if limit == 0:
        log.info("%s runs distributed (%s is 0)", where, settings.INCREMENTAL_ROWS)
        return None
    if any(o.side(j) not in (ROWS, TOTALS) for o in operators for j in range(len(o.inputs))):
        return None  # a loop's traces: its own one task (incremental.loop)
    large = settings.large_var_types(spark)  # (read once: every Arrow schema below takes it)
    try:
        program, result = recorded(spark, query, up.schemas, up.ttype, large)
    except Untranslatable as e:
        log.info("%s runs distributed: its query cannot run inside one task (%s)", where, e)
        return None
    if not _matches(program, operators):
        return None  # the distributed path names what changed (traced.Run._check)
    state, ttype, directory = up.state, up.ttype, up.directory
    view_schema = check_output(up.op, result, ttype, state, up.where)
    n = len(program.names)

    # what the task reads: the changes, the output held back, every trace (its merging files apart)
    parts: list[DataFrame] = []
    sized: list[DataFrame] = []  # what the parts read (the same rows, a plan Spark sizes at less cost)
    checks: list[TaskCheck | None] = []
    for j, name in enumerate(program.names):
        checks.append(None)
        if name in up.incoming:
            cols = program.columns[j][:-ttype.width - 1]
            checks[j] = up.incoming.task_check(name) if isinstance(up.incoming, Guarded) else None
            if checks[j] is None:  # checked (or lifted) in projections of their own
                sized.append(up.incoming[name])
                parts.append(tag_source(sized[-1], j, cols, ttype, op=up.op))
            else:  # as given: the task checks them
                sized.append(up.incoming.raw[name])  # type: ignore[attr-defined]
                parts.append(tag_source(sized[-1], j, cols, ttype, guarded=False))
    data = [f.name for f in view_schema.fields[:-2]]
    if state is not None and state.pending_files:  # (stored rows: nothing to check)
        sized.append(store.read(state.pending_files, view_schema, "o"))
        parts.append(tag_source(sized[-1], n, data, ttype, op=up.op, guarded=integral_sql(ttype) is None))
    old_traces = dict(state.trace_files) if state is not None else {}
    root = store.files.local_root()  # traces on this machine's filesystem: the task reads them with pyarrow
    stored_rows = 0
    traces: list[StoredTrace] = []
    kept_files: dict[str, list[str]] = {}
    for slot, operator in enumerate(operators):
        for side, schema in enumerate(operator.inputs):
            t, k = tag(slot, side), len(traces)
            old = old_traces.get(t, [])
            names: dict[str, str] = {}

            def merged_at(whole: bool, t: str = t, names: dict[str, str] = names) -> str:
                names[t] = f"{t}{'c' if whole else 'm'}"
                return part(directory, names[t])

            _, merging = ParquetTrace(tuple(old)).roll(part(directory, t), policy, store.size, merged_at)
            kept_files[t] = [f for f in old if f not in merging]
            trace = StoredTrace(t, slot, side, operator.side(side), arrow_schema(spark, schema, large), names.get(t))
            if root is not None:
                local = [tuple(f"{root}/{f}" for f in fs) for fs in (kept_files[t], merging)]
                stored_rows += store.local_rows([*local[0], *local[1]])
                traces.append(dataclasses.replace(trace, kept=local[0], merging=local[1]))
                continue
            traces.append(trace)
            for src, files in ((n + 1 + 2 * k, kept_files[t]), (n + 2 + 2 * k, list(merging))):
                if files:
                    rows = store.read(files, schema, t)
                    sized.append(rows)
                    parts.append(rows.select(F.lit(src).alias(SRC), *[F.col(f.name).alias(tag_name(src, i))
                                                                      for i, f in enumerate(schema.fields)]))
    if not parts or any(tr.merged for tr in traces):
        # the task must run for the traces' merges even when nothing new or held back has a row (inputs
        # given but empty): without it the merging files would leave the traces unmerged into any other
        parts.append(run_row(spark))
        sized.append(parts[-1])
    union: DataFrame | None = None
    for p in parts:
        union = p if union is None else union.unionByName(p, allowMissingColumns=True)
    assert union is not None
    estimate = estimated_rows(sized)  # (a Python list's rows are bounded by its batches: held_rows)
    rows = estimate.rows if estimate.known else estimate.bound
    rows = None if rows is None else rows + stored_rows
    if rows is None or rows > limit:
        log.info("%s runs distributed: it reads %s rows by Spark's estimate, more than %s=%d lets one task hold",
                 where, "an unknown number of" if rows is None else rows, settings.INCREMENTAL_ROWS, limit)
        return None
    log.info("%s runs inside one task (%d rows by Spark's estimate, at most %d)", where, rows, limit)

    # the task's output: the kind, the output (prefix ol: data, leaves, diff), every trace's columns
    leaf_fields = [T.StructField(c, T.LongType(), True) for c in leaves(ttype.width)]
    out_fields = [*[T.StructField(f.name, f.dataType, True) for f in view_schema.fields[:-2]], *leaf_fields,
                  T.StructField(DIFF, T.LongType(), True)]
    out_struct = T.StructType(out_fields)
    # an integral time: the task gives the output as stored (prefix o), and writes the version itself
    integral = integral_sql(ttype) is not None
    out_named = zip(physical("o", view_schema), view_schema.fields) if integral else zip(physical("ol", out_struct),
                                                                                          out_fields)
    fields = [T.StructField(KIND, T.StringType(), True), *[T.StructField(p, f.dataType, True) for p, f in out_named]]
    for slot, operator in enumerate(operators):
        for side, schema in enumerate(operator.inputs):
            fields += [T.StructField(p, f.dataType, True) for p, f in zip(physical(tag(slot, side), schema),
                                                                         schema.fields)]
    wide = T.StructType(fields)
    sources = [arrow_schema(spark, T.StructType([*[up.schemas[nm][c] for c in cols[:-ttype.width - 1]],
                                                 *leaf_fields, T.StructField(DIFF, T.LongType(), True)]), large)
               for nm, cols in zip(program.names, program.columns)]
    program = dataclasses.replace(program, steps=fault_hooked(spark, program.steps))  # (a test-only switch)
    cache = store.arrow_cache()
    given = [j for j, name in enumerate(program.names) if name in up.incoming]
    if not (integral and root is not None and all(checks[j] is not None for j in given)):
        up = resolved(up)  # the task cannot send a frontier back, or reads lifted inputs: found first (a job)
    front = up.new_front if isinstance(up.new_front, NextFrontier) else list(up.new_front)
    fn = task(program, operators, traces, sources, arrow_schema(spark, out_struct, large), ttype, front,
              cache, arrow_schema(spark, view_schema, large) if integral else None, checks)
    if integral:
        present = set(store.write_task(f"{directory}/data", union.coalesce(1), fn, wide, cache, large).values())
        if isinstance(front, NextFrontier):  # (no front sent back: the task had no rows)
            front = store.found_front(front)
    else:
        widen = widened(fn, arrow_schema(spark, wide, large))
        stored = _as_stored(union.coalesce(1).mapInArrow(widen, wide), view_schema, ttype)
        present = store.write_data(directory, stored, one_task=True, cache=cache)
    trace_files = {}
    for tr in traces:
        files = list(kept_files[tr.tag])
        for kind in (tr.merged, tr.tag):
            if kind is not None and part(directory, kind) in present:
                files.append(part(directory, kind))
        trace_files[tr.tag] = files
    return Written(
        output=view_schema,
        output_exists=part(directory, "o") in present,
        input_files={},
        emitted_files=[],
        compacted=True,
        trace_files=trace_files,
        pending_files=[p for p in [part(directory, "p")] if p in present],
        operators=tuple(operators),
        frontier=front,  # type: ignore[arg-type]
    )


def recorded(spark: Any, query: Callable[..., DataFrame], schemas: Mapping[str, T.StructType], ttype: TimeType,
             large: bool, how: Callable[..., Any] = record_query) -> Any:
    """``how(spark, query, schemas, ttype)``'s answer (or its
    :class:`~spark_differential.intask.relation.Untranslatable`; by default
    :func:`~spark_differential.intask.query.record_query`'s), recorded at the first update of a
    query over these input schemas and time type in this session and kept for the next ones (up
    to :data:`RECORDED_KEPT` queries): recording calls the query on placeholders, about 60 py4j
    round trips, a sixth of a small update's time.  A view's query is a function of its inputs
    (the one-task path refuses any other DataFrame in it), so its program does not change from
    one update to the next; the session's settings the recording reads (``large``:
    :func:`~spark_differential.core.settings.large_var_types`, and ANSI mode) are part of the key."""
    key = (spark, query, how, tuple((n, s.json()) for n, s in schemas.items()), ttype, large, settings.ansi(spark))
    got = _recorded.get(key)
    if got is None:
        try:
            got = how(spark, query, schemas, ttype)
        except Untranslatable as e:
            got = e
        _recorded[key] = got
        while len(_recorded) > RECORDED_KEPT:
            _recorded.popitem(last=False)
    _recorded.move_to_end(key)
    if isinstance(got, Untranslatable):
        raise got
    return got


def _matches(program: QueryProgram, operators: Sequence[Operator]) -> bool:
    """Whether the recorded query calls the stored operators, with the stored traces' columns."""
    steps = [s for s in program.steps if isinstance(s, Stateful)]
    if program.ops != tuple(o.op for o in operators) or len(steps) != len(operators):
        return False
    for step, operator in zip(steps, operators):
        for k, inp in enumerate(step.inputs):
            if k >= len(operator.inputs) or operator.side(k) not in (ROWS, TOTALS):
                return False
            want = [f.name for f in operator.inputs[k].fields if f.name != BUCKET]
            if want != [c for c in inp.schema.names if c != NEW]:
                return False
    return True


def _as_stored(out: DataFrame, view_schema: T.StructType, ttype: TimeType) -> DataFrame:
    """The task's output (a time that is not integral) as the version's write stores it: the
    output's time leaves decoded to its time type by its Columns (``_sd_o_*``,
    :func:`~spark_differential.incremental.storage.physical`); the traces' rows as they are
    (their bucket null: :meth:`spark_differential.incremental.traced.Run._keyed` computes it
    where the distributed path reads them)."""
    nd, w = len(view_schema.fields) - 2, ttype.width
    ol = physical("ol", T.StructType([T.StructField(str(i), T.LongType()) for i in range(nd + w + 1)]))
    o = physical("o", view_schema)
    stored = out.withColumnsRenamed({**dict(zip(ol[:nd], o[:nd])), ol[nd + w]: o[nd + 1]})
    # (the columns' order does not matter: writes and reads go by name)
    return stored.withColumn(o[nd], ttype.decode_columns([F.col(c) for c in ol[nd:nd + w]])).drop(*ol[nd:nd + w])


__all__ = ["StoredTrace", "recorded", "task", "update_tables", "write"]
