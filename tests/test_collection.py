"""Building and reading collections: ``sd.collection``, ``sd.from_snapshots``,
``sd.from_upserts``, ``dd_as_of``, and the linear ``dd_negate`` / ``dd_concat``.

On ``(data, time, diff)``: ``collection`` only renames and validates (diff defaults
to +1); ``from_snapshots`` / ``from_upserts`` produce the unique consolidated
updates whose accumulation at each version is the listed snapshot / upserted state
(checked against the oracle's ``ref_from_snapshots`` / ``ref_from_upserts``);
``dd_as_of(t)`` is ``acc(t)``; negate and concat act update by update.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from helpers import cases, connect_params, rows_of
from oracle import (
    Coll,
    Product,
    Total,
    assert_updates_equal,
    consolidate,
    plain,
    ref_as_of,
    ref_concat,
    ref_from_snapshots,
    ref_from_upsert_log,
    ref_negate,
)
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_support import no_spark_job, sdf

import spark_differential as sd
from spark_differential.errors import (
    MissingColumnError,
    SchemaMismatchError,
    SparkDifferentialError,
    TimeTypeError,
    TimeTypeMismatchError,
)

P2 = Product([Total(), Total()])


def _counter(df: Any) -> Counter:
    cols = [c for c in df.columns if c != "diff"]
    return Counter({tuple(plain(r[c]) for c in cols): int(r["diff"]) for r in df.collect()})


# ---------------------------------------------------------------------------------
# sd.collection


@pytest.mark.connect
def test_collection_renames_and_casts(spark) -> None:
    raw = spark.createDataFrame([("bacon", 3, 2), ("eggs", 5, -1)], "item string, ts int, cnt int")
    c = sd.collection(raw, time="ts", diff="cnt")
    assert c.columns == ["item", "time", "diff"]
    assert c.schema["time"].dataType == T.IntegerType()  # the time keeps its type
    assert c.schema["diff"].dataType == T.LongType()  # the diff is cast to bigint
    assert sorted(rows_of(c)) == [(("bacon",), 3, 2), (("eggs",), 5, -1)]


def test_collection_diff_defaults(spark) -> None:
    raw = spark.createDataFrame([("a", 1), ("a", 1), ("b", 2)], "x string, time long")
    c = sd.collection(raw)
    assert c.columns == ["x", "time", "diff"]
    assert sorted(rows_of(c)) == [(("a",), 1, 1), (("a",), 1, 1), (("b",), 2, 1)]
    # an existing `diff` column is used when diff= is omitted
    with_diff = spark.createDataFrame([("a", 1, 3)], "x string, time long, diff short")
    c2 = sd.collection(with_diff)
    assert c2.schema["diff"].dataType == T.LongType()
    assert rows_of(c2) == [(("a",), 1, 3)]
    # struct times pass through
    st_raw = spark.createDataFrame([("a", (1, 2))], "x string, v struct<e: int, i: int>")
    c3 = sd.collection(st_raw, time="v")
    assert rows_of(c3) == [(("a",), (1, 2), 1)]


@pytest.mark.parametrize(
    ("rows", "schema", "kwargs", "what"),
    [
        ([("a", None, 1)], "x string, ts long, d long", {"time": "ts", "diff": "d"}, "time"),
        ([("a", 1, None)], "x string, ts long, d long", {"time": "ts", "diff": "d"}, "diff"),
        ([("a", (1, None))], "x string, ts struct<e: long, i: long>", {"time": "ts"}, "time"),
    ],
)
def test_collection_nulls_fail_the_job(spark, rows: list, schema: str, kwargs: dict, what: str) -> None:
    from spark_differential.errors import NullValueError

    df = spark.createDataFrame(rows, schema)
    # by default sd.collection checks eagerly and raises the named error
    with pytest.raises(NullValueError, match=f"the {what}"):
        sd.collection(df, **kwargs)
    # without the check, the plan's guard fails the job that meets the null
    c = sd.collection(df, check_nulls=False, **kwargs)
    with pytest.raises(Exception) as info:
        c.collect()
    assert "NullValueError" in str(info.value)
    assert f"null {what}" in str(info.value)


def test_collection_schema_errors(spark) -> None:
    raw = spark.createDataFrame([("a", 1, 1.5, "x")], "x string, ts long, d double, s string")
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError, match="no column `nope`"):
            sd.collection(raw, time="nope")
        with pytest.raises(MissingColumnError, match="no column `nope`"):
            sd.collection(raw, time="ts", diff="nope")
        with pytest.raises(SparkDifferentialError, match="integral"):
            sd.collection(raw, time="ts", diff="d")
        with pytest.raises(TimeTypeError, match="not a supported time type"):
            sd.collection(raw, time="s")
        with pytest.raises(TimeTypeError, match="not a supported time type"):
            sd.collection(raw, time="d")
        clash = spark.createDataFrame([(1, 2)], "time long, ts long")
        with pytest.raises(SchemaMismatchError, match="already has a data column named `time`"):
            sd.collection(clash, time="ts")


# ---------------------------------------------------------------------------------
# from_snapshots / from_upserts


def _random_snapshots(rng: random.Random, n: int) -> list[tuple[tuple, int]]:
    versions = sorted(rng.sample(range(-3, 40), 8))
    rows = []
    for v in versions:
        for _ in range(rng.randint(1, n)):
            rows.append(((rng.randrange(3), rng.choice(["p", "q", None])), v))
    return rows


@pytest.mark.connect
def test_from_snapshots_vs_oracle(spark) -> None:
    rng = random.Random(7)
    rows = _random_snapshots(rng, 6)
    df = spark.createDataFrame([(*d, v) for d, v in rows], "x long, s string, version long")
    out = sd.from_snapshots(df)
    assert out.columns == ["x", "s", "time", "diff"]
    assert_updates_equal(rows_of(out), ref_from_snapshots(rows, ("x", "s")).updates)
    # the accumulation at each listed version is that version's snapshot
    coll = Coll(("x", "s"), rows_of(out))
    for v in {v for _, v in rows}:
        assert ref_as_of(coll, v, Total()) == Counter(d for d, vv in rows if vv == v)


def test_from_snapshots_other_version_column_and_dates(spark) -> None:
    import datetime as dt

    d0 = dt.date(2020, 1, 1)
    rows = [(("a",), d0), (("b",), d0), (("b",), d0 + dt.timedelta(days=3)), (("c",), d0 + dt.timedelta(days=3))]
    df = spark.createDataFrame([(*d, v) for d, v in rows], "x string, day date")
    out = sd.from_snapshots(df, version="day")
    assert out.schema["time"].dataType == T.DateType()
    assert_updates_equal(rows_of(out), ref_from_snapshots(rows, ("x",)).updates)


@pytest.mark.parametrize("with_deletes", connect_params([False, True], True))
def test_from_upserts_vs_oracle(spark, with_deletes: bool) -> None:
    rng = random.Random(11 + with_deletes)
    rows = []
    for _ in range(80):
        key = (rng.choice(["bacon", "eggs", "spam", None]), rng.randrange(2))
        val = (rng.randrange(4),)
        rows.append((key, val, rng.randrange(10), with_deletes and rng.random() < 0.2))
    df = spark.createDataFrame([(*k, *v, t, dl) for k, v, t, dl in rows], "item string, shop int, price int, ts long, gone boolean")
    if with_deletes:
        out = sd.from_upserts(df, key=["item", "shop"], time="ts", deleted="gone")
    else:
        out = sd.from_upserts(df.drop("gone"), key=["item", "shop"], time="ts")
    assert out.columns == ["item", "shop", "price", "time", "diff"]
    assert_updates_equal(rows_of(out), ref_from_upsert_log(rows).updates)


def test_from_upserts_by_hand(spark) -> None:
    df = spark.createDataFrame(
        [("bacon", 3, 1, False), ("bacon", 4, 5, False), ("bacon", None, 7, True), ("eggs", 2, 5, False), ("eggs", 2, 6, False)],
        "item string, price int, ts long, gone boolean",
    )
    out = sd.from_upserts(df, key="item", time="ts", deleted="gone")
    assert_updates_equal(
        rows_of(out),
        [(("bacon", 3), 1, 1), (("bacon", 3), 5, -1), (("bacon", 4), 5, 1), (("bacon", 4), 7, -1), (("eggs", 2), 5, 1)],
    )


def test_loader_errors(spark) -> None:
    df = spark.createDataFrame([("a", 1, (1, 2), "x")], "x string, version long, sv struct<a: int, b: int>, s string")
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError):
            sd.from_snapshots(df, version="nope")
        with pytest.raises(TimeTypeError, match="totally ordered"):
            sd.from_snapshots(df.drop("version"), version="sv")
        with pytest.raises(TimeTypeError):
            sd.from_snapshots(df, version="s")
        with pytest.raises(MissingColumnError):
            sd.from_upserts(df, key="nope", time="version")
        with pytest.raises(TypeError, match="boolean"):
            sd.from_upserts(df, key="x", time="version", deleted="s")


# ---------------------------------------------------------------------------------
# dd_as_of


@pytest.mark.connect
def test_as_of_int(spark) -> None:
    c = cases(5, 10, ["x"], 8, Total(), time_range=(0, 6))
    df = sdf(spark, c, Total())
    for t in (0, 3, 6):
        assert _counter(df.dd_as_of(t)) == ref_as_of(c, t, Total())
    assert df.dd_as_of(3).columns == ["case", "x", "diff"]


def test_as_of_struct(spark) -> None:
    c = cases(6, 10, ["x"], 8, P2, time_range=(0, 4))
    df = sdf(spark, c, P2)
    for t in [(1, 3), {"a": 3, "b": 1}, Row(a=4, b=4)]:
        key = tuple(t.values()) if isinstance(t, dict) else tuple(t)
        assert _counter(df.dd_as_of(t)) == ref_as_of(c, key, P2), t


# ---------------------------------------------------------------------------------
# dd_negate / dd_concat


@pytest.mark.connect
def test_negate_and_concat(spark) -> None:
    a = cases(8, 6, ["x", "y"], 6, P2)
    b = cases(9, 6, ["x", "y"], 6, P2)
    da, db = sdf(spark, a, P2), sdf(spark, b, P2)
    # linear operators act update by update; compare consolidated
    assert_updates_equal(consolidate(rows_of(da.dd_negate())), ref_negate(a).updates)
    # columns are matched by name, not position
    shuffled = db.select("y", "case", "time", "diff", "x")
    cat = da.dd_concat(shuffled, da.dd_negate())
    assert cat.columns == ["case", "x", "y", "time", "diff"]
    assert_updates_equal(consolidate(rows_of(cat)), ref_concat(a, b, Coll(a.cols, ref_negate(a).updates)).updates)
    assert_updates_equal(rows_of(cat.dd_consolidate()), b.updates)


def test_concat_ordinary_into_differentiated(spark) -> None:
    a = Coll(("x",), [((1,), 2, 1)])
    da = sdf(spark, a, Total())
    out = da.differentiate().dd_concat(da)
    assert_updates_equal(rows_of(out.dd_consolidate()), [((1,), (2, False), 2), ((1,), (2, True), -1)])


def test_concat_errors(spark) -> None:
    a = spark.createDataFrame([(1, 1, 1)], "x long, time long, diff long")
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError, match="same data columns"):
            a.dd_concat(spark.createDataFrame([(1, 1, 1)], "z long, time long, diff long"))
        with pytest.raises(SchemaMismatchError, match="column `x`"):
            a.dd_concat(spark.createDataFrame([("1", 1, 1)], "x string, time long, diff long"))
        with pytest.raises(TimeTypeMismatchError):
            a.dd_concat(spark.createDataFrame([(1, (1, 1), 1)], "x long, time struct<a: long, b: long>, diff long"))
        with pytest.raises(TimeTypeMismatchError):
            a.dd_concat(spark.createDataFrame([(1, 1, 1)], "x long, time int, diff long"))
        with pytest.raises(MissingColumnError):
            a.dd_concat(a.select("x", "time", F.col("diff").alias("d")))
