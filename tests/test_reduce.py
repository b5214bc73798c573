"""The reduce family through Spark against the oracle: ``dd_count``, ``dd_sum``,
``dd_min``, ``dd_max``, ``dd_reduce`` (user functions), ``dd_distinct``,
``dd_threshold``.

On ``(data, time, diff)``: at every time each key's output is a function of the
key's accumulated rows with positive multiplicity (``dd_threshold`` maps every
nonzero multiplicity); corrections appear at the lub closure of the key's input
times (seed 000, "Interesting times").  Random cases are packed into one
collection with a leading ``case`` column that is always part of ``by``.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from helpers import assert_matches, cases, connect_params, rows_of
from oracle import (
    Coll,
    Product,
    Total,
    assert_updates_equal,
    ref_count,
    ref_distinct,
    ref_max,
    ref_min,
    ref_reduce,
    ref_sum,
    ref_threshold,
)
from pyspark import cloudpickle
from spark_lattices import SPARK_LATTICES, build
from spark_support import collect_many, sdf

import spark_differential  # noqa: F401  (registers the methods)

# the user functions below run in Spark's Python workers, which cannot import this
# test module: ship them by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BY = ["case", "k"]


def _top2(key: tuple, rows: list) -> list:
    """Oracle: the two largest distinct ``x`` among rows ``((x, y), m)``."""
    return [((v,), 1) for v in sorted({d[0] for d, _ in rows}, reverse=True)[:2]]


def top2(g: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"x": sorted(set(g["x"]), reverse=True)[:2]}).assign(diff=1)


def _median(key: tuple, rows: list) -> list:
    """Oracle: the lower median of ``x`` counted with multiplicity, and how many rows; twice."""
    vals = sorted(x for (x, _y), m in rows for _ in range(m))
    return [((vals[(len(vals) - 1) // 2], len(vals)), 2)]


def median(g: pd.DataFrame) -> pd.DataFrame:
    vals = sorted(v for v, m in zip(g["x"], g["diff"]) for _ in range(int(m)))
    return pd.DataFrame({"med": [vals[(len(vals) - 1) // 2]], "n": [len(vals)], "diff": [2]})


def _halve(m: int) -> int:
    return m // 2


@pytest.mark.parametrize("name", connect_params(list(SPARK_LATTICES), "int"))
def test_reduce_family_vs_oracle(spark, name: str) -> None:
    sl = SPARK_LATTICES[name]
    c = cases(31, 30, ["k", "x", "y"], 8, sl.base, time_range=sl.time_range)
    df, cc = build(spark, c, sl)
    lat = sl.lat

    count = df.dd_count(BY)
    assert count.columns == ["case", "k", "count", "time", "diff"]
    assert_matches(count, ref_count(cc, BY, lat))

    # the lattices below take the same kernel paths as int / product2 / altneu; a subset
    # of the aggregates keeps their (nested, wide) time encodings covered more cheaply
    full = name in ("int", "product2", "altneu")
    # same output schema (case, k, x): one Spark action for all of them
    aggs = {
        "sum": (lambda: df.dd_sum(BY, "x"), lambda: ref_sum(cc, BY, "x", lat)),
        "min": (lambda: df.dd_min(BY, "x"), lambda: ref_min(cc, BY, "x", lat)),
        "max": (lambda: df.dd_max(BY, "x"), lambda: ref_max(cc, BY, "x", lat)),
        "top2": (lambda: df.dd_reduce(BY, top2, "x long"), lambda: ref_reduce(cc, BY, _top2, lat, ["x"])),
    }
    names = list(aggs) if full else ["min", "top2"]
    outs = [aggs[n][0]() for n in names]
    for out in outs:
        assert out.columns == ["case", "k", "x", "time", "diff"]
    for got, what in zip(collect_many(outs), names):
        try:
            assert_updates_equal(got, aggs[what][1]().updates)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None

    if full:
        got_distinct, got_threshold = collect_many([df.dd_distinct(), df.dd_threshold(_halve)])
        assert_updates_equal(got_threshold, ref_threshold(cc, _halve, lat).updates)
    else:
        got_distinct = rows_of(df.dd_distinct())
    assert_updates_equal(got_distinct, ref_distinct(cc, lat).updates)


@pytest.mark.parametrize("name", ["int", "product2", "altneu"])
def test_reduce_median_vs_oracle(spark, name: str) -> None:
    sl = SPARK_LATTICES[name]
    c = cases(41, 30, ["k", "x", "y"], 8, sl.base, time_range=sl.time_range)
    df, cc = build(spark, c, sl)
    out = df.dd_reduce(BY, median, "med long, n long")
    assert out.columns == ["case", "k", "med", "n", "time", "diff"]
    assert_matches(out, ref_reduce(cc, BY, _median, sl.lat, ["med", "n"]))


def test_threshold_negative_multiplicities(spark) -> None:
    """dd_threshold sees negative multiplicities too (unlike the reduce family)."""
    sl = SPARK_LATTICES["product2"]
    c = cases(51, 30, ["x"], 8, sl.base)
    df, cc = build(spark, c, sl)

    def sign_square(m: int) -> int:
        return m * m if m > 0 else -1

    assert_matches(df.dd_threshold(sign_square), ref_threshold(cc, sign_square, sl.lat))


def test_distinct_seed000_interesting_time(spark) -> None:
    """(cat, (0,3)) and (cat, (1,2)) both +1: distinct must retract one cat at (1,3)."""
    df = spark.createDataFrame(
        [("cat", (0, 3), 1), ("cat", (1, 2), 1)], "animal string, time struct<round: bigint, iter: bigint>, diff bigint"
    )
    got = rows_of(df.dd_distinct())
    assert_updates_equal(got, [(("cat",), (0, 3), 1), (("cat",), (1, 2), 1), (("cat",), (1, 3), -1)])
    # and the same correction for the count of the key
    assert_updates_equal(
        rows_of(df.dd_count("animal")),
        [(("cat", 1), (0, 3), 1), (("cat", 1), (1, 2), 1), (("cat", 1), (1, 3), -2), (("cat", 2), (1, 3), 1)],
    )


def test_global_reductions_and_nulls(spark) -> None:
    """No ``by`` columns (one global key); null values are ignored by sum/min/max."""
    lat = Product([Total(), Total()])
    c = cases(61, 1, ["x", "y"], 14, lat)
    c = Coll(c.cols, [((d[0], None if d[1] == 0 else d[1], d[2]), t, r) for d, t, r in c.updates])
    df = sdf(spark, c, lat).drop("case")
    cc = Coll(("x", "y"), [(d[1:], t, r) for d, t, r in c.updates])
    assert_matches(df.dd_count(), ref_count(cc, [], lat))
    got_sum, got_min = collect_many([df.dd_sum(None, "x"), df.dd_min([], "x")])
    assert_updates_equal(got_sum, ref_sum(cc, [], "x", lat).updates)
    assert_updates_equal(got_min, ref_min(cc, [], "x", lat).updates)


def test_count_of_a_collection_with_no_data_columns(spark) -> None:
    """``dd_count()`` of a collection of no data columns (only ``time``, ``diff``): how many rows
    at every time, on the totally ordered path's SQL (which had no column to group by)."""
    lat = Total()
    c = Coll((), [((), t, r) for t, r in [(0, 1), (1, 2), (3, -1), (3, 1), (4, -2), (6, 5)]])
    df = spark.createDataFrame([(t, r) for _, t, r in c.updates], "time long, diff long")
    assert_matches(df.dd_count(), ref_count(c, [], lat))


@pytest.mark.parametrize("name", ["int", "product2"])
def test_null_keys_group_together(spark, name: str) -> None:
    """A null ``by`` value is a key like any other (as in groupBy), for the built-in
    aggregates and for user functions (which receive the null key's rows)."""
    sl = SPARK_LATTICES[name]
    c = cases(71, 20, ["k", "x", "y"], 8, sl.base, time_range=sl.time_range)
    c = Coll(c.cols, [((d[0], None if d[1] == 0 else d[1], *d[2:]), t, r) for d, t, r in c.updates])
    assert any(d[1] is None for d, _, _ in c.updates)
    df, cc = build(spark, c, sl)
    got_count, got_top2 = collect_many([df.dd_count(BY).withColumnRenamed("count", "x"), df.dd_reduce(BY, top2, "x long")])
    assert_updates_equal(got_count, ref_count(cc, BY, sl.lat).updates)
    assert_updates_equal(got_top2, ref_reduce(cc, BY, _top2, sl.lat, ["x"]).updates)
    assert any(d[1] is None for d, _, _ in got_top2)


def test_value_column_types(spark) -> None:
    """dd_sum over double and decimal columns, dd_min / dd_max over strings and dates."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import functions as F

    lat = Total()
    c = cases(81, 20, ["k", "x"], 8, lat)
    df = sdf(spark, c, lat)
    day0 = dt.date(2021, 3, 1)

    def mapped(fn) -> Coll:  # type: ignore[no-untyped-def]
        return Coll(c.cols, [((d[0], d[1], fn(d[2])), t, r) for d, t, r in c.updates])

    as_double = df.withColumn("x", F.col("x").cast("double")).dd_sum(BY, "x")
    assert as_double.schema["x"].dataType.simpleString() == "double"
    assert_matches(as_double, ref_sum(mapped(float), BY, "x", lat))
    as_decimal = df.withColumn("x", (F.col("x") / 4).cast("decimal(10,2)")).dd_sum(BY, "x")
    assert as_decimal.schema["x"].dataType.simpleString() == "decimal(20,2)"
    assert_matches(as_decimal, ref_sum(mapped(lambda v: Decimal(v) / 4), BY, "x", lat))
    as_string = df.withColumn("x", F.concat(F.lit("v"), F.col("x").cast("string"))).dd_min(BY, "x")
    assert_matches(as_string, ref_min(mapped(lambda v: f"v{v}"), BY, "x", lat))
    as_date = df.withColumn("x", F.date_add(F.lit(day0), F.col("x").cast("int"))).dd_max(BY, "x")
    assert as_date.schema["x"].dataType.simpleString() == "date"
    assert_matches(as_date, ref_max(mapped(lambda v: day0 + dt.timedelta(days=v)), BY, "x", lat))
