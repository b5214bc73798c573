"""Relations of ``sd.sql``'s recursive queries: SQL relations compiled to collections.

On ``(data, time, diff)``: a :class:`Rel` is one relation of a query (a table, a join, a
projection, a CTE) as a collection whose snapshot at every time is that relation's rows (a
multiset) computed by SQL on the inputs' snapshots at that time.  Its DataFrame holds the data
columns under internal names (``sq0``, ``sq1``, ...: the two sides of a join never clash, and
no data column is called ``time`` or ``diff``), then ``time`` and ``diff``; each :class:`Col`
says which SQL name (and table alias) one of them answers to.

Outside any loop a relation is built at once (its DataFrame is planned while the query is
compiled, so Spark's analysis errors surface then, before any job).  Inside a recursive CTE
it depends on the loop's variables and is a function of an environment :data:`Env` (the
current value of each recursive CTE), called by the ``dd_iterate`` body once per iteration.
:class:`Ctx` holds what one compilation shares: the session, how names compare, fresh
internal names and the user's name for each, the time type of the collections.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME
from spark_differential.errors import SqlError
from spark_differential.sql.dialect import _OP
from spark_differential.sql.runner import _first_line, _user_names

Env = Mapping[str, DataFrame]


class DryEnv(dict):  # type: ignore[type-arg]
    """Empty stand-ins of the loop variables for a schema-only build: each ``dd_*`` operator
    is replaced by a plain Spark operator with the same output columns and types (planning
    the real ones costs far more, and only the types and Spark's analysis errors are wanted)."""

#: the spark_differential setting bounding the iterations of every recursive CTE
MAX_ITERATIONS_CONF = "spark_differential.sql.maxIterations"
DEFAULT_MAX_ITERATIONS = 1000


@dataclass(frozen=True)
class Col:
    """One column of a relation: its SQL ``name``, its DataFrame column ``internal``, the
    (normalized) table alias ``qual`` that qualifies it, and ``hidden`` for the right copy
    of a ``USING`` column (not listed by ``*`` and not found unqualified)."""

    name: str
    internal: str
    qual: str | None = None
    hidden: bool = False


@dataclass
class Rel:
    """A relation as a collection: built (``df``) or a function of the loop's variables (``fn``).

    ``loop`` names the recursive CTEs it depends on and ``linear`` says whether it is
    linear in them (each update of a loop variable
    maps to updates on its own: joins with outer relations, filters, projections), which
    decides how a ``UNION ALL`` recursion may be evaluated.  ``strict``: it is known to be
    empty whenever the loop variables are (filters, projections, inner joins and grouped
    aggregates of a loop variable; not a union with an outer relation, an aggregate
    without ``GROUP BY`` or the outer side of an outer join), which decides where a
    ``UNION`` recursion may start.  ``consolidated``: the DataFrame is known to have no two
    rows with equal data and time."""

    cols: list[Col]
    df: DataFrame | None = None
    fn: Callable[[Env], DataFrame] | None = None
    loop: frozenset[str] = frozenset()
    linear: bool = True
    strict: bool = False
    consolidated: bool = False

    def build(self, env: Env) -> DataFrame:
        if self.df is not None:
            return self.df
        assert self.fn is not None
        return self.fn(env)

    @property
    def internals(self) -> list[str]:
        """The DataFrame's data columns, in order (two columns of a join may share one: its key)."""
        return list(dict.fromkeys(c.internal for c in self.cols))

    def visible(self) -> list[Col]:
        return [c for c in self.cols if not c.hidden]

    def qualified(self, qual: str | None, names: Sequence[str] | None = None) -> Rel:
        """The relation under the table alias ``qual`` (and the column names ``names``)."""
        cols = self.visible()
        if names is not None:
            if len(names) != len(cols):
                raise SqlError(
                    f"{_OP}: the alias names {len(names)} columns ({', '.join(names)}) but the relation has "
                    f"{len(cols)} ({', '.join(c.name for c in cols)})"
                )
            cols = [replace(c, name=n) for c, n in zip(cols, names)]
        return replace(self, cols=[replace(c, qual=qual, hidden=False) for c in cols])


@dataclass
class Ctx:
    """What one ``sd.sql`` compilation shares."""

    spark: Any
    norm: Callable[[str], str]
    collections: bool  # keyword tables are collections (the result is one); else plain tables at time 0
    time_type: T.DataType = field(default_factory=T.LongType)
    names: dict[str, str] = field(default_factory=dict)  # internal name -> what error messages call it
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    inputs: list[DataFrame] = field(default_factory=list)  # the keyword collections (for `always`)
    _counter: Iterator[int] = field(default_factory=itertools.count)
    _always: Rel | None = None

    def fresh(self, label: str) -> str:
        name = f"sq{next(self._counter)}"
        self.names[name] = label
        return name

    @contextlib.contextmanager
    def errors(self, what: str = "") -> Iterator[None]:
        """Spark's parse and analysis errors as :class:`SqlError`, in the user's names."""
        from pyspark.errors import AnalysisException, ParseException

        try:
            yield
        except ParseException as e:
            raise SqlError(f"{_OP}: Spark could not parse the query{what}: {_user_names(_first_line(e), self.names)}") from e
        except AnalysisException as e:
            raise SqlError(f"{_OP}: Spark rejected the query{what}: {_user_names(_first_line(e), self.names)}") from e

    def empty(self, fields: Sequence[T.StructField]) -> DataFrame:
        """An empty collection with these data fields (no Spark job)."""
        schema = T.StructType([*fields, T.StructField(TIME, self.time_type, False), T.StructField(DIFF, T.LongType(), False)])
        return self.spark.createDataFrame([], schema)

    def always(self) -> Rel:
        """One row with no columns, present at every time the query can see.

        On plain tables: one row at time 0.  On collections: from the first time any input
        has an update on: the distinct set of ``(0, t)`` over every input update ``t``,
        which accumulates to one row at every time at or after some input update (and to
        nothing before any).  Constant rows (``VALUES``, ``SELECT`` without ``FROM``, the
        row of an aggregate over no rows) are this row, projected."""
        if self._always is not None:
            return self._always
        u = self.fresh("constant")
        if not self.collections or not self.inputs:
            schema = T.StructType([T.StructField(u, T.IntegerType(), False), T.StructField(TIME, self.time_type, False),
                                   T.StructField(DIFF, T.LongType(), False)])
            zero = _zero_time(self.time_type)
            df = self.spark.createDataFrame([(0, zero, 1)], schema)
        else:
            parts = [i.selectExpr(f"0 AS {u}", TIME, f"CAST(1 AS BIGINT) AS {DIFF}") for i in self.inputs]
            df = parts[0].dd_concat(*parts[1:], consolidate=False).dd_distinct() if len(parts) > 1 else parts[0].dd_distinct()
        self._always = Rel([Col("", u, hidden=True)], df=df, consolidated=True)
        return self._always


def _zero_time(dt: T.DataType) -> Any:
    """A value of the time type for constants when no input has any update (plain tables: 0)."""
    import datetime as _dt

    if isinstance(dt, T.StructType):
        return tuple(_zero_time(f.dataType) for f in dt.fields)
    if isinstance(dt, T.DateType):
        return _dt.date(1970, 1, 1)
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        return _dt.datetime(1970, 1, 1)
    return 0


def derive(
    ctx: Ctx,
    parents: Sequence[Rel],
    cols: list[Col],
    f: Callable[..., DataFrame],
    *,
    linear: bool | None = None,
    strict: bool | None = None,
    consolidated: bool = False,
    what: str = "",
    dry: Callable[..., DataFrame] | None = None,
) -> Rel:
    """A relation computed by ``f`` from its parents' DataFrames: built now when no parent
    depends on a loop, else a function of the loop's environment.  ``linear`` defaults to
    "every parent is linear" (right for operators of one loop-dependent input), ``strict``
    to "every parent is strict" (an outer relation never is: right for operators of one
    input, safe for others).  ``dry``: the stand-in of ``f`` for a :class:`DryEnv` (``f``
    calls a ``dd_*`` operator)."""
    loop = frozenset().union(*(p.loop for p in parents))
    lin = all(p.linear for p in parents) if linear is None else linear
    tight = all(p.strict for p in parents) if strict is None else strict
    if not loop:
        with ctx.errors(what):
            df = f(*[p.df for p in parents])
        return Rel(cols, df=df, consolidated=consolidated)

    def fn(env: Env) -> DataFrame:
        g = dry if dry is not None and isinstance(env, DryEnv) else f
        with ctx.errors(what):
            return g(*[p.build(env) for p in parents])

    return Rel(cols, fn=fn, loop=loop, linear=lin, strict=tight, consolidated=consolidated)


def project(ctx: Ctx, rel: Rel, items: Sequence[tuple[str, Col]], *, consolidated: bool = False, what: str = "") -> Rel:
    """``SELECT <text> AS <col.internal>, ...`` over ``rel`` (``time`` and ``diff`` kept; an
    internal name listed twice is computed once)."""
    exprs = list(dict.fromkeys(text if text == c.internal else f"{text} AS {c.internal}" for text, c in items))
    return derive(ctx, [rel], [c for _, c in items], lambda df: df.selectExpr(*exprs, TIME, DIFF),
                  consolidated=consolidated, what=what)


def renames(items: Sequence[tuple[str, Col]], rel: Rel) -> bool:
    """Do ``items`` (of :func:`project` over ``rel``) only rename ``rel``'s columns (each once)?
    Then a consolidated ``rel`` stays consolidated."""
    texts = [t for t, _ in items]
    return len(set(texts)) == len(texts) and sorted(texts) == sorted(rel.internals)


def relabeled(ctx: Ctx, rel: Rel, items: Sequence[tuple[str, Col]], what: str = "") -> Rel:
    """``SELECT`` ``items`` over ``rel``: when they only rename its columns, the same
    DataFrame under the new SQL names (no step, inside a loop none per iteration); else
    :func:`project`."""
    if renames(items, rel):
        return replace(rel, cols=[replace(c, internal=text) for text, c in items])
    return project(ctx, rel, items, what=what)


def renamed(ctx: Ctx, rel: Rel, mapping: Mapping[str, str]) -> Rel:
    """``rel`` with some internal columns renamed (``mapping``: old -> new)."""
    if not mapping:
        return rel
    cols = [replace(c, internal=mapping.get(c.internal, c.internal)) for c in rel.cols]
    items = [(old, Col("", mapping.get(old, old))) for old in rel.internals]
    out = project(ctx, rel, items, consolidated=rel.consolidated)
    return replace(out, cols=cols)


def fresh_copy(ctx: Ctx, rel: Rel) -> Rel:
    """``rel`` with new internal names (a relation read twice in one ``FROM``)."""
    return renamed(ctx, rel, {c.internal: ctx.fresh(ctx.names.get(c.internal, c.name)) for c in rel.cols})


def where(ctx: Ctx, rel: Rel, cond: str, what: str = "") -> Rel:
    return derive(ctx, [rel], rel.cols, lambda df: df.where(cond), consolidated=rel.consolidated, what=what)


def same(df: DataFrame, *_: Any) -> DataFrame:
    """The stand-in of an operator whose output has its (first) input's columns."""
    return df


def distinct(ctx: Ctx, rel: Rel) -> Rel:
    return derive(ctx, [rel], rel.cols, lambda df: df.dd_distinct(), linear=False, consolidated=True, dry=same)


def concat(ctx: Ctx, rels: Sequence[Rel], *, consolidate: bool = True) -> Rel:
    """The multiset union of relations with the same internal columns and types (``UNION ALL``).

    Linear when every part depends on the loop and is linear (a part outside the loop
    makes it affine: it adds rows whatever the loop variable holds).  ``consolidate=False``
    when a stateful operator reads it next (it consolidates its input anyway)."""
    if len(rels) == 1:
        return rels[0]
    lin = all(r.loop and r.linear for r in rels)
    return derive(ctx, rels, rels[0].cols, lambda *dfs: dfs[0].dd_concat(*dfs[1:], consolidate=consolidate),
                  linear=lin, consolidated=consolidate, dry=same)


def schema_of(ctx: Ctx, rel: Rel, env: Env) -> list[T.StructField]:
    """The data fields of ``rel`` (for a loop-dependent one, built on ``env``: placeholders)."""
    with ctx.errors():
        df = rel.build(env)
        by_name = {f.name: f for f in df.schema.fields}
    return [by_name[c] for c in rel.internals]


class Flow(Protocol):
    """What the clause compilers (:mod:`~spark_differential.sql.joins`,
    :mod:`~spark_differential.sql.aggregate`, :mod:`~spark_differential.sql.fixpoint`) use of
    the query compiler, :class:`spark_differential.sql.dataflow.Dataflow`."""

    ctx: Ctx
    frames: list[dict[str, Any]]
    dry_env: DryEnv

    @property
    def norm(self) -> Callable[[str], str]: ...

    def active(self) -> set[str]: ...

    def query(self, node: Any) -> Rel: ...

    def from_item(self, node: Any) -> Rel: ...

    def select_items(self, node: Any, scope: Any) -> list[tuple[Any, Col]]: ...

    def with_clause(self, with_: Any) -> list[Any]: ...
