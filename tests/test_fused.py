"""Small pipelines run inside one task (``spark_differential.intask.pipeline``, issue 20).

Every pipeline runs twice, fused (the default) and operator by operator
(``spark_differential.pipeline.localRows=0``), on random inputs over integer and
product-order times, and both must give exactly the oracle's rows.  The log line of
the fused path (and its absence on the other) proves which path ran; on a classic
session the Spark jobs are counted too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import assert_matches, cases, to_df
from oracle import Coll, Product, Total, ref_antijoin, ref_count, ref_distinct, ref_join, ref_max, ref_min, ref_semijoin
from pyspark.sql import functions as F

import spark_differential  # noqa: F401  (registers the methods)
from spark_differential.core import settings
from spark_differential.errors import ConfigurationError
from spark_differential.intask import sources

LATTICES = {"int": Total(), "product2": Product([Total(), Total()])}
KEY = ["case", "k"]
FUSED = "runs inside one task"


def project(coll: Coll, cols: list[str]) -> Coll:
    idx = [coll.cols.index(c) for c in cols]
    return Coll(tuple(cols), [(tuple(d[i] for i in idx), t, r) for d, t, r in coll.updates])


def where(coll: Coll, pred: Callable[[dict[str, Any]], bool]) -> Coll:
    return Coll(coll.cols, [(d, t, r) for d, t, r in coll.updates if pred(dict(zip(coll.cols, d)))])


def rename(coll: Coll, old: str, new: str) -> Coll:
    return Coll(tuple(new if c == old else c for c in coll.cols), coll.updates)


def _pipelines() -> dict[str, tuple[Callable[..., Any], Callable[..., Coll], int]]:
    """name -> (the pipeline on DataFrames a, b; the same on oracle collections; its operators)."""
    return {
        "join, select, count": (
            lambda a, b: a.dd_join(b, on=KEY).select("case", "k", "y", "time", "diff").dd_count(KEY),
            lambda a, b, lat: ref_count(project(ref_join(a, b, KEY, lat), ["case", "k", "y"]), KEY, lat),
            2,
        ),
        "join, count, join, min": (
            lambda a, b: a.dd_join(b, on=KEY).dd_count(KEY).dd_join(b, on=KEY).dd_min(KEY, "y"),
            lambda a, b, lat: ref_min(ref_join(ref_count(ref_join(a, b, KEY, lat), KEY, lat), b, KEY, lat), KEY, "y", lat),
            4,
        ),
        "where, withColumn, distinct, semijoin, antijoin": (
            lambda a, b: a.where(F.col("x") < 2).dd_distinct().withColumn("x", F.col("x") + 1)
            .dd_semijoin(b.select("case", "k", "time", "diff"), on=KEY)
            .dd_antijoin(b.where(F.col("y") == 0).select("case", "k", "time", "diff"), on=KEY),
            lambda a, b, lat: ref_antijoin(
                ref_semijoin(
                    Coll(a.cols, [((c, k, x + 1), t, r) for (c, k, x), t, r in
                                  ref_distinct(where(a, lambda d: d["x"] < 2), lat).updates]),
                    project(b, KEY), KEY, lat),
                project(where(b, lambda d: d["y"] == 0), KEY), KEY, lat),
            3,
        ),
        "diamond: a join read by a count and by a join": (
            lambda a, b: (j := a.dd_join(b, on=KEY)).dd_count(KEY).withColumnRenamed("count", "n")
            .dd_join(j.select("case", "k", (F.col("x") * 10 + F.col("y")).alias("z"), "time", "diff"), on=KEY)
            .dd_max(KEY, "z"),
            lambda a, b, lat: ref_max(ref_join(
                rename(ref_count((j := ref_join(a, b, KEY, lat)), KEY, lat), "count", "n"),
                Coll(("case", "k", "z"), [((c, k, x * 10 + y), t, r) for (c, k, x, y), t, r in j.updates]), KEY, lat),
                KEY, "z", lat),
            4,
        ),
    }


PIPELINES = _pipelines()


@pytest.fixture
def path(spark: Any) -> Iterator[Callable[[str], None]]:
    """Sets ``spark_differential.pipeline.localRows`` for the test (restored after)."""

    def choose(value: str) -> None:
        spark.conf.set(settings.PIPELINE_ROWS, value)

    yield choose
    spark.conf.unset(settings.PIPELINE_ROWS)


@pytest.mark.connect
@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("lat_name", list(LATTICES))
def test_pipelines_give_the_oracle_rows_fused_and_operator_by_operator(spark, path, caplog, name, lat_name):
    lat = LATTICES[lat_name]
    pipeline, reference, operators = PIPELINES[name]
    a = cases(11, 10, ["k", "x"], 7, lat)
    b = cases(12, 10, ["k", "y"], 7, lat)
    want = reference(a, b, lat)
    for setting, fuses in (("100000", True), ("0", False)):
        path(setting)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_differential.fused"):
            out = pipeline(to_df(spark, a, lat), to_df(spark, b, lat))
        lines = [r.getMessage() for r in caplog.records if FUSED in r.getMessage()]
        if fuses:  # every operator after the first joins the pipeline; the last runs all of them
            assert len(lines) == operators - 1, lines
            assert f"a pipeline of {operators} operators" in lines[-1], lines
        else:
            assert lines == []
        assert_matches(out, want)


@pytest.mark.connect
def test_a_self_union_of_an_operator_output_gives_the_oracle_rows(spark, path):
    """On a classic session the analyser renumbers one side of the union (it is then not
    the operator's output, and the pipeline is not fused); on Spark Connect both sides are."""
    lat = Total()
    ca, cb = cases(7, 8, ["k", "x"], 6, lat), cases(8, 8, ["k", "y"], 6, lat)
    j = ref_join(ca, cb, KEY, lat)
    doubled = Coll(j.cols, j.updates + [((c, k, x, x), t, r) for (c, k, x, _), t, r in j.updates])
    for setting in ("100000", "0"):
        path(setting)
        joined = to_df(spark, ca, lat).dd_join(to_df(spark, cb, lat), on=KEY)
        out = joined.unionByName(joined.select("case", "k", "x", F.col("x").alias("y"), "time", "diff")).dd_count(KEY)
        assert_matches(out, ref_count(doubled, KEY, lat))


def test_a_fused_pipeline_runs_one_job_of_one_task(spark, path):
    """(Classic sessions only: Spark jobs are counted by the status tracker.)"""
    from spark_differential.core.jobs import count_jobs

    lat = Total()
    a, b = to_df(spark, cases(3, 4, ["k", "x"], 5, lat), lat), to_df(spark, cases(4, 4, ["k", "y"], 5, lat), lat)
    pipeline = PIPELINES["join, count, join, min"][0]
    counts = {}
    for setting in ("100000", "0"):
        path(setting)
        with count_jobs(spark) as call:
            out = pipeline(a, b)
        with count_jobs(spark) as action:
            got = sorted(tuple(r) for r in out.collect())
        counts[setting] = (call.jobs, action.jobs, action.tasks, got)
    assert counts["100000"][:3] == (0, 1, 1)
    assert counts["0"][0] == 0 and counts["0"][1] >= 4  # a shuffle and a kernel stage per operator
    assert counts["100000"][3] == counts["0"][3]


@pytest.mark.connect
def test_what_is_not_fused_runs_operator_by_operator(spark, path, caplog):
    lat = Total()
    ca, cb = cases(5, 6, ["k", "x"], 6, lat), cases(6, 6, ["k", "y"], 6, lat)
    a, b = to_df(spark, ca, lat), to_df(spark, cb, lat)
    joined = ref_join(ca, cb, KEY, lat)
    runs: dict[str, tuple[Callable[[], Any], Coll]] = {
        # a Python UDF between the operators: the translator does not cover it
        "udf": (lambda: a.dd_join(b, on=KEY).withColumn("y", F.udf(lambda v: v, "long")("y")).dd_count(KEY),
                ref_count(joined, KEY, lat)),
        # an aggregate between the operators: not a linear step
        "aggregate": (lambda: a.dd_join(b, on=KEY).groupBy("case", "k", "time").agg(F.sum("diff").alias("diff"))
                      .dd_count(KEY), ref_count(project(joined, KEY), KEY, lat)),
    }
    for name, (run, want) in runs.items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="spark_differential.fused"):
            out = run()
        assert not [r for r in caplog.records if FUSED in r.getMessage()], name
        assert any("not fused" in r.getMessage() for r in caplog.records), name
        assert_matches(out, want)
    # sources larger than the setting allows
    path("3")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="spark_differential.fused"):
        out = a.dd_join(b, on=KEY).dd_count(KEY)
    assert any("more than 3 rows" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if FUSED in r.getMessage()]
    assert_matches(out, ref_count(joined, KEY, lat))


@pytest.mark.connect
def test_the_setting_is_checked(spark, path):
    a = spark.createDataFrame([(1, 0, 1)], "k long, time long, diff long")
    path("lots")
    first = a.dd_distinct()
    with pytest.raises(ConfigurationError, match="localRows"):
        first.dd_count("k")


@pytest.mark.connect
def test_a_null_time_fails_a_fused_pipeline_as_it_fails_the_operators(spark, path):
    a = spark.createDataFrame([(1, None, 1), (2, 1, 1)], "k long, time long, diff long")
    b = spark.createDataFrame([(1, 0, 1)], "k long, time long, diff long")
    messages = []
    for setting in ("100000", "0"):
        path(setting)
        out = a.dd_join(b, on="k").dd_count("k")
        with pytest.raises(Exception, match="NullValueError") as err:
            out.collect()
        messages.append(re.search(r"NullValueError: [^.]*\.", str(err.value)).group(0))
    assert messages[0] == messages[1] and "null time" in messages[0], messages


def test_sources_known_small_without_a_job(spark):
    import pandas as pd

    listed = spark.createDataFrame([(i, 0, 1) for i in range(10)], "k long, time long, diff long")
    bound = sources.held_rows(listed)
    assert bound is not None and 10 <= bound <= 100_000
    assert sources.held_rows(listed.where("k > 3").select("k", "time", "diff").unionByName(listed)) == 2 * bound
    frame = spark.createDataFrame(pd.DataFrame({"k": range(7), "time": 0, "diff": 1}))
    assert sources.held_rows(frame) == 7
    assert sources.held_rows(listed.groupBy("k").count()) is None
    assert sources.held_rows(listed.dd_distinct()) is None
    assert sources.held_rows(spark.range(5)) is None


@pytest.mark.connect
def test_date_times_and_string_keys_give_the_same_rows_on_both_paths(spark, path, caplog):
    """Times that are not integers (dates) and string data: the fused path decodes them as
    the operators do."""
    import datetime as dt

    day = dt.date(2024, 1, 1)
    a = spark.createDataFrame(
        [("a", 1, day + dt.timedelta(days=i % 3), 1 if i % 4 else -1) for i in range(12)] + [("b", 2, day, 1)],
        "k string, v long, time date, diff long")
    b = spark.createDataFrame([("a", "x", day, 1), ("b", "y", day + dt.timedelta(days=1), 1), ("a", "z", day, 1)],
                              "k string, w string, time date, diff long")
    got = []
    for setting in ("100000", "0"):
        path(setting)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_differential.fused"):
            out = a.dd_join(b, on="k").dd_count(["k", "w"]).dd_max("k", "count")
        assert bool([r for r in caplog.records if FUSED in r.getMessage()]) == (setting != "0")
        assert out.schema["time"].dataType.simpleString() == "date"
        got.append(sorted(tuple(r) for r in out.collect()))
    assert got[0] == got[1] and got[0]


@pytest.mark.connect
def test_a_dollar_in_a_string_literal_is_not_read_as_a_table_name(spark, path, caplog):
    """The in-task SQL names its tables ``$name``: a literal with a ``$`` (even one naming a
    step, ``$p0``) keeps the pipeline operator by operator, with the right rows."""
    a = spark.createDataFrame([("a", "$p0", 0, 1), ("a", "x", 0, 1), ("b", "$5", 1, 1)],
                              "k string, v string, time long, diff long")
    b = spark.createDataFrame([("a", 0, 1), ("b", 0, 1)], "k string, time long, diff long")
    got = []
    for setting in ("100000", "0"):
        path(setting)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_differential.fused"):
            out = a.dd_semijoin(b, on="k").where((F.col("v") != "$p0") & (F.col("v") != "$5")).dd_count("k")
        assert not [r for r in caplog.records if FUSED in r.getMessage()]
        got.append(sorted(tuple(r) for r in out.collect()))
    assert got[0] == got[1] == [("a", 1, 0, 1)]
