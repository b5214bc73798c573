"""The DataFrame methods of SPEC section 3 and how they are registered.

Every method exists on ``pyspark.sql.DataFrame`` (so on classic and Spark Connect
DataFrames alike), is the same operator as the plain function (usable through
``df.transform``), and ``register`` refuses to shadow an attribute that a DataFrame
class already defines.
"""

from __future__ import annotations

import inspect

import pytest
from helpers import rows_of
from oracle import assert_updates_equal
from pyspark.sql import DataFrame

import spark_differential as sd
from spark_differential.core import registration
from spark_differential.errors import SparkDifferentialError

SECTION3_METHODS = [
    "dd_consolidate",
    "dd_as_of",
    "dd_negate",
    "dd_concat",
    "dd_join",
    "dd_semijoin",
    "dd_antijoin",
    "dd_reduce",
    "dd_count",
    "dd_sum",
    "dd_min",
    "dd_max",
    "dd_distinct",
    "dd_threshold",
    "dd_iterate",
    "differentiate",
    "integrate",
    "dd_asof_join",
]
SECTION3_FUNCTIONS = ["session", "collection", "from_snapshots"]


@pytest.mark.parametrize("name", SECTION3_METHODS)
def test_method_exists_and_wraps_the_function(name: str) -> None:
    method = getattr(DataFrame, name)
    fn = getattr(sd, name)
    assert callable(method) and callable(fn)
    assert getattr(method, "__wrapped__", None) is fn
    assert method.__doc__ == fn.__doc__ and method.__doc__
    # the plain function takes the DataFrame first
    first = next(iter(inspect.signature(fn).parameters))
    assert first in ("df", "left", "orders", "self"), first


def test_module_functions() -> None:
    for name in SECTION3_FUNCTIONS:
        assert callable(getattr(sd, name))
    assert set(SECTION3_METHODS) <= set(sd.__all__)


def test_methods_on_a_live_dataframe(spark) -> None:
    df = spark.createDataFrame([(1, "a", 0, 1)], "k long, v string, time long, diff long")
    for name in SECTION3_METHODS:
        assert callable(getattr(df, name)), name
    try:
        from pyspark.sql.classic.dataframe import DataFrame as Classic
    except ImportError:  # pragma: no cover - older PySpark
        return
    assert isinstance(df, Classic)


def test_transform_equals_method(spark) -> None:
    left = spark.createDataFrame([(1, "a", 0, 1), (2, "b", 1, 1), (1, "c", 2, -1)], "k long, v string, time long, diff long")
    right = spark.createDataFrame([(1, 10, 1, 1), (2, 20, 0, 2)], "k long, w long, time long, diff long")
    via_transform = left.transform(sd.dd_join, right, on="k")
    via_method = left.dd_join(right, on="k")
    via_function = sd.dd_join(left, right, "k")
    expected = [((1, "a", 10), 1, 1), ((2, "b", 20), 1, 2), ((1, "c", 10), 2, -1)]
    assert via_transform.columns == via_method.columns == ["k", "v", "w", "time", "diff"]
    for out in (via_transform, via_method, via_function):
        assert_updates_equal(rows_of(out), expected)
    counted = left.transform(sd.dd_count, by="k")
    assert_updates_equal(rows_of(counted), rows_of(left.dd_count("k")))


def _fake(df: DataFrame) -> str:
    return "fake"


def test_register_adds_and_removes_a_method() -> None:
    name = "dd_sd_test_fake_method"
    assert not hasattr(DataFrame, name)
    try:
        registration.register({name: _fake})
        assert getattr(DataFrame, name).__wrapped__ is _fake
        registration.register({name: _fake})  # re-registering our own method is fine
    finally:
        registration.unregister([name])
    assert not hasattr(DataFrame, name)


def test_register_refuses_to_shadow_a_subclass_attribute() -> None:
    name = "dd_sd_test_taken"
    try:
        from pyspark.sql.classic.dataframe import DataFrame as Classic
    except ImportError:  # pragma: no cover - older PySpark
        Classic = DataFrame  # noqa: N806
    setattr(Classic, name, lambda self: "pyspark's own")
    try:
        with pytest.raises(SparkDifferentialError) as e:
            registration.register({name: _fake})
        assert f"cannot add DataFrame.{name}" in str(e.value)
        assert "df.transform" in str(e.value)
        assert name not in DataFrame.__dict__  # nothing was set
    finally:
        delattr(Classic, name)
        registration.unregister([name])


def test_register_refuses_to_shadow_a_base_attribute() -> None:
    with pytest.raises(SparkDifferentialError, match="already defines it"):
        registration.register({"select": _fake})
    assert DataFrame.select is not None and getattr(DataFrame.select, "__wrapped__", None) is not _fake


def test_connect_import_calling_sys_exit_does_not_end_the_process(monkeypatch) -> None:
    """pyspark's Connect dependency check calls ``sys.exit`` under ``python -c`` and in
    notebook kernels when an optional package (e.g. zstandard) is missing."""
    import builtins

    from spark_differential.core import registration

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "pyspark.sql.connect.dataframe":
            raise SystemExit(0)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(registration, "_connect_available", lambda: True)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    classes = registration._dataframe_classes(connect=True)
    from pyspark.sql import DataFrame

    assert DataFrame in classes


def test_a_deferred_method_loads_its_module_at_first_lookup() -> None:
    """``import spark_differential`` registers methods without importing their modules; the
    first lookup loads the function and leaves the ordinary method on the class."""
    name = "dd_sd_test_deferred"
    loads: list[int] = []

    def load() -> object:
        loads.append(1)
        return _fake

    try:
        registration.register({name: registration.Deferred(name, load)})
        assert isinstance(DataFrame.__dict__[name], registration.Deferred) and not loads
        method = getattr(DataFrame, name)
        assert method.__wrapped__ is _fake and loads == [1]
        assert DataFrame.__dict__[name] is method  # the descriptor replaced itself
        getattr(DataFrame, name)
        assert loads == [1]
        registration.register({name: registration.Deferred(name, load)})  # registered again: kept
        assert DataFrame.__dict__[name] is method
    finally:
        registration.unregister([name])


def test_every_public_name_is_the_function_of_its_module() -> None:
    import importlib

    for name, module in sd._DEFINED_IN.items():
        assert getattr(sd, name) is getattr(importlib.import_module(module), name), name
    for name in sd.METHODS:
        assert getattr(DataFrame, name).__wrapped__ is getattr(sd, name), name
    assert callable(sd.sql) and callable(sd.incremental)  # not the subpackages of those names
