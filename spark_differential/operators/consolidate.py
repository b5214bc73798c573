"""Consolidation: ``dd_consolidate``.

On ``(data, time, diff)``: the output has no two updates with the same
``(data, time)`` and no zero diff, and accumulates to the input at every time.
With a frontier ``F`` every time is first advanced to ``meet_{f in F} join(t, f)``
(seed 004): the result then agrees with the input at every time ``g >= F`` (and
only there), and updates that no such ``g`` can tell apart are merged.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import (
    DIFF,
    TIME,
    checked,
    guard_expr,
    inspect,
    integral_sql,
    qcols,
    time_leaf_names,
)
from spark_differential.core.lattice import Antichain, Loop
from spark_differential.core.scope import Entry
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.kernel_form import Input, kernel_fields
from spark_differential.errors import FrontierError, SchemaMismatchError
from spark_differential.kernels import consolidate as kcons
from spark_differential.kernels.common import names
from spark_differential.trace.spark import consolidated_sql

METHODS = ("auto", "spark", "kernel")


def dd_consolidate(df: DataFrame, frontier: Any = None, method: str = "auto") -> DataFrame:
    """Consolidate updates, optionally advancing times by a frontier first.

    ``frontier`` is a time or a list of times (Python values: ints, ``date`` /
    ``datetime``, tuples/dicts/Rows for struct times).  ``method`` picks the
    execution: ``"spark"`` (a Spark aggregation with the advance as a projection),
    ``"kernel"`` (the DuckDB consolidation kernel per key bucket) or ``"auto"``
    (``"spark"``, measured faster in both cases; see docs/performance.md).

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 1), ("a", 3, -1), ("b", 2, 1)], "x string, time long, diff long")
    >>> c.dd_consolidate(frontier=[5]).show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  b|   5|   1|
    +---+----+----+
    <BLANKLINE>
    """
    op = "dd_consolidate"
    cs = inspect(df, op=op)
    if method not in METHODS:
        raise ValueError(f"{op}: method must be one of {METHODS}, got {method!r}")
    front = None
    if frontier is not None:
        if isinstance(cs.ttype, Loop):
            raise FrontierError(f"{op}: a frontier cannot be used inside a dd_iterate body")
        try:
            front = Antichain.from_values(cs.ttype, frontier).elements
        except FrontierError as e:
            raise FrontierError(
                f"{op}: frontier={frontier!r} does not fit the time type {cs.ttype.describe()}: {e}. "
                "Pass a time or a list of times of that type, e.g. frontier=[5]"
            ) from None
    if method == "kernel":
        if isinstance(cs.ttype, Loop):
            raise SchemaMismatchError(f"{op}: method='kernel' is not available inside a dd_iterate body")
        data = list(cs.data_cols)
        inp = Input(df, cs, [], data, "_a", hash_cols=data)
        params = kcons.ConsolidateParams(len(data), cs.ttype, tuple(front) if front else None)
        cols = list(zip(names("_a", len(data)), data))
        return execute(StatefulCall.of(op, kcons.consolidate, params, [inp], [Entry(F.col(TIME), None)], kernel_fields(inp), cols, cs.ttype))
    data = list(cs.data_cols)
    sql_type = integral_sql(cs.ttype)
    if sql_type is not None:  # SQL text: the checks and the advance inside the aggregation, as a plain groupBy
        schema = df.schema
        t = guard_expr(schema, TIME, op)
        if front is not None:
            (adv,) = cs.ttype.sql_advance([f"CAST({t} AS BIGINT)"], front)
            t = f"CAST({adv} AS {sql_type})"
        return consolidated_sql(df, data, t, guard_expr(schema, DIFF, op))
    df = checked(df, cs, op)
    if front is None:
        return (
            df.groupBy(*qcols(data), TIME)
            .agg(F.sum(DIFF).cast("long").alias(DIFF))
            .where(F.col(DIFF) != 0)
        )
    leaves = time_leaf_names(cs.ttype.width)
    enc = df.select(*qcols(data), *[c.alias(n) for c, n in zip(cs.ttype.encode_column(F.col(TIME)), leaves)], DIFF)
    adv = [F.expr(e).alias(n) for e, n in zip(cs.ttype.sql_advance(leaves, front), leaves)]
    advanced = enc.select(*qcols(data), *adv, DIFF)
    summed = advanced.groupBy(*qcols(data), *leaves).agg(F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0)
    return summed.select(*qcols(data), cs.ttype.decode_columns([F.col(n) for n in leaves]).alias(TIME), DIFF)
