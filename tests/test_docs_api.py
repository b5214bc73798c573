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
