"""Checking many small as-of join results against their expected rows in one Spark job.

Each check is a DataFrame and the rows it must hold, as a multiset (for a collection:
its ``(data, time, diff)`` rows, which then must also be consolidated: the expected rows
are).  The expected rows become a DataFrame of the result's own schema, each side's
surplus is ``exceptAll`` of the other, and the surpluses of every check (as JSON text,
tagged with the check's name) are read back by one ``collect``: on tiny inputs a Spark
action's fixed cost, not the data, is what a test pays for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def assert_all(spark: Any, checks: Sequence[tuple[str, DataFrame, Iterable[tuple]]]) -> None:
    """Every ``(name, result, expected rows)`` holds exactly its expected rows."""
    parts = []
    for name, df, rows in checks:
        cols = [f"c{i}" for i in range(len(df.columns))]
        got = df.toDF(*cols)
        want = spark.createDataFrame([tuple(r) for r in rows], got.schema)
        row = F.to_json(F.struct(*cols))
        parts.append(got.exceptAll(want).select(F.lit(name).alias("check"), F.lit("unexpected").alias("what"),
                                                row.alias("row")))
        parts.append(want.exceptAll(got).select(F.lit(name).alias("check"), F.lit("missing").alias("what"),
                                                row.alias("row")))
    bad = reduce(lambda a, b: a.unionByName(b), parts).collect()
    assert not bad, "\n".join(f"{r.check}: {r.what} {r.row}" for r in sorted(bad, key=lambda r: (r.check, r.what)))
