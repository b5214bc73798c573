"""A memory-mapped Arrow copy of a view's stored Parquet files, on the machine that reads them.

On ``(data, time, diff)``: nothing here knows about updates.  A stored file never changes
once written (every version writes new names; a retried task replaces a file whole, with
the same rows), yet an update run inside one task (:mod:`spark_differential.incremental.onetask`)
reads every trace it extends whole: decoding 4,000,000 Parquet rows costs it about a
quarter of a second, at every update, for a few thousand rows it keeps.  So the first read
of a file (or the task that wrote it) leaves an uncompressed Arrow IPC copy of the columns
read in a local directory, named by the file's path, inode, size and modification time
and the columns; later reads map that copy (``pyarrow.memory_map``): nothing is decoded,
and the pages the task does not touch are never read.  A large file also gets, at its
first read by key, an index of its rows by the hash of the key columns
(:meth:`ArrowCache.index`, a :class:`~spark_differential.kernels.native.KeyIndex`): the
rows of the keys an update touches are then found by binary search, and only those rows'
pages are read, so reading a trace by key costs what the touched keys hold, not the trace.

The directory holds at most ``limit`` bytes: writing a copy that would pass it first
deletes the copies used least recently (a read refreshes a copy's modification time).
Finding them lists the directory, whose cost grows with the number of copies (a machine
that ran many small views holds tens of thousands: 0.13 s a listing at 32,000), so a
process lists it once, then counts what it writes itself, and lists it again only when
that count says the limit would be passed or :data:`RESCAN_SECONDS` have passed (other
processes write there too: they may pass the limit by what they wrote in that time, until
a listing catches it).  A listing that deletes leaves the copies at most :data:`LOW_WATER`
of the limit, so a full directory is not listed again at every copy.
A copy of a file that changed has another name, so it is never read for it.  The copies of
the files of one directory sit in a folder of their own (named by the directory), which
:meth:`ArrowCache.forget` deletes with the directory: a view deleting an old version
deletes its copies at once (:meth:`~spark_differential.incremental.store.Store.clean_up`), so
a long-running view holds the copies of its live versions, not of every version it wrote
(a listing of tens of thousands of dead copies cost 0.17-0.35 s a minute); copies of files
gone otherwise are deleted in their turn.  ``spark_differential.incremental.arrowCacheBytes``
sets the limit (``0`` turns the copies off): :func:`spark_differential.core.settings.arrow_cache_bytes`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from spark_differential.core.lazy import lazy
from spark_differential.core.settings import DEFAULT_INDEX_ROWS
from spark_differential.kernels import native

pa = lazy("pyarrow")
pq = lazy("pyarrow.parquet")

SUFFIX = ".arrow"
INDEX_SUFFIX = ".index.arrow"  # an index's copy (:meth:`ArrowCache.index`)
_INDEX = "\x01index"  # names an index's copy apart from any columns' copy
LOW_WATER = 0.9  # a listing that must delete copies leaves them at most this share of the limit
RESCAN_SECONDS = 60.0  # a process lists the copies again at least this often when it writes one
# per directory: (when this process last listed it, the bytes of its copies then plus what it wrote since)
_listed: dict[str, tuple[float, int]] = {}


@dataclass(frozen=True)
class ArrowCache:
    """Where the copies live (a directory of this machine) and how many bytes they may take.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"k": [1, 2], "v": ["a", "b"]}), f"{d}/f.parquet")
    >>> cache = ArrowCache(f"{d}/cache", 1 << 20)
    >>> cache.read(f"{d}/f.parquet", ["v"]).to_pylist()        # decoded, and copied
    [{'v': 'a'}, {'v': 'b'}]
    >>> cache.read(f"{d}/f.parquet", ["v"]).to_pylist()        # mapped from the copy
    [{'v': 'a'}, {'v': 'b'}]
    >>> sum(len(files) for _, _, files in os.walk(f"{d}/cache"))
    1
    >>> cache.forget(d)                                         # the directory's copies deleted
    >>> sum(len(files) for _, _, files in os.walk(f"{d}/cache"))
    0
    """

    directory: str
    limit: int
    index_rows: int = DEFAULT_INDEX_ROWS  # files of fewer rows are scanned, not indexed (:meth:`index`)

    @staticmethod
    def default(limit: int, index_rows: int = DEFAULT_INDEX_ROWS) -> ArrowCache | None:
        """The copies of this user in the system's temporary directory (``None`` when ``limit`` is 0)."""
        if limit <= 0:
            return None
        uid = os.getuid() if hasattr(os, "getuid") else 0
        return ArrowCache(os.path.join(tempfile.gettempdir(), f"spark_differential-arrow-{uid}"), limit, index_rows)

    def _name(self, file: str, columns: Sequence[str], suffix: str = SUFFIX) -> str | None:
        """The copy's path for ``file``'s ``columns`` as the file is now (``None``: no such file)."""
        try:
            st = os.stat(file)
        except OSError:
            return None
        real = os.path.realpath(file)
        key = f"{real}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0" + "\0".join(columns)
        return os.path.join(self._folder(os.path.dirname(real)), hashlib.sha1(key.encode("utf-8")).hexdigest() + suffix)

    def _folder(self, directory: str) -> str:
        """Where the copies of the files of ``directory`` (a real path) sit."""
        return os.path.join(self.directory, hashlib.sha1(directory.encode("utf-8")).hexdigest()[:20])

    def forget(self, directory: str) -> None:
        """Delete the copies (and indexes) of the files under ``directory``, a stored directory
        about to be deleted (on this machine); nothing happens where there are none."""
        removed = 0
        for root, _, files in os.walk(os.path.realpath(directory)):
            if not files:
                continue
            folder = self._folder(root)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    size = entry.stat().st_size
                    os.remove(entry.path)
                    removed += size
                except OSError:
                    pass
            try:
                os.rmdir(folder)
            except OSError:
                pass
        if removed and self.directory in _listed:
            listed, total = _listed[self.directory]
            _listed[self.directory] = (listed, max(0, total - removed))

    def read(self, file: str, columns: Sequence[str]) -> pa.Table:
        """``file``'s ``columns``: mapped from its copy, or read with pyarrow and copied."""
        name = self._name(file, columns)
        if name is not None and os.path.exists(name):
            try:
                os.utime(name)  # used now: the last to go
                return pa.ipc.open_file(pa.memory_map(name)).read_all()
            except (OSError, pa.ArrowInvalid):  # evicted meanwhile, or a torn copy: read the file
                pass
        table = pq.read_table(file, columns=list(columns))
        self.keep(file, table)
        return table

    def keep(self, file: str, table: pa.Table) -> None:
        """Leave a copy of ``table``, all of ``file``'s columns named as in it, for later reads."""
        name = self._name(file, table.column_names)
        if name is not None:
            self._write(name, table)

    def index(self, file: str, table: pa.Table, cols: Sequence[str]) -> native.KeyIndex | None:
        """The :class:`~spark_differential.kernels.native.KeyIndex` of ``file``'s rows (``table``:
        some of its columns, in its order) by ``cols``: mapped from the copy the first call left,
        or built and copied (``None``: ``cols`` cannot be indexed, or the file has fewer than
        ``index_rows`` rows: a scan of it costs less)."""
        if table.num_rows < max(1, self.index_rows) or not native.indexable(table.schema, cols):
            return None
        name = self._name(file, [_INDEX, *cols], INDEX_SUFFIX)
        if name is not None and os.path.exists(name):
            try:
                os.utime(name)
                return native.KeyIndex.from_table(pa.ipc.open_file(pa.memory_map(name)).read_all(), cols)
            except (OSError, pa.ArrowInvalid, KeyError):
                pass
        index = native.KeyIndex.build(table, cols)
        if index is not None and name is not None:
            self._write(name, index.to_table())
        return index

    def _write(self, name: str, table: pa.Table) -> None:
        """Write ``table`` as the copy ``name`` (under a temporary name and renamed: a reader
        sees a whole copy or none), unless it would take more than half the limit."""
        if table.nbytes > self.limit // 2:
            return
        os.makedirs(self.directory, exist_ok=True)
        self._make_room(table.nbytes)
        os.makedirs(os.path.dirname(name), exist_ok=True)
        tmp = f"{name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
                out.write_table(table)
            size = os.path.getsize(tmp)
            os.replace(tmp, name)
        except OSError:  # a full disk, say: the copy is an optimization only
            if os.path.exists(tmp):
                os.remove(tmp)
            return
        listed, total = _listed[self.directory]
        _listed[self.directory] = (listed, total + size)

    def _make_room(self, nbytes: int) -> None:
        """Room for a copy of ``nbytes``: the directory listed and its least recently used copies
        deleted (:meth:`_evict`), unless this process listed it less than :data:`RESCAN_SECONDS`
        ago and the bytes it counted since leave the room (the module docstring)."""
        now = time.monotonic()
        listed, total = _listed.get(self.directory, (-RESCAN_SECONDS, self.limit))
        if now - listed < RESCAN_SECONDS and total + nbytes <= self.limit:
            return
        _listed[self.directory] = (now, self._evict(self.limit - nbytes, int(self.limit * LOW_WATER) - nbytes))

    def _evict(self, room: int, low: int) -> int:
        """When the copies take more than ``room`` bytes, delete the least recently used until
        they take at most ``low``; the bytes left."""
        entries = []
        for top in _scan(self.directory):
            if top.is_dir(follow_symlinks=False):
                files = _scan(top.path)
                if not files:  # (a folder emptied by deletions, not one just made for a copy: gone too)
                    try:
                        if time.time() - top.stat().st_mtime > RESCAN_SECONDS:
                            os.rmdir(top.path)
                    except OSError:
                        pass
            else:  # (a copy written before copies sat in folders)
                files = [top]
            for entry in files:
                try:
                    st = entry.stat()
                except OSError:
                    continue
                entries.append((st.st_mtime_ns, st.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        if total <= room:
            return total
        for _, size, path in sorted(entries):
            if total <= low:
                break
            try:
                os.remove(path)
            except OSError:
                pass
            total -= size
        return total


def _scan(directory: str) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` (none when it is gone)."""
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


__all__ = ["ArrowCache"]
