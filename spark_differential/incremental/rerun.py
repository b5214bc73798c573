"""The rerun strategy of an incremental view (``stage=1``): the query re-run on its stored, compacted inputs.

On ``(data, time, diff)``: the view stores each input, everything it received, as its
last compaction (advanced to the frontier of that moment with ``advance(t, F) =
meet_{f in F} join(t, f)`` and consolidated, so it holds about the live size of the input,
not its history) plus the new updates of each update since (deltas), merged every
``compact_every`` updates (:class:`~spark_differential.trace.parquet.ParquetPolicy`,
"every"); and ``P``, the output returned so far, stored the same way.  An update stages the
new updates of every input (one write: the query and later updates read them from there,
so each input is evaluated once), re-runs the query on the stored inputs plus the new
updates, subtracts the output already returned, and stores the rest of the version in one
more write (``data``: the output and, when due, the merged state).  An update costs the
live size of the inputs.

Why it is exact.  Let ``S`` be the stored inputs (a compaction to an earlier frontier
plus deltas), ``D`` the new updates and ``I`` everything received.  For every ``g`` in the
future of the old frontier ``F``, ``S ∪ D`` accumulates at ``g`` to what ``I`` does
(compaction keeps those accumulations; seed 004), so ``Q = query(S ∪ D)`` accumulates there
to what ``query(I)`` does; and ``P`` accumulates there to what the output already returned
does.  The part ``R`` of ``query(I)`` at times in the future of ``F`` is supported there
and accumulates there to ``Q - P``.  :func:`~spark_differential.incremental.lift.lift`
turns any collection into the unique collection supported on the future of ``F`` with the
same accumulations there (inclusion-exclusion over the elements of ``F``), so ``R =
lift(Q - P, F)`` exactly; the update returns ``R`` at the times not in the future of the
new frontier ``T``.  Later updates only add input updates in the future of ``T``, which
change the output's differences only there, so what is returned is final.  (This needs
the query's output at each time to be a function of its inputs' accumulations at that
time; ``differentiate``/``dd_delay``/``dd_asof_join`` are not, and a query using them keeps
its inputs uncompacted: :func:`compacted`.  In the random tests ``Q - P`` never had
updates outside the future of ``F``, so ``lift`` acts in practice on late updates moved
with ``late="advance"``; it is kept because the argument needs it.)

Over a partial order the query is run on :func:`~spark_differential.incremental.lift.complete_part`
of each input instead of ``S ∪ D``: the same at every time not in the future of ``T`` (the only
times returned), empty at the others.  There ``S ∪ D`` holds only the updates received so far,
and the lub of two complete times need not be complete, so the query would compute at such a
lub over a collection no one-shot run sees (a retraction delivered before its insertion), over
which a loop need not reach a fixed point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.collection import DIFF
from spark_differential.core.history import collecting
from spark_differential.core.lattice import Leaves, TimeType, Total
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.inputs import check_output, data_fields
from spark_differential.incremental.lift import complete_part, in_future, lift
from spark_differential.incremental.manifest import State, Update, Written
from spark_differential.incremental.storage import part, tagged
from spark_differential.incremental.store import Store
from spark_differential.operators.consolidate import dd_consolidate
from spark_differential.trace.parquet import ParquetPolicy
from spark_differential.trace.spark import consolidated_collection

_log = logging.getLogger("spark_differential.incremental")


def advanced_collection(df: DataFrame, ttype: TimeType, frontier: list[Leaves]) -> DataFrame:
    """A stored collection (``(data, time, diff)``) advanced to ``frontier`` and consolidated."""
    return dd_consolidate(df, frontier=[ttype.decode_value(f) for f in frontier])


def _data_columns(schema: T.StructType) -> list[str]:
    """A collection's data column names (all but ``time`` and ``diff``), in order."""
    return [f.name for f in data_fields(schema)]


def write(store: Store, query: Callable[..., DataFrame], compact: bool | None, policy: ParquetPolicy,
          up: Update) -> Written:
    """One update by the rerun strategy: stage the new updates of every input (one write), then re-run
    the query on the stored inputs and store the rest of the version (:func:`_write_version`).

    The new updates of every input go into one write (one job): the query and later updates
    read them from there, so each input is evaluated exactly once."""
    names = list(up.schemas)
    prefixes = {n: f"i{k}" for k, n in enumerate(names)}
    old_files = {n: list(up.state.input_files[n]) if up.state is not None else [] for n in names}
    written = store.write_tagged(
        f"{up.directory}/new", [(prefixes[n], df, up.schemas[n]) for n, df in up.incoming.items()]
    )
    fresh = {n: written[prefixes[n]] for n in up.incoming if prefixes[n] in written}
    return _write_version(store, query, compact, policy, up, prefixes, old_files, fresh)


def _write_version(
    store: Store,
    query: Callable[..., DataFrame],
    compact: bool | None,
    policy: ParquetPolicy,
    up: Update,
    prefixes: Mapping[str, str],
    old_files: Mapping[str, list[str]],
    fresh: Mapping[str, str],
) -> Written:
    """Run the query over the stored inputs and the new updates (``fresh``: each input's staged file)
    and store the rest of the new version in one Parquet write; name what was written."""
    op, state, schemas, ttype, directory = up.op, up.state, up.schemas, up.ttype, up.directory
    names = list(schemas)
    combined = {
        n: store.read(old_files[n] + ([fresh[n]] if n in fresh else []), schemas[n], prefixes[n]) for n in names
    }
    if not isinstance(ttype, Total):  # the lub of complete times need not be complete: compute only at complete times
        combined = {n: complete_part(df, ttype, up.new_front) for n, df in combined.items()}
    with collecting() as history_ops:
        result = query(**combined)
    is_compacted = compacted(op, state, history_ops, compact, up.where)
    out_schema = check_output(op, result, ttype, state, up.where)
    cols = [f.name for f in out_schema.fields]
    result = result.select(*cols)
    emitted_old = list(state.emitted_files) if state is not None else []
    if emitted_old:
        emitted_before = store.read(emitted_old, out_schema, "o")
        result = result.unionByName(emitted_before.withColumn(DIFF, -F.col(DIFF)))
    ready = lift(result, ttype, up.old_front) if up.old_front is not None else consolidated_collection(
        result, _data_columns(out_schema))
    complete = ready.where(~in_future(ready, ttype, up.new_front)).select(*cols)

    parts = [tagged(complete, "o", "o", out_schema)]
    emitted, merged = store.roll(
        emitted_old, part(directory, "o"), directory, "o", out_schema, policy,
        lambda files: advanced_collection(store.read(files, out_schema, "o"), ttype, up.new_front).select(*cols),
    )
    if merged is not None:
        parts.append(merged)
    files: dict[str, list[str]] = {}
    for n in names:
        pre, schema = prefixes[n], schemas[n]

        def merge_input(rels: Sequence[str], pre: str = pre, schema: T.StructType = schema) -> DataFrame:
            stored = store.read(rels, schema, pre)
            merged_in = (advanced_collection(stored, ttype, up.new_front) if is_compacted
                         else consolidated_collection(stored, _data_columns(schema)))
            return merged_in.select(*[f.name for f in schema.fields])

        files[n], merged = store.roll(old_files[n], fresh.get(n), directory, pre, schema, policy, merge_input,
                                      force=state is not None and is_compacted != state.compacted)
        if merged is not None:
            parts.append(merged)
    wide = parts[0]
    for one in parts[1:]:
        wide = wide.unionByName(one, allowMissingColumns=True)
    # a collection with no rows has no directory: the manifest names only those written
    present = store.write_data(directory, wide)

    def kept(rels: list[str]) -> list[str]:
        return [r for r in rels if not r.startswith(f"{directory}/data/") or r in present]

    return Written(
        output=out_schema,
        output_exists=part(directory, "o") in present,
        input_files={n: kept(fs) for n, fs in files.items()},
        emitted_files=kept(emitted),
        compacted=is_compacted,
    )


def compacted(op: str, state: State | None, history_ops: set[str], compact: bool | None, where: str) -> bool:
    """Whether the stored inputs are compacted (advanced to the frontier) after this update: not when the
    query reads the changes of its inputs (``history_ops``), nor once a view kept its full history."""
    used = ", ".join(sorted(history_ops))
    why = (
        f"the query uses {used}, whose output depends on when earlier input updates happened, not only on "
        "the inputs' accumulation at each time, so its inputs cannot be compacted"
    )
    if state is not None and state.compacted and history_ops:
        raise IncrementalStateError(
            f"{op}: {why}; but the view stored under {where} was built by a query without them and its "
            "inputs are already compacted. Start a new view (at a new path) for this query."
        )
    if compact is True and history_ops:
        raise IncrementalStateError(
            f"{op}: {why}. Pass compact=False (or leave it unset) to keep the inputs' full history: exact, "
            "but each update then costs the size of that history."
        )
    if state is not None and not state.compacted:
        return False
    if history_ops:
        _log.warning("%s: %s; the view keeps its inputs' full history under %s", op, why, where)
        return False
    return compact is not False


__all__ = ["advanced_collection", "compacted", "write"]
