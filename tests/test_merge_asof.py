"""``dd_merge_asof`` against the brute-force as-of join (``tests/asof_oracle.py``) and pandas.

Plain tables: random tables with ties, nulls and duplicate rows, every direction, exact
matches or not, tolerance or not, every ``how``, equality and null-safe keys, shared and
separate match-column names; also against pandas ``merge_asof`` (the options pandas has,
tables without null match values).  Collections: the join of the snapshots at every time
of the lub closure, with integer and product times, through the seam's handlers (its own
stage, a fused pipeline, a ``dd_iterate`` loop in one task and distributed, an
incremental view).
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from asof_oracle import Spec, ref_merge_asof, snapshot
from asof_support import assert_all
from helpers import assert_matches, to_df
from oracle import Coll, Product, Total, assert_updates_equal, consolidate, random_coll, ref_distinct, ref_iterate
from pyspark.sql import types as T
from test_incremental import expected, run_view, schedule

LATTICES = {"int": Total(), "product2": Product([Total(), Total()])}
# (direction, allow_exact_matches, tolerance, how, nulls_equal, shared on name)
OPTIONS = [
    ("backward", True, None, "left", False, True),
    ("backward", False, 1, "inner", True, False),
    ("forward", True, 1, "right", False, True),
    ("forward", False, None, "full", True, False),
    ("nearest", True, None, "semi", False, False),
    ("nearest", False, 1, "anti", True, True),
    ("nearest", True, 2, "full", False, True),
]


def _nulled(rng: random.Random, c: Coll, at: tuple[int, ...], p: float = 0.1) -> Coll:
    return Coll(c.cols, [(tuple(None if i in at and rng.random() < p else v for i, v in enumerate(d)), t, r)
                         for d, t, r in c.updates])


def _cases(seed: int, lat: Any, n_cases: int, *, static: bool, nulls: bool = True) -> tuple[Coll, Coll]:
    """Left ``(case, k, t, u)`` and right ``(case, k, t, w)`` tables, many small cases in one."""
    rng = random.Random(seed)
    kw: dict[str, Any] = {"value_range": 4}
    if static:
        kw.update(positive_only=True, time_range=(0, 0))
    left, right = [], []
    for case in range(n_cases):
        a = random_coll(rng, ["k", "t", "u"], rng.randint(0, 7), lat, **kw)
        b = random_coll(rng, ["k", "t", "w"], rng.randint(0, 7), lat, **kw)
        if nulls:
            a, b = _nulled(rng, a, (0, 1)), _nulled(rng, b, (0, 1, 2))
        left += [((case, *d), t, r) for d, t, r in a.updates]
        right += [((case, *d), t, r) for d, t, r in b.updates]
    return Coll(("case", "k", "t", "u"), left), Coll(("case", "k", "t", "w"), right)


def _spec(option: tuple) -> Spec:
    direction, exact, tol, how, nulls_equal, _ = option
    return Spec((0, 1), (0, 1), 2, 2, (3,), direction, exact, tol, how, nulls_equal)


def _shape(option: tuple) -> tuple[list[str], Any]:
    """The output columns and the oracle's output row for an option."""
    how, shared = option[3], option[5]
    if how in ("semi", "anti"):
        return (["case", "k", "t", "u"] if shared else ["case", "k", "x", "u"]), (lambda lr, rr: tuple(lr))

    def row(lr: tuple | None, rr: tuple | None) -> tuple:
        key = lr[:2] if lr is not None else rr[:2]
        if shared:
            t = lr[2] if lr is not None else rr[2]
            return (*key, t, lr[3] if lr else None, rr[3] if rr else None)
        return (*key, *(lr[2:] if lr else (None, None)), *(rr[2:] if rr else (None, None)))

    return (["case", "k", "t", "u", "w"] if shared else ["case", "k", "x", "u", "v", "w"]), row


def _call(left: Any, right: Any, option: tuple) -> Any:
    direction, exact, tol, how, nulls_equal, shared = option
    kw: dict[str, Any] = {"on": "t"} if shared else {"left_on": "x", "right_on": "v"}
    if not shared:
        left, right = left.withColumnRenamed("t", "x"), right.withColumnRenamed("t", "v")
    return left.dd_merge_asof(right, by=["case", "k"], tolerance=tol, direction=direction,
                              allow_exact_matches=exact, how=how, nulls_equal=nulls_equal, **kw)


def _table(spark: Any, c: Coll) -> Any:
    """A collection at one time with positive diffs as a plain table: each update ``diff`` rows."""
    rows = [d for d, _, r in c.updates for _ in range(r)]
    schema = T.StructType([T.StructField(n, T.LongType(), True) for n in c.cols])
    return spark.createDataFrame(rows, schema)


def test_the_batched_check_reports_surplus_and_missing_rows(spark) -> None:
    """``asof_support.assert_all`` (every as-of check of the suite goes through it) fails
    on a wrong multiplicity, a missing row and an extra row, naming the check."""
    df = spark.createDataFrame([(1, "a"), (1, "a"), (2, None)], "x long, y string")
    assert_all(spark, [("right", df, [(1, "a"), (2, None), (1, "a")])])
    for wrong in ([(1, "a"), (2, None)], [(1, "a"), (1, "a"), (2, None), (3, "c")], [(1, "a"), (1, "a"), (2, "b")]):
        with pytest.raises(AssertionError, match="wrong: (unexpected|missing)"):
            assert_all(spark, [("right", df, [(1, "a"), (1, "a"), (2, None)]), ("wrong", df, wrong)])


def test_plain_tables_against_brute_force(spark) -> None:
    """Every option of OPTIONS on random plain tables, checked by one Spark job."""
    checks = []
    for i, option in enumerate(OPTIONS):
        a, b = _cases(11 + i, Total(), 12, static=True)
        cols, row = _shape(option)
        out = _call(_table(spark, a), _table(spark, b), option)
        assert out.columns == cols and "time" not in out.columns
        want = snapshot(_spec(option), Counter(d for d, _, r in a.updates for _ in range(r)),
                        Counter(d for d, _, r in b.updates for _ in range(r)), row)
        checks.append((f"{option}", out, list(want.elements())))
    assert_all(spark, checks)


def _pandas_rows(df: pd.DataFrame) -> Counter:
    def clean(v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return int(v) if isinstance(v, float) and v == int(v) else v

    return Counter(tuple(clean(v) for v in r) for r in df.itertuples(index=False))


def test_plain_tables_against_pandas(spark) -> None:
    """pandas ``merge_asof`` as a second oracle: a right table sorted by (on, other columns)
    makes pandas' last/first of tied rows ours.  Every direction, exact or not, tolerance or not."""
    checks = []
    for direction in ("backward", "forward", "nearest"):
        a, b = _cases(40 + len(direction), Total(), 10, static=True, nulls=False)
        left, right = _table(spark, a), _table(spark, b)
        pl = pd.DataFrame([d for d, _, r in a.updates for _ in range(r)], columns=list(a.cols)).sort_values(
            "t", kind="stable")
        pr = pd.DataFrame([d for d, _, r in b.updates for _ in range(r)], columns=list(b.cols)).sort_values(["t", "w"])
        for exact, tol in ((True, None), (False, 1)):
            ours = left.dd_merge_asof(right, on="t", by=["case", "k"], tolerance=tol, direction=direction,
                                      allow_exact_matches=exact)
            theirs = pd.merge_asof(pl, pr, on="t", by=["case", "k"], tolerance=tol, direction=direction,
                                   allow_exact_matches=exact)
            checks.append((f"{direction} {exact} {tol}", ours, list(_pandas_rows(theirs).elements())))
    assert_all(spark, checks)


@pytest.mark.parametrize("name", list(LATTICES))
def test_collections_against_brute_force(spark, name: str) -> None:
    """Every option on collections: the snapshot at every time is the join of the snapshots
    (one Spark job per time type)."""
    lat = LATTICES[name]
    a, b = _cases(7 + len(name), lat, 8, static=False)
    left, right = to_df(spark, a, lat), to_df(spark, b, lat)
    checks = []
    for option in OPTIONS if name == "int" else OPTIONS[::2]:
        cols, row = _shape(option)
        want = ref_merge_asof(a, b, _spec(option), lat, cols, row)
        out = _call(left, right, option)
        assert [c for c in out.columns if c not in ("time", "diff")] == cols
        checks.append((f"{option}", out, [(*d, t, r) for d, t, r in want.updates]))
    assert_all(spark, checks)


def test_collections_on_every_handler(spark, caplog) -> None:
    """A fused pipeline, a loop in one task and on the distributed path, an incremental view."""
    lat = Total()
    a, b = _cases(3, lat, 6, static=False, nulls=False)
    left, right = to_df(spark, a, lat), to_df(spark, b, lat)
    option = OPTIONS[0]
    cols, row = _shape(option)
    # a small pipeline inside one task: the second operator of a chain over local rows
    caplog.set_level(logging.INFO, logger="spark_differential.fused")
    caplog.clear()
    fused = left.dd_distinct().dd_merge_asof(right, on="t", by=["case", "k"])
    assert "runs inside one task" in caplog.text
    assert_matches(fused, ref_merge_asof(ref_distinct(a, lat), b, _spec(option), lat, cols, row))
    # a loop: the fixed point of v = semi(distinct(v + a)) against b, in one task and distributed
    semi = ("backward", True, None, "semi", False, True)
    _, srow = _shape(semi)

    def body(v: Any) -> Any:
        return v.dd_concat(left).dd_distinct().dd_merge_asof(right, on="t", by=["case", "k"], how="semi")

    def ref_body(x: Counter, roots: Counter, bb: Counter) -> Counter:
        both = x.copy()
        both.update(roots)
        return snapshot(_spec(semi), Counter({d: 1 for d, m in both.items() if m > 0}), +bb, srow)

    want = ref_iterate(a, ref_body, lat, others=[a, b])
    for rows in ("1000000", "0"):
        spark.conf.set("spark_differential.iterate.localRows", rows)
        try:
            assert_matches(left.dd_iterate(body), want)
        finally:
            spark.conf.unset("spark_differential.iterate.localRows")


def test_collections_in_an_incremental_view(spark, tmp_path) -> None:
    lat = Total()
    a, b = _cases(5, lat, 5, static=False, nulls=False)
    inputs = {"a": a, "b": b}
    steps = schedule(random.Random(2), lat, inputs, 3, 6)
    option = OPTIONS[2]
    cols, row = _shape(option)

    def query(a: Any, b: Any) -> Any:
        return _call(a, b, option)

    got = run_view(spark, str(tmp_path / "view"), query, inputs, steps, lat)
    want = expected(lambda c: ref_merge_asof(c["a"], c["b"], _spec(option), lat, cols, row), inputs, steps[-1][0], lat)
    assert_updates_equal(consolidate(got), want)


def test_few_local_rows_are_not_cut(spark) -> None:
    """A key-less join of a few local rows is one range: its plan has no quantiles and no carried
    rows (no stage of their own); the same join over rows Spark does not hold already is cut."""
    left = spark.createDataFrame([(i, i * 3) for i in range(20)], "t long, x long")
    right = spark.createDataFrame([(i * 2, i) for i in range(20)], "t long, y long")

    def plan(df: Any) -> str:
        return df._jdf.queryExecution().optimizedPlan().toString()

    assert "percentile_approx" not in plan(left.dd_merge_asof(right, on="t"))
    assert "percentile_approx" in plan(left.repartition(2).dd_merge_asof(right, on="t"))
    assert "percentile_approx" in plan(left.dd_merge_asof(right, on="t", ranges=2))
    got = sorted(tuple(r) for r in left.dd_merge_asof(right, on="t").collect())
    assert got == [(t, 3 * t, t // 2) for t in range(20)]


def _kernel_inputs(monkeypatch: Any) -> dict[str, Any]:
    """Where a plain-table join's kernel input (the tagged union, placed) is put once built: ``"one"``."""
    from spark_differential.engine import distributed

    seen: dict[str, Any] = {}
    real = distributed._in_tasks

    def spy(kernel: Any, params: Any, one: Any, out_schema: Any, sides: Any = None, read: Any = None) -> Any:
        seen["one"] = one
        return real(kernel, params, one, out_schema, sides, read)

    monkeypatch.setattr(distributed, "_in_tasks", spy)
    return seen


@pytest.mark.connect
def test_an_automatic_split_of_many_rows_is_balanced_and_sends_shared_columns(spark, monkeypatch) -> None:
    """A key-less join of enough left rows for a range per core (``MIN_RANGE_ROWS`` lowered): the
    ranges, cut at quantiles of a sample of the right's match values (both sides spread alike
    here), hold about as many left rows each; the two sides reach the kernel in shared columns (as wide as the wider side plus the
    side tag, not both together); the rows are pandas ``merge_asof``'s."""
    from spark_differential.core.names import SIDE
    from spark_differential.core.session import is_connect
    from spark_differential.kernels.common import keys
    from spark_differential.operators import asof_ranges

    monkeypatch.setattr(asof_ranges, "MIN_RANGE_ROWS", 500)
    seen = _kernel_inputs(monkeypatch)
    rng = random.Random(5)
    n = 4000
    lrows = [(i, rng.randrange(10**6)) for i in range(n)]
    rrows = [(t, rng.randrange(100)) for t in rng.sample(range(10**6), n)]  # no ties among the right's values
    left = spark.createDataFrame(lrows, "id long, t long").repartition(3)
    right = spark.createDataFrame(pa.table({"t": [t for t, _ in rrows], "price": [p for _, p in rrows]}))
    out = left.dd_merge_asof(right, on="t")
    plan = out._explain_string(mode="extended") if is_connect(out) else out._jdf.queryExecution().toString()
    assert "percentile_approx" in plan and "sdasof_last" not in plan, plan  # cut at right rows
    got = sorted(tuple(r) for r in out.collect())
    want = pd.merge_asof(pd.DataFrame(lrows, columns=["id", "t"]).sort_values("t"),
                         pd.DataFrame(rrows, columns=["t", "price"]).sort_values("t"), on="t")
    assert got == sorted((int(i), int(t), None if math.isnan(p) else int(p)) for i, t, p in want.itertuples(index=False))
    one = seen["one"]
    assert len(one.columns) == 4, one.columns  # the range, the match value, one other column, the side
    sizes = [r[1] for r in one.where(f"{SIDE} = 0").groupBy(keys(1)[0]).count().collect()]
    assert len(sizes) == 2 and min(sizes) >= 0.35 * n, sizes  # a range per core, of about equal size


def test_the_ranges_of_a_key_less_split_go_round_robin_over_the_partitions(spark, monkeypatch) -> None:
    """Without keys a split's ranges are its only keys.  Placed by their hash, two of four ranges
    shared one of four partitions (one task did two ranges while another had none); they go
    round-robin, a range per partition."""
    from pyspark.sql import functions as F

    from spark_differential.core.names import SIDE
    from spark_differential.kernels.common import keys

    seen = _kernel_inputs(monkeypatch)
    left = spark.createDataFrame([(i, i) for i in range(400)], "id long, t long")
    right = spark.createDataFrame([(2 * i, i) for i in range(200)], "t long, price long")
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # no coalescing of the partitions looked at
    try:
        got = sorted(tuple(r) for r in left.dd_merge_asof(right, on="t", ranges=4).collect())
        rk = keys(1)[0]
        per = seen["one"].where(f"{SIDE} = 0").groupBy(F.spark_partition_id().alias("p")) \
            .agg(F.countDistinct(rk).alias("n")).collect()
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", before)
    assert got == [(i, i, i // 2) for i in range(400)]
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) == 4
    assert sorted(r["n"] for r in per) == [1, 1, 1, 1], per


def test_plain_tables_split_into_ranges(spark) -> None:
    """A key's timeline cut into ranges of the match value (each range carrying the right rows
    next to it): the same rows as the oracle, keyed (ranges=3) and key-less (ranges=4, and
    the automatic choice), one Spark job."""
    options = [o for o in OPTIONS if o[3] not in ("right", "full")] + [("backward", True, None, "full", False, True)]
    checks = []
    for i, option in enumerate(options):
        a, b = _cases(70 + i, Total(), 10, static=True)
        cols, row = _shape(option)
        left, right = _table(spark, a), _table(spark, b)
        want = snapshot(_spec(option), Counter(d for d, _, r in a.updates for _ in range(r)),
                        Counter(d for d, _, r in b.updates for _ in range(r)), row)
        direction, exact, tol, how, nulls_equal, shared = option
        kw: dict[str, Any] = {"on": "t"} if shared else {"left_on": "x", "right_on": "v"}
        if not shared:
            left, right = left.withColumnRenamed("t", "x"), right.withColumnRenamed("t", "v")
        out = left.dd_merge_asof(right, by=["case", "k"], tolerance=tol, direction=direction,
                                 allow_exact_matches=exact, how=how, nulls_equal=nulls_equal, ranges=3, **kw)
        checks.append((f"keyed {option}", out, list(want.elements())))
        # key-less: each side's case as a data column
        lk = left.drop("k")
        rk = right.drop("k").withColumnRenamed("case", "rcase")
        # the automatic choice over rows Spark does not hold already (a repartition): cut; local rows are
        # not (test_few_local_rows_are_not_cut)
        out = (lk if i else lk.repartition(2)).dd_merge_asof(rk, tolerance=tol, direction=direction,
                                                             allow_exact_matches=exact, how=how,
                                                             ranges=4 if i else None, **kw)
        spec = Spec((), (), 1, 1, (0, 2), direction, exact, tol, how, nulls_equal)
        if how in ("semi", "anti"):
            shape = lambda lr, rr: tuple(lr)  # noqa: E731
        else:
            def shape(lr: tuple | None, rr: tuple | None, shared: bool = shared) -> tuple:
                if shared:
                    return (*(lr if lr else (None, rr[1], None)), *((rr[0], rr[2]) if rr else (None, None)))
                return (*(lr if lr else (None, None, None)), *(rr if rr else (None, None, None)))
        lrows = Counter((c, t, u) for (c, _, t, u), _, r in a.updates for _ in range(r))
        rrows = Counter((c, t, w) for (c, _, t, w), _, r in b.updates for _ in range(r))
        checks.append((f"key-less {option}", out, list(snapshot(spec, lrows, rrows, shape).elements())))
    assert_all(spark, checks)


def test_a_key_less_split_cut_at_right_rows_carries_nothing(spark) -> None:
    """A key-less split's bounds are right rows' match values: a left row's pick is then in its
    own range and nothing is carried between ranges (no stage of its own).  Random tables over
    a few values (ties at every bound, left rows equal to bounds, null and NaN match values),
    every direction and exactness that path takes, with and without tolerance, every ``how``
    a split allows, 2 to 5 ranges: the brute-force join's rows; a nearest join without exact
    matches, a decimal match column and a right side of fewer than a row per 16 left rows keep
    the carried rows."""
    rng = random.Random(11)
    checks = []
    for i in range(24):
        direction, exact = [("backward", True), ("backward", False), ("forward", True), ("forward", False),
                            ("nearest", True)][i % 5]
        how = ["inner", "left", "semi", "anti"][i % 4]
        tol = [None, 1, 3][i % 3]
        double = i % 6 == 5
        values = [None, float("nan")] if double else [None]

        def value(span: int, double: bool = double, values: list = values) -> Any:
            v = rng.randrange(span)
            return rng.choice(values) if rng.random() < 0.05 else (v / 2 if double else v)

        lrows = [(j, value(20)) for j in range(rng.randint(0, 60))]
        rrows = [(value(20), rng.randrange(3)) for _ in range(rng.randint(-(-len(lrows) // 16), 60))]
        t = "double" if double else "long"
        # Arrow tables: local rows Spark has counted (a split is cut at right rows only where their
        # number is known), a NaN kept apart from a null
        tt = pa.float64() if double else pa.int64()
        left = spark.createDataFrame(pa.table({"id": pa.array([j for j, _ in lrows], pa.int64()),
                                               "t": pa.array([v for _, v in lrows], tt)}), f"id long, t {t}")
        right = spark.createDataFrame(pa.table({"t": pa.array([v for v, _ in rrows], tt),
                                                "y": pa.array([y for _, y in rrows], pa.int64())}), f"t {t}, y long")
        out = left.dd_merge_asof(right, on="t", direction=direction, allow_exact_matches=exact,
                                 tolerance=None if tol is None else (tol / 2 if double else tol), how=how,
                                 ranges=2 + i % 4)
        plan = out._jdf.queryExecution().optimizedPlan().toString()
        assert "percentile_approx" in plan and "sdasof_last" not in plan, plan
        nan = lambda v: v is not None and v != v  # noqa: E731 - a NaN never matches: the oracle sees null
        spec = Spec((), (), 1, 0, (1,), direction, exact, None if tol is None else (tol / 2 if double else tol), how)
        lc = Counter((j, None if nan(v) else v) for j, v in lrows)
        rc = Counter((None if nan(v) else v, y) for v, y in rrows)
        if how in ("semi", "anti"):
            shape = lambda lr, rr: tuple(lr)  # noqa: E731
        else:
            shape = lambda lr, rr: (*lr, rr[1] if rr else None)  # noqa: E731
        want = [(j, v if not nan(v) else None, *rest) for j, v, *rest in snapshot(spec, lc, rc, shape).elements()]
        got = out.selectExpr("id", "CASE WHEN isnan(t) THEN NULL ELSE t END AS t", *out.columns[2:])
        checks.append((f"{i}: {direction} exact={exact} tol={tol} {how} {t}", got, want))
    assert_all(spark, checks)
    left = spark.createDataFrame([(1, Decimal("1.5"))], "id long, t decimal(10, 2)")
    kept = [left.dd_merge_asof(left.withColumnRenamed("id", "y"), on="t", ranges=2),
            spark.createDataFrame([(1, 1)], "id long, t long").dd_merge_asof(
                spark.createDataFrame([(1, 2)], "t long, y long"), on="t", direction="nearest",
                allow_exact_matches=False, ranges=2),
            spark.createDataFrame(pa.table({"id": list(range(40)), "t": list(range(40))})).dd_merge_asof(
                spark.createDataFrame(pa.table({"t": [1, 30], "y": [2, 3]})), on="t", ranges=2)]
    for df in kept:
        assert "sdasof_last" in df._jdf.queryExecution().optimizedPlan().toString()


def test_a_cached_left_table_sets_the_ranges_from_its_counted_rows(spark, monkeypatch) -> None:
    """A key-less join whose left table Spark has cached and counted: the number of ranges comes
    from the plan's row count (no count in the bounds' aggregate, one bound a range boundary),
    as :func:`automatic_ranges` says; the rows are pandas ``merge_asof``'s."""
    from spark_differential.core import settings
    from spark_differential.core.names import SIDE
    from spark_differential.kernels.common import keys
    from spark_differential.operators import asof_ranges

    monkeypatch.setattr(asof_ranges, "MIN_RANGE_ROWS", 500)
    seen = _kernel_inputs(monkeypatch)
    rng = random.Random(8)
    n = 3000
    lrows = [(i, rng.randrange(10**5)) for i in range(n)]
    rrows = [(t, rng.randrange(100)) for t in rng.sample(range(10**5), n)]
    left = spark.createDataFrame(lrows, "id long, t long").repartition(2).cache()
    try:
        assert left.count() == n
        right = spark.createDataFrame(pa.table({"t": [t for t, _ in rrows], "price": [p for _, p in rrows]}))
        out = left.dd_merge_asof(right, on="t")
        plan = out._jdf.queryExecution().optimizedPlan().toString()
        assert "percentile_approx" in plan and "sdasof_n#" not in plan and "sdasof_last" not in plan, plan
        got = sorted(tuple(r) for r in out.collect())
        want = pd.merge_asof(pd.DataFrame(lrows, columns=["id", "t"]).sort_values("t"),
                             pd.DataFrame(rrows, columns=["t", "price"]).sort_values("t"), on="t")
        assert got == sorted((int(i), int(t), None if math.isnan(p) else int(p))
                             for i, t, p in want.itertuples(index=False))
        ranges = asof_ranges.automatic_ranges(n, settings.parallelism(spark))
        assert ranges >= 2
        used = seen["one"].where(f"{SIDE} = 0").select(keys(1)[0]).distinct().count()
        assert used == ranges, (used, ranges)
    finally:
        left.unpersist()


def test_a_large_join_by_key_keeps_every_shuffle_partition(spark, monkeypatch) -> None:
    """A keyed join (not cut) whose left side Spark's plan counts at ``SPREAD_ROWS`` rows or more
    is placed into every shuffle partition (a repartition by number, which adaptive execution
    leaves alone); a smaller one lets adaptive execution merge them; both give pandas' rows."""
    from spark_differential.operators import asof_ranges

    monkeypatch.setattr(asof_ranges, "SPREAD_ROWS", 100)
    rng = random.Random(9)
    lrows = [(i, rng.randrange(4), rng.randrange(1000)) for i in range(150)]
    rrows = [(k, t, rng.randrange(9)) for k in range(4) for t in rng.sample(range(1000), 40)]
    right = spark.createDataFrame(pa.table({"k": [k for k, _, _ in rrows], "t": [t for _, t, _ in rrows],
                                            "y": [y for _, _, y in rrows]}))
    nparts = spark.conf.get("spark.sql.shuffle.partitions")
    want = pd.merge_asof(pd.DataFrame(lrows, columns=["id", "k", "t"]).sort_values("t"),
                         pd.DataFrame(rrows, columns=["k", "t", "y"]).sort_values("t"), on="t", by="k")
    want_rows = sorted((int(i), int(k), int(t), None if math.isnan(y) else int(y))
                       for i, k, t, y in want.itertuples(index=False))
    for n, fixed in ((150, True), (60, False)):
        left = spark.createDataFrame(pa.table({"id": [i for i, _, _ in lrows[:n]], "k": [k for _, k, _ in lrows[:n]],
                                               "t": [t for _, _, t in lrows[:n]]}))
        out = left.dd_merge_asof(right, on="t", by="k")
        plan = out._jdf.queryExecution().optimizedPlan().toString()
        repartition = next(line for line in plan.splitlines() if "RepartitionByExpression" in line)
        assert repartition.rstrip().endswith(f", {nparts}") == fixed, repartition
        got = sorted(tuple(r) for r in out.select("id", "k", "t", "y").collect())
        assert got == [r for r in want_rows if r[0] < n]
