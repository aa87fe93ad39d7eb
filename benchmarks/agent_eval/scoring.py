"""Scoring the agent-memory evaluation: recall@k, abstention, means over fold splits, bootstrap intervals.

``results`` maps a retriever to one row per question: ``ranked`` (the turn ids
returned end to end), ``abstained`` and ``ranking`` (the ranking alone, gate
ignored). Pure functions of the data and those rows; no memory, no encoder.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

CATEGORIES = ("single-fact", "multi-session", "knowledge-update", "temporal", "identifier", "abstention")
RETRIEVERS = ("hybrid", "associative", "keyword", "cosine")


def recall_at(ranked: list[str], gold: list[str], k: int) -> float:
    if not gold:
        return 0.0
    return len(set(ranked[:k]) & set(gold)) / min(k, len(gold))


def score(data: dict[str, Any], results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    questions = data["questions"]
    table: dict[str, dict[str, Any]] = {}
    for mode, rows in results.items():
        per_cat: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"r1": [], "r5": [], "k1": [], "k5": []})
        tp = fp = fn = 0
        gold_hits = hits = 0
        by_subject: dict[str, list[bool]] = defaultdict(list)  # abstained, per unanswerable question's subject
        for q, res in zip(questions, rows):
            gold = q["answers"]
            if gold:
                hits += len(res["ranked"])
                gold_hits += len(set(res["ranked"]) & set(gold))
                per_cat[q["category"]]["r1"].append(recall_at(res["ranked"], gold, 1))
                per_cat[q["category"]]["r5"].append(recall_at(res["ranked"], gold, 5))
                per_cat["overall"]["r1"].append(recall_at(res["ranked"], gold, 1))
                per_cat["overall"]["r5"].append(recall_at(res["ranked"], gold, 5))
                for key in (q["category"], "overall"):
                    per_cat[key]["k1"].append(recall_at(res["ranking"], gold, 1))
                    per_cat[key]["k5"].append(recall_at(res["ranking"], gold, 5))
                fp += res["abstained"]
            else:
                tp += res["abstained"]
                fn += not res["abstained"]
                if "subject" in q:
                    by_subject[q["subject"]].append(bool(res["abstained"]))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        table[mode] = {
            "categories": {c: {"r1": float(np.mean(v["r1"])), "r5": float(np.mean(v["r5"])),
                               "k1": float(np.mean(v["k1"])), "k5": float(np.mean(v["k5"])), "n": len(v["r1"])}
                           for c, v in per_cat.items()},
            "abstention": {"precision": precision, "recall": recall, "f1": f1, "abstained": tp + fp},
            "hits": {"precision": gold_hits / hits if hits else 0.0,
                     "per_question": hits / max(1, sum(1 for q in questions if q["answers"]))},
        }
        if by_subject:
            table[mode]["abstention_by_subject"] = subject_breakdown(by_subject, fp)
    return table


def subject_breakdown(by_subject: dict[str, list[bool]], false_abstentions: int) -> dict[str, Any]:
    """Per subject label of the unanswerable questions (``never-mentioned`` or ``mentioned``), how many there
    are and the share abstained on; and the F1 with only the never-mentioned ones counted as unanswerable (the
    others left out), which is the issue's definition of an abstention question ("never-mentioned topics")."""
    out: dict[str, Any] = {label: {"n": len(v), "abstained": float(np.mean(v))} for label, v in by_subject.items()}
    never = by_subject.get("never-mentioned", [])
    tp = sum(never)
    f1 = 2 * tp / (2 * tp + false_abstentions + (len(never) - tp)) if never else 0.0
    out["f1_never_mentioned"] = f1
    return out


def mean_tables(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The element-wise mean of score() tables (several fold splits of the same questions)."""
    def mean(values: list[Any]) -> Any:
        if isinstance(values[0], dict):
            return {k: mean([v[k] for v in values]) for k in values[0]}
        if all(v == values[0] for v in values):
            return values[0]  # counts stay ints
        return float(np.mean(values))

    return mean(tables)


BOOTSTRAP_RESAMPLES = 4000


def per_question(data: dict[str, Any], results: dict[str, list[dict[str, Any]]], mode: str,
                 key: str = "r5") -> tuple[np.ndarray, np.ndarray]:
    """``(recall, abstained)`` per question for ``mode``: recall@5 end to end (``"r5"``) or of the ranking alone
    (``"k5"``), NaN for unanswerable questions; ``abstained`` as 0/1."""
    field = "ranked" if key == "r5" else "ranking"
    rows = results[mode]
    recall = np.array([recall_at(r[field], q["answers"], 5) if q["answers"] else np.nan
                       for q, r in zip(data["questions"], rows)])
    return recall, np.array([float(r["abstained"]) for r in rows])


def category_recall(data: dict[str, Any], splits: list[dict[str, list[dict[str, Any]]]], category: str,
                    mode: str, key: str = "r5") -> np.ndarray:
    """``mode``'s recall@5 on each of ``category``'s questions (``"overall"``: every answerable one), the mean
    over the fold splits: the values whose mean is the tables' figure."""
    idx = [i for i, q in enumerate(data["questions"])
           if (bool(q["answers"]) if category == "overall" else q["category"] == category)]
    if not idx:
        return np.empty(0)
    return np.mean([per_question(data, res, mode, key)[0][idx] for res in splits], axis=0)


def bootstrap_mean(values: np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``values``, resampled with replacement."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_gap(data: dict[str, Any], splits: list[dict[str, list[dict[str, Any]]]], category: str,
                  mode: str, other: str, key: str = "r5", *, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = 0) -> tuple[float, float]:
    """95% interval of ``mode``'s R@5 minus ``other``'s on ``category``: a paired bootstrap over its questions.

    Each resample draws the category's questions with replacement and takes the mean difference over the
    fold splits (the same estimator as the tables'). With few questions per category (24 to 46 here) a gap
    of several points is within sampling noise; the interval says how much.
    """
    diff = category_recall(data, splits, category, mode, key) - category_recall(data, splits, category, other, key)
    return bootstrap_mean(diff, resamples=resamples, seed=seed)


def bootstrap_f1(data: dict[str, Any], splits: list[dict[str, list[dict[str, Any]]]], mode: str = "hybrid", *,
                 subject: str | None = None, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = 0) -> tuple[float, float]:
    """95% interval of ``mode``'s abstention F1 (mean over the fold splits): a bootstrap over all questions, or
    with ``subject``, over the answerable ones and the unanswerable ones of that subject only."""
    keep = np.array([bool(q["answers"]) or subject is None or q.get("subject") == subject
                     for q in data["questions"]])
    unanswerable = np.array([not q["answers"] for q in data["questions"]])[keep]
    abstained = np.array([per_question(data, res, mode)[1] for res in splits]).astype(bool)[:, keep]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(unanswerable), size=(resamples, len(unanswerable)))
    neg, abst = unanswerable[draws][:, None, :], abstained[:, draws].transpose(1, 0, 2)  # (resamples, splits, q)
    tp = (abst & neg).sum(axis=2)
    fp = (abst & ~neg).sum(axis=2)
    fn = (~abst & neg).sum(axis=2)
    f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0).mean(axis=1)
    lo, hi = np.percentile(f1, [2.5, 97.5])
    return float(lo), float(hi)
