"""sd.sql: as-of joins from Spark SQL text, checked row for row against DuckDB's ASOF JOIN.

Spark time is the scarce resource here: inputs are small, shuffle partitions few,
and one test checks several query variants over the same generated data.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa
import pytest
import sqlglot
from helpers import connect_params
from sqlglot import exp

from spark_differential.errors import SqlError
from spark_differential.sql.compile import _SparkAsof, sql

# ----------------------------------------------------------------------------- data

ITEMS = ["a", "b", "c", "d"]
SHOPS = ["x", "y"]


def _orders(rng: random.Random, n: int, t0: object, step: object) -> list[tuple]:
    rows = []
    for oid in range(n):
        item = rng.choice(ITEMS) if rng.random() > 0.04 else None
        ts = t0 + step * rng.randint(0, 60) if rng.random() > 0.04 else None
        rows.append((item, rng.choice(SHOPS), ts, oid, rng.randint(1, 5)))
    rows += rows[:5]  # duplicate left rows: each copy is its own output row
    return rows


def _prices(rng: random.Random, t0: object, step: object) -> list[tuple]:
    rows = []
    for item in ITEMS[:-1]:  # item "d" never has a price
        for shop in SHOPS:
            for t in rng.sample(range(5, 55), rng.randint(2, 8)):  # unique times per key
                rows.append((item, shop, t0 + step * t, rng.randint(1, 40) / 4))
    rows.append(("a", "x", None, 99.0))  # no time: never matches
    rows.append((None, "x", t0, 98.0))  # no key: never matches
    return rows


O_COLS = ["item", "shop", "ts", "oid", "qty"]
P_COLS = ["item", "shop", "ts", "price"]


def _arrow(rows: list[tuple], cols: list[str], types: list[pa.DataType]) -> pa.Table:
    return pa.table({c: pa.array([r[i] for r in rows], type=t) for i, (c, t) in enumerate(zip(cols, types))})


def _duck(query: str, **tables: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.execute(query).fetchall()


def _rows(df) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


def _same(a: list[tuple], b: list[tuple]) -> None:
    ca, cb = Counter(a), Counter(b)
    assert ca == cb, f"only ours: {sorted((ca - cb).items(), key=str)[:10]}; only DuckDB's: {sorted((cb - ca).items(), key=str)[:10]}"


@pytest.fixture(scope="module")
def few_partitions(spark) -> Iterator[None]:
    """Tiny inputs: fewer shuffle partitions (and kernel buckets) keep the Spark time down."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


@contextmanager
def _no_spark_job(spark) -> Iterator[None]:
    sc = spark.sparkContext
    group = f"sd-sql-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "must not run")
    try:
        yield
    finally:
        jobs = list(sc.statusTracker().getJobIdsForGroup(group))
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        assert jobs == [], f"Spark jobs ran: {jobs}"


# ----------------------------------------------------------------------------- parsing (no Spark)


@pytest.mark.parametrize(
    ("text", "side", "kind"),
    [
        ("FROM o ASOF JOIN p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k", "", ""),
        ("FROM o INNER ASOF JOIN p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k", "", "INNER"),
        ("FROM o LEFT ASOF JOIN p MATCH_CONDITION (o.ts >= p.ts) USING (k)", "LEFT", ""),
        ("FROM o LEFT OUTER ASOF JOIN p MATCH_CONDITION (o.ts > p.ts) ON o.k = p.k", "LEFT", "OUTER"),
        ("FROM o ASOF JOIN p ON o.k = p.k AND o.ts >= p.ts", "", ""),
        ("FROM o ASOF LEFT JOIN p ON o.k = p.k AND o.ts >= p.ts", "LEFT", ""),
    ],
)
def test_dialect_reads_both_syntaxes(text, side, kind):
    tree = sqlglot.parse_one("SELECT * " + text, read=_SparkAsof)
    join = tree.find(exp.Join)
    assert join.args["method"] == "ASOF" and join.side == side and join.kind == kind
    # stock sqlglot Spark reads only DuckDB's spelling
    if "MATCH_CONDITION" in text:
        with pytest.raises(sqlglot.errors.ParseError):
            sqlglot.parse_one("SELECT * " + text, read="spark")


def test_match_condition_is_still_an_identifier():
    tree = sqlglot.parse_one("SELECT t.match_condition AS match_condition FROM t", read=_SparkAsof)
    assert tree.sql(dialect="spark") == "SELECT t.match_condition AS match_condition FROM t"


# ----------------------------------------------------------------------------- against DuckDB


def _variants(o: str, p: str) -> dict[str, tuple[str, str]]:
    """label -> (our query, DuckDB's query); all select oid, o.ts, price, p.ts."""
    cols = "o.oid, o.ts, p.price, p.ts AS pts"
    keys = "o.item = p.item AND o.shop = p.shop"
    duck = {
        "ge": f"SELECT {cols} FROM {o} o ASOF JOIN {p} p ON {keys} AND o.ts >= p.ts",
        "gt": f"SELECT {cols} FROM {o} o ASOF JOIN {p} p ON {keys} AND o.ts > p.ts",
        "left_ge": f"SELECT {cols} FROM {o} o ASOF LEFT JOIN {p} p ON {keys} AND o.ts >= p.ts",
        "left_gt": f"SELECT {cols} FROM {o} o ASOF LEFT JOIN {p} p ON {keys} AND o.ts > p.ts",
    }
    sub = f"SELECT {cols} FROM {o} o ASOF LEFT JOIN (SELECT * FROM {p} WHERE price < 8) p ON {keys} AND o.ts >= p.ts"
    return {
        # Spark 4.3 syntax
        "spark_ge": (f"SELECT {cols} FROM {o} o ASOF JOIN {p} p MATCH_CONDITION (o.ts >= p.ts) ON {keys}", duck["ge"]),
        "spark_left_gt": (
            f"SELECT {cols} FROM {o} o LEFT ASOF JOIN {p} p MATCH_CONDITION (o.ts > p.ts) ON p.shop = o.shop AND p.item = o.item",
            duck["left_gt"],
        ),
        "spark_mirror_left_ge": (
            f"SELECT {cols} FROM {o} o LEFT OUTER ASOF JOIN {p} p MATCH_CONDITION (p.ts <= o.ts) USING (item, shop)",
            duck["left_ge"],
        ),
        # DuckDB syntax: the same text runs in DuckDB
        "duck_mirror_gt": (
            f"SELECT {cols} FROM {o} o ASOF JOIN {p} p ON {keys} AND p.ts < o.ts",
            duck["gt"],
        ),
        "duck_left_ge_subquery": (sub, sub),
        "duck_using": (
            f"SELECT o.oid, o.ts, p.price, p.ts AS pts FROM {o} o ASOF JOIN {p} p USING (item, shop, ts)",
            duck["ge"],
        ),
    }


@pytest.mark.parametrize("time_type", connect_params(["bigint", "timestamp"]))
def test_matches_duckdb(spark, few_partitions, time_type):
    rng = random.Random(7 if time_type == "bigint" else 11)
    if time_type == "bigint":
        t0, step, pa_t = 1_000, 1, pa.int64()
    else:
        t0, step, pa_t = dt.datetime(2024, 3, 1, 9, 0), dt.timedelta(minutes=7), pa.timestamp("us")
    orders = _orders(rng, 160, t0, step)
    prices = _prices(rng, t0, step)
    o_df = spark.createDataFrame(orders, f"item string, shop string, ts {time_type}, oid int, qty int")
    p_df = spark.createDataFrame(prices, f"item string, shop string, ts {time_type}, price double")
    o_pa = _arrow(orders, O_COLS, [pa.string(), pa.string(), pa_t, pa.int32(), pa.int32()])
    p_pa = _arrow(prices, P_COLS, [pa.string(), pa.string(), pa_t, pa.float64()])

    variants = _variants("orders", "prices")
    if time_type == "timestamp":  # the syntax variants are covered with bigint; keep Spark time down
        variants = {q: variants[q] for q in ("spark_ge", "duck_mirror_gt")}
    # one query per variant: cheaper in Spark than one UNION ALL of all of them
    counts = {}
    for q, (ours_text, duck_text) in variants.items():
        ours = _rows(sql(ours_text, orders=o_df, prices=p_df))
        _same(ours, _duck(duck_text, orders=o_pa, prices=p_pa))
        counts[q] = len(ours)
    assert 0 < counts["spark_ge"] < len(orders)
    if "spark_left_gt" in counts:  # LEFT keeps every left row (NULL keys, NULL times and duplicates included)
        assert counts["spark_left_gt"] == counts["duck_left_ge_subquery"] == len(orders)


# ----------------------------------------------------------------------------- no equality keys


def _timeline(rng: random.Random, n_orders: int, n_prices: int, ties: bool) -> tuple[list[tuple], list[tuple]]:
    """Orders ``(ts, oid, qty)`` and one global price timeline ``(ts, price)``.

    Orders share times with each other and with prices (ties), come before the first
    price, and have NULL times; ``ties`` puts several prices at one time."""
    span = 3 * n_prices
    times = sorted(rng.sample(range(5, span), n_prices))
    prices = [(t, rng.randint(1, 40) / 4) for t in times]
    if ties:
        prices += [(t, rng.randint(41, 80) / 4) for t in rng.sample(times, max(1, n_prices // 3))]
    prices.append((None, 99.0))  # no time: never matches
    orders = []
    for oid in range(n_orders):
        ts = rng.choice([rng.randint(0, span + 5), rng.choice(times)]) if rng.random() > 0.05 else None
        orders.append((ts, oid, rng.randint(1, 5)))
    orders += orders[:3]  # duplicate left rows: each copy is its own output row
    return orders, prices


def _no_key_variants(tied: bool) -> dict[str, tuple[str, str]]:
    """label -> (our query, DuckDB's query) for as-of joins whose only condition is the time.

    With several prices at one time DuckDB's ASOF JOIN keeps one of them (any); ours
    keeps the last in the order of the right's other columns (here: the greatest price),
    which is DuckDB's ASOF JOIN on the greatest price of each time."""
    cols = "o.oid, o.ts, p.price, p.ts AS pts"

    def duck(join: str, op: str) -> str:
        if not tied:
            return f"SELECT {cols} FROM orders o {join} prices p ON o.ts {op} p.ts"
        last = "(SELECT ts, max(price) AS price FROM prices GROUP BY ts)"
        return f"SELECT {cols} FROM orders o {join} {last} p ON o.ts {op} p.ts"

    return {
        # DuckDB syntax (the same text DuckDB runs)
        "duck_on_ge": (f"SELECT {cols} FROM orders o ASOF JOIN prices p ON o.ts >= p.ts", duck("ASOF JOIN", ">=")),
        "duck_left_on_gt": (f"SELECT {cols} FROM orders o ASOF LEFT JOIN prices p ON o.ts > p.ts", duck("ASOF LEFT JOIN", ">")),
        "duck_using": (f"SELECT {cols} FROM orders o ASOF JOIN prices p USING (ts)", duck("ASOF JOIN", ">=")),
        "duck_left_using": (f"SELECT {cols} FROM orders o ASOF LEFT JOIN prices p USING (ts)", duck("ASOF LEFT JOIN", ">=")),
        "duck_mirror_gt": (f"SELECT {cols} FROM orders o ASOF JOIN prices p ON p.ts < o.ts", duck("ASOF JOIN", ">")),
        # Spark 4.3 syntax: MATCH_CONDITION without ON
        "spark_ge": (f"SELECT {cols} FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts)", duck("ASOF JOIN", ">=")),
        "spark_left_gt": (
            f"SELECT {cols} FROM orders o LEFT OUTER ASOF JOIN prices p MATCH_CONDITION (p.ts < o.ts)",
            duck("ASOF LEFT JOIN", ">"),
        ),
    }


# (seed, orders, prices, several prices at one time, time type)
NO_KEY_DATA = [(1, 90, 25, False, "bigint"), (2, 60, 12, True, "bigint"), (3, 50, 8, True, "timestamp")]


@pytest.mark.parametrize(("seed", "n_orders", "n_prices", "tied", "time_type"), NO_KEY_DATA)
def test_no_keys_matches_duckdb(spark, few_partitions, seed, n_orders, n_prices, tied, time_type):
    """ASOF JOIN whose only condition is the time: every left row meets one global timeline."""
    rng = random.Random(seed)
    orders, prices = _timeline(rng, n_orders, n_prices, tied)
    if time_type == "timestamp":
        t0, step = dt.datetime(2024, 3, 1, 9, 0), dt.timedelta(seconds=90)
        orders = [(None if t is None else t0 + step * t, *rest) for t, *rest in orders]
        prices = [(None if t is None else t0 + step * t, *rest) for t, *rest in prices]
    pa_t = pa.int64() if time_type == "bigint" else pa.timestamp("us")
    o_df = spark.createDataFrame(orders, f"ts {time_type}, oid int, qty int")
    p_df = spark.createDataFrame(prices, f"ts {time_type}, price double")
    o_pa = _arrow(orders, ["ts", "oid", "qty"], [pa_t, pa.int32(), pa.int32()])
    p_pa = _arrow(prices, ["ts", "price"], [pa_t, pa.float64()])
    variants = _no_key_variants(tied)
    if seed != 1:  # every spelling runs on the first data set; the others check the semantics
        variants = {q: variants[q] for q in ("duck_on_ge", "duck_left_on_gt", "spark_ge")}
    got = {}
    for q, (ours_text, duck_text) in variants.items():
        got[q] = _rows(sql(ours_text, orders=o_df, prices=p_df))
        _same(got[q], _duck(duck_text, orders=o_pa, prices=p_pa))
    matched = {r[0] for r in got["duck_on_ge"]}  # oids that met a price
    assert 0 < len(matched) < n_orders  # some orders come before the first price
    assert len(got["duck_on_ge"]) < len(orders)  # one row per left row that met a price
    if tied:  # some order met a time of several prices: the greatest of them
        assert any(r[2] > 10 for r in got["duck_on_ge"])
    if "duck_left_using" in got:  # LEFT keeps every left row (NULL times and duplicates included)
        assert len(got["duck_left_using"]) == len(orders)


def test_surrounding_sql_matches_duckdb(spark, few_partitions):
    """Projections, WHERE, GROUP BY, ORDER BY, a CTE and an ordinary join around the as-of join."""
    rng = random.Random(3)
    orders = _orders(rng, 120, 0, 1)
    prices = _prices(rng, 0, 1)
    shops = [("x", "north"), ("y", "south")]
    o_df = spark.createDataFrame(orders, "item string, shop string, ts bigint, oid int, qty int")
    p_df = spark.createDataFrame(prices, "item string, shop string, ts bigint, price double")
    view = f"shops_{uuid.uuid4().hex[:8]}"  # an ordinary catalog table (temp view), not a keyword
    spark.createDataFrame(shops, "shop string, region string").createOrReplaceTempView(view)
    query = f"""
        WITH big AS (SELECT * FROM orders WHERE qty > 1)
        SELECT s.region, o.item, count(*) AS n, sum(o.qty * p.price) AS revenue, max(p.ts) AS last_change
        FROM big o ASOF JOIN prices p ON o.item = p.item AND o.shop = p.shop AND o.ts >= p.ts
        JOIN {view} s ON s.shop = o.shop
        WHERE p.price > 2
        GROUP BY s.region, o.item
        ORDER BY s.region, o.item"""
    try:
        ours = sql(query, orders=o_df, prices=p_df)
        assert ours.columns == ["region", "item", "n", "revenue", "last_change"]
        got = _rows(ours)
    finally:
        spark.catalog.dropTempView(view)
    theirs = _duck(
        query.replace(view, "shops"),
        orders=_arrow(orders, O_COLS, [pa.string(), pa.string(), pa.int64(), pa.int32(), pa.int32()]),
        prices=_arrow(prices, P_COLS, [pa.string(), pa.string(), pa.int64(), pa.float64()]),
        shops=_arrow(shops, ["shop", "region"], [pa.string(), pa.string()]),
    )
    assert got == theirs  # same rows in the same order: ORDER BY survives the rewrite


def test_semantics_by_hand(spark, few_partitions):
    """Ties, nulls, duplicates, Spark syntax + CTE + chained as-of joins + SELECT * names, in one job."""
    orders = spark.createDataFrame(
        [("a", 5, 1), ("a", 5, 1), ("a", 2, 2), (None, 5, 3), ("a", None, 4), ("b", 9, 5)],
        "item string, ts bigint, oid int",
    )
    # two prices for "a" at time 3: the last in the order of the other columns (31) is picked
    prices = spark.createDataFrame(
        [("a", 1, 10), ("a", 3, 30), ("a", 3, 31), ("b", 9, 90)], "item string, ts bigint, price int"
    )
    fx = spark.createDataFrame([("a", 0, 1.5), ("a", 4, 2.0)], "item string, ts bigint, rate double")
    q = """
        WITH o AS (SELECT * FROM orders WHERE oid <> 2)
        SELECT 'left_gt' AS q, o.oid, p.price, p.ts AS pts, CAST(NULL AS double) AS rate
        FROM o LEFT ASOF JOIN prices p MATCH_CONDITION (o.ts > p.ts) ON o.item = p.item
        UNION ALL
        SELECT 'chain', o.oid, p.price, p.ts, f.rate
        FROM orders o LEFT ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item
                      ASOF JOIN fx f MATCH_CONDITION (o.ts >= f.ts) ON o.item = f.item
    """
    got = Counter(_rows(sql(q, orders=orders, prices=prices, fx=fx)))
    expected = Counter({
        ("left_gt", 1, 31, 3, None): 2,
        ("left_gt", 3, None, None, None): 1,
        ("left_gt", 4, None, None, None): 1,
        ("left_gt", 5, None, None, None): 1,
        ("chain", 1, 31, 3, 2.0): 2,
        ("chain", 2, 10, 1, 1.5): 1,  # NULL key, NULL time and b (no fx) drop out of the inner 2nd join
    })
    assert got == expected

    # SELECT * keeps Spark's column names (both sides' `item` and `ts`), USING puts the key first
    star = sql("SELECT * FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
               orders=orders, prices=prices)
    assert star.columns == ["item", "ts", "oid", "item", "ts", "price"]
    using = sql("SELECT * FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) USING (item)",
                orders=orders, prices=prices)
    assert using.columns == ["item", "ts", "oid", "ts", "price"]
    stars = sql("SELECT p.*, o.oid FROM orders o ASOF JOIN prices p ON o.item = p.item AND o.ts >= p.ts",
                orders=orders, prices=prices)
    assert stars.columns == ["item", "ts", "price", "oid"]


@pytest.mark.connect
def test_plain_queries_pass_through(spark):
    df = spark.createDataFrame([(1, "a")], "x int, y string")
    assert _rows(sql("SELECT x + 1 AS z, '{braces}' AS w FROM t WHERE y = 'a'", t=df)) == [(2, "{braces}")]
    assert sql("SELECT 1 AS one").columns == ["one"]


# ----------------------------------------------------------------------------- errors


@pytest.fixture(scope="module")
def tables(spark):
    orders = spark.createDataFrame([("a", 1, 1, "s")], "item string, ts bigint, oid int, note string")
    prices = spark.createDataFrame([("a", 1, 2.0, 1)], "item string, ts bigint, price double, n int")
    return {"orders": orders, "prices": prices}


ERRORS = [
    ("malformed", "SELECT FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= ) ON o.item = p.item",
     ["could not parse"]),
    ("time_on_one_side", "SELECT * FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts + o.oid >= 1) ON o.item = p.item",
     ["does not compare an expression of `o` with one of `p`"]),
    ("using_unknown_time", "SELECT * FROM orders o ASOF JOIN prices p USING (price)",
     ["USING (price)", "`o` has no column `price`"]),
    ("unknown_table", "SELECT * FROM orders o ASOF JOIN no_such_prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
     ["unknown table `no_such_prices`", "right side"]),
    ("no_time", "SELECT * FROM orders o ASOF JOIN prices p ON o.item = p.item",
     ["ASOF JOIN needs one comparison between the two sides' times"]),
    ("cross", "SELECT * FROM orders o ASOF CROSS JOIN prices p ON o.ts >= p.ts",
     ["CROSS ASOF JOIN is not a join type"]),
    ("not_first", "SELECT * FROM orders o JOIN orders o2 ON o.oid = o2.oid ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
     ["must directly follow the first table"]),
    ("ambiguous", "SELECT ts FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
     ["`ts` is ambiguous"]),
    ("unknown_column", "SELECT p.nope FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item",
     ["`p` has no column `nope`"]),
    ("semi_right_column", "SELECT p.price FROM orders o ASOF SEMI JOIN prices p ON o.item = p.item AND o.ts >= p.ts",
     ["SEMI ASOF JOIN keeps the left side's columns only"]),
    ("string_time", "SELECT * FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.note >= p.ts) ON o.item = p.item",
     ["MATCH_CONDITION", "types string and bigint", "CAST one of them"]),
    ("key_types", "SELECT * FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.n",
     ["key `o.item = p.n` compares string with int"]),
    ("correlated_right", "SELECT o.oid, EXISTS (SELECT 1 FROM orders x ASOF JOIN (SELECT * FROM prices q "
     "WHERE q.n = o.oid) p ON x.ts >= p.ts) FROM orders o", ["right side of the ASOF JOIN", "refers to the outer query"]),
    ("two_statements", "SELECT 1; SELECT * FROM orders o ASOF JOIN prices p ON o.item = p.item AND o.ts >= p.ts",
     ["exactly one SQL statement"]),
    ("spark_analysis", "SELECT o.oid, zz.x FROM orders o ASOF JOIN prices p ON o.item = p.item AND o.ts >= p.ts",
     ["Spark rejected the query"]),
]


@pytest.mark.parametrize(("name", "query", "phrases"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(spark, tables, name, query, phrases):
    with _no_spark_job(spark), pytest.raises(SqlError) as info:
        sql(query, **tables)
    for phrase in phrases:
        assert phrase in str(info.value), str(info.value)


def test_malformed_plain_sql_is_a_sql_error(spark):
    with _no_spark_job(spark), pytest.raises(SqlError, match="could not parse"):
        sql("SELEC 1 FRM nowhere")


def test_docstring_examples_run(spark):
    """``sd.sql``'s runnable examples, keyed and keyless."""
    import doctest

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(sql, globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 7


@pytest.mark.connect
@pytest.mark.parametrize("pkey", ["bigint", "double"])
def test_keys_and_times_of_different_integral_types(spark, pkey):
    """An int key against a bigint (or double) key and int against bigint times: keys are
    cast to one type so equal values meet, the output keeps each side's own types."""
    orders = spark.createDataFrame([(1, 5, "o1"), (2, 3, "o2"), (1, 1, "o3"), (None, 9, "o4")],
                                   "k int, ts int, oid string")
    key = float if pkey == "double" else int
    prices = spark.createDataFrame([(key(1), 2, 10.0), (key(1), 5, 11.0), (key(2), 4, 20.0), (key(1), 7, 12.0)],
                                   f"k {pkey}, ts bigint, w double")
    q = "SELECT o.oid, o.k, p.k AS pk, p.w FROM orders o {} ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k"
    inner = sql(q.format(""), orders=orders, prices=prices)
    assert _rows(inner) == [("o1", 1, 1, 11.0)]
    assert [f.dataType.simpleString() for f in inner.schema.fields] == ["string", "int", pkey, "double"]
    left = sql(q.format("LEFT"), orders=orders, prices=prices)
    assert sorted(_rows(left), key=repr) == sorted([("o1", 1, 1, 11.0), ("o2", 2, None, None), ("o3", 1, None, None),
                                  ("o4", None, None, None)], key=repr)
