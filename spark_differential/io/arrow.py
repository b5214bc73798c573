"""Arrow data from outside Spark (a delta-rs change feed, any Arrow stream) as a Spark DataFrame.

On ``(data, time, diff)``: nothing is added or dropped; the rows are the same, with the
Arrow types Spark cannot take turned into the nearest it can: ``string_view`` and
``large_string`` to strings, ``binary_view`` and ``large_binary`` to binary, unsigned
integers to ``bigint`` (a ``uint64`` above ``2**63 - 1`` is an error, never a wrapped
number), dictionary-encoded columns to their values, inside lists and structs too.
delta-rs' ``DeltaTable.load_cdf()`` gives ``string_view`` text and a ``uint64``
``_commit_version``, so its change feed goes to :func:`~spark_differential.from_change_feed`
as it is.  Anything with the Arrow PyCapsule stream interface (``__arrow_c_stream__``:
pyarrow tables and readers, arro3, polars…) is read.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_differential.core.lazy import lazy
from spark_differential.errors import EnvironmentError_, SchemaMismatchError

pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

INT64_MAX = 2**63 - 1


def is_arrow(obj: object) -> bool:
    """Whether ``obj`` is Arrow data this module reads (not a Spark DataFrame)."""
    return not isinstance(obj, DataFrame) and (hasattr(obj, "__arrow_c_stream__") or hasattr(obj, "__arrow_c_array__"))


def _spark_type(t: Any) -> Any:
    """The Arrow type Spark takes for ``t`` (``t`` itself when Spark takes it)."""
    types = pa.types
    if types.is_string_view(t) or types.is_large_string(t):
        return pa.string()
    if types.is_binary_view(t) or types.is_large_binary(t):
        return pa.binary()
    if types.is_unsigned_integer(t):
        return pa.int64()
    if types.is_dictionary(t):
        return _spark_type(t.value_type)
    if types.is_list(t) or types.is_large_list(t) or types.is_list_view(t) or types.is_large_list_view(t):
        return pa.list_(pa.field(t.value_field.name, _spark_type(t.value_type), t.value_field.nullable))
    if types.is_struct(t):
        return pa.struct([pa.field(f.name, _spark_type(f.type), f.nullable) for f in t])
    if types.is_map(t):
        return pa.map_(_spark_type(t.key_type), _spark_type(t.item_type))
    return t


def _check_uint64(table: Any, op: str) -> None:
    for field, column in zip(table.schema, table.columns):
        if pa.types.is_uint64(field.type) and len(column) and column.null_count < len(column):
            top = pc.max(column).as_py()
            if top is not None and top > INT64_MAX:
                raise SchemaMismatchError(
                    f"{op}: column `{field.name}` (uint64) holds {top}, above the largest bigint ({INT64_MAX}); "
                    "Spark has no unsigned 64-bit type. Cast or rebase it before reading."
                )


def spark_ready(data: Any, op: str) -> Any:
    """``data`` (any Arrow table, batch or stream) as a pyarrow Table with types Spark takes.

    >>> import pyarrow as pa
    >>> t = pa.table({"who": pa.array(["ann"], pa.string_view()), "v": pa.array([3], pa.uint64())})
    >>> spark_ready(t, "example").schema
    who: string
    v: int64
    """
    if isinstance(data, pa.Table):
        table = data
    elif hasattr(data, "__arrow_c_stream__"):
        table = pa.RecordBatchReader.from_stream(data).read_all()
    else:
        table = pa.Table.from_batches([pa.record_batch(data)])
    _check_uint64(table, op)
    target = pa.schema([pa.field(f.name, _spark_type(f.type), f.nullable) for f in table.schema])
    return table if target == table.schema else table.cast(target)


def to_spark(data: Any, op: str) -> DataFrame:
    """``data`` as a DataFrame of the active Spark session (classic or Connect).

    >>> import pyarrow as pa, spark_differential as sd
    >>> spark = sd.session()
    >>> to_spark(pa.table({"v": pa.array([1, 2], pa.uint32())}), "example").collect()
    [Row(v=1), Row(v=2)]
    """
    table = spark_ready(data, op)
    try:
        spark = SparkSession.active()
    except Exception:  # noqa: BLE001 - pyspark's NO_ACTIVE_OR_DEFAULT_SESSION
        raise EnvironmentError_(
            f"{op}: Arrow data becomes a DataFrame of the active Spark session, and there is none; "
            "start one first (sd.session() or SparkSession.builder.getOrCreate())"
        ) from None
    return spark.createDataFrame(table)


__all__ = ["INT64_MAX", "is_arrow", "spark_ready", "to_spark"]
