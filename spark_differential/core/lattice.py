"""Times and their lattices.

A collection is a multiset of updates ``(data, time, diff)``; the collection at time
``s`` accumulates every update whose ``time <= s``.  This module says what ``<=``,
``join`` (least upper bound) and ``meet`` (greatest lower bound) mean for each
supported time type, and how a time is represented in the three places it lives:

* **Spark**: the user's ``time`` column (an integral type, ``date``, ``timestamp``,
  ``timestamp_ntz``, or a ``struct`` of those, ordered field by field), plus two
  internal wrappers: :class:`AltNeu` (``struct<time: T, neu: boolean>``, seed 003)
  and :class:`Loop` (``struct<_sd_outer: T, _sd_iter: int>``, the iteration
  coordinate used inside :func:`dd_iterate` bodies).
* **Kernels**: a fixed number of ``int64`` *leaves* (dates as days since the epoch,
  timestamps as microseconds, AltNeu's ``neu`` as 0/1).  The order on leaves is
  defined by the time type, never by the encoding alone.
* **Python values**: ints, ``date``/``datetime``, tuples for structs (also accepted
  as dicts or Rows), ``(t, neu)`` pairs for AltNeu.

Every time type provides ``leq``/``join``/``meet`` on Python leaf tuples, vectorised
over numpy arrays of leaves, and as DuckDB SQL expressions over leaf columns; and
``advance(t, F) = meet_{f in F} join(t, f)`` (seed 004), which is the coarsest time
that compares with every ``g >= F`` exactly as ``t`` does.
"""

from __future__ import annotations

import datetime as _dt
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.errors import FrontierError, ReservedNameError, TimeTypeError

np = lazy("numpy")

RESERVED_PREFIX = "_sd_"
LOOP_OUTER = "_sd_outer"
LOOP_ITER = "_sd_iter"  # the iteration field is named _sd_iter_<loop id>
ALTNEU_TIME = "time"
ALTNEU_NEU = "neu"

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH_DT = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)

Leaves = tuple[int, ...]

INTEGRAL_KINDS = ("long", "int", "short", "byte")
TOTAL_KINDS = (*INTEGRAL_KINDS, "date", "timestamp", "timestamp_ntz")


def _and(parts: Sequence[str]) -> str:
    return "(" + " AND ".join(parts) + ")" if parts else "TRUE"


class TimeType:
    """A lattice of times.  Subclasses are immutable, hashable and picklable."""

    width: int

    # -- structure -------------------------------------------------------------------
    def is_total(self) -> bool:
        """True when every two times are comparable (then leaves sort lexicographically)."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.describe()

    # -- Python leaf tuples ----------------------------------------------------------
    def leq(self, a: Leaves, b: Leaves) -> bool:
        raise NotImplementedError

    def join(self, a: Leaves, b: Leaves) -> Leaves:
        raise NotImplementedError

    def meet(self, a: Leaves, b: Leaves) -> Leaves:
        raise NotImplementedError

    def lt(self, a: Leaves, b: Leaves) -> bool:
        return a != b and self.leq(a, b)

    def advance(self, t: Leaves, frontier: Sequence[Leaves]) -> Leaves:
        """``meet_{f in frontier} join(t, f)``; ``t`` itself for an empty frontier."""
        out: Leaves | None = None
        for f in frontier:
            j = self.join(t, f)
            out = j if out is None else self.meet(out, j)
        return t if out is None else out

    # -- numpy -----------------------------------------------------------------------
    def np_leq(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Vectorised ``leq`` over arrays of shape ``(..., width)`` (broadcasting)."""
        raise NotImplementedError

    def np_join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def np_meet(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def np_advance(self, t: np.ndarray, frontier: Sequence[Leaves]) -> np.ndarray:
        out: np.ndarray | None = None
        for f in frontier:
            j = self.np_join(t, np.asarray(f, dtype=np.int64))
            out = j if out is None else self.np_meet(out, j)
        return t if out is None else out

    # -- SQL (DuckDB) over leaf column expressions -----------------------------------
    def sql_leq(self, a: Sequence[str], b: Sequence[str]) -> str:
        raise NotImplementedError

    def sql_join(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def sql_meet(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def sql_advance(self, t: Sequence[str], frontier: Sequence[Leaves]) -> list[str]:
        """SQL expressions for ``advance(t, frontier)`` with constant frontier elements."""
        out: list[str] | None = None
        for f in frontier:
            j = self.sql_join(t, [str(int(x)) for x in f])
            out = j if out is None else self.sql_meet(out, j)
        return list(t) if out is None else out

    # -- user values -----------------------------------------------------------------
    def encode_value(self, value: Any) -> Leaves:
        """A Python time value (int, date, datetime, tuple/dict/Row…) to leaves."""
        raise NotImplementedError

    def decode_value(self, leaves: Sequence[int]) -> Any:
        """Leaves back to the canonical Python value (ints, dates, tuples…)."""
        raise NotImplementedError

    # -- Spark -----------------------------------------------------------------------
    def spark_type(self) -> Any:
        raise NotImplementedError

    def encode_column(self, col: Any) -> list[Any]:
        """Spark Column of this type to ``width`` bigint Columns (the leaves)."""
        raise NotImplementedError

    def decode_columns(self, cols: Sequence[Any]) -> Any:
        """``width`` bigint Columns back to one Spark Column of this type."""
        raise NotImplementedError


@dataclass(frozen=True)
class Total(TimeType):
    """A totally ordered time: an integral type, ``date``, ``timestamp`` or ``timestamp_ntz``."""

    kind: str = "long"

    def __post_init__(self) -> None:
        if self.kind not in TOTAL_KINDS:
            raise TimeTypeError(f"unknown total time kind {self.kind!r}")

    @property
    def width(self) -> int:  # type: ignore[override]
        return 1

    def is_total(self) -> bool:
        return True

    def describe(self) -> str:
        return {"long": "bigint", "int": "int", "short": "smallint", "byte": "tinyint"}.get(
            self.kind, self.kind
        )

    def leq(self, a: Leaves, b: Leaves) -> bool:
        return a[0] <= b[0]

    def join(self, a: Leaves, b: Leaves) -> Leaves:
        return (max(a[0], b[0]),)

    def meet(self, a: Leaves, b: Leaves) -> Leaves:
        return (min(a[0], b[0]),)

    def np_leq(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a[..., 0] <= b[..., 0]

    def np_join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a, b)

    def np_meet(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.minimum(a, b)

    def sql_leq(self, a: Sequence[str], b: Sequence[str]) -> str:
        return f"({a[0]} <= {b[0]})"

    def sql_join(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return [f"greatest({a[0]}, {b[0]})"]

    def sql_meet(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return [f"least({a[0]}, {b[0]})"]

    def encode_value(self, value: Any) -> Leaves:
        k = self.kind
        if k in INTEGRAL_KINDS:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise FrontierError(f"expected an integer time for a {self.describe()} time, got {value!r}")
            return (int(value),)
        if k == "date":
            if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
                raise FrontierError(f"expected a datetime.date for a date time, got {value!r}")
            return ((value - _EPOCH_DATE).days,)
        if not isinstance(value, _dt.datetime):
            raise FrontierError(f"expected a datetime.datetime for a {k} time, got {value!r}")
        if k == "timestamp":
            aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.timezone.utc)
            delta = aware - _EPOCH_DT
        else:
            delta = value.replace(tzinfo=None) - _EPOCH_NAIVE
        return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds,)

    def decode_value(self, leaves: Sequence[int]) -> Any:
        v = int(leaves[0])
        if self.kind in INTEGRAL_KINDS:
            return v
        if self.kind == "date":
            return _EPOCH_DATE + _dt.timedelta(days=v)
        if self.kind == "timestamp":
            return _EPOCH_DT + _dt.timedelta(microseconds=v)
        return _EPOCH_NAIVE + _dt.timedelta(microseconds=v)

    def spark_type(self) -> Any:
        from pyspark.sql import types as T

        return {
            "long": T.LongType(),
            "int": T.IntegerType(),
            "short": T.ShortType(),
            "byte": T.ByteType(),
            "date": T.DateType(),
            "timestamp": T.TimestampType(),
            "timestamp_ntz": T.TimestampNTZType(),
        }[self.kind]

    def encode_column(self, col: Any) -> list[Any]:
        from pyspark.sql import functions as F

        if self.kind in INTEGRAL_KINDS:
            return [col.cast("long")]
        if self.kind == "date":
            return [F.unix_date(col).cast("long")]
        if self.kind == "timestamp":
            return [F.unix_micros(col)]
        # timestamp_ntz: exact microsecond distance from the epoch, no time zone involved
        return [F.timestamp_diff("MICROSECOND", F.lit(_EPOCH_NAIVE).cast("timestamp_ntz"), col)]

    def decode_columns(self, cols: Sequence[Any]) -> Any:
        from pyspark.sql import functions as F

        c = cols[0]
        if self.kind in INTEGRAL_KINDS:
            return c.cast(self.spark_type())
        if self.kind == "date":
            return F.date_from_unix_date(c.cast("int"))
        if self.kind == "timestamp":
            return F.timestamp_micros(c)
        return F.timestamp_add("MICROSECOND", c, F.lit(_EPOCH_NAIVE).cast("timestamp_ntz"))


def _offsets(children: Sequence[TimeType]) -> list[tuple[int, int]]:
    out, o = [], 0
    for c in children:
        out.append((o, o + c.width))
        o += c.width
    return out


@dataclass(frozen=True)
class Product(TimeType):
    """A struct of times under the product order: ``a <= b`` iff every field is ``<=``."""

    fields: tuple[tuple[str, TimeType], ...]

    def __post_init__(self) -> None:
        if not self.fields:
            raise TimeTypeError("a struct time needs at least one field")

    @property
    def width(self) -> int:  # type: ignore[override]
        return sum(t.width for _, t in self.fields)

    @property
    def _children(self) -> list[TimeType]:
        return [t for _, t in self.fields]

    def is_total(self) -> bool:
        return len(self.fields) == 1 and self.fields[0][1].is_total()

    def describe(self) -> str:
        return "struct<" + ", ".join(f"{n}: {t.describe()}" for n, t in self.fields) + ">"

    def _split(self, a: Sequence[Any]) -> list[Sequence[Any]]:
        return [a[s:e] for s, e in _offsets(self._children)]

    def leq(self, a: Leaves, b: Leaves) -> bool:
        return all(c.leq(x, y) for c, x, y in zip(self._children, self._split(a), self._split(b)))

    def join(self, a: Leaves, b: Leaves) -> Leaves:
        return tuple(v for c, x, y in zip(self._children, self._split(a), self._split(b)) for v in c.join(x, y))

    def meet(self, a: Leaves, b: Leaves) -> Leaves:
        return tuple(v for c, x, y in zip(self._children, self._split(a), self._split(b)) for v in c.meet(x, y))

    def _np_split(self, a: np.ndarray) -> list[np.ndarray]:
        return [a[..., s:e] for s, e in _offsets(self._children)]

    def np_leq(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = None
        for c, x, y in zip(self._children, self._np_split(a), self._np_split(b)):
            r = c.np_leq(x, y)
            out = r if out is None else (out & r)
        return out  # type: ignore[return-value]

    def np_join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        parts = [c.np_join(x, y) for c, x, y in zip(self._children, self._np_split(a), self._np_split(b))]
        return np.concatenate(parts, axis=-1)

    def np_meet(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        parts = [c.np_meet(x, y) for c, x, y in zip(self._children, self._np_split(a), self._np_split(b))]
        return np.concatenate(parts, axis=-1)

    def sql_leq(self, a: Sequence[str], b: Sequence[str]) -> str:
        return _and([c.sql_leq(x, y) for c, x, y in zip(self._children, self._split(a), self._split(b))])

    def sql_join(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return [v for c, x, y in zip(self._children, self._split(a), self._split(b)) for v in c.sql_join(x, y)]

    def sql_meet(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return [v for c, x, y in zip(self._children, self._split(a), self._split(b)) for v in c.sql_meet(x, y)]

    def encode_value(self, value: Any) -> Leaves:
        names = [n for n, _ in self.fields]
        if hasattr(value, "asDict"):
            value = value.asDict()
        if isinstance(value, Mapping):
            missing = [n for n in names if n not in value]
            extra = [k for k in value if k not in names]
            if missing or extra:
                raise FrontierError(
                    f"a {self.describe()} time needs exactly the fields {names}; got {sorted(value)}"
                )
            parts = [value[n] for n in names]
        elif isinstance(value, (tuple, list)):
            if len(value) != len(names):
                raise FrontierError(f"a {self.describe()} time needs {len(names)} fields, got {value!r}")
            parts = list(value)
        else:
            raise FrontierError(f"a {self.describe()} time must be a tuple, dict or Row; got {value!r}")
        return tuple(v for (_, t), p in zip(self.fields, parts) for v in t.encode_value(p))

    def decode_value(self, leaves: Sequence[int]) -> Any:
        return tuple(t.decode_value(x) for t, x in zip(self._children, self._split(leaves)))

    def spark_type(self) -> Any:
        from pyspark.sql import types as T

        return T.StructType([T.StructField(n, t.spark_type(), False) for n, t in self.fields])

    def encode_column(self, col: Any) -> list[Any]:
        return [e for n, t in self.fields for e in t.encode_column(col.getField(n))]

    def decode_columns(self, cols: Sequence[Any]) -> Any:
        from pyspark.sql import functions as F

        return F.struct(*[t.decode_columns(x).alias(n) for (n, t), x in zip(self.fields, self._split(cols))])


@dataclass(frozen=True)
class AltNeu(TimeType):
    """Two moments per time, ``alt`` just before ``neu`` (seed 003, dogsdogsdogs ``altneu.rs``).

    ``(t1,n1) <= (t2,n2)`` iff ``t1 == t2 ? n1 <= n2 : t1 <= t2``.  Over a totally
    ordered ``T`` this is the lexicographic order on ``(t, neu)``.
    """

    inner: TimeType

    @property
    def width(self) -> int:  # type: ignore[override]
        return self.inner.width + 1

    def is_total(self) -> bool:
        return self.inner.is_total()

    def describe(self) -> str:
        return f"altneu<{self.inner.describe()}>"

    def leq(self, a: Leaves, b: Leaves) -> bool:
        if a[:-1] == b[:-1]:
            return a[-1] <= b[-1]
        return self.inner.leq(a[:-1], b[:-1])

    def join(self, a: Leaves, b: Leaves) -> Leaves:
        t = self.inner.join(a[:-1], b[:-1])
        neu = (t == tuple(a[:-1]) and a[-1] == 1) or (t == tuple(b[:-1]) and b[-1] == 1)
        return (*t, int(neu))

    def meet(self, a: Leaves, b: Leaves) -> Leaves:
        t = self.inner.meet(a[:-1], b[:-1])
        neu = (t != tuple(a[:-1]) or a[-1] == 1) and (t != tuple(b[:-1]) or b[-1] == 1)
        return (*t, int(neu))

    def np_leq(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ai, bi = a[..., :-1], b[..., :-1]
        eq = np.all(ai == bi, axis=-1)
        return np.where(eq, a[..., -1] <= b[..., -1], self.inner.np_leq(ai, bi))

    def np_join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        ai, bi = a[..., :-1], b[..., :-1]
        t = self.inner.np_join(ai, bi)
        neu = (np.all(t == ai, axis=-1) & (a[..., -1] == 1)) | (np.all(t == bi, axis=-1) & (b[..., -1] == 1))
        return np.concatenate([t, neu.astype(np.int64)[..., None]], axis=-1)

    def np_meet(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        ai, bi = a[..., :-1], b[..., :-1]
        t = self.inner.np_meet(ai, bi)
        neu = (~np.all(t == ai, axis=-1) | (a[..., -1] == 1)) & (~np.all(t == bi, axis=-1) | (b[..., -1] == 1))
        return np.concatenate([t, neu.astype(np.int64)[..., None]], axis=-1)

    def sql_leq(self, a: Sequence[str], b: Sequence[str]) -> str:
        eq = _and([f"{x} = {y}" for x, y in zip(a[:-1], b[:-1])])
        return f"(CASE WHEN {eq} THEN {a[-1]} <= {b[-1]} ELSE {self.inner.sql_leq(a[:-1], b[:-1])} END)"

    def sql_join(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        t = self.inner.sql_join(a[:-1], b[:-1])
        eq_a = _and([f"{x} = {y}" for x, y in zip(t, a[:-1])])
        eq_b = _and([f"{x} = {y}" for x, y in zip(t, b[:-1])])
        neu = f"(CASE WHEN ({eq_a} AND {a[-1]} = 1) OR ({eq_b} AND {b[-1]} = 1) THEN 1 ELSE 0 END)"
        return [*t, neu]

    def sql_meet(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        t = self.inner.sql_meet(a[:-1], b[:-1])
        eq_a = _and([f"{x} = {y}" for x, y in zip(t, a[:-1])])
        eq_b = _and([f"{x} = {y}" for x, y in zip(t, b[:-1])])
        neu = f"(CASE WHEN (NOT {eq_a} OR {a[-1]} = 1) AND (NOT {eq_b} OR {b[-1]} = 1) THEN 1 ELSE 0 END)"
        return [*t, neu]

    def encode_value(self, value: Any) -> Leaves:
        if hasattr(value, "asDict"):
            value = value.asDict()
        if isinstance(value, Mapping):
            value = (value.get(ALTNEU_TIME), value.get(ALTNEU_NEU))
        if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[1], (bool, np.bool_)):
            raise FrontierError(f"an {self.describe()} time is a pair (time, neu: bool); got {value!r}")
        return (*self.inner.encode_value(value[0]), int(bool(value[1])))

    def decode_value(self, leaves: Sequence[int]) -> Any:
        return (self.inner.decode_value(leaves[:-1]), bool(leaves[-1]))

    def spark_type(self) -> Any:
        from pyspark.sql import types as T

        return T.StructType(
            [T.StructField(ALTNEU_TIME, self.inner.spark_type(), False), T.StructField(ALTNEU_NEU, T.BooleanType(), False)]
        )

    def encode_column(self, col: Any) -> list[Any]:
        return [*self.inner.encode_column(col.getField(ALTNEU_TIME)), col.getField(ALTNEU_NEU).cast("long")]

    def decode_columns(self, cols: Sequence[Any]) -> Any:
        from pyspark.sql import functions as F

        return F.struct(
            self.inner.decode_columns(cols[:-1]).alias(ALTNEU_TIME), (cols[-1] == F.lit(1)).alias(ALTNEU_NEU)
        )


@dataclass(frozen=True)
class Loop(TimeType):
    """``(outer, iteration)`` under the product order: the time inside a ``dd_iterate`` body.

    Spark type ``struct<_sd_outer: T, _sd_iter_<id>: int>``; the loop id tells the
    collections of nested loops apart.
    """

    inner: TimeType
    loop_id: int = 0

    @property
    def iter_field(self) -> str:
        return f"{LOOP_ITER}_{self.loop_id}"

    @property
    def width(self) -> int:  # type: ignore[override]
        return self.inner.width + 1

    def is_total(self) -> bool:
        return False

    def describe(self) -> str:
        return f"loop{self.loop_id}<{self.inner.describe()}>"

    @property
    def _as_product(self) -> Product:
        return Product(((LOOP_OUTER, self.inner), (self.iter_field, Total("int"))))

    def leq(self, a: Leaves, b: Leaves) -> bool:
        return self._as_product.leq(a, b)

    def join(self, a: Leaves, b: Leaves) -> Leaves:
        return self._as_product.join(a, b)

    def meet(self, a: Leaves, b: Leaves) -> Leaves:
        return self._as_product.meet(a, b)

    def np_leq(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._as_product.np_leq(a, b)

    def np_join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._as_product.np_join(a, b)

    def np_meet(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._as_product.np_meet(a, b)

    def sql_leq(self, a: Sequence[str], b: Sequence[str]) -> str:
        return self._as_product.sql_leq(a, b)

    def sql_join(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return self._as_product.sql_join(a, b)

    def sql_meet(self, a: Sequence[str], b: Sequence[str]) -> list[str]:
        return self._as_product.sql_meet(a, b)

    def encode_value(self, value: Any) -> Leaves:
        return self._as_product.encode_value(value)

    def decode_value(self, leaves: Sequence[int]) -> Any:
        return self._as_product.decode_value(leaves)

    def spark_type(self) -> Any:
        return self._as_product.spark_type()

    def encode_column(self, col: Any) -> list[Any]:
        return self._as_product.encode_column(col)

    def decode_columns(self, cols: Sequence[Any]) -> Any:
        return self._as_product.decode_columns(cols)


def from_spark_type(dtype: Any, *, where: str = "time", allow_internal: bool = True) -> TimeType:
    """The time type of a Spark ``time`` column; :class:`TimeTypeError` if unsupported."""
    from pyspark.sql import types as T

    simple = {
        T.LongType: "long",
        T.IntegerType: "int",
        T.ShortType: "short",
        T.ByteType: "byte",
        T.DateType: "date",
        T.TimestampNTZType: "timestamp_ntz",
        T.TimestampType: "timestamp",
    }
    for cls, kind in simple.items():
        if type(dtype) is cls:
            return Total(kind)
    if isinstance(dtype, T.StructType):
        names = [f.name for f in dtype.fields]
        if allow_internal and names == [ALTNEU_TIME, ALTNEU_NEU] and isinstance(dtype.fields[1].dataType, T.BooleanType):
            return AltNeu(from_spark_type(dtype.fields[0].dataType, where=f"{where}.{ALTNEU_TIME}"))
        if (
            allow_internal
            and len(names) == 2
            and names[0] == LOOP_OUTER
            and names[1].startswith(LOOP_ITER + "_")
            and names[1][len(LOOP_ITER) + 1 :].isdigit()
        ):
            inner = from_spark_type(dtype.fields[0].dataType, where=f"{where}.{LOOP_OUTER}")
            return Loop(inner, int(names[1][len(LOOP_ITER) + 1 :]))
        if not names:
            raise TimeTypeError(f"`{where}` is an empty struct; a struct time needs at least one field")
        fields = []
        for f in dtype.fields:
            if f.name.startswith(RESERVED_PREFIX):
                raise ReservedNameError(
                    f"struct time field `{where}.{f.name}` uses the reserved prefix {RESERVED_PREFIX!r}; rename it"
                )
            fields.append((f.name, from_spark_type(f.dataType, where=f"{where}.{f.name}", allow_internal=allow_internal)))
        return Product(tuple(fields))
    raise TimeTypeError(
        f"`{where}` has type {dtype.simpleString()}, which is not a supported time type. "
        "Use an integral type (tinyint/smallint/int/bigint), date, timestamp, timestamp_ntz, "
        "or a struct of those (ordered field by field); cast the column, e.g. "
        "F.col('version').cast('long')."
    )


class Antichain:
    """A frontier: a set of mutually incomparable times (only minimal elements are kept)."""

    def __init__(self, ttype: TimeType, elements: Iterable[Leaves] = ()) -> None:
        self.ttype = ttype
        self._elements: list[Leaves] = []
        for e in elements:
            self.insert(e)

    @classmethod
    def from_values(cls, ttype: TimeType, values: Iterable[Any] | Any) -> Antichain:
        """Build from Python time values (a single value or an iterable of them)."""
        if values is None:
            raise FrontierError("a frontier needs at least one time")
        if isinstance(values, (numbers.Number, str, bytes, _dt.date, Mapping)) or hasattr(values, "asDict"):
            # one time (a string or a float is one wrong time, not a list of characters or digits)
            values = [values]
        elif isinstance(values, tuple) and not isinstance(ttype, Total):
            # a bare tuple is one struct/altneu time, a list of them is a frontier
            values = [values]
        elif not isinstance(values, Iterable):
            raise FrontierError(
                f"a frontier is a time or a list of times of the collection's time type "
                f"({ttype.describe()}); got {type(values).__name__} {values!r}"
            )
        vals = list(values)
        if not vals:
            raise FrontierError(
                "an empty frontier would mean 'no future times'; pass at least one time "
                "(or frontier=None to consolidate without advancing)"
            )
        return cls(ttype, (ttype.encode_value(v) for v in vals))

    def insert(self, t: Leaves) -> bool:
        t = tuple(int(x) for x in t)
        if any(self.ttype.leq(e, t) for e in self._elements):
            return False
        self._elements = [e for e in self._elements if not self.ttype.leq(t, e)]
        self._elements.append(t)
        return True

    @property
    def elements(self) -> list[Leaves]:
        return sorted(self._elements)

    def less_equal(self, t: Leaves) -> bool:
        """True when some frontier element is ``<= t`` (``t`` is in the frontier's future)."""
        return any(self.ttype.leq(e, t) for e in self._elements)

    def advance(self, t: Leaves) -> Leaves:
        return self.ttype.advance(t, self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.elements)

    def __repr__(self) -> str:
        return f"Antichain({[self.ttype.decode_value(e) for e in self.elements]!r})"


def lub_closure(ttype: TimeType, times: Iterable[Leaves]) -> list[Leaves]:
    """All joins of non-empty subsets of ``times`` (closing under pairwise join)."""
    closed = set(tuple(t) for t in times)
    frontier = list(closed)
    while frontier:
        new = set()
        items = list(closed)
        for a in frontier:
            for b in items:
                j = ttype.join(a, b)
                if j not in closed:
                    new.add(j)
        closed |= new
        frontier = list(new)
    return list(closed)


def topological(ttype: TimeType, times: Iterable[Leaves]) -> list[Leaves]:
    """Sort times in a linear extension of the partial order."""
    ts = list(times)
    if ttype.is_total():
        return sorted(ts)
    # the number of elements strictly below is strictly monotone along <
    below = {t: sum(1 for u in ts if u != t and ttype.leq(u, t)) for t in ts}
    return sorted(ts, key=lambda t: (below[t], t))
