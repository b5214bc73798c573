"""Where a BFS run inside one task spends its time, and what its answer costs the JVM.

Four measurements, each printed as it is made (``--json`` writes them all):

``phases``
    ``spark_differential.algorithms.bfs`` on the workload of ``benchmarks/bfs.py``
    (``--changes``, ``--batch`` changes per distinct time), ``--repeat`` runs after one
    warm run, each as ``bfs(...).count()``: its seconds, its Spark jobs, the task's own
    phases from the INFO log (reading its input, iterating) and the CPU seconds the JVM
    and the Python workers used during the run (``/proc`` through psutil).
``status``
    The JVM's side of a loop task's answer alone: a ``mapInArrow`` yielding ``--rows``
    rows of four int64 columns, checkpointed (``localCheckpoint``) three ways, in turns,
    with a JVM GC before each: ``seven`` (seven status columns null on every row, an
    observed metric of seven ``max`` and a ``collect_list``, a filter: the task's output
    before this change), ``one`` (one string status column, a ``max`` and a
    ``collect_list``, a filter and a projection: the task's output now), ``none`` (the
    four columns alone).  Median and least seconds over ``--repeat`` rounds.
``consolidate``
    ``native.consolidated`` of ``--rows`` random rows of three int64 columns: through
    the sort of packed codes (now) and through DuckDB (``key_sorted`` disabled), best of 7.
``answer``
    The JVM's side of a loop task's answer, the ways a task has handed it over: a
    ``mapInArrow`` yielding ``--rows`` rows of four int64 columns (``node``, ``dist``,
    sorted; ``t``, ``diff``), checkpointed (``localCheckpoint``) and then counted, in turns,
    the last four answers of each kind kept alive (as results a user holds):
    ``observed`` (one string status column null on every row, an observed ``max`` and
    ``collect_list``, a filter and a projection: the task's output before the
    accumulator), ``rows`` (the four columns alone), ``runs`` (one row per run of rows
    with equal ``node`` and ``dist``, their ``t`` and ``diff`` in a list column,
    exploded when read: the task's output now).  Median and least seconds of the
    checkpoint and of the count after it, and the JVM's CPU seconds (``/proc``) over
    both, of ``--repeat`` rounds after two warm ones.

::

    PYTHONPATH=. .bench-venv/bin/python benchmarks/loop_answer.py --changes 100000 --batch 1
    PYTHONPATH=. .bench-venv/bin/python benchmarks/loop_answer.py --changes 100000 --batch 1000 --only phases
    PYTHONPATH=. .bench-venv/bin/python benchmarks/loop_answer.py --only answer --repeat 8
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, HERE)

from _workload import edge_updates  # noqa: E402
from common import base_parser, bfs_graph_args, conf_arg, log, make_spark, spark_conf  # noqa: E402


class _Phases(logging.Handler):
    """The in-task loop's INFO line (its phases), kept."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "inside one task" in msg:
            self.lines.append(msg)


def _cpu(children: Any) -> dict[str, float]:
    """CPU seconds (user + system) of the JVM and of the Python workers under this process."""
    out = {"jvm": 0.0, "python": 0.0}
    for p in children():
        try:
            t = p.cpu_times()
            out["jvm" if p.name() == "java" else "python"] += t.user + t.system
        except Exception:  # noqa: BLE001 - a worker that ended meanwhile
            pass
    return out


def phases(spark: Any, args: Any) -> list[dict[str, Any]]:
    import psutil

    import spark_differential as sd
    from spark_differential.algorithms import bfs
    from spark_differential.core.jobs import count_jobs

    me = psutil.Process()
    updates = edge_updates(args.nodes, args.edges, int(args.changes), args.batch, args.seed)
    g = sd.collection(spark.createDataFrame(updates)).repartition(4).localCheckpoint()
    g.count()
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    handler = _Phases()
    logging.getLogger("spark_differential").addHandler(handler)
    logging.getLogger("spark_differential").setLevel(logging.INFO)
    rows = []
    try:
        bfs(g, roots, max_iterations=100_000).count()  # warm
        for r in range(args.repeat):
            handler.lines.clear()
            before = _cpu(lambda: me.children(recursive=True))
            started = time.perf_counter()
            with count_jobs(spark) as jobs:
                n = bfs(g, roots, max_iterations=100_000).count()
            seconds = time.perf_counter() - started
            after = _cpu(lambda: me.children(recursive=True))
            row = {"run": r + 1, "seconds": round(seconds, 3), "answer_rows": n, "jobs": str(jobs),
                   "cpu_jvm": round(after["jvm"] - before["jvm"], 2),
                   "cpu_python": round(after["python"] - before["python"], 2), "task": " | ".join(handler.lines)}
            log(f"phases {args.changes:,} changes, batch {args.batch}, run {r + 1}: {seconds:.2f} s, {n:,} rows, "
                f"CPU JVM {row['cpu_jvm']} s, Python {row['cpu_python']} s; {row['task']}")
            rows.append(row)
    finally:
        logging.getLogger("spark_differential").removeHandler(handler)
    return rows


def status(spark: Any, args: Any) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    n = args.rows
    seven = [pa.int32(), pa.int64(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.bool_()]

    def produce(kind: str) -> Any:
        def f(batches: Any) -> Any:
            for _ in batches:
                pass
            i = np.arange(n, dtype=np.int64)
            t = pa.table({"node": i % 1000, "dist": i % 30, "t": i, "diff": np.ones(n, dtype=np.int64)})
            if kind == "seven":
                for k, ty in enumerate(seven):
                    t = t.append_column(f"s{k}", pa.nulls(n, ty))
            elif kind == "one":
                t = t.append_column("meta", pa.nulls(n, pa.string()))
            yield from t.to_batches()
        return f

    four = "node long, dist long, t long, diff long"
    schemas = {"seven": four + ", s0 int, s1 long, s2 long, s3 string, s4 long, s5 string, s6 boolean",
               "one": four + ", meta string", "none": four}
    answer = "struct(node, dist, t, diff)"
    times: dict[str, list[float]] = {k: [] for k in schemas}
    for r in range(args.repeat + 1):
        for kind, schema in schemas.items():
            df = spark.range(1).coalesce(1).mapInArrow(produce(kind), schema)
            if kind == "seven":
                maxes = ", ".join(f"'{c}', max(s{c})" for c in range(7))
                df = df.observe(Observation(), F.expr(f"named_struct({maxes}) AS m"), F.expr(
                    f"collect_list(IF(s6 AND s0 IS NULL, {answer}, NULL)) AS rows")).where("s6 IS NULL")
            elif kind == "one":
                df = df.observe(Observation(), F.expr("max(meta) AS m"), F.expr(
                    f"collect_list(IF(meta = '', {answer}, NULL)) AS rows")).where("meta IS NULL").select(
                    "node", "dist", "t", "diff")
            spark.sparkContext._jvm.System.gc()
            started = time.perf_counter()
            df.localCheckpoint(eager=True)
            if r:  # the first round warms
                times[kind].append(time.perf_counter() - started)
    out = {k: {"median": round(statistics.median(v), 3), "least": round(min(v), 3)} for k, v in times.items()}
    log(f"status columns, {n:,} rows checkpointed (median / least of {args.repeat}): "
        + ", ".join(f"{k} {v['median']:.3f} / {v['least']:.3f} s" for k, v in out.items()))
    return out


def answer(spark: Any, args: Any) -> dict[str, Any]:
    import numpy as np
    import psutil
    import pyarrow as pa
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    jvm = next(p for p in psutil.Process().children(recursive=True) if p.name() == "java")

    def jvm_cpu() -> float:
        t = jvm.cpu_times()
        return t.user + t.system

    n = args.rows
    rng = np.random.default_rng(args.seed)
    node, dist = rng.integers(0, 1000, n), rng.integers(0, 30, n)
    order = np.lexsort((dist, node))
    node, dist = node[order], dist[order]
    rows = pa.table({"node": node, "dist": dist, "t": rng.integers(0, 100_000, n), "diff": rng.choice([-1, 1], n)})
    key = node * 64 + dist
    heads = np.nonzero(np.r_[True, key[1:] != key[:-1]])[0]
    td = pa.StructArray.from_arrays([rows.column("t").combine_chunks(), rows.column("diff").combine_chunks()],
                                    names=["t", "diff"])
    runs = pa.table({"node": node[heads], "dist": dist[heads],
                     "td": pa.ListArray.from_arrays(pa.array(np.append(heads, n).astype(np.int32)), td)})
    tables = {"observed": rows.append_column("meta", pa.nulls(n, pa.string())), "rows": rows, "runs": runs}
    four = "node long, dist long, t long, diff long"
    schemas = {"observed": four + ", meta string", "rows": four,
               "runs": "node long, dist long, td array<struct<t: long, diff: long>>"}

    def produce(kind: str) -> Any:
        def f(batches: Any) -> Any:
            for _ in batches:
                pass
            yield from tables[kind].to_batches(max_chunksize=1 << 18)
        return f

    got: dict[str, tuple[list[float], list[float], list[float]]] = {k: ([], [], []) for k in schemas}
    held: list[Any] = []
    for r in range(args.repeat + 2):
        for kind, schema in schemas.items():
            df = spark.range(1).coalesce(1).mapInArrow(produce(kind), schema)
            if kind == "observed":
                df = df.observe(Observation(), F.expr("max(meta) AS m"), F.expr(
                    "collect_list(IF(meta = '', struct(node, dist, t, diff), NULL)) AS rows")).where(
                    "meta IS NULL").select("node", "dist", "t", "diff")
            cpu, started = jvm_cpu(), time.perf_counter()
            kept = df.localCheckpoint(eager=True)
            if kind == "runs":
                kept = kept.select("node", "dist", F.inline("td"))
            checkpointed = time.perf_counter()
            assert kept.count() == n
            counted = time.perf_counter()
            held = [*held[-(4 * len(schemas) - 1):], kept]
            if r >= 2:  # two warm rounds
                got[kind][0].append(checkpointed - started)
                got[kind][1].append(counted - checkpointed)
                got[kind][2].append(jvm_cpu() - cpu)
    out = {k: {"checkpoint_median": round(statistics.median(a), 3), "checkpoint_least": round(min(a), 3),
               "count_median": round(statistics.median(b), 3), "jvm_cpu_median": round(statistics.median(c), 3)}
           for k, (a, b, c) in got.items()}
    log(f"answer of {n:,} rows checkpointed, then counted (median of {args.repeat}): " + "; ".join(
        f"{k} {v['checkpoint_median']:.3f} s (least {v['checkpoint_least']:.3f}) + count {v['count_median']:.3f} s, "
        f"JVM CPU {v['jvm_cpu_median']:.2f} s" for k, v in out.items()))
    return out


def consolidate(args: Any) -> dict[str, float]:
    import numpy as np
    import pyarrow as pa

    from spark_differential.kernels import native

    rng = np.random.default_rng(args.seed)
    n = args.rows
    table = pa.table({"node": rng.integers(0, 1000, n), "dist": rng.integers(0, 30, n),
                      "t": rng.integers(0, 100_000, n), "diff": rng.choice([-1, 1], n)})
    cols = ["node", "dist", "t"]

    def best(fn: Any) -> float:
        runs = []
        for _ in range(7):
            started = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - started)
        return round(min(runs), 4)

    sort = best(lambda: native.consolidated(table, cols, "diff"))
    key_sorted = native.key_sorted
    native.key_sorted = lambda *a, **k: None  # type: ignore[assignment]
    try:
        duck = best(lambda: native.consolidated(table, cols, "diff"))
    finally:
        native.key_sorted = key_sorted
    log(f"consolidate {n:,} rows of three int64 columns: sort of packed codes {sort * 1e3:.1f} ms, "
        f"DuckDB {duck * 1e3:.1f} ms (best of 7)")
    return {"sort": sort, "duckdb": duck}


def main(argv: list[str] | None = None) -> int:
    ap = conf_arg(bfs_graph_args(base_parser(__doc__ or "")))
    ap.add_argument("--rows", type=int, default=762_695, help="rows of the status and consolidate measurements")
    ap.add_argument("--only", nargs="*", choices=["phases", "status", "consolidate", "answer"],
                    default=["phases", "status", "consolidate", "answer"])
    args = ap.parse_args(argv)
    args.repeat = args.repeat or 3
    results: dict[str, Any] = {}
    if "consolidate" in args.only:
        results["consolidate"] = consolidate(args)
    if {"phases", "status", "answer"} & set(args.only):
        spark = make_spark(args, **spark_conf(ap, args, **{"spark.sql.shuffle.partitions": "4"}))
        if "phases" in args.only:
            results["phases"] = phases(spark, args)
        if "status" in args.only:
            results["status"] = status(spark, args)
        if "answer" in args.only:
            results["answer"] = answer(spark, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
