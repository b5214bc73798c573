"""An incremental view's versions on disk: reading and writing its collections, committing, cleaning up.

On ``(data, time, diff)``: every collection a view stores (its traces, its stored
inputs, the output an update returned or held back) is a set of Parquet directories
written by committed versions (:mod:`spark_differential.incremental.storage` names them).
A :class:`Store` reads a collection back from its directories (one scan), writes several
collections in one Parquet write partitioned by tag, rolls a trace (adds a version's new
directory and, when its :class:`~spark_differential.trace.parquet.ParquetPolicy` says so,
merges older ones in the same write), commits a version by writing its manifest
(:class:`~spark_differential.incremental.manifest.State`) to a temporary name and renaming
it, and deletes what no kept version names.  Readers take the newest manifest, so an update
that fails or is killed before its manifest leaves the previous version current.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core import settings
from spark_differential.core.lattice import Leaves
from spark_differential.core.lazy import lazy
from spark_differential.core.session import local_frame
from spark_differential.core.shipped import collect_mapped
from spark_differential.engine.kernel_form import arrow_schema
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.arrow_cache import ArrowCache
from spark_differential.incremental.files import Files
from spark_differential.incremental.manifest import NextFrontier, State
from spark_differential.incremental.storage import KIND, part, physical, physical_names, tagged
from spark_differential.kernels.common import conform
from spark_differential.trace.arrow import concat_tables
from spark_differential.trace.parquet import ParquetPolicy, ParquetTrace

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
pq = lazy("pyarrow.parquet")

MANIFESTS = "_manifests"
INLINE = "_sd_rows"  # a one-task write's result: the rows of a kind it wrote, as an Arrow IPC stream
# the output an update returns comes back with its one-task write's result when at most this big (Arrow bytes)
INLINE_BYTES = 8 << 20
INLINE_KINDS = ("o",)
# a task's Part of this kind is not a stored collection: the update's new frontier it found (one row, one
# leaf; manifest.NextFrontier), sent back with the write's result only
FRONT = "_front"
# a collection a task computed: (its kind, its rows in the collection's columns, the prefix of their
# names in the files: None for the kind itself); see Store.write_task
Part = tuple[str, "pa.Table", "str | None"]
# what writer's tasks return (a StructType: a DDL string costs mapInArrow a few py4j round trips to parse)
_WRITTEN = T.StructType([T.StructField(KIND, T.StringType(), True), T.StructField(INLINE, T.BinaryType(), True)])
MANIFEST_RE = re.compile(r"^v(\d{8})\.json$")
VERSION_DIR_RE = re.compile(r"^v\d{8}-[0-9a-f]{8}$")


class Store:
    """The versions of the view stored under ``path`` (see the module docstring).

    >>> import spark_differential as sd, tempfile
    >>> store = Store(sd.session(), tempfile.mkdtemp())
    >>> df = sd.session().createDataFrame([(1, 0, 1)], "x long, time long, diff long")
    >>> store.write_tagged("v00000001-0a1b2c3d/new", [("i0", df, df.schema)])
    {'i0': 'v00000001-0a1b2c3d/new/_sd_kind=i0'}
    >>> store.read(["v00000001-0a1b2c3d/new/_sd_kind=i0"], df.schema, "i0").collect()
    [Row(x=1, time=0, diff=1)]
    >>> store.state() is None   # nothing committed yet
    True
    """

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.files = Files(spark, path)
        self.root = self.files.root
        # the rows of directories the last one-task write wrote, got back with its result (writer): only the
        # last write's, so a view kept for many updates holds one update's output at most
        self.inlined: dict[str, pa.Table] = {}
        self.front: int | None = None  # the new frontier the last one-task write's task found (FRONT), if any
        self._empty: dict[str, DataFrame] = {}  # read's empty collections, by schema
        self._rows: dict[str, int] = {}  # local_rows' counts, by data file (a committed file never changes)
        self._referenced: dict[str, set[str]] = {}  # clean_up's: the directories each kept manifest names
        self._cache: ArrowCache | None = None  # the Arrow copies the last update's task kept (clean_up forgets)

    # -- reading ---------------------------------------------------------------------------
    def manifests(self) -> list[tuple[int, str]]:
        """The committed versions' manifests ``(version, file name)``, newest first."""
        found = []
        for name in self.files.listdir(self.files.join(MANIFESTS)):
            m = MANIFEST_RE.match(name)
            if m:
                found.append((int(m.group(1)), name))
        return sorted(found, reverse=True)

    def state(self) -> State | None:
        """The newest committed version, or None before the first update."""
        for _, name in self.manifests():
            state = State.from_json(self.files.read_text(self.files.join(MANIFESTS, name)))
            if not self.files.exists(self.files.join(state.directory)):
                raise IncrementalStateError(
                    f"sd.incremental: manifest {name} under {self.root} names the directory {state.directory}, "
                    "which is missing; the state was changed outside the library. Restore it, or start a new "
                    "view at an empty path."
                )
            return state
        return None

    def read(self, rels: Sequence[str], schema: T.StructType, prefix: str) -> DataFrame:
        """One stored collection: the union of its files ``rels`` (one scan), with ``schema``'s column names.

        ``prefix`` names the collection's columns in the files (:func:`~.storage.physical`)."""
        if not rels:  # (made once per schema: an empty DataFrame costs some 30 py4j round trips)
            key = schema.json()
            if key not in self._empty:  # local rows from Arrow: reading them runs no Spark job
                self._empty[key] = self.spark.createDataFrame(arrow_schema(self.spark, schema).empty_table(), schema)
            return self._empty[key]
        names = physical(prefix, schema)
        stored = T.StructType([T.StructField(p, f.dataType, True) for p, f in zip(names, schema.fields)])
        df = self.spark.read.schema(stored).parquet(*[self.files.join(r) for r in rels])
        return df.select(*[F.col(p).alias(f.name) for p, f in zip(names, schema.fields)])

    def output(self, state: State, present: bool = True) -> DataFrame:
        """What the update that committed ``state`` returned (``present``: it stored rows): read from
        its files, or, when this store's one-task write got those rows back with its result
        (:func:`writer`), a DataFrame of them, which reading costs no Spark job."""
        rows = self.inlined.get(state.output_file) if present else None
        if rows is None:
            return self.read([state.output_file] if present else [], state.output, "o")
        table = rows.select(physical("o", state.output)).rename_columns(state.output.names)
        return local_frame(self.spark, table, state.output, arrow_schema(self.spark, state.output))

    def found_front(self, frontier: NextFrontier) -> list[Leaves]:
        """The new frontier the last one-task write's task found (:func:`front_part`); none sent
        back (the task read no row): the old one."""
        return frontier.after(None) if self.front is None else [(self.front,)]

    def local_rows(self, directories: Sequence[str]) -> int:
        """The rows of stored directories on this machine (paths as :meth:`local_dirs` gives them),
        from their Parquet footers; each file's count kept, as a version's files never change
        (a new attempt writes a new version directory)."""
        total = 0
        for d in directories:
            for f in parquet_files(d):
                rows = self._rows.get(f)
                if rows is None:
                    if len(self._rows) >= 100_000:
                        self._rows.clear()
                    rows = self._rows[f] = pq.ParquetFile(f).metadata.num_rows
                total += rows
        return total

    def size(self, rel: str) -> int:
        """Bytes of a stored directory (relative to the root)."""
        return self.files.size(self.files.join(rel))

    # -- writing ---------------------------------------------------------------------------
    def write_tagged(self, subdir: str, parts: Sequence[tuple[str, DataFrame, T.StructType]]) -> dict[str, str]:
        """Store collections in one Parquet write partitioned by tag, under ``subdir`` (relative to the root).

        Returns the stored directory of each tag that had rows (no rows: no directory)."""
        if not parts:
            return {}
        wide: DataFrame | None = None
        for t, df, schema in parts:
            one = tagged(df, t, t, schema)
            wide = one if wide is None else wide.unionByName(one, allowMissingColumns=True)
        assert wide is not None
        return self.write_wide(subdir, wide)

    def write_wide(self, subdir: str, wide: DataFrame, one_task: bool = False,
                   cache: ArrowCache | None = None) -> dict[str, str]:
        """Store rows tagged by :data:`~.storage.KIND` (each collection under its physical column names) in
        one Parquet write partitioned by tag, under ``subdir``; the stored directory of each tag written.

        ``one_task``: ``wide`` is computed by one task (an update run inside one task); on this
        machine's filesystem that task then writes the files itself (:func:`writer`: one job that
        returns the kinds written, no job commit; ``cache``: :func:`writer`'s), else Spark's writer does."""
        root = self.files.local_root() if one_task else None
        if root is not None:
            return self._written(subdir, collect_mapped(wide, writer(f"{root}/{subdir}", cache), _WRITTEN,
                                                        f"{root}/{subdir}"))
        wide.write.partitionBy(KIND).parquet(self.files.join(subdir))
        prefix = f"{KIND}="
        return {n[len(prefix):]: f"{subdir}/{n}" for n in self.files.listdir(self.files.join(subdir))
                if n.startswith(prefix)}

    def write_task(self, subdir: str, rows: DataFrame, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[Part]],
                   wide: T.StructType, cache: ArrowCache | None = None, large: bool | None = None) -> dict[str, str]:
        """:meth:`write_wide` of the collections (:data:`Part` s) the function ``fn`` computes from
        ``rows`` in one task (``wide``: the task's rows as :meth:`write_wide` takes them): on this
        machine's filesystem the same Python worker writes them as it computes them
        (:func:`part_writer` after ``fn``: no second Python stage, no Arrow round trip through
        the JVM, no rows padded to ``wide``), else Spark's writer does.  ``large``: the session's
        :func:`~spark_differential.core.settings.large_var_types`, when the caller has read it."""
        root = self.files.local_root()
        schema = arrow_schema(self.spark, wide, large)
        if root is None:
            return self.write_wide(subdir, rows.mapInArrow(widened(fn, schema), wide))
        write = part_writer(f"{root}/{subdir}", schema, cache)
        return self._written(subdir, collect_mapped(rows, lambda batches: write(fn(batches)), _WRITTEN,
                                                    f"{root}/{subdir}"))

    def _written(self, subdir: str, rows: Sequence[Any]) -> dict[str, str]:
        """The directories of the kinds :func:`writer`'s tasks say they wrote (``rows``); the rows a
        single task wrote of a kind it sent back are kept for :meth:`output`."""
        self.front = None
        for r in rows:
            if r[KIND] == FRONT:
                self.front = int(pa.ipc.open_stream(bytes(r[INLINE])).read_all().column(0)[0].as_py())
        rows = [r for r in rows if r[KIND] != FRONT]
        written = {str(r[KIND]): f"{subdir}/{KIND}={r[KIND]}" for r in rows}
        self.inlined.clear()
        for r in rows:
            if r[INLINE] is not None and sum(q[KIND] == r[KIND] for q in rows) == 1:  # one task wrote it all
                self.inlined[written[str(r[KIND])]] = pa.ipc.open_stream(bytes(r[INLINE])).read_all()
        return written

    def arrow_cache(self) -> ArrowCache | None:
        """Where a task on this machine keeps Arrow copies (and indexes) of this view's files:
        :meth:`ArrowCache.default <spark_differential.incremental.arrow_cache.ArrowCache.default>`
        under the session's settings; ``None`` when the view is not on this machine's filesystem."""
        if self.files.local_root() is None:
            return None
        self._cache = ArrowCache.default(settings.arrow_cache_bytes(self.spark), settings.index_rows(self.spark))
        return self._cache

    def local_dirs(self, rels: Sequence[str]) -> list[str] | None:
        """Stored directories (relative to the root) as paths of this machine's filesystem, where
        the view is stored on it (``None``: elsewhere, read through Spark)."""
        root = self.files.local_root()
        return None if root is None else [f"{root}/{r}" for r in rels]

    def write_data(self, directory: str, wide: DataFrame, one_task: bool = False,
                   cache: ArrowCache | None = None) -> set[str]:
        """A version's last write (``directory/data``): what the update returns, what it holds back, the
        merged traces; the directories it stored (a collection with no rows has none).  ``one_task``:
        as :meth:`write_wide` says."""
        return set(self.write_wide(f"{directory}/data", wide, one_task, cache).values())

    def roll(self, old: Sequence[str], new: str | None, directory: str, tag: str, schema: T.StructType,
             policy: ParquetPolicy, merge: Callable[[Sequence[str]], DataFrame],
             force: bool = False) -> tuple[list[str], DataFrame | None]:
        """A stored collection's files in this version (:meth:`ParquetTrace.roll
        <spark_differential.trace.parquet.ParquetTrace.roll>`): ``old`` and then ``new``, after the
        merge ``policy`` asks for, whose rows (``merge(the files merged)``, advanced and
        consolidated) are returned tagged for the version's last write: ``<tag>c`` when all the
        files merge, ``<tag>m`` when the deltas do (the geometric policy)."""
        def name(whole: bool) -> str:
            return f"{tag}{'c' if whole else 'm'}"

        trace, merging = ParquetTrace(tuple(old)).roll(
            new, policy, self.size, lambda whole: part(directory, name(whole)), force)
        if not merging:
            return list(trace.files), None
        return list(trace.files), tagged(merge(merging), name(len(merging) == len(old)), tag, schema)

    # -- committing ------------------------------------------------------------------------
    def mkdirs(self, directory: str) -> None:
        """Create a version's directory (relative to the root)."""
        self.files.mkdirs(self.files.join(directory))

    def commit(self, state: State) -> None:
        """Make ``state`` the newest committed version: write its manifest (to a temporary name, renamed)."""
        self.files.mkdirs(self.files.join(MANIFESTS))
        self.files.write_text_atomic(self.files.join(MANIFESTS, f"v{state.version:08d}.json"), state.to_json())

    def clean_up(self, keep: int) -> None:
        """Keep the newest ``keep`` versions; delete older manifests, then the directories none of them
        uses, with the Arrow copies of their files an update's task kept on this machine
        (:meth:`ArrowCache.forget <spark_differential.incremental.arrow_cache.ArrowCache.forget>`)."""
        manifests = self.manifests()
        for _, name in manifests[keep:]:
            self.files.delete(self.files.join(MANIFESTS, name))
        live: set[str] = set()
        for _, name in manifests[:keep]:
            if name not in self._referenced:  # (a committed manifest never changes: read once)
                text = self.files.read_text(self.files.join(MANIFESTS, name))
                self._referenced[name] = State.from_json(text).referenced()
            live |= self._referenced[name]
        for name in set(self._referenced) - {n for _, n in manifests[:keep]}:
            del self._referenced[name]
        newest = manifests[0][0] if manifests else 0
        for name in self.files.listdir(self.root):
            if VERSION_DIR_RE.match(name) and name not in live and int(name[1:9]) <= newest:
                if self._cache is not None and (local := self.local_dirs([name])) is not None:
                    self._cache.forget(local[0])
                self.files.delete(self.files.join(name))
        for name in self.files.listdir(self.files.join(MANIFESTS)):
            if name.endswith(".tmp") or name.endswith(".tmp.crc"):
                self.files.delete(self.files.join(MANIFESTS, name))


def parquet_files(directory: str) -> list[str]:
    """The data files of a Parquet directory Spark wrote (its ``_SUCCESS``, ``.crc`` files left out)."""
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.endswith(".parquet") and not f.startswith(("_", ".")))


def read_local(directories: Sequence[str], prefix: str, schema: pa.Schema, cache: ArrowCache | None = None
               ) -> pa.Table:
    """A stored collection (columns named by :func:`~spark_differential.incremental.storage.physical`
    with ``prefix``) read from its Parquet directories on this machine with pyarrow, as ``schema``
    (through ``cache``'s memory-mapped copies, when given)."""
    return concat_tables([t for _, t in read_local_files(directories, prefix, schema, cache)], schema)


def read_local_files(directories: Sequence[str], prefix: str, schema: pa.Schema, cache: ArrowCache | None = None
                     ) -> list[tuple[str, pa.Table]]:
    """:func:`read_local`, file by file: each data file's path and rows."""
    names = physical_names(prefix, len(schema))
    return [(f, conform((pq.read_table(f, columns=names) if cache is None else cache.read(f, names))
                        .rename_columns(schema.names), schema))
            for d in directories for f in parquet_files(d)]


def writer(target: str, cache: ArrowCache | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function writing a version's collections on this machine's filesystem
    from the task that computed them: its rows (tagged by :data:`~.storage.KIND`, each
    collection's columns named by its prefix) go to one Parquet file per kind and task, as
    :func:`part_writer` says."""

    def prefix(kind: str) -> str:  # o and p: the output's columns; <tag>c and <tag>m: the trace's
        return "o" if kind in ("o", "p") else kind[:-1] if kind[-1] in "cm" else kind

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts: dict[str, list[pa.Table]] = {}
        for batch in batches:
            table = pa.Table.from_batches([batch])
            kind_col = table.column(KIND)
            for kind in pc.unique(kind_col).to_pylist():
                mine = [c for c in table.column_names if c.startswith(f"_sd_{prefix(kind)}_")]
                parts.setdefault(kind, []).append(table.filter(pc.equal(kind_col, kind)).select(mine))
        yield from _write_kinds(target, parts, cache)

    return run


def part_writer(target: str, schema: pa.Schema, cache: ArrowCache | None = None
                ) -> Callable[[Iterator[Part]], Iterator[pa.RecordBatch]]:
    """:func:`writer` of collections as they are computed (:data:`Part` s), each named and typed
    as its columns of ``schema`` (a task's rows tagged by :data:`~.storage.KIND`) and written to
    one Parquet file per kind and task, ``target/_sd_kind=<kind>/part-<task's partition>.parquet``,
    as Spark's partitioned write lays them out (written under a temporary name and renamed, so
    a retried task replaces its file whole).  The function yields the kinds written
    (:data:`~.storage.KIND`) and, for the output an update returns (:data:`INLINE_KINDS`) when at
    most :data:`INLINE_BYTES`, its rows as an Arrow IPC stream (:data:`INLINE`): the driver then
    returns them without reading the files back.  ``cache``: each file but the output's also
    leaves its memory-mapped Arrow copy there, for the next update's task to read
    (:mod:`~spark_differential.incremental.arrow_cache`)."""

    def run(parts: Iterator[Part]) -> Iterator[pa.RecordBatch]:
        tables: dict[str, list[pa.Table]] = {}
        for kind, rows, prefix in parts:
            if rows.num_rows:
                tables.setdefault(kind, []).append(rows if kind == FRONT else physical_rows(rows, kind, schema, prefix))
        yield from _write_kinds(target, tables, cache)

    return run


def _write_kinds(target: str, parts: dict[str, list[pa.Table]], cache: ArrowCache | None
                 ) -> Iterator[pa.RecordBatch]:
    """Write each kind's tables (:func:`part_writer`) and yield the one row per kind it says."""
    blobs: list[bytes | None] = []
    for kind, tables in parts.items():
        if kind == FRONT:  # (not stored: sent back)
            blobs.append(_ipc(pa.concat_tables(tables)))
            continue
        directory = os.path.join(target, f"{KIND}={kind}")
        os.makedirs(directory, exist_ok=True)
        name = f"part-{_partition():05d}.parquet"
        tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
        table = pa.concat_tables(tables)
        pq.write_table(table, tmp)
        os.replace(tmp, os.path.join(directory, name))
        if cache is not None and kind not in ("o", "p"):
            cache.keep(os.path.join(directory, name), table)
        blobs.append(_ipc(table) if kind in INLINE_KINDS and table.nbytes <= INLINE_BYTES else None)
    if parts:
        yield pa.RecordBatch.from_arrays([pa.array(list(parts), pa.string()), pa.array(blobs, pa.binary())],
                                         schema=pa.schema([(KIND, pa.string()), (INLINE, pa.binary())]))


def front_part(frontier: NextFrontier, tables: Sequence[pa.Table], leaf: str) -> tuple[list[Leaves], Part]:
    """The new frontier a task finds from the largest time (column ``leaf``) of the new updates
    it read (``tables``), and the :data:`Part` sending it back with what it writes (:data:`FRONT`,
    read by :meth:`Store.found_front`)."""
    tops = [pc.max(t.column(leaf)).as_py() for t in tables if t.num_rows]
    front = frontier.after(max(tops) if tops else None)
    return front, (FRONT, pa.table({"front": [front[0][0]]}), None)


def _ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def widened(fn: Callable[[Iterator[pa.RecordBatch]], Iterator[Part]], schema: pa.Schema
            ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a task's collections (``fn``: :data:`Part` s) as rows of
    ``schema`` tagged by :data:`~.storage.KIND` (:func:`wide_rows`), for Spark's writer."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for kind, rows, prefix in fn(batches):
            if rows.num_rows:
                yield from wide_rows(rows, kind, schema, prefix).to_batches()

    return run


def physical_rows(rows: pa.Table, kind: str, schema: pa.Schema, prefix: str | None = None) -> pa.Table:
    """``rows`` (one stored collection's columns, in order) under their names and types in
    ``schema`` (:func:`~.storage.physical` with ``prefix``, by default ``kind``)."""
    names = physical_names(prefix or kind, rows.num_columns)
    return conform(pa.Table.from_arrays(rows.columns, names=names), pa.schema([schema.field(n) for n in names]))


def wide_rows(rows: pa.Table, kind: str, schema: pa.Schema, prefix: str | None = None) -> pa.Table:
    """``rows`` (one stored collection's columns, in order) as rows of a task's one output
    (``schema``: :data:`~.storage.KIND`, then every stored collection's columns as
    :func:`~.storage.physical` names them with ``prefix``, by default ``kind``; the others null)."""
    n = rows.num_rows
    own = physical_rows(rows, kind, schema, prefix)
    arrays = [pa.array(np.full(n, kind, dtype=object), pa.string()) if f.name == KIND
              else own.column(f.name) if f.name in own.column_names else pa.nulls(n, f.type) for f in schema]
    return conform(pa.Table.from_arrays(arrays, names=schema.names), schema)


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return int(ctx.partitionId()) if ctx is not None else 0


__all__ = ["FRONT", "MANIFESTS", "Part", "Store", "front_part", "parquet_files", "part_writer", "physical_rows", "read_local",
           "read_local_files", "wide_rows", "widened", "writer"]
