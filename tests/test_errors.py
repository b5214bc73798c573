"""Bad input gets a clear, named exception (SPEC section 5).

Schema-level problems (missing ``time``/``diff``, non-integral ``diff``, bad time
types, reserved ``_sd_`` names, mismatched time types, missing keys, clashing data
columns, unparsable schemas) must be raised while the operator is being built,
before any Spark job runs: each is checked inside :func:`no_spark_job`.  Problems
that only the data reveals (a user function raising or returning the wrong
columns, null times) fail the job with a message naming the error class.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from pyspark import cloudpickle
from spark_support import no_spark_job

import spark_differential as sd
from spark_differential.errors import (
    CollectionError,
    DiffTypeError,
    MissingColumnError,
    ReservedNameError,
    SchemaMismatchError,
    SparkDifferentialError,
    TimeTypeError,
    TimeTypeMismatchError,
)

# user functions run in Spark's Python workers, which cannot import this module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def good(spark):
    return spark.createDataFrame([(1, "a", 0, 1), (2, "b", 1, 1)], "k long, v string, time long, diff long")


def test_no_spark_job_helper_detects_jobs(spark, good) -> None:
    with pytest.raises(AssertionError, match="Spark jobs"):
        with no_spark_job(spark):
            good.count()


def test_missing_time_and_diff(spark) -> None:
    no_time = spark.createDataFrame([(1, 1)], "k long, diff long")
    no_diff = spark.createDataFrame([(1, 1)], "k long, time long")
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError) as e:
            no_time.dd_count("k")
        assert "no `time` column" in str(e.value) and "dd_count" in str(e.value)
        assert "sd.collection" in str(e.value)
        with pytest.raises(MissingColumnError) as e:
            no_diff.dd_join(no_diff, on="k")
        assert "no `diff` column" in str(e.value)
        assert "sd.collection(df, time=" in str(e.value)  # points to the fix
        assert isinstance(e.value, CollectionError) and isinstance(e.value, SparkDifferentialError)


def test_non_integral_diff(spark) -> None:
    for dtype in ("double", "string", "decimal(10,2)"):
        df = spark.createDataFrame([(1, 0, "1")], "k long, time long, d string").selectExpr(
            "k", "time", f"cast(d as {dtype}) as diff"
        )
        with no_spark_job(spark):
            with pytest.raises(DiffTypeError) as e:
                df.dd_distinct()
        assert "integral" in str(e.value) and "cast" in str(e.value)


@pytest.mark.parametrize("dtype", ["string", "double", "boolean", "array<bigint>", "struct<a: bigint, b: string>"])
def test_bad_time_type(spark, dtype: str) -> None:
    df = spark.createDataFrame([(1, "1", 1)], "k long, t string, diff long").selectExpr(
        "k", f"cast(null as {dtype}) as time", "diff"
    )
    with no_spark_job(spark):
        with pytest.raises(TimeTypeError) as e:
            df.dd_count("k")
    assert "not a supported time type" in str(e.value)
    assert "integral" in str(e.value) and "struct" in str(e.value)


def test_reserved_names(spark, good) -> None:
    with no_spark_job(spark):
        with pytest.raises(ReservedNameError, match="_sd_"):
            good.withColumnRenamed("v", "_sd_v").dd_count("k")
        nested = spark.createDataFrame([(1, (0, 1), 1)], "k long, time struct<_sd_a: bigint, b: bigint>, diff long")
        with pytest.raises(ReservedNameError, match="_sd_a"):
            nested.dd_distinct()
        with pytest.raises(SchemaMismatchError, match="reserved"):
            good.dd_reduce("k", lambda g: g, "_sd_out long")


def test_mismatched_time_types(spark, good) -> None:
    other_int = spark.createDataFrame([(1, "x", 0, 1)], "k long, w string, time int, diff long")
    other_struct = spark.createDataFrame([(1, "x", (0, 0), 1)], "k long, w string, time struct<a: bigint, b: bigint>, diff long")
    with no_spark_job(spark):
        for other in (other_int, other_struct):
            for op in ("dd_join", "dd_semijoin", "dd_antijoin", "dd_asof_join"):
                with pytest.raises(TimeTypeMismatchError) as e:
                    getattr(good, op)(other, on="k")
                msg = str(e.value)
                assert op in msg and "time type" in msg
                assert "bigint" in msg


def test_missing_key_columns(spark, good) -> None:
    other = spark.createDataFrame([(1, "x", 0, 1)], "j long, w string, time long, diff long")
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError) as e:
            good.dd_join(other, on="k")
        assert "['k']" in str(e.value) and "right input" in str(e.value)
        with pytest.raises(MissingColumnError, match="`by` columns"):
            good.dd_count(["k", "nope"])
        with pytest.raises(MissingColumnError, match="value column"):
            good.dd_sum("k", "nope")
        with pytest.raises(SchemaMismatchError, match="at least one key"):
            good.dd_join(other, on=[])


def test_join_data_column_clash(spark, good) -> None:
    other = spark.createDataFrame([(1, "x", 0, 1)], "k long, v string, time long, diff long")
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError) as e:
            good.dd_join(other, on="k")
        assert "['v']" in str(e.value) and "rename" in str(e.value)
        with pytest.raises(SchemaMismatchError, match="rename"):
            good.dd_asof_join(other, on="k")
    # semi/antijoins keep only the left's columns: no clash
    good.dd_semijoin(other, on="k")


def test_unparsable_schema(spark, good) -> None:
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError) as e:
            good.dd_reduce("k", lambda g: g, "total lonng,, ???")
        assert "cannot parse schema" in str(e.value)
        with pytest.raises(SchemaMismatchError, match="at least one output column"):
            from pyspark.sql import types as T

            good.dd_reduce("k", lambda g: g, T.StructType([]))
        with pytest.raises(TypeError, match="callable"):
            good.dd_reduce("k", 42, "x long")
        with pytest.raises(SchemaMismatchError, match="numeric"):
            good.dd_sum("k", "v")


def _boom(g: pd.DataFrame) -> pd.DataFrame:
    if (g["k"] == 2).any():
        raise ValueError("no twos please")
    return pd.DataFrame({"n": [len(g)], "diff": [1]})


def _wrong_columns(g: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"total": [len(g)], "diff": [1]})


def _not_a_frame(g: pd.DataFrame) -> list:
    return [1, 2]


@pytest.mark.parametrize("time_sql", ["time", "named_struct('a', time, 'b', time)"])
def test_user_function_errors(spark, good, time_sql: str) -> None:
    df = good.selectExpr("k", "v", f"{time_sql} as time", "diff")
    with pytest.raises(Exception) as e:
        df.dd_reduce("k", _boom, "n long").collect()
    msg = str(e.value)
    assert "UserFunctionError" in msg and "dd_reduce" in msg
    assert "ValueError: no twos please" in msg
    assert "'k': 2" in msg  # names the key
    with pytest.raises(Exception) as e:
        df.dd_reduce("k", _wrong_columns, "n long").collect()
    msg = str(e.value)
    assert "OutputSchemaError" in msg and "'total'" in msg and "missing ['n']" in msg
    with pytest.raises(Exception) as e:
        df.dd_reduce("k", _not_a_frame, "n long").collect()
    assert "OutputSchemaError" in str(e.value) and "pandas DataFrame" in str(e.value)


def test_threshold_function_errors(spark, good) -> None:
    with pytest.raises(Exception) as e:
        good.dd_threshold(lambda m: 1 / 0).collect()
    assert "UserFunctionError" in str(e.value) and "dd_threshold" in str(e.value)
    with pytest.raises(Exception) as e:
        good.dd_threshold(lambda m: "many").collect()
    assert "OutputSchemaError" in str(e.value)


def test_null_time_in_operator_input_fails_the_job(spark) -> None:
    df = spark.createDataFrame([(1, None, 1), (2, 3, 1)], "k long, time long, diff long")
    out = df.dd_count("k")  # building is fine: nulls are only visible in the data
    with pytest.raises(Exception) as e:
        out.collect()
    assert "NullValueError" in str(e.value) and "null time" in str(e.value)


def test_frontier_errors(spark, good) -> None:
    from spark_differential.errors import FrontierError

    with no_spark_job(spark):
        with pytest.raises(FrontierError, match="empty frontier"):
            good.dd_consolidate(frontier=[])
        with pytest.raises(FrontierError):
            good.dd_consolidate(frontier=[(1, 2)])
        with pytest.raises(FrontierError):
            good.dd_as_of("yesterday")
        with pytest.raises(ValueError, match="method"):
            good.dd_consolidate(method="magic")
        with pytest.raises(ValueError, match="how"):
            good.dd_asof_join(good.withColumnRenamed("v", "w"), on="k", how="outer")


def test_wrong_argument_types(spark, good) -> None:
    with no_spark_job(spark):
        with pytest.raises(TypeError, match="DataFrame"):
            sd.dd_count(pd.DataFrame({"k": [1]}), "k")
        with pytest.raises(TypeError, match="column names"):
            good.dd_count([1, 2])
        with pytest.raises(TimeTypeError, match="differentiate"):
            good.integrate()
