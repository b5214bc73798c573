"""PySpark's daemon for the test sessions' Python workers, with what every kernel task imports
loaded before it forks them (``spark.python.daemon.module``, set by ``conftest.py`` and
``session_jobs.py``).

A Python worker ends when its task raises, and the next task forks a fresh one from the daemon.
Many tests make tasks fail on purpose (bad input, user functions that raise, every task of a
retry test failing its first attempt), and each fresh worker imported numpy, pyarrow, pandas,
DuckDB, numba and the library's kernels again: about a second of CPU on this project's
two-core machine.  Forked from this daemon, a worker finds them loaded.
"""

from __future__ import annotations

import duckdb  # noqa: F401
import numba  # noqa: F401
import numpy  # noqa: F401
import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pyarrow.compute  # noqa: F401
import pyarrow.parquet  # noqa: F401
import pyspark.worker  # noqa: F401
from pyspark.daemon import manager

import spark_differential.incremental.onetask  # noqa: F401
import spark_differential.intask.task  # noqa: F401
import spark_differential.kernels.extremum  # noqa: F401
import spark_differential.kernels.join  # noqa: F401
import spark_differential.kernels.order  # noqa: F401

if __name__ == "__main__":
    manager()
