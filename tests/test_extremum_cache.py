"""``dd_min``/``dd_max`` over many iterations with each key's output kept (``ExtremumCache``).

Inside the in-task loop a traced ``dd_min`` keeps, per key, its output as steps over
time with the count of the least value, and answers most keys from those steps and the
iteration's new updates without reading their trace
(``extremum_traced.min_max_traced(..., cache=)``).  Over a run of iterations (each one's new
updates then joining the trace as a key-sorted batch, as ``trace.arrow.ArrowTrace`` does)
every iteration's output must equal, row for row, the sweep over the trace
(``cache=None``) and a brute force: ``F(all) − F(old)``, with ``F`` the least (greatest)
value of positive accumulated count at each time, computed key by key, time by time.

The updates retract the least value (its count coming to zero: the trace is read), add
duplicates of it, and in some runs make counts negative (transient multiplicities: such a
key is swept from its trace from then on).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pytest

from spark_differential.kernels import native
from spark_differential.kernels.extremum_cache import ExtremumCache
from spark_differential.kernels.extremum_traced import min_max_traced


def _brute(rows: list[tuple], times: list[int], largest: bool) -> dict[tuple, dict[int, int | None]]:
    """Per key, the extremum of the rows ``(key, value, time, diff)`` at each of ``times``
    (``None``: no value of positive count)."""
    by_key: dict[tuple, list[tuple]] = defaultdict(list)
    for r in rows:
        by_key[r[0]].append(r)
    out: dict[tuple, dict[int, int | None]] = {}
    for key, rs in by_key.items():
        f: dict[int, int | None] = {}
        for t in times:
            acc: Counter = Counter()
            for _, v, s, d in rs:
                if s <= t:
                    acc[v] += d
            live = [v for v, c in acc.items() if c > 0]
            f[t] = (max(live) if largest else min(live)) if live else None
        out[key] = f
    return out


def _difference(old: list[tuple], new: list[tuple], largest: bool) -> Counter:
    """``F(old + new) − F(old)`` for the keys of ``new``, as ``(key, value, time) -> diff``."""
    keys_ = {r[0] for r in new}
    times = sorted({r[2] for r in old + new if r[0] in keys_})
    before = _brute([r for r in old if r[0] in keys_], times, largest)
    after = _brute([r for r in old + new if r[0] in keys_], times, largest)
    out: Counter = Counter()
    for key in keys_:
        for f, sign in ((after.get(key, {}), 1), (before.get(key, {}), -1)):
            prev = None
            for t in times:
                cur = f.get(t)
                if cur != prev:
                    if cur is not None:
                        out[(key, cur, t)] += sign
                    if prev is not None:
                        out[(key, prev, t)] -= sign
                prev = cur
    return Counter({k: v for k, v in out.items() if v})


def _got(table: pa.Table, nkeys: int) -> Counter:
    out: Counter = Counter()
    for r in table.to_pylist():
        out[(tuple(r[f"_k{i}"] for i in range(nkeys)), r["_o0"], r["_t0"])] += r["_d"]
    assert all(v != 0 for v in out.values())
    assert len(out) == table.num_rows  # one row per key, time and value
    return out


def _updates(rng: np.random.Generator, live: dict, n: int, nkeys: int, times: int, spread: int,
             negative: bool) -> list[tuple]:
    """``n`` updates ``(key, value, time, diff)``: insertions, and retractions of rows present
    (of the least value often); with ``negative``, also retractions of absent rows."""
    rows = []
    for _ in range(n):
        key = tuple(int(x) for x in rng.integers(0, 4, nkeys))
        t = int(rng.integers(0, times))
        present = [(v, s) for (k, v, s), c in live.items() if k == key and c > 0]
        roll = rng.random()
        if present and roll < 0.45:
            if rng.random() < 0.5:  # the least (or greatest) value: its count may come to zero
                v, s = min(present, key=lambda p: p[0]) if rng.random() < 0.5 else max(present, key=lambda p: p[0])
            else:
                v, s = present[int(rng.integers(0, len(present)))]
            rows.append((key, v, max(s, t), -1))
        elif negative and roll < 0.55:
            rows.append((key, int(rng.integers(-spread, spread + 1)), t, -int(rng.integers(1, 3))))
        else:
            v = int(rng.integers(-spread, spread + 1))
            if present and rng.random() < 0.3:  # a duplicate of a present value
                v = present[int(rng.integers(0, len(present)))][0]
            rows.append((key, v, t, int(rng.integers(1, 3))))
    for key, v, t, d in rows:
        live[(key, v, t)] = live.get((key, v, t), 0) + d
    return rows


def _table(rows: list[tuple], nkeys: int, new: bool) -> pa.Table:
    cols = {f"_k{i}": pa.array([r[0][i] for r in rows], pa.int64()) for i in range(nkeys)}
    cols["_a0"] = pa.array([r[1] for r in rows], pa.int64())
    cols["_t0"] = pa.array([r[2] for r in rows], pa.int64())
    cols["_d"] = pa.array([r[3] for r in rows], pa.int64())
    cols["_new"] = pa.array(np.full(len(rows), new))
    return pa.table(cols)


@pytest.mark.parametrize("seed", range(10))
def test_cache_equals_sweep_and_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nkeys = 1 + seed % 2
    largest = seed % 3 == 1
    negative = seed % 4 == 3  # counts below zero: such keys go back to their trace
    presorted = seed % 2 == 0  # the new updates as the loop gives them (key-sorted) or as they come
    key = tuple(f"_k{i}" for i in range(nkeys))
    spread, times = [3, 40][seed % 3 == 2], [6, 30][seed % 5 == 4]
    cache = ExtremumCache(nkeys)
    batches: list = []
    seen: list[tuple] = []
    live: dict = {}
    for _ in range(12):
        rows = _updates(rng, live, int(rng.integers(1, 40)), nkeys, times, spread, negative)
        new = _table(rows, nkeys, True)
        sorted_new = native.key_sorted(new, key, then=["_t0"])
        assert sorted_new is not None
        kwargs = {"sorted_new": sorted_new} if presorted else {}
        given = sorted_new.table if presorted else new
        got = min_max_traced(nkeys, largest, pa.int64(), given, batches, key, cache=cache, **kwargs)
        swept = min_max_traced(nkeys, largest, pa.int64(), given, batches, key, **kwargs)
        assert got is not None and swept is not None
        expected = _difference(seen, rows, largest)
        assert _got(swept, nkeys) == expected
        assert _got(got, nkeys) == expected
        trace_batch = native.key_sorted(new.set_column(new.schema.get_field_index("_new"), "_new",
                                                       pa.array(np.zeros(new.num_rows, bool))), key, then=["_t0"])
        batches.append(trace_batch)
        seen += rows
    assert cache.fast_keys > 0  # keys answered from their kept output
    assert cache.fallback_keys > 0  # and keys whose least value's count came to zero
    if negative:
        assert cache.dirty.any()


def test_cache_answers_without_the_trace() -> None:
    """An insertion below the least and a duplicate of it: no trace row read; retracting
    one of the two copies neither; retracting the last one reads the trace."""
    key = ("_k0",)
    cache = ExtremumCache(1)
    batches: list = []

    def step(rows: list[tuple]) -> Counter:
        new = native.key_sorted(_table(rows, 1, True), key, then=["_t0"])
        assert new is not None
        out = min_max_traced(1, False, pa.int64(), new.table, batches, key, sorted_new=new, cache=cache)
        assert out is not None
        kept = native.key_sorted(_table(rows, 1, False), key, then=["_t0"])
        batches.append(kept)
        return _got(out, 1)

    assert step([((1,), 5, 0, 1), ((1,), 7, 0, 1)]) == Counter({((1,), 5, 0): 1})
    assert step([((1,), 3, 2, 1)]) == Counter({((1,), 3, 2): 1, ((1,), 5, 2): -1})
    assert step([((1,), 3, 4, 1)]) == Counter()  # a second 3 from time 4
    assert step([((1,), 3, 6, -1)]) == Counter()  # one 3 left
    assert (cache.fast_keys, cache.fallback_keys, cache.trace_rows) == (4, 0, 0)
    assert step([((1,), 3, 8, -1)]) == Counter({((1,), 3, 8): -1, ((1,), 5, 8): 1})  # back to 5: the trace read
    assert (cache.fast_keys, cache.fallback_keys) == (4, 1)
    assert cache.trace_rows == 5
    assert step([((1,), 4, 9, 1)]) == Counter({((1,), 4, 9): 1, ((1,), 5, 9): -1})  # the steps made again
    assert cache.fast_keys == 5
