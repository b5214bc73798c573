"""Every docstring example in the ``spark_differential`` package runs and prints what it shows.

The examples are found by :func:`doctest_support.collect` in every module of the
package and every script in ``examples/`` (module, class, function and method
docstrings; lazily imported modules and the methods registered on DataFrame
included).  Each docstring is one test, run with the shared test SparkSession:
``spark`` and the package as ``sd`` are in its namespace, and ``sd.session()`` inside
an example returns that same session.  No option flags are set here: an example that
needs one says so with a ``# doctest:`` directive.
"""

from __future__ import annotations

import copy
import doctest

import pytest
from doctest_support import collect, docstring_of, example_modules, package_modules, registered_methods

import spark_differential as sd

DOCTESTS = collect()


def test_docstring_examples_are_collected():
    """The walk reaches the modules loaded on first use and the registered DataFrame methods."""
    names = {t.name for t in DOCTESTS}
    docs = {t.docstring for t in DOCTESTS}
    for name, method in registered_methods().items():
        assert docstring_of(method) in docs, f"the example of DataFrame.{name} is not collected"
    assert "spark_differential.loop.iterate.dd_iterate" in names
    assert "spark_differential.kernels.gather.gather" in names
    # every module of the package, those of its subpackages too
    assert "spark_differential.intask.iteration" in {m.__name__ for m in package_modules()}
    assert "examples.flagship" in {m.__name__ for m in example_modules()}


def _probe(df):  # type: ignore[no-untyped-def]
    """A DataFrame method whose function lives outside the package's modules.

    >>> 6 * 7
    42
    """
    return df


def test_a_registered_method_from_outside_the_package_is_collected(monkeypatch):
    from spark_differential.core import registration

    name = "dd_doctest_probe"
    monkeypatch.setitem(sd.METHODS, name, _probe)
    registration.register({name: _probe})
    try:
        tests = {t.name: t for t in collect()}
    finally:
        registration.unregister([name])
    assert tests[f"DataFrame.{name}"].examples[0].want == "42\n"


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example(test: doctest.DocTest, spark):
    test = copy.copy(test)
    test.globs = {**test.globs, "spark": spark, "sd": sd}
    runner = doctest.DocTestRunner(verbose=False, optionflags=0)
    report: list[str] = []
    result = runner.run(test, out=report.append, clear_globs=True)
    assert result.attempted == len(test.examples)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed:\n" + "".join(report)
