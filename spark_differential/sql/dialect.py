"""Parsing ``sd.sql`` text: the sqlglot dialect and the helpers around it.

No data here: this module turns query text into a sqlglot syntax tree (Spark SQL plus
the as-of join spellings, see :func:`_dialect`) and back into Spark SQL text.  What the
tree means on ``(data, time, diff)`` is decided by the compilers that read it
(:mod:`spark_differential.sql.compile`, :mod:`spark_differential.sql.asof`).
"""

from __future__ import annotations

import functools
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError

# sqlglot is imported on the first sd.sql call, not with the package
sqlglot = lazy("sqlglot")
exp = lazy("sqlglot.expressions")
_errors = lazy("sqlglot.errors")
_tokens = lazy("sqlglot.tokens")

_OP = "sd.sql"


@functools.cache
def _dialect() -> Any:
    """The sqlglot dialect ``_SparkAsof`` (built on first use: defining it imports sqlglot)."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.tokens import TokenType

    class _SparkAsof(Spark):
        """Spark SQL plus the two as-of spellings sqlglot's Spark dialect rejects, and
        Materialize's ``WITH MUTUALLY RECURSIVE``.

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

            def _parse_with(self, skip_with_token: bool = False) -> Any:
                index = self._index
                if not skip_with_token and not self._match(TokenType.WITH):
                    return None
                if self._match_text_seq("MUTUALLY", "RECURSIVE"):
                    return self._parse_mutually_recursive()
                self._retreat(index)
                return super()._parse_with(skip_with_token)

            def _parse_mutually_recursive(self) -> Any:
                """Materialize's ``WITH MUTUALLY RECURSIVE [(ERROR | RETURN AT RECURSION LIMIT n)]
                name (col type, ...) AS (query), ...``: a ``With`` marked in its ``meta``."""
                from sqlglot import exp as _exp

                limit = None
                if self._match(TokenType.L_PAREN):
                    kind = "RETURN" if self._match_text_seq("RETURN") else "ERROR" if self._match_text_seq("ERROR") else ""
                    if not kind or not self._match_text_seq("AT", "RECURSION", "LIMIT"):
                        self.raise_error("Expected (ERROR AT RECURSION LIMIT n) or (RETURN AT RECURSION LIMIT n)")
                    n = self._parse_number()
                    if n is None or not str(n.this).isdigit():
                        self.raise_error("Expected the recursion limit (a whole number)")
                    self._match_r_paren()
                    limit = (kind, int(n.this))
                ctes = []
                while True:
                    name = self._parse_id_var(any_token=False)
                    if name is None:
                        self.raise_error("Expected the name of a CTE")
                    cols = []
                    if self._match(TokenType.L_PAREN):
                        while True:
                            col, typ = self._parse_id_var(any_token=False), self._parse_types()
                            if col is None or typ is None:
                                self.raise_error("Expected a column name and its type")
                            cols.append(_exp.ColumnDef(this=col, kind=typ))
                            if not self._match(TokenType.COMMA):
                                break
                        self._match_r_paren()
                    if not self._match(TokenType.ALIAS):
                        self.raise_error("Expected AS")
                    body = self._parse_wrapped(self._parse_statement)
                    ctes.append(_exp.CTE(this=body, alias=_exp.TableAlias(this=name, columns=cols)))
                    if not self._match(TokenType.COMMA):
                        break
                with_ = _exp.With(expressions=ctes, recursive=True)
                with_.meta["mutually"] = True
                with_.meta["limit"] = limit
                return with_

    return _SparkAsof


def _parse(query: str) -> exp.Expr | None:
    """The query's syntax tree; None when sqlglot cannot read a query without ASOF."""
    try:
        stmts = [s for s in sqlglot.parse(query, read=_dialect()) if s is not None]
    except (_errors.ParseError, _errors.TokenError) as e:
        if _mentions_asof(query) or _mentions_recursion(query):
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


def _mentions_recursion(query: str) -> bool:
    try:
        tokens = _dialect()().tokenize(query)
    except _errors.SqlglotError:
        return "recursive" in query.lower()
    return any(t.token_type == _tokens.TokenType.RECURSIVE or t.text.upper() == "MUTUALLY" for t in tokens)


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

