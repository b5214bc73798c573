"""Spark's JSON of an analysed plan, read without a py4j round trip per node.

On ``(data, time, diff)``: the classic reader of a loop body's linear steps
(:class:`~spark_differential.intask.translate.Translator`) gets the analysed plan
between the body's leaves and a DataFrame in one py4j call, as Spark's JSON of the
tree (``TreeNode.toJSON``).  These functions read that JSON: :func:`json_tree` nests
its nodes, :func:`expr_id` and :func:`kind_of` identify them, :func:`references` finds
a column among an expression's references (``time`` may only be passed through), and
:func:`spark_sql` writes an expression as the Spark SQL text Spark's own
``Expression.sql`` gives, for the kinds whose JSON keeps every field that text needs
(else :class:`NoJson`: the reader asks the JVM for that expression).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def json_tree(flat: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Spark's JSON of a tree (``TreeNode.toJSON``: its nodes in pre-order, each with
    ``num-children``) as nested dicts, each node's children under ``_children``.

    >>> tree = json_tree([{"class": "a.Add", "num-children": 2}, {"class": "a.Literal", "num-children": 0},
    ...                   {"class": "a.AttributeReference", "num-children": 0, "name": "x"}])
    >>> kind_of(tree["class"]), [kind_of(k["class"]) for k in tree["_children"]], references(tree, "x")
    ('Add', ['Literal', 'AttributeReference'], True)
    """

    def read(pos: int) -> tuple[dict[str, Any], int]:
        node = dict(flat[pos])
        pos += 1
        kids = []
        for _ in range(int(node.get("num-children") or 0)):
            kid, pos = read(pos)
            kids.append(kid)
        node["_children"] = kids
        return node, pos

    return read(0)[0]


def expr_id(e: dict[str, Any]) -> Any:
    """The expression id of a JSON attribute (its number and the JVM that numbered it)."""
    i = e.get("exprId") or {}
    return (i.get("id"), i.get("jvmId"))


def kind_of(cls: str) -> str:
    """A JSON node's class without its package (Spark's ``nodeName`` for the nodes read here)."""
    return cls.rsplit(".", 1)[-1]


def references(e: dict[str, Any], name: str) -> bool:
    """Whether the JSON expression ``e`` reads a column named ``name``."""
    if kind_of(e["class"]) == "AttributeReference" and e.get("name") == name:
        return True
    return any(references(c, name) for c in e["_children"])


class NoJson(Exception):
    """An expression the JSON reader does not write as SQL: read it from the JVM instead."""


# Spark's own ``sql`` of the expressions :func:`spark_sql` covers (the JVM path parses that text)
_BINARY = {
    "Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Remainder": "%", "EqualTo": "=",
    "EqualNullSafe": "<=>", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
    "LessThanOrEqual": "<=", "And": "AND", "Or": "OR",
}
_POSTFIX = {"IsNull": "IS NULL", "IsNotNull": "IS NOT NULL"}
_FUNCTIONS = {"Coalesce": "coalesce", "Least": "least", "Greatest": "greatest", "Abs": "abs"}
_SQL_TYPES = {
    "long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT", "double": "DOUBLE", "float": "FLOAT",
    "string": "STRING", "boolean": "BOOLEAN", "date": "DATE",
}
_LITERAL_SUFFIX = {"integer": "", "long": "L", "short": "S", "byte": "Y"}


def spark_sql(e: dict[str, Any], columns: dict[str, str]) -> str:
    """The Spark SQL text of the JSON expression ``e`` as Spark's ``Expression.sql`` writes
    it, every column reference renamed to a safe name (``columns``: name -> safe name,
    filled as met).  Raises :class:`NoJson` for anything else: the JSON drops some of
    an expression's fields, so only these kinds are read from it.

    >>> e = json_tree([{"class": "a.GreaterThan", "num-children": 2},
    ...                {"class": "a.AttributeReference", "num-children": 0, "name": "case"},
    ...                {"class": "a.Literal", "num-children": 0, "value": "5", "dataType": "long"}])
    >>> columns = {}
    >>> spark_sql(e, columns), columns
    ('(_sdc0 > 5L)', {'case': '_sdc0'})
    """
    kind = kind_of(e["class"])
    kids = e["_children"]
    if kind == "AttributeReference":
        return columns.setdefault(e["name"], f"_sdc{len(columns)}")
    if kind == "Literal":
        value, dtype = e.get("value"), e.get("dataType")
        if value is None:
            if dtype == "void":
                return "NULL"
            if dtype in _SQL_TYPES:
                return f"CAST(NULL AS {_SQL_TYPES[dtype]})"
            raise NoJson(kind)
        if dtype in _LITERAL_SUFFIX and str(value).lstrip("-").isdigit():
            return f"{value}{_LITERAL_SUFFIX[dtype]}"
        if dtype == "boolean" and value in ("true", "false"):
            return str(value)
        if dtype == "string" and isinstance(value, str) and value.isprintable() and not any(c in value for c in "'\\$"):
            return f"'{value}'"
        raise NoJson(kind)
    if kind in _BINARY and len(kids) == 2:
        return f"({spark_sql(kids[0], columns)} {_BINARY[kind]} {spark_sql(kids[1], columns)})"
    if kind in _POSTFIX and len(kids) == 1:
        return f"({spark_sql(kids[0], columns)} {_POSTFIX[kind]})"
    if kind == "Not" and len(kids) == 1:
        return f"(NOT {spark_sql(kids[0], columns)})"
    if kind == "Cast" and len(kids) == 1 and e.get("dataType") in _SQL_TYPES:
        # also a try_cast (the JSON drops the cast's mode): Spark's text says TRY_CAST, but
        # sqlglot reads Spark's CAST as a TRY_CAST too, so the translation is the same
        return f"CAST({spark_sql(kids[0], columns)} AS {_SQL_TYPES[e['dataType']]})"
    if kind == "In" and len(kids) >= 2:
        return f"({spark_sql(kids[0], columns)} IN ({', '.join(spark_sql(k, columns) for k in kids[1:])}))"
    if kind == "If" and len(kids) == 3:
        return f"(IF({', '.join(spark_sql(k, columns) for k in kids)}))"
    if kind == "CaseWhen" and len(kids) >= 2:
        pairs = len(kids) // 2
        parts = ["CASE"]
        for i in range(pairs):
            parts.append(f"WHEN {spark_sql(kids[2 * i], columns)} THEN {spark_sql(kids[2 * i + 1], columns)}")
        if len(kids) % 2:
            parts.append(f"ELSE {spark_sql(kids[-1], columns)}")
        parts.append("END")
        return " ".join(parts)
    if kind in _FUNCTIONS and kids and (kind != "Abs" or len(kids) == 1):
        return f"{_FUNCTIONS[kind]}({', '.join(spark_sql(k, columns) for k in kids)})"
    raise NoJson(kind)
