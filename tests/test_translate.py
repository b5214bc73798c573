"""The in-task loop's translator (``spark_differential.intask.translate``): reading the analysed
plan from one ``toJSON()`` call gives exactly the relations that walking the plan over
py4j node by node gives (the reference), in far fewer round trips.

Each case is a linear step over a loop placeholder; both readers must produce the same
DuckDB SQL, columns, picks and Arrow program, or both refuse with the same reason."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_differential.core.jobs import count_round_trips
from spark_differential.intask.relation import Untranslatable
from spark_differential.intask.translate import Translator, placeholder

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
    # Spark (ANSI) raises DIVIDE_BY_ZERO where DuckDB returns NULL: refused unless the divisor is a nonzero literal
    "division by a column": lambda d: d.select((F.col("x") / F.col("n")).alias("q"), (F.col("x") % F.col("n")).alias("r"),
                                               *KEEP),
    "division by zero": lambda d: d.select((F.col("x") % 0).alias("r"), *KEEP),
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
    # the in-task SQL names its tables $name (string.Template): '$5' made the task fail, '$v' read as the table
    "dollar literal": lambda d: d.where((F.col("case") != "$v") & (F.col("case") != "$5")),
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


# ---------------------------------------------------------------------------------
# Relations against Spark itself, on both session kinds: the classic reader reads the
# analysed plan, the Connect reader (spark_differential.intask.translate_connect) the client's
# plan.  Each translated case's DuckDB query (and Arrow program) over sample rows must
# give Spark's own rows for the same DataFrame built on those rows.

ROWS = [
    (1, 2, "a", True, 0.5, 0, 1),
    (5, 3, "case", False, -1.0, 1, 2),
    (-7, -3, "it", None, 2.25, 2, -1),
    (None, 1, None, True, None, 3, 1),
    (4, None, "b", None, 0.0, 4, 3),
    (9, 9, "z", False, 1.5, 5, 1),
]
# cases both readers must translate (the others may be refused; refused ones must stay refused below)
TRANSLATED = {
    "pass through", "rename", "long literal", "comparisons", "null safe", "not null filter",
    "case when", "functions", "in and between", "keyword column", "self union", "union", "alias then select",
}
REFUSED = {"self join", "untranslatable function", "time computed", "time renamed", "aggregate", "division by a column",
           "division by zero", "dollar literal"}
CONNECT_CASES: dict[str, Any] = {
    **CASES,
    "with column": lambda d: d.withColumn("x", F.col("x") * 3).withColumn("m", F.col("n") - F.col("x")),
    "renamed and dropped": lambda d: d.withColumnRenamed("x", "y").drop("f", "b"),
    "df column": lambda d: d.where(d["x"] > 0).select(d["x"], (d.n + 1).alias("n1"), *KEEP),
    "mixed widths": lambda d: d.select((F.col("n") + F.col("x")).alias("s"), F.greatest(F.col("n"), F.lit(0)).alias("g"),
                                       F.coalesce(F.col("n"), F.col("x")).alias("c"), *KEEP),
    "string compare": lambda d: d.where((F.col("case") >= F.lit("b")) | F.col("case").isin("a", "it")),
    "modulo": lambda d: d.select((F.col("x") % 4).alias("r"), (-F.col("x") % F.lit(3)).alias("q"), *KEEP),
    "case insensitive": lambda d: d.select(F.col("X").alias("x2"), "N", *KEEP),
}
REFUSED_ON_CONNECT = {
    **{k: None for k in REFUSED},
    "division": "/",  # Spark's `/` is decimal/double division with its own errors: not read on Connect
    "float literal (JVM fallback)": "double",
    "star": "*",
    "string number compare": "implicit cast",
    "sql division": "Div",
    "sql dollar literal": "'$'",
}
CONNECT_CASES["star"] = lambda d: d.select("*")
CONNECT_CASES["string number compare"] = lambda d: d.where(F.col("case") == F.col("x"))
CONNECT_CASES["sql text"] = lambda d: d.selectExpr(
    "x + 1 AS x", "CASE WHEN n BETWEEN -3 AND 2 THEN -n ELSE abs(n) END AS m", "CAST(n AS BIGINT) % 4 AS r", "`case`",
    "coalesce(`case`, 'none') AS c", *KEEP)
CONNECT_CASES["sql where"] = lambda d: d.where("x > 1 AND `case` IS NOT NULL OR n IN (1, -3) AND NOT b")
CONNECT_CASES["sql division"] = lambda d: d.selectExpr("x / 2 AS q", *KEEP)
CONNECT_CASES["sql dollar literal"] = lambda d: d.where("`case` <> '$v'")


def _relation(spark: Any, build: Any) -> Any:
    """``build`` over a loop placeholder, read by the session's own reader."""
    from spark_differential.core.session import is_connect

    tables = {"v": ("v", [f.name for f in SCHEMA.fields])}
    if is_connect(spark):
        from spark_differential.intask.translate_connect import ConnectTranslator

        tr: Any = ConnectTranslator(spark, tables, 1, ansi=True)
        leaf = spark.createDataFrame([], SCHEMA)
    else:
        tr = Translator(spark._jvm, tables, 1, ansi=True)
        leaf = placeholder(spark, SCHEMA, "v")
    tr.known(leaf, "v")
    try:
        return tr.relation(build(leaf))
    except Untranslatable as e:
        return e


@pytest.mark.connect
def test_relations_give_sparks_rows(spark):
    import pyarrow as pa

    from spark_differential.core.session import is_connect
    from spark_differential.engine.kernel_form import arrow_schema
    from spark_differential.intask.arrow_program import NoArrow, evaluate
    from spark_differential.kernels import duck

    connect = is_connect(spark)
    real = spark.createDataFrame(ROWS, SCHEMA)
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in ROWS], schema=arrow_schema(spark, SCHEMA))
    table = table.rename_columns([("_sd_t0" if n == "time" else n) for n in table.column_names])
    cases = CONNECT_CASES if connect else CASES
    translated = set()
    for name, build in sorted(cases.items()):
        rel = _relation(spark, build)
        if isinstance(rel, Untranslatable):
            assert name not in TRANSLATED, (name, str(rel))
            if connect and REFUSED_ON_CONNECT.get(name):
                assert REFUSED_ON_CONNECT[name] in str(rel), (name, str(rel))
            continue
        assert name not in REFUSED and not (connect and name in REFUSED_ON_CONNECT), name
        translated.add(name)
        expected_df = build(real)
        cols = ["_sd_t0" if c == "time" else c for c in expected_df.columns]
        assert list(rel.columns) == cols, (name, rel.columns)
        expected = sorted(map(tuple, expected_df.collect()), key=repr)
        got = duck.query(rel.sql, {"v": table})
        assert sorted(map(tuple, (r.values() for r in got.to_pylist())), key=repr) == expected, (name, rel.sql)
        if rel.arrow is not None:
            try:
                arrow = evaluate(rel.arrow, {"v": table})
            except NoArrow:
                continue
            assert sorted(map(tuple, (r.values() for r in arrow.to_pylist())), key=repr) == expected, name
    assert TRANSLATED <= translated
    if connect:
        assert {"arithmetic", "if", "sql text", "sql where", "with column", "renamed and dropped", "df column", "mixed widths", "string compare", "modulo",
                "case insensitive"} <= translated


@pytest.mark.connect
def test_connect_reader_checks_the_servers_schema(spark):
    """On Connect every translated DataFrame costs one schema RPC (its types checked), and a
    leaf the recorder does not know (a DataFrame from outside the loop) is refused."""
    from spark_differential.core.session import is_connect

    if not is_connect(spark):
        rel = _relation(spark, lambda d: spark.createDataFrame(ROWS, SCHEMA))
        assert isinstance(rel, Untranslatable)
        return
    from spark_differential.intask.translate_connect import ConnectTranslator

    tables = {"v": ("v", [f.name for f in SCHEMA.fields])}
    tr = ConnectTranslator(spark, tables, 1, ansi=True)
    leaf = spark.createDataFrame([], SCHEMA)
    tr.known(leaf, "v")
    tr.relation(leaf.select(F.col("n").alias("x"), (F.col("x") + 1).alias("dist"), *KEEP))
    assert tr.schema_checks == 1
    other = spark.createDataFrame([], SCHEMA)  # same schema, another plan: not a leaf
    with pytest.raises(Untranslatable, match="outside the loop"):
        tr.relation(other.select("x", *KEEP))
    with pytest.raises(Untranslatable, match="ansi"):
        ConnectTranslator(spark, tables, 1, ansi=False).relation(leaf)


@pytest.mark.connect
def test_loop_sources_held_and_counted_without_a_job(spark):
    """The in-task loop reads sources that only project local rows in their own task (one
    stage); a join is computed by a plan of its own.  On Connect the client's plan is read
    (local rows counted from its Arrow table), on a classic session Spark's statistics."""
    from spark_differential.core.session import is_connect
    from spark_differential.intask.sources import estimated_rows as _estimated_rows

    local = spark.createDataFrame(ROWS, SCHEMA)
    assert _estimated_rows([local.where(F.col("x") > 0).select("x", *KEEP)])[1] is True
    rows, held, known, bound = _estimated_rows([local, local.unionByName(local)])
    if is_connect(spark):  # the client's Arrow table
        assert held and known and rows == 18
    else:  # a Python list parallelised: no statistics, a bound from its batches
        assert held and not known and bound is not None and bound >= 18
    assert _estimated_rows([local.join(local.select("x"), "x")])[1] is False
