"""Reference-strength algorithms for partially ordered times.

On ``(data, time, diff)``: a per-key operator ``F`` must produce outputs whose
accumulation at every time ``s`` equals ``F(acc(input, s))``.  The input of a key
can change only at joins of subsets of its update times (the *lub closure*, seed
000 "Interesting times"), so it suffices to evaluate ``F`` at every closure time,
in an order compatible with ``<=``, and emit at each the difference between the
required output and the output already accumulated below it.

This is quadratic in the closure size per key and runs in Python; it is used for
product-ordered and AltNeu-over-product times, where histories are expected to be
modest.  Totally ordered times use the scan-once SQL kernels instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from spark_differential.core.lattice import Leaves, TimeType, lub_closure, topological
from spark_differential.core.lazy import lazy
from spark_differential.kernels.common import NEW

np = lazy("numpy")
pa = lazy("pyarrow")

Update = tuple[Hashable, Leaves, int]  # (data, time leaves, diff)
Snapshot = Callable[[Counter, Leaves], Counter]


def moebius(ttype: TimeType, updates: Sequence[Update], snapshot: Snapshot) -> list[Update]:
    """Differences whose accumulation equals ``snapshot(acc(updates, s), s)`` at every time ``s``."""
    if not updates:
        return []
    datas = list({d for d, _, _ in updates})
    index = {d: i for i, d in enumerate(datas)}
    codes = np.fromiter((index[d] for d, _, _ in updates), dtype=np.int64, count=len(updates))
    diffs = np.fromiter((r for _, _, r in updates), dtype=np.int64, count=len(updates))
    tmat = np.array([t for _, t, _ in updates], dtype=np.int64).reshape(len(updates), ttype.width)
    closure = topological(ttype, lub_closure(ttype, {t for _, t, _ in updates}))
    cmat = np.array(closure, dtype=np.int64).reshape(len(closure), ttype.width)
    le = ttype.np_leq(tmat[None, :, :], cmat[:, None, :])  # (closure, updates)
    out: list[tuple[Leaves, Counter]] = []
    for j, s in enumerate(closure):
        acc = np.zeros(len(datas), dtype=np.int64)
        np.add.at(acc, codes[le[j]], diffs[le[j]])
        snap = snapshot(Counter({datas[i]: int(acc[i]) for i in np.nonzero(acc)[0]}), s)
        below: Counter = Counter()
        for s2, d2 in out:
            if s2 != s and ttype.leq(s2, s):
                below.update(d2)
        delta = Counter(snap)
        delta.subtract(below)
        delta = Counter({k: v for k, v in delta.items() if v != 0})
        if delta:
            out.append((s, delta))
    return [(d, s, r) for s, delta in out for d, r in delta.items()]


def positive(acc: Counter) -> list[tuple[Any, int]]:
    """The rows a reduction sees: those with positive accumulated multiplicity."""
    return [(d, m) for d, m in acc.items() if m > 0]


def per_key(
    ttype: TimeType,
    rows: Iterable[tuple[Hashable, Hashable, Leaves, int, bool]],
    evaluate: Callable[[Hashable, Counter, Leaves], Counter],
) -> list[tuple[Hashable, Hashable, Leaves, int]]:
    """Apply a per-key operator to ``(key, data, time, diff, new)`` rows.

    Returns ``(key, out, time, diff)`` differences ``F(all) − F(old)`` for every key
    with at least one new update (outside an iteration every update is new).
    """
    by_key: dict[Hashable, list[tuple[Hashable, Leaves, int, bool]]] = defaultdict(list)
    for k, d, t, r, new in rows:
        by_key[k].append((d, t, r, new))
    result: list[tuple[Hashable, Hashable, Leaves, int]] = []
    for k, ups in by_key.items():
        if not any(new for *_, new in ups):
            continue
        snap: Snapshot = lambda acc, s, k=k: evaluate(k, acc, s)  # noqa: E731
        total: Counter = Counter()
        for d, t, r in moebius(ttype, [(d, t, r) for d, t, r, _ in ups], snap):
            total[(d, t)] += r
        old = [(d, t, r) for d, t, r, new in ups if not new]
        for d, t, r in moebius(ttype, old, snap):
            total[(d, t)] -= r
        result.extend((k, d, t, r) for (d, t), r in total.items() if r != 0)
    return result


def keyed_rows(X: pa.Table, key_cols: Sequence[str], data_cols: Sequence[str],
               time_cols: Sequence[str]) -> list[tuple[Hashable, Hashable, Leaves, int, bool]]:
    """A kernel input (``_d`` and ``_new`` besides ``key_cols``, ``data_cols``, ``time_cols``) as
    the ``(key, data, time, diff, new)`` rows :func:`per_key` reads."""
    cols = {c: X.column(c).to_pylist() for c in [*key_cols, *data_cols, *time_cols, "_d", NEW]}
    return [(tuple(cols[c][i] for c in key_cols), tuple(cols[c][i] for c in data_cols),
             tuple(int(cols[c][i]) for c in time_cols), int(cols["_d"][i]), bool(cols[NEW][i]))
            for i in range(X.num_rows)]


def keyed_table(result: Iterable[tuple[Hashable, Hashable, Leaves, int]], key_fields: Sequence[pa.Field],
                data_fields: Sequence[pa.Field], time_cols: Sequence[str]) -> pa.Table:
    """:func:`per_key`'s ``(key, data, time, diff)`` differences as a kernel's output table:
    the key columns, the data columns, the time leaves, ``_d``."""
    fields = [*key_fields, *data_fields, *[pa.field(c, pa.int64()) for c in time_cols], pa.field("_d", pa.int64())]
    data: dict[str, list[Any]] = {f.name: [] for f in fields}
    k_names, d_names = [f.name for f in key_fields], [f.name for f in data_fields]
    for key, d, t, r in result:
        for c, v in zip(k_names, key):
            data[c].append(v)
        for c, v in zip(d_names, d):
            data[c].append(v)
        for c, v in zip(time_cols, t):
            data[c].append(v)
        data["_d"].append(r)
    schema = pa.schema(fields)
    return pa.Table.from_arrays([pa.array(data[f.name], type=f.type) for f in schema], schema=schema)
