"""Column naming and SQL fragments shared by the kernels.

Inside a kernel every column has a positional internal name, so SQL never meets a
user identifier:  ``_k<i>`` key columns, ``_a<i>`` / ``_b<i>`` data columns of the
first / second input, ``_o<i>`` output columns of a reduction, ``_t<i>`` the time's
int64 leaves (see :mod:`spark_differential.core.lattice`), ``_n<i>`` a "next time",
``_d`` the diff and ``_new`` the flag that marks an update as new in this
iteration (``False`` for updates already in an operator's trace).  Also
:func:`over_partition`, how a kernel runs once per partition under ``mapInArrow``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from spark_differential.core.lazy import lazy

pa = lazy("pyarrow")


D = "_d"
NEW = "_new"


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def keys(n: int) -> list[str]:
    return names("_k", n)


def times(width: int) -> list[str]:
    return names("_t", width)


def nexts(width: int) -> list[str]:
    return names("_n", width)


def csv(items: Sequence[str], prefix: str = "") -> str:
    p = f"{prefix}." if prefix else ""
    return ", ".join(p + c for c in items)


def window(partition: Sequence[str]) -> str:
    """``PARTITION BY …`` (empty when there is nothing to partition by)."""
    return f"PARTITION BY {csv(partition)}" if partition else ""


def hash_of(cols: Sequence[str], prefix: str = "") -> str:
    return f"hash({csv(cols, prefix)})" if cols else "0"


def key_eq(cols: Sequence[str], left: str, right: str) -> str:
    if not cols:
        return "TRUE"
    return " AND ".join(f"{left}.{c} IS NOT DISTINCT FROM {right}.{c}" for c in cols)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast ``table``'s columns to exactly ``schema`` (what Spark expects back)."""
    arrays = []
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            col = col.cast(field.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def over_partition(fn: Callable[[pa.Table], pa.Table]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``fn`` called once over all the rows of a partition, for ``mapInArrow`` (an empty
    partition: no call, no rows)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [b for b in batches if b.num_rows]
        if rows:
            yield from fn(pa.Table.from_batches(rows)).to_batches()

    return run
