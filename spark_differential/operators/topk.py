"""Top ``k`` per key: ``dd_top_k``.

On ``(data, time, diff)``: at every time, each key's output is the ``k`` copies ranked
first among the key's rows with positive accumulated multiplicity, by ``col`` descending
(nulls last; ties by the other data columns ascending).  The output changes only where a
key's input does (its own update times, or their lub closure), where the kernel
(:mod:`spark_differential.kernels.topk`) puts the corrections.

This module is the whole of the operator besides its kernel: it checks the input, says
what to compute as one :class:`~spark_differential.engine.call.StatefulCall` and hands it
to the seam, which runs it on every path (as its own stage, in a small pipeline inside one
task, in a distributed or in-task ``dd_iterate`` loop, in an incremental view).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from spark_differential.core.collection import as_columns, inspect, require_columns
from spark_differential.core.scope import unify
from spark_differential.engine.call import StatefulCall, execute
from spark_differential.engine.kernel_form import Input, entry_time, kernel_fields
from spark_differential.errors import SchemaMismatchError
from spark_differential.kernels import topk as ktopk
from spark_differential.kernels.common import keys, names


def dd_top_k(df: DataFrame, by: str | Sequence[str] | None, col: str, k: int) -> DataFrame:
    """Per key, the ``k`` rows with the largest ``col`` (all data columns kept).

    A row present ``m`` times counts as ``m`` rows; rows whose ``col`` is null rank last;
    rows tied on ``col`` are ranked by the other data columns, ascending, so the answer is
    the same whatever order the rows come in.  The output has the ``by`` columns and then
    the input's other data columns, in their order.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> s = spark.createDataFrame([("ann", 5, 0, 1), ("ann", 7, 1, 1), ("ann", 3, 2, 1)],
    ...                           "who string, pts long, time long, diff long")
    >>> s.dd_top_k("who", "pts", k=2).orderBy("time", "diff", "pts").show()
    +---+---+----+----+
    |who|pts|time|diff|
    +---+---+----+----+
    |ann|  5|   0|   1|
    |ann|  7|   1|   1|
    +---+---+----+----+
    <BLANKLINE>
    """
    op = "dd_top_k"
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{op}: k must be a positive int, got {k!r}")
    by_ = as_columns(by, op=op, what="`by`")
    cs = inspect(df, op=op)
    require_columns(cs, [*by_, col], op=op, side="input", what="`by` and value columns")
    if col in by_:
        raise SchemaMismatchError(f"{op}: `{col}` cannot be both a `by` column and the value column")
    data = [col, *[c for c in cs.data_cols if c not in by_ and c != col]]
    _, kernel_t, entries = unify(op, [cs], ["input"])
    inp = Input(df, cs, by_, data, "_a", kernel_t, entry_time(entries[0], cs, kernel_t), schema=df.schema)
    params = ktopk.TopKParams(len(by_), len(data), k, kernel_t)
    internal = dict(zip(data, names("_a", len(data))))
    out_columns = [*zip(keys(len(by_)), by_), *[(internal[c], c) for c in cs.data_cols if c in internal]]
    return execute(StatefulCall.of(op, ktopk.top_k, params, [inp], entries, kernel_fields(inp), out_columns, kernel_t))
