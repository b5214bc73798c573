"""Relational as-of joins (issue 37): ``dd_merge_asof`` against every as-of join at hand.

Run through ``benchmarks/asof.py --configs M,K`` (and ``X``); see that file's docstring.

What is measured
    Orders ``(order_id, item, ts)`` each get the price ``(item, price, ts)`` with the
    greatest ``ts`` at or before their own (the backward as-of join; inner: orders
    before their key's first price drop out).  Workloads (plain tables, no history):

    * M: 10^6 orders x 10^6 prices over 100 items (``by="item"``);
    * K: 10^6 x 10^6 without keys (one global timeline of prices);
    * X: 10^7 x 10^7 without keys: must complete with ``--driver-memory 8g``; the peak
      RSS of the whole process tree (driver JVM, which is the executor in local mode,
      Python driver, Python workers) is reported.

    Formulations, same run, same data (M and K: all; X: ours, DuckDB, tempo and Spark's
    two as-of joins, each under ``--time-limit``, a failure or timeout reported as such):

    * ours: ``orders.dd_merge_asof(prices, on="ts", by="item", how="inner")`` (K, X: no
      ``by``, and both tables without ``item``, as tempo's form gets them: the timeline is
      cut into ranges of ``ts``, one task each);
    * ours through ``sd.sql`` (DuckDB's text: ``ASOF JOIN ... ON o.item = p.item AND o.ts >= p.ts``);
    * dbl-tempo ``TSDF.asofJoin`` (left join, rows without a price dropped);
    * Spark's native ``ASOF JOIN ... MATCH_CONDITION`` (``spark.sql.join.asofJoin.enabled``);
    * Spark's ``Dataset.joinAsOf`` (the API pandas-on-Spark's ``merge_asof`` calls);
    * DuckDB's ``ASOF JOIN`` in one process (threads = Spark's cores);
    * pandas ``merge_asof`` (M and K; its sort by ``ts`` inside the timing).

    Timing and checks as in ``asof.py``: cached Spark inputs, ``noop`` sink, outputs
    compared on a sample (``item % m == 0`` for M; the first ``ts`` tenth for K) by
    (rows, checksum of ``(order_id, price)``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from common import (
    DataDir,
    Measurement,
    Report,
    cores_of,
    duckdb_connect,
    duckdb_materialize,
    duckdb_table,
    fmt_count,
    log,
    measure,
    pick,
    run_spark_limited,
    spark_action,
    spark_cached,
    write_parquet,
)

NATIVE_FLAG = "spark.sql.join.asofJoin.enabled"
REF = "dd_merge_asof"
MOD = 1_000_000_007
SPAN = 10**9


def generate(n_orders: int, n_prices: int, items: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    item = rng.integers(0, max(1, items), n_prices, dtype=np.int64)
    ts = rng.integers(0, SPAN, n_prices, dtype=np.int64)
    _, first = np.unique(item * SPAN + ts, return_index=True)  # unique (item, ts): no ties to pick among
    first.sort()
    prices = {"item": item[first], "price": rng.integers(1, 10**6, len(first), dtype=np.int64), "ts": ts[first]}
    orders = {"order_id": np.arange(n_orders, dtype=np.int64),
              "item": rng.integers(0, max(1, items), n_orders, dtype=np.int64),
              "ts": rng.integers(0, SPAN, n_orders, dtype=np.int64)}
    return orders, prices


def ours(keyed: bool) -> Callable[[Any, Any], Any]:
    def build(o: Any, p: Any) -> Any:
        import spark_differential  # noqa: F401 - registers dd_merge_asof

        if not keyed:  # the columns tempo's form is given (it drops `item` too)
            o, p = o.drop("item"), p.drop("item")
        q = o.dd_merge_asof(p, on="ts", by="item" if keyed else None, how="inner")
        return q.select("order_id", "price")

    return build


def ours_sql(keyed: bool) -> Callable[[Any, Any], Any]:
    def build(o: Any, p: Any) -> Any:
        import spark_differential as sd

        on = "o.item = p.item AND o.ts >= p.ts" if keyed else "o.ts >= p.ts"
        return sd.sql(f"SELECT o.order_id, p.price FROM o ASOF JOIN p ON {on}", o=o, p=p)

    return build


def tempo(keyed: bool) -> Callable[[Any, Any], Any]:
    def build(o: Any, p: Any) -> Any:
        from pyspark.sql import functions as F
        from tempo import TSDF

        parts = ["item"] if keyed else []
        left = TSDF(o.drop("item") if not keyed else o, ts_col="ts", partition_cols=parts)
        right = TSDF(p.drop("item") if not keyed else p, ts_col="ts", partition_cols=parts)
        out = left.asofJoin(right, right_prefix="p").df
        return out.where(F.col("p_price").isNotNull()).select("order_id", F.col("p_price").alias("price"))

    return build


def native(keyed: bool) -> Callable[[Any, Any], Any]:
    def build(o: Any, p: Any) -> Any:
        spark = o.sparkSession
        spark.conf.set(NATIVE_FLAG, "true")
        on = " ON o.item = p.item" if keyed else ""
        return spark.sql(f"SELECT o.order_id, p.price FROM {{o}} o ASOF JOIN {{p}} p MATCH_CONDITION (o.ts >= p.ts){on}",
                         o=o, p=p)

    return build


def join_as_of(keyed: bool) -> Callable[[Any, Any], Any]:
    """Spark's ``Dataset.joinAsOf`` (Scala API, called as pandas-on-Spark's ``merge_asof`` does)."""

    def build(o: Any, p: Any) -> Any:
        from pyspark.sql import DataFrame

        spark = o.sparkSession
        right = p.withColumnRenamed("ts", "p_ts")
        using = spark._jvm.PythonUtils.toSeq(["item"] if keyed else [])
        if not keyed:
            right = right.withColumnRenamed("item", "p_item")
        jdf = o._jdf.joinAsOf(right._jdf, o["ts"]._jc, right["p_ts"]._jc, using, "inner", None, True, "backward")
        return DataFrame(jdf, spark).select("order_id", "price")

    return build


def spark_checksum(df: Any) -> tuple[int, int]:
    from pyspark.sql import functions as F

    r = df.agg(F.count(F.lit(1)), F.sum((F.col("order_id") * 1009 + F.col("price")) % MOD)).collect()[0]
    return int(r[0]), int(r[1] or 0)


def duck_sql(keyed: bool, o: str = "orders", p: str = "prices") -> str:
    on = "o.item = p.item AND o.ts >= p.ts" if keyed else "o.ts >= p.ts"
    return f"SELECT o.order_id, p.price FROM {o} o ASOF JOIN {p} p ON {on}"


def pandas_asof(keyed: bool, o: pd.DataFrame, p: pd.DataFrame) -> pd.DataFrame:
    out = pd.merge_asof(o.sort_values("ts", kind="stable"), (p if keyed else p.drop(columns="item")).sort_values("ts"),
                        on="ts", by="item" if keyed else None, suffixes=("", "_p"))
    return out[out["price"].notna()]


def run(args: argparse.Namespace, spark: Any, report: Report, name: str, n: int, items: int, data: DataDir) -> None:
    keyed = items > 0
    big = n >= 5 * 10**6
    limit = pick(args, "time_limit", 120.0, 900.0)
    slow_limit = min(limit, 300.0) if not big else limit
    log(f"workload {name}: {fmt_count(n)} orders x {fmt_count(n)} prices, {items or 'no'} keys")
    o_np, p_np = generate(n, n, items, args.seed + ord(name))
    o_path, p_path = data.file(f"m_orders_{name}.parquet"), data.file(f"m_prices_{name}.parquet")
    write_parquet(o_np, o_path)
    write_parquet(p_np, p_path)
    parts = 2 * cores_of(args.master)
    orders, prices = spark_cached(spark, o_path, parts), spark_cached(spark, p_path, parts)
    con = duckdb_connect(args)
    duckdb_table(con, "orders", o_path)
    duckdb_table(con, "prices", p_path)
    forms: list[tuple[str, Callable[[Any, Any], Any], float]] = [
        (REF, ours(keyed), limit), ("sd.sql ASOF JOIN", ours_sql(keyed), limit),
        ("dbl-tempo TSDF.asofJoin", tempo(keyed), slow_limit),
        ("Spark ASOF JOIN (SQL, native)", native(keyed), slow_limit),
        ("Spark Dataset.joinAsOf", join_as_of(keyed), slow_limit),
    ]
    if big:
        forms = [f for f in forms if f[0] != "sd.sql ASOF JOIN"]
    # 1. the same rows on a sample (also warms up every Spark path)
    if keyed:
        where, duck_where = "item % 20 = 0", "item % 20 = 0"
    else:
        cut = SPAN // (50 if big else 10)
        where = duck_where = f"ts < {cut}"
    so, sp = orders.where(where), prices.where(where)
    sums: dict[str, Any] = {}
    for label, fn, lim in forms:
        try:  # the slow peers' sample runs are capped: their full-size runs say how slow they are
            sums[label] = run_spark_limited(spark, lambda fn=fn: spark_checksum(fn(so, sp)), min(lim, 120.0))
        except Exception as e:
            sums[label] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    sample = duck_sql(keyed, f"(SELECT * FROM orders WHERE {duck_where})", f"(SELECT * FROM prices WHERE {duck_where})")
    r = con.execute(f"SELECT count(*), sum((order_id * 1009 + price) % {MOD}) FROM ({sample})").fetchone()
    sums["DuckDB ASOF JOIN"] = (int(r[0]), int(r[1] or 0))
    for label, got in sums.items():
        if label != REF:
            report.check(f"{name}: {label} == {REF} on the sample", got == sums[REF], f"(rows, checksum) {got} vs {sums[REF]}")
    # 2. full size
    results: dict[str, Measurement] = {}
    for label, fn, lim in forms:
        slow = label not in (REF, "sd.sql ASOF JOIN", "dbl-tempo TSDF.asofJoin")
        results[label] = measure(label, lambda fn=fn, lim=lim: run_spark_limited(spark, lambda: spark_action(fn(orders, prices)), lim),
                                 repeat=1 if slow or big else pick(args, "repeat", 1, 3), warmup=0, rss=big)
    results["DuckDB ASOF JOIN"] = measure("DuckDB ASOF JOIN", lambda: duckdb_materialize(con, duck_sql(keyed), limit),
                                          repeat=1 if big else 3, warmup=0 if big else 1)
    if not big:
        o_pd, p_pd = pd.read_parquet(o_path), pd.read_parquet(p_path)
        results["pandas merge_asof"] = measure("pandas merge_asof", lambda: pandas_asof(keyed, o_pd, p_pd), repeat=3, warmup=1)
    case = f"{name}: {fmt_count(n)} x {fmt_count(n)}, {items or 'no'} keys"
    for label, res in results.items():
        if label != REF:
            report.add(case, results[REF], res)
    if big and results[REF].peak_rss:
        report.note(f"{name}: {REF} peak RSS of the process tree {results[REF].peak_rss / 2**30:.2f} GiB "
                    f"(driver memory {args.driver_memory})")
    con.close()
    orders.unpersist()
    prices.unpersist()
