"""``core.shipped.collect_mapped`` and ``core.projections.select_sql``: the same rows as
``mapInArrow(...).collect()`` and ``selectExpr``, at less fixed cost per call.

On ``(data, time, diff)`` nothing changes: they are how an incremental view's small update
builds its one job.  Checked: each call runs its own function although the UDF is kept
(two functions over the same columns and schema give their own rows, in either order);
the UDF and the parsed projection are made once and reused (fewer py4j round trips the
second time); the file carrying the function is gone after the job, also when the task
fails, whose error reaches the caller; the kept UDF's function refuses to run outside
``collect_mapped``; a plan before optimisation gives the optimizer's row count for local
rows only renamed or projected (``intask.sources.estimated_rows``) and falls back
elsewhere.  On Spark Connect both are PySpark's own calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_differential.core import shipped
from spark_differential.core.jobs import count_round_trips
from spark_differential.core.projections import select_sql
from spark_differential.core.shipped import collect_mapped
from spark_differential.intask import sources

OUT = T.StructType([T.StructField("rows", T.LongType()), T.StructField("total", T.LongType())])


def _summed(factor: int) -> Any:
    """A task function: the rows it read and ``factor`` times the sum of their ``x``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seen = list(batches)
        total = sum(sum(v for v in b.column(b.schema.get_field_index("x")).to_pylist() if v is not None)
                    for b in seen)
        yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in seen)], "total": [factor * total]},
                                         schema=pa.schema([("rows", pa.int64()), ("total", pa.int64())]))

    return run


def _failing() -> Any:
    """A task function that fails (made here: a test module's own functions do not import in a worker)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        list(batches)
        raise ValueError("the task's own failure 7x")
        yield  # (a generator)

    return run


@pytest.mark.connect
def test_each_call_runs_its_own_function(spark, tmp_path) -> None:
    df = spark.range(0, 10, 1, 3).selectExpr("id AS x", "id % 3 AS k").coalesce(1)
    want = {f: df.mapInArrow(_summed(f), OUT).collect() for f in (1, 5)}
    for f in (1, 5, 1, 5):  # (the kept UDF would give the first function's rows for the second)
        assert collect_mapped(df, _summed(f), OUT, str(tmp_path)) == want[f] == [(10, 45 * f)]
    assert os.listdir(tmp_path) == []  # the functions' files removed


def test_the_udf_is_made_once_and_the_function_file_removed_on_failure(spark, tmp_path) -> None:
    """(Classic: py4j round trips, the kept UDFs.)"""
    df = spark.range(0, 7, 1, 2).selectExpr("id AS x").coalesce(1)
    trips = []
    for f in (2, 3):
        with count_round_trips() as counted:
            assert collect_mapped(df, _summed(f), OUT, str(tmp_path)) == [(7, 21 * f)]
        trips.append(counted.count)
    assert trips[1] < trips[0] - 10, trips  # the second call made no new UDF
    assert sum(k[0] == ("x",) for k in shipped._udfs[spark]) == 1
    with pytest.raises(Exception, match="the task's own failure 7x"):
        collect_mapped(df, _failing(), OUT, str(tmp_path))
    assert os.listdir(tmp_path) == []
    assert spark.sparkContext.getLocalProperty(shipped.FUNCTION_PROPERTY) is None
    # the kept UDF's function, run by a job collect_mapped did not start: a clear error, no wrong rows
    column = shipped._udf_column(df, OUT)
    from pyspark.sql import DataFrame

    with pytest.raises(Exception, match="no local property"):
        DataFrame(df._jdf.mapInArrow(column._jc, False, None), spark).collect()


@pytest.mark.connect
def test_select_sql_is_select_expr(spark) -> None:
    df = spark.createDataFrame([(1, "a", None), (2, None, 5)], "`a.b` long, s string, n int")
    exprs = ["0 AS _src", "`a.b` AS x", "CAST(n AS BIGINT) AS n2", "concat(s, '!') AS s2"]
    for _ in range(2):
        got = select_sql(df, exprs)
        want = df.selectExpr(*exprs)
        assert got.schema == want.schema
        assert got.collect() == want.collect() == [(0, 1, None, "a!"), (0, 2, 5, None)]
    assert select_sql(df, ["`a.b` * 2 AS y"]).collect() == [(2,), (4,)]  # another projection: its own


def test_select_sql_parses_once(spark) -> None:
    """(Classic: py4j round trips.)"""
    exprs = [f"id + {i} AS c{i}" for i in range(8)]
    trips = []
    for _ in range(2):
        df = spark.range(3)
        with count_round_trips() as counted:
            select_sql(df, exprs)
        trips.append(counted.count)
    assert trips[1] < trips[0] - 8, trips
    assert select_sql(spark.range(3), exprs).collect() == spark.range(3).selectExpr(*exprs).collect()


def test_estimated_rows_of_local_rows_without_optimising(spark, monkeypatch) -> None:
    """(Classic: plans.)"""
    import pandas as pd

    local = spark.createDataFrame(pd.DataFrame({"a": range(37), "b": 1}))
    renamed = local.selectExpr("a AS x", "b + 1 AS y").withColumnRenamed("x", "z").alias("t")
    optimized: list[Any] = []  # the optimized path's plans (_held reads each): none for local rows
    held = sources._held
    monkeypatch.setattr(sources, "_held", lambda plan: optimized.append(plan) or held(plan))
    for df in (local, renamed):
        assert sources._local_rows(df._jdf.queryExecution().withCachedData()) == 37
        assert sources.estimated_rows([df]) == sources.Estimate(37, True, True, 37)
    assert sources.estimated_rows([local, renamed]).rows == 74
    assert optimized == []
    # a filter: the optimizer's estimate as before (no local relation is only projected)
    filtered = local.where("a < 5")
    assert sources._local_rows(filtered._jdf.queryExecution().withCachedData()) is None
    count = filtered._jdf.queryExecution().optimizedPlan().stats().rowCount().get()
    assert sources.estimated_rows([filtered]).rows == int(str(count)) == 5
    assert len(optimized) == 1
    assert sources._local_rows(spark.range(4)._jdf.queryExecution().withCachedData()) is None
    # no rows, and a projection whose text spans lines (a string literal holding a newline): the
    # optimizer's path for the latter, the same rows either way
    import pyarrow as pa

    empty = spark.createDataFrame(pa.table({"a": pa.array([], pa.int64())}))
    assert sources._local_rows(empty._jdf.queryExecution().withCachedData()) == 0
    multi = local.selectExpr("a", "'x\\ny' AS s")
    assert sources._local_rows(multi._jdf.queryExecution().withCachedData()) is None
    assert sources.estimated_rows([multi]).rows == 37 and len(optimized) == 2
