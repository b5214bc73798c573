"""Collections: Spark DataFrames of updates ``(data…, time, diff)``.

Every column other than ``time`` and ``diff`` is data.  An update ``(d, t, r)`` adds
``r`` copies of ``d`` at time ``t``; the collection at time ``s`` is the multiset
``acc(s) = Σ_{t <= s} updates``.  This module checks that a DataFrame has that form
(schema checks only: they run before any Spark job), turns ordinary tables into
collections (:func:`collection`, :func:`from_snapshots`, :func:`from_upserts`) and
reads collections back (:func:`dd_as_of`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.lattice import INTEGRAL_KINDS, RESERVED_PREFIX, Loop, TimeType, Total, from_spark_type
from spark_differential.errors import (
    DiffTypeError,
    MissingColumnError,
    ReservedNameError,
    SchemaMismatchError,
    TimeTypeError,
    TimeTypeMismatchError,
)

TIME = "time"
DIFF = "diff"
INTEGRAL_TYPES = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)
FRACTIONAL_TYPES = (T.FloatType, T.DoubleType)


@dataclass(frozen=True)
class CollectionSchema:
    """What an operator needs to know about a collection, read from its schema alone."""

    data_cols: tuple[str, ...]
    data_fields: tuple[T.StructField, ...]
    ttype: TimeType

    def field(self, name: str) -> T.StructField:
        for f in self.data_fields:
            if f.name == name:
                return f
        raise MissingColumnError(name)


def _fix_hint() -> str:
    return (
        "A collection is a DataFrame of updates with a `time` column and an integral `diff` "
        "column; build one with sd.collection(df, time='<your time column>', diff='<your diff "
        "column, or omit for +1>')."
    )


def inspect(df: DataFrame, *, op: str, side: str = "input") -> CollectionSchema:
    """Validate ``df`` as a collection and describe it (no Spark job)."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"{op}: the {side} must be a pyspark DataFrame, got {type(df).__name__}")
    schema = df.schema
    names = [f.name for f in schema.fields]
    for needed in (TIME, DIFF):
        if needed not in names:
            raise MissingColumnError(f"{op}: the {side} has no `{needed}` column (columns: {names}). " + _fix_hint())
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise SchemaMismatchError(f"{op}: the {side} has duplicate column names {dup}; rename them first")
    diff_field = schema[DIFF]
    if not isinstance(diff_field.dataType, INTEGRAL_TYPES):
        raise DiffTypeError(
            f"{op}: the {side}'s `diff` column has type {diff_field.dataType.simpleString()}; it must be "
            "an integral type (a count of copies added or removed). Cast it, e.g. F.col('diff').cast('long')."
        )
    try:
        ttype = from_spark_type(schema[TIME].dataType)
    except TimeTypeError as e:
        raise type(e)(f"{op}: the {side}'s {e}") from None
    data_fields = tuple(f for f in schema.fields if f.name not in (TIME, DIFF))
    for f in data_fields:
        if f.name.startswith(RESERVED_PREFIX):
            raise ReservedNameError(
                f"{op}: the {side}'s column `{f.name}` uses the reserved prefix {RESERVED_PREFIX!r}; rename it"
            )
    return CollectionSchema(tuple(f.name for f in data_fields), data_fields, ttype)


def require_columns(cs: CollectionSchema, cols: Sequence[str], *, op: str, side: str, what: str) -> None:
    missing = [c for c in cols if c not in cs.data_cols]
    if missing:
        raise MissingColumnError(
            f"{op}: {what} {missing} not among the {side}'s data columns {list(cs.data_cols)}"
        )


def require_same_time(a: CollectionSchema, b: CollectionSchema, *, op: str, sides: str = "inputs") -> None:
    if a.ttype != b.ttype:
        raise TimeTypeMismatchError(
            f"{op}: the {sides} have different time types ({a.ttype.describe()} vs {b.ttype.describe()}). "
            "Both collections must use the same time type; cast one `time` column to match the other."
        )


def as_columns(cols: str | Sequence[str] | None, *, op: str, what: str) -> list[str]:
    if cols is None:
        return []
    if isinstance(cols, str):
        return [cols]
    out = list(cols)
    if not all(isinstance(c, str) for c in out):
        raise TypeError(f"{op}: {what} must be column names (strings), got {cols!r}")
    return out


def null_guard(col: Column, leaves: Sequence[Column], what: str, op: str = "") -> Column:
    """``col`` unchanged, but the job fails with a clear message if any leaf is null.

    The message starts with ``NullValueError:`` (after Spark's own error prefix), so
    :func:`spark_differential.unwrap` turns the failed action's exception back into a
    :class:`NullValueError`.  A column the schema declares non-nullable costs nothing:
    Spark's optimizer removes the check."""
    cond = leaves[0].isNull()
    for leaf in leaves[1:]:
        cond = cond | leaf.isNull()
    return F.when(cond, F.raise_error(F.lit(null_message(what, op)))).otherwise(col)


def null_message(what: str, op: str) -> str:
    """The message of the :class:`NullValueError` a null ``what`` (``time`` or ``diff``) reaching ``op``
    raises, prefixed with the class name (as a job failure's text carries it: :func:`null_guard`)."""
    where = f"{op}: " if op else ""
    return (
        f"NullValueError: {where}a null {what} reached the operator; every update needs a non-null "
        f'{what}. Filter or fill nulls first (e.g. df.where(F.col("{what}").isNotNull())).'
    )


def sql_text(value: str) -> str:
    """``value`` as a Spark SQL string expression whatever the parser's escaping settings:
    quotes and backslashes spliced in with ``char()``."""
    parts = []
    for piece in re.split(r"(['\\])", value):
        if piece in ("'", "\\"):
            parts.append(f"char({ord(piece)})")
        elif piece:
            parts.append(f"'{piece}'")
    if not parts:
        return "''"
    return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"


def null_guard_sql(expr: str, leaves: Sequence[str], what: str, op: str = "", zero: str | None = None) -> str:
    """:func:`null_guard` as SQL text (``expr`` and ``leaves``: SQL expressions): the same
    check and message, for plans built from SQL text (one py4j round trip for a whole
    ``selectExpr``, where Columns cost a few each).

    With ``zero`` (a non-null SQL literal of ``expr``'s type, e.g. ``0L``) and ``expr`` its
    own only leaf, the check is ``coalesce(expr, raise_error(...), zero)``: the same value
    and failure (``zero`` is never reached), cheaper for Spark to analyse than a ``CASE``,
    and declared non-nullable, so that the operators downstream check nothing again.

    >>> null_guard_sql("`diff`", ["`diff`"], "diff", "op", zero="0L").startswith("coalesce(`diff`, raise_error(")
    True
    """
    message = sql_text(null_message(what, op))
    if zero is not None and list(leaves) == [expr]:
        return f"coalesce({expr}, raise_error({message}), {zero})"
    cond = " OR ".join(f"({leaf}) IS NULL" for leaf in leaves)
    return f"CASE WHEN {cond} THEN raise_error({message}) ELSE {expr} END"


# a non-null zero of each integral type as a Spark SQL literal (the non-nullable end of a null check)
_SQL_ZEROS = {T.LongType: "0L", T.IntegerType: "0", T.ShortType: "0S", T.ByteType: "0Y"}


def sql_zero(dtype: T.DataType) -> str | None:
    """A non-null zero literal of the integral ``dtype`` in Spark SQL (``None``: another type)."""
    return _SQL_ZEROS.get(type(dtype))


def checked(df: DataFrame, cs: CollectionSchema, op: str) -> DataFrame:
    """``df`` with its ``time`` and ``diff`` guarded against nulls (see :func:`null_guard`).

    The one null check of the operators that do not run a kernel (the kernels' inputs
    are guarded in :func:`spark_differential.engine.distributed.prepare`): a null ``time`` or
    ``diff`` fails the job that meets it with :class:`NullValueError` instead of being
    dropped, merged or advanced.  No extra job: the check is part of the operator's
    own scan.  Columns the schema declares non-nullable, and collections inside a
    ``dd_iterate`` body (checked where they enter the loop), are returned as they are."""

    if isinstance(cs.ttype, Loop):
        return df
    schema = df.schema
    guard_time = may_be_null(schema[TIME].dataType, schema[TIME].nullable)
    guard_diff = schema[DIFF].nullable
    if not guard_time and not guard_diff:
        return df
    if integral_sql(cs.ttype) is not None:  # SQL text: one selectExpr, not a few py4j round trips per Column
        return df.selectExpr(*[guarded_sql(schema, name, op) for name in df.columns])
    cols: list[Column] = []
    for name in df.columns:
        c = F.col(quoted(name))
        if name == TIME and guard_time:
            c = null_guard(c, cs.ttype.encode_column(c), "time", op).alias(TIME)
        elif name == DIFF and guard_diff:
            c = null_guard(c, [c], "diff", op).alias(DIFF)
        cols.append(c)
    return df.select(*cols)


def integral_sql(ttype: Any) -> str | None:
    """The Spark SQL type of an integral total time (its own encoding), or ``None`` (a
    time whose encoding is built from Columns: struct, date, timestamp, alt/neu, loop)."""

    if not isinstance(ttype, Total) or ttype.kind not in INTEGRAL_KINDS:
        return None
    return {"long": "BIGINT", "int": "INT", "short": "SMALLINT", "byte": "TINYINT"}[ttype.kind]


def guard_expr(schema: T.StructType, name: str, op: str) -> str:
    """The column ``name`` (of a collection with an integral time) as a SQL expression,
    :func:`null_guard_sql`-checked when it is a nullable ``time`` or ``diff``."""
    q = quoted(name)
    if name not in (TIME, DIFF) or not schema[name].nullable:
        return q
    return null_guard_sql(q, [q], name, op, zero=sql_zero(schema[name].dataType))


def guarded_sql(schema: T.StructType, name: str, op: str, cast: str | None = None) -> str:
    """The column ``name`` of a collection with an integral time as a SQL select item,
    :func:`null_guard_sql`-checked when it is a nullable ``time`` or ``diff`` (and cast
    to the SQL type ``cast``, if given)."""
    q = quoted(name)
    e = guard_expr(schema, name, op)
    if cast is not None:
        e = f"CAST({e} AS {cast})"
    return q if e == q else f"{e} AS {q}"


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier (backquoted), for APIs that parse column names:
    ``F.col``, string arguments of ``select``/``groupBy``… read ``a.b`` as a field and
    reject a lone backtick; a quoted name is always the column of that exact name."""
    return "`" + name.replace("`", "``") + "`"


def qcol(name: str) -> Column:
    """The column named exactly ``name`` (dots, backticks and spaces included)."""
    return F.col(quoted(name))


def qcols(names: Sequence[str]) -> list[Column]:
    """:func:`qcol` of each name."""
    return [qcol(n) for n in names]


def time_leaf_names(width: int, prefix: str = "_sd_t") -> list[str]:
    return [f"{prefix}{i}" for i in range(width)]


def may_be_null(dtype: T.DataType, nullable: bool) -> bool:
    """Whether a column of this type and nullability may hold a null (a struct: any field)."""
    if nullable:
        return True
    if isinstance(dtype, T.StructType):
        return any(may_be_null(f.dataType, f.nullable) for f in dtype.fields)
    return False
