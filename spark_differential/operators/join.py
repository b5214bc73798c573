"""Joins: ``dd_join``, ``dd_semijoin``, ``dd_antijoin``.

On ``(data, time, diff)``: at every time the output is the equi-join of the two
accumulated inputs (multiplicities multiply).  In differences, each pair of updates
with equal keys meets at the lattice join of their times.  Rows whose key contains
a null never match (as in SQL).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import as_columns, inspect, quoted, require_columns
from spark_differential.core.scope import unify
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.kernel_form import Input, entry_time, kernel_fields, key_casts
from spark_differential.errors import SchemaMismatchError
from spark_differential.kernels import join as kjoin
from spark_differential.kernels.common import keys, names


def _not_null(df: DataFrame, on: Sequence[str]) -> DataFrame:
    """``df`` without the rows whose key has a null (SQL text: one py4j round trip)."""
    return df.where(" AND ".join(f"{quoted(c)} IS NOT NULL" for c in on)) if on else df



def _binary(op: str, left: DataFrame, right: DataFrame, on: str | Sequence[str], mode: str) -> DataFrame:
    keys_ = as_columns(on, op=op, what="`on`")
    if not keys_:
        raise SchemaMismatchError(f"{op}: name at least one key column in `on`")
    a = inspect(left, op=op, side="left input")
    b = inspect(right, op=op, side="right input")
    require_columns(a, keys_, op=op, side="left input", what="key columns")
    require_columns(b, keys_, op=op, side="right input", what="key columns")
    a_data = [c for c in a.data_cols if c not in keys_]
    b_data = [c for c in b.data_cols if c not in keys_] if mode == "join" else []
    clash = sorted(set(a_data) & set(b_data))
    if clash:
        raise SchemaMismatchError(
            f"{op}: both inputs have data columns {clash} besides the keys; rename one side's columns "
            "(e.g. with withColumnRenamed) so every output column has one meaning"
        )
    _, kernel_t, entries = unify(op, [a, b], ["left input", "right input"])
    ca, cb = key_casts(op, a, b, keys_)
    ta, tb = entry_time(entries[0], a, kernel_t), entry_time(entries[1], b, kernel_t)
    # rows with a null key are never matched, so the antijoin keeps them
    kept = left if mode == "antijoin" else _not_null(left, keys_)
    # the schemas read by `inspect` (the filter changes no column): no JVM round trip to ask again
    ia = Input(kept, a, keys_, a_data, "_a", kernel_t, ta, key_casts=ca, schema=left.schema)
    ib = Input(_not_null(right, keys_), b, keys_, b_data, "_b", kernel_t, tb, key_casts=cb, schema=right.schema)
    params = kjoin.JoinParams(len(keys_), len(a_data), len(b_data), kernel_t, mode)
    out_fields = kernel_fields(ia) + kernel_fields(ib, with_keys=False)
    k_out = [T.StructField(n, a.field(k).dataType, True) for n, k in zip(keys(len(keys_)), keys_)]
    out_fields = k_out + out_fields[len(keys_):]
    cols = list(zip(keys(len(keys_)), keys_)) + list(zip(names("_a", len(a_data)), a_data))
    cols += list(zip(names("_b", len(b_data)), b_data))
    if mode != "join":  # keep the left input's column order
        internal = {user: name for name, user in cols}
        cols = [(internal[c], c) for c in a.data_cols]
    return execute(StatefulCall.of(op, kjoin.join, params, [ia, ib], entries, out_fields, cols, kernel_t))


def dd_join(left: DataFrame, right: DataFrame, on: str | Sequence[str]) -> DataFrame:
    """Inner equi-join of two collections.

    Output columns: the ``on`` keys, then the left's other data columns, then the
    right's; time is the lattice join of the two update times, diff the product.
    Data columns other than the keys must not share names (rename one side first).
    Rows whose key contains a null never match.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> orders = spark.createDataFrame([("bacon", "ann", 1, 1)], "item string, who string, time long, diff long")
    >>> prices = spark.createDataFrame([("bacon", 3, 0, 1), ("bacon", 3, 2, -1), ("bacon", 4, 2, 1)],
    ...                                "item string, price int, time long, diff long")
    >>> orders.dd_join(prices, on="item").orderBy("time", "diff").show()
    +-----+---+-----+----+----+
    | item|who|price|time|diff|
    +-----+---+-----+----+----+
    |bacon|ann|    3|   1|   1|
    |bacon|ann|    3|   2|  -1|
    |bacon|ann|    4|   2|   1|
    +-----+---+-----+----+----+
    <BLANKLINE>
    """
    return _binary("dd_join", left, right, on, "join")


def dd_semijoin(left: DataFrame, right: DataFrame, on: str | Sequence[str]) -> DataFrame:
    """The left collection restricted to keys present in the right one.

    As in differential dataflow, each left row's multiplicity is multiplied by its
    key's multiplicity in ``right`` (projected to the ``on`` columns); pass a set
    (e.g. ``right.select(*on, "time", "diff").dd_distinct()``) if a set is meant.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> people = spark.createDataFrame([("ann", 0, 1), ("bob", 0, 1)], "name string, time long, diff long")
    >>> vips = spark.createDataFrame([("ann", 1, 1)], "name string, time long, diff long")
    >>> people.dd_semijoin(vips, on="name").show()
    +----+----+----+
    |name|time|diff|
    +----+----+----+
    | ann|   1|   1|
    +----+----+----+
    <BLANKLINE>
    """
    return _binary("dd_semijoin", left, right, on, "semijoin")


def dd_antijoin(left: DataFrame, right: DataFrame, on: str | Sequence[str]) -> DataFrame:
    """The left collection minus its semijoin with ``right``: ``left - left.dd_semijoin(right)``.

    With a multiset ``right`` (a key present twice) the subtraction can go below zero,
    exactly as in differential dataflow; pass a set if "keys absent from right" is meant.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> people = spark.createDataFrame([("ann", 0, 1), ("bob", 0, 1)], "name string, time long, diff long")
    >>> vips = spark.createDataFrame([("ann", 1, 1)], "name string, time long, diff long")
    >>> people.dd_antijoin(vips, on="name").orderBy("time", "name").show()
    +----+----+----+
    |name|time|diff|
    +----+----+----+
    | ann|   0|   1|
    | bob|   0|   1|
    | ann|   1|  -1|
    +----+----+----+
    <BLANKLINE>
    """
    return _binary("dd_antijoin", left, right, on, "antijoin")
