"""Scopes: how collections with different time types meet in one operator.

On ``(data, time, diff)``: an operator combines collections over one time lattice.
Two wrappers of a time type ``T`` contain ``T`` and can be entered from it without
changing what a collection means:

* ``AltNeu(T)``: an ordinary update at ``t`` enters at ``alt(t)`` (seed 003).
* ``Loop(T)`` (inside a ``dd_iterate`` body): a collection from outside the loop
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

from .collection import TIME, CollectionSchema
from .errors import TimeTypeMismatchError
from .lattice import ALTNEU_NEU, ALTNEU_TIME, LOOP_OUTER, AltNeu, Loop, TimeType


@dataclass(frozen=True)
class Entry:
    """How one input reaches the operator's time type.

    ``time_col`` gives the input's time in ``kernel_type`` (the operator's time type
    with ``Loop`` wrappers removed); ``in_loop`` says whether the input varies with
    the iteration (it is the loop variable or derived from it).
    """

    time_col: Column
    in_loop: bool


def _contains(outer: TimeType, inner: TimeType) -> bool:
    while True:
        if outer == inner:
            return True
        if isinstance(outer, (AltNeu, Loop)):
            outer = outer.inner
        else:
            return False


def _enter(col: Column, src: TimeType, dst: TimeType) -> Column:
    """Express a ``src`` time as a ``dst`` time (``dst`` contains ``src``, no Loop wrappers)."""
    if src == dst:
        return col
    assert isinstance(dst, AltNeu)
    return F.struct(_enter(col, src, dst.inner).alias(ALTNEU_TIME), F.lit(False).alias(ALTNEU_NEU))


def _strip(t: TimeType) -> tuple[TimeType, int]:
    depth = 0
    while isinstance(t, Loop):
        t, depth = t.inner, depth + 1
    return t, depth


def unify(op: str, schemas: Sequence[CollectionSchema], sides: Sequence[str] | None = None) -> tuple[TimeType, TimeType, list[Entry]]:
    """``(operator time type, kernel time type, entries)`` for the inputs' time types."""
    sides = list(sides or [f"input {i + 1}" for i in range(len(schemas))])
    types = [s.ttype for s in schemas]
    target = max(types, key=lambda t: (_strip(t)[1], t.width))
    kernel, depth = _strip(target)
    entries = []
    for t, side in zip(types, sides):
        inner, d = _strip(t)
        if d not in (0, depth) or not _contains(kernel, inner):
            raise TimeTypeMismatchError(
                f"{op}: the {side} has time type {t.describe()} but the operator works over "
                f"{target.describe()}; both collections must use the same time type (cast the `time` "
                "column), except that ordinary collections enter differentiated (alt/neu) ones and "
                "dd_iterate bodies automatically"
            )
        col: Column = F.col(TIME)
        for _ in range(d):
            col = col.getField(LOOP_OUTER)
        entries.append(Entry(time_col=_enter(col, inner, kernel), in_loop=d > 0))
    return target, kernel, entries
