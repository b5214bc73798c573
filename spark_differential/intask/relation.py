"""What a translated linear step is, and how the plan readers write one.

On ``(data, time, diff)``: a linear step of a ``dd_iterate`` body (``select``/``where``/
``withColumn``/unions keeping ``time`` and ``diff``) maps each update on its own, so it
can run on Arrow tables of updates inside one task.  A reader of the body's plan (the
classic session's analysed plan, :class:`~spark_differential.intask.translate.Translator`;
a Spark Connect client's plan, :class:`~spark_differential.intask.translate_connect.ConnectTranslator`)
turns each step into a :class:`Relation`: one DuckDB query over tables named after the
body's leaves (``$name``), with ``time`` not one column but the encoded int64 leaves of
the outer time, ``_sd_t0 …`` (:func:`leaves`), passed through untouched.

:class:`RelationWriter` is what both readers share: it writes a leaf, a projection, a
filter, a union or a pick of columns as a :class:`Relation` (its SQL, its columns, the
columns it merely picks from one table, and its Arrow program,
:mod:`spark_differential.intask.arrow_program`), and an expression's Spark SQL text as
DuckDB SQL through sqlglot (:meth:`RelationWriter._parsed`), accepting only what it
translates exactly; anything else raises :class:`Untranslatable`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.collection import TIME
from spark_differential.intask.arrow_program import arrow_expr

LEAF = "_sd_t"

_EXPRESSIONS = {
    "Paren", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Column", "Identifier", "Literal", "Cast", "TryCast",
    "DataType", "Not", "Is", "Null", "Boolean", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "And", "Or", "Case",
    "If", "Least", "Greatest", "Coalesce", "Abs", "Concat", "Lower", "Upper", "NullSafeEQ", "In", "Between",
    "Length", "Round", "Floor", "Ceil",
}


class Untranslatable(Exception):
    """A body step the in-task path cannot run exactly (the reason is the message)."""


@dataclass(frozen=True)
class Relation:
    """A DuckDB query over named tables (``$name``) and the names of its columns.

    ``picks``: when the query only picks (and renames) columns of one table, that
    table's name and the picked column of each output column: the in-task path then
    selects them from the Arrow table without a query."""

    sql: str
    columns: tuple[str, ...]
    picks: tuple[str, tuple[str, ...]] | None = None
    arrow: tuple[Any, ...] | None = None  # the same step as an Arrow program (arrow_program.evaluate), where one exists


def leaves(width: int) -> list[str]:
    """The column names of an encoded time in the in-task tables.

    >>> leaves(2)
    ['_sd_t0', '_sd_t1']
    """
    return [f"{LEAF}{i}" for i in range(width)]


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier.

    >>> print(quote('a"b'))
    "a""b"
    """
    return '"' + name.replace('"', '""') + '"'


class Projection:
    """A projection of ``child`` written item by item (:meth:`RelationWriter._projected`
    makes its relation): the SQL items and output names, the Arrow expressions (``None``
    once an item has none) and the picked columns of ``child``'s table (``None`` once an
    item computes a value)."""

    def __init__(self, child: Relation) -> None:
        self.child = child
        self.items: list[str] = []
        self.names: list[str] = []
        self.arrows: list[Any] | None = [] if child.arrow is not None else None
        self.picked: list[str] | None = [] if child.picks is not None else None

    def time(self, width: int) -> None:
        """A projection of ``time``: the loop's time leaves, passed through."""
        cols = leaves(width)
        self.items.extend(quote(c) for c in cols)
        self.names.extend(cols)
        if self.arrows is not None:
            self.arrows.extend(("col", c) for c in cols)
        if self.picked is not None:
            self.picked.extend(cols)

    def add(self, sql: str, name: str, arrow: tuple[Any, ...] | None, column: str | None) -> None:
        """The item ``sql AS name`` (``arrow``: its Arrow expression; ``column``: the child's
        column it merely reads, or ``None`` for a computed value)."""
        self.items.append(f"{sql} AS {quote(name)}")
        self.names.append(name)
        if self.arrows is not None:
            self.arrows = None if arrow is None else [*self.arrows, arrow]
        child = self.child
        if self.picked is not None and child.picks is not None and column is not None:
            self.picked.append(child.picks[1][child.columns.index(column)])
        else:
            self.picked = None


class RelationWriter:
    """Writes the parts of a translated step as :class:`Relation` s: the base of the plan readers.

    ``tables``: each leaf's name -> (table name, its columns as in the Spark plan,
    ``time`` included), read at translation time (the recorder adds leaves as it goes);
    ``width``: the number of encoded time leaves; ``ansi``: whether Spark's casts fail on
    bad input (DuckDB ``CAST``) or give null (``TRY_CAST``).

    >>> w = RelationWriter({"v": ("v", ["x", "time", "diff"])}, 1)
    >>> leaf = w._leaf("v", ["x", "time", "diff"])
    >>> w._pick(leaf, ["x", "time"]).sql
    'SELECT "x", "_sd_t0" FROM (SELECT "x", "_sd_t0", "diff" FROM $v) AS _s1'
    """

    def __init__(self, tables: Mapping[str, tuple[str, Sequence[str]]], width: int, ansi: bool = True) -> None:
        self.tables = tables  # read at translation time: the recorder adds leaves as it goes
        self.width = width
        self.ansi = ansi
        self._n = 0

    def _alias(self) -> str:
        self._n += 1
        return f"_s{self._n}"

    def _expand(self, names: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for n in names:
            out.extend(leaves(self.width) if n == TIME else [n])
        return tuple(out)

    @staticmethod
    def _unique(rel: Relation) -> None:
        if len(set(rel.columns)) != len(rel.columns):
            raise Untranslatable("two columns of one step share a name")

    def _leaf(self, name: str, cols: Sequence[str]) -> Relation:
        """The leaf table ``name`` (columns ``cols`` as in the Spark plan), read whole."""
        expanded = self._expand(cols)
        return Relation(f"SELECT {', '.join(quote(c) for c in expanded)} FROM ${name}", expanded, (name, expanded),
                        ("leaf", name, expanded))

    def _pick(self, child: Relation, columns: Sequence[str]) -> Relation:
        """``child``'s columns ``columns`` (``time`` expanded to its leaves), as a projection."""
        self._unique(child)
        names = self._expand(columns)
        missing = [n for n in names if n not in child.columns]
        if missing:  # pragma: no cover - the body's output and dd_concat's inputs were checked
            raise Untranslatable(f"internal: columns {missing} are not in the step")
        items = [quote(n) for n in names]
        picks = None
        if child.picks is not None:
            picks = (child.picks[0], tuple(child.picks[1][child.columns.index(n)] for n in names))
        program = None if child.arrow is None else ("project", child.arrow, names, tuple(("col", n) for n in names))
        return Relation(f"SELECT {', '.join(items)} FROM ({child.sql}) AS {self._alias()}", names, picks, program)

    def _projected(self, p: Projection) -> Relation:
        """The relation of a projection written item by item."""
        child = p.child
        a = self._alias()
        picks = (child.picks[0], tuple(p.picked)) if p.picked is not None and child.picks is not None else None
        program = None if p.arrows is None else ("project", child.arrow, tuple(p.names), tuple(p.arrows))
        return Relation(f"SELECT {', '.join(p.items)} FROM ({child.sql}) AS {a}", tuple(p.names), picks, program)

    def _filtered(self, child: Relation, condition: Callable[[], tuple[str, tuple[Any, ...] | None]]) -> Relation:
        """``child``'s rows where a condition holds (``condition()``: its DuckDB SQL and Arrow
        form, written once the filter's alias is taken)."""
        a = self._alias()
        sql, arrow = condition()
        program = None if arrow is None or child.arrow is None else ("filter", child.arrow, arrow)
        return Relation(f"SELECT * FROM ({child.sql}) AS {a} WHERE {sql}", child.columns, None, program)

    def _union(self, parts: Sequence[Relation]) -> Relation:
        """The rows of all ``parts`` (their columns in the same order), as ``UNION ALL``."""
        sql = " UNION ALL ".join(f"SELECT * FROM ({r.sql}) AS {self._alias()}" for r in parts)
        program = (None if any(r.arrow is None for r in parts)
                   else ("union", parts[0].columns, tuple(r.arrow for r in parts)))
        return Relation(sql, parts[0].columns, None, program)

    def _parsed(self, text: str, columns: Mapping[str, str], original: Callable[[], str]) -> tuple[str, tuple[Any, ...] | None]:
        """Spark SQL ``text`` over the safe column names ``columns`` (name -> safe name) as
        DuckDB SQL and its Arrow form; ``original()``: the expression's own SQL, for messages."""
        import sqlglot
        from sqlglot import exp

        users = {safe: name for name, safe in columns.items()}
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except Exception as err:  # noqa: BLE001 - any parse failure means: not ours to run
            raise Untranslatable(f"cannot read the expression {text!r} ({err})") from None
        for node in tree.walk():
            kind = type(node).__name__
            if kind not in _EXPRESSIONS:
                raise Untranslatable(f"the expression {original()!r} uses {kind}, which the in-task path does not translate")
            if isinstance(node, exp.Literal) and node.is_string and "$" in node.this:
                # the in-task SQL names its tables $name (string.Template): not a literal's text
                raise Untranslatable(f"the expression {original()!r} has a string literal with a '$'")
            if isinstance(node, exp.Column):
                if node.name not in users:  # pragma: no cover - every column was renamed
                    raise Untranslatable(f"the expression {original()!r} reads an unknown column")
                node.set("table", None)
                node.set("this", exp.to_identifier(users[node.name], quoted=True))
            if self.ansi and isinstance(node, (exp.Div, exp.Mod)) and not _nonzero_literal(node.expression):
                raise Untranslatable(
                    f"the expression {original()!r} divides by a value that may be zero (Spark raises "
                    "DIVIDE_BY_ZERO under ANSI mode where DuckDB returns NULL)")
        if self.ansi:
            tree = tree.transform(lambda n: exp.Cast(this=n.this, to=n.args["to"]) if isinstance(n, exp.TryCast) else n)
        return tree.sql(dialect="duckdb"), (arrow_expr(tree) if self.ansi else None)


def _nonzero_literal(node: Any) -> bool:
    """Whether the sqlglot expression ``node`` is a numeric literal other than zero (under casts and parentheses)."""
    from sqlglot import exp

    while isinstance(node, (exp.Cast, exp.TryCast, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Neg):
        return _nonzero_literal(node.this)
    if not (isinstance(node, exp.Literal) and not node.is_string):
        return False
    try:
        return float(node.this) != 0
    except ValueError:
        return False
