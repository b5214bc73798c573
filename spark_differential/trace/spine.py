"""The merge policy every trace follows, and the batches it applies to.

On ``(data, time, diff)``: merging two batches of a trace (summing the diffs of equal
data and time, dropping zeros) never changes what the trace accumulates to at any time,
so *when* batches merge is a matter of cost alone.  Merging everything at every step costs
the trace's size per step; never merging makes every read scan many small batches.  The
policy here is differential dataflow's spine, size-tiered: a batch merges into the newer
ones once it is at most :data:`MERGE_RATIO` times their size, and the oldest merge when
more than ``max_batches`` would remain.  An update is then merged O(log n) times and a
trace holds O(log n) batches.

:class:`Spine` keeps the batches (any type: Arrow tables, DataFrames, file lists) with
their sizes and applies the policy two ways: :meth:`Spine.insert` merges eagerly with the
merged batch's actual size (a trace in memory), :meth:`Spine.merge_start` says which
batches a new one should be merged with before it is written (a trace whose new batch and
merge are computed in one Spark job, sizes being estimates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

MERGE_RATIO = 2  # a batch merges into the newer ones once it is at most this many times their size
MAX_BATCHES = 8  # the oldest batches of a distributed loop's trace merge beyond this many

B = TypeVar("B")


@dataclass(frozen=True)
class MergePolicy:
    """When the batches of a trace merge: a batch joins the newer ones once it is at most
    ``ratio`` times their size, and while more than ``max_batches`` would remain (``0``: no
    bound).  ``None`` reads this module's :data:`MERGE_RATIO` / :data:`MAX_BATCHES` when the
    policy is applied.

    >>> MergePolicy(2, 8).start([120, 30, 20])   # 30 <= 2 * 20 joins, then 120 > 2 * 50 stops
    1
    >>> MergePolicy(2, 0).start([1000, 100])      # 1000 > 2 * 100: nothing merges
    1
    """

    ratio: float | None = None
    max_batches: int | None = None

    def _limits(self) -> tuple[float, int | None]:
        ratio = MERGE_RATIO if self.ratio is None else self.ratio
        most = MAX_BATCHES if self.max_batches is None else self.max_batches
        return ratio, (most or None)

    def start(self, sizes: Sequence[int]) -> int:
        """Of batches of ``sizes`` (oldest first, the newest last), the first to merge with the
        newest (``len(sizes) - 1``: none)."""
        ratio, most = self._limits()
        start, gathered = len(sizes) - 1, sizes[-1]
        while start > 0 and (sizes[start - 1] <= ratio * gathered or (most is not None and start >= most)):
            start -= 1
            gathered += sizes[start]
        return start

    def merges(self, older: int, newer: int, count: int) -> bool:
        """Whether a batch of ``older`` rows merges with the ``newer`` ones after it, the trace
        holding ``count`` batches."""
        ratio, most = self._limits()
        return older <= ratio * newer or (most is not None and count > most)


def default_policy() -> MergePolicy:
    """The policy of a distributed loop's traces: :data:`MERGE_RATIO`, :data:`MAX_BATCHES`
    (read when applied)."""
    return MergePolicy()


@dataclass
class Spine(Generic[B]):
    """A trace's batches (oldest first) and their sizes, under one :class:`MergePolicy`."""

    policy: MergePolicy = field(default_factory=MergePolicy)
    batches: list[B] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.batches)

    def insert(self, batch: B, size: int, merge: Callable[[list[B]], tuple[B, int]], hold: int = 1) -> None:
        """Add ``batch`` (the newest, ``size`` rows) and merge the newest two while the policy
        says so, with the merged batch's size as ``merge`` returns it (a merge that cancels
        everything leaves no batch); the newest ``hold`` batches are never merged."""
        self.batches.append(batch)
        self.sizes.append(size)
        while len(self.batches) > hold and self.policy.merges(self.sizes[-2], self.sizes[-1], len(self.batches)):
            merged, rows = merge(self.batches[-2:])
            self.batches[-2:] = [merged]
            self.sizes[-2:] = [rows]
            if rows == 0:
                self.batches.pop()
                self.sizes.pop()

    def merge_start(self, size: int) -> int:
        """Which batches a new batch of about ``size`` rows merges with: ``batches[start:]``
        (``start == len(self)``: none)."""
        return self.policy.start([*self.sizes, max(1, size)])

    def replace(self, start: int, batch: B, size: int) -> list[B]:
        """Put ``batch`` (``size`` rows) in place of ``batches[start:]``; the batches replaced."""
        gone = self.batches[start:]
        self.batches[start:] = [batch]
        self.sizes[start:] = [size]
        return gone
