"""Change logs in (from_change_feed, from_cdc, from_intervals) and interval histories out
(dd_to_intervals), checked against hand-written pure-Python references.

Random inputs are many small cases told apart by a leading ``case`` column, so one
Spark job checks them all.  The references below do not use Spark or the library:
they replay the change rows one by one (``+1``/``-1`` per row, then
``oracle.consolidate``), or simulate a table evolving through versions and check
that the collection accumulates at every version to the simulated table.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from typing import Any

import pytest
from helpers import rows_of
from oracle import Total, acc, assert_updates_equal, consolidate, plain, sort_key
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from spark_support import no_spark_job

import spark_differential as sd
from spark_differential import errors
from spark_differential.errors import (
    ChangeDataError,
    DiffTypeError,
    MissingColumnError,
    NegativeMultiplicityError,
    ReservedNameError,
    SchemaMismatchError,
    SparkDifferentialError,
    TimeTypeError,
    TimeTypeMismatchError,
)
from spark_differential.io import changes

TOTAL = Total()
DATA = "case long, x long, y string"


def job_error(df: DataFrame) -> SparkDifferentialError:
    """The library error that running ``df`` fails with (as the driver re-raises it)."""
    with pytest.raises(Exception) as e:
        df.collect()
    err = errors.from_job_failure(e.value)
    assert err is not None, f"no library error in: {str(e.value)[:2000]}"
    return err


def value(rng: random.Random) -> tuple[int | None, str | None]:
    return (rng.choice([None, 0, 1, 2]), rng.choice([None, "a", "b"]))


def test_exported_and_registered(spark) -> None:
    assert sd.from_change_feed is changes.from_change_feed
    assert sd.from_cdc is changes.from_cdc
    assert sd.from_intervals is changes.from_intervals
    assert "dd_to_intervals" in sd.METHODS
    df = spark.createDataFrame([("a", 0, 1)], "x string, time long, diff long")
    assert df.dd_to_intervals.__wrapped__ is changes.dd_to_intervals


# ---------------------------------------------------------------------------
# from_change_feed
# ---------------------------------------------------------------------------

KINDS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


@pytest.mark.connect
def test_change_feed_random_rows_match_reference(spark) -> None:
    """Arbitrary feed rows (not necessarily a consistent table): each row is one +-1 update."""
    rng = random.Random(7)
    rows, ref = [], []
    for case in range(40):
        for _ in range(rng.randint(0, 12)):
            d = (case, *value(rng))
            kind = rng.choice(list(KINDS))
            v = rng.randint(0, 5)
            rows.append((*d, rng.choice([kind, kind.upper()]), v, dt.datetime(2024, 1, 1) + dt.timedelta(days=v)))
            ref.append((d, v, KINDS[kind]))
    feed = spark.createDataFrame(
        rows, f"{DATA}, _change_type string, _commit_version long, _commit_timestamp timestamp"
    ).coalesce(1)
    out = sd.from_change_feed(feed)
    assert out.columns == ["case", "x", "y", "time", "diff"]
    assert_updates_equal(rows_of(out), ref)
    by_ts = sd.from_change_feed(feed, time="_commit_timestamp")
    assert isinstance(by_ts.schema["time"].dataType, T.TimestampType)
    expected_ts = [(d, dt.datetime(2024, 1, 1) + dt.timedelta(days=v), r) for d, v, r in ref]
    assert_updates_equal(rows_of(by_ts), expected_ts)


def _simulate_table(rng: random.Random, versions: int) -> tuple[list[tuple[Any, ...]], dict[int, Counter]]:
    """A keyed table changed by random inserts, updates and deletes; its Delta-style feed and snapshots."""
    table: dict[int, str] = {}
    feed, snaps = [], {}
    for v in range(1, versions + 1):
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(6)
            if k not in table:
                table[k] = rng.choice("pqr")
                feed.append((k, table[k], "insert", v))
            elif rng.random() < 0.5:
                new = rng.choice("pqr")
                feed += [(k, table[k], "update_preimage", v), (k, new, "update_postimage", v)]
                table[k] = new
            else:
                feed.append((k, table.pop(k), "delete", v))
        snaps[v] = Counter((k, s) for k, s in table.items())
    return feed, snaps


def test_change_feed_accumulates_to_every_version_of_the_table(spark) -> None:
    rng = random.Random(11)
    feed, snaps = _simulate_table(rng, 12)
    df = spark.createDataFrame(
        [(k, s, c, v, dt.datetime(2024, 1, v)) for k, s, c, v in feed],
        "id long, state string, _change_type string, _commit_version long, _commit_timestamp timestamp",
    )
    updates = rows_of(sd.from_change_feed(df))
    for v, snap in snaps.items():
        assert acc(updates, v, TOTAL) == +snap, v


def test_iceberg_changelog_view(spark) -> None:
    """Iceberg's shape: upper-case change types, ``_change_ordinal`` and ``_commit_snapshot_id``."""
    rows = [
        (1, "a", "INSERT", 0, 900), (2, "b", "INSERT", 0, 900),
        (1, "a", "UPDATE_BEFORE", 1, 901), (1, "c", "UPDATE_AFTER", 1, 901),
        (2, "b", "DELETE", 1, 901), (2, "b", "INSERT", 1, 901),  # a carry-over: cancels
        (2, "b", "DELETE", 2, 902),
    ]
    df = spark.createDataFrame(rows, "id int, v string, _change_type string, _change_ordinal int, _commit_snapshot_id long")
    out = sd.from_change_feed(df, time="_change_ordinal")
    assert out.columns == ["id", "v", "time", "diff"]
    assert_updates_equal(
        rows_of(out), [((1, "a"), 0, 1), ((2, "b"), 0, 1), ((1, "a"), 1, -1), ((1, "c"), 1, 1), ((2, "b"), 2, -1)]
    )


def test_change_feed_errors(spark) -> None:
    ok = "k long, _change_type string, _commit_version long"
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError, match="readChangeFeed"):
            sd.from_change_feed(spark.createDataFrame([], "k long, _commit_version long"))
        with pytest.raises(SchemaMismatchError, match="must be a string"):
            sd.from_change_feed(spark.createDataFrame([], "k long, _change_type int, _commit_version long"))
        with pytest.raises(MissingColumnError, match="_commit_timestamp"):
            sd.from_change_feed(spark.createDataFrame([], ok), time="_commit_timestamp")
        with pytest.raises(TimeTypeError):
            sd.from_change_feed(spark.createDataFrame([], "k long, _change_type string, v string"), time="v")
        with pytest.raises(ReservedNameError, match="withColumnRenamed"):
            sd.from_change_feed(spark.createDataFrame([], f"time long, {ok}"))
    bad = spark.createDataFrame([(1, "upsert", 1)], ok)
    err = job_error(sd.from_change_feed(bad))
    assert isinstance(err, ChangeDataError) and "upsert" in str(err) and "update_postimage" in str(err)
    null_kind = spark.createDataFrame([(1, None, 1)], ok)
    assert isinstance(job_error(sd.from_change_feed(null_kind)), ChangeDataError)
    null_time = spark.createDataFrame([(1, "insert", None)], ok)
    assert isinstance(job_error(sd.from_change_feed(null_time)), errors.NullValueError)


# ---------------------------------------------------------------------------
# from_cdc
# ---------------------------------------------------------------------------

ROW = "struct<case: long, x: long, y: string>"
ENVELOPE = f"before {ROW}, after {ROW}, op string, ts_ms long, source struct<db: string, ts_ms: long>"


@pytest.mark.connect
def test_cdc_random_envelopes_match_reference(spark) -> None:
    rng = random.Random(3)
    rows, ref = [], []
    for case in range(40):
        for _ in range(rng.randint(0, 10)):
            op, t = rng.choice("crud"), rng.randint(0, 6)
            b = (case, *value(rng)) if op in "ud" else None
            a = (case, *value(rng)) if op in "cru" else None
            rows.append((b, a, op, t, ("db", 100 - t)))
            if b is not None:
                ref.append((b, t, -1))
            if a is not None:
                ref.append((a, t, 1))
    df = spark.createDataFrame(rows, ENVELOPE).coalesce(1)
    out = sd.from_cdc(df)
    assert out.columns == ["case", "x", "y", "time", "diff"]
    assert_updates_equal(rows_of(out), ref)
    by_source = sd.from_cdc(df, time="source.ts_ms")
    assert_updates_equal(rows_of(by_source), [(d, 100 - t, r) for d, t, r in ref])


def test_cdc_accumulates_to_the_table_at_every_time(spark) -> None:
    """A snapshot (``r``) then creates, updates and deletes, renamed envelope columns."""
    rng = random.Random(5)
    table = {k: rng.choice("pqr") for k in range(4)}
    events = [(None, (k, s), "r", 0) for k, s in table.items()]
    snaps = {0: Counter(table.items())}
    for t in range(1, 15):
        k = rng.randrange(6)
        if k not in table:
            table[k] = rng.choice("pqr")
            events.append((None, (k, table[k]), "c", t))
        elif rng.random() < 0.6:
            new = rng.choice("pqr")
            events.append(((k, table[k]), (k, new), "u", t))
            table[k] = new
        else:
            events.append(((k, table.pop(k)), None, "d", t))
        snaps[t] = Counter(table.items())
    row = "struct<id: long, state: string>"
    df = spark.createDataFrame(events, f"old {row}, new {row}, kind string, at long")
    out = sd.from_cdc(df, time="at", op="kind", before="old", after="new")
    assert out.columns == ["id", "state", "time", "diff"]
    updates = rows_of(out)
    for t, snap in snaps.items():
        assert acc(updates, t, TOTAL) == +snap, t


def test_cdc_errors(spark) -> None:
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError, match="payload"):
            sd.from_cdc(spark.createDataFrame([], f"payload struct<before: {ROW}>"))
        with pytest.raises(SchemaMismatchError, match="same fields"):
            sd.from_cdc(spark.createDataFrame([], f"before {ROW}, after struct<case: long>, op string, ts_ms long"))
        with pytest.raises(SchemaMismatchError, match="struct"):
            sd.from_cdc(spark.createDataFrame([], "before string, after string, op string, ts_ms long"))
        with pytest.raises(SchemaMismatchError, match="string"):
            sd.from_cdc(spark.createDataFrame([], f"before {ROW}, after {ROW}, op long, ts_ms long"))
        with pytest.raises(MissingColumnError, match="source.lsn"):
            sd.from_cdc(spark.createDataFrame([], ENVELOPE), time="source.lsn")
        with pytest.raises(ReservedNameError):
            row = "struct<time: long>"
            sd.from_cdc(spark.createDataFrame([], f"before {row}, after {row}, op string, ts_ms long"))
    schema = f"before {ROW}, after {ROW}, op string, ts_ms long"
    for bad, needle in [
        ((None, (1, 1, "a"), "u", 1), "REPLICA IDENTITY FULL"),
        ((None, None, "d", 1), "null `before`"),
        (((1, 1, "a"), None, "c", 1), "null `after`"),
        ((None, None, "t", 1), "unknown `op` value 't'"),
        ((None, None, None, 1), "unknown `op` value 'null'"),
    ]:
        err = job_error(sd.from_cdc(spark.createDataFrame([bad], schema)))
        assert isinstance(err, ChangeDataError) and needle in str(err), (bad, str(err))


# ---------------------------------------------------------------------------
# from_intervals and dd_to_intervals
# ---------------------------------------------------------------------------


def ref_from_intervals(rows: list[tuple[tuple, Any, Any, int]]) -> list[tuple[tuple, Any, int]]:
    out = []
    for d, start, end, m in rows:
        out.append((d, start, m))
        if end is not None:
            out.append((d, end, -m))
    return consolidate(out)


def ref_to_intervals(updates: list[tuple[tuple, Any, int]]) -> list[tuple[tuple, Any, Any, int]]:
    """Per data row: the maximal intervals of constant positive multiplicity."""
    per: dict[tuple, dict[Any, int]] = {}
    for d, t, r in updates:
        per.setdefault(d, {})
        per[d][t] = per[d].get(t, 0) + r
    out = []
    for d, steps in per.items():
        times = sorted(t for t, r in steps.items() if r != 0)
        m = 0
        for i, t in enumerate(times):
            m += steps[t]
            assert m >= 0
            if m > 0:
                out.append((d, t, times[i + 1] if i + 1 < len(times) else None, m))
    return sorted(out, key=sort_key)


def random_intervals(rng: random.Random, cases: int, time_of: Any = lambda i: i) -> list[tuple[tuple, Any, Any, int]]:
    rows = []
    for case in range(cases):
        for _ in range(rng.randint(0, 6)):
            start = rng.randint(0, 6)
            end = rng.choice([None, start, start + rng.randint(1, 4)])
            rows.append(((case, *value(rng)), time_of(start), None if end is None else time_of(end), rng.randint(0, 3)))
    return rows


def random_nonnegative(rng: random.Random, cases: int) -> list[tuple[tuple, int, int]]:
    """Unconsolidated updates whose accumulation never goes negative (per data row, over time)."""
    ups = []
    for case in range(cases):
        for _ in range(rng.randint(0, 3)):
            d = (case, *value(rng))
            m = 0
            for t in sorted(rng.sample(range(10), rng.randint(1, 5))):
                for _ in range(rng.randint(1, 2)):  # two updates at one time: not consolidated
                    r = rng.randint(-m, 3)
                    m += r
                    ups.append((d, t, r))
    return ups


def intervals_df(spark: Any, rows: list[tuple[tuple, Any, Any, int]], ttype: str = "long") -> DataFrame:
    return spark.createDataFrame(
        [(*d, s, e, m) for d, s, e, m in rows], f"{DATA}, valid_from {ttype}, valid_to {ttype}, n int"
    ).coalesce(1)


def interval_rows(df: DataFrame) -> list[tuple[tuple, Any, Any, int]]:
    cols = [c for c in df.columns if c not in ("valid_from", "valid_to", "multiplicity")]
    return sorted(
        ((tuple(plain(r[c]) for c in cols), r["valid_from"], r["valid_to"], r["multiplicity"]) for r in df.collect()),
        key=sort_key,
    )


@pytest.mark.connect
def test_from_intervals_random_matches_reference(spark) -> None:
    rng = random.Random(1)
    rows = random_intervals(rng, 40)
    df = intervals_df(spark, rows)
    out = sd.from_intervals(df, multiplicity="n")
    assert out.columns == ["case", "x", "y", "time", "diff"]
    assert_updates_equal(rows_of(out), ref_from_intervals(rows))
    ones = sd.from_intervals(df.drop("n"))
    assert_updates_equal(rows_of(ones), ref_from_intervals([(d, s, e, 1) for d, s, e, _ in rows]))


def test_from_intervals_dates(spark) -> None:
    day = dt.date(2024, 3, 1)
    rows = random_intervals(random.Random(2), 10, lambda i: day + dt.timedelta(days=i))
    out = sd.from_intervals(intervals_df(spark, rows, "date"), multiplicity="n")
    assert isinstance(out.schema["time"].dataType, T.DateType)
    assert_updates_equal(rows_of(out), ref_from_intervals(rows))


@pytest.mark.connect
def test_to_intervals_random_matches_reference_and_round_trips(spark) -> None:
    rng = random.Random(9)
    ups = random_nonnegative(rng, 60)
    assert any(r < 0 for _, _, r in ups) and ups  # the inputs do retract
    coll = spark.createDataFrame([(*d, t, r) for d, t, r in ups], f"{DATA}, time long, diff long").coalesce(1)
    scd = coll.dd_to_intervals()
    assert scd.columns == ["case", "x", "y", "valid_from", "valid_to", "multiplicity"]
    assert scd.schema["multiplicity"].dataType == T.LongType()
    got = interval_rows(scd)
    assert got == ref_to_intervals(ups)
    assert all(m > 0 for *_, m in got)
    back = sd.from_intervals(scd, multiplicity="multiplicity")
    assert_updates_equal(rows_of(back), ups)  # == the input, consolidated


def test_intervals_round_trip_the_other_way(spark) -> None:
    """SCD2 -> collection -> SCD2 gives the canonical intervals (adjacent equal pieces merge)."""
    rng = random.Random(4)
    rows = random_intervals(rng, 40)
    scd = sd.from_intervals(intervals_df(spark, rows), multiplicity="n").dd_to_intervals(
        valid_from="start", valid_to="end", multiplicity="copies"
    )
    assert scd.columns == ["case", "x", "y", "start", "end", "copies"]
    scd = scd.withColumnsRenamed({"start": "valid_from", "end": "valid_to", "copies": "multiplicity"})
    assert interval_rows(scd) == ref_to_intervals(ref_from_intervals(rows))


def test_to_intervals_timestamps_and_no_data_columns(spark) -> None:
    t0 = dt.datetime(2024, 1, 1, 12)
    ts = [t0 + dt.timedelta(hours=h) for h in range(4)]
    df = spark.createDataFrame([(ts[0], 2), (ts[1], -1), (ts[3], -1)], "time timestamp, diff long")
    got = [tuple(r) for r in df.dd_to_intervals().orderBy("valid_from").collect()]
    assert got == [(ts[0], ts[1], 2), (ts[1], ts[3], 1)]
    assert_updates_equal(
        rows_of(sd.from_intervals(df.dd_to_intervals(), multiplicity="multiplicity")),
        [((), ts[0], 2), ((), ts[1], -1), ((), ts[3], -1)],
    )


def test_interval_errors(spark) -> None:
    scd = "k long, valid_from long, valid_to long"
    with no_spark_job(spark):
        with pytest.raises(MissingColumnError, match="valid_to"):
            sd.from_intervals(spark.createDataFrame([], "k long, valid_from long"))
        with pytest.raises(TimeTypeMismatchError, match="cast"):
            sd.from_intervals(spark.createDataFrame([], "k long, valid_from long, valid_to date"))
        with pytest.raises(TimeTypeError, match="totally ordered"):
            sd.from_intervals(
                spark.createDataFrame([], "k long, valid_from struct<a: long>, valid_to struct<a: long>")
            )
        with pytest.raises(DiffTypeError, match="integral"):
            sd.from_intervals(spark.createDataFrame([], f"{scd}, n double"), multiplicity="n")
        with pytest.raises(MissingColumnError, match="`n`"):
            sd.from_intervals(spark.createDataFrame([], scd), multiplicity="n")
        with pytest.raises(ReservedNameError):
            sd.from_intervals(spark.createDataFrame([], f"{scd}, diff long"))
        coll = spark.createDataFrame([], "k long, valid_to long, time long, diff long")
        with pytest.raises(SchemaMismatchError, match="clash"):
            coll.dd_to_intervals()
        with pytest.raises(SchemaMismatchError, match="different"):
            coll.dd_to_intervals(valid_from="a", valid_to="a")
        product = spark.createDataFrame([], "k long, time struct<a: long, b: long>, diff long")
        with pytest.raises(TimeTypeError, match="totally ordered"):
            product.dd_to_intervals()
        with pytest.raises(MissingColumnError):
            spark.createDataFrame([], "k long, time long").dd_to_intervals()
    backwards = spark.createDataFrame([(1, 5, 3)], scd)
    err = job_error(sd.from_intervals(backwards))
    assert isinstance(err, ChangeDataError) and "before it starts" in str(err)
    negative = spark.createDataFrame([("a", 1, 1), ("a", 2, -2), ("b", 1, 1)], "x string, time long, diff long")
    err = job_error(negative.dd_to_intervals())
    assert isinstance(err, NegativeMultiplicityError)
    assert '{"x":"a"}' in str(err) and "multiplicity -1 from time 2" in str(err)
