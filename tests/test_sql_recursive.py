"""sd.sql's WITH RECURSIVE over collections: every form against DuckDB (or a brute-force
oracle) on the snapshot at every time, on random changing graphs with integer and
product (struct) times.

Each sd.sql call checks several random graphs at once: the tables carry a graph id ``g``
and every join matches on it, so the graphs never meet (the ``cases`` trick of
tests/helpers.py).  The expected collection is the Moebius inversion (tests/oracle.py)
of the query's answer on the inputs' snapshots at every time of their lub closure:
DuckDB running the same SQL text on that snapshot, or, where DuckDB has no such form
(aggregates inside the recursion, mutual recursion) or means something else, a Python
evaluation of the fixed point.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import duckdb
import pytest
from helpers import CONNECT, rows_of, time_type
from oracle import Lattice, Product, Total, acc, assert_updates_equal, consolidate, moebius
from pyspark.sql import types as T
from spark_support import no_spark_job

import spark_differential as sd
from spark_differential.errors import ConfigurationError, IterationLimitExceeded, SqlError

INT, PROD = Total(), Product([Total(), Total()])

Updates = list[tuple[tuple, Any, int]]


def _graphs(seed: int, lat: Lattice, n_graphs: int = 4) -> tuple[Updates, Updates]:
    """Edges ``(g, src, dst)`` and roots ``(g, node)`` of ``n_graphs`` small random graphs,
    each edge inserted at a random time and perhaps deleted at a later one (so every
    snapshot is a multiset: some edges are inserted twice)."""
    rng = random.Random(seed)
    hi = 3 if lat is INT else 2

    def life(data: tuple, out: Updates) -> None:
        t1 = lat.random(rng, 0, hi)
        out.append((data, t1, 1))
        if rng.random() < 0.35:
            out.append((data, lat.join(t1, lat.random(rng, 0, hi)), -1))

    edges: Updates = []
    roots: Updates = []
    for g in range(n_graphs):
        for _ in range(rng.randint(4, 7)):
            a, b = rng.randrange(5), rng.randrange(5)
            life((g, a, b), edges)
            if rng.random() < 0.15:
                life((g, a, b), edges)  # a parallel edge: multiplicity 2
        life((g, 0), roots)
        if rng.random() < 0.5:
            life((g, rng.randrange(1, 5)), roots)
    return edges, roots


def _df(spark: Any, ups: Updates, cols: list[str], lat: Lattice) -> Any:
    fields = [T.StructField(c, T.LongType(), True) for c in cols]
    fields += [T.StructField("time", time_type(lat), False), T.StructField("diff", T.LongType(), False)]
    return spark.createDataFrame([(*d, t, r) for d, t, r in ups], T.StructType(fields)).coalesce(1)


def _rows(snapshot: Mapping[tuple, int]) -> list[tuple]:
    return [d for d, m in snapshot.items() for _ in range(m)]


def _duckdb(query: str) -> Callable[[Counter, Counter], Counter]:
    def snap(edges: Counter, roots: Counter) -> Counter:
        con = duckdb.connect()
        con.execute("CREATE TABLE edges (g BIGINT, src BIGINT, dst BIGINT); CREATE TABLE roots (g BIGINT, node BIGINT)")
        if edges:
            con.executemany("INSERT INTO edges VALUES (?, ?, ?)", _rows(edges))
        if roots:
            con.executemany("INSERT INTO roots VALUES (?, ?)", _rows(roots))
        return Counter(con.execute(query).fetchall())

    return snap


def _adjacency(edges: Counter) -> dict[tuple[int, int], set[int]]:
    adj: dict[tuple[int, int], set[int]] = {}
    for (g, a, b), m in edges.items():
        if m > 0:
            adj.setdefault((g, a), set()).add(b)
    return adj


def _bfs(edges: Counter, roots: Counter) -> Counter:
    """``(g, node, distance)`` from the roots of each graph."""
    adj = _adjacency(edges)
    out: Counter = Counter()
    for g in {g for (g, _), m in roots.items() if m > 0}:
        dist = {n: 0 for (gg, n), m in roots.items() if gg == g and m > 0}
        layer, d = list(dist), 0
        while layer:
            d += 1
            layer = list(dict.fromkeys(b for a in layer for b in sorted(adj.get((g, a), ())) if b not in dist))
            dist.update({b: d for b in layer})
        out.update({(g, n, d): 1 for n, d in dist.items()})
    return out


def _parity(edges: Counter, roots: Counter) -> Counter:
    """``(kind, g, node)``: nodes reached from a root by a walk of even / odd length."""
    adj = _adjacency(edges)
    seen = {(g, n, 0) for (g, n), m in roots.items() if m > 0}
    todo = list(seen)
    while todo:
        g, n, p = todo.pop()
        for b in adj.get((g, n), ()):
            if (g, b, 1 - p) not in seen:
                seen.add((g, b, 1 - p))
                todo.append((g, b, 1 - p))
    return Counter({("even" if p == 0 else "odd", g, n): 1 for g, n, p in seen})


REACH = """
WITH RECURSIVE reach(g, node) AS (
    SELECT g, node FROM roots
    UNION
    SELECT r.g, e.dst FROM reach r JOIN edges e ON r.g = e.g AND r.node = e.src
), walks(g, node, len) AS (
    SELECT g, node, 0 FROM reach
    UNION ALL
    SELECT w.g, e.dst, w.len + 1 FROM walks w JOIN edges e ON w.g = e.g AND w.node = e.src WHERE w.len < 2
)
SELECT g, node, len FROM walks"""

LAYERS = """
WITH RECURSIVE layers(g, node, len) AS (
    SELECT g, node, 0 FROM roots
    UNION ALL
    SELECT DISTINCT l.g, e.dst, l.len + 1
    FROM layers l LEFT JOIN edges e ON l.g = e.g AND l.node = e.src
    WHERE l.len < 3 AND e.dst IS NOT NULL
)
SELECT g, node, len FROM layers"""

CLOSURE = """
WITH RECURSIVE tc(g, a, b) AS (
    SELECT g, src, dst FROM edges
    UNION
    SELECT tc.g, tc.a, e.dst FROM tc, edges e WHERE tc.g = e.g AND tc.b = e.src
)
SELECT g, a, count(*) AS reached FROM tc GROUP BY g, a"""

SHORTEST = """
WITH RECURSIVE dist(g, node, d) AS (
    SELECT g, node, 0 FROM roots
    UNION
    SELECT e.g, e.dst, min(dist.d + 1) FROM dist JOIN edges e ON dist.g = e.g AND dist.node = e.src GROUP BY e.g, e.dst
)
SELECT g, node, min(d) AS d FROM dist GROUP BY g, node"""

PARITY = """
WITH RECURSIVE even(g, node) AS (
    SELECT g, node FROM roots
    UNION
    SELECT o.g, e.dst FROM odd o JOIN edges e ON o.g = e.g AND o.node = e.src
), odd(g, node) AS (
    SELECT g, node FROM roots WHERE false
    UNION
    SELECT v.g, e.dst FROM even v JOIN edges e ON v.g = e.g AND v.node = e.src
)
SELECT 'even' AS kind, g, node FROM even UNION ALL SELECT 'odd', g, node FROM odd"""

MUTUALLY = """
WITH MUTUALLY RECURSIVE dist(g bigint, node bigint, d bigint) AS (
    SELECT g, node, min(d) FROM (
        SELECT g, node, 0 AS d FROM roots
        UNION ALL
        SELECT dist.g, e.dst, dist.d + 1 FROM dist JOIN edges e ON dist.g = e.g AND dist.node = e.src
    ) steps GROUP BY g, node
)
SELECT g, node, d FROM dist"""

OUTER = """
WITH RECURSIVE reach(g, node) AS (
    SELECT g, node FROM roots
    UNION
    SELECT r.g, e.dst FROM reach r JOIN edges e ON r.g = e.g AND r.node = e.src
), unreached AS (
    SELECT g, src AS node FROM edges EXCEPT SELECT g, node FROM reach
), both_ends AS (
    SELECT g, dst AS node FROM edges INTERSECT ALL SELECT g, node FROM reach
)
SELECT 'unreached' AS k, g, node, 0 AS n FROM unreached
UNION ALL SELECT 'both', g, node, 0 FROM both_ends
UNION ALL SELECT 'count', -1, -1, count(*) FROM reach
UNION ALL SELECT 'left', e.g, e.src, coalesce(r.node, -1) FROM edges e LEFT JOIN reach r ON e.g = r.g AND e.dst = r.node
UNION ALL SELECT 'const', 0, v, 0 FROM (VALUES (7), (8)) AS c(v)"""

# a recursive term that is not strict (it has rows when `dist` is empty: the roots' own
# neighbours): the loop cannot start empty, and reads `dist` through distinct instead
MIN_UNION = """
WITH RECURSIVE dist(g, node, d) AS (
    SELECT g, node, 0 FROM roots
    UNION
    SELECT e.g, e.dst, min(x.d + 1)
    FROM (SELECT g, node, d FROM dist UNION ALL SELECT g, node, 5 FROM roots) x
    JOIN edges e ON x.g = e.g AND x.node = e.src GROUP BY e.g, e.dst
)
SELECT g, node, d FROM dist"""


def _min_union(edges: Counter, roots: Counter) -> Counter:
    """``MIN_UNION``'s fixed point on one snapshot, from the distinct roots: every
    ``(g, node, d)`` of the roots at 0, and each node's least ``d + 1`` over its
    predecessors' rows and the roots (at 5)."""
    adj = _adjacency(edges)
    base = {(g, n, 0) for (g, n), m in roots.items() if m > 0}
    extra = [(g, n, 5) for (g, n), m in roots.items() if m > 0]
    r = set(base)
    while True:
        best: dict[tuple[int, int], int] = {}
        for g, n, d in [*r, *extra]:
            for b in adj.get((g, n), ()):
                best[(g, b)] = min(best.get((g, b), d + 1), d + 1)
        nxt = base | {(g, b, d) for (g, b), d in best.items()}
        if nxt == r:
            return Counter(dict.fromkeys(r, 1))
        r = nxt


FORMS = {
    # name: (query, the snapshot answer: DuckDB on the same text, or a brute-force fixed point)
    "union_then_union_all_over_it": (REACH, _duckdb(REACH)),
    "union_all_distinct_left_join": (LAYERS, _duckdb(LAYERS)),
    "comma_join_then_group_by": (CLOSURE, _duckdb(CLOSURE)),
    "min_group_by_in_recursion": (SHORTEST, _bfs),
    "min_over_a_union_with_an_outer_table": (MIN_UNION, _min_union),
    "mutual_recursion": (PARITY, _parity),
    "with_mutually_recursive": (MUTUALLY, _bfs),
    "outer_query_except_intersect_count_left_join_values": (OUTER, _duckdb(OUTER)),
}


# every recursive form with both time types; the outer-query form (no new recursion) with product times only
CASES = [pytest.param(form, lat, id=f"{form}-{'int' if lat is INT else 'product'}",
                      marks=[pytest.mark.connect] if (form, lat) == ("with_mutually_recursive", PROD) else [])
         for form in FORMS for lat in (INT, PROD) if not (form.startswith("outer_query") and lat is INT)]


@pytest.mark.parametrize("form,lat", CASES)
def test_recursive_query_matches_the_snapshots(spark, form: str, lat: Lattice):
    query, snapshot = FORMS[form]
    edges, roots = _graphs(list(FORMS).index(form) * 7 + (lat is PROD), lat)
    out = sd.sql(query, edges=_df(spark, edges, ["g", "src", "dst"], lat), roots=_df(spark, roots, ["g", "node"], lat))
    times = [t for _, t, _ in edges + roots]
    expected = moebius(lambda s: snapshot(acc(edges, s, lat), acc(roots, s, lat)), times, lat)
    assert_updates_equal(rows_of(out), expected)


# ----------------------------------------------------------------------------- other paths


def test_recursive_query_on_the_distributed_path(spark):
    """The loop iteration by iteration on the cluster (no in-task run): the same rows."""
    query, snapshot = FORMS["with_mutually_recursive"]
    edges, roots = _graphs(21, PROD, n_graphs=1)
    spark.conf.set("spark_differential.iterate.localRows", "0")
    try:
        out = sd.sql(query, edges=_df(spark, edges, ["g", "src", "dst"], PROD), roots=_df(spark, roots, ["g", "node"], PROD))
        rows = rows_of(out)
    finally:
        spark.conf.unset("spark_differential.iterate.localRows")
    expected = moebius(lambda s: snapshot(acc(edges, s, PROD), acc(roots, s, PROD)), [t for _, t, _ in edges + roots], PROD)
    assert_updates_equal(rows, expected)


def test_recursive_query_in_an_incremental_view(spark, tmp_path):
    """sd.sql inside sd.incremental (stage 2: per-operator traces, the loop in one task):
    the updates returned batch by batch add up to the one-shot answer."""
    query, snapshot = FORMS["with_mutually_recursive"]
    edges, roots = _graphs(22, INT, n_graphs=2)
    view = sd.incremental(str(tmp_path), lambda edges, roots: sd.sql(query, edges=edges, roots=roots), stage=2)
    got: Updates = []
    for upto in (2, 4):
        batch = {name: _df(spark, [u for u in ups if upto - 2 <= u[1] < upto], cols, INT)
                 for name, ups, cols in (("edges", edges, ["g", "src", "dst"]), ("roots", roots, ["g", "node"]))}
        got += rows_of(view.update(upto=upto, **batch))
    expected = moebius(lambda s: snapshot(acc(edges, s, INT), acc(roots, s, INT)), [t for _, t, _ in edges + roots], INT)
    assert_updates_equal(consolidate(got), expected)


COUNTED = """
WITH RECURSIVE r(node, n) AS (
    SELECT node, 1 FROM roots
    UNION
    SELECT e.dst, count(*) FROM r JOIN edges e ON r.node = e.src GROUP BY e.dst
)
SELECT node, n FROM r"""


def _counted(edges: Counter, roots: Counter) -> Counter:
    """``COUNTED``'s fixed point on one snapshot, started from the distinct roots as SQL does:
    ``r = distinct(base ∪ step(r))``, ``step`` counting the rows of ``r`` reaching each node."""
    base = {(n, 1) for (n,), m in roots.items() if m > 0}
    r: set[tuple[int, int]] = set(base)
    while True:
        reached: Counter = Counter()
        for (a, b), m in edges.items():
            if m > 0:
                reached.update({b: sum(1 for node, _ in r if node == a) * m})
        nxt = base | {(b, c) for b, c in reached.items() if c}
        if nxt == r:
            return Counter(dict.fromkeys(r, 1))
        r = nxt


def test_an_aggregating_union_starts_from_its_distinct_rows_inside_the_loop(spark):
    """A ``UNION`` whose recursive term aggregates starts from the distinct rows of its
    non-recursive term (here a root held twice, then three times: ``count(*)`` would see it
    each time otherwise).  That ``distinct`` is read inside the loop, so the whole query is
    the loop's one job of one stage (it was a reduction's stages before the loop and a job
    counting its rows)."""
    from spark_differential.core.jobs import count_jobs

    edges_u = [((1, 2), 0, 1), ((2, 3), 0, 1), ((1, 3), 1, 1), ((3, 4), 1, 2), ((1, 2), 2, -1)]
    roots_u = [((1,), 0, 2), ((1,), 1, 1), ((3,), 2, 1)]
    edges = spark.createDataFrame([(*d, t, r) for d, t, r in edges_u], "src long, dst long, time long, diff long")
    roots = spark.createDataFrame([(*d, t, r) for d, t, r in roots_u], "node long, time long, diff long")
    with count_jobs(spark) as jobs:
        got = rows_of(sd.sql(COUNTED, edges=edges, roots=roots))
    expected = moebius(lambda s: _counted(acc(edges_u, s, INT), acc(roots_u, s, INT)), [0, 1, 2], INT)
    assert_updates_equal(got, expected)
    assert (jobs.jobs, jobs.stages) == (1, 1)


def test_a_loop_started_empty_has_the_same_iteration_limit(spark, monkeypatch):
    """The strict aggregating recursion starts empty, one iteration ahead of the recursion
    from the non-recursive term's rows; that iteration does not count against
    ``spark_differential.sql.maxIterations``: the smallest limit that lets it finish is the
    one the same recursion needs read through ``distinct`` from the term's rows."""
    import importlib

    fixpoint = importlib.import_module("spark_differential.sql.fixpoint")
    edges = spark.createDataFrame([(i, i + 1, 0, 1) for i in range(2)], "src long, dst long, time long, diff long")
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    query = ("WITH RECURSIVE dist(node, d) AS (SELECT node, 0 FROM roots UNION SELECT e.dst, min(dist.d + 1) "
             "FROM dist JOIN edges e ON dist.node = e.src GROUP BY e.dst) SELECT node, d FROM dist")

    def finishes(limit: int) -> bool:
        spark.conf.set("spark_differential.sql.maxIterations", str(limit))
        try:
            rows_of(sd.sql(query, edges=edges, roots=roots))
            return True
        except IterationLimitExceeded:
            return False
        finally:
            spark.conf.unset("spark_differential.sql.maxIterations")

    with monkeypatch.context() as m:
        m.setattr(fixpoint, "_from_nothing", lambda group, member: False)
        needed = next(n for n in range(2, 12) if finishes(n))
    assert finishes(needed) and not finishes(needed - 1)


# ----------------------------------------------------------------------------- limits and errors


@pytest.fixture
def small_graph(spark):
    edges = spark.createDataFrame([(1, 2, 0, 1), (2, 1, 1, 1)], "src long, dst long, time long, diff long")
    roots = spark.createDataFrame([(1, 0, 1)], "node long, time long, diff long")
    return {"edges": edges, "roots": roots}


CYCLE_ALL = """WITH RECURSIVE walk(node) AS (SELECT node FROM roots
               UNION ALL SELECT e.dst FROM walk w JOIN edges e ON w.node = e.src) SELECT node FROM walk"""


@pytest.mark.connect
def test_union_all_around_a_cycle_stops_at_the_limit_naming_the_cte(spark, small_graph):
    spark.conf.set("spark_differential.sql.maxIterations", "6")
    try:
        with pytest.raises(IterationLimitExceeded, match=r"recursive CTE `walk` did not reach a fixed point within 6 "
                           r"iterations.*UNION ALL.*spark_differential\.sql\.maxIterations") as info:
            sd.sql(CYCLE_ALL, **small_graph)
    finally:
        spark.conf.unset("spark_differential.sql.maxIterations")
    assert info.value.iterations >= 6 and info.value.changing > 0
    # the same recursion with UNION terminates: the cycle is a set of two nodes
    out = sd.sql(CYCLE_ALL.replace("UNION ALL", "UNION"), **small_graph)
    assert sorted(rows_of(out)) == [((1,), 0, 1), ((2,), 0, 1)]


def test_with_mutually_recursive_error_at_recursion_limit(small_graph):
    query = """WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 3) c(n bigint) AS (
                   SELECT node FROM roots UNION ALL SELECT n + 1 FROM c) SELECT n FROM c"""
    with pytest.raises(IterationLimitExceeded, match=r"`c` did not reach a fixed point within 3 iterations.*ERROR AT "
                       r"RECURSION LIMIT"):
        sd.sql(query, **small_graph)


ERRORS = [
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT n FROM r) SELECT n FROM r LIMIT 3", "LIMIT"),
    ("WITH RECURSIVE r(time) AS (SELECT node FROM roots UNION SELECT time FROM r) SELECT time FROM r", "`time`"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT n FROM r) SELECT n, n FROM r", "two columns"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM nodes UNION SELECT n FROM r) SELECT n FROM r", "unknown table `nodes`"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT r.n FROM r WHERE EXISTS (SELECT 1 FROM r x)) "
     "SELECT n FROM r", "inside a subquery"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT e.dst FROM edges e LEFT JOIN r ON r.n = e.src) "
     "SELECT n FROM r", "NULL side of a LEFT JOIN"),
    ("WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5) c(n bigint) AS (SELECT node FROM roots) SELECT n FROM c",
     "RETURN AT RECURSION LIMIT"),
    ("WITH MUTUALLY RECURSIVE c AS (SELECT node FROM roots UNION SELECT node FROM c) SELECT * FROM c", "types"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT n FROM r WHERE) SELECT n FROM r", "could not parse"),
    ("WITH RECURSIVE r(n) AS (SELECT node FROM roots UNION SELECT x FROM (WITH RECURSIVE s(x) AS "
     "(SELECT n FROM r UNION SELECT x FROM s) SELECT x FROM s) q) SELECT n FROM r", "nested recursion"),
]


@pytest.mark.parametrize("query,message", [pytest.param(*e, marks=[pytest.mark.connect] if i == 4 else [], id=f"e{i}")
                                           for i, e in enumerate(ERRORS)])
def test_misuse_is_an_sql_error_before_any_job(spark, small_graph, query: str, message: str):
    # jobs can only be counted on a classic session; on Spark Connect the error itself is checked
    with no_spark_job(spark) if not CONNECT else contextlib.nullcontext(), pytest.raises(SqlError, match=message):
        sd.sql(query, **small_graph)


def test_keyword_tables_are_all_collections_or_all_tables(spark, small_graph):
    plain = spark.createDataFrame([(1,)], "node long")
    with pytest.raises(SqlError, match=r"some keyword tables are collections.*\['roots'\]"):
        sd.sql(CYCLE_ALL, edges=small_graph["edges"], roots=plain)
    dated = small_graph["roots"].selectExpr("node", "CAST(time AS int) AS time", "diff")
    with pytest.raises(SqlError, match="different time types"):
        sd.sql(CYCLE_ALL, edges=small_graph["edges"], roots=dated)
    spark.conf.set("spark_differential.sql.maxIterations", "none")
    try:
        with pytest.raises(ConfigurationError, match="maxIterations"):
            sd.sql(CYCLE_ALL, **small_graph)
    finally:
        spark.conf.unset("spark_differential.sql.maxIterations")
