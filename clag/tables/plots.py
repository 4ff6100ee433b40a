"""PNG plots beside the tables, drawn from the same long frames the tables are.

Bars are ours with the bootstrap 95% interval as error bars; black ticks are
the paper's numbers, so a glance shows both the gap and whether the gap is
inside our noise. Figures are built with ``matplotlib.figure.Figure`` (no
pyplot state, no GUI backend), so rendering works headless and in threads.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

log = logging.getLogger(__name__)


def _errors(frame: pd.DataFrame) -> np.ndarray:
    """Asymmetric error-bar lengths from ``ci_low``/``ci_high`` (0 where there is no interval)."""
    ours = frame["ours"].astype(float)
    low = (ours - frame["ci_low"].astype(float)).fillna(0).clip(lower=0)
    high = (frame["ci_high"].astype(float) - ours).fillna(0).clip(lower=0)
    return np.vstack([low.to_numpy(), high.to_numpy()])


def _grouped_bars(ax: Axes, frame: pd.DataFrame, group_col: str, series_col: str) -> None:
    """Bars of ``ours`` per (group, series) with CI error bars, and the paper's values as ticks."""
    groups = list(dict.fromkeys(frame[group_col]))
    series = list(dict.fromkeys(frame[series_col]))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, name in enumerate(series):
        part = frame[frame[series_col] == name].set_index(group_col).reindex(groups)
        offsets = x - 0.4 + width * (i + 0.5)
        ours = part["ours"].astype(float).to_numpy()  # NaN: no bar where there is no run
        ax.bar(offsets, ours, width, yerr=_errors(part.reset_index()), capsize=2, label=name)
        paper = part["paper"].astype(float).to_numpy()
        ax.scatter(offsets, paper, marker="_", s=200, color="black", zorder=3, label="paper" if i == 0 else None)
    ax.set_xticks(x, groups)
    ax.legend(fontsize=7, ncols=2)


def _save(figure: Figure, path: Path | None) -> Path | None:
    if path is None:
        return None
    figure.savefig(path, dpi=120, bbox_inches="tight")
    log.info("wrote %s", path)
    return path


def _metric_bars(long: pd.DataFrame, path: Path | None, metric: str, size: tuple[int, int], title: str) -> Path | None:
    """Grouped bars of one metric: ours with intervals, the paper's as ticks."""
    figure = Figure(figsize=size)
    ax = figure.subplots()
    _grouped_bars(ax, long[long["metric"] == metric], "group", "row")
    ax.set_ylabel(f"{metric.upper()} (%)")
    ax.set_title(f"{title} (bars: ours, 95% CI; ticks: paper)")
    return _save(figure, path)


def plot_answer_quality(long: pd.DataFrame, path: Path | None = None, metric: str = "f1") -> Path | None:
    """F1 by dataset and method (Table 1's frame)."""
    return _metric_bars(long, path, metric, (8, 4), "Answer quality by method and dataset")


def plot_categories(long: pd.DataFrame, path: Path | None = None, metric: str = "f1") -> Path | None:
    """LoCoMo F1 per question category and method (Table 3's frame)."""
    return _metric_bars(long, path, metric, (9, 4), "LoCoMo by question category")


def plot_latency(long: pd.DataFrame, path: Path | None = None) -> Path | None:
    """Retrieval and end-to-end latency per method (Table 2's frame), log scale."""
    figure = Figure(figsize=(8, 4))
    ax = figure.subplots()
    frame = long.assign(stage=long["metric"].map({"retrieval_ms": "retrieval", "e2e_ms": "end-to-end"}))
    _grouped_bars(ax, frame, "row", "stage")
    ax.set_yscale("log")
    ax.set_ylabel("ms per query (log)")
    ax.set_title("Latency (bars: ours, 95% CI; ticks: paper on an A100)")
    return _save(figure, path)


def plot_clusters_vs_tau(long: pd.DataFrame, path: Path | None = None) -> Path | None:
    """Average number of clusters and F1 against tau (Table 10's frame)."""
    figure = Figure(figsize=(9, 3.5))
    left, right = figure.subplots(1, 2)
    for ax, metric, label in ((left, "avg_clusters", "avg. # clusters"), (right, "f1", "F1 (%)")):
        frame = long[long["metric"] == metric]
        tau = frame["variant"].str.split("=").str[1].astype(float).to_numpy()
        ours = frame["ours"].astype(float)
        ax.errorbar(tau, ours, yerr=_errors(frame), marker="o", capsize=3, label="ours")
        ax.plot(tau, frame["paper"].astype(float), marker="x", linestyle="--", color="black", label="paper")
        ax.set_xlabel("tau (new-cluster threshold)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    figure.suptitle("CLAG on LoCoMo: sensitivity to tau")
    return _save(figure, path)


def plot_attribution(
    rows: list[tuple[str, str, Counter[str]]], classes: tuple[str, ...], path: Path | None = None
) -> Path | None:
    """Stacked horizontal bars, one per dataset and method: the share of its wrong answers in each
    attribution class (:mod:`clag.metrics.attribution`), with the number of wrong answers at the end."""
    rows = [row for row in rows if row[2]["wrong"]]
    if not rows:
        return None
    figure = Figure(figsize=(9, 0.35 * len(rows) + 1.6))
    ax = figure.subplots()
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for name in classes:
        share = np.array([100 * counts[name] / counts["wrong"] for _, _, counts in rows])
        ax.barh(y, share, left=left, label=name)
        left += share
    ax.set_yticks(y, [f"{dataset} / {method} ({counts['wrong']})" for dataset, method, counts in rows], fontsize=8)
    ax.set_xlabel("% of the run's wrong answers")
    ax.set_xlim(0, 100)
    ax.legend(fontsize=7, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title("Where each wrong answer lost its evidence")
    return _save(figure, path)


def plot_cluster_map(vectors: np.ndarray, labels: list[str], path: Path | None = None, title: str = "") -> Path | None:
    """The notes of one memory snapshot in 2-D (PCA of their embeddings), coloured by CLAG cluster."""
    from sklearn.decomposition import PCA

    points = PCA(n_components=2, random_state=0).fit_transform(np.asarray(vectors, dtype=np.float64))
    figure = Figure(figsize=(6, 5))
    ax = figure.subplots()
    names = sorted(set(labels), key=str)
    for cluster in names:
        mask = np.array([label == cluster for label in labels])
        ax.scatter(points[mask, 0], points[mask, 1], s=10, label=f"{cluster} ({mask.sum()} notes)")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title or f"CLAG clusters (PCA of note embeddings), {len(names)} clusters")
    if len(names) <= 12:  # beyond that a legend hides the picture
        ax.legend(fontsize=7, markerscale=2)
    return _save(figure, path)


PLOTS: dict[str, Callable[[pd.DataFrame, Path | None], Path | None]] = {
    "answer_quality": plot_answer_quality,
    "categories": plot_categories,
    "latency": plot_latency,
    "clusters_vs_tau": plot_clusters_vs_tau,
}
"""Plots a table spec may name in its ``plot`` key; each takes that table's long frame."""
