"""Deferred imports of the heavy libraries (numpy, pyarrow, pandas, duckdb, numba, sqlglot).

``np = lazy("numpy")`` binds a stand-in that imports the module on the first
attribute access and from then on answers from a copy of the module's namespace,
so ``import spark_differential`` costs little more than ``import pyspark.sql``
and the kernels pay for their libraries only when they first run.  A stand-in
pickles as the module's name (cloudpickle ships functions that refer to one to
Spark's Python workers, which import the real module there).
"""

from __future__ import annotations

import importlib
from typing import Any


def _import(name: str) -> Any:
    return importlib.import_module(name)


class LazyModule:
    """A module imported on first attribute access."""

    def __init__(self, name: str) -> None:
        self.__dict__["_lazy_name"] = name

    def _lazy_load(self) -> Any:
        module = importlib.import_module(self.__dict__["_lazy_name"])
        # later lookups find the module's names without going through __getattr__
        self.__dict__.update(module.__dict__)
        return module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__") and attr not in ("__version__", "__file__", "__path__"):
            raise AttributeError(attr)  # copy, pickle and friends probe dunders; do not import for them
        return getattr(self._lazy_load(), attr)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_import, (self.__dict__["_lazy_name"],))

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy(name: str) -> Any:
    """``name`` as a :class:`LazyModule` (typed ``Any``: use it like the module)."""
    return LazyModule(name)


__all__ = ["LazyModule", "lazy"]
