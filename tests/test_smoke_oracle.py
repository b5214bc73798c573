"""A first end-to-end check of the Spark operators against the oracle."""

from __future__ import annotations

import pytest
from helpers import assert_matches, cases, to_df
from oracle import Product, Total, ref_count, ref_join, ref_min

import spark_differential  # noqa: F401  (registers the methods)

LATTICES = {"int": Total(), "product2": Product([Total(), Total()])}


@pytest.mark.connect
@pytest.mark.parametrize("name", list(LATTICES))
def test_join_count_min(spark, name):
    lat = LATTICES[name]
    a = cases(1, 8, ["k", "x"], 6, lat)
    b = cases(2, 8, ["k", "y"], 6, lat)
    da, db = to_df(spark, a, lat), to_df(spark, b, lat)
    assert_matches(da.dd_join(db, on=["case", "k"]), ref_join(a, b, ["case", "k"], lat))
    assert_matches(da.dd_count(["case", "k"]), ref_count(a, ["case", "k"], lat))
    assert_matches(da.dd_min(["case", "k"], "x"), ref_min(a, ["case", "k"], "x", lat))
