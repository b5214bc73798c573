"""Versioned view: the whole history of a join + aggregate in one job vs once per version (issue 3).

What is measured
    A ``customers`` table (10^5 rows: ``customer_id, region``) and an ``orders``
    table (10^6 rows: ``order_id, customer_id, amount``) go through V versions
    (V = 10, 100, 1000; version 0 is the initial tables).  Each later version
    changes ~0.1% of the rows of each table at random: orders get amount updates
    (60%), inserts (20%, for live customers) and deletes (20%); customers get
    region updates (80%), inserts (10%) and deletes (10%).  The query is
    ``orders JOIN customers USING (customer_id)`` then the number of rows per
    ``region``; the question is its result at every version.

    * Ours: one job over the change log.  The log has, per table, every row of
      version 0 with ``diff = +1`` and per later version the changes as updates
      (an update is ``-old, +new``).  ``sd.collection(log, time="version")`` for each
      table, ``dd_join`` on ``customer_id``, ``dd_count(by="region")``, and the full
      output history is written to Parquet (inside the timing).
    * Peer 1, plain Spark per version, same session: each version's tables are
      reconstructed from "validity interval" (SCD type 2) tables - every row
      version with ``valid_from <= v < valid_to`` - a filter over cached tables,
      the usual way to keep and read a versioned table without snapshots; then the
      same ``join + groupBy("region").count()`` is collected.  V queries in a row.
    * Peer 2, DuckDB recomputing per version in one process over the same
      interval tables (threads = Spark's cores).

    Both inputs come from one simulation (numpy, seeded): the interval tables and
    the change log are two encodings of the same row versions (``+1`` at
    ``valid_from``, ``-1`` at ``valid_to``).  Everything is cached in Spark / loaded
    into DuckDB before timing.

    At V = 1000 plain Spark may take long: with ``--peer-versions N`` (default 100
    at full size) only N evenly spaced versions are run and the total is
    extrapolated linearly (N x mean time per version); the table then says
    "(extrap.)" and the notes say from how many versions.  Each query reads a table
    of the same size, so the per-version cost is flat.

    Verification: our output history is accumulated at every version and compared
    with each peer's per-version counts (every version DuckDB ran and every version
    Spark ran).  The issue's target: at V = 1000, at least 50x faster than
    per-version Spark.

    python benchmarks/versioned_view.py --quick
    python benchmarks/versioned_view.py --json benchmarks/results/versioned_view.json
    python benchmarks/versioned_view.py --versions 1000 --peer-versions 200
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
from common import (
    DataDir,
    Measurement,
    Report,
    TimeLimitExceeded,
    base_parser,
    cores_of,
    duckdb_connect,
    duckdb_table,
    finish,
    fmt_count,
    fmt_seconds,
    log,
    make_spark,
    measure,
    pick,
    spark_cached,
    warm_spark,
    write_parquet,
)

INF = np.int64(1) << 62  # valid_to of a row version that is still current


class Versioned:
    """Row versions of one table: entity id, payload columns, [valid_from, valid_to)."""

    def __init__(self, ids: np.ndarray, payload: dict[str, np.ndarray], capacity: int) -> None:
        n = len(ids)
        self.n = n
        self.id = np.empty(capacity, np.int64)
        self.cols = {k: np.empty(capacity, np.int64) for k in payload}
        self.vfrom = np.empty(capacity, np.int64)
        self.vto = np.full(capacity, INF, np.int64)
        self.id[:n] = ids
        for k, v in payload.items():
            self.cols[k][:n] = v
        self.vfrom[:n] = 0
        id_cap = int(ids.max()) + 1 + capacity
        self.cur = np.full(id_cap, -1, np.int64)  # entity id -> index of its current row version
        self.cur[ids] = np.arange(n)
        self.next_id = int(ids.max()) + 1

    def alive_ids(self) -> np.ndarray:
        return np.flatnonzero(self.cur >= 0)

    def _append(self, ids: np.ndarray, payload: dict[str, np.ndarray], v: int) -> None:
        k = len(ids)
        s = slice(self.n, self.n + k)
        self.id[s] = ids
        for c, arr in payload.items():
            self.cols[c][s] = arr
        self.vfrom[s] = v
        self.cur[ids] = np.arange(self.n, self.n + k)
        self.n += k

    def update(self, ids: np.ndarray, payload: dict[str, np.ndarray], v: int) -> None:
        """New values for existing entities: the current version ends at v, a new one starts."""
        old = self.cur[ids]
        self.vto[old] = v
        full = {c: (payload[c] if c in payload else self.cols[c][old]) for c in self.cols}
        self._append(ids, full, v)

    def delete(self, ids: np.ndarray, v: int) -> None:
        self.vto[self.cur[ids]] = v
        self.cur[ids] = -1

    def insert(self, payload: dict[str, np.ndarray], v: int) -> np.ndarray:
        k = len(next(iter(payload.values())))
        ids = np.arange(self.next_id, self.next_id + k, dtype=np.int64)
        self.next_id += k
        self._append(ids, payload, v)
        return ids

    def intervals(self, id_name: str) -> dict[str, np.ndarray]:
        n = self.n
        return {
            id_name: self.id[:n],
            **{c: a[:n] for c, a in self.cols.items()},
            "valid_from": self.vfrom[:n],
            "valid_to": self.vto[:n],
        }

    def log(self, id_name: str) -> dict[str, np.ndarray]:
        """The change log: +1 at valid_from, -1 at valid_to (for versions that ended)."""
        n = self.n
        ended = self.vto[:n] < INF
        cat = np.concatenate
        out = {id_name: cat([self.id[:n], self.id[:n][ended]])}
        for c, a in self.cols.items():
            out[c] = cat([a[:n], a[:n][ended]])
        out["version"] = cat([self.vfrom[:n], self.vto[:n][ended]])
        out["diff"] = cat([np.ones(n, np.int64), -np.ones(int(ended.sum()), np.int64)])
        return out


def simulate(
    customers: int, orders: int, versions: int, regions: int, rate: float, seed: int
) -> tuple[Versioned, Versioned]:
    rng = np.random.default_rng(seed)
    kc = max(1, round(customers * rate))
    ko = max(1, round(orders * rate))
    cust = Versioned(
        np.arange(customers, dtype=np.int64),
        {"region": rng.integers(0, regions, customers)},
        customers + 2 * kc * versions + 16,
    )
    ords = Versioned(
        np.arange(orders, dtype=np.int64),
        {"customer_id": rng.integers(0, customers, orders), "amount": rng.integers(1, 10_000, orders)},
        orders + 2 * ko * versions + 16,
    )
    for v in range(1, versions):
        # customers: 80% region updates, 10% inserts, 10% deletes
        n_upd, n_ins = max(1, round(kc * 0.8)), round(kc * 0.1)
        n_del = kc - n_upd - n_ins
        pick_ = rng.choice(cust.alive_ids(), n_upd + n_del, replace=False)
        cust.update(pick_[:n_upd], {"region": rng.integers(0, regions, n_upd)}, v)
        if n_del:
            cust.delete(pick_[n_upd:], v)
        if n_ins:
            cust.insert({"region": rng.integers(0, regions, n_ins)}, v)
        # orders: 60% amount updates, 20% inserts, 20% deletes
        n_upd, n_ins = max(1, round(ko * 0.6)), round(ko * 0.2)
        n_del = ko - n_upd - n_ins
        pick_ = rng.choice(ords.alive_ids(), n_upd + n_del, replace=False)
        ords.update(pick_[:n_upd], {"amount": rng.integers(1, 10_000, n_upd)}, v)
        if n_del:
            ords.delete(pick_[n_upd:], v)
        if n_ins:
            live = cust.alive_ids()
            ords.insert({"customer_id": rng.choice(live, n_ins), "amount": rng.integers(1, 10_000, n_ins)}, v)
    return cust, ords


# ---------------------------------------------------------------------------------


def ours(orders_log: Any, cust_log: Any, out_path: str, project: bool = False) -> None:
    """The whole history in one job; ``project`` keeps only ``region`` before the count.

    Both compute the SQL ``count(*)`` per region: the join output has only positive
    multiplicities, so counting whole joined rows or their ``region`` column agrees.
    Projecting first lets the count kernel consolidate each ``(region, time)``.
    """
    import spark_differential as sd

    o = sd.collection(orders_log, time="version", diff="diff")
    c = sd.collection(cust_log, time="version", diff="diff")
    joined = o.dd_join(c, on="customer_id")
    if project:
        joined = joined.select("region", "time", "diff")
    joined.dd_count(by="region").write.mode("overwrite").parquet(out_path)


SPARK_QUERY = "filter to v, join, groupBy(region).count()"
DUCK_QUERY = (
    "SELECT c.region, count(*) AS cnt FROM "
    "(SELECT * FROM orders_iv WHERE valid_from <= {v} AND valid_to > {v}) o JOIN "
    "(SELECT * FROM customers_iv WHERE valid_from <= {v} AND valid_to > {v}) c USING (customer_id) "
    "GROUP BY c.region"
)


def spark_per_version(
    orders_iv: Any, cust_iv: Any, vs: list[int], deadline: float | None
) -> tuple[dict[int, dict[int, int]], list[float]]:
    from pyspark.sql import functions as F

    results: dict[int, dict[int, int]] = {}
    times: list[float] = []
    for i, v in enumerate(vs):
        t0 = time.perf_counter()
        o = orders_iv.where((F.col("valid_from") <= v) & (F.col("valid_to") > v)).select("customer_id")
        c = cust_iv.where((F.col("valid_from") <= v) & (F.col("valid_to") > v)).select("customer_id", "region")
        rows = o.join(c, "customer_id").groupBy("region").count().collect()
        times.append(time.perf_counter() - t0)
        results[v] = {int(r["region"]): int(r["count"]) for r in rows}
        if (i + 1) % max(1, len(vs) // 10) == 0:
            log(f"    plain Spark: {i + 1}/{len(vs)} versions, {fmt_seconds(sum(times))} so far")
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitExceeded(sum(times))
    return results, times


def duck_per_version(con: Any, vs: list[int], deadline: float | None) -> dict[int, dict[int, int]]:
    results: dict[int, dict[int, int]] = {}
    for v in vs:
        rows = con.execute(DUCK_QUERY.format(v=v)).fetchall()
        results[v] = {int(r): int(n) for r, n in rows}
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitExceeded()
    return results


def accumulate(history: pd.DataFrame, versions: int) -> dict[int, dict[int, int]]:
    """Our output history (region, count, time, diff) accumulated at every version 0..versions-1."""
    state: dict[tuple[int, int], int] = defaultdict(int)
    by_time = {int(t): g for t, g in history.groupby("time")}
    out: dict[int, dict[int, int]] = {}
    for v in range(versions):
        g = by_time.get(v)
        if g is not None:
            for r, c, d in zip(g["region"].tolist(), g["count"].tolist(), g["diff"].tolist()):
                state[(int(r), int(c))] += int(d)
        snap: dict[int, int] = {}
        for (r, c), m in state.items():
            if m > 0:
                snap[r] = c  # a correct history has one row (multiplicity 1) per present region
        out[v] = snap
    return out


def compare(ours_at: dict[int, dict[int, int]], theirs: dict[int, dict[int, int]]) -> tuple[bool, str]:
    bad = [v for v, snap in theirs.items() if ours_at.get(v) != snap]
    if not bad:
        return True, f"{len(theirs)} versions identical"
    v = bad[0]
    return False, f"{len(bad)} of {len(theirs)} versions differ; first at v={v}: ours {ours_at.get(v)} vs {theirs[v]}"


def run_v(args: argparse.Namespace, spark: Any, report: Report, data: DataDir, V: int) -> None:
    cores = cores_of(args.master)
    n_cust = pick(args, "customers", 1_000, 10**5)
    n_orders = pick(args, "orders", 10_000, 10**6)
    limit = pick(args, "time_limit", 300.0, 7200.0)
    log(
        f"V = {V}: simulating {fmt_count(n_cust)} customers, {fmt_count(n_orders)} orders, {args.rate:.2%} of rows changed per version"
    )
    cust, ords = simulate(n_cust, n_orders, V, args.regions, args.rate, args.seed)
    paths = {name: data.file(f"{name}_{V}.parquet") for name in ("orders_log", "cust_log", "orders_iv", "cust_iv")}
    n_olog = write_parquet(ords.log("order_id"), paths["orders_log"])
    n_clog = write_parquet(cust.log("customer_id"), paths["cust_log"])
    write_parquet(ords.intervals("order_id"), paths["orders_iv"])
    write_parquet(cust.intervals("customer_id"), paths["cust_iv"])
    log(
        f"  change logs: {fmt_count(n_olog)} order updates, {fmt_count(n_clog)} customer updates; "
        f"interval tables: {fmt_count(ords.n)} + {fmt_count(cust.n)} row versions; loading (not timed)"
    )
    parts = 2 * cores
    orders_log = spark_cached(spark, paths["orders_log"], parts)
    cust_log = spark_cached(spark, paths["cust_log"], parts)
    orders_iv = spark_cached(spark, paths["orders_iv"], parts)
    cust_iv = spark_cached(spark, paths["cust_iv"], parts)
    out_path = data.file(f"history_{V}.parquet")

    m_ours = measure(
        f"dd_join+dd_count, all {V} versions",
        lambda: ours(orders_log, cust_log, out_path),
        repeat=pick(args, "repeat", 1, 1),
        warmup=pick(args, "warmup", 0, 0),
    )
    history = pd.read_parquet(out_path) if m_ours.ok else None
    ours_at = accumulate(history, V) if history is not None else {}
    if history is not None:
        m_ours.extra["output_rows"] = len(history)
    proj_path = data.file(f"history_{V}_projected.parquet")
    m_proj = measure(
        f"same, joined rows projected to region before dd_count, all {V} versions",
        lambda: ours(orders_log, cust_log, proj_path, project=True),
        repeat=pick(args, "repeat", 1, 1),
        warmup=pick(args, "warmup", 0, 0),
    )
    if m_proj.ok:
        same = accumulate(pd.read_parquet(proj_path), V) == ours_at
        report.check(f"V={V}: projected formulation == ours at every version", same)

    # peer 1: plain Spark per version (maybe a subset, extrapolated)
    n_peer = args.peer_versions if args.peer_versions is not None else (V if args.quick else min(V, 100))
    n_peer = max(1, min(V, n_peer))
    vs = sorted({int(x) for x in np.linspace(0, V - 1, n_peer).round()})
    label = "plain Spark, per version"
    log(f"  plain Spark per version: {len(vs)} of {V} versions")
    m_spark = Measurement(label)
    try:
        res, times = spark_per_version(orders_iv, cust_iv, vs, time.perf_counter() + limit if limit else None)
        m_spark.runs = times
        if len(vs) == V:
            m_spark.seconds = sum(times)
        else:
            m_spark.seconds = sum(times) / len(times) * V
            m_spark.status = "extrapolated"
            m_spark.detail = (
                f"EXTRAPOLATED: measured {len(vs)} of {V} versions (evenly spaced, {fmt_seconds(sum(times))} "
                f"in total, mean {fmt_seconds(sum(times) / len(times))} per version) x {V}"
            )
        m_spark.extra.update(measured_versions=len(vs), mean_per_version=sum(times) / len(times))
        ok, detail = compare(ours_at, res)
        report.check(f"V={V}: ours == plain Spark at the versions it ran", ok, detail)
    except TimeLimitExceeded as e:
        m_spark.status, m_spark.seconds = "timeout", float(e.args[0]) if e.args else limit
        m_spark.detail = f"stopped after the time limit ({fmt_seconds(limit)})"
    except Exception as e:
        m_spark.status, m_spark.detail = "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"

    # peer 2: DuckDB per version, every version
    con = duckdb_connect(args)
    duckdb_table(con, "orders_iv", paths["orders_iv"])
    duckdb_table(con, "customers_iv", paths["cust_iv"])
    duck_res: dict[str, dict[int, dict[int, int]]] = {}

    def duck() -> None:
        duck_res["r"] = duck_per_version(con, list(range(V)), time.perf_counter() + limit if limit else None)

    m_duck = measure("DuckDB, per version", duck, repeat=1, warmup=0)
    if "r" in duck_res:
        ok, detail = compare(ours_at, duck_res["r"])
        report.check(f"V={V}: ours == DuckDB at every version", ok, detail)
    con.close()

    case = f"V={V}"
    report.add(case, m_ours, m_spark)
    report.add(case, m_ours, m_duck)
    report.add(case, m_proj, m_spark)
    if m_spark.status == "extrapolated":
        report.note(f"V={V}, plain Spark: {m_spark.detail}")
    if V >= 1000 and m_ours.ok and m_spark.seconds:
        ratio = m_spark.seconds / m_ours.seconds  # type: ignore[operator]
        report.note(
            f"V={V}: issue target >= 50x faster than per-version Spark: {'MET' if ratio >= 50 else 'NOT MET'} "
            f"({ratio:.1f}x{', peer extrapolated' if m_spark.status == 'extrapolated' else ''})"
        )
    for df in (orders_log, cust_log, orders_iv, cust_iv):
        df.unpersist()


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--versions", default=None, help="comma-separated V values (default 10,100,1000; quick 10,30)")
    p.add_argument("--customers", type=int, help="customers at version 0 (default 10^5; quick 10^3)")
    p.add_argument("--orders", type=int, help="orders at version 0 (default 10^6; quick 10^4)")
    p.add_argument("--regions", type=int, default=50, help="distinct regions (default 50)")
    p.add_argument(
        "--rate", type=float, default=0.001, help="fraction of each table's rows changed per version (0.001)"
    )
    p.add_argument(
        "--peer-versions",
        type=int,
        default=None,
        help="versions plain Spark actually runs (evenly spaced; the rest is extrapolated). "
        "Default: all at quick size, min(V, 100) at full size",
    )
    args = p.parse_args(argv)
    vlist = [int(x) for x in (args.versions or ("10,30" if args.quick else "10,100,1000")).split(",")]
    config = {
        "versions": vlist,
        "customers": pick(args, "customers", 1_000, 10**5),
        "orders": pick(args, "orders", 10_000, 10**6),
        "regions": args.regions,
        "rate": args.rate,
        "spark_query": SPARK_QUERY,
        "duckdb_query": DUCK_QUERY,
    }
    report = Report("versioned_view", args, config)
    data = DataDir(args, "versioned")
    try:
        spark = make_spark(args)
        warm_spark(spark)
        for V in vlist:
            run_v(args, spark, report, data, V)
        report.note("ours includes building the collections and writing the whole output history to Parquet")
        report.note("peers reconstruct each version from validity-interval tables (valid_from <= v < valid_to), cached")
        return finish(report)
    finally:
        data.cleanup()


if __name__ == "__main__":
    sys.exit(main())
