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
from dataclasses import dataclass
from typing import Any

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
    have = table.schema
    if have.equals(schema, check_metadata=True):  # (names, order, types, nullability, metadata: as asked)
        return table
    if have.names == schema.names:  # (the common case: the columns as asked, some nullability or type not)
        arrays = [c if c.type == f.type else c.cast(f.type) for c, f in zip(table.columns, schema)]
    else:
        arrays = [c if c.type == f.type else c.cast(f.type) for c, f in ((table.column(f.name), f) for f in schema)]
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


@dataclass(frozen=True)
class StateShape:
    """How a kernel keys the state it keeps across calls (its *trace*): an engine that
    keeps a trace hands the kernel, with new updates, the trace rows whose ``key`` columns
    equal a new update's (every other row's output is unchanged by them).

    ``bilinear``: the kernel is bilinear in its two inputs (a join): the history of one
    input is read only when the other changes, so an input joined with a collection that
    no longer changes needs no trace.  ``chunk``: how a time chunk (one more column of a
    loop cut in slices of time) enters the state: ``"key"`` (one more key column) or
    ``"data"`` (one more data column, for kernels keyed by their whole row).

    Kernel parameters describe their state with two methods: ``shape() -> StateShape``
    and ``chunked() -> (parameters with the chunk column, its name)``; parameters without
    them have no form inside a task or an in-task loop (they run distributed only).
    """

    key: tuple[str, ...]
    bilinear: bool = False
    chunk: str = "key"

    def keeps(self, in_loop: Sequence[bool]) -> list[bool]:
        """Which inputs need a trace of their earlier updates, given which vary with the loop
        (``in_loop``).  A bilinear kernel's change is ``dA x (B + dB) + A x dB``: the history
        ``A`` of one input is read only when the other changes, and an input from outside a
        loop changes at its iteration 0 alone, when nothing has a history yet; so a loop input
        joined with it (BFS: distances with edges) needs no trace.  Every other kernel reads
        the traces of all its inputs."""
        if self.bilinear and len(in_loop) == 2:
            return [in_loop[1 - j] for j in range(2)]
        return [True] * len(in_loop)


def state_shape(params: Any) -> StateShape | None:
    """``params.shape()``, or ``None`` for parameters of a kernel with no in-task form."""
    shape = getattr(params, "shape", None)
    return shape() if callable(shape) else None
