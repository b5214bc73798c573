"""Delta-query triangles (seed 003) against the naive two-join form and the oracle.

* ``algorithms.triangles`` (three delta rules over ``differentiate``d edges, alt/neu
  nudging, ``integrate``) == ``algorithms.triangles_naive`` == ``ref_triangles``,
  on random changing graphs, including all three edges of a triangle added (and
  removed) at the same moment.  With product times the naive form matches the
  oracle and the delta form refuses (a triangle can first appear at the lub of its
  edges' times, which no delta rule looks up).
* The wedge collection ``(a,b) ⋈ (a,c)`` is never arranged: the wedges reaching
  the closing semijoin form a pure blip stream, which the join kernel answers with
  lookups into the ``(b,c)`` edges alone (checked on the intermediate collection the
  delta rule really produces, with every history-pairing path of the kernel
  disabled).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from helpers import rows_of
from kernel_support import lib_type, updates_of
from oracle import AltNeu, Coll, Product, Total, assert_updates_equal, consolidate, ref_semijoin, ref_triangles
from pyspark.sql import functions as F
from spark_support import collect_many, no_spark_job, sdf

from spark_differential.algorithms import triangles, triangles_naive
from spark_differential.errors import TimeTypeError
from spark_differential.kernels import join as kjoin

P2 = Product([Total(), Total()])


def _changing_graph(rng: random.Random, lat, nodes: int = 6, steps: int = 6, per_step: int = 4) -> Coll:
    """Edge updates keeping every edge's multiplicity 0 or 1 along any chain of times.

    Integer times: at each step a few edges toggle.  Product times: each edge is added
    at most once, at a random time, and removed at most once at a later one.
    """
    ups: list[tuple[tuple, object, int]] = []
    present: set[tuple[int, int]] = set()
    pairs = [(a, b) for a in range(nodes) for b in range(nodes) if a != b]
    if isinstance(lat, Total):
        for t in range(steps):
            for e in rng.sample(pairs, per_step):
                ups.append((e, t, -1 if e in present else 1))
                present ^= {e}
    else:
        for e in rng.sample(pairs, steps * per_step // 2):
            t0 = (rng.randint(0, 3), rng.randint(0, 3))
            ups.append((e, t0, 1))
            if rng.random() < 0.4:
                ups.append((e, (t0[0] + rng.randint(0, 2), t0[1] + rng.randint(1, 2)), -1))
    return Coll(("src", "dst"), ups)


def _simultaneous(lat) -> Coll:
    """A triangle whose three edges arrive together, then leave together; a second one
    sharing an edge that closes later; and a 2-cycle (no triangle)."""
    t = (lambda i: i) if isinstance(lat, Total) else (lambda i: (i, i))
    ups = [((1, 2), t(2), 1), ((1, 3), t(2), 1), ((2, 3), t(2), 1)]
    ups += [((1, 2), t(5), -1), ((1, 3), t(5), -1), ((2, 3), t(5), -1)]
    ups += [((1, 4), t(1), 1), ((2, 4), t(3), 1), ((4, 1), t(3), 1)]
    return Coll(("src", "dst"), ups)


def _tagged(graphs: list[Coll]) -> Coll:
    """Several graphs as one, node ids offset so that they never touch."""
    ups = []
    for i, g in enumerate(graphs):
        ups += [((a + 100 * i, b + 100 * i), t, r) for (a, b), t, r in g.updates]
    return Coll(("src", "dst"), ups)


def test_triangles_delta_equals_naive_and_oracle(spark) -> None:
    lat = Total()
    rng = random.Random(7)
    graph = _tagged([_simultaneous(lat), *[_changing_graph(rng, lat) for _ in range(6)]])
    edges = sdf(spark, graph, lat)
    delta, naive = collect_many([triangles(edges), triangles_naive(edges)])
    expected = ref_triangles(graph, lat)
    assert expected.updates, "the generated graphs must contain triangles"
    assert_updates_equal(delta, expected.updates)
    assert_updates_equal(naive, expected.updates)


def test_triangles_naive_product_times_and_delta_refuses(spark) -> None:
    """With product times the naive form is exact; the delta form would miss triangles
    appearing at the lub of their edges' times, so it raises instead (before any job)."""
    rng = random.Random(7)
    graph = _tagged([_simultaneous(P2), *[_changing_graph(rng, P2) for _ in range(6)]])
    edges = sdf(spark, graph, P2)
    expected = ref_triangles(graph, P2)
    assert expected.updates
    assert_updates_equal(rows_of(triangles_naive(edges)), expected.updates)
    with no_spark_job(spark), pytest.raises(TimeTypeError, match="totally ordered times.*triangles_naive"):
        triangles(edges)


def test_simultaneous_triangle_counted_once(spark) -> None:
    edges = sdf(spark, _simultaneous(Total()), Total())
    got = sorted(rows_of(triangles(edges)))
    # (1,2,4) closes at 3 and opens again when 1->2 leaves at 5
    assert got == [((1, 2, 3), 2, 1), ((1, 2, 3), 5, -1), ((1, 2, 4), 3, 1), ((1, 2, 4), 5, -1)]


def _wedge_blips(spark) -> tuple[Coll, Coll]:
    """The first delta rule's wedges ``dAB ⋈ AC`` (as the library computes them) and
    the ``(b, c)`` edges they are closed against, as oracle collections over AltNeu."""
    rng = random.Random(3)
    graph = _tagged([_simultaneous(Total()), *[_changing_graph(rng, Total(), nodes=8) for _ in range(3)]])
    e = sdf(spark, graph, Total())
    d = e.differentiate()
    neu = e.dd_delay()
    ab = d.select(F.col("src").alias("a"), F.col("dst").alias("b"), "time", "diff")
    ac = neu.select(F.col("src").alias("a"), F.col("dst").alias("c"), "time", "diff")
    bc = neu.select(F.col("src").alias("b"), F.col("dst").alias("c"), "time", "diff")
    wedges, closing = collect_many([ab.dd_join(ac, on="a").select("b", "c", "a", "time", "diff").withColumn("pad", F.lit(0)),
                                    bc.withColumn("a", F.lit(0)).withColumn("pad", F.lit(0))])
    altneu = [[(d[:-1], (t[0], bool(t[1])), r) for d, t, r in ups] for ups in (wedges, closing)]
    return Coll(("b", "c", "a"), altneu[0]), Coll(("b", "c"), [((b, c), t, r) for (b, c, _), t, r in altneu[1]])


def test_wedges_are_never_arranged(spark, monkeypatch) -> None:
    wedges, closing = _wedge_blips(spark)
    lat = AltNeu(Total())
    assert len(wedges.updates) > 20
    # every way the kernel has of pairing two histories is disabled: only the
    # blip lookup (``stab`` into the closing edges) may answer
    def forbidden(*args, **kwargs):
        raise AssertionError("the wedge stream was paired as a history")

    monkeypatch.setattr(kjoin, "join_total", forbidden)
    monkeypatch.setattr(kjoin, "join_pairs_sql", forbidden)
    A = _kernel(wedges, lat, ["b", "c"], ["a"], "_a")
    B = _kernel(closing, lat, ["b", "c"], [], "_b")
    p = kjoin.JoinParams(2, 1, 0, lib_type(lat), "semijoin")
    assert kjoin._blip_side(p, A, B, has_old=False) == "A"
    got = updates_of(kjoin.join(p, A, B), ["_k0", "_k1", "_a0"], lat)
    expected = ref_semijoin(wedges, closing, ["b", "c"], lat)
    assert_updates_equal(got, expected.updates)


def test_history_pairing_is_used_when_no_side_is_blips(monkeypatch) -> None:
    """The check above can fail: with an ordinary AltNeu history on both sides the
    kernel does pair histories (and the forbidden path would be hit)."""
    lat = AltNeu(Total())
    hist = Coll(("b", "c", "a"), [((1, 2, 0), (0, False), 1), ((1, 2, 0), (3, True), -1)])
    closing = Coll(("b", "c"), [((1, 2), (1, False), 1)])
    A = _kernel(hist, lat, ["b", "c"], ["a"], "_a")
    B = _kernel(closing, lat, ["b", "c"], [], "_b")
    p = kjoin.JoinParams(2, 1, 0, lib_type(lat), "semijoin")
    assert kjoin._blip_side(p, A, B, has_old=False) is None
    monkeypatch.setattr(kjoin, "join_total", lambda *a, **k: (_ for _ in ()).throw(AssertionError("paired")))
    with pytest.raises(AssertionError, match="paired"):
        kjoin.join(p, A, B)


def _kernel(coll: Coll, lat, keys: list[str], data: list[str], prefix: str) -> pa.Table:
    from kernel_support import kernel_table

    return kernel_table(Coll(coll.cols, consolidate(coll.updates)), lat, keys, data=data, prefix=prefix)


def test_triangles_example_runs(spark) -> None:
    """``examples/triangles.py`` as a function: the delta and naive forms agree."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "triangles.py"
    spec = importlib.util.spec_from_file_location("triangles_example", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = mod.run(spark, nodes=40, edges=120, changes=60, batch=3, seed=1, check=True)
    assert report["changes"] > 0 and report["checked"]

