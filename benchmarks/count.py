"""dd_count throughput vs the same aggregation in DuckDB (issue 3).

What is measured
    10^7 updates ``(key, val, time, diff)`` on 10^5 keys and 10^3 times: rows
    ``(key, val)`` (``val`` a small value) are inserted at a random time and about
    half of them retracted at a later random time, so every accumulated
    multiplicity stays >= 0 (a well-formed multiset history).  Ours:
    ``dd_count(by="key")`` on local Spark: the full history of every key's count,
    as ``(key, count, time, diff)`` differences.  Reported as updates/second
    (input updates / time).

    Peers, single-process DuckDB over the same rows (threads = Spark's cores):

    * final counts per key only: ``sum(greatest(multiplicity, 0))`` per key - the
      one-version answer, a lower bound on the work;
    * the full history via window functions: running multiplicities per
      ``(key, val)`` (``sum() OVER (ORDER BY time)``), the change of each key's
      count per time, running counts per key, and ``lag()`` to turn them into the
      same ``+new / -old`` differences ``dd_count`` outputs - row for row the same
      result, which is checked.

How
    Data: seeded numpy -> Parquet.  Spark reads it, repartitions over 2 x cores
    partitions, caches and counts it before timing; the timing ends with
    ``write.format("noop")``.  DuckDB loads the same file into an in-memory table
    before timing; its timings materialize the result (``CREATE TEMP TABLE ... AS``).
    Checked: our history equals DuckDB's window-function history (rows, diff sum,
    checksum), and our history accumulated to the end equals DuckDB's final counts.

    python benchmarks/count.py --quick
    python benchmarks/count.py --json benchmarks/results/count.json
"""

from __future__ import annotations

import sys

import numpy as np
from common import (
    DataDir,
    Report,
    Row,
    base_parser,
    cores_of,
    duckdb_connect,
    duckdb_materialize,
    duckdb_table,
    finish,
    fmt_count,
    fmt_rate,
    log,
    make_spark,
    measure,
    pick,
    spark_action,
    spark_cached,
    warm_spark,
    write_parquet,
)

MOD = 1_000_000_007
CHECKSUM = f"((key * 1000003 + count * 1009 + time) % {MOD}) * diff"

FINAL_SQL = (
    "SELECT key, sum(m)::BIGINT AS count FROM "
    "(SELECT key, val, greatest(sum(diff), 0) AS m FROM updates GROUP BY key, val) "
    "GROUP BY key HAVING sum(m) > 0"
)

HISTORY_SQL = """
WITH kv AS (SELECT key, val, time, sum(diff) AS d FROM updates GROUP BY ALL HAVING sum(diff) <> 0),
run AS (SELECT key, time, d, sum(d) OVER (PARTITION BY key, val ORDER BY time ROWS UNBOUNDED PRECEDING) AS c FROM kv),
dp AS (SELECT key, time, sum(greatest(c, 0) - greatest(c - d, 0)) AS dc FROM run GROUP BY key, time),
cnt AS (SELECT key, time, sum(dc) OVER (PARTITION BY key ORDER BY time ROWS UNBOUNDED PRECEDING) AS count FROM dp),
chg AS (SELECT key, time, count, lag(count, 1, 0) OVER (PARTITION BY key ORDER BY time) AS prev FROM cnt)
SELECT key, count::BIGINT AS count, time, 1::BIGINT AS diff FROM chg WHERE count <> prev AND count > 0
UNION ALL
SELECT key, prev::BIGINT AS count, time, -1::BIGINT AS diff FROM chg WHERE count <> prev AND prev > 0
"""


def generate(rng: np.random.Generator, n: int, keys: int, times: int) -> dict[str, np.ndarray]:
    """About ``n`` updates: inserts at random times, half of them retracted later."""
    n_ins = int(round(n / 1.5))
    key = rng.integers(0, keys, n_ins, dtype=np.int64)
    val = rng.integers(0, 4, n_ins, dtype=np.int64)
    t = rng.integers(0, times, n_ins, dtype=np.int64)
    retract = (rng.random(n_ins) < 0.5) & (t < times - 1)
    tr = t[retract] + 1 + (rng.random(int(retract.sum())) * (times - 1 - t[retract])).astype(np.int64)
    return {
        "key": np.concatenate([key, key[retract]]),
        "val": np.concatenate([val, val[retract]]),
        "time": np.concatenate([t, tr]),
        "diff": np.concatenate([np.ones(n_ins, np.int64), -np.ones(int(retract.sum()), np.int64)]),
    }


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--updates", type=int, help="number of updates (default 10^7; quick 2x10^5)")
    p.add_argument("--keys", type=int, help="distinct keys (default 10^5; quick 10^3)")
    p.add_argument("--times", type=int, help="distinct times (default 10^3; quick 100)")
    p.add_argument("--no-verify", action="store_true", help="skip the checks (they rerun dd_count)")
    args = p.parse_args(argv)
    n = pick(args, "updates", 200_000, 10**7)
    keys = pick(args, "keys", 1_000, 10**5)
    times = pick(args, "times", 100, 1_000)
    repeat = pick(args, "repeat", 1, 3)
    warmup = pick(args, "warmup", 0, 1)
    config = {"updates": n, "keys": keys, "times": times, "final_sql": FINAL_SQL, "history_sql": HISTORY_SQL}
    report = Report("count", args, config)
    data = DataDir(args, "count")
    try:
        path = data.file("updates.parquet")
        n = write_parquet(generate(np.random.default_rng(args.seed), n, keys, times), path)
        log(f"count: {fmt_count(n)} updates, {fmt_count(keys)} keys, {fmt_count(times)} times")
        spark = make_spark(args)
        warm_spark(spark)
        inp = spark_cached(spark, path, 2 * cores_of(args.master))
        con = duckdb_connect(args)
        duckdb_table(con, "updates", path)

        ours = measure(
            "dd_count(by='key'), full history",
            lambda: spark_action(inp.dd_count(by="key")),
            repeat=repeat,
            warmup=warmup,
            rss=True,
        )
        final = measure(
            "DuckDB final counts only",
            lambda: duckdb_materialize(con, FINAL_SQL),
            repeat=3,
            warmup=1,
        )
        hist = measure(
            "DuckDB full history (window functions)",
            lambda: duckdb_materialize(con, HISTORY_SQL),
            repeat=3,
            warmup=1,
        )
        report.add("final counts per key", ours, final)
        report.add("full history of counts", ours, hist)

        if not args.no_verify:
            from pyspark.sql import functions as F

            counts = inp.dd_count(by="key").cache()
            r = counts.agg(F.count(F.lit(1)), F.sum("diff"), F.sum(F.expr(CHECKSUM))).collect()[0]
            got = (int(r[0]), int(r[1] or 0), int(r[2] or 0))
            w = con.execute(f"SELECT count(*), sum(diff), sum({CHECKSUM}) FROM ({HISTORY_SQL})").fetchone()
            want = (int(w[0]), int(w[1] or 0), int(w[2] or 0))
            report.check(
                "dd_count history == DuckDB window-function history",
                got == want,
                f"(rows, sum diff, checksum) {got} vs {want}",
            )
            fin = (
                counts.groupBy("key", "count")
                .agg(F.sum("diff").alias("m"))
                .where("m > 0")
                .agg(F.count(F.lit(1)), F.sum("count"), F.sum(F.expr(f"(key * 1009 + count) % {MOD}")))
                .collect()[0]
            )
            got_f = (int(fin[0]), int(fin[1] or 0), int(fin[2] or 0))
            wf = con.execute(
                f"SELECT count(*), sum(count), sum((key * 1009 + count) % {MOD}) FROM ({FINAL_SQL})"
            ).fetchone()
            want_f = (int(wf[0]), int(wf[1] or 0), int(wf[2] or 0))
            report.check(
                "dd_count accumulated to the end == DuckDB final counts",
                got_f == want_f,
                f"(keys, sum count, checksum) {got_f} vs {want_f}",
            )
            counts.unpersist()

        report.note(
            "ours computes the full history in both rows; the first row compares it with the one-version answer"
        )

        def ours_rate(r: Row) -> str:
            return fmt_rate(n, r.ours.seconds) if r.ours.ok else "-"

        def peer_rate(r: Row) -> str:
            return fmt_rate(n, r.peer.seconds) if r.peer is not None and r.peer.ok else "-"

        for r in report.rows:
            r.ours.extra["updates_per_second"] = n / r.ours.seconds if r.ours.ok else None
            if r.peer is not None and r.peer.ok:
                r.peer.extra["updates_per_second"] = n / r.peer.seconds
        return finish(report, [("ours updates/s", ours_rate), ("peer updates/s", peer_rate)])
    finally:
        data.cleanup()


if __name__ == "__main__":
    sys.exit(main())
