"""Plots of the benchmark results for docs/performance.md.

Reads the JSON files the benchmark scripts write (``--json benchmarks/results/<name>.json``;
every file has ``rows`` of ``{"case", "ours", "peer", "ratio"}`` with ``{"label",
"seconds", "status"}`` per side, and ``latency.json`` its own rows) and draws the main
comparisons as PNG files into ``docs/img/``:

* ``bfs.png``: BFS over a changing graph, seconds against the number of changes for
  ours (distinct times and batched) and each peer (log-log);
* ``asof.png``: the as-of join workloads, seconds per formulation (log scale);
* ``versioned_view.png``: seconds against the number of versions V, ours against
  re-running the query per version (log-log);
* ``blip_join.png``: seconds against the history length, ours against the pairwise join;
* ``throughput.png``: ``dd_consolidate`` and ``dd_count`` against DuckDB;
* ``latency.png``: fixed cost per step, every operator against its plain Spark
  equivalent on a tiny input.

Nothing is measured here: every number comes from the JSON files (a figure whose file
is missing is skipped with a message).  matplotlib is a benchmark-only dependency
(``bash benchmarks/setup_env.sh`` installs it into ``.bench-venv``)::

    .bench-venv/bin/python benchmarks/plot.py            # all figures
    .bench-venv/bin/python benchmarks/plot.py --only bfs asof
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img"

OURS_COLOR = "#c0392b"
PEER_COLORS = ["#2c7fb8", "#41ab5d", "#807dba", "#fd8d3c", "#636363", "#e7298a", "#a6761d"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        print(f"plot: {path.relative_to(ROOT)} not found, skipping", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _ok(side: dict[str, Any] | None) -> bool:
    return bool(side) and side.get("seconds") is not None


def _save(fig: Any, name: str, source: str) -> Path:
    fig.text(0.99, -0.01, f"data: benchmarks/results/{source}", ha="right", va="top", fontsize=7, color="#666666")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})  # no version stamp: reruns give the same file
    print(f"plot: wrote {path.relative_to(ROOT)}")
    return path


# --------------------------------------------------------------------------- BFS


def bfs_series(data: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Seconds per number of changes for ours (distinct times), ours batched and each peer."""
    series: dict[str, dict[int, float]] = {}
    for row in data["rows"]:
        m = re.match(r"([\d,]+) changes, distinct times$", row["case"])
        b = re.match(r"([\d,]+) changes: .*batches of ([\d,]+)", row["case"])
        if m:
            n = _num(m.group(1))
            if _ok(row["ours"]):
                series.setdefault("ours (dd_iterate), every change at its own time", {})[n] = row["ours"]["seconds"]
            if _ok(row["peer"]) and row["peer"].get("status") == "ok":
                series.setdefault(row["peer"]["label"], {})[n] = row["peer"]["seconds"]
        elif b and _ok(row["ours"]):
            label = f"ours, changes in batches of {b.group(2)}"
            series.setdefault(label, {})[_num(b.group(1))] = row["ours"]["seconds"]
    return series


def plot_bfs(plt: Any) -> Path | None:
    runs = [d for d in (load("bfs_1e4_1e5"), load("bfs_1e6")) if d is not None]
    if not runs:
        return None
    series: dict[str, dict[int, float]] = {}
    for d in runs:
        for label, points in bfs_series(d).items():
            series.setdefault(label, {}).update(points)
    before = load("bfs_1e4_1e5_66a4f13")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    peers = [k for k in series if not k.startswith("ours")]
    for i, label in enumerate(peers):
        xs = sorted(series[label])
        ax.plot(xs, [series[label][x] for x in xs], "o-", color=PEER_COLORS[i], label=label)
    for label, style in (("ours (dd_iterate), every change at its own time", "o-"), ("ours, changes in batches of 1000", "s--")):
        if label in series:
            xs = sorted(series[label])
            ax.plot(xs, [series[label][x] for x in xs], style, color=OURS_COLOR, lw=2, label=label)
    if before is not None:
        old = bfs_series(before).get("ours (dd_iterate), every change at its own time", {})
        if old:
            xs = sorted(old)
            ax.plot(xs, [old[x] for x in xs], "x:", color="#999999", label="ours before in-task loops (66a4f13)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("edge changes (sliding window over 2,000 edges, 1,000 nodes)")
    ax.set_ylabel("seconds (log)")
    ax.set_title("BFS over a changing graph: time against changes")
    ax.legend(fontsize=7.5, loc="upper left")
    return _save(fig, "bfs", "bfs_1e4_1e5.json (10^4, 10^5), bfs_1e6.json (10^6)")


# --------------------------------------------------------------------------- as-of joins


def plot_asof(plt: Any) -> Path | None:
    data = load("asof")
    if data is None:
        return None
    workloads: dict[str, list[tuple[str, float, bool]]] = {}
    for row in data["rows"]:
        bars = workloads.setdefault(row["case"], [])
        if not bars and _ok(row["ours"]):
            bars.append((row["ours"]["label"], row["ours"]["seconds"], True))
        if _ok(row["peer"]):
            bars.append((row["peer"]["label"], row["peer"]["seconds"], False))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 3.6), sharey=True, squeeze=False)
    for ax, (case, bars) in zip(axes[0], workloads.items()):
        labels = [b[0] for b in bars]
        secs = [b[1] for b in bars]
        colors = [OURS_COLOR if b[2] else ("#999999" if b[0].startswith("dd_asof_join") else PEER_COLORS[0]) for b in bars]
        ys = range(len(bars))
        ax.barh(list(ys), secs, color=colors)
        for y, s in zip(ys, secs):
            ax.text(s * 1.08, y, f"{s:.2f} s", va="center", fontsize=7.5)
        ax.set_xscale("log")
        ax.set_xlim(min(secs) / 2, max(secs) * 6)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels, fontsize=7.5)
        ax.invert_yaxis()
        ax.set_title(case, fontsize=9)
        ax.set_xlabel("seconds (log; shorter is faster)")
    fig.suptitle("As-of join: ours (red), our other methods (grey), peers (blue)", fontsize=10)
    fig.tight_layout()
    return _save(fig, "asof", "asof.json")


# --------------------------------------------------------------------------- versioned view


def plot_versioned_view(plt: Any) -> Path | None:
    data = load("versioned_view")
    if data is None:
        return None
    series: dict[str, dict[int, tuple[float, str]]] = {}
    for row in data["rows"]:
        v = _num(row["case"].split("=")[1])
        for side in ("ours", "peer"):
            s = row[side]
            if not _ok(s):
                continue
            label = re.sub(r",? all \d+ versions", "", s["label"])
            label = "ours: " + label if side == "ours" else label
            series.setdefault(label, {})[v] = (s["seconds"], s.get("status", "ok"))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    peer_i = 0
    for label, points in series.items():
        xs = sorted(points)
        ys = [points[x][0] for x in xs]
        ours = label.startswith("ours")
        color = OURS_COLOR if ours else PEER_COLORS[peer_i]
        peer_i += 0 if ours else 1
        style = ("o-" if "projected" not in label else "s--") if ours else "o-"
        ax.plot(xs, ys, style, color=color, lw=2 if ours else 1.5, label=label)
        for x in xs:
            if points[x][1] != "ok":  # e.g. extrapolated from a sample of the versions
                ax.plot([x], [points[x][0]], "o", mfc="white", color=color, ms=9)
                ax.annotate(points[x][1], (x, points[x][0]), textcoords="offset points", xytext=(-60, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("versions V of a 10^6-row join + count")
    ax.set_ylabel("seconds (log)")
    ax.set_title("Versioned view: all versions in one job vs one query per version")
    ax.legend(fontsize=7.5, loc="upper left")
    return _save(fig, "versioned_view", "versioned_view.json")


# --------------------------------------------------------------------------- blip join


def plot_blip_join(plt: Any) -> Path | None:
    data = load("blip_join")
    if data is None:
        return None
    ours: dict[int, float] = {}
    peer: dict[int, tuple[float, str]] = {}
    peer_label = "peer"
    for row in data["rows"]:
        m = re.search(r"history (\d+)([kM])", row["case"])
        if not m:
            continue
        n = int(m.group(1)) * (1000 if m.group(2) == "k" else 1_000_000)
        if _ok(row["ours"]):
            ours[n] = row["ours"]["seconds"]
        if _ok(row["peer"]):
            peer[n] = (row["peer"]["seconds"], row["peer"].get("status", "ok"))
            peer_label = row["peer"]["label"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = sorted(ours)
    ax.plot(xs, [ours[x] for x in xs], "o-", color=OURS_COLOR, lw=2, label="ours: dd_join (blips meet the accumulated history)")
    px = sorted(peer)
    ax.plot(px, [peer[x][0] for x in px], "o-", color=PEER_COLORS[0], label=peer_label)
    for x in px:
        if peer[x][1] != "ok":
            ax.annotate(f"{peer[x][1]} at {peer[x][0]:.0f} s", (x, peer[x][0]), xytext=(x, peer[x][0] * 1.6),
                        arrowprops={"arrowstyle": "<-", "color": PEER_COLORS[0]}, ha="center", fontsize=7.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=max(v for v, _ in peer.values()) * 3 if peer else None)
    ax.set_xlabel("history updates (10^6 blips on 1,000 keys)")
    ax.set_ylabel("seconds (log)")
    ax.set_title("Blip join: cost follows the input, not the pairs")
    ax.legend(fontsize=7.5, loc="upper left")
    return _save(fig, "blip_join", "blip_join.json")


# --------------------------------------------------------------------------- consolidate + count


def plot_throughput(plt: Any) -> Path | None:
    cons, count = load("consolidate"), load("count")
    panels = [(d, t) for d, t in ((cons, "dd_consolidate, 10^7 updates"), (count, "dd_count, 10^7 updates")) if d is not None]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 3.4), squeeze=False)
    for ax, (data, title) in zip(axes[0], panels):
        # (label, case, seconds, ours?), each measurement once (a row repeats ours for each peer)
        entries: list[tuple[str, str, float, bool]] = []
        for row in data["rows"]:
            for side in ("ours", "peer"):
                s = row[side]
                if _ok(s) and not any(e[0] == s["label"] and e[2] == s["seconds"] for e in entries):
                    entries.append((s["label"], row["case"], s["seconds"], side == "ours"))
        # a label measured with different results (one per case) is told apart by its case
        repeated = {e[0] for e in entries if sum(1 for f in entries if f[0] == e[0]) > 1}
        labels = [f"{e[0]}, {e[1]}" if e[0] in repeated else e[0] for e in entries]
        secs = [e[2] for e in entries]
        colors = [OURS_COLOR if e[3] else PEER_COLORS[0] for e in entries]
        ys = list(range(len(labels)))
        ax.barh(ys, secs, color=colors)
        for y, s in zip(ys, secs):
            ax.text(s * 1.02, y, f"{s:.2f} s", va="center", fontsize=7.5)
        ax.set_xlim(0, max(secs) * 1.25)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7.5)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds (shorter is faster)")
    fig.suptitle("Single-operator throughput: ours (red) against one DuckDB process (blue)", fontsize=10)
    fig.tight_layout()
    return _save(fig, "throughput", "consolidate.json, count.json")


# --------------------------------------------------------------------------- latency


def plot_latency(plt: Any) -> Path | None:
    data = load("latency")
    if data is None:
        return None
    rows = [r for r in data["rows"] if r.get("ours_seconds") is not None and r.get("plain_seconds") is not None]
    fig, ax = plt.subplots(figsize=(7.6, 0.28 * len(rows) + 1.4))
    ys = list(range(len(rows)))
    h = 0.4
    ax.barh([y - h / 2 for y in ys], [r["ours_seconds"] * 1000 for r in rows], h, color=OURS_COLOR, label="ours")
    ax.barh([y + h / 2 for y in ys], [r["plain_seconds"] * 1000 for r in rows], h, color=PEER_COLORS[0], label="plain Spark equivalent")
    for y, r in zip(ys, rows):
        ax.text(max(r["ours_seconds"], r["plain_seconds"]) * 1000 + 20, y, f"{r['ratio']:.2f}x, {r['ours_jobs']} vs {r['plain_jobs']} jobs",
                va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels([r["case"] for r in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(r["ours_seconds"], r["plain_seconds"]) for r in rows) * 1000 * 1.45)
    ax.set_xlabel("milliseconds per call + collect on ~10 rows (median; ratio ours/plain, Spark jobs)")
    ax.set_title("Fixed cost per step: each operator against plain Spark")
    ax.legend(fontsize=7.5, loc="upper right")
    fig.tight_layout()
    return _save(fig, "latency", "latency.json")


FIGURES: dict[str, Callable[[Any], Path | None]] = {
    "bfs": plot_bfs,
    "asof": plot_asof,
    "versioned_view": plot_versioned_view,
    "blip_join": plot_blip_join,
    "throughput": plot_throughput,
    "latency": plot_latency,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="draw only these figures")
    args = parser.parse_args(argv)
    plt = _plt()
    for name in args.only or FIGURES:
        fig = FIGURES[name](plt)
        if fig is not None:
            plt.close("all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
