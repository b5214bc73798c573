"""The session's settings read once per ``dd_iterate`` call on Spark Connect.

On Spark Connect every ``spark.conf.get`` is a request to the server.  A loop reads about
twenty settings (shuffle partitions, buckets, the in-task path's ``localRows`` /
``localThreads`` / ``chunkRows`` / ``localSpread``, ANSI, Arrow's large types, the master,
the loop's own adaptive-execution settings, ...): twenty-five requests per call.  Inside
:func:`snapshot` they are answered from one ``GetAll`` request made when the block starts;
the loop's own changes (:func:`set_many`, :func:`unset_many`) are one request each and
update the snapshot.  The snapshot lives for one call: a setting the user changes between
calls is read by the next call.  On a classic session a read is one py4j call and nothing
changes.

What a read returns is what ``spark.conf.get(key, default)`` would: the value set on the
session (explicitly, or from the Spark configuration it started with), else ``default``;
without a default, a key not set is asked from the server (its registered default).

>>> import spark_differential as sd
>>> from spark_differential.core import conf as _conf
>>> spark = sd.session()
>>> with _conf.snapshot(spark):
...     _conf.get(spark, "spark.sql.shuffle.partitions") == spark.conf.get("spark.sql.shuffle.partitions")
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

_NO_DEFAULT = object()


class _Snapshot:
    """The settings of one Connect session for one block: ``values`` (every setting the
    session has, from one ``GetAll``) and ``registered`` (the registered defaults of keys
    read without a default and not set, asked once each)."""

    def __init__(self, spark: Any, values: dict[str, str]) -> None:
        self.spark = spark
        self.values = values
        self.registered: dict[str, Any] = {}


_ACTIVE: contextvars.ContextVar[_Snapshot | None] = contextvars.ContextVar("spark_differential_conf", default=None)


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _mine(spark: Any) -> _Snapshot | None:
    snap = _ACTIVE.get()
    return snap if snap is not None and snap.spark is spark else None


@contextlib.contextmanager
def snapshot(spark: Any) -> Iterator[None]:
    """Within the block, settings of a Spark Connect ``spark`` are read from one request
    (nothing changes on a classic session).  Nested blocks on the same session share the
    outer snapshot."""
    if _mine(spark) is not None or not _is_connect(spark):
        yield
        return
    try:
        values = dict(spark.conf.getAll)  # one request: every setting of the session
    except Exception:  # noqa: BLE001 - a server refusing GetAll: each setting read as asked
        yield
        return
    token = _ACTIVE.set(_Snapshot(spark, values))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def get(spark: Any, key: str, default: Any = _NO_DEFAULT) -> Any:
    """``spark.conf.get(key[, default])``, answered from the active :func:`snapshot` if any."""
    snap = _mine(spark)
    if snap is None:
        return spark.conf.get(key) if default is _NO_DEFAULT else spark.conf.get(key, default)
    if key in snap.values:
        return snap.values[key]
    if default is not _NO_DEFAULT:
        return default
    if key not in snap.registered:
        snap.registered[key] = spark.conf.get(key)
    return snap.registered[key]


def set_many(spark: Any, pairs: Mapping[str, str]) -> None:
    """Set several settings (one request on Spark Connect) and the active snapshot with them."""
    if not pairs:
        return
    if _is_connect(spark) and hasattr(spark.conf, "_set_all"):
        spark.conf._set_all(dict(pairs), silent=False)
    else:
        for k, v in pairs.items():
            spark.conf.set(k, v)
    snap = _mine(spark)
    if snap is not None:
        snap.values.update({k: str(v) for k, v in pairs.items()})


def unset_many(spark: Any, keys: Sequence[str]) -> None:
    """Unset several settings (one request on Spark Connect) and forget them in the snapshot."""
    if not keys:
        return
    done = False
    if _is_connect(spark):
        try:
            from pyspark.sql.connect import proto

            op = proto.ConfigRequest.Operation(unset=proto.ConfigRequest.Unset(keys=list(keys)))
            spark.client.config(op)
            done = True
        except ImportError:  # pragma: no cover - other PySpark layouts
            done = False
    if not done:
        for k in keys:
            spark.conf.unset(k)
    snap = _mine(spark)
    if snap is not None:
        for k in keys:
            snap.values.pop(k, None)
