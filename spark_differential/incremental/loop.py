"""A ``dd_iterate`` inside an incremental view kept by the traced strategy (:mod:`spark_differential.incremental.traced`).

On ``(data, time, diff)``.  The traced strategy calls a view's query on the *changes* of its
inputs; a ``dd_iterate`` in it receives the changes of its roots and of the outer
collections its body reads, and must return the change of its fixed point.  The loop
is recorded as for the in-task path (:mod:`spark_differential.intask`: the body's
``dd_*`` steps and the linear steps between them, translated) and run inside one
Spark task against a stored state, the loop's **per-iteration traces**:

* for every stateful step of the body and every input of it, ``B_i``: the updates
  that input received at iteration ``i`` of the loop (kernel columns, the iteration as
  ``_sd_it``), advanced to the view's frontier with ``advance(t, F)`` and consolidated
  per iteration (seed 004).  ``O_i = B_0 + ... + B_i`` is the input's accumulated
  value at iteration ``i``: everything the loop has computed, as of the frontier.

Write ``v_i`` for the loop variable at iteration ``i`` (``v_0`` the roots, ``v_{i+1} =
body(v_i)``) and ``Δv_i`` for its new value minus its old one.  A stateful step whose
input was ``O_i`` and changes by ``D_i`` (its input relation over ``Δv_i``, or the change
of an outer collection, which is part of the step's input at every iteration) changes
its output by ``F(O_i + D_i) - F(O_i)``: its kernel over ``D_i`` as new updates and the
rows of ``O_i`` of the keys they touch as old ones, as every stateful operator of a view
does with its trace (:mod:`spark_differential.incremental.traced`).  The linear steps are linear,
so the body's output relation over these changes is ``Δv_{i+1}``.  Past the last
iteration ``M`` of the stored state ``O_i`` stays ``O_M`` (the old loop had reached its
fixed point); once ``i + 1 >= M`` and ``Δv_{i+1} = Δv_i``, every later iteration sees the
same inputs and gives the same change, so ``Δv_∞ = Δv_i``: the change of the loop's
fixed point, which the loop returns.  The new state is ``B'_i = B_i + D_i - D_{i-1}``
(so that ``O'_i = O_i + D_i``), advanced to the new frontier and consolidated.
Changes at times in the future of the new frontier are held back (stored with the
traces, fed by the update whose frontier passes them: :func:`loop_update`), and so are a
step's output changes at those times (over a partial order the lub of complete times need
not be complete: the body computes only at complete times, :class:`_Held`).

Why that is exact at every time of interest: after ``advance`` each ``O_i`` accumulates
to the true old input of iteration ``i`` at every time in the future of the frontier
(seed 004); the changes are all in its future; so every ``Δv_i`` accumulates to the true
change there and to nothing elsewhere, as for any operator the traced strategy keeps.

An update over an empty stored state (a view's first update) is run **semi-naively**
instead (:func:`_first`): the in-task loop over the changes, each iteration fed only the
loop variable's change, its steps' new updates kept as the new state; the same answer
and state, at the cost of the loop's changes rather than iterations x its size.  Over a
totally ordered time the state also keeps each source's accumulated value and the loop's
fixed point, and an update whose changes are large against the stored inputs
**recomputes** the loop the same way over the new inputs (:func:`loop_update`): the same
answer and state again, at the cost of the inputs rather than iterations x the changes.

The work of an update follows the changes: each iteration's kernels see the
accumulated changes ``D_i`` and the stored rows of the keys they touch (found by
binary search in ``O_i``, kept sorted by key).  The whole state is read by, and
rewritten from, the one task, so it must fit one Python worker, as an in-task loop
does; it holds about the loop's live size (its updates per iteration, advanced), not
its history.  A view whose first update is larger than an in-task loop may hold
(``spark_differential.iterate.localRows``, by Spark's estimate) takes the rerun strategy
(:mod:`spark_differential.incremental.rerun`).  A body the in-task path cannot run (an
expression the translator does not cover, a nested ``dd_iterate``) does too.

This module is what runs in the loop's task, plain functions over Arrow tables
(:func:`loop_update`, and :func:`task`, the task's function); the driver's side (recording
the body, the one job, the version's write) is :mod:`spark_differential.incremental.loop_driver`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from spark_differential.core.collection import DIFF
from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.core.names import SRC
from spark_differential.core.settings import DEFAULT_LOOP_RECOMPUTE
from spark_differential.errors import IterationLimitExceeded
from spark_differential.incremental.inputs import TaskCheck
from spark_differential.incremental.manifest import NextFrontier
from spark_differential.incremental.store import Part, front_part, read_local
from spark_differential.intask import step as in_task  # read at call time (tests count its rows)
from spark_differential.intask.iteration import run_loop
from spark_differential.intask.program import Stateful
from spark_differential.intask.relation import Relation, leaves
from spark_differential.intask.sources import source_table, tag_name
from spark_differential.intask.step import relation_rows, run_concat, unconsolidated, user_named
from spark_differential.kernels import native
from spark_differential.kernels.common import NEW, D, conform, times
from spark_differential.trace.arrow import concat_tables, consolidated

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

IT = "_sd_it"  # the iteration a stored trace row entered its step at

log = logging.getLogger("spark_differential.incremental")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One stored trace of a loop, by ``kind``:

    * ``"input"``: input ``input`` of ``program.steps[step]`` by iteration (its columns: kernel
      names, time leaves, ``_d``, :data:`IT`);
    * ``"held"``: the step's output changes held back at times not complete yet (``input`` is
      then the step's number of inputs; the columns: the body's names, time leaves, ``diff``,
      :data:`IT`);
    * ``"source"``: the accumulated value of the loop's source ``input`` (``step`` -1; the
      source's columns: data, time leaves, ``diff``), what a recomputation starts from;
    * ``"point"``: the loop's fixed point (``step`` and ``input`` -1; ``program.roots``' columns),
      which a recomputation's answer is compared with."""

    step: int
    input: int
    schema: Any  # pa.Schema
    kind: str = "input"

    @property
    def held(self) -> bool:
        return self.kind == "held"

    @property
    def by_iteration(self) -> bool:
        """Whether the trace holds rows by iteration (:data:`IT`): an input's, or a held-back output's."""
        return self.kind in ("input", "held")


def specs(program: Any, sources: Sequence[Any] | None = None) -> list[Spec]:
    """The stored traces of a recorded loop, in order: every input of every stateful step and,
    over a partially ordered time (width above 1), the step's held-back output (:class:`_Held`;
    over a total order no output is ever held back, so none is stored).  With ``sources`` (the
    Arrow schemas of the loop's sources) and a totally ordered time, then each source's
    accumulated value and the fixed point, with which an update may recompute the loop instead
    of resuming it (:func:`loop_update`)."""

    out = []
    for s, step in enumerate(program.steps):
        if isinstance(step, Stateful):
            for k, inp in enumerate(step.inputs):
                fields = [f for f in inp.schema if f.name != NEW]
                out.append(Spec(s, k, pa.schema([*fields, pa.field(IT, pa.int64(), False)])))
            if program.width > 1:
                named = user_named(step, step.out_schema.empty_table()).schema
                out.append(Spec(s, len(step.inputs), pa.schema([*named, pa.field(IT, pa.int64(), False)]), "held"))
    if sources is not None and program.width == 1:
        out += [Spec(-1, j, schema, "source") for j, schema in enumerate(sources)]
        out.append(Spec(-1, -1, program.roots, "point"))
    return out


# ---------------------------------------------------------------------------------
# the task (plain functions over Arrow tables)


def _negated(table: pa.Table, diff: str) -> pa.Table:
    i = table.schema.get_field_index(diff)
    return table.set_column(i, table.schema.field(i), pc.negate(table.column(i)))  # (the field as it was)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Whether two consolidated collections (same columns) hold the same updates."""
    if a.num_rows != b.num_rows:
        return False
    if a.num_rows == 0:
        return True
    order = [(c, "ascending") for c in a.column_names]
    return a.sort_by(order).equals(b.sort_by(order))


def _by_iteration(table: pa.Table) -> dict[int, pa.Table]:
    """A stored trace's rows by iteration (without the :data:`IT` column)."""
    if table.num_rows == 0:
        return {}
    its = table.column(IT).to_numpy(zero_copy_only=False)
    rest = table.drop_columns([IT])
    return {int(i): rest.filter(pa.array(its == i)) for i in np.unique(its)}


def _early(table: pa.Table, ttype: TimeType, frontier: Sequence[Leaves], width: int) -> Any:
    """Which rows of a loop source (time leaves ``leaves(width)``) are at times in the future of
    ``frontier`` (a numpy mask)."""

    mask = np.zeros(table.num_rows, dtype=bool)
    if table.num_rows and frontier:
        t = np.column_stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in leaves(width)])
        for f in frontier:
            mask |= ttype.np_leq(np.asarray(f, dtype=np.int64)[None, :], t)
    return mask


def loop_update(program: Any, sources: Sequence[pa.Table], state: Sequence[pa.Table], ttype: TimeType,
                frontier: Sequence[Leaves], kept: bool = False, recompute: int = DEFAULT_LOOP_RECOMPUTE
                ) -> tuple[pa.Table, list[pa.Table], list[pa.Table]]:
    """One update of a loop kept in a view (the module docstring): ``sources`` are the changes of
    the roots (first) and of the outer collections, ``state`` the stored traces (one table per
    :func:`specs` entry; with ``kept``, :func:`specs` of the sources' schemas: the sources'
    accumulated values and the fixed point too), ``frontier`` the view's new frontier.  Returns
    the change of the loop's fixed point (``program.roots``' columns, consolidated), the new
    state, advanced to ``frontier`` and consolidated, and the changes of each source held back
    (see below).

    With ``kept``, an update whose changes are large against the loop's inputs (the stored
    inputs hold at most ``recompute`` times the changes' rows; ``0``: never) **recomputes** the
    loop: semi-naively (:func:`_first`) over the new inputs, the stored ones plus the changes,
    its change the new fixed point minus the stored one.  The answer and the state are those
    of resuming it (:func:`_resumed`): both are the loop's per-iteration inputs over the new
    inputs, advanced to ``frontier`` and consolidated, and over a total order two consolidated
    collections at times in the future of the old frontier that agree at every such time are
    equal; only the work differs (the new inputs' size against iterations x the changes).

    Changes at times in the future of ``frontier`` are **held back**: they are returned, not fed
    to the loop, and the caller passes them again with the next update's changes.  They cannot
    change the loop's output at times the update returns (an input at time ``t`` changes the
    output at times in the future of ``t`` only), and until their time is complete the loop
    would see a collection no one-shot run sees (a retraction delivered before its insertion:
    a negative edge, over which a loop such as reachability need not reach a fixed point)."""

    steps = [unconsolidated(s) for s in program.steps]
    held = []
    due = []
    for src in sources:
        mask = _early(src, ttype, frontier, program.width)
        held.append(src.filter(pa.array(mask)))
        due.append(src.filter(pa.array(~mask)) if mask.any() else src)
    spec_list = specs(program, [src.schema for src in sources] if kept else None)
    tables = {(sp.step, sp.input): conform(t, sp.schema) for sp, t in zip(spec_list, state) if sp.by_iteration}
    values = {sp.input: conform(t, sp.schema) for sp, t in zip(spec_list, state) if sp.kind == "source"}
    point = next((conform(t, sp.schema) for sp, t in zip(spec_list, state) if sp.kind == "point"), None)
    stored = {(sp.step, sp.input): _by_iteration(tables[(sp.step, sp.input)]) for sp in spec_list if sp.held}
    # the old loop's last iteration
    last = max((pc.max(t.column(IT)).as_py() for t in tables.values() if t.num_rows), default=-1)
    # the new state's rows, for every input of every stateful step (and its held-back output)
    pieces: dict[tuple[int, int], list[pa.Table]] = {(sp.step, sp.input): [] for sp in spec_list if sp.by_iteration}
    holding = _Held(ttype, frontier, program.width, {sp.step: (sp.step, sp.input) for sp in spec_list if sp.held},
                    stored, pieces)
    if last == -1:
        dv = _first(program, steps, due, pieces, holding)
    elif point is not None and recomputed(stored_rows := sum(t.num_rows for t in values.values()),
                                          changed := sum(t.num_rows for t in due), recompute):
        log.debug("a loop's update recomputes it: %d stored input rows, %d changed", stored_rows, changed)
        whole = [concat_tables([values[j], d], d.schema) for j, d in enumerate(due)]
        fixed = _first(program, steps, whole, pieces, holding)
        cols = [*program.data, *leaves(program.width), DIFF]
        dv = conform(consolidated(concat_tables([fixed, _negated(point, DIFF)], program.roots), cols[:-1]),
                     program.roots)
    else:
        dv = _resumed(program, steps, due, {sp_key: t for sp_key, t in tables.items() if sp_key not in stored}, last,
                      pieces, holding)
    new_state = []
    for sp in spec_list:
        if sp.kind == "source":
            table = concat_tables([values[sp.input], due[sp.input]], sp.schema)
        elif sp.kind == "point":
            table = dv if point is None else concat_tables([point, dv], sp.schema)
        else:
            parts = pieces[(sp.step, sp.input)]
            table = pa.concat_tables([conform(p, sp.schema) for p in parts]) if parts else sp.schema.empty_table()
        diff, leaf_cols = (D, times(program.width)) if sp.kind == "input" else (DIFF, leaves(program.width))
        new_state.append(conform(consolidated(table, [c for c in table.column_names if c != diff], diff, ttype,
                                              frontier, leaf_cols), sp.schema))
    return dv, new_state, held


def recomputed(stored: int, changes: int, recompute: int) -> bool:
    """Whether an update recomputes its loop (:func:`loop_update`): the loop's stored inputs hold
    ``stored`` rows, the update changes them by ``changes`` rows, at most ``recompute`` times as
    many (``0``: never; an update without changes resumes, which costs its stored iterations only).

    >>> recomputed(2_000, 2_000, 10), recomputed(200_000, 2_000, 10), recomputed(2_000, 2_000, 0)
    (True, False, False)
    """
    return changes > 0 and recompute > 0 and stored <= recompute * changes


class _Held:
    """The output changes of a loop's stateful steps at times **not complete yet** (in the future
    of the view's new frontier), held back: the rest of the body never sees them in this update.

    Why.  Over a partial order the lub of two complete times can be incomplete (with the
    frontier ``{(1, 1)}``, ``(1, 0)`` and ``(0, 1)`` are complete, their lub is not), and a
    kernel computes at the lubs of its input's times.  There the input accumulates only the
    changes delivered so far, which need not be a physical collection (an edge retracted at
    ``(1, 0)`` and at ``(0, 1)`` and inserted again at ``(1, 1)``, that insertion not yet
    delivered, has multiplicity -1 at ``(1, 1)``), and a loop fed such a collection need not
    reach a fixed point.  Differential dataflow computes only at complete times, holding
    pending times per key until the frontier passes them; this is that rule, per step and
    iteration: a step's output change goes on only at complete times, and the rest is stored
    with the loop's traces (``P_i``, the step's held-back output at iteration ``i``, as
    per-iteration changes) and released by the update whose frontier completes its times.

    Why it is exact.  Write ``Y_i`` for a step's output at iteration ``i`` as its kernel computes
    it from the inputs the body passed on (complete times only), ``C`` for keeping the changes
    at times complete at the new frontier and ``C0`` at the old one (``C0`` keeps a subset of
    what ``C`` keeps: frontiers only advance).  The body went on with ``C0[Y_i]`` and holds
    ``P_i = Y_i - C0[Y_i]``.  An update changes ``Y_i`` by ``out`` (``F(O_i + D_i) - F(O_i)``);
    the body must now go on with ``C[Y_i + out]``, so its change is ``C[Y_i + out] - C0[Y_i] =
    C[out + P_i]`` (``C[C0[Y]] = C0[Y]``), and the new held-back output is ``(out + P_i) -
    C[out + P_i]``.  Every input of every step thus accumulates to its true value at every
    complete time (a complete time's lower times are all complete), the only times the body
    computes on, so every collection it sees there is physical.  Over a total order the lub of
    complete times is complete: nothing is ever held back."""

    def __init__(self, ttype: TimeType, frontier: Sequence[Leaves], width: int, keys: dict[int, tuple[int, int]],
                 stored: dict[tuple[int, int], dict[int, pa.Table]], pieces: dict[tuple[int, int], list[pa.Table]]
                 ) -> None:
        self.ttype, self.frontier, self.width = ttype, frontier, width
        self.keys, self.stored, self.pieces = keys, stored, pieces
        self.old: dict[int, pa.Table] = {}  # P_i, the held-back output stored, at the current iteration
        self.prev: dict[int, pa.Table] = {}  # the new held-back output at the last iteration

    def _split(self, table: pa.Table) -> tuple[pa.Table, pa.Table]:
        """``table``'s rows at complete times and the others."""
        mask = _early(table, self.ttype, self.frontier, self.width)
        if not mask.any():
            return table, table.slice(0, 0)
        return table.filter(pa.array(~mask)), table.filter(pa.array(mask))

    def first(self, s: int, i: int, out: pa.Table) -> pa.Table:
        """For a first update, run semi-naively: ``out`` is ``Y_i - Y_{i-1}`` (the step's change
        from the last iteration), whose rows at incomplete times are ``P_i - P_{i-1}``, the stored
        per-iteration change itself."""
        key = self.keys.get(s)
        if key is None:
            return out
        done, held = self._split(out)
        if held.num_rows:
            self.pieces[key].append(_piece(held, i))
        return done

    def resumed(self, s: int, i: int, out: pa.Table) -> pa.Table:
        """For an update against a stored state: ``out`` is the change of ``Y_i``; returns
        ``C[out + P_i]`` and stores the new ``P_i`` as the change from iteration ``i - 1``."""
        key = self.keys.get(s)
        if key is None:
            return out
        stored = self.stored[key].get(i)
        if stored is not None and stored.num_rows:
            stored = conform(stored, out.schema)
            self.old[s] = stored if s not in self.old else pa.concat_tables([self.old[s], stored])
        old = self.old.get(s)
        both = out if old is None else consolidated(pa.concat_tables([out, old]), out.column_names[:-1])
        done, held = self._split(both)
        prev = self.prev.get(s)
        if held.num_rows:
            self.pieces[key].append(_piece(held, i))
        if prev is not None and prev.num_rows:
            self.pieces[key].append(_piece(prev, i, negate=True, diff=DIFF))
        self.prev[s] = held
        return done


def _piece(table: pa.Table, i: int, negate: bool = False, diff: str = D) -> pa.Table:
    """A step input's kernel rows (``_new`` dropped; or a step's held-back output, whose
    multiplicity is ``diff``) as rows of its stored trace at iteration ``i``."""

    rows = table.drop_columns([NEW]) if NEW in table.column_names else table
    rows = _negated(rows, diff) if negate else rows
    # (not nullable, as the stored trace's: a piece is then of its trace's schema, conformed at no cost)
    return rows.append_column(pa.field(IT, pa.int64(), False), pa.array(np.full(rows.num_rows, i, dtype=np.int64)))


def _first(program: Any, steps: Sequence[Any], sources: Sequence[pa.Table],
           pieces: dict[tuple[int, int], list[pa.Table]], holding: _Held) -> pa.Table:
    """A loop's update over an empty stored state (a view's first update), **semi-naively**: the
    in-task loop (:func:`spark_differential.intask.iteration.run_loop`, no time chunks) over the changes,
    each iteration feeding its steps only the loop variable's change, and the new updates every
    stateful step input receives at iteration ``i`` kept as the new state's ``B'_i`` (in
    ``pieces``).  Returns the loop's fixed point over the changes (the change of the old one,
    which was empty), consolidated.

    Why those updates are the state :func:`_resumed` would write: with ``O = 0`` its ``D_i`` is
    the step input's whole value at iteration ``i``, ``rel(v_i)`` for an input over the loop's
    relation ``rel`` (``v_i`` the loop variable: ``v_0`` the roots, ``v_{i+1} = body(v_i)``) plus
    the outer collection ``c`` where the input reads one, and ``B'_i = D_i - D_{i-1}``.  The steps
    between ``dd_*`` calls are linear, so ``B'_i = rel(v_i - v_{i-1})`` for ``i >= 1`` (``c - c``
    cancels) and ``B'_0 = rel(v_0) + c``: exactly the semi-naive input of iteration ``i`` (the
    loop variable's change ``v_i - v_{i-1}`` as new updates, an outer collection entering at
    iteration 0 only).  Both loops stop at the first ``i`` with ``v_{i+1} = v_i`` (an empty
    change) and count ``max_iterations`` alike, so the stored iterations, the returned fixed
    point and :class:`~spark_differential.errors.IterationLimitExceeded` are the same (the state
    equal once consolidated); only the work differs: the sum over the iterations of the loop
    variable's changes instead of its whole values (iterations x state)."""

    def record(s: int, k: int, i: int, rows: pa.Table) -> None:
        pieces[(s, k)].append(_piece(rows, i))

    result, history = run_loop(program, steps, sources, record, hold=holding.first)
    if history[-1]:  # max_iterations stopped the loop
        raise IterationLimitExceeded.of(program.max_iterations, len(history), history[-1])
    return conform(consolidated(result, program.roots.names[:-1]), program.roots)


class _Stored:
    """One step input's stored rows of every iteration (its trace's kernel columns and
    :data:`IT`), sorted by key once an update (where the key columns allow,
    :meth:`~spark_differential.kernels.native.KeySorted.by_key`): the rows of ``O_i``, the
    input's accumulated value at iteration ``i``, whose keys some new rows have, are found by
    binary search and kept where their iteration is at most ``i``."""

    def __init__(self, rows: pa.Table, key: tuple[str, ...], schema: pa.Schema) -> None:
        self.key, self.schema = key, schema
        self.sorted = native.KeySorted.by_key(rows, key)
        self.rows = rows if self.sorted is None else self.sorted.table
        # the rows as :meth:`touching` returns them (no IT, ``_new`` false, the kernel's schema), made
        # once: a call then gathers the rows it keeps, by their iterations ``its``
        self.its = self.rows.column(IT).to_numpy(zero_copy_only=False)
        self.last = int(self.its.max()) if self.rows.num_rows else -1
        self.kernel_rows = self._kernel_form(self.rows)

    def _kernel_form(self, rows: pa.Table) -> pa.Table:
        """Stored rows as a step's kernel reads them: :data:`IT` dropped, ``_new`` false, the input's schema."""
        return conform(rows.drop_columns([IT]).append_column(NEW, pa.array(np.zeros(rows.num_rows, dtype=bool))),
                       self.schema)

    @staticmethod
    def keys(new: Sequence[pa.Table], key: tuple[str, ...]) -> tuple[Callable[[], pa.Table], list[Any] | None]:
        """The keys of the rows ``new`` (of a step whose inputs all have the key columns ``key``),
        as a function making their table (called only where :meth:`touching` needs it), and the
        distinct ones as :func:`~spark_differential.kernels.native.distinct_keys` gives them
        (``None``: not integers, or no key), for :meth:`touching` of every input of the step."""

        def table() -> pa.Table:
            return pa.concat_tables([t.select(list(key)) for t in new])

        if not key:
            return table, None
        return table, native.distinct_keys_of([[t.column(c) for c in key] for t in new])

    def touching(self, keys: Callable[[], pa.Table], distinct: list[Any] | None, i: int) -> pa.Table:
        """The rows of ``O_i`` (``_new`` false, the kernel's columns) of the keys ``keys()`` (every row:
        no key; ``distinct``: as :meth:`keys` gives them); keys of integers are looked up by binary
        search and the rows gathered from :attr:`kernel_rows`, made once."""
        if self.rows.num_rows == 0:
            return self.schema.empty_table()
        if not self.key:  # one key, the empty one: the new rows (a step is run on some) touch every stored row
            return self.kernel_rows if self.last <= i else self.kernel_rows.take(pa.array(np.flatnonzero(self.its <= i)))
        if self.sorted is None or distinct is None:
            table = keys()
            if table.num_rows == 0:
                return self.schema.empty_table()
            rows = native.touching(self.rows, table, self.key)
            its = rows.column(IT).to_numpy(zero_copy_only=False)
            if rows.num_rows and its.max() > i:
                rows = rows.filter(pa.array(its <= i))
            return self._kernel_form(rows)
        at = self.sorted.touching_rows(distinct)
        if self.last > i and len(at):
            at = at[self.its[at] <= i]
        return self.kernel_rows.take(pa.array(at))


def _resumed(program: Any, steps: Sequence[Any], sources: Sequence[pa.Table], stored: dict[tuple[int, int], pa.Table],
             last: int, pieces: dict[tuple[int, int], list[pa.Table]], holding: _Held) -> pa.Table:
    """A loop's update against a stored state (``stored``: each step input's rows, :data:`IT`
    their iteration; ``last`` the last iteration), as the module docstring says: each iteration's
    steps over the accumulated changes ``D_i`` and the stored rows of the keys they touch, the new
    state's rows put in ``pieces`` (every stored row among them: every stored iteration is run).
    Returns the change of the loop's fixed point."""

    width = program.width
    cols = [*program.data, *leaves(width), DIFF]
    traces: dict[tuple[int, int], _Stored] = {}
    outer: dict[tuple[int, int], pa.Table] = {}  # an outer collection's change, entering at every iteration
    for s, step in enumerate(steps):
        if isinstance(step, Stateful):
            for k, inp in enumerate(step.inputs):
                traces[(s, k)] = _Stored(stored[(s, k)], step.key_cols, inp.schema)
                if stored[(s, k)].num_rows:
                    pieces[(s, k)].append(stored[(s, k)])
                if inp.relation is None:
                    outer[(s, k)] = in_task.kernel_input(sources[inp.source], inp, True, width)  # type: ignore[index]
    before: dict[tuple[int, int], pa.Table | None] = dict.fromkeys(traces)  # D_{i-1}
    dv = conform(consolidated(conform(sources[0], program.roots), cols[:-1]), program.roots)
    i = 0
    while True:
        tables = {"v": dv}
        for s, step in enumerate(steps):
            if not isinstance(step, Stateful):
                tables[step.name] = run_concat(step, tables, sources, 0)  # outer parts: at every iteration
                continue
            news = []
            for k, inp in enumerate(step.inputs):
                if inp.relation is None:  # D_i = D_{i-1} past iteration 0: B'_i = B_i
                    new = outer[(s, k)]
                    news.append(new)
                    if i == 0 and new.num_rows:
                        pieces[(s, k)].append(_piece(new, i))
                    continue
                new = in_task.kernel_input(relation_rows(inp.relation, tables), inp, True, width)
                news.append(new)
                if new.num_rows:
                    pieces[(s, k)].append(_piece(new, i))
                prev = before[(s, k)]
                if prev is not None and prev.num_rows:
                    pieces[(s, k)].append(_piece(prev, i, negate=True))
                before[(s, k)] = new
            present = [n for n in news if n.num_rows]
            if not present:
                out = step.out_schema.empty_table()
            else:
                keys, distinct = _Stored.keys(present, step.key_cols)
                sides = [concat_tables([traces[(s, k)].touching(keys, distinct, i), new], inp.schema)
                         for k, (inp, new) in enumerate(zip(step.inputs, news))]
                out = conform(step.kernel(step.params, *sides), step.out_schema)
            tables[step.name] = holding.resumed(s, i, user_named(step, out))
        nxt = conform(consolidated(relation_rows(program.output, tables).rename_columns(cols), cols[:-1]), program.roots)
        if i + 1 > last and _same(nxt, dv):
            break
        i += 1
        if program.max_iterations is not None and i >= program.max_iterations:
            raise IterationLimitExceeded.of(program.max_iterations, i, nxt.num_rows)
        dv = nxt
    return dv


def version_output(out: pa.Table, pending: pa.Table, ttype: TimeType, frontier: Sequence[Leaves],
                   width: int) -> tuple[pa.Table, pa.Table]:
    """What a view's update whose query is one loop returns and holds back, from the loop's
    change ``out`` and the output held back by earlier updates (``pending``, the same
    columns): together consolidated, then split into the rows at times not in the future of
    ``frontier`` (returned) and those in it (held back), as the traced strategy's last write
    splits a query's output (:func:`spark_differential.incremental.traced.write`)."""

    both = consolidated(concat_tables([out, pending], out.schema), out.column_names[:-1])
    mask = _early(both, ttype, frontier, width)
    return both.filter(pa.array(~mask)), both.filter(pa.array(mask))


def task(program: Any, ttype: TimeType, frontier: Sequence[Leaves] | NextFrontier, out_tag: str, tags: Sequence[str],
         held_tags: Sequence[str], final: bool = False, local: Local | None = None,
         checks: Sequence[Check] = (), inputs: Sequence[int] = (), derived: Derived | None = None,
         kept: bool = False, recompute: int = DEFAULT_LOOP_RECOMPUTE) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Part]]:
    """The task's function of a loop's update (:meth:`~spark_differential.incremental.store.Store.write_task`):
    read the sources' changes (``SRC`` ``0 ..
    n-1``: the update's and those held back before) and the stored traces (``n ..``), run
    :func:`loop_update`, and yield the loop's change (kind ``out_tag``), the new traces (kinds
    ``tags``) and the changes held back (kinds ``held_tags``, one per source).

    ``final``: the loop's change is the view's output; the task also reads the output held
    back by earlier updates (``SRC`` after the traces) and yields what the update returns and
    holds back (kinds ``o`` and ``p``: :func:`version_output`) in place of ``out_tag``.

    ``local``: the task reads the stored traces and the changes held back from this machine's
    files itself (the table then holds the sources' changes, the output held back and a
    row of ``SRC`` ``-1``, so the task runs when nothing is new).

    ``checks``: rows of the table the task checks first, in order (:data:`Check`); ``frontier`` a
    :class:`~spark_differential.incremental.manifest.NextFrontier`: found from the largest time of
    the rows of the checks with ``inputs`` (the view's inputs as they came), and sent back as a
    :func:`~spark_differential.incremental.store.front_part`.

    ``derived`` (with ``local``): the sources are not in the table; the task computes them from
    the rows of the view's inputs its checks read (:class:`Derived`).

    ``kept``, ``recompute``: the loop keeps its sources' accumulated values and its fixed point,
    and may recompute itself from them (:func:`loop_update`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[Part]:
        seen = list(batches)
        table = pa.Table.from_batches(seen) if seen else None
        if table is None:
            return
        src = table.column(SRC)
        given = []  # the view's inputs' rows
        tables = {} if derived is None else {t: schema.empty_table() for t, schema in derived.inputs}
        for j, cols, check in checks:
            rows = source_table(table.filter(pc.equal(src, j)), j, cols)
            check(rows, leaves(program.width), DIFF)
            if j in inputs:
                given.append(rows)
            if derived is not None and j in derived.tables:
                tables[derived.tables[j]] = conform(rows, tables[derived.tables[j]].schema)
        front = frontier
        if isinstance(frontier, NextFrontier):
            front, sent = front_part(frontier, given, leaves(program.width)[0])
            yield sent
        n = len(program.sources)
        sources, state = [], []
        for j, c in enumerate(program.sources):
            if derived is not None:
                rows = derived.source(j, tables)
                derived.check(source_table(rows, j, c), leaves(program.width), DIFF)
            else:
                rows = table.filter(pc.equal(src, j))
            if local is not None:
                own = rows.select([tag_name(j, i) for i in range(len(c))])
                rows = concat_tables([own, read_local(local.held[j], held_tags[j], own.schema)],
                                     own.schema)
            sources.append(source_table(rows, j, c))
        spec_list = specs(program, [s.schema for s in sources] if kept else None)
        for k, sp in enumerate(spec_list):
            if local is not None:
                state.append(read_local(local.traces[k], tags[k], sp.schema))
                continue
            part = table.filter(pc.equal(src, n + k))
            state.append(pa.Table.from_arrays([part.column(tag_name(n + k, i)) for i in range(len(sp.schema))],
                                              names=sp.schema.names))
        out, new_state, held = loop_update(program, sources, state, ttype, front, kept, recompute)
        outputs = [(out_tag, out, None)]
        if final:
            j = n + len(spec_list)
            pending = out.schema.empty_table()
            if tag_name(j, 0) in table.column_names:  # (no output held back: no such columns)
                part = table.filter(pc.equal(src, j))
                pending = conform(pa.Table.from_arrays([part.column(tag_name(j, i)) for i in range(out.num_columns)],
                                                       names=out.column_names), out.schema)
            returned, later = version_output(out, pending, ttype, front, program.width)
            outputs = [("o", returned, "o"), ("p", later, "o")]
        for t, rows, prefix in [*outputs, *[(t, r, None) for t, r in [*zip(tags, new_state), *zip(held_tags, held)]]]:
            yield t, rows, prefix

    return run


# ---------------------------------------------------------------------------------
# what the task is told (made by the driver: spark_differential.incremental.loop_driver)


@dataclasses.dataclass(frozen=True)
class Derived:
    """A loop's sources computed by its task from the view's inputs (a query recorded once:
    :mod:`spark_differential.incremental.loop_query`): source ``j``'s rows are ``relations[j]``
    over the inputs' tables, each input's rows being those of the task's checks with the ``SRC``
    ``tables`` maps to its table (an input given no rows: an empty table of ``inputs``' schema);
    ``held[j]``: source ``j`` as the task's table would hold it (:func:`tag_name` columns), the
    schema of its held-back changes.  Every source is checked as a loop's sources are (a null
    time or diff: :class:`~spark_differential.errors.NullValueError`)."""

    relations: tuple[Relation, ...]
    tables: Mapping[int, str]
    inputs: tuple[tuple[str, Any], ...]  # (table, pa.Schema)
    held: tuple[Any, ...]  # pa.Schema
    check: TaskCheck = TaskCheck("dd_iterate")

    def source(self, j: int, tables: dict[str, pa.Table]) -> pa.Table:
        """Source ``j``'s rows (:func:`tag_name` columns) over the inputs' ``tables``."""
        rows = relation_rows(self.relations[j], tables)
        return conform(rows.rename_columns(self.held[j].names), self.held[j])


@dataclasses.dataclass(frozen=True)
class Local:
    """Where a loop's task reads its stored traces and held changes itself (:func:`task`):
    the directories of each trace (by spec) and of each source's held changes, on this
    machine.  Read from the Parquet files, with no Arrow copy
    (:mod:`~spark_differential.incremental.arrow_cache`): every update rewrites a loop's files
    whole, so each is read once, by the next update, and writing a copy cost the task more
    than mapping it saved (BFS view of 1,000 nodes: its task 9 ms faster without, of about 70)."""

    traces: Sequence[Sequence[str]]
    held: Sequence[Sequence[str]]


# rows of a loop task's table it checks (:func:`task`): their SRC, their columns (the time leaves and diff
# among them) and the checks (an input's rows as they came, or a source's tagged unchecked)
Check = tuple[int, Sequence[str], TaskCheck]


__all__ = ["Check", "Derived", "IT", "Local", "Spec", "loop_update", "recomputed", "specs", "task",
           "version_output"]
