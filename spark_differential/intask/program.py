"""The program an in-task loop or pipeline runs: its steps, its sources, its output (picklable).

On ``(data, time, diff)``: a program is a recorded ``dd_iterate`` body (or a chain of
top-level operators): :class:`Stateful` steps (a kernel over the updates of its inputs,
each input a relation over earlier steps' outputs or an outer source), :class:`Concat`
steps, and the relation giving the body's result.  Every table the program reads or
writes is a collection in user names (data, the time's int64 leaves ``_sd_t*``, diff);
a stateful step's inputs are given to its kernel in kernel form.  Nothing here runs: the
recorder (:mod:`.record`) builds a program on the driver, :mod:`.iteration` runs it in a
task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_differential.core.faults import fault_hook, faults_on
from spark_differential.core.lazy import lazy
from spark_differential.intask.relation import Relation

np = lazy("numpy")
pa = lazy("pyarrow")


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
    drops: tuple[int | None, ...] = ()  # spread over tasks by slices of time: each slice's snapshot time
    threads: int = 1  # groups of time chunks run at once, each on a thread of the task
    thread_min_rows: int = 0  # fewer (chunked) input rows than this: one thread (the default's rule)
    local_rows: int = 0  # an answer of at most this many rows (and LOCAL_RESULT_BYTES) comes back with the task's report
    parts: int = 0  # run in this many key partitions, a task each, exchanging their changes (0: one task)
    input_schema: Any = None  # (key partitions) the task's input rows' pa.Schema: a task may receive none


def fault_hooked(spark: Any, steps: tuple[Stateful | Concat, ...]) -> tuple[Stateful | Concat, ...]:
    """``steps`` with every stateful step's kernel failing its task's first attempt where the
    test-only switch (:func:`spark_differential.core.faults.faults_on`) is set; else as they are."""
    if not faults_on(spark):
        return steps
    return tuple(dataclasses.replace(st, kernel=fault_hook(spark, st.kernel, on=True)) if isinstance(st, Stateful)
                 else st for st in steps)
