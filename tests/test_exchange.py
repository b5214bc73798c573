"""intask.exchange without Spark: which task owns a row (the same in every process, equal
values together), and the tasks' all-to-all exchanges, here between threads."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from spark_differential.errors import ExchangeError
from spark_differential.intask.exchange import Exchange, owners

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def typed_table() -> pa.Table:
    """Columns of every kind a key may have, with nulls and repeated values."""
    rng = random.Random(3)
    n = 200
    ints = [rng.choice([None, *range(-5, 6)]) for _ in range(n)]
    return pa.table({
        "i": pa.array(ints, pa.int64()),
        "i8": pa.array([None if x is None else x for x in ints], pa.int8()),
        "s": pa.array([None if x is None else f"k{x}" for x in ints], pa.string()),
        "d": pa.array([None if x is None else dt.date(2024, 1, 1) + dt.timedelta(days=x) for x in ints], pa.date32()),
        "ts": pa.array([None if x is None else dt.datetime(2024, 1, 1) + dt.timedelta(seconds=x) for x in ints],
                       pa.timestamp("us", tz="UTC")),
        "b": pa.array([None if x is None else x > 0 for x in ints], pa.bool_()),
        "f": pa.array([None if x is None else x / 4 for x in ints], pa.float64()),
        "dec": pa.array([None if x is None else decimal.Decimal(x) / 4 for x in ints], pa.decimal128(10, 2)),
    })


@pytest.mark.parametrize("cols", [["i"], ["i8"], ["s"], ["d"], ["ts"], ["b"], ["f"], ["dec"], ["i", "s", "d"]])
def test_equal_values_have_one_owner(cols: list[str]) -> None:
    t = typed_table()
    own = owners(t, cols, 5)
    seen: dict[tuple, int] = {}
    for row, o in zip(t.select(cols).to_pylist(), own.tolist()):
        key = tuple(row[c] for c in cols)
        assert seen.setdefault(key, o) == o, key
        assert 0 <= o < 5
    assert len(set(own.tolist())) > 1  # the values spread over the tasks


def test_owners_are_the_same_in_another_process() -> None:
    """Tasks run in different Python workers: their hashes must agree (no per-process seed)."""
    code = ("import json, sys; sys.path.insert(0, 'tests'); from test_exchange import typed_table; "
            "from spark_differential.intask.exchange import owners; "
            "t = typed_table(); print(json.dumps({c: owners(t, [c], 7).tolist() for c in t.column_names}))")
    env = dict(os.environ, PYTHONHASHSEED="123", PYTHONPATH=ROOT)
    other = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                                      check=True).stdout)
    t = typed_table()
    assert other == {c: owners(t, [c], 7).tolist() for c in t.column_names}


def test_no_key_columns_or_one_task_is_task_zero() -> None:
    t = typed_table()
    assert set(owners(t, [], 4).tolist()) == {0}
    assert set(owners(t, ["i"], 1).tolist()) == {0}


def run_tasks(size: int, work: Callable[[Exchange], Any],
              before: Callable[[int, list[str]], None] | None = None) -> list[Any]:
    """``work`` on ``size`` exchanges, one thread each (the addresses shared through a list);
    ``before(rank, addresses)`` runs in each task once the addresses are known, before it
    connects to the others."""
    addresses: list[str | None] = [None] * size
    met = threading.Barrier(size)
    results: list[Any] = [None] * size
    errors: list[BaseException] = []

    def task(rank: int) -> None:
        def gather(address: str) -> list[str]:
            addresses[rank] = address
            met.wait()
            got = [str(a) for a in addresses]
            if before is not None:
                before(rank, got)
            return got

        try:
            ex = Exchange(rank, size, gather, "localhost")
        except BaseException as e:  # noqa: BLE001 - reported to the test (a task that ended before it connected)
            errors.append(e)
            return
        try:
            results[rank] = work(ex)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)
        finally:
            ex.close()

    threads = [threading.Thread(target=task, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("size", [2, 3])
def test_rows_reach_their_owner_and_none_is_lost(size: int) -> None:
    rng = random.Random(size)
    parts = [pa.table({"k": [rng.randrange(20) for _ in range(300)], "v": [rng.random() for _ in range(300)]})
             for _ in range(size)]

    def work(ex: Exchange) -> tuple[pa.Table, pa.Table, int, list[list[int]]]:
        mine = ex.table(parts[ex.rank], ["k"])
        empty = ex.table(parts[ex.rank].slice(0, 0), ["k"])
        return mine, empty, ex.total(mine.num_rows), ex.gather([ex.rank, 10 * ex.rank])

    got = run_tasks(size, work)
    for rank, (mine, empty, total, gathered) in enumerate(got):
        assert mine.schema == parts[0].schema and empty.num_rows == 0
        assert set(owners(mine, ["k"], size).tolist()) <= {rank}
        assert total == 300 * size
        assert gathered == [[q, 10 * q] for q in range(size)]
    sent = Counter(row for p in parts for row in zip(p["k"].to_pylist(), p["v"].to_pylist()))
    received = Counter(row for mine, *_ in got for row in zip(mine["k"].to_pylist(), mine["v"].to_pylist()))
    assert received == sent


def test_a_task_that_ends_early_is_an_exchange_error() -> None:
    def work(ex: Exchange) -> int:
        if ex.rank == 1:
            return 0  # leaves without taking part: its connections close
        return ex.total(1)

    with pytest.raises(ExchangeError, match="task 1 of the loop's key partitions ended"):
        run_tasks(2, work)


def test_a_task_that_ended_before_another_connected_is_an_exchange_error() -> None:
    """Task 1 ends (its server closed) before task 0 connects to it: task 0's exchange fails
    with the error naming task 1, not a bare refused connection."""
    gone = threading.Event()

    def before(rank: int, addresses: list[str]) -> None:
        if rank == 0:
            assert gone.wait(30)

    def work(ex: Exchange) -> int:
        if ex.rank == 1:
            ex.close()
            gone.set()
            return 0
        return ex.total(1)

    with pytest.raises(ExchangeError, match=r"task 1 of the loop's key partitions ended before this task \(task 0\) "
                                            "connected to it"):
        run_tasks(2, work, before)


def test_a_connection_without_the_tasks_secret_is_closed_unread() -> None:
    """Strangers reach task 0 before task 1 does: one claiming to be task 1 with a wrong
    secret and sending rows, one sending nothing.  Task 0 closes the first unread, waits on
    neither, and exchanges with the real task 1 alone."""
    import socket
    import struct

    strangers: list[socket.socket] = []

    def intrude(rank: int, addresses: list[str]) -> None:
        if rank != 1:
            return
        host, port, secret = addresses[0].rsplit("|", 2)
        assert len(bytes.fromhex(secret)) == 32
        forged = socket.create_connection((host, int(port)))
        blob = struct.pack("!q", 1) + bytes(32)  # rank 1, a wrong secret
        payload = struct.pack("!q", 99)
        forged.sendall(blob + struct.pack("!q", len(payload)) + payload)
        silent = socket.create_connection((host, int(port)))
        strangers.extend([forged, silent])

    def work(ex: Exchange) -> list[list[int]]:
        return ex.gather([ex.rank + 1])

    try:
        got = run_tasks(2, work, before=intrude)
    finally:
        for c in strangers:
            c.close()
    assert got == [[[1], [2]], [[1], [2]]]
