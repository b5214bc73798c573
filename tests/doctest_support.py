"""Finding the package's docstring examples and its public API (tests/test_doctests.py, tests/test_docs_api.py).

:func:`collect` gathers every docstring with examples from every module of
``spark_differential`` and every script in ``examples/`` (module, class, function
and method docstrings) with :class:`doctest.DocTestFinder`.  Walking the package
imports every module, so the ones the package itself only loads on first use are
covered as well, and modules, functions and methods added later are picked up
without a change here.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
from types import ModuleType
from typing import Any

import spark_differential as sd

# modules installed inside the package from another directory (setup.cfg's package_dir)
EXTRA_MODULES = ["spark_differential._sql"]
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def package_modules() -> list[ModuleType]:
    """The package and every module below it, imported."""
    modules: list[ModuleType] = [sd]
    failed: list[str] = []
    for info in pkgutil.walk_packages(sd.__path__, sd.__name__ + ".", onerror=failed.append):
        modules.append(importlib.import_module(info.name))
    assert not failed, f"could not import packages {failed}"
    modules += [importlib.import_module(name) for name in EXTRA_MODULES]
    return modules


def example_modules() -> list[ModuleType]:
    """The scripts in ``examples/``, imported as ``examples.<name>`` without running their ``main``."""
    modules: list[ModuleType] = []
    for file in sorted(os.listdir(EXAMPLES)):
        if not file.endswith(".py"):
            continue
        name = f"examples.{file[:-3]}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, file))
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses look their module up while the script runs
            path = list(sys.path)
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path[:] = path  # the scripts put examples/ on sys.path for their helpers
        modules.append(sys.modules[name])
    return modules


def registered_methods() -> dict[str, Any]:
    """The methods importing the package set on ``DataFrame`` (``sd.METHODS``), by name."""
    from pyspark.sql import DataFrame

    return {name: getattr(DataFrame, name) for name in sd.METHODS}  # loads a deferred method


def collect() -> list[doctest.DocTest]:
    """Every docstring with examples (package, examples/, DataFrame methods), one DocTest each, by name."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: dict[str, doctest.DocTest] = {}
    for module in package_modules() + example_modules():
        for test in finder.find(module, module.__name__):
            if test.examples:
                found.setdefault(test.name, test)
    # A registered method wraps the operator's function, whose docstring is found above
    # in the function's own module; a method whose docstring was not (say, one whose
    # function lives outside the package's modules) is collected under its DataFrame name.
    docs = {t.docstring for t in found.values()}
    for name, method in registered_methods().items():
        target = getattr(method, "__wrapped__", method)
        if not target.__doc__ or target.__doc__ in docs:
            continue
        module = inspect.getmodule(target)
        globs = dict(vars(module)) if module is not None else {}
        for test in finder.find(target, f"DataFrame.{name}", module=False, globs=globs):
            if test.examples:
                found.setdefault(test.name, test)
    return sorted(found.values(), key=lambda t: t.name)


def public_api() -> dict[str, Any]:
    """Every public function and method, by the name a user calls it by.

    That is: the functions in ``sd.__all__`` (and in the ``__all__`` of modules listed
    there), the public methods of the non-exception classes listed there, the functions
    of :mod:`spark_differential.algorithms`, and the methods registered on DataFrame.
    """
    from spark_differential import algorithms

    api: dict[str, Any] = {}

    def add(prefix: str, owner: Any, names: list[str]) -> None:
        for name in names:
            obj = getattr(owner, name)
            if inspect.ismodule(obj):
                add(f"{prefix}{name}.", obj, list(getattr(obj, "__all__", [])))
            elif inspect.isclass(obj):
                if issubclass(obj, BaseException):
                    continue
                for attr, value in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                        api[f"{prefix}{name}.{attr}"] = getattr(obj, attr)
            elif callable(obj):
                api[prefix + name] = obj

    add("sd.", sd, list(sd.__all__))
    names = getattr(algorithms, "__all__", None) or [
        n
        for n, v in vars(algorithms).items()
        if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == algorithms.__name__
    ]
    add("algorithms.", algorithms, list(names))
    for name, method in registered_methods().items():
        api[f"DataFrame.{name}"] = method
    return api


def docstring_of(obj: Any) -> str | None:
    """The docstring an object's examples are collected from (a wrapper's wrapped function's)."""
    return getattr(obj, "__wrapped__", obj).__doc__
