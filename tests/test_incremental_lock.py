"""One writer per view path (spark_differential.incremental.lock): a second writer is refused
at once, naming the first; a lock left by a dead writer is broken (by the next update on its
host, explicitly elsewhere); a manifest is never replaced by another writer's.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from helpers import rows_of
from pyspark.sql import DataFrame

import spark_differential as sd
from spark_differential.errors import IncrementalStateError, LateUpdateError
from spark_differential.incremental.files import Files
from spark_differential.incremental.lock import LOCK, WriterLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "k long, x long, time long, diff long"

HOLDER = r"""
import sys, time
from spark_differential.incremental.files import Files
from spark_differential.incremental.lock import WriterLock
lock = WriterLock(Files(object(), sys.argv[1]))  # no Spark: a local path, as a Connect client writes it
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def counts(a: DataFrame) -> DataFrame:
    return a.dd_count(by="k")


def _rows(spark, rows: list[tuple[int, int, int, int]]) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA)


@pytest.mark.connect
def test_a_second_writer_is_refused_at_once_naming_the_first(spark, tmp_path, caplog) -> None:
    path = str(tmp_path / "v")
    view = sd.incremental(path, counts)
    first = rows_of(view.update(upto=1, a=_rows(spark, [(1, 1, 0, 1)])))
    assert first == [((1, 1), 0, 1)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, view.path], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(IncrementalStateError, match=rf"another writer is updating the view.*process {holder.pid} on"):
            view.update(upto=3, a=_rows(spark, [(1, 2, 2, 1)]))
        assert view.frontier == 1  # nothing committed
    finally:
        holder.kill()
        holder.wait()
    # the holder died on this host: the next update breaks its lock, says so, and goes on
    with caplog.at_level(logging.WARNING, logger="spark_differential.incremental"):
        second = rows_of(view.update(upto=3, a=_rows(spark, [(1, 2, 2, 1)])))
    assert any(f"process {holder.pid}" in r.getMessage() and "no longer running" in r.getMessage() for r in caplog.records)
    assert sorted(second) == [((1, 1), 2, -1), ((1, 2), 2, 1)]
    assert view.frontier == 3 and not os.path.exists(os.path.join(view.path.removeprefix("file:"), LOCK))


def test_a_lock_from_another_host_stays_until_broken(spark, tmp_path) -> None:
    path = tmp_path / "v"
    view = sd.incremental(str(path), counts)
    view.update(upto=1, a=_rows(spark, [(1, 1, 0, 1)]))
    held = {"host": "elsewhere.example", "pid": 4242, "writer": "w0", "since": "2026-01-01T00:00:00+00:00"}
    (path / LOCK).write_text(json.dumps(held))
    with pytest.raises(IncrementalStateError, match=r"process 4242 on elsewhere.example.*view.break_lock\(\)"):
        view.update(upto=2, a=_rows(spark, [(2, 1, 1, 1)]))
    assert view.break_lock() == held
    assert rows_of(view.update(upto=2, a=_rows(spark, [(2, 1, 1, 1)]))) == [((2, 1), 1, 1)]
    assert view.break_lock() is None


def test_a_failed_update_releases_the_lock(spark, tmp_path) -> None:
    view = sd.incremental(str(tmp_path / "v"), counts)
    view.update(upto=5, a=_rows(spark, [(1, 1, 0, 1)]))
    with pytest.raises(LateUpdateError):
        view.update(upto=6, a=_rows(spark, [(1, 2, 3, 1)]))  # time 3 is before the frontier 5
    assert not (tmp_path / "v" / LOCK).exists()
    assert sorted(rows_of(view.update(upto=7, a=_rows(spark, [(1, 2, 6, 1)])))) == [((1, 1), 6, -1), ((1, 2), 6, 1)]


@pytest.mark.parametrize("kind", ["hadoop", "local"])
def test_a_manifest_is_never_replaced(spark, tmp_path, kind: str) -> None:
    files = Files(spark if kind == "hadoop" else object(), str(tmp_path))
    target = files.join("v00000002.json")
    files.write_text_atomic(target, '{"writer": 1}')
    with pytest.raises(IncrementalStateError, match="another writer committed it first"):
        files.write_text_atomic(target, '{"writer": 2}')
    assert files.read_text(target) == '{"writer": 1}'
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
    assert files.create_exclusive(files.join("x.lock"), "a") and not files.create_exclusive(files.join("x.lock"), "b")


def test_lock_release_leaves_another_writers_lock(tmp_path) -> None:
    mine, theirs = WriterLock(Files(object(), str(tmp_path))), WriterLock(Files(object(), str(tmp_path)))
    theirs.acquire()
    mine.release()  # not mine: kept
    assert theirs.holder() is not None and theirs.holder()["writer"] == theirs.owner["writer"]
    theirs.release()
    assert mine.holder() is None
