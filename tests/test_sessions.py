"""The same rows whatever kind of session, plan or failure runs them (issue 21).

* Adaptive query execution on and off (``spark.sql.adaptive.enabled``, a runtime
  setting: in this process) for a join+count, a reduction and a BFS.
* ``local-cluster[2,1,1024]``: separate executor JVMs with their own Python workers
  (in a separate process, ``tests/session_jobs.py``) for a join+count, in one task (a
  small pipeline, ``spark_differential.intask.pipeline``) and operator by operator, also with its
  kernels failing their first attempt, a BFS iteration by iteration (the distributed loop),
  inside one task, in slices of time and in key partitions, and an incremental view's
  updates each in one task.
* Task failures and retries under ``local[2,3]``: every kernel task of a join+count
  (in one task and operator by operator), of a distributed BFS and of an incremental view's
  one-task updates fails its first attempt (the test-only
  ``spark_differential.testing.failFirstAttempt``), a user ``dd_reduce`` function
  fails its first attempt in a reduction and inside a loop run in one task; the
  rows, and the loop's per-iteration change counts (observed metrics), are those of
  runs without failures and of the oracle.
* A classic process refuses a local Spark Connect server with a named error, and
  the Connect pass of ``./dev test`` really runs on Spark Connect.
* A Spark Connect script whose loop checkpointed DataFrames exits when its last line
  ends (it used to hang at interpreter shutdown).

Every answer is checked against the oracle (``tests/oracle.py``): since the
consolidated form is unique, equal to the oracle means identical rows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import background
import pytest
import session_jobs
from helpers import CONNECT, rows_of
from oracle import Coll, Total, assert_updates_equal, ref_bfs, ref_count, ref_join, ref_reduce
from pyspark import cloudpickle
from session_jobs import KEYS, inputs, run_job, top2

import spark_differential as sd
from spark_differential.core.session import is_connect
from spark_differential.errors import EnvironmentError_

# the user functions of session_jobs run in Spark's Python workers, which cannot import it: ship them by value
cloudpickle.register_pickle_by_value(session_jobs)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AQE = "spark.sql.adaptive.enabled"
FUSED = "runs inside one task"  # spark_differential.intask.pipeline's log line for a small pipeline


def expected(job: str) -> Coll:
    """The oracle's answer to a job of ``tests/session_jobs.py``."""
    data, lat = inputs(), Total()
    if job in ("join_count", "join_count_by_operator", "view_join_count"):
        return ref_count(ref_join(data["a"], data["b"], KEYS, lat), KEYS, lat)
    if job == "reduce":
        return ref_reduce(data["c"], KEYS, lambda key, rows: [((v,), 1) for v in top2([d[0] for d, _ in rows])],
                          lat, ["x"])
    return ref_bfs(data["edges"], data["roots"], lat)


def updates(result: dict[str, Any]) -> list[tuple[tuple, Any, int]]:
    return [(tuple(d), t, r) for d, t, r in result["rows"]]


def assert_oracle_rows(result: dict[str, Any], want: Any, label: str) -> None:
    """The job's rows are the oracle's; a mismatch names the run (``label``)."""
    try:
        assert_updates_equal(updates(result), want.updates)
    except AssertionError as e:
        raise AssertionError(f"{label}: {e}") from None


def changes(log: list[str]) -> list[int]:
    """The loop's changes per iteration, from its log lines (timings dropped)."""
    return [int(m.group(1)) for line in log if (m := re.search(r"iteration \d+: (\d+) changes", line))]


# the separate processes of tests/session_jobs.py this module runs: (master, jobs run plainly, jobs run with faults)
RUNS = {
    "test_retried_tasks_give_the_rows_of_runs_without_failures": (
        # (run plainly: only the loop whose per-iteration changes the faulty runs' must equal; every
        # run's rows are checked against the oracle)
        "local[2,3]", "bfs_in_task",
        "join_count,join_count_by_operator,reduce,bfs,bfs_in_task,bfs_chunked,bfs_sliced,bfs_keys,view_join_count"),
    "test_join_count_on_local_cluster_also_with_retried_tasks": (
        "local-cluster[2,1,1024]", "join_count,join_count_by_operator,bfs,bfs_in_task,bfs_sliced,bfs_keys,view_join_count",
        "join_count,join_count_by_operator"),
}


def _run(master: str, plain: str, faults: str) -> dict[str, Any]:
    """One run of ``tests/session_jobs.py``: what it printed as its result."""
    proc = subprocess.run([background.PYTHON, "tests/session_jobs.py", "--master", master, "--plain", plain,
                           "--faults", faults], cwd=ROOT, env=background.env(), capture_output=True, text=True,
                          timeout=background.TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


for _test, _args in RUNS.items():
    background.register(__name__, _test, lambda args=_args: _run(*args), seconds=80)


@pytest.fixture
def session_run(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The result of this test's run of ``tests/session_jobs.py`` (:data:`RUNS`), run side by
    side with the other separate processes the session's tests wait for (``background``)."""
    return background.result(request)


@pytest.mark.parametrize("job", ["join_count", "reduce", "bfs"])
def test_same_rows_with_adaptive_execution_on_and_off(spark, job):
    """AQE changes the plans (coalesced shuffles, one task instead of four) but not the rows."""
    before = spark.conf.get(AQE)
    got = {}
    try:
        for aqe in ("true", "false"):
            spark.conf.set(AQE, aqe)
            got[aqe] = run_job(spark, job, faults=False)
    finally:
        spark.conf.set(AQE, before)
    want = expected(job)
    for aqe, result in got.items():
        assert_oracle_rows(result, want, f"{AQE}={aqe}")
    assert got["true"]["rows"] == got["false"]["rows"]
    if job == "bfs":  # the distributed loop, iteration by iteration: the same changes per iteration
        assert changes(got["true"]["log"]) == changes(got["false"]["log"]) != []


def test_retried_tasks_give_the_rows_of_runs_without_failures(session_run):
    """``local[2,3]``: a task may fail twice.  Every task of each faulty run fails once."""
    out = session_run
    for job, runs in out.items():
        want = expected(job)
        for run, result in runs.items():
            assert_oracle_rows(result, want, f"{job} ({run})")
            # the faults really happened (and only where asked for)
            assert (result["failed_attempts"] > 0) == (run == "faults"), (job, run, result["failed_attempts"])
        if "plain" in runs:
            assert runs["plain"]["rows"] == runs["faults"]["rows"], job
    # the loop's observed metrics count each row once although tasks ran twice: the
    # distributed loop with every kernel task failing once, and the in-task loop whose
    # one task failed, see the same changes per iteration as the in-task loop without failures
    reference = changes(out["bfs_in_task"]["plain"]["log"])
    assert reference and reference[-1] == 0
    assert changes(out["bfs"]["faults"]["log"]) == reference
    assert changes(out["bfs_in_task"]["faults"]["log"]) == reference
    assert any("inside one task" in m for m in out["bfs_in_task"]["faults"]["log"])
    assert not any("inside one task" in m for m in out["bfs"]["faults"]["log"])
    # the join and count as one task (a small pipeline), and operator by operator
    assert any(FUSED in m for m in out["join_count"]["faults"]["log"])
    assert not any(FUSED in m for m in out["join_count_by_operator"]["faults"]["log"])
    # in time chunks, where the join's outer collection is gathered per key by a kernel too
    assert any("time chunks" in m for m in out["bfs_chunked"]["faults"]["log"])
    assert not any("inside one task" in m for m in out["bfs_chunked"]["faults"]["log"])
    # in slices of time, each slice's task (its user function failing once) retried alone
    assert any("slices of time, each inside a task" in m for m in out["bfs_sliced"]["faults"]["log"])
    # in key partitions: a barrier stage, retried whole when a task fails
    assert any("key partitions, a task each" in m for m in out["bfs_keys"]["faults"]["log"])
    # an incremental view's every update inside one task, its kernels failing once: the retried
    # task rewrites the version's files whole
    view_log = [m for m in out["view_join_count"]["faults"]["log"] if "the update of the view" in m]
    assert len(view_log) == 3 and all("runs inside one task" in m for m in view_log), view_log


def test_the_fault_switch_reaches_the_gather_step(spark):
    """On a session without retries, the gather kernel (the chunked loop's outer collection
    per key) fails its first attempt when the test-only switch is on: the retry test above
    exercises it."""
    from spark_differential.core.collection import inspect
    from spark_differential.core.faults import FAIL_FIRST_ATTEMPT
    from spark_differential.engine.kernel_form import Input, prepare
    from spark_differential.loop.distributed import _rows_per_key

    edges = spark.createDataFrame([(1, 2, 0, 1), (2, 3, 1, 1)], "node long, dst long, time long, diff long")
    inp = Input(edges, inspect(edges, op="test"), ["node"], ["dst"], "_b")
    plain = _rows_per_key(prepare(inp, 4, 2), 1, 2).collect()
    assert sorted(len(r["_rows"]) for r in plain) == [1, 1]
    spark.conf.set(FAIL_FIRST_ATTEMPT, "true")
    try:
        with pytest.raises(Exception, match="fails on purpose"):
            _rows_per_key(prepare(inp, 4, 2), 1, 2).collect()
    finally:
        spark.conf.set(FAIL_FIRST_ATTEMPT, "false")


@pytest.mark.cluster
def test_join_count_on_local_cluster_also_with_retried_tasks(session_run):
    """Executors in their own JVMs and Python workers: no state on the driver; the
    test-only fault setting travels with the kernels' closures to the executors."""
    out = session_run
    for job, fused in (("join_count", True), ("join_count_by_operator", False)):
        runs = out[job]
        assert_updates_equal(updates(runs["plain"]), expected(job).updates)
        assert runs["faults"]["rows"] == runs["plain"]["rows"]
        assert runs["faults"]["failed_attempts"] > 0 and runs["plain"]["failed_attempts"] == 0
        assert any(FUSED in m for m in runs["plain"]["log"]) == fused, (job, runs["plain"]["log"])
    # the distributed loop, iteration by iteration: each iteration's jobs over both executors
    loop = out["bfs"]["plain"]
    assert_updates_equal(updates(loop), expected("bfs").updates)
    assert changes(loop["log"]) and changes(loop["log"])[-1] == 0, loop["log"]
    assert not any("inside one task" in m for m in loop["log"]), loop["log"]
    # the loop inside one task, on either executor
    one = out["bfs_in_task"]["plain"]
    assert_updates_equal(updates(one), expected("bfs_in_task").updates)
    assert any("inside one task" in m for m in one["log"]), one["log"]
    # a loop in slices of time, each slice's task on either executor
    sliced = out["bfs_sliced"]["plain"]
    assert_updates_equal(updates(sliced), expected("bfs_sliced").updates)
    assert any("slices of time, each inside a task" in m for m in sliced["log"]), sliced["log"]
    # a loop in key partitions: its two tasks on the two executors, exchanging their changes
    keyed = out["bfs_keys"]["plain"]
    assert_updates_equal(updates(keyed), expected("bfs_keys").updates)
    assert any("in 2 key partitions, a task each" in m for m in keyed["log"]), keyed["log"]
    # an incremental view's updates, each inside one task on an executor, which reads the stored
    # traces and writes the version's files itself
    view = out["view_join_count"]["plain"]
    assert_updates_equal(updates(view), expected("view_join_count").updates)
    assert sum("runs inside one task" in m for m in view["log"]) == 3, view["log"]


@pytest.mark.connect
def test_the_spark_fixture_is_the_session_kind_asked_for(spark):
    assert is_connect(spark) == CONNECT
    assert is_connect(spark.range(1)) == CONNECT


def test_a_classic_process_refuses_a_local_connect_server(spark):
    with pytest.raises(EnvironmentError_, match="one kind of session per process"):
        sd.session(remote="local[2]")
    assert spark.range(3).count() == 3  # the classic session is unharmed


@pytest.mark.connect
def test_the_fault_switch_fails_jobs_without_retries(spark):
    """The test fixture's ``local[2]`` allows no retry: with the switch on a kernel's
    first attempt is its last, so the job fails with the injected fault (on Spark
    Connect too: the switch travels in the kernel's closure)."""
    from spark_differential.core.faults import FAIL_FIRST_ATTEMPT

    df = spark.createDataFrame([(1, 0, 1), (1, 2, 1)], "k long, time long, diff long")
    spark.conf.set(FAIL_FIRST_ATTEMPT, "true")
    try:
        failing = df.dd_count("k")
    finally:
        spark.conf.unset(FAIL_FIRST_ATTEMPT)
    with pytest.raises(Exception, match="InjectedFault"):
        failing.collect()
    assert sorted(rows_of(df.dd_count("k"))) == [((1, 1), 0, 1), ((1, 1), 2, -1), ((1, 2), 2, 1)]


EXIT_SCRIPT = """
import sys
import spark_differential as sd
from spark_differential.algorithms import bfs
spark = sd.session(remote="local[2]")
edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (2, 3, 1, 1), (0, 3, 2, 1), (2, 3, 3, -1)],
                              "src long, dst long, time long, diff long")
roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
result = bfs(edges, roots)  # held to the end: a checkpointed Connect DataFrame
print("ROWS", sorted(tuple(r) for r in result.collect()), flush=True)
print("DONE", flush=True)
"""


def test_a_spark_connect_script_with_a_loop_exits_when_it_ends():
    """A Connect DataFrame from ``localCheckpoint`` (the distributed loop's) releases its
    server copy in ``__del__`` over gRPC; run at interpreter shutdown, that call hung the
    process for minutes after its last line.  ``session.release_at_exit`` releases them
    while threads still work and closes the client: the script exits at once."""
    import time

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SD_TEST_SESSION", None)
    env.pop("SPARK_REMOTE", None)
    proc = subprocess.Popen([sys.executable, "-c", EXIT_SCRIPT], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("DONE"):
                break
        done = time.monotonic()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the script was still running {time.monotonic() - done:.0f} s after its last line")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines)[-2000:]
    rows = next(x for x in lines if x.startswith("ROWS "))
    got = [((n, d), t, r) for n, d, t, r in eval(rows[len("ROWS "):])]  # noqa: S307 - our own script's repr
    edges = Coll(("src", "dst"), [((0, 1), 0, 1), ((1, 2), 0, 1), ((2, 3), 1, 1), ((0, 3), 2, 1), ((2, 3), 3, -1)])
    roots = Coll(("node",), [((0,), 0, 1)])
    assert_updates_equal(got, ref_bfs(edges, roots, Total()).updates)


class _FakeClient:
    def __init__(self, host: str) -> None:
        self.host = host


class _FakeConnect:
    """What ``sd.incremental`` sees of a Spark Connect session: no JVM, a client with a host."""

    def __init__(self, host: str) -> None:
        self.client = _FakeClient(host)


@pytest.mark.parametrize("host, root, problem", [
    ("spark-server.example.com", "/tmp/view", "not on this machine"),
    ("localhost", "s3a://bucket/view", "s3a:// URI"),
    ("127.0.0.1", "hdfs://nn/view", "hdfs:// URI"),
])
def test_a_connect_view_refuses_state_split_over_two_filesystems(host, root, problem):
    """On Connect the client writes the manifests and the server the Parquet files: a remote
    server or a non-local URI would put them on two filesystems, silently.  Refused up front."""
    from spark_differential.errors import IncrementalStateError
    from spark_differential.incremental.files import Files

    with pytest.raises(IncrementalStateError, match=problem):
        Files(_FakeConnect(host), root)


def test_a_connect_view_on_this_machine_takes_local_paths_and_file_uris(tmp_path):
    from spark_differential.incremental.files import Files

    assert Files(_FakeConnect("localhost"), str(tmp_path)).root == str(tmp_path)
    assert Files(_FakeConnect("127.0.0.1"), f"file://{tmp_path}").root == str(tmp_path)
    assert Files(_FakeConnect("localhost"), f"file:{tmp_path}").root == str(tmp_path)
