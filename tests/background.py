"""Separate processes (each its own Spark) that some tests wait for, run side by side.

A test module registers, at import, the work a test of it waits for (:func:`register`: a
function that runs the processes and returns what they printed).  Run by one pytest
process, the first test of a module to ask for its result (:func:`result`) starts the work of
every registered test of that module the session will run, each in a thread of its own, so
their processes run together while the test process waits, not one after the other
(``test_sessions``' retries run and local-cluster run: about a minute less).  Under
``pytest-xdist`` (``./dev test`` runs the tests in two processes) a process may not run the
module's other tests, so each test starts its own work only: the other process's tests run
meanwhile.
"""

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
TIMEOUT = 1800  # seconds a test waits for its work

_REGISTERED: dict[tuple[str, str], tuple[Callable[[], Any], float]] = {}  # (module, test)
_STARTED: dict[tuple[str, str], Future] = {}
XDIST = bool(os.environ.get("PYTEST_XDIST_WORKER"))  # a process of pytest-xdist's (``./dev test``)
_AT_ONCE = threading.Semaphore(3)  # works running at once (memory: each starts a Spark)


def register(module: str, test: str, work: Callable[[], Any], seconds: float) -> None:
    """The work test function ``test`` of ``module`` (its ``__name__``) waits for (a function
    of no argument, run in a thread), and about how long it takes alone (the longest starts
    first)."""
    _REGISTERED[(module.rsplit(".", 1)[-1], test)] = (work, seconds)


def _start(work: Callable[[], Any]) -> Future:
    """``work`` in a daemon thread (a session that ends early does not wait for it)."""
    done: Future = Future()

    def run() -> None:
        with _AT_ONCE:
            try:
                done.set_result(work())
            except BaseException as e:  # noqa: BLE001 - raised again in the waiting test
                done.set_exception(e)

    threading.Thread(target=run, daemon=True, name="sd-test-background").start()
    return done


def result(request: pytest.FixtureRequest) -> Any:
    """What the work registered for the requesting test returned (its exception raised)."""
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    mine = (module, request.node.originalname)
    if XDIST:  # (this process may not run the module's other tests: its own work only)
        selected = {mine}
    else:
        selected = {(item.module.__name__.rsplit(".", 1)[-1], item.originalname) for item in request.session.items
                    if isinstance(item, pytest.Function)}
    for key, (work, _) in sorted(_REGISTERED.items(), key=lambda kv: -kv[1][1]):
        if key[0] == module and key in selected and key not in _STARTED:
            _STARTED[key] = _start(work)
    return _STARTED[mine].result(timeout=TIMEOUT)


def env() -> dict[str, str]:
    """The environment of a separate test process: this checkout importable, a classic session."""
    out = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out.pop("SD_TEST_SESSION", None)
    return out

