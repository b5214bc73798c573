"""Generate docs/api.md from the public API's docstrings.

Run ``python docs/gen_api.py`` after changing a public docstring;
tests/test_docs_api.py fails while docs/api.md is out of date.
"""

from __future__ import annotations

import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SECTIONS = [
    ("Sessions and collections", ["session", "collection", "from_snapshots", "from_upserts", "dd_as_of", "dd_consolidate"]),
    ("Change data in and out", ["from_change_feed", "from_cdc", "from_intervals", "dd_to_intervals"]),
    ("Linear operators", ["dd_negate", "dd_concat"]),
    ("Joins", ["dd_join", "dd_semijoin", "dd_antijoin"]),
    ("Reductions", ["dd_reduce", "dd_count", "dd_sum", "dd_min", "dd_max", "dd_distinct", "dd_threshold", "dd_top_k"]),
    ("Iteration", ["dd_iterate"]),
    ("Calculus and as-of joins", ["differentiate", "integrate", "dd_delay", "dd_asof_join", "dd_merge_asof", "sql"]),
    ("Arrangements", ["dd_arrange"]),
    ("Errors raised inside Spark jobs", ["raising", "unwrap"]),
]
ALGORITHMS = ["bfs", "reachability", "connected_components", "triangles", "triangles_naive"]


def render() -> str:
    sys.path.insert(0, os.path.dirname(HERE))
    import spark_differential as sd
    from spark_differential import algorithms, errors

    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`. Every `dd_*` function is also a",
        "DataFrame method (`df.dd_join(other, on=...)`, the DataFrame being the first argument) and",
        "works with `df.transform(sd.dd_join, other, on=...)`. Examples assume `import spark_differential as sd`;",
        "every example runs as a doctest in the test suite (`tests/test_doctests.py`) and prints what it shows.",
        "",
    ]

    def entry(qual: str, fn: object) -> None:
        target = getattr(fn, "__wrapped__", fn)
        try:
            sig = "" if isinstance(target, property) else str(inspect.signature(target))
        except (TypeError, ValueError):
            sig = "(...)"
        out.append(f"### `{qual}{sig}`")
        out.append("")
        doc = inspect.getdoc(target) or "(undocumented)"
        out.append("```text\n" + doc + "\n```")
        out.append("")

    for title, names in SECTIONS:
        out += [f"## {title}", ""]
        for n in names:
            fn = getattr(sd, n)
            entry(("" if n.startswith("dd_") or n in ("differentiate", "integrate") else "sd.") + n, fn)
    out += ["## Incremental views", "", "See [incremental.md](incremental.md).", ""]
    entry("sd.incremental", sd.incremental)
    for n in ("update", "frontier", "batch_id", "foreach_batch", "break_lock"):
        entry(f"IncrementalView.{n}", getattr(sd.IncrementalView, n))
    out += ["## spark_differential.algorithms", ""]
    for n in ALGORITHMS:
        entry(f"algorithms.{n}", getattr(algorithms, n))
    out += ["## Errors", "", "All errors derive from `SparkDifferentialError`.", ""]
    for name in errors.__all__:
        cls = getattr(errors, name)
        base = ", ".join(b.__name__ for b in cls.__bases__)
        out.append(f"* `{name}({base})` — {inspect.getdoc(cls).splitlines()[0] if inspect.getdoc(cls) else ''}")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    with open(os.path.join(HERE, "api.md"), "w", encoding="utf-8") as f:
        f.write(render())
    print("wrote docs/api.md")
