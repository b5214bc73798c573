"""``dd_reduce``'s user-function path over totally ordered times: the snapshots summed
to differences in Python (``kernels.reduce._func_diffs``) give exactly the rows of the
DuckDB query they replace (``_snapshot_diffs``), on keys with nulls and NaN, several
output columns and outputs that repeat, cancel or vanish between times."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_differential.core.lattice import Total
from spark_differential.kernels import reduce as kreduce
from spark_differential.kernels.common import keys, names


def _rows(t: pa.Table) -> list[tuple]:
    def norm(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and v != v else v

    return sorted((tuple(map(norm, r)) for r in zip(*[t.column(c).to_pylist() for c in t.column_names])), key=repr)


def _params(func: Any) -> kreduce.ReduceParams:
    return kreduce.ReduceParams(
        nkeys=1, ndata=1, ttype=Total(), agg="func", out_types=(pa.int64(), pa.string()), func=func,
        key_names=("k",), data_names=("x",), out_names=("n", "s"),
    )


def _func(mode: str) -> Any:
    def f(g: pd.DataFrame) -> pd.DataFrame:
        total = int((g["diff"]).sum())
        if mode == "size":  # one row, changes with the group's size
            return pd.DataFrame({"n": [total], "s": ["x"], "diff": [1]})
        if mode == "parity":  # repeats between times: consecutive equal snapshots cancel
            return pd.DataFrame({"n": [total % 2], "s": [None], "diff": [2]})
        if mode == "vanish":  # no rows for some snapshots
            return pd.DataFrame({"n": [total], "s": ["v"], "diff": [1]}).iloc[: total % 2]
        return pd.DataFrame({"n": [1, 1, total], "s": ["a", "a", "b"], "diff": [1, -1, 3]})  # "cancel"

    return f


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_func_diffs_match_the_snapshot_query(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 25))
    float_keys = data.draw(st.booleans())
    key = st.sampled_from([0.0, 1.5, float("nan"), None]) if float_keys else st.sampled_from(["a", "b", None])
    draw = lambda s: data.draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    X = pa.table({
        "_k0": pa.array(draw(key), pa.float64() if float_keys else pa.string()),
        "_a0": pa.array(draw(st.integers(0, 3)), pa.int64()),
        "_t0": pa.array(draw(st.integers(0, 4)), pa.int64()),
        "_d": pa.array(draw(st.sampled_from([-1, 1, 2])), pa.int64()),
        "_new": pa.array([True] * n, pa.bool_()),
    })
    p = _params(_func(data.draw(st.sampled_from(["size", "parity", "vanish", "cancel"]))))
    alive = kreduce._alive(X, 1, 1, 1)
    pieces = kreduce._func_snapshots(p, alive)
    got = kreduce._func_diffs(p, alive, pieces)
    cols = [*keys(1), *names("_o", 2)]
    want = kreduce._snapshot_diffs(kreduce._table_from_rows(p, alive, pieces), cols, 1)
    assert got.column_names == [*cols, "_t0", "_d"]
    assert _rows(got) == _rows(want.select(got.column_names))
