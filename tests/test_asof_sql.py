"""Cases of DuckDB's ``test/sql/join/asof/`` suite, run through ``sd.sql``.

Translated by hand from DuckDB's sqllogictest files (their tables and expected rows,
as Python data): every comparison (``>=``, ``>``, ``<=``, ``<``, mirrored), ``USING``,
inner / left / right / full / semi / anti joins, ``IS NOT DISTINCT FROM`` keys,
constant, one-sided and two-sided conditions in ``ON``, expressions in the comparison,
a correlated left side, empty sides, set operations as sides, doubles, strings,
integers and timestamps (DuckDB's ``infinity`` / ``-infinity`` timestamps are the years
9000 and 1900 here: Spark has no infinite timestamps), struct and array keys.  Where a file gives no expected rows
(a statement that must run) the same query is run in DuckDB and the rows compared.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import spark_differential as sd

INF = dt.datetime(9000, 1, 1)
NINF = dt.datetime(1900, 1, 1)


def _h(hour: int) -> dt.datetime:
    return dt.datetime(2023, 3, 21, hour)


def _check(spark: Any, query: str, expected: list[tuple], **tables: Any) -> None:
    got = Counter(tuple(r) for r in sd.sql(query, **tables).collect())
    assert got == Counter(expected), f"{query}\nonly ours: {got - Counter(expected)}\nonly expected: {Counter(expected) - got}"


@pytest.fixture(scope="module")
def ineq(spark) -> dict[str, Any]:
    events = [(_h(13 + i), i) for i in range(4)] + [(None, -10), (INF, 9), (NINF, -1)]
    probes = [(_h(12 + i),) for i in range(10)] + [(None,), (INF,)]
    return {"events0": spark.createDataFrame(events, "begin timestamp, value long"),
            "probe0": spark.createDataFrame(probes, "begin timestamp")}


GT = [(_h(12), NINF, -1), (_h(13), NINF, -1), (_h(14), _h(13), 0), (_h(15), _h(14), 1), (_h(16), _h(15), 2)] + \
    [(_h(h), _h(16), 3) for h in range(17, 22)] + [(INF, _h(16), 3)]
LE = [(_h(12), _h(13), 0), (_h(13), _h(13), 0), (_h(14), _h(14), 1), (_h(15), _h(15), 2), (_h(16), _h(16), 3)] + \
    [(_h(h), INF, 9) for h in range(17, 22)] + [(INF, INF, 9)]
LT = [(_h(12), _h(13), 0), (_h(13), _h(14), 1), (_h(14), _h(15), 2), (_h(15), _h(16), 3)] + \
    [(_h(h), INF, 9) for h in range(16, 22)]


@pytest.mark.parametrize(("op", "inner", "left_extra", "right_extra"), [
    (">", GT, [(None, None, None)], [(None, INF, 9), (None, None, -10)]),
    ("<=", LE, [(None, None, None)], [(None, NINF, -1), (None, None, -10)]),
    ("<", LT, [(INF, None, None), (None, None, None)], [(None, NINF, -1), (None, None, -10)]),
])
def test_inequalities(spark, ineq, op: str, inner: list, left_extra: list, right_extra: list) -> None:
    """test_asof_join_inequalities.test: strictly greater, less or equal, strictly less; inner, left, right."""
    q = "SELECT p.begin, e.begin, e.value FROM probe0 p ASOF {} JOIN events0 e ON p.begin {} e.begin"
    _check(spark, q.format("", op), inner, **ineq)
    _check(spark, q.format("LEFT", op), inner + left_extra, **ineq)
    _check(spark, q.format("RIGHT", op), inner + right_extra, **ineq)


def test_timestamps_ge_and_using(spark, ineq) -> None:
    """test_asof_join_timestamps.test (>= and USING, inner, left, right)."""
    events = [(b, v) for b, v in ineq["events0"].collect() if b != NINF] + []
    e0 = spark.createDataFrame([(b, v) for b, v in events if v != -10] + [(None, -1)], "begin timestamp, value long")
    inner = [(_h(13), 0), (_h(14), 1), (_h(15), 2), (_h(16), 3)] + [(_h(h), 3) for h in range(17, 22)] + [(INF, 9)]
    tables = {"events0": e0, "probe0": ineq["probe0"]}
    for join in ("ON p.begin >= e.begin", "USING (begin)"):
        q = f"SELECT p.begin, e.value FROM probe0 p ASOF {{}} JOIN events0 e {join}"
        _check(spark, q.format(""), inner, **tables)
        _check(spark, q.format("LEFT"), inner + [(_h(12), None), (None, None)], **tables)
        _check(spark, q.format("RIGHT"), inner + [(None, -1)], **tables)


@pytest.mark.parametrize("typ", ["double", "bigint", "string"])
def test_doubles_integers_strings(spark, typ: str) -> None:
    """test_asof_join_doubles / _integers / _varchar.test: the inequality alone, ON and USING."""
    conv = {"double": float, "bigint": int, "string": str}[typ]
    top = {"double": float("inf"), "bigint": 999999, "string": "infinity"}[typ]
    events = [(None, -1), (conv(1), 0), (conv(3), 1), (conv(6), 2), (conv(8), 3), (top, 9)]
    e0 = spark.createDataFrame(events, f"begin {typ}, value int")
    p0 = spark.createDataFrame([(conv(i),) for i in range(10)], f"begin {typ}")
    values = {0: None, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 2, 7: 2, 8: 3, 9: 3}
    inner = [(conv(i), v) for i, v in values.items() if v is not None]
    for join in ("ON p.begin >= e.begin", "USING (begin)"):
        q = f"SELECT p.begin, e.value FROM probe0 p ASOF {{}} JOIN events0 e {join}"
        _check(spark, q.format(""), inner, probe0=p0, events0=e0)
        _check(spark, q.format("LEFT"), inner + [(conv(0), None)], probe0=p0, events0=e0)
        _check(spark, q.format("RIGHT"), inner + [(None, -1), (None, 9)], probe0=p0, events0=e0)


def test_doubles_with_equality(spark) -> None:
    """test_asof_join_doubles.test, "With equality": keys by ON and USING, inner, left, right."""
    events = spark.createDataFrame([(1, 1.0, 0), (1, 3.0, 1), (1, 6.0, 2), (1, 8.0, 3), (2, 0.0, 10), (2, 7.0, 20),
                                    (2, 11.0, 30)], "key int, begin double, value int")
    probes = spark.createDataFrame([(k, t) for k in (1, 2) for t in range(10)], "key long, ts long")
    one = {0: None, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 2, 7: 2, 8: 3, 9: 3}
    want = [(1, t, v) for t, v in one.items() if v is not None] + [(2, t, 10 if t < 7 else 20) for t in range(10)]
    q = "SELECT p.key, p.ts, e.value FROM probes p ASOF {} JOIN events e ON p.key = e.key AND p.ts >= e.begin"
    _check(spark, q.format(""), want, probes=probes, events=events)
    _check(spark, q.format("LEFT"), want + [(1, 0, None)], probes=probes, events=events)
    _check(spark, q.format("RIGHT"), want + [(None, None, 30)], probes=probes, events=events)
    u = ("SELECT p.key, p.begin, e.value FROM (SELECT key, CAST(ts AS double) AS begin FROM probes) p "
         "ASOF {} JOIN events e USING (key, begin)")
    _check(spark, u.format("RIGHT"), [(k, float(t), v) for k, t, v in want] + [(None, None, 30)],
           probes=probes, events=events)


TRADES = [(1, dt.datetime(2024, 1, 1, 10, 0), "A", Decimal("150.000")),
          (2, dt.datetime(2024, 1, 1, 10, 5), "A", Decimal("151.000")),
          (3, dt.datetime(2024, 1, 1, 10, 10), "B", Decimal("380.000"))]
BIDS = [(1, dt.datetime(2024, 1, 1, 9, 59), "A", Decimal("149.500"), True),
        (2, dt.datetime(2024, 1, 1, 10, 4), "A", Decimal("150.500"), False),
        (3, dt.datetime(2024, 1, 1, 10, 9), "B", Decimal("379.000"), True)]


@pytest.fixture(scope="module")
def lr(spark) -> dict[str, Any]:
    return {"left_table": spark.createDataFrame(TRADES, "id int, ts timestamp, symbol string, price decimal(18,3)"),
            "right_table": spark.createDataFrame(BIDS, "id int, ts timestamp, symbol string, bid decimal(18,3), "
                                                       "active boolean")}


def test_semi_anti_right_full_with_a_condition_on_both_sides(spark, lr) -> None:
    """test_asof_semi_anti_mark.test and test_asof_join_types.test: l.price + r.bid > 300 restricts
    each left row's candidates (DuckDB's nested-loop meaning)."""
    cond = "ON l.symbol = r.symbol AND l.ts >= r.ts AND l.price + r.bid > 300"
    q = f"SELECT * FROM left_table l ASOF {{}} JOIN right_table r {cond}"
    _check(spark, q.format("SEMI"), [TRADES[1], TRADES[2]], **lr)
    _check(spark, q.format("ANTI"), [TRADES[0]], **lr)
    matched = [(*TRADES[1], *BIDS[1]), (*TRADES[2], *BIDS[2])]
    _check(spark, q.format("RIGHT"), matched + [(None,) * 4 + BIDS[0]], **lr)
    _check(spark, q.format("FULL"), matched + [(None,) * 4 + BIDS[0], (*TRADES[0], *(None,) * 5)], **lr)


def test_constant_and_one_sided_conditions(spark, lr) -> None:
    """test_asof_join_filter_pushdown.test: conditions on the left alone, the right alone, true, false."""
    q = "SELECT * FROM left_table l ASOF {} JOIN right_table r ON l.symbol = r.symbol AND l.ts >= r.ts{}"
    _check(spark, q.format("", " AND l.price > 150 AND r.active = true"),
           [(*TRADES[1], *BIDS[0]), (*TRADES[2], *BIDS[2])], **lr)
    _check(spark, q.format("", " AND r.active = true"),
           [(*TRADES[0], *BIDS[0]), (*TRADES[1], *BIDS[0]), (*TRADES[2], *BIDS[2])], **lr)
    _check(spark, q.format("LEFT", " AND l.price > 150"),
           [(*TRADES[0], *(None,) * 5), (*TRADES[1], *BIDS[1]), (*TRADES[2], *BIDS[2])], **lr)
    _check(spark, q.format("", " AND true"),
           [(*TRADES[0], *BIDS[0]), (*TRADES[1], *BIDS[1]), (*TRADES[2], *BIDS[2])], **lr)
    _check(spark, q.format("", " AND false"), [], **lr)
    _check(spark, q.format("", " AND 1 = 1"),
           [(*TRADES[0], *BIDS[0]), (*TRADES[1], *BIDS[1]), (*TRADES[2], *BIDS[2])], **lr)


def test_pushdown_cases(spark) -> None:
    """test_asof_join_pushdown.test: a filtered right side, an expression in the comparison, a forward
    strict join under a WHERE, a right-only condition."""
    d = spark.createDataFrame([(0, 0.0), (1, None)], "time int, value float")
    q = ("SELECT d1.time, d2.time, d1.value, d2.value FROM right_pushdown d1 ASOF {} JOIN "
         "(SELECT * FROM right_pushdown WHERE value IS NOT NULL) d2 ON d1.time >= d2.time")
    for join in ("", "LEFT"):
        _check(spark, q.format(join), [(0, 0, 0.0, 0.0), (1, 0, None, 0.0)], right_pushdown=d)
    s = spark.createDataFrame([(5, 9), (10, 13), (14, 20), (21, 23)], "starts int, ends int")
    _check(spark, "SELECT s1.starts AS s1_starts, s2.starts AS s2_starts FROM issue12215 AS s1 ASOF JOIN "
                  "issue12215 AS s2 ON s2.ends >= (s1.ends - 5) WHERE s1.starts <> s2.starts",
           [(10, 5), (21, 14)], issue12215=s)
    for join in ("", "LEFT"):
        _check(spark, "WITH t AS (SELECT t1.col0 AS left_val, t2.col0 AS right_val FROM "
                      f"(VALUES (0), (5), (10), (15)) AS t1(col0) ASOF {join} JOIN "
                      "(VALUES (1), (6), (11), (16)) AS t2(col0) ON t2.col0 > t1.col0) "
                      "SELECT * FROM t WHERE right_val BETWEEN 3 AND 12", [(5, 6), (10, 11)])
    amounts = [Decimal("1.00"), None, None, None, Decimal("2.00"), None, None, Decimal("3.00"), None, None,
               Decimal("5.00")]
    t = spark.createDataFrame(list(enumerate(amounts, start=1)), "seq_no int, amount decimal(10,2)")
    want, last = [], None
    for i, a in enumerate(amounts, start=1):
        last = a if a is not None else last
        want.append((i, a, last))
    _check(spark, "SELECT a.seq_no, a.amount, b.amount FROM issue13899 AS a ASOF JOIN issue13899 AS b "
                  "ON a.seq_no >= b.seq_no AND b.amount IS NOT NULL", want, issue13899=t)


def test_null_safe_keys(spark) -> None:
    """test_asof_join_nulls.test: IS NOT DISTINCT FROM keys (one with `=` beside them), a NULL time."""
    trades = spark.createDataFrame([(1, None, 1, 5), (2, None, 1, 1), (3, "A", None, 5), (4, "A", 1, None)],
                                   "id int, symbol string, venue int, ts int")
    prices = spark.createDataFrame([(10, None, 1, 3), (20, "A", None, 3), (30, "A", 1, 3)],
                                   "id int, symbol string, venue int, ts int")
    t = {"null_trades": trades, "null_prices": prices}
    q = "SELECT t.id, p.id FROM null_trades t ASOF LEFT JOIN null_prices p ON {} WHERE t.id = {}"
    _check(spark, q.format("t.symbol IS NOT DISTINCT FROM p.symbol AND t.ts >= p.ts", 1), [(1, 10)], **t)
    _check(spark, q.format("t.symbol IS NOT DISTINCT FROM p.symbol AND t.ts <= p.ts", 2), [(2, 10)], **t)
    _check(spark, q.format("t.symbol IS NOT DISTINCT FROM p.symbol AND t.venue = p.venue AND t.ts >= p.ts", 3),
           [(3, None)], **t)
    _check(spark, q.format("t.symbol <=> p.symbol AND t.ts >= p.ts", 4), [(4, None)], **t)
    _check(spark, "SELECT t.id, p.id FROM (VALUES (1, CAST(NULL AS INT), 1)) t(id, symbol, ts) ASOF LEFT JOIN "
                  "(VALUES (40, CAST(NULL AS INT), 65537)) p(id, symbol, ts) "
                  "ON t.symbol IS NOT DISTINCT FROM p.symbol AND t.ts <= p.ts", [(1, 40)])


def test_predicates_on_both_sides(spark) -> None:
    """test_asof_join_predicates.test: OR of keys, a key or a wildcard, and a time difference
    under an interval (compared with DuckDB on the same data)."""
    tt1 = spark.createDataFrame([(2, "A"), (4, "B"), (5, "A")], "i int, j string")
    tt2 = spark.createDataFrame([(1, "A", "I"), (3, "B", "II")], "i int, j string, k string")
    _check(spark, "SELECT tt1.i, tt2.k FROM tt1 ASOF JOIN tt2 ON (tt1.j = tt2.j OR tt1.j = tt2.j) AND tt1.i >= tt2.i",
           [(2, "I"), (4, "II"), (5, "I")], tt1=tt1, tt2=tt2)
    day = dt.datetime(2025, 1, 1)
    left = spark.createDataFrame([(0, day, "A")], "id int, date timestamp, item string")
    right = spark.createDataFrame([(0, day, "A", 8.0), (0, day, "B", 12.0)], "id int, date timestamp, item string, "
                                                                             "valuei double")
    _check(spark, "SELECT l.id, l.date, l.item AS litem, r.item AS ritem, valuei FROM l ASOF LEFT JOIN r "
                  "ON l.id = r.id AND l.date >= r.date AND (l.item = r.item OR l.item = '*')",
           [(0, day, "A", "A", 8.0)], l=left, r=right)
    n = 300
    t0 = dt.datetime(2022, 1, 1)
    rows1 = [(i % 10, t0 + dt.timedelta(days=i)) for i in range(n)]
    rows2 = [(i % 10, t0 + dt.timedelta(hours=i)) for i in range(n)]
    q = ("SELECT tbl1.x, tbl1.ts, tbl2.ts AS rts FROM tbl1 ASOF JOIN tbl2 ON tbl1.x = tbl2.x AND tbl1.ts >= tbl2.ts "
         "AND (tbl1.ts - tbl2.ts) < INTERVAL '1' HOUR")
    con = duckdb.connect()
    for name, rows in (("tbl1", rows1), ("tbl2", rows2)):
        con.register(name, pa.table({"x": [r[0] for r in rows], "ts": pa.array([r[1] for r in rows], pa.timestamp("us"))}))
    want = con.execute(q).fetchall()
    assert want  # the first days meet the hourly rows
    _check(spark, q, want, tbl1=spark.createDataFrame(rows1, "x long, ts timestamp"),
           tbl2=spark.createDataFrame(rows2, "x long, ts timestamp"))


def test_correlated_left_side(spark) -> None:
    """test_asof_join_subquery.test: the left side refers to the outer query."""
    events = spark.createDataFrame([(1.0, 0), (3.0, 1), (6.0, 2), (8.0, 3)], "begin double, value int")
    q = ("SELECT begin, value IN (SELECT e1.value FROM (SELECT * FROM events e1 WHERE e1.value = events.value) e1 "
         "ASOF JOIN (SELECT CAST(id AS double) AS begin FROM range(1, 10)) tbl USING (begin)) FROM events")
    _check(spark, q, [(1.0, True), (3.0, True), (6.0, True), (8.0, True)], events=events)


def test_empty_sides_and_set_operations(spark) -> None:
    """test_asof_empty_right.test and test_asof_join_setops.test."""
    _check(spark, "SELECT lefttable.x, righttable.y FROM (SELECT 1 AS x) lefttable ASOF LEFT JOIN "
                  "(SELECT 1 AS x, 1 AS y LIMIT 0) righttable ON lefttable.x >= righttable.x", [(1, None)])
    _check(spark, "SELECT lefttable.x, righttable.y FROM (SELECT 1 AS x LIMIT 0) lefttable ASOF LEFT JOIN "
                  "(SELECT 1 AS x, 1 AS y) righttable ON lefttable.x >= righttable.x", [])
    _check(spark, "SELECT lefttable.x, righttable.y FROM (SELECT 1 AS x) lefttable ASOF JOIN "
                  "(SELECT 1 AS x, 1 AS y LIMIT 0) righttable ON lefttable.x >= righttable.x", [])
    a = spark.createDataFrame([(1,), (2,)], "d int")
    b = spark.createDataFrame([], "d int")
    t = {"a": a, "b": b, "r": a}
    _check(spark, "SELECT * FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b) t0 ASOF LEFT JOIN r t1 ON t0.d >= t1.d",
           [(1, 1), (2, 2)], **t)
    _check(spark, "SELECT * FROM r t1 ASOF LEFT JOIN (SELECT * FROM a INTERSECT ALL SELECT * FROM a) t0 "
                  "ON t1.d >= t0.d", [(1, 1), (2, 2)], **t)
    _check(spark, "SELECT * FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b) t0 ASOF LEFT JOIN r t1 "
                  "ON t0.d >= t1.d AND (t0.d + t1.d) > 1", [(1, 1), (2, 2)], **t)
    _check(spark, "SELECT * FROM (SELECT * FROM a EXCEPT ALL SELECT 1) t0 ASOF LEFT JOIN r t1 ON t0.d >= t1.d",
           [(2, 2)], **t)


@pytest.mark.parametrize(("dates", "keys", "total"), [(10, 5, 108), (100, 50, 121275), (1000, 50, 12462525)])
def test_missing_matches(spark, dates: int, keys: int, total: int) -> None:
    """test_asof_join_missing.test: probes 30 s before every build row, half the keys absent."""
    q = f"""WITH build AS (
                SELECT k, TIMESTAMP '2001-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, CAST(v AS INT), 0) AS t, v
                FROM range(0, {dates}) vals(v), range(0, {keys}) keys(k)),
            probe AS (SELECT k * 2 AS k, t - INTERVAL 30 SECONDS AS t FROM build)
            SELECT SUM(v) FROM probe ASOF JOIN build USING (k, t)"""
    _check(spark, q, [(total,)])


def test_limit_and_struct_list_and_multiple_keys(spark) -> None:
    """test_asof_limit.test (a LIMIT above the join) and test_asof_join_prefix.test (struct, array and
    several keys)."""
    q = """WITH trades AS (SELECT 'AAPL' AS symbol, TIMESTAMP '2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0,
                CAST(idx * 10 AS INT)) AS trade_time, 100 AS quantity FROM range(64) AS trade_rows(idx)),
            quotes AS (SELECT 'AAPL' AS symbol, TIMESTAMP '2024-01-01 09:59:50' + make_interval(0, 0, 0, 0, 0, 0,
                CAST(idx * 10 AS INT)) AS quote_time, 150.0 AS price FROM range(64) AS quote_rows(idx))
            SELECT t.symbol, t.trade_time, t.quantity, q.quote_time, q.price FROM trades AS t
            ASOF LEFT JOIN quotes AS q ON t.symbol = q.symbol AND t.trade_time >= q.quote_time LIMIT 5"""
    assert len(sd.sql(q).collect()) == 5
    w0, w3 = dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 3)
    for typ, k1, k2, k3 in (("struct<ticker: string, exchange: int>", ("APPL", 1), ("MEL", 2), ("VCT", 2)),
                            ("array<int>", [1, 0], [2, 0], [2, 1])):
        prices = spark.createDataFrame([(w0, k1, 42), (w0, k2, 55)], f"`when` timestamp, symbol {typ}, price int")
        trades = spark.createDataFrame([(w3, k1), (w3, k3)], f"`when` timestamp, symbol {typ}")
        rows = sd.sql("SELECT t.*, p.price FROM trades t ASOF JOIN prices p ON t.symbol = p.symbol "
                      "AND t.`when` >= p.`when`", trades=trades, prices=prices).collect()
        assert [(r[0], list(r[1]) if isinstance(r[1], list) else tuple(r[1]), r[2]) for r in rows] == \
            [(w3, tuple(k1) if typ.startswith("struct") else k1, 42)]
    prices = spark.createDataFrame([(w0, "APPL", 1, 42), (w0, "MEL", 2, 55)], "`when` timestamp, symbol string, "
                                                                             "exchange int, price int")
    trades = spark.createDataFrame([(w3, "APPL", 1), (w3, "MEL", 3)], "`when` timestamp, symbol string, exchange int")
    _check(spark, "SELECT t.*, p.price FROM trades t ASOF JOIN prices p ON t.symbol = p.symbol AND "
                  "t.exchange = p.exchange AND t.`when` >= p.`when`", [(w3, "APPL", 1, 42)], trades=trades,
           prices=prices)


def test_forward_and_full_match_dd_merge_asof(spark) -> None:
    """The Snowflake/Spark spelling of a forward join and a FULL join, against dd_merge_asof."""
    o = spark.createDataFrame([("a", 1, 1), ("a", 5, 2), ("b", 7, 3), (None, 2, 4)], "k string, ts long, oid long")
    p = spark.createDataFrame([("a", 2, 10), ("a", 5, 11), ("a", 9, 12), ("b", 1, 20)], "k string, ts long, w long")
    got = sd.sql("SELECT o.oid, p.w FROM o FULL ASOF JOIN p MATCH_CONDITION (o.ts <= p.ts) ON o.k = p.k", o=o, p=p)
    want = o.dd_merge_asof(p.withColumnRenamed("ts", "pts"), left_on="ts", right_on="pts", by="k",
                           direction="forward", how="full").select("oid", "w")
    assert Counter(tuple(r) for r in got.collect()) == Counter(tuple(r) for r in want.collect())
    assert Counter(tuple(r) for r in got.collect()) == Counter([(1, 10), (2, 11), (3, None), (4, None), (None, 12),
                                                                (None, 20)])


def test_sql_md_examples(spark) -> None:
    """docs/sql.md up to its recursion section (tests/test_sql_docs.py runs that): every
    ``>>>`` example runs and prints what the page shows."""
    import doctest
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "sql.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = text[: text.index("\n# Recursive queries")]
    test = doctest.DocTestParser().get_doctest(text, {"spark": spark, "sd": sd}, "docs/sql.md", path, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    result = runner.run(test, out=report.append)
    assert result.failed == 0 and result.attempted >= 20, "".join(report)
