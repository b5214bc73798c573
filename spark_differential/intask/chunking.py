"""A loop inside one task cut into time chunks (the rule of :mod:`spark_differential.engine.chunks`).

On ``(data, time, diff)`` over a totally ordered time: the chunked form of a source holds,
for every chunk ``[s_c, s_c + width)``, its updates inside the chunk and, at ``s_c``, the
source accumulated before ``s_c`` (the chunk's snapshot); read as one chunk's updates
alone it accumulates at every time of the chunk to the source itself.  With the chunk one
more key of every operator, each chunk's loop is independent; :func:`unchunked` turns the
per-chunk answers back into one collection (each chunk's answer retracted where the next
chunk's snapshot takes over).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from spark_differential.core.collection import DIFF
from spark_differential.core.lazy import lazy
from spark_differential.engine.chunks import LOCAL_FACTOR, LOCAL_MIN_ROWS, layout
from spark_differential.intask.exchange import Exchange
from spark_differential.intask.program import Chunking, Program, Stateful
from spark_differential.intask.relation import leaves
from spark_differential.kernels import duck, native
from spark_differential.kernels.common import conform, keys, names, window
from spark_differential.kernels.reduce import ThresholdParams
from spark_differential.trace.arrow import consolidated

np = lazy("numpy")
pa = lazy("pyarrow")
log = logging.getLogger("spark_differential.iterate")


def plan_chunks(program: Program, sources: Sequence[pa.Table], exchange: Exchange | None = None) -> Chunking | None:
    """Time chunks for the loop (as :func:`spark_differential.engine.chunks.plan`, from the rows at hand;
    automatic chunks hold ``chunks.LOCAL_FACTOR`` times the live rows, at least
    ``chunks.LOCAL_MIN_ROWS`` updates: larger than the distributed loop's).

    In key partitions (``exchange``; each source's rows of one data value in one task) the
    tasks plan from their figures summed, so every task cuts time the same way."""
    import pyarrow.compute as pc


    if program.chunk_rows == 0 or program.width != 1:
        return None
    n = live = 0
    lo: int | None = None
    hi: int | None = None
    t = leaves(1)[0]
    for table, cols in zip(sources, program.sources):
        if table.num_rows == 0:
            continue
        data = [c for c in cols if c not in (t, DIFF)]
        if native.in_arrow(table, data, DIFF):  # no DuckDB query (its fixed cost is most of it on few rows)
            bounds = pc.min_max(table.column(t))
            r = {"live": native.consolidated(table.select([*data, DIFF]), data, DIFF).num_rows,
                 "lo": bounds["min"].as_py(), "hi": bounds["max"].as_py()}
        else:
            group = f"GROUP BY {duck.cols(data)}" if data else ""
            r = duck.query(
                f"SELECT count(*) FILTER (WHERE s <> 0) AS live, min(lo) AS lo, max(hi) AS hi FROM "
                f"(SELECT sum({DIFF}) AS s, min({t}) AS lo, max({t}) AS hi FROM $X {group}) AS g",
                {"X": table},
            ).to_pylist()[0]
        n += table.num_rows
        live += int(r["live"])
        lo = int(r["lo"]) if lo is None else min(lo, int(r["lo"]))
        hi = int(r["hi"]) if hi is None else max(hi, int(r["hi"]))
    if exchange is not None:
        none = lo is None
        figures = exchange.gather([n, live, 0 if none else lo, 0 if none else hi, int(none)])
        seen = [f for f in figures if not f[4]]
        n, live = sum(f[0] for f in figures), sum(f[1] for f in figures)
        lo = min((f[2] for f in seen), default=None)
        hi = max((f[3] for f in seen), default=None)
    shape = layout(n, live, lo, hi, program.chunk_rows, LOCAL_FACTOR, LOCAL_MIN_ROWS)
    return None if shape is None else Chunking(*shape)


def chunked(table: pa.Table, cols: Sequence[str], ch: Chunking) -> pa.Table:
    """The chunked form of a source: its updates, and at every chunk's start the source
    accumulated before it (:mod:`spark_differential.engine.chunks`)."""

    t = leaves(1)[0]
    data = [c for c in cols if c not in (t, DIFF)]
    d = duck.cols(data)
    w = window([duck.quote(c) for c in data])
    sql = (
        f"WITH per AS (SELECT {d}{', ' if data else ''}{t} - ({t} - {ch.t0}) % {ch.width} AS _c, "
        f"sum({DIFF})::BIGINT AS _s FROM $X GROUP BY ALL), "
        f"acc AS (SELECT {d}{', ' if data else ''}_c, sum(_s) OVER ({w} ORDER BY _c ROWS UNBOUNDED PRECEDING) AS _a, "
        f"lead(_c) OVER ({w} ORDER BY _c) AS _nx FROM per) "
        f"SELECT {d}{', ' if data else ''}unnest(range(_c + {ch.width}, coalesce(_nx, {ch.last}) + 1, {ch.width})) AS {t}, "
        f"_a::BIGINT AS {DIFF} FROM acc WHERE _a <> 0 AND _c + {ch.width} <= coalesce(_nx, {ch.last})"
    )
    snap = duck.query(sql, {"X": table})
    schema = table.select(list(cols)).schema
    return pa.concat_tables([conform(table.select(list(cols)), schema), conform(snap.select(list(cols)), schema)])


def unchunked(result: pa.Table, data: Sequence[str], ch: Chunking,
               hold: Sequence[int] = ()) -> tuple[pa.Table, pa.Table | None]:
    """Per-chunk answers as one collection: each chunk's answer, accumulated, is retracted
    where the next chunk's snapshot takes over.  Returns ``(answer, held)``: with ``hold``
    (starts of chunks but the first: where a group of chunks starts), the answer's rows at
    those times apart (``held``), else ``None``.

    Where the columns allow (integers: :func:`~spark_differential.kernels.native.key_sorted`)
    one sort consolidates the answer in ``(data, time)`` order, the retractions come from
    one pass over it (a chunk's rows of one data value are consecutive), and only the rows
    at the chunks' starts meet them; else DuckDB sums each chunk's rows."""

    t = leaves(1)[0]
    cols = [*data, t, DIFF]
    ks = native.key_sorted(result.select(cols), list(data), diff=DIFF, then=[t]) if result.num_rows else None
    if ks is None:
        d = duck.cols(data)
        sep = ", " if data else ""
        sql = (
            f"SELECT {d}{sep}_c + {ch.width} AS {t}, -_s AS {DIFF} FROM (SELECT {d}{sep}{t} - ({t} - {ch.t0}) % {ch.width} AS _c, "
            f"sum({DIFF})::BIGINT AS _s FROM $X GROUP BY ALL) AS e WHERE _s <> 0 AND _c < {ch.last}"
        )
        ends = duck.query(sql, {"X": result})
        whole = consolidated(pa.concat_tables([result.select(cols), ends.select(cols)], promote_options="permissive"),
                             cols[:-1])
        return split_at(whole, hold) if hold else (whole, None)
    table = ks.table
    times = ks.values(t)
    diffs = ks.values(DIFF)
    assert times is not None and diffs is not None
    chunk = ch.of(times)
    head = np.ones(len(times), dtype=bool)
    head[1:] = (ks.codes[1:] != ks.codes[:-1]) | (chunk[1:] != chunk[:-1])
    starts = np.nonzero(head)[0]
    sums = np.add.reduceat(diffs, starts)
    keep = (sums != 0) & (chunk[starts] < ch.last)
    at = starts[keep]
    ends = table.take(pa.array(at)).select(cols)
    ends = ends.set_column(len(data), t, pa.array(chunk[at] + ch.width, ends.schema.field(t).type))
    ends = ends.set_column(len(data) + 1, DIFF, pa.array(-sums[keep], ends.schema.field(DIFF).type))
    meet = (chunk == times) & (times > ch.t0)  # the answer's rows at a chunk's start
    if not meet.any():
        return split_at(pa.concat_tables([table, ends]), hold) if hold else (pa.concat_tables([table, ends]), None)
    edges = consolidated(pa.concat_tables([table.filter(pa.array(meet)), ends]), cols[:-1])
    body = table.filter(pa.array(~meet))
    if not hold:
        return pa.concat_tables([body, edges]), None
    free, held = split_at(edges, hold)
    return pa.concat_tables([body, free]), held


def chunk_step(step: Stateful, ch: Chunking) -> Stateful:
    """``step`` with the chunk as one more key (joins, reductions) or data column (thresholds)."""


    p = step.params
    if isinstance(p, ThresholdParams):
        column, params = names("_a", p.ndata + 1)[-1], dataclasses.replace(p, ndata=p.ndata + 1)
    else:
        column, params = keys(p.nkeys + 1)[-1], dataclasses.replace(p, nkeys=p.nkeys + 1)
    chunk = dataclasses.replace(ch, column=column)
    field_ = pa.field(column, pa.int64())
    inputs = tuple(dataclasses.replace(i, schema=i.schema.append(field_), chunk=chunk) for i in step.inputs)
    return dataclasses.replace(step, params=params, key_cols=(*step.key_cols, column), inputs=inputs,
                               out_schema=step.out_schema.append(field_))


def split_at(table: pa.Table, times: Sequence[int]) -> tuple[pa.Table, pa.Table]:
    """``table``'s rows at times other than ``times``, and its rows at ``times``."""
    import pyarrow.compute as pc

    t = leaves(1)[0]
    at = pc.is_in(table.column(t), value_set=pa.array(times, table.schema.field(t).type))
    return table.filter(pc.invert(at)), table.filter(at)


def group_starts(groups: Sequence[Sequence[pa.Table]], ch: Chunking) -> list[int]:
    """The first chunk's start (encoded time) of every group of chunks but the first."""
    import pyarrow.compute as pc

    t = leaves(1)[0]
    starts = []
    for group in groups[1:]:
        lows = [pc.min(tb.column(t)).as_py() for tb in group if tb.num_rows]
        starts.append(int(ch.of([min(lows)])[0]))
    return starts


def chunk_groups(sources: Sequence[pa.Table], ch: Chunking, n: int) -> list[list[pa.Table]]:
    """The sources (in chunked form) cut into at most ``n`` groups of consecutive chunks
    holding about equal numbers of rows: each group's rows, source by source."""
    if n <= 1 or ch.count < 2:
        return [list(sources)]
    t = leaves(1)[0]
    index = [(t_.column(t).to_numpy(zero_copy_only=False) - ch.t0) // ch.width for t_ in sources]
    rows = np.zeros(ch.count, dtype=np.int64)
    for ix in index:
        rows += np.bincount(ix, minlength=ch.count)
    cum = np.cumsum(rows)
    # group g holds the chunks below cut[g]: the first chunk where the rows reach (g + 1) / n of all
    cuts = np.unique(np.searchsorted(cum, cum[-1] * np.arange(1, n) / n, side="left") + 1)
    cuts = [int(c) for c in cuts if 0 < c < ch.count]
    if not cuts:
        return [list(sources)]
    groups = []
    for lo, hi in zip([0, *cuts], [*cuts, ch.count]):
        groups.append([tb.filter(pa.array((ix >= lo) & (ix < hi))) for tb, ix in zip(sources, index)])
    return groups
