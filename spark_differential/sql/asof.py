"""The as-of join of ``sd.sql``: reading its clauses and computing the joined rows.

What an as-of join means on ``(data, time, diff)``
--------------------------------------------------
Both tables are plain tables: each is one snapshot (every row once), and the join of
two snapshots is :func:`spark_differential.dd_merge_asof`'s, DuckDB's and Spark's as-of
join: every left row picks at most one right row among its *candidates*, the right rows
that satisfy every condition of the join but the as-of comparison, by that comparison:

* ``o.ts >= p.ts`` (``>``): the right row with the greatest ``p.ts`` at or before (strictly
  before) ``o.ts``, as pandas' ``direction="backward"``;
* ``o.ts <= p.ts`` (``<``): the least ``p.ts`` at or after (strictly after) ``o.ts``
  (``direction="forward"``); the mirrored spellings (``p.ts <= o.ts``) mean the same.

Right rows sharing the picked ``p.ts`` are taken in the order of their other columns
(backward: the last, forward: the first).  ``LEFT`` keeps left rows that pick nothing,
``SEMI``/``ANTI`` keep the left rows with / without a pick (left columns only),
``RIGHT``/``FULL`` add the right rows no left row picks.  A NULL key (compared with
``=``), NULL time or a failed condition never matches.

Conditions of ``ON`` (DuckDB's meaning, Spark 4.3's too): key equalities (``=`` or ``IS
NOT DISTINCT FROM`` / ``<=>``, between an expression of each side) are the ``by`` keys; a
condition on the left's columns alone decides whether a left row has candidates at all,
one on the right's alone which right rows are candidates, a constant one all or none;
a condition on both sides (``l.price + r.bid > 300``) restricts each left row's
candidates pair by pair (:mod:`spark_differential.sql.asof_nested`).

:class:`_AsofClauses` reads one ``o ASOF JOIN p`` into a :class:`_Spec`; :func:`_asof_frame`
computes the joined rows as a DataFrame (left columns, then right columns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import FRACTIONAL_TYPES, INTEGRAL_TYPES, quoted
from spark_differential.core.lazy import lazy
from spark_differential.errors import SchemaMismatchError, SqlError
from spark_differential.kernels.asof_match import Rule
from spark_differential.operators.merge_asof import StaticSide, common_on_type, static_join
from spark_differential.sql.asof_nested import nested_frame
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.tree import _conjuncts, _unparen

exp = lazy("sqlglot.expressions")

_CMP = ("GTE", "GT", "LTE", "LT")
_MIRROR = {"GTE": "LTE", "GT": "LT", "LTE": "GTE", "LT": "GT"}


@dataclass
class _Key:
    left: str  # SQL over the left's columns (unqualified)
    right: str
    null_safe: bool
    label: str  # as written, for messages


@dataclass
class _Spec:
    """One as-of join, read from its clauses.  Items are SQL over one side's columns."""

    how: str  # inner | left | right | full | semi | anti
    direction: str  # backward | forward
    exact: bool
    keys: list[_Key]
    lt: str
    rt: str
    using: list[str]  # left column names named in USING (they resolve to the left side)
    clause: str  # the clause holding the time comparison, for messages
    time_label: str = ""
    left_cond: list[str] = field(default_factory=list)
    right_cond: list[str] = field(default_factory=list)
    both: list[str] = field(default_factory=list)  # conditions on both sides (qualified, as written)
    written: list[str] = field(default_factory=list)  # every condition of the join, qualified, as written
    rt_written: str = ""


@dataclass
class _Side:
    alias: str
    df: DataFrame
    fields: list[T.StructField]
    by_name: dict[str, str] = field(default_factory=dict)  # normalized name -> actual name
    by_type: dict[str, T.DataType] = field(default_factory=dict)  # actual name -> type


def _kind(e: exp.Expr) -> str:
    return type(e).__name__


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

    def how(self, join: exp.Join) -> str:
        side, kind = join.side.upper(), join.kind.upper()
        hows = {("", ""): "inner", ("", "INNER"): "inner", ("LEFT", ""): "left", ("LEFT", "OUTER"): "left",
                ("RIGHT", ""): "right", ("RIGHT", "OUTER"): "right", ("FULL", ""): "full", ("FULL", "OUTER"): "full",
                ("", "SEMI"): "semi", ("LEFT", "SEMI"): "semi", ("", "ANTI"): "anti", ("LEFT", "ANTI"): "anti"}
        how = hows.get((side, kind))
        if how is None:
            spelled = " ".join(x for x in (side, kind) if x)
            raise SqlError(f"{_OP}: {spelled} ASOF JOIN is not a join type; use ASOF [INNER | LEFT | RIGHT | FULL | "
                           "SEMI | ANTI] JOIN")
        return how

    def refs(self, e: exp.Expr, left: _Side, right: _Side) -> set[str]:
        """The sides whose columns ``e`` refers to."""
        out: set[str] = set()
        for col in e.find_all(exp.Column):
            if isinstance(col.this, exp.Star):
                continue
            r = self.resolve(col, left, right)
            if r is not None:
                out.add(r[0])
        return out

    def item(self, e: exp.Expr, side: _Side, other: _Side) -> str:
        """``e`` (over ``side``'s columns only) as SQL over that side's unqualified columns."""
        e = _unparen(e)
        r = self.resolve(e, side, other) if isinstance(e, exp.Column) else None
        if r is not None:
            return quoted(r[1])
        e = e.copy()
        for col in list(e.find_all(exp.Column)):
            got = self.resolve(col, side, other)
            if got is not None:
                col.replace(exp.column(exp.to_identifier(got[1], quoted=True)))
        return _sql_of(e)

    def split(self, c: exp.Expr, left: _Side, right: _Side) -> tuple[exp.Expr, exp.Expr, bool] | None:
        """``(left expression, right expression, mirrored)`` of a comparison between the sides."""
        a, b = self.refs(c.this, left, right), self.refs(c.expression, left, right)
        if a == {"left"} and b == {"right"}:
            return c.this, c.expression, False
        if a == {"right"} and b == {"left"}:
            return c.expression, c.this, True
        return None

    def analyse(self, join: exp.Join, left: _Side, right: _Side) -> _Spec:
        how = self.how(join)
        la, ra = left.alias, right.alias
        mc = join.args.get("match_condition")
        on = join.args.get("on")
        using = [i.name for i in join.args.get("using") or []]
        keys: list[_Key] = []
        written: list[str] = []
        cmp: exp.Expr | None = _unparen(mc) if mc is not None else None
        if cmp is not None:
            written.append(_sql_of(cmp))
        if using:
            for u in using if mc is not None else using[:-1]:
                lk, rk = self.using_col(u, left, right)
                keys.append(_Key(quoted(lk), quoted(rk), False, f"USING ({u})"))
                written.append(f"{quoted(la)}.{quoted(lk)} = {quoted(ra)}.{quoted(rk)}")
            if mc is None:  # DuckDB: the last USING column is the time, >=
                tl, tr = self.using_col(using[-1], left, right)
                cmp = exp.GTE(this=exp.column(tl, table=la), expression=exp.column(tr, table=ra))
                written.append(f"{quoted(la)}.{quoted(tl)} >= {quoted(ra)}.{quoted(tr)}")
        spec = _Spec(how, "backward", True, keys, "", "", [self.using_col(u, left, right)[0] for u in using],
                     "MATCH_CONDITION" if mc is not None else ("USING" if using else "ON"), written=written)
        for c in _conjuncts(on) if on is not None else []:
            written.append(_sql_of(c))
            pair = self.split(c, left, right) if isinstance(c, (exp.EQ, exp.NullSafeEQ, *_cmps())) else None
            if pair is not None and isinstance(c, (exp.EQ, exp.NullSafeEQ)):
                keys.append(_Key(self.item(pair[0], left, right), self.item(pair[1], right, left),
                                 isinstance(c, exp.NullSafeEQ), _sql_of(c)))
                continue
            if pair is not None and cmp is None:
                cmp = c
                continue
            sides = self.refs(c, left, right)
            if not sides or sides == {"right"}:
                spec.right_cond.append(self.item(c, right, left) if sides else _sql_of(c))
            elif sides == {"left"}:
                spec.left_cond.append(self.item(c, left, right))
            else:
                spec.both.append(_sql_of(c))
        if cmp is None:
            raise SqlError(
                f"{_OP}: ASOF JOIN needs one comparison between the two sides' times, such as `{la}.ts >= {ra}.ts`: "
                "in MATCH_CONDITION (...), in ON (ON o.k = p.k AND o.ts >= p.ts) or as the last USING column"
            )
        self.time_comparison(spec, cmp, left, right)
        return spec

    def time_comparison(self, spec: _Spec, cmp: exp.Expr, left: _Side, right: _Side) -> None:
        la, ra = left.alias, right.alias
        usage = (f"{spec.clause} must compare the left table's time with the right table's by >=, >, <= or <, "
                 f"e.g. {la}.ts >= {ra}.ts")
        if _kind(cmp) not in _CMP:
            raise SqlError(f"{_OP}: {usage}; got `{_sql_of(cmp)}`")
        pair = self.split(cmp, left, right)
        if pair is None:
            raise SqlError(
                f"{_OP}: {usage}; `{_sql_of(cmp)}` does not compare an expression of `{la}` with one of `{ra}` "
                "(each side of the comparison must refer to one table only)")
        lexpr, rexpr, mirrored = pair
        op = _MIRROR[_kind(cmp)] if mirrored else _kind(cmp)
        spec.direction = "backward" if op in ("GTE", "GT") else "forward"
        spec.exact = op in ("GTE", "LTE")
        spec.lt, spec.rt = self.item(lexpr, left, right), self.item(rexpr, right, left)
        spec.time_label = _sql_of(cmp)
        spec.rt_written = _sql_of(rexpr)

    def using_col(self, name: str, left: _Side, right: _Side) -> tuple[str, str]:
        k = self.norm(name)
        for s in (left, right):
            if k not in s.by_name:
                raise SqlError(f"{_OP}: ASOF JOIN USING ({name}): `{s.alias}` has no column `{name}`")
        return left.by_name[k], right.by_name[k]

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


def _cmps() -> tuple[type, ...]:
    return (exp.GTE, exp.GT, exp.LTE, exp.LT)


def _types(side: _Side, items: list[str]) -> list[T.DataType]:
    """The types of SQL items over one side's columns (plain columns from the schema; one
    analysis for the computed ones)."""
    plain = {quoted(n): t for n, t in side.by_type.items()}
    computed = [i for i in items if i not in plain]
    if computed:
        schema = side.df.selectExpr(*computed).schema
        plain.update({i: f.dataType for i, f in zip(computed, schema.fields)})
    return [plain[i] for i in items]


def _key_type(ta: T.DataType, tb: T.DataType) -> T.DataType | None:
    if ta == tb:
        return ta
    if isinstance(ta, INTEGRAL_TYPES) and isinstance(tb, INTEGRAL_TYPES):
        return T.LongType()
    numeric = (*INTEGRAL_TYPES, *FRACTIONAL_TYPES)
    if isinstance(ta, numeric) and isinstance(tb, numeric):
        return T.DoubleType()
    return None


def _cast(item: str, have: T.DataType, want: T.DataType) -> str:
    return item if have == want else f"CAST({item} AS {want.simpleString()})"


def _asof_frame(left: _Side, right: _Side, spec: _Spec, r_view: dict[str, str]) -> DataFrame:
    """The joined rows: the left columns, then the right columns (named by ``r_view``; none
    for semi and anti joins)."""
    lnames = [f.name for f in left.fields]
    rnames = [f.name for f in right.fields]
    if spec.both:
        return nested_frame(left.df, right.df, left.alias, right.alias, lnames, rnames, r_view, spec.how,
                            spec.direction, " AND ".join(f"({c})" for c in spec.written), spec.rt_written,
                            [n for n in rnames if quoted(n) not in {spec.rt, *[k.right for k in spec.keys]}])
    ltypes = _types(left, [spec.lt, *[k.left for k in spec.keys]])
    rtypes = _types(right, [spec.rt, *[k.right for k in spec.keys]])
    try:
        on_type = common_on_type(ltypes[0], rtypes[0], spec.time_label)
    except SchemaMismatchError as e:
        raise SqlError(f"{_OP}: {spec.clause}: {str(e).split(': ', 2)[-1]}; CAST one of them in a subquery") from None
    lkeys, rkeys = [], []
    for k, ta, tb in zip(spec.keys, ltypes[1:], rtypes[1:]):
        kt = _key_type(ta, tb)
        if kt is None:
            raise SqlError(f"{_OP}: ASOF JOIN key `{k.label}` compares {ta.simpleString()} with {tb.simpleString()}; "
                           "CAST one side in a subquery so that both have the same type")
        lkeys.append((_cast(k.left, ta, kt), kt))
        rkeys.append((_cast(k.right, tb, kt), kt))
    nulls_equal = any(k.null_safe for k in spec.keys)
    # one more key for what can never match: a failed one-sided condition, and (with null-safe
    # keys among them) a NULL in a key compared with `=`: left 1 and right 2 match nothing
    fail_l = [f"NOT coalesce(({c}), false)" for c in spec.left_cond]
    fail_r = [f"NOT coalesce(({c}), false)" for c in spec.right_cond]
    if nulls_equal:
        fail_l += [f"({k.left}) IS NULL" for k in spec.keys if not k.null_safe]
        fail_r += [f"({k.right}) IS NULL" for k in spec.keys if not k.null_safe]
    if fail_l or fail_r:
        lkeys.append((f"CASE WHEN {' OR '.join(fail_l) or 'false'} THEN 1 ELSE 0 END", T.IntegerType()))
        rkeys.append((f"CASE WHEN {' OR '.join(fail_r) or 'false'} THEN 2 ELSE 0 END", T.IntegerType()))
    sides = [
        StaticSide(left.df, lkeys, (_cast(spec.lt, ltypes[0], on_type), on_type),
                   [(quoted(f.name), f.dataType) for f in left.fields]),
        StaticSide(right.df, rkeys, (_cast(spec.rt, rtypes[0], on_type), on_type),
                   [(quoted(f.name), f.dataType) for f in right.fields]),
    ]
    out = [(f"_a{i + 1}", n) for i, n in enumerate(lnames)]
    if spec.how not in ("semi", "anti"):
        out += [(f"_b{j + 1}", r_view[n]) for j, n in enumerate(rnames)]
    # without keys of the user's the join is cut into ranges of the time (operators.asof_ranges)
    return static_join(sides[0], sides[1], Rule(spec.direction, spec.exact, None, spec.how), nulls_equal, out,
                       ranges=None if not spec.keys else 1)


def _rel_alias(rel: exp.Expr, which: str) -> str:
    name = rel.alias_or_name
    if not name:
        raise SqlError(f"{_OP}: the {which} side of the ASOF JOIN (`{_sql_of(rel)}`) needs an alias")
    return name
