"""How an incremental view's state is named in its files: operators, traces, stored collections.

On ``(data, time, diff)``: every stored collection of a view (an operator's trace of one
input, a count's per-key totals, a loop's per-iteration traces, the output held back for a
later update; the rerun strategy's stored inputs and output) is written in Parquet under its
*tag*, its columns under physical names unique to the tag (so several collections share one
write, partitioned by :data:`KIND`: :func:`tagged`), in a directory of the version that wrote
it (:func:`part`).  An
:class:`Operator` records what a stateful operator of the query stored, so that a resumed
view can check the query calls the same operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.names import BUCKET, KEY_HASH

ROWS, TOTALS = "rows", "totals"  # what a trace holds: an input's updates; per-key totals


@dataclass(frozen=True)
class Operator:
    """One stateful operator of a view's query: its name, its traces' schemas in kernel form and
    what each trace holds (``sides``: ``"rows"``, an input's updates; ``"totals"``, the per-key
    totals of a count or sum, :mod:`spark_differential.kernels.totals`)."""

    op: str
    inputs: tuple[T.StructType, ...]
    sides: tuple[str, ...] = ()

    def side(self, j: int) -> str:
        """What trace ``j`` holds (``"rows"`` unless said otherwise)."""
        return self.sides[j] if j < len(self.sides) else ROWS

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "inputs": [s.jsonValue() for s in self.inputs], "sides": list(self.sides)}

    @classmethod
    def from_json(cls, m: dict[str, Any]) -> Operator:
        return cls(str(m["op"]), tuple(T.StructType.fromJson(s) for s in m["inputs"]),
                   tuple(str(x) for x in m.get("sides", [])))

    def same(self, other: Operator) -> bool:
        """Whether ``other`` stores what this operator stores: the same operator, traces of the same
        columns and types (nullability aside), each holding the same kind of rows."""
        return (self.op == other.op
                and [s.simpleString() for s in self.inputs] == [s.simpleString() for s in other.inputs]
                and [self.side(j) for j in range(len(self.inputs))] == [other.side(j) for j in range(len(other.inputs))])

    def describe(self) -> str:
        cols = " / ".join(", ".join(f.name for f in s.fields if f.name not in (BUCKET, KEY_HASH)) for s in self.inputs)
        return f"{self.op}({cols})"


KIND = "_sd_kind"  # the partition column of a view's Parquet writes: which stored collection a row belongs to


def physical(prefix: str, schema: T.StructType) -> list[str]:
    """Column names of a stored collection in its version's Parquet writes (unique per collection)."""
    return physical_names(prefix, len(schema.fields))


def physical_names(prefix: str, n: int) -> list[str]:
    """:func:`physical` of a collection of ``n`` columns.

    >>> physical_names("o", 2)
    ['_sd_o_0', '_sd_o_1']
    """
    return [f"_sd_{prefix}_{j}" for j in range(n)]


def tag(slot: int, side: int) -> str:
    """The name of operator ``slot``'s trace of input ``side`` in the stored files."""
    return f"s{slot}_{side}"


LOOP = "loop"  # what a loop's traces hold (Operator.sides): per-iteration updates, rewritten whole


def part(directory: str, tag: str, write: str = "data") -> str:
    """The directory (relative to the view's root) of one stored collection a version wrote.

    A version writes a few times (the rerun strategy: ``new``, the new updates of every input,
    then ``data``; the traced strategy: one write per stateful operator, ``s<i>``, then
    ``data``); ``data`` holds what the update returned and, when due, the merged traces.

    >>> part("v00000003-0a1b2c3d", "o")
    'v00000003-0a1b2c3d/data/_sd_kind=o'
    """
    return f"{directory}/{write}/{KIND}={tag}"


def tagged(df: DataFrame, tag: str, prefix: str, schema: T.StructType) -> DataFrame:
    """``df`` (with ``schema``'s columns) as rows of a version's write, under ``tag``, its
    columns named by :func:`physical` with ``prefix``.

    >>> import spark_differential as sd
    >>> df = sd.session().createDataFrame([(1, 0, 1)], "x long, time long, diff long")
    >>> tagged(df, "o", "o", df.schema).columns
    ['_sd_kind', '_sd_o_0', '_sd_o_1', '_sd_o_2']
    """
    return df.select(
        F.lit(tag).alias(KIND), *[F.col(f.name).alias(p) for f, p in zip(schema.fields, physical(prefix, schema))]
    )


__all__ = ["KIND", "LOOP", "ROWS", "TOTALS", "Operator", "part", "physical", "physical_names", "tag", "tagged"]
