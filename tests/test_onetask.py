"""The one-task update's file helpers (``spark_differential.incremental.onetask``), without Spark.

On ``(data, time, diff)``: a version's collections are rows tagged by kind, each with its
own physical columns (``_sd_<prefix>_<j>``); the task's writer stores each kind as one
Parquet file under ``_sd_kind=<kind>``, which ``read_local`` reads back as the collection.
A retried task writes the same file again: the rows are there once."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from spark_differential.incremental.store import parquet_files, read_local, writer


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "_sd_kind": ["o", "p", "s0_0", "s0_0c", "o"],
        "_sd_o_0": ["a", "b", None, None, "c"],
        "_sd_o_1": [1, 2, None, None, 3],
        "_sd_s0_0_0": [None, None, 7, 8, None],
        "_sd_s0_0_1": [None, None, 10, 20, None],
    })


def test_the_writer_stores_each_kind_once_and_read_local_reads_it_back(tmp_path) -> None:
    target = str(tmp_path / "data")
    for _ in range(2):  # a retried task: the same files replaced whole
        kinds = [k for b in writer(target)(iter([_batch()])) for k in b.column(0).to_pylist()]
    assert sorted(kinds) == ["o", "p", "s0_0", "s0_0c"]
    schema = pa.schema([("name", pa.string()), ("x", pa.int64())])
    out = read_local([f"{target}/_sd_kind=o", f"{target}/_sd_kind=p"], "o", schema)
    assert sorted(out.to_pylist(), key=str) == sorted(
        [{"name": "a", "x": 1}, {"name": "c", "x": 3}, {"name": "b", "x": 2}], key=str)
    trace = pa.schema([("_sd_bucket", pa.int32()), ("_k0", pa.int64())])
    merged = read_local([f"{target}/_sd_kind=s0_0c"], "s0_0", trace)
    assert merged.schema == trace and merged.to_pylist() == [{"_sd_bucket": 8, "_k0": 20}]
    # each kind holds its own columns only, in one file
    assert all(len(parquet_files(f"{target}/_sd_kind={k}")) == 1 for k in kinds)
    assert pq.read_table(parquet_files(f"{target}/_sd_kind=s0_0")[0]).column_names == ["_sd_s0_0_0", "_sd_s0_0_1"]


def test_the_writer_returns_the_output_rows_it_wrote_and_only_those(tmp_path, monkeypatch) -> None:
    """The output an update returns (kind ``o``) comes back with the writer's result as an Arrow
    IPC stream, equal to the file written, so the driver returns it without a job; other kinds,
    and an output over ``INLINE_BYTES``, come back as their kind only."""
    from spark_differential.incremental import store

    target = str(tmp_path / "data")
    (result,) = list(writer(target)(iter([_batch()])))
    blobs = dict(zip(result.column(0).to_pylist(), result.column(1).to_pylist()))
    assert sorted(blobs) == ["o", "p", "s0_0", "s0_0c"]
    assert all(blobs[k] is None for k in ("p", "s0_0", "s0_0c"))
    back = pa.ipc.open_stream(blobs["o"]).read_all()
    assert back.equals(pq.read_table(parquet_files(f"{target}/_sd_kind=o")[0]))
    assert back.to_pylist() == [{"_sd_o_0": "a", "_sd_o_1": 1}, {"_sd_o_0": "c", "_sd_o_1": 3}]
    monkeypatch.setattr(store, "INLINE_BYTES", 8)
    (result,) = list(writer(str(tmp_path / "big"))(iter([_batch()])))
    assert result.column(1).null_count == result.num_rows


def test_the_part_writer_stores_what_the_writer_stores_from_the_padded_rows(tmp_path) -> None:
    """A task's collections written as they are computed (``part_writer``: no row padded with the
    other kinds' null columns) give the files, result and inlined output of ``writer`` over the
    same collections as wide rows (``widened``, what Spark's writer gets); empty parts write
    nothing."""
    from spark_differential.incremental.store import part_writer, widened

    schema = _batch().schema
    out = pa.table({"name": ["a", "c"], "x": [1, 3]})
    parts = [("o", out, "o"), ("p", pa.table({"name": ["b"], "x": [2]}), "o"),
             ("s0_0", pa.table({"b": [7], "k": [10]}), None), ("s0_0c", pa.table({"b": [8], "k": [20]}), "s0_0"),
             ("s1_0", pa.table({"b": pa.array([], pa.int64())}), None)]
    fn = lambda batches: iter(parts)  # noqa: E731 - the task's function, its input ignored
    (by_parts,) = list(part_writer(str(tmp_path / "a"), schema)(fn(iter([]))))
    (by_rows,) = list(writer(str(tmp_path / "b"))(widened(fn, schema)(iter([]))))
    assert by_parts.to_pylist() == by_rows.to_pylist()
    assert sorted(by_parts.column(0).to_pylist()) == ["o", "p", "s0_0", "s0_0c"]
    for kind in ("o", "p", "s0_0", "s0_0c"):
        (a,), (b,) = parquet_files(f"{tmp_path}/a/_sd_kind={kind}"), parquet_files(f"{tmp_path}/b/_sd_kind={kind}")
        assert pq.read_table(a).equals(pq.read_table(b)), kind
    assert pq.read_table(parquet_files(f"{tmp_path}/a/_sd_kind=s0_0c")[0]).to_pylist() == [
        {"_sd_s0_0_0": 8, "_sd_s0_0_1": 20}]


def test_kept_trace_scans_its_small_files_together_and_reads_a_large_one_by_its_index(tmp_path, monkeypatch) -> None:
    """A stored trace is a compacted file and a file per version since: a task reads the rows of
    the touched keys from the files too small to index with one scan over them all (a scan's
    fixed cost, paid once, not once a file), and from a file the cache indexes by binary search."""
    from spark_differential.incremental.arrow_cache import ArrowCache
    from spark_differential.incremental.onetask import Kept
    from spark_differential.kernels import native

    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    big = pa.table({"k": list(range(300)), "v": [f"b{i}" for i in range(300)]}, schema=schema)
    smalls = [pa.table({"k": [i, i + 1, 7], "v": [f"s{j}"] * 3}, schema=schema) for j, i in enumerate((1, 5, 9))]
    paths = []
    for j, t in enumerate([big, *smalls]):
        paths.append(str(tmp_path / f"f{j}.parquet"))
        pq.write_table(t, paths[-1])
    scans = []
    real = native.touching
    monkeypatch.setattr(native, "touching", lambda t, keys, cols: scans.append(t.num_rows) or real(t, keys, cols))
    keys = pa.table({"k": [2, 7, 10, 999]})
    want = sorted(r for t in [big, *smalls] for r in zip(*real(t, keys, ["k"]).to_pydict().values()))

    def got(kept: Kept) -> list:
        return sorted(zip(*kept.touching(keys, ["k"]).to_pydict().values()))

    assert got(Kept(list(zip(paths, [big, *smalls])), schema)) == want
    assert scans == [309]  # one scan, no cache: every file's rows in it
    scans.clear()
    cache = ArrowCache(str(tmp_path / "cache"), 1 << 22, index_rows=100)
    assert got(Kept(list(zip(paths, [big, *smalls])), schema, cache)) == want
    # the large file by its index (whose hash lookup leaves 3 candidate rows, then checked), the
    # small files together
    assert scans == [3, 9]
