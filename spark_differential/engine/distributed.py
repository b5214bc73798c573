"""The distributed executor: a stateful call as its own Spark stage, the kernel per partition.

On ``(data, time, diff)``: a stateful operator's output is its kernel over all the updates
of its inputs.  Here that runs as one stage: each input in kernel form
(:mod:`spark_differential.engine.kernel_form`), repartitioned by key bucket (two inputs:
both, tagged with their side, in one shuffle), and the kernel called once per partition
with ``mapInArrow``: every call sees all the updates of the keys of whole buckets, many
keys per call.  Adaptive execution may coalesce that shuffle: on a tiny input one task and
one kernel call do all the work.  Nothing is collected to the driver and no state lives in
the UDF.

:class:`Distributed` is the bottom handler of :mod:`spark_differential.engine.call`: the
call that no other handler takes runs here.  A loop's iterations and an incremental view's
traces use the other runners of this module (:func:`run_prepared`, :func:`run_bucketed`)
on inputs they keep in kernel form themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.faults import fault_hook
from spark_differential.core.lattice import INTEGRAL_KINDS, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.names import BUCKET, KEY_HASH, SIDE
from spark_differential.engine.call import Handler, StatefulCall
from spark_differential.engine.kernel_form import (
    Input,
    arrow_schema,
    as_kernel_input,
    bucket_sql,
    finish,
    hashed_names,
    kernel_names,
    slot_sql,
)
from spark_differential.errors import IterationError
from spark_differential.kernels.common import D, conform, keys, over_partition, times

pa = lazy("pyarrow")


def _call(kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema, *tables: pa.Table) -> pa.Table:
    clean = [t.drop_columns([BUCKET]) if BUCKET in t.column_names else t for t in tables]
    return conform(kernel(params, *clean), schema)


def _unary(kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema) -> Callable[[pa.Table], pa.Table]:
    # plain closures of the right arity: Spark reads the arity of grouped-map functions
    def fn(table: pa.Table) -> pa.Table:
        return _call(kernel, params, schema, table)

    return fn


def _per_partition(
    kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """One kernel call over all the rows of a partition (a partition holds whole buckets)."""
    return over_partition(functools.partial(_call, kernel, params, schema))


def _binary(kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema) -> Callable[[pa.Table, pa.Table], pa.Table]:
    def fn(left: pa.Table, right: pa.Table) -> pa.Table:
        return _call(kernel, params, schema, left, right)

    return fn


def run_kernel(
    kernel: Callable[..., pa.Table],
    params: Any,
    inputs: Sequence[Input],
    out_schema: T.StructType,
    op: str = "",
) -> DataFrame:
    """Run ``kernel(params, *tables)`` over one or two inputs, many keys per call: once
    per partition of the inputs repartitioned by bucket (see :func:`run_per_partition`
    and :func:`run_pair_per_partition`)."""
    if len(inputs) == 1:
        return run_per_partition(kernel, params, inputs[0], out_schema, op)
    return run_pair_per_partition(kernel, params, inputs, out_schema, op)


def _by_bucket(df: DataFrame, inp: Input) -> DataFrame:
    """``df`` (in kernel form) repartitioned by ``inp``'s bucket, computed in the
    repartitioning expression (no bucket column to add and drop again)."""
    spark = df.sparkSession
    return df.repartition(F.expr(bucket_sql(hashed_names(inp), settings.buckets(spark), settings.shuffle_partitions(spark))))


def run_per_partition(
    kernel: Callable[..., pa.Table],
    params: Any,
    inp: Input,
    out_schema: T.StructType,
    op: str = "",
) -> DataFrame:
    """Run a one-input kernel once per partition of the input repartitioned by bucket.

    ``repartition(bucket)`` without a number is a shuffle adaptive execution may
    coalesce: whole hash partitions merge, so every key's rows stay in one partition
    and a partition holds whole buckets.  One kernel call then covers a partition (on
    ten rows: one call instead of one per bucket, each paying DuckDB's fixed cost of
    about 10 ms; at 10^7 rows the per-partition form was measured faster too, see
    :func:`run_prepared`), with no sort by bucket and no bucket column sent.

    Three DataFrames (select, repartition, ``mapInArrow``): each costs the JVM an
    analysis of the plan and PySpark a few py4j round trips, the fixed cost of an
    operator's call on a small input (see docs/performance.md)."""
    one = _by_bucket(as_kernel_input(inp, op), inp)
    return _in_tasks(kernel, params, one, out_schema)


def _in_tasks(
    kernel: Callable[..., pa.Table],
    params: Any,
    one: DataFrame,
    out_schema: T.StructType,
    sides: tuple[list[str], list[str]] | None = None,
    read: tuple[list[str], list[str]] | None = None,
) -> DataFrame:
    """``kernel`` once per partition of ``one`` (kernel form, already placed by bucket):
    one input, or two tagged by :data:`SIDE` whose columns are ``sides`` (written in the
    columns ``read``, when not under those names)."""
    spark = one.sparkSession
    schema = arrow_schema(spark, out_schema)
    kernel = fault_hook(spark, kernel)
    if sides is None:
        return one.mapInArrow(_per_partition(kernel, params, schema), out_schema)
    return one.mapInArrow(_pair_per_partition(kernel, params, schema, *sides, read=read), out_schema)


def run_prepared(
    kernel: Callable[..., pa.Table],
    params: Any,
    prepared: Sequence[DataFrame],
    out_schema: T.StructType,
    partitions: int | None = None,
) -> DataFrame:
    """Run ``kernel`` per bucket over inputs already in kernel form (see :func:`prepare`).

    ``partitions``: the number of partitions the input is (usually already) partitioned
    into by bucket; a one-input kernel then runs once per partition instead of per bucket."""
    spark = prepared[0].sparkSession
    schema = arrow_schema(spark, out_schema)
    kernel = fault_hook(spark, kernel)
    # the key hash only selects and places rows; kernels never read it, so it is not
    # shipped to Python (moving rows to the Python workers is most of a kernel's cost)
    prepared = [p.drop(KEY_HASH) for p in prepared]
    if len(prepared) == 1 and partitions:
        # one call per partition: no sort by bucket and no bucket column sent (10^7 rows to a
        # Python function doing nothing: 2.7-3.2 s against 3.9-6.0 s).  The repartition keeps
        # every key's rows in one partition; Spark drops it when the input is partitioned so
        # already (inside loops).
        one = prepared[0].repartition(partitions, BUCKET).drop(BUCKET)
        return one.mapInArrow(_per_partition(kernel, params, schema), out_schema)
    if len(prepared) == 1:
        return prepared[0].groupBy(BUCKET).applyInArrow(_unary(kernel, params, schema), out_schema)
    if len(prepared) == 2:
        a, b = prepared
        return a.groupBy(BUCKET).cogroup(b.groupBy(BUCKET)).applyInArrow(_binary(kernel, params, schema), out_schema)
    raise ValueError("kernels take one or two inputs")  # pragma: no cover




def run_bucketed(
    kernel: Callable[..., pa.Table],
    params: Any,
    prepared: Sequence[DataFrame],
    out_schema: T.StructType,
) -> DataFrame:
    """Run a one- or two-input kernel once per partition over inputs already in kernel
    form with their bucket and key hash (:func:`prepare`), e.g. an incremental view's
    traces and new updates read back from Parquet: repartitioned by their bucket
    column, the two sides tagged and split again in the worker, as
    :func:`run_per_partition` and :func:`run_pair_per_partition` do from an
    :class:`Input`."""
    sides = [p.drop(KEY_HASH) for p in prepared]
    if len(sides) == 1:
        return _in_tasks(kernel, params, sides[0].repartition(BUCKET).drop(BUCKET), out_schema)
    a, b = sides
    cols = ([c for c in a.columns if c != BUCKET], [c for c in b.columns if c != BUCKET])
    both = a.withColumn(SIDE, F.lit(0)).unionByName(b.withColumn(SIDE, F.lit(1)), allowMissingColumns=True)
    return _in_tasks(kernel, params, both.repartition(BUCKET).drop(BUCKET), out_schema, cols)


def run_pair_per_partition(
    kernel: Callable[..., pa.Table],
    params: Any,
    inputs: Sequence[Input],
    out_schema: T.StructType,
    op: str = "",
) -> DataFrame:
    """Run a two-input kernel once per partition: both inputs, tagged with their side,
    in one DataFrame repartitioned by bucket (as :func:`run_per_partition`), split
    again into the two tables in the Python worker.

    Replaces ``cogroup(...).applyInArrow``, which calls the kernel once per bucket
    (each call paying DuckDB's fixed cost) and sorts both sides by bucket."""
    ia, ib = inputs
    a = as_kernel_input(ia, op, f"0 AS {SIDE}")
    b = as_kernel_input(ib, op, f"1 AS {SIDE}")
    one = _by_bucket(a.unionByName(b, allowMissingColumns=True), ia)
    return _in_tasks(kernel, params, one, out_schema, (kernel_names(ia), kernel_names(ib)))


def run_pair_sql(
    kernel: Callable[..., pa.Table],
    params: Any,
    sides: Sequence[tuple[DataFrame, Sequence[str], Sequence[str]]],
    nkeys: int,
    out_schema: T.StructType,
    slots: tuple[str, int] | None = None,
    every_partition: bool = False,
) -> DataFrame:
    """:func:`run_pair_per_partition` for two inputs the caller writes in kernel form as SQL
    text: ``(df, expressions, names)`` per side, the names those of :func:`kernel_names`
    (the first ``nkeys`` the keys ``_k*``).  Both sides in one union tagged by side (a
    column of one side and one of the other of the same type share a column: the rows
    shuffled and sent to Python are as wide as the wider side, not the two together),
    repartitioned by bucket, and ``mapInArrow`` (``sd.sql``'s as-of join of two tables).

    ``slots``: ``(key, n)`` when the only key is a slot number below ``n`` (a key-less as-of
    join's ranges), placed round-robin over the partitions instead of by its hash, which may
    put two of a few slots on one partition (:func:`slot_sql`).

    ``every_partition``: keep every shuffle partition (a large input: adaptive execution would
    merge the partitions into fewer tasks of unequal size, one of them left running alone)."""
    (da, ea, na), (db, eb, nb) = sides
    a = da.selectExpr(*[f"{e} AS {n}" for e, n in zip(ea, na)])
    b = db.selectExpr(*[f"{e} AS {n}" for e, n in zip(eb, nb)])
    ca, cb = shared_columns(list(na), a.schema, list(nb), b.schema)
    a = a.selectExpr(*[f"{n} AS {c}" for n, c in zip(na, ca)], f"0 AS {SIDE}")
    b = b.selectExpr(*[f"{n} AS {c}" for n, c in zip(nb, cb)], f"1 AS {SIDE}")
    spark = da.sparkSession
    nparts = settings.shuffle_partitions(spark)
    place = slot_sql(*slots, nparts) if slots else bucket_sql(keys(nkeys), settings.buckets(spark), nparts)
    one = a.unionByName(b, allowMissingColumns=True)
    one = one.repartition(nparts, F.expr(place)) if every_partition else one.repartition(F.expr(place))
    return _in_tasks(kernel, params, one, out_schema, (list(na), list(nb)), (ca, cb))


_SHARED = "_sd_c"


def shared_columns(na: list[str], ta: T.StructType, nb: list[str], tb: T.StructType) -> tuple[list[str], list[str]]:
    """The columns two tagged sides are written in: a name both sides have stays (the keys);
    each other column of ``nb`` takes the first column of ``na`` not yet taken that only
    ``na`` has, of the same type, and both are renamed ``_sd_c<i>`` (``i``: its place in ``na``);
    the rest keep their names.

    >>> L, S = T.LongType(), T.StringType()
    >>> shared_columns(["_k0", "_a0", "_a1"], T.StructType([T.StructField(n, t) for n, t in
    ...     (("_k0", L), ("_a0", L), ("_a1", S))]), ["_k0", "_b0", "_b1"],
    ...     T.StructType([T.StructField(n, t) for n, t in (("_k0", L), ("_b0", S), ("_b1", T.DoubleType()))]))
    (['_k0', '_a0', '_sd_c2'], ['_k0', '_sd_c2', '_b1'])
    """
    types_a = {f.name: f.dataType for f in ta.fields}
    types_b = {f.name: f.dataType for f in tb.fields}
    ca, cb = list(na), list(nb)
    free = [i for i, n in enumerate(na) if n not in nb]
    for j, n in enumerate(nb):
        if n in na:
            continue
        i = next((i for i in free if types_a[na[i]] == types_b[n]), None)
        if i is not None:
            free.remove(i)
            ca[i] = cb[j] = f"{_SHARED}{i}"
    return ca, cb


def _pair_per_partition(
    kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema, cols_a: list[str], cols_b: list[str],
    read: tuple[list[str], list[str]] | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    read_a, read_b = read or (cols_a, cols_b)

    def fn(table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        side = table.column(SIDE)
        left = table.filter(pc.equal(side, 0)).select(read_a).rename_columns(cols_a)
        right = table.filter(pc.equal(side, 1)).select(read_b).rename_columns(cols_b)
        return _call(kernel, params, schema, left, right)

    return over_partition(fn)


class Distributed(Handler):
    """The bottom handler: a stateful call outside every loop and view as its own stage."""

    def stateful(self, call: StatefulCall, below: Callable[[Any], DataFrame]) -> DataFrame:
        if call.in_loop:
            raise IterationError(
                f"{call.op}: the input is a collection from inside a dd_iterate body (its time is a loop time) but "
                "that loop is not running; use the result of dd_iterate, not collections captured from its body"
            )
        return run_call(call)


def run_call(call: StatefulCall) -> DataFrame:
    """``call`` as its own stage: the kernel per partition of its inputs placed by bucket."""
    kernel_type = call.kernel_type
    schema = call.out_schema()
    if isinstance(kernel_type, Total) and kernel_type.kind in INTEGRAL_KINDS:
        # the time decodes to a cast Arrow does: the task names and types the columns as
        # :func:`finish` would, and no DataFrame (analysis, ~30 py4j round trips) follows
        fields = {f.name: f for f in schema.fields}
        tname = times(1)[0]
        user = T.StructType(
            [T.StructField(u, fields[i].dataType, fields[i].nullable) for i, u in call.out_columns]
            + [T.StructField(TIME, kernel_type.spark_type(), False), T.StructField(DIFF, T.LongType(), False)]
        )
        sources = [i for i, _ in call.out_columns] + [tname, D]
        kernel = functools.partial(_user_named, call.kernel, sources, user.names)
        return run_kernel(kernel, call.params, call.inputs, user, call.op)
    out = run_kernel(call.kernel, call.params, call.inputs, schema, call.op)
    return finish(out, call.out_columns, kernel_type)


def _user_named(
    kernel: Callable[..., pa.Table], sources: Sequence[str], labels: Sequence[str], params: Any, *tables: pa.Table
) -> pa.Table:
    """``kernel``'s output columns ``sources`` under the names ``labels``."""
    out = kernel(params, *tables)
    return pa.Table.from_arrays([out.column(c) for c in sources], names=list(labels))
