"""Incremental views: a query's output kept up to date from stored, compacted state.

On ``(data, time, diff)``: a view over named input collections receives their
updates in successive calls of :meth:`IncrementalView.update`.  Each call brings
new updates of some inputs (at times in the future of the view's frontier ``F``)
and a new frontier ``T`` (``upto``), declaring the inputs complete at every time
that is not in the future of ``T``.  It returns the output updates at the times
that became complete: those in the future of ``F`` but not of ``T``.  For any
split of the inputs into successive updates, the union of everything returned,
consolidated, is the one-shot ``query(all inputs)`` restricted to the times not
in the future of the last ``T``, row for row.

A view runs in one of two **stages**, fixed when it is created (stored in its
manifest):

* **Stage 2** (per-operator traces, :mod:`spark_differential.incremental.traced`): the query is
  called on the *new updates only*; each stateful operator (joins, reductions) keeps
  a trace of each of its inputs under ``path`` and hands its kernel the new updates
  plus the trace rows of the keys they touch, so an update's kernels work on the size
  of the changes.  A top-level ``dd_iterate`` keeps per-iteration traces of the
  operators of its body and runs inside one task on the changes of its inputs
  (:mod:`spark_differential.incremental.loop`).  Chosen when the query's operators allow it
  (seen by calling the query once on empty inputs at the first update).
* **Stage 1** (stored inputs): the query is re-run on the stored (compacted) inputs
  plus the new updates at every update, and the output already returned is
  subtracted; an update costs the live size of the inputs.  Used when the query has
  a ``dd_iterate`` whose body cannot run inside one task (a nested loop, an expression
  the in-task path does not translate), reads changes rather than states (``differentiate``,
  ``dd_delay``, ``dd_asof_join``), or has an operator over another time type; one
  log line says why.  ``stage=1`` asks for it.

What is stored (Parquet, under ``path``), per committed version:

* stage 2: per stateful operator (identified by call order, name and its inputs'
  schemas in kernel form) and input, its trace: the prepared rows (key bucket, key
  hash, keys, data, time leaves, diff) of every update the input received, as its
  last merge (advanced by the frontier of that moment with
  ``advance(t, F) = meet_{f in F} join(t, f)`` and consolidated: seed 004) plus one
  file per update since, merged every ``compact_every`` updates; and ``p``, the
  output changes at times still in the future of the frontier (returned by the
  update whose ``upto`` passes them);
* stage 1: each input: everything received, as its last compaction (advanced and
  consolidated the same way, so it holds about the live size of the input, not its
  history) plus the new updates of each update since (deltas), merged every
  ``compact_every`` updates; and ``P``, the output returned so far, stored the same
  way;
* the output of this version's update (what :meth:`update` returned).

A stage-1 version is two Parquet writes partitioned by a tag column (``new``: the
deltas of all inputs; ``data``: the output and, when due, the merged state).  A
stage-2 version is one write per stateful operator (its new input updates, which
become the newest files of its traces) plus the ``data`` write (output, pending
output, merged traces).

Why stage 2 is exact: see :mod:`spark_differential.incremental.traced` (after ``advance`` a
trace accumulates to the true history at every time in the future of the frontier
``F``; the new updates are in the future of ``F``; so every operator's output
changes are the true ones, all in the future of ``F``).  The changes at times not
in the future of the new frontier ``T`` are final and returned; the others are kept
(``p``) and returned by the update whose frontier passes them, so the union of all
returned outputs telescopes to the one-shot output.

Why stage 1 is exact.  Let ``S`` be the stored inputs (a compaction
to an earlier frontier plus deltas), ``D`` the new updates and ``I`` everything
received.  For every ``g`` in the future of ``F``, ``S ∪ D`` accumulates at ``g``
to what ``I`` does (compaction keeps those accumulations; seed 004), so
``Q = query(S ∪ D)`` accumulates there to what ``query(I)`` does; and ``P``
accumulates there to what the output already returned does.  The part ``R`` of
``query(I)`` at times in the future of ``F`` is supported there and accumulates
there to ``Q - P``.  :func:`lift` turns any collection into the unique collection
supported on the future of ``F`` with the same accumulations there
(inclusion-exclusion over the elements of ``F``), so ``R = lift(Q - P, F)``
exactly; the update returns ``R`` at the times not in the future of ``T``.  Later
updates only add input updates in the future of ``T``, which change the output's
differences only there, so what is returned is final.  (This needs the query's
output at each time to be a function of its inputs' accumulations at that time;
``differentiate``/``dd_asof_join`` are not, and a query using them keeps its
inputs uncompacted, see :func:`incremental`.  In the random tests ``Q - P`` never
had updates outside the future of ``F``, so ``lift`` acts in practice on late
updates moved with ``late="advance"``; it is kept because the argument needs it.)

Each committed version ends with one manifest file (JSON, written to a temporary
name and renamed), naming the stage, the frontier, the state files, the stateful
operators (stage 2) and the last batch id; readers take the newest manifest.  An
update that fails or is killed before its manifest leaves the previous version
current.  A resumed stage-2 view checks that the query calls the same stateful
operators (name and input schemas, in order) and refuses another query with
:class:`IncrementalStateError` (rebuild the view at a new path by replaying its
inputs).  Format 3 manifests; format 2 ones (stage 1 only) are read as stage 1.
"""

from __future__ import annotations

import datetime as _dt
import inspect as _inspect
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF, TIME, inspect, time_leaf_names
from spark_differential.core.history import recording
from spark_differential.core.lattice import Antichain, Leaves, Loop, TimeType, Total, from_spark_type
from spark_differential.core.settings import buckets, shuffle_partitions
from spark_differential.engine import call as seam
from spark_differential.errors import (
    FrontierError,
    IncrementalStateError,
    SchemaMismatchError,
    SparkDifferentialError,
    TimeTypeMismatchError,
    from_job_failure,
)
from spark_differential.incremental import traced as _traces
from spark_differential.incremental.storage import KIND, LOOP, TOTALS, Operator, physical, tag
from spark_differential.intask.sources import estimated_rows
from spark_differential.io.tables import collection
from spark_differential.operators.consolidate import dd_consolidate

FORMAT = 3  # 3: stage 2 (per-operator traces); format 2 manifests (stage 1 only) are still read
READS = (2, 3)
MANIFESTS = "_manifests"
_MANIFEST_RE = re.compile(r"^v(\d{8})\.json$")
_VERSION_DIR_RE = re.compile(r"^v\d{8}-[0-9a-f]{8}$")
LATE_MODES = ("error", "advance")
_log = logging.getLogger("spark_differential.incremental")
KILL_ENV = "SPARK_DIFFERENTIAL_INCREMENTAL_EXIT_AT"  # test hook: os._exit at a named point


def _hook(point: str) -> None:
    """Test hook: end the process abruptly at ``point`` when the environment asks for it."""
    if os.environ.get(KILL_ENV) == point:
        os._exit(77)


# -- times -----------------------------------------------------------------------------


def upset_coefficients(ttype: TimeType, frontier: Sequence[Leaves]) -> list[tuple[Leaves, int]]:
    """Inclusion-exclusion of the union of the futures of ``frontier``'s elements.

    Returns ``[(J, c)]`` such that for every time ``t`` and ``g``:
    ``[g >= some join(t, f), f in frontier] == sum_J c * [g >= join(t, J)]``
    (``J`` ranges over joins of non-empty subsets of ``frontier``; equal joins are
    merged and zero coefficients dropped).

    >>> from spark_differential.core.lattice import Product, Total
    >>> upset_coefficients(Product((("a", Total()), ("b", Total()))), [(0, 1), (1, 0)])
    [((0, 1), 1), ((1, 0), 1), ((1, 1), -1)]
    """
    coeff: dict[Leaves, int] = {}
    for f in frontier:
        f = tuple(int(x) for x in f)
        new = dict(coeff)
        new[f] = new.get(f, 0) + 1
        for j, c in coeff.items():
            k = ttype.join(j, f)
            new[k] = new.get(k, 0) - c
        coeff = {k: v for k, v in new.items() if v}
    return sorted(coeff.items())


def lift_updates(
    ttype: TimeType, updates: Sequence[tuple[Any, Leaves, int]], frontier: Sequence[Leaves]
) -> list[tuple[Any, Leaves, int]]:
    """:func:`lift` on plain Python updates ``(data, leaves, diff)`` (consolidated, sorted).

    >>> lift_updates(Total(), [("a", (1,), 1), ("a", (5,), -1), ("b", (7,), 2)], [(3,)])
    [('a', (3,), 1), ('a', (5,), -1), ('b', (7,), 2)]
    """
    coeffs = upset_coefficients(ttype, frontier)
    out: dict[tuple[Any, Leaves], int] = {}
    for d, t, r in updates:
        t = tuple(int(x) for x in t)
        if any(ttype.leq(f, t) for f in frontier):
            moved = [(t, r)]
        else:
            moved = [(ttype.join(t, j), r * c) for j, c in coeffs]
        for tt, rr in moved:
            out[(d, tt)] = out.get((d, tt), 0) + rr
    return sorted((d, t, r) for (d, t), r in out.items() if r)


def _encoded(df: DataFrame, data: Sequence[str], ttype: TimeType) -> tuple[DataFrame, list[str]]:
    leaves = time_leaf_names(ttype.width)
    enc = df.select(*data, *[c.alias(n) for c, n in zip(ttype.encode_column(F.col(TIME)), leaves)], DIFF)
    return enc, leaves


def _in_future(ttype: TimeType, leaves: Sequence[str], frontier: Sequence[Leaves]) -> Column:
    """True where the time (as leaf columns) is ``>=`` some element of ``frontier``."""
    parts = [ttype.sql_leq([str(int(x)) for x in f], leaves) for f in frontier]
    return F.expr(" OR ".join(parts)) if parts else F.lit(False)


def in_future(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> Column:
    """A Column of ``df``: its ``time`` is in the future of ``frontier`` (``>=`` some element)."""
    leaves = ttype.encode_column(F.col(TIME))
    parts = []
    for f in frontier:
        conds = _leaf_leq_columns(ttype, [F.lit(int(x)) for x in f], leaves)
        parts.append(conds)
    if not parts:
        return F.lit(False)
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def _leaf_leq_columns(ttype: TimeType, a: Sequence[Column], b: Sequence[Column]) -> Column:
    """``a <= b`` on leaf Columns, for the user-visible time types (total and products of them)."""
    if isinstance(ttype, Total):
        return a[0] <= b[0]
    out: Column | None = None
    for x, y in zip(a, b):  # products of total types: leaf-wise order
        c = x <= y
        out = c if out is None else out & c
    return out if out is not None else F.lit(True)


def lift(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:
    """The collection supported on the future of ``frontier`` that accumulates there as ``df`` does.

    Rows already in the future of ``frontier`` stay; a row at another time ``t`` is
    replaced by rows at ``join(t, J)`` with diffs multiplied by ``c`` for the
    inclusion-exclusion coefficients ``(J, c)`` of :func:`upset_coefficients` (for a
    total order or a one-element frontier: one row at ``join(t, f)``).  The result is
    consolidated.  Two collections supported on an upward-closed set with equal
    accumulations on it are equal, so this is the unique such collection.
    """
    data = [c for c in df.columns if c not in (TIME, DIFF)]
    enc, leaves = _encoded(df, data, ttype)
    inside = _in_future(ttype, leaves, frontier)
    kept = enc.where(inside)
    coeffs = upset_coefficients(ttype, frontier)
    choices = [
        F.struct(
            *[F.expr(e).alias(n) for e, n in zip(ttype.sql_join(leaves, [str(int(x)) for x in j]), leaves)],
            F.lit(c).cast("long").alias("_sd_c"),
        )
        for j, c in coeffs
    ]
    moved = (
        enc.where(~inside)
        .select(*data, F.explode(F.array(*choices)).alias("_sd_j"), DIFF)
        .select(*data, *[F.col(f"_sd_j.{n}").alias(n) for n in leaves], (F.col(DIFF) * F.col("_sd_j._sd_c")).alias(DIFF))
    )
    both = kept.unionByName(moved)
    summed = both.groupBy(*data, *leaves).agg(F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0)
    return summed.select(*data, ttype.decode_columns([F.col(n) for n in leaves]).alias(TIME), DIFF)


# -- files -----------------------------------------------------------------------------


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}


def _client_local_path(spark: Any, root: str) -> str:
    """``root`` as a path of this machine, for a Spark Connect session's view.

    On Spark Connect the client writes the manifests and the server's executors the
    Parquet files: both must see one filesystem, so the server must run on this
    machine and ``root`` be a local path.  Anything else would split the state over
    two filesystems, which is refused here, before any job."""
    scheme, sep, rest = root.partition("://")
    if sep and scheme != "file":
        raise IncrementalStateError(
            f"sd.incremental: on a Spark Connect session the view's state must be on this machine's "
            f"filesystem (the client writes its manifests), but path {root!r} is a {scheme}:// URI. Use a "
            "local path, or a classic session (its state goes through Hadoop's FileSystem, so HDFS, S3A, "
            "ABFS... work)."
        )
    if sep:
        root = "/" + rest.lstrip("/")
    elif root.startswith("file:"):
        root = root[len("file:"):]
    host = ""
    try:
        host = str(spark.client.host)
    except Exception:  # noqa: BLE001 - not a Connect client we know: nothing to check
        return root
    import socket

    if host and host not in _LOCAL_HOSTS and host not in {socket.gethostname(), socket.getfqdn()}:
        raise IncrementalStateError(
            f"sd.incremental: this Spark Connect session's server runs on {host!r}, not on this machine. "
            "The view's manifests are written by the client and its Parquet files by the server, so they "
            "would land on two filesystems. Run the view where the server runs (a Connect client on the "
            "server's host, or a classic session)."
        )
    return root


class _Files:
    """The few file operations the state needs, on the filesystem Spark resolves ``root`` with.

    Classic sessions go through Hadoop's ``FileSystem`` (so HDFS, S3A, ABFS… work as
    they do for Spark's own reads and writes); Spark Connect sessions, which have no
    JVM on the client, use the local filesystem.
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        self._jvm: Any = None
        try:
            jvm = spark._jvm  # type: ignore[attr-defined]
            jsc = spark._jsc  # type: ignore[attr-defined]
        except Exception:
            jvm = None
        if jvm is not None:
            self._jvm = jvm
            self._conf = jsc.hadoopConfiguration()
            p = jvm.org.apache.hadoop.fs.Path(root)
            self._fs = p.getFileSystem(self._conf)
            self.root = str(self._fs.makeQualified(p).toString()).rstrip("/")
        else:
            self.root = os.path.abspath(_client_local_path(spark, root))

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _path(self, p: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(p)

    def exists(self, p: str) -> bool:
        if self._jvm is None:
            return os.path.exists(p)
        return bool(self._fs.exists(self._path(p)))

    def listdir(self, p: str) -> list[str]:
        if not self.exists(p):
            return []
        if self._jvm is None:
            return sorted(os.listdir(p))
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(self._path(p)))

    def mkdirs(self, p: str) -> None:
        if self._jvm is None:
            os.makedirs(p, exist_ok=True)
        else:
            self._fs.mkdirs(self._path(p))

    def read_text(self, p: str) -> str:
        if self._jvm is None:
            with open(p, encoding="utf-8") as fh:
                return fh.read()
        stream = self._fs.open(self._path(p))
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def write_text_atomic(self, p: str, text: str) -> None:
        """Write to a temporary name in the same directory, then rename to ``p``."""
        d, name = p.rsplit("/", 1)
        tmp = f"{d}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        data = text.encode("utf-8")
        if self._jvm is None:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
            return
        out = self._fs.create(self._path(tmp), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if not self._fs.rename(self._path(tmp), self._path(p)):
            self.delete(tmp)
            raise IncrementalStateError(f"sd.incremental: could not rename {tmp} to {p}")

    def size(self, p: str) -> int:
        """Bytes of the files under ``p`` (a file or a directory)."""
        if self._jvm is None:
            if os.path.isfile(p):
                return os.path.getsize(p)
            return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
        return int(self._fs.getContentSummary(self._path(p)).getLength())

    def delete(self, p: str) -> None:
        if self._jvm is None:
            import shutil

            if os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.exists(p):
                os.remove(p)
            return
        self._fs.delete(self._path(p), True)


# -- the stored state ------------------------------------------------------------------


@dataclass(frozen=True)
class _State:
    """One committed version, as its manifest names it."""

    version: int
    directory: str
    time_type: T.DataType
    frontier: list[Leaves]
    batch_id: int | None
    inputs: dict[str, T.StructType]
    output: T.StructType
    input_files: dict[str, list[str]]
    emitted_files: list[str]
    compacted: bool = True
    stage: int = 1
    operators: tuple[Operator, ...] = ()
    trace_files: dict[str, list[str]] = field(default_factory=dict)
    pending_files: list[str] = field(default_factory=list)
    buckets: tuple[int, int] = (0, 0)  # stage 2: (key buckets, partitions) the traces were bucketed with

    @property
    def output_file(self) -> str:
        """Where this version's update stored what it returned (absent when that was empty)."""
        return _part(self.directory, "o")

    def referenced(self) -> set[str]:
        """The version directories this version's files live in."""
        paths = [self.directory, *self.emitted_files, *self.pending_files]
        for files in [*self.input_files.values(), *self.trace_files.values()]:
            paths += files
        return {p.split("/", 1)[0] for p in paths}

    @property
    def ttype(self) -> TimeType:
        return from_spark_type(self.time_type)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "version": self.version,
                "directory": self.directory,
                "time_type": json.loads(self.time_type.json()),
                "frontier": [list(f) for f in self.frontier],
                "batch_id": self.batch_id,
                "inputs": {n: json.loads(s.json()) for n, s in self.inputs.items()},
                "output": json.loads(self.output.json()),
                "compacted": self.compacted,
                "stage": self.stage,
                "operators": [o.to_json() for o in self.operators],
                "buckets": list(self.buckets),
                "files": {
                    "inputs": self.input_files,
                    "emitted": self.emitted_files,
                    "output": self.output_file,
                    "traces": self.trace_files,
                    "pending": self.pending_files,
                },
                "committed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> _State:
        m = json.loads(text)
        if m.get("format") not in READS:
            raise IncrementalStateError(
                f"sd.incremental: the state has format {m.get('format')!r}; this version reads formats "
                f"{' and '.join(map(str, READS))} (format 1 stored each collection in its own Parquet directory). "
                "Rebuild the view at a new path by replaying its inputs, or read it with the library version that "
                "wrote it."
            )
        files = m["files"]
        return cls(
            version=int(m["version"]),
            directory=str(m["directory"]),
            time_type=T._parse_datatype_json_value(m["time_type"]),
            frontier=[tuple(int(x) for x in f) for f in m["frontier"]],
            batch_id=None if m["batch_id"] is None else int(m["batch_id"]),
            inputs={n: T.StructType.fromJson(s) for n, s in m["inputs"].items()},
            output=T.StructType.fromJson(m["output"]),
            input_files={n: [str(p) for p in fs] for n, fs in files["inputs"].items()},
            emitted_files=[str(p) for p in files["emitted"]],
            compacted=bool(m.get("compacted", True)),
            stage=int(m.get("stage", 1)),  # format 2: stage 1 only
            operators=tuple(Operator.from_json(o) for o in m.get("operators", [])),
            trace_files={t: [str(p) for p in fs] for t, fs in files.get("traces", {}).items()},
            pending_files=[str(p) for p in files.get("pending", [])],
            buckets=(int(m.get("buckets", [0, 0])[0]), int(m.get("buckets", [0, 0])[1])),
        )


@dataclass(frozen=True)
class _Written:
    """What an update's one write stored (the files named relative to the view's root)."""

    output: T.StructType
    output_exists: bool
    input_files: dict[str, list[str]]
    emitted_files: list[str]
    compacted: bool
    trace_files: dict[str, list[str]] = field(default_factory=dict)
    pending_files: list[str] = field(default_factory=list)
    operators: tuple[Operator, ...] = ()


def _part(directory: str, tag: str, write: str = "data") -> str:
    """The directory (relative to the view's root) of one stored collection a version wrote.

    A version writes twice: ``new`` (the new updates of every input), then ``data``
    (what the update returned and, when due, the merged state)."""
    return f"{directory}/{write}/{KIND}={tag}"


_physical = physical


def _tagged(df: DataFrame, tag: str, prefix: str, schema: T.StructType) -> DataFrame:
    """``df`` (with ``schema``'s columns) as rows of the version's one write, under its tag."""
    return df.select(
        F.lit(tag).alias(KIND), *[F.col(f.name).alias(p) for f, p in zip(schema.fields, _physical(prefix, schema))]
    )


def _same_type(a: T.DataType, b: T.DataType) -> bool:
    return a.simpleString() == b.simpleString()


def _data_fields(schema: T.StructType) -> list[T.StructField]:
    return [f for f in schema.fields if f.name not in (TIME, DIFF)]


# -- the view ------------------------------------------------------------------------------


class IncrementalView:
    """A query's output kept up to date under ``path``; made by :func:`incremental`."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        query: Callable[..., DataFrame],
        keep: int = 2,
        compact: bool | None = None,
        compact_every: int = 8,
        stage: int | None = None,
    ) -> None:
        if not callable(query):
            raise TypeError(f"sd.incremental: query must be a function of named collections, got {type(query).__name__}")
        if keep < 2:
            raise ValueError("sd.incremental: keep must be at least 2 (the current version and the one before)")
        self.spark = spark
        self.query = query
        self.keep = keep
        self.compact = compact
        if compact_every < 1:
            raise ValueError("sd.incremental: compact_every must be at least 1")
        self.compact_every = compact_every
        if stage not in (None, 1, 2):
            raise ValueError(f"sd.incremental: stage must be 1, 2 or None (chosen from the query), got {stage!r}")
        self.stage = stage
        # stage 2: each stateful operator's kernel inputs of the last update (name, DataFrames), for inspection
        self.last_kernel_inputs: list[tuple[str, list[DataFrame]]] = []
        self._files = _Files(spark, path)
        self.path = self._files.root

    # -- reading the state ---------------------------------------------------------------
    def _manifests(self) -> list[tuple[int, str]]:
        found = []
        for name in self._files.listdir(self._files.join(MANIFESTS)):
            m = _MANIFEST_RE.match(name)
            if m:
                found.append((int(m.group(1)), name))
        return sorted(found, reverse=True)

    def _state(self) -> _State | None:
        """The newest committed version, or None before the first update."""
        for _, name in self._manifests():
            state = _State.from_json(self._files.read_text(self._files.join(MANIFESTS, name)))
            if not self._files.exists(self._files.join(state.directory)):
                raise IncrementalStateError(
                    f"sd.incremental: manifest {name} under {self.path} names the directory {state.directory}, "
                    "which is missing; the state was changed outside the library. Restore it, or start a new "
                    "view at an empty path."
                )
            return state
        return None

    @property
    def frontier(self) -> Any:
        """The stored frontier: the view's inputs are complete at every time not in its future.

        ``None`` before the first update; for totally ordered times one time, for
        struct times a list of times (an antichain).
        """
        state = self._state()
        if state is None:
            return None
        return _frontier_value(state.ttype, state.frontier)

    @property
    def batch_id(self) -> int | None:
        """The batch id of the last committed update that had one (``None`` if none had)."""
        state = self._state()
        return None if state is None else state.batch_id

    def _read(self, rels: Sequence[str], schema: T.StructType, prefix: str) -> DataFrame:
        """One stored collection: the union of its files ``rels`` (one scan), with ``schema``'s column names.

        ``prefix`` names the collection's columns in the files (:func:`_physical`)."""
        if not rels:
            return self.spark.createDataFrame([], schema)
        names = _physical(prefix, schema)
        stored = T.StructType([T.StructField(p, f.dataType, True) for p, f in zip(names, schema.fields)])
        df = self.spark.read.schema(stored).parquet(*[self._files.join(r) for r in rels])
        return df.select(*[F.col(p).alias(f.name) for p, f in zip(names, schema.fields)])

    def _empty_output(self, state: _State) -> DataFrame:
        return self.spark.createDataFrame([], state.output)

    # -- updating --------------------------------------------------------------------------
    def update(self, upto: Any, batch_id: int | None = None, late: str = "error", **inputs: DataFrame) -> DataFrame:
        """Apply new updates of the named inputs and return the output that became complete.

        ``inputs`` are collections (``time``, ``diff`` and the data columns the view's
        input had on its first update) of updates at times in the future of the
        current :attr:`frontier`; inputs not named get no new updates.  The first
        update must name every input of ``query`` (an empty collection is fine); it
        fixes their schemas and the time type.  ``upto`` is the new frontier (a time,
        or a list of times for struct times), not earlier than the current one: the
        inputs are declared complete at every time not in its future.

        Returns the output updates at times in the future of the old frontier but
        not of ``upto`` (read from the stored version: consume it before the
        next-but-one update, which deletes that version's files).

        ``late`` says what an update at a time not in the future of the frontier
        does: ``"error"`` raises :class:`LateUpdateError` (nothing is stored);
        ``"advance"`` moves it into the future of the frontier (for totally ordered
        times: to the frontier), so it counts from there on; the output already
        returned for earlier times is not corrected.

        With ``batch_id`` (an int that grows from update to update, like
        ``foreachBatch``'s), an update whose id is not above the last committed one
        changes nothing: repeating the last committed id returns that update's
        output again, an older id returns an empty collection.

        >>> import spark_differential as sd, tempfile
        >>> spark = sd.session()
        >>> view = sd.incremental(tempfile.mkdtemp(), lambda edges: edges.dd_count(by="src"))
        >>> e = spark.createDataFrame([(1, 2, 0, 1), (1, 3, 1, 1)], "src long, dst long, time long, diff long")
        >>> view.update(upto=1, edges=e).collect()
        [Row(src=1, count=1, time=0, diff=1)]
        >>> more = spark.createDataFrame([(1, 4, 1, 1)], "src long, dst long, time long, diff long")
        >>> view.update(upto=5, edges=more).orderBy("diff").collect()
        [Row(src=1, count=1, time=1, diff=-1), Row(src=1, count=3, time=1, diff=1)]
        >>> view.frontier
        5
        """
        op = "IncrementalView.update"
        if late not in LATE_MODES:
            raise ValueError(f"{op}: late must be one of {LATE_MODES}, got {late!r}")
        if batch_id is not None and (isinstance(batch_id, bool) or not isinstance(batch_id, int)):
            raise TypeError(f"{op}: batch_id must be an int (e.g. foreachBatch's batch id), got {batch_id!r}")
        state = self._state()
        if batch_id is not None and state is not None and state.batch_id is not None and batch_id <= state.batch_id:
            if batch_id == state.batch_id:
                present = [state.output_file] if self._files.exists(self._files.join(state.output_file)) else []
                return self._read(present, state.output, "o")
            return self._empty_output(state)

        # -- checks on schemas alone (no Spark job) ---------------------------------------
        new = self._check_inputs(op, state, inputs)
        ttype = state.ttype if state is not None else next(iter(new.values()))[1]
        if isinstance(ttype, Loop):
            raise TimeTypeMismatchError(f"{op}: inputs of an incremental view cannot have dd_iterate loop times")
        old_front = state.frontier if state is not None else None
        new_front = _as_frontier(op, ttype, upto)
        if old_front is not None:
            behind = [f for f in new_front if not any(ttype.leq(g, f) for g in old_front)]
            if behind:
                raise FrontierError(
                    f"{op}: upto={_frontier_value(ttype, new_front)!r} is earlier than the view's frontier "
                    f"{_frontier_value(ttype, old_front)!r} at {[ttype.decode_value(f) for f in behind]}; "
                    "the frontier can only move forward (pass a time in the future of view.frontier)"
                )
        names = list(state.inputs) if state is not None else list(new)
        schemas = state.inputs if state is not None else {n: new[n][0] for n in names}
        time_type = state.time_type if state is not None else schemas[names[0]][TIME].dataType

        # -- the new version ---------------------------------------------------------------
        version = (state.version if state is not None else 0) + 1
        directory = f"v{version:08d}-{uuid.uuid4().hex[:8]}"
        if state is None:
            stage, bucketing, operators = self._stage(op, schemas, ttype, [v[2] for v in new.values()])
        else:
            stage, bucketing, operators = state.stage, state.buckets, state.operators
            if self.stage is not None and self.stage != stage:
                raise IncrementalStateError(
                    f"{op}: stage={self.stage} was asked but the view stored under {self.path} runs in stage {stage} "
                    "(fixed when it was created); leave stage unset, or rebuild the view at a new path"
                )
        self._files.mkdirs(self._files.join(directory))
        incoming = {
            n: _incoming(op, n, new[n][2].select(*[f.name for f in schemas[n].fields]), ttype, old_front, late)
            for n in names
            if n in new
        }
        try:
            if stage == 2:
                written = self._write_stage2(
                    op, state, schemas, incoming, ttype, bucketing, operators, new_front, directory
                )
            else:
                written = self._write_stage1(op, state, schemas, incoming, ttype, old_front, new_front, directory)
        except SparkDifferentialError:
            raise
        except Exception as exc:  # e.g. a late update caught by the guard
            known = from_job_failure(exc)
            if known is not None:
                raise known from None
            raise
        committed = _State(
            version=version,
            directory=directory,
            time_type=time_type,
            frontier=list(new_front),
            batch_id=batch_id if batch_id is not None else (state.batch_id if state is not None else None),
            inputs=dict(schemas),
            output=written.output,
            input_files=written.input_files,
            emitted_files=written.emitted_files,
            compacted=written.compacted,
            stage=stage,
            operators=written.operators,
            trace_files=written.trace_files,
            pending_files=written.pending_files,
            buckets=bucketing,
        )
        output = self._read([committed.output_file] if written.output_exists else [], committed.output, "o")
        _hook("before-manifest")

        self._files.mkdirs(self._files.join(MANIFESTS))
        self._files.write_text_atomic(self._files.join(MANIFESTS, f"v{version:08d}.json"), committed.to_json())
        _hook("after-manifest")
        self._clean_up()
        return output

    def _write_tagged(self, subdir: str, parts: Sequence[tuple[str, DataFrame, T.StructType]]) -> dict[str, str]:
        """Store collections in one Parquet write partitioned by tag, under ``subdir`` (relative to the root).

        Returns the stored directory of each tag that had rows (no rows: no directory)."""
        if not parts:
            return {}
        wide: DataFrame | None = None
        for t, df, schema in parts:
            one = _tagged(df, t, t, schema)
            wide = one if wide is None else wide.unionByName(one, allowMissingColumns=True)
        assert wide is not None
        return self._write_wide(subdir, wide)

    def _write_wide(self, subdir: str, wide: DataFrame) -> dict[str, str]:
        """Store rows tagged by :data:`KIND` (each collection under its physical column names) in one
        Parquet write partitioned by tag, under ``subdir``; the stored directory of each tag written."""
        wide.write.partitionBy(KIND).parquet(self._files.join(subdir))
        prefix = f"{KIND}="
        return {n[len(prefix):]: f"{subdir}/{n}" for n in self._files.listdir(self._files.join(subdir))
                if n.startswith(prefix)}

    def _stage(
        self, op: str, schemas: Mapping[str, T.StructType], ttype: TimeType, first: Sequence[DataFrame] = ()
    ) -> tuple[int, tuple[int, int], tuple[Operator, ...]]:
        """The stage a new view runs in and, for stage 2, the key buckets of its traces and its stateful operators.

        The query is called once on empty inputs (stateful operators return empty
        collections without running; a ``dd_iterate`` is recorded, not run) to see
        what it uses: stage 2 needs no history-dependent operator, no ``dd_iterate`` the
        in-task path cannot run (:mod:`spark_differential.incremental.loop`) or whose first update
        (``first``: its inputs) is larger than one task may hold,
        and every stateful operator over the inputs' time type."""
        if self.stage == 1 or self.compact is False:
            return 1, (0, 0), ()
        nparts = shuffle_partitions(self.spark)
        probe = _traces.Run(self.spark, ttype, buckets(self.spark), nparts, probe=True)

        probe.first_rows = estimated_rows(first)[0]  # Spark's estimate of the first update's rows, no job
        empty = {n: self.spark.createDataFrame([], schema) for n, schema in schemas.items()}
        with recording() as history_ops, seam.handling(probe):
            self.query(**empty)
        blockers = sorted(history_ops) + probe.blockers
        if not blockers:
            return 2, (probe.nbuckets, nparts), tuple(probe.operators)
        why = f"the query uses {', '.join(blockers)}, which stage 2 (per-operator traces) cannot keep differential"
        if self.stage == 2:
            raise IncrementalStateError(f"{op}: stage=2 was asked but {why}; leave stage unset (or pass stage=1)")
        _log.warning("%s: %s; the view under %s runs in stage 1 (the query re-runs on the stored inputs)", op, why,
                     self.path)
        return 1, (0, 0), ()

    def _write_stage2(
        self,
        op: str,
        state: _State | None,
        schemas: Mapping[str, T.StructType],
        incoming: Mapping[str, DataFrame],
        ttype: TimeType,
        bucketing: tuple[int, int],
        operators: Sequence[Operator],
        new_front: list[Leaves],
        directory: str,
    ) -> _Written:
        """Stage 2: run the query on the new updates against the stored traces (:mod:`spark_differential.incremental.traced`).

        Each stateful operator writes its new input updates (one write each, under
        ``directory/s<i>``); then one more write stores what the update returns
        (``o``), the output changes at times still in the future of ``upto``
        (``p``, returned by a later update) and, every ``compact_every`` updates,
        each trace's older files merged, advanced to ``upto`` and consolidated."""
        names = list(schemas)
        changes = {n: incoming.get(n, self.spark.createDataFrame([], schemas[n])) for n in names}
        old_traces = dict(state.trace_files) if state is not None else {}
        run = _traces.Run(
            self.spark, ttype, bucketing[0], bucketing[1],
            expected=operators,
            traces=old_traces, write=lambda sub, parts: self._write_tagged(f"{directory}/{sub}", parts),
            read=self._read, where=self.path, frontier=new_front,
            write_wide=lambda sub, wide: self._write_wide(f"{directory}/{sub}", wide),
        )
        with recording() as history_ops, seam.handling(run):
            result = self.query(**changes)
        run.finished()
        blockers = sorted(history_ops) + run.blockers
        if blockers:
            raise IncrementalStateError(
                f"{op}: the query uses {', '.join(blockers)} but the view stored under {self.path} runs in "
                "stage 2, which cannot keep it differential; the query must stay the same from update to update. "
                "Rebuild the view at a new path by replaying its inputs."
            )
        self.last_kernel_inputs = run.kernel_inputs
        out_schema = self._check_output(op, result, ttype, state)
        cols = [f.name for f in out_schema.fields]
        result = result.select(*cols)
        if state is not None and state.pending_files:
            result = result.unionByName(self._read(state.pending_files, out_schema, "o"))
        ready = _consolidate(result)
        physical = _physical("o", out_schema)
        kind = F.when(in_future(ready, ttype, new_front), F.lit("p")).otherwise(F.lit("o"))
        wide = ready.select(kind.alias(KIND), *[F.col(f.name).alias(c) for f, c in zip(out_schema.fields, physical)])
        for t, df, schema in run.stored:  # totals traces' newest files
            wide = wide.unionByName(_tagged(df, t, t, schema), allowMissingColumns=True)
            run.added[t] = _part(directory, t)
        traces: dict[str, list[str]] = {}
        for slot, operator in enumerate(run.operators):
            for side, schema in enumerate(operator.inputs):
                t = tag(slot, side)
                old = old_traces.get(t, [])
                if operator.side(side) == LOOP:  # a loop's traces: rewritten whole by its task (view_loop)
                    traces[t] = run.replaced.get(t, old)
                    continue
                adv = _traces.advanced_totals if operator.side(side) == TOTALS else _traces.advanced
                traces[t], merged = self._roll_trace(
                    old, run.added.get(t), directory, t, schema,
                    lambda files, t=t, schema=schema, adv=adv: adv(self._read(files, schema, t), ttype, new_front),
                )
                if merged is not None:
                    wide = wide.unionByName(merged, allowMissingColumns=True)
        wide.write.partitionBy(KIND).parquet(self._files.join(directory, "data"))
        present = {f"{directory}/data/{name}" for name in self._files.listdir(self._files.join(directory, "data"))}
        return _Written(
            output=out_schema,
            output_exists=_part(directory, "o") in present,
            input_files={},
            emitted_files=[],
            compacted=True,
            trace_files={t: [f for f in fs if not f.startswith(f"{directory}/data/") or f in present]
                         for t, fs in traces.items()},
            pending_files=[p for p in [_part(directory, "p")] if p in present],
            operators=tuple(run.operators),
        )

    def _roll_trace(
        self,
        old: Sequence[str],
        new: str | None,
        directory: str,
        tag: str,
        schema: T.StructType,
        merge: Callable[[Sequence[str]], DataFrame],
    ) -> tuple[list[str], DataFrame | None]:
        """A stage-2 trace's files in this version: :meth:`_roll`, but merging geometrically, as
        differential dataflow's spine does.  Once there would be more than ``compact_every`` files,
        the files after the first (the last full merge, or the first update's file) are merged
        into one (``<tag>m``, advanced to the frontier and consolidated) while they hold less than
        half the first file's bytes; from then on all are merged into one (``<tag>c``).  A trace
        whose updates are small against its size (1,000 changes to 200,000 rows) then merges a
        few thousand rows at most updates that merge, not all of them; it holds at most about 1.5
        times its live size plus ``compact_every`` updates.  Merging any subset of the files is
        exact: each merged file keeps its accumulations in the future of the frontier (seed 004)."""
        files = list(old)
        merged = None
        if files and len(files) + (new is not None) > self.compact_every:
            base, deltas = files[0], files[1:]
            if len(deltas) >= 2 and 2 * sum(self._files.size(self._files.join(f)) for f in deltas) < self._files.size(
                    self._files.join(base)):
                merged = _tagged(merge(deltas), f"{tag}m", tag, schema)
                files = [base, _part(directory, f"{tag}m")]
            else:
                merged = _tagged(merge(files), f"{tag}c", tag, schema)
                files = [_part(directory, f"{tag}c")]
        if new is not None:
            files.append(new)
        return files, merged

    def _roll(
        self,
        old: Sequence[str],
        new: str | None,
        directory: str,
        tag: str,
        schema: T.StructType,
        merge: Callable[[], DataFrame],
        force: bool = False,
    ) -> tuple[list[str], DataFrame | None]:
        """A stored collection's files in this version: ``old`` (its last merge and the deltas
        since) merged into one file ``<tag>c`` of ``directory`` once there would be more than
        ``compact_every`` (or when ``force``), then ``new`` (this version's file, if any).

        Returns the files and, when a merge is due, the merged rows (``merge()``) tagged for
        the version's write."""
        files = list(old)
        merged = None
        if files and (len(files) + (new is not None) > self.compact_every or force):
            merged = _tagged(merge(), f"{tag}c", tag, schema)
            files = [_part(directory, f"{tag}c")]
        if new is not None:
            files.append(new)
        return files, merged

    def _write_stage1(
        self,
        op: str,
        state: _State | None,
        schemas: Mapping[str, T.StructType],
        incoming: Mapping[str, DataFrame],
        ttype: TimeType,
        old_front: list[Leaves] | None,
        new_front: list[Leaves],
        directory: str,
    ) -> _Written:
        """Stage 1: stage the new updates of every input (one write), then re-run the query on the stored inputs.

        The new updates of every input go into one write (one job): the query and later
        updates read them from there, so each input is evaluated exactly once."""
        names = list(schemas)
        prefixes = {n: f"i{k}" for k, n in enumerate(names)}
        old_files = {n: list(state.input_files[n]) if state is not None else [] for n in names}
        written = self._write_tagged(
            f"{directory}/new", [(prefixes[n], df, schemas[n]) for n, df in incoming.items()]
        )
        fresh = {n: written[prefixes[n]] for n in incoming if prefixes[n] in written}
        return self._write_version(op, state, schemas, prefixes, old_files, fresh, ttype, old_front, new_front, directory)

    def _write_version(
        self,
        op: str,
        state: _State | None,
        schemas: Mapping[str, T.StructType],
        prefixes: Mapping[str, str],
        old_files: Mapping[str, list[str]],
        fresh: Mapping[str, str],
        ttype: TimeType,
        old_front: list[Leaves] | None,
        new_front: list[Leaves],
        directory: str,
    ) -> _Written:
        """Run the query over the stored inputs and the new updates (``fresh``: each input's staged file)
        and store the rest of the new version in one Parquet write; name what was written."""
        names = list(schemas)
        combined = {
            n: self._read(old_files[n] + ([fresh[n]] if n in fresh else []), schemas[n], prefixes[n]) for n in names
        }
        with recording() as history_ops:
            result = self.query(**combined)
        compacted = self._compacted(op, state, history_ops)
        out_schema = self._check_output(op, result, ttype, state)
        cols = [f.name for f in out_schema.fields]
        result = result.select(*cols)
        emitted_old = list(state.emitted_files) if state is not None else []
        if emitted_old:
            emitted_before = self._read(emitted_old, out_schema, "o")
            result = result.unionByName(emitted_before.withColumn(DIFF, -F.col(DIFF)))
        ready = lift(result, ttype, old_front) if old_front is not None else _consolidate(result)
        complete = ready.where(~in_future(ready, ttype, new_front)).select(*cols)

        parts = [_tagged(complete, "o", "o", out_schema)]
        emitted, merged = self._roll(
            emitted_old, _part(directory, "o"), directory, "o", out_schema,
            lambda: _advance(self._read(emitted_old, out_schema, "o"), ttype, new_front).select(*cols),
        )
        if merged is not None:
            parts.append(merged)
        files: dict[str, list[str]] = {}
        for n in names:
            pre, schema = prefixes[n], schemas[n]

            def merge_input(n: str = n, pre: str = pre, schema: T.StructType = schema) -> DataFrame:
                stored = self._read(old_files[n], schema, pre)
                merged_in = _advance(stored, ttype, new_front) if compacted else _consolidate(stored)
                return merged_in.select(*[f.name for f in schema.fields])

            files[n], merged = self._roll(old_files[n], fresh.get(n), directory, pre, schema, merge_input,
                                          force=state is not None and compacted != state.compacted)
            if merged is not None:
                parts.append(merged)
        wide = parts[0]
        for part in parts[1:]:
            wide = wide.unionByName(part, allowMissingColumns=True)
        wide.write.partitionBy(KIND).parquet(self._files.join(directory, "data"))
        # a collection with no rows has no directory: the manifest names only those written
        present = {f"{directory}/data/{name}" for name in self._files.listdir(self._files.join(directory, "data"))}

        def kept(rels: list[str]) -> list[str]:
            return [r for r in rels if not r.startswith(f"{directory}/data/") or r in present]

        return _Written(
            output=out_schema,
            output_exists=_part(directory, "o") in present,
            input_files={n: kept(fs) for n, fs in files.items()},
            emitted_files=kept(emitted),
            compacted=compacted,
        )

    def _compacted(self, op: str, state: _State | None, history_ops: set[str]) -> bool:
        """Whether the stored inputs are compacted (advanced to the frontier) after this update."""
        used = ", ".join(sorted(history_ops))
        why = (
            f"the query uses {used}, whose output depends on when earlier input updates happened, not only on "
            "the inputs' accumulation at each time, so its inputs cannot be compacted"
        )
        if state is not None and state.compacted and history_ops:
            raise IncrementalStateError(
                f"{op}: {why}; but the view stored under {self.path} was built by a query without them and its "
                "inputs are already compacted. Start a new view (at a new path) for this query."
            )
        if self.compact is True and history_ops:
            raise IncrementalStateError(
                f"{op}: {why}. Pass compact=False (or leave it unset) to keep the inputs' full history: exact, "
                "but each update then costs the size of that history."
            )
        if state is not None and not state.compacted:
            return False
        if history_ops:
            _log.warning("%s: %s; the view keeps its inputs' full history under %s", op, why, self.path)
            return False
        return self.compact is not False

    def _check_inputs(
        self, op: str, state: _State | None, inputs: Mapping[str, DataFrame]
    ) -> dict[str, tuple[T.StructType, TimeType, DataFrame]]:
        """Validate the new inputs against the query and the stored schemas (schemas only)."""
        out: dict[str, tuple[T.StructType, TimeType, DataFrame]] = {}
        for n, df in inputs.items():
            cs = inspect(df, op=op, side=f"input `{n}`")
            out[n] = (df.schema, cs.ttype, df)
        if state is None:
            if not out:
                raise IncrementalStateError(
                    f"{op}: the first update must give every input of the query (an empty collection is fine); "
                    "it gave none"
                )
            try:
                _inspect.signature(self.query).bind(**{n: None for n in out})
            except TypeError as e:
                raise IncrementalStateError(
                    f"{op}: the first update must give every input of the query by its parameter name; the query "
                    f"takes {_params(self.query)} but the update gave {sorted(out)} ({e})"
                ) from None
            types = {n: v[1] for n, v in out.items()}
            first = next(iter(types))
            for n, tt in types.items():
                if tt != types[first]:
                    raise TimeTypeMismatchError(
                        f"{op}: inputs `{first}` and `{n}` have different time types ({types[first].describe()} vs "
                        f"{tt.describe()}); every input of a view uses one time type. Cast one `time` column."
                    )
            return out
        for n, (schema, tt, _) in out.items():
            if n not in state.inputs:
                raise IncrementalStateError(
                    f"{op}: the view has no input `{n}`; its inputs are {sorted(state.inputs)} (fixed by its "
                    "first update)"
                )
            if tt != state.ttype:
                raise TimeTypeMismatchError(
                    f"{op}: input `{n}` has time type {tt.describe()} but the view stored under {self.path} uses "
                    f"{state.ttype.describe()}; cast the `time` column to match"
                )
            want = {f.name: f.dataType for f in _data_fields(state.inputs[n])}
            have = {f.name: f.dataType for f in _data_fields(schema)}
            if set(want) != set(have) or any(not _same_type(want[c], have[c]) for c in want):
                raise SchemaMismatchError(
                    f"{op}: input `{n}` has data columns {_describe(have)} but the view stored under {self.path} "
                    f"has {_describe(want)}; select and cast the columns to match"
                )
        return out

    def _check_output(self, op: str, result: Any, ttype: TimeType, state: _State | None) -> T.StructType:
        if not isinstance(result, DataFrame):
            raise IncrementalStateError(f"{op}: the query returned {type(result).__name__}, not a collection DataFrame")
        cs = inspect(result, op=op, side="query's output")
        if cs.ttype != ttype:
            raise TimeTypeMismatchError(
                f"{op}: the query's output has time type {cs.ttype.describe()} but its inputs have "
                f"{ttype.describe()}; an incremental view needs the output in the inputs' time"
            )
        schema = T.StructType([*cs.data_fields, result.schema[TIME], result.schema[DIFF]])
        if state is not None:
            want = {f.name: f.dataType for f in _data_fields(state.output)}
            have = {f.name: f.dataType for f in cs.data_fields}
            if list(want) != list(have) or any(not _same_type(want[c], have[c]) for c in want):
                raise SchemaMismatchError(
                    f"{op}: the query's output has data columns {_describe(have)} but the view stored under "
                    f"{self.path} has {_describe(want)}; the query must stay the same from update to update"
                )
            return state.output
        return schema

    def _clean_up(self) -> None:
        """Keep the newest ``keep`` versions; delete older manifests, then the directories none of them uses."""
        manifests = self._manifests()
        for _, name in manifests[self.keep :]:
            self._files.delete(self._files.join(MANIFESTS, name))
        live: set[str] = set()
        for _, name in manifests[: self.keep]:
            live |= _State.from_json(self._files.read_text(self._files.join(MANIFESTS, name))).referenced()
        newest = manifests[0][0] if manifests else 0
        for name in self._files.listdir(self.path):
            if _VERSION_DIR_RE.match(name) and name not in live and int(name[1:9]) <= newest:
                self._files.delete(self._files.join(name))
        for name in self._files.listdir(self._files.join(MANIFESTS)):
            if name.endswith(".tmp") or name.endswith(".tmp.crc"):
                self._files.delete(self._files.join(MANIFESTS, name))

    # -- Structured Streaming ---------------------------------------------------------------
    def foreach_batch(
        self,
        sink: Callable[[DataFrame, int], Any] | None = None,
        *,
        time: str = TIME,
        diff: str | None = None,
        input: str | None = None,
        upto: Callable[[DataFrame, int], Any] | None = None,
        late: str = "error",
    ) -> Callable[[DataFrame, int], None]:
        """A function for ``writeStream.foreachBatch`` that applies each micro-batch to the view.

        Each micro-batch is a change log of the input named ``input`` (the query's only
        parameter when it has one): ``time`` names its time column and ``diff`` its
        multiplicity column (omitted: every row is an insertion), as for
        :func:`spark_differential.collection`.  The batch is applied with the
        micro-batch id as ``batch_id`` (so a replayed batch changes nothing) and
        ``upto`` = the batch's largest time + 1 (the smallest unit of a date or
        timestamp), never earlier than the frontier; ``upto`` may instead be a
        function ``(batch_df, batch_id) -> frontier``, e.g. reading the stream's
        watermark, and must be one for struct times.  The output updates go to
        ``sink(output_df, batch_id)``.  An empty micro-batch does nothing.

        >>> import spark_differential as sd, tempfile
        >>> view = sd.incremental(tempfile.mkdtemp(), lambda edges: edges.dd_count(by="src"))
        >>> fn = view.foreach_batch(lambda out, i: print(i, out.select("src", "count", "time").collect()))
        >>> fn(sd.session().createDataFrame([(1, 2, 3)], "src long, dst long, time long"), 0)
        0 [Row(src=1, count=1, time=3)]
        """

        if late not in LATE_MODES:
            raise ValueError(f"foreach_batch: late must be one of {LATE_MODES}, got {late!r}")
        name = input
        if name is None:
            params = _params(self.query)
            if len(params) != 1:
                raise IncrementalStateError(
                    f"foreach_batch: the query has inputs {params}; say which one the stream feeds with input=..."
                )
            name = params[0]

        def apply(batch: DataFrame, batch_id: int) -> None:
            coll = collection(batch, time=time, diff=diff, check_nulls=False)
            coll = coll.persist()
            try:
                if upto is not None:
                    if coll.isEmpty():
                        return
                    frontier = upto(batch, batch_id)
                else:
                    frontier = self._next_frontier(coll)
                    if frontier is None:
                        return
                out = self.update(upto=frontier, batch_id=int(batch_id), late=late, **{name: coll})
                if sink is not None:
                    sink(out, int(batch_id))
            finally:
                coll.unpersist()

        return apply

    def _next_frontier(self, coll: DataFrame) -> Any:
        """The batch's largest time + 1, not earlier than the frontier; None for an empty batch."""
        cs = inspect(coll, op="foreach_batch")
        ttype = cs.ttype
        if not isinstance(ttype, Total):
            raise FrontierError(
                f"foreach_batch: with {ttype.describe()} times there is no 'largest time + 1'; pass "
                "upto=lambda batch_df, batch_id: <the new frontier, a list of times>"
            )
        top = coll.select(F.max(ttype.encode_column(F.col(TIME))[0])).first()
        if top is None or top[0] is None:
            return None
        nxt = int(top[0]) + 1
        state = self._state()
        if state is not None and state.frontier:
            nxt = max(nxt, int(state.frontier[0][0]))
        return ttype.decode_value((nxt,))


def _late_guard(op: str, name: str, df: DataFrame, ttype: TimeType, front: list[Leaves]) -> DataFrame:
    """``df`` unchanged, but the job writing it fails with :class:`LateUpdateError` at a late update."""
    msg = F.concat(
        F.lit(f"spark_differential LateUpdateError: {op}: input `{name}` has an update at time "),
        F.col(TIME).cast("string"),
        F.lit(
            f", not in the future of the view's frontier {_frontier_value(ttype, front)!r}; the view already "
            "returned its output there. Send it at a later time, or pass late='advance' to count it from the "
            "frontier on."
        ),
    )
    guarded = F.when(in_future(df, ttype, front), F.col(TIME)).otherwise(F.raise_error(msg))
    return df.withColumn(TIME, guarded)


def _incoming(
    op: str, name: str, df: DataFrame, ttype: TimeType, front: list[Leaves] | None, late: str
) -> DataFrame:
    """New updates of input ``name`` as the view takes them: checked against (or lifted into the
    future of) the frontier ``front``."""
    if front is None:
        return df
    if late == "error":
        return _late_guard(op, name, df, ttype, front)
    return lift(df, ttype, front).select(*df.columns)


def _consolidate(df: DataFrame) -> DataFrame:
    data = [c for c in df.columns if c not in (TIME, DIFF)]
    return (
        df.groupBy(*data, TIME).agg(F.sum(DIFF).cast("long").alias(DIFF)).where(F.col(DIFF) != 0).select(*data, TIME, DIFF)
    )


def _advance(df: DataFrame, ttype: TimeType, frontier: Sequence[Leaves]) -> DataFrame:

    return dd_consolidate(df, frontier=[ttype.decode_value(f) for f in frontier])


def _as_frontier(op: str, ttype: TimeType, upto: Any) -> list[Leaves]:
    if upto is None:
        raise FrontierError(f"{op}: upto is required: the new frontier (a time, or a list of times for struct times)")
    try:
        return Antichain.from_values(ttype, upto).elements
    except FrontierError as e:
        raise FrontierError(f"{op}: upto={upto!r}: {e}") from None
    except (TypeError, ValueError, KeyError) as e:
        raise FrontierError(f"{op}: upto={upto!r} is not a time of type {ttype.describe()} ({e})") from None


def _frontier_value(ttype: TimeType, frontier: Sequence[Leaves]) -> Any:
    if isinstance(ttype, Total) and len(frontier) == 1:
        return ttype.decode_value(frontier[0])
    return [ttype.decode_value(f) for f in frontier]


def _params(query: Callable[..., Any]) -> list[str]:
    try:
        sig = _inspect.signature(query)
    except (TypeError, ValueError):
        return []
    kinds = (_inspect.Parameter.POSITIONAL_OR_KEYWORD, _inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _describe(cols: Mapping[str, T.DataType]) -> str:
    return "{" + ", ".join(f"{c}: {t.simpleString()}" for c, t in cols.items()) + "}"


def incremental(
    path: str,
    query: Callable[..., DataFrame],
    *,
    spark: SparkSession | None = None,
    keep: int = 2,
    compact: bool | None = None,
    compact_every: int = 8,
    stage: int | None = None,
) -> IncrementalView:
    """A view of ``query`` kept up to date from state stored under ``path``.

    ``query`` is a function of named collections (its parameter names are the
    view's inputs), the same code a one-shot run would call: any ``dd_*`` operators,
    ``dd_iterate`` included, and linear DataFrame steps.  Feed it with
    :meth:`IncrementalView.update`; on an existing ``path`` the view resumes from the
    newest committed version (give the same query).  ``keep`` committed versions
    are kept (at least 2: the current one and the one before).  One writer per
    ``path`` at a time.

    Each update stages its new updates as one more Parquet directory per input
    (and its output as one more for the output returned so far); when an input (or
    the output) would have more than ``compact_every`` directories, the older ones
    are merged into one, advanced to the frontier and consolidated.

    ``compact`` says whether the stored inputs are compacted to the frontier
    (their size then follows the live data, not its history).  Left unset, they
    are, unless the query uses ``differentiate``, ``dd_delay`` or ``dd_asof_join``:
    those read the *changes* of their input, so the output at later times depends
    on when earlier updates happened, and the view then keeps the inputs' full
    history (exact; each update then costs the size of that history; a warning is
    logged).  ``compact=True`` makes that case an :class:`IncrementalStateError`;
    ``compact=False`` never compacts the inputs (and runs in stage 1).  The
    returned output is exact in every case.

    ``stage`` (see the module docstring): left unset, a new view runs in stage 2
    (per-operator traces: an update's kernels see the changes and the trace rows of
    the keys they touch) when its query allows it, else in stage 1 (the query
    re-run on the stored inputs), with one log line saying why; ``stage=1`` asks
    for stage 1, ``stage=2`` makes a query that cannot run there an
    :class:`IncrementalStateError`.  The stage is fixed when the view is created.
    In stage 2, each stateful operator's trace files are merged (advanced to the
    frontier and consolidated) every ``compact_every`` updates as well.

    >>> import spark_differential as sd, tempfile
    >>> spark = sd.session()
    >>> path = tempfile.mkdtemp()
    >>> q = lambda orders, customers: orders.dd_join(customers, on="cid").dd_count(by="region")
    >>> o = spark.createDataFrame([(1, 10, 0, 1)], "oid long, cid long, time long, diff long")
    >>> c = spark.createDataFrame([(10, "eu", 0, 1)], "cid long, region string, time long, diff long")
    >>> sd.incremental(path, q).update(upto=1, orders=o, customers=c).collect()
    [Row(region='eu', count=1, time=0, diff=1)]
    >>> o2 = spark.createDataFrame([(2, 10, 3, 1)], "oid long, cid long, time long, diff long")
    >>> sd.incremental(path, q).update(upto=4, orders=o2).orderBy("diff").collect()   # resumed
    [Row(region='eu', count=1, time=3, diff=-1), Row(region='eu', count=2, time=3, diff=1)]
    """
    if not isinstance(path, str) or not path:
        raise TypeError(f"sd.incremental: path must be a non-empty string, got {path!r}")
    if spark is None:
        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    return IncrementalView(spark, path, query, keep=keep, compact=compact, compact_every=compact_every, stage=stage)


__all__ = ["IncrementalView", "incremental", "lift", "lift_updates", "upset_coefficients"]
