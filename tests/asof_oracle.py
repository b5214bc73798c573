"""Brute-force reference of the relational as-of join (``dd_merge_asof``), by its definition.

No Spark, pandas or spark_differential here.  A *snapshot* of a table is a multiset of
rows (a ``Counter`` row -> multiplicity; rows with a multiplicity <= 0 are not in it).
Each right row present ``m`` times is ``m`` copies; the copies are listed in the order
(match value, then the right's other columns ascending, nulls first).  A left row with
match value ``x`` looks at the right copies with its key (equal keys: no nulls, unless
``nulls_equal``) and a non-null match value ``v``:

* backward: the *last* listed copy with ``v <= x`` (``v < x`` if not ``exact``);
* forward: the *first* listed copy with ``v >= x`` (``v > x``);
* nearest: the backward copy unless the forward one is strictly closer (or the only one);

with a tolerance, only copies with ``|x - v| <= tol`` count.  Every copy of a left row
picks the same right copy.  ``how``: inner (matched pairs), left (every left copy, None
for the right when unmatched), semi/anti (left copies with/without a match), right
(matched pairs and every right copy no left copy picked, None for the left), full (both).

:func:`ref_merge_asof` applies the snapshot function at every time of the lub closure
(oracle.py's Moebius inversion), giving the differential collection.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from oracle import Coll, Lattice, acc, consolidate, moebius


@dataclass(frozen=True)
class Spec:
    """Where the key, match and tie columns are in the left and right rows, and the options."""

    lkeys: tuple[int, ...]
    rkeys: tuple[int, ...]
    lon: int
    ron: int
    rtie: tuple[int, ...]  # the right's other columns, in their order
    direction: str = "backward"
    exact: bool = True
    tolerance: Any = None
    how: str = "left"
    nulls_equal: bool = False


def _order(v: Any) -> tuple[bool, Any]:
    return (v is not None, v if v is not None else 0)


def _same_key(a: tuple, b: tuple, nulls_equal: bool) -> bool:
    if not nulls_equal and (any(v is None for v in a) or any(v is None for v in b)):
        return False
    return a == b


def snapshot(spec: Spec, left: Counter, right: Counter,
             out: Callable[[tuple | None, tuple | None], tuple]) -> Counter:
    """The as-of join of two snapshots; ``out(left row or None, right row or None)`` builds an output row."""
    copies = []
    for row, m in right.items():
        copies += [row] * max(0, m)
    copies.sort(key=lambda r: (_order(r[spec.ron]), tuple(_order(r[i]) for i in spec.rtie)))
    picked = [False] * len(copies)
    result: Counter = Counter()
    for row, m in left.items():
        if m <= 0:
            continue
        x = row[spec.lon]
        key = tuple(row[i] for i in spec.lkeys)
        choice = None
        if x is not None:
            cands = [i for i, r in enumerate(copies) if r[spec.ron] is not None
                     and _same_key(key, tuple(r[i] for i in spec.rkeys), spec.nulls_equal)]

            near = [i for i in cands if spec.tolerance is None or abs(x - copies[i][spec.ron]) <= spec.tolerance]
            back = [i for i in near if (copies[i][spec.ron] <= x if spec.exact else copies[i][spec.ron] < x)]
            fwd = [i for i in near if (copies[i][spec.ron] >= x if spec.exact else copies[i][spec.ron] > x)]
            b = back[-1] if back else None
            f = fwd[0] if fwd else None
            if spec.direction == "backward":
                choice = b
            elif spec.direction == "forward":
                choice = f
            elif b is not None and (f is None or x - copies[b][spec.ron] <= copies[f][spec.ron] - x):
                choice = b
            else:
                choice = f
        if choice is not None:
            picked[choice] = True
        r = copies[choice] if choice is not None else None
        if spec.how in ("inner", "right") and r is not None:
            result[out(row, r)] += m
        elif spec.how in ("left", "full"):
            result[out(row, r)] += m
        elif spec.how == "semi" and r is not None:
            result[out(row, None)] += m
        elif spec.how == "anti" and r is None:
            result[out(row, None)] += m
    if spec.how in ("right", "full"):
        for i, r in enumerate(copies):
            if not picked[i]:
                result[out(None, r)] += 1
    return result


def ref_merge_asof(a: Coll, b: Coll, spec: Spec, lat: Lattice, cols: Sequence[str],
                   out: Callable[[tuple | None, tuple | None], tuple]) -> Coll:
    """The differential as-of join: at every time, the join of the snapshots (positive rows)."""
    times = [t for _, t, _ in a.updates] + [t for _, t, _ in b.updates]

    def snap(s: Any) -> Counter:
        return snapshot(spec, Counter({d: m for d, m in acc(a, s, lat).items() if m > 0}),
                        Counter({d: m for d, m in acc(b, s, lat).items() if m > 0}), out)

    return Coll(tuple(cols), consolidate(moebius(snap, times, lat)) if times else [])
