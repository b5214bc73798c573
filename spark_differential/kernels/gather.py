"""A collection's updates gathered per key: one row per key, its updates as a list.

On ``(data, time, diff)``: a prepared collection (kernel form: bucket, key hash, key
columns, then data, time leaves and diff) becomes one row per key holding the key
columns and ``_rows``, the list of that key's updates ``(data…, time leaves…, diff)``
in any order.  Nothing is summed: the list holds exactly the rows received, so the
collection it stands for is unchanged.  Used for the collection from outside a
``dd_iterate`` that a chunked pair join probes at every iteration (see
``spark_differential.loop.distributed._pair_join``): one probe per key instead of one per update.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_differential.core.lazy import lazy
from spark_differential.kernels.stab import ids

np = lazy("numpy")
pa = lazy("pyarrow")

ROWS = "_rows"


@dataclass(frozen=True)
class GatherParams:
    """``on``: the columns identifying a key (kept as they are); every other column is gathered."""

    on: tuple[str, ...]
    out_schema: pa.Schema  # ``on`` columns, then ``_rows``


def gather(p: GatherParams, X: pa.Table) -> pa.Table:
    """One row per distinct ``on`` of ``X``, the other columns gathered into ``_rows``.

    >>> t = pa.table({"_k0": [1, 2, 1], "_t0": [5, 6, 7], "_d": [1, 1, -1]})
    >>> schema = pa.schema([pa.field("_k0", pa.int64()),
    ...     pa.field("_rows", pa.list_(pa.struct([("_t0", pa.int64()), ("_d", pa.int64())])))])
    >>> gather(GatherParams(("_k0",), schema), t).to_pylist()
    [{'_k0': 1, '_rows': [{'_t0': 5, '_d': 1}, {'_t0': 7, '_d': -1}]}, {'_k0': 2, '_rows': [{'_t0': 6, '_d': 1}]}]
    """
    n = X.num_rows
    item = p.out_schema.field(ROWS).type.value_type
    kid = ids([X.column(c) for c in p.on], n)
    order = np.argsort(kid, kind="stable")
    counts = np.bincount(kid) if n else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    picked = pa.array(order)
    fields = [X.column(f.name).take(picked).combine_chunks().cast(f.type) for f in item]
    values = pa.StructArray.from_arrays(fields, fields=list(item))
    lists = pa.ListArray.from_arrays(pa.array(offsets), values, type=p.out_schema.field(ROWS).type)
    heads = X.select(list(p.on)).take(pa.array(order[offsets[:-1]]))
    cols = [heads.column(f.name).cast(f.type) for f in p.out_schema if f.name != ROWS]
    return pa.table([*cols, lists], schema=p.out_schema)

