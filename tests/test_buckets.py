"""Bucket placement: every partition holds the same number of key buckets.

Stateful operators group rows by a bucket column and Spark places a bucket by
``pmod(hash(bucket), partitions)``; the bucket values are chosen so that this
spreads them evenly (a plain ``0..n-1`` numbering put 0, 1, 3 and 4 of 8 buckets on
4 partitions).  The Python copy of Spark's hash is checked against Spark itself.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

from spark_differential.engine.kernel_form import _murmur3_int, bucket_labels, bucket_of


def test_murmur3_matches_spark_hash(spark):
    rng = random.Random(5)
    values = list(range(300)) + [rng.randrange(0, 2**31 - 1) for _ in range(200)]
    df = spark.createDataFrame([(v,) for v in values], "v int")
    got = {r.v: r.h for r in df.select("v", F.hash("v").alias("h")).collect()}
    assert got == {v: _murmur3_int(v) for v in values}


@pytest.mark.parametrize("nbuckets,nparts", [(8, 4), (16, 4), (400, 200), (7, 3), (2, 1)])
def test_bucket_labels_fill_partitions_evenly(nbuckets, nparts):
    labels = bucket_labels(nbuckets, nparts)
    assert len(set(labels)) == nbuckets
    per_part = Counter(_murmur3_int(v) % nparts for v in labels)
    assert max(per_part.values()) - min(per_part.values()) <= 1
    assert len(per_part) == min(nparts, nbuckets)


def test_repartition_by_bucket_is_balanced(spark):
    """Spark itself puts the same number of buckets in every partition."""
    df = spark.range(20_000).select(bucket_of(F.xxhash64("id"), 8, 4).alias("b")).repartition(4, "b")
    per_part = df.select("b", F.spark_partition_id().alias("p")).distinct().groupBy("p").count().collect()
    assert sorted(r["count"] for r in per_part) == [2, 2, 2, 2]
