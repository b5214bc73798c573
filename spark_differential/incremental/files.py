"""The filesystem an incremental view's state lives on: the few operations it needs.

On ``(data, time, diff)``: nothing here knows about updates; a view stores its
collections as Parquet directories and its manifests as small JSON files under one
root, and reads, lists, renames and deletes them through :class:`Files`, on the
filesystem Spark resolves the root with (Hadoop's ``FileSystem`` on a classic session,
the local one for a Spark Connect client, which must then share it with the server:
:func:`client_local_path`).
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from typing import Any

from pyspark.sql import SparkSession

from spark_differential.errors import IncrementalStateError

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}


def client_local_path(spark: Any, root: str) -> str:
    """``root`` as a path of this machine, for a Spark Connect session's view.

    On Spark Connect the client writes the manifests and the server's executors the
    Parquet files: both must see one filesystem, so the server must run on this
    machine and ``root`` be a local path.  Anything else would split the state over
    two filesystems, which is refused here, before any job."""
    scheme, sep, rest = root.partition("://")
    if sep and scheme != "file":
        raise IncrementalStateError(
            f"sd.incremental: on a Spark Connect session the view's state must be on this machine's "
            f"filesystem (the client writes its manifests), but path {root!r} is a {scheme}:// URI. Use a "
            "local path, or a classic session (its state goes through Hadoop's FileSystem, so HDFS, S3A, "
            "ABFS... work)."
        )
    if sep:
        root = "/" + rest.lstrip("/")
    elif root.startswith("file:"):
        root = root[len("file:"):]
    host = ""
    try:
        host = str(spark.client.host)
    except Exception:  # noqa: BLE001 - not a Connect client we know: nothing to check
        return root
    if host and host not in LOCAL_HOSTS and host not in {socket.gethostname(), socket.getfqdn()}:
        raise IncrementalStateError(
            f"sd.incremental: this Spark Connect session's server runs on {host!r}, not on this machine. "
            "The view's manifests are written by the client and its Parquet files by the server, so they "
            "would land on two filesystems. Run the view where the server runs (a Connect client on the "
            "server's host, or a classic session)."
        )
    return root


class Files:
    """The few file operations the state needs, on the filesystem Spark resolves ``root`` with.

    Classic sessions resolve it with Hadoop's ``FileSystem`` (so HDFS, S3A, ABFS… work as
    they do for Spark's own reads and writes); Spark Connect sessions, which have no JVM on
    the client, use the local filesystem.  When Hadoop resolves the root to the local
    filesystem, the operations go through Python's ``os`` too (a py4j round trip costs about
    a millisecond, and an update makes dozens): the same files, listed as Hadoop lists them
    (its checksum files, ``.<name>.crc``, left out).

    >>> import spark_differential as sd, tempfile
    >>> files = Files(sd.session(), tempfile.mkdtemp())
    >>> files.write_text_atomic(files.join("m.json"), "{}")
    >>> files.exists(files.join("m.json")), files.read_text(files.join("m.json"))
    (True, '{}')
    >>> files.local_root() is not None
    True
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        self._jvm: Any = None
        try:
            jvm = spark._jvm  # type: ignore[attr-defined]
            jsc = spark._jsc  # type: ignore[attr-defined]
        except Exception:
            jvm = None
        self._local_root: str | None
        if jvm is not None:
            self._jvm = jvm
            self._conf = jsc.hadoopConfiguration()
            p = jvm.org.apache.hadoop.fs.Path(root)
            self._fs = p.getFileSystem(self._conf)
            self.root = str(self._fs.makeQualified(p).toString()).rstrip("/")
            local = str(self._fs.getUri().getScheme()) == "file"
            self._local_root = str(self._path(self.root).toUri().getPath()).rstrip("/") if local else None
        else:
            self.root = os.path.abspath(client_local_path(spark, root))
            self._local_root = self.root

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _path(self, p: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(p)

    def local_root(self) -> str | None:
        """The root as a path of this machine when the filesystem is the local one (``None``:
        another one, such as HDFS or S3A)."""
        return self._local_root

    def _local(self, p: str) -> str | None:
        """``p`` (the root or a path under it, as :meth:`join` makes them) as a path of this machine
        when the filesystem is the local one (``None``: another one)."""
        if self._local_root is None:
            return None
        if p == self.root or p.startswith(self.root + "/"):
            return self._local_root + p[len(self.root):]
        return str(self._path(p).toUri().getPath()) if self._jvm is not None else p

    def exists(self, p: str) -> bool:
        local = self._local(p)
        if local is not None:
            return os.path.exists(local)
        return bool(self._fs.exists(self._path(p)))

    def listdir(self, p: str) -> list[str]:
        local = self._local(p)
        if local is not None:
            if not os.path.isdir(local):
                return [os.path.basename(local)] if os.path.exists(local) else []
            return sorted(n for n in os.listdir(local) if not (n.startswith(".") and n.endswith(".crc")))
        if not self.exists(p):
            return []
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(self._path(p)))

    def mkdirs(self, p: str) -> None:
        local = self._local(p)
        if local is not None:
            os.makedirs(local, exist_ok=True)
        else:
            self._fs.mkdirs(self._path(p))

    def read_text(self, p: str) -> str:
        local = self._local(p)
        if local is not None:
            with open(local, encoding="utf-8") as fh:
                return fh.read()
        stream = self._fs.open(self._path(p))
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def create_exclusive(self, p: str, text: str) -> bool:
        """Create the file ``p`` holding ``text`` unless it exists (then ``False``), in one step
        that a concurrent creator cannot interleave with (local filesystem, HDFS; S3A has no
        such create, so there it is best effort)."""
        data = text.encode("utf-8")
        local = self._local(p)
        if local is not None:
            try:
                fd = os.open(local, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        try:
            out = self._fs.create(self._path(p), False)
        except Exception:  # noqa: BLE001 - FileAlreadyExistsException through py4j, or a real failure
            if self.exists(p):
                return False
            raise
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        return True

    def write_text_atomic(self, p: str, text: str) -> None:
        """Write to a temporary name in the same directory, then move it to ``p``, which must not
        exist: :class:`IncrementalStateError` if another writer made it meanwhile (never overwritten)."""
        d, name = p.rsplit("/", 1)
        tmp = f"{d}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        data = text.encode("utf-8")
        local, local_tmp = self._local(p), self._local(tmp)
        if local is not None and local_tmp is not None:
            with open(local_tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(local_tmp, local)  # fails when ``p`` exists, unlike a rename
                moved = True
            except FileExistsError:
                moved = False
            finally:
                os.remove(local_tmp)
        else:
            out = self._fs.create(self._path(tmp), True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            moved = bool(self._fs.rename(self._path(tmp), self._path(p)))  # HDFS: false when ``p`` exists
            if not moved:
                self.delete(tmp)
        if not moved:
            raise IncrementalStateError(
                f"sd.incremental: could not commit {p}: "
                + ("another writer committed it first (two writers on one path); this update was not committed"
                   if self.exists(p) else "the filesystem refused the rename")
            )

    def size(self, p: str) -> int:
        """Bytes of the files under ``p`` (a file or a directory; checksum files left out)."""
        local = self._local(p)
        if local is not None:
            if os.path.isfile(local):
                return os.path.getsize(local)
            return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(local) for f in fs
                       if not (f.startswith(".") and f.endswith(".crc")))
        return int(self._fs.getContentSummary(self._path(p)).getLength())

    def delete(self, p: str) -> None:
        local = self._local(p)
        if local is not None:
            if os.path.isdir(local):
                shutil.rmtree(local, ignore_errors=True)
            elif os.path.exists(local):
                os.remove(local)
                d, name = os.path.split(local)
                crc = os.path.join(d, f".{name}.crc")  # Hadoop's checksum of a file it wrote
                if os.path.exists(crc):
                    os.remove(crc)
            return
        self._fs.delete(self._path(p), True)


__all__ = ["LOCAL_HOSTS", "Files", "client_local_path"]
