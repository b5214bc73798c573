"""Traces packed as one binary value per key, for one-input operators inside ``dd_iterate``.

On ``(data, time, diff)``: an operator in a loop keeps every update it has seen (its
trace) and, at each iteration, hands a kernel the new updates together with the
trace of the keys they touch.  Kept as rows, each touched key's whole history goes
to Python again every iteration, one Arrow row (one value per column) at a time.
Packed, a key's trace is a single row: its key columns and ``_blob``, the key's
updates consolidated (summed per data and time, zero sums dropped) and laid out as
int64 rows ``(data…, time leaves…, diff)``; Spark moves the blob as one binary value
and Python unpacks all blobs of a call with one ``frombuffer``.

:func:`run` takes the new updates (``_blob`` null) and the packed traces of the keys
they touch (``_blob`` set, the other non-key columns null), unpacks the traces into
rows with ``_new`` false, runs the operator's kernel on the whole, and returns its
output (``_blob`` null) followed by the packed trace, new updates merged in, of
every key it received: the caller replaces those keys' blobs with these.  A key
whose updates all cancel comes back with an empty blob (its trace is empty).

A trace may be kept as several batches of blobs, each newer batch replacing the
blobs of the keys it holds (an empty blob: the key has no trace any more).  The
blobs sent then carry ``_seq``, their batch's position, and :func:`run` uses the
newest blob of each key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.kernels.common import NEW, keys, times
from spark_differential.kernels.stab import consolidated_by_key, ids

np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")

BLOB = "_blob"
SEQ = "_seq"  # a blob's trace batch (larger: newer); absent or null when the trace is one batch
_MAX_PIECE = 1 << 30  # bytes of blobs per Arrow array (32-bit offsets)


@dataclass(frozen=True)
class PackedParams:
    """The wrapped kernel and how its input packs: ``cols`` are int64 columns, ``_d`` last."""

    kernel: Callable[..., pa.Table] = field(compare=False)
    params: Any
    nkeys: int
    cols: tuple[str, ...]
    out_schema: pa.Schema  # the kernel's output columns (nullable), without ``_blob``


def _unpack(p: PackedParams, X: pa.Table) -> pa.Table:
    """New updates and unpacked trace rows (``_new`` false) as one table without ``_blob``."""
    has = pc.is_valid(X.column(BLOB))
    extra = [BLOB, SEQ] if SEQ in X.column_names else [BLOB]
    fresh = X.filter(pc.invert(has)).drop_columns(extra)
    B = X.filter(has)
    if B.num_rows == 0:
        return fresh
    if SEQ in B.column_names:
        B = _newest(p, B)
    arr = B.column(BLOB).combine_chunks()
    wide = pa.types.is_large_binary(arr.type)  # spark.sql.execution.arrow.useLargeVarTypes
    size = 8 if wide else 4
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32, count=len(arr) + 1, offset=arr.offset * size)
    width = len(p.cols)
    lo, hi = int(offsets[0]), int(offsets[-1])
    values = np.frombuffer(arr.buffers()[2], dtype=np.int64, count=(hi - lo) // 8, offset=lo).reshape(-1, width)
    owner = np.repeat(np.arange(len(arr), dtype=np.int64), np.diff(offsets) // (8 * width))
    cols: dict[str, pa.Array | pa.ChunkedArray] = {k: B.column(k).take(pa.array(owner)) for k in keys(p.nkeys)}
    for i, c in enumerate(p.cols):
        cols[c] = pa.array(np.ascontiguousarray(values[:, i]))
    cols[NEW] = pa.array(np.zeros(len(owner), dtype=bool))
    schema = fresh.schema
    old = pa.table([cols[f.name] for f in schema], names=schema.names).cast(schema)
    return pa.concat_tables([old, fresh])


def _newest(p: PackedParams, B: pa.Table) -> pa.Table:
    """The blob of the newest batch (largest ``_seq``) of each key."""
    seq = B.column(SEQ).to_numpy(zero_copy_only=False)
    if B.num_rows < 2 or (seq == seq[0]).all():
        return B
    kid = ids([B.column(c) for c in keys(p.nkeys)], B.num_rows)
    order = np.lexsort((seq, kid))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = kid[order][1:] != kid[order][:-1]
    return B.take(pa.array(order[last]))


def _pack(p: PackedParams, T: pa.Table) -> tuple[pa.Table, list[pa.Array]]:
    """Every key of ``T`` with its consolidated updates packed: (key rows, blob pieces);
    a key whose updates all cancel gets an empty blob."""
    k = keys(p.nkeys)
    n = T.num_rows
    kid = ids([T.column(c) for c in k], n)
    tcols = set(times(len(p.cols)))
    data = [c for c in p.cols[:-1] if c not in tcols]
    # consolidated rows come sorted by key id (then data, time): each key's rows are a run
    C, kept_kid, _ = consolidated_by_key(T.select([*k, *p.cols]), kid, data, len(p.cols) - 1 - len(data))
    matrix = np.empty((C.num_rows, len(p.cols)), dtype=np.int64)
    for i, c in enumerate(p.cols):
        matrix[:, i] = C.column(c).to_numpy()
    nkeys = int(kid.max()) + 1 if n else 0  # ids are dense: every id below this is some row's
    any_row = np.empty(nkeys, dtype=np.int64)
    any_row[kid] = np.arange(n)
    key_rows = T.select(k).take(pa.array(any_row))
    bounds = np.zeros(nkeys + 1, dtype=np.int64)
    np.cumsum(np.bincount(kept_kid, minlength=nkeys), out=bounds[1:])
    bounds *= 8 * len(p.cols)
    data = matrix.reshape(-1).view(np.uint8)
    pieces: list[pa.Array] = []
    i = 0
    while i < nkeys:  # pieces of at most _MAX_PIECE bytes (one key never split)
        j = max(i + 1, int(np.searchsorted(bounds, bounds[i] + _MAX_PIECE, side="right")) - 1)
        j = min(j, nkeys)
        offs = (bounds[i : j + 1] - bounds[i]).astype(np.int32)
        buf = pa.py_buffer(data[bounds[i] : bounds[j]].tobytes())
        pieces.append(pa.Array.from_buffers(pa.binary(), j - i, [None, pa.py_buffer(offs.tobytes()), buf]))
        i = j
    return key_rows, pieces


def _with_emptied(p: PackedParams, X: pa.Table, key_rows: pa.Table,
                  pieces: list[pa.Array]) -> tuple[pa.Table, list[pa.Array]]:
    """``_pack``'s keys and blobs, plus an empty blob for every key ``X`` holds that has no rows
    left (its trace and new updates cancel, or it came with an empty trace alone): the key's
    newest trace is then empty, which must supersede an older batch's blob of it."""
    k = keys(p.nkeys)
    if X.num_rows == 0 or not k:
        return key_rows, pieces
    got = X.select(k).cast(key_rows.select(k).schema) if key_rows.num_rows else X.select(k)
    nk = key_rows.num_rows
    both = pa.concat_tables([key_rows.select(k), got]) if nk else got
    kid = ids([both.column(c) for c in k], both.num_rows)
    have = np.zeros(int(kid.max()) + 1, dtype=bool)
    have[kid[:nk]] = True
    rest = kid[nk:]
    first = np.unique(rest, return_index=True)[1]
    missing = first[~have[rest[first]]]
    if len(missing) == 0:
        return key_rows, pieces
    extra = got.take(pa.array(missing))
    empty = pa.array(np.zeros(len(missing) + 1, dtype=np.int32))
    blob = pa.Array.from_buffers(pa.binary(), len(missing), [None, empty.buffers()[1], pa.py_buffer(b"")])
    rows = pa.concat_tables([key_rows.select(k), extra]) if nk else extra
    return rows, [*pieces, blob]


def run(p: PackedParams, X: pa.Table) -> pa.Table:
    """The kernel's output rows (``_blob`` null), then one packed trace per key received."""
    T = _unpack(p, X)
    out = p.kernel(p.params, T)
    schema = p.out_schema
    result = pa.table(
        [out.column(f.name).cast(f.type) if f.name in out.column_names else pa.nulls(out.num_rows, f.type) for f in schema],
        schema=schema,
    ).append_column(BLOB, pa.nulls(out.num_rows, pa.binary()))
    key_rows, pieces = _pack(p, T)
    key_rows, pieces = _with_emptied(p, X, key_rows, pieces)
    nk = key_rows.num_rows
    blobs = pa.chunked_array(pieces, type=pa.binary()) if pieces else pa.chunked_array([], type=pa.binary())
    packed_cols: list[pa.Array | pa.ChunkedArray] = [
        key_rows.column(f.name).cast(f.type) if f.name in key_rows.column_names else pa.nulls(nk, f.type) for f in schema
    ]
    packed = pa.table([*packed_cols, blobs], schema=result.schema)
    return pa.concat_tables([result, packed])

