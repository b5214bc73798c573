"""An in-task loop iterated to its fixed point, on Arrow tables (the executor's side).

On ``(data, time, diff)``: :func:`run_loop` computes, at every outer time, the fixed point of
the recorded body started from the roots, semi-naively: iteration ``i`` runs every step on
the loop variable's change at ``i`` (:mod:`.step`), the body's result minus the loop
variable is the next change, and the loop stops at the first empty change.  The answer is
the sum of the changes (the roots, then each iteration's), at the outer times.
:func:`stream` does it in time chunks (:mod:`.chunking`), on several threads when the
chunks allow, yielding the answer in pieces as they are known.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator, Sequence

from spark_differential.core.collection import DIFF
from spark_differential.core.lazy import lazy
from spark_differential.intask.chunking import chunk_groups, chunk_step, chunked, group_starts, plan_chunks, unchunked
from spark_differential.intask.exchange import Exchange
from spark_differential.intask.program import Concat, Program, Stateful
from spark_differential.intask.relation import Relation, leaves
from spark_differential.intask.step import relation_rows, run_concat, run_step, unconsolidated
from spark_differential.kernels.common import conform
from spark_differential.trace.arrow import ArrowTrace, consolidated

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")


def fixed_point(program: Program, sources: Sequence[pa.Table]) -> tuple[pa.Table, list[int], int]:
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


def stream(program: Program, sources: Sequence[pa.Table], exchange: Exchange | None = None,
           clock: list[float] | None = None) -> Generator[pa.Table, None, tuple[list[int], int]]:
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
    loop; pieces yielded before then are not the loop's answer (there is none).

    In key partitions (``exchange``: this task's part of the sources, :mod:`.exchange`) each
    source's rows go first to the tasks owning their data; the answer is then this task's
    part of it (the rows of the data it owns), every count the tasks' sum, and the chunks
    run on one thread (the tasks' exchanges must come in the same order).

    ``clock`` (when given) gets the seconds since the loop started at the end of each
    iteration, where one loop runs (not groups of chunks on threads)."""

    program = dataclasses.replace(program, steps=tuple(unconsolidated(s) for s in program.steps))
    if exchange is not None:
        sources = [exchange.table(t, [c for c in cols if c not in (*leaves(program.width), DIFF)])
                   for t, cols in zip(sources, program.sources)]
        program = dataclasses.replace(program, threads=1)
    chunks = plan_chunks(program, sources, exchange)
    if chunks is not None:
        sources = [chunked(t, c, chunks) for t, c in zip(sources, program.sources)]
    if chunks is None:
        result, history = run_loop(program, program.steps, sources, exchange=exchange, clock=clock)
        if not history[-1]:
            yield conform(consolidated(result, program.roots.names[:-1]), program.roots)
        return history, 0
    steps = tuple(chunk_step(s, chunks) if isinstance(s, Stateful) else s for s in program.steps)
    rows = sum(t.num_rows for t in sources)
    groups = chunk_groups(sources, chunks, program.threads if rows >= program.thread_min_rows else 1)
    if len(groups) == 1:
        result, history = run_loop(program, steps, sources, exchange=exchange, clock=clock)
        if not history[-1]:
            yield conform(unchunked(result, program.data, chunks)[0], program.roots)
        return history, chunks.count
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    starts = group_starts(groups, chunks)

    def one(group: list[pa.Table]) -> tuple[tuple[pa.Table, pa.Table | None] | None, list[int]]:
        # each group un-chunks its own answer on its thread: rows at times inside the
        # group's chunks are the group's alone; only the times where a group starts
        # (the previous group's last chunk hands over to it) meet rows of two groups
        res, hist = run_loop(program, steps, group)
        return (None if hist[-1] else unchunked(res, program.data, chunks, starts)), hist

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
            yield conform(consolidated(edges, program.roots.names[:-1]), program.roots)
    return history, chunks.count


def run_loop(program: Program, steps: Sequence[Stateful | Concat], sources: Sequence[pa.Table],
             record: Callable[[int, int, int, pa.Table], None] | None = None,
             exchange: Exchange | None = None, clock: list[float] | None = None,
             hold: Callable[[int, int, pa.Table], pa.Table] | None = None) -> tuple[pa.Table, list[int]]:
    """Iterate ``steps`` from the sources to the fixed point: ``(the loop's updates, not
    consolidated (chunked form when the steps are chunked), changes per iteration)``; the
    result is empty, and the last count nonzero, when ``max_iterations`` stopped the loop.

    ``record`` (when given) is called as ``record(step, input, iteration, rows)`` with the
    new updates every input of every stateful step (``steps[step]``) receives at every
    iteration (:func:`run_step`): what a view's loop stores (:mod:`spark_differential.incremental.loop`).
    ``hold`` (when given) is called as ``hold(step, iteration, output)`` with every stateful
    step's output change (user names) and returns the part the rest of the body sees (a view's
    loop holds back the rows at times not yet complete).

    ``exchange`` (key partitions; the sources already placed by their data): every stateful
    step's new updates go to the tasks owning their keys, each iteration's change to the
    tasks owning its data (so it is consolidated whole), and the changes per iteration are
    the tasks' sums: every task stops at the same iteration.  ``clock`` (when given) gets the
    seconds since the start at the end of each iteration."""

    started = time.perf_counter()
    cols = [*program.data, *leaves(program.width), DIFF]
    traces = {s.name: [ArrowTrace(i.schema, s.key_cols) for i in s.inputs] for s in steps if isinstance(s, Stateful)}
    roots = conform(sources[0], program.roots)
    parts = [roots]
    v = roots
    i = 0
    history: list[int] = []
    while True:
        tables = {"v": v}
        settled: set[str] = set()
        for s, step in enumerate(steps):
            if isinstance(step, Stateful):
                hook = None if record is None else (lambda k, rows, s=s, i=i: record(s, k, i, rows))
                tables[step.name] = run_step(step, tables, sources, traces[step.name], i, settled, hook, exchange)
                if hold is not None:
                    tables[step.name] = hold(s, i, tables[step.name])
            else:
                tables[step.name] = run_concat(step, tables, sources, i)
        out = conform(relation_rows(program.output, tables).rename_columns(cols), program.roots)
        if exchange is not None:
            out = exchange.table(out, program.data)
        if i == 0:
            import pyarrow.compute as pc

            back = conform(roots.set_column(len(cols) - 1, DIFF, pc.negate(roots.column(DIFF))), program.roots)
            out = pa.concat_tables([out, back])
            delta = conform(consolidated(out, cols[:-1]), program.roots)
        elif exchange is None and _whole(program.output, tables, settled):
            delta = out  # a consolidated step's rows, every column kept: consolidated already
        else:
            delta = conform(consolidated(out, cols[:-1]), program.roots)
        history.append(delta.num_rows if exchange is None else exchange.total(delta.num_rows))
        if clock is not None:
            clock.append(time.perf_counter() - started)
        if history[-1] == 0:
            break
        i += 1
        if program.max_iterations is not None and i >= program.max_iterations:
            return program.roots.empty_table(), history
        parts.append(delta)
        v = delta
    return pa.concat_tables(parts), history


def _whole(rel: Relation, tables: dict[str, pa.Table], settled: set[str]) -> bool:
    """Whether ``rel`` renames every column of one step's output known consolidated (its
    rows then stay consolidated: a step's chunk column, dropped from its output, is a
    function of the time)."""
    if rel.picks is None:
        return False
    source, picked = rel.picks
    return source in settled and len(set(picked)) == len(picked) == tables[source].num_columns
