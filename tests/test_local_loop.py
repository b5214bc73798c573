"""The in-task loop's own machinery: key-sorted traces, chunk groups and threads.

``spark_differential.intask`` keeps each operator's trace in batches sorted by
the operator's key (``native.key_sorted``), finds the rows an iteration touches by
binary search (``KeySorted.touching``), and may run groups of time chunks on
threads.  Each is checked against the slower form it replaces: ``native.consolidated``
and ``native.touching`` (themselves checked against DuckDB in test_native.py) on
random tables, and the oracle for whole loops.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_differential.core import collection
from spark_differential.core import settings as sd_settings
from spark_differential.intask import chunking, launch, program, relation, task
from spark_differential.kernels import native
from spark_differential.trace import arrow as arrow_trace


def rows(table: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in table.to_pylist())


@st.composite
def int_tables(draw: Any, wide: bool = False) -> pa.Table:
    """Random integer/boolean tables with a diff column ``_d``; ``wide``: value ranges that
    sometimes do not pack into one int64."""
    n = draw(st.integers(0, 30))
    ncols = draw(st.integers(1, 4))
    cols: dict[str, pa.Array] = {}
    for i in range(ncols):
        kind = draw(st.sampled_from(["int", "int32", "bool"]))
        if kind == "bool":
            cols[f"c{i}"] = pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), pa.bool_())
            continue
        hi = (1 << (40 if kind == "int" else 30)) if wide and draw(st.booleans()) else 4
        values = draw(st.lists(st.integers(-hi, hi), min_size=n, max_size=n))
        cols[f"c{i}"] = pa.array(values, pa.int64() if kind == "int" else pa.int32())
    cols["_d"] = pa.array(draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)), pa.int64())
    return pa.table(cols)


@settings(max_examples=150, deadline=None)
@given(table=int_tables(wide=True), data=st.data())
def test_key_sorted_consolidates_and_sorts_by_key(table: pa.Table, data: st.DataObject) -> None:
    names = [c for c in table.column_names if c != "_d"]
    key = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    got = native.key_sorted(table, key)
    if got is None:  # only when the columns do not pack (or nothing to sort)
        assert table.num_rows == 0 or native.Radix.of(
            [np.asarray(table.column(c).to_numpy()).astype(np.int64) for c in names]) is None
        return
    assert got.table.column_names == table.column_names
    assert rows(got.table) == rows(native.consolidated(table, names).select(table.column_names))
    keys_ = [tuple(r[c] for c in key) for r in got.table.to_pylist()]
    assert keys_ == sorted(keys_)
    assert len(got.codes) == got.table.num_rows and bool(np.all(np.diff(got.codes) >= 0))
    # the stable sort (for a merge's sorted runs) and the unstable one give the same rows in the
    # same order: rows of equal code are equal but for the diff, which is summed
    runs = native.key_sorted(table, key, runs=True)
    assert runs is not None and runs.table.equals(got.table) and bool(np.array_equal(runs.codes, got.codes))


@settings(max_examples=150, deadline=None)
@given(table=int_tables(), probe=int_tables(), data=st.data())
def test_key_sorted_touching_equals_semi_join(table: pa.Table, probe: pa.Table, data: st.DataObject) -> None:
    """Keys of the probe may fall outside the table's ranges, or match nothing."""
    names = [c for c in table.column_names if c != "_d"]
    key = data.draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=len(names)))
    kept = native.key_sorted(table, key)
    if kept is None:
        return
    # the probe's key columns: the table's types, values drawn independently
    keys_ = pa.table({c: probe.column(c if c in probe.column_names else "_d").cast(table.schema.field(c).type,
                                                                                   safe=False)
                      for c in key})
    expected = native.touching(kept.table, keys_, key)
    assert rows(kept.touching(keys_)) == rows(expected)
    distinct = native.distinct_keys(keys_, key)
    assert distinct is not None
    assert rows(kept.touching_distinct(distinct)) == rows(expected)


@settings(max_examples=100, deadline=None)
@given(table=int_tables(wide=True))
def test_distinct_keys_are_the_distinct_rows_in_order(table: pa.Table) -> None:
    """Packed or not (ranges too wide for one int64), the distinct rows, lexicographically."""
    cols = [c for c in table.column_names if c != "_d"]
    got = native.distinct_keys(table, cols)
    assert got is not None
    expected = sorted({tuple(int(x) for x in r) for r in zip(*[table.column(c).to_pylist() for c in cols])})
    assert list(zip(*[v.tolist() for v in got])) == expected or (not expected and all(len(v) == 0 for v in got))


def test_radix_marks_rows_outside_its_ranges() -> None:
    radix = native.Radix.of([np.array([0, 3]), np.array([10, 11])])
    assert radix == native.Radix((0, 10), (4, 2))
    codes, inside = radix.codes([np.array([3, 4, -1, 0]), np.array([11, 10, 10, 12])])
    assert inside is not None and inside.tolist() == [True, False, False, False]
    assert codes[0] == 3 * 2 + 1
    assert native.Radix.of([np.array([0, 1 << 40]), np.array([0, 1 << 40])]) is None


def test_trace_touching_after_merges_equals_the_whole_trace() -> None:
    """A trace fed many batches (merged size-tiered, kept key-sorted) gives the rows of the
    touched keys of everything it was fed, consolidated."""
    rng = np.random.default_rng(3)
    schema = pa.schema([("_k0", pa.int64()), ("_a0", pa.int64()), ("_t0", pa.int64()), ("_d", pa.int64()),
                        ("_new", pa.bool_())])
    trace = arrow_trace.ArrowTrace(schema, ("_k0",))
    fed = []
    for size in [50, 20, 20, 5, 80, 1, 3, 40]:
        batch = pa.table({"_k0": rng.integers(0, 12, size), "_a0": rng.integers(0, 3, size),
                          "_t0": rng.integers(0, 5, size), "_d": rng.integers(-1, 2, size),
                          "_new": np.ones(size, dtype=bool)}, schema=schema)
        trace.add(batch)
        fed.append(batch)
        probe = pa.table({"_k0": rng.integers(-2, 14, 4)})
        everything = pa.concat_tables(fed).drop(["_new"])
        whole = native.consolidated(everything, ["_k0", "_a0", "_t0"])
        expected = native.touching(whole, probe, ["_k0"])
        got = trace.touching([probe])
        assert got.schema == schema and not any(got.column("_new").to_pylist())
        assert rows(native.consolidated(got.drop(["_new"]), ["_k0", "_a0", "_t0"])) == rows(expected)
    assert len(trace.batches) < len(fed)


def test_chunk_groups_cut_consecutive_chunks_of_about_equal_rows() -> None:
    ch = program.Chunking(t0=10, width=5, count=8)
    times_ = np.array([10, 11, 15, 20, 20, 21, 30, 35, 40, 44, 44, 44, 44, 44])
    a = pa.table({"x": np.arange(len(times_)), relation.leaves(1)[0]: times_})
    b = pa.table({"x": [1, 2], relation.leaves(1)[0]: [12, 46]})
    for n in (1, 2, 3, 20):
        groups = chunking.chunk_groups([a, b], ch, n)
        assert 1 <= len(groups) <= max(1, min(n, ch.count))
        for j, src in enumerate([a, b]):  # every row in exactly one group
            assert sorted(x for g in groups for x in g[j].column("x").to_pylist()) == sorted(src.column("x").to_pylist())
        spans = [sorted({(t - 10) // 5 for g_src in g for t in g_src.column(relation.leaves(1)[0]).to_pylist()}) for g in groups]
        flat = [c for s in spans for c in s]
        assert flat == sorted(flat) and len(flat) == len(set(flat))  # consecutive chunks, no chunk in two groups
    two = chunking.chunk_groups([a, b], ch, 2)
    sizes = [sum(t.num_rows for t in g) for g in two]
    assert len(two) == 2 and max(sizes) <= 10, sizes


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_bfs_in_time_chunks_on_threads(spark, caplog, threads: str) -> None:
    """The in-task loop with its time chunks in groups on threads, against the oracle."""
    from oracle import Total
    from test_iterate import LOCAL_ROWS, check_random_bfs

    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    spark.conf.set(LOCAL_ROWS, "1000000")
    spark.conf.set("spark_differential.iterate.chunkRows", "6")
    spark.conf.set(sd_settings.LOCAL_THREADS, threads)
    try:
        check_random_bfs(spark, Total(), 31, 8)
    finally:
        for key in (LOCAL_ROWS, "spark_differential.iterate.chunkRows", sd_settings.LOCAL_THREADS):
            spark.conf.unset(key)
    ran = [r.getMessage() for r in caplog.records if "inside one task" in r.getMessage()]
    assert ran and all("time chunks" in m for m in ran), ran


def test_threads_setting_must_be_positive(spark) -> None:
    from spark_differential.errors import ConfigurationError

    spark.conf.set(sd_settings.LOCAL_THREADS, "0")
    try:
        with pytest.raises(ConfigurationError, match="localThreads"):
            sd_settings.local_threads(spark)
    finally:
        spark.conf.unset(sd_settings.LOCAL_THREADS)
    assert sd_settings.local_threads(spark) == sd_settings.default_threads(spark)


def test_threads_default_uses_a_local_masters_cores_only() -> None:
    import os

    assert sd_settings.local_threads(_Session("local[2]")) == 2
    assert sd_settings.local_threads(_Session("local[16]")) == sd_settings.MAX_LOCAL_THREADS
    assert sd_settings.local_threads(_Session("local[3, 2]")) == 3
    assert sd_settings.local_threads(_Session("local")) == sd_settings.DEFAULT_THREADS
    assert sd_settings.local_threads(_Session("local[*]")) == max(1, min(os.cpu_count() or 1, sd_settings.MAX_LOCAL_THREADS))
    # other tasks may run on a cluster executor's other cores: one thread unless asked
    for master in ("local-cluster[2,1,1024]", "yarn", "spark://host:7077"):
        assert sd_settings.local_threads(_Session(master)) == sd_settings.DEFAULT_THREADS
    assert sd_settings.local_threads(_Session("yarn", {sd_settings.LOCAL_THREADS: "3"})) == 3
    # the default's threads wait for enough rows; an explicit setting is taken as it is
    assert sd_settings.thread_min_rows(_Session("local[2]")) == sd_settings.THREAD_MIN_ROWS
    assert sd_settings.thread_min_rows(_Session("local[2]", {sd_settings.LOCAL_THREADS: "2"})) == 0


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Session:
    """What :func:`sd_settings.local_rows` reads of a session: its master and runtime conf."""

    def __init__(self, master: str, conf: dict[str, str] | None = None) -> None:
        self.sparkContext = type("SC", (), {"master": master})()
        self.conf = _Conf(conf or {})


def test_local_rows_default_depends_on_where_executors_run() -> None:
    # executors on the driver's machine (no container memory limit): the larger default
    assert sd_settings.local_rows(_Session("local[2]")) == sd_settings.DEFAULT_ROWS_LOCAL
    assert sd_settings.local_rows(_Session("local-cluster[2,1,1024]")) == sd_settings.DEFAULT_ROWS_LOCAL
    for master in ("yarn", "spark://host:7077", "k8s://https://api:443"):
        assert sd_settings.local_rows(_Session(master)) == sd_settings.DEFAULT_ROWS
    assert sd_settings.DEFAULT_ROWS < sd_settings.DEFAULT_ROWS_LOCAL
    # an explicit setting wins everywhere
    assert sd_settings.local_rows(_Session("local[2]", {sd_settings.LOCAL_ROWS: "1234"})) == 1234
    assert sd_settings.local_rows(_Session("yarn", {sd_settings.LOCAL_ROWS: "off"})) == 0


def test_local_rows_default_on_the_test_session(spark: Any) -> None:
    assert spark.conf.get(sd_settings.LOCAL_ROWS, None) is None  # the tests run with the library's default
    assert sd_settings.local_rows(spark) == sd_settings.DEFAULT_ROWS_LOCAL


@pytest.mark.parametrize("name", ["int", "product2"])
def test_small_answer_is_local_rows_and_a_large_one_a_checkpoint(spark, monkeypatch, caplog, name: str) -> None:
    """A loop whose answer has at most ``LOCAL_RESULT_ROWS`` rows comes back with its task's
    report (its collect runs no Spark job); a larger one stays in the job's checkpoint
    (its collect runs one).  Both against the oracle, over integer and product times.  The
    report's accumulator is forgotten once read (PySpark's registry would keep it, and a
    small answer with it, for the driver's life)."""
    from helpers import assert_matches, to_df
    from oracle import Coll, consolidate, ref_bfs
    from pyspark.accumulators import _accumulatorRegistry
    from test_iterate import LATTICES, LOCAL_ROWS, batched_graphs, bfs, prefixed

    from spark_differential.core.jobs import count_jobs

    lat = LATTICES[name]
    edges, roots, per_case = batched_graphs(37, 6, lat)
    expected = Coll(("case", "node", "dist"), consolidate(
        [r for c, (e, rr) in enumerate(per_case) for r in prefixed(c, ref_bfs(e, rr, lat))]))
    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    spark.conf.set(LOCAL_ROWS, "1000000")
    try:
        for limit, collect_jobs in ((launch.LOCAL_RESULT_ROWS, 0), (len(expected.updates) - 1, 1), (0, 1)):
            monkeypatch.setattr(launch, "LOCAL_RESULT_ROWS", limit)
            registered = len(_accumulatorRegistry)
            with count_jobs(spark) as call:
                got = bfs(to_df(spark, roots, lat), to_df(spark, edges, lat), keys=("case", "node"))
            assert len(_accumulatorRegistry) == registered
            with count_jobs(spark) as action:
                got.collect()
            assert (call.jobs, action.jobs) == (1, collect_jobs), (limit, call, action)
            assert_matches(got, expected)
            assert got.dd_count("case").count() > 0  # a later query over the answer runs as any other
    finally:
        spark.conf.unset(LOCAL_ROWS)
    ran = [r.getMessage() for r in caplog.records if "iterations inside one task" in r.getMessage()]
    assert len(ran) == 3, ran


def test_local_answer_keeps_every_value(spark, monkeypatch, caplog) -> None:
    """The answer's rows come back through the JVM as ``Row`` objects: strings, nulls, NaN
    and -0.0, decimals, dates (before 1582 too), timestamps, binary and booleans arrive as
    the checkpointed answer has them, at integer and timestamp times."""
    import datetime as dt
    import decimal

    from pyspark.sql import functions as F

    from spark_differential.core.jobs import count_jobs

    caplog.set_level(logging.INFO, logger="spark_differential.iterate")
    ts = dt.datetime(2024, 3, 1, 12, 30, 15, 123456)
    data = [
        ("a", 1.5, decimal.Decimal("1.25"), dt.date(2024, 1, 31), ts, b"\x00\x01", True),
        (None, float("nan"), None, dt.date(1500, 3, 1), None, None, None),
        ("é\u4e2d", -0.0, decimal.Decimal("-99999.99"), None, dt.datetime(1969, 12, 31, 23, 59, 59), b"", False),
    ]
    schema = ("s string, x double, d decimal(7,2), day date, at timestamp, b binary, f boolean, "
              "time {}, diff long")
    for time_type, times in (("long", [0, 3, 5]), ("timestamp", [ts, ts + dt.timedelta(seconds=1), ts + dt.timedelta(days=2)])):
        roots = spark.createDataFrame([(*r, t, 1) for r, t in zip(data, times)], schema.format(time_type))

        def body(v: Any, roots: Any = roots) -> Any:  # the roots, and each row again with s in upper case
            return v.select(F.upper("s").alias("s"), *v.columns[1:]).dd_concat(roots).dd_distinct()

        answers = []
        for limit in (launch.LOCAL_RESULT_ROWS, 0):
            monkeypatch.setattr(launch, "LOCAL_RESULT_ROWS", limit)
            out = roots.dd_iterate(body)
            with count_jobs(spark) as action:
                rows_ = out.collect()
            assert action.jobs == (0 if limit else 1), action
            answers.append(sorted(map(repr, rows_)))
        assert answers[0] == answers[1]
        assert len(answers[0]) == 5  # 3 roots, 2 of them with a new upper-case s ("a", "é中")
        assert "nan" in " ".join(answers[0]) and "-0.0" in " ".join(answers[0])
    ran = [r.getMessage() for r in caplog.records if "iterations inside one task" in r.getMessage()]
    assert len(ran) == 4, ran


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_chunk_planning_in_arrow_equals_the_sql(data: st.DataObject) -> None:
    """The in-task chunk plan reads each source's live rows and time bounds in Arrow where it
    can: the same chunks as the DuckDB query (kept for other columns), on random sources
    with null and string data."""
    from types import SimpleNamespace

    t = relation.leaves(1)[0]
    sources, names_ = [], []
    for j in range(data.draw(st.integers(1, 3))):
        n = data.draw(st.integers(0, 40))
        draw = lambda s, n=n: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
        kind = data.draw(st.sampled_from(["int", "nulls", "string", "none"]))
        cols: dict[str, Any] = {}
        if kind == "int":
            cols[f"x{j}"] = pa.array(draw(st.integers(0, 4)), pa.int64())
        elif kind == "nulls":
            cols[f"x{j}"] = pa.array(draw(st.one_of(st.none(), st.integers(0, 2))), pa.int64())
        elif kind == "string":
            cols[f"x{j}"] = pa.array(draw(st.sampled_from(["a", "b", None])), pa.string())
        cols[t] = pa.array(draw(st.integers(-5, 30)), pa.int64())
        cols[collection.DIFF] = pa.array(draw(st.sampled_from([-1, 1, 2])), pa.int64())
        sources.append(pa.table(cols))
        names_.append(tuple(cols))
    from spark_differential.engine import chunks

    program = SimpleNamespace(chunk_rows=data.draw(st.integers(1, 8)), width=1, sources=tuple(names_))
    seen: list[tuple] = []  # what the plan is made from: (updates, live rows, lowest and highest time, setting)

    def layout(*args: Any) -> Any:
        seen.append(args)
        return chunks_layout(*args)

    chunks_layout = chunks.layout
    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunking, "layout", layout)  # the in-task planner's reference to the rule
        fast = chunking.plan_chunks(program, sources)  # type: ignore[arg-type]
        m.setattr(native, "in_arrow", lambda *args, **kw: False)
        slow = chunking.plan_chunks(program, sources)  # type: ignore[arg-type]
    assert fast == slow
    assert len(seen) == 2 and seen[0] == seen[1], seen


def test_status_rows_combine_per_field() -> None:
    """The tasks' status rows (JSON in ``META``) read as one: each count's maximum, the answer
    local if any task's was; no status row at all reads as none."""
    import json

    a = task.status_row(pa.schema([("x", pa.int64()), (task.META, pa.string())]),
                           task.status_json(task.DONE, 7, 0, [3, 1, 0], 4, "0.1,0.2", local=True,
                                            clock=[0.25, 0.5, 1.0]))
    assert a.column(0).to_pylist() == [None]
    first = json.loads(a.column(1)[0].as_py())
    assert first == {"status": 0, "iters": 7, "changing": 0, "history": "3,1,0", "chunks": 4, "phases": "0.1,0.2",
                     "local": True, "clock": "0.250,0.500,1.000"}
    other = json.dumps({**first, "status": task.LIMIT, "iters": 9, "changing": 5, "chunks": 2, "local": False})
    got = task.metrics([None, a.column(1)[0].as_py(), other])
    assert (got["status"], got["iters"], got["changing"], got["chunks"], got["local"]) == (task.LIMIT, 9, 5, 4, True)
    assert task.metrics([None]) == {}


@settings(max_examples=150, deadline=None)
@given(data=st.data(), ndata=st.integers(0, 2), strings=st.booleans())
def test_unchunked_retracts_each_chunk_where_the_next_takes_over(data: st.DataObject, ndata: int,
                                                                 strings: bool) -> None:
    """``_unchunked``: the loop's answer in time chunks (each chunk's rows accumulating within
    the chunk) as one collection: every chunk's accumulation, but the last's, retracted at
    the next chunk's start, then consolidated.  Checked against that definition on random
    answers, through one sort (integer columns) and through DuckDB (strings)."""
    n = data.draw(st.integers(0, 30))
    t0, width, count = data.draw(st.integers(-3, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    ch = program.Chunking(t0, width, count)
    names = [f"x{i}" for i in range(ndata)]
    t = relation.leaves(1)[0]
    cols: dict[str, pa.Array] = {}
    for c in names:
        values = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        cols[c] = pa.array([f"v{v}" for v in values] if strings else values, pa.string() if strings else pa.int64())
    cols[t] = pa.array(data.draw(st.lists(st.integers(t0, ch.last + width - 1), min_size=n, max_size=n)), pa.int64())
    cols["diff"] = pa.array(data.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)), pa.int64())
    result = pa.table(cols)
    want: Counter = Counter()
    chunk_sums: Counter = Counter()
    for r in result.to_pylist():
        key = tuple(r[c] for c in names)
        want[(*key, r[t])] += r["diff"]
        chunk_sums[(key, r[t] - (r[t] - t0) % width)] += r["diff"]
    for (key, c), s in chunk_sums.items():
        if c < ch.last:
            want[(*key, c + width)] -= s
    got, none = chunking.unchunked(result, names, ch)
    assert none is None and got.column_names == [*names, t, "diff"]
    if count == 1:
        return
    # the starts of chunks (but the first) where a group of chunks starts
    hold = data.draw(st.lists(st.sampled_from([t0 + k * width for k in range(1, count)]), unique=True, min_size=1))
    free, held = chunking.unchunked(result, names, ch, hold)
    assert held is not None and set(held.column(t).to_pylist()) <= set(hold)
    assert not set(free.column(t).to_pylist()) & set(hold)
    assert rows(pa.concat_tables([free, held])) == rows(got)
    pairs = [(tuple(r.values())[:-1], r["diff"]) for r in got.to_pylist()]
    assert all(d != 0 for _, d in pairs) and len({k for k, _ in pairs}) == len(pairs)  # consolidated
    assert dict(pairs) == {k: v for k, v in want.items() if v}


@settings(max_examples=120, deadline=None)
@given(data=st.data(), ndata=st.integers(0, 2), kind=st.sampled_from(["int", "string", "list"]),
       ordered=st.booleans(), cap=st.integers(1, 5))
def test_answer_runs_explode_to_the_answer(data: st.DataObject, ndata: int, kind: str, ordered: bool,
                                           cap: int) -> None:
    """``_runs``: the task's answer as one row per run of consecutive rows with equal data
    (nulls equal to nulls), at most ``RUN_ROWS`` to a row, times and diffs in a list
    column: exploded, the answer's rows; maximal runs on an answer sorted by its data; a
    type without equality (lists) in runs of one row."""
    n = data.draw(st.integers(0, 25))
    names = [f"x{i}" for i in range(ndata)]
    types = {"int": pa.int64(), "string": pa.string(), "list": pa.list_(pa.int64())}
    cols: dict[str, pa.Array] = {}
    for c in names:
        values = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=n, max_size=n))
        cols[c] = pa.array([None if v is None else (f"v{v}" if kind == "string" else [v] if kind == "list" else v)
                            for v in values], types[kind])
    t = relation.leaves(1)[0]
    cols[t] = pa.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), pa.int64())
    cols["diff"] = pa.array(data.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)), pa.int64())
    answer = pa.table(cols)
    if ordered and names and kind != "list":
        answer = answer.sort_by([(c, "ascending") for c in names])
    row = pa.struct([pa.field(t, pa.int64()), pa.field("diff", pa.int64())])
    schema = pa.schema([*[answer.schema.field(c) for c in names], pa.field(task.ROWS, pa.list_(row))])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(task, "RUN_ROWS", cap)
        runs = task.runs(answer, names, schema)
    assert runs.schema == schema
    def hashable(v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v

    exploded = [(*(hashable(r[c]) for c in names), e[t], e["diff"]) for r in runs.to_pylist()
                for e in r[task.ROWS]]
    assert Counter(exploded) == Counter(tuple(map(hashable, r.values())) for r in answer.to_pylist())
    sizes = [len(r[task.ROWS]) for r in runs.to_pylist()]
    assert all(0 < k <= cap for k in sizes)
    if kind == "list" and names:
        assert runs.num_rows == n
    elif ordered or not names:  # every value's rows consecutive: runs as long as the cap allows
        keys = [tuple(r[c] for c in names) for r in answer.to_pylist()]
        groups = Counter(keys)
        assert runs.num_rows == sum(-(-k // cap) for k in groups.values())
