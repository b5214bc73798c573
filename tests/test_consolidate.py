"""``dd_consolidate`` through Spark: seed 004's worked example and random histories.

On ``(data, time, diff)``: consolidating as of a frontier ``F`` advances every time
to ``meet_{f in F} join(t, f)`` and sums diffs per ``(data, time)``; the result
accumulates like the input at every ``g >= F`` and is the unique consolidated form.
Both execution methods (``"spark"`` and ``"kernel"``) are checked against the
oracle's ``ref_consolidate``.
"""

from __future__ import annotations

import datetime as dt
import random
import zlib

import pytest
from helpers import cases, connect_params
from oracle import Coll, Product, Total, antichain, assert_updates_equal, ref_consolidate
from pyspark.sql import types as T
from spark_lattices import SPARK_LATTICES, build
from spark_support import coll_df, collect_many, micros_time

import spark_differential  # noqa: F401  (registers the methods)

METHODS = ["spark", "kernel"]
P2 = Product([Total(), Total()])

SEED004 = [
    (("a", "b"), (0, 0), 1),
    (("b", "c"), (0, 1), 1),
    (("a", "c"), (1, 0), 1),
    (("b", "c"), (1, 1), -1),
]
SEED004_EXPECTED = [
    ([(0, 3), (1, 2), (2, 0)], SEED004),
    ([(1, 2), (2, 0)], [(("a", "b"), (1, 0), 1), (("a", "c"), (1, 0), 1)]),
    (
        [(0, 3), (1, 1)],
        [(("a", "b"), (0, 1), 1), (("b", "c"), (0, 1), 1), (("a", "c"), (1, 1), 1), (("b", "c"), (1, 1), -1)],
    ),
    ([(1, 1)], [(("a", "b"), (1, 1), 1), (("a", "c"), (1, 1), 1)]),
]


@pytest.mark.parametrize("method", connect_params(METHODS))
def test_seed004_worked_example(spark, method: str) -> None:
    schema = "src string, dst string, time struct<x: bigint, y: bigint>, diff bigint"
    df = spark.createDataFrame([(*d, t, r) for d, t, r in SEED004], schema)
    outs = [df.dd_consolidate(frontier=fr, method=method) for fr, _ in SEED004_EXPECTED]
    for out in outs:
        assert out.columns == ["src", "dst", "time", "diff"]
        assert out.schema["time"].dataType.simpleString() == df.schema["time"].dataType.simpleString()
    for got, (fr, expected) in zip(collect_many(outs), SEED004_EXPECTED):
        assert_updates_equal(got, expected)
        # and the oracle agrees with the seed
        assert_updates_equal(ref_consolidate(Coll(("src", "dst"), SEED004), P2, fr).updates, expected)


def _frontiers(rng: random.Random, lat: object, n: int) -> list[list]:
    out = []
    for _ in range(n):
        ts = [lat.random(rng, 0, 6) for _ in range(rng.randint(1, 3))]  # type: ignore[attr-defined]
        out.append(antichain(ts, lat))  # type: ignore[arg-type]
    return out


NAMES = ["int", "product2", "product3", "nested", "altneu"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("method", METHODS)
def test_random_frontiers_vs_oracle(spark, name: str, method: str) -> None:
    sl = SPARK_LATTICES[name]
    rng = random.Random(zlib.crc32(f"{name}/{method}".encode()))
    c = cases(len(name) * 7 + 3, 30, ["x"], 10, sl.base, time_range=(0, 6))
    df, cc = build(spark, c, sl)  # "altneu": a differentiated collection
    lat = sl.lat
    frontiers = [None, *_frontiers(rng, lat, 2)] if name in ("int", "product2") else _frontiers(rng, lat, 2)
    outs = [df.dd_consolidate(frontier=fr, method=method) for fr in frontiers]
    for got, fr in zip(collect_many(outs), frontiers):
        assert_updates_equal(got, ref_consolidate(cc, lat, fr).updates)
    # columns and types survive
    assert outs[-1].columns == ["case", "x", "time", "diff"]
    assert outs[-1].schema["time"].dataType.simpleString() == df.schema["time"].dataType.simpleString()


@pytest.mark.parametrize("method", METHODS)
def test_dates_and_timestamps_as_times(spark, method: str) -> None:
    rng = random.Random(4)
    day0 = dt.date(2024, 2, 27)
    ts0 = dt.datetime(1969, 12, 31, 23, 59, 59, 999_998, tzinfo=dt.timezone.utc)  # straddles the epoch
    date_ups, ts_ups = [], []
    for _ in range(60):
        d = (rng.randrange(3),)
        k, r = rng.randrange(8), rng.choice([-2, -1, 1, 2])
        date_ups.append((d, day0 + dt.timedelta(days=k), r))
        ts_ups.append((d, ts0 + dt.timedelta(microseconds=k), r))
    dates, stamps = Coll(("x",), date_ups), Coll(("x",), ts_ups)
    ddf = coll_df(spark, dates, T.DateType())
    tdf = coll_df(spark, stamps, T.TimestampType())
    date_fronts = [day0 + dt.timedelta(days=3), [day0 + dt.timedelta(days=5), day0 + dt.timedelta(days=9)]]
    ts_fronts = [None, ts0 + dt.timedelta(microseconds=2)]
    d_outs = [ddf.dd_consolidate(frontier=f, method=method) for f in date_fronts]
    for out in d_outs:
        assert out.schema["time"].dataType == T.DateType()
    for got, f in zip(collect_many(d_outs), date_fronts):
        fr = None if f is None else (f if isinstance(f, list) else [f])
        assert_updates_equal(got, ref_consolidate(dates, Total(), fr).updates)
    t_outs = [tdf.dd_consolidate(frontier=f, method=method) for f in ts_fronts]
    for out in t_outs:
        assert out.schema["time"].dataType == T.TimestampType()
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

    def us(t: dt.datetime) -> int:
        return (t - epoch) // dt.timedelta(microseconds=1)

    for got, f in zip(collect_many([micros_time(o) for o in t_outs]), ts_fronts):
        exp = ref_consolidate(stamps, Total(), None if f is None else [f]).updates
        assert_updates_equal(got, [(d, us(t), r) for d, t, r in exp])
