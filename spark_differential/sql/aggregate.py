"""``GROUP BY`` and aggregates in recursive ``sd.sql`` queries, as differential reductions.

On ``(data, time, diff)``: the rows of the ``FROM`` clause are projected to the grouping keys
and the aggregates' arguments (row by row), then reduced per key: at every time each group's
output is the aggregate of the group's rows (with their multiplicities) in the snapshot, so
the result's snapshot is SQL's ``GROUP BY`` of the input's snapshot.  One aggregate is one
``dd_*`` reduction (``count(*)``: ``dd_count``; ``count(x)``: ``dd_sum`` of
``x IS NOT NULL``; ``sum``/``min``/``max``: ``dd_sum``/``dd_min``/``dd_max``; ``DISTINCT``:
a ``dd_distinct`` first); several (or ``avg``) are one ``dd_reduce`` computing them all.
Without ``GROUP BY`` an aggregate over no rows still has its one row (``count`` 0, the others
NULL): the constant row (:meth:`~spark_differential.sql.rel.Ctx.always`) minus "the input has
a row", with those values.

Inside a recursive CTE an aggregate has differential dataflow's meaning: it is part of the
equation whose fixed point is computed (see :mod:`spark_differential.sql.fixpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.names import AGGREGATES, Scope, internal_ref, reject_unsupported
from spark_differential.sql.rel import (
    Col,
    Ctx,
    Flow,
    Rel,
    concat,
    derive,
    distinct,
    project,
    relabeled,
    schema_of,
    where,
)

exp = lazy("sqlglot.expressions")
pd = lazy("pandas")

_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)


@dataclass(frozen=True)
class _Call:
    """One aggregate call: its kind, its argument column (None: ``count(*)``), DISTINCT, output column."""

    kind: str
    arg: str | None
    distinct: bool
    out: str


class _Aggregates:
    """The ``dd_reduce`` function computing several aggregates of one group at once."""

    def __init__(self, calls: list[_Call]) -> None:
        self.calls = calls

    def __call__(self, g: Any) -> Any:
        w = g[DIFF]
        row: dict[str, Any] = {}
        for c in self.calls:
            if c.arg is None:
                row[c.out] = int(w.sum())
                continue
            v = g[c.arg]
            ok = v.notna()
            vals, ws = v[ok], w[ok]
            if c.distinct:
                vals = vals.drop_duplicates()
                ws = pd.Series(1, index=vals.index)
            if c.kind == "count":
                row[c.out] = int(ws.sum())
            elif len(vals) == 0:
                row[c.out] = None
            elif c.kind == "sum":
                row[c.out] = (vals * ws).sum()
            elif c.kind == "avg":
                row[c.out] = float((vals * ws).sum()) / float(ws.sum())
            elif c.kind == "min":
                row[c.out] = vals.min()
            else:
                row[c.out] = vals.max()
        return pd.DataFrame([{**row, DIFF: 1}])


def _group_exprs(select: exp.Select, scope: Scope) -> list[exp.Expr]:
    """The GROUP BY expressions, with ordinals (``GROUP BY 1``) and SELECT aliases resolved."""
    group = select.args.get("group")
    if group is None:
        return []
    for key in ("rollup", "cube", "grouping_sets", "totals"):
        if group.args.get(key):
            raise SqlError(f"{_OP}: GROUP BY {key.upper().replace('_', ' ')} is not supported in a recursive query")
    aliases = {scope.norm(e.alias): e.this for e in select.expressions if isinstance(e, exp.Alias)}
    known = {scope.norm(c.name) for c in scope.cols}
    out = []
    for g in group.expressions:
        if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
            i = int(g.this)
            if not 1 <= i <= len(select.expressions):
                raise SqlError(f"{_OP}: GROUP BY {i}: the SELECT list has {len(select.expressions)} items")
            e = select.expressions[i - 1]
            g = e.this if isinstance(e, exp.Alias) else e
        elif isinstance(g, exp.Column) and len(g.parts) == 1 and scope.norm(g.name) in aliases and scope.norm(g.name) not in known:
            g = aliases[scope.norm(g.name)]
        reject_unsupported(g, "GROUP BY")
        out.append(g)
    return out


def _calls(nodes: list[exp.Expr]) -> list[exp.AggFunc]:
    """The aggregate calls in ``nodes`` (outermost ones), each once."""
    seen: dict[str, exp.AggFunc] = {}
    for n in nodes:
        for a in n.find_all(exp.AggFunc):
            p = a.parent
            while p is not None and not isinstance(p, exp.AggFunc):
                p = p.parent
            if p is None:
                seen.setdefault(_sql_of(a), a)
    return list(seen.values())


def group(flow: Flow, select: exp.Select, rel: Rel, scope: Scope) -> Rel:
    """``SELECT ... FROM <rel> [GROUP BY ...] [HAVING ...]`` with aggregates."""
    ctx: Ctx = flow.ctx
    gexprs = _group_exprs(select, scope)
    items = flow.select_items(select, scope)
    having = select.args.get("having")
    exprs = [e for e, _ in items if e is not None] + ([having.this] if having is not None else [])
    calls = _calls(exprs)
    if rel.loop and not gexprs and calls:
        raise SqlError(
            f"{_OP}: an aggregate without GROUP BY over the recursive CTE (`{_sql_of(calls[0])}`) is not supported: "
            "it has a row even when its input is empty, so the recursion could not run dry; group by a key"
        )
    pre_items: list[tuple[str, Col]] = []
    gmap: dict[str, str] = {}
    for g in gexprs:
        text = scope.text(g)
        if text not in gmap:
            gmap[text] = ctx.fresh(_sql_of(g))
            pre_items.append((text, Col(_sql_of(g), gmap[text])))
    gk = list(gmap.values())
    specs: list[_Call] = []
    outs: dict[str, str] = {}
    for a in calls:
        kind, arg, dist = _read_call(a)
        arg_col = None
        if arg is not None:
            reject_unsupported(arg, f"the argument of {_sql_of(a)}")
            text = scope.text(arg)
            arg_col = next((c.internal for t, c in pre_items if t == text and c.internal not in gk), None)
            if arg_col is None:
                arg_col = ctx.fresh(_sql_of(arg))
                pre_items.append((text, Col(_sql_of(arg), arg_col)))
        outs[_sql_of(a)] = ctx.fresh(_sql_of(a))
        specs.append(_Call(kind, arg_col, dist, outs[_sql_of(a)]))
    pre = project(ctx, rel, pre_items, what=" (in GROUP BY)")
    out = _reduce(flow, pre, gk, specs)
    if not gexprs and calls:
        out = _with_empty_row(ctx, pre, out, specs)

    def lift(node: exp.Expr) -> exp.Expr:
        def fn(n: exp.Expr) -> exp.Expr:
            if isinstance(n, exp.AggFunc):
                return internal_ref(outs[_sql_of(n)])
            if any(isinstance(x, exp.Column) for x in n.walk()) and not any(isinstance(x, exp.AggFunc) for x in n.walk()):
                text = scope.text(n)
                if text in gmap:
                    return internal_ref(gmap[text])
                if isinstance(n, exp.Column):
                    raise SqlError(
                        f"{_OP}: column `{_sql_of(n)}` must appear in GROUP BY or be used in an aggregate function"
                    )
            return n

        return node.transform(fn)

    if having is not None:
        reject_unsupported(having.this, "HAVING", aggregates=True, loop_names=sorted(flow.active()))
        out = where(ctx, out, _sql_of(lift(having.this)), what=" (in HAVING)")
    proj: list[tuple[str, Col]] = []
    for e, c in items:
        if e is None:
            e, name = internal_ref(c.internal), c.name
        else:
            reject_unsupported(e, "the SELECT list", aggregates=True, loop_names=sorted(flow.active()))
            name = c.name
            e = e.this if isinstance(e, exp.Alias) else e
        proj.append((_sql_of(lift(e)), Col(name, ctx.fresh(name))))
    return relabeled(ctx, out, proj, what=" (in a SELECT list)")


def _read_call(a: exp.AggFunc) -> tuple[str, exp.Expr | None, bool]:
    kind = type(a).__name__
    if kind not in AGGREGATES:
        raise SqlError(
            f"{_OP}: aggregate `{_sql_of(a)}` is not supported in a recursive query (supported: "
            f"{', '.join(k.lower() for k in AGGREGATES)})"
        )
    arg = a.this
    dist = False
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            raise SqlError(f"{_OP}: `{_sql_of(a)}`: DISTINCT over several columns is not supported")
        arg, dist = arg.expressions[0], True
    if isinstance(arg, exp.Star):
        if kind != "Count":
            raise SqlError(f"{_OP}: `{_sql_of(a)}`: only count takes *")
        arg = None
    elif arg is None:
        raise SqlError(f"{_OP}: `{_sql_of(a)}` needs an argument")
    if a.expressions:
        raise SqlError(f"{_OP}: `{_sql_of(a)}`: one argument expected")
    return kind.lower(), arg, dist


def _reduce(flow: Flow, pre: Rel, gk: list[str], specs: list[_Call]) -> Rel:
    """The reduction(s): group keys, then one column per aggregate call."""
    ctx: Ctx = flow.ctx
    gcols = [c for c in pre.cols if c.internal in gk]
    cols = gcols + [Col(s.out, s.out) for s in specs]
    if not specs:
        return distinct(ctx, project(ctx, pre, [(c.internal, c) for c in gcols]))
    by = gk or None
    if len(specs) == 1 and specs[0].kind != "avg":
        s = specs[0]
        base = pre
        if s.distinct and s.kind in ("count", "sum"):
            base = distinct(ctx, project(ctx, pre, [*[(c.internal, c) for c in gcols], (s.arg, Col("", s.arg))]))
        if s.arg is None:
            # with no key, one constant column: the engine's dd_count of a collection without data
            # columns fails (a DuckDB syntax error in its kernel; reported, not fixed here)
            items = [(c.internal, c) for c in gcols] or [("0", Col("", ctx.fresh("row")))]
            counted = project(ctx, base, items)
            return derive(ctx, [counted], cols, lambda d: d.dd_count(by).withColumnRenamed("count", s.out),
                          linear=False, consolidated=True, dry=lambda d: _grouped(d, gk, F.count(F.lit(1)).alias(s.out)))
        if s.kind == "count":
            arg = f"CASE WHEN {s.arg} IS NULL THEN 0 ELSE 1 END"
        else:
            arg = s.arg
        val = project(ctx, base, [*[(c.internal, c) for c in gcols], (arg, Col("", s.out))])
        op = {"count": "dd_sum", "sum": "dd_sum", "min": "dd_min", "max": "dd_max"}[s.kind]
        agg = {"dd_sum": F.sum, "dd_min": F.min, "dd_max": F.max}[op]
        return derive(ctx, [val], cols, lambda d: getattr(d, op)(by, s.out), linear=False, consolidated=True,
                      dry=lambda d: _grouped(d, gk, agg(s.out).alias(s.out)))
    fields = schema_of(ctx, pre, flow.dry_env)
    types = {f.name: f.dataType for f in fields}
    out_fields = [T.StructField(s.out, _result_type(s, types), True) for s in specs]
    func = _Aggregates(specs)
    schema = T.StructType(out_fields)
    return derive(ctx, [pre], cols, lambda d: d.dd_reduce(gk, func, schema), linear=False, consolidated=True,
                  dry=lambda d: _grouped(d, gk, *[F.lit(None).cast(f.dataType).alias(f.name) for f in out_fields]))


def _grouped(df: Any, by: list[str], *aggs: Any) -> Any:
    """The stand-in of a reduction for a schema-only build (see :class:`~spark_differential.sql.rel.DryEnv`)."""
    return df.groupBy(*by).agg(*aggs, F.max(TIME).alias(TIME), F.sum(DIFF).alias(DIFF))


def _result_type(s: _Call, types: dict[str, T.DataType]) -> T.DataType:
    if s.kind == "count":
        return T.LongType()
    if s.kind == "avg":
        return T.DoubleType()
    dt = types[s.arg]  # type: ignore[index]
    if s.kind == "sum":
        if isinstance(dt, _INTEGRAL):
            return T.LongType()
        if isinstance(dt, T.DecimalType):
            return T.DecimalType(min(38, dt.precision + 10), dt.scale)
        return T.DoubleType()
    return dt


def _with_empty_row(ctx: Ctx, pre: Rel, out: Rel, specs: list[_Call]) -> Rel:
    """An aggregate without GROUP BY: its one row also when the input is empty."""
    always = ctx.always()
    u = always.internals[0]
    nonempty = distinct(ctx, project(ctx, pre, [("0", Col("", u))]))
    neg = derive(ctx, [nonempty], nonempty.cols, lambda d: d.dd_negate(consolidate=False))
    empty = concat(ctx, [always, neg], consolidate=False)
    types = {f.name: f.dataType for f in out.df.schema.fields} if out.df is not None else {}
    defaults = [("CAST(0 AS BIGINT)" if s.kind == "count" else f"CAST(NULL AS {types[s.out].simpleString()})", c)
                for s, c in zip(specs, out.cols)]
    return concat(ctx, [out, project(ctx, empty, defaults)])
