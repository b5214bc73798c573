"""``dd_merge_asof``'s kernel (``kernels/asof_merge.py``) against the brute-force as-of join, without Spark.

Random small collections with ties, nulls and negative multiplicities, over integer,
product and alt/neu times, every option (direction, exact matches, tolerance, ``how``,
null-safe keys), and trace/new splits: the kernel's output must be exactly
``F(all) - F(trace)`` of the brute force (``tests/asof_oracle.py``) at every time.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pyarrow as pa
import pytest
from asof_oracle import Spec, ref_merge_asof
from kernel_support import LATTICES, difference, kernel_table, lib_type, split, updates_of
from oracle import Coll, assert_updates_equal, random_coll

from spark_differential.kernels import asof_match
from spark_differential.kernels.asof_merge import MergeAsofParams, merge_asof

OPTIONS = [
    (d, e, t, h, n)
    for d, e, t, h, n in itertools.product(
        asof_match.DIRECTIONS, (True, False), (None, 1), asof_match.HOWS, (False, True))
]
OUT = ["k", "x", "u", "v", "w"]


def _out(lrow: tuple | None, rrow: tuple | None) -> tuple:
    key = lrow[0] if lrow is not None else rrow[0]
    return (key, *(lrow[1:] if lrow is not None else (None, None)), *(rrow[1:] if rrow is not None else (None, None)))


def _out_semi(lrow: tuple | None, rrow: tuple | None) -> tuple:
    assert lrow is not None
    return tuple(lrow)


def _nulled(rng: random.Random, c: Coll, cols: tuple[int, ...]) -> Coll:
    ups = []
    for d, t, r in c.updates:
        d = tuple(None if i in cols and rng.random() < 0.12 else v for i, v in enumerate(d))
        ups.append((d, t, r))
    return Coll(c.cols, ups)


def _run(lat: Any, a: Coll, b: Coll, option: tuple, flags_a: list[bool], flags_b: list[bool]) -> None:
    direction, exact, tol, how, nulls_equal = option
    rule = asof_match.Rule(direction, exact, tol, how)
    p = MergeAsofParams(1, 2, 2, lib_type(lat), rule, nulls_equal)
    ta = kernel_table(a, lat, keys=["k"], data=["x", "u"], prefix="_a", new=flags_a)
    tb = kernel_table(b, lat, keys=["k"], data=["v", "w"], prefix="_b", new=flags_b)
    got = merge_asof(p, ta, tb)
    semi = how in ("semi", "anti")
    spec = Spec((0,), (0,), 1, 1, (2,), direction, exact, tol, how, nulls_equal)
    cols = ["k", "x", "u"] if semi else OUT
    out = _out_semi if semi else _out

    def ref(x: Coll, y: Coll) -> Coll:
        return ref_merge_asof(x, y, spec, lat, cols, out)

    want = ref(a, b)
    if not all(flags_a) or not all(flags_b):
        old_a, _ = split(a, flags_a)
        old_b, _ = split(b, flags_b)
        want = difference(want, ref(old_a, old_b))
    names = ["_k0", "_a0", "_a1"] + ([] if semi else ["_b0", "_b1"])
    assert_updates_equal(updates_of(got, names, lat), want.updates)


@pytest.mark.parametrize("lat_name", ["int", "product2", "altneu"])
def test_kernel_against_brute_force(lat_name: str) -> None:
    lat = LATTICES[lat_name]
    rng = random.Random(hash(lat_name) % 1000)
    n_cases = 60 if lat_name == "int" else 16
    for case in range(n_cases):
        option = OPTIONS[(case * 7 + len(lat_name)) % len(OPTIONS)]
        a = _nulled(rng, random_coll(rng, ["k", "x", "u"], rng.randint(0, 8), lat, value_range=4), (0, 1))
        b = _nulled(rng, random_coll(rng, ["k", "v", "w"], rng.randint(0, 8), lat, value_range=4), (0, 1, 2))
        if case % 3 == 0:  # a trace and new updates
            fa = [rng.random() < 0.5 for _ in a.updates]
            fb = [rng.random() < 0.5 for _ in b.updates]
        else:
            fa, fb = [True] * len(a.updates), [True] * len(b.updates)
        try:
            _run(lat, a, b, option, fa, fb)
        except AssertionError as e:
            raise AssertionError(f"case {case}, option {option}\nleft {a.updates}\nright {b.updates}\n{e}") from None


def test_one_snapshot_every_option() -> None:
    """Every option on static-like inputs (one time, positive diffs): the one-sort path."""
    lat = LATTICES["int"]
    rng = random.Random(5)
    for option in OPTIONS:
        for _ in range(3):
            a = _nulled(rng, random_coll(rng, ["k", "x", "u"], rng.randint(0, 9), lat, value_range=4,
                                         positive_only=True, time_range=(2, 2)), (0, 1))
            b = _nulled(rng, random_coll(rng, ["k", "v", "w"], rng.randint(0, 9), lat, value_range=4,
                                         positive_only=True, time_range=(2, 2)), (0, 1, 2))
            _run(lat, a, b, option, [True] * len(a.updates), [True] * len(b.updates))


def test_order_codes_keep_the_order_of_every_type() -> None:
    import datetime as dt
    from decimal import Decimal

    samples = [
        pa.array([3, -1, None, 7], pa.int32()),
        pa.array([2.5, -0.0, 0.0, float("nan"), -3.25, None]),
        pa.array([Decimal("1.10"), Decimal("-2.05"), None, Decimal("1.1")], pa.decimal128(5, 2)),
        pa.array([Decimal("1" * 25), Decimal("-3"), None], pa.decimal128(30, 0)),
        pa.array(["b", "", None, "ab", "é"]),
        pa.array([dt.date(2024, 1, 2), dt.date(1970, 1, 1), None]),
        pa.array([dt.datetime(2024, 1, 2, 3), dt.datetime(1960, 5, 1), None], pa.timestamp("us", tz="UTC")),
    ]
    for arr in samples:
        left, right = asof_match.order_codes(arr, arr)
        vals = arr.to_pylist()
        ok = [v is not None and v == v for v in vals]
        assert left.ok.tolist() == ok
        for i, j in itertools.product(range(len(vals)), repeat=2):
            if ok[i] and ok[j]:
                assert (vals[i] < vals[j]) == (left.code[i] < right.code[j]), (arr.type, vals[i], vals[j])
                assert (vals[i] == vals[j]) == (left.code[i] == right.code[j]), (arr.type, vals[i], vals[j])
