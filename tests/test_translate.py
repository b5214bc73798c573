"""The in-task loop's translator (``spark_differential.translate``): reading the analysed
plan from one ``toJSON()`` call gives exactly the relations that walking the plan over
py4j node by node gives (the reference), in far fewer round trips.

Each case is a linear step over a loop placeholder; both readers must produce the same
DuckDB SQL, columns, picks and Arrow program, or both refuse with the same reason."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential._jobs import count_round_trips
from spark_differential.translate import Translator, Untranslatable, placeholder

SCHEMA = T.StructType(
    [
        T.StructField("x", T.LongType()),
        T.StructField("n", T.IntegerType()),
        T.StructField("case", T.StringType()),
        T.StructField("b", T.BooleanType()),
        T.StructField("f", T.DoubleType()),
        T.StructField("time", T.LongType()),
        T.StructField("diff", T.LongType()),
    ]
)
KEEP = ["time", "diff"]

CASES: dict[str, Any] = {
    "pass through": lambda d: d,
    "rename": lambda d: d.select(F.col("x").alias("y"), "case", *KEEP),
    "arithmetic": lambda d: d.select(((F.col("x") + 1) * 2 - F.col("n") % 3).alias("x"), (-F.col("n")).alias("m"), *KEEP),
    "long literal": lambda d: d.select((F.col("x") + F.lit(5).cast("long")).alias("x"), F.lit(2**40).alias("big"), *KEEP),
    "division": lambda d: d.select((F.col("x") / 2).alias("q"), *KEEP),
    "comparisons": lambda d: d.where((F.col("x") > 1) & (F.col("n") <= 3) | (F.col("x") == F.col("n")) | F.col("b")),
    "null safe": lambda d: d.where(F.col("x").eqNullSafe(F.col("n")) & ~F.col("case").isNull()),
    "not null filter": lambda d: d.where(F.col("x").isNotNull()).select("x", *KEEP),
    "case when": lambda d: d.select(
        F.when(F.col("x") < 5, F.col("x") + F.lit(1).cast("int")).when(F.col("n") > 2, 7).otherwise(F.col("x")).alias("x"),
        F.when(F.col("b"), F.lit("yes")).alias("w"),
        *KEEP,
    ),
    "if": lambda d: d.select(F.expr("if(x > 1, 'a', null)").alias("i"), *KEEP),
    "functions": lambda d: d.select(
        F.coalesce(F.col("case"), F.lit("z")).alias("s"),
        F.least(F.col("x") + 1, F.lit(4)).cast("long").alias("l"),
        F.greatest("x", "n").alias("g"),
        F.abs("n").alias("a"),
        *KEEP,
    ),
    "casts": lambda d: d.select(
        F.col("case").cast("int").alias("c"), F.col("x").cast("string").alias("s"), F.col("n").cast("double").alias("d"),
        F.col("x").cast("decimal(10,2)").alias("dec"), F.expr("try_cast(`case` as bigint)").alias("t"), *KEEP,
    ),
    "strings (JVM fallback)": lambda d: d.select(
        F.concat(F.col("case"), F.lit("")).alias("s"), F.lower("case").alias("l"), F.length("case").alias("n"),
        F.lit("it's").alias("q"), *KEEP,
    ),
    "float literal (JVM fallback)": lambda d: d.select((F.col("f") * 2.5).alias("f"), F.lit(1.5).alias("g"), *KEEP),
    "in and between": lambda d: d.where(F.col("n").isin(1, 2) | F.col("x").between(3, 9)),
    "keyword column": lambda d: d.select(F.col("case").alias("select"), (F.col("x") + 1).alias("from"), *KEEP),
    "self union": lambda d: d.unionByName(d),
    "self join": lambda d: d.join(d.select("x"), "x"),
    "union": lambda d: d.unionByName(d.select("x", "n", "case", "b", "f", "time", (F.col("diff") * -1).alias("diff"))),
    "alias then select": lambda d: d.alias("q").select("q.x", "q.time", "q.diff"),
    "untranslatable function": lambda d: d.select(F.pmod("x", F.lit(3)).alias("x"), *KEEP),
    "time computed": lambda d: d.select((F.col("time") + 1).alias("t2"), *KEEP),
    "time renamed": lambda d: d.select("x", F.col("time").alias("t"), "diff"),
    "aggregate": lambda d: d.groupBy("x", "time").agg(F.sum("diff").alias("diff")),
}


def translate(spark: Any, build: Any, use_json: bool, columns: list[str] | None = None) -> tuple[Any, int]:
    tables = {"v": ("v", [f.name for f in SCHEMA.fields])}
    tr = Translator(spark._jvm, tables, 1, ansi=True, use_json=use_json)
    leaf = placeholder(spark, SCHEMA, "v")
    tr.known(leaf, "v")
    df = build(leaf)
    with count_round_trips() as trips:
        try:
            rel: Any = tr.relation(df, columns)
        except Untranslatable as e:
            rel = ("untranslatable", str(e))
    return rel, trips.count


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_reader_matches_the_node_by_node_reader(spark, name):
    build = CASES[name]
    by_json, json_trips = translate(spark, build, True)
    by_nodes, node_trips = translate(spark, build, False)
    assert by_json == by_nodes
    assert json_trips <= node_trips


def test_json_reader_reads_a_linear_step_in_a_few_round_trips(spark):
    """BFS's step (rename, +1, pass time and diff through) costs the plan's three calls."""
    def step(d: Any) -> Any:
        return d.select(F.col("n").alias("x"), (F.col("x") + 1).alias("dist"), "time", "diff")

    rel, trips = translate(spark, step, True)
    assert rel.arrow is not None and trips <= 3, (rel, trips)
    _, node_trips = translate(spark, step, False)
    assert node_trips > 20


def test_picking_columns_matches_a_select(spark):
    """``relation(df, columns)`` computes what ``relation(df.select(columns))`` does."""
    build = CASES["long literal"]
    picked, picked_trips = translate(spark, build, True, ["big", "time", "diff", "x"])
    selected, _ = translate(spark, lambda d: build(d).select("big", "time", "diff", "x"), True)
    assert picked.columns == selected.columns
    assert picked.arrow is not None and selected.arrow is not None
    assert picked_trips <= 3
