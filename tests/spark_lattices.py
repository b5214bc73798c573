"""The time lattices the Spark operator tests run over, and how to build their inputs.

Each entry names an oracle lattice over integers, the range of the random time
leaves (small for wide products, whose lub closures grow fast), and whether the
collection is *differentiated* first (then it lives in ``AltNeu`` of that lattice
and ordinary collections enter it at ``alt``, as ``unify`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oracle import AltNeu, Coll, Product, Total, consolidate, ref_differentiate
from pyspark.sql import DataFrame
from spark_support import sdf


@dataclass(frozen=True)
class SparkLattice:
    base: Any
    time_range: tuple[int, int]
    differentiated: bool = False

    @property
    def lat(self) -> Any:
        """The lattice of the operator's output (``AltNeu(base)`` when differentiated)."""
        return AltNeu(self.base) if self.differentiated else self.base


P2 = Product([Total(), Total()])
SPARK_LATTICES: dict[str, SparkLattice] = {
    "int": SparkLattice(Total(), (0, 5)),
    "product2": SparkLattice(P2, (0, 5)),
    "product3": SparkLattice(Product([Total(), Total(), Total()]), (0, 3)),
    "nested": SparkLattice(Product([Total(), Product([Total(), Total()])]), (0, 3)),
    "altneu": SparkLattice(Total(), (0, 5), True),
    "altneu_product2": SparkLattice(P2, (0, 3), True),
}


def build(spark: Any, coll: Coll, sl: SparkLattice, differentiate: bool | None = None, **kw: Any) -> tuple[DataFrame, Coll]:
    """``(DataFrame, oracle collection over sl.lat)`` for ``coll`` (times of ``sl.base``).

    With ``sl.differentiated`` the collection is differentiated (``differentiate=True``,
    the default) or entered at ``alt`` (``differentiate=False``, what the library does
    to an ordinary input of an operator over AltNeu times).
    """
    df = sdf(spark, coll, sl.base, **kw)
    if not sl.differentiated:
        return df, coll
    if differentiate is None or differentiate:
        return df.differentiate(), ref_differentiate(coll, sl.base)[0]
    return df, Coll(coll.cols, consolidate((d, (t, False), r) for d, t, r in coll.updates))
