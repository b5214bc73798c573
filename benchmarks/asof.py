"""As-of joins: ``dd_asof_join`` against every as-of join formulation at hand (issue 5).

What is measured
    Orders ``(order_id, item, ts)`` meet the price of their item as of their
    timestamp, from a price-history table ``(item, price, ts)`` (unique
    ``(item, ts)``; a price holds from its ``ts`` until the item's next one).  An
    order matches the latest price change at or before its own ``ts`` (the
    non-strict as-of join everywhere; orders before their item's first price have
    no match and are dropped: inner join).  Two workloads:

    * A: 10^6 orders x 10^5 price changes over 1,000 items;
    * B: 10^6 orders x 10^6 price changes over 100 items.

    Formulations, all in the same run on the same data:

    * ours (the reference): ``orders.dd_asof_join(prices, on="item")`` as a user
      writes it, where ``orders = sd.collection(orders_table, time="ts")`` (with its
      default eager null check: one scan of the orders) and
      ``prices = sd.from_upserts(price_history, key="item", time="ts")`` - both
      conversions are inside the timing.  ``method="auto"`` reads the upsert log
      itself (``method="upserts"``);
    * ours without the eager null check (``sd.collection(..., check_nulls=False)``;
      a null time would still fail the join's job with ``NullValueError``);
    * ours, general kernel: ``method="kernel"`` (the price collection with its
      retractions, stabbing lookups);
    * ours, calculus form: ``method="calculus"`` (differentiate / dd_join / integrate);
    * dbl-tempo: ``TSDF.asofJoin`` (union of both sides + ``last(ignoreNulls)`` over
      a window per item); if tempo does not import, that formulation written
      directly in PySpark, labelled as such;
    * Spark's native ``ASOF JOIN ... MATCH_CONDITION (o.ts >= p.ts) ON ...`` SQL with
      ``spark.sql.join.asofJoin.enabled=true`` (planned as ``SortMergeAsOfJoin``);
    * DuckDB's ``ASOF JOIN`` in one process (threads = Spark's cores);
    * pandas ``merge_asof(by="item")`` in one process (the sort by ``ts`` it
      requires is inside the timing).

How
    Data: seeded numpy, written once to Parquet.  Spark reads it, repartitions over
    2 x cores partitions, caches and counts it before timing; DuckDB and pandas load
    the same files before timing.  Spark timings end with ``write.format("noop")``,
    DuckDB's with ``CREATE TEMP TABLE ... AS``, pandas' when ``merge_asof`` returns.
    Before timing, every formulation runs on a sample of the items (``item % m == 0``)
    and the outputs are compared by row count, diff sum and a checksum of
    ``(order_id, price)`` - this also warms up every Spark code path.  Every
    formulation runs under ``--time-limit``; one that hits it is cancelled and
    reported as "> limit".  Spark formulations keep the best of ``--repeat`` runs
    (default 3; Spark's native join, quadratic per key, runs once).  Ratios are
    formulation time / the reference's time.

    python benchmarks/asof.py --quick
    python benchmarks/asof.py --json benchmarks/results/asof.json
    python benchmarks/asof.py --configs B --time-limit 600

Issue 37 (``dd_merge_asof``, the relational as-of join of two plain tables; details in
``benchmarks/asof_merge.py``): workloads M (10^6 x 10^6, 100 keys), K (the same
without keys) and X (10^7 x 10^7 without keys, with the peak RSS):

    python benchmarks/asof.py --configs M,K --json benchmarks/results/asof_merge.json
    python benchmarks/asof.py --configs X --driver-memory 8g --time-limit 900
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asof_merge
import numpy as np
import pandas as pd
from common import (
    DataDir,
    Measurement,
    Report,
    base_parser,
    cores_of,
    duckdb_connect,
    duckdb_materialize,
    duckdb_table,
    finish,
    fmt_count,
    log,
    make_spark,
    measure,
    pick,
    run_spark_limited,
    spark_action,
    spark_cached,
    warm_spark,
    write_parquet,
)

NATIVE_FLAG = "spark.sql.join.asofJoin.enabled"
REF = "dd_asof_join (default)"
MOD = 1_000_000_007


@dataclass(frozen=True)
class Workload:
    name: str
    orders: int
    prices: int
    items: int


FULL = {"A": Workload("A", 10**6, 10**5, 1_000), "B": Workload("B", 10**6, 10**6, 100),
        "M": Workload("M", 10**6, 10**6, 100), "K": Workload("K", 10**6, 10**6, 0),
        "X": Workload("X", 10**7, 10**7, 0)}
QUICK = {"A": Workload("A", 20_000, 2_000, 100), "B": Workload("B", 20_000, 20_000, 10),
         "M": Workload("M", 20_000, 20_000, 10), "K": Workload("K", 20_000, 20_000, 0),
         "X": Workload("X", 200_000, 200_000, 0)}
MERGE = ("M", "K", "X")  # issue 37: dd_merge_asof (benchmarks/asof_merge.py)
SPAN = 10**9  # timestamps are drawn from [0, SPAN)


def generate(w: Workload, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    item = rng.integers(0, w.items, w.prices, dtype=np.int64)
    ts = rng.integers(0, SPAN, w.prices, dtype=np.int64)
    _, first = np.unique(item * SPAN + ts, return_index=True)  # unique (item, ts)
    first.sort()
    hist = {
        "item": item[first],
        "price": rng.integers(1, 10**6, len(first), dtype=np.int64),
        "ts": ts[first],
    }
    orders = {
        "order_id": np.arange(w.orders, dtype=np.int64),
        "item": rng.integers(0, w.items, w.orders, dtype=np.int64),
        "ts": rng.integers(0, SPAN, w.orders, dtype=np.int64),
    }
    return orders, hist


# ---------------------------------------------------------------------------------
# the Spark formulations: (orders table, price history table) -> natural output, and
# a projection of that output onto (order_id, price, diff) for the checksum


def ours(method: str, check_nulls: bool = True) -> Callable[[Any, Any], Any]:
    def build(orders: Any, hist: Any) -> Any:
        import spark_differential as sd

        o = sd.collection(orders, time="ts", check_nulls=check_nulls)
        p = sd.from_upserts(hist, key="item", time="ts")
        return o.dd_asof_join(p, on="item", method=method)

    return build


def tempo_asof(orders: Any, hist: Any) -> Any:
    from pyspark.sql import functions as F
    from tempo import TSDF

    left = TSDF(orders, ts_col="ts", partition_cols=["item"])
    right = TSDF(hist, ts_col="ts", partition_cols=["item"])
    out = left.asofJoin(right, right_prefix="p").df  # left join: price null before the first price
    return out.where(F.col("p_price").isNotNull()).withColumnRenamed("p_price", "price")


def union_last(orders: Any, hist: Any) -> Any:
    """tempo's formulation written out: union both sides, carry the last price forward per item."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    o = orders.select("item", "ts", "order_id", F.lit(None).cast("long").alias("price"), F.lit(1).alias("rec_ind"))
    p = hist.select("item", "ts", F.lit(None).cast("long").alias("order_id"), "price", F.lit(-1).alias("rec_ind"))
    w = Window.partitionBy("item").orderBy("ts", "rec_ind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    u = o.unionByName(p).select(
        "item", "ts", "order_id", "rec_ind", F.last("price", ignorenulls=True).over(w).alias("price")
    )
    return u.where((F.col("rec_ind") == 1) & F.col("price").isNotNull()).drop("rec_ind")


NATIVE_SQL = (
    "SELECT o.order_id, o.item, p.price, o.ts FROM {o} o ASOF JOIN {p} p "
    "MATCH_CONDITION (o.ts >= p.ts) ON o.item = p.item"
)


def spark_native(orders: Any, hist: Any) -> Any:
    spark = orders.sparkSession
    spark.conf.set(NATIVE_FLAG, "true")
    orders.createOrReplaceTempView("bench_orders")
    hist.createOrReplaceTempView("bench_price_history")
    return spark.sql(NATIVE_SQL.format(o="bench_orders", p="bench_price_history"))


def spark_checksum(df: Any) -> tuple[int, int, int]:
    from pyspark.sql import functions as F

    d = F.col("diff") if "diff" in df.columns else F.lit(1)
    r = df.agg(
        F.count(F.lit(1)),
        F.sum(d),
        F.sum(((F.col("order_id") * 1009 + F.col("price")) % MOD) * d),
    ).collect()[0]
    return int(r[0]), int(r[1] or 0), int(r[2] or 0)


# ---------------------------------------------------------------------------------
# the single-process peers

DUCK_SQL = "SELECT o.order_id, o.item, p.price, o.ts FROM {o} o ASOF JOIN {p} p ON o.item = p.item AND o.ts >= p.ts"


def duck_checksum(con: Any, sql: str) -> tuple[int, int, int]:
    r = con.execute(f"SELECT count(*), count(*), sum((order_id * 1009 + price) % {MOD}) FROM ({sql})").fetchone()
    return int(r[0]), int(r[1]), int(r[2] or 0)


def pandas_asof(orders: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    out = pd.merge_asof(
        orders.sort_values("ts", kind="stable"),
        hist.sort_values("ts", kind="stable"),
        on="ts",
        by="item",
        direction="backward",
        allow_exact_matches=True,
    )
    return out[out["price"].notna()]


def pandas_checksum(df: pd.DataFrame) -> tuple[int, int, int]:
    oid = df["order_id"].to_numpy(np.int64)
    price = df["price"].to_numpy().astype(np.int64)
    return len(df), len(df), int(((oid * 1009 + price) % MOD).sum())


# ---------------------------------------------------------------------------------


def run_workload(args: argparse.Namespace, spark: Any, report: Report, w: Workload, data: DataDir) -> None:
    cores = cores_of(args.master)
    limit = pick(args, "time_limit", 120.0, 900.0)
    log(f"workload {w.name}: {fmt_count(w.orders)} orders x {fmt_count(w.prices)} price changes over {w.items} items")
    orders_np, hist_np = generate(w, args.seed + ord(w.name))
    o_path, h_path = data.file(f"orders_{w.name}.parquet"), data.file(f"prices_{w.name}.parquet")
    write_parquet(orders_np, o_path)
    n_hist = write_parquet(hist_np, h_path)
    log(f"  {fmt_count(n_hist)} distinct (item, ts) price changes after dedup; loading inputs (not timed)")
    orders = spark_cached(spark, o_path, 2 * cores)
    hist = spark_cached(spark, h_path, 2 * cores)
    con = duckdb_connect(args)
    duckdb_table(con, "orders", o_path)
    duckdb_table(con, "price_history", h_path)
    orders_pd = pd.read_parquet(o_path)
    hist_pd = pd.read_parquet(h_path)

    try:
        import tempo  # noqa: F401

        tempo_fn, tempo_label = tempo_asof, "dbl-tempo TSDF.asofJoin"
    except Exception as e:  # pragma: no cover - depends on the bench venv
        tempo_fn, tempo_label = union_last, "tempo's union+last() window (written out)"
        report.note(f"dbl-tempo did not import ({type(e).__name__}: {e}); its formulation is written out instead")

    spark_forms: list[tuple[str, Callable[[Any, Any], Any]]] = [
        (REF, ours("auto")),
        ("dd_asof_join, check_nulls=False", ours("auto", check_nulls=False)),
        ("dd_asof_join(method='kernel')", ours("kernel")),
        ("dd_asof_join(method='calculus')", ours("calculus")),
        (tempo_label, tempo_fn),
        ("Spark ASOF JOIN (SQL, native)", spark_native),
    ]

    # 1. verification on a sample of the items (also warms up every Spark code path)
    m = max(1, min(20, w.items // 5))
    log(f"  verifying all formulations on the items with item % {m} == 0")
    so, sh = orders.where(f"item % {m} = 0"), hist.where(f"item % {m} = 0")
    sums: dict[str, Any] = {}
    for label, fn in spark_forms:
        try:
            sums[label] = run_spark_limited(spark, lambda fn=fn: spark_checksum(fn(so, sh)), limit)
        except Exception as e:
            sums[label] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    sample = f"(SELECT * FROM {{t}} WHERE item % {m} = 0)"
    sums["DuckDB ASOF JOIN"] = duck_checksum(
        con, DUCK_SQL.format(o=sample.format(t="orders"), p=sample.format(t="price_history"))
    )
    sums["pandas merge_asof"] = pandas_checksum(
        pandas_asof(orders_pd[orders_pd["item"] % m == 0], hist_pd[hist_pd["item"] % m == 0])
    )
    ref = sums[REF]
    for label, got in sums.items():
        if label != REF:
            report.check(
                f"{w.name}: {label} == dd_asof_join on the sample",
                got == ref,
                f"(rows, sum diff, checksum) {got} vs {ref}",
            )

    # 2. timings at full size
    results: dict[str, Measurement] = {}
    for label, fn in spark_forms:
        results[label] = measure(
            label,
            lambda fn=fn: run_spark_limited(spark, lambda: spark_action(fn(orders, hist)), limit),
            repeat=1 if fn is spark_native else pick(args, "repeat", 1, 3),
            warmup=pick(args, "warmup", 0, 0),
        )
    results["DuckDB ASOF JOIN"] = measure(
        "DuckDB ASOF JOIN",
        lambda: duckdb_materialize(con, DUCK_SQL.format(o="orders", p="price_history"), limit),
        repeat=3,
        warmup=1,
    )
    results["pandas merge_asof"] = measure(
        "pandas merge_asof", lambda: pandas_asof(orders_pd, hist_pd), repeat=3, warmup=1
    )
    base = results[REF]
    case = f"{w.name}: {fmt_count(w.orders)} x {fmt_count(n_hist)}, {w.items} items"
    for label, res in results.items():
        if label != base.label:
            report.add(case, base, res)
    con.close()
    orders.unpersist()
    hist.unpersist()


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument(
        "--configs", default="A,B", help="workloads to run: A (10^6 x 10^5, 1000 items), B (10^6 x 10^6, 100 items); "
        "dd_merge_asof (issue 37): M (10^6 x 10^6, 100 items), K (10^6 x 10^6, no keys), X (10^7 x 10^7, no keys)"
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply the numbers of orders and price changes")
    args = p.parse_args(argv)
    table = QUICK if args.quick else FULL
    names = [c.strip().upper() for c in args.configs.split(",") if c.strip()]
    loads = [
        Workload(n, int(table[n].orders * args.scale), int(table[n].prices * args.scale), table[n].items) for n in names
    ]
    config = {
        "workloads": [w.__dict__ for w in loads],
        "span": SPAN,
        "native_flag": NATIVE_FLAG,
        "native_sql": NATIVE_SQL,
        "duckdb_sql": DUCK_SQL,
    }
    report = Report("asof", args, config)
    data = DataDir(args, "asof")
    try:
        spark = make_spark(args)
        warm_spark(spark)
        for w in loads:
            if w.name in MERGE:
                asof_merge.run(args, spark, report, w.name, w.orders, w.items, data)
            else:
                run_workload(args, spark, report, w, data)
        report.note(f"Spark native as-of join: {NATIVE_FLAG}=true, " + NATIVE_SQL.format(o="orders", p="price_history"))
        report.note(f"ratio = formulation time / {REF} time; inputs cached before timing")
        return finish(report)
    finally:
        data.cleanup()


if __name__ == "__main__":
    sys.exit(main())
