"""Consolidation throughput: ``dd_consolidate`` on local Spark vs one DuckDB query (issue 2).

What is measured
    10^7 updates ``(key, val, time, diff)`` - 10^5 keys, a small value in [0, 4),
    10^3 times, diff = ±1, uniformly random (seeded numpy) - consolidated:

    * without a frontier: sum ``diff`` per ``(key, val, time)``, drop zeros;
    * with the frontier ``[times / 2]``: every time is first advanced to
      ``max(time, frontier)`` (the total-order case of seed 004's advance), then
      consolidated - a history compacted "as of" the middle of its span.

    Ours: ``dd_consolidate(frontier, method="spark")`` and ``method="kernel"`` on a
    local Spark (``local[2]``).  Peer: the same work as one DuckDB query
    (``GROUP BY ALL HAVING sum(diff) <> 0``, with ``greatest(time, f)`` for the
    frontier) in a single process with as many threads as Spark has cores.

How
    The data is generated once with numpy and written to Parquet; Spark reads it,
    repartitions it over 2 x cores partitions, caches and counts it before any
    timing; DuckDB loads the same file into an in-memory table before timing.  So
    the timings exclude data generation and loading.  A Spark timing ends with
    ``write.format("noop")`` (every output row is computed); a DuckDB timing
    materializes the result with ``CREATE TEMP TABLE ... AS``.  Reported: best
    wall-clock time of the timed runs, updates/second (input updates / time) and
    the ratio DuckDB time / our time.  Every formulation's output is checked to
    have the same row count, diff sum and a position-independent checksum.

    python benchmarks/consolidate.py --quick
    python benchmarks/consolidate.py --json benchmarks/results/consolidate.json
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from common import (
    DataDir,
    Measurement,
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
    random_updates,
    spark_action,
    spark_cached,
    warm_spark,
    write_parquet,
)

CHECKSUM = "((key * 1000003 + val * 1009 + time) % 1000000007) * diff"


def duck_sql(frontier: int | None) -> str:
    t = "time" if frontier is None else f"greatest(time, {frontier})::BIGINT"
    return f"SELECT key, val, {t} AS time, sum(diff)::BIGINT AS diff FROM updates GROUP BY ALL HAVING sum(diff) <> 0"


def spark_checksum(df: Any) -> tuple[int, int, int]:
    from pyspark.sql import functions as F

    r = df.agg(F.count(F.lit(1)), F.sum("diff"), F.sum(F.expr(CHECKSUM))).collect()[0]
    return int(r[0]), int(r[1] or 0), int(r[2] or 0)


def duck_checksum(con: Any, sql: str) -> tuple[int, int, int]:
    r = con.execute(f"SELECT count(*), sum(diff), sum({CHECKSUM}) FROM ({sql})").fetchone()
    return int(r[0]), int(r[1] or 0), int(r[2] or 0)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--updates", type=int, help="number of updates (default 10^7; quick 2x10^5)")
    p.add_argument("--keys", type=int, help="distinct keys (default 10^5; quick 10^3)")
    p.add_argument("--times", type=int, help="distinct times (default 10^3; quick 100)")
    p.add_argument("--methods", default="spark,kernel", help="dd_consolidate methods to time (default: spark,kernel)")
    p.add_argument("--no-verify", action="store_true", help="skip the result checksums (they rerun each pipeline)")
    args = p.parse_args(argv)

    n = pick(args, "updates", 200_000, 10**7)
    keys = pick(args, "keys", 1_000, 10**5)
    times = pick(args, "times", 100, 1_000)
    repeat = pick(args, "repeat", 1, 3)
    warmup = pick(args, "warmup", 0, 1)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    frontier = times // 2
    cores = cores_of(args.master)
    config = {
        "updates": n,
        "keys": keys,
        "times": times,
        "frontier": [frontier],
        "methods": methods,
        "repeat": repeat,
        "warmup": warmup,
    }
    report = Report("consolidate", args, config)
    log(
        f"consolidate: {fmt_count(n)} updates, {fmt_count(keys)} keys, {fmt_count(times)} times; "
        f"frontier [{frontier}]; best of {repeat} after {warmup} warm-up"
    )

    data = DataDir(args, "consolidate")
    try:
        path = data.file("updates.parquet")
        log("generating data (numpy, seeded) -> Parquet")
        write_parquet(random_updates(np.random.default_rng(args.seed), n, keys, times), path)

        spark = make_spark(args)
        warm_spark(spark)
        log("loading the input into Spark: repartition + cache + count (not timed)")
        inp = spark_cached(spark, path, 2 * cores)

        con = duckdb_connect(args)
        duckdb_table(con, "updates", path)

        cases: list[tuple[str, int | None]] = [("no frontier", None), (f"frontier [{frontier}]", frontier)]
        peer_ms: dict[str, Measurement] = {}
        for case, f in cases:
            sql = duck_sql(f)
            peer_ms[case] = measure(
                f"DuckDB GROUP BY ({case})",
                lambda sql=sql: duckdb_materialize(con, sql),
                repeat=max(repeat, 3),
                warmup=1,
            )
        for method in methods:
            for case, f in cases:
                fr = None if f is None else [f]
                m = measure(
                    f"dd_consolidate(method={method!r})",
                    lambda fr=fr, method=method: spark_action(inp.dd_consolidate(frontier=fr, method=method)),
                    repeat=repeat,
                    warmup=warmup,
                )
                report.add(case, m, peer_ms[case])

        if not args.no_verify:
            log("verifying: row count, diff sum and checksum of every output")
            for case, f in cases:
                want = duck_checksum(con, duck_sql(f))
                for method in methods:
                    fr = None if f is None else [f]
                    got = spark_checksum(inp.dd_consolidate(frontier=fr, method=method))
                    report.check(
                        f"{case}: method={method} == DuckDB", got == want, f"(rows, sum diff, checksum) {got} vs {want}"
                    )
        report.note(
            "inputs cached in Spark / loaded into DuckDB before timing; Spark timings end with a noop write, "
            "DuckDB timings with CREATE TEMP TABLE"
        )
        report.note(f"DuckDB peer: one process, {args.duckdb_threads or cores} threads")

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
