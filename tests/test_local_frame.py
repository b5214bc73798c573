"""``spark_differential.core.session.local_frame``: an Arrow table as a DataFrame of local rows.

On ``(data, time, diff)`` nothing changes: the rows are the table's.  Checked: the same rows,
schema and plan (a ``LocalRelation``, read without a Spark job) as ``spark.createDataFrame``
for every plain column type, with nulls; the short path is taken where it may be (plain
types, the Arrow types Spark expects) and ``createDataFrame`` is used otherwise (time
stamps, a table whose types differ, Spark Connect).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from helpers import CONNECT
from pyspark.sql import types as T
from spark_support import no_spark_job

from spark_differential.core.session import local_frame
from spark_differential.engine.kernel_form import arrow_schema

PLAIN = T.StructType([
    T.StructField("l", T.LongType()), T.StructField("i", T.IntegerType()), T.StructField("b", T.BooleanType()),
    T.StructField("d", T.DoubleType()), T.StructField("s", T.StringType()), T.StructField("m", T.DecimalType(12, 3)),
    T.StructField("day", T.DateType()), T.StructField("bin", T.BinaryType()),
])
PLAIN_ROWS = [
    (1, 2, True, 0.5, "a", Decimal("1.250"), dt.date(2024, 1, 2), b"x"),
    (None, None, None, None, None, None, None, None),
    (-(2 ** 63), 2 ** 31 - 1, False, float("inf"), "é", Decimal("-99.001"), dt.date(1970, 1, 1), b""),
]
STAMPED = T.StructType([T.StructField("k", T.LongType()), T.StructField("at", T.TimestampType())])
STAMPED_ROWS = [(1, dt.datetime(2024, 1, 2, 3, 4, 5)), (2, None)]


def _table(spark: Any, schema: T.StructType, rows: list[tuple]) -> pa.Table:
    arrow = arrow_schema(spark, schema)
    return pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=arrow)


class _Refused:
    """A session whose ``createDataFrame`` fails: the short path must not need it."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def __getattr__(self, name: str) -> Any:
        if name == "createDataFrame":
            raise AssertionError("createDataFrame called although the short path applies")
        return getattr(self._spark, name)


@pytest.mark.parametrize("schema,rows", [(PLAIN, PLAIN_ROWS), (STAMPED, STAMPED_ROWS)], ids=["plain", "timestamp"])
@pytest.mark.connect
def test_the_rows_schema_and_plan_of_create_data_frame(spark, schema, rows) -> None:
    table = _table(spark, schema, rows)
    got = local_frame(spark, table, schema, arrow_schema(spark, schema))
    want = spark.createDataFrame(table, schema)
    assert got.schema == want.schema == schema
    assert got.collect() == want.collect()
    if schema is PLAIN:  # (a time stamp comes back in this process's time zone)
        assert [tuple(r) for r in got.collect()] == rows
    if not CONNECT:  # (Connect counts no jobs)
        assert "LocalRelation" in got._jdf.queryExecution().optimizedPlan().toString()
        with no_spark_job(spark):  # local rows: read without a job
            got.collect()


def test_plain_types_take_the_short_path_and_others_do_not(spark) -> None:
    """(A classic session's: the Connect pass does not run it.)"""
    table = _table(spark, PLAIN, PLAIN_ROWS)
    assert sorted(map(tuple, local_frame(_Refused(spark), table, PLAIN, table.schema).collect()), key=repr) == \
        sorted(PLAIN_ROWS, key=repr)
    stamped = _table(spark, STAMPED, STAMPED_ROWS)
    with pytest.raises(AssertionError, match="createDataFrame called"):  # a time zone to apply: createDataFrame's
        local_frame(_Refused(spark), stamped, STAMPED, stamped.schema)
    wide = table.set_column(1, "i", table.column("i").cast(pa.int64()))  # not the types Spark expects
    with pytest.raises(AssertionError, match="createDataFrame called"):
        local_frame(_Refused(spark), wide, PLAIN, table.schema)
