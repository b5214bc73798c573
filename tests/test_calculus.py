"""Seed 003's calculus through Spark: ``differentiate`` / ``integrate`` and as-of joins.

* ``integrate(differentiate(x))`` gives back exactly the updates of ``x`` (no "up to
  a constant"), for integer, date, timestamp and struct times.
* ``dd_asof_join`` (``method="kernel"`` and ``method="calculus"``; ``how`` inner and
  left; ``strict`` or not) equals the oracle's direct definition ``ref_asof_join``
  when prices are a changing collection with retractions, and equals DuckDB's
  ``ASOF [LEFT] JOIN`` on plain tables (prices built with ``sd.from_upserts``).
* ``method="upserts"`` (what ``"auto"`` picks for a ``sd.from_upserts`` result) equals
  the other methods and the oracle on logs with deletions, several rows at one
  (key, time), two key columns and timestamp times; it refuses other inputs before
  any Spark job.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from typing import Any

import duckdb
import pandas as pd
import pytest
from helpers import cases, connect_params, rows_of
from oracle import (
    Coll,
    Product,
    Total,
    assert_updates_equal,
    ref_asof_join,
    ref_differentiate,
    ref_from_upsert_log,
    ref_integrate,
)
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_support import coll_df, collect_many, micros_time, no_spark_job, sdf

import spark_differential as sd
from spark_differential.errors import SchemaMismatchError

P2 = Product([Total(), Total()])


# ---------------------------------------------------------------------------------
# differentiate / integrate


@pytest.mark.connect
def test_integrate_differentiate_roundtrip_int_and_struct(spark) -> None:
    nested = Product([Total(), Product([Total(), Total()])])
    for lat in (Total(), P2, nested):
        c = cases(3, 10, ["x", "y"], 8, lat)
        df = sdf(spark, c, lat)
        d = df.differentiate()
        assert d.schema["time"].dataType.simpleString() == f"struct<time:{df.schema['time'].dataType.simpleString()},neu:boolean>"
        back = d.integrate()
        assert back.columns == df.columns
        assert back.schema["time"].dataType.simpleString() == df.schema["time"].dataType.simpleString()
        got_d, got_back = rows_of(d.dd_consolidate()), rows_of(back)
        # exactly the same updates, row for row (not only the same accumulations)
        assert Counter(got_back) == Counter(c.updates), lat
        assert_updates_equal(got_d, ref_differentiate(c, lat)[0].updates)
        assert_updates_equal(ref_integrate(ref_differentiate(c, lat)[0]).updates, c.updates)


def test_integrate_differentiate_roundtrip_dates_and_timestamps(spark) -> None:
    c = cases(4, 10, ["x"], 8, Total(), time_range=(-3, 9))
    day0 = dt.date(2023, 12, 30)
    ts0 = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    dates = Coll(c.cols, [(d, day0 + dt.timedelta(days=t), r) for d, t, r in c.updates])
    stamps = Coll(c.cols, [(d, ts0 + dt.timedelta(seconds=t, microseconds=7), r) for d, t, r in c.updates])
    ddf = coll_df(spark, dates, T.DateType())
    back = ddf.differentiate().integrate()
    assert back.schema["time"].dataType == T.DateType()
    assert Counter(rows_of(back)) == Counter(dates.updates)
    tdf = coll_df(spark, stamps, T.TimestampType())
    back_t = tdf.differentiate().integrate()
    assert back_t.schema["time"].dataType == T.TimestampType()
    expected = Counter((d, t * 1_000_000 + 7, r) for d, t, r in c.updates)
    assert Counter(rows_of(micros_time(back_t))) == expected


@pytest.mark.connect
def test_differentiate_by_hand(spark) -> None:
    df = spark.createDataFrame([("bacon", 5, 2)], "item string, time long, diff long")
    assert sorted(rows_of(df.differentiate())) == [(("bacon",), (5, False), 2), (("bacon",), (5, True), -2)]
    assert rows_of(df.dd_delay()) == [(("bacon",), (5, True), 2)]


# ---------------------------------------------------------------------------------
# as-of joins against the oracle


def _price_history(rng: random.Random, lat: Any, n_cases: int) -> Coll:
    """Random prices with retractions whose accumulation is never negative.

    Every retraction ``(p, t2, -1)`` follows an insertion ``(p, t1, +1)`` with ``t1 <= t2``.
    """
    ups = []
    for case in range(n_cases):
        for _ in range(rng.randint(0, 6)):
            d = (case, rng.randrange(3), rng.randrange(5))  # (case, item, price)
            t1 = lat.random(rng, 0, 4)
            m = rng.choice([1, 1, 2])
            ups.append((d, t1, m))
            if rng.random() < 0.6:
                t2 = lat.join(t1, lat.random(rng, 0, 5))
                ups.append((d, t2, -m))
    return Coll(("case", "item", "price"), ups)


ALL_VARIANTS = [(m, how, strict) for m in ("kernel", "calculus") for how in ("inner", "left") for strict in (False, True)]
# the calculus form costs three operators for how="left"; two of its variants suffice
# where another test runs all of them
SOME_VARIANTS = [v for v in ALL_VARIANTS if v[0] == "kernel"] + [("calculus", "inner", True), ("calculus", "left", False)]


@pytest.mark.parametrize("name", connect_params(["int", "product2"], "int"))
def test_asof_join_vs_oracle(spark, name: str) -> None:
    lat = Total() if name == "int" else P2
    VARIANTS = ALL_VARIANTS if name == "int" else SOME_VARIANTS  # noqa: N806
    rng = random.Random(21 if name == "int" else 22)
    prices = _price_history(rng, lat, 25)
    orders = cases(23, 25, ["item", "who"], 8, lat, time_range=(0, 5))  # diffs of both signs
    do, dp = sdf(spark, orders, lat), sdf(spark, prices, lat)
    on = ["case", "item"]
    outs = [do.dd_asof_join(dp, on=on, how=how, strict=strict, method=m) for m, how, strict in VARIANTS]
    for out in outs:
        assert out.columns == ["case", "item", "who", "price", "time", "diff"]
        assert out.schema["time"].dataType.simpleString() == do.schema["time"].dataType.simpleString()
    for got, (m, how, strict) in zip(collect_many(outs), VARIANTS):
        expected = ref_asof_join(orders, prices, on, lat, strict=strict, how=how)
        try:
            assert_updates_equal(got, expected.updates)
        except AssertionError as e:
            raise AssertionError(f"method={m} how={how} strict={strict}: {e}") from None


@pytest.mark.parametrize("name", ["int", "product2"])
def test_asof_join_without_keys_vs_oracle(spark, name: str) -> None:
    """``on=[]``: one global timeline of prices (with retractions), every variant in one job."""
    lat = Total() if name == "int" else P2
    variants = ALL_VARIANTS if name == "int" else SOME_VARIANTS
    rng = random.Random(41 if name == "int" else 42)
    history = _price_history(rng, lat, 4)  # four "cases", but no key: one timeline of 4 * (0..6) rows
    prices = Coll(("shop", "item", "price"), history.updates)
    # diffs of both signs; times from -2: some orders come before every price
    orders = cases(43 if name == "int" else 44, 3, ["who"], 8, lat, time_range=(-2, 5))
    orders = Coll(("who", "n"), orders.updates)
    do, dp = sdf(spark, orders, lat), sdf(spark, prices, lat)
    outs = [do.dd_asof_join(dp, on=[], how=how, strict=strict, method=m) for m, how, strict in variants]
    for out in outs:
        assert out.columns == ["who", "n", "shop", "item", "price", "time", "diff"]
    for got, (m, how, strict) in zip(collect_many(outs), variants):
        expected = ref_asof_join(orders, prices, [], lat, strict=strict, how=how)
        try:
            assert_updates_equal(got, expected.updates)
        except AssertionError as e:
            raise AssertionError(f"method={m} how={how} strict={strict}: {e}") from None
    # the data exercises the join: orders meeting several prices, and orders meeting none
    inner = ref_asof_join(orders, prices, [], lat).updates
    assert len({d[:2] for d, _, _ in inner}) < len(inner)
    assert len(ref_asof_join(orders, prices, [], lat, how="left").updates) > len(inner)


def test_asof_join_null_keys(spark) -> None:
    lat = Total()
    orders = Coll(("item", "who"), [(("a", 1), 3, 1), ((None, 2), 3, 1), (("b", 3), 0, 1)])
    prices = Coll(("item", "price"), [(("a", 5), 1, 1), ((None, 6), 1, 1), (("b", 7), 1, 1)])
    types = {"item": T.StringType()}
    do, dp = sdf(spark, orders, lat, types), sdf(spark, prices, lat, types)
    variants = [("kernel", "inner"), ("kernel", "left"), ("calculus", "left")]
    outs = [do.dd_asof_join(dp, on="item", how=how, method=m) for m, how in variants]
    for got, (m, how) in zip(collect_many(outs), variants):
        assert_updates_equal(got, ref_asof_join(orders, prices, "item", lat, how=how).updates)
        if how == "left":
            assert ((None, 2, None), 3, 1) in got, m


# ---------------------------------------------------------------------------------
# as-of joins against DuckDB's ASOF JOIN


def _duck_asof(orders: pd.DataFrame, history: pd.DataFrame, how: str, strict: bool) -> Counter:
    con = duckdb.connect()
    con.register("orders", orders)
    con.register("prices", history)
    join = "ASOF LEFT JOIN" if how == "left" else "ASOF JOIN"
    op = ">" if strict else ">="
    rows = con.sql(
        f"SELECT o.item, o.who, p.price, o.ts FROM orders o {join} prices p ON o.item = p.item AND o.ts {op} p.ts"
    ).fetchall()
    con.close()
    return Counter((item, who, None if price is None else int(price), int(ts)) for item, who, price, ts in rows)


def test_asof_join_vs_duckdb(spark) -> None:
    rng = random.Random(5)
    items = [f"item{i}" for i in range(12)]
    hist_rows = []
    for item in items[:10]:  # two items never get a price
        for ts in sorted(rng.sample(range(0, 400), rng.randint(1, 12))):  # unique timestamps per item
            hist_rows.append((item, rng.randrange(1, 100), ts))
    order_rows = [(rng.choice(items), rng.randrange(50), rng.randrange(-5, 420)) for _ in range(600)]
    history = pd.DataFrame(hist_rows, columns=["item", "price", "ts"])
    orders_pd = pd.DataFrame(order_rows, columns=["item", "who", "ts"])
    prices = sd.from_upserts(spark.createDataFrame(history).coalesce(1), key="item", time="ts")
    orders = sd.collection(spark.createDataFrame(orders_pd).coalesce(1), time="ts")
    variants = [(m, how, strict) for m in ("upserts", "kernel") for how in ("inner", "left") for strict in (False, True)]
    variants += [("calculus", "inner", False), ("calculus", "left", True)]
    outs = [orders.dd_asof_join(prices, on="item", how=how, strict=strict, method=m) for m, how, strict in variants]
    for got, (m, how, strict) in zip(collect_many(outs), variants):
        assert all(r > 0 for _, _, r in got)
        ours = Counter({(*d, t): r for d, t, r in got})
        theirs = _duck_asof(orders_pd, history, how, strict)
        assert ours == theirs, f"method={m} how={how} strict={strict}: {sorted((ours - theirs).items())[:5]} / {sorted((theirs - ours).items())[:5]}"


def test_asof_join_prices_without_orders(spark) -> None:
    """Key buckets holding prices but no orders (the kernel then sees no orders at all)."""
    lat = Total()
    orders = Coll(("item", "who"), [((0, 1), 5, 1)])
    prices = Coll(("item", "price"), [((i, 10 * i), 1, 1) for i in range(40)])
    do, dp = sdf(spark, orders, lat), sdf(spark, prices, lat)
    outs = [do.dd_asof_join(dp, on="item", how=how) for how in ("inner", "left")]
    for got in collect_many(outs):
        assert_updates_equal(got, [((0, 1, 0), 5, 1)])


def test_asof_join_from_upsert_log_vs_oracle(spark) -> None:
    """method="upserts" (the log itself) == "kernel" / "calculus" (the collection) == the oracle."""
    rng = random.Random(31)
    log = []
    for _ in range(60):
        key = (rng.choice(["bacon", "eggs", "spam"]), rng.randrange(2))
        # a narrow time range: several rows at one (key, time) happen (the multiset case)
        log.append((key, (rng.randrange(4),), rng.randrange(12), rng.random() < 0.15))
    orders = [((rng.choice(["bacon", "eggs", "spam", "ham"]), rng.randrange(2), rng.randrange(5)), rng.randrange(-1, 14), rng.choice([1, 1, 2, -1])) for _ in range(80)]
    hist = spark.createDataFrame([(*k, *v, t, dl) for k, v, t, dl in log], "item string, shop long, price long, ts long, gone boolean")
    prices = sd.from_upserts(hist, key=["shop", "item"], time="ts", deleted="gone")
    od = spark.createDataFrame([(*d, t, r) for d, t, r in orders], "item string, shop long, who long, time long, diff long")
    variants = [(m, how, strict) for m in ("upserts", "auto") for how in ("inner", "left") for strict in (False, True)]
    variants += [("kernel", "left", True), ("calculus", "inner", False)]
    outs = [od.dd_asof_join(prices, on=["item", "shop"], how=how, strict=strict, method=m) for m, how, strict in variants]
    ref_prices = ref_from_upsert_log(log, ("item", "shop", "price"))
    for out in outs:
        assert out.columns == ["item", "shop", "who", "price", "time", "diff"]
    for got, (m, how, strict) in zip(collect_many(outs), variants):
        expected = ref_asof_join(Coll(("item", "shop", "who"), orders), ref_prices, ["item", "shop"], Total(), strict=strict, how=how)
        try:
            assert_updates_equal(got, expected.updates)
        except AssertionError as e:
            raise AssertionError(f"method={m} how={how} strict={strict}: {e}") from None


def test_asof_join_from_upsert_log_without_keys_vs_oracle(spark) -> None:
    """``sd.from_upserts(key=[])`` + ``on=[]``: the log is one timeline (deletions, several rows at one time)."""
    rng = random.Random(32)
    log = [((), (rng.randrange(4), rng.randrange(3)), rng.randrange(12), rng.random() < 0.15) for _ in range(25)]
    orders = [((rng.randrange(5),), rng.randrange(-1, 14), rng.choice([1, 1, 2, -1])) for _ in range(30)]
    hist = spark.createDataFrame([(*v, t, dl) for _, v, t, dl in log], "price long, shop long, ts long, gone boolean")
    prices = sd.from_upserts(hist.coalesce(1), key=[], time="ts", deleted="gone")
    od = spark.createDataFrame([(*d, t, r) for d, t, r in orders], "who long, time long, diff long").coalesce(1)
    variants = [(m, how, strict) for m in ("upserts",) for how in ("inner", "left") for strict in (False, True)]
    variants += [("kernel", "left", False), ("calculus", "inner", True)]
    outs = [od.dd_asof_join(prices, on=None if m == "kernel" else [], how=how, strict=strict, method=m) for m, how, strict in variants]
    ref_prices = ref_from_upsert_log(log, ("price", "shop"))
    for out in outs:
        assert out.columns == ["who", "price", "shop", "time", "diff"]
    # the collection from_upserts builds, read in the same job (as rows with who = NULL)
    as_rows = prices.select(F.lit(None).cast("long").alias("who"), "price", "shop", "time", "diff")
    results = collect_many([*outs, as_rows])
    assert_updates_equal([((p, s), t, r) for (_, p, s), t, r in results[-1]], ref_prices.updates)
    for got, (m, how, strict) in zip(results, variants):
        expected = ref_asof_join(Coll(("who",), orders), ref_prices, [], Total(), strict=strict, how=how)
        try:
            assert_updates_equal(got, expected.updates)
        except AssertionError as e:
            raise AssertionError(f"method={m} how={how} strict={strict}: {e}") from None


def test_asof_join_from_upsert_log_timestamps(spark) -> None:
    """Timestamp times (microsecond leaves spanning decades) through the upsert-log path."""
    t0 = dt.datetime(1990, 1, 1, tzinfo=dt.timezone.utc)
    at = [t0 + dt.timedelta(days=d, microseconds=us) for d, us in [(0, 0), (9000, 1), (9000, 2), (20000, 0)]]
    hist = spark.createDataFrame([("a", 1, at[0]), ("a", 2, at[1]), ("b", 3, at[2])], "item string, price int, ts timestamp")
    orders = sd.collection(
        spark.createDataFrame([("a", "x", at[1]), ("a", "y", at[3]), ("b", "z", at[1]), ("a", "w", at[0])], "item string, who string, ts timestamp"),
        time="ts",
    )
    prices = sd.from_upserts(hist, key="item", time="ts")
    got = {m: sorted(rows_of(orders.dd_asof_join(prices, on="item", method=m))) for m in ("upserts", "kernel")}
    assert got["upserts"] == got["kernel"]
    assert sorted((d, r) for d, _, r in got["upserts"]) == [(("a", "w", 1), 1), (("a", "x", 2), 1), (("a", "y", 2), 1)]


def test_asof_join_upserts_method_choice(spark) -> None:
    """"upserts" needs the exact from_upserts result; "auto" falls back to the kernel otherwise."""
    hist = spark.createDataFrame([("a", 1, 1), ("a", 2, 5)], "item string, price int, ts long")
    prices = sd.from_upserts(hist, key="item", time="ts")
    orders = spark.createDataFrame([("a", "x", 3, 1), ("a", "y", 6, 1)], "item string, who string, time long, diff long")
    changed = prices.where("price > 0")  # a transformation: an ordinary collection again
    with no_spark_job(spark):
        with pytest.raises(SchemaMismatchError, match="not a DataFrame returned by sd.from_upserts"):
            orders.dd_asof_join(changed, on="item", method="upserts")
        by_shop = sd.from_upserts(hist.withColumn("shop", F.lit(1)), key=["item", "shop"], time="ts")
        with pytest.raises(SchemaMismatchError, match="not the upsert key"):
            orders.dd_asof_join(by_shop, on="item", method="upserts")
    expected = [(("a", "x", 1), 3, 1), (("a", "y", 2), 6, 1)]
    assert_updates_equal(rows_of(orders.dd_asof_join(changed, on="item")), expected)
    assert_updates_equal(rows_of(orders.dd_asof_join(prices, on="item")), expected)


def test_asof_docstring_examples_run(spark) -> None:
    """The runnable examples of ``dd_asof_join`` and ``sd.from_upserts`` (keyed and keyless)."""
    import doctest

    from spark_differential.operators.calculus import dd_asof_join

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for fn in (dd_asof_join, sd.from_upserts):
        for test in doctest.DocTestFinder().find(fn, globs={}):
            runner.run(test)
    assert runner.failures == 0 and runner.tries >= 10
