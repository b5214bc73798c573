"""``dd_min``/``dd_max`` read against a key-sorted trace in place, against the kernel on rows.

Inside the in-task loop (``spark_differential.intask``) a ``dd_min`` keeps its
trace as batches sorted by key (``native.key_sorted``) and
``extremum_traced.min_max_traced`` reads the touched keys' rows where they lie.  It must
give exactly what ``extremum.min_max`` gives on the same rows gathered into one
table (trace rows with ``_new`` false, then the new updates): random traces in
several batches, keys of one and two columns, values in narrow and wide ranges
(both ways of numbering a key's values), nulls among the new values, and
histories long enough for both ways of ordering a key's times.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from spark_differential.kernels import extremum, native
from spark_differential.kernels.extremum_traced import min_max_traced


def _table(rng: np.random.Generator, n: int, nkeys: int, spread: int, times: int, new: bool) -> pa.Table:
    cols: dict[str, pa.Array] = {}
    for i in range(nkeys):
        cols[f"_k{i}"] = pa.array(rng.integers(0, 6, n), pa.int64())
    cols["_a0"] = pa.array(rng.integers(-spread, spread + 1, n), pa.int64())
    cols["_t0"] = pa.array(rng.integers(0, times, n), pa.int64())
    cols["_d"] = pa.array(rng.choice([-1, 1, 2], n), pa.int64())
    cols["_new"] = pa.array(np.full(n, new))
    return pa.table(cols)


def _rows(table: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("seed", range(12))
def test_traced_equals_min_max_on_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nkeys = 1 + seed % 2
    spread = [3, 10**12][seed % 3 == 0]  # wide values: the sorted numbering of a key's values
    times = [5, 400][seed % 4 == 1]  # long histories: more than a short insertion sort per key
    largest = seed % 2 == 1
    key = tuple(f"_k{i}" for i in range(nkeys))
    batches = []
    for size in (rng.integers(1, 300), rng.integers(1, 80), rng.integers(0, 20)):
        old = _table(rng, int(size), nkeys, spread, times, new=False)
        kept = native.key_sorted(old, key, then=["_t0"])
        if kept is not None:
            batches.append(kept)
    new = _table(rng, int(rng.integers(1, 60)), nkeys, spread, times, new=True)
    if seed % 5 == 2:  # null values never count
        values = new.column("_a0").to_pylist()
        new = new.set_column(new.schema.get_field_index("_a0"), "_a0",
                             pa.array([None if i % 3 == 0 else v for i, v in enumerate(values)], pa.int64()))
    got = min_max_traced(nkeys, largest, pa.int64(), new, batches, key)
    assert got is not None
    trace = pa.concat_tables([b.table for b in batches]) if batches else new.slice(0, 0)
    touched = native.touching(trace, new, list(key))
    expected = extremum.min_max(nkeys, 1, 1, largest, pa.int64(), pa.concat_tables([touched, new]))
    assert expected is not None
    assert _rows(got) == _rows(expected.select(got.column_names))
    assert got.num_rows > 0 or expected.num_rows == 0


def test_traced_declines_what_it_does_not_cover() -> None:
    new = pa.table({"_k0": ["a"], "_a0": [1], "_t0": [0], "_d": [1], "_new": [True]})
    assert min_max_traced(1, False, pa.int64(), new, [], ("_k0",)) is None  # a string key
    unsorted = pa.table({"_k0": [1], "_a0": [1], "_t0": [0], "_d": [1], "_new": [False]})
    new = pa.table({"_k0": [1], "_a0": [2], "_t0": [1], "_d": [1], "_new": [True]})
    assert min_max_traced(1, False, pa.int64(), new, [unsorted], ("_k0",)) is None  # a trace not key-sorted
