"""Converting between oracle collections (tests/oracle.py) and Spark DataFrames."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from oracle import AltNeu, Coll, Product, Total, assert_updates_equal, consolidate, plain
from pyspark.sql import DataFrame
from pyspark.sql import types as T

CONNECT = os.environ.get("SD_TEST_SESSION", "classic") == "connect"  # see conftest.py


def time_type(lat: Any, names: Sequence[str] | None = None) -> T.DataType:
    """Spark type for an oracle lattice over integers (struct fields a, b, c, …)."""
    if isinstance(lat, Total):
        return T.LongType()
    if isinstance(lat, Product):
        fields = names or [chr(ord("a") + i) for i in range(len(lat.fields))]
        return T.StructType([T.StructField(n, time_type(f), False) for n, f in zip(fields, lat.fields)])
    if isinstance(lat, AltNeu):
        return T.StructType([T.StructField("time", time_type(lat.inner), False), T.StructField("neu", T.BooleanType(), False)])
    raise TypeError(lat)


def to_df(spark: Any, coll: Coll, lat: Any, types: dict[str, T.DataType] | None = None) -> DataFrame:
    types = types or {}
    fields = [T.StructField(c, types.get(c, T.LongType()), True) for c in coll.cols]
    fields += [T.StructField("time", time_type(lat), False), T.StructField("diff", T.LongType(), False)]
    rows = [(*d, t, r) for d, t, r in coll.updates]
    return spark.createDataFrame(rows, T.StructType(fields))


def rows_of(df: DataFrame) -> list[tuple[tuple, Any, int]]:
    """A collection DataFrame as oracle updates ``(data, time, diff)``."""
    cols = [c for c in df.columns if c not in ("time", "diff")]
    out = []
    for r in df.collect():
        d = r.asDict(recursive=False)
        out.append((tuple(plain(d[c]) for c in cols), plain(d["time"]), int(d["diff"])))
    return out


def assert_matches(df: DataFrame, expected: Coll) -> None:
    """``df`` is consolidated and has exactly the oracle's rows (and columns, in order)."""
    cols = [c for c in df.columns if c not in ("time", "diff")]
    assert tuple(cols) == tuple(expected.cols), f"columns {cols} != expected {list(expected.cols)}"
    assert_updates_equal(rows_of(df), expected.updates)


def cases(
    seed: int,
    n_cases: int,
    cols: Sequence[str],
    n: int,
    lat: Any,
    *,
    value_range: int = 3,
    positive_only: bool = False,
    time_range: tuple[int, int] = (0, 5),
) -> Coll:
    """Many small random collections in one, told apart by a leading ``case`` column.

    Operators keyed by ``case`` (plus their own keys) treat the cases independently,
    so one Spark job checks many random inputs.
    """
    from oracle import random_coll

    rng = random.Random(seed)
    updates = []
    for case in range(n_cases):
        c = random_coll(rng, cols, rng.randint(0, n), lat, value_range=value_range,
                        positive_only=positive_only, time_range=time_range)
        updates += [((case, *d), t, r) for d, t, r in c.updates]
    return Coll(("case", *cols), updates)


def connect_params(values: Sequence[Any], *which: Any) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``, those in ``which`` (default: the first)
    marked ``connect``: they also run in the Spark Connect pass of ``./dev test``."""
    import pytest

    chosen = list(which) if which else [values[0]]
    return [pytest.param(v, marks=pytest.mark.connect) if v in chosen else v for v in values]


__all__ = ["CONNECT", "assert_matches", "cases", "connect_params", "consolidate", "rows_of", "time_type", "to_df"]
