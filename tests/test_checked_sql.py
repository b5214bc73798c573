"""The SQL-text plans of the operators without a kernel, on collections whose ``time`` and
``diff`` the schema declares nullable (so every null check is in the plan) and whose
integral types are narrower than ``long``: results exact against the oracle, types kept.

``dd_concat``, ``dd_negate``, ``dd_consolidate`` (with and without a frontier),
``dd_as_of``, ``differentiate`` and ``integrate`` check ``time`` and ``diff`` inside
their one projection, filter or aggregation, as ``coalesce(x, raise_error(...), 0)``:
the value of a non-null column unchanged, a column Spark then knows is non-null (the
operators downstream check nothing again).  The oracle's own tests use non-nullable
columns, where none of this is planned.
"""

from __future__ import annotations

import random

import pytest
from helpers import cases
from oracle import (
    Total,
    acc,
    assert_updates_equal,
    ref_concat,
    ref_consolidate,
    ref_differentiate,
    ref_integrate,
    ref_negate,
)
from spark_support import collect_many

import spark_differential  # noqa: F401  (registers the methods)

TIME_TYPES = ["bigint", "int", "smallint", "tinyint"]

pytestmark = pytest.mark.connect  # the same SQL text on Spark Connect


def _df(spark, coll, time_sql: str, diff_sql: str):
    schema = f"case long, x long, time {time_sql}, diff {diff_sql}"  # every column nullable
    return spark.createDataFrame([(*d, t, r) for d, t, r in coll.updates], schema).coalesce(1)


@pytest.mark.parametrize("time_sql", TIME_TYPES)
def test_checked_sql_operators_vs_oracle(spark, time_sql: str) -> None:
    lat = Total()
    a = cases(TIME_TYPES.index(time_sql) * 11 + 1, 12, ["x"], 8, lat, time_range=(0, 6))
    b = cases(TIME_TYPES.index(time_sql) * 11 + 2, 12, ["x"], 8, lat, time_range=(0, 6))
    da = _df(spark, a, time_sql, "int")  # an int diff on one side, a bigint one on the other
    db = _df(spark, b, time_sql, "bigint")
    assert da.schema["time"].nullable and da.schema["diff"].nullable
    outs = [
        da.dd_concat(db),
        da.dd_negate(),
        da.dd_consolidate(),
        da.dd_consolidate(frontier=[3]),
        da.differentiate().integrate().dd_consolidate(),
        db.dd_concat(da, consolidate=False).dd_consolidate(),
        da.dd_negate(consolidate=False).dd_consolidate(),
    ]
    got = collect_many(outs)
    expected = [
        ref_concat(a, b),
        ref_negate(a),
        ref_consolidate(a, lat),
        ref_consolidate(a, lat, [3]),
        ref_integrate(ref_differentiate(a, lat)[0]),
        ref_concat(b, a),
        ref_negate(a),
    ]
    for g, e in zip(got, expected):
        assert_updates_equal(g, e.updates)
    for out in outs:  # the time keeps its type; the checked columns are declared non-null
        assert out.schema["time"].dataType.simpleString() == da.schema["time"].dataType.simpleString()
        assert out.schema["diff"].dataType.simpleString() == "bigint"
        assert not out.schema["time"].nullable
    # differentiate: both moments of every update, from one projection, non-null leaves
    diffed = da.differentiate()
    assert not any(f.nullable for f in diffed.schema["time"].dataType.fields) and not diffed.schema["diff"].nullable
    assert_updates_equal(collect_many([diffed.dd_consolidate()])[0], ref_differentiate(a, lat)[0].updates)
    # dd_as_of: the accumulated multiset at a few times
    rng = random.Random(7)
    for t in sorted({rng.randint(0, 6) for _ in range(3)}):
        rows = da.dd_as_of(t).collect()
        got_acc = {(r["case"], r["x"]): r["diff"] for r in rows}
        assert got_acc == {d: m for d, m in acc(a, t, lat).items() if m}
