"""Committed versions of an incremental view: what an update starts from, writes and commits.

On ``(data, time, diff)``: a view's state is a sequence of committed versions.  Each
update starts from the newest one (:class:`State`, or none), writes a new version
directory (:class:`Update` says what it works on, :class:`Written` what its strategy
stored), and commits it by writing one manifest naming the version's frontier, batch id,
schemas, strategy (``stage``: 1 the rerun strategy, 2 the traced one; the stored number
is kept for compatibility), stateful operators and files (:meth:`State.to_json`).
Format 4 manifests.  Format 3 ones are read the same way; format 4 says that trace
files written inside one task hold no key bucket (readers compute it from the keys), which
a version that reads format 3 only would misread, so it refuses them by their format.
Format 2 ones (written before the traced strategy existed) are read as rerun ones.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_differential.core.lattice import Leaves, TimeType, from_spark_type
from spark_differential.errors import IncrementalStateError
from spark_differential.incremental.storage import Operator, part

# 4: trace files written inside one task hold no bucket; 3: the traced strategy (stage 2); 2: the rerun strategy only
FORMAT = 4
READS = (2, 3, 4)
RERUN, TRACED = 1, 2  # the strategies, as a manifest's (and sd.incremental's) ``stage`` numbers them


@dataclass(frozen=True)
class State:
    """One committed version, as its manifest names it.

    >>> from pyspark.sql import types as T
    >>> s = State(1, "v00000001-0a1b2c3d", T.LongType(), [(5,)], None, {}, T.StructType(), {}, [])
    >>> State.from_json(s.to_json()).frontier, s.output_file
    ([(5,)], 'v00000001-0a1b2c3d/data/_sd_kind=o')
    """

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
    stage: int = RERUN  # the strategy (its stored number: RERUN, TRACED)
    operators: tuple[Operator, ...] = ()
    trace_files: dict[str, list[str]] = field(default_factory=dict)
    pending_files: list[str] = field(default_factory=list)
    buckets: tuple[int, int] = (0, 0)  # traced: (key buckets, partitions) the traces were bucketed with

    @property
    def output_file(self) -> str:
        """Where this version's update stored what it returned (absent when that was empty)."""
        return part(self.directory, "o")

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
    def from_json(cls, text: str) -> State:
        m = json.loads(text)
        if m.get("format") not in READS:
            raise IncrementalStateError(
                f"sd.incremental: the state has format {m.get('format')!r}; this version reads formats "
                f"{', '.join(map(str, READS[:-1]))} and {READS[-1]} (format 1 stored each collection in its own Parquet directory). "
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
            stage=int(m.get("stage", RERUN)),  # format 2: the rerun strategy only
            operators=tuple(Operator.from_json(o) for o in m.get("operators", [])),
            trace_files={t: [str(p) for p in fs] for t, fs in files.get("traces", {}).items()},
            pending_files=[str(p) for p in files.get("pending", [])],
            buckets=(int(m.get("buckets", [0, 0])[0]), int(m.get("buckets", [0, 0])[1])),
        )


@dataclass(frozen=True)
class Written:
    """What an update's one write stored (the files named relative to the view's root)."""

    output: T.StructType
    output_exists: bool
    input_files: dict[str, list[str]]
    emitted_files: list[str]
    compacted: bool
    trace_files: dict[str, list[str]] = field(default_factory=dict)
    pending_files: list[str] = field(default_factory=list)
    operators: tuple[Operator, ...] = ()
    # the new frontier, when the update found it (an Update whose new_front is a NextFrontier)
    frontier: list[Leaves] | None = None


@dataclass(frozen=True)
class NextFrontier:
    """An update's new frontier when it is the largest time of its new updates + 1, never
    earlier than the old frontier ``old`` (an integral time's one leaf): what
    ``foreach_batch`` moves a view's frontier to.  It is found where the updates are read,
    by the update's one task, which sends it back with what it wrote (no job of its own),
    else by one job before the update (:func:`~spark_differential.incremental.inputs.resolved`).

    >>> NextFrontier(5).after(9), NextFrontier(5).after(2), NextFrontier(5).after(None)
    ([(10,)], [(5,)], [(5,)])
    """

    old: int

    def after(self, largest: int | None) -> list[Leaves]:
        """The frontier after new updates whose largest time (leaf) is ``largest`` (``None``: none)."""
        return [(self.old if largest is None else max(self.old, int(largest) + 1),)]


class _Next:
    def __repr__(self) -> str:
        return "NEXT_FRONTIER"


# ``upto`` of an update whose new frontier is its new updates' largest time + 1 (NextFrontier)
NEXT_FRONTIER: Any = _Next()


@dataclass(frozen=True)
class Update:
    """What one update works on: the version it starts from (``state``; ``None`` for the first
    update), the inputs' schemas (``schemas``, the view's) and new updates (``incoming``,
    checked against the old frontier: :func:`~spark_differential.incremental.inputs.incoming`),
    the time type, the old and new frontiers and the new version's directory (relative to the
    view's root).  ``op`` names the update in messages, ``where`` the view (its path)."""

    op: str
    where: str
    state: State | None
    schemas: Mapping[str, T.StructType]
    incoming: Mapping[str, DataFrame]
    ttype: TimeType
    old_front: list[Leaves] | None
    new_front: list[Leaves] | NextFrontier
    directory: str


__all__ = ["FORMAT", "NEXT_FRONTIER", "NextFrontier", "READS", "RERUN", "TRACED", "State", "Update", "Written"]
