"""Collections in kernel form: the columns every stateful kernel reads, and the bucket that places them.

On ``(data, time, diff)`` nothing changes here: an input of a stateful operator is
renamed to the kernels' positional names (keys ``_k*``, data ``_a*``/``_b*``, the
time's int64 leaves ``_t*``, ``_d``, ``_new``; see :mod:`spark_differential.kernels.common`),
its time encoded (:mod:`spark_differential.core.lattice`), null times and diffs failing
the job with a named error, and each row given the 64-bit hash of its key columns and
the *bucket* that hash falls in.  Every row of a key lands in one bucket, so a kernel
called on whole buckets sees every update of each key it sees (many keys per call).
Every engine (distributed, in one task, in a loop, in an incremental view) reads its
inputs in this form.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.collection import (
    DIFF,
    FRACTIONAL_TYPES,
    INTEGRAL_TYPES,
    TIME,
    CollectionSchema,
    guard_expr,
    null_guard,
    qcol,
    quoted,
)
from spark_differential.core.lattice import INTEGRAL_KINDS, TimeType, Total
from spark_differential.core.lazy import lazy
from spark_differential.core.names import BUCKET, KEY_HASH
from spark_differential.core.scope import Entry
from spark_differential.errors import SchemaMismatchError
from spark_differential.kernels.common import NEW, D, keys, names, times

pa = lazy("pyarrow")










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
        if isinstance(ta, INTEGRAL_TYPES) and isinstance(tb, INTEGRAL_TYPES):
            ca[ka], cb[kb] = T.LongType(), T.LongType()
        elif isinstance(ta, (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)) and isinstance(tb, (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)):
            ca[ka], cb[kb] = T.DoubleType(), T.DoubleType()
        else:
            raise SchemaMismatchError(
                f"{op}: key column `{ka}` is {ta.simpleString()} on one side and `{kb}` is "
                f"{tb.simpleString()} on the other; cast them to the same type first"
            )
    return ca, cb



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
    return tuple(sorted(v for values in _first_values(nparts, [room] * nparts) for v in values)[:nbuckets])


def _first_values(nparts: int, need: Sequence[int]) -> list[list[int]]:
    """Per partition ``p``, the first ``need[p]`` values ``0, 1, 2, ...`` that Spark's hash
    partitioning into ``nparts`` puts on ``p``, ascending."""
    per: list[list[int]] = [[] for _ in range(nparts)]
    value = 0
    while any(len(per[p]) < need[p] for p in range(nparts)):
        part = _murmur3_int(value) % nparts
        if len(per[part]) < need[part]:
            per[part].append(value)
        value += 1
    return per


def slot_labels(nslots: int, nparts: int) -> tuple[int, ...]:
    """Values that Spark's hash partitioning into ``nparts`` puts on partition ``i % nparts``
    for ``i`` in ``0 .. nslots - 1``: numbered slots (a key-less as-of join's ranges) placed
    round-robin, every partition holding as many as the others (one more where they do not
    divide evenly), consecutive slots on different partitions.

    >>> labels = slot_labels(6, 4)
    >>> [_murmur3_int(v) % 4 for v in labels]
    [0, 1, 2, 3, 0, 1]
    """
    nparts = max(1, nparts)
    per = _first_values(nparts, [len(range(p, nslots, nparts)) for p in range(nparts)])
    return tuple(per[i % nparts][i // nparts] for i in range(nslots))


def slot_sql(slot: str, nslots: int, nparts: int) -> str:
    """SQL placing a row by the int column ``slot`` (``0 .. nslots - 1``): partition ``slot %
    nparts`` (see :func:`slot_labels`)."""
    labels = "array(" + ", ".join(str(v) for v in slot_labels(nslots, nparts)) + ")"
    return f"coalesce(element_at({labels}, CAST(pmod({slot}, {nslots}) + 1 AS INT)), 0)"


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



def prepare(inp: Input, nbuckets: int, nparts: int | None = None, op: str = "") -> DataFrame:
    """Rename to kernel names, encode the time, add the bucket column.

    Also the null check of every kernel's input: a null ``time`` leaf or ``diff`` fails
    the job with :class:`~spark_differential.errors.NullValueError` naming ``op``
    (:func:`spark_differential.core.collection.null_guard`; free where the schema says
    the column cannot be null)."""
    hashed, cols = _kernel_columns(inp, op)
    khash = key_hash(hashed)
    bucket = bucket_of(khash, nbuckets, nparts or settings.shuffle_partitions(inp.df.sparkSession))
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
            or tt.kind not in INTEGRAL_KINDS or inp.cs.ttype != tt):
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


def as_kernel_input(inp: Input, op: str, *extra: str) -> DataFrame:
    """``inp.df`` in kernel form (:func:`kernel_names`, then the SQL items ``extra``): one
    ``selectExpr`` of SQL text where :func:`_kernel_sql` applies, else a ``select`` of Columns."""
    items = _kernel_sql(inp, op)
    if items is not None:
        return inp.df.selectExpr(*items, *extra)
    return inp.df.select(*_kernel_columns(inp, op)[1], *[F.expr(e) for e in extra])


def kernel_names(inp: Input) -> list[str]:
    """An input's column names in kernel form: keys, data, time leaves, diff, new."""
    return [*keys(len(inp.keys)), *names(inp.prefix, len(inp.data)), *times(inp.time_type.width), D, NEW]


def hashed_names(inp: Input) -> list[str]:
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



def arrow_schema(spark: Any, schema: T.StructType, large: bool | None = None) -> pa.Schema:
    """The Arrow schema Spark uses for ``schema`` with ``spark``'s settings (``large``: the
    :func:`large_var_types` setting when the caller knows it already: a py4j round trip less)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if large is None:
        large = settings.large_var_types(spark)
    try:
        return to_arrow_schema(schema, timezone="UTC", prefers_large_types=large)
    except TypeError:  # pragma: no cover - older signatures
        return to_arrow_schema(schema)


def finish(out: DataFrame, columns: Sequence[tuple[str, str]], ttype: TimeType) -> DataFrame:
    """Kernel output (internal names) back to a user-facing collection."""
    leaves = [F.col(n) for n in times(ttype.width)]
    return out.select(
        *[F.col(internal).alias(user) for internal, user in columns],
        ttype.decode_columns(leaves).alias(TIME),
        F.col(D).alias(DIFF),
    )
