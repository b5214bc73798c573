"""What an incremental view accepts: its inputs, its frontiers, its query's output, late updates.

On ``(data, time, diff)``: an update of a view brings new updates of named inputs, at
times in the future of the view's frontier ``F``, and a new frontier ``T`` in the future
of ``F``.  Everything that can be checked on schemas alone is checked here before any
Spark job (:func:`check_inputs`, :func:`as_frontier`, :func:`check_forward`,
:func:`check_output`), each error saying what was wrong and how to fix it.  Whether an
update's times are in the future of ``F`` needs its rows: :func:`incoming` either makes
the job that reads them fail at a late update (:func:`late_guard`, ``late="error"``) or
moves late updates into the future of ``F`` (:func:`~spark_differential.incremental.lift.lift`,
``late="advance"``).
"""

from __future__ import annotations

import dataclasses
import inspect as _inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import (
    DIFF,
    TIME,
    checked,
    guard_expr,
    guarded_sql,
    inspect,
    integral_sql,
    null_message,
    quoted,
    sql_text,
)
from spark_differential.core.lattice import Antichain, Leaves, TimeType, Total
from spark_differential.core.lazy import lazy
from spark_differential.errors import (
    FrontierError,
    IncrementalStateError,
    LateUpdateError,
    NullValueError,
    SchemaMismatchError,
    TimeTypeMismatchError,
)
from spark_differential.incremental.lift import in_future, lift
from spark_differential.incremental.manifest import NextFrontier, State, Update

pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

LATE_MODES = ("error", "advance")

# an update's checked inputs: name -> (schema, time type, the collection)
Checked = dict[str, tuple[T.StructType, TimeType, DataFrame]]


def check_late(op: str, late: str) -> None:
    """Refuse a ``late`` mode other than :data:`LATE_MODES`.

    >>> check_late("update", "drop")
    Traceback (most recent call last):
    ...
    ValueError: update: late must be one of ('error', 'advance'), got 'drop'
    """
    if late not in LATE_MODES:
        raise ValueError(f"{op}: late must be one of {LATE_MODES}, got {late!r}")


def check_inputs(op: str, query: Callable[..., Any], state: State | None, inputs: Mapping[str, DataFrame],
                 where: str) -> Checked:
    """Validate the new inputs against the query and the stored schemas (schemas only; ``where``:
    the view's path, for messages)."""
    out: Checked = {}
    for n, df in inputs.items():
        cs = inspect(df, op=op, side=f"input `{n}`")
        out[n] = (df.schema, cs.ttype, df)
    if state is None:
        if not out:
            raise IncrementalStateError(
                f"{op}: the first update must give every input of the query (an empty collection is fine); "
                "it gave none"
            )
        try:
            _inspect.signature(query).bind(**{n: None for n in out})
        except TypeError as e:
            raise IncrementalStateError(
                f"{op}: the first update must give every input of the query by its parameter name; the query "
                f"takes {params(query)} but the update gave {sorted(out)} ({e})"
            ) from None
        types = {n: v[1] for n, v in out.items()}
        first = next(iter(types))
        for n, tt in types.items():
            if tt != types[first]:
                raise TimeTypeMismatchError(
                    f"{op}: inputs `{first}` and `{n}` have different time types ({types[first].describe()} vs "
                    f"{tt.describe()}); every input of a view uses one time type. Cast one `time` column."
                )
        return out
    for n, (schema, tt, _) in out.items():
        if n not in state.inputs:
            raise IncrementalStateError(
                f"{op}: the view has no input `{n}`; its inputs are {sorted(state.inputs)} (fixed by its "
                "first update)"
            )
        if tt != state.ttype:
            raise TimeTypeMismatchError(
                f"{op}: input `{n}` has time type {tt.describe()} but the view stored under {where} uses "
                f"{state.ttype.describe()}; cast the `time` column to match"
            )
        want = {f.name: f.dataType for f in data_fields(state.inputs[n])}
        have = {f.name: f.dataType for f in data_fields(schema)}
        if set(want) != set(have) or any(not same_type(want[c], have[c]) for c in want):
            raise SchemaMismatchError(
                f"{op}: input `{n}` has data columns {describe(have)} but the view stored under {where} "
                f"has {describe(want)}; select and cast the columns to match"
            )
    return out


def check_output(op: str, result: Any, ttype: TimeType, state: State | None, where: str) -> T.StructType:
    """The schema of the query's output ``result`` (the stored one once there is one), checked: a
    collection in the inputs' time type ``ttype``, with the data columns of earlier updates."""
    if not isinstance(result, DataFrame):
        raise IncrementalStateError(f"{op}: the query returned {type(result).__name__}, not a collection DataFrame")
    cs = inspect(result, op=op, side="query's output")
    if cs.ttype != ttype:
        raise TimeTypeMismatchError(
            f"{op}: the query's output has time type {cs.ttype.describe()} but its inputs have "
            f"{ttype.describe()}; an incremental view needs the output in the inputs' time"
        )
    schema = T.StructType([*cs.data_fields, result.schema[TIME], result.schema[DIFF]])
    if state is not None:
        want = {f.name: f.dataType for f in data_fields(state.output)}
        have = {f.name: f.dataType for f in cs.data_fields}
        if list(want) != list(have) or any(not same_type(want[c], have[c]) for c in want):
            raise SchemaMismatchError(
                f"{op}: the query's output has data columns {describe(have)} but the view stored under "
                f"{where} has {describe(want)}; the query must stay the same from update to update"
            )
        return state.output
    return schema


def as_frontier(op: str, ttype: TimeType, upto: Any) -> list[Leaves]:
    """``upto`` (a time, or a list of times) as a frontier of ``ttype``.

    >>> as_frontier("update", Total(), 5)
    [(5,)]
    """
    if upto is None:
        raise FrontierError(f"{op}: upto is required: the new frontier (a time, or a list of times for struct times)")
    try:
        return Antichain.from_values(ttype, upto).elements
    except FrontierError as e:
        raise FrontierError(f"{op}: upto={upto!r}: {e}") from None
    except (TypeError, ValueError, KeyError) as e:
        raise FrontierError(f"{op}: upto={upto!r} is not a time of type {ttype.describe()} ({e})") from None


def largest_time(dfs: Sequence[DataFrame]) -> int | None:
    """The largest time of collections of an integral time, in one job (their rows in one task:
    a plain aggregate over several partitions would be a shuffle, and with adaptive execution a
    job per stage); ``None`` when they have no row.

    >>> import spark_differential as sd
    >>> a = sd.session().createDataFrame([(1, 3, 1), (2, 7, 1)], "x long, time long, diff long")
    >>> largest_time([a, a.limit(0)])
    7
    """
    times = None
    for df in dfs:
        t = df.selectExpr(f"CAST({quoted(TIME)} AS BIGINT) AS t")
        times = t if times is None else times.unionByName(t)
    if times is None:
        return None
    (top,) = times.coalesce(1).selectExpr("max(t)").collect()
    return None if top[0] is None else int(top[0])


def resolved(up: Update) -> Update:
    """``up`` with its new frontier found, where it is its new updates' largest time + 1
    (:class:`~spark_differential.incremental.manifest.NextFrontier`: one job, before the update
    reads them again); else ``up`` itself."""
    if not isinstance(up.new_front, NextFrontier):
        return up
    raw = up.incoming.raw if isinstance(up.incoming, Guarded) else up.incoming
    return dataclasses.replace(up, new_front=up.new_front.after(largest_time(list(raw.values()))))


def check_forward(op: str, ttype: TimeType, old: list[Leaves] | None, new: list[Leaves]) -> None:
    """Refuse a new frontier with an element not in the future of the old one.

    >>> check_forward("update", Total(), [(5,)], [(3,)])
    Traceback (most recent call last):
    ...
    spark_differential.errors.FrontierError: update: upto=3 is earlier than the view's frontier 5 at [3]; the frontier can only move forward (pass a time in the future of view.frontier)
    """
    if old is None:
        return
    behind = [f for f in new if not any(ttype.leq(g, f) for g in old)]
    if behind:
        raise FrontierError(
            f"{op}: upto={frontier_value(ttype, new)!r} is earlier than the view's frontier "
            f"{frontier_value(ttype, old)!r} at {[ttype.decode_value(f) for f in behind]}; "
            "the frontier can only move forward (pass a time in the future of view.frontier)"
        )


def frontier_value(ttype: TimeType, frontier: Sequence[Leaves]) -> Any:
    """A frontier as the user gives it: one time for a one-element frontier of a total order,
    else a list of times.

    >>> frontier_value(Total(), [(5,)])
    5
    """
    if isinstance(ttype, Total) and len(frontier) == 1:
        return ttype.decode_value(frontier[0])
    return [ttype.decode_value(f) for f in frontier]


def late_guard(op: str, name: str, df: DataFrame, ttype: TimeType, front: list[Leaves],
               nulls: str | None = None) -> DataFrame:
    """``df`` unchanged, but the job writing it fails with :class:`LateUpdateError` at a late update.

    ``nulls`` (an integral time only): also fail at a null ``time`` or ``diff`` with
    :class:`~spark_differential.errors.NullValueError` named for the operation ``nulls``, in the
    same projection (:func:`~spark_differential.core.collection.checked`'s check, before the
    late one: a null time is never called late).

    >>> import spark_differential as sd
    >>> from spark_differential.core.lattice import Total
    >>> df = sd.session().createDataFrame([(1, 7, 1)], "x long, time long, diff long")
    >>> late_guard("update", "a", df, Total(), [(5,)]).collect()
    [Row(x=1, time=7, diff=1)]
    """
    before, after = _late_message(op, name, ttype, front)
    if integral_sql(ttype) is not None:  # SQL text: one selectExpr, not a few py4j round trips per Column
        schema = df.schema
        t = quoted(TIME) if nulls is None else guard_expr(schema, TIME, nulls)
        guarded = f"{late_sql(op, name, ttype, front, t)} AS {quoted(TIME)}"
        return df.selectExpr(*[guarded if c == TIME else quoted(c) if nulls is None else guarded_sql(schema, c, nulls)
                               for c in df.columns])
    msg_col = F.concat(F.lit(before), F.coalesce(F.col(TIME).cast("string"), F.lit("null")),  # never a null message
                       F.lit(after))
    guarded_col = F.when(in_future(df, ttype, front), F.col(TIME)).otherwise(F.raise_error(msg_col))
    return df.withColumn(TIME, guarded_col)


def _late_message(op: str, name: str, ttype: TimeType, front: list[Leaves]) -> tuple[str, str]:
    """What :class:`LateUpdateError`'s message says before and after the late time."""
    before = f"{_LATE_PREFIX}{op}: input `{name}` has an update at time "
    after = (f", not in the future of the view's frontier {frontier_value(ttype, front)!r}; the view already "
             "returned its output there. Send it at a later time, or pass late='advance' to count it from the "
             "frontier on.")
    return before, after


def late_sql(op: str, name: str, ttype: TimeType, front: list[Leaves], t: str) -> str:
    """:func:`late_guard`'s check of an integral time as SQL text: the time ``t`` (a SQL
    expression, not null) unchanged, or the job fails with :class:`LateUpdateError` (its message
    never null: the time is spelled with ``coalesce``).

    >>> from spark_differential.core.lattice import Total
    >>> late_sql("update", "a", Total(), [(5,)], "t").startswith("CASE WHEN t >= 5 THEN t ELSE raise_error(")
    True
    """
    before, after = _late_message(op, name, ttype, front)
    inside = " OR ".join(f"{t} >= {int(f[0])}" for f in front) or "false"
    msg = f"concat({sql_text(before)}, coalesce(CAST({t} AS STRING), 'null'), {sql_text(after)})"
    return f"CASE WHEN {inside} THEN {t} ELSE raise_error({msg}) END"


_LATE_PREFIX = "spark_differential LateUpdateError: "


@dataclass(frozen=True)
class TaskCheck:
    """The checks of an input's new updates that the task reading them makes itself, on its Arrow
    rows, instead of a projection of SQL text (whose analysis costs the driver some 10-20 ms an
    input): a null time leaf or diff fails with :class:`NullValueError` naming ``op``; then, with
    ``late`` (:meth:`of`: an integral time's frontier), a time before the frontier fails with
    :class:`LateUpdateError`; the messages :func:`late_guard` and
    :func:`~spark_differential.core.collection.null_guard` give.

    >>> import pyarrow as pa
    >>> check = TaskCheck.of("update", "a", Total(), [(5,)])
    >>> check(pa.table({"_t0": [5, 7], "diff": [1, 1]}), ["_t0"], "diff")   # nothing wrong
    >>> for t in ([5, 3], [None, 3]):
    ...     try:
    ...         check(pa.table({"_t0": t, "diff": [1, 1]}), ["_t0"], "diff")
    ...     except (LateUpdateError, NullValueError) as e:
    ...         print(type(e).__name__, str(e).split(",")[0].split(";")[0])
    LateUpdateError update: input `a` has an update at time 3
    NullValueError update (input `a`): a null time reached the operator
    """

    op: str  # what the null message names
    # the late message's two halves and the frontier's earliest leaf (None: an empty frontier, every time late)
    late: tuple[str, str, int | None] | None = None

    @classmethod
    def of(cls, op: str, name: str, ttype: TimeType, front: list[Leaves] | None) -> TaskCheck:
        """The checks of input ``name``'s updates (``front``: the view's frontier of an integral
        time, the late check's; ``None``: no late check, a first update)."""
        if front is None:
            return cls(f"{op} (input `{name}`)")
        before, after = _late_message(op, name, ttype, front)
        # a time is in the future of the frontier when it is at least one of its elements
        earliest = min((int(f[0]) for f in front), default=None)
        return cls(f"{op} (input `{name}`)", (before.removeprefix(_LATE_PREFIX), after, earliest))

    def __call__(self, rows: pa.Table, time_cols: Sequence[str], diff: str) -> None:
        if rows.num_rows == 0:
            return
        for what, cols in (("time", time_cols), ("diff", [diff])):
            if any(rows.column(c).null_count for c in cols):
                raise NullValueError(null_message(what, self.op).removeprefix("NullValueError: "))
        if self.late is None:
            return
        before, after, earliest = self.late
        t = rows.column(time_cols[0])
        early = pc.less(t, earliest) if earliest is not None else pc.is_valid(t)
        if pc.any(early).as_py():
            raise LateUpdateError(f"{before}{t.filter(early)[0].as_py()}{after}")


class Guarded(Mapping[str, DataFrame]):
    """The new updates of each input as the view takes them (:func:`incoming`), built at the
    first read of each: the one-task path reads the inputs as given (``raw``) and its task checks
    them (:class:`TaskCheck`), so it never pays for these projections' analysis."""

    def __init__(self, op: str, raw: Mapping[str, DataFrame], ttype: TimeType, front: list[Leaves] | None,
                 late: str) -> None:
        self.op, self.raw, self.ttype, self.front, self.late = op, raw, ttype, front, late
        self._built: dict[str, DataFrame] = {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._built:
            self._built[name] = incoming(self.op, name, self.raw[name], self.ttype, self.front, self.late)
        return self._built[name]

    def task_check(self, name: str) -> TaskCheck | None:
        """The checks a task reading input ``name`` as given (``raw[name]``) makes of its rows, where
        it can (an integral time; ``late="error"``, or a first update); else ``None``: read
        ``self[name]``, checked (or lifted) in projections."""
        if integral_sql(self.ttype) is None or (self.front is not None and self.late != "error"):
            return None
        return TaskCheck.of(self.op, name, self.ttype, self.front)

    def task_checks(self) -> dict[str, tuple[DataFrame, TaskCheck]] | None:
        """Every given input as given (``raw``) with the checks a task reading it makes
        (:meth:`task_check`); ``None`` when some input cannot be checked that way."""
        checks = {n: self.task_check(n) for n in self.raw}
        if any(c is None for c in checks.values()):
            return None
        return {n: (self.raw[n], c) for n, c in checks.items()}  # type: ignore[misc]

    def __contains__(self, name: object) -> bool:  # (Mapping's would build the input)
        return name in self.raw

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def incoming(
    op: str, name: str, df: DataFrame, ttype: TimeType, front: list[Leaves] | None, late: str
) -> DataFrame:
    """New updates of input ``name`` as the view takes them: checked against (or lifted into the
    future of) the frontier ``front``.  A null ``time`` or ``diff`` of a later update fails the
    job with :class:`~spark_differential.errors.NullValueError` whatever ``late`` says (a first
    update's meets the operators' own checks): no late guard or lift ever sees, drops or moves one."""
    if front is None:
        return df
    nulls = f"{op} (input `{name}`)"
    if late == "error" and integral_sql(ttype) is not None:  # both checks in one projection
        return late_guard(op, name, df, ttype, front, nulls=nulls)
    df = checked(df, inspect(df, op=op, side=f"input `{name}`"), nulls)
    if late == "error":
        return late_guard(op, name, df, ttype, front)
    return lift(df, ttype, front).select(*df.columns)


def params(query: Callable[..., Any]) -> list[str]:
    """The query's input names (its parameters that can be passed by name).

    >>> params(lambda orders, customers: orders)
    ['orders', 'customers']
    """
    try:
        sig = _inspect.signature(query)
    except (TypeError, ValueError):
        return []
    kinds = (_inspect.Parameter.POSITIONAL_OR_KEYWORD, _inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def describe(cols: Mapping[str, T.DataType]) -> str:
    """Columns and types for a message."""
    return "{" + ", ".join(f"{c}: {t.simpleString()}" for c, t in cols.items()) + "}"


def same_type(a: T.DataType, b: T.DataType) -> bool:
    """Whether two column types are the same (nullability aside)."""
    return a.simpleString() == b.simpleString()


def data_fields(schema: T.StructType) -> list[T.StructField]:
    """A collection's data columns (all but ``time`` and ``diff``)."""
    return [f for f in schema.fields if f.name not in (TIME, DIFF)]


__all__ = [
    "LATE_MODES",
    "as_frontier",
    "check_forward",
    "check_inputs",
    "check_late",
    "check_output",
    "frontier_value",
    "Guarded",
    "TaskCheck",
    "incoming",
    "late_guard",
    "largest_time",
    "late_sql",
    "params",
    "resolved",
    "same_type",
]
