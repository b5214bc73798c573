"""Reductions: ``dd_reduce``, ``dd_count``, ``dd_sum``, ``dd_min``, ``dd_max``,
``dd_distinct``, ``dd_threshold``.

On ``(data, time, diff)``: at every time, each key's output is a function of the
key's accumulated rows.  The reduce family sees only rows with *positive*
accumulated multiplicity (a row retracted more often than inserted is absent);
``dd_threshold`` maps every nonzero multiplicity.  Outputs change only at the lub
closure of a key's input times (seed 000), where the kernels put them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import INTEGRAL_TYPES, as_columns, inspect, qcols, require_columns
from spark_differential.core.lazy import lazy
from spark_differential.core.scope import unify
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.kernel_form import Input, entry_time, kernel_fields
from spark_differential.errors import SchemaMismatchError
from spark_differential.kernels import reduce as kreduce
from spark_differential.kernels.common import keys, names

pd = lazy("pandas")

_NUMERIC = (*INTEGRAL_TYPES, T.FloatType, T.DoubleType, T.DecimalType)


def _arrow_type(dt: T.DataType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(dt, timezone="UTC")
    except TypeError:  # pragma: no cover - older signatures
        return to_arrow_type(dt)


def _reduction(
    df: DataFrame,
    op: str,
    by: str | Sequence[str] | None,
    agg: str,
    value: str | None,
    out: list[T.StructField],
    func: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> DataFrame:
    by_ = as_columns(by, op=op, what="`by`")
    cs = inspect(df, op=op)
    require_columns(cs, by_, op=op, side="input", what="`by` columns")
    data = [c for c in cs.data_cols if c not in by_]
    if value is not None:
        require_columns(cs, [value], op=op, side="input", what="value column")
        if value in by_:
            raise SchemaMismatchError(f"{op}: `{value}` cannot be both a `by` column and the value column")
        data = [value] + [c for c in data if c != value]
    for f in out:
        if f.name in by_:
            raise SchemaMismatchError(f"{op}: output column `{f.name}` clashes with a `by` column; rename it")
    _, kernel_t, entries = unify(op, [cs], ["input"])
    inp = Input(df, cs, by_, data, "_a", kernel_t, entry_time(entries[0], cs, kernel_t), schema=df.schema)
    exact = True
    if value is not None and agg == "sum":
        exact = not isinstance(cs.field(value).dataType, (T.FloatType, T.DoubleType))
    params = kreduce.ReduceParams(
        nkeys=len(by_),
        ndata=len(data),
        ttype=kernel_t,
        agg=agg,
        out_types=tuple(_arrow_type(f.dataType) for f in out),
        exact_sum=exact,
        func=func,
        key_names=tuple(by_),
        data_names=tuple(data),
        out_names=tuple(f.name for f in out),
        op=op,
    )
    onames = names("_o", len(out))
    out_fields = kernel_fields(inp)[: len(by_)] + [T.StructField(n, f.dataType, True) for n, f in zip(onames, out)]
    cols = list(zip(keys(len(by_)), by_)) + list(zip(onames, [f.name for f in out]))
    return execute(StatefulCall.of(op, kreduce.reduce, params, [inp], entries, out_fields, cols, kernel_t))


def _schema_fields(schema: str | T.StructType, op: str) -> list[T.StructField]:
    if isinstance(schema, str):
        try:
            parsed = T._parse_datatype_string(schema)
        except Exception as e:
            raise SchemaMismatchError(f"{op}: cannot parse schema {schema!r}: {e}") from e
        if not isinstance(parsed, T.StructType):
            raise SchemaMismatchError(f"{op}: schema must describe columns, e.g. 'total long, label string'")
        schema = parsed
    if not isinstance(schema, T.StructType):
        raise SchemaMismatchError(f"{op}: schema must be a DDL string or a StructType, got {type(schema).__name__}")
    fields = list(schema.fields)
    if not fields:
        raise SchemaMismatchError(f"{op}: schema must name at least one output column")
    for f in fields:
        if f.name in ("time", "diff") or f.name.startswith("_sd_"):
            raise SchemaMismatchError(f"{op}: output column `{f.name}` is reserved; `diff` is implied, rename the rest")
    return fields


def dd_reduce(
    df: DataFrame,
    by: str | Sequence[str],
    func: Callable[[pd.DataFrame], pd.DataFrame],
    schema: str | T.StructType,
) -> DataFrame:
    """General per-key reduction.

    For each key (``by`` columns) and each time at which the key's accumulated input
    can change, ``func`` receives a pandas DataFrame of the key's rows with positive
    multiplicity: the ``by`` columns, the other data columns and ``diff`` (the
    multiplicity).  It returns a pandas DataFrame with the ``schema`` columns and an
    integral ``diff``; the output collection (``by`` columns + ``schema`` columns)
    accumulates at every time to exactly those rows.  As with ``applyInPandas``,
    ``schema`` may also list the ``by`` columns (all of them, with the input's
    types): the output then has the schema's column order, and ``func`` may return
    the key columns (checked against the key) or leave them out (filled in).  ``func`` is never called for an
    empty group; an exception in it names the key and time that caused it.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> scores = spark.createDataFrame([("ann", 5, 0, 1), ("ann", 7, 1, 1)], "who string, pts long, time long, diff long")
    >>> top = scores.dd_reduce("who", lambda g: g.nlargest(1, "pts")[["pts"]].assign(diff=1), "pts long")
    >>> top.orderBy("time", "diff").show()
    +---+---+----+----+
    |who|pts|time|diff|
    +---+---+----+----+
    |ann|  5|   0|   1|
    |ann|  5|   1|  -1|
    |ann|  7|   1|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    op = "dd_reduce"
    if not callable(func):
        raise TypeError(f"{op}: func must be callable, got {type(func).__name__}")
    fields, by_ = _schema_fields(schema, op), as_columns(by, op=op, what="`by`")
    listed = [f for f in fields if f.name in by_]
    if not listed:
        return _reduction(df, op, by, "func", None, fields, func)
    # the schema lists the `by` columns too, as applyInPandas schemas do: check them, keep its column order
    cs = inspect(df, op=op)
    require_columns(cs, by_, op=op, side="input", what="`by` columns")
    if len(listed) != len(by_):
        raise SchemaMismatchError(f"{op}: schema lists some `by` columns but not all of {by_}; list all or none")
    for f in listed:
        if f.dataType.simpleString() != cs.field(f.name).dataType.simpleString():
            raise SchemaMismatchError(
                f"{op}: schema gives `by` column `{f.name}` type {f.dataType.simpleString()} but the input has "
                f"{cs.field(f.name).dataType.simpleString()}; use the input's type"
            )
    rest = [f for f in fields if f.name not in by_]
    if not rest:
        raise SchemaMismatchError(f"{op}: schema must name at least one output column besides the `by` columns")
    out = _reduction(df, op, by, "func", None, rest, func)
    return out.select(*qcols([f.name for f in fields]), "time", "diff")


def dd_count(df: DataFrame, by: str | Sequence[str] | None = None) -> DataFrame:
    """Per key, the number of rows (sum of positive multiplicities): ``by`` columns + ``count``.

    Every data column takes part in a row's identity.  To count rows per key
    (SQL's ``count(*)``) of a collection whose multiplicities stay non-negative,
    ``select`` the key columns (plus ``time``/``diff``) first: equal rows then
    consolidate before the kernel scans them (see docs/performance.md, versioned view).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 0, 1), ("a", 2, 1, 1)], "k string, v long, time long, diff long")
    >>> c.dd_count("k").orderBy("time", "diff").show()
    +---+-----+----+----+
    |  k|count|time|diff|
    +---+-----+----+----+
    |  a|    1|   0|   1|
    |  a|    1|   1|  -1|
    |  a|    2|   1|   1|
    +---+-----+----+----+
    <BLANKLINE>
    """
    return _reduction(df, "dd_count", by, "count", None, [T.StructField("count", T.LongType(), False)])


def _value_type(df: DataFrame, col: str, op: str, numeric: bool) -> T.DataType:
    cs = inspect(df, op=op)
    require_columns(cs, [col], op=op, side="input", what="value column")
    dt = cs.field(col).dataType
    if numeric and not isinstance(dt, _NUMERIC):
        raise SchemaMismatchError(f"{op}: `{col}` has type {dt.simpleString()}; dd_sum needs a numeric column")
    return dt


def dd_sum(df: DataFrame, by: str | Sequence[str] | None, col: str) -> DataFrame:
    """Per key, the sum of ``col`` over rows (times their positive multiplicity).

    The output column keeps the name ``col``; integral columns sum to ``bigint``,
    decimals widen by 10 digits, floats sum to ``double``.  Nulls are ignored (a key
    whose values are all null sums to null).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 0, 1), ("a", 2, 1, 1)], "k string, v long, time long, diff long")
    >>> c.dd_sum("k", "v").orderBy("time", "diff").show()
    +---+---+----+----+
    |  k|  v|time|diff|
    +---+---+----+----+
    |  a|  1|   0|   1|
    |  a|  1|   1|  -1|
    |  a|  3|   1|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    op = "dd_sum"
    dt = _value_type(df, col, op, numeric=True)
    if isinstance(dt, INTEGRAL_TYPES):
        out_t: T.DataType = T.LongType()
    elif isinstance(dt, T.DecimalType):
        out_t = T.DecimalType(min(38, dt.precision + 10), dt.scale)
    else:
        out_t = T.DoubleType()
    return _reduction(df, op, by, "sum", col, [T.StructField(col, out_t, True)])


def dd_min(df: DataFrame, by: str | Sequence[str] | None, col: str) -> DataFrame:
    """Per key, the smallest non-null ``col`` among rows with positive multiplicity.

    Only the ``by`` columns and ``col`` are kept (other columns of the winning row
    would not be deterministic when several rows tie).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 5, 0, 1), ("a", 2, 1, 1)], "k string, v long, time long, diff long")
    >>> c.dd_min("k", "v").orderBy("time", "diff").show()
    +---+---+----+----+
    |  k|  v|time|diff|
    +---+---+----+----+
    |  a|  5|   0|   1|
    |  a|  5|   1|  -1|
    |  a|  2|   1|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    dt = _value_type(df, col, "dd_min", numeric=False)
    return _reduction(df, "dd_min", by, "min", col, [T.StructField(col, dt, True)])


def dd_max(df: DataFrame, by: str | Sequence[str] | None, col: str) -> DataFrame:
    """Per key, the largest non-null ``col`` among rows with positive multiplicity (see :func:`dd_min`).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 2, 0, 1), ("a", 5, 1, 1)], "k string, v long, time long, diff long")
    >>> c.dd_max("k", "v").orderBy("time", "diff").show()
    +---+---+----+----+
    |  k|  v|time|diff|
    +---+---+----+----+
    |  a|  2|   0|   1|
    |  a|  2|   1|  -1|
    |  a|  5|   1|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    dt = _value_type(df, col, "dd_max", numeric=False)
    return _reduction(df, "dd_max", by, "max", col, [T.StructField(col, dt, True)])


def _threshold(df: DataFrame, op: str, func: Callable[[int], int] | None) -> DataFrame:
    cs = inspect(df, op=op)
    _, kernel_t, entries = unify(op, [cs], ["input"])
    data = list(cs.data_cols)
    inp = Input(df, cs, [], data, "_a", kernel_t, entry_time(entries[0], cs, kernel_t), hash_cols=data,
                schema=df.schema)
    params = kreduce.ThresholdParams(len(data), kernel_t, func, op, tuple(data))
    cols = list(zip(names("_a", len(data)), data))
    return execute(StatefulCall.of(op, kreduce.threshold, params, [inp], entries, kernel_fields(inp), cols, kernel_t))


def dd_distinct(df: DataFrame) -> DataFrame:
    """The set of data rows with positive multiplicity (each once).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 0, 2), ("a", 1, -2)], "x string, time long, diff long")
    >>> c.dd_distinct().orderBy("time").show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  a|   0|   1|
    |  a|   1|  -1|
    +---+----+----+
    <BLANKLINE>
    """
    return _threshold(df, "dd_distinct", None)


def dd_threshold(df: DataFrame, func: Callable[[int], int]) -> DataFrame:
    """Each row with nonzero accumulated multiplicity ``m`` appears ``func(m)`` times.

    ``func`` maps an int to an int (called once per distinct multiplicity per kernel
    call; ``func(0)`` is never asked and taken as 0).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 0, 3)], "x string, time long, diff long")
    >>> c.dd_threshold(lambda m: m // 2).show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  a|   0|   1|
    +---+----+----+
    <BLANKLINE>
    """
    if not callable(func):
        raise TypeError(f"dd_threshold: func must be callable, got {type(func).__name__}")
    return _threshold(df, "dd_threshold", func)
