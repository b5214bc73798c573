"""As-of joins from Spark SQL text: :func:`sql`.

``sd.sql(query, **views)`` runs a Spark SQL query that may contain as-of joins,
written either in Spark 4.3's syntax::

    SELECT ... FROM orders o [INNER | LEFT [OUTER]] ASOF JOIN prices p
        MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item      -- or USING (item)

or in DuckDB's::

    SELECT ... FROM orders o ASOF [LEFT] JOIN prices p
        ON o.item = p.item AND o.ts >= p.ts                    -- or USING (item, ts)

Keys are optional: ``MATCH_CONDITION (o.ts >= p.ts)`` with no ``ON``, ``ON o.ts >=
p.ts`` alone or ``USING (ts)`` join every left row with one global timeline (the
whole right table).

What an as-of join means on ``(data, time, diff)``
--------------------------------------------------
An as-of join is the seed-003 calculus (``differentiate``, ``join``,
``integrate``) applied to two ordinary tables:

* every row of the left table (``orders``) is one update ``(row, o.ts, +1)``: an
  insertion at its own time (:func:`spark_differential.collection` with
  ``time = o.ts``);
* the right table (``prices``) is a price *history*: each row says "from ``p.ts``
  on, the key ``p.item`` has this row as its value", which
  :func:`spark_differential.from_upserts` turns into a changing collection
  (insert at ``p.ts``, retract at the key's next ``p.ts``; with no keys the whole
  table is one key: ``key=[]``);
* :func:`spark_differential.dd_asof_join` meets every left update with the right
  collection as accumulated at the update's time (``>=``) or just before it
  (``>``: ``strict=True``), and the result's ``diff`` (how many copies) is
  expanded back into that many ordinary rows.

So for each left row the result holds the right row(s) with equal keys and the
greatest ``p.ts`` with ``p.ts <= o.ts`` (``<`` for ``>``) -- DuckDB's ASOF JOIN.
``LEFT`` keeps left rows that find nothing, with NULLs for the right columns.
Without keys every row of both tables is on one single key, so the as-of lookup
runs in one Spark task holding the right table's whole timeline (exact, but not
parallel).

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

import functools
import itertools
import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, quoted
from spark_differential.core.history import note as _note_history
from spark_differential.core.lazy import lazy
from spark_differential.core.planning import without_origin_tracking
from spark_differential.engine.distributed import run_pair_sql
from spark_differential.errors import SqlError
from spark_differential.io.tables import collection
from spark_differential.kernels import asof as _kasof
from spark_differential.kernels.common import NEW as _KNEW
from spark_differential.kernels.common import D as _KD
from spark_differential.kernels.common import keys as _kkeys
from spark_differential.kernels.common import names as _knames
from spark_differential.kernels.common import times as _ktimes
from spark_differential.operators.calculus import asof_join_history

# sqlglot is imported on the first sd.sql call, not with the package
sqlglot = lazy("sqlglot")
exp = lazy("sqlglot.expressions")
_errors = lazy("sqlglot.errors")
_scope = lazy("sqlglot.optimizer.scope")
_tokens = lazy("sqlglot.tokens")

__all__ = ["sql"]

_log = logging.getLogger("spark_differential.sql")


def __getattr__(name: str) -> Any:
    if name == "_SparkAsof":  # the dialect class, for tests and callers of sqlglot
        return _dialect()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_OP = "sd.sql"
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)
_FRACTIONAL = (T.FloatType, T.DoubleType)
_TIME_TYPES = (*_INTEGRAL, T.DateType, T.TimestampType, T.TimestampNTZType)
# Internal column names of the as-of pipeline (not the reserved ``_sd_`` prefix:
# collections reject data columns that use it).
_TIME = "sdasof_time"
# the clauses of a SELECT that :meth:`_Compiler.run_simple` runs without spark.sql
_SIMPLE_ARGS = ("expressions", "from_", "where")


@functools.cache
def _dialect() -> Any:
    """The sqlglot dialect ``_SparkAsof`` (built on first use: defining it imports sqlglot)."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.tokens import TokenType

    class _SparkAsof(Spark):
        """Spark SQL plus the two as-of spellings sqlglot's Spark dialect rejects.

        sqlglot (30.x) parses ``ASOF [LEFT] JOIN ... ON ...`` (DuckDB's form) in every
        dialect, but ``MATCH_CONDITION`` only in the Snowflake dialect (whose tokenizer
        has the keyword), and ``LEFT ASOF JOIN`` (Spark 4.3 puts the join side *before*
        ``ASOF``) in none.  Parsing the whole query as Snowflake would misread Spark
        syntax (backquoted identifiers, functions), so this dialect is Spark with the
        ``MATCH_CONDITION`` keyword (still usable as an identifier) and with ``ASOF``
        accepted after the join side/kind.
        """

        class Tokenizer(Spark.Tokenizer):
            KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "MATCH_CONDITION": TokenType.MATCH_CONDITION}

        class Parser(Spark.Parser):
            # usable as a column name / alias; TABLE_ALIAS_TOKENS (derived in the base
            # class) does not include it, so `prices p MATCH_CONDITION (...)` parses.
            ID_VAR_TOKENS = {*Spark.Parser.ID_VAR_TOKENS, TokenType.MATCH_CONDITION}

            def _parse_join_parts(self) -> tuple[Any, Any, Any]:
                method, side, kind = super()._parse_join_parts()
                if method is None and (side is not None or kind is not None) and self._match(TokenType.ASOF):
                    method = self._prev  # Spark 4.3: `LEFT [OUTER] ASOF JOIN`, `INNER ASOF JOIN`
                return method, side, kind

    return _SparkAsof


# --------------------------------------------------------------------------- public


@without_origin_tracking
def sql(query: str, /, **views: DataFrame) -> DataFrame:
    """Run a Spark SQL query whose as-of joins are computed differentially.

    ``query`` is one Spark SQL statement.  ``ASOF JOIN`` may be written in Spark
    4.3's syntax, ``o [INNER | LEFT [OUTER]] ASOF JOIN p MATCH_CONDITION (o.ts >= p.ts)
    ON o.k = p.k`` (or ``USING (k)``), or in DuckDB's, ``o ASOF [LEFT] JOIN p ON
    o.k = p.k AND o.ts >= p.ts`` (or ``USING (k, ts)``: the last column is the
    time).  ``>`` asks for right rows strictly before the left row; the mirrored
    ``p.ts <= o.ts`` / ``p.ts < o.ts`` is accepted too.  Keys are optional
    (``MATCH_CONDITION (o.ts >= p.ts)`` alone, ``ON o.ts >= p.ts``, ``USING (ts)``):
    without them the whole right table is one timeline, and the as-of lookup runs
    in a single Spark task that holds all of it.  Each left row gets the
    right row(s) with equal keys and the greatest ``p.ts`` allowed (several if
    several right rows share that ``p.ts`` for the key); ``LEFT`` keeps unmatched
    left rows with NULLs.  The as-of join must directly follow the first table of
    its ``FROM``; any other SQL may surround it.

    Tables are the keyword arguments (``orders=df``; names match
    case-insensitively) or, for other names, the CTEs of the query and the Spark
    catalog (tables and temporary views).  The result is an ordinary DataFrame
    (no ``time``/``diff`` columns).  Raises
    :class:`~spark_differential.errors.SqlError` before any Spark job for
    malformed or unsupported queries, unknown tables and Spark's analysis errors.

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
    """
    if not isinstance(query, str):
        raise TypeError(f"{_OP}: the query must be a string, got {type(query).__name__}")
    for name, df in views.items():
        if not isinstance(df, DataFrame):
            raise TypeError(f"{_OP}: table `{name}` must be a pyspark DataFrame, got {type(df).__name__}")
    spark = next(iter(views.values())).sparkSession if views else SparkSession.active()
    tree = _parse(query)
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


# --------------------------------------------------------------------------- parsing


def _parse(query: str) -> exp.Expr | None:
    """The query's syntax tree; None when sqlglot cannot read a query without ASOF."""
    try:
        stmts = [s for s in sqlglot.parse(query, read=_dialect()) if s is not None]
    except (_errors.ParseError, _errors.TokenError) as e:
        if _mentions_asof(query):
            raise SqlError(f"{_OP}: could not parse the query: {_parse_message(e)}") from None
        return None
    if len(stmts) != 1:
        raise SqlError(f"{_OP}: expected exactly one SQL statement, got {len(stmts)}")
    return stmts[0]


def _mentions_asof(query: str) -> bool:
    try:
        tokens = _dialect()().tokenize(query)
    except _errors.SqlglotError:
        return "asof" in query.lower()
    return any(t.token_type in (_tokens.TokenType.ASOF, _tokens.TokenType.MATCH_CONDITION) for t in tokens)


def _parse_message(e: Any) -> str:
    errors = getattr(e, "errors", None) or []
    if errors:
        first = errors[0]
        where = f" (line {first.get('line')}, column {first.get('col')})" if first.get("line") else ""
        near = first.get("highlight")
        return f"{first.get('description')}{where}" + (f" near `{near}`" if near else "")
    return str(e).splitlines()[0]


def _is_asof(j: exp.Join) -> bool:
    return str(j.args.get("method") or "").upper() == "ASOF"


def _sql_of(e: exp.Expr) -> str:
    return e.sql(dialect="spark")


# --------------------------------------------------------------------------- running


def _spark_sql(
    spark: Any,
    text: str,
    bindings: Mapping[str, DataFrame],
    *,
    rewritten: bool,
    what: str = "",
    names: Mapping[str, str] | None = None,
) -> DataFrame:
    """``spark.sql`` with DataFrame arguments; Spark's parse/analysis errors as SqlError.

    A rewritten query's errors speak of the user's names: ``names`` maps the
    rewrite's internal names (DataFrame placeholders, renamed right-side columns) to
    what the user wrote, and positions (which point into the rewritten text) are
    dropped; the rewritten text is logged at DEBUG level only."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        df = spark.sql(text, **bindings) if bindings else spark.sql(text)
        df.schema  # noqa: B018 - Spark Connect analyses lazily: surface errors here, still before any job
        return df
    except ParseException as e:
        if rewritten:
            _log.debug("sd.sql: the rewritten query Spark could not parse: %s", text)
            raise SqlError(f"{_OP}: Spark could not parse the query{what}: {_user_names(_first_line(e), names)}") from e
        raise SqlError(f"{_OP}: Spark could not parse the query{what}: {_first_line(e)}") from e
    except AnalysisException as e:
        if rewritten:
            _log.debug("sd.sql: the rewritten query Spark rejected: %s", text)
            raise SqlError(f"{_OP}: Spark rejected the query{what}: {_user_names(_first_line(e), names)}") from e
        raise SqlError(f"{_OP}: Spark rejected the query{what}: {_first_line(e)}") from e


_POSITION = re.compile(r";?\s*line \d+,? pos \d+;?")


def _user_names(message: str, names: Mapping[str, str] | None) -> str:
    """Spark's message about a rewritten query, in the names of the query the user wrote."""
    out = _POSITION.sub("", message).strip()
    for internal, user in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        quoted = "`" + "`.`".join(user.split(".", 1)) + "`" if "." in user else f"`{user}`"
        out = re.sub(rf"\{{?`{re.escape(internal)}`\}}?", lambda _m, q=quoted: q, out)
        out = re.sub(rf"(?<![\w`{{]){{?{re.escape(internal)}}}?(?![\w`])", lambda _m, u=user: u, out)
    return out


def _first_line(e: BaseException) -> str:
    msg = str(e).strip()
    return msg.splitlines()[0] if msg else type(e).__name__


@dataclass
class _Spec:
    """One as-of join, read from its clauses."""

    how: str  # "inner" | "left"
    strict: bool
    lkeys: list[str]
    rkeys: list[str]
    lt: str
    rt: str
    using: list[str]  # left column names named in USING (they resolve to the left side)
    clause: str  # the clause holding the time comparison, for messages


@dataclass
class _Side:
    alias: str
    df: DataFrame
    fields: list[T.StructField]
    by_name: dict[str, str] = field(default_factory=dict)  # normalized name -> actual name
    by_type: dict[str, T.DataType] = field(default_factory=dict)  # actual name -> type


class _Compiler:
    """Rewrites one query's syntax tree; DataFrames travel as ``{placeholder}`` arguments."""

    def __init__(self, spark: Any, views: Mapping[str, DataFrame]) -> None:
        self.spark = spark
        try:
            self.case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
        except Exception:  # pragma: no cover - defensive
            self.case_sensitive = False
        self.views = {self.norm(k): v for k, v in views.items()}
        self.bindings: dict[str, DataFrame] = {}
        self.names: dict[str, str] = {}  # internal name in the rewritten query -> the user's name
        self._prefix = "sdv" + uuid.uuid4().hex[:12]
        self._counter = itertools.count()

    def norm(self, name: str) -> str:
        return name if self.case_sensitive else name.lower()

    def token(self, df: DataFrame, label: str) -> str:
        """A placeholder for ``df`` in the query text; ``label`` is what error messages call it."""
        tok = f"{self._prefix}_{next(self._counter):06d}"  # fixed width: no token is a prefix of another
        self.bindings[tok] = df
        self.names[tok] = label
        return tok

    # ----------------------------------------------------------------- driving

    def compile_top(self, tree: exp.Query) -> DataFrame:
        self.bind_views(tree)
        return self.compile(tree)

    def compile(self, tree: exp.Expr, what: str = "") -> DataFrame:
        while True:
            pending = [j for j in tree.find_all(exp.Join, bfs=False) if _is_asof(j)]
            if not pending:
                break
            # the last in pre-order has no ASOF JOIN below it; within one FROM clause,
            # chained as-of joins (a ASOF JOIN b ... ASOF JOIN c ...) go left to right
            last = pending[-1]
            siblings = last.parent.args.get("joins") if last.parent is not None else None
            self.replace(next((j for j in siblings or [] if _is_asof(j)), last))
        return self.run(tree, what)

    def run(self, tree: exp.Expr, what: str = "") -> DataFrame:
        simple = self.run_simple(tree, what)
        if simple is not None:
            return simple
        used = {t.name for t in tree.find_all(exp.Table)} & set(self.bindings)
        text = _sql_of(tree)
        if used:
            # spark.sql(text, **dfs) formats `text` like str.format: escape the braces
            # the query itself holds, then mark our placeholders (unique identifiers
            # put there through the syntax tree).
            text = text.replace("{", "{{").replace("}", "}}")
            for tok in used:
                text = text.replace(tok, "{" + tok + "}")
        return _spark_sql(self.spark, text, {t: self.bindings[t] for t in used}, rewritten=True, what=what,
                          names=self.names)

    def run_simple(self, tree: exp.Expr, what: str) -> DataFrame | None:
        """``SELECT <expressions> FROM <one of our DataFrames> [alias] [WHERE ...]`` and nothing
        else (no other table, subquery, join, grouping, ordering, limit, hint, ...) as that
        DataFrame's own ``alias``, ``where`` and ``selectExpr`` (the same parser and analyser
        over the same expressions); ``None`` for any other query.  ``spark.sql`` with a
        DataFrame argument registers and drops a temporary view on a classic session: about
        half the JVM time of planning a small ``sd.sql`` as-of join."""
        if not isinstance(tree, exp.Select) or any(v for k, v in tree.args.items() if k not in _SIMPLE_ARGS):
            return None
        from_ = tree.args.get("from_")
        table = from_.this if from_ is not None else None
        if (not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier)
                or table.args.get("db") or table.args.get("catalog") or table.name not in self.bindings):
            return None
        alias = table.args.get("alias")
        if (alias is not None and alias.columns) or any(tree.find_all(exp.Subquery, exp.Lateral, exp.Join)):
            return None
        if sum(1 for _ in tree.find_all(exp.Table)) != 1 or sum(1 for _ in tree.find_all(exp.Query)) != 1:
            return None
        from pyspark.errors import AnalysisException, ParseException

        try:
            df = self.bindings[table.name].alias(table.alias_or_name)
            where = tree.args.get("where")
            if where is not None:
                df = df.where(_sql_of(where.this))
            df = df.selectExpr(*[_sql_of(e) for e in tree.expressions])
            df.schema  # noqa: B018 - Spark Connect analyses lazily: surface errors here, still before any job
            return df
        except ParseException as e:
            _log.debug("sd.sql: the rewritten query Spark could not parse: %s", _sql_of(tree))
            raise SqlError(f"{_OP}: Spark could not parse the query{what}: {_user_names(_first_line(e), self.names)}") from e
        except AnalysisException as e:
            _log.debug("sd.sql: the rewritten query Spark rejected: %s", _sql_of(tree))
            raise SqlError(f"{_OP}: Spark rejected the query{what}: {_user_names(_first_line(e), self.names)}") from e

    def bind_views(self, tree: exp.Expr) -> None:
        """Point every table named like a keyword DataFrame (and not a CTE) at it."""
        if not self.views:
            return
        tokens: dict[str, str] = {}
        for table in list(tree.find_all(exp.Table)):
            if table.args.get("db") or table.args.get("catalog") or not isinstance(table.this, exp.Identifier):
                continue
            key = self.norm(table.name)
            if key not in self.views or key in {self.norm(c.alias) for c in _visible_ctes(table)}:
                continue
            if key not in tokens:
                tokens[key] = self.token(self.views[key], table.name)
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(tokens[key]))

    # ----------------------------------------------------------------- one join

    def replace(self, join: exp.Join) -> None:
        select = join.parent
        if not isinstance(select, exp.Select) or join.arg_key != "joins":
            raise SqlError(f"{_OP}: ASOF JOIN is only supported in the FROM clause of a SELECT")
        joins = select.args["joins"]
        if joins[0] is not join:
            raise SqlError(
                f"{_OP}: ASOF JOIN must directly follow the first table of its FROM clause "
                f"(`{_sql_of(join.this)}` comes after another join); put the other joins after the "
                "ASOF JOIN, or move the earlier joins into a subquery or CTE"
            )
        from_ = select.args.get("from_")
        if from_ is None:
            raise SqlError(f"{_OP}: ASOF JOIN without a FROM table")
        left_rel, right_rel = from_.this, join.this
        la, ra = _rel_alias(left_rel, "left"), _rel_alias(right_rel, "right")
        if self.norm(la) == self.norm(ra):
            raise SqlError(f"{_OP}: both sides of the ASOF JOIN are called `{la}`; give one an alias")
        left = self.side(left_rel, la, "left")
        right = self.side(right_rel, ra, "right")
        spec = self.analyse(join, left, right)
        r_names = self.right_names(left, right)
        self.rewrite_columns(select, join, left, right, r_names, spec)  # validates before any plan is built
        view_df = self.asof_frame(left, right, spec, r_names)
        for n, v in r_names.items():
            if v != n:  # a right column renamed apart from a left one: messages say `p`.`ts`
                self.names[v] = f"{ra}.{n}"
        token = self.token(view_df, f"{la} ASOF JOIN {ra}")
        from_.set("this", exp.Table(this=exp.to_identifier(token), alias=exp.TableAlias(this=exp.to_identifier(la))))
        join.pop()

    def side(self, rel: exp.Expr, alias: str, which: str) -> _Side:
        if isinstance(rel, exp.Table) and rel.name in self.bindings and not rel.args.get("db"):
            df = self.bindings[rel.name]
            if rel.alias and rel.args["alias"].columns:
                df = self.relation_df(rel, which)
        else:
            df = self.relation_df(rel, which)
        fields = list(df.schema.fields)
        s = _Side(alias, df, fields)
        for f in fields:
            k = self.norm(f.name)
            if k in s.by_name:
                raise SqlError(
                    f"{_OP}: the {which} side of the ASOF JOIN (`{alias}`) has two columns named "
                    f"`{f.name}`; alias them apart in a subquery"
                )
            s.by_name[k] = f.name
            s.by_type[f.name] = f.dataType
        return s

    def relation_df(self, rel: exp.Expr, which: str) -> DataFrame:
        """``WITH <visible CTEs> SELECT * FROM <rel>`` as a DataFrame (its ASOF JOINs compiled too)."""
        q = exp.select("*").from_(rel.copy(), copy=False)
        ctes = _visible_ctes(rel)
        if ctes:
            q.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
        try:
            return self.compile(q, what=f" (reading the {which} side of an ASOF JOIN, `{_sql_of(rel)}`)")
        except SqlError as e:
            cause = e.__cause__
            cond = getattr(cause, "getCondition", lambda: None)() if cause is not None else None
            if cond == "TABLE_OR_VIEW_NOT_FOUND":
                bare = rel.copy()
                bare.set("alias", None)
                raise SqlError(
                    f"{_OP}: unknown table `{_sql_of(bare)}` on the {which} side of the ASOF JOIN: it is not a "
                    f"keyword DataFrame ({sorted(self.views) or 'none given'}), a CTE of the query or a "
                    f"table or view in the Spark catalog"
                ) from cause
            raise

    # ----------------------------------------------------------------- clauses

    def resolve(self, e: exp.Expr, left: _Side, right: _Side) -> tuple[str, str] | None:
        """``("left"|"right", actual column name)`` for a plain column reference, else None."""
        e = _unparen(e)
        if not isinstance(e, exp.Column) or isinstance(e.this, exp.Star):
            return None
        parts = [p.name for p in e.parts]
        if len(parts) >= 2:
            q = self.norm(parts[-2])
            for tag, s in (("left", left), ("right", right)):
                if q == self.norm(s.alias):
                    name = s.by_name.get(self.norm(parts[-1]))
                    if name is None:
                        raise SqlError(
                            f"{_OP}: `{_sql_of(e)}`: `{s.alias}` has no column `{parts[-1]}` "
                            f"(columns: {[f.name for f in s.fields]})"
                        )
                    return tag, name
            return None
        k = self.norm(parts[0])
        in_l, in_r = k in left.by_name, k in right.by_name
        if in_l and in_r:
            raise SqlError(
                f"{_OP}: column `{parts[0]}` in the ASOF JOIN condition is ambiguous: both `{left.alias}` and "
                f"`{right.alias}` have it; qualify it"
            )
        if in_l:
            return "left", left.by_name[k]
        if in_r:
            return "right", right.by_name[k]
        raise SqlError(f"{_OP}: unknown column `{parts[0]}` in the ASOF JOIN condition")

    def analyse(self, join: exp.Join, left: _Side, right: _Side) -> _Spec:
        side, kind = join.side.upper(), join.kind.upper()
        if side == "" and kind in ("", "INNER"):
            how = "inner"
        elif side == "LEFT" and kind in ("", "OUTER"):
            how = "left"
        else:
            spelled = " ".join(x for x in (side, kind) if x)
            raise SqlError(f"{_OP}: {spelled} ASOF JOIN is not supported; use ASOF JOIN (inner) or LEFT ASOF JOIN")
        la, ra = left.alias, right.alias
        mc = join.args.get("match_condition")
        on = join.args.get("on")
        using = [i.name for i in join.args.get("using") or []]
        conjuncts = list(_conjuncts(on)) if on is not None else []
        eqs: list[exp.Expr] = []
        cmps: list[exp.Expr] = []
        for c in conjuncts:
            if isinstance(c, exp.EQ):
                eqs.append(c)
            elif mc is None and isinstance(c, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
                cmps.append(c)
            else:
                where = "ON (MATCH_CONDITION holds the time comparison)" if mc is not None else "ON"
                raise SqlError(
                    f"{_OP}: ASOF JOIN {where} may only contain equalities between a column of `{la}` and a "
                    f"column of `{ra}`" + ("" if mc is not None else " and one time comparison") +
                    f", joined by AND; got `{_sql_of(c)}`. Move other conditions to WHERE or into a subquery"
                )
        lkeys: list[str] = []
        rkeys: list[str] = []
        time_cmp: exp.Expr | None = None
        if mc is not None:
            clause = "MATCH_CONDITION"
            time_cmp = _unparen(mc)
            key_cols = using
        elif using:
            clause = "USING"
            key_cols = using[:-1]  # USING (ts): no keys, one global timeline
            tl, tr = self.using_col(using[-1], left, right)
            time_cmp = exp.GTE(this=exp.column(tl, table=la), expression=exp.column(tr, table=ra))
        else:
            clause = "ON"
            if on is None:
                raise SqlError(
                    f"{_OP}: ASOF JOIN needs MATCH_CONDITION (o.ts >= p.ts) (with optional ON/USING keys), or an ON "
                    "clause with the time comparison and optional key equalities (ON o.k = p.k AND o.ts >= p.ts)"
                )
            if not cmps:
                raise SqlError(
                    f"{_OP}: ASOF JOIN ON must contain one time comparison such as `{la}.ts >= {ra}.ts` "
                    "(or use MATCH_CONDITION)"
                )
            if len(cmps) > 1:
                raise SqlError(
                    f"{_OP}: ASOF JOIN ON has {len(cmps)} inequalities ({', '.join(_sql_of(c) for c in cmps)}); "
                    "exactly one (the time comparison) is allowed"
                )
            time_cmp = cmps[0]
            key_cols = []
        for u in key_cols:
            lk, rk = self.using_col(u, left, right)
            lkeys.append(lk)
            rkeys.append(rk)
        using_left = [self.using_col(u, left, right)[0] for u in using]  # as written
        where = "ON"
        for eq in eqs:
            a, b = self.resolve(eq.this, left, right), self.resolve(eq.expression, left, right)
            if a is None or b is None or {a[0], b[0]} != {"left", "right"}:
                raise SqlError(
                    f"{_OP}: ASOF JOIN {where}: `{_sql_of(eq)}` must equate a column of `{la}` with a column of "
                    f"`{ra}` (compute expressions in a subquery first)"
                )
            (_, lk), (_, rk) = sorted([a, b])
            lkeys.append(lk)
            rkeys.append(rk)
        lt, rt, strict = self.time_comparison(time_cmp, clause, left, right)
        spec = _Spec(how, strict, lkeys, rkeys, lt, rt, using_left, clause)
        self.check_types(spec, left, right)
        return spec

    def using_col(self, name: str, left: _Side, right: _Side) -> tuple[str, str]:
        k = self.norm(name)
        for s in (left, right):
            if k not in s.by_name:
                raise SqlError(f"{_OP}: ASOF JOIN USING ({name}): `{s.alias}` has no column `{name}`")
        return left.by_name[k], right.by_name[k]

    def time_comparison(self, cmp: exp.Expr | None, clause: str, left: _Side, right: _Side) -> tuple[str, str, bool]:
        la, ra = left.alias, right.alias
        usage = (
            f"{clause} must compare the left table's time column with >= or > against the right table's "
            f"time column, e.g. {la}.ts >= {ra}.ts (or the mirrored {ra}.ts <= {la}.ts)"
        )
        if not isinstance(cmp, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
            got = _sql_of(cmp) if cmp is not None else "nothing"
            raise SqlError(f"{_OP}: {usage}; got `{got}`")
        a, b = self.resolve(cmp.this, left, right), self.resolve(cmp.expression, left, right)
        if a is None or b is None:
            raise SqlError(
                f"{_OP}: {usage}; got `{_sql_of(cmp)}`, which is not a comparison of two plain columns. "
                "Compute the time expression as a column in a subquery or CTE first"
            )
        if {a[0], b[0]} != {"left", "right"}:
            raise SqlError(f"{_OP}: {usage}; `{_sql_of(cmp)}` does not compare a column of `{la}` with one of `{ra}`")
        op = type(cmp)
        if a[0] == "right":  # mirrored: p.ts <= o.ts
            op = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}[op]
            a, b = b, a
        if op in (exp.LTE, exp.LT):
            raise SqlError(
                f"{_OP}: {usage}; `{_sql_of(cmp)}` asks for the first right row at or after the left row's time "
                "(a forward as-of join), which is not supported: only the latest right row at or before "
                "the left row's time (>=, or > for strictly before) can be joined"
            )
        return a[1], b[1], op is exp.GT

    def check_types(self, spec: _Spec, left: _Side, right: _Side) -> None:
        lf = {f.name: f.dataType for f in left.fields}
        rf = {f.name: f.dataType for f in right.fields}
        for name, side, dt in ((spec.lt, left, lf[spec.lt]), (spec.rt, right, rf[spec.rt])):
            if not isinstance(dt, _TIME_TYPES):
                raise SqlError(
                    f"{_OP}: {spec.clause}: the time column `{side.alias}.{name}` has type {dt.simpleString()}; "
                    "as-of times must be an integral type, date or timestamp (CAST it in a subquery)"
                )
        _common_time_type(lf[spec.lt], rf[spec.rt], f"{left.alias}.{spec.lt}", f"{right.alias}.{spec.rt}", spec.clause)
        for lk, rk in zip(spec.lkeys, spec.rkeys):
            ta, tb = lf[lk], rf[rk]
            ok = ta == tb or (isinstance(ta, _INTEGRAL) and isinstance(tb, _INTEGRAL)) or (
                isinstance(ta, (*_INTEGRAL, *_FRACTIONAL)) and isinstance(tb, (*_INTEGRAL, *_FRACTIONAL))
            )
            if not ok:
                raise SqlError(
                    f"{_OP}: ASOF JOIN key `{left.alias}.{lk}` is {ta.simpleString()} but `{right.alias}.{rk}` is "
                    f"{tb.simpleString()}; CAST one side in a subquery so that both have the same type"
                )

    # ----------------------------------------------------------------- the as-of join

    def right_names(self, left: _Side, right: _Side) -> dict[str, str]:
        """Names of the right columns in the joined relation: their own unless the left side has it."""
        rnames = [f.name for f in right.fields]
        taken = {self.norm(f.name) for f in left.fields}
        own = {self.norm(x) for x in rnames}
        r_view: dict[str, str] = {}
        for n in rnames:
            v = n
            if self.norm(v) in taken:
                v = f"{right.alias}_{n}"
                while self.norm(v) in taken or self.norm(v) in own:
                    v += "_"
            taken.add(self.norm(v))
            r_view[n] = v
        return r_view

    def asof_frame(self, left: _Side, right: _Side, spec: _Spec, r_view: dict[str, str]) -> DataFrame:
        """The joined rows: the left columns, then the right columns (named by ``r_view``)."""
        ltype = left.by_type[spec.lt] if left.by_type else None
        rtype = right.by_type[spec.rt] if right.by_type else None
        if isinstance(ltype, _INTEGRAL) and isinstance(rtype, _INTEGRAL):
            return self.asof_frame_sql(left, right, spec, r_view)
        lnames = [f.name for f in left.fields]
        rnames = [f.name for f in right.fields]
        a = [f"sdl{i}" for i in range(len(lnames))]
        b = [f"sdr{i}" for i in range(len(rnames))]
        k = [f"sdk{i}" for i in range(len(spec.lkeys))]
        lpos = {n: i for i, n in enumerate(lnames)}
        rpos = {n: i for i, n in enumerate(rnames)}
        ltype = left.fields[lpos[spec.lt]].dataType
        rtype = right.fields[rpos[spec.rt]].dataType
        tt = _common_time_type(ltype, rtype, spec.lt, spec.rt, spec.clause)
        lt_col = F.col(a[lpos[spec.lt]])
        ln = left.df.toDF(*a)  # positional: any column names are fine
        rn = right.df.toDF(*b)
        lkeys_present = [F.col(a[lpos[c]]).isNotNull() for c in spec.lkeys]
        live = ln.where(lt_col.isNotNull())
        if spec.how == "inner":
            for cond in lkeys_present:
                live = live.where(cond)
        orders = live.select(
            *a, *[F.col(a[lpos[c]]).alias(kk) for c, kk in zip(spec.lkeys, k)], lt_col.cast(tt).alias(_TIME)
        )
        # a right row without a time can match nothing (as in DuckDB): left out
        prices = rn.where(F.col(b[rpos[spec.rt]]).isNotNull()).select(
            *b, *[F.col(b[rpos[c]]).alias(kk) for c, kk in zip(spec.rkeys, k)], F.col(b[rpos[spec.rt]]).cast(tt).alias(_TIME)
        )
        # dd_asof_join(orders, from_upserts(prices)), read from the log without building that collection
        joined = asof_join_history(
            collection(orders, time=_TIME, check_nulls=False),  # null times were filtered above
            prices,
            key=k,
            time=_TIME,
            how=spec.how,
            strict=spec.strict,
        )
        # diff copies of each row (left rows are insertions, so every diff is positive)
        rows = joined.select(*a, *b, F.explode(F.sequence(F.lit(1).cast("long"), F.col(DIFF))).alias("sdasof_n"))
        out = rows.select(
            *[F.col(x).alias(n) for x, n in zip(a, lnames)], *[F.col(y).alias(r_view[n]) for y, n in zip(b, rnames)]
        )
        if spec.how == "left":
            # rows without a time cannot be placed in time: kept, unmatched (as in DuckDB)
            timeless = ln.where(lt_col.isNull()).select(
                *[F.col(x).alias(n) for x, n in zip(a, lnames)],
                *[F.lit(None).cast(f.dataType).alias(r_view[f.name]) for f in right.fields],
            )
            out = out.unionByName(timeless)
        return out

    def asof_frame_sql(self, left: _Side, right: _Side, spec: _Spec, r_view: dict[str, str]) -> DataFrame:
        """:meth:`asof_frame` for integral times, planned from SQL text: each side is one
        filter and one ``selectExpr`` straight into the as-of kernel's form (keys, the
        side's columns, the time, ``diff = 1``), and the task itself expands each joined
        row into its copies under the user's names (:func:`kernels.asof.expanded`).  The
        same rows as ``dd_asof_join(collection(orders), from_upserts(prices))`` read from
        the upsert log (``method="upserts"``, the other path), with five DataFrames instead
        of about twenty and a twentieth of the py4j round trips of building them."""
        _note_history("dd_asof_join")  # incremental views keep the inputs of this query uncompacted
        lnames = [f.name for f in left.fields]
        rnames = [f.name for f in right.fields]
        nk = len(spec.lkeys)
        lkeys, rkeys = [quoted(c) for c in spec.lkeys], [quoted(c) for c in spec.rkeys]
        for i, (lk, rk) in enumerate(zip(spec.lkeys, spec.rkeys)):
            ta, tb = left.by_type[lk], right.by_type[rk]
            if ta != tb:  # the casts execution.key_casts makes: equal values hash and compare equal
                cast = "BIGINT" if isinstance(ta, _INTEGRAL) and isinstance(tb, _INTEGRAL) else "DOUBLE"
                lkeys[i], rkeys[i] = f"CAST({lkeys[i]} AS {cast})", f"CAST({rkeys[i]} AS {cast})"
        # a left row without a time is placed nowhere (LEFT keeps it below), one with a null key
        # matches nothing (LEFT: the kernel keeps it unmatched); a right row without either: left out
        l_live = [f"{quoted(spec.lt)} IS NOT NULL"] + ([f"{k} IS NOT NULL" for k in map(quoted, spec.lkeys)]
                                                       if spec.how == "inner" else [])
        r_live = [f"{quoted(spec.rt)} IS NOT NULL"] + [f"{k} IS NOT NULL" for k in map(quoted, spec.rkeys)]
        a_cols, b_cols = _knames("_a", len(lnames)), _knames("_b", len(rnames))
        tail = ["CAST(1 AS BIGINT)", "true"]
        sides = [
            (left.df.where(" AND ".join(l_live)), [*lkeys, *map(quoted, lnames), f"CAST({quoted(spec.lt)} AS BIGINT)", *tail],
             [*_kkeys(nk), *a_cols, *_ktimes(1), _KD, _KNEW]),
            (right.df.where(" AND ".join(r_live)), [*rkeys, *map(quoted, rnames), f"CAST({quoted(spec.rt)} AS BIGINT)", *tail],
             [*_kkeys(nk), *b_cols, *_ktimes(1), _KD, _KNEW]),
        ]
        labels = [*lnames, *[r_view[n] for n in rnames]]
        schema = T.StructType([T.StructField(n, f.dataType, True) for n, f in zip(labels, [*left.fields, *right.fields])])
        params = _kasof.UpsertAsofParams(nk, len(lnames), len(rnames), spec.strict, spec.how == "left")
        kernel = functools.partial(_kasof.expanded, _kasof.asof_upserts, [*a_cols, *b_cols], labels)
        out = run_pair_sql(kernel, params, sides, nk, schema)
        if spec.how == "left":
            # rows without a time cannot be placed in time: kept, unmatched (as in DuckDB)
            timeless = left.df.where(f"{quoted(spec.lt)} IS NULL").select(
                *[F.col(quoted(n)) for n in lnames],
                *[F.lit(None).cast(f.dataType).alias(r_view[f.name]) for f in right.fields],
            )
            out = out.unionByName(timeless)
        return out

    # ----------------------------------------------------------------- column references

    def rewrite_columns(
        self, select: exp.Select, join: exp.Join, left: _Side, right: _Side, r_view: dict[str, str], spec: _Spec
    ) -> None:
        """Point references to the right side at the joined relation (aliased like the left side)."""
        la, ra = self.norm(left.alias), self.norm(right.alias)
        renamed: dict[int, str] = {}
        using = {self.norm(u) for u in spec.using}
        own = {id(n) for n in join.walk()}  # the ASOF JOIN's own clauses go away with it
        for col in _scope_columns(select):
            if id(col) in own:
                continue
            parts = list(col.parts)
            names = [self.norm(p.name) for p in parts]
            if len(parts) >= 2 and names[0] in (la, ra):
                at = 0  # o.col or o.col.field
            elif len(parts) == 3 and names[1] in (la, ra):
                at = 1  # db.orders.col
            else:
                if len(parts) == 1 and names[0] in left.by_name and names[0] in right.by_name and names[0] not in using:
                    raise SqlError(
                        f"{_OP}: column `{parts[0].name}` is ambiguous: both sides of the ASOF JOIN "
                        f"(`{left.alias}` and `{right.alias}`) have it; qualify it"
                    )
                continue
            s = left if names[at] == la else right
            actual = s.by_name.get(names[at + 1])
            if actual is None:
                raise SqlError(
                    f"{_OP}: `{_sql_of(col)}`: `{s.alias}` has no column `{parts[at + 1].name}` "
                    f"(columns: {[f.name for f in s.fields]})"
                )
            new_name = actual if s is left else r_view[actual]
            new_parts = [exp.to_identifier(left.alias), exp.to_identifier(new_name), *parts[at + 2 :]]
            _set_parts(col, new_parts)
            if len(new_parts) == 2 and new_name != actual:
                renamed[id(col)] = actual
        self.expand_stars(select, join, left, right, r_view, spec)
        for proj in list(select.expressions):
            if isinstance(proj, exp.Column) and id(proj) in renamed:
                proj.replace(exp.alias_(proj.copy(), renamed[id(proj)], quoted=True))

    def expand_stars(
        self, select: exp.Select, join: exp.Join, left: _Side, right: _Side, r_view: dict[str, str], spec: _Spec
    ) -> None:
        la, ra = self.norm(left.alias), self.norm(right.alias)
        lnames = [f.name for f in left.fields]
        rnames = [f.name for f in right.fields]
        using_l = [u for u in spec.using]
        using_r = {self.norm(right.by_name[self.norm(u)]) for u in spec.using}
        quote = exp.to_identifier

        def cols(side: str) -> list[exp.Expr]:
            if side == "left":
                return [exp.column(n, table=quote(left.alias)) for n in lnames]
            return [
                exp.alias_(exp.column(r_view[n], table=quote(left.alias)), n, quoted=True) if r_view[n] != n
                else exp.column(n, table=quote(left.alias))
                for n in rnames
            ]

        def star_all() -> list[exp.Expr]:
            if spec.using:
                first = [exp.column(u, table=quote(left.alias)) for u in using_l]
                rest_l = [exp.column(n, table=quote(left.alias)) for n in lnames if n not in using_l]
                rest_r = [c for c, n in zip(cols("right"), rnames) if self.norm(n) not in using_r]
                mine: list[exp.Expr] = [*first, *rest_l, *rest_r]
            else:
                mine = [*cols("left"), *cols("right")]
            others: list[exp.Expr] = []
            for j in select.args.get("joins") or []:
                if j is join:
                    continue
                if str(j.args.get("kind") or "").upper() in ("SEMI", "ANTI"):
                    continue
                name = j.this.alias_or_name
                if not name:
                    raise SqlError(
                        f"{_OP}: SELECT * with an ASOF JOIN needs an alias on the joined `{_sql_of(j.this)}`"
                    )
                others.append(exp.Column(this=exp.Star(), table=quote(name)))
            if select.args.get("laterals"):
                raise SqlError(f"{_OP}: SELECT * together with LATERAL VIEW and ASOF JOIN: list the columns instead")
            return [*mine, *others]

        needs_plain = bool(spec.using) or any(r_view[n] != n for n in rnames)
        new: list[exp.Expr] = []
        changed = False
        for proj in select.expressions:
            if isinstance(proj, exp.Star):
                if proj.args.get("except_") or proj.args.get("replace") or proj.args.get("rename"):
                    raise SqlError(f"{_OP}: `{_sql_of(proj)}` with an ASOF JOIN: list the columns instead")
                if needs_plain:
                    new.extend(star_all())
                    changed = True
                    continue
            elif isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star) and proj.table:
                q = self.norm(proj.table)
                if q in (la, ra):
                    new.extend(cols("left" if q == la else "right"))
                    changed = True
                    continue
            new.append(proj)
        if changed:
            select.set("expressions", new)


# --------------------------------------------------------------------------- helpers


def _common_time_type(a: T.DataType, b: T.DataType, an: str, bn: str, clause: str) -> T.DataType:
    if isinstance(a, _INTEGRAL) and isinstance(b, _INTEGRAL):
        return T.LongType()
    if a == b:
        return a
    pair = {type(a), type(b)}
    if pair == {T.DateType, T.TimestampType}:
        return T.TimestampType()
    if pair == {T.DateType, T.TimestampNTZType}:
        return T.TimestampNTZType()
    raise SqlError(
        f"{_OP}: {clause}: the time columns `{an}` ({a.simpleString()}) and `{bn}` ({b.simpleString()}) have "
        "different types; CAST one of them in a subquery so that both have the same type"
    )


def _rel_alias(rel: exp.Expr, which: str) -> str:
    name = rel.alias_or_name
    if not name:
        raise SqlError(f"{_OP}: the {which} side of the ASOF JOIN (`{_sql_of(rel)}`) needs an alias")
    return name


def _unparen(e: exp.Expr) -> exp.Expr:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _conjuncts(e: exp.Expr) -> Iterator[exp.Expr]:
    e = _unparen(e)
    if isinstance(e, exp.And):
        yield from _conjuncts(e.this)
        yield from _conjuncts(e.expression)
    else:
        yield e


def _set_parts(col: exp.Column, parts: Sequence[exp.Identifier]) -> None:
    keys = ["catalog", "db", "table", "this"]
    if len(parts) > 4:  # pragma: no cover - deeper struct access is a Dot around the Column
        raise SqlError(f"{_OP}: column reference `{_sql_of(col)}` is too deeply qualified")
    for key in keys:
        if key != "this":
            col.set(key, None)
    for key, part in zip(keys[4 - len(parts) :], parts):
        col.set(key, part)


def _visible_ctes(node: exp.Expr) -> list[exp.CTE]:
    """The CTEs a node can refer to, outermost first (inner definitions shadow outer ones)."""
    levels: list[list[exp.CTE]] = []
    child: exp.Expr = node
    parent = node.parent
    while parent is not None:
        w = parent.args.get("with_") if isinstance(parent, exp.Expr) else None
        if isinstance(w, exp.With):
            ctes = list(w.expressions)
            if child is w:
                # inside the WITH: a CTE sees the ones before it (and itself when RECURSIVE)
                inner = next((c for c in ctes if c is node or _contains(c, node)), None)
                if inner is not None:
                    idx = ctes.index(inner)
                    ctes = ctes[: idx + 1] if w.args.get("recursive") else ctes[:idx]
            levels.append(ctes)
        child, parent = parent, parent.parent
    seen: set[str] = set()
    out: list[exp.CTE] = []
    for level in levels:  # innermost first
        for c in reversed(level):
            key = c.alias.lower()
            if key not in seen:
                seen.add(key)
                out.append(c)
    return list(reversed(out))


def _contains(root: exp.Expr, node: exp.Expr) -> bool:
    p: exp.Expr | None = node
    while p is not None:
        if p is root:
            return True
        p = p.parent
    return False


def _scope_columns(select: exp.Select) -> list[exp.Column]:
    """Column references that belong to ``select``'s scope (incl. correlated ones from its subqueries)."""
    try:
        root_scope = _scope.build_scope(select.root())
    except _errors.SqlglotError:  # pragma: no cover - fall back to a walk that stops at nested queries
        root_scope = None
    for scope in root_scope.traverse() if root_scope is not None else []:
        if scope.expression is select:
            return [c for c in scope.columns if isinstance(c, exp.Column)]
    return [c for c in select.find_all(exp.Column) if _owner(c) is select and not isinstance(c.this, exp.Star)]


def _owner(node: exp.Expr) -> exp.Expr | None:
    p = node.parent
    while p is not None and not isinstance(p, exp.Query):
        p = p.parent
    return p
