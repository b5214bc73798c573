"""Set operations and ``VALUES`` in recursive ``sd.sql`` queries, on collections.

On ``(data, time, diff)``: ``UNION ALL`` is ``dd_concat`` (multiplicities add), ``UNION``
its ``dd_distinct``; ``EXCEPT`` and ``INTERSECT`` [``ALL``] are ``dd_threshold`` of signed
sums (``EXCEPT ALL``: ``max(a - b, 0)`` copies, ``INTERSECT ALL``: ``min(a, b)``, the set
forms on the ``distinct`` inputs), so at every time the result is the set operation of
the two snapshots.  Both sides are cast to their common column types first (Spark's
``UNION`` rules).  ``VALUES`` rows are constants, present from the first time any input
has an update on (:meth:`~spark_differential.sql.rel.Ctx.always`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.rel import Col, Ctx, Flow, Rel, concat, derive, distinct, project

exp = lazy("sqlglot.expressions")


def setop(flow: Flow, node: exp.Expr) -> Rel:
    """``UNION [ALL]``, ``EXCEPT [ALL]``, ``INTERSECT [ALL]`` of two queries."""
    left = flow.query(node.this)
    right = flow.query(node.expression)
    kind = node.key.upper()
    if len(left.cols) != len(right.cols):
        raise SqlError(
            f"{_OP}: the two sides of {kind} have {len(left.cols)} and {len(right.cols)} columns; they must match"
        )
    set_ = bool(node.args.get("distinct"))
    if kind != "UNION" and (left.loop or right.loop):
        raise SqlError(
            f"{_OP}: the recursive CTE is read inside {kind}: a recursive reference under EXCEPT/INTERSECT "
            "(a negation of the recursive CTE) has no fixed point in general and is not supported"
        )
    left, right = aligned(flow, left, right, kind)
    ctx = flow.ctx
    if kind == "UNION":
        return distinct(ctx, concat(ctx, [left, right], consolidate=False)) if set_ else concat(ctx, [left, right])
    if kind == "INTERSECT" and set_:
        both = concat(ctx, [distinct(ctx, left), distinct(ctx, right)], consolidate=False)
        return _threshold(ctx, both, _twice)
    minus = concat(ctx, [distinct(ctx, left) if set_ else left, _negate(ctx, right if not set_ else distinct(ctx, right))],
                   consolidate=False)
    if kind == "EXCEPT":
        return _threshold(ctx, minus, _positive)
    return concat(ctx, [left, _negate(ctx, _threshold(ctx, minus, _positive))])  # INTERSECT ALL: min(a, b)


def aligned(flow: Flow, left: Rel, right: Rel, what: str) -> tuple[Rel, Rel]:
    """``right`` under ``left``'s internal names, both cast to their common types (when built)."""
    ctx = flow.ctx
    with ctx.errors(f" (the column types of {what})"):
        ldf, rdf = left.build(flow.dry_env), right.build(flow.dry_env)
        common = ldf.select(*[c.internal for c in left.cols]).union(rdf.select(*[c.internal for c in right.cols])).schema.fields
        lt = {f.name: f.dataType for f in ldf.schema.fields}
        rt = {f.name: f.dataType for f in rdf.schema.fields}
    if any(lt[c.internal] != f.dataType for c, f in zip(left.cols, common)):
        left = project(ctx, left, [(_cast(c.internal, lt[c.internal], f.dataType), Col(c.name, ctx.fresh(c.name)))
                                   for c, f in zip(left.cols, common)])
    items = [(_cast(rc.internal, rt[rc.internal], f.dataType), lc) for rc, lc, f in zip(right.cols, left.cols, common)]
    cols = [replace(c, qual=None, hidden=False) for c in left.cols]
    left = replace(left, cols=cols)
    return left, project(ctx, right, [(t, c) for (t, _), c in zip(items, cols)])


def values(flow: Flow, node: exp.Values) -> Rel:
    """``VALUES (...), ...``: constant rows, present from the first update of any input."""
    rows = node.expressions
    width = {len(r.expressions) if isinstance(r, exp.Tuple) else 1 for r in rows}
    if len(width) != 1:
        raise SqlError(f"{_OP}: the rows of VALUES have different numbers of columns")
    n = width.pop()
    alias = node.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else [f"col{i + 1}" for i in range(n)]
    if len(names) != n:
        raise SqlError(f"{_OP}: VALUES has {n} columns but its alias names {len(names)}")
    cols = [Col(nm, flow.ctx.fresh(nm)) for nm in names]
    bare = node.copy()
    bare.set("alias", None)
    with flow.ctx.errors(" (in VALUES)"):
        vals = flow.ctx.spark.sql(f"SELECT * FROM {_sql_of(bare)}").toDF(*[c.internal for c in cols])
    always = flow.ctx.always()
    return derive(flow.ctx, [always], cols,
                  lambda a: a.crossJoin(vals).select(*[c.internal for c in cols], TIME, DIFF))


def _cast(name: str, have: T.DataType, want: T.DataType) -> str:
    return name if have == want else f"CAST({name} AS {want.simpleString()})"


def _twice(m: int) -> int:
    return 1 if m == 2 else 0


def _positive(m: int) -> int:
    return max(m, 0)


def _negate(ctx: Ctx, rel: Rel) -> Rel:
    return derive(ctx, [rel], rel.cols, lambda df: df.dd_negate(consolidate=False), linear=False)


def _threshold(ctx: Ctx, rel: Rel, func: Callable[[int], int]) -> Rel:
    return derive(ctx, [rel], rel.cols, lambda df: df.dd_threshold(func), linear=False, consolidated=True)
