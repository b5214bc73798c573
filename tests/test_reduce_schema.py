"""``dd_reduce`` with an applyInPandas-style ``schema`` that also lists the ``by`` columns.

The output then follows the schema's column order; ``func`` may return the key
columns (their values are checked against the group's key) or leave them out
(they are filled in).  Checked against the oracle's ``ref_reduce`` for a total and
a product time (the two kernel paths), with the columns reordered as the schema says.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from helpers import cases, rows_of
from oracle import assert_updates_equal, ref_reduce
from pyspark import cloudpickle
from spark_lattices import SPARK_LATTICES, build
from spark_support import collect_many, no_spark_job

from spark_differential import errors
from spark_differential.errors import OutputSchemaError, SchemaMismatchError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BY = ["case", "k"]


def _top2(key: tuple, rows: list) -> list:
    return [((v,), 1) for v in sorted({d[0] for d, _ in rows}, reverse=True)[:2]]


def top2(g: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"x": sorted(set(g["x"]), reverse=True)[:2]}).assign(diff=1)


def top2_with_keys(g: pd.DataFrame) -> pd.DataFrame:
    """Returns the key columns too, as applyInPandas functions usually do."""
    out = top2(g)
    return out.assign(case=g["case"].iloc[0], k=g["k"].iloc[0])[["k", "x", "case", "diff"]]


def top2_wrong_key(g: pd.DataFrame) -> pd.DataFrame:
    return top2_with_keys(g).assign(k=-1)


@pytest.mark.parametrize("name", ["int", "product2"])
def test_schema_with_by_columns_vs_oracle(spark, name: str) -> None:
    sl = SPARK_LATTICES[name]
    c = cases(53, 25, ["k", "x", "y"], 8, sl.base, time_range=sl.time_range)
    df, cc = build(spark, c, sl)
    ref = ref_reduce(cc, BY, _top2, sl.lat, ["x"]).updates  # columns case, k, x
    omitted = df.dd_reduce(BY, top2, "x long, case long, k long")
    returned = df.dd_reduce(BY, top2_with_keys, "k long, case long, x long")
    plain = df.dd_reduce(BY, top2, "x long")
    assert omitted.columns == ["x", "case", "k", "time", "diff"]
    assert returned.columns == ["k", "case", "x", "time", "diff"]
    assert plain.columns == ["case", "k", "x", "time", "diff"]
    got_omitted, got_returned = collect_many([omitted.select(*BY, "x", "time", "diff"), returned.select(*BY, "x", "time", "diff")])
    assert_updates_equal(got_omitted, ref)
    assert_updates_equal(got_returned, ref)
    # and the rows come out in the schema's order
    row = omitted.orderBy("case", "k", "x", "time").first()
    assert row is not None and list(row.asDict()) == ["x", "case", "k", "time", "diff"]


def test_returned_key_columns_are_checked(spark) -> None:
    df = spark.createDataFrame([(0, 1, 5, 0, 1)], "case long, k long, x long, time long, diff long")
    out = df.dd_reduce(BY, top2_wrong_key, "case long, k long, x long")
    with pytest.raises(Exception) as e:
        out.collect()
    err = errors.from_job_failure(e.value)
    assert isinstance(err, OutputSchemaError) and "`k` values other than the key's" in str(err)
    # a schema without the key columns still accepts functions that echo them
    assert rows_of(df.dd_reduce(BY, top2_with_keys, "x long")) == [((0, 1, 5), 0, 1)]


def test_schema_by_column_errors(spark) -> None:
    df = spark.createDataFrame([], "case long, k string, x long, time long, diff long")
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError, match="list all or none"):
            df.dd_reduce(BY, top2, "case long, x long")
        with pytest.raises(SchemaMismatchError, match="input has string"):
            df.dd_reduce(BY, top2, "case long, k long, x long")
        with pytest.raises(SchemaMismatchError, match="at least one output column"):
            df.dd_reduce(BY, top2, "case long, k string")
