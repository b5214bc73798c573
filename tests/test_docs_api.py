"""docs/api.md is generated from the docstrings and must be current."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_api", os.path.join(ROOT, "docs", "gen_api.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        current = f.read()
    assert current == mod.render(), "docs/api.md is stale: run `python docs/gen_api.py`"


def test_api_reference_lists_every_public_function():
    import inspect as _inspect

    import spark_differential as sd

    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        text = f.read()
    public = [n for n in sd.__all__ if _inspect.isfunction(getattr(sd, n))]
    assert {"from_change_feed", "from_cdc", "from_intervals", "dd_to_intervals"} <= set(public)
    missing = [n for n in public if f"### `{n}(" not in text and f"### `sd.{n}(" not in text]
    assert not missing, f"docs/api.md has no entry for {missing}: add them to SECTIONS in docs/gen_api.py"


def test_every_public_function_has_a_runnable_example():
    """Each public function and method (doctest_support.public_api) has a docstring
    example that tests/test_doctests.py collects and runs."""
    from doctest_support import collect, docstring_of, public_api

    run = {t.docstring for t in collect()}
    api = public_api()
    assert {"sd.collection", "sd.sql", "algorithms.bfs", "DataFrame.dd_join"} <= set(api)
    missing = sorted(name for name, obj in api.items() if docstring_of(obj) not in run)
    assert not missing, f"no runnable `>>>` example in the docstring of {missing}: add one (it runs as a doctest)"
