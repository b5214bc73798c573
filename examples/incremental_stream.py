"""A join + count view kept current under Structured Streaming (``sd.incremental``).

Orders arrive as change-log files (JSON lines ``oid, cid, amount, ts, diff``: an
insertion has ``diff = 1``, a deletion ``diff = -1``), one file per period; customers
(``cid, region``) are a table given once.  The view is "number of orders per
region", ``orders JOIN customers USING (cid)`` then a count.  A file-source stream
(one file per micro-batch) feeds the view through ``view.foreach_batch``; each
micro-batch's output updates are written to ``<dir>/out/batch=<id>`` (overwritten
if Spark replays the batch, which the view answers with the same output).

Example::

    python examples/incremental_stream.py --dir /tmp/sd-stream --files 5 --rows 200

prints the output updates per batch, then checks that all of them together equal
the one-shot query over every file (restricted to the times the view completed)
and prints ``OK``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import spark_differential as sd  # noqa: E402

ORDERS = "oid long, cid long, amount long, ts long, diff long"
CUSTOMERS = "cid long, region string, time long, diff long"


def per_region(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """The view's query: orders joined with customers, counted per region."""
    return orders.dd_join(customers, on="cid").dd_count(by="region")


def write_change_logs(directory: str, files: int, rows: int, customers: int, seed: int = 1) -> None:
    """``files`` change-log files; file ``i`` holds changes at times ``10 i .. 10 i + 9``."""
    rng = random.Random(seed)
    live: list[tuple[int, int, int, int]] = []
    next_oid = 0
    os.makedirs(directory, exist_ok=True)
    stamp = time.time() - 10 * files
    for i in range(files):
        lines = []
        for _ in range(rows):
            t = 10 * i + rng.randrange(10)
            if live and rng.random() < 0.3:
                oid, cid, amount, born = live.pop(rng.randrange(len(live)))
                lines.append({"oid": oid, "cid": cid, "amount": amount, "ts": max(t, born), "diff": -1})
            else:
                row = (next_oid, rng.randrange(customers), rng.randrange(100), t)
                next_oid += 1
                live.append(row)
                lines.append({"oid": row[0], "cid": row[1], "amount": row[2], "ts": t, "diff": 1})
        path = os.path.join(directory, f"orders-{i:05d}.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in lines)
        os.utime(path, (stamp + 10 * i, stamp + 10 * i))  # the file source reads files oldest first


def run(spark: SparkSession, workdir: str, files: int = 5, rows: int = 200, customers: int = 20) -> dict[str, Any]:
    """Build the inputs under ``workdir``, run the stream to the end, check against one shot."""
    shutil.rmtree(workdir, ignore_errors=True)
    logs, state, out, checkpoint = (os.path.join(workdir, d) for d in ("logs", "state", "out", "checkpoint"))
    write_change_logs(logs, files, rows, customers)
    cust = spark.createDataFrame([(c, f"region-{c % 4}", 0, 1) for c in range(customers)], CUSTOMERS)

    view = sd.incremental(state, per_region)
    empty = spark.createDataFrame([], "oid long, cid long, amount long, time long, diff long")
    view.update(upto=0, orders=empty, customers=cust)  # customers from time 0 on; no orders yet

    def sink(updates: DataFrame, batch_id: int) -> None:
        updates.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))
        print(f"batch {batch_id}: {updates.count()} output updates, frontier now {view.frontier}")

    stream = (
        spark.readStream.schema(ORDERS).option("maxFilesPerTrigger", 1).json(logs)
        .writeStream.foreachBatch(view.foreach_batch(sink, time="ts", diff="diff", input="orders"))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    stream.awaitTermination()

    frontier = view.frontier
    got = spark.read.parquet(out).drop("batch").dd_consolidate()
    all_orders = sd.collection(spark.read.schema(ORDERS).json(logs), time="ts", diff="diff")
    want = per_region(all_orders, cust).where(F.col("time") < frontier)
    bad = got.exceptAll(want).count() + want.exceptAll(got).count()
    result = {"frontier": frontier, "updates": got.count(), "mismatches": bad}
    print(f"frontier {frontier}: {result['updates']} output updates in all; "
          + ("OK" if bad == 0 else f"MISMATCH ({bad} rows differ from the one-shot query)"))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/sd-incremental-stream")
    ap.add_argument("--files", type=int, default=5)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--customers", type=int, default=20)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    spark = sd.session(master=args.master, conf={"spark.sql.shuffle.partitions": "4"})
    res = run(spark, args.dir, args.files, args.rows, args.customers)
    sys.exit(0 if res["mismatches"] == 0 else 1)


if __name__ == "__main__":
    main()
