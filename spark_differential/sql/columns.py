"""Column references around an as-of join of ``sd.sql``: name resolution and ``*`` expansion.

No data here: once ``o ASOF JOIN p`` is replaced by one relation (aliased like ``o``,
holding the left columns and then the right ones, see
:mod:`spark_differential.sql.asof`), the ``SELECT`` around it is rewritten so that every
reference to ``p.col`` points at that relation and ``*``, ``o.*``, ``p.*`` list exactly
the columns Spark would have listed.
"""

from __future__ import annotations

from collections.abc import Callable

from spark_differential.core.lazy import lazy
from spark_differential.errors import SqlError
from spark_differential.sql.asof import _Side, _Spec
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.tree import _scope_columns, _set_parts

exp = lazy("sqlglot.expressions")


def _rewrite_columns(
    norm: Callable[[str], str], select: exp.Select, join: exp.Join, left: _Side, right: _Side, r_view: dict[str, str], spec: _Spec
) -> None:
    """Point references to the right side at the joined relation (aliased like the left side)."""
    la, ra = norm(left.alias), norm(right.alias)
    renamed: dict[int, str] = {}
    using = {norm(u) for u in spec.using}
    own = {id(n) for n in join.walk()}  # the ASOF JOIN's own clauses go away with it
    for col in _scope_columns(select):
        if id(col) in own:
            continue
        parts = list(col.parts)
        names = [norm(p.name) for p in parts]
        if len(parts) >= 2 and names[0] in (la, ra):
            at = 0  # o.col or o.col.field
        elif len(parts) == 3 and names[1] in (la, ra):
            at = 1  # db.orders.col
        else:
            if len(parts) == 1 and names[0] in left.by_name and names[0] in right.by_name and names[0] not in using:
                raise SqlError(
                    f"{_OP}: column `{parts[0].name}` is ambiguous: both sides of the ASOF JOIN "
                    f"(`{left.alias}` and `{right.alias}`) have it; qualify it"
                )
            if len(parts) == 1 and names[0] in using and spec.how in ("right", "full"):
                _coalesced(col, left, right, r_view, names[0])
            continue
        s = left if names[at] == la else right
        if s is right and spec.how in ("semi", "anti"):
            raise SqlError(
                f"{_OP}: `{_sql_of(col)}`: a {spec.how.upper()} ASOF JOIN keeps the left side's columns only; "
                f"`{right.alias}` cannot be selected"
            )
        actual = s.by_name.get(names[at + 1])
        if actual is None:
            raise SqlError(
                f"{_OP}: `{_sql_of(col)}`: `{s.alias}` has no column `{parts[at + 1].name}` "
                f"(columns: {[f.name for f in s.fields]})"
            )
        new_name = actual if s is left else r_view[actual]
        new_parts = [exp.to_identifier(left.alias), exp.to_identifier(new_name), *parts[at + 2 :]]
        _set_parts(col, new_parts)
        if len(new_parts) == 2 and new_name != actual:
            renamed[id(col)] = actual
    _expand_stars(norm, select, join, left, right, r_view, spec)
    for proj in list(select.expressions):
        if isinstance(proj, exp.Column) and id(proj) in renamed:
            proj.replace(exp.alias_(proj.copy(), renamed[id(proj)], quoted=True))

def _coalesced(col: exp.Column, left: _Side, right: _Side, r_view: dict[str, str], name: str) -> None:
    """An unqualified USING column of a RIGHT or FULL as-of join: the left's value, else the right's."""
    lname, rname = left.by_name[name], right.by_name[name]
    merged = exp.func("coalesce", exp.column(lname, table=exp.to_identifier(left.alias)),
                      exp.column(r_view[rname], table=exp.to_identifier(left.alias)))
    parent = col.parent
    if isinstance(parent, exp.Select) and col.arg_key == "expressions":
        merged = exp.alias_(merged, lname, quoted=True)
    col.replace(merged)


def _expand_stars(
    norm: Callable[[str], str], select: exp.Select, join: exp.Join, left: _Side, right: _Side, r_view: dict[str, str], spec: _Spec
) -> None:
    la, ra = norm(left.alias), norm(right.alias)
    lnames = [f.name for f in left.fields]
    rnames = [f.name for f in right.fields]
    using_l = [u for u in spec.using]
    using_r = {norm(right.by_name[norm(u)]) for u in spec.using}
    quote = exp.to_identifier

    def cols(side: str) -> list[exp.Expr]:
        if side != "left" and spec.how in ("semi", "anti"):
            raise SqlError(f"{_OP}: a {spec.how.upper()} ASOF JOIN keeps the left side's columns only; "
                           f"`{right.alias}.*` cannot be selected")
        if side == "left":
            return [exp.column(n, table=quote(left.alias)) for n in lnames]
        return [
            exp.alias_(exp.column(r_view[n], table=quote(left.alias)), n, quoted=True) if r_view[n] != n
            else exp.column(n, table=quote(left.alias))
            for n in rnames
        ]

    def star_all() -> list[exp.Expr]:
        semi = spec.how in ("semi", "anti")
        if spec.using and not semi:
            first: list[exp.Expr] = [exp.column(u, table=quote(left.alias)) for u in using_l]
            if spec.how in ("right", "full"):
                first = [exp.alias_(exp.func("coalesce", exp.column(u, table=quote(left.alias)),
                                             exp.column(r_view[right.by_name[norm(u)]], table=quote(left.alias))),
                                    u, quoted=True) for u in using_l]
            rest_l = [exp.column(n, table=quote(left.alias)) for n in lnames if n not in using_l]
            rest_r = [c for c, n in zip(cols("right"), rnames) if norm(n) not in using_r]
            mine: list[exp.Expr] = [*first, *rest_l, *rest_r]
        else:
            mine = [*cols("left"), *([] if semi else cols("right"))]
        others: list[exp.Expr] = []
        for j in select.args.get("joins") or []:
            if j is join:
                continue
            if str(j.args.get("kind") or "").upper() in ("SEMI", "ANTI"):
                continue
            name = j.this.alias_or_name
            if not name:
                raise SqlError(
                    f"{_OP}: SELECT * with an ASOF JOIN needs an alias on the joined `{_sql_of(j.this)}`"
                )
            others.append(exp.Column(this=exp.Star(), table=quote(name)))
        if select.args.get("laterals"):
            raise SqlError(f"{_OP}: SELECT * together with LATERAL VIEW and ASOF JOIN: list the columns instead")
        return [*mine, *others]

    needs_plain = spec.how not in ("semi", "anti") and (bool(spec.using) or any(r_view[n] != n for n in rnames))
    new: list[exp.Expr] = []
    changed = False
    for proj in select.expressions:
        if isinstance(proj, exp.Star):
            if proj.args.get("except_") or proj.args.get("replace") or proj.args.get("rename"):
                raise SqlError(f"{_OP}: `{_sql_of(proj)}` with an ASOF JOIN: list the columns instead")
            if needs_plain:
                new.extend(star_all())
                changed = True
                continue
        elif isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star) and proj.table:
            q = norm(proj.table)
            if q in (la, ra):
                new.extend(cols("left" if q == la else "right"))
                changed = True
                continue
        new.append(proj)
    if changed:
        select.set("expressions", new)

