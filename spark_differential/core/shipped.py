"""A one-job ``mapInArrow`` whose Python function travels with the job instead of the plan.

On ``(data, time, diff)``: nothing of its own; this is how a small update's one Spark job
(:mod:`spark_differential.incremental.store`) hands its task the function that computes
and writes the update, at less fixed cost than ``DataFrame.mapInArrow``.

``DataFrame.mapInArrow`` makes a new Python UDF at every call: it pickles the function,
builds the JVM's ``PythonFunction`` and passes every column as its own py4j object
(some 45 round trips, 15-20 ms on a classic session on two cores, against about 70 ms
for the whole job of a small update). :func:`collect_mapped` makes that UDF once per
session, column names and output schema, around a fixed function
(:func:`_run_shipped`). The job's own function is pickled to a file the job's tasks can
read, and its path goes to the tasks as a local property of the job
(``SparkContext.setLocalProperty``, which Spark sends with every task of the jobs the
calling thread submits). A retried task reads the same file; the file is removed once
the job is over.

The caller says where the file goes: a directory every task of the job can read as a
local path (an incremental view's version directory, when the view is stored on the
filesystem its tasks run on). On Spark Connect (no local properties, no JVM here) it is
``DataFrame.mapInArrow`` as usual.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from spark_differential.core.session import is_connect, kept

# the local property naming the file that holds a job's function
FUNCTION_PROPERTY = "spark_differential.function"
# UDFs kept per session (a view keeps one or two: its program's layout rarely changes)
_KEPT = 64

_udfs: weakref.WeakKeyDictionary[Any, dict[tuple[tuple[str, ...], str], Any]] = weakref.WeakKeyDictionary()


def _run_shipped(batches: Iterator[Any]) -> Iterator[Any]:
    """The fixed function of every kept UDF, run in a task: the job's function, read from
    the file its local property names, over the task's batches."""
    from pyspark import TaskContext
    from pyspark.cloudpickle import loads

    context = TaskContext.get()
    path = None if context is None else context.getLocalProperty(FUNCTION_PROPERTY)
    if path is None:
        raise RuntimeError(
            f"spark_differential: a task of a shipped mapInArrow has no local property {FUNCTION_PROPERTY!r}; "
            "the job was not started by collect_mapped (report this as a bug)"
        )
    with open(path, "rb") as f:
        fn = loads(f.read())
    yield from fn(batches)


def _udf_column(df: Any, schema: Any) -> Any:
    """The kept UDF column over ``df``'s columns (by name) returning ``schema``, made on first use."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    def make() -> Any:
        udf = pandas_udf(_run_shipped, returnType=schema,  # type: ignore[call-overload]
                         functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
        return udf(*[F.col(f"`{c.replace('`', '``')}`") for c in df.columns])

    return kept(_udfs, df.sparkSession, (tuple(df.columns), schema.json()), make, _KEPT)


def collect_mapped(df: Any, fn: Callable[[Iterator[Any]], Iterator[Any]], schema: Any, directory: str) -> list[Any]:
    """``df.mapInArrow(fn, schema).collect()``, at less fixed cost on a classic session (the
    module docstring): ``fn`` is pickled to a file under ``directory`` (a local path every
    task of the job can read; created if missing), removed once the job is over.
    ``schema``: a ``StructType``.

    >>> import pyarrow as pa, tempfile, spark_differential as sd
    >>> from pyspark.sql import types as T
    >>> spark = sd.session()
    >>> out = T.StructType([T.StructField("rows", T.LongType())])
    >>> def count(batches):
    ...     yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)]})
    >>> collect_mapped(spark.range(5).coalesce(1), count, out, tempfile.mkdtemp())
    [Row(rows=5)]
    """
    if is_connect(df):
        return df.mapInArrow(fn, schema).collect()
    from pyspark.cloudpickle import dumps
    from pyspark.sql import DataFrame

    column = _udf_column(df, schema)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"_sd_function-{uuid.uuid4().hex}.pkl")
    with open(path, "wb") as f:
        f.write(dumps(fn))
    spark = df.sparkSession
    sc = spark.sparkContext
    try:
        mapped = DataFrame(df._jdf.mapInArrow(column._jc, False, None), spark)
        sc.setLocalProperty(FUNCTION_PROPERTY, path)
        try:
            return mapped.collect()
        finally:
            sc.setLocalProperty(FUNCTION_PROPERTY, None)  # type: ignore[arg-type]
    finally:
        os.remove(path)
