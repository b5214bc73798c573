"""spark_differential: differential dataflow for PySpark.

A *collection* is a Spark DataFrame of updates ``(data…, time, diff)``: every
column other than ``time`` and ``diff`` is data, and the collection at time ``s``
is the multiset of all updates with ``time <= s``.  Importing this package adds
``dd_*`` methods (and ``differentiate`` / ``integrate``) to DataFrames; each is
also a plain function taking the DataFrame first, usable with ``df.transform``.

>>> import spark_differential as sd
>>> spark = sd.session()
>>> edges = spark.createDataFrame([(1, 2, 0, 1)], "src long, dst long, time long, diff long")
>>> edges.dd_count("src").select("src", "count", "time", "diff").collect()
[Row(src=1, count=1, time=0, diff=1)]
"""

from __future__ import annotations

from spark_differential import errors
from spark_differential.core.registration import register
from spark_differential.core.session import session
from spark_differential.engine import call as _seam
from spark_differential.engine.distributed import Distributed
from spark_differential.errors import IterationLimitExceeded, LateUpdateError, SparkDifferentialError, raising, unwrap
from spark_differential.incremental.view import IncrementalView, incremental
from spark_differential.intask.pipeline import Pipelines
from spark_differential.io.changes import dd_to_intervals, from_cdc, from_change_feed, from_intervals
from spark_differential.io.tables import collection, dd_as_of, from_snapshots, from_upserts
from spark_differential.loop.iterate import dd_iterate
from spark_differential.operators.arrange import dd_arrange
from spark_differential.operators.calculus import dd_asof_join, dd_delay, differentiate, integrate
from spark_differential.operators.consolidate import dd_consolidate
from spark_differential.operators.join import dd_antijoin, dd_join, dd_semijoin
from spark_differential.operators.linear import dd_concat, dd_negate
from spark_differential.operators.merge_asof import dd_merge_asof
from spark_differential.operators.reduce import dd_count, dd_distinct, dd_max, dd_min, dd_reduce, dd_sum, dd_threshold
from spark_differential.operators.topk import dd_top_k
from spark_differential.sql.compile import sql

__version__ = "0.1.0"

# the base handlers of every stateful call, bottom first: the distributed executor, then the
# fusing of small pipelines into one task (spark_differential.engine.call; docs/architecture.md)
_seam.install(Distributed(), Pipelines())

METHODS = {
    "dd_consolidate": dd_consolidate,
    "dd_as_of": dd_as_of,
    "dd_negate": dd_negate,
    "dd_concat": dd_concat,
    "dd_join": dd_join,
    "dd_semijoin": dd_semijoin,
    "dd_antijoin": dd_antijoin,
    "dd_reduce": dd_reduce,
    "dd_count": dd_count,
    "dd_sum": dd_sum,
    "dd_min": dd_min,
    "dd_max": dd_max,
    "dd_distinct": dd_distinct,
    "dd_threshold": dd_threshold,
    "dd_top_k": dd_top_k,
    "dd_iterate": dd_iterate,
    "differentiate": differentiate,
    "integrate": integrate,
    "dd_asof_join": dd_asof_join,
    "dd_merge_asof": dd_merge_asof,
    "dd_delay": dd_delay,
    "dd_arrange": dd_arrange,
    "dd_to_intervals": dd_to_intervals,
}

register(METHODS)

__all__ = [
    "IncrementalView",
    "IterationLimitExceeded",
    "LateUpdateError",
    "SparkDifferentialError",
    "collection",
    "errors",
    "from_cdc",
    "from_change_feed",
    "from_intervals",
    "from_snapshots",
    "from_upserts",
    "incremental",
    "raising",
    "session",
    "sql",
    "unwrap",
    *METHODS,
]
