"""Test fixtures: one local SparkSession shared by the whole test session."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    import spark_differential as sd

    s = sd.session(
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.sql.adaptive.coalescePartitions.enabled": "true",
            "spark.driver.memory": "2g",
        },
    )
    yield s
