"""Small Spark-side helpers shared by the operator tests (beyond tests/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from helpers import rows_of, time_type, to_df
from oracle import Coll
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.jobs import JobCount, count_jobs


@contextmanager
def no_spark_job(spark: Any) -> Iterator[None]:
    """Assert that no Spark job is started inside the block.

    The block runs under a fresh job group (:func:`spark_differential.core.jobs.count_jobs`);
    afterwards that group must have no jobs.
    """
    counted: JobCount | None = None
    try:
        with count_jobs(spark, "must not run a job") as counted:
            yield
    finally:
        assert counted is not None and not counted.job_ids, (
            f"Spark jobs {counted.job_ids if counted else '?'} ran although the error should come before any job"
        )


def collect_many(dfs: Sequence[DataFrame]) -> list[list[tuple[tuple, Any, int]]]:
    """Updates of several same-schema collections, read with a single Spark action."""
    assert dfs
    tagged = None
    for i, df in enumerate(dfs):
        part = df.withColumn("__tag", F.lit(i))
        tagged = part if tagged is None else tagged.unionByName(part)
    assert tagged is not None
    rows = rows_of(tagged)
    out: list[list[tuple[tuple, Any, int]]] = [[] for _ in dfs]
    for d, t, r in rows:
        out[d[-1]].append((d[:-1], t, r))
    return out


def sdf(spark: Any, coll: Coll, lat: Any, types: dict[str, T.DataType] | None = None) -> DataFrame:
    """``helpers.to_df`` in a single partition: test inputs are tiny, and every extra
    input partition costs a task in every stage that reads it (the operators still
    spread the keys over all their buckets)."""
    return to_df(spark, coll, lat, types).coalesce(1)


def coll_df(
    spark: Any,
    coll: Coll,
    tdtype: T.DataType,
    types: dict[str, T.DataType] | None = None,
) -> DataFrame:
    """A collection DataFrame with an explicit Spark type for ``time`` (dates, timestamps…)."""
    types = types or {}
    fields = [T.StructField(c, types.get(c, T.LongType()), True) for c in coll.cols]
    fields += [T.StructField("time", tdtype, False), T.StructField("diff", T.LongType(), False)]
    return spark.createDataFrame([(*d, t, r) for d, t, r in coll.updates], T.StructType(fields)).coalesce(1)


def micros_time(df: DataFrame) -> DataFrame:
    """The collection with a timestamp ``time`` replaced by its epoch microseconds (zone-free)."""
    return df.withColumn("time", F.unix_micros(F.col("time")))


__all__ = ["coll_df", "collect_many", "micros_time", "no_spark_job", "sdf", "time_type"]
