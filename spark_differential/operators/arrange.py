"""Shared arrangements: ``dd_arrange``.

On ``(data, time, diff)``: an arranged collection is the same collection,
consolidated, partitioned by the hash bucket of its key columns and cached on the
executors (seed 004, "Constraint 2": an index built once and shared by every
operator that reads the collection by the same key).  Stateful operators keyed by
the same columns read it without shuffling it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, as_columns, checked, inspect, qcol, qcols, require_columns
from spark_differential.core.settings import buckets, shuffle_partitions
from spark_differential.engine.kernel_form import bucket_of, key_hash
from spark_differential.errors import SchemaMismatchError


def dd_arrange(df: DataFrame, by: str | Sequence[str], storage: StorageLevel | None = None) -> DataFrame:
    """Consolidate, partition by the key columns ``by`` and cache: an index to share.

    Use it when the same collection feeds several stateful operators keyed by the
    same columns (a dimension table joined by several queries, the edges of a graph
    used by several algorithms, a price history used by many as-of joins): the
    consolidation and the shuffle happen once, when the arrangement is first used,
    instead of once per operator.  The result is an ordinary collection (same
    columns); ``unpersist()`` it when done.  Operators keyed by other columns, or
    with a different key type on the other side, still work but shuffle.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> prices = spark.createDataFrame([("bacon", 3, 0, 1), ("bacon", 3, 0, 1)], "item string, price int, time long, diff long")
    >>> arranged = prices.dd_arrange("item")
    >>> arranged.show()
    +-----+-----+----+----+
    | item|price|time|diff|
    +-----+-----+----+----+
    |bacon|    3|   0|   2|
    +-----+-----+----+----+
    <BLANKLINE>
    """
    op = "dd_arrange"
    keys = as_columns(by, op=op, what="`by`")
    if not keys:
        raise SchemaMismatchError(f"{op}: name the key columns to arrange by")
    cs = inspect(df, op=op)
    require_columns(cs, keys, op=op, side="input", what="`by` columns")
    spark = df.sparkSession
    nparts = shuffle_partitions(spark)
    data = list(cs.data_cols)
    df = checked(df, cs, op)
    consolidated = df.groupBy(*qcols(data), TIME).agg(F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0)
    part = bucket_of(key_hash([qcol(k) for k in keys]), buckets(spark), nparts)
    arranged = consolidated.repartition(nparts, part).select(*qcols(data), TIME, DIFF)
    return arranged.persist(storage or StorageLevel.MEMORY_AND_DISK)
