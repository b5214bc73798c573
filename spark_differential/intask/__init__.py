"""The in-task engine: a ``dd_iterate`` loop, or a small pipeline, run whole inside one Spark task.

On ``(data, time, diff)`` this computes exactly what the distributed loop of
:mod:`spark_differential.loop.iterate` computes: at every outer time the fixed point of
``x = body(x)`` started from the roots, as updates at the outer times.  Only where
the work happens differs.  A loop whose inputs are small pays Spark's scheduler
once per iteration on the distributed path (a job or more each, whatever its
data); here the whole loop is one task of one job:

* **Recording** (driver, no job): the body is called once on empty placeholder
  DataFrames.  Every ``dd_*`` operator it calls records a step (its kernel, its
  parameters, which of its inputs vary with the loop and which come from outside)
  and returns a fresh placeholder; the linear steps between them (``select``,
  ``where``, ``withColumn``, unions) are read from the Spark plan and translated to
  DuckDB SQL (:mod:`spark_differential.intask.translate` on a classic session; on Spark
  Connect :mod:`spark_differential.intask.translate_connect` reads the client's plan, the
  placeholders being empty local relations known by their plan node).  Anything the translator or the
  recorder does not cover raises :class:`~spark_differential.intask.translate.Untranslatable`
  and the loop runs distributed, with one log line saying why.
* **Running** (executor): the roots and every collection from outside the loop go
  to one task as one Arrow table (tagged by source); the task iterates the recorded
  program with the library's kernels called directly on Arrow tables, keeping each
  operator's trace in memory.  Iteration ``i`` gives each stateful step its new
  updates and the trace rows of the keys they touch (``_new`` flags), exactly as the
  distributed path does, and outer collections enter at iteration 0 only.
* Over a totally ordered time the task cuts the loop into **time chunks** itself
  (the rule of :mod:`spark_differential.engine.chunks`, planned from the rows at hand, with
  larger automatic chunks: ``chunks.LOCAL_FACTOR`` times the live rows, at least
  ``chunks.LOCAL_MIN_ROWS`` updates):
  chunked forms built in DuckDB, the chunk one more key of every operator, the
  answers un-chunked at the end.  With ``spark_differential.iterate.localThreads``
  above 1 (default: the cores of a ``local[N]`` master, at most 4; 1 elsewhere) the chunks are cut into that many groups of about equal rows,
  each group's loop run on a thread of the task.
* Each operator's trace is kept in batches consolidated and sorted by the operator's
  key, so an iteration finds the trace rows of the keys it touches by binary search.
* A join of the loop's updates with an outer collection reads, from iteration 1 on,
  that collection's trace prepared once (:mod:`spark_differential.kernels.fixed_join`:
  it no longer changes), not its touched rows gathered and numbered again.
* **The answer** (``(data, time, diff)`` at the outer times) leaves the task as it is
  known (a group of time chunks' answer as soon as its loop ends, while the others go
  on), one row per run of rows with equal data, their times and diffs in one list
  column (:data:`~.task.ROWS`), which the returned DataFrame explodes: the JVM makes and
  keeps a few large rows instead of one small row per change.  It stays in the job's
  local checkpoint; but an answer of at most :data:`~.launch.LOCAL_RESULT_ROWS` rows
  (:data:`~.task.LOCAL_RESULT_BYTES`) on a classic session comes back to the driver with the
  task's result (an accumulator), and the returned DataFrame is then local rows: a
  later action on it runs no job for them.
* A task that receives more than ``spark_differential.iterate.localRows`` input
  rows (:func:`spark_differential.core.settings.local_rows`;
  ``0`` disables the path) stops reading and
  says so; the loop then runs in key partitions or slices of time (below).  How the task
  ended (done, too large, or out of iterations; its changes per iteration) reaches the
  driver through a PySpark accumulator, which Spark merges from the successful attempt of
  the task only; on Spark Connect (no accumulators) through the task's last row
  (:data:`~.task.META`), read back from the checkpoint, one small job.
* Inputs over ``localRows`` run in **key partitions** (any time type) or in **slices of
  time** (a totally ordered time), still one job (``spark_differential.iterate.localSpread``:
  ``auto``, the default; ``keys`` or ``always`` to force one even when one task would do;
  ``off``: distributed).  Where Spark's plan statistics put the input within the key
  partitions' share (``spark_differential.iterate.partitionRows`` a task:
  :func:`spark_differential.core.settings.partition_rows`), key partitions at once;
  where they say nothing, one job counts the input rows first
  (:func:`.sources.counted_rows`: no task is started to be abandoned); over the
  share, one job measures the inputs
  (:func:`spark_differential.engine.chunks.measure_spread`: updates, live rows bounded by
  the distinct data, time quantiles) and slices time when the live rows leave room, or
  runs key partitions when they hold the input.
* **Key partitions**: as many tasks as the session runs at once, in one barrier stage,
  each running the same program over the keys it owns (:mod:`.exchange`).  Each stateful
  step's new updates go first to the task owning their keys, the sources and each
  iteration's change to the task owning their data; the traces stay in the task that
  built them and only the changes travel, over sockets the tasks open to each other (the
  driver sees their addresses alone).  The changes per iteration are the tasks' sums, so
  they stop together; time chunks are planned from their summed figures.  Spark retries
  a failed barrier stage whole when it is a map stage, so the answer crosses one shuffle.
* **Slices of time**: each slice's task reads its updates and the inputs accumulated
  before it (its snapshot) and runs the loop as one task would; a slice's answer is the
  whole answer's rows at its times (:class:`spark_differential.engine.chunks.Spread`), so
  nothing is consolidated across tasks.

The modules, in the order a loop meets them: :mod:`.record` (the recorder: a handler of
:mod:`spark_differential.engine.call` that records the body's steps into a
:mod:`.program`, with :mod:`.translate` / :mod:`.translate_connect` for the linear
steps), :mod:`.launch` (the driver: the sources tagged into one table by :mod:`.sources`,
one ``mapInArrow`` job, the task's report read back), :mod:`.task` (the task's function),
:mod:`.exchange` (key partitions: which task owns a row, and the tasks' exchanges),
:mod:`.iteration` (the loop over the program's steps, in time chunks by :mod:`.chunking`),
:mod:`.step` (one step: its kernel over new updates and its traces,
:class:`spark_differential.trace.arrow.ArrowTrace`).  :mod:`.pipeline` runs a chain of
top-level operators the same way (a handler of its own).
"""
