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

import functools
import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from spark_differential import errors
from spark_differential.core.registration import Deferred, register
from spark_differential.core.session import session
from spark_differential.engine import call as _seam
from spark_differential.errors import IterationLimitExceeded, LateUpdateError, SparkDifferentialError, raising, unwrap

if TYPE_CHECKING:
    from spark_differential.incremental.view import IncrementalView, incremental
    from spark_differential.io.changes import dd_to_intervals, from_cdc, from_change_feed, from_intervals
    from spark_differential.io.tables import collection, dd_as_of, from_snapshots, from_upserts
    from spark_differential.loop.iterate import dd_iterate
    from spark_differential.operators.arrange import dd_arrange
    from spark_differential.operators.calculus import dd_asof_join, dd_delay, differentiate, integrate
    from spark_differential.operators.consolidate import dd_consolidate
    from spark_differential.operators.join import dd_antijoin, dd_join, dd_semijoin
    from spark_differential.operators.linear import dd_concat, dd_negate
    from spark_differential.operators.merge_asof import dd_merge_asof
    from spark_differential.operators.reduce import (
        dd_count,
        dd_distinct,
        dd_max,
        dd_min,
        dd_reduce,
        dd_sum,
        dd_threshold,
    )
    from spark_differential.operators.topk import dd_top_k
    from spark_differential.sql.compile import sql

__version__ = "0.1.0"

# Every public name outside this module, with the module defining it.  They load on first
# use (PEP 562 for ``sd.<name>``; a Deferred for a DataFrame method): ``import
# spark_differential`` costs little beyond ``import pyspark.sql`` (tests/test_import_time.py).
_DEFINED_IN = {
    "dd_consolidate": "spark_differential.operators.consolidate",
    "dd_as_of": "spark_differential.io.tables",
    "dd_negate": "spark_differential.operators.linear",
    "dd_concat": "spark_differential.operators.linear",
    "dd_join": "spark_differential.operators.join",
    "dd_semijoin": "spark_differential.operators.join",
    "dd_antijoin": "spark_differential.operators.join",
    "dd_reduce": "spark_differential.operators.reduce",
    "dd_count": "spark_differential.operators.reduce",
    "dd_sum": "spark_differential.operators.reduce",
    "dd_min": "spark_differential.operators.reduce",
    "dd_max": "spark_differential.operators.reduce",
    "dd_distinct": "spark_differential.operators.reduce",
    "dd_threshold": "spark_differential.operators.reduce",
    "dd_top_k": "spark_differential.operators.topk",
    "dd_iterate": "spark_differential.loop.iterate",
    "differentiate": "spark_differential.operators.calculus",
    "integrate": "spark_differential.operators.calculus",
    "dd_asof_join": "spark_differential.operators.calculus",
    "dd_merge_asof": "spark_differential.operators.merge_asof",
    "dd_delay": "spark_differential.operators.calculus",
    "dd_arrange": "spark_differential.operators.arrange",
    "dd_to_intervals": "spark_differential.io.changes",
    "collection": "spark_differential.io.tables",
    "from_snapshots": "spark_differential.io.tables",
    "from_upserts": "spark_differential.io.tables",
    "from_change_feed": "spark_differential.io.changes",
    "from_cdc": "spark_differential.io.changes",
    "from_intervals": "spark_differential.io.changes",
    "incremental": "spark_differential.incremental.view",
    "IncrementalView": "spark_differential.incremental.view",
    "sql": "spark_differential.sql.compile",
}


def _load(name: str) -> Any:
    value = getattr(importlib.import_module(_DEFINED_IN[name]), name)
    globals()[name] = value
    return value


def __getattr__(name: str) -> Any:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _load(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_DEFINED_IN})


def _base_handlers() -> tuple[_seam.Handler, ...]:
    """The base handlers of every stateful call, bottom first: the distributed executor, then
    the fusing of small pipelines into one task (spark_differential.engine.call;
    docs/architecture.md).  Built at the first call."""
    distributed = importlib.import_module("spark_differential.engine.distributed")
    pipeline = importlib.import_module("spark_differential.intask.pipeline")
    return (distributed.Distributed(), pipeline.Pipelines())


_seam.provide(_base_handlers)


class _Package(types.ModuleType):
    """The package module: ``sql`` and ``incremental`` are both a public function and a
    subpackage, and the function keeps the name.  (Importing a subpackage sets it as an
    attribute of its parent; that one assignment is refused, the subpackage stays in
    ``sys.modules``.)"""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _DEFINED_IN and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

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
    "dd_consolidate",
    "dd_as_of",
    "dd_negate",
    "dd_concat",
    "dd_join",
    "dd_semijoin",
    "dd_antijoin",
    "dd_reduce",
    "dd_count",
    "dd_sum",
    "dd_min",
    "dd_max",
    "dd_distinct",
    "dd_threshold",
    "dd_top_k",
    "dd_iterate",
    "differentiate",
    "integrate",
    "dd_asof_join",
    "dd_merge_asof",
    "dd_delay",
    "dd_arrange",
    "dd_to_intervals",
]

# the DataFrame methods (SPEC section 3): every ``dd_*`` name, ``differentiate`` and ``integrate``
METHODS = {
    name: Deferred(name, functools.partial(_load, name))
    for name in __all__
    if name.startswith("dd_") or name in ("differentiate", "integrate")
}

register(METHODS)
