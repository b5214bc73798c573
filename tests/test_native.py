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
def tables(draw: Any, big_diffs: bool = False, kinds: list[str] | None = None) -> pa.Table:
    n = draw(st.integers(0, 25))
    if kinds is None:
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


@st.composite
def tables_and_keys(draw: Any) -> tuple[pa.Table, pa.Table]:
    """A table and keys of the same columns (two to three, of groupable types): some of the
    table's rows and some rows of their own."""
    kinds = draw(st.lists(st.sampled_from(["int", "str", "bool"]), min_size=2, max_size=3))
    table, other = draw(tables(kinds=kinds)), draw(tables(kinds=kinds))
    picked = draw(st.lists(st.integers(0, max(table.num_rows - 1, 0)), max_size=table.num_rows))
    return table, pa.concat_tables([table.take(pa.array(picked, pa.int64())), other]) if table.num_rows else other


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.tuples(tables(), tables()), tables_and_keys()))
def test_touching_equals_sql_semi_join(pair: tuple[pa.Table, pa.Table]) -> None:
    table, keys = pair
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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-4, 4), max_size=30), st.lists(st.integers(-4, 4), max_size=30), st.booleans())
def test_equal_pairs_are_the_pairs_a_sort_finds(x: list, y: list, wide: bool) -> None:
    """``order.equal_pairs`` (a counting pass over a short range of values) gives every pair of
    equal values, in the order of ``x`` then ``y``, as a stable sort of ``y`` and binary searches
    do; values spread far wider than the rows take the sort (``None``), values of ``x`` out of
    ``y``'s range (the int64 limits among them) match nothing."""
    from spark_differential.kernels import order

    scale = (1 << 40) if wide else 1
    xs = np.array([v * scale for v in x] + [I64[0], I64[1]], dtype=np.int64)
    ys = np.array([v * scale for v in y], dtype=np.int64)
    want = [(i, j) for i in range(len(xs)) for j in range(len(ys)) if xs[i] == ys[j]]
    got = order.equal_pairs(xs, ys)
    if wide and len(set(y)) > 1:
        assert got is None
        return
    assert got is not None
    assert list(zip(got[0].tolist(), got[1].tolist())) == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2), st.integers(0, 1)), min_size=1, max_size=25),
       st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2), st.integers(0, 1)), min_size=1, max_size=25),
       st.booleans(), st.booleans())
def test_a_plain_join_of_integer_keys_pairs_as_one_of_numbered_keys(xr: list, yr: list, two_keys: bool,
                                                                     later: bool) -> None:
    """``join._crossed`` pairs rows by their integer keys' values (packed, for several key columns)
    exactly as by :func:`~spark_differential.kernels.stab.ids` (the path of keys of other types,
    here the same keys as strings): the same rows, in the same order."""
    from spark_differential.kernels import join as kjoin

    nkeys = 2 if two_keys else 1

    def side(rows_: list, data: str, t: int, as_text: bool) -> pa.Table:
        keys_ = {f"_k{j}": [r[j] if j < 2 else 0 for r in rows_] for j in range(nkeys)}
        cols = {c: pa.array([str(v) for v in vs] if as_text else vs, pa.string() if as_text else pa.int64())
                for c, vs in keys_.items()}
        cols[data] = pa.array([r[1] for r in rows_], pa.int64())
        cols["_t0"] = pa.array([t] * len(rows_), pa.int64())
        cols["_d"] = pa.array([1 + r[2] for r in rows_], pa.int64())
        return pa.table(cols)

    tx, ty = (5, 3) if later else (3, 5)
    got = kjoin._crossed(side(xr, "_a0", tx, False), side(yr, "_b0", ty, False), nkeys, ["_a0"], ["_b0"], 1)
    want = kjoin._crossed(side(xr, "_a0", tx, True), side(yr, "_b0", ty, True), nkeys, ["_a0"], ["_b0"], 1)
    assert got is not None and want is not None
    as_ints = want.set_column(0, "_k0", want.column("_k0").cast(pa.int64()))
    if two_keys:
        as_ints = as_ints.set_column(1, "_k1", want.column("_k1").cast(pa.int64()))
    assert got.to_pylist() == as_ints.to_pylist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.sampled_from([-1, 1, 2])), max_size=40),
       st.lists(st.tuples(st.integers(-4, 4), st.integers(0, 3)), max_size=15), st.booleans())
def test_key_sorted_runs_are_the_rows_binary_searches_find(rows_: list, wanted: list, wide: bool) -> None:
    """``KeySorted.touching_rows`` (one binary search from where the last key's run ended:
    ``order.runs_of``) gives the positions of every row of the given keys, as a search of each
    key does; ``distinct_keys`` (flags over a short range of codes, or a sort) gives the sorted
    distinct keys; ``runs_of`` refuses keys out of order."""
    from spark_differential.kernels import order

    scale = (1 << 30) if wide else 1
    cols = list(zip(*rows_)) if rows_ else [(), (), ()]
    table = pa.table({"_k0": pa.array([v * scale for v in cols[0]], pa.int64()),
                      "_k1": pa.array(cols[1], pa.int64()), "_d": pa.array(cols[2], pa.int64())})
    keys_ = pa.table({"_k0": pa.array([k * scale for k, _ in wanted], pa.int64()),
                      "_k1": pa.array([v for _, v in wanted], pa.int64())})
    distinct = native.distinct_keys(keys_, ["_k0", "_k1"])
    assert distinct is not None
    assert list(zip(*[v.tolist() for v in distinct])) == sorted(set(zip(*[keys_.column(c).to_pylist()
                                                                           for c in ["_k0", "_k1"]])))
    assert distinct == [] or all(v.dtype == np.int64 for v in distinct)
    ks = native.KeySorted.by_key(table, ["_k0", "_k1"])
    if ks is None:
        assert table.num_rows == 0
        return
    want = set(zip(*[keys_.column(c).to_pylist() for c in ["_k0", "_k1"]]))
    found = ks.touching_rows(distinct)
    sorted_keys = list(zip(*[ks.table.column(c).to_pylist() for c in ["_k0", "_k1"]]))
    assert found.tolist() == [i for i, k in enumerate(sorted_keys) if k in want]
    if len(ks.codes) and len(set(ks.codes.tolist())) > 1:
        assert order.runs_of(ks.codes, ks.codes[::-1].copy()) is None
    assert order.runs_of(np.array([1, 3, 3, 5]), np.array([0, 3, 9])).tolist() == [1, 2]


@pytest.mark.parametrize("d", [[I64[0], 1], [I64[1]], [0, 0], [], [-5, 3], [1 << 60] * 4, [1 << 60] * 3,
                               [-(1 << 61), 1], [-(1 << 61)] * 2])
def test_integer_sums_fit_as_can_sum_says(d: list) -> None:
    """``can_sum`` is the largest ``|diff|`` times the rows below 2**62 (``INT64_MIN`` included), and
    the packed consolidation (its bounds read from numpy) declines exactly the tables it refuses."""
    table = pa.table({"_k": pa.array(range(len(d)), pa.int64()), "_d": pa.array(d, pa.int64())})
    assert native.can_sum(table, "_d") == (max((abs(v) for v in d), default=0) * len(d) < 2 ** 62)
    assert (native._packed_sums(table, ["_k"], "_d") is not None) == native.can_sum(table, "_d")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.one_of(st.booleans(), st.none()), max_size=6), max_size=5), st.booleans())
def test_the_rows_of_a_flag_are_its_filter(chunks: list, value: bool) -> None:
    """``join._with_new`` (slices, where every chunk of the flag holds one value) and ``join._all_true``
    (counted per chunk, without nulls) give what Arrow's filter and ``all`` give."""
    import pyarrow.compute as pc

    from spark_differential.kernels import join as kjoin

    flag = pa.chunked_array([pa.array(c, pa.bool_()) for c in chunks], pa.bool_())
    table = pa.table({"x": pa.array(np.arange(len(flag)), pa.int64()), "_new": flag})
    want = table.filter(flag if value else pc.invert(flag))
    got = kjoin._with_new(table, value)
    assert got.schema == want.schema and got.to_pylist() == want.to_pylist()
    assert kjoin._all_true(flag) == (len(flag) == 0 or bool(pc.all(flag).as_py()))
    empty = pa.table({"x": pa.array([], pa.int64()), "_new": pa.array([], pa.null())})  # (an empty side's flag)
    assert kjoin._all_true(empty.column("_new"))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-4, 4)), max_size=30), st.booleans(),
       st.sampled_from(["int64", "int8", "uint32", "uint64"]))
def test_integer_ids_are_dictionary_encode_s(values: list, wide: bool, typ: str) -> None:
    """``stab.ids`` of a column of integers without nulls over a short range (``order.first_ids``,
    one pass through a table of the values) numbers them as Arrow's ``dictionary_encode`` does (in
    order of first appearance); nulls, a wide range and ``uint64`` take ``dictionary_encode``."""
    import pyarrow.compute as pc

    from spark_differential.kernels import stab

    scale = (1 << 40) if wide and typ == "int64" else 1
    unsigned = typ.startswith("u")
    column = pa.array([None if v is None else (abs(v) if unsigned else v) * scale for v in values], getattr(pa, typ)())
    for col in (column, column.fill_null(0), pa.chunked_array([column.fill_null(1), column.fill_null(2)])):
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        want = pc.dictionary_encode(arr, null_encoding="encode").indices.to_numpy(zero_copy_only=False)
        assert stab.ids([col], len(col)).tolist() == want.tolist()


@pytest.mark.parametrize("n_minor", [1, 3])
def test_dense_order_is_a_stable_sort_by_major_then_minor(n_minor: int) -> None:
    """``order.dense_order`` (one counting pass when there is one minor id) sorts as ``np.lexsort``."""
    from spark_differential.kernels import order

    rng = np.random.default_rng(n_minor)
    major, minor = rng.integers(0, 7, 300), rng.integers(0, n_minor, 300)
    assert order.dense_order(major, 7, minor, n_minor).tolist() == np.lexsort((minor, major)).tolist()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(0, 3), st.sampled_from([-1, 1, 2])),
                max_size=30),
       st.lists(st.lists(st.integers(-4, 4), min_size=1, max_size=6), min_size=1, max_size=2),
       st.integers(0, 3), st.sampled_from(["int", "str", "none"]))
def test_a_view_loop_s_stored_rows_touched_by_keys(stored: list, news: list, i: int, kind: str) -> None:
    """A view loop's stored trace (``loop._Stored``) gives the rows of the keys of new updates at
    iteration ``i`` as a semi-join of its rows and a filter on their iteration give them: keys of
    integers by binary search, gathered from its rows made once; other keys by ``native.touching``;
    a step with no key every row of iteration at most ``i`` (the new rows all have its one key, the
    empty one; a concatenation of their key columns, tables of no columns, counts no rows: the
    loop once read that as no key touched)."""
    from spark_differential.incremental.loop import IT, _Stored
    from spark_differential.kernels.common import NEW, conform

    typ = pa.string() if kind == "str" else pa.int64()

    def conv(v: int) -> Any:
        return str(v) if kind == "str" else v

    key = () if kind == "none" else ("_k0",)
    schema = pa.schema([pa.field("_k0", typ), pa.field("_a0", pa.int64()), pa.field("_t0", pa.int64(), False),
                        pa.field("_d", pa.int64(), False), pa.field(NEW, pa.bool_())])
    cols = list(zip(*stored)) if stored else [(), (), (), ()]
    rows_ = pa.table({"_k0": pa.array([conv(v) for v in cols[0]], typ), "_a0": pa.array(cols[1], pa.int64()),
                      "_t0": pa.array([0] * len(stored), pa.int64()), "_d": pa.array(cols[3], pa.int64()),
                      IT: pa.array(cols[2], pa.int64())})
    new = [pa.table({"_k0": pa.array([conv(v) for v in ks], typ), "_a0": pa.array([0] * len(ks), pa.int64())})
           for ks in news]
    trace = _Stored(rows_, key, schema)
    keys_table, distinct = _Stored.keys(new, key)
    got = trace.touching(keys_table, distinct, i)
    # as the loop read them before: the keys' table, its rows of them, those of iteration at most i
    table = keys_table()
    if trace.rows.num_rows == 0 or (key and table.num_rows == 0):
        want = schema.empty_table()
    else:
        found = native.touching(trace.rows, table, key) if key else trace.rows
        found = found.filter(pa.array(found.column(IT).to_numpy() <= i))
        want = conform(found.drop_columns([IT]).append_column(NEW, pa.array(np.zeros(found.num_rows, dtype=bool))),
                       schema)
    assert got.schema == want.schema and got.to_pylist() == want.to_pylist()
