"""One key holding 10^6 updates: dd_count, dd_join and dd_distinct must cope.

The big collection (built with ``spark.range``, never collected) has a single key
``k = 0`` and distinct times: value ``j`` is inserted at ``2j`` and retracted at
``2j + 3``, so one or two rows are live at any time while the key's history has
10^6 updates (all in one kernel call).  Results are checked against independent
plain-Spark computations (a running sum over a window; the pairs of a join
meeting at the later of their times) by comparing exact aggregate signatures,
never against the slow oracle and never by collecting the million output rows.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

import spark_differential  # noqa: F401  (registers the methods)

N = 10**6  # updates in the big collection
HALF = N // 2


def _big(spark) -> DataFrame:
    j = F.col("id")
    one = F.lit(1).cast("long")
    ins = spark.range(HALF).select(F.lit(0).alias("k"), (j % 5).alias("v"), (2 * j).alias("time"), one.alias("diff"))
    ret = spark.range(HALF).select(F.lit(0).alias("k"), (j % 5).alias("v"), (2 * j + 3).alias("time"), (-one).alias("diff"))
    return ins.unionByName(ret)


def _signature(df: DataFrame, cols: list[str]) -> tuple:
    """Row count, diff total and two independent order-free hash sums over whole rows.

    Two multisets of rows with equal signatures are equal but for a hash collision;
    a duplicate ``(data, time)`` or a zero diff in one of them changes the hashes.
    """
    every = [F.col(c) for c in [*cols, "diff"]]
    return tuple(
        df.agg(
            F.count(F.lit(1)),
            F.sum("diff"),
            F.sum(F.xxhash64(*every).cast("decimal(38,0)")),
            F.sum(F.hash(*every).cast("decimal(38,0)")),
        ).first()
    )


def _same(got: DataFrame, expected: DataFrame) -> None:
    cols = [c for c in expected.columns if c != "diff"]
    assert got.columns == [*cols, "diff"]
    assert _signature(got, cols) == _signature(expected.select(*cols, F.col("diff").cast("long")), cols)


def test_one_hot_key(spark) -> None:
    big = _big(spark)
    last = 2 * (HALF - 1) + 3

    # dd_count: at each time the key's multiplicity moves from p to c (times are distinct,
    # so each time contributes a retraction of p and an insertion of c, nothing to merge)
    w = Window.partitionBy("k").orderBy("time").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    running = big.select("k", "time", F.sum("diff").over(w).alias("c"), (F.sum("diff").over(w) - F.col("diff")).alias("p"))
    minus = running.where(F.col("p") > 0).select("k", F.col("p").alias("count"), "time", F.lit(-1).alias("diff"))
    plus = running.where(F.col("c") > 0).select("k", F.col("c").alias("count"), "time", F.lit(1).alias("diff"))
    _same(big.dd_count("k"), minus.unionByName(plus))

    # dd_distinct of the key alone: one row with 10^6 updates, present from 0 to the last retraction
    got = big.select("k", "time", "diff").dd_distinct().collect()
    assert sorted((r["k"], r["time"], r["diff"]) for r in got) == [(0, 0, 1), (0, last, -1)]

    # dd_join against a small side: "early" from time 0, "late" from time T = HALF + 1.
    # Each pair meets at the later of its two times: with "early" every update keeps its
    # time; with "late" the updates at or before T all meet at T (and partly cancel).
    T = HALF + 1
    small = spark.createDataFrame([(0, "early", 0, 1), (0, "late", T, 1)], "k long, w string, time long, diff long")
    early = big.select("k", "v", F.lit("early").alias("w"), "time", "diff")
    late_after = big.where(F.col("time") > T).select("k", "v", F.lit("late").alias("w"), "time", "diff")
    late_at_t = (
        big.where(F.col("time") <= T)
        .groupBy("k", "v")
        .agg(F.sum("diff").alias("diff"))
        .where(F.col("diff") != 0)
        .select("k", "v", F.lit("late").alias("w"), F.lit(T).cast("long").alias("time"), "diff")
    )
    got_join = big.dd_join(small, on="k")
    assert got_join.columns == ["k", "v", "w", "time", "diff"]
    _same(got_join, early.unionByName(late_after).unionByName(late_at_t))
