"""DuckDB inside the kernels: one connection per thread of a Python worker, SQL from ``sql/``.

Kernels are plain functions over Arrow tables.  They register their inputs with the
calling thread's DuckDB connection (created on first use, reused for every group the
worker processes), run SQL templates stored in the top-level ``sql/`` directory
(shipped as the ``spark_differential._sql`` package), and hand Arrow back.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from spark_differential.core.lazy import lazy

duckdb = lazy("duckdb")
pa = lazy("pyarrow")


_LOCAL = threading.local()  # per thread: (connection, pid)
_NAMES = itertools.count()


def connection() -> duckdb.DuckDBPyConnection:
    """The calling thread's DuckDB connection (one per thread of a process, recreated
    after a fork): a DuckDB connection must not run two queries at once, and an
    in-task loop runs groups of time chunks on threads of its own."""
    held = getattr(_LOCAL, "held", None)
    if held is None or held[1] != os.getpid():
        threads = int(os.environ.get("SD_DUCKDB_THREADS", "1"))
        mem = os.environ.get("SD_DUCKDB_MEMORY", "2GB")
        held = (duckdb.connect(config={"threads": threads, "memory_limit": mem}), os.getpid())
        _LOCAL.held = held
    return held[0]


def quote(name: str) -> str:
    """A SQL identifier for a column name."""
    return '"' + name.replace('"', '""') + '"'


def cols(names: Sequence[str], prefix: str = "") -> str:
    """A comma-separated list of (optionally qualified) quoted column names."""
    p = f"{prefix}." if prefix else ""
    return ", ".join(p + quote(n) for n in names)


def _template_text(name: str) -> str:
    """The text of ``sql/<name>.sql``: from the installed ``spark_differential._sql``, or,
    when the package is imported from a source tree that is not installed (a checkout or
    an unpacked sdist on ``sys.path``, as Python workers started in its directory do),
    from the ``sql/`` directory beside the package."""
    try:
        return resources.files("spark_differential._sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        beside = Path(__file__).resolve().parent.parent.parent / "sql" / f"{name}.sql"
        if not beside.is_file():
            raise
        return beside.read_text(encoding="utf-8")


@cache
def _template(name: str) -> Template:
    text = _template_text(name)
    # drop comment lines so templates can document themselves
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return Template(body)


def render(name: str, **params: str) -> str:
    """Fill the SQL template ``sql/<name>.sql`` (``$placeholders``)."""
    return _template(name).substitute(**params)


def to_arrow(rel: Any) -> pa.Table:
    if hasattr(rel, "to_arrow_table"):
        return rel.to_arrow_table()
    return rel.fetch_arrow_table()  # pragma: no cover - older duckdb


@contextmanager
def registered(tables: Mapping[str, pa.Table]) -> Iterator[dict[str, str]]:
    """Register Arrow tables under fresh unique names; yields ``{alias: sql_name}``."""
    con = connection()
    names = {alias: f"_sd_in_{alias}_{next(_NAMES)}" for alias in tables}
    try:
        for alias, tbl in tables.items():
            con.register(names[alias], tbl)
        yield names
    finally:
        for n in names.values():
            try:
                con.unregister(n)
            except Exception:  # pragma: no cover - best effort
                pass


def query(sql: str, tables: Mapping[str, pa.Table] | None = None, **params: str) -> pa.Table:
    """Run ``sql`` (``$alias`` placeholders name the registered ``tables``)."""
    con = connection()
    with registered(tables or {}) as names:
        text = Template(sql).substitute(**{**params, **names})
        return to_arrow(con.sql(text))


def run(template: str, tables: Mapping[str, pa.Table] | None = None, **params: str) -> pa.Table:
    """Render ``sql/<template>.sql`` with ``params`` and run it over ``tables``."""
    return query(render(template, **{k: "$" + k for k in (tables or {})}, **params), tables)
