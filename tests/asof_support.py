"""Checking many small as-of join results against their expected rows in one Spark job.

Each check is a DataFrame and the rows it must hold, as a multiset (for a collection:
its ``(data, time, diff)`` rows, which then must also be consolidated: the expected rows
are).  The expected rows become a DataFrame of the result's own schema (local rows), every
row of both sides is rendered as JSON text tagged with its check and side, and one
``collect`` of their union brings them back, compared as multisets here: on tiny inputs a
Spark action's fixed cost, and each shuffle stage's, not the data, is what a test pays
for (an ``exceptAll`` per side would add two aggregations per check to the job).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def assert_all(spark: Any, checks: Sequence[tuple[str, DataFrame, Iterable[tuple]]]) -> None:
    """Every ``(name, result, expected rows)`` holds exactly its expected rows."""
    parts = []
    for i, (_, df, rows) in enumerate(checks):
        cols = [f"c{j}" for j in range(len(df.columns))]
        got = df.toDF(*cols)
        want = spark.createDataFrame([tuple(r) for r in rows], got.schema)
        row = F.to_json(F.struct(*cols))
        for side, frame in (("got", got), ("want", want)):
            parts.append(frame.select(F.lit(i).alias("check"), F.lit(side).alias("side"), row.alias("row")))
    seen: dict[tuple[int, str], Counter] = {}
    for r in reduce(lambda a, b: a.unionByName(b), parts).collect():
        seen.setdefault((r.check, r.side), Counter())[r.row] += 1
    bad = []
    for i, (name, _, _) in enumerate(checks):
        got, want = seen.get((i, "got"), Counter()), seen.get((i, "want"), Counter())
        bad += [f"{name}: unexpected {row}" for row in sorted((got - want).elements())]
        bad += [f"{name}: missing {row}" for row in sorted((want - got).elements())]
    assert not bad, "\n".join(bad)
