"""``dd_join`` / ``dd_semijoin`` / ``dd_antijoin`` through Spark against the oracle.

On ``(data, time, diff)``: at every time the output is the equi-join of the
accumulated inputs (multiplicities multiply); in differences, each pair of updates
with equal keys meets at the lattice join of their times.  Keys containing a null
never match (oracle ``null_eq=False``).  Many random cases are packed into one
collection (a leading ``case`` column, always part of the key) so one Spark job
checks them all; diffs are positive and negative.
"""

from __future__ import annotations

import pytest
from helpers import assert_matches, cases, connect_params
from oracle import Coll, Product, Total, assert_updates_equal, ref_antijoin, ref_count, ref_join, ref_semijoin
from pyspark.sql import types as T
from spark_lattices import SPARK_LATTICES, build
from spark_support import collect_many, sdf

import spark_differential  # noqa: F401  (registers the methods)

ON = ["case", "k"]


@pytest.mark.parametrize("name", connect_params(list(SPARK_LATTICES), "int"))
def test_join_family_vs_oracle(spark, name: str) -> None:
    sl = SPARK_LATTICES[name]
    a = cases(101, 30, ["k", "x"], 8, sl.base, time_range=sl.time_range)
    b = cases(202, 30, ["y", "k"], 8, sl.base, time_range=sl.time_range)
    da, ca = build(spark, a, sl)
    # the right side stays ordinary: it enters the differentiated left at `alt`
    db, cb = build(spark, b, sl, differentiate=False)
    lat = sl.lat
    joined = da.dd_join(db, on=ON)
    assert joined.columns == ["case", "k", "x", "y", "time", "diff"]
    assert_matches(joined, ref_join(ca, cb, ON, lat))
    semi, anti = da.dd_semijoin(db, on=ON), da.dd_antijoin(db, on=ON)
    assert semi.columns == anti.columns == ["case", "k", "x", "time", "diff"]
    got_semi, got_anti = collect_many([semi, anti])
    assert_updates_equal(got_semi, ref_semijoin(ca, cb, ON, lat).updates)
    assert_updates_equal(got_anti, ref_antijoin(ca, cb, ON, lat).updates)


def test_join_keys_on_both_sides_and_multi_key(spark) -> None:
    """Key columns need not come first; two data columns per side; struct times."""
    lat = Product([Total(), Total()])
    a = cases(303, 25, ["x", "k", "j"], 7, lat)
    b = cases(404, 25, ["j", "y", "k", "z"], 7, lat)
    da, db = sdf(spark, a, lat), sdf(spark, b, lat)
    on = ["case", "k", "j"]
    out = da.dd_join(db, on=on)
    assert out.columns == ["case", "k", "j", "x", "y", "z", "time", "diff"]
    assert_matches(out, ref_join(a, b, on, lat))
    semi = da.dd_semijoin(db.select("case", "k", "j", "time", "diff"), on=on)
    assert semi.columns == ["case", "x", "k", "j", "time", "diff"]  # the left's own column order
    assert_matches(semi, ref_semijoin(a, Coll(("case", "k", "j"), [((d[0], d[3], d[1]), t, r) for d, t, r in b.updates]), on, lat))


def _with_null_keys(c: Coll, col: str) -> Coll:
    i = c.cols.index(col)
    return Coll(c.cols, [(tuple(None if (j == i and v == 0) else v for j, v in enumerate(d)), t, r) for d, t, r in c.updates])


@pytest.mark.parametrize("name", ["int", "product2"])
def test_null_keys_never_match(spark, name: str) -> None:
    sl = SPARK_LATTICES[name]
    lat = sl.base
    a = _with_null_keys(cases(505, 20, ["k", "x"], 8, lat), "k")
    b = _with_null_keys(cases(606, 20, ["k", "y"], 8, lat), "k")
    assert any(d[1] is None for d, _, _ in a.updates) and any(d[1] is None for d, _, _ in b.updates)
    da, db = sdf(spark, a, lat), sdf(spark, b, lat)
    assert_matches(da.dd_join(db, on=ON), ref_join(a, b, ON, lat, null_eq=False))
    got_semi, got_anti = collect_many([da.dd_semijoin(db, on=ON), da.dd_antijoin(db, on=ON)])
    assert_updates_equal(got_semi, ref_semijoin(a, b, ON, lat, null_eq=False).updates)
    # rows with a null key are never matched, so the antijoin keeps them
    assert_updates_equal(got_anti, ref_antijoin(a, b, ON, lat, null_eq=False).updates)
    assert any(d[1] is None for d, _, _ in got_anti)


def test_key_types_int_and_bigint(spark) -> None:
    lat = Total()
    a = cases(707, 20, ["k", "x"], 8, lat)
    b = cases(808, 20, ["k", "y"], 8, lat)
    da = sdf(spark, a, lat, types={"k": T.IntegerType(), "case": T.IntegerType()})
    db = sdf(spark, b, lat)  # bigint keys
    out = da.dd_join(db, on=ON)
    assert out.schema["k"].dataType == T.IntegerType()
    assert_matches(out, ref_join(a, b, ON, lat))
    assert_matches(db.dd_semijoin(da, on=ON), ref_semijoin(b, a, ON, lat))


@pytest.mark.parametrize("name", ["int", "product2"])
def test_orders_customers_count_by_region(spark, name: str) -> None:
    """The three-way interaction: orders ⋈ customers, then dd_count by region."""
    sl = SPARK_LATTICES[name]
    lat = sl.base
    orders = cases(909, 20, ["cust", "oid"], 10, lat, value_range=4)
    customers = cases(1010, 20, ["cust", "region"], 6, lat, value_range=3)
    do, dc = sdf(spark, orders, lat), sdf(spark, customers, lat)
    joined = do.dd_join(dc, on=["case", "cust"])
    by_region = joined.dd_count(by=["case", "region"])
    expected = ref_count(ref_join(orders, customers, ["case", "cust"], lat), ["case", "region"], lat)
    assert by_region.columns == ["case", "region", "count", "time", "diff"]
    assert_matches(by_region, expected)
