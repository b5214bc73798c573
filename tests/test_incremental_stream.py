"""Structured Streaming into an incremental view, end to end: the process is killed in the
middle of a micro-batch (before or after the view commits the batch's update, always before
the sink and the stream's checkpoint see it), restarted from the stream's checkpoint, and
every change reaches the sink exactly once (the one-shot answer, row for row)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any

import background

import spark_differential as sd
from spark_differential.incremental.view import KILL_ENV

# one run of the streaming query until the landing directory is drained; the view is made
# (customers, no orders) by the first run only
STREAM = r"""
import sys
import spark_differential as sd
from pyspark.sql import functions as F
root = sys.argv[1]
spark = sd.session(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})

def per_region(orders, customers):
    return orders.dd_join(customers, on="cid").dd_count(by="region")

view = sd.incremental(f"{root}/view", per_region)
if view.frontier is None:
    view.update(upto=0, orders=spark.createDataFrame([], "oid long, cid long, ts long, diff long")
                .withColumnRenamed("ts", "time"),
                customers=spark.createDataFrame([(c, f"r{c % 3}", 0, 1) for c in range(6)],
                                                "cid long, region string, time long, diff long"))
    print("made", flush=True)
query = (spark.readStream.schema("oid long, cid long, ts long, diff long").option("maxFilesPerTrigger", 1)
         .json(f"{root}/landing").writeStream
         .foreachBatch(view.foreach_batch(lambda out, i: out.write.mode("overwrite").parquet(f"{root}/out/batch={i}"),
                                          time="ts", diff="diff", input="orders"))
         .option("checkpointLocation", f"{root}/chk").start())
query.processAllAvailable()
query.stop()
print("drained", flush=True)
"""

ROWS = [{"oid": j % 9, "cid": (j * 5) % 6, "ts": 1 + j, "diff": 1 if j < 9 else -1} for j in range(15)]


def _run(root: str, kill: str | None) -> subprocess.CompletedProcess:
    env = background.env()
    env.pop(KILL_ENV, None)
    if kill:
        env[KILL_ENV] = kill
    return subprocess.run([background.PYTHON, "-c", STREAM, root], env=env, capture_output=True, text=True,
                          timeout=600)


def _three_runs() -> dict[str, Any]:
    """The landing files written, then the three processes (see the test), each run's
    return code, output and the sink's batches after it."""
    root = tempfile.mkdtemp(prefix="sd-stream-")
    os.makedirs(f"{root}/landing")
    for k in range(5):
        name = f"{root}/landing/part-{k}.json"
        with open(name, "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(r) for r in ROWS[3 * k: 3 * k + 3]))
        os.utime(name, (1_700_000_000 + k, 1_700_000_000 + k))  # the file source takes the oldest first
    runs = []
    for kill in ("before-manifest:3", "after-manifest:2", None):
        proc = _run(root, kill)
        out = sorted(os.listdir(f"{root}/out")) if os.path.isdir(f"{root}/out") else []
        runs.append((proc.returncode, proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:], out))
    return {"root": root, "runs": runs}


background.register(__name__, "test_a_stream_killed_mid_batch_and_restarted_delivers_every_change_once", _three_runs, seconds=60)


def test_a_stream_killed_mid_batch_and_restarted_delivers_every_change_once(spark, request) -> None:
    """Five files of three order changes (inserts, then deletes of earlier orders), one a
    micro-batch, through three processes (run beside the suite's other separate processes:
    ``background``).  The first makes the view and dies in batch 1's update before its
    manifest (the process's third update); the second restarts from the stream's checkpoint
    (batch 1 replayed and applied) and dies in batch 2's update after its manifest; the third
    restarts again (batch 2 replayed: the view, committed already, hands the same output
    again) and drains the stream."""
    done = background.result(request)
    root, (first, second, third) = done["root"], done["runs"]
    assert first[0] == 77 and "made" in first[1], first[2]
    assert first[3] == ["batch=0"]  # the killed batch never reached the sink
    assert second[0] == 77 and "made" not in second[1], second[2]
    assert second[3] == ["batch=0", "batch=1"]
    assert third[0] == 0 and "drained" in third[1], third[2]
    assert third[3] == [f"batch={i}" for i in range(5)]
    got: dict[tuple, int] = {}
    for r in spark.read.parquet(f"{root}/out").collect():
        got[(r["region"], r["count"], r["time"])] = got.get((r["region"], r["count"], r["time"]), 0) + r["diff"]
    orders = spark.createDataFrame([(r["oid"], r["cid"], r["ts"], r["diff"]) for r in ROWS],
                                   "oid long, cid long, time long, diff long")
    customers = spark.createDataFrame([(c, f"r{c % 3}", 0, 1) for c in range(6)],
                                      "cid long, region string, time long, diff long")
    want: dict[tuple, int] = {}
    for r in orders.dd_join(customers, on="cid").dd_count(by="region").collect():
        want[(r["region"], r["count"], r["time"])] = want.get((r["region"], r["count"], r["time"]), 0) + r["diff"]
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v} and want
    assert sd.incremental(f"{root}/view", lambda orders, customers: orders).frontier == 16
    shutil.rmtree(root, ignore_errors=True)
