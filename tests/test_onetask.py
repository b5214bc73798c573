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
