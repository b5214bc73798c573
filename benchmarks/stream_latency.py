"""Structured Streaming into an incremental view: the latency of one micro-batch (issue 36).

What is measured
    ``examples/incremental_stream.py``'s join + count view (``orders JOIN customers USING
    (cid)``, then the number of orders per region), fed by a file-source stream of
    change-log files of ``--rows`` order changes each, one file a micro-batch, triggered every
    ``--trigger`` seconds (``processingTime``).  For each micro-batch, inside the
    ``foreachBatch`` function: the seconds of the view's update plus reading its output
    (``collect()``; the wall time of that block alone, without the queries ``count_jobs``
    makes of Spark's status tracker once it ends, some 35 py4j round trips), the Spark jobs they ran, and, right after, one plain Spark job on the same
    micro-batch (``groupBy().count().collect()``): the peer the issue sets a micro-batch
    against (target: at most 3x after warm-up).  Means over the batches after ``--warm``;
    each batch's own line, and Spark's ``triggerExecution`` per batch, are printed too.

    PYTHONPATH=. python benchmarks/stream_latency.py --files 20 --rows 1000 --json benchmarks/results/stream_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

from incremental_stream import CUSTOMERS, ORDERS, per_region, write_change_logs  # noqa: E402

import spark_differential as sd  # noqa: E402
from spark_differential.core.jobs import count_jobs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20, help="change-log files: one micro-batch each")
    ap.add_argument("--rows", type=int, default=1000, help="order changes per file")
    ap.add_argument("--customers", type=int, default=2000)
    ap.add_argument("--trigger", type=float, default=1.0, help="processingTime trigger, seconds")
    ap.add_argument("--warm", type=int, default=5, help="batches left out of the means (warm-up)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    spark = sd.session(master="local[2]", conf={"spark.sql.shuffle.partitions": "4",
                                                 "spark.driver.memory": args.driver_memory})
    work = tempfile.mkdtemp(prefix="sd-stream-bench-")
    logs, state, checkpoint = (os.path.join(work, d) for d in ("logs", "state", "checkpoint"))
    write_change_logs(logs, args.files, args.rows, args.customers)
    cust = spark.createDataFrame([(c, f"region-{c % 50}", 0, 1) for c in range(args.customers)], CUSTOMERS)
    view = sd.incremental(state, per_region)
    view.update(upto=0, orders=spark.createDataFrame([], "oid long, cid long, amount long, time long, diff long"),
                customers=cust)
    apply = view.foreach_batch(lambda out, i: out.collect(), time="ts", diff="diff", input="orders")
    rows: list[dict[str, Any]] = []

    def timed(batch: Any, batch_id: int) -> None:
        with count_jobs(spark) as jobs:
            apply(batch, batch_id)
        took = jobs.seconds  # the block's own wall time (not the counter's queries of Spark's status tracker)
        t0 = time.perf_counter()
        batch.groupBy().count().collect()
        plain = time.perf_counter() - t0
        rows.append({"batch": batch_id, "seconds": took, "jobs": jobs.jobs, "plain_seconds": plain})
        print(f"batch {batch_id}: view {took:.2f}s ({jobs.jobs} jobs), a plain job {plain:.2f}s", flush=True)

    stream = (spark.readStream.schema(ORDERS).option("maxFilesPerTrigger", 1).json(logs)
              .writeStream.foreachBatch(timed).option("checkpointLocation", checkpoint)
              .trigger(processingTime=f"{args.trigger} seconds").start())
    try:
        while len(rows) < args.files:
            time.sleep(0.5)
            if stream.exception() is not None:
                raise RuntimeError(str(stream.exception()))
        progress = [p["durationMs"].get("triggerExecution") for p in stream.recentProgress if p.get("numInputRows")]
    finally:
        stream.stop()
        shutil.rmtree(work, ignore_errors=True)
    late = rows[args.warm:]
    view_s = float(np.mean([r["seconds"] for r in late]))
    plain_s = float(np.mean([r["plain_seconds"] for r in late]))
    summary = {"files": args.files, "rows": args.rows, "customers": args.customers, "warm": args.warm,
               "view_seconds": view_s, "plain_seconds": plain_s, "ratio": view_s / plain_s,
               "jobs": float(np.mean([r["jobs"] for r in late])), "trigger_execution_ms": progress}
    print(f"after {args.warm} batches: a micro-batch's update {view_s:.2f}s ({summary['jobs']:.1f} jobs) against a "
          f"plain job {plain_s:.3f}s: {summary['ratio']:.1f}x (target <= 3x: {'met' if summary['ratio'] <= 3 else 'NOT met'})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "batches": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
