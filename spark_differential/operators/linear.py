"""Linear operators: ``dd_negate`` and ``dd_concat``.

On ``(data, time, diff)``: a linear operator maps each update independently, so
its output at every time is the operator applied to the input at that time, with
no state.  Plain ``select``/``where``/``withColumn`` that keep ``time`` and
``diff`` are linear too.  These two consolidate their output (no two rows share
``(data, time)``, no zero diff) unless told not to: skip it with
``consolidate=False`` when the result goes straight into a stateful operator,
which consolidates its inputs anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import (
    DIFF,
    TIME,
    CollectionSchema,
    checked,
    guard_expr,
    inspect,
    integral_sql,
    null_guard_sql,
    qcols,
    quoted,
    sql_zero,
)
from spark_differential.core.lattice import Loop, TimeType
from spark_differential.core.scope import Entry, unify
from spark_differential.engine import call as seam
from spark_differential.engine.call import ConcatCall
from spark_differential.errors import IterationError, SchemaMismatchError
from spark_differential.trace.spark import consolidated_collection, consolidated_sql


def _consolidated(df: DataFrame, data: list[str], ttype: object) -> DataFrame:
    """``df`` consolidated, but a loop collection while a body is recorded for the in-task path
    (the recorder's loop consolidates every step's input anyway, and an aggregation would not
    translate)."""
    if isinstance(ttype, Loop) and seam.recording():
        return df.select(*qcols(data), TIME, DIFF)
    return consolidated_collection(df, data)


def _not_running(call: ConcatCall) -> DataFrame:
    raise IterationError(
        f"{call.op}: the input is a collection from inside a dd_iterate body (its time is a loop time) but that "
        "loop is not running; use the result of dd_iterate, not collections captured from its body"
    )


def dd_negate(df: DataFrame, consolidate: bool = True) -> DataFrame:
    """Every update with its diff negated: the collection ``-x`` at every time.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> c = spark.createDataFrame([("a", 1, 2)], "x string, time long, diff long")
    >>> c.dd_negate().show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  a|   1|  -2|
    +---+----+----+
    <BLANKLINE>
    """
    op = "dd_negate"
    cs = inspect(df, op=op)
    if integral_sql(cs.ttype) is not None:  # SQL text, the checks inside the one projection or aggregation
        schema = df.schema
        t, d = guard_expr(schema, TIME, op), f"(-CAST({guard_expr(schema, DIFF, op)} AS BIGINT))"
        if consolidate:
            return consolidated_sql(df, cs.data_cols, t, d)
        return df.selectExpr(*map(quoted, cs.data_cols), f"{t} AS {quoted(TIME)}", f"{d} AS {quoted(DIFF)}")
    df = checked(df, cs, op)
    out = df.select(*qcols(cs.data_cols), TIME, (-F.col(DIFF).cast("long")).alias(DIFF))
    return _consolidated(out, list(cs.data_cols), cs.ttype) if consolidate else out


def dd_concat(df: DataFrame, *others: DataFrame, consolidate: bool = True) -> DataFrame:
    """The multiset sum of collections (columns matched by name), consolidated.

    All inputs must have the same data columns (any order) and the same time type;
    an ordinary collection concatenated with a differentiated one enters at ``alt``.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> a = spark.createDataFrame([("a", 1, 1)], "x string, time long, diff long")
    >>> b = spark.createDataFrame([("b", 2, 1)], "x string, time long, diff long")
    >>> a.dd_concat(b).orderBy("x").show()
    +---+----+----+
    |  x|time|diff|
    +---+----+----+
    |  a|   1|   1|
    |  b|   2|   1|
    +---+----+----+
    <BLANKLINE>
    """
    op = "dd_concat"
    dfs = [df, *others]
    schemas = [inspect(d, op=op, side=f"collection {i + 1}") for i, d in enumerate(dfs)]
    first = schemas[0]
    for i, cs in enumerate(schemas[1:], start=2):
        if set(cs.data_cols) != set(first.data_cols):
            raise SchemaMismatchError(
                f"{op}: collection {i} has data columns {sorted(cs.data_cols)} but collection 1 has "
                f"{sorted(first.data_cols)}; concatenated collections need the same data columns"
            )
        for c in first.data_cols:
            t1, t2 = first.field(c).dataType, cs.field(c).dataType
            if t1 != t2:
                raise SchemaMismatchError(
                    f"{op}: column `{c}` is {t1.simpleString()} in collection 1 but {t2.simpleString()} in "
                    f"collection {i}; cast it so both agree"
                )
    target, _, entries = unify(op, schemas, [f"collection {i + 1}" for i in range(len(dfs))])
    call = ConcatCall(op, tuple(dfs), tuple(schemas), tuple(entries), target)
    if any(e.in_loop for e in entries):
        out = seam.concat(call, _not_running)
        if seam.recording():  # a placeholder of the in-task recorder, whose loop consolidates every step's input
            return out
        return consolidated_collection(out, list(first.data_cols)) if consolidate else out
    if seam.recording():  # a recorder of a whole query may take it (a loop body's passes it to the union)
        return seam.concat(call, lambda _: _union(dfs, schemas, entries, target, consolidate))
    return _union(dfs, schemas, entries, target, consolidate)


def _union(dfs: Sequence[DataFrame], schemas: Sequence[CollectionSchema], entries: Sequence[Entry], target: TimeType,
           consolidate: bool) -> DataFrame:
    """``dd_concat`` outside every loop: the union of the collections, each at the target time."""
    op = "dd_concat"
    first = schemas[0]
    out = None
    if integral_sql(target) is not None and all(cs.ttype == target for cs in schemas):
        # the union of the inputs as they are, then one projection (or the aggregation) checking and
        # casting, in SQL text: the plan and the DataFrames of a plain union + groupBy
        t, d = quoted(TIME), quoted(DIFF)
        if any(x.schema[TIME].nullable for x in dfs):
            t = null_guard_sql(t, [t], TIME, op, zero=sql_zero(dfs[0].schema[TIME].dataType))
        d = f"CAST({d} AS BIGINT)"
        if any(x.schema[DIFF].nullable for x in dfs):  # the cast of a null is null: the same check
            d = null_guard_sql(d, [d], DIFF, op, zero="0L")
        out = dfs[0]
        for other in dfs[1:]:
            out = out.unionByName(other)
        if consolidate:
            return consolidated_sql(out, first.data_cols, t, d)
        return out.selectExpr(*map(quoted, first.data_cols), f"{t} AS {quoted(TIME)}", f"{d} AS {quoted(DIFF)}")
    for d, cs, e in zip(dfs, schemas, entries):
        d = checked(d, cs, op)
        part = d.select(*qcols(first.data_cols), e.time_col.alias(TIME), F.col(DIFF).cast("long").alias(DIFF))
        out = part if out is None else out.unionByName(part)
    assert out is not None
    return consolidated_collection(out, list(first.data_cols)) if consolidate else out
