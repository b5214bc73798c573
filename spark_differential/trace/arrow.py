"""A trace as Arrow tables in one Python worker: the in-task loop's, a view loop's.

On ``(data, time, diff)``: see :mod:`spark_differential.trace`.  Here a trace is a
:class:`~.spine.Spine` of Arrow batches in kernel form (keys, data, time leaves ``_t*``,
``_d``, ``_new`` false), each consolidated and, where its columns allow, sorted by the
operator's key (:class:`spark_differential.kernels.native.KeySorted`), so the rows of the
keys an iteration touches are found by binary search instead of a pass over the trace.
:func:`consolidated` is "advance to a frontier and consolidate" on Arrow tables.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_differential.core.collection import DIFF
from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.kernels import native
from spark_differential.kernels.common import NEW, D, conform
from spark_differential.trace.spine import MergePolicy, Spine

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

# in one task every merge is eager and exact in size: the policy's ratio, no bound on batches
POLICY = MergePolicy(max_batches=0)


def consolidated(table: pa.Table, cols: Sequence[str], diff: str = DIFF, ttype: TimeType | None = None,
                 frontier: Sequence[Leaves] = (), leaf_cols: Sequence[str] = ()) -> pa.Table:
    """``table`` with the diffs of rows equal in ``cols`` summed and zero sums dropped; with a
    ``frontier`` its time leaves ``leaf_cols`` first advanced to it (``advance(t, F)``, seed 004).

    >>> import pyarrow as pa
    >>> from spark_differential.core.lattice import Total
    >>> t = pa.table({"x": [1, 1, 2], "_sd_t0": [3, 5, 4], "diff": [1, 1, -1]})
    >>> consolidated(t, ["x", "_sd_t0"], ttype=Total("long"), frontier=[(6,)], leaf_cols=["_sd_t0"]).to_pylist()
    [{'x': 1, '_sd_t0': 6, 'diff': 2}, {'x': 2, '_sd_t0': 6, 'diff': -1}]
    """
    if table.num_rows == 0:
        return table
    if frontier:
        assert ttype is not None
        table = advanced(table, ttype, frontier, leaf_cols)
    return native.consolidated(table, cols, diff)


def advanced(table: pa.Table, ttype: TimeType, frontier: Sequence[Leaves], leaf_cols: Sequence[str]) -> pa.Table:
    """``table`` with its time leaves ``leaf_cols`` advanced to ``frontier`` (``advance(t, F)``, seed 004)."""
    if table.num_rows == 0 or not frontier:
        return table
    t = np.column_stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in leaf_cols])
    adv = ttype.np_advance(t, frontier)
    for j, c in enumerate(leaf_cols):
        table = table.set_column(table.schema.get_field_index(c), c, pa.array(adv[:, j]))
    return table


def consolidated_sums(table: pa.Table, sums: Sequence[str]) -> pa.Table:
    """``table``'s rows equal in every column but ``sums`` as one row, each of ``sums`` summed
    (null where all its values are), the rows whose sums are all zero or null dropped: "consolidate"
    for updates that carry several differences (a count's totals, :mod:`spark_differential.kernels.totals`).

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 1, 2], "n": [1, -1, 2], "s": [5, -5, None]})
    >>> consolidated_sums(t, ["n", "s"]).to_pylist()
    [{'k': 2, 'n': 2, 's': None}]
    """
    if table.num_rows == 0:
        return table
    rest = [c for c in table.column_names if c not in sums]
    agg = table.group_by(rest, use_threads=False).aggregate([(c, "sum") for c in sums])
    grouped = pa.Table.from_arrays([agg.column(f"{c}_sum" if c in sums else c) for c in table.column_names],
                                   names=table.column_names)
    nonzero = None
    for c in sums:
        ne = pc.not_equal(grouped.column(c), pa.scalar(0, grouped.schema.field(c).type))
        nonzero = ne if nonzero is None else pc.or_kleene(nonzero, ne)
    return conform(grouped.filter(nonzero), table.schema)


def concat_tables(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """The rows of ``tables`` (each conformed to ``schema``) as one table."""
    parts = [conform(t, schema) for t in tables if t.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()

def _touching(trace: pa.Table, new: Sequence[pa.Table], key_cols: Sequence[str]) -> pa.Table:
    """Rows of ``trace`` whose key some row of ``new`` has."""
    if trace.num_rows == 0 or not key_cols:
        return trace
    present = [t.select(list(key_cols)) for t in new if t.num_rows]
    if not present:
        return trace.slice(0, 0)
    return native.touching(trace, pa.concat_tables(present), key_cols)


_TIME_LEAF = re.compile(r"_t\d+")  # a kernel's time leaf columns (kernels.common.times)


_LAZY_BATCHES = 32  # a trace's batches left unmerged while a dd_min's output is kept (ArrowTrace.extremum)


@dataclass
class ArrowTrace:
    """One input's earlier updates (kernel columns, ``_new`` false), merged size-tiered.

    A batch is kept consolidated and sorted by ``key`` where its columns allow
    (:func:`spark_differential.kernels.native.key_sorted`), so the rows of the keys an
    iteration touches are found by binary search instead of a pass over the trace."""

    schema: pa.Schema
    key: tuple[str, ...] = ()
    spine: Spine[Any] = field(default_factory=lambda: Spine(POLICY))  # pa.Table, or native.KeySorted
    # the trace prepared as a join's side that no longer changes (kernels.fixed_join.Fixed;
    # False: it cannot be), made on first use and dropped when a batch is added
    fixed: Any = None
    # a traced dd_min/dd_max's output kept between iterations (kernels.extremum.ExtremumCache),
    # made while the trace is empty; False once a batch was added without it (it no longer
    # describes the trace)
    extremum: Any = None

    @staticmethod
    def _rows(batch: Any) -> pa.Table:
        return batch if isinstance(batch, pa.Table) else batch.table

    @property
    def batches(self) -> list[Any]:
        """The batches, oldest first."""
        return self.spine.batches

    def table(self) -> pa.Table:
        """Every update of the trace."""
        return pa.concat_tables([self._rows(b) for b in self.batches]) if self.batches else self.schema.empty_table()

    def touching(self, new: Sequence[pa.Table], batch: Any = None) -> pa.Table:
        """The trace's updates whose key some row of ``new`` has (all of them: no key).

        ``batch``: ``new``'s one table as :meth:`batch` made it for a trace of the same key,
        whose sorted keys are then the keys looked up (not sorted again).  It is consolidated:
        a key whose new updates cancel out is not looked up, and its updates sum to nothing
        in any kernel's ``F(trace + new) - F(trace)``."""
        if not self.key:
            return self.table() if any(t.num_rows for t in new) else self.schema.empty_table()
        present = [t.select(list(self.key)) for t in new if t.num_rows]
        if not present or not self.batches:
            return self.schema.empty_table()
        keys_ = pa.concat_tables(present)
        if isinstance(batch, native.KeySorted) and batch.key == self.key:
            distinct = batch.distinct_keys()
        else:
            distinct = native.distinct_keys(keys_, self.key)  # once for every batch
        parts = [_touching(b, [keys_], self.key) if isinstance(b, pa.Table)
                 else b.touching(keys_) if distinct is None else b.touching_distinct(distinct)
                 for b in self.batches]
        return concat_tables(parts, self.schema) if len(parts) > 1 else conform(parts[0], self.schema)

    def add(self, new: pa.Table) -> None:
        """Keep ``new``'s updates (as old ones from now on)."""
        if new.num_rows == 0:
            return
        self.add_batch(self.batch(new))

    def batch(self, new: pa.Table) -> Any:
        """``new``'s updates as the trace keeps a batch of them (``_new`` false; consolidated and
        sorted by key, a :class:`~spark_differential.kernels.native.KeySorted`, where the columns allow)."""
        old = new.set_column(new.schema.get_field_index(NEW), NEW, pa.array(np.zeros(new.num_rows, dtype=bool)))
        return self._sorted(old)

    def add_batch(self, batch: Any, cached: bool = False) -> None:
        """Keep a batch made by :meth:`batch` (as old updates from now on); ``cached``: the
        batch went through :attr:`extremum` already (else that is dropped)."""
        if self._rows(batch).num_rows == 0:
            return
        self.fixed = None
        if not cached:
            self.extremum = False
        # merge the newest batches while an older one is at most twice their size; with a
        # dd_min's output kept (extremum) the trace is read only for a few keys' sweeps, and
        # up to _LAZY_BATCHES batches stay as they came (each binary-searched by those sweeps)
        self.spine.insert(batch, self._rows(batch).num_rows, self._merge,
                          hold=_LAZY_BATCHES if self.extremum else 1)

    def _merge(self, batches: list[Any]) -> tuple[Any, int]:
        merged = self._sorted(pa.concat_tables([self._rows(b) for b in batches]), runs=True)
        return merged, self._rows(merged).num_rows

    def _sorted(self, table: pa.Table, runs: bool = False) -> Any:
        """``table`` as a batch of the trace; ``runs``: it is batches of the trace concatenated."""
        if self.key:
            # within a key in time order: what a reduction's sweep reads (kernels.extremum)
            kept = native.key_sorted(table, self.key, then=[c for c in table.column_names if _TIME_LEAF.fullmatch(c)],
                                     runs=runs)
            if kept is not None:
                # conform casts at most: the int64 values kept for KeySorted.values stay the same
                return dataclasses.replace(kept, table=conform(kept.table, self.schema))
        cols = [c for c in table.column_names if c != "_d"]
        return conform(consolidated(table, cols, diff=D), self.schema)
