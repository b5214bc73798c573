"""Test-only fault injection: make the library's kernels fail their first attempt.

On ``(data, time, diff)`` nothing changes: a kernel task that fails is retried by
Spark from its inputs, and the retry must produce exactly the rows a run without
failures produces (the tests in ``tests/test_sessions.py`` check it).  To provoke
such retries the tests set the internal, **test-only** runtime configuration::

    spark.conf.set("spark_differential.testing.failFirstAttempt", "true")

It is read on the driver when an operator builds its plan (one configuration
lookup per kernel stage) and travels inside the kernel's pickled closure, so it
reaches executors in other processes (``local-cluster``) and works on Spark
Connect; on the executor the kernel raises :class:`InjectedFault` when
``TaskContext.get().attemptNumber() == 0``.  Under a master that allows retries
(``local[2,3]``, or ``spark.task.maxFailures`` on a cluster) every kernel task then
fails once and succeeds on its second attempt.  It covers every kernel that runs
as a Spark stage (operators outside loops and the distributed ``dd_iterate``); a
loop run inside one task (``spark_differential.intask``) does not read it.
Not for production use: it only makes jobs slower and, without retries, fail.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

FAIL_FIRST_ATTEMPT = "spark_differential.testing.failFirstAttempt"


class InjectedFault(RuntimeError):
    """Raised on purpose by a kernel's first attempt (``spark_differential.testing.failFirstAttempt``)."""


def faults_on(spark: Any) -> bool:
    """Whether the test-only configuration asks kernels to fail attempt 0 of each task."""
    try:
        return str(spark.conf.get(FAIL_FIRST_ATTEMPT, "false")).strip().lower() == "true"
    except Exception:  # noqa: BLE001 - a session whose conf cannot be read: no fault
        return False


def fault_hook(spark: Any, kernel: Callable[..., Any], on: bool | None = None) -> Callable[..., Any]:
    """``kernel``, or (the test-only configuration set; ``on``: :func:`faults_on`, when the
    caller asked already) ``kernel`` failing attempt 0 of each task."""
    if on is None:
        on = faults_on(spark)
    return functools.partial(_fail_first_attempt, kernel) if on else kernel


def _fail_first_attempt(kernel: Callable[..., Any], params: Any, *tables: Any) -> Any:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber() == 0:
        raise InjectedFault(
            f"{FAIL_FIRST_ATTEMPT}: attempt 0 of task {ctx.partitionId()} (stage {ctx.stageId()}) fails on purpose"
        )
    return kernel(params, *tables)
