"""Running kernels inside Spark.

A stateful operator on collections becomes: encode each input's ``time`` into int64
leaves and rename columns to the kernels' positional names, hash the key columns
into a fixed number of *buckets*, repartition by bucket (two inputs: both, tagged
with their side, in one shuffle) and run the kernel once per partition with
``mapInArrow``, so that every kernel call sees all updates of many keys (whole
buckets), then rename back and decode the time.  Adaptive execution may coalesce
that shuffle: on a tiny input one task and one kernel call do all the work (a call
per bucket paid DuckDB's fixed cost once per bucket).  Inside ``dd_iterate`` the
loop's own code calls :func:`run_prepared` (per bucket, or per partition of inputs
already partitioned by bucket).  Nothing is collected to the driver and no state
lives in the UDF.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings as _conf
from spark_differential.core.collection import DIFF, TIME, CollectionSchema, guard_expr, null_guard, qcol, quoted
from spark_differential.core.faults import fault_hook
from spark_differential.core.lattice import _INTEGRAL_KINDS, TimeType, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.scope import Entry
from spark_differential.errors import SchemaMismatchError
from spark_differential.kernels.common import NEW, D, conform, keys, names, over_partition, times

pa = lazy("pyarrow")

BUCKET = "_sd_b"
KEY_HASH = "_sd_h"  # 64-bit hash of the key columns (never null; the bucket derives from it)
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)
_FRACTIONAL = (T.FloatType, T.DoubleType)


@dataclass
class Input:
    """One collection handed to a kernel."""

    df: DataFrame
    cs: CollectionSchema
    keys: list[str]
    data: list[str]
    prefix: str = "_a"
    ttype: TimeType | None = None  # defaults to cs.ttype
    time_col: Column | None = None  # defaults to F.col("time")
    new: Column | None = None  # defaults to lit(True)
    key_casts: dict[str, T.DataType] = field(default_factory=dict)
    hash_cols: list[str] | None = None  # defaults to keys: what decides the bucket
    # ``df``'s schema when the caller has it already (a py4j round trip and a JVM schema
    # read less); its names, types and nullability decide the null checks of the SQL form
    schema: T.StructType | None = None

    @property
    def time_type(self) -> TimeType:
        return self.ttype or self.cs.ttype


def entry_time(entry: Entry, cs: CollectionSchema, kernel_t: TimeType) -> Column | None:
    """An input's ``time_col`` for :class:`Input`: ``None`` where the time in the kernel's
    time type is the input's own ``time`` column (then the kernel form may be SQL text,
    :func:`_kernel_sql`), else the entry's Column (a loop's outer time, an alt/neu entry)."""
    return None if not entry.in_loop and cs.ttype == kernel_t else entry.time_col


def key_casts(op: str, a: CollectionSchema, b: CollectionSchema, on: Sequence[str], b_on: Sequence[str] | None = None) -> tuple[dict[str, T.DataType], dict[str, T.DataType]]:
    """Casts making the key columns of two inputs hash and compare identically."""
    b_on = list(b_on or on)
    ca: dict[str, T.DataType] = {}
    cb: dict[str, T.DataType] = {}
    for ka, kb in zip(on, b_on):
        ta, tb = a.field(ka).dataType, b.field(kb).dataType
        if ta == tb:
            continue
        if isinstance(ta, _INTEGRAL) and isinstance(tb, _INTEGRAL):
            ca[ka], cb[kb] = T.LongType(), T.LongType()
        elif isinstance(ta, (*_INTEGRAL, *_FRACTIONAL)) and isinstance(tb, (*_INTEGRAL, *_FRACTIONAL)):
            ca[ka], cb[kb] = T.DoubleType(), T.DoubleType()
        else:
            raise SchemaMismatchError(
                f"{op}: key column `{ka}` is {ta.simpleString()} on one side and `{kb}` is "
                f"{tb.simpleString()} on the other; cast them to the same type first"
            )
    return ca, cb


def buckets(spark: Any) -> int:
    """How many key buckets a stateful operator spreads its input over."""
    parts = shuffle_partitions(spark)
    try:
        factor = int(_conf.get(spark, "spark_differential.buckets_per_partition", "2"))
    except Exception:  # pragma: no cover
        factor = 2
    return max(1, parts * factor)


def key_hash(cols: Sequence[Column]) -> Column:
    """The 64-bit hash of key columns that decides their bucket (shared with dd_arrange)."""
    return F.xxhash64(*cols) if cols else F.lit(0).cast("long")


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int (Murmur3 x86 32-bit, seed 42), as a signed 32-bit int."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = rotl(k1, 15) * 0x1B873593 & mask
    h1 = rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


@functools.lru_cache(maxsize=64)
def bucket_labels(nbuckets: int, nparts: int) -> tuple[int, ...]:
    """Bucket values that Spark's hash partitioning into ``nparts`` spreads evenly.

    Rows are placed by ``pmod(hash(bucket), nparts)``; with buckets numbered
    ``0..n-1`` that put 0, 1, 3 and 4 of 8 buckets on 4 partitions (one core idle
    while another works through four buckets).  Bucket ``i`` is the ``i``-th value
    whose partition still has room, so every partition holds the same number of
    buckets (at most one more where they do not divide evenly).
    """
    nparts = max(1, nparts)
    room = -(-nbuckets // nparts)
    taken = [0] * nparts
    labels: list[int] = []
    value = 0
    while len(labels) < nbuckets:
        part = _murmur3_int(value) % nparts
        if taken[part] < room:
            taken[part] += 1
            labels.append(value)
        value += 1
    return tuple(labels)


def bucket_of(khash: Column, nbuckets: int, nparts: int) -> Column:
    """The bucket of a key hash, as a non-nullable int spread evenly over ``nparts``
    partitions (see :func:`bucket_labels`).

    Never null anyway, but declared so: Spark otherwise infers ``isnotnull`` filters on
    it below joins, and a union of filtered and unfiltered inputs partitioned by
    bucket loses that partitioning (one more shuffle per kernel inside ``dd_iterate``).
    """
    # one SQL literal, not one F.lit per label (each PySpark call is a py4j round trip)
    labels = F.expr(_labels_sql(nbuckets, nparts))
    index = (F.pmod(khash, F.lit(nbuckets)) + 1).cast("int")
    return F.coalesce(F.element_at(labels, index), F.lit(0))


def _labels_sql(nbuckets: int, nparts: int) -> str:
    return "array(" + ", ".join(str(v) for v in bucket_labels(nbuckets, nparts)) + ")"


def bucket_sql(hashed: Sequence[str], nbuckets: int, nparts: int) -> str:
    """:func:`bucket_of` of the :func:`key_hash` of the columns named ``hashed`` as one SQL
    expression: one py4j round trip (``F.expr``) instead of about fifteen.  The names
    must be plain identifiers (the kernels' ``_k0``...)."""
    khash = f"xxhash64({', '.join(hashed)})" if hashed else "CAST(0 AS BIGINT)"
    index = f"CAST(pmod({khash}, {nbuckets}) + 1 AS INT)"
    return f"coalesce(element_at({_labels_sql(nbuckets, nparts)}, {index}), 0)"


def shuffle_partitions(spark: Any) -> int:
    """``spark.sql.shuffle.partitions``: how many partitions the buckets are spread over."""
    try:
        return max(1, int(_conf.get(spark, "spark.sql.shuffle.partitions")))
    except Exception:  # pragma: no cover - defensive
        return 8


def prepare(inp: Input, nbuckets: int, nparts: int | None = None, op: str = "") -> DataFrame:
    """Rename to kernel names, encode the time, add the bucket column.

    Also the null check of every kernel's input: a null ``time`` leaf or ``diff`` fails
    the job with :class:`~spark_differential.errors.NullValueError` naming ``op``
    (:func:`spark_differential.core.collection.null_guard`; free where the schema says
    the column cannot be null)."""
    hashed, cols = _kernel_columns(inp, op)
    khash = key_hash(hashed)
    bucket = bucket_of(khash, nbuckets, nparts or shuffle_partitions(inp.df.sparkSession))
    return inp.df.select(bucket.alias(BUCKET), khash.alias(KEY_HASH), *cols)


def _kernel_columns(inp: Input, op: str) -> tuple[list[Column], list[Column]]:
    """The columns whose hash decides an input's bucket, and the input's columns in
    kernel form (see :func:`prepare`), named as :func:`kernel_names` says."""
    tcol = inp.time_col if inp.time_col is not None else F.col(TIME)
    leaves = inp.time_type.encode_column(tcol)
    guarded = [null_guard(leaf, [leaf], "time", op) for leaf in leaves]
    kcols = [qcol(k).cast(inp.key_casts[k]) if k in inp.key_casts else qcol(k) for k in inp.keys]
    hashed = kcols if inp.hash_cols is None else [qcol(c) for c in inp.hash_cols]
    new = inp.new if inp.new is not None else F.lit(True)
    cols = [
        *kcols,
        *[qcol(c) for c in inp.data],
        *guarded,
        null_guard(F.col(DIFF).cast("long"), [F.col(DIFF)], "diff", op),
        new,
    ]
    return hashed, [c.alias(n) for c, n in zip(cols, kernel_names(inp))]


def _kernel_sql(inp: Input, op: str) -> list[str] | None:
    """:func:`_kernel_columns`' kernel form as SQL select items (one ``selectExpr``: one
    py4j round trip for the whole projection, where each Column costs a few), for an
    input whose time is its own integral ``time`` column (``time_col`` and ``new`` not
    given); ``None`` otherwise.  The same values and the same null checks
    (:func:`~spark_differential.core.collection.guard_expr`: ``coalesce(x, raise_error(...),
    0L)``, which Spark analyses faster than the Columns' ``CASE`` and declares
    non-nullable)."""
    tt = inp.time_type
    if (inp.time_col is not None or inp.new is not None or not isinstance(tt, Total)
            or tt.kind not in _INTEGRAL_KINDS or inp.cs.ttype != tt):
        return None
    schema = inp.schema if inp.schema is not None else inp.df.schema
    kcols = [f"CAST({quoted(k)} AS {inp.key_casts[k].simpleString()})" if k in inp.key_casts else quoted(k)
             for k in inp.keys]
    cols = [
        *kcols,
        *map(quoted, inp.data),
        f"CAST({guard_expr(schema, TIME, op)} AS BIGINT)",
        f"CAST({guard_expr(schema, DIFF, op)} AS BIGINT)",
        "true",
    ]
    return [c if c == n else f"{c} AS {n}" for c, n in zip(cols, kernel_names(inp))]


def _kernel_form(inp: Input, op: str, *extra: str) -> DataFrame:
    """``inp.df`` in kernel form (:func:`kernel_names`, then the SQL items ``extra``): one
    ``selectExpr`` of SQL text where :func:`_kernel_sql` applies, else a ``select`` of Columns."""
    items = _kernel_sql(inp, op)
    if items is not None:
        return inp.df.selectExpr(*items, *extra)
    return inp.df.select(*_kernel_columns(inp, op)[1], *[F.expr(e) for e in extra])


def kernel_names(inp: Input) -> list[str]:
    """An input's column names in kernel form: keys, data, time leaves, diff, new."""
    return [*keys(len(inp.keys)), *names(inp.prefix, len(inp.data)), *times(inp.time_type.width), D, NEW]


def _hashed_names(inp: Input) -> list[str]:
    """The kernel names of the columns :func:`_kernel_columns` hashes for the bucket."""
    if inp.hash_cols is None:
        return keys(len(inp.keys))
    renamed = dict(zip(inp.data, names(inp.prefix, len(inp.data))))
    return [renamed[c] for c in inp.hash_cols]


def kernel_fields(inp: Input, with_keys: bool = True) -> list[T.StructField]:
    """Spark fields of a prepared input's key and data columns, under kernel names."""
    out: list[T.StructField] = []
    if with_keys:
        for k, n in zip(inp.keys, keys(len(inp.keys))):
            out.append(T.StructField(n, inp.key_casts.get(k, inp.cs.field(k).dataType), True))
    for c, n in zip(inp.data, names(inp.prefix, len(inp.data))):
        out.append(T.StructField(n, inp.cs.field(c).dataType, True))
    return out


def time_fields(ttype: TimeType) -> list[T.StructField]:
    return [T.StructField(n, T.LongType(), False) for n in times(ttype.width)] + [T.StructField(D, T.LongType(), False)]


def large_var_types(spark: Any) -> bool:
    """Whether the session sends strings and binaries to Python as Arrow's large types."""
    try:
        return str(_conf.get(spark, "spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    except Exception:  # pragma: no cover
        return False


def arrow_schema(spark: Any, schema: T.StructType, large: bool | None = None) -> pa.Schema:
    """The Arrow schema Spark uses for ``schema`` with ``spark``'s settings (``large``: the
    :func:`large_var_types` setting when the caller knows it already: a py4j round trip less)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if large is None:
        large = large_var_types(spark)
    try:
        return to_arrow_schema(schema, timezone="UTC", prefers_large_types=large)
    except TypeError:  # pragma: no cover - older signatures
        return to_arrow_schema(schema)


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


def run(
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
    return df.repartition(F.expr(bucket_sql(_hashed_names(inp), buckets(spark), shuffle_partitions(spark))))


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
    one = _by_bucket(_kernel_form(inp, op), inp)
    return _in_tasks(kernel, params, one, out_schema)


def _in_tasks(
    kernel: Callable[..., pa.Table],
    params: Any,
    one: DataFrame,
    out_schema: T.StructType,
    sides: tuple[list[str], list[str]] | None = None,
) -> DataFrame:
    """``kernel`` once per partition of ``one`` (kernel form, already placed by bucket):
    one input, or two tagged by :data:`SIDE` whose columns are ``sides``."""
    spark = one.sparkSession
    schema = arrow_schema(spark, out_schema)
    kernel = fault_hook(spark, kernel)
    if sides is None:
        return one.mapInArrow(_per_partition(kernel, params, schema), out_schema)
    return one.mapInArrow(_pair_per_partition(kernel, params, schema, *sides), out_schema)


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


SIDE = "_sd_side"


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
    a = _kernel_form(ia, op, f"0 AS {SIDE}")
    b = _kernel_form(ib, op, f"1 AS {SIDE}")
    one = _by_bucket(a.unionByName(b, allowMissingColumns=True), ia)
    return _in_tasks(kernel, params, one, out_schema, (kernel_names(ia), kernel_names(ib)))


def run_pair_sql(
    kernel: Callable[..., pa.Table],
    params: Any,
    sides: Sequence[tuple[DataFrame, Sequence[str], Sequence[str]]],
    nkeys: int,
    out_schema: T.StructType,
) -> DataFrame:
    """:func:`run_pair_per_partition` for two inputs the caller writes in kernel form as SQL
    text: ``(df, expressions, names)`` per side, the names those of :func:`kernel_names`
    (the first ``nkeys`` the keys ``_k*``).  One ``selectExpr`` per side (one py4j round
    trip each), then the same union tagged by side, repartition by bucket and
    ``mapInArrow`` (``sd.sql``'s as-of join of two tables)."""
    (da, ea, na), (db, eb, nb) = sides
    a = da.selectExpr(*[f"{e} AS {n}" for e, n in zip(ea, na)], f"0 AS {SIDE}")
    b = db.selectExpr(*[f"{e} AS {n}" for e, n in zip(eb, nb)], f"1 AS {SIDE}")
    spark = da.sparkSession
    one = a.unionByName(b, allowMissingColumns=True).repartition(
        F.expr(bucket_sql(keys(nkeys), buckets(spark), shuffle_partitions(spark))))
    return _in_tasks(kernel, params, one, out_schema, (list(na), list(nb)))


def _pair_per_partition(
    kernel: Callable[..., pa.Table], params: Any, schema: pa.Schema, cols_a: list[str], cols_b: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def fn(table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        side = table.column(SIDE)
        left = table.filter(pc.equal(side, 0)).select(cols_a)
        right = table.filter(pc.equal(side, 1)).select(cols_b)
        return _call(kernel, params, schema, left, right)

    return over_partition(fn)


def finish(out: DataFrame, columns: Sequence[tuple[str, str]], ttype: TimeType) -> DataFrame:
    """Kernel output (internal names) back to a user-facing collection."""
    leaves = [F.col(n) for n in times(ttype.width)]
    return out.select(
        *[F.col(internal).alias(user) for internal, user in columns],
        ttype.decode_columns(leaves).alias(TIME),
        F.col(D).alias(DIFF),
    )


def execute(
    op: str,
    kernel: Callable[..., pa.Table],
    params: Any,
    inputs: Sequence[Input],
    entries: Sequence[Entry],
    out_fields: Sequence[T.StructField],
    out_columns: Sequence[tuple[str, str]],
    kernel_type: TimeType,
) -> DataFrame:
    """Run a stateful operator: directly, through the enclosing ``dd_iterate``, or on an
    incremental view's stored traces (:mod:`spark_differential.incremental.traced`)."""
    from spark_differential.incremental.traced import current

    view = current()
    if view is not None and view.takes(entries):
        return view.stateful(op, kernel, params, inputs, out_fields, out_columns, kernel_type)
    if any(e.in_loop for e in entries):
        from spark_differential.loop.iterate import stateful_in_loop

        return stateful_in_loop(op, kernel, params, inputs, entries, out_fields, out_columns, kernel_type)
    from spark_differential.intask import pipeline as fused

    recipe = fused.Recipe(op, kernel, params, inputs, out_fields, out_columns, kernel_type)
    one_task, keep = fused.attempt(recipe)
    if one_task is not None:
        fused.remember(one_task, recipe)
        return one_task
    out = _distributed(recipe)
    if keep:
        fused.remember(out, recipe)
    return out


def _distributed(r: Any) -> DataFrame:
    """A top-level stateful operator (a :class:`spark_differential.intask.pipeline.Recipe`) as its own
    stage: the kernel per partition of its inputs placed by bucket."""
    op, kernel, params, inputs = r.op, r.kernel, r.params, r.inputs
    out_fields, out_columns, kernel_type = r.out_fields, r.out_columns, r.kernel_type
    schema = T.StructType([*out_fields, *time_fields(kernel_type)])
    if isinstance(kernel_type, Total) and kernel_type.kind in _INTEGRAL_KINDS:
        # the time decodes to a cast Arrow does: the task names and types the columns as
        # :func:`finish` would, and no DataFrame (analysis, ~30 py4j round trips) follows
        fields = {f.name: f for f in schema.fields}
        tname = times(1)[0]
        user = T.StructType(
            [T.StructField(u, fields[i].dataType, fields[i].nullable) for i, u in out_columns]
            + [T.StructField(TIME, kernel_type.spark_type(), False), T.StructField(DIFF, T.LongType(), False)]
        )
        sources = [i for i, _ in out_columns] + [tname, D]
        return run(functools.partial(_user_named, kernel, sources, user.names), params, inputs, user, op)
    out = run(kernel, params, inputs, schema, op)
    return finish(out, out_columns, kernel_type)


def _user_named(
    kernel: Callable[..., pa.Table], sources: Sequence[str], labels: Sequence[str], params: Any, *tables: pa.Table
) -> pa.Table:
    """``kernel``'s output columns ``sources`` under the names ``labels``."""
    out = kernel(params, *tables)
    return pa.Table.from_arrays([out.column(c) for c in sources], names=list(labels))
