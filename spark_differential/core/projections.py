"""Projections given as SQL text, their expressions kept per session.

On ``(data, time, diff)``: nothing of its own; an incremental view's update projects its
inputs the same way at every update (:func:`spark_differential.intask.sources.tag_source`:
each input's columns renamed, its time and diff cast and checked), and this makes that
projection cheaper to build on a classic session.

``DataFrame.selectExpr`` sends its expressions as a py4j list (a round trip per
expression) and has each parsed again. :func:`select_sql` keeps, per session, the JVM's
sequence of the parsed expressions of each projection it has seen, so that building the
same projection again is one py4j call and Spark's analysis of it (about 5 against 9 ms
for six expressions on two cores). On Spark Connect it is ``selectExpr`` itself (the
client builds a request, the server parses).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from spark_differential.core.session import is_connect, kept

# projections kept per session (a view keeps a few: one per input, the run row, ...)
_KEPT = 256

_kept: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], Any]] = weakref.WeakKeyDictionary()


def select_sql(df: Any, exprs: Sequence[str]) -> Any:
    """``df.selectExpr(*exprs)``, its parsed expressions kept for the next call with the same
    ``exprs`` (the module docstring).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> select_sql(spark.range(2), ["id AS x", "CAST(id * 2 AS INT) AS y"]).collect()
    [Row(x=0, y=0), Row(x=1, y=2)]
    """
    if is_connect(df):
        return df.selectExpr(*exprs)
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    spark = df.sparkSession
    seq = kept(_kept, spark, tuple(exprs),
               lambda: spark.sparkContext._jvm.PythonUtils.toSeq([F.expr(e)._jc for e in exprs]), _KEPT)
    return DataFrame(df._jdf.select(seq), spark)
