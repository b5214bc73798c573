"""Bad input is never silently wrong (issue 21, the bad-input half; docs/reliability.md).

* A null ``time`` or ``diff`` fails every operator with :class:`NullValueError`
  (from inside the job: operators do not scan their input eagerly), never a
  changed, merged or dropped row; :func:`spark_differential.raising` gives the
  class back at the action.
* ``dd_reduce`` / ``dd_threshold`` functions that return ``None`` name the key and time.
* Bad frontiers and loop-rule breaks get named errors before any job.
* Column names with backticks, dots and spaces work as with plain DataFrames.
* ``sd.sql`` errors speak of the user's tables and columns only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from helpers import rows_of
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_support import collect_many, no_spark_job

import spark_differential as sd
from spark_differential.errors import (
    FrontierError,
    LoopRuleError,
    NullValueError,
    OutputSchemaError,
    SparkDifferentialError,
    SqlError,
    UserFunctionError,
)

# user functions run in Spark's Python workers, which cannot import this module
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "k long, v long, time long, diff long"


@pytest.fixture(scope="module")
def good(spark) -> DataFrame:
    return spark.createDataFrame([(1, 10, 0, 1), (2, 20, 1, 1)], SCHEMA).coalesce(1)


@pytest.fixture(scope="module")
def nulls(spark) -> dict[str, DataFrame]:
    """Collections with one good row and one row whose ``time`` (or ``diff``) is null."""
    return {
        "time": spark.createDataFrame([(1, 10, 0, 1), (1, 10, None, 1)], SCHEMA).coalesce(1),
        "diff": spark.createDataFrame([(1, 10, 0, 1), (1, 10, 2, None)], SCHEMA).coalesce(1),
    }


@pytest.fixture(scope="module", params=["time", "diff"])
def bad(request, nulls) -> tuple[str, DataFrame]:
    return request.param, nulls[request.param]


def _other(good: DataFrame) -> DataFrame:
    return good.select("k", F.col("v").alias("w"), "time", "diff")


# every public operator taking a collection: (name, how to run it on the bad input `b` and a good one `g`)
OPERATORS: list[tuple[str, Callable[[DataFrame, DataFrame], DataFrame]]] = [
    ("dd_consolidate", lambda b, g: b.dd_consolidate()),
    ("dd_consolidate", lambda b, g: b.dd_consolidate(frontier=5)),
    ("dd_consolidate", lambda b, g: b.dd_consolidate(frontier=5, method="kernel")),
    ("dd_as_of", lambda b, g: b.dd_as_of(5)),
    ("dd_negate", lambda b, g: b.dd_negate()),
    ("dd_negate", lambda b, g: b.dd_negate(consolidate=False)),
    ("dd_concat", lambda b, g: g.dd_concat(b)),
    ("dd_join", lambda b, g: b.dd_join(_other(g), on="k")),
    ("dd_join", lambda b, g: g.dd_join(_other(b), on="k")),
    ("dd_semijoin", lambda b, g: b.dd_semijoin(g, on="k")),
    ("dd_antijoin", lambda b, g: b.dd_antijoin(g, on="k")),
    ("dd_reduce", lambda b, g: b.dd_reduce("k", lambda x: x[["v", "diff"]], "v long")),
    ("dd_count", lambda b, g: b.dd_count("k")),
    ("dd_sum", lambda b, g: b.dd_sum("k", "v")),
    ("dd_min", lambda b, g: b.dd_min("k", "v")),
    ("dd_max", lambda b, g: b.dd_max("k", "v")),
    ("dd_distinct", lambda b, g: b.dd_distinct()),
    ("dd_threshold", lambda b, g: b.dd_threshold(lambda m: m)),
    ("dd_iterate", lambda b, g: b.dd_iterate(lambda d: d.dd_distinct())),
    ("dd_iterate", lambda b, g: g.dd_iterate(lambda d: d.dd_semijoin(b, on="k").dd_concat(d).dd_distinct())),
    ("differentiate", lambda b, g: b.differentiate()),
    ("differentiate", lambda b, g: b.differentiate().integrate()),
    ("dd_delay", lambda b, g: b.dd_delay()),
    ("dd_asof_join", lambda b, g: b.dd_asof_join(_other(g), on="k")),
    ("dd_asof_join", lambda b, g: g.dd_asof_join(_other(b), on="k")),
    ("dd_arrange", lambda b, g: b.dd_arrange("k")),
    ("dd_to_intervals", lambda b, g: b.dd_to_intervals()),
]


# A null diff meets the same guards as a null time (collection.checked, execution.prepare, the loops'
# entry): checked for every operator whose input passes a different one of them, not for all.
DIFF_TOO = {0, 1, 3, 4, 6, 8, 12, 18, 19, 21, 23, 26}
CASES = [("time", i) for i in range(len(OPERATORS))] + [("diff", i) for i in sorted(DIFF_TOO)]


@pytest.mark.parametrize("what,index", CASES, ids=[f"{w}-{OPERATORS[i][0]}-{i}" for w, i in CASES])
def test_null_time_or_diff_fails_every_operator(spark, good, nulls, what: str, index: int) -> None:
    name, op = OPERATORS[index]
    df = nulls[what]
    with pytest.raises(Exception) as raw:
        op(df, good).collect()
    text = str(raw.value)
    if isinstance(raw.value, NullValueError):  # dd_iterate runs eagerly and raises the class itself
        assert name == "dd_iterate" and text.startswith(f"{name}: a null {what}")
    else:  # from inside a job: the class name starts the library's message (after Spark's error prefix)
        assert f"NullValueError: {name}: a null {what}" in text, text[:2000]
    err = sd.unwrap(raw.value)
    assert isinstance(err, NullValueError) and f"a null {what}" in str(err)
    assert "SQLSTATE" not in str(err) and "_sd_" not in str(err)


def test_raising_gives_the_library_class(spark, bad) -> None:
    what, df = bad
    with pytest.raises(NullValueError, match=f"dd_as_of: a null {what}") as e:
        with sd.raising():
            df.dd_as_of(5).collect()
    assert e.value.__cause__ is not None  # the PySpark exception, kept for the full story


def _boom(g: pd.DataFrame) -> pd.DataFrame:
    raise ValueError("no twos please")


def test_raising_user_function_error(spark, good) -> None:
    with pytest.raises(UserFunctionError) as e:
        with sd.raising():
            good.dd_reduce("k", _boom, "n long").collect()
    msg = str(e.value)
    assert msg.startswith("dd_reduce: func raised ValueError: no twos please for key {'k': ")
    assert "at time" in msg


def test_raising_passes_other_errors(spark, good) -> None:
    with pytest.raises(ZeroDivisionError):
        with sd.raising():
            raise ZeroDivisionError("not ours")
    with pytest.raises(Exception) as e:
        with sd.raising():
            good.select(F.raise_error(F.lit("not ours"))).collect()
    assert not isinstance(e.value, SparkDifferentialError)
    assert sd.unwrap(e.value) is None
    assert sd.unwrap(ValueError("plain")) is None


def _none(g: pd.DataFrame) -> None:
    g.assign(diff=1)  # a forgotten `return`


@pytest.mark.parametrize("time_sql", ["time", "named_struct('a', time, 'b', time)"])
def test_reduce_function_returning_none(spark, good, time_sql: str) -> None:
    df = good.selectExpr("k", "v", f"{time_sql} as time", "diff")
    with pytest.raises(OutputSchemaError) as e:
        with sd.raising():
            df.dd_reduce("k", _none, "v long").collect()
    msg = str(e.value)
    assert "func returned None for key {'k': " in msg and "at time" in msg and "forgotten `return`" in msg


@pytest.mark.parametrize("time_sql", ["time", "named_struct('a', time, 'b', time)"])
def test_threshold_function_errors_name_row_and_time(spark, good, time_sql: str) -> None:
    df = good.selectExpr("k", "v", f"{time_sql} as time", "diff")
    with pytest.raises(OutputSchemaError) as e:
        with sd.raising():
            df.dd_threshold(lambda m: None).collect()
    msg = str(e.value)
    assert "returned None for multiplicity 1 (row {'k': " in msg and "'v': " in msg and "at time" in msg
    with pytest.raises(UserFunctionError) as e:
        with sd.raising():
            df.dd_threshold(lambda m: 1 // 0).collect()
    assert "ZeroDivisionError" in str(e.value) and "(row {'k': " in str(e.value)


BAD_FRONTIERS = [1.5, "abc", "5", [1.5], True, b"x", object(), None]


@pytest.mark.parametrize("frontier", BAD_FRONTIERS, ids=[repr(f) if type(f) is not object else "object()" for f in BAD_FRONTIERS])
def test_bad_frontiers(spark, good, frontier: Any) -> None:
    product = good.selectExpr("k", "v", "named_struct('a', time, 'b', time) as time", "diff")
    with no_spark_job(spark):
        if frontier is not None:  # frontier=None means "no frontier" for dd_consolidate
            for df in (good, product):
                with pytest.raises(FrontierError) as e:
                    df.dd_consolidate(frontier=frontier)
                assert str(e.value).startswith(f"dd_consolidate: frontier={frontier!r} does not fit the time type")
        for df in (good, product):
            with pytest.raises(FrontierError) as e:
                df.dd_as_of(frontier)
            assert str(e.value).startswith(f"dd_as_of: t={frontier!r} is not a time")


def test_good_frontier_spellings_still_work(spark, good) -> None:
    import numpy as np

    expected = sorted(rows_of(good.dd_consolidate(frontier=[5])))
    for f in (5, np.int64(5), (5,), {5}):
        assert sorted(rows_of(good.dd_consolidate(frontier=f))) == expected


@pytest.mark.parametrize(
    "body",
    [
        lambda d, o: d.unionByName(o).dd_distinct(),
        lambda d, o: d.union(o).dd_distinct(),
        lambda d, o: d.withColumn("time", F.lit(3).cast("long")),
        lambda d, o: d.select("k", "v", F.lit(1).alias("time"), "diff"),
    ],
    ids=["unionByName", "union", "time-replaced", "time-literal"],
)
def test_loop_rule_breaks(spark, good, body) -> None:
    with pytest.raises(LoopRuleError) as e:
        good.dd_iterate(lambda d: body(d, good))
    msg = str(e.value)
    assert msg.startswith("dd_iterate: ") and "dd_concat" in msg and "`time`" in msg
    assert "_sd_" not in msg and "loop1" not in msg and "AnalysisException" not in msg


def _renamed(df: DataFrame, names: dict[str, str]) -> DataFrame:
    return df.select(*[F.col(f"`{c.replace('`', '``')}`").alias(names.get(c, c)) for c in df.columns])


# (operator, how to run it on (left, right, key column, value column))
ODD_CASES: list[tuple[str, Callable[[DataFrame, DataFrame, str, str], DataFrame]]] = [
    ("dd_join", lambda a, b, k, v: a.dd_join(b, on=k)),
    ("dd_semijoin", lambda a, b, k, v: a.dd_semijoin(b, on=k)),
    ("dd_count", lambda a, b, k, v: a.dd_count(k)),
    ("dd_min", lambda a, b, k, v: a.dd_min(k, v)),
    ("dd_reduce", lambda a, b, k, v: a.dd_reduce(k, lambda g: g[[v, "diff"]], T.StructType([T.StructField(v, T.LongType())]))),
    ("dd_consolidate", lambda a, b, k, v: a.dd_consolidate(frontier=5)),
    ("dd_as_of", lambda a, b, k, v: a.dd_as_of(5).withColumn("time", F.lit(0).cast("long"))),
    ("dd_asof_join", lambda a, b, k, v: a.dd_asof_join(b, on=k)),
    ("dd_iterate", lambda a, b, k, v: a.dd_iterate(lambda d: d.dd_semijoin(b, on=k).dd_concat(d).dd_distinct())),
    ("from_upserts", lambda a, b, k, v: sd.from_upserts(a.drop("diff"), key=k)),
    ("dd_to_intervals", lambda a, b, k, v: a.dd_to_intervals().withColumnRenamed("valid_from", "time")
     .withColumn("diff", F.col("multiplicity")).drop("valid_to", "multiplicity")),
]


@pytest.mark.parametrize("name,op", ODD_CASES, ids=[n for n, _ in ODD_CASES])
def test_odd_column_names(spark, good, name: str, op: Callable[..., DataFrame]) -> None:
    """An operator gives the same rows for columns named ``a`b`` and ``a b.c`` as for plain names."""
    k, v = "a`b", "a b.c"
    got = op(_renamed(good, {"k": k, "v": v}), _renamed(_other(good), {"k": k}), k, v)
    want = op(good, _other(good), "k", "v")
    assert got.columns == [{"k": k, "v": v}.get(c, c) for c in want.columns]
    got_rows, want_rows = collect_many([got.toDF(*want.columns), want])  # one Spark action for both
    assert sorted(got_rows) == sorted(want_rows)


MALFORMED = [
    "SELECT nope {A}",
    "SELECT o.who {A} WHERE zzz > 1",
    "SELECT frobnicate(o.who) {A}",
    "SELECT o.who, count(*) {A} GROUP BY o.item",
    "SELECT o.who {A} ORDER BY q.x",
    "SELECT o.who + array(1) {A}",
    "SELECT * FROM (SELECT o.who, p.price {A}) t WHERE t.nope = 1",
    "WITH x AS (SELECT o.who, p.price {A}) SELECT y FROM x",
    "SELECT o.*, nope.* {A}",
    "SELECT sum(sum(p.price)) {A}",
    "SELECT p.nope {A}",
    "SELECT * FROM orders o ASOF JOIN nothere p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
    "SELECT nope FROM orders",
]


@pytest.mark.parametrize("query", MALFORMED)
def test_sql_errors_speak_of_the_users_names(spark, query: str) -> None:
    orders = spark.createDataFrame([("bacon", "ann", 3)], "item string, who string, ts long")
    prices = spark.createDataFrame([("bacon", 2, 1)], "item string, price int, ts long")
    text = query.format(A="FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item")
    with no_spark_job(spark):
        with pytest.raises(SqlError) as e:
            sd.sql(text, orders=orders, prices=prices)
    msg = str(e.value)
    assert msg.startswith("sd.sql: ")
    for internal in ("sdv", "sdasof", "sdl0", "sdr0", "sdk0", "p_ts", "p_item", "{", "pos "):
        assert internal not in msg, msg
