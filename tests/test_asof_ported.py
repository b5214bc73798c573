"""Cases of pandas' and Spark's as-of join test suites, run through ``dd_merge_asof``.

Translated by hand, case by case, from pandas ``tests/reshape/merge/test_merge_asof.py``
(``merge_asof``) and Spark's ``DataFrameAsOfJoinSuite`` (``Dataset.joinAsOf``): the
inputs and the expected rows are theirs, written as Python data (pandas' NaN is None
here).  Spark's ``joinAsOf`` keeps both sides' columns: its cases name the right's
columns apart (``left_on``/``right_on``, ``left_by``/``right_by``) to get the same
columns.  Also the match-column types pandas and Spark support, against the
brute-force oracle: doubles, decimals (narrow and wide), strings, dates, timestamps
with and without time zone, and mixed integer widths.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from asof_oracle import Spec, snapshot
from asof_support import assert_all

import spark_differential as sd


@dataclass
class Case:
    name: str
    left: tuple[str, list[tuple]]  # (schema DDL, rows)
    right: tuple[str, list[tuple]]
    kwargs: dict[str, Any]
    expected: list[tuple]
    columns: list[str] = field(default_factory=list)


def _ts(ms: int, day: str = "2016-05-25") -> dt.datetime:
    base = dt.datetime.fromisoformat(f"{day} 13:30:00")
    return base + dt.timedelta(milliseconds=ms)


AB = ("a long, left_val string", [(1, "a"), (5, "b"), (10, "c")])
RIGHT_AB = ("a long, right_val long", [(1, 1), (2, 2), (3, 3), (6, 6), (7, 7)])
RIGHT_AB11 = ("a long, right_val long", [(1, 1), (2, 2), (3, 3), (7, 7), (11, 11)])
RIGHT_AB6 = ("a long, right_val long", [(1, 1), (3, 3), (4, 4), (6, 6), (11, 11)])
TRADES = ("time timestamp_ntz, ticker string, price double, quantity long",
          [(_ts(23), "MSFT", 51.95, 75), (_ts(38), "MSFT", 51.95, 155), (_ts(48), "GOOG", 720.77, 100),
           (_ts(48), "GOOG", 720.92, 100), (_ts(48), "AAPL", 98.0, 100)])
QUOTES = ("time timestamp_ntz, ticker string, bid double, ask double",
          [(_ts(23), "GOOG", 720.50, 720.93), (_ts(23), "MSFT", 51.95, 51.96), (_ts(30), "MSFT", 51.97, 51.98),
           (_ts(41), "MSFT", 51.99, 52.00), (_ts(48), "GOOG", 720.50, 720.93), (_ts(49), "AAPL", 97.99, 98.01),
           (_ts(72), "GOOG", 720.50, 720.88), (_ts(75), "MSFT", 52.01, 52.03)])
MULTI_T = [(_ts(23), "MSFT", "ARCA", 51.95, 75), (_ts(23), "MSFT", "NSDQ", 51.95, 155),
           (_ts(46), "GOOG", "NSDQ", 720.77, 100), (_ts(48), "GOOG", "BATS", 720.92, 100),
           (_ts(50), "AAPL", "NSDQ", 98.00, 100)]
MULTI_Q = [(_ts(23), "GOOG", "BATS", 720.51, 720.92), (_ts(23), "MSFT", "NSDQ", 51.95, 51.96),
           (_ts(30), "MSFT", "ARCA", 51.97, 51.98), (_ts(41), "MSFT", "ARCA", 51.99, 52.00),
           (_ts(45), "GOOG", "NSDQ", 720.50, 720.93), (_ts(49), "AAPL", "ARCA", 97.99, 98.01)]
MULTI_WANT = [(51.95, 75, None, None), (51.95, 155, 51.95, 51.96), (720.77, 100, 720.50, 720.93),
              (720.92, 100, 720.51, 720.92), (98.00, 100, None, None)]
TICKER_INT = {"MSFT": 0, "GOOG": 1, "AAPL": 2}
EX2 = (_ts(13, "2016-07-15"), _ts(0, "2016-07-15"))
DF1 = ("time timestamp_ntz, username string", [(_ts(30, "2016-07-15"), "bob")])
DF2 = ("time timestamp_ntz, version long", [(_ts(0, "2016-07-15"), 1), (_ts(30, "2016-07-15"), 2)])
BY_A = ("a long, b string, left_val string", [(1, "X", "a"), (5, "X", "b"), (10, "Y", "c"), (12, "Z", "d"),
                                              (15, "Y", "e")])
BY_B = ("a long, b string, right_val long", [(1, "X", 1), (6, "Z", 6), (11, "Y", 11), (15, "Z", 15),
                                             (16, "Y", 16)])
SPARK_L = ("a int, b string, left_val string", [(1, "x", "a"), (5, "y", "b"), (10, "z", "c")])
SPARK_R = ("ra int, rb string, right_val int", [(1, "v", 1), (2, "w", 2), (3, "x", 3), (6, "y", 6), (7, "z", 7)])
SPARK_ON = {"left_on": "a", "right_on": "ra"}
PRICE = ("symbol string, price double",
         [("A", 5.01), ("B", 0.0023), ("C", 25.13), ("D", 340.05), ("E", 30.78), ("F", 1040.90), ("G", 0.0078)])
MPV = ("price double, mpv double", [(0.0, 0.0001), (1.0, 0.01), (100.0, 0.05)])

PANDAS = [
    Case("examples1", AB, RIGHT_AB, {"on": "a"}, [(1, "a", 1), (5, "b", 3), (10, "c", 7)]),
    Case("examples3 forward", AB, RIGHT_AB, {"on": "a", "direction": "forward"},
         [(1, "a", 1), (5, "b", 6), (10, "c", None)]),
    Case("examples4 nearest", AB, RIGHT_AB, {"on": "a", "direction": "nearest"},
         [(1, "a", 1), (5, "b", 6), (10, "c", 7)]),
    Case("examples2 tolerance 10ms, no exact", TRADES, QUOTES,
         {"on": "time", "by": "ticker", "tolerance": dt.timedelta(milliseconds=10), "allow_exact_matches": False},
         [(_ts(23), "MSFT", 51.95, 75, None, None), (_ts(38), "MSFT", 51.95, 155, 51.97, 51.98),
          (_ts(48), "GOOG", 720.77, 100, None, None), (_ts(48), "GOOG", 720.92, 100, None, None),
          (_ts(48), "AAPL", 98.0, 100, None, None)]),
    Case("multiby", ("time timestamp_ntz, ticker string, exch string, price double, quantity long", MULTI_T),
         ("time timestamp_ntz, ticker string, exch string, bid double, ask double", MULTI_Q),
         {"on": "time", "by": ["ticker", "exch"]},
         [(*t[:3], *w) for t, w in zip(MULTI_T, MULTI_WANT)]),
    Case("multiby heterogeneous types",
         ("time timestamp_ntz, ticker long, exch string, price double, quantity long",
          [(t[0], TICKER_INT[t[1]], *t[2:]) for t in MULTI_T]),
         ("time timestamp_ntz, ticker long, exch string, bid double, ask double",
          [(q[0], TICKER_INT[q[1]], *q[2:]) for q in MULTI_Q]),
         {"on": "time", "by": ["ticker", "exch"]},
         [(t[0], TICKER_INT[t[1]], t[2], *w) for t, w in zip(MULTI_T, MULTI_WANT)]),
    Case("with duplicates, no by", ("key long, left_val long", [(1, 1), (1, 2), (3, 3)]),
         ("key long, right_val long", [(1, 1), (2, 2), (2, 3)]), {"on": "key"},
         [(1, 1, 1), (1, 2, 1), (3, 3, 3)]),
    Case("tolerance forward", AB, RIGHT_AB11, {"on": "a", "direction": "forward", "tolerance": 1},
         [(1, "a", 1), (5, "b", None), (10, "c", 11)]),
    Case("tolerance nearest", AB, RIGHT_AB11, {"on": "a", "direction": "nearest", "tolerance": 1},
         [(1, "a", 1), (5, "b", None), (10, "c", 11)]),
    Case("tolerance float", ("a double, left_val string", [(1.1, "a"), (3.5, "b"), (10.9, "c")]),
         ("a double, right_val double", [(1.0, 1.0), (2.5, 2.5), (3.3, 3.3), (7.5, 7.5), (11.5, 11.5)]),
         {"on": "a", "direction": "nearest", "tolerance": 0.5}, [(1.1, "a", 1.0), (3.5, "b", 3.3), (10.9, "c", None)]),
    Case("allow_exact_matches forward", AB, RIGHT_AB11, {"on": "a", "direction": "forward", "allow_exact_matches": False},
         [(1, "a", 2), (5, "b", 7), (10, "c", 11)]),
    Case("allow_exact_matches nearest", AB, RIGHT_AB11, {"on": "a", "direction": "nearest", "allow_exact_matches": False},
         [(1, "a", 2), (5, "b", 3), (10, "c", 11)]),
    Case("allow_exact_matches and tolerance 2a", DF1, DF2, {"on": "time"}, [(_ts(30, "2016-07-15"), "bob", 2)]),
    Case("allow_exact_matches and tolerance 2b", DF1, DF2, {"on": "time", "allow_exact_matches": False},
         [(_ts(30, "2016-07-15"), "bob", 1)]),
    Case("allow_exact_matches and tolerance 2c", DF1, DF2,
         {"on": "time", "allow_exact_matches": False, "tolerance": dt.timedelta(milliseconds=10)},
         [(_ts(30, "2016-07-15"), "bob", None)]),
    Case("allow_exact_matches and tolerance 3",
         ("time timestamp_ntz, username string", [(_ts(30, "2016-07-15"), "bob"), (_ts(30, "2016-07-15"), "charlie")]),
         DF2, {"on": "time", "allow_exact_matches": False, "tolerance": dt.timedelta(milliseconds=10)},
         [(_ts(30, "2016-07-15"), "bob", None), (_ts(30, "2016-07-15"), "charlie", None)]),
    Case("allow_exact_matches and tolerance forward", AB, RIGHT_AB6,
         {"on": "a", "direction": "forward", "allow_exact_matches": False, "tolerance": 1},
         [(1, "a", None), (5, "b", 6), (10, "c", 11)]),
    Case("allow_exact_matches and tolerance nearest", AB,
         ("a long, right_val long", [(1, 1), (3, 3), (4, 4), (6, 7), (11, 11)]),
         {"on": "a", "direction": "nearest", "allow_exact_matches": False, "tolerance": 1},
         [(1, "a", None), (5, "b", 4), (10, "c", 11)]),
    Case("forward by", BY_A, BY_B, {"on": "a", "by": "b", "direction": "forward"},
         [(1, "X", "a", 1), (5, "X", "b", None), (10, "Y", "c", 11), (12, "Z", "d", 15), (15, "Y", "e", 16)]),
    Case("nearest by", ("a long, b string, left_val string",
                        [(1, "X", "a"), (5, "X", "b"), (10, "Z", "c"), (12, "Z", "d"), (15, "Y", "e")]),
         ("a long, b string, right_val long", [(1, "X", 1), (6, "Z", 6), (11, "Z", 11), (15, "Z", 15), (16, "Y", 16)]),
         {"on": "a", "by": "b", "direction": "nearest"},
         [(1, "X", "a", 1), (5, "X", "b", 1), (10, "Z", "c", 11), (12, "Z", "d", 11), (15, "Y", "e", 16)]),
    Case("by int", ("time timestamp_ntz, key long, value1 double",
                    [(_ts(20), 1, 1.1), (_ts(30), 2, 1.2), (_ts(40), 1, 1.3), (_ts(50), 3, 1.4), (_ts(60), 2, 1.5)]),
         ("time timestamp_ntz, key long, value2 double",
          [(_ts(15), 2, 2.1), (_ts(20), 1, 2.2), (_ts(25), 1, 2.3), (_ts(35), 3, 2.4), (_ts(40), 2, 2.5),
           (_ts(55), 1, 2.6), (_ts(60), 2, 2.7), (_ts(65), 3, 2.8)]),
         {"on": "time", "by": "key"},
         [(_ts(20), 1, 1.1, 2.2), (_ts(30), 2, 1.2, 2.1), (_ts(40), 1, 1.3, 2.3), (_ts(50), 3, 1.4, 2.4),
          (_ts(60), 2, 1.5, 2.7)]),
    Case("on float", PRICE, MPV, {"on": "price"},
         [("B", 0.0023, 0.0001), ("G", 0.0078, 0.0001), ("A", 5.01, 0.01), ("C", 25.13, 0.01),
          ("E", 30.78, 0.01), ("D", 340.05, 0.05), ("F", 1040.90, 0.05)]),
    Case("on float by int",
         ("symbol string, exch long, price double",
          [("A", 1, 3.26), ("A", 2, 3.2599), ("A", 3, 3.2598), ("B", 1, 12.58), ("B", 2, 12.59), ("B", 3, 12.5),
           ("C", 1, 378.15), ("C", 2, 378.2), ("C", 3, 378.25)]),
         ("exch long, price double, mpv double",
          [(1, 0.0, 0.0001), (1, 1.0, 0.01), (1, 100.0, 0.05), (2, 0.0, 0.0001), (2, 5.0, 0.01), (2, 100.0, 0.1),
           (3, 0.0, 0.0001), (3, 5.0, 0.25), (3, 1000.0, 1.0)]),
         {"on": "price", "by": "exch"},
         [("A", 3, 3.2598, 0.0001), ("A", 2, 3.2599, 0.0001), ("A", 1, 3.26, 0.01), ("B", 3, 12.5, 0.25),
          ("B", 1, 12.58, 0.01), ("B", 2, 12.59, 0.01), ("C", 1, 378.15, 0.05), ("C", 2, 378.2, 0.1),
          ("C", 3, 378.25, 0.25)]),
    Case("on specialized type by int (int32)",
         ("symbol string, key int, value int",
          [("A", 1, 5), ("B", 2, 2), ("C", 3, 25), ("D", 2, 100), ("E", 3, 78), ("F", 1, 120), ("G", 2, 79)]),
         ("value int, key int, result string", [(0, 1, "x"), (80, 2, "y"), (120, 2, "z"), (125, 3, "w")]),
         {"on": "value", "by": "key"},
         [("B", 2, 2, None), ("A", 1, 5, "x"), ("C", 3, 25, None), ("E", 3, 78, None), ("G", 2, 79, None),
          ("D", 2, 100, "y"), ("F", 1, 120, "x")]),
    Case("by column and suffixes", ("by_col string, on_col long, values string", [("2018-01-01", 2, "a")]),
         ("by_col string, on_col long, values string", [("2018-01-01", 1, "b")]), {"on": "on_col", "by": "by_col"},
         [("2018-01-01", 2, "a", "b")], ["by_col", "on_col", "values_x", "values_y"]),
    Case("int tolerance", ("a int, left_val long", [(0, 1), (10, 2), (20, 3)]),
         ("a int, right_val long", [(5, 1), (15, 2), (25, 3)]), {"on": "a", "tolerance": 10},
         [(0, 1, None), (10, 2, 1), (20, 3, 2)]),
    Case("tolerance on dates", ("date date, value1 long", [(dt.date(2016, 1, 2 + i), i) for i in range(5)]),
         ("date date, value2 string", [(dt.date(2016, 1, 1 + i), "ABCDE"[i]) for i in range(5)]),
         {"on": "date", "tolerance": dt.timedelta(days=1)},
         [(dt.date(2016, 1, 2 + i), i, "BCDEE"[i]) for i in range(5)]),
]

SPARK = [
    Case("simple", SPARK_L, SPARK_R, {**SPARK_ON, "how": "inner"},
         [(1, "x", "a", 1, "v", 1), (5, "y", "b", 3, "x", 3), (10, "z", "c", 7, "z", 7)]),
    Case("usingColumns", SPARK_L, SPARK_R, {**SPARK_ON, "left_by": "b", "right_by": "rb", "how": "inner"},
         [(10, "z", "c", 7, "z", 7)]),
    Case("usingColumns, left outer", SPARK_L, SPARK_R, {**SPARK_ON, "left_by": "b", "right_by": "rb"},
         [(1, "x", "a", None, None, None), (5, "y", "b", None, None, None), (10, "z", "c", 7, "z", 7)]),
    Case("tolerance = 1", SPARK_L, SPARK_R, {**SPARK_ON, "how": "inner", "tolerance": 1}, [(1, "x", "a", 1, "v", 1)]),
    Case("allowExactMatches = false", SPARK_L, SPARK_R, {**SPARK_ON, "how": "inner", "allow_exact_matches": False},
         [(5, "y", "b", 3, "x", 3), (10, "z", "c", 7, "z", 7)]),
    Case("direction = forward", SPARK_L, SPARK_R, {**SPARK_ON, "how": "inner", "direction": "forward"},
         [(1, "x", "a", 1, "v", 1), (5, "y", "b", 6, "y", 6)]),
    Case("direction = nearest", SPARK_L, SPARK_R, {**SPARK_ON, "how": "inner", "direction": "nearest"},
         [(1, "x", "a", 1, "v", 1), (5, "y", "b", 6, "y", 6), (10, "z", "c", 7, "z", 7)]),
    Case("self", SPARK_L, ("ra int, rb string, rl string", SPARK_L[1]),
         {**SPARK_ON, "allow_exact_matches": False, "direction": "nearest"},
         [(1, "x", "a", 5, "y", "b"), (5, "y", "b", 1, "x", "a"), (10, "z", "c", 5, "y", "b")]),
]


def _out(spark: Any, case: Case) -> Any:
    left = spark.createDataFrame(case.left[1], case.left[0])
    right = spark.createDataFrame(case.right[1], case.right[0])
    out = left.dd_merge_asof(right, **case.kwargs)
    if case.columns:
        assert out.columns == case.columns, case.name
    return out


def test_pandas_suite_cases(spark) -> None:
    """The pandas cases, all checked by one Spark job."""
    assert_all(spark, [(c.name, _out(spark, c), c.expected) for c in PANDAS])


def test_spark_suite_cases(spark) -> None:
    """The Spark cases, all checked by one Spark job."""
    assert_all(spark, [(c.name, _out(spark, c), c.expected) for c in SPARK])


# the match-column types: (Spark type, a value per small int, tolerance of 1 in that type's terms)
TYPES = [
    ("double", lambda i: i / 4, 0.25),
    ("decimal(10,2)", lambda i: Decimal(i) / 4, Decimal("0.25")),
    ("decimal(30,5)", lambda i: Decimal(i) / 4 + Decimal(10) ** 20, Decimal("0.25")),
    ("string", lambda i: chr(ord("a") + i), None),
    ("date", lambda i: dt.date(2024, 1, 1) + dt.timedelta(days=i), dt.timedelta(days=1)),
    ("timestamp_ntz", lambda i: dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=7 * i),
     dt.timedelta(microseconds=7)),
    ("timestamp", lambda i: dt.datetime(2024, 1, 5, 1) + dt.timedelta(minutes=40 * i), dt.timedelta(minutes=40)),
]


def test_match_column_types_against_brute_force(spark) -> None:
    checks = []
    for name, value, tol in TYPES:
        rng = random.Random(len(name))
        left = [(rng.randrange(3), None if rng.random() < 0.1 else rng.randrange(6), i) for i in range(30)]
        right = [(rng.randrange(3), None if rng.random() < 0.1 else rng.randrange(6), rng.randrange(4))
                 for _ in range(25)]

        def conv(rows: list[tuple], value: Any = value) -> list[tuple]:
            return [(k, None if t is None else value(t), x) for k, t, x in rows]

        ldf = spark.createDataFrame(conv(left), f"k long, t {name}, u long")
        rdf = spark.createDataFrame(conv(right), f"k long, t {name}, w long")
        direction = "forward" if name in ("string", "date") else "nearest"
        out = ldf.dd_merge_asof(rdf, on="t", by="k", direction=direction, how="full",
                                tolerance=None if name == "string" else tol)
        spec = Spec((0,), (0,), 1, 1, (2,), direction, True, None if tol is None else 1, "full")

        def row(lr: tuple | None, rr: tuple | None, value: Any = value) -> tuple:
            key = lr[0] if lr is not None else rr[0]
            t = lr[1] if lr is not None else rr[1]
            return (key, None if t is None else value(t), lr[2] if lr else None, rr[2] if rr else None)

        want = snapshot(spec, Counter(left), Counter(right), row)
        checks.append((name, out, list(want.elements())))
    assert_all(spark, checks)


def test_mixed_match_column_types(spark) -> None:
    """An int against a long, a date against a timestamp: compared as their common type."""
    left = spark.createDataFrame([(1, 5), (2, 9)], "id long, t int")
    right = spark.createDataFrame([(4, "x"), (8, "y")], "t long, v string")
    assert sorted(tuple(r) for r in left.dd_merge_asof(right, on="t").collect()) == [(1, 5, "x"), (2, 9, "y")]
    left = spark.createDataFrame([(1, dt.date(2024, 1, 2))], "id long, d date")
    right = spark.createDataFrame([(dt.datetime(2024, 1, 1, 23, 0), "x"), (dt.datetime(2024, 1, 2, 0, 0, 1), "y")],
                                  "d timestamp, v string")
    assert [r.v for r in left.dd_merge_asof(right, on="d").collect()] == ["x"]


def test_bad_arguments_are_refused_before_any_job(spark) -> None:
    from spark_support import no_spark_job

    ldf = spark.createDataFrame([(1, "a", 1.0)], "t long, s string, x double")
    rdf = spark.createDataFrame([(1, "a", 2)], "t long, s string, y long")
    coll = spark.createDataFrame([(1, 0, 1)], "t long, time long, diff long")
    cases = [
        (dict(on="t", direction="sideways"), sd.errors.OptionError, "direction must be one of"),
        (dict(on="t", how="outer"), sd.errors.OptionError, "how must be one of"),
        (dict(on="t", tolerance=-1), sd.errors.OptionError, "must not be negative"),
        (dict(on="t", tolerance=1.5), sd.errors.OptionError, "needs an int tolerance"),
        (dict(on="s", tolerance=1), sd.errors.OptionError, "has no distance"),
        (dict(on="s", direction="nearest"), sd.errors.OptionError, "needs a distance"),
        (dict(on="x"), sd.errors.MissingColumnError, "not among the right input's data columns"),
        (dict(left_on="x", right_on="y", by="s"), None, None),
        (dict(left_on="s", right_on="t"), sd.errors.SchemaMismatchError, "do not compare"),
        (dict(on="t", left_on="t"), sd.errors.OptionError, "either `on`"),
        (dict(on="t", by="t"), sd.errors.OptionError, "both the left match column and a `by` column"),
        (dict(on="t", allow_exact_matches="yes"), sd.errors.OptionError, "must be a bool"),
    ]
    with no_spark_job(spark):
        for kw, err, msg in cases:
            if err is None:
                ldf.dd_merge_asof(rdf, **kw)  # fine: a plan, no job
                continue
            with pytest.raises(err, match=msg):
                ldf.dd_merge_asof(rdf, **kw)
        with pytest.raises(sd.errors.SchemaMismatchError, match="is a collection"):
            coll.dd_merge_asof(rdf, on="t")
        with pytest.raises(sd.errors.OptionError, match="timedelta"):
            spark.createDataFrame([(dt.date(2024, 1, 1),)], "d date").dd_merge_asof(
                spark.createDataFrame([(dt.date(2024, 1, 1),)], "d date"), on="d", tolerance=1)
