"""Memory-mapped Arrow copies of stored Parquet files (``spark_differential.incremental.arrow_cache``), without Spark.

On ``(data, time, diff)``: a copy must give exactly the columns a read of the file gives, be
used instead of the file while the file is unchanged, never be used for a file that changed
(a retried task's rewrite), and the copies must stay within their byte limit."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_differential.incremental import arrow_cache
from spark_differential.incremental.arrow_cache import ArrowCache
from spark_differential.kernels import native


def _copies(cache: os.PathLike[str] | str) -> list[os.DirEntry[str]]:
    """The copies under a cache directory (each in the folder of its file's directory)."""
    return [e for folder in os.scandir(cache) for e in os.scandir(folder.path)]


def _file(path: str, n: int, start: int = 0) -> str:
    pq.write_table(pa.table({"k": list(range(start, start + n)), "s": [f"v{i}" for i in range(n)]}), path)
    return path


def test_a_copy_is_read_instead_of_the_file_until_the_file_changes(tmp_path, monkeypatch) -> None:
    f = _file(str(tmp_path / "a.parquet"), 100)
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 20)
    first = cache.read(f, ["k", "s"])
    assert first.equals(pq.read_table(f))
    assert len(_copies(tmp_path / "cache")) == 1
    decoded = []
    real = arrow_cache.pq.read_table
    monkeypatch.setattr(arrow_cache.pq, "read_table", lambda *a, **k: decoded.append(a) or real(*a, **k))
    assert cache.read(f, ["k", "s"]).equals(first) and not decoded  # mapped, not decoded
    assert cache.read(f, ["s"]).column_names == ["s"] and len(decoded) == 1  # other columns: another copy
    time.sleep(0.01)
    _file(str(tmp_path / "b.parquet"), 50, start=1000)
    os.replace(tmp_path / "b.parquet", f)  # rewritten whole under the same name, as a retried task does
    again = cache.read(f, ["k", "s"])
    assert again.column("k").to_pylist() == list(range(1000, 1050)) and len(decoded) == 2


def test_the_writer_side_copy_is_what_a_read_maps(tmp_path, monkeypatch) -> None:
    f = _file(str(tmp_path / "a.parquet"), 10)
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 20)
    cache.keep(f, pq.read_table(f))
    monkeypatch.setattr(arrow_cache.pq, "read_table", lambda *a, **k: pytest.fail("decoded"))
    assert cache.read(f, ["k", "s"]).column("k").to_pylist() == list(range(10))


def test_the_copies_stay_within_their_limit_dropping_the_least_recently_used(tmp_path, monkeypatch) -> None:
    files = [_file(str(tmp_path / f"f{i}.parquet"), 2000, start=i) for i in range(5)]
    one = pq.read_table(files[0]).nbytes
    cache = ArrowCache(str(tmp_path / "cache"), 3 * one + one // 2)
    for f in [*files[:3], files[0], *files[3:]]:  # f0 used again after f1 and f2: f1 and f2 go first
        cache.read(f, ["k", "s"])
        time.sleep(0.01)
    sizes = [e.stat().st_size for e in _copies(tmp_path / "cache")]
    assert len(sizes) == 3 and sum(sizes) <= cache.limit, sizes
    decoded = []
    real = arrow_cache.pq.read_table
    monkeypatch.setattr(arrow_cache.pq, "read_table", lambda f, **k: decoded.append(f) or real(f, **k))
    for f in [files[4], files[3], files[0]]:
        cache.read(f, ["k", "s"])
    assert decoded == []  # the three most recently used are kept
    cache.read(files[1], ["k", "s"])
    assert decoded == [files[1]]
    assert ArrowCache.default(0) is None


def test_an_index_is_built_once_kept_beside_the_copy_and_rebuilt_for_a_changed_file(tmp_path, monkeypatch) -> None:
    f = _file(str(tmp_path / "a.parquet"), 500)
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 22, index_rows=100)
    table = cache.read(f, ["k", "s"])
    built = []
    real = native.KeyIndex.build
    monkeypatch.setattr(native.KeyIndex, "build", staticmethod(lambda t, c: built.append(c) or real(t, c)))
    keys = pa.table({"k": [3, 499, 1000]})
    first = cache.index(f, table, ["k"])
    assert first is not None and first.touching(table, keys).column("k").to_pylist() == [3, 499]
    again = cache.index(f, table, ["k"])  # mapped from its copy
    assert again is not None and again.touching(table, keys).column("k").to_pylist() == [3, 499]
    assert built == [["k"]]
    assert cache.index(f, table, ["s"]) is not None and len(built) == 2  # other columns: another index
    assert ArrowCache(str(tmp_path / "cache"), 1 << 22, index_rows=1000).index(f, table, ["k"]) is None  # small
    time.sleep(0.01)
    _file(str(tmp_path / "b.parquet"), 200, start=1000)
    os.replace(tmp_path / "b.parquet", f)
    table = cache.read(f, ["k", "s"])
    rebuilt = cache.index(f, table, ["k"])
    assert rebuilt is not None and rebuilt.touching(table, keys).column("k").to_pylist() == [1000]
    assert len(built) == 3


def test_the_copies_are_listed_once_a_while_not_at_every_copy(tmp_path, monkeypatch) -> None:
    """Listing the directory costs what it holds (tens of thousands of small copies on a machine
    that ran many views): a process lists it at its first copy, then only when the bytes it
    counted would pass the limit or RESCAN_SECONDS have passed."""
    listings = []
    real = ArrowCache._evict
    monkeypatch.setattr(ArrowCache, "_evict", lambda self, *a: listings.append(a) or real(self, *a))
    clock = [1000.0]
    monkeypatch.setattr(arrow_cache.time, "monotonic", lambda: clock[0])
    files = [_file(str(tmp_path / f"f{i}.parquet"), 2000, start=i) for i in range(30)]
    one = pq.read_table(files[0]).nbytes
    cache = ArrowCache(str(tmp_path / "cache"), 10 * one)
    for f in files[:8]:
        cache.read(f, ["k", "s"])
    assert len(listings) == 1 and len(_copies(tmp_path / "cache")) == 8
    clock[0] += arrow_cache.RESCAN_SECONDS + 1  # a while later: listed again (another process may have written)
    cache.read(files[8], ["k", "s"])
    assert len(listings) == 2
    for i, f in enumerate(files[9:], start=9):  # full: a listing deletes down to LOW_WATER of the limit
        clock[0] += 0.001 * i
        cache.read(f, ["k", "s"])
        sizes = [e.stat().st_size for e in _copies(tmp_path / "cache")]
        assert sum(sizes) <= cache.limit, (i, sizes)
    # 21 copies written into a directory holding 9 of them: at most one listing per copy over the
    # low water mark, not one per copy
    assert 3 <= len(listings) <= 2 + (21 + 1) // 2, len(listings)
    kept = _copies(tmp_path / "cache")
    assert len(kept) <= 9


def test_forgetting_a_directory_deletes_its_files_copies_only(tmp_path) -> None:
    """``forget`` (a view deleting an old version) deletes the copies and indexes of the files
    under the directory and leaves every other copy; the bytes it freed are no longer counted."""
    (tmp_path / "old" / "kind").mkdir(parents=True)
    (tmp_path / "live").mkdir()
    old = _file(str(tmp_path / "old" / "kind" / "a.parquet"), 500)
    live = _file(str(tmp_path / "live" / "b.parquet"), 500)
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 22, index_rows=100)
    for f in (old, live):
        cache.index(f, cache.read(f, ["k", "s"]), ["k"])
    assert len(_copies(tmp_path / "cache")) == 4  # a copy and an index each
    counted = arrow_cache._listed[cache.directory][1]
    cache.forget(str(tmp_path / "old"))
    left = _copies(tmp_path / "cache")
    assert len(left) == 2 and {os.path.dirname(e.path) for e in left} == {cache._folder(str(tmp_path / "live"))}
    assert arrow_cache._listed[cache.directory][1] < counted
    cache.forget(str(tmp_path / "nothing-here"))  # no copies: nothing happens
    assert len(_copies(tmp_path / "cache")) == 2


def test_copies_made_before_folders_are_still_evicted(tmp_path) -> None:
    """A copy written at the top of the directory (before copies sat in folders) counts toward
    the limit and goes first when it is the least recently used."""
    (tmp_path / "cache").mkdir()
    flat = tmp_path / "cache" / ("0" * 40 + arrow_cache.SUFFIX)
    flat.write_bytes(b"x" * 100_000)
    os.utime(flat, (1, 1))
    f = _file(str(tmp_path / "a.parquet"), 2000)
    one = pq.read_table(f).nbytes
    cache = ArrowCache(str(tmp_path / "cache"), one + 50_000)
    cache.read(f, ["k", "s"])
    assert not flat.exists() and len(_copies(tmp_path / "cache")) == 1
