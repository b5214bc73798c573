"""docs/guide.md: its ``python`` blocks run in order in one namespace, and a block
followed directly by a ``text`` block prints exactly that text."""

from __future__ import annotations

import contextlib
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blocks() -> list[tuple[str, str | None]]:
    text = open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8").read()
    found = list(re.finditer(r"```(\w+)\n(.*?)```\n", text, flags=re.S))
    out = []
    for i, m in enumerate(found):
        if m.group(1) != "python":
            continue
        nxt = found[i + 1] if i + 1 < len(found) else None
        shown = nxt.group(2) if nxt is not None and nxt.group(1) == "text" and text[m.end() : nxt.start()].strip() == "" else None
        out.append((m.group(2), shown))
    return out


def test_guide_python_blocks_run_and_print_what_the_guide_shows(spark) -> None:
    found = blocks()
    assert len(found) >= 6 and sum(1 for _, shown in found if shown is not None) >= 1
    scope: dict = {}
    for code, shown in found:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "docs/guide.md", "exec"), scope)
        if shown is not None:
            assert buf.getvalue().strip() == shown.strip(), f"the guide shows\n{shown}\nbut the code printed\n{buf.getvalue()}"
