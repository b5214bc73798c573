"""Feeding an incremental view from Structured Streaming: one update per micro-batch.

On ``(data, time, diff)``: each micro-batch of a stream is a change log of one input of
the view; it becomes one update of the view, with the micro-batch id as its batch id (so a
replayed batch changes nothing) and a new frontier: the batch's largest time + 1 (never
earlier than the view's frontier), or what a function of the batch says (a watermark).
Where the view has a frontier and an integral time, and Spark estimates the batch at most
:data:`REREAD_ROWS` rows (a file source's micro-batch, say), the update is given
``upto=NEXT_FRONTIER`` (:class:`~spark_differential.incremental.manifest.NextFrontier`): the
task that runs a small update (a query that is one loop: the loop's task) reads the batch and
finds the largest time itself, **one job a micro-batch**, and any other update path finds it
first, in one job of its own.  Otherwise
the largest time is found first: a small batch is simply read twice, that job and the
update's; a larger or unsized one (a Kafka source's) is cached first, so it is computed
once, at the cost of one more job (adaptive execution materializes the cache as a job of
its own).
:func:`batch_function` builds the function ``writeStream.foreachBatch`` calls;
:meth:`spark_differential.incremental.view.IncrementalView.foreach_batch` is its public face.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import TIME, inspect, integral_sql
from spark_differential.core.lattice import Leaves, Total
from spark_differential.errors import FrontierError, IncrementalStateError
from spark_differential.incremental.inputs import check_late, largest_time, params
from spark_differential.incremental.manifest import NEXT_FRONTIER
from spark_differential.intask.sources import estimated_rows
from spark_differential.io.tables import collection

REREAD_ROWS = 100_000  # a micro-batch Spark estimates at most this big is read twice rather than cached

# update(upto, batch_id, late, **inputs) -> the output that became complete (IncrementalView.update)
UpdateFn = Callable[..., DataFrame]


def batch_function(
    query: Callable[..., Any],
    update: UpdateFn,
    frontier: Callable[[], Sequence[Leaves] | None],
    sink: Callable[[DataFrame, int], Any] | None = None,
    *,
    time: str = TIME,
    diff: str | None = None,
    input: str | None = None,
    upto: Callable[[DataFrame, int], Any] | None = None,
    late: str = "error",
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function of a view of ``query`` (``update`` applies one update,
    ``frontier`` reads the stored frontier): see
    :meth:`~spark_differential.incremental.view.IncrementalView.foreach_batch`.

    >>> import spark_differential as sd, tempfile
    >>> view = sd.incremental(tempfile.mkdtemp(), lambda edges: edges.dd_count(by="src"))
    >>> fn = batch_function(view.query, view.update, lambda: None, lambda out, i: print(i, out.count()))
    >>> fn(sd.session().createDataFrame([(1, 2, 3)], "src long, dst long, time long"), 0)
    0 1
    """
    check_late("foreach_batch", late)
    name = input
    if name is None:
        names = params(query)
        if len(names) != 1:
            raise IncrementalStateError(
                f"foreach_batch: the query has inputs {names}; say which one the stream feeds with input=..."
            )
        name = names[0]

    def apply(batch: DataFrame, batch_id: int) -> None:
        coll = collection(batch, time=time, diff=diff, check_nulls=False)
        size = estimated_rows([coll])
        cached = not (size.known and size.rows <= REREAD_ROWS)
        if upto is None and not cached and integral_sql(inspect(coll, op="foreach_batch").ttype) is not None \
                and frontier():  # the update finds its frontier where it reads the batch
            out = update(upto=NEXT_FRONTIER, batch_id=int(batch_id), late=late, **{name: coll})
            if sink is not None:
                sink(out, int(batch_id))
            return
        if cached:
            coll = coll.persist()
        try:
            if upto is not None:
                if coll.isEmpty():
                    return
                new_front = upto(batch, batch_id)
            else:
                new_front = next_frontier(coll, frontier)
                if new_front is None:
                    return
            out = update(upto=new_front, batch_id=int(batch_id), late=late, **{name: coll})
            if sink is not None:
                sink(out, int(batch_id))
        finally:
            if cached:
                coll.unpersist()

    return apply


def next_frontier(coll: DataFrame, frontier: Callable[[], Sequence[Leaves] | None]) -> Any:
    """The batch's largest time + 1, not earlier than the stored ``frontier()``; None for an empty batch.

    >>> import spark_differential as sd
    >>> batch = sd.session().createDataFrame([(1, 3, 1), (2, 7, 1)], "x long, time long, diff long")
    >>> next_frontier(batch, lambda: [(5,)]), next_frontier(batch, lambda: [(9,)])
    (8, 9)
    """
    cs = inspect(coll, op="foreach_batch")
    ttype = cs.ttype
    if not isinstance(ttype, Total):
        raise FrontierError(
            f"foreach_batch: with {ttype.describe()} times there is no 'largest time + 1'; pass "
            "upto=lambda batch_df, batch_id: <the new frontier, a list of times>"
        )
    # coalesce(1): the max in one task, one job (an aggregate over several partitions is a shuffle and,
    # with adaptive execution, a job per stage; first() on the cached batch would add one); a micro-batch is
    # small, and the cache is filled whole
    if integral_sql(ttype) is not None:
        top = largest_time([coll])
    else:
        (row,) = coll.coalesce(1).select(F.max(ttype.encode_column(F.col(TIME))[0])).collect()
        top = row[0]
    if top is None:
        return None
    nxt = int(top) + 1
    front = frontier()
    if front:
        nxt = max(nxt, int(front[0][0]))
    return ttype.decode_value((nxt,))


__all__ = ["batch_function", "next_frontier"]
