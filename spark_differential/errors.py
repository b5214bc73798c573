"""The exception hierarchy of spark_differential.

Every error the library raises on purpose is a :class:`SparkDifferentialError`.
Errors about the *shape* of an input (missing ``time``/``diff``, wrong column
types, mismatched time types) are raised while the operator is being built, before
any Spark job runs.  Errors that can only be seen in the data (a null time, a user
function raising for one key) are raised from inside the job with a message that
names the operator and, where there is one, the offending key.
"""

from __future__ import annotations


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


class IncrementalStateError(SparkDifferentialError, RuntimeError):
    """An incremental view's stored state cannot be used, or the view was used in a way it cannot support."""


class SqlError(SparkDifferentialError, ValueError):
    """A SQL query given to :func:`spark_differential.sql` is malformed or unsupported."""


class EnvironmentError_(SparkDifferentialError, RuntimeError):
    """The environment cannot run Spark (for example, no Java)."""


def from_job_failure(exc: BaseException) -> SparkDifferentialError | None:
    """The library error a failed Spark job carries in its message, if any.

    Errors raised inside tasks (a null time caught by the plan's guard, a user
    function failing in a kernel) reach the driver wrapped in PySpark exceptions;
    where the library itself runs a job it re-raises them with their own type.
    """
    text = str(exc)
    for cls in (
        NullValueError,
        ChangeDataError,
        NegativeMultiplicityError,
        OutputSchemaError,
        UserFunctionError,
        LateUpdateError,
    ):
        marker = f"{cls.__name__}: "
        at = text.find(marker)
        if at >= 0:
            line = text[at + len(marker) :].splitlines()[0].strip()
            return cls(line)
    return None


__all__ = [
    "ChangeDataError",
    "CollectionError",
    "DiffTypeError",
    "EnvironmentError_",
    "FrontierError",
    "IncrementalStateError",
    "IterationError",
    "IterationLimitExceeded",
    "LateUpdateError",
    "MissingColumnError",
    "NegativeMultiplicityError",
    "NullValueError",
    "OutputSchemaError",
    "ReservedNameError",
    "SchemaMismatchError",
    "SparkDifferentialError",
    "SqlError",
    "TimeTypeError",
    "TimeTypeMismatchError",
    "UserFunctionError",
]
