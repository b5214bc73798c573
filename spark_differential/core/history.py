"""Which history-dependent operators a query used, for incremental views.

On ``(data, time, diff)``: most operators are functions of a collection's
accumulation at each time, so an incremental view may replace an input by its
compaction to a frontier (seed 004).  ``differentiate`` (and what is built on it:
``dd_delay``, ``dd_asof_join``) reads the *changes* themselves, so its output at
later times depends on when earlier updates happened; a view must keep such a
query's inputs uncompacted.  Those operators call :func:`note`; a view reads the
notes with :func:`collecting` while it calls its query.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_USED: ContextVar[set[str] | None] = ContextVar("spark_differential_history_ops", default=None)


def note(op: str) -> None:
    """Record that ``op``, an operator whose output depends on the input's history, was used."""
    used = _USED.get()
    if used is not None:
        used.add(op)


@contextmanager
def collecting() -> Iterator[set[str]]:
    """The set of history-dependent operators used inside the block."""
    used: set[str] = set()
    token = _USED.set(used)
    try:
        yield used
    finally:
        _USED.reset(token)
