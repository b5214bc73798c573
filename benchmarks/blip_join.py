"""Blip join: one-off rows against a long history, without the h x g blow-up (issue 3).

What is measured
    ``blips``: 10^6 one-off rows ``(key, blip_id)``, each present for one instant -
    ``+1`` at a random time ``t`` and ``-1`` at ``t + 1`` (2 x 10^6 updates).
    ``history``: a collection ``(key, val)`` on 1,000 keys whose value changes over
    time - 10^5 updates (each change retracts the key's old value and inserts the
    new one).  Ours: ``blips.dd_join(history, on="key")`` on local Spark: each blip
    meets the value its key has at the blip's time (and the retraction at ``t + 1``
    the value at ``t + 1``), so the output is about as large as ``blips``.

    Differential join semantics pair *every* update of one side with *every*
    update of the other with the same key (``h x g`` pairs per key, here 2,000 x
    100 per key = 2 x 10^8 in total) and only then sum to the small result.  The
    library's kernel for totally ordered times looks each update up in the other
    side's accumulated trace instead, so its cost should follow the input and
    output sizes, not the product.  Shown two ways:

    * the same join with a 10x longer history (10^6 updates): time and peak memory
      should grow like the input (2.1M -> 3M updates), not like the pairs (10x);
    * the peer: the pairwise formulation as one DuckDB query (``JOIN USING (key)``,
      time = max of the two times, ``sum(diff x diff)`` grouped, zeros dropped) in a
      single process - it forms all h x g pairs.  It runs under ``--time-limit``
      and ``--duckdb-memory``; hitting either is reported, not hidden.

How
    Data: seeded numpy -> Parquet.  Each history size runs ours in a FRESH Python
    process with its own local Spark (so a JVM heap grown by one run does not count
    in the next run's peak memory); inputs are cached and counted before timing,
    the timing ends with ``write.format("noop")``.  Peak RSS is sampled (psutil,
    every 100 ms) over the whole process tree - Python driver, JVM, Python workers -
    and reported per kind.  DuckDB's peak RSS is its own process's.  The outputs of
    ours and the pairwise peer are compared (rows, diff sum, checksum) on the keys
    with ``key % 50 == 0``.

    python benchmarks/blip_join.py --quick
    python benchmarks/blip_join.py --json benchmarks/results/blip_join.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
    fmt_bytes,
    fmt_count,
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
SAMPLE = 50  # verification on keys with key % SAMPLE == 0
RESULT = "BLIP_RESULT_JSON:"
CHECKSUM = f"((key * 1000003 + blip_id * 1009 + val * 31 + time) % {MOD}) * diff"


def gen_blips(rng: np.random.Generator, n: int, keys: int, span: int) -> dict[str, np.ndarray]:
    key = rng.integers(0, keys, n, dtype=np.int64)
    bid = np.arange(n, dtype=np.int64)
    t = rng.integers(0, span, n, dtype=np.int64)
    return {
        "key": np.concatenate([key, key]),
        "blip_id": np.concatenate([bid, bid]),
        "time": np.concatenate([t, t + 1]),
        "diff": np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)]),
    }


def gen_history(rng: np.random.Generator, updates: int, keys: int, span: int) -> dict[str, np.ndarray]:
    """About ``updates`` updates: per key a sequence of values; a change retracts the old value."""
    events = max(keys, (updates + keys) // 2)
    key = rng.integers(0, keys, events, dtype=np.int64)
    t = rng.integers(0, span, events, dtype=np.int64)
    _, first = np.unique(key * span + t, return_index=True)  # one change per (key, time); sorted by (key, time)
    key, t = key[first], t[first]
    val = rng.integers(0, 10**6, len(key), dtype=np.int64)
    same_key_as_prev = np.concatenate([[False], key[1:] == key[:-1]])
    prev_val = np.concatenate([[0], val[:-1]])
    r = same_key_as_prev
    return {
        "key": np.concatenate([key, key[r]]),
        "val": np.concatenate([val, prev_val[r]]),
        "time": np.concatenate([t, t[r]]),
        "diff": np.concatenate([np.ones(len(key), np.int64), -np.ones(int(r.sum()), np.int64)]),
    }


PAIRS_SQL = (
    "SELECT b.key, b.blip_id, h.val, greatest(b.time, h.time) AS time, sum(b.diff * h.diff)::BIGINT AS diff "
    "FROM {b} b JOIN {h} h ON b.key = h.key GROUP BY ALL HAVING sum(b.diff * h.diff) <> 0"
)


# ---------------------------------------------------------------------------------
# child: ours, in a fresh process


def child(args: argparse.Namespace) -> int:
    spec = json.loads(args.child)
    spark = make_spark(args)
    warm_spark(spark)
    cores = cores_of(args.master)
    blips = spark_cached(spark, spec["blips"], 2 * cores)
    hist = spark_cached(spark, spec["history"], 2 * cores)
    m = measure(
        f"dd_join, history {fmt_count(spec['history_updates'])}",
        lambda: spark_action(blips.dd_join(hist, on="key")),
        repeat=spec["repeat"],
        warmup=spec["warmup"],
        rss=True,
    )
    from pyspark.sql import functions as F

    out = blips.where(f"key % {SAMPLE} = 0").dd_join(hist.where(f"key % {SAMPLE} = 0"), on="key")
    r = out.agg(F.count(F.lit(1)), F.sum("diff"), F.sum(F.expr(CHECKSUM))).collect()[0]
    rows = blips.dd_join(hist, on="key").count() if spec.get("count_output") else None
    print(
        RESULT
        + json.dumps({"m": m.__dict__, "checksum": [int(r[0]), int(r[1] or 0), int(r[2] or 0)], "output_rows": rows}),
        flush=True,
    )
    return 0


def run_child(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        json.dumps(spec),
        "--master",
        args.master,
        "--driver-memory",
        args.driver_memory,
    ]
    result: dict[str, Any] | None = None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(RESULT):
                result = json.loads(line[len(RESULT) :])
            else:
                print("    | " + line.rstrip(), flush=True)
        proc.wait()
    if result is None:
        raise RuntimeError(f"the Spark child process failed (exit code {proc.returncode})")
    return result


# ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--blips", type=int, help="one-off rows (default 10^6; quick 2x10^4)")
    p.add_argument("--history", type=int, help="history updates (default 10^5; quick 2x10^3)")
    p.add_argument("--keys", type=int, help="keys (default 1000; quick 100)")
    p.add_argument("--factor", type=int, default=10, help="the longer history is this many times longer (10)")
    p.add_argument("--no-peer", action="store_true", help="skip the pairwise DuckDB peer")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)

    n_blips = pick(args, "blips", 20_000, 10**6)
    n_hist = pick(args, "history", 2_000, 10**5)
    keys = pick(args, "keys", 100, 1_000)
    span = 10**7
    limit = pick(args, "time_limit", 120.0, 900.0)
    sizes = [n_hist, n_hist * args.factor]
    config = {"blips": n_blips, "history_updates": sizes, "keys": keys, "time_span": span, "pairs_sql": PAIRS_SQL}
    report = Report("blip_join", args, config)
    data = DataDir(args, "blip")
    try:
        rng = np.random.default_rng(args.seed)
        b_path = data.file("blips.parquet")
        n_b = write_parquet(gen_blips(rng, n_blips, keys, span), b_path)
        log(f"blips: {fmt_count(n_blips)} one-off rows = {fmt_count(n_b)} updates on {keys} keys")
        con = duckdb_connect(args)
        duckdb_table(con, "blips", b_path)
        measured: list[tuple[int, Measurement, Measurement | None, int]] = []
        for h in sizes:
            h_path = data.file(f"history_{h}.parquet")
            n_h = write_parquet(gen_history(np.random.default_rng(args.seed + h), h, keys, span), h_path)
            pairs = int(
                con.execute(
                    f"SELECT sum(nb * nh) FROM (SELECT key, count(*) nb FROM blips GROUP BY key) "
                    f"JOIN (SELECT key, count(*) nh FROM read_parquet('{h_path}') GROUP BY key) USING (key)"
                ).fetchone()[0]
            )
            log(f"history {fmt_count(h)}: {fmt_count(n_h)} updates; pairs a pairwise join forms: {pairs:,}")
            log("  ours, in a fresh Spark process:")
            spec = {
                "blips": b_path,
                "history": h_path,
                "history_updates": h,
                "repeat": pick(args, "repeat", 1, 1),
                "warmup": pick(args, "warmup", 0, 1),
                "count_output": True,
            }
            res = run_child(args, spec)
            ours = Measurement(**res["m"])
            ours.extra["output_rows"] = res["output_rows"]
            ours.extra["pairs"] = pairs
            ours.extra["input_updates"] = n_b + n_h

            peer = None
            duckdb_table(con, "history", h_path)
            sample = f"(SELECT * FROM {{t}} WHERE key % {SAMPLE} = 0)"
            want = con.execute(
                f"SELECT count(*), sum(diff), sum({CHECKSUM}) FROM ("
                + PAIRS_SQL.format(b=sample.format(t="blips"), h=sample.format(t="history"))
                + ")"
            ).fetchone()
            want_t = (int(want[0]), int(want[1] or 0), int(want[2] or 0))
            got_t = tuple(res["checksum"])
            report.check(
                f"history {fmt_count(h)}: ours == pairwise DuckDB on keys % {SAMPLE} == 0",
                got_t == want_t,
                f"(rows, sum diff, checksum) {got_t} vs {want_t}",
            )
            if not args.no_peer:
                peer = measure(
                    "DuckDB pairwise join (h x g pairs)",
                    lambda: duckdb_materialize(con, PAIRS_SQL.format(b="blips", h="history"), limit),
                    repeat=1,
                    warmup=0,
                    rss=True,
                    rss_tree=False,
                )
                con.execute("DROP TABLE IF EXISTS out")
            report.add(f"history {fmt_count(h)} ({pairs / 1e6:,.0f}M pairs)", ours, peer)
            measured.append((h, ours, peer, n_b + n_h))

        (h0, m0, _, in0), (h1, m1, _, in1) = measured[0], measured[-1]
        if m0.ok and m1.ok:
            t_ratio = m1.seconds / m0.seconds  # type: ignore[operator]
            mem = ""
            if m0.peak_rss and m1.peak_rss:
                mem = f", peak RSS x{m1.peak_rss / m0.peak_rss:.2f} ({fmt_bytes(m0.peak_rss)} -> {fmt_bytes(m1.peak_rss)})"
            p0, p1 = m0.extra["pairs"], m1.extra["pairs"]
            report.note(
                f"history x{h1 // h0}: our time x{t_ratio:.2f}{mem}; input updates x{in1 / in0:.2f}, "
                f"pairs x{p1 / p0:.1f} -> growth follows the {'input' if t_ratio < 0.5 * p1 / p0 else 'PAIRS'}"
            )
        report.note("ours runs in a fresh Spark process per history size; peak RSS = driver + JVM + Python workers")

        def rss(r: Row) -> str:
            return fmt_bytes(r.ours.peak_rss)

        def by_kind(r: Row) -> str:
            k = r.ours.extra.get("peak_rss_by_process") or {}
            return ", ".join(f"{n} {fmt_bytes(v)}" for n, v in k.items()) or "-"

        def peer_rss(r: Row) -> str:
            return fmt_bytes(r.peer.peak_rss) if r.peer is not None else "-"

        def out_rows(r: Row) -> str:
            v = r.ours.extra.get("output_rows")
            return f"{v:,}" if v is not None else "-"

        return finish(
            report,
            [("ours peak RSS", rss), ("(by process)", by_kind), ("peer peak RSS", peer_rss), ("output rows", out_rows)],
        )
    finally:
        data.cleanup()


if __name__ == "__main__":
    sys.exit(main())
