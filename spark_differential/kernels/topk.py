"""``dd_top_k``'s kernel: per key, the ``k`` rows with the largest value, over one bucket of keys.

On ``(data, time, diff)``: for every key and time ``s``, the output accumulates to the
``k`` copies ranked first among the key's rows with positive accumulated multiplicity at
``s`` (a row present ``m`` times is ``m`` copies), ranked by the value column ``_a0``
descending (nulls last), ties broken by the other data columns ascending, so the answer
is one multiset whatever the order rows arrive in.  For a totally ordered time each key's
history is swept once in time order (the top ``k`` can change only at the key's own
update times); partially ordered times go through :func:`.generic.per_key` (the lub
closure).  Given a trace (rows with ``_new`` false) and new updates, the kernel returns
``F(trace + new) - F(trace)`` for the keys with new updates only, as every stateful
kernel does, so it runs unchanged in every engine.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.kernels import generic
from spark_differential.kernels.common import StateShape, keys, names, times

pa = lazy("pyarrow")


@dataclass(frozen=True)
class TopKParams:
    """``nkeys`` key columns, ``ndata`` data columns (the value ``_a0`` first), ``k`` rows kept."""

    nkeys: int
    ndata: int
    k: int
    ttype: TimeType

    def shape(self) -> StateShape:
        """Keyed by the ``by`` columns (see :class:`~.common.StateShape`)."""
        return StateShape(tuple(keys(self.nkeys)))

    def chunked(self) -> tuple[TopKParams, str]:
        """The parameters with one more key column (a time chunk), and its name."""
        return dataclasses.replace(self, nkeys=self.nkeys + 1), keys(self.nkeys + 1)[-1]


def _order(value: Any) -> tuple[bool, Any]:
    """A sort key putting nulls last in a descending sort and first in an ascending one."""
    return (value is not None, value if value is not None else 0)


def top(acc: Counter, k: int) -> Counter:
    """The ``k`` copies ranked first among the rows of ``acc`` with positive multiplicity.

    >>> sorted(top(Counter({(5, "a"): 2, (7, "b"): 1, (5, "c"): 1, (None, "d"): 4, (9, "e"): -1}), 3).items())
    [((5, 'a'), 2), ((7, 'b'), 1)]
    """
    rows = [(d, m) for d, m in acc.items() if m > 0]
    rows.sort(key=lambda dm: tuple(_order(v) for v in dm[0][1:]))  # ties: the other columns ascending
    rows.sort(key=lambda dm: _order(dm[0][0]), reverse=True)  # stable: the value descending, nulls last
    out: Counter = Counter()
    left = k
    for d, m in rows:
        if left <= 0:
            break
        take = min(m, left)
        out[d] += take
        left -= take
    return out


def _sweep(ups: Sequence[tuple[Hashable, int, int]], k: int) -> Counter:
    """The output differences ``(data, time) -> diff`` of one key's updates ``(data, time, diff)``
    over a totally ordered time: the top ``k`` evaluated at each of the key's times in order."""
    acc: Counter = Counter()
    before: Counter = Counter()
    out: Counter = Counter()
    ordered = sorted(ups, key=lambda u: u[1])
    i = 0
    while i < len(ordered):
        t = ordered[i][1]
        while i < len(ordered) and ordered[i][1] == t:
            acc[ordered[i][0]] += ordered[i][2]
            i += 1
        now = top(acc, k)
        for d in set(now) | set(before):
            r = now[d] - before[d]
            if r:
                out[(d, t)] += r
        before = now
    return out


def top_k(p: TopKParams, X: pa.Table) -> pa.Table:
    """Kernel for one bucket: ``X`` has ``_k*, _a*, _t*, _d, _new``; returns ``_k*, _a*, _t*, _d``."""
    k_cols, a_cols, t_cols = keys(p.nkeys), names("_a", p.ndata), times(p.ttype.width)
    rows = generic.keyed_rows(X, k_cols, a_cols, t_cols)
    if p.ttype.is_total():
        result = _total(rows, p.k)
    else:
        result = generic.per_key(p.ttype, rows, lambda key, acc, s: top(acc, p.k))
    return generic.keyed_table(result, [X.schema.field(c) for c in k_cols], [X.schema.field(c) for c in a_cols], t_cols)


def _total(rows: Sequence[tuple[Hashable, Hashable, Leaves, int, bool]], k: int) -> list[tuple[Any, Any, Leaves, int]]:
    """``F(all) - F(old)`` per key with a new update, by one sweep of each (total order)."""
    by_key: dict[Hashable, list[tuple[Hashable, int, int, bool]]] = defaultdict(list)
    for key, d, t, r, new in rows:
        by_key[key].append((d, t[0], r, new))
    out: list[tuple[Any, Any, Leaves, int]] = []
    for key, ups in by_key.items():
        if not any(new for *_, new in ups):
            continue
        total = _sweep([(d, t, r) for d, t, r, _ in ups], k)
        total.subtract(_sweep([(d, t, r) for d, t, r, new in ups if not new], k))
        out.extend((key, d, (t,), r) for (d, t), r in total.items() if r != 0)
    return out
