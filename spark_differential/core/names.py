"""Reserved column names of the library's own columns (all start with ``_sd_``).

On ``(data, time, diff)``: ``time`` and ``diff`` are the user's columns (see
:mod:`spark_differential.core.collection`); the names here label columns the library adds
on the way to and from its kernels and tasks, never seen in a result: the key bucket and
key hash that place a row (:mod:`spark_differential.engine.kernel_form`), the side a row
of a two-input kernel belongs to, the source a row of an in-task program comes from, the
time chunk a loop cuts time into.
"""

from __future__ import annotations

BUCKET = "_sd_b"  # the key bucket: which kernel call sees the row (many keys per bucket)
KEY_HASH = "_sd_h"  # 64-bit hash of the key columns (never null; the bucket derives from it)
SIDE = "_sd_side"  # which input of a two-input kernel a row belongs to (0, 1)
SRC = "_sd_src"  # which source of an in-task program a row belongs to (0: the loop's roots)
CHUNK = "_sd_chunk"  # the time chunk (its start) a row of a loop cut in time chunks belongs to
PART = "_sd_part"  # the slice of time a row belongs to (a loop spread over tasks: engine.chunks.Spread)
