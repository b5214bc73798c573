"""A delta-rs change feed (``DeltaTable.load_cdf()``: Arrow ``string_view`` text, a ``uint64``
``_commit_version``) goes to ``sd.from_change_feed`` as it is, and accumulates at every version
to the table delta-rs reads at that version (spark_differential.io.arrow)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import spark_differential as sd
from spark_differential.errors import SchemaMismatchError
from spark_differential.io.arrow import spark_ready


def _delta_table(path: str) -> DeltaTable:
    """Versions 0..4: two inserts, an update, a delete, an append, an update of two rows."""
    write_deltalake(path, pa.table({"who": ["ann", "bob"], "pts": [5, 3]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(path).update(updates={"pts": "7"}, predicate="who = 'ann'")
    DeltaTable(path).delete("who = 'bob'")
    write_deltalake(path, pa.table({"who": ["cy", "dee"], "pts": [1, 1]}), mode="append")
    DeltaTable(path).update(updates={"pts": "pts + 10"}, predicate="pts < 5")
    return DeltaTable(path)


@pytest.mark.connect
def test_a_delta_rs_change_feed_accumulates_to_every_version(spark, tmp_path) -> None:
    table = _delta_table(str(tmp_path / "t"))
    assert table.version() == 4
    feed = table.load_cdf(starting_version=0)
    coll = sd.from_change_feed(feed)
    assert [(f.name, f.dataType.simpleString()) for f in coll.schema.fields] == [
        ("who", "string"), ("pts", "bigint"), ("time", "bigint"), ("diff", "bigint")]
    updates = [(r.who, r.pts, r.time, r.diff) for r in coll.collect()]
    for version in range(5):
        at = Counter()
        for who, pts, t, d in updates:
            if t <= version:
                at[(who, pts)] += d
        snapshot = DeltaTable(str(tmp_path / "t"), version=version).to_pyarrow_table().to_pylist()
        assert +at == Counter((r["who"], r["pts"]) for r in snapshot), version


def test_arrow_types_spark_cannot_take_become_the_nearest_it_can() -> None:
    t = pa.table({
        "s": pa.array(["a", None], pa.string_view()),
        "b": pa.array([b"x", b"y"], pa.binary_view()),
        "u": pa.array([1, 2**63 - 1], pa.uint64()),
        "d": pa.array(["p", "q"]).dictionary_encode(),
        "nested": pa.array([{"v": "a", "xs": ["b"]}, None],
                           pa.struct([("v", pa.string_view()), ("xs", pa.list_(pa.large_string()))])),
    })
    ready = spark_ready(t, "test")
    assert ready.schema == pa.schema([
        ("s", pa.string()), ("b", pa.binary()), ("u", pa.int64()), ("d", pa.string()),
        ("nested", pa.struct([("v", pa.string()), ("xs", pa.list_(pa.string()))])),
    ])
    assert ready.to_pylist() == t.to_pylist()
    assert spark_ready(ready, "test") is ready  # nothing to change: the same table


def test_an_unsigned_value_above_bigint_is_an_error_not_a_wrapped_number() -> None:
    big = pa.table({"_commit_version": pa.array([0, 2**63], pa.uint64())})
    with pytest.raises(SchemaMismatchError, match=r"`_commit_version` \(uint64\) holds 9223372036854775808"):
        spark_ready(big, "from_change_feed")
