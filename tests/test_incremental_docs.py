"""docs/incremental.md runs as written: each of its ``py`` blocks is executed, in order, in
one namespace, with small inputs in temporary places of the paths and tables it names
(the same code otherwise), and its output checked against the one-shot query."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Any

from pyspark.sql import functions as F

import spark_differential as sd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blocks() -> list[str]:
    text = open(os.path.join(ROOT, "docs", "incremental.md"), encoding="utf-8").read()
    return [m.group(1) for m in re.finditer(r"```py\n(.*?)```\n", text, flags=re.S)]


def consolidated(rows: list[Any], cols: list[str]) -> list[tuple]:
    acc: dict[tuple, int] = {}
    for r in rows:
        key = tuple(r[c] for c in cols)
        acc[key] = acc.get(key, 0) + r["diff"]
    return sorted((*k, v) for k, v in acc.items() if v)


def test_every_block_of_the_incremental_guide_runs_as_written(spark, tmp_path) -> None:
    found = blocks()
    assert len(found) == 3, "docs/incremental.md's blocks changed: say here what each needs"
    tmp = str(tmp_path)
    places = {
        "s3a://bucket/views/per_region": f"{tmp}/v1",
        "hdfs:///views/per_region": f"{tmp}/v2",
        '"/views/per_region"': f'"{tmp}/v3"',
        "/tables/customers": f"{tmp}/customers",
        "/landing/orders": f"{tmp}/landing",
        "/chk/per_region": f"{tmp}/chk",
        "/out/batch=": f"{tmp}/out/batch=",
        '.saveAsTable("per_region_history")': f'.parquet("{tmp}/per_region_history")',
    }
    run = []
    for code in found:
        for k, v in places.items():
            code = code.replace(k, v)
        run.append(code)
    scope: dict[str, Any] = {"spark": spark}

    # 1: the view's definition
    exec(compile(run[0], "docs/incremental.md#1", "exec"), scope)
    assert "per_region" in scope and scope["view"].frontier is None

    # 2: a daily pipeline; the view exists (the customers and no orders yet, complete before yesterday)
    day = dt.date.today() - dt.timedelta(days=1)
    customers = spark.createDataFrame([(c, f"r{c % 3}", day - dt.timedelta(days=3), 1) for c in range(6)],
                                      "customer_id long, region string, change_date date, diff long")
    orders_schema = "order_id long, customer_id long, change_date date, diff long"
    first = sd.incremental(f"{tmp}/v2", scope["per_region"])
    first.update(upto=day, orders=sd.collection(spark.createDataFrame([], orders_schema), time="change_date",
                                                diff="diff"),
                 customers=sd.collection(customers, time="change_date", diff="diff"))
    changes = spark.createDataFrame([(j, j % 6, day, 1) for j in range(10)] +
                                    [(99, 1, day - dt.timedelta(days=1), 1)],  # not yesterday's: not read
                                    orders_schema)
    changes.createOrReplaceTempView("orders_changes")
    exec(compile(run[1], "docs/incremental.md#2", "exec"), scope)
    history = spark.read.parquet(f"{tmp}/per_region_history").collect()
    want = scope["per_region"](sd.collection(changes.where(F.col("change_date") == day), time="change_date",
                                             diff="diff"),
                               sd.collection(customers, time="change_date", diff="diff")).collect()
    assert history and consolidated(history, ["region", "time"]) == consolidated(want, ["region", "time"])

    # 3: Structured Streaming into a view whose first update gave the customers
    spark.createDataFrame([(c, f"r{c % 3}") for c in range(6)], "cid long, region string") \
        .write.parquet(f"{tmp}/customers")
    os.makedirs(f"{tmp}/landing")
    rows = [{"oid": j, "cid": j % 6, "amount": 10 * j, "ts": 1 + j // 4, "diff": 1} for j in range(12)]
    for k in range(3):
        with open(f"{tmp}/landing/part-{k}.json", "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(r) for r in rows[4 * k: 4 * k + 4]))
    exec(compile(run[2], "docs/incremental.md#3", "exec"), scope)
    query = scope["query"]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    out = spark.read.parquet(f"{tmp}/out").collect()
    orders = spark.createDataFrame([(r["oid"], r["cid"], r["amount"], r["ts"], 1) for r in rows],
                                   "oid long, cid long, amount long, time long, diff long")
    cust = spark.read.parquet(f"{tmp}/customers").select("cid", "region", F.lit(0).cast("long").alias("time"),
                                                          F.lit(1).cast("long").alias("diff"))
    want = scope["per_region"](orders, cust).collect()
    assert out and consolidated(out, ["region", "time"]) == consolidated(want, ["region", "time"])

