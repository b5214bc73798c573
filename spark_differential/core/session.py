"""A SparkSession configured for differential dataflow.

Collections are plain DataFrames, so any SparkSession works; :func:`session` only
picks defaults that matter for this library: UTC session time (times are compared
as instants), Arrow on (kernels exchange Arrow batches), workers running this
interpreter (so they have pyarrow and duckdb), quiet logs and a shuffle width that
suits the machine.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import warnings
import weakref
from typing import Any

from spark_differential.core.registration import register_again
from spark_differential.errors import EnvironmentError_

log = logging.getLogger("spark_differential")


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentError_(
            "spark_differential needs a Java runtime to start a local Spark, and none was found "
            "(no JAVA_HOME and no `java` on PATH). Install Java 17 or 21 (for example "
            "`apt-get install openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise EnvironmentError_(f"spark_differential: `{java} -version` failed ({e}); install Java 17 or 21") from e


def default_conf(cores: int | None = None) -> dict[str, str]:
    """The configuration :func:`session` applies unless overridden."""
    n = cores or os.cpu_count() or 2
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": str(max(2, 2 * n)),
        # a core per partition of local data (spark.createDataFrame of a list): each such
        # partition is read through a Python worker, whatever its size
        "spark.default.parallelism": str(max(2, n)),
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        # Python workers talk to the JVM over a Unix domain socket where the platform has
        # them: over TCP a Python task (every kernel's mapInArrow) waited ~40 ms for its
        # first input batch (delayed ACK), more than a kernel's work on a small input
        "spark.python.unix.domain.socket.enabled": "true" if hasattr(socket, "AF_UNIX") else "false",
        "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
        "spark.driver.memory": os.environ.get("SD_DRIVER_MEMORY", "4g"),
    }


def session(master: str | None = None, remote: str | None = None, app_name: str = "spark_differential", **conf: Any) -> Any:
    """Return a SparkSession for the library (created if needed).

    Local (``local[*]``) unless a master or a Spark Connect remote is given, as an
    argument or through the usual ``SPARK_REMOTE`` / ``MASTER`` environment
    variables.  Extra keyword arguments are Spark configuration, with dots written
    as underscores allowed (``spark_sql_shuffle_partitions=8``) or given verbatim
    through ``conf={"spark.x": "y"}``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> spark.conf.get("spark.sql.session.timeZone")
    'UTC'
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    extra: dict[str, str] = {}
    nested = conf.pop("conf", None)
    if nested:
        extra.update({str(k): str(v) for k, v in dict(nested).items()})
    for k, v in conf.items():
        key = k if "." in k else k.replace("_", ".")
        extra[key] = str(v)
    remote = remote or os.environ.get("SPARK_REMOTE")
    from pyspark.sql import SparkSession

    if remote:
        return _connect_session(remote, app_name, extra)
    master = master or os.environ.get("MASTER") or "local[*]"
    active = SparkSession.getActiveSession()
    if active is not None and not extra:
        return active
    _check_java()
    cores = None
    if master.startswith("local["):
        inner = master[len("local[") : -1]
        cores = int(inner) if inner.isdigit() else None
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in {**default_conf(cores), **extra}.items():
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # pragma: no cover - depends on the machine
        if "JAVA_GATEWAY_EXITED" in str(e) or "Java gateway process exited" in str(e):
            raise EnvironmentError_(
                "spark_differential: the Java gateway did not start. Check that Java 17 or 21 is installed "
                f"and JAVA_HOME points to it. ({e})"
            ) from e
        raise
    spark.sparkContext.setLogLevel(os.environ.get("SD_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def _connect_session(remote: str, app_name: str, extra: dict[str, str]) -> Any:
    """A Spark Connect session.  ``remote="local[...]"`` starts a Connect server in this
    process (pyspark starts a classic SparkContext with the Connect plugin): it gets
    the whole :func:`default_conf`, since its static settings (driver memory, UI, the
    workers' interpreter) are decided now.  A remote ``sc://`` server keeps its own
    static configuration: only runtime SQL settings are sent."""
    from pyspark.sql import SparkSession

    local = remote.startswith("local")
    started = "SPARK_LOCAL_REMOTE" in os.environ  # pyspark's mark: this process already runs a local server
    if local and not started:
        _check_java()
        inner = remote[len("local[") : -1] if remote.startswith("local[") else ""
        conf = {**default_conf(int(inner) if inner.isdigit() else None), **extra}
    else:
        conf = {**_connect_safe(default_conf()), **extra}
    builder = SparkSession.builder.remote(remote).appName(app_name)
    for k, v in conf.items():
        builder = builder.config(k, v)
    try:
        with warnings.catch_warnings():
            if local and not started:
                # pyspark hands every option to the server it starts, then also tries to set
                # them on the Connect session and warns about each static one ("Failed to set")
                warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
            spark = builder.getOrCreate()
    except Exception as e:
        if "SESSION_ALREADY_EXIST" in str(e) or "SESSION_OR_CONTEXT_EXISTS" in str(e):
            raise EnvironmentError_(
                f"spark_differential: cannot start a local Spark Connect server (remote={remote!r}) in a "
                "process that already runs a classic SparkSession. Use one kind of session per process: "
                "stop the classic one first (spark.stop()), or run the Connect work in another process."
            ) from e
        raise
    register_again(connect=True)  # now that the Connect client is loaded: check its DataFrame class too
    release_at_exit(spark)
    if local and not started:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context  # the in-process server's context
        if sc is not None:
            sc.setLogLevel(os.environ.get("SD_SPARK_LOG_LEVEL", "ERROR"))
    return spark


_kept_lock = threading.Lock()


def kept(table: weakref.WeakKeyDictionary[Any, dict[Any, Any]], spark: Any, key: Any, make: Any,
         limit: int) -> Any:
    """``table``'s object for ``key`` in session ``spark`` (JVM objects that can be reused in
    that session, such as a parsed projection or a Python UDF), made by ``make()`` on first use;
    at most ``limit`` kept per session (all dropped when full)."""
    with _kept_lock:
        mine = table.setdefault(spark, {})
        found = mine.get(key)
    if found is None:
        found = make()
        with _kept_lock:
            if len(mine) >= limit:
                mine.clear()
            mine[key] = found
    return found


def is_connect(obj: Any) -> bool:
    """Whether a SparkSession or DataFrame is Spark Connect's (no JVM objects in this process)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


# Spark types whose Arrow form PySpark's ``createDataFrame`` passes on as it is (no time zone to
# apply, no nested field to check): :func:`local_frame` may send such a table itself
_PLAIN_TYPES = ("LongType", "IntegerType", "ShortType", "ByteType", "DoubleType", "FloatType", "BooleanType",
                "StringType", "BinaryType", "DecimalType", "DateType")


def local_frame(spark: Any, table: Any, schema: Any, arrow: Any) -> Any:
    """``spark.createDataFrame(table, schema)``: a DataFrame of the rows of the Arrow table ``table``
    (local rows: reading them runs no Spark job), ``arrow`` being the Arrow schema Spark uses for
    ``schema`` under the session's settings.

    On a classic session, when ``table`` already has ``arrow``'s types and ``schema`` only
    :data:`_PLAIN_TYPES`, the batches go to the JVM as PySpark's ``createDataFrame`` sends them,
    without its other py4j round trips (it reads eight settings, one round trip each, and
    builds the request's lists element by element): about 15 against 23-31 ms for a table of
    1,300 rows on two cores, what an incremental view's small update returns.  Otherwise (Spark
    Connect, time stamps, nested types) it is ``createDataFrame`` itself.

    >>> import pyarrow as pa, spark_differential as sd
    >>> from pyspark.sql import types as T
    >>> spark = sd.session()
    >>> schema = T.StructType([T.StructField("x", T.LongType()), T.StructField("y", T.StringType())])
    >>> arrow = pa.schema([pa.field("x", pa.int64()), pa.field("y", pa.string())])
    >>> local_frame(spark, pa.table({"x": [1, 2], "y": ["a", None]}, schema=arrow), schema, arrow).collect()
    [Row(x=1, y='a'), Row(x=2, y=None)]
    """
    jspark = getattr(spark, "_jsparkSession", None)
    if (jspark is None or [f.type for f in table.schema] != [f.type for f in arrow]
            or not all(type(f.dataType).__name__ in _PLAIN_TYPES for f in schema.fields)):
        return spark.createDataFrame(table, schema)
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    jvm = spark._jvm
    jiter = spark._sc._serialize_to_jvm(table.to_batches(), ArrowStreamSerializer(),
                                        lambda path: jvm.PythonSQLUtils.readArrowStreamFromFile(path),
                                        lambda: jvm.ArrowIteratorServer())
    df = DataFrame(jvm.PythonSQLUtils.toDataFrame(jiter, schema.json(), jspark), spark)
    df._schema = schema  # (as createDataFrame does: no round trip to ask for it)
    return df


def _connect_safe(conf: dict[str, str]) -> dict[str, str]:
    """Spark Connect refuses static configuration; keep only runtime SQL settings."""
    return {k: v for k, v in conf.items() if k.startswith("spark.sql.")}


_EXIT_LOCK = threading.Lock()
_EXIT_SESSIONS: weakref.WeakSet[Any] = weakref.WeakSet()
_EXIT_REGISTERED = False


def release_at_exit(obj: Any) -> None:
    """Make a Spark Connect session (or a DataFrame's session) safe to leave at exit.

    A checkpointed Connect DataFrame (``localCheckpoint``, which ``dd_iterate`` uses)
    releases its server-side copy in ``__del__`` with a gRPC call.  When that
    ``__del__`` runs during interpreter shutdown, gRPC can no longer start its thread
    and the process hangs for minutes after the script's last line (pyspark 4).  So
    at exit, while threads still work, this releases every unreachable such
    DataFrame (``gc.collect()``) and then closes the registered sessions' clients,
    which turns the remaining ``__del__`` calls into no-ops (the server drops what a
    closed session held).  Classic sessions are left alone; calling this again is
    free.
    """
    spark = getattr(obj, "sparkSession", obj)
    if not is_connect(spark):
        return
    global _EXIT_REGISTERED
    with _EXIT_LOCK:
        _EXIT_SESSIONS.add(spark)
        if not _EXIT_REGISTERED:
            atexit.register(_release_connect_sessions)
            _EXIT_REGISTERED = True


def _release_connect_sessions() -> None:
    gc.collect()
    for spark in list(_EXIT_SESSIONS):
        try:
            if not spark.client.is_closed:
                spark.client.close()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log.debug("closing a Spark Connect client at exit failed: %s", e)
