"""Counting the Spark jobs, stages and tasks a piece of code runs.

A differential operator on a tiny input costs about as much as the Spark jobs it
runs: each job pays the scheduler (tens of milliseconds locally), so "how many
jobs" is the first thing to look at when a small query is slow.  :func:`count_jobs`
runs a block of code under a fresh, unique job group and afterwards asks the
SparkContext's status tracker which jobs that group ran::

    from spark_differential.core.jobs import count_jobs

    with count_jobs(spark) as jobs:
        df.dd_count("k").collect()
    print(jobs.jobs, jobs.stages, jobs.tasks)

Jobs count if they were submitted from the thread running the block (Spark SQL
carries the job group over to the threads it starts for broadcasts and adaptive
query stages).  Stages skipped because their shuffle output was reused are not
counted, and their tasks neither: the numbers are what ran.  The status tracker
works with the web UI disabled (``spark.ui.enabled=false``, :func:`sd.session`'s
default) but only remembers the last ``spark.ui.retainedJobs`` jobs (1000 by
default) and ``spark.ui.retainedStages`` stages; a block running more than that
raises :class:`JobCountError` rather than returning a short count.

Classic (py4j) sessions only: Spark Connect has no status tracker, and
:func:`count_jobs` raises :class:`JobCountError` there.

Before any job, building a plan has a fixed cost of its own on a classic session:
every PySpark DataFrame or Column call is one or more py4j round trips to the JVM
(a DataFrame also an analysis of its plan).  :func:`count_round_trips` counts them::

    with count_round_trips() as trips:
        df.dd_count("k")
    print(trips.count)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from spark_differential.errors import SparkDifferentialError

__all__ = ["JobCount", "JobCountError", "RoundTrips", "count_jobs", "count_round_trips"]

_SEQ = itertools.count()
_GROUP_PROPS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class JobCountError(SparkDifferentialError):
    """The jobs of a block could not be counted (Spark Connect, or the status tracker forgot some)."""


@dataclass
class JobCount:
    """What a :func:`count_jobs` block ran; filled in when the block exits."""

    group: str
    jobs: int = 0
    stages: int = 0
    tasks: int = 0
    seconds: float = 0.0
    job_ids: list[int] = field(default_factory=list)
    stage_tasks: list[int] = field(default_factory=list)  # tasks per stage that ran, in job order

    def __str__(self) -> str:
        return f"{self.jobs} jobs, {self.stages} stages, {self.tasks} tasks in {self.seconds:.3f} s"


def _spark_context(spark: Any) -> Any:
    try:
        sc = spark.sparkContext
    except Exception as e:  # Spark Connect raises (PySparkNotImplementedError / AttributeError)
        raise JobCountError(
            "count_jobs needs a classic SparkSession with a SparkContext; Spark Connect sessions have no "
            f"status tracker to count jobs with ({type(e).__name__})"
        ) from None
    if sc is None or not hasattr(sc, "statusTracker"):
        raise JobCountError("count_jobs needs a classic SparkSession with a SparkContext (status tracker)")
    return sc


@contextlib.contextmanager
def count_jobs(spark: Any, description: str = "spark_differential count_jobs") -> Iterator[JobCount]:
    """Count the Spark jobs, stages and tasks run inside the ``with`` block.

    Yields a :class:`JobCount` whose fields are set when the block exits (also when it
    raises).  The block runs under a unique job group; the job group that was set
    before (if any) is restored afterwards.  Blocks may not nest (Spark has one job
    group per thread; the inner block's jobs would not count in the outer one).

    Raises :class:`JobCountError` on Spark Connect, and when the status tracker no
    longer knows a job or stage of the block (more than ``spark.ui.retainedJobs`` /
    ``spark.ui.retainedStages`` ran).
    """
    sc = _spark_context(spark)
    tracker = sc.statusTracker()
    group = f"sd-count-jobs-{os.getpid()}-{next(_SEQ)}-{time.time_ns()}"
    saved = {p: sc.getLocalProperty(p) for p in _GROUP_PROPS}
    result = JobCount(group)
    sc.setJobGroup(group, description, interruptOnCancel=False)
    t0 = time.perf_counter()
    try:
        yield result
    finally:
        result.seconds = time.perf_counter() - t0
        for p, v in saved.items():
            sc.setLocalProperty(p, v)
        _fill(result, tracker)


def _fill(result: JobCount, tracker: Any) -> None:
    ids = sorted(tracker.getJobIdsForGroup(result.group))
    result.job_ids = list(ids)
    result.jobs = len(ids)
    seen: set[int] = set()
    for jid in ids:
        info = tracker.getJobInfo(jid)
        if info is None:
            raise JobCountError(f"count_jobs: the status tracker forgot job {jid} (raise spark.ui.retainedJobs)")
        for sid in info.stageIds:
            if sid in seen:
                continue
            seen.add(sid)
            stage = tracker.getStageInfo(sid)
            if stage is None:
                # a stage of the job that never ran (its shuffle output was reused): Spark
                # does not keep it as active or completed
                continue
            if stage.numTasks == 0 or (stage.numCompletedTasks + stage.numFailedTasks + stage.numActiveTasks) == 0:
                continue  # skipped stage
            result.stages += 1
            result.stage_tasks.append(int(stage.numTasks))
            result.tasks += int(stage.numTasks)


@dataclass
class RoundTrips:
    """What a :func:`count_round_trips` block sent to the JVM."""

    count: int = 0


@contextlib.contextmanager
def count_round_trips() -> Iterator[RoundTrips]:
    """Count the py4j commands the calling thread sends to the JVM inside the block.

    Deterministic for a given plan: commands of other threads and py4j's own
    garbage-collection messages (sent when Python drops a JVM reference, at times
    of its own) are not counted.  Counts stay 0 on Spark Connect (no py4j)."""
    import threading

    from py4j.java_gateway import GatewayClient

    result = RoundTrips()
    me = threading.get_ident()
    send = GatewayClient.send_command

    def counted(client: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me and not command.startswith("m\n"):
            result.count += 1
        return send(client, command, *args, **kwargs)

    GatewayClient.send_command = counted  # type: ignore[method-assign]
    try:
        yield result
    finally:
        GatewayClient.send_command = send  # type: ignore[method-assign]
