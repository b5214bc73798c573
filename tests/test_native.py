"""Arrow-native consolidation, key semi-joins and linear steps, against DuckDB's SQL.

``spark_differential.kernels.native`` and the Arrow form of relations in
``spark_differential.intask.translate`` replace DuckDB queries where Arrow gives exactly the
same rows.  Here both run on random tables (nulls, several key types, values near
the int64 limits) and must agree row for row, or both fail.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_differential.intask.arrow_program import NoArrow, arrow_expr, evaluate
from spark_differential.kernels import native

I64 = (-(1 << 63), (1 << 63) - 1)


def rows(table: pa.Table) -> Counter:
    def norm(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and v != v else v

    return Counter(tuple(norm(v) for v in r.values()) for r in table.to_pylist())


small = st.one_of(st.none(), st.integers(-3, 3))
texts = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
floats = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, float("nan")]))


@st.composite
def tables(draw: Any, big_diffs: bool = False) -> pa.Table:
    n = draw(st.integers(0, 25))
    kinds = draw(st.lists(st.sampled_from(["int", "str", "float", "bool"]), min_size=0, max_size=3))
    cols: dict[str, pa.Array] = {}
    for i, kind in enumerate(kinds):
        values = {
            "int": st.lists(small, min_size=n, max_size=n),
            "str": st.lists(texts, min_size=n, max_size=n),
            "float": st.lists(floats, min_size=n, max_size=n),
            "bool": st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n),
        }[kind]
        typ = {"int": pa.int64(), "str": pa.string(), "float": pa.float64(), "bool": pa.bool_()}[kind]
        cols[f"c{i}"] = pa.array(draw(values), typ)
    diff = st.integers(*I64) if big_diffs else st.integers(-2, 2)
    cols["_d"] = pa.array(draw(st.lists(diff, min_size=n, max_size=n)), pa.int64())
    return pa.table(cols)


_CON = duckdb.connect(config={"threads": 1})


def registered(**tables: pa.Table) -> Any:
    for name, table in tables.items():
        _CON.register(name, table)
    return _CON


def duck_consolidated(table: pa.Table, cols: list[str]) -> pa.Table:
    con = registered(X=table)
    select = "".join(f'"{c}", ' for c in cols)
    group = "GROUP BY ALL " if cols else ""
    return con.sql(f'SELECT {select}sum("_d")::BIGINT AS "_d" FROM X {group}HAVING sum("_d") <> 0').to_arrow_table()


@settings(max_examples=80, deadline=None)
@given(tables(), st.booleans())
def test_consolidated_equals_sql(table: pa.Table, big: bool) -> None:
    cols = [c for c in table.column_names if c != "_d"]
    got = native.consolidated(table, cols)
    assert got.column_names == [*cols, "_d"]
    assert rows(got) == rows(duck_consolidated(table, cols))


@settings(max_examples=40, deadline=None)
@given(tables(big_diffs=True))
def test_consolidated_near_overflow_matches_or_fails_like_sql(table: pa.Table) -> None:
    cols = [c for c in table.column_names if c != "_d"]
    try:
        want = rows(duck_consolidated(table, cols))
    except duckdb.Error:
        with pytest.raises(duckdb.Error):
            native.consolidated(table, cols)
        return
    assert rows(native.consolidated(table, cols)) == want


@settings(max_examples=80, deadline=None)
@given(tables(), tables())
def test_touching_equals_sql_semi_join(table: pa.Table, keys: pa.Table) -> None:
    shared = [c for c in table.column_names if c != "_d" and c in keys.column_names
              and table.schema.field(c).type == keys.schema.field(c).type]
    got = native.touching(table, keys, shared)
    if not shared:
        assert rows(got) == (rows(table) if keys.num_rows else Counter())
        return
    con = registered(X=table, K=keys)
    on = " AND ".join(f'x."{c}" IS NOT DISTINCT FROM n."{c}"' for c in shared)
    cols = ", ".join(f'"{c}"' for c in shared)
    want = con.sql(f"SELECT x.* FROM X AS x SEMI JOIN (SELECT DISTINCT {cols} FROM K) AS n ON {on}").to_arrow_table()
    assert got.column_names == table.column_names
    assert rows(got) == rows(want)


@settings(max_examples=80, deadline=None)
@given(tables(), tables())
def test_an_index_by_key_finds_exactly_the_touched_rows(table: pa.Table, keys: pa.Table) -> None:
    shared = [c for c in table.column_names if c != "_d" and c in keys.column_names
              and table.schema.field(c).type == keys.schema.field(c).type and native.indexable(table.schema, [c])]
    index = native.KeyIndex.build(table, shared)
    if not shared:
        assert index is None
        return
    assert index is not None
    got = index.touching(table, keys)
    assert got.column_names == table.column_names
    assert rows(got) == rows(native.touching(table, keys, shared))
    stored = native.KeyIndex.from_table(index.to_table(), shared)  # as kept in a file
    assert rows(stored.touching(table, keys)) == rows(got)


def test_an_index_by_key_does_not_take_floats_and_checks_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert native.KeyIndex.build(pa.table({"f": [0.0, -0.0]}), ["f"]) is None  # -0.0 = 0.0 but may hash apart
    monkeypatch.setattr(native, "_row_hashes", lambda table, cols: np.zeros(table.num_rows, dtype=np.uint64))
    t = pa.table({"k": [5, 6, 7, 6]})
    index = native.KeyIndex.build(t, ["k"])  # every row shares one hash: a lookup finds them all
    assert index is not None
    assert index.touching(t, pa.table({"k": [6]})).column("k").to_pylist() == [6, 6]  # the check keeps equal keys


EXPRESSIONS = [
    "a + CAST(1 AS BIGINT)", "a - b", "a * b", "-a", "a + 5000000000", "CAST(c AS BIGINT) + a",
    "CAST(a AS INT)", "a < b", "a = b", "NOT a IS NULL", "(a > b) AND (b >= CAST(0 AS BIGINT))",
    "(a <> b) OR NOT (a <= b)", "s = s", "a + 1.5", "s || s", "f + f",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_arrow_expressions_equal_duckdb(text: str, data: Any) -> None:
    n = data.draw(st.integers(0, 8))
    edge = st.sampled_from([I64[0], I64[1], 1 << 62, -(1 << 62), 3])
    ints = st.lists(st.one_of(st.none(), st.integers(-5, 5), edge), min_size=n, max_size=n)
    table = pa.table({
        "a": pa.array(data.draw(ints), pa.int64()),
        "b": pa.array(data.draw(ints), pa.int64()),
        "c": pa.array(data.draw(st.lists(st.one_of(st.none(), st.integers(-(1 << 31), (1 << 31) - 1)),
                                         min_size=n, max_size=n)), pa.int32()),
        "s": pa.array(data.draw(st.lists(texts, min_size=n, max_size=n)), pa.string()),
        "f": pa.array(data.draw(st.lists(floats, min_size=n, max_size=n)), pa.float64()),
    })
    tree = sqlglot.parse_one(text, read="duckdb")
    program = arrow_expr(tree)
    con = registered(X=table)
    try:
        want: Any = rows(con.sql(f"SELECT {text} AS r FROM X").to_arrow_table())
    except duckdb.Error:
        want = "error"
    if program is None:  # not in the Arrow form: the SQL runs
        return
    relation = ("project", ("leaf", "X", tuple(table.column_names)), ("r",), (program,))
    try:
        got: Any = rows(evaluate(relation, {"X": table}))
    except NoArrow:
        return  # the relation's SQL runs instead
    except (pa.ArrowInvalid, OverflowError):
        got = "error"
    assert got == want, (text, table.to_pylist())


def test_arrow_filter_and_union() -> None:
    t = pa.table({"a": pa.array([1, None, 3], pa.int64()), "b": pa.array([0, 2, None], pa.int64())})
    cond = arrow_expr(sqlglot.parse_one("a > b", read="duckdb"))
    leaf = ("leaf", "X", ("a", "b"))
    filtered = evaluate(("filter", leaf, cond), {"X": t})
    assert filtered.to_pylist() == [{"a": 1, "b": 0}]  # null comparisons drop the row, as WHERE does
    both = evaluate(("union", ("a", "b"), (leaf, ("filter", leaf, cond))), {"X": t})
    assert rows(both) == rows(t) + rows(filtered)


@settings(max_examples=60, deadline=None)
@given(tables(), st.booleans())
def test_consolidated_through_duckdb_or_a_sort_equals_arrow(table: pa.Table, sort: bool) -> None:
    """Integer columns sorted by their packed codes (``sort``) or every table "large" and not
    packed (DuckDB), against Arrow's hash grouping."""
    cols = [c for c in table.column_names if c != "_d"]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "_packed_sums", lambda *a, **k: None)
        arrow = native.consolidated(table, cols)
        if sort:
            m.undo()
        else:
            m.setattr(native, "ARROW_GROUP_ROWS", -1)
        large = native.consolidated(table, cols)
    assert large.column_names == arrow.column_names
    assert large.schema.field("_d").type == pa.int64()
    assert rows(large) == rows(arrow)


@pytest.mark.parametrize("n", [40, native.ARROW_GROUP_ROWS + 10_000])
def test_integer_tables_consolidate_by_sort_as_sql(n: int) -> None:
    """A table of integer and boolean columns without nulls goes through the sort of packed
    codes, small or above ``ARROW_GROUP_ROWS``: the same rows and column types as SQL's
    grouping.  A null, a string column or a ``diff`` that might overflow does not."""
    import numpy as np

    rng = np.random.default_rng(7)
    table = pa.table({"k": pa.array(rng.integers(-50, 50, n), pa.int32()), "b": rng.integers(0, 2, n).astype(bool),
                      "t": rng.integers(0, 1_000, n), "_d": rng.choice([-1, 1, 2], n)})
    cols = ["k", "b", "t"]
    calls: list[bool] = []
    packed = native._packed_sums
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "_packed_sums", lambda *a: calls.append(packed(*a) is not None) or packed(*a))
        got = native.consolidated(table, cols)
        for other in (table.set_column(0, "k", pa.array([None, *range(n - 1)], pa.int32())),
                      table.set_column(0, "k", pa.array([str(x) for x in range(n)])),
                      table.set_column(3, "_d", pa.array([2**61, *[1] * (n - 1)], pa.int64()))):
            want = duck_consolidated(other, cols)
            assert rows(native.consolidated(other, cols)) == rows(want)
    assert calls == [True, False, False, False]
    want = duck_consolidated(table, cols)
    assert got.schema == want.schema.remove_metadata()
    assert rows(got) == rows(want)


@settings(max_examples=150, deadline=None)
@given(cols=st.integers(1, 3).flatmap(lambda k: st.integers(0, 40).flatmap(lambda n: st.lists(
    st.lists(st.integers(-5, 5), min_size=n, max_size=n), min_size=k, max_size=k))), wide=st.booleans())
def test_sort_order_is_a_stable_lexicographic_sort(cols: list[list[int]], wide: bool) -> None:
    """``stab.sort_order`` (one sort of packed keys with the row number in their low bits, or
    a stable argsort where they do not fit, or ``np.lexsort`` where the columns do not pack)
    orders rows as ``np.lexsort`` does, ties in row order; ``sort_packed`` also gives the
    sorted keys."""
    import numpy as np

    from spark_differential.kernels import stab

    arrays = [np.array(c, dtype=np.int64) for c in cols]
    if wide and arrays[0].size:  # a first column spanning ~2^61: packed keys past the row bits, or no packing
        arrays[0] = arrays[0] * (1 << 58)
    want = np.lexsort(tuple(reversed(arrays)))
    assert stab.sort_order(arrays).tolist() == want.tolist()
    key = stab.packed(arrays)
    if key is not None:
        order, keys = stab.sort_packed(key.copy())
        assert order.tolist() == want.tolist() and keys.tolist() == key[want].tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(0, 4), st.sampled_from([-1, 1, 2])),
                max_size=40),
       st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(0, 4), st.sampled_from([-1, 1])),
                min_size=1, max_size=12))
def test_a_new_batch_looks_up_its_own_sorted_keys(old: list, new: list) -> None:
    """A trace's rows touched by new updates are the same whether the keys looked up come from
    the new updates (sorted for the lookup) or from their batch (sorted already, as the in-task
    loop passes it): ``KeySorted.distinct_keys`` is ``distinct_keys`` of the batch's rows."""
    from spark_differential.trace.arrow import ArrowTrace

    def table(rows_: list, flag: bool) -> pa.Table:
        cols = list(zip(*rows_)) if rows_ else [(), (), (), ()]
        return pa.table({"_k0": pa.array(cols[0], pa.int64()), "_a0": pa.array(cols[1], pa.int64()),
                         "_t0": pa.array(cols[2], pa.int64()), "_d": pa.array(cols[3], pa.int64()),
                         "_new": pa.array([flag] * len(rows_), pa.bool_())})

    trace = ArrowTrace(table([], False).schema, ("_k0",))
    trace.add(table(old, True))
    fresh = table(new, True)
    batch = trace.batch(fresh)
    assert isinstance(batch, native.KeySorted)
    want = native.distinct_keys(batch.table, ["_k0"])
    assert [v.tolist() for v in batch.distinct_keys()] == [v.tolist() for v in want]
    # keys whose new updates cancel out are not looked up with the batch: nothing else differs
    live = {r["_k0"] for r in batch.table.to_pylist()}
    plain = [r for r in trace.touching([fresh]).to_pylist() if r["_k0"] in live]
    assert rows(trace.touching([fresh], batch)) == rows(pa.Table.from_pylist(plain, trace.schema))
