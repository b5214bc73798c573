"""docs/sql.md, recursive queries: every ``pycon`` example runs and prints what the page shows.

The ``pycon`` blocks of the section "Recursive queries" run in order as one doctest (one
namespace, as a reader would type them), with the shared test session as ``spark``.
"""

from __future__ import annotations

import doctest
import os
import re

import pytest

import spark_differential as sd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _examples() -> str:
    text = open(os.path.join(ROOT, "docs", "sql.md"), encoding="utf-8").read()
    section = text[text.index("\n# Recursive queries") :]
    blocks = re.findall(r"```pycon\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 5, "docs/sql.md lost its recursive-query examples"
    return "\n".join(blocks)


@pytest.mark.connect
def test_recursive_query_examples_in_docs(spark) -> None:
    test = doctest.DocTestParser().get_doctest(_examples(), {"spark": spark, "sd": sd}, "docs/sql.md", "docs/sql.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    result = runner.run(test, out=report.append)
    try:
        assert result.attempted >= 10
        assert result.failed == 0, "".join(report)
    finally:
        spark.conf.unset("spark_differential.sql.maxIterations")
