"""Moving updates into the future of a frontier, keeping their accumulations there.

On ``(data, time, diff)``: an incremental view is complete at every time not in the
future of its frontier ``F`` and answers only for times in that future.  Two
collections supported on an upward-closed set with equal accumulations on it are equal,
so for any collection there is exactly one collection supported on the future of ``F``
that accumulates there as it does: :func:`lift` builds it on a DataFrame,
:func:`lift_updates` on Python updates, both from :func:`upset_coefficients` (the
inclusion-exclusion of the union of the futures of ``F``'s elements).  The rerun
strategy (:mod:`spark_differential.incremental.rerun`) uses it to take the part of a
re-run query's output in the future of ``F``; ``late="advance"`` uses it to move late
updates into that future.  :func:`in_future` is the Column test "is this time in the
future of ``F``".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, time_leaf_names
from spark_differential.core.lattice import Leaves, TimeType, Total


def upset_coefficients(ttype: TimeType, frontier: Sequence[Leaves]) -> list[tuple[Leaves, int]]:
    """Inclusion-exclusion of the union of the futures of ``frontier``'s elements.

    Returns ``[(J, c)]`` such that for every time ``t`` and ``g``:
    ``[g >= some join(t, f), f in frontier] == sum_J c * [g >= join(t, J)]``
    (``J`` ranges over joins of non-empty subsets of ``frontier``; equal joins are
    merged and zero coefficients dropped).

    >>> from spark_differential.core.lattice import Product, Total
    >>> upset_coefficients(Product((("a", Total()), ("b", Total()))), [(0, 1), (1, 0)])
    [((0, 1), 1), ((1, 0), 1), ((1, 1), -1)]
    """
    coeff: dict[Leaves, int] = {}
    for f in frontier:
        f = tuple(int(x) for x in f)
        new = dict(coeff)
        new[f] = new.get(f, 0) + 1
        for j, c in coeff.items():
            k = ttype.join(j, f)
            new[k] = new.get(k, 0) - c
        coeff = {k: v for k, v in new.items() if v}
    return sorted(coeff.items())


def lift_updates(
    ttype: TimeType, updates: Sequence[tuple[Any, Leaves, int]], frontier: Sequence[Leaves]
) -> list[tuple[Any, Leaves, int]]:
    """:func:`lift` on plain Python updates ``(data, leaves, diff)`` (consolidated, sorted).

    >>> lift_updates(Total(), [("a", (1,), 1), ("a", (5,), -1), ("b", (7,), 2)], [(3,)])
    [('a', (3,), 1), ('a', (5,), -1), ('b', (7,), 2)]
    """
    coeffs = upset_coefficients(ttype, frontier)
    out: dict[tuple[Any, Leaves], int] = {}
    for d, t, r in updates:
        t = tuple(int(x) for x in t)
        if any(ttype.leq(f, t) for f in frontier):
            moved = [(t, r)]
        else:
            moved = [(ttype.join(t, j), r * c) for j, c in coeffs]
        for tt, rr in moved:
            out[(d, tt)] = out.get((d, tt), 0) + rr
    return sorted((d, t, r) for (d, t), r in out.items() if r)


def _encoded(df: DataFrame, data: Sequence[str], ttype: TimeType) -> tuple[DataFrame, list[str]]:
    leaves = time_leaf_names(ttype.width)
    enc = df.select(*data, *[c.alias(n) for c, n in zip(ttype.encode_column(F.col(TIME)), leaves)], DIFF)
    return enc, leaves


def _in_future(ttype: TimeType, leaves: Sequence[str], frontier: Sequence[Leaves]) -> Column:
    """True where the time (as leaf columns) is ``>=`` some element of ``frontier``."""
    parts = [ttype.sql_leq([str(int(x)) for x in f], leaves) for f in frontier]
    return F.expr(" OR ".join(parts)) if parts else F.lit(False)


def in_future(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> Column:
    """A Column of ``df``: its ``time`` is in the future of ``frontier`` (``>=`` some element).

    >>> import spark_differential as sd
    >>> from spark_differential.core.lattice import Total
    >>> c = sd.session().createDataFrame([("a", 1, 1), ("b", 5, 1)], "x string, time long, diff long")
    >>> [r.x for r in c.where(in_future(c, Total(), [(3,)])).collect()]
    ['b']
    """
    leaves = ttype.encode_column(F.col(TIME))
    parts = []
    for f in frontier:
        conds = _leaf_leq_columns(ttype, [F.lit(int(x)) for x in f], leaves)
        parts.append(conds)
    if not parts:
        return F.lit(False)
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def _leaf_leq_columns(ttype: TimeType, a: Sequence[Column], b: Sequence[Column]) -> Column:
    """``a <= b`` on leaf Columns, for the user-visible time types (total and products of them)."""
    if isinstance(ttype, Total):
        return a[0] <= b[0]
    out: Column | None = None
    for x, y in zip(a, b):  # products of total types: leaf-wise order
        c = x <= y
        out = c if out is None else out & c
    return out if out is not None else F.lit(True)


def lift(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:
    """The collection supported on the future of ``frontier`` that accumulates there as ``df`` does.

    Rows already in the future of ``frontier`` stay; a row at another time ``t`` is
    replaced by rows at ``join(t, J)`` with diffs multiplied by ``c`` for the
    inclusion-exclusion coefficients ``(J, c)`` of :func:`upset_coefficients` (for a
    total order or a one-element frontier: one row at ``join(t, f)``).  The result is
    consolidated.  Two collections supported on an upward-closed set with equal
    accumulations on it are equal, so this is the unique such collection.

    >>> import spark_differential as sd
    >>> from spark_differential.core.lattice import Total
    >>> c = sd.session().createDataFrame([("a", 1, 1), ("a", 5, -1)], "x string, time long, diff long")
    >>> sorted(lift(c, Total(), [(3,)]).collect())
    [Row(x='a', time=3, diff=1), Row(x='a', time=5, diff=-1)]
    """
    data = [c for c in df.columns if c not in (TIME, DIFF)]
    enc, leaves = _encoded(df, data, ttype)
    inside = _in_future(ttype, leaves, frontier)
    both = enc.where(inside).unionByName(_moved(enc.where(~inside), data, leaves, ttype, frontier))
    summed = both.groupBy(*data, *leaves).agg(F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0)
    return summed.select(*data, ttype.decode_columns([F.col(n) for n in leaves]).alias(TIME), DIFF)


def _moved(enc: DataFrame, data: Sequence[str], leaves: Sequence[str], ttype: TimeType,
           frontier: Sequence[Leaves]) -> DataFrame:
    """Encoded rows (none in the future of ``frontier``) replaced by the rows that accumulate as
    they do in that future (:func:`lift`'s inclusion-exclusion), not consolidated."""
    choices = [
        F.struct(
            *[F.expr(e).alias(n) for e, n in zip(ttype.sql_join(leaves, [str(int(x)) for x in j]), leaves)],
            F.lit(c).cast("long").alias("_sd_c"),
        )
        for j, c in upset_coefficients(ttype, frontier)
    ]
    return (
        enc.select(*data, F.explode(F.array(*choices)).alias("_sd_j"), DIFF)
        .select(*data, *[F.col(f"_sd_j.{n}").alias(n) for n in leaves], (F.col(DIFF) * F.col("_sd_j._sd_c")).alias(DIFF))
    )


def complete_part(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:
    """``df`` at the times not in the future of ``frontier`` (the complete ones) and **empty** at
    every time in that future: its rows at complete times, and the negation of their
    :func:`lift` (not consolidated: no shuffle).  It accumulates as ``df`` does at every complete
    time (those rows are the same, and every lower time of a complete time is complete) and to
    nothing at every other, so a computation over it is exact at complete times and, at the
    others, sees empty collections, never the partial accumulation of updates delivered so far
    (over a partial order the lub of complete times need not be complete, and the updates
    there need not have arrived: an edge retracted at ``(1, 0)`` and ``(0, 1)`` and inserted again
    at ``(1, 1)`` has multiplicity -1 at ``(1, 1)`` until that insertion comes, over which a loop
    need not reach a fixed point).

    >>> import spark_differential as sd
    >>> from spark_differential.core.lattice import Product, Total
    >>> p = Product((("a", Total()), ("b", Total())))
    >>> c = sd.session().createDataFrame([("e", (1, 0), -1), ("e", (0, 1), -1), ("e", (1, 1), 1)],
    ...                                  "x string, time struct<a: long, b: long>, diff long")
    >>> sorted((r.time.a, r.time.b, r.diff) for r in complete_part(c, p, [(1, 1)]).collect())  # 0 at (1, 1)
    [(0, 1, -1), (1, 0, -1), (1, 1, 1), (1, 1, 1)]
    """
    data = [c for c in df.columns if c not in (TIME, DIFF)]
    enc, leaves = _encoded(df, data, ttype)
    done = enc.where(~_in_future(ttype, leaves, frontier))
    back = _moved(done, data, leaves, ttype, frontier).withColumn(DIFF, -F.col(DIFF))
    both = done.unionByName(back)
    return both.select(*data, ttype.decode_columns([F.col(n) for n in leaves]).alias(TIME), DIFF)


__all__ = ["complete_part", "in_future", "lift", "lift_updates", "upset_coefficients"]
