"""A SparkSession configured for differential dataflow.

Collections are plain DataFrames, so any SparkSession works; :func:`session` only
picks defaults that matter for this library: UTC session time (times are compared
as instants), Arrow on (kernels exchange Arrow batches), workers running this
interpreter (so they have pyarrow and duckdb), quiet logs and a shuffle width that
suits the machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

from .errors import EnvironmentError_

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
        "spark.default.parallelism": str(max(2, 2 * n)),
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
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
        builder = SparkSession.builder.remote(remote).appName(app_name)
        for k, v in {**_connect_safe(default_conf()), **extra}.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        return spark
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


def _connect_safe(conf: dict[str, str]) -> dict[str, str]:
    """Spark Connect refuses static configuration; keep only runtime SQL settings."""
    return {k: v for k, v in conf.items() if k.startswith("spark.sql.")}
