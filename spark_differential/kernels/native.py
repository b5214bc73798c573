"""Consolidation and key semi-joins on Arrow tables, without a DuckDB query where Arrow can.

On ``(data, time, diff)``: :func:`consolidated` sums the ``diff`` of rows that agree
on every other column and drops the zero sums (the consolidated form of a
collection); :func:`touching` keeps the rows whose key some other table has (the
trace rows an iteration's new updates touch).  Both are the kernels' most frequent
small steps: inside a loop run in one task they happen several times per
iteration, where a DuckDB query's fixed cost (registering its inputs, planning)
is a few milliseconds and Arrow's hash grouping and ``is_in`` take a fraction of
that.

Columns of integers (or booleans) without nulls that pack into one int64 are consolidated
by one sort of the packed codes at any size (:func:`packed_codes`, faster than a hash
grouping).  Arrow groups other tables of up to :data:`ARROW_GROUP_ROWS` rows (larger
ones go to DuckDB, faster than Arrow there), and only where it gives exactly what the
SQL gives: grouping columns of integer, boolean, string, binary, date and timestamp types (floating point keys
group ``NaN`` and ``-0.0`` as Spark does only in SQL), sums that cannot overflow
(checked from the largest ``|diff|``; DuckDB's ``::BIGINT`` would raise).  The semi-join
over several columns codes each column's values over both tables (nulls coded equal to
each other, as SQL's ``IS NOT DISTINCT FROM`` matches them) and compares the combined
codes.  Anything else goes to DuckDB.

:func:`key_sorted` consolidates a table of integer columns by one sort and keeps it
sorted by a key (:class:`KeySorted`): the rows of given keys (its
:meth:`~KeySorted.touching`, the same rows as :func:`touching`) are then found by
binary search, which is how the in-task loop reads its traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spark_differential.core.lazy import lazy
from spark_differential.kernels import duck
from spark_differential.kernels.common import key_eq
from spark_differential.kernels.stab import dense_ranks, ids, packed, sort_packed

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
orders = lazy("spark_differential.kernels.order")  # imports numba: loaded by the first packed consolidation

_SAFE_SUM = 1 << 62
# Above this many rows DuckDB's single-threaded grouping beats Arrow's (measured on
# five int64 columns: 2.5 against 6.2 ms at 20,000 rows, 44 against 27 ms at 200,000)
ARROW_GROUP_ROWS = 50_000


def _groupable(t: pa.DataType) -> bool:
    types = pa.types
    return bool(
        types.is_integer(t) or types.is_boolean(t) or types.is_string(t) or types.is_large_string(t)
        or types.is_binary(t) or types.is_large_binary(t) or types.is_date(t) or types.is_timestamp(t)
    )


def can_sum(table: pa.Table, diff: str) -> bool:
    """Whether ``table``'s ``diff`` column (integers without nulls) sums to no overflow in any
    order (:func:`sums_fit`)."""
    d = table.column(diff)
    if not pa.types.is_integer(d.type) or d.null_count:
        return False
    if table.num_rows == 0:
        return True
    found = pc.min_max(d)
    return sums_fit(found["min"].as_py(), found["max"].as_py(), table.num_rows)


def sums_fit(lo: int, hi: int, n: int) -> bool:
    """Whether ``n`` integers between ``lo`` and ``hi`` sum to no overflow in any order: the
    largest ``|value|`` times ``n`` stays below 2**62 (Python integers: ``|INT64_MIN|`` does not
    overflow here, and is too large)."""
    return max(-lo, hi, 0) * n < _SAFE_SUM


def in_arrow(table: pa.Table, cols: Sequence[str], diff: str = "_d") -> bool:
    """Whether :func:`consolidated` groups ``table`` by ``cols`` in Arrow (else in DuckDB):
    at most :data:`ARROW_GROUP_ROWS` rows, groupable columns, sums that cannot overflow."""
    fields = table.schema
    return (table.num_rows <= ARROW_GROUP_ROWS and all(_groupable(fields.field(c).type) for c in cols)
            and can_sum(table, diff))


def consolidated(table: pa.Table, cols: Sequence[str], diff: str = "_d") -> pa.Table:
    """``table``'s rows summed by ``cols``: columns ``cols`` then ``diff`` (int64), no zero sums.

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 1, 2, 3], "_d": [1, -1, 2, 1]})
    >>> consolidated(t, ["k"]).sort_by("k").to_pylist()
    [{'k': 2, '_d': 2}, {'k': 3, '_d': 1}]
    """
    cols = list(cols)
    if table.num_rows == 0:
        return table.select([*cols, diff])
    if cols:
        packed = _packed_sums(table, cols, diff)
        if packed is not None:
            return packed
    if in_arrow(table, cols, diff):
        d = table.column(diff).cast(pa.int64())
        if not cols:
            total = pc.sum(d).as_py() or 0
            return pa.table({diff: pa.array([total] if total else [], pa.int64())})
        grouped = table.select(cols).append_column(diff, d).group_by(cols, use_threads=False).aggregate([(diff, "sum")])
        grouped = grouped.filter(pc.not_equal(grouped.column(f"{diff}_sum"), 0))
        return grouped.rename_columns([*cols, diff])
    q = duck.quote(diff)
    select = f"{duck.cols(cols)}, " if cols else ""
    group = "GROUP BY ALL " if cols else ""
    return duck.query(f"SELECT {select}sum({q})::BIGINT AS {q} FROM $X {group}HAVING sum({q}) <> 0", {"X": table})


def _packed_sums(table: pa.Table, cols: Sequence[str], diff: str) -> pa.Table | None:
    """:func:`consolidated` of integer (or boolean) columns without nulls that pack into one
    int64 (:func:`packed_codes`): one sort of the codes and one pass summing each run, in
    code order; ``None`` for other columns or sums that might overflow.  Faster than Arrow's
    hash grouping at every size (four int64 columns, on this project's 2-core machine: 0.21
    against 0.31 ms at 50 rows, 0.61 against 2.2 ms at 20,000, 1.7 against 8.2 ms at
    50,000) and than DuckDB's above that."""
    column = table.column(diff)
    d = int_values(column)
    if d is None or not pa.types.is_integer(column.type) or (len(d) and not sums_fit(int(d.min()), int(d.max()), len(d))):
        return None
    packing = packed_codes(table, cols)
    if packing is None:
        return None
    code, _, _, arrays = packing
    order, code = sort_packed(code, overwrite=True)
    rows, _, sums = orders.sorted_sums(code, order, d)
    fields = [table.schema.field(c) for c in cols]  # (as the input's: nullability too, as Arrow's grouping keeps it)
    return pa.Table.from_arrays([*[pa.array(arrays[f.name][rows], type=f.type) for f in fields], pa.array(sums, pa.int64())],
                                schema=pa.schema([*fields, pa.field(diff, pa.int64())]))


def _packed(table: pa.Table, keys: pa.Table, cols: Sequence[str]) -> tuple[pa.Array, pa.Array] | None:
    """Integer key columns without nulls as one int64 per row (mixed radix over the
    columns' ranges in both tables), or ``None`` when they are not integers or the
    ranges' product does not fit."""
    import numpy as np

    def fits(t: pa.DataType) -> bool:
        return pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)

    if not all(fits(table.schema.field(c).type) for c in cols):
        return None
    left = np.zeros(table.num_rows, dtype=np.int64)
    right = np.zeros(keys.num_rows, dtype=np.int64)
    span = 1
    for c in cols:
        a = table.column(c).to_numpy().astype(np.int64, copy=False)
        b = keys.column(c).to_numpy().astype(np.int64, copy=False)
        lo = int(min(a.min(), b.min()))
        size = int(max(a.max(), b.max())) - lo + 1
        span *= size
        if span >= _SAFE_SUM:
            return None
        left = left * size + (a - lo)
        right = right * size + (b - lo)
    return pa.array(left), pa.array(right)


def touching(table: pa.Table, keys: pa.Table, cols: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose ``cols`` equal (nulls equal to nulls) those of some row of ``keys``.

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 2, 3, 2], "v": ["a", "b", "c", "d"]})
    >>> touching(t, pa.table({"k": [2, 9]}), ["k"]).to_pylist()
    [{'k': 2, 'v': 'b'}, {'k': 2, 'v': 'd'}]
    """
    cols = list(cols)
    if not cols:
        return table if keys.num_rows else table.slice(0, 0)
    if table.num_rows == 0 or keys.num_rows == 0:
        return table.slice(0, 0)
    if len(cols) > 1:  # first the rows matching in one column (one is_in), then the rest on those only
        table = _narrowed(table, keys, cols)
        if table.num_rows == 0:
            return table
    if all(_groupable(table.schema.field(c).type) and keys.schema.field(c).type == table.schema.field(c).type
           for c in cols):
        if len(cols) == 1:  # is_in matches a null to a null (skip_nulls=False), as IS NOT DISTINCT FROM
            values = pc.unique(keys.column(cols[0]).combine_chunks())
            return table.filter(pc.is_in(table.column(cols[0]), value_set=values, skip_nulls=False))
        if not any(table.column(c).null_count or keys.column(c).null_count for c in cols):
            packed = _packed(table, keys, cols)
            if packed is not None:
                return table.filter(pc.is_in(packed[0], value_set=pc.unique(packed[1])))
        return _coded_semi(table, keys, cols)  # (nulls too: coded equal to each other)
    sql = f"SELECT x.* FROM $X AS x SEMI JOIN (SELECT DISTINCT {duck.cols(cols)} FROM $K) AS n ON {key_eq([duck.quote(c) for c in cols], 'x', 'n')}"
    return duck.query(sql, {"X": table, "K": keys.select(cols)})


def _coded_semi(table: pa.Table, keys: pa.Table, cols: Sequence[str]) -> pa.Table:
    """:func:`touching` over several columns of groupable types, equal in both tables: each
    column's values coded over both tables (:func:`~.stab.ids`: nulls equal to nulls), the
    codes combined per row, and one ``isin`` (a hash grouping and a semi-join in Arrow cost
    about a millisecond each in fixed costs, for the few rows left after :func:`_narrowed`)."""
    n, m = table.num_rows, keys.num_rows
    codes = [ids([pa.chunked_array([*table.column(c).chunks, *keys.column(c).chunks], table.schema.field(c).type)],
                 n + m) for c in cols]
    code = packed(codes)
    if code is None:
        code = dense_ranks(codes)[0]
    return table.filter(pa.array(np.isin(code[:n], code[n:])))


def _narrowed(table: pa.Table, keys: pa.Table, cols: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose value in one of ``cols`` some row of ``keys`` has (nulls equal
    to nulls): a superset of the rows matching a row of ``keys`` in all of ``cols``, found by one
    ``is_in`` over the column with the most distinct values in ``keys`` (the most selective);
    ``table`` itself when no column can be compared so."""
    best, values = None, None
    for c in cols:
        t = table.schema.field(c).type
        if not _groupable(t) or keys.schema.field(c).type != t:
            continue
        distinct = pc.unique(keys.column(c).combine_chunks())
        if values is None or len(distinct) > len(values):
            best, values = c, distinct
    if best is None:
        return table
    return table.filter(pc.is_in(table.column(best), value_set=values, skip_nulls=False))


# ---------------------------------------------------------------------------------
# tables kept sorted by a key: consolidation by one sort, key lookups by binary search


def int_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A column of integers (or booleans) without nulls as int64 values, else ``None``.

    How the key-sorted kernels and the in-task loop read a column into numpy: a column
    with nulls, of ``uint64`` (its values may not fit) or of any other type is ``None``.

    >>> import pyarrow as pa
    >>> int_values(pa.array([3, -1, 2], pa.int8())).tolist()
    [3, -1, 2]
    >>> int_values(pa.chunked_array([[True], [False]])).tolist()
    [1, 0]
    >>> [int_values(c) for c in (pa.array([1, None]), pa.array([1], pa.uint64()), pa.array(["a"]))]
    [None, None, None]
    """
    import numpy as np

    t = column.type
    if column.null_count:
        return None
    if pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64):
        return _numpy(column).astype(np.int64, copy=False)
    return None


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column without nulls as numpy values (a chunked one read chunk by chunk into one array:
    several times faster than combining its chunks first)."""
    import numpy as np

    return np.asarray(column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False))


@dataclass(frozen=True)
class Radix:
    """A mixed-radix packing of integer columns into one int64 per row: column ``i`` takes
    values ``lo[i] .. lo[i] + size[i] - 1``, the first column most significant, so codes
    order rows as the columns do lexicographically."""

    lo: tuple[int, ...]
    size: tuple[int, ...]

    @staticmethod
    def of(values: Sequence[np.ndarray]) -> Radix | None:
        """The packing of these columns (each non-empty), or ``None`` when their ranges do
        not fit in 62 bits together."""
        lo, size, span = [], [], 1
        for v in values:
            a, b = int(v.min()), int(v.max())
            span *= b - a + 1
            if span >= _SAFE_SUM:
                return None
            lo.append(a)
            size.append(b - a + 1)
        return Radix(tuple(lo), tuple(size))

    def span(self) -> int:
        """The number of codes: every code is below it."""
        span = 1
        for size in self.size:
            span *= size
        return span

    def decoded(self, codes: np.ndarray) -> list[np.ndarray]:
        """The columns' int64 values of rows of these ``codes`` (inside the ranges): :meth:`codes` undone."""
        out = []
        rest = codes
        for lo, size in zip(reversed(self.lo), reversed(self.size)):
            out.append(rest % size + lo if len(out) < len(self.size) - 1 else rest + lo)
            rest = rest // size
        return out[::-1]

    def codes(self, values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        """Codes of rows, and a mask of the rows inside the ranges (``None``: all are); rows
        outside get arbitrary codes."""
        import numpy as np

        code: np.ndarray | None = None
        inside: np.ndarray | None = None
        for v, lo, size in zip(values, self.lo, self.size):
            off = v - lo
            if len(off) and not (int(off.min()) >= 0 and int(off.max()) < size):  # (some row outside: a mask)
                ok = (off >= 0) & (off < size)
                inside = ok if inside is None else inside & ok
                off = np.where(ok, off, 0)
            code = off if code is None else code * size + off
        if code is None:
            return np.zeros(len(values[0]) if values else 0, dtype=np.int64), inside
        return code.astype(np.int64, copy=False), inside


@dataclass(frozen=True)
class KeySorted:
    """A consolidated table sorted by its ``key`` columns (lexicographically), with the key
    of every row packed by ``radix`` into ``codes`` (ascending): the rows of given keys
    are found by binary search."""

    table: pa.Table
    key: tuple[str, ...]
    radix: Radix
    codes: np.ndarray
    _values: dict = field(default_factory=dict, compare=False, repr=False)  # column name -> int64 values

    @staticmethod
    def by_key(table: pa.Table, key: Sequence[str]) -> KeySorted | None:
        """A consolidated ``table`` sorted by ``key`` alone (a stable sort of the key codes: rows
        of one key stay in table order), or ``None`` when a key column is not integers (or
        booleans) without nulls, or the key columns do not pack into one int64.

        >>> import pyarrow as pa
        >>> ks = KeySorted.by_key(pa.table({"k": [2, 1, 2, 1], "v": [1, 2, 3, 4], "_d": [1, 1, 1, 1]}), ["k"])
        >>> ks.table.column("v").to_pylist(), ks.codes.tolist()
        ([2, 4, 1, 3], [0, 0, 1, 1])
        >>> ks.touching(pa.table({"k": [2, 7]})).column("v").to_pylist()
        [1, 3]
        >>> KeySorted.by_key(pa.table({"k": ["a"], "_d": [1]}), ["k"]) is None
        True
        """
        import numpy as np

        values = [int_values(table.column(c)) for c in key]
        if not key or table.num_rows == 0 or any(v is None for v in values):
            return None
        radix = Radix.of(values)  # type: ignore[arg-type]
        if radix is None:
            return None
        codes, _ = radix.codes(values)  # type: ignore[arg-type]
        order = np.argsort(codes, kind="stable")
        return KeySorted(table.take(pa.array(order)), tuple(key), radix, codes[order])

    def values(self, column: str) -> np.ndarray | None:
        """The int64 values of one integer column without nulls (kept for later calls), else ``None``."""
        if column not in self._values:
            self._values[column] = int_values(self.table.column(column))
        return self._values[column]

    def distinct_keys(self) -> list[np.ndarray]:
        """The table's distinct keys as :func:`distinct_keys` gives them (int64 columns, in
        lexicographic order), read off the sorted codes without another sort."""
        import numpy as np

        first = np.ones(len(self.codes), dtype=bool)
        first[1:] = self.codes[1:] != self.codes[:-1]
        return [self.values(c)[first] for c in self.key]  # type: ignore[index]

    def touching(self, keys: pa.Table) -> pa.Table:
        """The rows whose key some row of ``keys`` (its ``key`` columns, integers without nulls)
        has: :func:`touching`, in ``O(|keys| log |table| + output)``."""
        if self.table.num_rows == 0 or keys.num_rows == 0:
            return self.table.slice(0, 0)
        if not self.key:
            return self.table
        values = distinct_keys(keys, self.key)
        if values is None:
            return touching(self.table, keys, self.key)
        return self.touching_distinct(values)

    def touching_distinct(self, values: Sequence[np.ndarray]) -> pa.Table:
        """:meth:`touching` for keys given as :func:`distinct_keys` gives them (distinct
        rows in lexicographic order: codes of any packing come out ascending)."""
        if not self.key:
            return self.table if len(values) and len(values[0]) else self.table.slice(0, 0)
        rows = self.touching_rows(values)
        if len(rows) == 0:
            return self.table.slice(0, 0)
        return self.table.take(pa.array(rows))

    def touching_rows(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """The positions in :attr:`table` (ascending, int64) of the rows :meth:`touching_distinct`
        returns, for a table with a key (a caller may then gather them from a table of the same
        rows, or keep some first)."""
        import numpy as np

        if self.table.num_rows == 0 or len(values[0]) == 0:
            return np.zeros(0, dtype=np.int64)
        wanted, inside = self.radix.codes(values)
        if inside is not None:
            wanted = wanted[inside]
        rows = orders.runs_of(self.codes, wanted)  # (keys as distinct_keys gives them: ascending codes)
        if rows is not None:
            return rows
        lo = np.searchsorted(self.codes, wanted, side="left")
        hi = np.searchsorted(self.codes, wanted, side="right")
        cnt = hi - lo
        keep = cnt > 0
        lo, cnt = lo[keep], cnt[keep]
        total = int(cnt.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        return np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)


def indexable(schema: pa.Schema, cols: Sequence[str]) -> bool:
    """Whether :class:`KeyIndex` can index rows of ``schema`` by ``cols``: at least one column,
    each of a type whose equal values hash equal (integers, booleans, strings, binary, dates,
    timestamps; not floating point, where ``-0.0`` equals ``0.0``)."""
    return bool(cols) and all(_groupable(schema.field(c).type) for c in cols)


def _row_hashes(table: pa.Table, cols: Sequence[str]) -> np.ndarray:
    """DuckDB's ``hash`` of each row's ``cols`` (nulls hash alike), as uint64."""
    import numpy as np

    out = duck.query(f"SELECT hash({duck.cols(list(cols))}) AS h FROM $X", {"X": table.select(list(cols))})
    return np.asarray(out.column(0).to_numpy(), dtype=np.uint64)


@dataclass(frozen=True)
class KeyIndex:
    """An index of a table's rows by the hash of their ``cols``: ``hashes`` ascending and
    ``rows``, the position in the table of the row of each hash.  The rows some keys touch
    (:meth:`touching`, the same rows as :func:`touching`) are then found by binary search, in
    ``O(|keys| log |table| + output)``, and checked exactly (a hash shared by chance only
    adds a candidate).  Kept beside a stored trace file, whose rows never change
    (:meth:`spark_differential.incremental.arrow_cache.ArrowCache.index`).

    >>> import pyarrow as pa
    >>> t = pa.table({"k": ["a", "b", None, "b"], "v": [1, 2, 3, 4]})
    >>> index = KeyIndex.build(t, ["k"])
    >>> index.touching(t, pa.table({"k": ["b", None, "z"]})).to_pylist()
    [{'k': 'b', 'v': 2}, {'k': None, 'v': 3}, {'k': 'b', 'v': 4}]
    >>> KeyIndex.build(pa.table({"x": [0.5]}), ["x"]) is None   # floats: not indexed
    True
    """

    cols: tuple[str, ...]
    hashes: np.ndarray
    rows: np.ndarray

    @staticmethod
    def build(table: pa.Table, cols: Sequence[str]) -> KeyIndex | None:
        """The index of ``table`` by ``cols`` (``None``: not :func:`indexable`)."""
        import numpy as np

        if not indexable(table.schema, cols):
            return None
        hashes = _row_hashes(table, cols)
        rows = np.argsort(hashes, kind="stable").astype(np.int64, copy=False)
        return KeyIndex(tuple(cols), hashes[rows], rows)

    def to_table(self) -> pa.Table:
        """The index as a table (``h``, ``r``), to keep in a file."""
        return pa.table({"h": self.hashes, "r": self.rows})

    @staticmethod
    def from_table(table: pa.Table, cols: Sequence[str]) -> KeyIndex:
        """The index :meth:`to_table` gave (memory-mapped columns are used in place)."""
        return KeyIndex(tuple(cols), table.column("h").to_numpy(), table.column("r").to_numpy())

    def touching(self, table: pa.Table, keys: pa.Table) -> pa.Table:
        """The rows of ``table`` (the indexed one) whose ``cols`` equal those of some row of
        ``keys`` (nulls equal to nulls), in table order."""
        import numpy as np

        cols = list(self.cols)
        if table.num_rows == 0 or keys.num_rows == 0:
            return table.slice(0, 0)
        try:
            wanted_keys = keys.select(cols).cast(table.select(cols).schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return touching(table, keys, cols)
        wanted = np.unique(_row_hashes(wanted_keys, cols))
        lo = np.searchsorted(self.hashes, wanted, side="left")
        cnt = np.searchsorted(self.hashes, wanted, side="right") - lo
        keep = cnt > 0
        lo, cnt = lo[keep], cnt[keep]
        total = int(cnt.sum())
        if total == 0:
            return table.slice(0, 0)
        at = np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
        return touching(table.take(pa.array(np.sort(self.rows[at]))), wanted_keys, cols)


def distinct_keys(keys: pa.Table, cols: Sequence[str]) -> list[np.ndarray] | None:
    """The distinct rows of ``keys``' ``cols`` (integers without nulls) as int64 columns, in
    lexicographic order; ``None`` for other columns."""
    return _distinct_values([int_values(keys.column(c)) for c in cols])


def distinct_keys_of(parts: Sequence[Sequence[pa.ChunkedArray | pa.Array]]) -> list[np.ndarray] | None:
    """:func:`distinct_keys` of the rows of several tables' key columns (``parts``: each table's,
    in the same order), without concatenating them into a table first.

    >>> import pyarrow as pa
    >>> [v.tolist() for v in distinct_keys_of([[pa.array([3, 1])], [pa.array([1, 2])]])]
    [[1, 2, 3]]
    """
    import numpy as np

    if not parts:
        return None
    values = []
    for j in range(len(parts[0])):
        cols = [int_values(p[j]) for p in parts]
        if any(v is None for v in cols):
            return None
        values.append(cols[0] if len(cols) == 1 else np.concatenate(cols))  # type: ignore[arg-type]
    return _distinct_values(values)


def _distinct_values(values: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
    """:func:`distinct_keys` of key columns read by :func:`int_values` (``None``: not integers)."""
    import numpy as np

    if any(v is None for v in values):
        return None
    if not values:
        return []
    if len(values[0]) == 0:  # type: ignore[arg-type]
        return [np.zeros(0, dtype=np.int64) for _ in values]
    radix = Radix.of(values)  # type: ignore[arg-type]
    if radix is None:
        order = np.lexsort(tuple(reversed(values)))
        s = [v[order] for v in values]  # type: ignore[index]
        change = np.zeros(len(order), dtype=bool)
        change[0] = True
        for v in s:
            change[1:] |= v[1:] != v[:-1]
        return [v[change] for v in s]
    code, _ = radix.codes(values)  # type: ignore[arg-type]
    return radix.decoded(_distinct_codes(code, radix.span()))


def _distinct_codes(code: np.ndarray, span: int) -> np.ndarray:
    """The distinct values of ``code`` (each in ``0 .. span - 1``), ascending: marked in a table
    of ``span`` flags where that is not much larger than the rows, else by a plain sort
    (several times faster than an argsort)."""
    import numpy as np

    if span <= 4 * len(code) + 1024:
        seen = np.zeros(span, dtype=bool)
        seen[code] = True
        return np.flatnonzero(seen).astype(np.int64, copy=False)
    s = np.sort(code)
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] != s[:-1]
    return s[first]


def packed_codes(table: pa.Table, cols: Sequence[str]) -> tuple[np.ndarray, list[int], list[int],
                                                                 dict[str, np.ndarray]] | None:
    """One non-negative int64 per row whose order is the rows' lexicographic order on
    ``cols``: ``(codes, each column's minimum, each column's span, each column's values in
    its own numpy type)``; ``None`` when a column is not integers (or booleans) without
    nulls or the spans' product does not fit in 62 bits.

    >>> import pyarrow as pa
    >>> packed_codes(pa.table({"a": [2, 1, 2], "b": [5, 7, 6]}), ["a", "b"])[0].tolist()
    [3, 2, 4]
    """
    import numpy as np

    lo: list[int] = []
    size: list[int] = []
    span = 1
    arrays: dict[str, np.ndarray] = {}
    for c in cols:
        col = table.column(c)
        t = col.type
        if col.null_count or not (pa.types.is_boolean(t) or pa.types.is_signed_integer(t)
                                  or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)):
            return None
        values = _numpy(col)
        arrays[c] = values
        a, b = (int(values.min()), int(values.max())) if len(values) else (0, 0)
        span *= b - a + 1
        if span >= _SAFE_SUM:
            return None
        lo.append(a)
        size.append(b - a + 1)
    code = np.zeros(table.num_rows, dtype=np.int64)
    for c, a, s in zip(cols, lo, size):
        np.multiply(code, s, out=code)
        code += arrays[c].astype(np.int64, copy=False)
        code -= a
    return code, lo, size, arrays


def key_sorted(table: pa.Table, key: Sequence[str], diff: str = "_d", then: Sequence[str] = (),
               runs: bool = False) -> KeySorted | None:
    """``table`` consolidated (:func:`consolidated`, all its columns but ``diff``) and sorted by
    ``key`` first, or ``None`` when some column is not integers (or booleans) without nulls
    or the columns do not pack into one int64 (then :func:`consolidated` is the way).
    Within a key the rows are sorted by the columns ``then`` (e.g. the time leaves),
    then by the others in table order.

    One sort of one int64 per row.  ``runs``: the rows are a few sorted runs
    concatenated (a trace's merge), which a stable sort (timsort) finds and merges in
    about linear time; otherwise a plain sort of the codes with each row's number in
    their low bits (where the two fit in 62 bits; else an unstable argsort), several
    times faster on rows in no order (10^5 random codes: 2.0 against 21.7 ms).  Rows of equal code are equal in
    every column but ``diff`` and are summed, so their order never shows.  The packed
    code is built one column at a time, so beside the table the sort holds about three
    int64 arrays of its rows."""
    import numpy as np

    key = list(key)
    then = [c for c in then if c not in key and c != diff]
    rest = [*then, *[c for c in table.column_names if c != diff and c not in key and c not in then]]
    cols = [*key, *rest]
    n = table.num_rows
    if n == 0 or not can_sum(table, diff) or table.column(diff).null_count:
        return None
    packing = packed_codes(table, cols)
    if packing is None:
        return None
    code, lo, size, arrays = packing
    if runs:  # timsort finds the runs
        order = np.argsort(code, kind="stable")
        code = code[order]
    else:
        order, code = sort_packed(code, overwrite=True)
    rows, at, sums = orders.sorted_sums(code, order, int_values(table.column(diff)))
    del order
    rest_span = 1
    for s in size[len(key):]:
        rest_span *= s
    codes = code[at] // rest_span
    del code
    # the kept rows gathered by numpy (an Arrow take of a table of several chunks, a merge's
    # concatenation, costs several times more), int64 columns kept for KeySorted.values
    kept = {c: arrays[c][rows] for c in cols}
    known = {c: v for c, v in kept.items() if v.dtype == np.int64}
    d = sums
    known[diff] = d
    columns = {c: pa.array(kept[c], type=table.schema.field(c).type) for c in cols}
    columns[diff] = pa.array(d, pa.int64())
    out = pa.Table.from_arrays([columns[c] for c in table.column_names], schema=pa.schema(
        [table.schema.field(c) if c != diff else pa.field(diff, pa.int64()) for c in table.column_names]))
    return KeySorted(out, tuple(key), Radix(tuple(lo[: len(key)]), tuple(size[: len(key)])), codes, known)
