"""``dd_top_k``, the operator added through the seam alone, against the oracle on every path.

The operator is a kernel (``spark_differential/kernels/topk.py``) and one call to the seam
(``spark_differential/operators/topk.py``); nothing else knows it.  The same random inputs,
with integer and product times, go through every handler: the distributed executor (its
own stage), a pipeline fused into one task, a ``dd_iterate`` loop inside one task and on
the distributed path (also cut in time chunks), and an incremental view's traces.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

import pytest
from helpers import assert_matches, cases, to_df
from oracle import (
    Coll,
    Product,
    Total,
    assert_updates_equal,
    consolidate,
    ref_distinct,
    ref_iterate,
    ref_reduce,
    sort_key,
)
from test_incremental import expected, run_view, schedule

import spark_differential as sd
from spark_differential.kernels import topk

LATTICES = {"int": Total(), "product2": Product([Total(), Total()])}
K = 2
BY = ["case", "k"]


def ref_top_k(a: Coll, by: list[str], col: str, k: int, lat: Any) -> Coll:
    """The oracle: per key and time, the ``k`` copies ranked first (``col`` descending, nulls
    last, ties by the other data columns ascending) among rows of positive multiplicity."""
    rest = [c for c in a.cols if c not in by]
    j = rest.index(col)

    def func(key: tuple, rows: list[tuple[tuple, int]]) -> list[tuple[tuple, int]]:
        copies = sorted(rows, key=lambda dm: sort_key(tuple(v for i, v in enumerate(dm[0]) if i != j)))
        copies.sort(key=lambda dm: (dm[0][j] is not None, dm[0][j] if dm[0][j] is not None else 0), reverse=True)
        out, left = [], k
        for d, m in copies:
            if left <= 0:
                break
            out.append((d, min(m, left)))
            left -= min(m, left)
        return out

    return ref_reduce(a, by, func, lat)


def test_kernel_alone_against_brute_force() -> None:
    """The kernel's snapshot function on random multisets against sorting every copy."""
    rng = random.Random(3)
    for _ in range(300):
        acc = Counter({(rng.choice([None, *range(4)]), rng.randrange(3)): rng.randint(-2, 3) for _ in range(6)})
        k = rng.randint(1, 4)
        copies = [d for d, m in acc.items() if m > 0 for _ in range(m)]
        copies.sort(key=lambda d: (d[1],))
        copies.sort(key=lambda d: (d[0] is not None, d[0] if d[0] is not None else 0), reverse=True)
        assert topk.top(acc, k) == Counter(copies[:k])


@pytest.mark.parametrize("name", list(LATTICES))
def test_top_k_on_every_handler(spark, caplog, name) -> None:
    lat = LATTICES[name]
    a = cases(11, 6, ["k", "x", "y"], 8, lat, value_range=4)
    df = to_df(spark, a, lat)
    want = ref_top_k(a, BY, "x", K, lat)
    # the distributed executor: one operator is its own stage
    assert_matches(df.dd_top_k(BY, "x", K), want)
    # a small pipeline inside one task: the second operator of a chain over local rows
    caplog.set_level(logging.INFO, logger="spark_differential.fused")
    caplog.clear()
    fused = df.dd_distinct().dd_top_k(BY, "x", K)
    assert "runs inside one task" in caplog.text
    assert_matches(fused, ref_top_k(ref_distinct(a, lat), BY, "x", K, lat))
    # a loop: the fixed point of v = top_k(v + roots), inside one task and on the distributed path
    def body(v: Any) -> Any:
        return v.dd_concat(df).dd_top_k(BY, "x", K)

    def ref_body(x: Counter, roots: Counter) -> Counter:
        both = x.copy()
        both.update(roots)  # the multiset sum (negative multiplicities kept: top_k sees the positive ones)
        return Counter({d: r for d, _, r in ref_top_k(Coll(a.cols, [(d, 0, m) for d, m in both.items() if m]),
                                                      BY, "x", K, Total()).updates})

    looped = ref_iterate(a, ref_body, lat, others=[a])
    for rows, chunk in (("1000000", "auto"), ("0", "auto"), ("0", "2")):
        spark.conf.set("spark_differential.iterate.localRows", rows)
        spark.conf.set("spark_differential.iterate.chunkRows", chunk)
        try:
            assert_matches(df.dd_iterate(body), looped)
        finally:
            spark.conf.unset("spark_differential.iterate.localRows")
            spark.conf.unset("spark_differential.iterate.chunkRows")


def test_top_k_in_an_incremental_view(spark, tmp_path) -> None:
    """An incremental view (its traced strategy) of ``dd_top_k``, inputs split into updates."""
    lat = Total()
    inputs = {"a": cases(5, 5, ["k", "x", "y"], 9, lat, value_range=4, time_range=(0, 6))}
    steps = schedule(random.Random(2), lat, inputs, 3, 6)
    got = run_view(spark, str(tmp_path / "view"), lambda a: a.dd_top_k(BY, "x", K), inputs, steps, lat)
    want = expected(lambda c: ref_top_k(c["a"], BY, "x", K, lat), inputs, steps[-1][0], lat)
    assert_updates_equal(consolidate(got), want)


def test_bad_k_is_refused_before_any_job(spark) -> None:
    df = spark.createDataFrame([(1, 2, 0, 1)], "k long, x long, time long, diff long")
    with pytest.raises(ValueError, match="k must be a positive int"):
        df.dd_top_k("k", "x", 0)
    with pytest.raises(sd.errors.SchemaMismatchError, match="both a `by` column and the value column"):
        df.dd_top_k("k", "k", 1)

