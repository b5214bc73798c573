"""``import spark_differential`` stays cheap: the heavy libraries load on first use.

Each timing is one fresh interpreter that times its own import (so interpreter
start-up is not counted); the two imports alternate, several times, and their
medians are compared.  Bytecode caching is on (in a temporary cache directory), as
it is for an installed package, and one warm-up run fills the cache first.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

from pyspark import cloudpickle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("numpy", "pandas", "pyarrow", "duckdb", "numba", "sqlglot")
REPEATS = 9


def _env(cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _import_seconds(module: str, env: dict[str, str]) -> float:
    # CPU seconds, not wall: the suite runs in two processes beside this one (pytest-xdist), and
    # wall seconds of a 0.2 s import under that load varied 2x between repeats
    code = f"import time; t = time.process_time(); import {module}; print(time.process_time() - t)"
    return float(_run(code, env))


def test_import_time_within_1_5x_of_pyspark_sql() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = _env(cache)
        _run("import spark_differential; print('warm')", env)  # fills the bytecode cache for both
        times: dict[str, list[float]] = {"pyspark.sql": [], "spark_differential": []}
        for _ in range(REPEATS):
            for module in times:
                times[module].append(_import_seconds(module, env))
    base, ours = statistics.median(times["pyspark.sql"]), statistics.median(times["spark_differential"])
    assert ours <= 1.5 * base, f"import spark_differential {ours:.3f}s vs import pyspark.sql {base:.3f}s: {times}"


def test_heavy_libraries_load_on_first_use() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = _env(cache)
        code = (
            "import sys; import spark_differential as sd; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
        )
        assert _run(code, env) == "[]"
        # the stand-ins import the real module when first used
        code = (
            "import sys; from spark_differential.kernels import stab; "
            "assert 'pyarrow' not in sys.modules; "
            "ok = stab.exact_type(stab.pa.int64()) and not stab.exact_type(stab.pa.float64()); "
            "print(ok, 'pyarrow' in sys.modules, stab.pa.Table is sys.modules['pyarrow'].Table)"
        )
        assert _run(code, env) == "True True True"


def test_operators_and_the_engine_load_at_first_use() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = _env(cache)
        code = (
            "import sys; import spark_differential as sd; from pyspark.sql import DataFrame; "
            "loaded = lambda: sorted({m.split('.')[1] for m in sys.modules if m.startswith('spark_differential.')}); "
            "before = loaded(); DataFrame.dd_join; sd.sql; "
            "print(before, 'spark_differential.operators.join' in sys.modules, 'spark_differential.sql.compile' in sys.modules)"
        )
        assert _run(code, env) == "['core', 'engine', 'errors', 'kernels'] True True"


def test_lazy_modules_pickle_as_the_real_module() -> None:
    from spark_differential.core.lazy import lazy

    m = lazy("json")
    assert cloudpickle.loads(cloudpickle.dumps(m)) is sys.modules["json"]
    assert m.dumps([1]) == "[1]"  # usable after loading, and still picklable
    assert cloudpickle.loads(cloudpickle.dumps(m)) is sys.modules["json"]

    def uses(x: object) -> str:  # pickled by value, with the stand-in in its closure
        return m.dumps(x)

    assert cloudpickle.loads(cloudpickle.dumps(uses))({"a": 1}) == '{"a": 1}'
