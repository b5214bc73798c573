"""Consolidation kernel: advance times by a frontier, sum diffs per (data, time), drop zeros.

On ``(data, time, diff)``: the output accumulates, at every time ``g`` in the
frontier's future, to exactly what the input accumulates to (seed 004's
correctness claim); two updates whose times cannot be told apart by any such
``g`` land on the same time and cancel or merge (its optimality claim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spark_differential.core.lattice import Leaves, TimeType
from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck
from spark_differential.kernels.common import csv, names, times

pa = lazy("pyarrow")


@dataclass(frozen=True)
class ConsolidateParams:
    ndata: int
    ttype: TimeType
    frontier: tuple[Leaves, ...] | None = None
    prefix: str = "_a"


def consolidate_sql(table: str, ndata: int, ttype: TimeType, frontier: Sequence[Leaves] | None, prefix: str = "_a") -> str:
    t = times(ttype.width)
    adv = ttype.sql_advance(t, list(frontier)) if frontier else t
    select = [*names(prefix, ndata), *[f"{e} AS {n}" for e, n in zip(adv, t)]]
    return duck.render("consolidate", select=csv(select), X=table)


def consolidate(p: ConsolidateParams, X: pa.Table) -> pa.Table:
    """Kernel: ``X`` has ``_a*`` data, ``_t*`` leaves and ``_d``; returns the same columns."""
    return duck.query(consolidate_sql("$X", p.ndata, p.ttype, p.frontier, p.prefix), {"X": X})

