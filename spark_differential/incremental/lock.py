"""One writer per view path: the lock an update holds while it writes a version.

On ``(data, time, diff)``: a view's versions form one sequence, each update building on
the newest committed one.  Two writers updating the same path at once would both build
on the same version and one of their updates would be lost (or, where the filesystem
lets a manifest be replaced, silently overwritten).  So an update first creates the
path's lock file, ``_writer.lock`` (a create that fails when the file exists: atomic on
a local filesystem and on HDFS), holding who writes (host, process, view) and since
when, and deletes it when the update ends, committed or not.  A second writer finds the
file and gets an :class:`~spark_differential.errors.IncrementalStateError` at once,
naming the holder and its age.  A lock left by a killed process is broken by the next
writer when it was taken on the same host by a process that is no longer running (a
warning says so); any other lock stays until it is broken explicitly
(:meth:`WriterLock.break_`, ``view.break_lock()``), since no writer can tell a slow
update from a dead one on another machine.  (Were a live writer ever taken for a dead
one, the manifest commit still refuses to replace a version another writer committed.)  On object stores without an
exclusive create (S3A) the check is best effort: run one writer per path there.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import socket
import uuid

from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.files import Files

LOCK = "_writer.lock"

_log = logging.getLogger("spark_differential.incremental")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WriterLock:
    """The lock file of the view stored under ``files.root``.

    >>> import spark_differential as sd, tempfile
    >>> from spark_differential.incremental.files import Files
    >>> lock = WriterLock(Files(sd.session(), tempfile.mkdtemp()))
    >>> lock.acquire(); lock.holder() is not None
    True
    >>> lock.release(); lock.holder() is None
    True
    """

    def __init__(self, files: Files) -> None:
        self.files = files
        self.path = files.join(LOCK)
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "writer": uuid.uuid4().hex[:12]}

    def holder(self) -> dict[str, object] | None:
        """What the lock file says (``None``: no writer holds the path)."""
        if not self.files.exists(self.path):
            return None
        try:
            return dict(json.loads(self.files.read_text(self.path)))
        except (OSError, ValueError):  # being written or deleted right now, or not ours
            return {"host": "?", "pid": "?", "writer": "?", "since": "?"}

    def acquire(self) -> None:
        """Create the lock file, or raise :class:`IncrementalStateError` naming the writer that holds it."""
        now = _dt.datetime.now(_dt.timezone.utc)
        text = json.dumps({**self.owner, "since": now.isoformat(timespec="seconds")})
        self.files.mkdirs(self.files.root)  # a new view's path
        if self.files.create_exclusive(self.path, text):
            return
        held = self.holder() or {}
        if self._stale(held):
            _log.warning("sd.incremental: breaking the lock of %s left by %s", self.files.root, self._describe(held, now))
            self.files.delete(self.path)
            if self.files.create_exclusive(self.path, text):
                return
            held = self.holder() or {}
        raise IncrementalStateError(
            f"sd.incremental: another writer is updating the view at {self.files.root}: {self._describe(held, now)}. "
            "One writer per path at a time: wait for its update to end and try again. If that writer is gone "
            "(killed while updating), break its lock with view.break_lock(), then update."
        )

    def release(self) -> None:
        """Delete the lock file if this writer holds it."""
        held = self.holder()
        if held is not None and held.get("writer") == self.owner["writer"]:
            self.files.delete(self.path)

    def break_(self) -> dict[str, object] | None:
        """Delete the lock file whoever holds it; what it said (``None``: there was none)."""
        held = self.holder()
        if held is not None:
            self.files.delete(self.path)
        return held

    def _stale(self, held: dict[str, object]) -> bool:
        """Taken on this host by a process that is no longer running."""
        pid = held.get("pid")
        return held.get("host") == self.owner["host"] and isinstance(pid, int) and not _alive(pid)

    def _describe(self, held: dict[str, object], now: _dt.datetime) -> str:
        who = f"process {held.get('pid')} on {held.get('host')} (writer {held.get('writer')})"
        try:
            since = _dt.datetime.fromisoformat(str(held.get("since")))
            who += f", for {int((now - since).total_seconds())} s (since {held.get('since')})"
        except ValueError:
            pass
        if self._stale(held):
            who += "; that process is no longer running on this host"
        return who


__all__ = ["LOCK", "WriterLock"]
