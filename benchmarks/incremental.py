"""Incremental views (issue 22): sustained latency of successive updates, against one-shot recomputation.

What is measured
    Two workloads, each fed to ``sd.incremental`` in ``--updates`` successive updates
    of ``--changes`` changes each (update ``i`` carries the changes at time ``i`` and
    declares the inputs complete below ``i + 1``):

    * ``view``: the versioned-view query of ``benchmarks/versioned_view.py``:
      ``orders JOIN customers USING (customer_id)``, then the number of rows per
      ``region``.  Update 0 holds the initial tables (``--customers`` customers,
      ``--orders`` orders); each later update changes orders (60% amount updates
      as ``-old, +new``, 20% inserts, 20% deletes) and customers (1 change in 10 is
      a customer's region update).
    * ``bfs``: seed 001's BFS (1,000 nodes, a sliding window of 2,000 edges; update
      0 holds the initial edges and the root, each later update ``--changes`` edge
      changes, all at one time).

    The peer for the ``view`` workload is Pathway's own incremental update of the same query
    on the same changes (a ``pw.io.python`` subject committing one update at a time, timed from
    sending its changes until the output's time ends), run in a process of its own after ours
    (``--no-pathway`` skips it); its final count per region is checked against the workload's.

    Per update: the wall time of ``view.update(...)`` plus reading its output
    (``collect()``: one scan; that block alone, without the queries ``count_jobs`` makes of
    Spark's status tracker when it ends, 20-35 py4j round trips), the CPU seconds of the whole process tree over the same span
    (driver, JVM, Python workers: wall seconds are noisy on a shared machine), the
    Spark jobs and tasks (``spark_differential.core.jobs.count_jobs``), one plain Spark job
    in the same session (the update's first input, ``groupBy().count().collect()``: the
    issue's yardstick for an update), and the size on
    disk of the files the committed version names (the state).  After update 10,
    every ``--oneshot-every``-th update and the last one, the same query is
    recomputed one-shot over the whole change log so far (the log is appended to
    Parquet as it grows), in the same session, and its time is reported next to
    the update's.

    The summary compares means over windows of ``--window`` updates (default 8: one
    state merge in each) ending at update 10, at update 100 (after the JVM's JIT
    and the Python workers have warmed up; when N >= 200) and at the last update N.
    The issue's targets (at ``--updates 1000``): per-update time after 1,000
    updates at most 1.2x the time after 10, stored state flat.

    Stages (see ``spark_differential/incremental/``): both queries run in stage 2
    (per-operator traces; the query runs on the changes only, so an update's
    kernels see the changes and the trace rows of the keys they touch; ``bfs``'s
    ``dd_iterate`` keeps per-iteration traces and runs inside one task,
    ``spark_differential/incremental/loop.py``).  Stage 1 re-runs the query over the
    compacted inputs at each update (its cost follows their live size).
    ``--stage compare`` runs each workload twice on the same data, as ``<name>-s2``
    (the stage the view picks) and ``<name>-s1`` (``stage=1`` forced), in the same
    session, interleaved (update ``i`` of one view, then of the other: both share
    the JVM's warm-up), the one-shot recomputation after the ``-s2`` view's updates
    only; ``--stage 1`` or ``2`` runs it in that stage only; ``auto`` (the default)
    in the stage the view picks.

    python benchmarks/incremental.py --updates 20
    python benchmarks/incremental.py --workload view --stage compare --updates 60 --oneshot-every 30
    python benchmarks/incremental.py --updates 1000 --oneshot-every 100 --workload view \
        --progress view.jsonl --json view.json
    python benchmarks/incremental.py --summarize view.jsonl     # the tables of a run, also of one cut short
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
import pandas as pd
from common import TimeLimitExceeded, base_parser, conf_arg, in_process, log, make_spark, spark_conf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

from pyspark.sql import DataFrame  # noqa: E402

import spark_differential as sd  # noqa: E402
from spark_differential.algorithms import bfs  # noqa: E402
from spark_differential.core.jobs import count_jobs  # noqa: E402


def per_region(orders: DataFrame, customers: DataFrame) -> DataFrame:
    return orders.dd_join(customers, on="customer_id").dd_count(by="region")


def per_region_keys(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """``per_region`` counting the join's rows by their key column alone (``--count-keys-only``): the
    count's input then consolidates to one row per region and time (its stage-2 trace, at each merge)."""
    return orders.dd_join(customers, on="customer_id").select("region", "time", "diff").dd_count(by="region")


def bfs_view(roots: DataFrame, edges: DataFrame) -> DataFrame:
    """Seed 001's BFS distances from ``roots``: the library's ``algorithms.bfs`` (the view's inputs by name)."""
    return bfs(edges, roots)


class ViewWorkload:
    """Orders and customers with their changes, one batch of changes per time."""

    query = staticmethod(per_region)

    def __init__(self, customers: int, orders: int, changes: int, seed: int, keys_only: bool = False) -> None:
        if keys_only:
            self.query = per_region_keys
        self.rng = np.random.default_rng(seed)
        self.changes = changes
        self.regions = 50
        self.cust_region = self.rng.integers(0, self.regions, customers)
        self.order_cust = self.rng.integers(0, customers, orders)
        self.order_amount = self.rng.integers(1, 1000, orders)
        self.live = np.ones(orders, dtype=bool)

    def initial(self) -> dict[str, pd.DataFrame]:
        n = len(self.order_cust)
        orders = pd.DataFrame({"order_id": np.arange(n), "customer_id": self.order_cust, "amount": self.order_amount,
                               "time": 0, "diff": 1})
        customers = pd.DataFrame({"customer_id": np.arange(len(self.cust_region)),
                                  "region": [f"r{r}" for r in self.cust_region], "time": 0, "diff": 1})
        return {"orders": orders, "customers": customers}

    def step(self, t: int) -> dict[str, pd.DataFrame]:
        rng = self.rng
        n_cust = self.changes // 10
        n_ord = self.changes - n_cust
        o_rows: list[tuple[int, int, int, int]] = []
        live_ids = np.flatnonzero(self.live)
        kinds = rng.choice(3, n_ord, p=[0.6, 0.2, 0.2])
        picked = rng.choice(live_ids, n_ord, replace=False)
        for kind, oid in zip(kinds, picked):
            if kind == 0:  # amount update
                new = int(rng.integers(1, 1000))
                o_rows += [(oid, self.order_cust[oid], self.order_amount[oid], -1), (oid, self.order_cust[oid], new, 1)]
                self.order_amount[oid] = new
            elif kind == 1:  # insert
                nid = len(self.order_cust)
                cust, amount = int(rng.integers(0, len(self.cust_region))), int(rng.integers(1, 1000))
                self.order_cust = np.append(self.order_cust, cust)
                self.order_amount = np.append(self.order_amount, amount)
                self.live = np.append(self.live, True)
                o_rows.append((nid, cust, amount, 1))
            else:  # delete
                o_rows.append((oid, self.order_cust[oid], self.order_amount[oid], -1))
                self.live[oid] = False
        c_rows = []
        for cid in rng.choice(len(self.cust_region), n_cust, replace=False):
            new = int(rng.integers(0, self.regions))
            c_rows += [(cid, f"r{self.cust_region[cid]}", -1), (cid, f"r{new}", 1)]
            self.cust_region[cid] = new
        orders = pd.DataFrame(o_rows, columns=["order_id", "customer_id", "amount", "diff"]).assign(time=t)
        customers = pd.DataFrame(c_rows, columns=["customer_id", "region", "diff"]).assign(time=t)
        return {"orders": orders[["order_id", "customer_id", "amount", "time", "diff"]],
                "customers": customers[["customer_id", "region", "time", "diff"]]}


class BfsWorkload:
    """Seed 001's sliding window of edges; the root is node 0."""

    query = staticmethod(bfs_view)

    def __init__(self, nodes: int, edges: int, changes: int, updates: int, seed: int) -> None:
        from _workload import edge_updates

        ups = edge_updates(nodes, edges, changes * updates, batch=changes, seed=seed)
        self.by_time = dict(tuple(ups.groupby("time")))

    def initial(self) -> dict[str, pd.DataFrame]:
        return {"roots": pd.DataFrame({"node": [0], "time": [0], "diff": [1]}),
                "edges": self.by_time[0]}

    def step(self, t: int) -> dict[str, pd.DataFrame]:
        return {"edges": self.by_time[t]}


def _pathway_view_child(customers: int, orders: int, changes: int, updates: int, seed: int, conn: Any) -> None:
    """Pathway's own incremental update of the ``view`` workload's query (in a process of its own):
    one ``pw.io.python`` subject sends update ``i``'s changes (the same workload, same seed),
    commits, and waits until the output's time ends (``on_time_end``); the seconds of each update
    and the final count per region are sent back."""
    import threading

    import pathway as pw

    work = ViewWorkload(customers, orders, changes, seed)

    class Change(pw.Schema):
        kind: int  # 0: an order, 1: a customer
        order_id: int
        customer_id: int
        amount: int
        region: str

    done = threading.Event()
    seconds: list[float | None] = []

    class Subject(pw.io.python.ConnectorSubject):
        _deletions_enabled = True  # retractions are sent as deletions of the rows sent before

        def run(self) -> None:
            for i in range(updates + 1):
                batch = work.initial() if i == 0 else work.step(i)
                started = time.perf_counter()
                done.clear()
                o, c = batch["orders"], batch["customers"]
                for oid, cid, amount, d in zip(o.order_id.tolist(), o.customer_id.tolist(), o.amount.tolist(),
                                               o["diff"].tolist()):
                    (self.next if d > 0 else self.delete)(kind=0, order_id=oid, customer_id=cid, amount=amount,
                                                          region="")
                for cid, region, d in zip(c.customer_id.tolist(), c.region.tolist(), c["diff"].tolist()):
                    (self.next if d > 0 else self.delete)(kind=1, order_id=-1, customer_id=cid, amount=0,
                                                          region=region)
                self.commit()
                seconds.append(time.perf_counter() - started if done.wait(600) else None)

    ch = pw.io.python.read(Subject(), schema=Change, autocommit_duration_ms=None)
    od, cu = ch.filter(ch.kind == 0), ch.filter(ch.kind == 1)
    joined = od.join(cu, od.customer_id == cu.customer_id).select(region=pw.right.region)
    res = joined.groupby(joined.region).reduce(joined.region, count=pw.reducers.count())
    counts: dict[str, int] = {}

    def on_change(key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        counts[row["region"]] = counts.get(row["region"], 0) + (row["count"] if is_addition else -row["count"])

    pw.io.subscribe(res, on_change=on_change, on_time_end=lambda t: done.set())
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    conn.send({"seconds": seconds, "counts": {k: v for k, v in counts.items() if v}})


def pathway_view(customers: int, orders: int, changes: int, updates: int, seed: int,
                 limit: float) -> dict[str, Any] | None:
    """:func:`_pathway_view_child` in a spawned process: its result, ``{"error": ...}`` past
    ``limit`` seconds, or ``None`` where Pathway is not installed."""
    try:
        import pathway  # noqa: F401
    except ImportError:
        return None
    try:
        out: dict[str, Any] = in_process(_pathway_view_child, (customers, orders, changes, updates, seed), limit)
    except TimeLimitExceeded:
        return {"error": f"no answer within {limit:.0f} s"}
    return out


def live_counts(work: ViewWorkload) -> dict[str, int]:
    """The count per region of the workload's current orders (its state after the updates made)."""
    regions = work.cust_region[work.order_cust[work.live]]
    values, counts = np.unique(regions, return_counts=True)
    return {f"r{v}": int(c) for v, c in zip(values, counts)}


SCHEMAS = {
    "orders": "order_id long, customer_id long, amount long, time long, diff long",
    "customers": "customer_id long, region string, time long, diff long",
    "roots": "node long, time long, diff long",
    "edges": "src long, dst long, time long, diff long",
}


def tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system, with waited-for children) used so far by this process and each of
    its descendants: the JVM and the Python workers in local mode.

    Read from /proc (Linux); on other systems, this process alone."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    if not os.path.isdir("/proc/self"):
        return {os.getpid(): time.process_time()}
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15) (0-based here)
        stats[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
        todo += children.get(pid, [])
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float | None:
    """CPU seconds the process tree used between two :func:`tree_cpu` readings; None when a process
    of the first reading has ended since (what it used after the first reading may be lost, e.g.
    when an orphaned worker is reaped outside the tree), so no reading is reported rather than a wrong one."""
    if any(pid not in after for pid in before):
        return None
    return sum(after.values()) - sum(before.values())


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def manifest(path: str) -> dict[str, Any]:
    """The newest committed manifest of the view stored under ``path``."""
    manifests = sorted(f for f in os.listdir(os.path.join(path, "_manifests")) if f.endswith(".json") and f[0] == "v")
    with open(os.path.join(path, "_manifests", manifests[-1]), encoding="utf-8") as fh:
        return json.load(fh)


def state_size(path: str) -> int:
    """Bytes of the files the newest committed version names: stage 1, its inputs and the output so far;
    stage 2, its operators' traces and the pending output; both, the last output."""
    files = manifest(path)["files"]
    named = [files["output"], *files["emitted"], *[p for fs in files["inputs"].values() for p in fs],
             *[p for fs in files.get("traces", {}).values() for p in fs], *files.get("pending", [])]
    return sum(dir_size(os.path.join(path, p)) for p in set(named))


def fmt_cpu(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def run(spark: Any, name: str, work: Any, updates: int, oneshot_every: int, root: str,
        progress: str | None = None, stage: int | None = None) -> list[dict[str, Any]]:
    """One workload's updates (see :func:`run_interleaved`)."""
    return run_interleaved(spark, [(name, work, stage)], updates, oneshot_every, root, progress)[name]


def run_interleaved(spark: Any, specs: list[tuple[str, Any, int | None]], updates: int, oneshot_every: int, root: str,
                    progress: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Update ``i`` of every view in ``specs`` (name, workload, stage), then update ``i + 1`` of every
    view, ...: views compared in one run share the JVM's warm-up (its JIT compiler keeps making the
    driver's planning cheaper for hundreds of updates), so neither gets a warmer JVM by running
    second.  The one-shot recomputation follows the first view's updates only."""
    views = {}
    for name, work, stage in specs:
        path = os.path.join(root, name, "state")
        views[name] = (path, os.path.join(root, name, "log"), work,
                       sd.incremental(path, work.query, spark=spark, stage=stage))
    out: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in specs}
    for i in range(updates + 1):
        for k, (name, _, _) in enumerate(specs):
            path, logdir, work, view = views[name]
            batch = work.initial() if i == 0 else work.step(i)
            dfs = {n: spark.createDataFrame(pdf, SCHEMAS[n]) for n, pdf in batch.items()}
            for n, pdf in batch.items():  # the change log so far, for the one-shot runs
                os.makedirs(os.path.join(logdir, n), exist_ok=True)
                pdf.to_parquet(os.path.join(logdir, n, f"part-{i:06d}.parquet"), index=False)
            c0 = tree_cpu()
            with count_jobs(spark) as jobs:
                res = view.update(upto=i + 1, batch_id=i, **dfs)
                n_out = len(res.collect())  # reading what the update returned: one scan
            # the block's own wall time, not the counter's queries of Spark's status tracker once it ends
            took, cpu = jobs.seconds, cpu_between(c0, tree_cpu())
            # the peer the issue sets an update against: one plain Spark job in the same session (the update's
            # first input counted: groupBy().count().collect())
            t0 = time.perf_counter()
            dfs[next(iter(dfs))].groupBy().count().collect()
            plain = time.perf_counter() - t0
            row: dict[str, Any] = {"update": i, "seconds": took, "cpu_seconds": cpu, "jobs": jobs.jobs,
                                   "tasks": jobs.tasks, "output_rows": n_out, "state_bytes": state_size(path),
                                   "stage": manifest(path)["stage"], "plain_seconds": plain}
            if k == 0 and i > 0 and oneshot_every and (i % oneshot_every == 0 or i == updates or i == 10):
                inputs = {n: spark.read.schema(SCHEMAS[n]).parquet(os.path.join(logdir, n)) for n in SCHEMAS
                          if os.path.isdir(os.path.join(logdir, n))}
                c0, t0 = tree_cpu(), time.perf_counter()
                with count_jobs(spark) as jobs:
                    work.query(**inputs).write.format("noop").mode("overwrite").save()
                row["oneshot_seconds"] = time.perf_counter() - t0
                row["oneshot_cpu_seconds"] = cpu_between(c0, tree_cpu())
                row["oneshot_jobs"] = jobs.jobs
            out[name].append(row)
            log(f"{name} (stage {row['stage']}) update {i}: {took:.2f}s ({fmt_cpu(cpu)} CPU s, {row['jobs']} jobs; "
                f"a plain job {plain:.2f}s), "
                f"{n_out} output rows, state {row['state_bytes'] / 1e6:.2f} MB"
                + (f"; one-shot {row['oneshot_seconds']:.2f}s ({fmt_cpu(row['oneshot_cpu_seconds'])} CPU s, "
                   f"{row['oneshot_jobs']} jobs)" if "oneshot_seconds" in row else ""))
            if progress:
                with open(progress, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"workload": name, **row}) + "\n")
    return out


def valid(cpu: float | None) -> bool:
    """A CPU reading to use: present and not negative (the first version of this script subtracted
    totals even when a process of the tree had ended in between, which can give negative values)."""
    return cpu is not None and cpu >= 0


def summarize(name: str, rows: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """Means over ``window`` updates ending at update 10 and at the last one (N), wall and CPU seconds.

    With ``window`` = ``compact_every`` (8, the default of both) each window holds exactly one
    update that merges the state, so the two means compare like with like."""
    last = rows[-1]["update"]
    early = [r for r in rows if 10 - window < r["update"] <= 10]
    late = [r for r in rows if last - window < r["update"] <= last]

    def mean(rs: list[dict[str, Any]], key: str) -> float | None:
        vals = [r[key] for r in rs if r.get(key) is not None and r[key] >= 0]
        return float(np.mean(vals)) if vals else None

    one10 = next((r for r in rows if r["update"] == 10 and "oneshot_seconds" in r), None)
    one_n = rows[-1] if "oneshot_seconds" in rows[-1] else None
    s: dict[str, Any] = {
        "workload": name,
        "updates": last,
        "window": window,
        "per_update_at_10": mean(early, "seconds"),
        "per_update_at_N": mean(late, "seconds"),
        "cpu_per_update_at_10": mean(early, "cpu_seconds"),
        "cpu_per_update_at_N": mean(late, "cpu_seconds"),
        "plain_job_at_10": mean(early, "plain_seconds"),
        "plain_job_at_N": mean(late, "plain_seconds"),
        "jobs_per_update_at_10": mean(early, "jobs"),
        "jobs_per_update_at_N": mean(late, "jobs"),
        "state_bytes_at_10": mean(early, "state_bytes"),
        "state_bytes_at_N": mean(late, "state_bytes"),
        "state_bytes_max_after_10": max(r["state_bytes"] for r in rows if r["update"] >= 10),
        "oneshot_at_10": one10 and one10["oneshot_seconds"],
        "oneshot_at_N": one_n and one_n["oneshot_seconds"],
        "oneshot_cpu_at_10": one10["oneshot_cpu_seconds"] if one10 and valid(one10["oneshot_cpu_seconds"]) else None,
        "oneshot_cpu_at_N": one_n["oneshot_cpu_seconds"] if one_n and valid(one_n["oneshot_cpu_seconds"]) else None,
    }
    for what, at10, at_n in (("", "per_update_at_10", "per_update_at_N"), ("cpu_", "cpu_per_update_at_10", "cpu_per_update_at_N")):
        if s[at10] and s[at_n]:
            s[f"{what}ratio_N_vs_10"] = s[at_n] / s[at10]
    if last >= 200:  # after warm-up (the JVM's JIT, Python workers): the window ending at update 100
        mid = [r for r in rows if 100 - window < r["update"] <= 100]
        s["per_update_at_100"], s["cpu_per_update_at_100"] = mean(mid, "seconds"), mean(mid, "cpu_seconds")
        if s["per_update_at_100"] and s["per_update_at_N"]:
            s["ratio_N_vs_100"] = s["per_update_at_N"] / s["per_update_at_100"]
            s["cpu_ratio_N_vs_100"] = s["cpu_per_update_at_N"] / s["cpu_per_update_at_100"]
    if s["plain_job_at_N"] and s["per_update_at_N"]:
        s["update_vs_plain_at_N"] = s["per_update_at_N"] / s["plain_job_at_N"]
    if one_n:
        s["oneshot_vs_update_at_N"] = one_n["oneshot_seconds"] / one_n["seconds"]
        if valid(one_n.get("oneshot_cpu_seconds")) and valid(one_n.get("cpu_seconds")):
            s["oneshot_vs_update_cpu_at_N"] = one_n["oneshot_cpu_seconds"] / one_n["cpu_seconds"]
    return s


def pathway_summary(peer: dict[str, Any], ours: dict[str, Any], want: dict[str, int], window: int) -> None:
    """Pathway's per-update seconds over the summary's windows, beside ours (into ``ours``), printed."""
    if "error" in peer:
        ours["pathway_error"] = peer["error"]
        log(f"Pathway: {peer['error']}")
        return
    secs = peer["seconds"]
    last = len(secs) - 1

    def mean(lo: int, hi: int) -> float | None:
        vals = [x for i, x in enumerate(secs) if lo < i <= hi and x is not None]
        return float(np.mean(vals)) if vals else None

    ours["pathway_at_10"], ours["pathway_at_N"] = mean(10 - window, 10), mean(last - window, last)
    ours["pathway_first"] = secs[0]
    ours["pathway_exact"] = peer["counts"] == want
    if ours["pathway_at_N"] and ours.get("per_update_at_N"):
        ours["ours_vs_pathway_at_N"] = ours["per_update_at_N"] / ours["pathway_at_N"]
    log(f"Pathway (pw.io.python, one commit an update, same changes): first update {secs[0]:.3f}s, per update at 10 "
        f"{ours['pathway_at_10'] or 0:.4f}s, at N {ours['pathway_at_N'] or 0:.4f}s; ours / Pathway at N "
        f"{ours.get('ours_vs_pathway_at_N', 0):.1f}x; its final counts per region equal the workload's: "
        f"{ours['pathway_exact']}")


def table(summaries: list[dict[str, Any]]) -> str:
    """The summaries as a Markdown table (wall and CPU seconds per update at 10 and at N, state, one-shot)."""

    def f(x: Any, fmt: str, unit: str = "") -> str:
        return "-" if x is None else format(x, fmt) + unit

    lines = [
        "| workload | N | update@10 wall / CPU | update@100 wall / CPU | update@N wall / CPU | N/10 wall / CPU "
        "| N/100 wall / CPU | jobs@10 / @N | plain job@N (update ÷ plain) "
        "| state@10 / @N (max after 10) | one-shot@N wall / CPU | one-shot ÷ update@N wall / CPU "
        "| Pathway update@N (ours ÷ Pathway) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s['workload']} | {s['updates']} "
            f"| {f(s['per_update_at_10'], '.2f', ' s')} / {f(s['cpu_per_update_at_10'], '.2f', ' s')} "
            f"| {f(s.get('per_update_at_100'), '.2f', ' s')} / {f(s.get('cpu_per_update_at_100'), '.2f', ' s')} "
            f"| {f(s['per_update_at_N'], '.2f', ' s')} / {f(s['cpu_per_update_at_N'], '.2f', ' s')} "
            f"| {f(s.get('ratio_N_vs_10'), '.2f')} / {f(s.get('cpu_ratio_N_vs_10'), '.2f')} "
            f"| {f(s.get('ratio_N_vs_100'), '.2f')} / {f(s.get('cpu_ratio_N_vs_100'), '.2f')} "
            f"| {f(s['jobs_per_update_at_10'], '.1f')} / {f(s['jobs_per_update_at_N'], '.1f')} "
            f"| {f(s.get('plain_job_at_N'), '.2f', ' s')} ({f(s.get('update_vs_plain_at_N'), '.2f', 'x')}) "
            f"| {f(s['state_bytes_at_10'] / 1e6, '.2f')} / {f(s['state_bytes_at_N'] / 1e6, '.2f')} "
            f"({f(s['state_bytes_max_after_10'] / 1e6, '.2f')}) MB "
            f"| {f(s['oneshot_at_N'], '.2f', ' s')} / {f(s['oneshot_cpu_at_N'], '.2f', ' s')} "
            f"| {f(s.get('oneshot_vs_update_at_N'), '.2f', 'x')} / {f(s.get('oneshot_vs_update_cpu_at_N'), '.2f', 'x')} "
            f"| {f(s.get('pathway_at_N'), '.3f', ' s')} ({f(s.get('ours_vs_pathway_at_N'), '.1f', 'x')}) |"
        )
    return "\n".join(lines)


def oneshot_table(by: dict[str, list[dict[str, Any]]]) -> str:
    """Every update that was followed by a one-shot recomputation: both, wall and CPU seconds, and the ratio."""
    lines = ["| workload | update | update wall / CPU | one-shot wall / CPU | one-shot ÷ update wall / CPU |",
             "|---|---|---|---|---|"]
    for name, rows in by.items():
        for r in rows:
            if "oneshot_seconds" in r:
                cu, co = r.get("cpu_seconds"), r.get("oneshot_cpu_seconds")
                cu, co = (cu if valid(cu) else None), (co if valid(co) else None)
                ratio = f"{co / cu:.2f}x" if cu and co is not None else "-"
                lines.append(
                    f"| {name} | {r['update']} | {r['seconds']:.2f} s / {fmt_cpu(cu)} s "
                    f"| {r['oneshot_seconds']:.2f} s / {fmt_cpu(co)} s "
                    f"| {r['oneshot_seconds'] / r['seconds']:.2f}x / {ratio} |"
                )
    return "\n".join(lines)


def main() -> int:
    ap: argparse.ArgumentParser = conf_arg(base_parser(__doc__.splitlines()[0]))
    ap.add_argument("--updates", type=int, default=20, help="successive updates after the initial one (issue: 1000)")
    ap.add_argument("--changes", type=int, default=1000, help="changes per update (default 1000)")
    ap.add_argument("--workload", choices=["view", "bfs", "both"], default="both")
    ap.add_argument("--customers", type=int, default=10_000)
    ap.add_argument("--orders", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--oneshot-every", type=int, default=1, help="recompute one-shot after every k-th update (0: never)")
    ap.add_argument("--stage", choices=["auto", "compare", "1", "2"], default="auto",
                    help="the workloads' stage: auto (the one the view picks: 2), compare (stage 2, then stage 1 "
                    "on the same data, interleaved), 1 or 2")
    ap.add_argument("--count-keys-only", action="store_true",
                    help="the view counts the joined rows' region column alone (select before dd_count)")
    ap.add_argument("--no-pathway", action="store_true",
                    help="skip Pathway's incremental update of the view workload (the peer, run after ours)")
    ap.add_argument("--window", type=int, default=8, help="updates averaged at 10 and at N (default 8: one merge each)")
    ap.add_argument("--progress", metavar="PATH", help="append each update's measurements to PATH as a JSON line")
    ap.add_argument("--summarize", metavar="PATH", help="only summarize the JSON lines of an earlier --progress file "
                    "(e.g. of a run cut short) and print the tables")
    args = ap.parse_args()
    if args.summarize:
        by: dict[str, list[dict[str, Any]]] = {}
        with open(args.summarize, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    by.setdefault(r.pop("workload"), []).append(r)
        print(table([summarize(name, rows, args.window) for name, rows in by.items()]))
        print()
        print(oneshot_table(by))
        return 0
    if args.updates < 10:
        ap.error("--updates must be at least 10 (the time after 10 updates is the reference)")
    spark = make_spark(args, **spark_conf(ap, args, **{"spark.sql.shuffle.partitions": "4"}))
    root = args.data_dir or tempfile.mkdtemp(prefix="sd-incremental-")
    summaries = []
    all_rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for workload in ("view", "bfs"):
            if args.workload not in (workload, "both"):
                continue
            stages: list[tuple[str, int | None]] = {
                "compare": [(f"{workload}-s2", None), (f"{workload}-s1", 1)], "auto": [(workload, None)],
                "1": [(f"{workload}-s1", 1)], "2": [(f"{workload}-s2", 2)],
            }[args.stage]
            specs = [(name, ViewWorkload(args.customers, args.orders, args.changes, args.seed, args.count_keys_only)
                      if workload == "view" else BfsWorkload(args.nodes, args.edges, args.changes, args.updates, args.seed),
                      stage) for name, stage in stages]
            for name, rows in run_interleaved(spark, specs, args.updates, args.oneshot_every, root,
                                              args.progress).items():
                summaries.append(summarize(name, rows, args.window))
                all_rows[name] = rows
            if workload == "view" and not args.no_pathway:
                peer = pathway_view(args.customers, args.orders, args.changes, args.updates, args.seed,
                                    args.time_limit or 1800.0)
                if peer is not None:
                    pathway_summary(peer, summaries[-1], live_counts(specs[0][1]), args.window)
    finally:
        if not args.keep_data and not args.data_dir:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(table(summaries))
    print()
    print(oneshot_table(all_rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summaries": summaries, "args": vars(args), "rows": all_rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
