"""The as-of join of ``sd.sql``: reading its clauses and computing the joined rows.

What an as-of join means on ``(data, time, diff)``
--------------------------------------------------
An as-of join is the seed-003 calculus (``differentiate``, ``join``,
``integrate``) applied to two ordinary tables:

* every row of the left table (``orders``) is one update ``(row, o.ts, +1)``: an
  insertion at its own time (:func:`spark_differential.collection` with
  ``time = o.ts``);
* the right table (``prices``) is a price *history*: each row says "from ``p.ts``
  on, the key ``p.item`` has this row as its value", which
  :func:`spark_differential.from_upserts` turns into a changing collection
  (insert at ``p.ts``, retract at the key's next ``p.ts``; with no keys the whole
  table is one key: ``key=[]``);
* :func:`spark_differential.dd_asof_join` meets every left update with the right
  collection as accumulated at the update's time (``>=``) or just before it
  (``>``: ``strict=True``), and the result's ``diff`` (how many copies) is
  expanded back into that many ordinary rows.

So for each left row the result holds the right row(s) with equal keys and the
greatest ``p.ts`` with ``p.ts <= o.ts`` (``<`` for ``>``) -- DuckDB's ASOF JOIN.
``LEFT`` keeps left rows that find nothing, with NULLs for the right columns.
Without keys every row of both tables is on one single key, so the as-of lookup
runs in one Spark task holding the right table's whole timeline (exact, but not
parallel).

:class:`_AsofClauses` reads one ``o ASOF JOIN p`` (its ``MATCH_CONDITION``/``ON``/
``USING`` clauses) into an :class:`_Spec`; :func:`_asof_frame` computes the joined
rows as a DataFrame (left columns, then right columns).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, FRACTIONAL_TYPES, INTEGRAL_TYPES, quoted
from spark_differential.core.history import note as _note_history
from spark_differential.core.lazy import lazy
from spark_differential.engine.distributed import run_pair_sql
from spark_differential.errors import SqlError
from spark_differential.io.tables import collection
from spark_differential.kernels import asof as _kasof
from spark_differential.kernels.common import NEW as _KNEW
from spark_differential.kernels.common import D as _KD
from spark_differential.kernels.common import keys as _kkeys
from spark_differential.kernels.common import names as _knames
from spark_differential.kernels.common import times as _ktimes
from spark_differential.operators.calculus import asof_join_history
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.tree import _conjuncts, _unparen

exp = lazy("sqlglot.expressions")

_TIME_TYPES = (*INTEGRAL_TYPES, T.DateType, T.TimestampType, T.TimestampNTZType)
# Internal column names of the as-of pipeline (not the reserved ``_sd_`` prefix:
# collections reject data columns that use it).
_TIME = "sdasof_time"


@dataclass
class _Spec:
    """One as-of join, read from its clauses."""

    how: str  # "inner" | "left"
    strict: bool
    lkeys: list[str]
    rkeys: list[str]
    lt: str
    rt: str
    using: list[str]  # left column names named in USING (they resolve to the left side)
    clause: str  # the clause holding the time comparison, for messages


@dataclass
class _Side:
    alias: str
    df: DataFrame
    fields: list[T.StructField]
    by_name: dict[str, str] = field(default_factory=dict)  # normalized name -> actual name
    by_type: dict[str, T.DataType] = field(default_factory=dict)  # actual name -> type



class _AsofClauses:
    """Reads the clauses of one ``o ASOF JOIN p`` (names compared with ``norm``)."""

    def __init__(self, norm: Callable[[str], str]) -> None:
        self.norm = norm

    def resolve(self, e: exp.Expr, left: _Side, right: _Side) -> tuple[str, str] | None:
        """``("left"|"right", actual column name)`` for a plain column reference, else None."""
        e = _unparen(e)
        if not isinstance(e, exp.Column) or isinstance(e.this, exp.Star):
            return None
        parts = [p.name for p in e.parts]
        if len(parts) >= 2:
            q = self.norm(parts[-2])
            for tag, s in (("left", left), ("right", right)):
                if q == self.norm(s.alias):
                    name = s.by_name.get(self.norm(parts[-1]))
                    if name is None:
                        raise SqlError(
                            f"{_OP}: `{_sql_of(e)}`: `{s.alias}` has no column `{parts[-1]}` "
                            f"(columns: {[f.name for f in s.fields]})"
                        )
                    return tag, name
            return None
        k = self.norm(parts[0])
        in_l, in_r = k in left.by_name, k in right.by_name
        if in_l and in_r:
            raise SqlError(
                f"{_OP}: column `{parts[0]}` in the ASOF JOIN condition is ambiguous: both `{left.alias}` and "
                f"`{right.alias}` have it; qualify it"
            )
        if in_l:
            return "left", left.by_name[k]
        if in_r:
            return "right", right.by_name[k]
        raise SqlError(f"{_OP}: unknown column `{parts[0]}` in the ASOF JOIN condition")

    def analyse(self, join: exp.Join, left: _Side, right: _Side) -> _Spec:
        side, kind = join.side.upper(), join.kind.upper()
        if side == "" and kind in ("", "INNER"):
            how = "inner"
        elif side == "LEFT" and kind in ("", "OUTER"):
            how = "left"
        else:
            spelled = " ".join(x for x in (side, kind) if x)
            raise SqlError(f"{_OP}: {spelled} ASOF JOIN is not supported; use ASOF JOIN (inner) or LEFT ASOF JOIN")
        la, ra = left.alias, right.alias
        mc = join.args.get("match_condition")
        on = join.args.get("on")
        using = [i.name for i in join.args.get("using") or []]
        conjuncts = list(_conjuncts(on)) if on is not None else []
        eqs: list[exp.Expr] = []
        cmps: list[exp.Expr] = []
        for c in conjuncts:
            if isinstance(c, exp.EQ):
                eqs.append(c)
            elif mc is None and isinstance(c, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
                cmps.append(c)
            else:
                where = "ON (MATCH_CONDITION holds the time comparison)" if mc is not None else "ON"
                raise SqlError(
                    f"{_OP}: ASOF JOIN {where} may only contain equalities between a column of `{la}` and a "
                    f"column of `{ra}`" + ("" if mc is not None else " and one time comparison") +
                    f", joined by AND; got `{_sql_of(c)}`. Move other conditions to WHERE or into a subquery"
                )
        lkeys: list[str] = []
        rkeys: list[str] = []
        time_cmp: exp.Expr | None = None
        if mc is not None:
            clause = "MATCH_CONDITION"
            time_cmp = _unparen(mc)
            key_cols = using
        elif using:
            clause = "USING"
            key_cols = using[:-1]  # USING (ts): no keys, one global timeline
            tl, tr = self.using_col(using[-1], left, right)
            time_cmp = exp.GTE(this=exp.column(tl, table=la), expression=exp.column(tr, table=ra))
        else:
            clause = "ON"
            if on is None:
                raise SqlError(
                    f"{_OP}: ASOF JOIN needs MATCH_CONDITION (o.ts >= p.ts) (with optional ON/USING keys), or an ON "
                    "clause with the time comparison and optional key equalities (ON o.k = p.k AND o.ts >= p.ts)"
                )
            if not cmps:
                raise SqlError(
                    f"{_OP}: ASOF JOIN ON must contain one time comparison such as `{la}.ts >= {ra}.ts` "
                    "(or use MATCH_CONDITION)"
                )
            if len(cmps) > 1:
                raise SqlError(
                    f"{_OP}: ASOF JOIN ON has {len(cmps)} inequalities ({', '.join(_sql_of(c) for c in cmps)}); "
                    "exactly one (the time comparison) is allowed"
                )
            time_cmp = cmps[0]
            key_cols = []
        for u in key_cols:
            lk, rk = self.using_col(u, left, right)
            lkeys.append(lk)
            rkeys.append(rk)
        using_left = [self.using_col(u, left, right)[0] for u in using]  # as written
        where = "ON"
        for eq in eqs:
            a, b = self.resolve(eq.this, left, right), self.resolve(eq.expression, left, right)
            if a is None or b is None or {a[0], b[0]} != {"left", "right"}:
                raise SqlError(
                    f"{_OP}: ASOF JOIN {where}: `{_sql_of(eq)}` must equate a column of `{la}` with a column of "
                    f"`{ra}` (compute expressions in a subquery first)"
                )
            (_, lk), (_, rk) = sorted([a, b])
            lkeys.append(lk)
            rkeys.append(rk)
        lt, rt, strict = self.time_comparison(time_cmp, clause, left, right)
        spec = _Spec(how, strict, lkeys, rkeys, lt, rt, using_left, clause)
        self.check_types(spec, left, right)
        return spec

    def using_col(self, name: str, left: _Side, right: _Side) -> tuple[str, str]:
        k = self.norm(name)
        for s in (left, right):
            if k not in s.by_name:
                raise SqlError(f"{_OP}: ASOF JOIN USING ({name}): `{s.alias}` has no column `{name}`")
        return left.by_name[k], right.by_name[k]

    def time_comparison(self, cmp: exp.Expr | None, clause: str, left: _Side, right: _Side) -> tuple[str, str, bool]:
        la, ra = left.alias, right.alias
        usage = (
            f"{clause} must compare the left table's time column with >= or > against the right table's "
            f"time column, e.g. {la}.ts >= {ra}.ts (or the mirrored {ra}.ts <= {la}.ts)"
        )
        if not isinstance(cmp, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
            got = _sql_of(cmp) if cmp is not None else "nothing"
            raise SqlError(f"{_OP}: {usage}; got `{got}`")
        a, b = self.resolve(cmp.this, left, right), self.resolve(cmp.expression, left, right)
        if a is None or b is None:
            raise SqlError(
                f"{_OP}: {usage}; got `{_sql_of(cmp)}`, which is not a comparison of two plain columns. "
                "Compute the time expression as a column in a subquery or CTE first"
            )
        if {a[0], b[0]} != {"left", "right"}:
            raise SqlError(f"{_OP}: {usage}; `{_sql_of(cmp)}` does not compare a column of `{la}` with one of `{ra}`")
        op = type(cmp)
        if a[0] == "right":  # mirrored: p.ts <= o.ts
            op = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}[op]
            a, b = b, a
        if op in (exp.LTE, exp.LT):
            raise SqlError(
                f"{_OP}: {usage}; `{_sql_of(cmp)}` asks for the first right row at or after the left row's time "
                "(a forward as-of join), which is not supported: only the latest right row at or before "
                "the left row's time (>=, or > for strictly before) can be joined"
            )
        return a[1], b[1], op is exp.GT

    def check_types(self, spec: _Spec, left: _Side, right: _Side) -> None:
        lf = {f.name: f.dataType for f in left.fields}
        rf = {f.name: f.dataType for f in right.fields}
        for name, side, dt in ((spec.lt, left, lf[spec.lt]), (spec.rt, right, rf[spec.rt])):
            if not isinstance(dt, _TIME_TYPES):
                raise SqlError(
                    f"{_OP}: {spec.clause}: the time column `{side.alias}.{name}` has type {dt.simpleString()}; "
                    "as-of times must be an integral type, date or timestamp (CAST it in a subquery)"
                )
        _common_time_type(lf[spec.lt], rf[spec.rt], f"{left.alias}.{spec.lt}", f"{right.alias}.{spec.rt}", spec.clause)
        for lk, rk in zip(spec.lkeys, spec.rkeys):
            ta, tb = lf[lk], rf[rk]
            ok = ta == tb or (isinstance(ta, INTEGRAL_TYPES) and isinstance(tb, INTEGRAL_TYPES)) or (
                isinstance(ta, (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)) and isinstance(tb, (*INTEGRAL_TYPES, *FRACTIONAL_TYPES))
            )
            if not ok:
                raise SqlError(
                    f"{_OP}: ASOF JOIN key `{left.alias}.{lk}` is {ta.simpleString()} but `{right.alias}.{rk}` is "
                    f"{tb.simpleString()}; CAST one side in a subquery so that both have the same type"
                )

    # ----------------------------------------------------------------- the as-of join

    def right_names(self, left: _Side, right: _Side) -> dict[str, str]:
        """Names of the right columns in the joined relation: their own unless the left side has it."""
        rnames = [f.name for f in right.fields]
        taken = {self.norm(f.name) for f in left.fields}
        own = {self.norm(x) for x in rnames}
        r_view: dict[str, str] = {}
        for n in rnames:
            v = n
            if self.norm(v) in taken:
                v = f"{right.alias}_{n}"
                while self.norm(v) in taken or self.norm(v) in own:
                    v += "_"
            taken.add(self.norm(v))
            r_view[n] = v
        return r_view


def _asof_frame(left: _Side, right: _Side, spec: _Spec, r_view: dict[str, str]) -> DataFrame:
    """The joined rows: the left columns, then the right columns (named by ``r_view``)."""
    ltype = left.by_type[spec.lt] if left.by_type else None
    rtype = right.by_type[spec.rt] if right.by_type else None
    if isinstance(ltype, INTEGRAL_TYPES) and isinstance(rtype, INTEGRAL_TYPES):
        return _asof_frame_sql(left, right, spec, r_view)
    lnames = [f.name for f in left.fields]
    rnames = [f.name for f in right.fields]
    a = [f"sdl{i}" for i in range(len(lnames))]
    b = [f"sdr{i}" for i in range(len(rnames))]
    k = [f"sdk{i}" for i in range(len(spec.lkeys))]
    lpos = {n: i for i, n in enumerate(lnames)}
    rpos = {n: i for i, n in enumerate(rnames)}
    ltype = left.fields[lpos[spec.lt]].dataType
    rtype = right.fields[rpos[spec.rt]].dataType
    tt = _common_time_type(ltype, rtype, spec.lt, spec.rt, spec.clause)
    lt_col = F.col(a[lpos[spec.lt]])
    ln = left.df.toDF(*a)  # positional: any column names are fine
    rn = right.df.toDF(*b)
    lkeys_present = [F.col(a[lpos[c]]).isNotNull() for c in spec.lkeys]
    live = ln.where(lt_col.isNotNull())
    if spec.how == "inner":
        for cond in lkeys_present:
            live = live.where(cond)
    orders = live.select(
        *a, *[F.col(a[lpos[c]]).alias(kk) for c, kk in zip(spec.lkeys, k)], lt_col.cast(tt).alias(_TIME)
    )
    # a right row without a time can match nothing (as in DuckDB): left out
    prices = rn.where(F.col(b[rpos[spec.rt]]).isNotNull()).select(
        *b, *[F.col(b[rpos[c]]).alias(kk) for c, kk in zip(spec.rkeys, k)], F.col(b[rpos[spec.rt]]).cast(tt).alias(_TIME)
    )
    # dd_asof_join(orders, from_upserts(prices)), read from the log without building that collection
    joined = asof_join_history(
        collection(orders, time=_TIME, check_nulls=False),  # null times were filtered above
        prices,
        key=k,
        time=_TIME,
        how=spec.how,
        strict=spec.strict,
    )
    # diff copies of each row (left rows are insertions, so every diff is positive)
    rows = joined.select(*a, *b, F.explode(F.sequence(F.lit(1).cast("long"), F.col(DIFF))).alias("sdasof_n"))
    out = rows.select(
        *[F.col(x).alias(n) for x, n in zip(a, lnames)], *[F.col(y).alias(r_view[n]) for y, n in zip(b, rnames)]
    )
    if spec.how == "left":
        # rows without a time cannot be placed in time: kept, unmatched (as in DuckDB)
        timeless = ln.where(lt_col.isNull()).select(
            *[F.col(x).alias(n) for x, n in zip(a, lnames)],
            *[F.lit(None).cast(f.dataType).alias(r_view[f.name]) for f in right.fields],
        )
        out = out.unionByName(timeless)
    return out

def _asof_frame_sql(left: _Side, right: _Side, spec: _Spec, r_view: dict[str, str]) -> DataFrame:
    """:meth:`asof_frame` for integral times, planned from SQL text: each side is one
    filter and one ``selectExpr`` straight into the as-of kernel's form (keys, the
    side's columns, the time, ``diff = 1``), and the task itself expands each joined
    row into its copies under the user's names (:func:`kernels.asof.expanded`).  The
    same rows as ``dd_asof_join(collection(orders), from_upserts(prices))`` read from
    the upsert log (``method="upserts"``, the other path), with five DataFrames instead
    of about twenty and a twentieth of the py4j round trips of building them."""
    _note_history("dd_asof_join")  # incremental views keep the inputs of this query uncompacted
    lnames = [f.name for f in left.fields]
    rnames = [f.name for f in right.fields]
    nk = len(spec.lkeys)
    lkeys, rkeys = [quoted(c) for c in spec.lkeys], [quoted(c) for c in spec.rkeys]
    for i, (lk, rk) in enumerate(zip(spec.lkeys, spec.rkeys)):
        ta, tb = left.by_type[lk], right.by_type[rk]
        if ta != tb:  # the casts engine.kernel_form.key_casts makes: equal values hash and compare equal
            cast = "BIGINT" if isinstance(ta, INTEGRAL_TYPES) and isinstance(tb, INTEGRAL_TYPES) else "DOUBLE"
            lkeys[i], rkeys[i] = f"CAST({lkeys[i]} AS {cast})", f"CAST({rkeys[i]} AS {cast})"
    # a left row without a time is placed nowhere (LEFT keeps it below), one with a null key
    # matches nothing (LEFT: the kernel keeps it unmatched); a right row without either: left out
    l_live = [f"{quoted(spec.lt)} IS NOT NULL"] + ([f"{k} IS NOT NULL" for k in map(quoted, spec.lkeys)]
                                                   if spec.how == "inner" else [])
    r_live = [f"{quoted(spec.rt)} IS NOT NULL"] + [f"{k} IS NOT NULL" for k in map(quoted, spec.rkeys)]
    a_cols, b_cols = _knames("_a", len(lnames)), _knames("_b", len(rnames))
    tail = ["CAST(1 AS BIGINT)", "true"]
    sides = [
        (left.df.where(" AND ".join(l_live)), [*lkeys, *map(quoted, lnames), f"CAST({quoted(spec.lt)} AS BIGINT)", *tail],
         [*_kkeys(nk), *a_cols, *_ktimes(1), _KD, _KNEW]),
        (right.df.where(" AND ".join(r_live)), [*rkeys, *map(quoted, rnames), f"CAST({quoted(spec.rt)} AS BIGINT)", *tail],
         [*_kkeys(nk), *b_cols, *_ktimes(1), _KD, _KNEW]),
    ]
    labels = [*lnames, *[r_view[n] for n in rnames]]
    schema = T.StructType([T.StructField(n, f.dataType, True) for n, f in zip(labels, [*left.fields, *right.fields])])
    params = _kasof.UpsertAsofParams(nk, len(lnames), len(rnames), spec.strict, spec.how == "left")
    kernel = functools.partial(_kasof.expanded, _kasof.asof_upserts, [*a_cols, *b_cols], labels)
    out = run_pair_sql(kernel, params, sides, nk, schema)
    if spec.how == "left":
        # rows without a time cannot be placed in time: kept, unmatched (as in DuckDB)
        timeless = left.df.where(f"{quoted(spec.lt)} IS NULL").select(
            *[F.col(quoted(n)) for n in lnames],
            *[F.lit(None).cast(f.dataType).alias(r_view[f.name]) for f in right.fields],
        )
        out = out.unionByName(timeless)
    return out


def _common_time_type(a: T.DataType, b: T.DataType, an: str, bn: str, clause: str) -> T.DataType:
    if isinstance(a, INTEGRAL_TYPES) and isinstance(b, INTEGRAL_TYPES):
        return T.LongType()
    if a == b:
        return a
    pair = {type(a), type(b)}
    if pair == {T.DateType, T.TimestampType}:
        return T.TimestampType()
    if pair == {T.DateType, T.TimestampNTZType}:
        return T.TimestampNTZType()
    raise SqlError(
        f"{_OP}: {clause}: the time columns `{an}` ({a.simpleString()}) and `{bn}` ({b.simpleString()}) have "
        "different types; CAST one of them in a subquery so that both have the same type"
    )


def _rel_alias(rel: exp.Expr, which: str) -> str:
    name = rel.alias_or_name
    if not name:
        raise SqlError(f"{_OP}: the {which} side of the ASOF JOIN (`{_sql_of(rel)}`) needs an alias")
    return name

