"""The README's example runs and says what the README says it does; the examples run,
and the BFS example is correct on separate executor processes (local-cluster)."""

from __future__ import annotations

import os
import re
import subprocess

import background
from helpers import rows_of

import spark_differential  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_code() -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    return blocks[0]


def test_readme_example_runs_and_matches_its_description(spark, capsys):
    code = readme_code()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    bills = sorted(rows_of(scope["bills"]))
    assert bills == [(("bacon", 2, 7), 3, 1), (("eggs", 12, 1), 4, 1)]
    revenue = sorted(rows_of(scope["revenue"].dd_sum("k", "amount")))
    assert revenue == [(("all", 14), 3, 1), (("all", 14), 4, -1), (("all", 26), 4, 1)]
    assert "26" in capsys.readouterr().out


def _run(args: list[str], timeout: int = 900) -> str:
    proc = subprocess.run([background.PYTHON, *args], cwd=ROOT, env=background.env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


background.register(__name__, "test_bfs_example", lambda: _run([
    "examples/bfs.py", "--nodes", "12", "--edges", "24", "--changes", "12", "--check", "6",
    "--master", "local[2]", "--partitions", "4", "--local-rows", "1000000",
]), seconds=20)
background.register(__name__, "test_reachability_example", lambda: _run([
    "examples/reachability.py", "--nodes", "20", "--edges", "40", "--roots", "3", "--changes", "20",
    "--check", "8", "--master", "local[2]",
]), seconds=15)


def test_bfs_example(request):
    """The example as a user runs it, in a process of its own (beside the suite's other
    separate processes: ``background``); its loop inside one task and distributed, against
    BFS recomputed at sampled times.  Both loop paths also run on ``local-cluster`` (executor
    JVMs with their own Python workers: no state on the driver) in
    ``test_sessions.py::test_join_count_on_local_cluster_also_with_retried_tasks``."""
    out = background.result(request)
    assert "distance changes" in out and "OK" in out


def test_reachability_example(request):
    out = background.result(request)
    assert "OK" in out


def test_flagship_example(spark, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("flagship", os.path.join(ROOT, "examples", "flagship.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main() == 0
    out = capsys.readouterr().out
    assert "|bacon|  2|    7|   3|   1|" in out
    # seed 001: the seven distance changes
    for row in ["|   1|   2|   5|   1|", "|   2|   1|   4|  -1|", "|   1|   1|   3|  -1|"]:
        assert row in out
