"""One step of an in-task program, on Arrow tables.

On ``(data, time, diff)``: a :class:`~.program.Stateful` step of iteration ``i`` hands
its kernel this iteration's new updates of each input (``_new`` true) and its trace's rows
of the keys they touch (``_new`` false, :class:`~spark_differential.trace.arrow.ArrowTrace`),
and returns ``F(trace + new) - F(trace)``; the new updates then join the traces.  An outer
source enters as new updates at iteration 0 alone (the semi-naive rule of the distributed
loop, :mod:`spark_differential.loop`).  Two special cases read a trace in place: a traced
``dd_min``/``dd_max`` (:mod:`spark_differential.kernels.extremum`) and a join with a side
that no longer changes (:mod:`spark_differential.kernels.fixed_join`).  A
:class:`~.program.Concat` step is the union of its parts (outer parts at iteration 0 only).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from spark_differential.core.collection import DIFF
from spark_differential.core.lazy import lazy
from spark_differential.intask.arrow_program import NoArrow, evaluate
from spark_differential.intask.exchange import Exchange
from spark_differential.intask.program import Concat, Stateful, StepInput
from spark_differential.intask.relation import Relation, leaves
from spark_differential.kernels import duck
from spark_differential.kernels.common import NEW, D, conform, keys, names, times
from spark_differential.kernels.join import JoinParams, consolidated
from spark_differential.kernels.native import KeySorted
from spark_differential.kernels.reduce import ReduceParams, ThresholdParams
from spark_differential.trace.arrow import ArrowTrace

np = lazy("numpy")
pa = lazy("pyarrow")
# numba-compiled kernels, loaded by the first loop that uses them (numba costs seconds to import)
extremum_cache = lazy("spark_differential.kernels.extremum_cache")
extremum_traced = lazy("spark_differential.kernels.extremum_traced")
fixed_join = lazy("spark_differential.kernels.fixed_join")
log = logging.getLogger("spark_differential.iterate")


def relation_rows(rel: Relation, tables: dict[str, pa.Table]) -> pa.Table:

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


def concat_tables(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:

    parts = [conform(t, schema) for t in tables if t.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def kernel_input(table: pa.Table, inp: StepInput, new: bool, width: int) -> pa.Table:
    """User-named rows (data, time leaves, diff) as the kernel's columns."""

    cols = [table.column(c) for c in (*inp.keys, *inp.data, *leaves(width), DIFF)]
    cols.append(pa.array(np.full(table.num_rows, new)))
    labels = [*keys(len(inp.keys)), *names(inp.prefix, len(inp.data)), *times(width), D, NEW]
    if inp.chunk is not None:
        cols.append(pa.array(inp.chunk.of(table.column(leaves(width)[0]).to_numpy(zero_copy_only=False))))
        labels.append(inp.chunk.column)
    schema = inp.schema
    if labels == schema.names and all(c.type == f.type for c, f in zip(cols, schema)):  # (conform's result, made at once)
        return pa.Table.from_arrays(cols, schema=schema)
    return conform(pa.Table.from_arrays(cols, names=labels), schema)


def run_step(step: Stateful, tables: dict[str, pa.Table], sources: Sequence[pa.Table], traces: list[ArrowTrace],
              iteration: int, settled: set[str] | None = None,
              record: Callable[[int, pa.Table], None] | None = None, exchange: Exchange | None = None) -> pa.Table:
    """One stateful step of iteration ``iteration``: its kernel over this iteration's new
    updates and the trace rows of the keys they touch; the new updates join the traces.

    An outer source enters as new updates at iteration 0 and is kept in its input's
    trace, the old updates of every later iteration.  ``settled`` (when given) gets
    the step's name when its output is known consolidated (a traced ``dd_min``/``dd_max``:
    one row per key, time and value, none with a zero diff; a ``dd_threshold`` or
    ``dd_distinct`` over a total order: one row per data and time, none zero).  ``record`` (when given) is
    called with each input's index and the new updates it receives at this iteration
    (kernel columns, not consolidated; inputs receiving none are skipped).  ``exchange``
    (key partitions): each input's new updates first go to the tasks owning their keys."""

    news: list[pa.Table | None] = []
    olds: list[ArrowTrace | None] = []
    for inp, trace in zip(step.inputs, traces):
        if inp.relation is None:
            if iteration == 0:
                new = kernel_input(sources[inp.source], inp, True, step.width)  # type: ignore[index]
                news.append(new if exchange is None else exchange.table(new, step.key_cols))
                olds.append(None)
            else:
                news.append(None)
                olds.append(trace)
            continue
        new = kernel_input(relation_rows(inp.relation, tables), inp, True, step.width)
        news.append(new if exchange is None else exchange.table(new, step.key_cols))
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
        if settled is not None:
            settled.add(step.name)
    elif (joined := _fixed_join(step, news, olds)) is not None:
        out = conform(joined, step.out_schema)
    else:
        # one input's new updates, kept: their trace batch is made first, and its sorted keys
        # are the keys every trace of the step looks up
        made = {k: traces[k].batch(new) for k, (inp, new) in enumerate(zip(step.inputs, news))
                if len(present) == 1 and new is not None and (inp.relation is None or inp.keep)}
        keyed = next(iter(made.values()), None)
        sides = []
        for inp, new, old in zip(step.inputs, news, olds):
            parts = []
            if old is not None:
                parts.append(old.touching(present, keyed))
            if new is not None:
                parts.append(new)
            sides.append(concat_tables(parts, inp.schema))
        out = conform(step.kernel(step.params, *sides), step.out_schema)
        if settled is not None and isinstance(step.params, ThresholdParams) and step.params.ttype.is_total():
            settled.add(step.name)  # a threshold's change over a total order: one row per data and time, none zero
        for k, made_batch in made.items():
            traces[k].add_batch(made_batch)
            news[k] = None  # kept already
    for inp, new, trace in zip(step.inputs, news, traces):
        if batch is not None:
            trace.add_batch(batch, cached=True)
        elif new is not None and (inp.relation is None or inp.keep):
            trace.add(new)
    return user_named(step, out)


def user_named(step: Stateful, out: pa.Table) -> pa.Table:
    """A step's kernel output (internal names) as the body sees it: user names, time leaves, diff."""

    t = times(step.width)
    labels = {internal: user for internal, user in step.out_columns}
    labels.update(dict(zip(t, leaves(step.width))))
    labels[D] = DIFF
    keep = [internal for internal, _ in step.out_columns] + t + [D]
    out = out.select(keep)
    return out.rename_columns([labels[c] for c in keep])


def _traced_extremum(step: Stateful, news: Sequence[pa.Table | None],
                     olds: Sequence[ArrowTrace | None]) -> tuple[pa.Table, Any] | None:
    """``dd_min``/``dd_max`` of one loop input read against its trace in place
    (:func:`spark_differential.kernels.extremum_traced.min_max_traced`: the touched trace rows
    are never gathered into a table, nor numbered), with the new updates as the trace's
    next batch (sorted once, for both: :meth:`ArrowTrace.batch`), or ``None`` where that does
    not apply (the step then reads its trace and calls its kernel).

    The step's output is kept between iterations (:attr:`ArrowTrace.extremum`, an
    ``ExtremumCache`` made at the first iteration): most keys' changes then come from their
    kept output and the new updates, without reading their trace."""

    p = step.params
    if not (isinstance(p, ReduceParams) and p.agg in ("min", "max") and p.ndata == 1 and p.ttype.is_total()
            and step.width == 1 and len(news) == 1 and news[0] is not None and olds[0] is not None):
        return None

    trace = olds[0]
    if trace.extremum is None and not trace.batches:
        trace.extremum = extremum_cache.ExtremumCache(p.nkeys)
    cache = trace.extremum or None
    batch = trace.batch(news[0])
    if isinstance(batch, KeySorted):  # consolidated, in key and time order: the sweep needs no sort of its own
        out = extremum_traced.min_max_traced(p.nkeys, p.agg == "max", p.out_types[0], batch.table, trace.batches, trace.key,
                                      sorted_new=batch, cache=cache)
    else:
        out = extremum_traced.min_max_traced(p.nkeys, p.agg == "max", p.out_types[0], news[0], trace.batches, trace.key,
                                      cache=cache)
    return None if out is None else (out, batch)


def _fixed_join(step: Stateful, news: Sequence[pa.Table | None], olds: Sequence[ArrowTrace | None]) -> pa.Table | None:
    """A join of the loop's new updates with an outer collection after iteration 0 (its
    updates all in its trace, none new: BFS's edges), by
    :func:`spark_differential.kernels.fixed_join.join_fixed` against the trace prepared once;
    ``None`` where that does not apply (the step then reads its trace and calls its kernel)."""

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

    return consolidated([out], out_cols[:-1])


def run_concat(step: Concat, tables: dict[str, pa.Table], sources: Sequence[pa.Table], iteration: int) -> pa.Table:
    parts = []
    for rel, src in step.parts:
        if rel is not None:
            parts.append(relation_rows(rel, tables).rename_columns(list(step.columns)))
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


def unconsolidated(step: Stateful | Concat) -> Stateful | Concat:
    """``step`` without the final consolidation of a join's output: inside the loop every
    consumer of a step's output consolidates it (kernels sum their input's rows, traces are
    kept consolidated, and so is each iteration's change of the loop variable)."""

    if isinstance(step, Stateful) and isinstance(step.params, JoinParams) and step.params.mode == "join":
        return dataclasses.replace(step, params=dataclasses.replace(step.params, consolidate=False))
    return step
