"""Bridging the oracle (tests/oracle.py) and the library's kernel layer, without Spark.

* :func:`lib_type` maps an oracle lattice over integers to the library's
  :class:`~spark_differential.core.lattice.TimeType` (struct fields ``a, b, c, …``).
* :func:`to_leaves` / :func:`from_leaves` flatten an oracle time into the kernels'
  int64 leaves and back.  They are written here independently of the library's
  ``encode_value``/``decode_value`` so a bug there cannot hide a bug in a kernel.
* :func:`kernel_table` builds an Arrow table in the kernels' positional names
  (``_k*`` keys, ``_a*``/``_b*`` data, ``_t*`` leaves, ``_d``, ``_new``), exactly as
  ``spark_differential.engine.distributed.prepare`` hands it to a kernel (minus the bucket).
* :func:`updates_of` reads a kernel's output table back as oracle updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from oracle import AltNeu, Coll, Product, Total, consolidate

from spark_differential.core import lattice as L

# the lattices exercised throughout, as oracle lattices over integer leaves
LATTICES: dict[str, Any] = {
    "int": Total(),
    "product2": Product([Total(), Total()]),
    "product3": Product([Total(), Total(), Total()]),
    "nested": Product([Total(), Product([Total(), Total()])]),
    "altneu": AltNeu(Total()),
    "altneu_product2": AltNeu(Product([Total(), Total()])),
}


def lib_type(lat: Any) -> L.TimeType:
    """The library time type matching an oracle lattice over integers."""
    if isinstance(lat, Total):
        return L.Total("long")
    if isinstance(lat, Product):
        return L.Product(tuple((chr(ord("a") + i), lib_type(f)) for i, f in enumerate(lat.fields)))
    if isinstance(lat, AltNeu):
        return L.AltNeu(lib_type(lat.inner))
    raise TypeError(lat)


def width(lat: Any) -> int:
    if isinstance(lat, Total):
        return 1
    if isinstance(lat, Product):
        return sum(width(f) for f in lat.fields)
    if isinstance(lat, AltNeu):
        return width(lat.inner) + 1
    raise TypeError(lat)


def to_leaves(lat: Any, t: Any) -> tuple[int, ...]:
    """An oracle time as int64 leaves (depth first; AltNeu's ``neu`` last, as 0/1)."""
    if isinstance(lat, Total):
        return (int(t),)
    if isinstance(lat, Product):
        return tuple(v for f, x in zip(lat.fields, t, strict=True) for v in to_leaves(f, x))
    if isinstance(lat, AltNeu):
        return (*to_leaves(lat.inner, t[0]), int(bool(t[1])))
    raise TypeError(lat)


def from_leaves(lat: Any, leaves: Sequence[int]) -> Any:
    """Int64 leaves back to an oracle time."""
    leaves = [int(x) for x in leaves]
    assert len(leaves) == width(lat), (lat, leaves)
    if isinstance(lat, Total):
        return leaves[0]
    if isinstance(lat, Product):
        out, o = [], 0
        for f in lat.fields:
            w = width(f)
            out.append(from_leaves(f, leaves[o : o + w]))
            o += w
        return tuple(out)
    if isinstance(lat, AltNeu):
        assert leaves[-1] in (0, 1), leaves
        return (from_leaves(lat.inner, leaves[:-1]), bool(leaves[-1]))
    raise TypeError(lat)


def kernel_table(
    coll: Coll,
    lat: Any,
    keys: Sequence[str] = (),
    data: Sequence[str] | None = None,
    prefix: str = "_a",
    new: Sequence[bool] | bool = True,
) -> pa.Table:
    """``coll`` in kernel names: keys ``keys`` as ``_k*``, ``data`` as ``<prefix>*``.

    ``data`` defaults to the non-key columns in order.  ``new`` gives the ``_new``
    flag of every update (one bool for all).
    """
    data = [c for c in coll.cols if c not in keys] if data is None else list(data)
    idx = {c: i for i, c in enumerate(coll.cols)}
    n = len(coll.updates)
    flags = [bool(new)] * n if isinstance(new, bool) else [bool(x) for x in new]
    assert len(flags) == n
    w = width(lat)
    cols: dict[str, pa.Array] = {}
    for j, c in enumerate(keys):
        cols[f"_k{j}"] = pa.array([d[idx[c]] for d, _, _ in coll.updates], pa.int64())
    for j, c in enumerate(data):
        cols[f"{prefix}{j}"] = pa.array([d[idx[c]] for d, _, _ in coll.updates], pa.int64())
    leaves = [to_leaves(lat, t) for _, t, _ in coll.updates]
    for j in range(w):
        cols[f"_t{j}"] = pa.array([lv[j] for lv in leaves], pa.int64())
    cols["_d"] = pa.array([int(r) for _, _, r in coll.updates], pa.int64())
    cols["_new"] = pa.array(flags, pa.bool_())
    return pa.table(cols)


def updates_of(table: pa.Table, data_cols: Sequence[str], lat: Any) -> list[tuple[tuple, Any, int]]:
    """A kernel output table as oracle updates (data from ``data_cols``, time from ``_t*``)."""
    w = width(lat)
    assert [c for c in table.column_names if c.startswith("_t")] == [f"_t{j}" for j in range(w)], table.column_names
    pyd = {c: table.column(c).to_pylist() for c in [*data_cols, *[f"_t{j}" for j in range(w)], "_d"]}
    out = []
    for i in range(table.num_rows):
        d = tuple(_plain_number(pyd[c][i]) for c in data_cols)
        t = from_leaves(lat, [pyd[f"_t{j}"][i] for j in range(w)])
        out.append((d, t, int(pyd["_d"][i])))
    return out


def _plain_number(v: Any) -> Any:
    """DuckDB sums integers to HUGEINT (Arrow decimal); compare them as ints."""
    if isinstance(v, Decimal) and v == v.to_integral_value():
        return int(v)
    return v


def difference(all_: Coll, old: Coll) -> Coll:
    """``all_ - old`` consolidated (same columns)."""
    assert all_.cols == old.cols
    return Coll(all_.cols, consolidate([*all_.updates, *[(d, t, -r) for d, t, r in old.updates]]))


def split(coll: Coll, flags: Sequence[bool]) -> tuple[Coll, Coll]:
    """``(old, new)`` parts of ``coll`` by per-update ``_new`` flags."""
    old = [u for u, f in zip(coll.updates, flags, strict=True) if not f]
    new = [u for u, f in zip(coll.updates, flags, strict=True) if f]
    return Coll(coll.cols, old), Coll(coll.cols, new)
