"""Every setting of the library, in one place: its key, its default and how it is read.

Not about ``(data, time, diff)`` directly: these settings choose *where* the same
computation runs (how many key buckets, which loops and pipelines run inside one task,
how a loop cuts time into chunks), never what it computes.  Each function reads one
setting of a session through :mod:`spark_differential.core.conf` (one request per call
on Spark Connect inside a :func:`~spark_differential.core.conf.snapshot`), checks it and
returns it parsed; a malformed value raises
:class:`~spark_differential.errors.ConfigurationError` naming the key and what it takes.

==========================================================  =====================================
key                                                         what it says (default)
==========================================================  =====================================
``spark_differential.iterate.localRows``                    input rows a loop may hold to run inside one task
                                                            (1,000,000; 2,500,000 on a local master; ``0``/``off``: never)
``spark_differential.iterate.partitionRows``                input rows one task of a loop in key partitions may hold
                                                            (3 x the default ``localRows``; ``0``/``off``: no key partitions)
``spark_differential.iterate.localThreads``                 threads a loop inside one task runs its groups
                                                            of time chunks on (the cores of ``local[N]``, at most 4; else 1)
``spark_differential.iterate.localSpread``                  a loop over ``localRows``: ``auto`` (slices of time, a task
                                                            each; a large state: key partitions), ``always`` (slices),
                                                            ``keys`` (key partitions) or ``off`` (on the cluster)
``spark_differential.iterate.chunkRows``                    updates per time chunk (``auto``; ``0``/``off``: never)
``spark_differential.pipeline.localRows``                   source rows of a small pipeline run inside one task
                                                            (100,000; ``0``: never)
``spark_differential.incremental.loopRecompute``           an incremental view's loop is recomputed from its inputs, not
                                                            resumed, where they hold at most this many times an update's
                                                            changes, in rows (10; ``0``/``off``: never)
``spark_differential.buckets_per_partition``                key buckets per shuffle partition (2)
==========================================================  =====================================

>>> import spark_differential as sd
>>> from spark_differential.core import settings
>>> spark = sd.session()
>>> settings.pipeline_rows(spark)
100000
"""

from __future__ import annotations

import os
import re
from typing import Any

from spark_differential.core import conf
from spark_differential.core.session import is_connect
from spark_differential.errors import ConfigurationError

LOCAL_ROWS = "spark_differential.iterate.localRows"
DEFAULT_ROWS = 1_000_000
# on a local master the task's Python worker shares the driver's machine, with no executor
# container whose memory limit it counts against: 10^6-change BFS (2,002,001 input rows) runs
# in one task at a peak of about 3.5 GB there
DEFAULT_ROWS_LOCAL = 2_500_000

PARTITION_ROWS = "spark_differential.iterate.partitionRows"
# a task of a loop in key partitions keeps the traces and the answer of its keys alone, not
# the whole loop's: seed 001's large graph, 12 M input rows in two key partitions, peaked at
# 3.4 GB per Python worker, where one task's 10^6-change BFS over the small graph peaks at
# 3.5 GB with 2 M rows (most of it the answer over a million distinct times)
PARTITION_FACTOR = 3

LOCAL_THREADS = "spark_differential.iterate.localThreads"
DEFAULT_THREADS = 1
# on a ``local[N]`` master the loop's one task leaves the other cores idle: 10^5-change BFS
# (distinct times) took 3.2-3.3 s with 2 threads against 4.5-5.2 s with one, on 2 cores
MAX_LOCAL_THREADS = 4
# below this many (chunked) input rows threads cost more than they save (10^4-change BFS, 22,001
# input rows: 1.02 s with 2 threads against 0.79 s with one)
THREAD_MIN_ROWS = 100_000

LOCAL_SPREAD = "spark_differential.iterate.localSpread"
CHUNK_ROWS = "spark_differential.iterate.chunkRows"

PIPELINE_ROWS = "spark_differential.pipeline.localRows"
# rows an incremental view's update may read to run inside one task (its stored traces, the changes)
INCREMENTAL_ROWS = "spark_differential.incremental.localRows"
# bytes of memory-mapped Arrow copies of a view's trace files a one-task update may keep on its machine
ARROW_CACHE_BYTES = "spark_differential.incremental.arrowCacheBytes"
DEFAULT_ARROW_CACHE_BYTES = 2 << 30
# trace files of at least this many rows are read by key through an index kept beside their Arrow copy
INDEX_ROWS = "spark_differential.incremental.indexRows"
# an is_in scan of 100,000 int64 keys takes about 2 ms, an index lookup about 1 ms plus its build, once
DEFAULT_INDEX_ROWS = 100_000
DEFAULT_PIPELINE_ROWS = 100_000
# an incremental view's loop is recomputed from its inputs (semi-naively, in its one task) where they hold
# at most this many times an update's changes (rows); else it is resumed, every stored iteration run over
# the accumulated changes.  Seed 001's BFS replayed both ways in one process (benchmarks/view_loop_first.py
# --both, sliding windows of 2,000 to 200,000 edges, docs/performance.md): recomputing cost 0.4-0.9x
# resuming's at changes of 0.1-1% of the edges where BFS reached few nodes, 1.1x at 1% on 2,000 edges,
# 1.3-8.5x less at 10%, 1.8-5.2x less at 100%, and 19x less for one update of 200,000 changes
LOOP_RECOMPUTE = "spark_differential.incremental.loopRecompute"
DEFAULT_LOOP_RECOMPUTE = 10

BUCKETS_PER_PARTITION = "spark_differential.buckets_per_partition"
DEFAULT_BUCKETS_PER_PARTITION = 2

_OFF = ("off", "false", "none", "")


def master(spark: Any) -> str:
    """The session's master URL (``""`` when unknown): the SparkContext's on a classic
    session, the server's ``spark.master`` setting on Spark Connect."""
    if is_connect(spark):
        try:
            return str(conf.get(spark, "spark.master", "") or "")
        except Exception:  # noqa: BLE001 - a server that does not say
            return ""
    try:
        return str(spark.sparkContext.master)
    except Exception:  # noqa: BLE001 - a session without a SparkContext
        return ""


def default_rows(spark: Any) -> int:
    """The default of ``localRows``: :data:`DEFAULT_ROWS`, or :data:`DEFAULT_ROWS_LOCAL` on a
    ``local``/``local-cluster`` master (executors on the driver's machine; on Spark Connect,
    the server's machine)."""
    return DEFAULT_ROWS_LOCAL if master(spark).startswith("local") else DEFAULT_ROWS


def local_rows(spark: Any) -> int:
    """Input rows a loop may have to run inside one task (``0``: never)."""
    return _rows(spark, LOCAL_ROWS, default_rows(spark))


def incremental_rows(spark: Any) -> int:
    """Rows an incremental view's update may read to run inside one task (its stored traces, the
    changes, the output held back; ``0``: never): by default as many as one task of a loop in key
    partitions holds, :data:`PARTITION_FACTOR` times the default of ``localRows`` (a view's task
    holds each row once, where a loop's holds its iterations' updates)."""
    return _rows(spark, INCREMENTAL_ROWS, PARTITION_FACTOR * default_rows(spark))


def arrow_cache_bytes(spark: Any) -> int:
    """Bytes of Arrow copies of an incremental view's trace files an update run inside one task
    may keep in its machine's temporary directory, mapped by later updates instead of decoding
    the Parquet files again (:mod:`spark_differential.incremental.arrow_cache`; ``0``: none)."""
    return _rows(spark, ARROW_CACHE_BYTES, DEFAULT_ARROW_CACHE_BYTES)


def index_rows(spark: Any) -> int:
    """Rows from which a trace file an update run inside one task reads is read by key, through
    an index of its rows by the hash of the key columns kept beside its Arrow copy
    (:meth:`spark_differential.incremental.arrow_cache.ArrowCache.index`); smaller files are
    scanned."""
    return _rows(spark, INDEX_ROWS, DEFAULT_INDEX_ROWS)


def partition_rows(spark: Any) -> int:
    """Input rows one task of a loop in key partitions may hold (``0``: no key partitions):
    by default :data:`PARTITION_FACTOR` times the default of ``localRows``, whatever
    ``localRows`` is set to (lowering ``localRows`` moves loops out of one task, not out
    of key partitions; lower this too where the executors are smaller)."""
    return _rows(spark, PARTITION_ROWS, PARTITION_FACTOR * default_rows(spark))


def _rows(spark: Any, key: str, default: int, what: str = "a number of rows (0 or 'off' to disable)") -> int:
    """The whole number ``key`` is set to (``0`` for ``off``), ``default`` when unset; else a
    :class:`~spark_differential.errors.ConfigurationError` saying it must be ``what``."""
    try:
        raw = str(conf.get(spark, key, str(default))).strip().lower()
    except Exception:  # noqa: BLE001 - a session without runtime conf
        return default
    if raw in _OFF:
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        raise ConfigurationError(f"{key} must be {what}; got {raw!r}") from None


def loop_recompute(spark: Any) -> int:
    """How many times an update's changed rows an incremental view's loop's stored inputs may hold
    for the update to recompute the loop rather than resume it (``0``: never)."""
    return _rows(spark, LOOP_RECOMPUTE, DEFAULT_LOOP_RECOMPUTE,
                 "a whole number of times an update's changes (0 or 'off' never recomputes a loop)")


def default_threads(spark: Any) -> int:
    """The default of ``localThreads``: the cores of a ``local[N]``/``local[*]`` master (at
    most :data:`MAX_LOCAL_THREADS`), else :data:`DEFAULT_THREADS` (on a cluster, or
    ``local-cluster``, other tasks may use the executor's other cores)."""
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master(spark).strip())
    if m is None:
        return DEFAULT_THREADS
    cores = (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    return max(1, min(cores, MAX_LOCAL_THREADS))


def local_threads(spark: Any) -> int:
    """Threads a loop inside one task may run its groups of time chunks on."""
    default = default_threads(spark)
    try:
        raw = str(conf.get(spark, LOCAL_THREADS, str(default))).strip()
    except Exception:  # noqa: BLE001 - a session without runtime conf
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{LOCAL_THREADS} must be a positive number of threads; got {raw!r}")
    return value


def thread_min_rows(spark: Any) -> int:
    """Rows below which a loop inside one task runs on one thread: :data:`THREAD_MIN_ROWS`
    under the default thread count, none when ``localThreads`` is set explicitly."""
    try:
        explicit = conf.get(spark, LOCAL_THREADS, None) is not None
    except Exception:  # noqa: BLE001 - a session without runtime conf
        explicit = False
    return 0 if explicit else THREAD_MIN_ROWS


def local_spread(spark: Any) -> str:
    """``localSpread``: ``auto`` (the default: a loop too large for one task runs in slices
    of time, one task each, where its time can be sliced, else in key partitions, a task
    each, exchanging their changes), ``always`` (in slices even when one task would do),
    ``keys`` (in key partitions even when one task would do) or ``off`` (too large for one
    task: the distributed loop)."""
    raw = str(conf.get(spark, LOCAL_SPREAD, "auto")).strip().lower()
    if raw not in ("auto", "off", "always", "keys"):
        raise ConfigurationError(f"{LOCAL_SPREAD} must be 'auto', 'always', 'keys' or 'off'; got {raw!r}")
    return raw


def parallelism(spark: Any) -> int:
    """How many tasks the session runs at once: the SparkContext's default parallelism on a
    classic session; from the master URL on Spark Connect (``local[N]``, ``local-cluster[N,C,M]``),
    else the shuffle partitions."""
    if not is_connect(spark):
        try:
            return max(1, int(spark.sparkContext.defaultParallelism))
        except Exception:  # noqa: BLE001 - a session without a SparkContext
            pass
    m = master(spark).strip()
    if (local := re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", m)) is not None:
        return (os.cpu_count() or 1) if local.group(1) == "*" else max(1, int(local.group(1)))
    if (cluster := re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", m)) is not None:
        return max(1, int(cluster.group(1)) * int(cluster.group(2)))
    return 1 if m == "local" else shuffle_partitions(spark)


def chunk_rows(spark: Any) -> int | None:
    """Updates per time chunk from ``chunkRows``: a number, ``auto`` (``None``) or
    ``0``/``off`` (never slice, returned as ``0``)."""
    try:
        raw = str(conf.get(spark, CHUNK_ROWS, "auto")).strip().lower()
    except Exception:  # noqa: BLE001 - a session without runtime conf
        raw = "auto"
    if raw in ("auto", ""):
        return None
    if raw in ("off", "false", "none", "0"):
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(
            f"{CHUNK_ROWS} must be a positive number of updates per chunk, 'auto' or 'off'; got {raw!r}"
        ) from None
    return max(0, value)


def pipeline_rows(spark: Any) -> int:
    """``pipeline.localRows``: at most this many source rows for a pipeline fused into one
    task (``0``: never fuse)."""
    raw = conf.get(spark, PIPELINE_ROWS, None)
    if raw is None:
        return DEFAULT_PIPELINE_ROWS
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(f"{PIPELINE_ROWS} must be a number of rows (0 disables fused pipelines); got {raw!r}")
    return value


def shuffle_partitions(spark: Any) -> int:
    """``spark.sql.shuffle.partitions``: how many partitions the key buckets are spread over."""
    try:
        return max(1, int(conf.get(spark, "spark.sql.shuffle.partitions")))
    except Exception:  # noqa: BLE001 - defensive
        return 8


def buckets(spark: Any) -> int:
    """How many key buckets a stateful operator spreads its input over: the shuffle
    partitions times ``buckets_per_partition``."""
    try:
        factor = int(conf.get(spark, BUCKETS_PER_PARTITION, str(DEFAULT_BUCKETS_PER_PARTITION)))
    except Exception:  # noqa: BLE001 - defensive
        factor = DEFAULT_BUCKETS_PER_PARTITION
    return max(1, shuffle_partitions(spark) * factor)


def large_var_types(spark: Any) -> bool:
    """Whether the session sends strings and binaries to Python as Arrow's large types."""
    try:
        return str(conf.get(spark, "spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    except Exception:  # noqa: BLE001
        return False


def ansi(spark: Any) -> bool:
    """``spark.sql.ansi.enabled`` (what a translated expression must do on overflow)."""
    return str(conf.get(spark, "spark.sql.ansi.enabled", "true")).lower() == "true"


def case_sensitive(spark: Any) -> bool:
    """``spark.sql.caseSensitive`` (how a Connect plan's column names resolve)."""
    return str(conf.get(spark, "spark.sql.caseSensitive", "false")).strip().lower() == "true"
