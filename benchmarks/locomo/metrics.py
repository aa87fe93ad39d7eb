"""Scores and intervals: evidence recall@k and hit@k, abstention precision/recall/F1, AUC, bootstraps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["evidence_recall", "hit", "abstention_scores", "auc", "bootstrap", "cluster_bootstrap", "percentiles",
           "summary"]

BOOTSTRAP = 2000


def evidence_recall(retrieved: Sequence[str], evidence: Sequence[str]) -> float:
    """Share of the evidence turns among the retrieved (LoCoMo's ``recall_acc``); 0 when nothing is retrieved."""
    got = set(retrieved)
    return sum(1 for e in evidence if e in got) / len(evidence)


def hit(retrieved: Sequence[str], evidence: Sequence[str]) -> float:
    return 1.0 if set(retrieved) & set(evidence) else 0.0


def abstention_scores(abstained_never: Sequence[bool], abstained_answerable: Sequence[bool]) -> dict[str, float]:
    """Never-mentioned questions are the positives: abstaining on one is a true positive."""
    tp = float(np.sum(abstained_never))
    fn = len(abstained_never) - tp
    fp = float(np.sum(abstained_answerable))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "false_abstention": fp / len(abstained_answerable) if len(abstained_answerable) else 0.0,
            "never_mentioned_abstention": recall}


def auc(positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting half (Mann-Whitney)."""
    pos = np.asarray(positive, float)
    neg = np.asarray(negative, float)
    if not len(pos) or not len(neg):
        return float("nan")
    allv = np.concatenate([pos, neg])
    order = allv.argsort(kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    i = 0
    while i < len(allv):  # average ranks over ties
        j = i
        while j + 1 < len(allv) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))


def bootstrap(values: Sequence[float], *, seed: int = 0, n: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile interval of the mean, resampling questions."""
    v = np.asarray(values, float)
    if len(v) < 2:
        return (float(v.mean()) if len(v) else float("nan"),) * 2
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def cluster_bootstrap(groups: Sequence[Sequence[dict]], statistic: Callable[[list[dict]], float], *,
                      seed: int = 0, n: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile interval of ``statistic`` over records, resampling whole conversations (clusters)."""
    if len(groups) < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(n):
        pick = rng.integers(0, len(groups), size=len(groups))
        records = [r for g in pick for r in groups[g]]
        stats.append(statistic(records))
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def record_bootstrap(records: Sequence[dict], statistic: Callable[[list[dict]], float], *, seed: int = 0,
                     n: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile interval of ``statistic``, resampling records (questions) with replacement."""
    rng = np.random.default_rng(seed)
    records = list(records)
    stats = [statistic([records[i] for i in rng.integers(0, len(records), size=len(records))]) for _ in range(n)]
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, float)
    if not len(v):
        return {"p50": float("nan"), "p95": float("nan")}
    return {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95))}


def summary(values: Sequence[float], seed: int = 0) -> dict[str, Any]:
    lo, hi = bootstrap(values, seed=seed)
    return {"mean": float(np.mean(values)) if len(values) else float("nan"), "ci95": [lo, hi], "n": len(values)}
