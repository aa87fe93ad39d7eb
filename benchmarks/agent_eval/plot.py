"""The evaluation's figure: recall@5 per category for the four retrievers, with 95% intervals, and abstention.

Three panels, from the per-question results of one or more fold splits
(:func:`benchmarks.agent_eval.run.evaluate`):

1. recall@5 end to end (an abstention on an answerable question is a miss),
   per category and overall;
2. recall@5 of the ranking alone (the gate ignored);
3. abstention precision, recall and F1 per retriever (cosine top-k never
   abstains, so it has none).

Each recall point carries the 95% bootstrap interval of its mean over the
category's questions (:func:`~benchmarks.agent_eval.scoring.bootstrap_mean`),
and the F1 bars the interval of :func:`~benchmarks.agent_eval.scoring.bootstrap_f1`:
with 24 to 46 questions a category, a gap of a few points is often inside
them, and the figure should show it rather than hide it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.agent_eval.scoring import (
    CATEGORIES,
    RETRIEVERS,
    bootstrap_f1,
    bootstrap_mean,
    category_recall,
    mean_tables,
    score,
)

COLOURS = {"hybrid": "#1f5fa8", "associative": "#6aa84f", "keyword": "#e69138", "cosine": "#8e8e8e"}
GROUPS = tuple(c for c in CATEGORIES if c != "abstention") + ("overall",)

Splits = list[dict[str, list[dict[str, Any]]]]


def recall_bars(data: dict[str, Any], splits: Splits, key: str) -> dict[str, np.ndarray]:
    """Per retriever, rows ``(mean, low, high)`` for each of :data:`GROUPS`: recall@5 end to end (``"r5"``) or of
    the ranking alone (``"k5"``), the mean over the fold splits and its 95% bootstrap interval (NaN for a
    category without questions)."""
    out = {}
    for mode in RETRIEVERS:
        rows = []
        for group in GROUPS:
            values = category_recall(data, splits, group, mode, key)
            rows.append((float(values.mean()), *bootstrap_mean(values)) if len(values) else (np.nan,) * 3)
        out[mode] = np.array(rows)
    return out


def abstention_bars(data: dict[str, Any], splits: Splits) -> dict[str, dict[str, float]]:
    """Per abstaining retriever: precision, recall and F1 (means over the splits), and F1's 95% interval."""
    table = mean_tables([score(data, res) for res in splits])
    out = {}
    for mode in RETRIEVERS:
        if mode == "cosine":
            continue
        a = table[mode]["abstention"]
        lo, hi = bootstrap_f1(data, splits, mode)
        out[mode] = {"precision": a["precision"], "recall": a["recall"], "f1": a["f1"], "f1_low": lo, "f1_high": hi}
    return out


def _points(ax: Any, labels: list[str], series: dict[str, np.ndarray], title: str) -> None:
    """One marker per retriever and category, side by side, with its interval: points, not bars, so that the
    axis can start where the data do and gaps of a few points stay visible."""
    x = np.arange(len(labels))
    offset = 0.6 / max(1, len(series) - 1)
    for j, (mode, rows) in enumerate(series.items()):
        mean, lo, hi = 100 * rows[:, 0], 100 * rows[:, 1], 100 * rows[:, 2]
        ax.errorbar(x + (j - (len(series) - 1) / 2) * offset, mean, yerr=np.vstack([mean - lo, hi - mean]),
                    fmt="o", markersize=5, color=COLOURS[mode], label=mode, elinewidth=1, capsize=2)
    low = np.nanmin([100 * rows[:, 1] for rows in series.values()]) if series else 0.0
    ax.set_ylim(max(0.0, np.floor((low - 5) / 10) * 10), 102)
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def figure(data: dict[str, Any], splits: Splits, path: str | Path, *, title: str = "") -> Path:
    """Draw the three panels for ``splits`` (one results dict per fold split) and save a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not splits:
        raise ValueError("figure: no fold splits to plot")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [3, 3, 2]})
    labels = [g.replace("knowledge-", "knowl.-") for g in GROUPS]
    _points(axes[0], labels, recall_bars(data, splits, "r5"), "recall@5 end to end (abstention = miss)")
    _points(axes[1], labels, recall_bars(data, splits, "k5"), "recall@5, ranking alone (gate ignored)")
    bottom = min(axes[0].get_ylim()[0], axes[1].get_ylim()[0])
    for ax in axes[:2]:
        ax.set_ylim(bottom, 102)  # the same scale, so that end to end and ranking alone compare by eye
    axes[0].set_ylabel("% (95% bootstrap interval)")
    abst = abstention_bars(data, splits)
    measures = ("precision", "recall", "f1")
    x = np.arange(len(measures))
    width = 0.8 / len(abst)
    for j, (mode, a) in enumerate(abst.items()):
        values = np.array([100 * a[m] for m in measures])
        err = np.zeros((2, len(measures)))
        err[:, 2] = [values[2] - 100 * a["f1_low"], 100 * a["f1_high"] - values[2]]
        axes[2].bar(x + (j - (len(abst) - 1) / 2) * width, values, width, color=COLOURS[mode], label=mode,
                    yerr=err, error_kw={"elinewidth": 0.8, "capsize": 1.5})
    axes[2].axhline(80, color="black", linewidth=0.8, linestyle="--")
    axes[2].text(-0.45, 81, "F1 target", ha="left", va="bottom", fontsize=8)
    axes[2].set_xticks(x, ["precision", "recall", "F1"])
    axes[2].set_ylim(0, 105)
    axes[2].set_title("abstention (positive = abstained)", fontsize=10)
    axes[2].grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left", ncols=2)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path
