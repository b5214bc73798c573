"""Plain-table as-of joins run in one stage: ``dd_merge_asof`` of two DataFrames without ``time``/``diff``.

On ``(data, time, diff)``: a plain table is one snapshot (every row once, at one time),
and the join of two snapshots is a plain table again; nothing here is differential.
Both tables, in kernel form, are placed by ``by`` key and joined by the kernel once per
partition (:func:`spark_differential.kernels.asof_merge.merge_asof`, its one-snapshot
path), which names the output columns itself.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.engine.distributed import run_pair_sql
from spark_differential.kernels import asof_merge as kmerge


def run_static(p: kmerge.MergeAsofParams, out_columns: Sequence[tuple[str, str]], schema: T.StructType,
               sides: Sequence[tuple[DataFrame, Sequence[str], Sequence[str]]]) -> DataFrame:
    """The joined rows of two plain tables (``sides``: each in kernel form as SQL items, its
    kernel column names), as ``schema`` (the output names of ``out_columns``)."""
    kernel = functools.partial(kmerge.renamed, kmerge.merge_asof, [i for i, _ in out_columns], schema.names)
    return run_pair_sql(kernel, p, sides, p.nkeys, schema)
