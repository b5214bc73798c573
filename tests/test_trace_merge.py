"""The size-tiered merge policy of traces (``trace.spine.MergePolicy``), without Spark.

A batch is stood in for by the list of iterations it holds; merging concatenates, as
``trace.spark.SparkTrace.push`` and ``loop.packed._pack_merge`` merge the batches from
the policy's start on with the newest.
"""

from __future__ import annotations

import pytest

from spark_differential.trace import spine


@pytest.fixture
def merges() -> list[int]:
    """The number of batches each merge of :func:`_run` took (appended to as it runs)."""
    return []


def _run(sizes: list[int], merges: list[int]) -> tuple[list, list[int]]:
    batches: list = []
    weights: list[int] = []
    for i, w in enumerate(sizes):
        batches.append([i])
        weights.append(w)
        start = spine.default_policy().start(weights)
        if start < len(batches) - 1:
            merges.append(len(batches) - start)
            batches[start:] = [[x for b in batches[start:] for x in b]]
            weights[start:] = [sum(weights[start:])]
        assert [x for b in batches for x in b] == list(range(i + 1)), "a merge lost or reordered batches"
        assert sum(weights) == sum(sizes[: i + 1])
        assert len(batches) <= spine.MAX_BATCHES
    return batches, weights


def test_growing_iterations_fold_into_one_batch(merges: list[int]) -> None:
    batches, weights = _run([13, 63, 201, 469, 1057, 2284], merges)
    assert batches == [[0, 1, 2, 3, 4, 5]]
    assert merges == [2, 2, 2, 2, 2]


def test_a_settled_trace_is_not_rewritten_for_small_iterations(merges: list[int]) -> None:
    # a large trace, then shrinking iterations: the large batch is left alone while the
    # small ones merge among themselves once they are of comparable size
    batches, weights = _run([5000, 965, 676, 432, 255, 140, 76, 39], merges)
    assert batches[0] == [0]
    assert weights[0] == 5000
    assert len(batches) < 8
    assert all(w_old > spine.MERGE_RATIO * w_new for w_old, w_new in zip(weights, weights[1:]))


def test_batches_are_capped(merges: list[int]) -> None:
    batches, _ = _run([10 ** (12 - i) for i in range(12)], merges)  # each far smaller than the last: never by ratio
    assert len(batches) == spine.MAX_BATCHES
    assert merges and all(n == 2 for n in merges)
