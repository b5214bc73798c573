"""Recursive CTEs of ``sd.sql`` as one ``dd_iterate`` each.

On ``(data, time, diff)``: the CTEs of a ``WITH RECURSIVE`` that refer to one another (a
strongly connected group; usually one CTE referring to itself) are computed by one
``dd_iterate`` whose loop variable holds all of them, so at every time the result is the
recursion evaluated on the inputs' snapshots at that time.  What is iterated:

* ``t AS (<non-recursive> UNION <recursive>)``: the least fixed point of
  ``t = distinct(<non-recursive> ∪ <recursive>(t))``, started from the non-recursive term
  (set semantics, like Datalog: a cycle in the data terminates).  For a recursive term that
  reads ``t`` once, through joins, filters, projections and ``DISTINCT``, this is exactly
  what PostgreSQL and DuckDB compute; with aggregates (``min(d + 1) ... GROUP BY``) or ``t``
  read several times it is that equation's fixed point (differential dataflow's meaning),
  where those engines evaluate the term on each iteration's new rows instead.
* ``t AS (<non-recursive> UNION ALL <recursive>)`` keeps multiplicities, as SQL does: every
  row each iteration derives stays.  A term linear in ``t`` (``t`` read once, no
  ``DISTINCT``/aggregates) is the fixed point of ``t = <non-recursive> ⊎ <recursive>(t)``;
  any other term is evaluated as SQL does, on the rows the previous iteration added (the
  loop variable then holds those rows and everything before, tagged apart).  A recursion
  that never runs dry (a cycle in the data) stops at the iteration limit with
  :class:`~spark_differential.errors.IterationLimitExceeded` naming the CTE.
* several CTEs referring to each other are iterated together (each with its own ``UNION`` or
  ``UNION ALL`` equation), and ``WITH MUTUALLY RECURSIVE`` (Materialize's spelling, with
  typed column lists) starts every CTE empty and evaluates every body on the previous
  iteration's values until nothing changes.

The iteration limit is ``spark_differential.sql.maxIterations`` (default 1000) or, for
``WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT n)``, ``n``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.core.lazy import lazy
from spark_differential.errors import IterationLimitExceeded, SqlError
from spark_differential.sql import setops
from spark_differential.sql.dialect import _OP, _sql_of
from spark_differential.sql.rel import (
    MAX_ITERATIONS_CONF,
    Col,
    Ctx,
    DryEnv,
    Flow,
    Rel,
    concat,
    distinct,
    fresh_copy,
    project,
    schema_of,
)

exp = lazy("sqlglot.expressions")


@dataclass
class Member:
    """One recursive CTE of a group."""

    entry: Any  # dataflow.CteEntry
    name: str
    key: str  # its name in the loop's environment
    set_: bool = True  # UNION (else UNION ALL)
    bases: list[Any] = field(default_factory=list)  # non-recursive branches (syntax)
    steps: list[Any] = field(default_factory=list)  # recursive branches (syntax)
    cols: list[Col] = field(default_factory=list)
    fields: list[T.StructField] = field(default_factory=list)
    base: Rel | None = None
    step_rels: list[Rel] = field(default_factory=list)


@dataclass
class Group:
    """CTEs of one WITH that refer to each other: one ``dd_iterate``."""

    members: list[Member]
    mutually: bool
    limit: int | None


def names_read(node: Any, names: set[str], norm: Any) -> set[str]:
    """The names among ``names`` that tables in ``node`` refer to (not shadowed inside it)."""
    out = set()
    for t in node.find_all(exp.Table):
        if t.args.get("db") or not isinstance(t.this, exp.Identifier):
            continue
        k = norm(t.name)
        if k in names and not _shadowed(t, node, norm):
            out.add(k)
    return out


def _shadowed(table: Any, root: Any, norm: Any) -> bool:
    if table is root:
        return False
    p = table.parent
    while p is not None and p is not root:
        w = p.args.get("with_")
        if isinstance(w, exp.With) and any(norm(c.alias) == norm(table.name) for c in w.expressions):
            return True
        p = p.parent
    return False


def sccs(keys: list[str], deps: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components, dependencies first (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp, key=keys.index))

    for k in keys:
        if k not in index:
            visit(k)
    return out


def declare(flow: Flow, with_: Any, frame: dict[str, Any]) -> list[Group]:
    """Find the recursive CTE groups of a WITH clause, attach them to their entries and
    return them, dependencies first."""
    mutually = bool(with_.meta.get("mutually"))
    if not (with_.args.get("recursive") or mutually):
        return []
    limit = None
    opt = with_.meta.get("limit")
    if opt is not None:
        kind, n = opt
        if kind == "RETURN":
            raise SqlError(
                f"{_OP}: RETURN AT RECURSION LIMIT is not supported: a recursion stopped early has no fixed point "
                "to return; use ERROR AT RECURSION LIMIT n"
            )
        limit = n
    keys = list(frame)
    deps = {k: names_read(frame[k].cte.this, set(keys), flow.norm) for k in keys}
    groups = []
    for comp in sccs(keys, deps):
        if len(comp) == 1 and comp[0] not in deps[comp[0]]:
            continue
        members = [Member(frame[k], frame[k].cte.alias, f"{k}#{id(frame[k].cte)}") for k in comp]
        group = Group(members, mutually, limit)
        groups.append(group)
        for m in members:
            m.entry.group = group
    return groups


def _branches(node: Any, top: bool = True) -> tuple[list[Any], bool | None]:
    """A CTE body as its top-level UNION [ALL] branches, and whether it is UNION (set).
    (A WITH on the body itself is in scope for every branch: see :func:`_scope_of`.)"""
    keys = ("order", "limit", "offset") if top else ("with_", "order", "limit", "offset")
    if isinstance(node, exp.Union) and not any(node.args.get(k) for k in keys):
        left, ls = _branches(node.this, False)
        right, rs = _branches(node.expression, False)
        me = bool(node.args.get("distinct"))
        if (ls is not None and ls != me) or (rs is not None and rs != me):
            raise SqlError(
                f"{_OP}: a recursive CTE mixes UNION and UNION ALL between its terms; use one of them "
                "(UNION: set semantics, the least fixed point; UNION ALL: every derived row is kept)"
            )
        return left + right, me
    return [node], None


@contextlib.contextmanager
def _scope_of(flow: Flow, body: Any) -> Iterator[None]:
    """The WITH attached to a CTE body (``t AS (WITH s AS (...) SELECT ... UNION ...)``) in
    scope while its branches compile."""
    with_ = body.args.get("with_") if isinstance(body, exp.Union) else None
    if not isinstance(with_, exp.With):
        yield
        return
    depth = len(flow.frames)
    flow.with_clause(with_)
    try:
        yield
    finally:
        del flow.frames[depth:]


def _declared_fields(ctx: Ctx, cte: Any) -> list[T.StructField]:
    """The typed column list of a WITH MUTUALLY RECURSIVE CTE, as Spark types (no job)."""
    cols = cte.args["alias"].columns if cte.args.get("alias") is not None else []
    if not cols or not all(isinstance(c, exp.ColumnDef) and c.args.get("kind") is not None for c in cols):
        raise SqlError(
            f"{_OP}: WITH MUTUALLY RECURSIVE: `{cte.alias}` needs its columns with their types, e.g. "
            f"{cte.alias} (node bigint, dist bigint) AS (...)"
        )
    text = ", ".join(f"CAST(NULL AS {_sql_of(c.args['kind'])}) AS c{i}" for i, c in enumerate(cols))
    with ctx.errors(f" (the column types of `{cte.alias}`)"):
        types = [f.dataType for f in ctx.spark.sql(f"SELECT {text}").schema.fields]
    return [T.StructField(c.name, t, True) for c, t in zip(cols, types)]


def _prepare(flow: Flow, group: Group) -> None:
    """Split each member into branches, compile the non-recursive ones, fix the columns."""
    ctx: Ctx = flow.ctx
    names = {flow.norm(m.name) for m in group.members}
    used: set[str] = set()
    for m in group.members:
        cte = m.entry.cte
        if group.mutually:
            m.steps, m.set_ = [cte.this], False
            fields = _declared_fields(ctx, cte)
            m.fields = fields
            m.cols = [Col(f.name, ctx.fresh(f.name)) for f in fields]
            continue
        for key in ("order", "limit", "offset"):
            if cte.this.args.get(key):
                raise SqlError(
                    f"{_OP}: {'ORDER BY' if key == 'order' else key.upper()} in the recursive CTE `{m.name}` is not "
                    "supported (its rows form a set or multiset, with no order); order or limit the outer query"
                )
        branches, set_ = _branches(cte.this)
        m.set_ = bool(set_)
        for b in branches:
            (m.steps if names_read(b, names, flow.norm) else m.bases).append(b)
        if not m.bases:
            raise SqlError(
                f"{_OP}: recursive CTE `{m.name}` has no non-recursive term: write it as "
                f"`<query not reading {sorted(names)}> UNION [ALL] <recursive query>` (or declare every CTE of the "
                "group with WITH MUTUALLY RECURSIVE and typed columns, which start empty)"
            )
        with _scope_of(flow, cte.this):
            rels = [flow.query(b) for b in m.bases]
        base = rels[0]
        for r in rels[1:]:
            base, r = setops.aligned(flow, base, r, f"the non-recursive terms of `{m.name}`")
            base = concat(ctx, [base, r])
        if base.df is None:
            raise SqlError(
                f"{_OP}: recursive CTE `{m.name}` is defined inside the recursive term of another recursive CTE and "
                "reads it: nested recursion over an enclosing loop is not supported; define both in one WITH"
            )
        alias = cte.args.get("alias")
        cnames = [c.name for c in alias.columns] if alias is not None and alias.columns else [c.name for c in base.cols]
        if len(cnames) != len(base.cols):
            raise SqlError(
                f"{_OP}: recursive CTE `{m.name}` names {len(cnames)} columns but its non-recursive term has {len(base.cols)}"
            )
        if len(set(base.internals)) != len(base.cols) or used & set(base.internals):
            base = fresh_copy(ctx, base)  # the loop variable holds every member's columns apart
        used |= set(base.internals)
        types = {f.name: f for f in schema_of(ctx, base, {})}
        m.cols = [Col(n, c.internal) for n, c in zip(cnames, base.cols)]
        m.fields = [T.StructField(c.internal, types[c.internal].dataType, True) for c in base.cols]
        m.base = Rel(m.cols, df=base.df, consolidated=base.consolidated)
        dup = {n for n in cnames if sum(flow.norm(x) == flow.norm(n) for x in cnames) > 1}
        if dup:
            raise SqlError(f"{_OP}: recursive CTE `{m.name}` has two columns named `{sorted(dup)[0]}`; name them apart")


def _compile_steps(flow: Flow, group: Group) -> None:
    """Compile the recursive branches with every member read as a loop variable."""
    ctx: Ctx = flow.ctx
    fields = {m.key: [T.StructField(c.internal, f.dataType, True) for c, f in zip(m.cols, m.fields)] for m in group.members}
    saved_env = flow.dry_env
    flow.dry_env = DryEnv({**saved_env, **{m.key: ctx.empty(fields[m.key]) for m in group.members}})
    for m in group.members:
        m.entry.ref = Rel(m.cols, fn=lambda env, k=m.key: env[k], loop=frozenset([m.key]), linear=True, strict=True)
    try:
        for m in group.members:
            for b in m.steps:
                with _scope_of(flow, m.entry.cte.this):
                    rel = flow.query(b)
                outer = sorted(rel.loop - {x.key for x in group.members})
                if outer:
                    raise SqlError(
                        f"{_OP}: recursive CTE `{m.name}` is defined inside the recursive term of another recursive "
                        "CTE and reads it: nested recursion over an enclosing loop is not supported; define both in one WITH"
                    )
                if len(rel.cols) != len(m.cols):
                    raise SqlError(
                        f"{_OP}: the recursive term of `{m.name}` has {len(rel.cols)} columns but the CTE has "
                        f"{len(m.cols)}: `{_sql_of(b)}`"
                    )
                have = {f.name: f.dataType for f in schema_of(ctx, rel, flow.dry_env)}
                want = fields[m.key]
                items = [(c.internal if have[c.internal] == f.dataType else f"CAST({c.internal} AS {f.dataType.simpleString()})", mc)
                         for c, mc, f in zip(rel.cols, m.cols, want)]
                if [t for t, _ in items] != [mc.internal for mc in m.cols] or len(set(rel.internals)) != len(rel.cols):
                    rel = project(ctx, rel, items, consolidated=rel.consolidated)
                m.step_rels.append(rel)
    finally:
        for m in group.members:
            m.entry.ref = None
        flow.dry_env = saved_env


def solve(flow: Flow, group: Group) -> None:
    """Compute a group of recursive CTEs (one ``dd_iterate``) and set each member's relation."""
    saved = flow.frames
    flow.frames = flow.frames[: group.members[0].entry.depth + 1]
    try:
        _prepare(flow, group)
        _compile_steps(flow, group)
        out = _iterate(flow, group)
    finally:
        flow.frames = saved
    for m, df in zip(group.members, out):
        m.entry.rel = Rel([Col(c.name, c.internal) for c in m.cols], df=df, consolidated=True)


def _iterate(flow: Flow, group: Group) -> list[DataFrame]:
    ctx: Ctx = flow.ctx
    ms = group.members
    working = len(ms) == 1 and not ms[0].set_ and not group.mutually and not all(r.linear for r in ms[0].step_rels)
    packed = len(ms) > 1 or working
    tag = ctx.fresh("recursive CTE") if packed else ""
    wide = [(c.internal, f.dataType) for m in ms for c, f in zip(m.cols, m.fields)]

    def pack(i: int, df: DataFrame, phase: int | None = None) -> DataFrame:
        own = {c.internal for c in ms[i].cols}
        cols = [n if n in own else f"CAST(NULL AS {t.simpleString()}) AS {n}" for n, t in wide]
        first = f"{i if phase is None else phase} AS {tag}"
        return df.selectExpr(first, *cols, TIME, DIFF)

    def unpack(i: int, x: DataFrame, phase: int | None = None) -> DataFrame:
        return x.where(f"{tag} = {i if phase is None else phase}").select(*[c.internal for c in ms[i].cols], TIME, DIFF)

    # each member's equation as a relation of the loop variables
    eqs: list[Rel] = []
    for m in ms:
        parts = ([m.base] if m.base is not None and not working else []) + m.step_rels
        if not parts:  # pragma: no cover - _prepare requires a term
            raise SqlError(f"{_OP}: recursive CTE `{m.name}` has no terms")
        rel = concat(ctx, parts, consolidate=False) if len(parts) > 1 else parts[0]
        eqs.append(distinct(ctx, rel) if m.set_ else rel)

    if working:
        m = ms[0]

        def body(x: DataFrame) -> DataFrame:
            env = {m.key: unpack(0, x, 0)}
            new = pack(0, eqs[0].build(env), 0)
            acc = x.selectExpr(f"1 AS {tag}", *[n for n, _ in wide], TIME, DIFF)
            return new.dd_concat(acc, consolidate=False)

        assert m.base is not None and m.base.df is not None
        start = pack(0, m.base.df, 0)
    elif packed:

        def body(x: DataFrame) -> DataFrame:
            env = {m.key: _read(group, m, unpack(i, x)) for i, m in enumerate(ms)}
            parts = [pack(i, eq.build(env)) for i, eq in enumerate(eqs)]
            return parts[0].dd_concat(*parts[1:], consolidate=False)

        if group.mutually:
            start = ctx.empty([T.StructField(tag, T.IntegerType(), False), *[T.StructField(n, t, True) for n, t in wide]])
        else:
            starts = [pack(i, _start(m)) for i, m in enumerate(ms) if m.base is not None]
            start = starts[0].dd_concat(*starts[1:], consolidate=False) if len(starts) > 1 else starts[0]
    else:
        m = ms[0]

        def body(x: DataFrame) -> DataFrame:
            return eqs[0].build({m.key: _read(group, m, x)})

        if group.mutually or _from_nothing(group, m):
            start = ctx.empty([T.StructField(c.internal, f.dataType, True) for c, f in zip(m.cols, m.fields)])
        else:
            start = _start(m)

    limit = group.limit or ctx.max_iterations
    # a loop started empty spends its first iteration making the non-recursive term's rows:
    # not counted against the limit, which stays what it is for the recursion started from them
    extra = 1 if not packed and _from_nothing(group, ms[0]) else 0
    try:
        with ctx.errors(f" (in the recursive CTE {_label(ms)})"):
            out = start.dd_iterate(body, max_iterations=limit + extra)
    except IterationLimitExceeded as e:
        raise IterationLimitExceeded(_limit_message(group, limit, e.changing), iterations=e.iterations,
                                     changing=e.changing) from e
    if working:
        return [unpack(0, out, 1)]
    if packed:
        return [unpack(i, out) for i in range(len(ms))]
    return [out]


def _start(m: Member) -> DataFrame:
    """Where a member's iteration starts: its non-recursive term as it is (see :func:`_read`)."""
    assert m.base is not None and m.base.df is not None
    return m.base.df


def _read(group: Group, m: Member, x: DataFrame) -> DataFrame:
    """How the recursive terms read member ``m``'s part ``x`` of the loop variable.

    A ``UNION`` member whose recursive term is not linear (an aggregate, ``t`` read twice)
    must start from the distinct rows of its non-recursive term, as SQL does.  The loop
    starts from the term as it is and every recursive term reads the member through
    ``distinct``: at the first iteration that makes the term's distinct rows, and from the
    second on the member is ``distinct``'s output already, which ``distinct`` leaves as it
    is.  So every iteration sees what it would have seen started from the distinct rows,
    and no reduction runs before the loop (a Spark stage of its own, whose size the loop
    cannot know before a job).  A linear term needs nothing: the first iteration's own
    ``distinct`` makes the same set from the term as it is."""
    if group.mutually or m.base is None or not m.set_ or all(r.linear for r in m.step_rels) or _from_nothing(group, m):
        return x
    return x.dd_distinct()


def _from_nothing(group: Group, m: Member) -> bool:
    """Whether the loop of a ``UNION`` CTE alone in its group, whose recursive term is not
    linear, may start empty: every recursive term is strict (empty when the CTE is), so
    the first iteration makes the distinct rows of the non-recursive term, and the
    iterations after it are those started from there, with nothing read through an extra
    ``distinct`` (one more iteration, on the non-recursive term's rows alone)."""
    return (len(group.members) == 1 and not group.mutually and m.base is not None and m.set_
            and not all(r.linear for r in m.step_rels) and all(r.strict for r in m.step_rels))


def _label(ms: list[Member]) -> str:
    return ", ".join(f"`{m.name}`" for m in ms)


def _limit_message(group: Group, limit: int, changing: int) -> str:
    ms = group.members
    what = f"recursive CTE {_label(ms)}" if len(ms) == 1 else f"recursive CTEs {_label(ms)}"
    if any(not m.set_ for m in ms) and not group.mutually:
        hint = ("with UNION ALL every row the recursive term derives is kept, so a cycle in the data repeats rows "
                "forever: use UNION (set semantics), or add a stopping condition to the recursive term")
    else:
        hint = ("the recursive term keeps deriving new rows (e.g. a counter without a bound, or a value that grows "
                "around a cycle): add a stopping condition")
    how = ("raise it with (ERROR AT RECURSION LIMIT n)" if group.mutually and group.limit
           else f"raise it with spark.conf.set('{MAX_ITERATIONS_CONF}', n)")
    return (f"{_OP}: the {what} did not reach a fixed point within {limit} iterations ({changing} changes still "
            f"happening at the last one); {hint}; or, if it converges more slowly, {how}")
