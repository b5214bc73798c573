"""Test fixtures: one SparkSession shared by the whole test session.

Classic by default.  With ``SD_TEST_SESSION=connect`` (the second pytest process
``./dev test`` starts) the ``spark`` fixture is a local Spark Connect session
(``sd.session(remote="local[2]")``: a Connect server in this process and a Connect
client talking to it) and only the tests marked ``connect`` are collected; the
others are deselected.  The two kinds cannot share a process: pyspark refuses to
start a local Connect server next to a classic SparkContext (``SESSION_ALREADY_EXIST``).
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from helpers import CONNECT  # noqa: E402

CONF = {
    "spark.sql.shuffle.partitions": "4",
    # the suite's queries are many and tiny: Spark's code generation (a Java class compiled per
    # new plan and expression) costs more than it saves there, so they run interpreted (same
    # rows).  Measured on two cores: test_incremental's successive-update and stage-2 count
    # tests 168 -> 144 s, test_jobs + test_top_k 106 -> 91 s; the separate processes of
    # test_sessions keep Spark's defaults
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.default.parallelism": "2",  # the library default on two cores (sd.session: one per core)
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.driver.memory": "2g",
    # the suite's JVM spends much of its CPU on collecting garbage: every query compiles
    # classes, and each growth of the metaspace past its threshold cost a full collection
    # (95 of them, 40 s, in one run), while G1's concurrent threads took another core's
    # share.  The throughput collector and a 512 MB first metaspace threshold: 223 s ->
    # 160 s on test_chunks + test_jobs + test_top_k (two cores)
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -XX:MetaspaceSize=512m",
}
# Every JVM of the suite (this session's, the separate processes' and their local-cluster
# executors, which inherit the variable) compiles with C1 only.  Test JVMs are short-lived and
# run many small queries: C2's compile threads took CPU the two cores were short of, for code
# that ran little.  Measured on two cores: this session's JVM on test_chunks + test_jobs
# 257 -> 207 CPU seconds; test_sessions' two separate runs (four JVMs) 397 -> 195 s of wall
# time (the first run shared the machine with other work: part of that is noise).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_report_header(config: pytest.Config) -> str:
    return f"spark_differential: {'Spark Connect (local server)' if CONNECT else 'classic'} session"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not CONNECT:
        return
    keep = [i for i in items if i.get_closest_marker("connect") is not None]
    dropped = [i for i in items if i.get_closest_marker("connect") is None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def spark():
    import spark_differential as sd

    if CONNECT:
        s = sd.session(remote="local[2]", conf=CONF)
    else:
        s = sd.session(master="local[2]", conf=CONF)
    yield s
