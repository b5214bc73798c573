"""Settings read once per ``dd_iterate`` call (``spark_differential.core.conf``).

On Spark Connect each ``spark.conf.get`` is a request; a loop's call reads its settings
from one ``GetAll`` made when the call starts.  Checked here: the snapshot answers as
``spark.conf.get(key, default)`` would (a fake Connect session counting requests), a
setting changed between two calls is read by the second, the loop's own settings are
restored after the call, and on a real session the call makes a handful of configuration
requests, not one per setting.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import CONNECT
from pyspark.sql import functions as F

import spark_differential  # noqa: F401  (registers the methods)
from spark_differential.core import conf as _conf
from spark_differential.errors import ConfigurationError


class _FakeConf:
    def __init__(self, values: dict[str, str], registered: dict[str, str]) -> None:
        self.values, self.registered, self.requests = dict(values), registered, 0

    @property
    def getAll(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        self.requests += 1
        return dict(self.values)

    def get(self, key: str, default: Any = "<none>") -> Any:
        self.requests += 1
        if key in self.values:
            return self.values[key]
        if default != "<none>":
            return default
        return self.registered[key]

    def _set_all(self, configs: dict[str, str], silent: bool) -> None:
        self.requests += 1
        self.values.update(configs)

    def unset(self, key: str) -> None:
        self.requests += 1
        self.values.pop(key, None)


class FakeConnectSession:
    """Looks like a Spark Connect session to the library (its module name), no server."""

    def __init__(self, conf: _FakeConf) -> None:
        self.conf = conf


FakeConnectSession.__module__ = "pyspark.sql.connect.session"


def test_snapshot_answers_as_conf_get() -> None:
    conf = _FakeConf({"a": "1", "spark.master": "local[2]"}, {"spark.sql.shuffle.partitions": "200"})
    s = FakeConnectSession(conf)
    assert _conf.get(s, "a", "x") == "1" and conf.requests == 1  # no snapshot: one request per read
    with _conf.snapshot(s):
        assert conf.requests == 2  # the GetAll
        assert _conf.get(s, "a", "x") == "1"
        assert _conf.get(s, "b", "x") == "x"  # not set: the caller's default, as conf.get(key, default)
        assert _conf.get(s, "b", None) is None
        assert _conf.get(s, "spark.master", "") == "local[2]"
        with _conf.snapshot(s):  # nested: the same snapshot, no request
            assert _conf.get(s, "a") == "1"
        assert conf.requests == 2
        assert _conf.get(s, "spark.sql.shuffle.partitions") == "200"  # not set, no default: asked once
        assert _conf.get(s, "spark.sql.shuffle.partitions") == "200"
        assert conf.requests == 3
        _conf.set_many(s, {"b": "2", "c": "3"})  # one request, seen by later reads
        assert conf.requests == 4 and _conf.get(s, "b", "x") == "2" and conf.values["c"] == "3"
    conf.values["a"] = "changed"  # between calls
    with _conf.snapshot(s):
        assert _conf.get(s, "a", "x") == "changed"


def _reach(spark: Any) -> Any:
    edges = spark.createDataFrame([(0, 1, 0, 1), (1, 2, 0, 1), (2, 0, 1, 1)], "node long, dst long, time long, diff long")
    roots = spark.createDataFrame([(0, 0, 1)], "node long, time long, diff long")
    return roots.dd_iterate(
        lambda r: r.dd_join(edges, on="node").select(F.col("dst").alias("node"), "time", "diff").dd_concat(roots).dd_distinct()
    )


@pytest.mark.connect
def test_loop_reads_settings_fresh_each_call_and_restores_its_own(spark) -> None:
    key = "spark_differential.iterate.localSpread"
    before = {k: spark.conf.get(k, None) for k in ("spark.sql.adaptive.enabled", "spark.sql.autoBroadcastJoinThreshold")}
    expected = [(0, 0, 1), (1, 0, 1), (2, 0, 1)]
    assert sorted(tuple(r) for r in _reach(spark).collect()) == expected
    spark.conf.set(key, "sometimes")  # changed between calls: the next call reads it
    try:
        with pytest.raises(ConfigurationError, match="localSpread"):
            _reach(spark)
    finally:
        spark.conf.unset(key)
    assert sorted(tuple(r) for r in _reach(spark).collect()) == expected
    after = {k: spark.conf.get(k, None) for k in before}
    assert after == before  # the loop's adaptive/broadcast settings restored


@pytest.mark.connect
def test_loop_call_reads_its_settings_in_few_requests(spark, monkeypatch) -> None:
    """Spark Connect: one GetAll, one Set of the loop's settings, at most two to restore them
    and PySpark's own reads (25 requests, one per setting, before).  Classic: unchanged, each
    read goes to the JVM (a py4j call, no request to a server)."""
    counted: list[str] = []
    if CONNECT:
        client = type(spark.client)
        real = client.config
        monkeypatch.setattr(client, "config", lambda self, op: (counted.append(op.WhichOneof("op_type")), real(self, op))[1])
    else:
        from pyspark.sql.conf import RuntimeConfig

        real_get = RuntimeConfig.get
        monkeypatch.setattr(RuntimeConfig, "get", lambda self, *a: (counted.append("get"), real_get(self, *a))[1])
    rows = _reach(spark).collect()
    monkeypatch.undo()
    assert sorted(tuple(r) for r in rows) == [(0, 0, 1), (1, 0, 1), (2, 0, 1)]
    if CONNECT:
        assert counted.count("get_all") == 1, counted
        assert len(counted) <= 8, counted
    else:
        assert counted.count("get") >= 10, counted
