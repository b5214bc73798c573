"""Graph algorithms over changing graphs, built only from public operators.

On ``(data, time, diff)``: every function takes collections of edge updates
(``src``, ``dst``) and returns the full history of its answer: at every time the
output accumulates to the algorithm applied to the edges (and roots) accumulated
at that time.

* :func:`bfs` — breadth-first distances from root nodes (seed 001).
* :func:`reachability` — for every root, the nodes it reaches (seed 004).
* :func:`connected_components` — each node labelled by the smallest node id of
  its (undirected) component.
* :func:`triangles` — triangles ``(a, b, c)`` with edges ``a→b, a→c, b→c``, by
  seed 003's delta queries (``differentiate``, three delta rules nudged in the
  alt/neu time so simultaneous additions are counted once, ``integrate``);
  :func:`triangles_naive` is the two-join formulation it must agree with.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, inspect, quoted
from spark_differential.core.planning import without_origin_tracking
from spark_differential.errors import TimeTypeError
from spark_differential.operators.calculus import dd_delay, differentiate, integrate


def _edges(edges: DataFrame, src: str, dst: str, as_src: str = "src") -> DataFrame:
    """``edges``' columns ``src`` and ``dst`` as ``as_src`` and ``dst`` (SQL text: one py4j round
    trip for the projection, where Columns cost a few each)."""
    return edges.selectExpr(f"{quoted(src)} AS {as_src}", f"{quoted(dst)} AS dst", quoted(TIME), quoted(DIFF))


@without_origin_tracking
def bfs(
    edges: DataFrame,
    roots: DataFrame,
    src: str = "src",
    dst: str = "dst",
    max_iterations: int | None = None,
) -> DataFrame:
    """Breadth-first distances ``(node, dist)`` from the ``roots`` collection (column ``node``).

    Written as differential dataflow's ``examples/bfs.rs``: ``roots.map(|x| (x, 0))
    .iterate(|d| edges.join(d).map(+1).concat(roots).min())``.  Seed 001 concatenates
    the loop variable ``d`` instead of the roots; both reach the same distances with
    the same differences at every iteration, but here ``dd_min`` does not also keep
    the history of ``d`` (about a third of its input rows).

    >>> import spark_differential as sd
    >>> from spark_differential.algorithms import bfs
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (0, 2, 3, 1)], "src long, dst long, time long, diff long")
    >>> roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    >>> bfs(edges, roots).orderBy("time", "node", "diff").show()
    +----+----+----+----+
    |node|dist|time|diff|
    +----+----+----+----+
    |   0|   0|   0|   1|
    |   1|   1|   0|   1|
    |   2|   2|   0|   1|
    |   2|   2|   3|  -1|
    |   2|   1|   3|   1|
    +----+----+----+----+
    <BLANKLINE>
    """
    e = _edges(edges, src, dst, as_src="node")
    start = roots.selectExpr("node", "CAST(0 AS BIGINT) AS dist", quoted(TIME), quoted(DIFF))

    def step(d: DataFrame) -> DataFrame:
        return (
            d.dd_join(e, on="node")
            .selectExpr("dst AS node", "dist + 1 AS dist", quoted(TIME), quoted(DIFF))
            .dd_concat(start, consolidate=False)  # dd_min consolidates its input anyway
            .dd_min(by="node", col="dist")
        )

    return start.dd_iterate(step, max_iterations=max_iterations)


@without_origin_tracking
def reachability(
    edges: DataFrame,
    roots: DataFrame,
    src: str = "src",
    dst: str = "dst",
    max_iterations: int | None = None,
) -> DataFrame:
    """For every root (column ``root`` of ``roots``), the nodes it reaches: ``(root, node)``.

    Seed 004's multi-root reachability: ``roots.map(|r| (r, r)).iterate(|reach|
    reach.map(swap).join(edges).concat(roots).distinct())``.

    >>> import spark_differential as sd
    >>> from spark_differential.algorithms import reachability
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (1, 2, 4, -1)], "src long, dst long, time long, diff long")
    >>> roots = spark.createDataFrame([(0, 0, 1)], "root long, time long, diff long")
    >>> reachability(edges, roots).orderBy("time", "node").show()
    +----+----+----+----+
    |root|node|time|diff|
    +----+----+----+----+
    |   0|   0|   0|   1|
    |   0|   1|   0|   1|
    |   0|   2|   0|   1|
    |   0|   2|   4|  -1|
    +----+----+----+----+
    <BLANKLINE>
    """
    e = _edges(edges, src, dst, as_src="node")
    start = roots.select("root", F.col("root").alias("node"), TIME, DIFF)

    def step(reach: DataFrame) -> DataFrame:
        return (
            reach.dd_join(e, on="node")
            .select("root", F.col("dst").alias("node"), TIME, DIFF)
            .dd_concat(reach, consolidate=False)
            .dd_distinct()
        )

    return start.dd_iterate(step, max_iterations=max_iterations)


@without_origin_tracking
def connected_components(
    edges: DataFrame,
    nodes: DataFrame,
    src: str = "src",
    dst: str = "dst",
    max_iterations: int | None = None,
) -> DataFrame:
    """``(node, label)``: the smallest node id in each node's undirected component.

    ``nodes`` is a collection with a ``node`` column (nodes without edges are their
    own component).  Below, the edge ``2→3`` arriving at time 2 joins ``{1, 2}`` and
    ``{3, 4}``: nodes 3 and 4 change their label from 3 to 1.

    >>> import spark_differential as sd
    >>> from spark_differential.algorithms import connected_components
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(1, 2, 0, 1), (3, 4, 0, 1), (2, 3, 2, 1)], "src long, dst long, time long, diff long")
    >>> nodes = spark.createDataFrame([(n, 0, 1) for n in (1, 2, 3, 4)], "node long, time long, diff long")
    >>> connected_components(edges, nodes).orderBy("time", "node", "diff").show()
    +----+-----+----+----+
    |node|label|time|diff|
    +----+-----+----+----+
    |   1|    1|   0|   1|
    |   2|    1|   0|   1|
    |   3|    3|   0|   1|
    |   4|    3|   0|   1|
    |   3|    3|   2|  -1|
    |   3|    1|   2|   1|
    |   4|    3|   2|  -1|
    |   4|    1|   2|   1|
    +----+-----+----+----+
    <BLANKLINE>
    """
    e = _edges(edges, src, dst)
    sym = e.dd_concat(e.select(F.col("dst").alias("src"), F.col("src").alias("dst"), TIME, DIFF))
    sym = sym.withColumnRenamed("src", "node")
    start = nodes.select("node", F.col("node").alias("label"), TIME, DIFF)

    def step(x: DataFrame) -> DataFrame:
        return (
            x.dd_join(sym, on="node")
            .select(F.col("dst").alias("node"), "label", TIME, DIFF)
            .dd_concat(x, consolidate=False)
            .dd_min(by="node", col="label")
        )

    return start.dd_iterate(step, max_iterations=max_iterations)


@without_origin_tracking
def triangles_naive(edges: DataFrame, src: str = "src", dst: str = "dst") -> DataFrame:
    """``(a, b, c)`` by ``(edges ⋈_a edges)`` semijoined with edges on ``(b, c)`` (seed 003's first form).

    This arranges the wedge collection ``(a,b) ⋈ (a,c)``: its size is the sum of
    squared out-degrees.  Use :func:`triangles` instead, unless times are partially
    ordered (struct times), which only this form handles.

    >>> import spark_differential as sd
    >>> from spark_differential.algorithms import triangles_naive
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(1, 2, 0, 1), (1, 3, 0, 1), (2, 3, 0, 1), (2, 3, 5, -1)],
    ...                               "src long, dst long, time long, diff long")
    >>> triangles_naive(edges).orderBy("time").show()
    +---+---+---+----+----+
    |  a|  b|  c|time|diff|
    +---+---+---+----+----+
    |  1|  2|  3|   0|   1|
    |  1|  2|  3|   5|  -1|
    +---+---+---+----+----+
    <BLANKLINE>
    """
    e = _edges(edges, src, dst)
    ab = e.select(F.col("src").alias("a"), F.col("dst").alias("b"), TIME, DIFF)
    ac = e.select(F.col("src").alias("a"), F.col("dst").alias("c"), TIME, DIFF)
    bc = e.select(F.col("src").alias("b"), F.col("dst").alias("c"), TIME, DIFF)
    return ab.dd_join(ac, on="a").dd_semijoin(bc, on=["b", "c"]).select("a", "b", "c", TIME, DIFF)


@without_origin_tracking
def triangles(edges: DataFrame, src: str = "src", dst: str = "dst") -> DataFrame:
    """Triangles ``(a, b, c)`` with edges ``a→b``, ``a→c``, ``b→c``, by delta queries (seed 003).

    Each change of ``edges`` (differentiated: a blip at its own moment) is joined
    with the other two edge relations as they stand at that moment, and the three
    rules' results are integrated.  Concurrent changes are ordered by the alt/neu
    nudging: rule AB sees the others' same-time changes hidden (``dd_delay``), rule
    AC sees AB's, rule BC sees both, so a triangle whose three edges arrive together
    is counted once.  The wedge collection ``(a,b) ⋈ (a,c)`` is never arranged: the
    joins see a stream of blips on one side, which the join kernel detects and
    answers with lookups into the edges alone.

    >>> import spark_differential as sd
    >>> from spark_differential.algorithms import triangles
    >>> spark = sd.session()
    >>> edges = spark.createDataFrame([(1, 2, 0, 1), (1, 3, 0, 1), (2, 3, 0, 1), (2, 3, 5, -1)],
    ...                               "src long, dst long, time long, diff long")
    >>> triangles(edges).orderBy("time").show()
    +---+---+---+----+----+
    |  a|  b|  c|time|diff|
    +---+---+---+----+----+
    |  1|  2|  3|   0|   1|
    |  1|  2|  3|   5|  -1|
    +---+---+---+----+----+
    <BLANKLINE>

    Times must be totally ordered (integers, dates, timestamps).  With partially
    ordered (struct) times a triangle can appear at the lub of its three edges'
    times, which no delta rule sees (each rule only looks back from one edge's
    time); :func:`triangles_naive` is exact there, and this function refuses.
    """
    cs = inspect(edges, op="triangles")
    if not cs.ttype.is_total():
        raise TimeTypeError(
            f"triangles: delta queries need totally ordered times, got {cs.ttype.describe()}: a triangle "
            "can first appear at the lub of its edges' times, which no delta rule looks up. "
            "Use spark_differential.algorithms.triangles_naive for partially ordered times."
        )
    e = _edges(edges, src, dst)
    d = differentiate(e)
    alt = e  # enters the alt/neu time at alt(t) automatically
    neu = dd_delay(e)

    def rel(x: DataFrame, a: str, b: str) -> DataFrame:
        return x.select(F.col("src").alias(a), F.col("dst").alias(b), TIME, DIFF)

    # dT/dAB := dAB ⋈ AC ⋈ BC, the others' concurrent changes hidden
    d_ab = rel(d, "a", "b").dd_join(rel(neu, "a", "c"), on="a").dd_semijoin(rel(neu, "b", "c"), on=["b", "c"])
    # dT/dAC := dAC ⋈ AB ⋈ BC, concurrent AB changes visible
    d_ac = rel(d, "a", "c").dd_join(rel(alt, "a", "b"), on="a").dd_semijoin(rel(neu, "b", "c"), on=["b", "c"])
    # dT/dBC := dBC ⋈ AB ⋈ AC, all concurrent changes visible
    d_bc = rel(d, "b", "c").dd_join(rel(alt, "a", "b"), on="b").dd_semijoin(rel(alt, "a", "c"), on=["a", "c"])
    cols = ["a", "b", "c", TIME, DIFF]
    return integrate(d_ab.select(*cols).dd_concat(d_ac.select(*cols), d_bc.select(*cols)))
