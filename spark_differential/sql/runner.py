"""Running rewritten ``sd.sql`` text in Spark, with Spark's errors as :class:`SqlError`.

No data here: :func:`_spark_sql` hands a query (and the DataFrames standing for its
tables) to ``spark.sql`` and reports Spark's parse and analysis errors in the names of
the query the user wrote, before any Spark job.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP

_log = logging.getLogger("spark_differential.sql")


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

