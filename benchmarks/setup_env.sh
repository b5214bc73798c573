#!/usr/bin/env bash
# Create (or update) the benchmark virtualenv `.bench-venv` at the repository root.
#
# It holds the project (editable install) plus the peers the benchmarks compare
# against that are NOT project dependencies:
#   * pathway    - for the BFS benchmark (only installed and import-checked here);
#   * dbl-tempo  - Databricks' tempo, whose asofJoin is the union + last() window
#                  formulation; import-checked against the installed pyspark 4.x;
#   * tqdm, psutil (peak RSS), py-spy (profiling the driver / Python workers);
#   * matplotlib - benchmarks/plot.py draws docs/img/*.png from benchmarks/results/*.json.
# DuckDB and pandas come with the project itself.
#
# Peers come from PyPI only.  Everything is resolved in ONE pip call together with
# the project, so pip can only pick peer versions compatible with the project's
# own requirements (installing a peer afterwards let pip pick an old pathway that
# pins sqlglot==10.6, silently breaking the project).  Consequence: pathway caps
# pyarrow (< 26 at the time of writing), so the bench venv may carry an older
# pyarrow than the test venv; the script prints the versions it ended with.
# If pathway cannot be resolved alongside the project, the rest is installed
# without it and that is reported.
#
# Idempotent: when everything already imports, pip is not run at all.  Usage:
#   bash benchmarks/setup_env.sh            # create / update .bench-venv
#   PYTHON=python3.11 bash benchmarks/setup_env.sh
#   FORCE=1 bash benchmarks/setup_env.sh    # rerun pip even if all imports work
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.bench-venv"
PYTHON="${PYTHON:-python3}"

log() { printf '[setup_env] %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV" || { log "FAILED to create the virtualenv"; exit 1; }
else
    log "reusing $VENV ($("$VENV/bin/python" --version 2>&1))"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

quiet_pip() {  # pip, without the noise about unused local index locations
    "${PIP[@]}" "$@" 2>&1 | grep -v -e "is ignored: it is neither" -e "^Looking in"
    return "${PIPESTATUS[0]}"
}

all_present() {
    "$PY" - "$ROOT" >/dev/null 2>&1 <<'PYEOF'
import os
import sys
from importlib.metadata import version

import pathway  # noqa: F401
import psutil  # noqa: F401
import spark_differential
import matplotlib  # noqa: F401
import tempo  # noqa: F401
import tqdm  # noqa: F401

assert os.path.dirname(os.path.dirname(spark_differential.__file__)) == sys.argv[1]
assert int(version("sqlglot").split(".")[0]) >= 25
version("py-spy")
PYEOF
}

if [ -z "${FORCE:-}" ] && all_present; then
    log "project, peers and tools already installed: nothing to do"
else
    PKGS=(-e "$ROOT[progress]" pathway dbl-tempo tqdm psutil py-spy matplotlib)
    log "installing in one resolution: pip install ${PKGS[*]}"
    if ! quiet_pip install -q "${PKGS[@]}"; then
        log "WARNING: could not resolve pathway alongside the project; installing without it"
        quiet_pip install -q -e "$ROOT[progress]" dbl-tempo tqdm psutil py-spy matplotlib || { log "FAILED"; exit 1; }
    fi
fi

log "installed versions and import checks:"
"$PY" - <<'PYEOF'
import importlib
import traceback
from importlib.metadata import version


def ver(d: str) -> str:
    try:
        return version(d)
    except Exception:
        return "not installed"


for d in ("pyspark", "pyarrow", "pandas", "numpy", "duckdb", "sqlglot", "pathway", "dbl-tempo", "tqdm", "psutil", "py-spy", "matplotlib"):
    print(f"  {d:10s} {ver(d)}")

for mod, what in (("spark_differential", "project"), ("pathway", "peer: BFS"), ("tempo", "peer: dbl-tempo asofJoin")):
    try:
        importlib.import_module(mod)
        extra = ""
        if mod == "tempo":
            from tempo import TSDF  # noqa: F401

            extra = " (tempo.TSDF importable)"
        print(f"  import {mod:18s} OK{extra}   [{what}]")
    except BaseException as e:  # pathway may sys.exit on unsupported platforms
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        print(f"  import {mod:18s} FAILED: {last}   [{what}]")
PYEOF
log "done: run benchmarks with $VENV/bin/python benchmarks/<name>.py --quick"
