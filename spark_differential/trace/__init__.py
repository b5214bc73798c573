"""Traces: what a stateful operator keeps of its inputs' updates, with one merge policy.

On ``(data, time, diff)``: an operator that runs again on new updates (an iteration of
``dd_iterate``, an update of an incremental view) reads, for the keys the new updates
touch, every earlier update of its inputs: its *trace*.  A trace is kept as **batches** of
consolidated updates (no two rows with the same data and time, no zero diff), newest last,
merged by one **policy** (:mod:`.spine`: a batch merges into the newer ones once it is at
most twice their size, as differential dataflow's spine; each update is merged O(log n)
times and a trace holds O(log n) batches), and may be **advanced** to a frontier ``F``
(``advance(t, F) = meet_{f in F} join(t, f)``, then consolidated: seed 004), which keeps
its accumulation at every time in the future of ``F`` and merges what no such time tells
apart.  "Advance and consolidate" is written once per backend:

* :mod:`.arrow` -- Arrow tables in a Python worker (a loop or a view's loop inside one
  task): :func:`~.arrow.consolidated`, :class:`~.arrow.ArrowTrace`.
* :mod:`.spark` -- DataFrames on the executors, partitioned by key bucket (the distributed
  loop): :func:`~.spark.consolidated`, :class:`~.spark.SparkTrace`.
* :mod:`.parquet` -- files under an incremental view's path: :class:`~.parquet.ParquetTrace`.
"""
