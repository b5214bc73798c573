"""Building query plans without PySpark's per-call origin tracking.

PySpark 4 (classic sessions) wraps every ``pyspark.sql.functions`` call and most
Column methods in ``_with_origin``: with ``spark.python.sql.dataFrameDebugging.enabled``
(the default) each call asks the JVM for the active session and a configuration
value, and sets and clears ``PySparkCurrentOrigin`` - about ten py4j round trips per
``F.col`` / ``F.lit`` / ``.cast``.  The library builds its plans out of hundreds of
such calls (``dd_count`` on one key: ~500 round trips, ``dd_join``: ~1,600), so
planning an operator cost 50-300 ms on a busy two-core machine before any Spark job
ran, as much as running a whole plain ``groupBy().count()`` on ten rows.

The call sites recorded for the library's own expressions point into
``spark_differential`` and help no user, so :func:`no_origin_tracking` switches the
tracking off while a ``dd_*`` method builds its plan and restores the previous
state afterwards.  It flips PySpark's cached flag (``pyspark.errors.utils.
_enable_debugging_cache``), a process-wide setting: DataFrame code running at the
same moment on other threads of the driver records no call sites either.  With a
PySpark that has no such flag it does nothing.  Spark Connect is unaffected (there
the tracking costs no round trip).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_LOCK = threading.RLock()
_DEPTH = 0
_SAVED: object = None


@contextlib.contextmanager
def no_origin_tracking() -> Iterator[None]:
    """Within the block, PySpark records no call-site origin for DataFrame functions."""
    global _DEPTH, _SAVED
    try:
        from pyspark.errors import utils as perr
    except Exception:  # pragma: no cover - pyspark without the module
        yield
        return
    if not hasattr(perr, "_enable_debugging_cache"):  # pragma: no cover - other PySpark versions
        yield
        return
    with _LOCK:
        if _DEPTH == 0:
            _SAVED = perr._enable_debugging_cache
            perr._enable_debugging_cache = False
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                perr._enable_debugging_cache = _SAVED


def without_origin_tracking(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`no_origin_tracking` (for public functions that build plans)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with no_origin_tracking():
            return fn(*args, **kwargs)

    return wrapper
