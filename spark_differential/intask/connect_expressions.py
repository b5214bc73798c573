"""Spark Connect client expressions as Spark SQL text whose meaning DuckDB shares.

On ``(data, time, diff)``: a linear step of a loop body computes each update's new
columns from its old ones; on Spark Connect the step's expressions are the client's
unresolved objects (``ColumnReference``, ``LiteralExpression``, ``UnresolvedFunction``,
``CaseWhen``, ``CastExpression``), with no types.  :func:`typed` infers each one's Spark
type from its columns' and writes it as Spark SQL text with every implicit cast made
explicit, for a small language whose meaning is the same in Spark (ANSI mode) and
DuckDB: integral arithmetic with Spark's widening, comparisons of integers, strings,
booleans or dates, Kleene logic, null tests, ``IN``, ``CASE WHEN``, ``coalesce``/
``least``/``greatest`` and a few exact casts.  :func:`from_sql` parses SQL text
(``F.expr``, ``selectExpr``, a string ``where``) into the same objects first.  Anything
else raises :class:`~spark_differential.intask.relation.Untranslatable`.  The plan
reader, :class:`~spark_differential.intask.translate_connect.ConnectTranslator`,
resolves the column references and turns the text into DuckDB SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.intask.relation import Untranslatable

_INTEGRAL = {"byte": 1, "short": 2, "integer": 3, "long": 4}
SQL_TYPES = {"byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "string": "STRING",
             "boolean": "BOOLEAN", "date": "DATE", "double": "DOUBLE"}  # a type's JSON name -> its SQL name
# a type's name as a CastExpression, a schema's JSON or simpleString writes it -> its JSON name
_TYPE_NAMES = {"tinyint": "byte", "byte": "byte", "smallint": "short", "short": "short", "int": "integer",
               "integer": "integer", "bigint": "long", "long": "long", "string": "string", "boolean": "boolean",
               "date": "date", "double": "double", "null": "void", "void": "void"}
_ARITH = {"+": "+", "-": "-", "*": "*"}
_COMPARE = {"==": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
_SAME_TYPE = {"string", "boolean", "date"}  # compared, chosen or coalesced only with their own type


def type_name(t: Any) -> str:
    """A type (or its DDL / JSON name) as its schema JSON name (``"long"``, ``"integer"``, ``"string"``, ...).

    >>> from pyspark.sql.types import ShortType
    >>> type_name("BIGINT"), type_name("int"), type_name(ShortType())
    ('long', 'integer', 'short')
    """
    name = (t if isinstance(t, str) else str(t.simpleString())).strip().lower()
    return _TYPE_NAMES.get(name, name)


def _wider(types: Sequence[str]) -> str | None:
    """The type Spark widens ``types`` to where that is the same in DuckDB (integral: the
    widest; one of :data:`_SAME_TYPE`: itself), else ``None``."""
    if all(t in _INTEGRAL for t in types):
        return max(types, key=lambda t: _INTEGRAL[t])
    if len(set(types)) == 1 and types[0] in _SAME_TYPE:
        return types[0]
    return None


@dataclass(frozen=True)
class Ref:
    """A column named by the translator itself (``withColumn``'s kept columns, renames)."""

    name: str


def typed(e: Any, column: Callable[[Any], tuple[str, str]]) -> tuple[str, str]:
    """Spark SQL text of the client expression ``e`` with every implicit cast written out,
    and its Spark type; ``column(c)``: the text and type of a column reference ``c`` (a
    ``ColumnReference`` or a :class:`Ref`), as the plan reader resolves it.

    >>> from pyspark.sql.connect import expressions as X
    >>> from pyspark.sql.types import IntegerType
    >>> e = X.UnresolvedFunction("+", [X.ColumnReference("n"), X.LiteralExpression(1, IntegerType())])
    >>> typed(e, lambda c: ("_sdc0", "long"))
    ('(_sdc0 + CAST(1 AS BIGINT))', 'long')
    """
    kind = type(e).__name__
    if kind in ("ColumnReference", "Ref"):
        return column(e)
    if kind == "LiteralExpression":
        return _literal(e._value, type_name(e._dataType))
    if kind == "CastExpression":
        if e._eval_mode not in (None, "ansi"):
            raise Untranslatable(f"a cast in {e._eval_mode} mode")
        sql, src = typed(e._expr, column)
        dst = type_name(e._data_type)
        if dst not in SQL_TYPES or not (src == dst or (src in _INTEGRAL and dst in (*_INTEGRAL, "string", "double"))):
            raise Untranslatable(f"a cast from {src} to {dst} (its meaning may differ in DuckDB)")
        return f"CAST({sql} AS {SQL_TYPES[dst]})", dst
    if kind == "CaseWhen":
        conds = []
        values = []
        for cond, value in e._branches:
            c, ct = typed(cond, column)
            if ct != "boolean":
                raise Untranslatable(f"a CASE WHEN condition of type {ct}")
            conds.append(c)
            values.append(typed(value, column))
        if e._else_value is not None:
            values.append(typed(e._else_value, column))
        typ, cast = _common(values)
        parts = ["CASE", *[f"WHEN {c} THEN {cast(v)}" for c, v in zip(conds, values)]]
        if e._else_value is not None:
            parts.append(f"ELSE {cast(values[-1])}")
        return " ".join([*parts, "END"]), typ
    if kind == "SQLExpression":
        return typed(from_sql(e._expr, top=False)[1], column)
    if kind != "UnresolvedFunction" or e._is_distinct:
        raise Untranslatable(f"the expression {e} ({kind}) is not translated in one task")
    name = e._name if e._name in _ARITH or e._name in _COMPARE else e._name.lower()
    args = [typed(a, column) for a in e._args]
    types = [t for _, t in args]
    if name in _ARITH and len(args) == 2:
        typ = _wider(types) if all(t in _INTEGRAL for t in types) else None
        if typ is None:
            raise Untranslatable(f"{name} on {types[0]} and {types[1]} (only integer arithmetic runs in one task)")
        a, b = (_cast(s, t, typ) for s, t in args)
        return f"({a} {_ARITH[name]} {b})", typ
    if name == "%" and len(args) == 2:
        lit = e._args[1]
        if not (type(lit).__name__ == "LiteralExpression" and isinstance(lit._value, int) and lit._value != 0
                and all(t in _INTEGRAL for t in types)):
            raise Untranslatable("% other than by a nonzero integer literal")
        typ = _wider(types)
        a, b = (_cast(s, t, typ) for s, t in args)  # type: ignore[arg-type]
        return f"({a} % {b})", typ  # type: ignore[return-value]
    if name == "negative" and len(args) == 1 and types[0] in _INTEGRAL:
        return f"(- {args[0][0]})", types[0]
    if name == "abs" and len(args) == 1 and types[0] in _INTEGRAL:
        return f"abs({args[0][0]})", types[0]
    if name in _COMPARE and len(args) == 2:
        typ = _wider(types)
        if typ is None:
            raise Untranslatable(f"{name} between {types[0]} and {types[1]} (an implicit cast, or floating point)")
        a, b = (_cast(s, t, typ) for s, t in args)
        return f"({a} {_COMPARE[name]} {b})", "boolean"
    if name in ("and", "or") and len(args) == 2 and types == ["boolean", "boolean"]:
        return f"({args[0][0]} {name.upper()} {args[1][0]})", "boolean"
    if name == "not" and len(args) == 1 and types[0] == "boolean":
        return f"(NOT {args[0][0]})", "boolean"
    if name in ("isnull", "isnotnull") and len(args) == 1:
        return f"({args[0][0]} IS {'NOT ' if name == 'isnotnull' else ''}NULL)", "boolean"
    if name == "in" and len(args) >= 2:
        typ = _wider(types)
        if typ is None:
            raise Untranslatable(f"IN over {types} (an implicit cast, or floating point)")
        first, *rest = (_cast(s, t, typ) for s, t in args)
        return f"({first} IN ({', '.join(rest)}))", "boolean"
    if name in ("coalesce", "least", "greatest") and args:
        typ, cast = _common(args)
        return f"{name}({', '.join(cast(a) for a in args)})", typ
    raise Untranslatable(f"the expression {e} is not translated in one task")


def _common(values: Sequence[tuple[str, str]]) -> tuple[str, Any]:
    """The common type of ``values`` (see :func:`_wider`) and a function casting one to it."""
    typ = _wider([t for _, t in values if t != "void"] or ["void"])
    if typ is None:
        raise Untranslatable(f"values of types {[t for _, t in values]} (Spark would cast them implicitly)")
    return typ, lambda v: f"CAST(NULL AS {SQL_TYPES[typ]})" if v[1] == "void" else _cast(v[0], v[1], typ)


def _cast(sql: str, typ: str, to: str) -> str:
    return sql if typ == to else f"CAST({sql} AS {SQL_TYPES[to]})"


def _literal(value: Any, typ: str) -> tuple[str, str]:
    """A literal's Spark SQL text and type (``void`` for an untyped null)."""
    if value is None:
        if typ in ("void", "null"):
            return "NULL", "void"
        if typ in SQL_TYPES:
            return f"CAST(NULL AS {SQL_TYPES[typ]})", typ
    elif typ in _INTEGRAL and isinstance(value, int) and not isinstance(value, bool):
        suffix = {"byte": "Y", "short": "S", "integer": "", "long": "L"}[typ]
        return f"{value}{suffix}", typ
    elif typ == "boolean" and isinstance(value, bool):
        return ("true" if value else "false"), typ
    elif typ == "string" and isinstance(value, str) and value.isprintable() and not any(c in value for c in "'\\$"):
        return f"'{value}'", typ
    raise Untranslatable(f"a literal {value!r} of type {typ} (only integers, booleans, plain strings and nulls)")


# sqlglot's nodes (Spark dialect) -> the Connect client's function names
_SQL_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Mod": "%", "EQ": "==", "GT": ">", "GTE": ">=", "LT": "<",
               "LTE": "<=", "NullSafeEQ": "<=>", "And": "and", "Or": "or"}
_SQL_FUNCTIONS = {"Abs": "abs", "Least": "least", "Greatest": "greatest", "Coalesce": "coalesce"}


def from_sql(text: str, top: bool) -> tuple[str | None, Any]:
    """Spark SQL text (``F.expr``, ``selectExpr``, a string ``where``) as the Connect client's
    expression objects, which :func:`typed` then types; ``top``: a
    projection item, whose ``AS name`` gives ``(name, expression)``.  Parsed by sqlglot's
    Spark dialect; only the forms the Column reader covers are accepted (Spark SQL's
    numeric literals: integers as ``INT``, or ``BIGINT`` beyond its range).

    >>> name, e = from_sql("x + 1 AS y", top=True)
    >>> name, typed(e, lambda c: ("_sdc0", "integer"))
    ('y', ('(_sdc0 + 1)', 'integer'))
    """
    import sqlglot
    from pyspark.sql.connect import expressions as X
    from pyspark.sql.types import BooleanType, IntegerType, LongType, NullType, StringType

    if "\\" in text:
        raise Untranslatable(f"SQL text with a backslash ({text!r}): Spark's escapes are not read in one task")
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except Exception as err:  # noqa: BLE001 - any parse failure means: not ours to run
        raise Untranslatable(f"cannot read the SQL text {text!r} ({err})") from None

    def conv(n: Any) -> Any:
        kind = type(n).__name__
        if kind == "Paren":
            return conv(n.this)
        if kind == "Column":
            return X.ColumnReference(".".join("`" + p.name.replace("`", "``") + "`" for p in n.parts))
        if kind == "Literal":
            raw = str(n.this)
            if n.is_string:
                if "$" in raw:  # the in-task SQL names its tables $name (string.Template)
                    raise Untranslatable(f"SQL text with a '$' in a string literal ({text!r})")
                return X.LiteralExpression(raw, StringType())
            if raw.isdigit() and int(raw) < (1 << 63):
                return X.LiteralExpression(int(raw), IntegerType() if int(raw) < (1 << 31) else LongType())
            raise Untranslatable(f"the numeric literal {raw} in {text!r} (only integers run in one task)")
        if kind == "Boolean":
            return X.LiteralExpression(bool(n.this), BooleanType())
        if kind == "Null":
            return X.LiteralExpression(None, NullType())
        if kind in ("Cast", "TryCast"):
            # sqlglot reads Spark's CAST as TRY_CAST (non-ANSI Spark); in ANSI mode (the
            # only one read here) it is a CAST
            return X.CastExpression(conv(n.this), n.args["to"].sql(dialect="spark"))
        if kind in _SQL_BINARY:
            return X.UnresolvedFunction(_SQL_BINARY[kind], [conv(n.this), conv(n.expression)])
        if kind == "NEQ":
            return X.UnresolvedFunction("not", [X.UnresolvedFunction("==", [conv(n.this), conv(n.expression)])])
        if kind == "Neg":
            inner = conv(n.this)
            if type(inner).__name__ == "LiteralExpression" and isinstance(inner._value, int):
                value = -inner._value
                return X.LiteralExpression(value, IntegerType() if -(1 << 31) <= value else LongType())
            return X.UnresolvedFunction("negative", [inner])
        if kind == "Not":
            return X.UnresolvedFunction("not", [conv(n.this)])
        if kind == "Is" and type(n.expression).__name__ == "Null":
            return X.UnresolvedFunction("isnull", [conv(n.this)])
        if kind in _SQL_FUNCTIONS:
            return X.UnresolvedFunction(_SQL_FUNCTIONS[kind], [conv(a) for a in [n.this, *n.expressions]])
        if kind == "In" and not n.args.get("query") and not n.args.get("unnest") and n.expressions:
            return X.UnresolvedFunction("in", [conv(n.this), *[conv(a) for a in n.expressions]])
        if kind == "Between":
            v = conv(n.this)
            return X.UnresolvedFunction("and", [X.UnresolvedFunction(">=", [v, conv(n.args["low"])]),
                                                X.UnresolvedFunction("<=", [v, conv(n.args["high"])])])
        if kind == "Case" and n.this is None:
            branches = [(conv(i.this), conv(i.args["true"])) for i in n.args["ifs"]]
            default = n.args.get("default")
            return X.CaseWhen(branches, None if default is None else conv(default))
        if kind == "If":
            false = n.args.get("false")
            return X.CaseWhen([(conv(n.this), conv(n.args["true"]))], None if false is None else conv(false))
        raise Untranslatable(f"the SQL text {text!r} uses {kind}, which the in-task path does not translate on Connect")

    if top and type(tree).__name__ == "Alias":
        return tree.alias, conv(tree.this)
    if top and type(tree).__name__ == "Column":
        return None, conv(tree)
    if top:
        raise Untranslatable(f"an unnamed computed column ({text}): name it with AS")
    return None, conv(tree)
