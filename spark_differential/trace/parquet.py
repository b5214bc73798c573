"""A trace as Parquet directories under an incremental view's path.

On ``(data, time, diff)``: see :mod:`spark_differential.trace`.  Here a batch is a Parquet
directory a committed version of the view wrote (named relative to the view's root), and a
trace (:class:`ParquetTrace`) is its list of directories, oldest first: the last merge (its
updates advanced to the frontier of that moment and consolidated) and one directory per
update since.  The traced strategy keeps one per input of each stateful operator (kernel
form: bucket, keys, data, time leaves, ``_d``; merged with
:func:`spark_differential.trace.spark.advanced`, "advance and consolidate" on the
DataFrame the directories read as); the rerun strategy keeps its stored inputs and the
output returned so far the same way (collection form, merged by ``dd_consolidate`` with the
frontier).  A merge is written by the version's own last write, so the trace of a version
names the merged directory in place of the directories it replaces; older versions keep
naming theirs until they are cleaned up.

When a trace's directories merge (:class:`ParquetPolicy`) is decided by the view's user,
not by the spine's size tiers alone: a view is made with ``compact_every``, the number of
directories a trace may hold (each one more file listing and scan at every read), and no
merge happens before a trace would hold more.  That bound is a different rule from the
spine's (:class:`~spark_differential.trace.spine.MergePolicy`, whose ``max_batches`` merges
only the oldest batches beyond the bound, by size), and is kept as the user asked for it:

* **every** (the rerun strategy): once there would be more than ``compact_every``
  directories, all of them merge into one.  The stored inputs are read whole by every
  update, so a partial merge would save nothing.
* **geometric** (the traced strategy): once there would be more than ``compact_every``
  directories, those after the first (the deltas: one per update) merge into one, and
  the first (the last full merge) joins them by the spine's rule: when it is at most
  :data:`~spark_differential.trace.spine.MERGE_RATIO` times the deltas' bytes
  (``MergePolicy.merges``).  A trace whose updates are small against its size (1,000
  changes to 200,000 rows) then rewrites a few thousand rows at most merges, not all of
  them, and holds at most about ``1 + 1/MERGE_RATIO`` times its live size plus
  ``compact_every`` updates.

Merging any subset of a trace's directories is exact: each merged directory keeps its
accumulations at every time in the future of the frontier (seed 004), the only times the
view reads them at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spark_differential.trace.spine import MERGE_RATIO, MergePolicy


@dataclass(frozen=True)
class ParquetPolicy:
    """When a Parquet trace's directories merge (the module docstring): once there would be
    more than ``every`` of them; all of them, or (``geometric``) the deltas after the first,
    the first joining them by ``spine``'s rule.

    >>> ParquetPolicy(2).start(["a", "b"], True, size=len)          # 3 > 2: all merge
    0
    >>> ParquetPolicy(3).start(["a", "b"], True, size=len) is None  # 3 <= 3: none
    True
    >>> sizes = {"base": 100, "d1": 10, "d2": 10}
    >>> ParquetPolicy(2, geometric=True).start(["base", "d1", "d2"], True, size=sizes.get)  # 100 > 2 * 20
    1
    """

    every: int
    geometric: bool = False
    spine: MergePolicy = field(default_factory=lambda: MergePolicy(MERGE_RATIO, None))

    def start(self, files: Sequence[str], adding: bool, size: Callable[[str], int],
              force: bool = False) -> int | None:
        """Of a trace's ``files`` (oldest first), the first to merge into one before a new one is
        added (``adding``) or when ``force``d: ``0``, all of them; ``1``, the deltas (the first
        kept); ``None``: no merge.  ``size`` gives a directory's bytes, asked only for a
        geometric merge of at least two deltas."""
        if not files or not (len(files) + adding > self.every or force):
            return None
        if self.geometric and len(files) >= 3:
            deltas = sum(size(f) for f in files[1:])
            if not self.spine.merges(size(files[0]), deltas, len(files)):
                return 1
        return 0


@dataclass(frozen=True)
class ParquetTrace:
    """A trace's Parquet directories (relative to the view's root), oldest first.

    >>> t = ParquetTrace(("v1/c", "v2/n", "v3/n"))
    >>> t.roll("v4/n", ParquetPolicy(3), size=len, merged_at=lambda whole: "v4/c")
    (ParquetTrace(files=('v4/c', 'v4/n')), ('v1/c', 'v2/n', 'v3/n'))
    """

    files: tuple[str, ...] = ()

    def roll(self, new: str | None, policy: ParquetPolicy, size: Callable[[str], int],
             merged_at: Callable[[bool], str], force: bool = False) -> tuple[ParquetTrace, tuple[str, ...]]:
        """The trace with ``new`` (a version's directory of new updates; ``None``: none) added,
        after the merge ``policy`` asks for: ``(the new trace, the directories to merge)``.  The
        merged directory takes their place, named by ``merged_at(whole)`` (``whole``: all the
        trace's directories merge, not only the deltas); the caller writes it, in the same
        version, from the merged directories' rows advanced to the frontier and consolidated."""
        files = list(self.files)
        start = policy.start(files, new is not None, size, force)
        merging: tuple[str, ...] = ()
        if start is not None:
            merging = tuple(files[start:])
            files = [*files[:start], merged_at(start == 0)]
        if new is not None:
            files.append(new)
        return ParquetTrace(tuple(files)), merging


__all__ = ["ParquetPolicy", "ParquetTrace"]
