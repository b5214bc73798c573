"""Adding the collection methods to ``pyspark.sql.DataFrame``, in one place.

Importing :mod:`spark_differential` calls :func:`register`, which sets each method
of SPEC section 3 on the DataFrame base class shared by classic and Spark Connect
DataFrames.  It refuses to replace an attribute that DataFrame (or one of its
subclasses) already has, so a future PySpark method of the same name is never
silently shadowed.

A method may be given as a :class:`Deferred`: its operator module is imported at the
method's first lookup (``import spark_differential`` stays cheap), after which the class
holds the ordinary method.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from spark_differential.core.planning import no_origin_tracking
from spark_differential.errors import SparkDifferentialError

_MARK = "__spark_differential__"


def _connect_available() -> bool:
    import importlib.util

    # importing pyspark's Connect modules without its gRPC dependencies prints warnings
    return all(importlib.util.find_spec(m) is not None for m in ("grpc", "grpc_status", "google.protobuf"))


_CONNECT_MODULE = "pyspark.sql.connect.dataframe"


def _dataframe_classes(connect: bool = False) -> list[type]:
    """The DataFrame base class and the subclasses whose attributes a method must not shadow.

    Spark Connect's class is looked at only when its module is already loaded (or
    ``connect``): importing it loads gRPC and protobuf, seconds that ``import
    spark_differential`` must not cost.  ``sd.session(remote=...)`` registers again
    with ``connect=True`` once the Connect client is loaded."""
    from pyspark.sql import DataFrame

    classes: list[type] = [DataFrame]
    modules = [("pyspark.sql.classic.dataframe", "DataFrame")]
    if (connect or _CONNECT_MODULE in sys.modules) and _connect_available():
        modules.append((_CONNECT_MODULE, "DataFrame"))
    for mod, name in modules:
        try:
            module = __import__(mod, fromlist=[name])
            classes.append(getattr(module, name))
        except (Exception, SystemExit):
            # Connect needs optional deps (grpc, zstandard, ...); absence is fine.  Under
            # ``python -c`` or a notebook kernel pyspark's dependency check calls
            # ``sys.exit`` instead of raising, which must not end the user's process.
            continue
    return classes


def _as_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        # the plan is built without PySpark's per-call origin tracking (about ten py4j
        # round trips per Column function; see spark_differential.core.planning)
        with no_origin_tracking():
            return fn(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__qualname__ = f"DataFrame.{fn.__name__}"
    method.__doc__ = fn.__doc__
    method.__wrapped__ = fn  # type: ignore[attr-defined]
    setattr(method, _MARK, True)
    return method


class Deferred:
    """A method registered before its function is imported.

    ``load`` imports and returns the function.  The first lookup of the method (on a
    DataFrame or its class) replaces this descriptor by the method itself, so from then on
    ``__doc__``, ``__wrapped__`` and the signature are the function's."""

    def __init__(self, name: str, load: Callable[[], Callable[..., Any]]) -> None:
        self.name = name
        self.load = load
        setattr(self, _MARK, True)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        method = _as_method(self.load())
        holder = next(c for c in (owner or type(obj)).__mro__ if c.__dict__.get(self.name) is self)
        setattr(holder, self.name, method)
        return method if obj is None else method.__get__(obj, owner)

    def __repr__(self) -> str:
        return f"<DataFrame.{self.name}, loaded on first use>"


_REGISTERED: dict[str, Callable[..., Any] | Deferred] = {}  # every method registered so far, by name


def register(methods: dict[str, Callable[..., Any] | Deferred], connect: bool = False) -> None:
    """Set ``methods`` on ``pyspark.sql.DataFrame``; refuse to shadow foreign attributes
    (of Spark Connect's DataFrame too when it is loaded, or ``connect``)."""
    _REGISTERED.update(methods)
    classes = _dataframe_classes(connect)
    base = classes[0]
    for name, fn in methods.items():
        for cls in classes:
            existing = cls.__dict__.get(name)
            if existing is not None and not getattr(existing, _MARK, False):
                raise SparkDifferentialError(
                    f"spark_differential cannot add DataFrame.{name}: {cls.__module__}.{cls.__name__} already "
                    "defines it. Use the plain function instead (spark_differential."
                    f"{name}(df, ...) or df.transform(spark_differential.{name}, ...))."
                )
        current = base.__dict__.get(name)
        if isinstance(fn, Deferred) and getattr(current, _MARK, False):
            continue  # registered already (and perhaps loaded): keep it
        setattr(base, name, fn if isinstance(fn, Deferred) else _as_method(fn))


def register_again(connect: bool = False) -> None:
    """:func:`register` every method registered so far again (``sd.session(remote=...)``, once
    the Connect client is loaded: its DataFrame class is then checked too)."""
    register(dict(_REGISTERED), connect=connect)


def unregister(names: list[str]) -> None:
    """Remove methods set by :func:`register` (used by tests)."""
    from pyspark.sql import DataFrame

    for name in names:
        _REGISTERED.pop(name, None)
        if getattr(DataFrame.__dict__.get(name), _MARK, False):
            delattr(DataFrame, name)
