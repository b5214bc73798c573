"""The handler a running ``dd_iterate`` loop pushes: its body's calls reach it first.

On ``(data, time, diff)``: while the loop runs iteration by iteration on the cluster, a
stateful call or a ``dd_concat`` on the loop's collections is one step of the body at the
current iteration (:mod:`.distributed`); a ``dd_iterate`` of a loop collection is a loop
nested in the body, recomputed from its accumulated input at every iteration of this loop
(correct, but not differential across this loop); anything else goes to the handler below.
A call on a collection of another loop is refused with :class:`~spark_differential.errors.IterationError`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_differential.core.collection import DIFF, TIME, inspect, qcols
from spark_differential.core.lattice import Loop
from spark_differential.engine.call import Below, ConcatCall, Handler, LoopCall, StatefulCall, handlers
from spark_differential.errors import IterationError
from spark_differential.loop.distributed import concat_in_loop, stateful_in_loop
from spark_differential.loop.state import LoopContext, NestedState, NotChunkable, stamp, strip
from spark_differential.trace.spark import checkpoint, consolidated_collection


class RunningLoop(LoopContext, Handler):
    """A loop running on the distributed path, as a handler of its body's calls."""

    def _own(self, loop_id: int | None, op: str) -> None:
        """Refuse a call on the collections of a loop other than this one."""
        if loop_id == self.loop_id:
            return
        if any(isinstance(h, RunningLoop) and h.loop_id == loop_id for h in handlers()):
            raise IterationError(f"{op}: this collection belongs to an enclosing dd_iterate, not to the loop running now")
        raise IterationError(
            f"{op}: the input is a collection from inside a dd_iterate body (its time is a loop time) but that "
            "loop is not running; use the result of dd_iterate, not collections captured from its body"
        )

    def stateful(self, call: StatefulCall, below: Below) -> DataFrame:
        if not call.in_loop:
            return below(call)
        self._own(call.loop_id, call.op)
        return stateful_in_loop(self, call)

    def concat(self, call: ConcatCall, below: Below) -> DataFrame:
        if not call.in_loop:
            return below(call)
        assert isinstance(call.target, Loop)
        self._own(call.target.loop_id, call.op)
        return concat_in_loop(self, call)

    def iterate(self, call: LoopCall, below: Below) -> DataFrame:
        ttype = call.cs.ttype
        if not isinstance(ttype, Loop):
            return below(call)
        op = "dd_iterate"
        self._own(ttype.loop_id, op)
        if self.discovering:
            raise NotChunkable("the body nests a dd_iterate")
        # a loop inside this loop's body: recomputed from its accumulated input at every iteration
        _, slot = self.next_slot(op, 1)
        self.loose = True
        if slot.nested is None:
            slot.nested = NestedState()
        st = slot.nested
        data = list(call.cs.data_cols)
        delta = strip(call.df, call.cs)
        acc = delta if st.acc_input is None else st.acc_input.unionByName(delta)
        st.acc_input = checkpoint(consolidated_collection(acc, data))
        inner = LoopCall(st.acc_input, inspect(st.acc_input, op=op), call.body, call.max_iterations, call.progress,
                         captured=st.captured)
        result = below(inner)
        change = result if st.previous is None else result.unionByName(
            st.previous.select(*qcols(data), TIME, (-F.col(DIFF)).alias(DIFF))
        )
        st.previous = result
        out = consolidated_collection(change, data)
        return checkpoint(stamp(out, data, ttype, self.iteration, time_col=F.col(TIME)))
