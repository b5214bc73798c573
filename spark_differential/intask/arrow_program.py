"""The Arrow form of a translated linear step: a small program run without a DuckDB query.

On ``(data, time, diff)``: a linear step of a loop body (:mod:`spark_differential.intask.translate`)
maps each update on its own; for the few shapes that loops use at every iteration (a
projection that renames and does integer arithmetic, a null filter), one DuckDB query's
fixed cost is most of the step's cost, so a :class:`~spark_differential.intask.relation.Relation`
also carries the step as a program over Arrow tables of updates where one exists.  A
program is nested tuples (``leaf``, ``project``, ``filter``, ``union`` over expressions
of ``col``, ``lit``, integer arithmetic and casts, comparisons and Kleene logic), each
with exactly Spark's ANSI meaning on the types it accepts: :func:`arrow_expr` writes an
expression's, :func:`evaluate` runs one.  Where a value's type is one it does not cover,
evaluation raises :class:`NoArrow` and the caller runs the relation's SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_ARITH = {"Add": "add_checked", "Sub": "subtract_checked", "Mul": "multiply_checked"}
_COMPARE = {"EQ": "equal", "NEQ": "not_equal", "GT": "greater", "GTE": "greater_equal", "LT": "less",
            "LTE": "less_equal"}
_LOGIC = {"And": "and_kleene", "Or": "or_kleene"}
_INTEGERS = {"BIGINT": "int64", "INT": "int32", "SMALLINT": "int16", "TINYINT": "int8"}


class NoArrow(Exception):
    """A value of a type the Arrow form does not cover: run the relation's SQL instead."""


def arrow_expr(node: Any) -> tuple[Any, ...] | None:
    """The Arrow form of a (DuckDB-dialect) sqlglot expression, or ``None``.

    >>> import sqlglot
    >>> arrow_expr(sqlglot.parse_one("x + 1 > y", read="duckdb"))
    ('call', 'greater', ('call', 'add_checked', ('col', 'x'), ('lit', 1, 'int32')), ('col', 'y'))
    >>> arrow_expr(sqlglot.parse_one("x * 1.5", read="duckdb")) is None  # a decimal: the SQL path
    True
    """
    from sqlglot import exp

    kind = type(node).__name__
    if isinstance(node, exp.Paren):
        return arrow_expr(node.this)
    if isinstance(node, exp.Column):
        return ("col", node.name)
    if isinstance(node, exp.Literal):
        if node.is_string or not node.this.lstrip("-").isdigit():
            return None  # strings and decimals: the SQL path
        value = int(node.this)
        return ("lit", value, "int32" if -(1 << 31) <= value < (1 << 31) else "int64")
    if isinstance(node, exp.Boolean):
        return ("lit", bool(node.this), "bool")
    if isinstance(node, exp.Cast):
        target = _INTEGERS.get(node.args["to"].this.name if hasattr(node.args["to"].this, "name") else str(node.args["to"].this))
        inner = arrow_expr(node.this)
        if target is None or inner is None:
            return None
        return ("cast", inner, target)
    if kind in _ARITH or kind in _COMPARE or kind in _LOGIC:
        left, right = arrow_expr(node.this), arrow_expr(node.expression)
        if left is None or right is None:
            return None
        return ("call", _ARITH.get(kind) or _COMPARE.get(kind) or _LOGIC[kind], left, right)
    if isinstance(node, exp.Neg):
        inner = arrow_expr(node.this)
        return None if inner is None else ("call1", "negate_checked", inner)
    if isinstance(node, exp.Not):
        inner = arrow_expr(node.this)
        return None if inner is None else ("call1", "invert", inner)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = arrow_expr(node.this)
        return None if inner is None else ("call1", "is_null", inner)
    return None


def _value(e: tuple[Any, ...], table: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    op = e[0]
    if op == "col":
        return table.column(e[1])
    if op == "lit":
        return pa.scalar(e[1], getattr(pa, e[2])())
    if op == "cast":
        inner = _value(e[1], table)
        if not pa.types.is_integer(inner.type):
            raise NoArrow(f"a cast from {inner.type}")
        return pc.cast(inner, getattr(pa, e[2])(), safe=True)  # out of range raises, as ANSI Spark does
    if op == "call1":
        inner = _value(e[2], table)
        if e[1] == "negate_checked" and not pa.types.is_integer(inner.type):
            raise NoArrow(f"arithmetic on {inner.type}")
        if e[1] == "invert" and not pa.types.is_boolean(inner.type):
            raise NoArrow(f"NOT on {inner.type}")
        return getattr(pc, e[1])(inner)
    left, right = _value(e[2], table), _value(e[3], table)
    lt, rt = left.type, right.type
    if e[1] in _LOGIC.values():
        ok = pa.types.is_boolean(lt) and pa.types.is_boolean(rt)
    elif e[1] in _ARITH.values():
        ok = lt == rt and pa.types.is_integer(lt)  # Spark's analyser casts both sides to one type
    else:  # comparisons: no floating point (Spark orders NaN above every number and NaN = NaN)
        ok = lt == rt and (pa.types.is_integer(lt) or pa.types.is_string(lt) or pa.types.is_boolean(lt)
                           or pa.types.is_date(lt))
    if not ok:
        raise NoArrow(f"{e[1]} on {lt} and {rt}")
    return getattr(pc, e[1])(left, right)


def evaluate(program: tuple[Any, ...], tables: Mapping[str, Any]) -> Any:
    """Run the Arrow form of a relation over ``tables`` (name -> Arrow table); raises :class:`NoArrow`.

    >>> import pyarrow as pa
    >>> program = ("filter", ("leaf", "v", ("x",)), ("call", "greater", ("col", "x"), ("lit", 1, "int64")))
    >>> evaluate(program, {"v": pa.table({"x": [1, 2, 3]})}).to_pylist()
    [{'x': 2}, {'x': 3}]
    """
    import pyarrow as pa

    op = program[0]
    if op == "leaf":
        table = tables[program[1]]
        return pa.Table.from_arrays([table.column(c) for c in program[2]], names=list(program[2]))
    if op == "project":
        child = evaluate(program[1], tables)
        n = child.num_rows
        arrays = []
        for e in program[3]:
            v = _value(e, child)
            arrays.append(pa.repeat(v, n) if isinstance(v, pa.Scalar) else v)
        return pa.Table.from_arrays(arrays, names=list(program[2]))
    if op == "filter":
        child = evaluate(program[1], tables)
        mask = _value(program[2], child)
        if isinstance(mask, pa.Scalar) or not pa.types.is_boolean(mask.type):
            raise NoArrow("a filter that is not a boolean column")
        return child.filter(mask)  # null: the row is dropped, as SQL's WHERE does
    parts = [evaluate(p, tables) for p in program[2]]
    first = parts[0].schema
    if any(p.schema.types != first.types for p in parts[1:]):
        raise NoArrow("a union of differently typed parts")
    return pa.concat_tables([p.rename_columns(list(program[1])) for p in parts])
