"""The seam every stateful call passes: one value, handed to the innermost handler.

On ``(data, time, diff)``: a stateful operator (a join, a reduction, a consolidation
kernel, ...) is one *kernel* over all the updates of its inputs in kernel form
(:mod:`spark_differential.engine.kernel_form`): its output accumulates, at every time,
to the operator applied to its inputs accumulated at that time.  The operator says
*what* to compute, once, as a :class:`StatefulCall`; *where and how* it runs is decided
here, by handlers, and the answer is the same rows whichever runs it:

====================  ======================================================  ===========================
handler               runs a call                                             pushed by
====================  ======================================================  ===========================
the distributed       as its own stage, the kernel per partition of its       always there (bottom)
executor              inputs placed by key bucket
small pipelines       inside one task, with the operators it is built on,     always there
                      when their sources are small local rows
a view's update       against the view's stored traces (changes in,           ``IncrementalView.update``
                      changes out)
a running loop        iteration by iteration, against the operator's traces   ``dd_iterate``
                      kept across iterations
the in-task recorder  not at all: it is recorded as a step of a program one   ``dd_iterate`` (before it
                      task will run                                           runs), a view's loop
====================  ======================================================  ===========================

The stack is one :class:`~contextvars.ContextVar`: the base handlers (built at the first call,
from what :mod:`spark_differential` gave :func:`provide`; bottom first) and, above them, those pushed with
:func:`handling` for the extent of what they own (a loop's body, a view's query).
:func:`execute` hands a call to the innermost handler; each either runs it or hands it
to the one below (``below(call)``), so a handler sees only calls the handlers above it
passed on (a recorder passes on what is not its loop's, a loop what is not in a loop).
Three kinds of call pass the seam: stateful calls (:func:`execute`), ``dd_concat``
(:func:`concat`, linear but aware of loops) and ``dd_iterate`` itself (:func:`iterate`).

To add an operator: build its :class:`StatefulCall` (a kernel over Arrow tables and
parameters describing its state, see :mod:`spark_differential.kernels.common`) and call
:func:`execute`; every handler runs it (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME, CollectionSchema
from spark_differential.core.lattice import TimeType
from spark_differential.core.scope import Entry
from spark_differential.engine.kernel_form import Input, time_fields
from spark_differential.kernels.common import StateShape, state_shape


@dataclass(frozen=True, eq=False)
class StatefulCall:
    """One call of a stateful operator: what to compute, independent of where it runs.

    ``kernel(params, *tables)`` is called with one Arrow table per input (kernel form,
    many keys per call) and returns the output's kernel columns: ``out_fields`` (internal
    names, Spark types), the time's leaves and ``_d``; ``out_columns`` names the output's
    columns for the user (internal name, user name), ``kernel_type`` is the time the
    kernel works over.  ``entries`` say how each input reaches that time (from inside a
    ``dd_iterate`` loop, or from outside it).  Compared by identity."""

    op: str
    kernel: Callable[..., Any]
    params: Any
    inputs: tuple[Input, ...]
    entries: tuple[Entry, ...]
    out_fields: tuple[T.StructField, ...]
    out_columns: tuple[tuple[str, str], ...]
    kernel_type: TimeType

    @staticmethod
    def of(op: str, kernel: Callable[..., Any], params: Any, inputs: Sequence[Input], entries: Sequence[Entry],
           out_fields: Sequence[T.StructField], out_columns: Sequence[tuple[str, str]],
           kernel_type: TimeType) -> StatefulCall:
        """A call from sequences (kept as tuples)."""
        return StatefulCall(op, kernel, params, tuple(inputs), tuple(entries), tuple(out_fields),
                            tuple(out_columns), kernel_type)

    @property
    def loop_id(self) -> int | None:
        """The innermost ``dd_iterate`` loop an input varies with (``None``: outside all loops)."""
        ids = [e.loop_id for e in self.entries if e.loop_id is not None]
        return max(ids) if ids else None

    @property
    def in_loop(self) -> bool:
        """Whether an input varies with a running ``dd_iterate`` loop."""
        return any(e.in_loop for e in self.entries)

    @property
    def shape(self) -> StateShape | None:
        """How the kernel keys its state (``None``: it has no form inside a task or a loop's
        in-task program; see :func:`spark_differential.kernels.common.state_shape`)."""
        return state_shape(self.params)

    def out_schema(self) -> T.StructType:
        """The kernel's output: ``out_fields``, the time's leaves, ``_d``."""
        return T.StructType([*self.out_fields, *time_fields(self.kernel_type)])

    def user_fields(self) -> list[T.StructField]:
        """The output collection's fields under the user's names: data, ``time``, ``diff``."""
        by_internal = {f.name: f for f in self.out_fields}
        return [*[T.StructField(user, by_internal[internal].dataType, True) for internal, user in self.out_columns],
                T.StructField(TIME, self.kernel_type.spark_type(), True), T.StructField(DIFF, T.LongType(), True)]


@dataclass(frozen=True, eq=False)
class ConcatCall:
    """One ``dd_concat``: the collections, their schemas and entries, and the operator's time."""

    op: str
    dfs: tuple[DataFrame, ...]
    schemas: tuple[CollectionSchema, ...]
    entries: tuple[Entry, ...]
    target: TimeType

    @property
    def in_loop(self) -> bool:
        return any(e.in_loop for e in self.entries)


@dataclass(frozen=True, eq=False)
class LoopCall:
    """One ``dd_iterate``: the roots, their schema, the body and the loop's options."""

    df: DataFrame
    cs: CollectionSchema
    body: Callable[[DataFrame], DataFrame]
    max_iterations: int | None
    progress: bool
    # a loop nested in another's body: the enclosing loop's store of the collections its body
    # captures from that loop (accumulated across the enclosing loop's iterations)
    captured: dict[tuple[int, int], DataFrame] | None = None


Below = Callable[[Any], DataFrame]


class Handler:
    """Something that runs calls; by default it hands every call to the handler below it."""

    #: whether what is built while this handler is on the stack never runs (a recorder's
    #: placeholders): linear steps then skip work only a running collection needs
    records: bool = False

    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        return below(call)

    def concat(self, call: ConcatCall, below: Below) -> DataFrame:
        return below(call)

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        return below(call)


_STACK: ContextVar[tuple[Handler, ...] | None] = ContextVar("spark_differential_handlers", default=None)
_BASE: tuple[Handler, ...] | None = None
_PROVIDER: Callable[[], tuple[Handler, ...]] | None = None
_BASE_LOCK = threading.Lock()


def provide(factory: Callable[[], tuple[Handler, ...]]) -> None:
    """Have ``factory`` build the base handlers (bottom first) when the first call needs
    them: :mod:`spark_differential` registers it on import, so the engine's modules load on
    first use."""
    global _BASE, _PROVIDER
    _BASE, _PROVIDER = None, factory


def _base() -> tuple[Handler, ...]:
    global _BASE
    if _BASE is None:
        with _BASE_LOCK:
            if _BASE is None:
                _BASE = _PROVIDER() if _PROVIDER is not None else ()
    return _BASE


def handlers() -> tuple[Handler, ...]:
    """The stack, bottom first: the base handlers, then those pushed."""
    pushed = _STACK.get()
    return _base() + (pushed or ())


@contextlib.contextmanager
def handling(handler: Handler) -> Iterator[Handler]:
    """Push ``handler`` for the block: calls made in it reach it first."""
    token = _STACK.set((_STACK.get() or ()) + (handler,))
    try:
        yield handler
    finally:
        _STACK.reset(token)


def recording() -> bool:
    """Whether a handler on the stack records what is built instead of running it."""
    return any(h.records for h in handlers())


def _dispatch(kind: str, call: Any, bottom: Below) -> DataFrame:
    chain = handlers()

    def at(i: int) -> Below:
        if i < 0:
            return bottom
        method = getattr(chain[i], kind)
        return lambda c: method(c, at(i - 1))

    return at(len(chain) - 1)(call)


def _unhandled(call: StatefulCall) -> DataFrame:
    raise RuntimeError(f"{call.op}: no handler ran this call (importing spark_differential provides its base handlers)")


def execute(call: StatefulCall) -> DataFrame:
    """Run a stateful call through the innermost handler."""
    return _dispatch("stateful", call, _unhandled)


def concat(call: ConcatCall, plain: Below) -> DataFrame:
    """``dd_concat`` through the handlers; ``plain`` (the union outside all loops) at the bottom."""
    return _dispatch("concat", call, plain)


def iterate(call: LoopCall, run: Below) -> DataFrame:
    """``dd_iterate`` through the handlers; ``run`` (the loop run on its own) at the bottom."""
    return _dispatch("iterate", call, run)
