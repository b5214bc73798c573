"""``sd.sql``'s as-of join with a condition on both sides, by DuckDB's nested-loop meaning.

On ``(data, time, diff)``: two plain tables (one snapshot each) in, one out, as in
:mod:`spark_differential.sql.asof`.  With a condition that refers to both sides
(``ON l.k = r.k AND l.ts >= r.ts AND l.price + r.bid > 300``) a left row's candidates are
the right rows that satisfy *every* condition of the join together with it, the
as-of comparison included, and it picks the best of them by the comparison (DuckDB plans
this as a nested-loop join).  No sorted merge can skip the pairs, so this is Spark's
join on all the conditions (equal keys first) and one window per left row: each
distinct left row (with its number of copies) keeps its best candidate; right rows no
left row picks are added for RIGHT and FULL joins (their copies less the one picked).
Quadratic per key at worst, as in DuckDB; without such a condition the kernel's sorted
merge runs instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_differential.core.collection import quoted

_N, _M, _HIT, _RN, _PICKED = "sdasof_n", "sdasof_m", "sdasof_hit", "sdasof_rn", "sdasof_picked"


def _copies(df: DataFrame, count: str, cols: Sequence[Column]) -> DataFrame:
    """``cols`` of each row, ``count`` times."""
    return df.select(*cols, F.explode(F.array_repeat(F.lit(1), F.col(count).cast("int"))).alias("sdasof_copy")) \
        .drop("sdasof_copy")


def nested_frame(left: DataFrame, right: DataFrame, la: str, ra: str, lnames: Sequence[str], rnames: Sequence[str],
                 r_view: dict[str, str], how: str, direction: str, condition: str, r_time: str,
                 ties: Sequence[str]) -> DataFrame:
    """The joined rows (left columns, then right columns named by ``r_view``; left only for
    semi/anti) of ``left AS la`` and ``right AS ra`` on ``condition`` (SQL over both
    aliases), each left row keeping the candidate with the greatest (backward) or least
    (forward) ``r_time``, ties broken by the right's columns ``ties``."""
    qa, qr = quoted(la), quoted(ra)
    lg = left.groupBy(*[F.col(quoted(n)) for n in lnames]).agg(F.count(F.lit(1)).alias(_N)).alias(la)
    rg = right.groupBy(*[F.col(quoted(n)) for n in rnames]).agg(F.count(F.lit(1)).alias(_M)) \
        .withColumn(_HIT, F.lit(True)).alias(ra)
    pairs = lg.join(rg, F.expr(condition), "left")
    lcols = [F.col(f"{qa}.{quoted(n)}") for n in lnames]
    rcols = [F.col(f"{qr}.{quoted(n)}") for n in rnames]
    back = direction == "backward"
    order = [F.expr(r_time), *[F.col(f"{qr}.{quoted(n)}") for n in ties]]
    order = [c.desc_nulls_last() if back else c.asc_nulls_first() for c in order]
    window = Window.partitionBy(*lcols, F.col(f"{qa}.{_N}")).orderBy(*order)
    best = pairs.withColumn(_RN, F.row_number().over(window)).where(F.col(_RN) == 1)
    hit = F.col(f"{qr}.{_HIT}").isNotNull()
    named_l = [c.alias(n) for c, n in zip(lcols, lnames)]
    named_r = [c.alias(r_view[n]) for c, n in zip(rcols, rnames)]
    if how in ("semi", "anti"):
        return _copies(best.where(hit if how == "semi" else ~hit), f"{qa}.{_N}", named_l)
    matched = _copies(best if how in ("left", "full") else best.where(hit), f"{qa}.{_N}", [*named_l, *named_r])
    if how in ("inner", "left"):
        return matched
    picked = best.where(hit).select(*[c.alias(f"sdp{j}") for j, c in enumerate(rcols)]).distinct() \
        .withColumn(_PICKED, F.lit(1))
    same = reduce(lambda x, y: x & y, [c.eqNullSafe(F.col(f"sdp{j}")) for j, c in enumerate(rcols)])
    rest = rg.join(picked, same, "left").withColumn(
        "sdasof_left", F.col(f"{qr}.{_M}") - F.coalesce(F.col(_PICKED), F.lit(0)))
    types = {f.name: f.dataType for f in left.schema.fields}
    nulls = [F.lit(None).cast(types[n]).alias(n) for n in lnames]
    unmatched = _copies(rest.where(F.col("sdasof_left") > 0), "sdasof_left", [*nulls, *named_r])
    return matched.unionByName(unmatched)
