"""As-of joins from Spark SQL text: :func:`sql`.

``sd.sql(query, **views)`` runs a Spark SQL query that may contain as-of joins,
written either in Spark 4.3's syntax::

    SELECT ... FROM orders o [INNER | LEFT [OUTER]] ASOF JOIN prices p
        MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item      -- or USING (item)

or in DuckDB's::

    SELECT ... FROM orders o ASOF [LEFT] JOIN prices p
        ON o.item = p.item AND o.ts >= p.ts                    -- or USING (item, ts)

Every comparison (``>=``, ``>``, ``<=``, ``<``), right, full, semi and anti joins,
null-safe keys and other conditions in ``ON`` are accepted.  Keys are optional:
``MATCH_CONDITION (o.ts >= p.ts)`` with no ``ON``, ``ON o.ts >= p.ts`` alone or
``USING (ts)`` join every left row with one global timeline (the whole right
table).  What the as-of join means on ``(data, time, diff)`` is in :mod:`spark_differential.sql.asof`.

How a query runs
----------------
The query is parsed with sqlglot (a Spark dialect taught ``MATCH_CONDITION`` and
``LEFT ASOF JOIN``; no regular expressions).  Each ``o ASOF JOIN p`` pair is
computed by this library and replaced in the syntax tree by a single relation
(aliased like the left table) holding the left columns and the right columns;
column references to ``p`` are rewritten on the tree to point at it.  The rest
of the query (projections, WHERE, GROUP BY, ORDER BY, other joins, CTEs,
subqueries) is generated back as Spark SQL and run by ``spark.sql``.  Keyword
DataFrames and as-of results are handed to ``spark.sql`` as DataFrame arguments
(``spark.sql("... {t} ...", t=df)``), so no temporary views are left behind and
the same code runs on a classic or a Spark Connect session.

Malformed or unsupported queries raise :class:`~spark_differential.errors.SqlError`
naming the clause, before any Spark job runs.  Queries without ``ASOF JOIN`` (and
without keyword DataFrames) go to ``spark.sql`` unchanged.  See ``docs/sql.md``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_differential.core.lazy import lazy
from spark_differential.core.planning import without_origin_tracking
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _dialect, _is_asof, _parse
from spark_differential.sql.recursive import _is_recursive, _run_recursive
from spark_differential.sql.rewrite import _Compiler
from spark_differential.sql.runner import _spark_sql

exp = lazy("sqlglot.expressions")

__all__ = ["sql"]

def __getattr__(name: str) -> Any:
    if name == "_SparkAsof":  # the dialect class, for tests and callers of sqlglot
        return _dialect()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- public


@without_origin_tracking
def sql(query: str, /, **views: DataFrame) -> DataFrame:
    """Run a Spark SQL query whose as-of joins and recursive CTEs are computed differentially.

    ``query`` is one Spark SQL statement.  ``ASOF JOIN`` may be written in Spark
    4.3's (and Snowflake's) syntax, ``o [INNER | LEFT | RIGHT | FULL [OUTER] | LEFT
    SEMI | LEFT ANTI] ASOF JOIN p MATCH_CONDITION (o.ts >= p.ts) ON o.k = p.k`` (or
    ``USING (k)``), or in DuckDB's, ``o ASOF [LEFT | RIGHT | FULL | SEMI | ANTI] JOIN p
    ON o.k = p.k AND o.ts >= p.ts`` (or ``USING (k, ts)``: the last column is the
    time).  Each left row picks at most one right row with equal keys (``=`` or ``IS
    NOT DISTINCT FROM``): the greatest ``p.ts`` at or before ``o.ts`` (``>=``; ``>``:
    strictly before), or the least at or after it (``<=``, ``<``); mirrored spellings
    are accepted, and among right rows sharing that time the last (first) in the
    order of the right's other columns, as :func:`dd_merge_asof`.  Other conditions
    of ``ON`` restrict each left row's candidates (DuckDB's meaning).  Keys are
    optional (``MATCH_CONDITION (o.ts >= p.ts)`` alone, ``ON o.ts >= p.ts``, ``USING
    (ts)``): the whole right table is then one timeline, cut into ranges of the time
    for the tasks.  The as-of join must directly follow the first table of its
    ``FROM``; any other SQL may surround it (docs/sql.md).

    Tables are the keyword arguments (``orders=df``; names match
    case-insensitively) or, for other names, the CTEs of the query and the Spark
    catalog (tables and temporary views).  The result is an ordinary DataFrame
    (no ``time``/``diff`` columns).  Raises
    :class:`~spark_differential.errors.SqlError` before any Spark job for
    malformed or unsupported queries, unknown tables and Spark's analysis errors.

    A query with ``WITH RECURSIVE`` (or Materialize's ``WITH MUTUALLY RECURSIVE``)
    is compiled to ``dd_iterate``: ``UNION`` is the least fixed point (set
    semantics), ``UNION ALL`` keeps every derived row, aggregates and mutual
    recursion inside the recursion have differential dataflow's meaning, and every
    loop stops after ``spark_differential.sql.maxIterations`` iterations (default
    1000) with :class:`~spark_differential.errors.IterationLimitExceeded` naming the
    CTE.  When the keyword tables are collections (``time`` and ``diff`` columns) the
    whole query is computed on them and the result is a collection: at every time,
    the query's answer on the inputs at that time.  See ``docs/sql.md``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> orders = spark.createDataFrame([("bacon", "ann", 3), ("bacon", "bob", 6)], "item string, who string, ts long")
    >>> prices = spark.createDataFrame([("bacon", 2, 1), ("bacon", 4, 5)], "item string, price int, ts long")
    >>> sd.sql('''SELECT o.who, o.ts, p.price, p.ts AS since
    ...           FROM orders o ASOF JOIN prices p MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item
    ...           ORDER BY o.ts''', orders=orders, prices=prices).show()
    +---+---+-----+-----+
    |who| ts|price|since|
    +---+---+-----+-----+
    |ann|  3|    2|    1|
    |bob|  6|    4|    5|
    +---+---+-----+-----+
    <BLANKLINE>

    Without keys, against one timeline of exchange rates:

    >>> rates = spark.createDataFrame([(1.1, 1), (1.2, 4)], "rate double, ts long")
    >>> sd.sql("SELECT o.who, r.rate FROM orders o ASOF JOIN rates r ON o.ts >= r.ts ORDER BY o.ts",
    ...        orders=orders, rates=rates).show()
    +---+----+
    |who|rate|
    +---+----+
    |ann| 1.1|
    |bob| 1.2|
    +---+----+
    <BLANKLINE>

    Nodes reachable from node 1 while the edge ``2 -> 3`` exists (until time 5):

    >>> edges = spark.createDataFrame([(1, 2, 0, 1), (2, 3, 0, 1), (2, 3, 5, -1)], "src long, dst long, time long, diff long")
    >>> sd.sql('''WITH RECURSIVE reach(node) AS (SELECT 1 UNION SELECT e.dst FROM reach r JOIN edges e ON r.node = e.src)
    ...           SELECT node FROM reach''', edges=edges).orderBy("time", "node").show()
    +----+----+----+
    |node|time|diff|
    +----+----+----+
    |   1|   0|   1|
    |   2|   0|   1|
    |   3|   0|   1|
    |   3|   5|  -1|
    +----+----+----+
    <BLANKLINE>
    """
    if not isinstance(query, str):
        raise TypeError(f"{_OP}: the query must be a string, got {type(query).__name__}")
    for name, df in views.items():
        if not isinstance(df, DataFrame):
            raise TypeError(f"{_OP}: table `{name}` must be a pyspark DataFrame, got {type(df).__name__}")
    spark = next(iter(views.values())).sparkSession if views else SparkSession.active()
    tree = _parse(query)
    if tree is not None and _is_recursive(tree):
        return _run_recursive(spark, tree, views)
    has_asof = tree is not None and any(_is_asof(j) for j in tree.find_all(exp.Join))
    if tree is None or (not has_asof and not views):
        # nothing for us to do (or sqlglot cannot read it and it has no ASOF JOIN):
        # Spark's own parser is the authority on plain Spark SQL
        return _spark_sql(spark, query, {}, rewritten=False)
    if not isinstance(tree, exp.Query):
        if has_asof:
            raise SqlError(f"{_OP}: ASOF JOIN is supported in queries (SELECT ...), not in a {tree.key.upper()} statement")
        raise SqlError(f"{_OP}: keyword tables can only be used with a query (SELECT ...), not a {tree.key.upper()} statement")
    return _Compiler(spark, views).compile_top(tree)
