"""The layout keeps the architecture docs/architecture.md draws.

Read from the source (an AST walk, imports written inside functions counted): the
package's modules form no import cycle; a package imports only the layers below it (the
table of docs/architecture.md); no private name (``_x``) is imported from a module of
another subpackage; no module is over 800 lines and no class or function over 300; and no
package-internal import is written inside a function (only heavy third-party libraries
are imported lazily).  The same figures as ``../shared/tools/archcheck.py``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "spark_differential"
PKG = "spark_differential"
# bottom first: a package may import its own modules and those of the packages before it
LAYERS = ["errors", "core", "kernels", "trace", "engine", "intask", "loop", "io", "operators", "incremental", "sql",
          "algorithms", ""]
MAX_MODULE, MAX_DEFINITION = 800, 300


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    """The package (layer) of a module: ``spark_differential.loop.state`` is in ``loop``; the
    package's own ``__init__`` is the API (``""``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(module: str) -> list[tuple[str, str, bool]]:
    """``(imported module, imported name, written inside a function)`` of every package-internal import."""
    tree = ast.parse(MODULES[module].read_text())
    top = {id(n) for n in tree.body}
    for n in tree.body:  # ``if TYPE_CHECKING:`` imports are module-level (read by type checkers only)
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING":
            top |= {id(i) for i in n.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != PKG and not target.startswith(PKG + "."):
                continue
            for a in node.names:
                full = f"{target}.{a.name}"
                out.append((full if full in MODULES else target, a.name, id(node) not in top))
        elif isinstance(node, ast.Import):
            out += [(a.name, "", id(node) not in top) for a in node.names if a.name.startswith(PKG)]
    return out


def test_no_import_cycle() -> None:
    edges = {m: {t for t, _, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            # the package's __init__ importing its modules is not a cycle worth the name
            comp = [c for c in comp if MODULES[c].name != "__init__.py"]
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in MODULES:
        if m not in index:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"


def test_layers_import_only_below() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = defaultdict(set)
    for m in MODULES:
        mine = _layer(m)
        for target, _, _ in _imports(m):
            theirs = _layer(target)
            if theirs != mine and rank.get(theirs, -1) > rank[mine]:
                wrong[m].add(target)
    assert not wrong, f"imports of a higher layer (docs/architecture.md): {dict(wrong)}"


def test_no_private_name_across_subpackages() -> None:
    bad = []
    for m in MODULES:
        for target, name, _ in _imports(m):
            same = m.count(".") >= 2 and m.rsplit(".", 1)[0] == target.rsplit(".", 1)[0]
            if name.startswith("_") and not name.startswith("__") and target != m and not same \
                    and f"{target}.{name}" not in MODULES:
                bad.append(f"{m} <- {target}.{name}")
    assert not bad, f"private names imported across subpackages: {bad}"


def test_no_package_import_inside_a_function() -> None:
    inner = sorted({f"{m} <- {t}" for m in MODULES for t, _, nested in _imports(m) if nested})
    assert not inner, f"package-internal imports written inside functions: {inner}"


def test_module_and_definition_sizes() -> None:
    big = {m: p.read_text().count("\n") for m, p in MODULES.items()}
    over = {m: n for m, n in big.items() if n > MAX_MODULE}
    assert not over, f"modules over {MAX_MODULE} lines: {over}"
    defs = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_DEFINITION:
                    defs.append((f"{m}.{node.name}", n))
    assert not defs, f"classes or functions over {MAX_DEFINITION} lines: {defs}"
