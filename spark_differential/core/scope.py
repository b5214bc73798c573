"""Scopes: how collections with different time types meet in one operator.

On ``(data, time, diff)``: an operator combines collections over one time lattice.
Two wrappers of a time type ``T`` contain ``T`` and can be entered from it without
changing what a collection means:

* ``AltNeu(T)``: an ordinary update at ``t`` enters at ``alt(t)`` (seed 003).
* ``Loop(T)`` (inside a ``dd_iterate`` body; each loop has its own id): a collection from outside the loop
  enters at iteration 0 and, being unchanged by the loop, is the same at every
  iteration (seed 000, ``enter``).

:func:`unify` finds the richest time type among an operator's inputs, checks that
every other input can enter it, and says how.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_differential.core.collection import TIME, CollectionSchema
from spark_differential.core.lattice import ALTNEU_NEU, ALTNEU_TIME, LOOP_OUTER, AltNeu, Loop, TimeType
from spark_differential.errors import TimeTypeMismatchError


@dataclass(frozen=True)
class Entry:
    """How one input reaches the operator's time type.

    ``time_col`` gives the input's time in the operator's *kernel* time type (its
    time type without the loop coordinate); ``loop_id`` names the ``dd_iterate``
    loop the input varies with (``None`` for a collection from outside any loop).
    """

    time_col: Column
    loop_id: int | None

    @property
    def in_loop(self) -> bool:
        return self.loop_id is not None


def _contains(outer: TimeType, inner: TimeType) -> bool:
    while True:
        if outer == inner:
            return True
        if isinstance(outer, AltNeu):
            outer = outer.inner
        else:
            return False


def enter_column(col: Column, src: TimeType, dst: TimeType) -> Column:
    """Express a ``src`` time as a ``dst`` time (``dst`` contains ``src``)."""
    if src == dst:
        return col
    assert isinstance(dst, AltNeu)
    return F.struct(enter_column(col, src, dst.inner).alias(ALTNEU_TIME), F.lit(False).alias(ALTNEU_NEU))


def unify(op: str, schemas: Sequence[CollectionSchema], sides: Sequence[str] | None = None) -> tuple[TimeType, TimeType, list[Entry]]:
    """``(operator time type, kernel time type, entries)`` for the inputs' time types.

    Inside nested loops the operator belongs to the innermost loop among its inputs
    (loop ids grow with nesting); the others are outer or captured collections.
    """
    sides = list(sides or [f"input {i + 1}" for i in range(len(schemas))])
    split = []
    for s, side in zip(schemas, sides):
        t = s.ttype
        if isinstance(t, Loop):
            if isinstance(t.inner, Loop):  # pragma: no cover - never built
                raise TimeTypeMismatchError(f"{op}: the {side} has a doubly nested loop time")
            split.append((t.inner, t.loop_id))
        else:
            split.append((t, None))
    kernel = max((inner for inner, _ in split), key=lambda t: t.width)
    loop_ids = [lid for _, lid in split if lid is not None]
    target: TimeType = Loop(kernel, max(loop_ids)) if loop_ids else kernel
    entries = []
    for (inner, lid), s, side in zip(split, schemas, sides):
        if not _contains(kernel, inner):
            raise TimeTypeMismatchError(
                f"{op}: the {side} has time type {s.ttype.describe()} but the operator works over "
                f"{kernel.describe()}; both collections must use the same time type (cast the `time` "
                "column), except that ordinary collections enter differentiated (alt/neu) ones and "
                "dd_iterate bodies automatically"
            )
        col: Column = F.col(TIME)
        if lid is not None:
            col = col.getField(LOOP_OUTER)
        entries.append(Entry(time_col=enter_column(col, inner, kernel), loop_id=lid))
    return target, kernel, entries
