"""``WITH RECURSIVE`` in ``sd.sql``: recursive queries over tables or over collections.

On ``(data, time, diff)``: when every keyword table is a collection (it has ``time`` and
``diff`` columns), the whole query is compiled to differential operators
(:mod:`spark_differential.sql.dataflow`), each recursive CTE to one ``dd_iterate``
(:mod:`spark_differential.sql.fixpoint`), and the result is a collection (the query's
columns, then ``time`` and ``diff``) whose snapshot at every time is the query's answer on
the inputs' snapshots at that time.

When no keyword table is a collection (ordinary tables, or tables of the Spark catalog),
every table is read as a collection holding its rows at time 0: the recursive CTEs are
computed the same way (their non-recursive parts run in Spark SQL), each becomes an
ordinary DataFrame of its rows, and the rest of the query runs in Spark SQL
(:class:`~spark_differential.sql.rewrite._Compiler`, as-of joins included).  The result is
an ordinary DataFrame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, inspect
from spark_differential.core.lazy import lazy
from spark_differential.errors import CollectionError, ConfigurationError, SqlError
from spark_differential.sql import fixpoint
from spark_differential.sql.dataflow import Dataflow
from spark_differential.sql.dialect import _OP
from spark_differential.sql.names import output_name
from spark_differential.sql.rel import DEFAULT_MAX_ITERATIONS, MAX_ITERATIONS_CONF, Ctx, Rel
from spark_differential.sql.rewrite import _Compiler

exp = lazy("sqlglot.expressions")


def _is_recursive(tree: exp.Expr) -> bool:
    """Does the query have a ``WITH RECURSIVE`` (or ``WITH MUTUALLY RECURSIVE``) clause?"""
    return any(w.args.get("recursive") or w.meta.get("mutually") for w in tree.find_all(exp.With))


def _max_iterations(spark: Any) -> int:
    raw = spark.conf.get(MAX_ITERATIONS_CONF, str(DEFAULT_MAX_ITERATIONS))
    try:
        n = int(str(raw).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigurationError(f"{MAX_ITERATIONS_CONF} must be a positive whole number of iterations, got {raw!r}")
    return n


def _run_recursive(spark: Any, tree: exp.Expr, views: Mapping[str, DataFrame]) -> DataFrame:
    """``sd.sql`` of a query with recursive CTEs (see the module docstring)."""
    if not isinstance(tree, exp.Query):
        raise SqlError(f"{_OP}: WITH RECURSIVE is supported in queries (SELECT ...), not in a {tree.key.upper()} statement")
    probe = _Compiler(spark, {})
    norm = probe.norm
    kinds = {name: {TIME, DIFF} <= set(df.columns) for name, df in views.items()}
    if any(kinds.values()) and not all(kinds.values()):
        coll = sorted(n for n, k in kinds.items() if k)
        plain = sorted(n for n, k in kinds.items() if not k)
        raise SqlError(
            f"{_OP}: some keyword tables are collections (with `time` and `diff`: {coll}) and some are not ({plain}); "
            "a recursive query reads either collections (its result is one) or plain tables: make the others "
            "collections too, e.g. sd.collection(df.withColumn('time', F.lit(0)))"
        )
    limit = _max_iterations(spark)
    if views and all(kinds.values()):
        return _over_collections(spark, tree, views, norm, limit)
    return _over_tables(spark, tree, views, limit)


def _over_collections(spark: Any, tree: exp.Query, views: Mapping[str, DataFrame], norm: Any, limit: int) -> DataFrame:
    schemas = {}
    for name, df in views.items():
        try:
            schemas[name] = inspect(df, op=_OP, side=f"keyword table `{name}`")
        except CollectionError as e:
            raise SqlError(str(e)) from e
    first = next(iter(schemas))
    for name, cs in schemas.items():
        if cs.ttype != schemas[first].ttype:
            raise SqlError(
                f"{_OP}: the keyword collections have different time types (`{first}`: {schemas[first].ttype.describe()}, "
                f"`{name}`: {cs.ttype.describe()}); cast one `time` column to match the other"
            )
    ctx = Ctx(spark, norm, collections=True, time_type=views[first].schema[TIME].dataType, max_iterations=limit,
              inputs=list(views.values()))
    flow = Dataflow(ctx, {norm(k): v for k, v in views.items()})
    tree = tree.copy()
    tree.set("order", None)  # a collection has no order
    first_select = tree
    while isinstance(first_select, (exp.Union, exp.Except, exp.Intersect, exp.Subquery)):
        first_select = first_select.this
    if isinstance(first_select, exp.Select) and not any(isinstance(e, exp.Star) or e.is_star for e in first_select.expressions):
        _check_output([output_name(e) for e in first_select.expressions], norm)  # before any loop runs
    rel = flow.query(tree)
    cols = rel.visible()
    _check_output([c.name for c in cols], norm)
    assert rel.df is not None
    out = rel.df.select(*[F.col(c.internal).alias(c.name) for c in cols], TIME, DIFF)
    return out if rel.consolidated and len(cols) == len(rel.internals) else out.dd_consolidate()


def _check_output(names: list[str], norm: Any) -> None:
    """The result's columns can form a collection: none called ``time``/``diff``, no two alike."""
    seen: set[str] = set()
    for n in names:
        k = norm(n)
        if k in (TIME, DIFF):
            raise SqlError(f"{_OP}: the result has a column called `{n}`, which collections reserve; alias it")
        if k in seen:
            raise SqlError(f"{_OP}: the result has two columns called `{n}`; alias them apart")
        seen.add(k)


def _plain(rel: Rel) -> DataFrame:
    """A relation on tables (all at time 0) as an ordinary DataFrame: each row ``diff`` times."""
    assert rel.df is not None
    n = "sqcopy"
    return (rel.df.where(f"{DIFF} > 0")
            .select(*[F.col(c.internal).alias(c.name) for c in rel.cols],
                    F.explode(F.sequence(F.lit(1).cast("long"), F.col(DIFF))).alias(n))
            .drop(n))


def _over_tables(spark: Any, tree: exp.Query, views: Mapping[str, DataFrame], limit: int) -> DataFrame:
    compiler = _Compiler(spark, views)
    compiler.bind_views(tree)
    ctx = Ctx(spark, compiler.norm, collections=False, max_iterations=limit)
    ctx.names.update(compiler.names)

    def run(q: exp.Expr) -> DataFrame:
        """A query on tables (its recursive CTEs computed first) as an ordinary DataFrame."""
        while True:
            with_ = next((w for w in q.find_all(exp.With, bfs=False) if w.args.get("recursive") or w.meta.get("mutually")), None)
            if with_ is None:
                return compiler.compile(q)
            flow = Dataflow(ctx, {}, leaf=lambda node: run(_leaf_query(node, compiler.norm)))
            owner = with_.parent
            done: set[str] = set()
            for group in flow.with_clause(with_):  # dependencies first: later ones read their results
                if group.members[0].entry.rel is None:
                    fixpoint.solve(flow, group)
                for m in group.members:
                    key = compiler.norm(m.entry.cte.alias)
                    token = compiler.token(_plain(m.entry.rel), m.entry.cte.alias)
                    _replace_refs(owner, with_, key, token, compiler.norm)
                    done.add(key)
            _drop_ctes(owner, with_, done, compiler.norm)

    return run(tree)


def _replace_refs(owner: exp.Expr, with_: exp.With, key: str, token: str, norm: Any) -> None:
    """Point every reference to the CTE ``key`` of ``with_`` at the DataFrame placeholder ``token``."""
    for t in list(owner.find_all(exp.Table)):
        if t.args.get("db") or not isinstance(t.this, exp.Identifier) or norm(t.name) != key:
            continue
        if _shadowed_below(t, owner, with_, norm):
            continue
        if not t.alias:
            t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
        t.set("this", exp.to_identifier(token))


def _shadowed_below(t: exp.Table, owner: exp.Expr, with_: exp.With, norm: Any) -> bool:
    p = t.parent
    while p is not None and p is not owner:
        w = p.args.get("with_") if isinstance(p, exp.Expr) else None
        if isinstance(w, exp.With) and w is not with_ and any(norm(c.alias) == norm(t.name) for c in w.expressions):
            return True
        p = p.parent
    return False


def _drop_ctes(owner: exp.Expr, with_: exp.With, done: set[str], norm: Any) -> None:
    """Remove the computed CTEs; what is left is an ordinary WITH, its CTEs in dependency order."""
    rest = [c for c in with_.expressions if norm(c.alias) not in done]
    if not rest:
        owner.set("with_", None)
        return
    names = {norm(c.alias): c for c in rest}
    deps = {k: fixpoint.names_read(c.this, set(names), norm) - {k} for k, c in names.items()}
    ordered = [names[k] for comp in fixpoint.sccs(list(names), deps) for k in comp]
    for c in ordered:  # WITH MUTUALLY RECURSIVE's typed columns: plain names for Spark
        alias = c.args.get("alias")
        if alias is not None and any(isinstance(x, exp.ColumnDef) for x in alias.columns):
            alias.set("columns", [exp.to_identifier(x.name) for x in alias.columns])
    with_.set("expressions", ordered)
    with_.set("recursive", None)
    with_.meta.pop("mutually", None)


def _leaf_query(node: exp.Expr, norm: Any) -> exp.Query:
    """``WITH <the CTEs it needs> <node>`` (a FROM item: ``SELECT * FROM <node>``), a copy
    that Spark SQL can run on its own."""
    visible: dict[str, exp.CTE] = {}
    source: dict[str, exp.With] = {}
    p = node.parent
    while p is not None:
        w = p.args.get("with_") if isinstance(p, exp.Expr) else None
        if isinstance(w, exp.With):
            for c in w.expressions:
                if norm(c.alias) not in visible:
                    visible[norm(c.alias)] = c
                    source[norm(c.alias)] = w
        p = p.parent
    if isinstance(node, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
        q = node.copy()
    else:
        item = node.copy()
        if isinstance(item, (exp.Table, exp.Subquery)):
            item.set("alias", None)
        q = exp.select("*").from_(item, copy=False)
    needed: list[str] = []

    def need(n: exp.Expr) -> None:
        for k in sorted(fixpoint.names_read(n, set(visible), norm)):
            if k not in needed:
                needed.append(k)
                need(visible[k].this)

    need(q)
    if not needed:
        return q
    deps = {k: fixpoint.names_read(visible[k].this, set(needed), norm) - {k} for k in needed}
    order = [visible[k].copy() for comp in fixpoint.sccs(needed, deps) for k in comp]
    own = q.args.get("with_")
    if isinstance(own, exp.With):
        own.set("expressions", [*order, *own.expressions])
    else:
        own = exp.With(expressions=order)
        q.set("with_", own)
    # CTEs of a WITH RECURSIVE (or MUTUALLY RECURSIVE) keep their meaning
    if any(source[k].args.get("recursive") or source[k].meta.get("mutually") for k in needed):
        own.set("recursive", True)
        if any(source[k].meta.get("mutually") for k in needed):
            own.meta["mutually"] = True
    return q
