"""Seed 001's changing-graph workload, shared by the examples and benchmarks.

A random sequence of ``edges + changes`` directed edges over ``nodes`` nodes; the
graph is the sliding window of the last ``edges`` of them.  Change ``i`` (1-based)
removes the oldest edge and adds the next one.  All initial edges are added at
time 0; with ``batch = b`` change ``i`` happens at time ``ceil(i / b)`` (``b = 1``:
every change at its own time).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def edge_sequence(nodes: int, edges: int, changes: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, nodes, size=(edges + changes, 2), dtype=np.int64)


def edge_updates(nodes: int, edges: int, changes: int, batch: int = 1, seed: int = 0) -> pd.DataFrame:
    """The updates ``(src, dst, time, diff)`` of the sliding window (not consolidated)."""
    seq = edge_sequence(nodes, edges, changes, seed)
    i = np.arange(1, changes + 1, dtype=np.int64)
    t = (i + batch - 1) // batch
    add0 = pd.DataFrame({"src": seq[:edges, 0], "dst": seq[:edges, 1], "time": 0, "diff": 1})
    add = pd.DataFrame({"src": seq[edges:, 0], "dst": seq[edges:, 1], "time": t, "diff": 1})
    rem = pd.DataFrame({"src": seq[:changes, 0], "dst": seq[:changes, 1], "time": t, "diff": -1})
    out = pd.concat([add0, add, rem], ignore_index=True)
    return out.astype({"src": "int64", "dst": "int64", "time": "int64", "diff": "int64"})
