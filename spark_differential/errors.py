"""The exception hierarchy of spark_differential.

Every error the library raises on purpose is a :class:`SparkDifferentialError`.
Errors about the *shape* of an input (missing ``time``/``diff``, wrong column
types, mismatched time types) are raised while the operator is being built, before
any Spark job runs.  Errors that can only be seen in the data (a null time, a user
function raising for one key) are raised from inside the job with a message that
names the operator and, where there is one, the offending key.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator


class SparkDifferentialError(Exception):
    """Base class of every error raised by spark_differential."""


class CollectionError(SparkDifferentialError, ValueError):
    """A DataFrame is not a valid collection of updates ``(data…, time, diff)``."""


class MissingColumnError(CollectionError):
    """A required column (``time``, ``diff``, a key column…) is absent."""


class TimeTypeError(CollectionError, TypeError):
    """The ``time`` column has a type that is not a supported lattice."""


class DiffTypeError(CollectionError, TypeError):
    """The ``diff`` column is not of an integral type."""


class NullValueError(CollectionError):
    """A ``time`` or ``diff`` value is null."""


class ChangeDataError(CollectionError):
    """A change log (change feed, CDC envelope, SCD2 interval) row cannot be read as updates."""


class NegativeMultiplicityError(CollectionError):
    """A row's accumulated multiplicity is negative where only non-negative counts make sense."""


class TimeTypeMismatchError(SparkDifferentialError, TypeError):
    """Two collections combined by one operator have different time types."""


class SchemaMismatchError(SparkDifferentialError, ValueError):
    """Collections combined by one operator have incompatible data columns."""


class ReservedNameError(CollectionError):
    """A column uses the reserved ``_sd_`` prefix."""


class FrontierError(SparkDifferentialError, ValueError):
    """A frontier or time value does not fit the collection's time type."""


class UserFunctionError(SparkDifferentialError, RuntimeError):
    """A user-supplied function (``dd_reduce`` ``func``, ``dd_threshold``…) failed."""


class OutputSchemaError(UserFunctionError):
    """A user-supplied function returned rows that do not match the declared schema."""


class IterationError(SparkDifferentialError, RuntimeError):
    """``dd_iterate`` was used in a way it cannot support."""


class LoopRuleError(IterationError):
    """A ``dd_iterate`` body broke a rule of loops: it rewrote ``time``, or combined the loop
    collection with another DataFrame by plain DataFrame methods (``unionByName``…)
    instead of ``dd_*`` operators."""


class IterationLimitExceeded(IterationError):
    """``dd_iterate`` did not reach a fixed point within ``max_iterations``."""

    def __init__(self, message: str, *, iterations: int, changing: int) -> None:
        super().__init__(message)
        self.iterations = iterations
        self.changing = changing

    @classmethod
    def of(cls, max_iterations: int | None, iterations: int, changing: int) -> IterationLimitExceeded:
        """The error of a loop stopped by ``max_iterations`` with ``changing`` changes still happening."""
        return cls(
            f"dd_iterate: no fixed point within max_iterations={max_iterations}: iteration {iterations} still "
            f"produced {changing} changes. Raise max_iterations, or check that the body converges "
            "(e.g. distances that grow forever around a cycle).",
            iterations=iterations,
            changing=changing,
        )


class ConfigurationError(SparkDifferentialError, ValueError):
    """A ``spark_differential.*`` Spark configuration value that cannot be used."""


class LateUpdateError(SparkDifferentialError, ValueError):
    """An incremental view received updates at times its frontier already closed (see ``sd.incremental``)."""


class ExchangeError(SparkDifferentialError, RuntimeError):
    """A task of a loop run in key partitions could not reach another, or another ended early."""


class IncrementalStateError(SparkDifferentialError, RuntimeError):
    """An incremental view's stored state cannot be used, or the view was used in a way it cannot support."""


class OptionError(SparkDifferentialError, ValueError):
    """An operator's option (an argument other than its inputs and their columns) has a value it cannot use."""


class SqlError(SparkDifferentialError, ValueError):
    """A SQL query given to :func:`spark_differential.sql` is malformed or unsupported."""


class EnvironmentError_(SparkDifferentialError, RuntimeError):
    """The environment cannot run Spark (for example, no Java)."""


_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


def _library_classes() -> dict[str, type[SparkDifferentialError]]:
    """Every error class of the library by name (subclasses first found last)."""
    out: dict[str, type[SparkDifferentialError]] = {}
    todo: list[type[SparkDifferentialError]] = [SparkDifferentialError]
    while todo:
        cls = todo.pop()
        out[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return out


def from_job_failure(exc: BaseException) -> SparkDifferentialError | None:
    """The library error a failed Spark job carries in its message, if any.

    Errors raised inside tasks (a null time caught by the plan's guard, a user
    function failing in a kernel) reach the driver wrapped in PySpark exceptions
    (``PythonException``, ``SparkRuntimeException``, ``Py4JJavaError``) whose message
    holds ``<ErrorClass>: <message>``.  This reads the last such line back into an
    instance of that class (the exception raised last is the one that failed the
    task; a chained cause such as the user's own ``ValueError`` comes before it).
    ``None`` when ``exc`` carries no library error.
    """
    classes = _library_classes()
    names = "|".join(sorted((re.escape(n) for n in classes), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w])(?:spark_differential\.errors\.)?({names}): (.*)")
    found = None
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # the exception and its causes
        seen.add(id(e))
        for m in pattern.finditer(str(e)):
            found = m
        if found is not None:
            break
        e = e.__cause__ or e.__context__
    if found is None:
        return None
    cls = classes[found.group(1)]
    message = _SQLSTATE.sub("", found.group(2).strip())
    if cls is IterationLimitExceeded:
        return IterationError(message)  # its counts are not in the text
    err = cls(message)
    err.__cause__ = exc
    return err


def unwrap(exc: BaseException) -> SparkDifferentialError | None:
    """The library's own exception inside an exception from a Spark action, or ``None``.

    Errors that only the data can reveal (a null ``time``, a ``dd_reduce`` function
    failing for one key) happen inside Spark tasks; PySpark reports them at the
    user's action (``collect``, ``show``, ``write``…) wrapped in its own exception
    types, whose message holds the library's.  ``unwrap`` gives back an instance of
    the library class (e.g. :class:`NullValueError`, :class:`UserFunctionError`)
    with the library's message; its ``__cause__`` is the PySpark exception.  A library
    error is returned as it is.

    >>> import spark_differential as sd
    >>> spark = sd.session()
    >>> df = spark.createDataFrame([("a", None, 1)], "x string, time long, diff long")
    >>> try:
    ...     df.dd_count("x").collect()
    ... except Exception as e:
    ...     err = sd.unwrap(e)
    >>> type(err).__name__
    'NullValueError'
    """
    if isinstance(exc, SparkDifferentialError):
        return exc
    return from_job_failure(exc)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Within the block, errors of the library raised inside Spark jobs surface as themselves.

    An exception leaving the block that carries a library error (see :func:`unwrap`)
    is replaced by that error (same class and message, the PySpark exception as its
    ``__cause__``), so ``except UserFunctionError`` and friends catch it; any other
    exception passes unchanged.

    >>> import spark_differential as sd
    >>> from spark_differential.errors import NullValueError
    >>> spark = sd.session()
    >>> df = spark.createDataFrame([("a", None, 1)], "x string, time long, diff long")
    >>> try:
    ...     with sd.raising():
    ...         df.dd_count("x").collect()
    ... except NullValueError as e:
    ...     print(str(e).split(";")[0])
    dd_count: a null time reached the operator
    """
    try:
        yield
    except SparkDifferentialError:
        raise
    except Exception as e:
        mine = from_job_failure(e)
        if mine is None:
            raise
        raise mine from e


__all__ = [
    "ChangeDataError",
    "CollectionError",
    "DiffTypeError",
    "EnvironmentError_",
    "FrontierError",
    "ExchangeError",
    "IncrementalStateError",
    "IterationError",
    "IterationLimitExceeded",
    "LoopRuleError",
    "MissingColumnError",
    "NegativeMultiplicityError",
    "NullValueError",
    "OutputSchemaError",
    "OptionError",
    "ReservedNameError",
    "SchemaMismatchError",
    "SparkDifferentialError",
    "SqlError",
    "TimeTypeError",
    "TimeTypeMismatchError",
    "UserFunctionError",
]
