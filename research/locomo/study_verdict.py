"""Design study: which verdict separates answerable from never-mentioned questions without ``calibrate``?

Usage::

    python -m research.locomo.study_verdict DATA_DIR [--encoder minilm] [--json out.json]

For every candidate signal (higher = "something relevant is remembered") it
reports, pooled over the conversations' answerable (negatives of abstention)
and never-mentioned (positives) questions:

* AUC (answerable above never-mentioned), with a 95% bootstrap interval over questions;
* the operating point at <= 10% false abstention chosen **leave one
  conversation out** (the threshold is the 10th percentile of the signal over
  the *other* conversations' answerable questions, applied to the held-out
  one): false abstention, never-mentioned abstention, abstention F1, and the
  end-to-end evidence recall@5 that follows when a yes verdict returns the
  memory's ranking (``rank()``'s top 5) and a no returns nothing;
* **self-calibrated**: the threshold each memory sets from its own probes
  (questions made from its entries vs the shipped generic questions, see
  :mod:`.probes`), no labelled question at all.

Combinations are logistic models (:func:`hopmem.agent.verdict.fit_model`)
fitted leave-one-conversation-out (or, self-calibrated, on the memory's probes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.locomo.cache import default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import load_folder  # noqa: E402
from benchmarks.locomo.metrics import abstention_scores, auc, evidence_recall, record_bootstrap  # noqa: E402

from .signals import collect  # noqa: E402

TARGET_FALSE_ABSTENTION = 0.10
K = 5


@cache
def _stems(text: str) -> frozenset[str]:
    from hopmem.agent.keyword import query_terms, stem

    return frozenset(stem(t) for t in query_terms(text))


def _word_stem(w: str) -> str:
    from hopmem.agent.keyword import stem

    return stem(w)


def share(r: dict, k: int | None, weight: str = "uniform") -> float:
    """Weighted share of the question's content words found in the top ``k`` hits (``None``: anywhere in
    the memory). ``weight``: ``uniform``; ``zipf`` (``max(0.5, 7 - zipf)``: specific words weigh more);
    ``idf`` (the word's IDF in the memory, a word it lacks weighing most). No content word: 1."""
    words = r["words"]
    if not words:
        return 1.0
    if k is not None:
        found = frozenset().union(*(_stems(h["text"]) for h in r["rank"][:k])) if r["rank"] else frozenset()
    total = got = 0.0
    n = r["entries"]
    for w in words:
        if weight == "zipf":
            wt = max(0.5, 7.0 - w["zipf"])
        elif weight == "idf":
            wt = math.log((n + 1) / (w["df"] + 0.5))
        else:
            wt = 1.0
        present = w["df"] > 0 if k is None else _word_stem(w["w"]) in found
        total += wt
        got += wt * present
    return got / total


def agreement(r: dict, k: int = 5, depth: int = 10) -> float:
    """How many of the top ``k`` hits both the semantic and the keyword list rank within ``depth``."""
    return float(sum(1 for h in r["rank"][:k]
                     if h["ranks"].get("semantic", 99) <= depth and h["ranks"].get("keyword", 99) <= depth))


def top_both(r: dict, depth: int = 3) -> float:
    """1 if some hit is within ``depth`` of both the semantic and the keyword list."""
    return float(any(h["ranks"].get("semantic", 99) <= depth and h["ranks"].get("keyword", 99) <= depth
                     for h in r["rank"]))


SIGNALS: dict[str, Callable[[dict], float]] = {
    "default log-odds (today)": lambda r: r["statistic"] if r["statistic"] is not None else -50.0,
    "dense top-1 cosine": lambda r: r["dense_top1"],
    "dense margin (top-1 - mean top-10)": lambda r: r["dense_top1"] - r["dense_top10"],
    "centered top-1 cosine": lambda r: r["centered_top1"],
    "centered margin": lambda r: r["centered_top1"] - r["centered_top10"],
    "best evidence (today's feature)": lambda r: r["features"].get("evidence", 0.0),
    "- novelty (today's feature)": lambda r: -r["novelty"],
    "first contact (read fidelity)": lambda r: r["first_contact"] or 0.0,
    "content share, top 5": lambda r: share(r, 5),
    "content share, top 10": lambda r: share(r, 10),
    "content share, top 20": lambda r: share(r, 20),
    "content share, whole memory": lambda r: share(r, None),
    "content share top 10, Zipf-weighted": lambda r: share(r, 10, "zipf"),
    "content share top 10, IDF-weighted": lambda r: share(r, 10, "idf"),
    "content share top 5, Zipf-weighted": lambda r: share(r, 5, "zipf"),
    "channel agreement (top 5 in both top 10)": agreement,
    "top hit in both channels' top 3": top_both,
}

#: Feature sets of the logistic combinations (names of SIGNALS).
COMBOS: dict[str, tuple[str, ...]] = {
    "share10z + centered top-1": ("content share top 10, Zipf-weighted", "centered top-1 cosine"),
    "share10z + dense top-1": ("content share top 10, Zipf-weighted", "dense top-1 cosine"),
    "share10z + centered top-1 + agreement": ("content share top 10, Zipf-weighted", "centered top-1 cosine",
                                             "channel agreement (top 5 in both top 10)"),
    "share10z + share memory + centered top-1 + margin": (
        "content share top 10, Zipf-weighted", "content share, whole memory", "centered top-1 cosine",
        "centered margin"),
    "best evidence + share10z": ("best evidence (today's feature)", "content share top 10, Zipf-weighted"),
    "best evidence + share10z + agreement": ("best evidence (today's feature)",
                                             "content share top 10, Zipf-weighted",
                                             "channel agreement (top 5 in both top 10)"),
    "best evidence + share10z + centered top-1 + agreement": (
        "best evidence (today's feature)", "content share top 10, Zipf-weighted", "centered top-1 cosine",
        "channel agreement (top 5 in both top 10)"),
    "share10z + today's 4 features": ("content share top 10, Zipf-weighted",
                                      "best evidence (today's feature)", "- novelty (today's feature)",
                                      "centered margin", "centered top-1 cosine"),
}


def rank_recall(r: dict) -> float:
    return evidence_recall([h["dia"] for h in r["rank"][:K]], r["evidence"])


def operating(records: list[dict], scores: np.ndarray, thresholds: dict[str, float]) -> dict[str, Any]:
    """Outcome when each conversation's questions abstain below that conversation's threshold."""
    abst = np.array([s < thresholds[r["conversation"]] for r, s in zip(records, scores)])
    ans = np.array([r["category"] > 0 for r in records])
    rows = [{"abstained": bool(a), "category": r["category"],
             "recall": 0.0 if a or r["category"] <= 0 else rank_recall(r)} for r, a in zip(records, abst)]
    ab = abstention_scores(list(abst[~ans]), list(abst[ans]))
    e2e = [x["recall"] for x in rows if x["category"] > 0]
    mh = [x["recall"] for x in rows if x["category"] == 1]
    return {"false_abstention": ab["false_abstention"], "never_mentioned_abstention": ab["recall"],
            "f1": ab["f1"], "e2e_recall@5": float(np.mean(e2e)), "multihop_e2e_recall@5": float(np.mean(mh)),
            "f1_ci95": list(record_bootstrap(rows, lambda rs: abstention_scores(
                [x["abstained"] for x in rs if x["category"] == 0],
                [x["abstained"] for x in rs if x["category"] > 0])["f1"], n=500)),
            "e2e_ci95": list(record_bootstrap([x for x in rows if x["category"] > 0],
                                              lambda rs: float(np.mean([x["recall"] for x in rs])), n=500))}


def loco_thresholds(records: list[dict], scores: np.ndarray) -> dict[str, float]:
    """Per held-out conversation: the 10th percentile of the other conversations' answerable scores."""
    convs = sorted({r["conversation"] for r in records})
    out = {}
    for c in convs:
        train = [s for r, s in zip(records, scores) if r["category"] > 0 and r["conversation"] != c]
        out[c] = float(np.quantile(train, TARGET_FALSE_ABSTENTION))
    return out


def self_thresholds(probes: list[dict], probe_scores: np.ndarray, rule: str) -> dict[str, float]:
    """Per conversation, from its own probes only: ``q10`` the 10th percentile of the entry probes;
    ``balanced`` the threshold that best separates entry probes from generic questions (balanced accuracy)."""
    out = {}
    for c in sorted({r["conversation"] for r in probes}):
        pos = np.array([s for r, s in zip(probes, probe_scores) if r["conversation"] == c and r["category"] == -1])
        neg = np.array([s for r, s in zip(probes, probe_scores) if r["conversation"] == c and r["category"] == -2])
        if rule == "q10":
            out[c] = float(np.quantile(pos, TARGET_FALSE_ABSTENTION))
        else:
            cands = np.unique(np.concatenate([pos, neg]))
            best = max(cands, key=lambda t: ((pos >= t).mean() + (neg < t).mean(), -t))
            out[c] = float(best)
    return out


def combo_scores(records: list[dict], names: Sequence[str], train_of: Callable[[str], list[int]],
                 positives: Callable[[dict], bool]) -> np.ndarray:
    """Log-odds of a logistic model over ``names``, fitted per conversation on ``train_of(conv)``'s records."""
    from hopmem.agent.verdict import fit_model

    feats = [{n: SIGNALS[n](r) for n in names} for r in records]
    out = np.empty(len(records))
    for c in sorted({r["conversation"] for r in records}):
        train = train_of(c)
        model = fit_model(tuple(names), [feats[i] for i in train if positives(records[i])],
                          [feats[i] for i in train if not positives(records[i])])
        for i, r in enumerate(records):
            if r["conversation"] == c:
                out[i] = model.log_odds(feats[i])
    return out


def study(rows: list[dict]) -> dict[str, Any]:
    questions = [r for r in rows if r["category"] >= 0]
    probes = [r for r in rows if r["category"] < 0]
    ans = np.array([r["category"] > 0 for r in questions])
    results: dict[str, Any] = {"n_answerable": int(ans.sum()), "n_never_mentioned": int((~ans).sum()),
                               "rank_recall@5": float(np.mean([rank_recall(r) for r in questions
                                                               if r["category"] > 0])),
                               "signals": {}, "combinations": {}}
    today = np.array([not r["abstained"] for r in questions])
    results["today"] = {"false_abstention": float(1 - today[ans].mean()),
                        "never_mentioned_abstention": float(1 - today[~ans].mean())}
    for name, fn in SIGNALS.items():
        s = np.array([fn(r) for r in questions])
        p = np.array([fn(r) for r in probes])
        a = auc(s[ans], s[~ans])
        idx = np.arange(len(s))
        lo, hi = record_bootstrap(list(idx),
                                  lambda ii: auc(s[[i for i in ii if ans[i]]], s[[i for i in ii if not ans[i]]]),
                                  n=300)
        per_conv = [auc(s[[i for i, r in enumerate(questions) if r["conversation"] == c and ans[i]]],
                        s[[i for i, r in enumerate(questions) if r["conversation"] == c and not ans[i]]])
                    for c in sorted({r["conversation"] for r in questions})]
        results["signals"][name] = {
            "auc": a, "auc_ci95": [lo, hi], "auc_per_conversation": per_conv,
            "probe_auc": auc(p[[r["category"] == -1 for r in probes]], p[[r["category"] == -2 for r in probes]]),
            "loco": operating(questions, s, loco_thresholds(questions, s)),
            "self_q10": operating(questions, s, self_thresholds(probes, p, "q10")),
            "self_balanced": operating(questions, s, self_thresholds(probes, p, "balanced")),
        }
    convs = sorted({r["conversation"] for r in questions})
    for name, names in COMBOS.items():
        s = combo_scores(questions, names,
                         lambda c: [i for i, r in enumerate(questions) if r["conversation"] != c],
                         lambda r: r["category"] > 0)
        both = questions + probes
        sp = combo_scores(both, names,
                          lambda c: [i for i, r in enumerate(both) if r["conversation"] == c and r["category"] < 0],
                          lambda r: r["category"] == -1 or r["category"] > 0)[:len(questions)]
        pp = combo_scores(probes, names,
                          lambda c: [i for i, r in enumerate(probes) if r["conversation"] == c],
                          lambda r: r["category"] == -1)
        results["combinations"][name] = {
            "features": list(names), "auc_loco_model": auc(s[ans], s[~ans]),
            "loco": operating(questions, s, loco_thresholds(questions, s)),
            "auc_self_model": auc(sp[ans], sp[~ans]),
            "self_balanced": operating(questions, sp, self_thresholds(probes, pp, "balanced")),
        }
    results["conversations"] = convs
    return results


def table(results: dict[str, Any]) -> str:
    lines = ["| signal | AUC [95% CI] | LOCO: false abst. | LOCO: never-mentioned abst. | LOCO: F1 | "
             "LOCO: e2e R@5 | LOCO: multi-hop e2e | self-cal (balanced): FA / NM / e2e |",
             "|---|---|---|---|---|---|---|---|"]
    for name, v in results["signals"].items():
        lo_, hi_ = v["auc_ci95"]
        loco, sb = v["loco"], v["self_balanced"]
        lines.append(f"| {name} | {v['auc']:.3f} [{lo_:.3f}, {hi_:.3f}] | {loco['false_abstention']:.3f} | "
                     f"{loco['never_mentioned_abstention']:.3f} | {loco['f1']:.3f} | {loco['e2e_recall@5']:.3f} | "
                     f"{loco['multihop_e2e_recall@5']:.3f} | {sb['false_abstention']:.3f} / "
                     f"{sb['never_mentioned_abstention']:.3f} / {sb['e2e_recall@5']:.3f} |")
    for name, v in results["combinations"].items():
        loco, sb = v["loco"], v["self_balanced"]
        lines.append(f"| logistic: {name} | {v['auc_loco_model']:.3f} (LOCO model) | {loco['false_abstention']:.3f} | "
                     f"{loco['never_mentioned_abstention']:.3f} | {loco['f1']:.3f} | {loco['e2e_recall@5']:.3f} | "
                     f"{loco['multihop_e2e_recall@5']:.3f} | {sb['false_abstention']:.3f} / "
                     f"{sb['never_mentioned_abstention']:.3f} / {sb['e2e_recall@5']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m research.locomo.study_verdict", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = load_folder(args.data)
    rows = collect(convs, make_encoder(args.encoder, cache), cache / f"signals-{args.encoder}.jsonl")
    results = study(rows)
    print(f"{results['n_answerable']} answerable, {results['n_never_mentioned']} never-mentioned; "
          f"ranking alone R@5 {results['rank_recall@5']:.3f}; today: {results['today']}")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
