"""Shared machinery for the benchmarks in this folder.

Every benchmark prints, for each case, what it measured (our operator), the peer
measured in the same run on the same data, and the ratio ``peer / ours`` (so a
ratio above 1 means spark_differential was faster).  The pieces here:

* :func:`base_parser` - the flags every benchmark has (``--quick``, ``--json``,
  ``--driver-memory``, ``--master``, ``--repeat``, ``--warmup``, ``--time-limit``,
  ``--data-dir``, ``--keep-data``);
* :func:`make_spark` - the local SparkSession (``spark_differential.session``,
  ``local[2]`` by default: two cores, as on the reference machine);
* :func:`measure` - wall-clock timing: ``warmup`` untimed runs, then the best of
  ``repeat`` timed runs, optionally sampling the peak RSS of the whole process
  tree (Python driver + JVM + Python workers) while it runs;
* :func:`spark_action` - the action that makes a Spark timing include the full
  computation (``df.write.format("noop")``: every row and column is produced and
  then discarded);
* :func:`run_spark_limited` / :func:`run_duckdb_limited` - run a peer under a time
  limit (the Spark job group / the DuckDB query is cancelled at the limit and the
  result reported as "> limit", never silently dropped);
* :func:`write_parquet` / :func:`spark_cached` - generated data is written once to
  Parquet and every engine reads the same file; Spark inputs are read, spread over
  ``2 x cores`` partitions, cached and counted *before* any timing, so timings
  exclude data generation and loading;
* :class:`Report` - collects rows, prints the table and writes ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_T0 = time.perf_counter()


# ---------------------------------------------------------------------------------
# output


def log(msg: str) -> None:
    """A progress line with the elapsed time since the benchmark started."""
    print(f"[{time.perf_counter() - _T0:8.1f}s] {msg}", flush=True)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 100:
        return f"{s:.2f} s"
    return f"{s:.0f} s"


def fmt_rate(n: float, s: float | None) -> str:
    if not s:
        return "-"
    r = n / s
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if r >= div:
            return f"{r / div:.2f}{unit}/s"
    return f"{r:.0f}/s"


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def fmt_count(n: float) -> str:
    if n >= 1e6 and n % 1e6 == 0:
        return f"{n / 1e6:.0f}M"
    if n >= 1e3 and n % 1e3 == 0:
        return f"{n / 1e3:.0f}k"
    return f"{n:,.0f}"


# ---------------------------------------------------------------------------------
# measurements


@dataclass
class Measurement:
    """One timed thing: best wall-clock seconds over the timed runs, or why there is none."""

    label: str
    seconds: float | None = None
    runs: list[float] = field(default_factory=list)
    status: str = "ok"  # "ok" | "timeout" | "error" | "skipped" | "extrapolated"
    detail: str = ""
    peak_rss: float | None = None  # bytes, whole process tree, when sampled
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "extrapolated") and self.seconds is not None

    def shown(self) -> str:
        if self.status == "timeout":
            return f"> {fmt_seconds(self.seconds)}"
        if self.status in ("error", "skipped"):
            return self.status
        s = fmt_seconds(self.seconds)
        return s + (" (extrap.)" if self.status == "extrapolated" else "")


class TimeLimitExceeded(Exception):
    """A peer was cancelled at the time limit."""


def in_process(target: Callable[..., None], args: Sequence[Any], limit: float | None) -> Any:
    """``target(*args, conn)`` in a spawned process (a peer engine kept apart from Spark): what it
    sends on ``conn``; :class:`TimeLimitExceeded` (the process killed) past ``limit`` seconds."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(*args, child))
    p.start()
    if not parent.poll(limit):
        p.kill()
        p.join()
        raise TimeLimitExceeded(limit)
    out = parent.recv()
    p.join()
    return out


class _Background:
    """A daemon thread running ``_run`` while the ``with`` block runs (when ``_wanted``)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _wanted(self) -> bool:
        return True

    def _run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> _Background:
        if self._wanted():
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class RSSSampler(_Background):
    """Samples the RSS of this process and all its descendants (JVM, Python workers).

    In local mode the JVM is a child of the Python driver and the Python workers are
    children of the JVM, so the process tree covers everything the benchmark uses.
    ``peak`` is the peak of the summed RSS; ``peaks`` the peak per kind of process
    (``driver``: this process, ``jvm``, ``python workers``: everything else).  With
    ``tree=False`` only this process is sampled.  Needs psutil (installed by
    benchmarks/setup_env.sh); without it everything stays None.
    """

    def __init__(self, interval: float = 0.1, tree: bool = True) -> None:
        self.interval = interval
        self.tree = tree
        self.peak: float | None = None
        self.peaks: dict[str, float] = {}
        super().__init__()
        try:
            import psutil

            self._proc: Any = psutil.Process(os.getpid())
        except Exception:  # pragma: no cover - psutil missing
            self._proc = None

    def _sample(self) -> None:
        kinds: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "python workers": 0.0}
        with contextlib.suppress(Exception):
            kinds["driver"] = float(self._proc.memory_info().rss)
        children: list[Any] = []
        if self.tree:
            with contextlib.suppress(Exception):
                children = self._proc.children(recursive=True)
        for p in children:
            with contextlib.suppress(Exception):
                kind = "jvm" if "java" in p.name().lower() else "python workers"
                kinds[kind] += p.memory_info().rss
        total = sum(kinds.values())
        self.peak = total if self.peak is None else max(self.peak, total)
        for k, v in kinds.items():
            self.peaks[k] = max(self.peaks.get(k, 0.0), v)

    def _wanted(self) -> bool:
        return self._proc is not None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)


def measure(
    label: str,
    fn: Callable[[], Any],
    repeat: int = 1,
    warmup: int = 0,
    rss: bool = False,
    quiet: bool = False,
    rss_tree: bool = True,
) -> Measurement:
    """Run ``fn`` ``warmup`` times untimed, then ``repeat`` times timed; keep the best.

    A :class:`TimeLimitExceeded` from ``fn`` ends the measurement with status
    ``timeout`` (seconds = the limit); any other exception with status ``error``.
    With ``rss`` the peak RSS over the timed runs is recorded (of the process tree,
    or of this process alone with ``rss_tree=False``).
    """
    m = Measurement(label)
    try:
        for i in range(warmup):
            if not quiet:
                log(f"{label}: warm-up {i + 1}/{warmup}")
            fn()
        sampler = RSSSampler(tree=rss_tree) if rss else None
        with sampler if sampler is not None else contextlib.nullcontext():
            for i in range(repeat):
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                m.runs.append(dt)
                if not quiet:
                    log(f"{label}: run {i + 1}/{repeat}: {fmt_seconds(dt)}")
        m.seconds = min(m.runs)
        if sampler is not None:
            m.peak_rss = sampler.peak
            m.extra["peak_rss_by_process"] = dict(sampler.peaks)
    except TimeLimitExceeded as e:
        m.status, m.seconds, m.detail = "timeout", float(e.args[0]) if e.args else None, "cancelled at the time limit"
        log(f"{label}: cancelled at the time limit ({fmt_seconds(m.seconds)})")
    except Exception as e:  # a failing peer is reported, not fatal
        m.status, m.detail = "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        log(f"{label}: FAILED: {m.detail}")
    return m


# ---------------------------------------------------------------------------------
# Spark


def bfs_graph_args(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The seed 001 BFS workload's options: graph size, changes, changes per distinct time."""
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=2000)
    ap.add_argument("--changes", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1, help="changes per distinct time (1: every change its own time)")
    return ap


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke test (< 2 minutes)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--master", default="local[2]", help="Spark master (default: local[2], two cores)")
    p.add_argument(
        "--driver-memory", default=os.environ.get("SD_DRIVER_MEMORY", "8g"), help="Spark driver memory (default: 8g)"
    )
    p.add_argument("--repeat", type=int, default=None, help="timed runs per measurement; the best is reported")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs before the timed ones")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds after which a slow peer is cancelled and reported as '> limit'",
    )
    p.add_argument("--duckdb-threads", type=int, default=None, help="threads for the DuckDB peer (default: cores)")
    p.add_argument("--duckdb-memory", default="8GB", help="memory limit of the DuckDB peer (default: 8GB)")
    p.add_argument("--data-dir", default=None, help="where generated Parquet inputs go (default: a temp dir)")
    p.add_argument("--keep-data", action="store_true", help="keep the generated inputs")
    p.add_argument("--seed", type=int, default=42, help="random seed of the data generator")
    return p


def cores_of(master: str) -> int:
    if master.startswith("local[") and master[6:-1].isdigit():
        return int(master[6:-1])
    return os.cpu_count() or 2


def conf_arg(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--conf KEY=VALUE`` (repeatable): Spark configuration, read by :func:`spark_conf`."""
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="Spark configuration (repeatable), e.g. spark_differential.iterate.chunkRows=4000")
    return ap


def spark_conf(ap: argparse.ArgumentParser, args: argparse.Namespace, **base: str) -> dict[str, str]:
    """``base`` with every ``--conf KEY=VALUE`` of :func:`conf_arg` over it."""
    conf = dict(base)
    for kv in args.conf:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--conf takes KEY=VALUE, got {kv!r}")
        conf[key] = value
    return conf


def make_spark(args: argparse.Namespace, **conf: str) -> Any:
    """The library's local SparkSession with the benchmark's driver memory and master."""
    import spark_differential as sd

    os.environ["SD_DRIVER_MEMORY"] = args.driver_memory
    settings = {"spark.driver.memory": args.driver_memory, **conf}
    log(f"starting Spark ({args.master}, driver memory {args.driver_memory})")
    spark = sd.session(master=args.master, conf=settings)
    return spark


def warm_spark(spark: Any) -> None:
    """One tiny job through the code paths the benchmarks use (JVM codegen, Arrow, Python workers).

    Keeps the JVM's and the Python workers' start-up out of the first timed run when a
    benchmark does no warm-up run of its own.
    """
    from pyspark.sql import functions as F

    import spark_differential  # noqa: F401  (registers the dd_* methods)

    log("warming up Spark (a tiny consolidate, join, count, min and 3-node BFS; not timed)")
    df = spark.range(0, 2000).selectExpr("id % 50 AS key", "id % 7 AS val", "id % 5 AS time", "1L AS diff")
    spark_action(df.dd_consolidate(method="kernel"))
    spark_action(df.dd_consolidate(method="spark"))
    spark_action(df.dd_join(df.withColumnRenamed("val", "val2"), on="key").dd_count(by="key"))
    # every Python worker loads the compiled min kernel (a task per partition), and one runs a loop
    spark_action(df.dd_min(by="key", col="val"))
    edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1)], "node long, dst long, time long, diff long")
    roots = spark.createDataFrame([(0, 0, 0, 1)], "node long, dist long, time long, diff long")
    spark_action(roots.dd_iterate(
        lambda d: d.dd_join(edges, on="node")
        .select(F.col("dst").alias("node"), (F.col("dist") + 1).alias("dist"), "time", "diff")
        .dd_concat(d).dd_min(by="node", col="dist")
    ))


def spark_action(df: Any) -> None:
    """Compute every row and column of ``df`` and discard them (the ``noop`` sink)."""
    df.write.format("noop").mode("overwrite").save()


class _Canceller(_Background):
    """Calls ``cancel`` at ``limit`` seconds and then every ``every`` seconds until stopped.

    Repeating matters: under load a query may still be planning when the limit is
    reached, and a job submitted after a single cancel would run to the end.
    """

    def __init__(self, limit: float | None, cancel: Callable[[], None], every: float = 2.0) -> None:
        self.limit, self.cancel, self.every = limit, cancel, every
        self.fired = False
        super().__init__()

    def _wanted(self) -> bool:
        return bool(self.limit)

    def _run(self) -> None:
        if self._stop.wait(self.limit):
            return
        self.fired = True
        while True:
            with contextlib.suppress(Exception):
                self.cancel()
            if self._stop.wait(self.every):
                return


def _limited(fn: Callable[[], Any], limit: float | None, cancel: Callable[[], None]) -> Any:
    """Run ``fn``; ``cancel`` it at ``limit`` seconds and raise :class:`TimeLimitExceeded` if it fired."""
    with _Canceller(limit, cancel) as c:
        try:
            result = fn()
        except Exception:
            if c.fired:
                raise TimeLimitExceeded(limit) from None
            raise
    if c.fired:  # finished, but only after the limit
        raise TimeLimitExceeded(limit)
    return result


def run_spark_limited(spark: Any, fn: Callable[[], Any], limit: float | None) -> Any:
    """Run ``fn`` (which runs Spark jobs) and cancel its jobs after ``limit`` seconds."""
    sc = spark.sparkContext
    group = f"sd-bench-{time.time_ns()}"
    sc.setJobGroup(group, "spark_differential benchmark (time-limited)", interruptOnCancel=True)
    try:
        return _limited(fn, limit, lambda: sc.cancelJobGroup(group))
    finally:
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
            sc.setLocalProperty("spark.job.interruptOnCancel", None)


def duckdb_connect(args: argparse.Namespace) -> Any:
    import duckdb

    threads = args.duckdb_threads or cores_of(args.master)
    tmp = os.path.join(tempfile.gettempdir(), "sd-bench-duckdb")
    os.makedirs(tmp, exist_ok=True)
    config = {
        "threads": threads,
        "memory_limit": args.duckdb_memory,
        "temp_directory": tmp,
        "max_temp_directory_size": "30GB",
    }
    return duckdb.connect(config=config)


def run_duckdb_limited(con: Any, fn: Callable[[], Any], limit: float | None) -> Any:
    """Run ``fn`` (DuckDB queries on ``con``) and interrupt it after ``limit`` seconds."""
    return _limited(fn, limit, con.interrupt)


def duckdb_materialize(con: Any, sql: str, limit: float | None = None) -> Any:
    """The result of ``sql`` materialized as the temp table ``out`` (how DuckDB peers are timed)."""
    return run_duckdb_limited(con, lambda: con.execute(f"CREATE OR REPLACE TEMP TABLE out AS {sql}"), limit)


# ---------------------------------------------------------------------------------
# data


class DataDir:
    """A directory for generated inputs (temporary unless ``--data-dir``/``--keep-data``)."""

    def __init__(self, args: argparse.Namespace, name: str) -> None:
        self.keep = bool(args.keep_data or args.data_dir)
        base = args.data_dir or tempfile.mkdtemp(prefix=f"sd-bench-{name}-")
        self.path = os.path.abspath(base)
        os.makedirs(self.path, exist_ok=True)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def cleanup(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


def write_parquet(columns: dict[str, np.ndarray], path: str) -> int:
    """Write numpy columns to one Parquet file (row groups of 1M rows); returns the row count."""
    table = pa.table({k: pa.array(v) for k, v in columns.items()})
    pq.write_table(table, path, row_group_size=1 << 20)
    return table.num_rows


def spark_cached(spark: Any, path: str, partitions: int) -> Any:
    """Read a Parquet file into Spark, spread it over ``partitions``, cache and materialize it."""
    df = spark.read.parquet(path).repartition(partitions).cache()
    df.count()
    return df


def duckdb_table(con: Any, name: str, path: str) -> None:
    """Load a Parquet file into an in-memory DuckDB table (before timing)."""
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM read_parquet('{path}')")


def random_updates(rng: np.random.Generator, n: int, keys: int, times: int, values: int = 4) -> dict[str, np.ndarray]:
    """``n`` updates ``(key, val, time, diff)``: uniform key, small value, uniform time, diff ±1."""
    return {
        "key": rng.integers(0, keys, n, dtype=np.int64),
        "val": rng.integers(0, values, n, dtype=np.int64),
        "time": rng.integers(0, times, n, dtype=np.int64),
        "diff": np.where(rng.random(n) < 0.5, 1, -1).astype(np.int64),
    }


# ---------------------------------------------------------------------------------
# report


@dataclass
class Row:
    case: str
    ours: Measurement
    peer: Measurement | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.peer is None or not self.ours.ok or self.peer.seconds is None:
            return None
        if self.peer.status not in ("ok", "extrapolated", "timeout"):
            return None
        return self.peer.seconds / self.ours.seconds  # type: ignore[operator]

    def ratio_shown(self) -> str:
        r = self.ratio
        if r is None:
            return "-"
        shown = f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"
        return (">" if self.peer is not None and self.peer.status == "timeout" else "") + shown


class Report:
    """Rows of (case, ours, peer, ratio = peer seconds / our seconds); printed and saved as JSON."""

    def __init__(self, benchmark: str, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.benchmark = benchmark
        self.args = args
        self.config = config
        self.rows: list[Row] = []
        self.checks: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def add(self, case: str, ours: Measurement, peer: Measurement | None = None, note: str = "") -> Row:
        row = Row(case, ours, peer, note)
        self.rows.append(row)
        return row

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.checks.append({"check": what, "ok": bool(ok), "detail": detail})
        log(f"check {'OK  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def print(self, extra_cols: Sequence[tuple[str, Callable[[Row], str]]] = ()) -> None:
        header = ["case", "measured", "time", "peer", "peer time", "ratio peer/ours", *[h for h, _ in extra_cols]]
        body = []
        for r in self.rows:
            body.append(
                [
                    r.case,
                    r.ours.label,
                    r.ours.shown(),
                    r.peer.label if r.peer else "-",
                    r.peer.shown() if r.peer else "-",
                    r.ratio_shown(),
                    *[f(r) for _, f in extra_cols],
                ]
            )
        widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
        line = "  ".join("-" * w for w in widths)
        print()
        print(f"== {self.benchmark} ==  ({describe_env(self.args)})")
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        print(line)
        for b in body:
            print("  ".join(str(x).ljust(w) for x, w in zip(b, widths)))
        print(line)
        print("ratio = peer time / our time (> 1: spark_differential is faster); times are the best of the timed runs")
        for r in self.rows:
            for m in (r.ours, r.peer):
                if m is not None and m.detail and m.status != "ok":
                    print(f"  {m.label}: {m.status}: {m.detail}")
        for n in self.notes:
            print(f"  note: {n}")
        if self.checks:
            bad = [c for c in self.checks if not c["ok"]]
            print(
                f"  verification: {len(self.checks) - len(bad)}/{len(self.checks)} checks passed"
                + ("" if not bad else "; FAILED: " + "; ".join(c["check"] for c in bad))
            )
        print(flush=True)

    def to_json(self) -> dict[str, Any]:
        def m(x: Measurement | None) -> dict[str, Any] | None:
            return asdict(x) if x is not None else None

        return {
            "benchmark": self.benchmark,
            "environment": environment(self.args),
            "config": self.config,
            "rows": [
                {"case": r.case, "ours": m(r.ours), "peer": m(r.peer), "ratio": r.ratio, "note": r.note}
                for r in self.rows
            ],
            "checks": self.checks,
            "notes": self.notes,
        }

    def save(self) -> None:
        path = getattr(self.args, "json", None)
        if not path:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, default=str)
        log(f"results written to {path}")

    @property
    def all_checks_ok(self) -> bool:
        return all(c["ok"] for c in self.checks)


def environment(args: argparse.Namespace) -> dict[str, Any]:
    from importlib.metadata import version

    def v(d: str) -> str:
        try:
            return version(d)
        except Exception:
            return "n/a"

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "master": args.master,
        "driver_memory": args.driver_memory,
        "quick": bool(args.quick),
        "versions": {d: v(d) for d in ("pyspark", "pyarrow", "pandas", "duckdb", "spark_differential", "dbl-tempo")},
    }


def describe_env(args: argparse.Namespace) -> str:
    e = environment(args)
    vs = e["versions"]
    return f"{e['master']}, {e['cpu_count']} CPUs on the machine, pyspark {vs['pyspark']}, duckdb {vs['duckdb']}" + (
        ", QUICK sizes" if e["quick"] else ""
    )


def finish(report: Report, extra_cols: Sequence[tuple[str, Callable[[Row], str]]] = ()) -> int:
    report.print(extra_cols)
    report.save()
    return 0 if report.all_checks_ok else 1


def pick(args: argparse.Namespace, name: str, quick: Any, full: Any) -> Any:
    """A flag's value if given, else the quick or full default."""
    v = getattr(args, name, None)
    if v is not None:
        return v
    return quick if args.quick else full
