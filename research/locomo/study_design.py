"""The recommended design, end to end, leave one conversation out: the figures the acceptance asks for.

Usage::

    python -m research.locomo.study_design DATA_DIR [--encoder minilm] [--json out.json]

Pipeline, simulated on the cached signals of :mod:`.study_verdict`:

1. **Ranking**: the memory's ``rank()`` list, plus the turns stored just
   before and after its first three hits (same session, two on each side),
   fused by reciprocal rank fusion at weight 0.5 with the first two hits kept
   in place (:func:`.study_multihop.fuse`). ``--no-context`` turns this off.
2. **Verdict**: a logistic model over three features that need no
   calibration call: the best candidate's evidence (today's feature), the
   Zipf-weighted share of the question's content words found in the top ten
   hits, and the agreement of the keyword and semantic channels (how many of
   the top five hits both rank within their top ten). Its coefficients and
   threshold are fitted on four conversations (threshold: 10% false
   abstention on their answerable questions) and applied to the fifth; each
   conversation is held out once. The coefficients fitted on all five (what
   would ship) are printed too.
3. A yes verdict returns the ranking's top 5; a no returns nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.locomo.cache import default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import CATEGORIES, load_folder  # noqa: E402
from benchmarks.locomo.metrics import abstention_scores, cluster_bootstrap, evidence_recall, record_bootstrap, summary  # noqa: E402

from .signals import collect  # noqa: E402
from .study_multihop import fuse  # noqa: E402
from .study_verdict import SIGNALS, TARGET_FALSE_ABSTENTION  # noqa: E402

FEATURES = ("best evidence (today's feature)", "content share top 10, Zipf-weighted",
            "channel agreement (top 5 in both top 10)")
K = 5


def context_ranking(r: dict, at: dict[str, int], units: list, keep: int = 2, w: float = 0.5) -> list[str]:
    """``rank()``'s list with the turns around its first three hits fused in."""
    base = [at[h["dia"]] for h in r["rank"]]
    pos = {(u.session, int(u.dia_id.split(":")[1])): i for i, u in enumerate(units)}
    adj: list[int] = []
    for s in base[:3]:
        u = units[s]
        idx = int(u.dia_id.split(":")[1])
        for d in (-1, 1, -2, 2):
            j = pos.get((u.session, idx + d))
            if j is not None and j not in adj:
                adj.append(j)
    return [units[i].dia_id for i in fuse(base, adj, w, keep)]


def share_without_names(r: dict, df: dict[str, int], n: int, common: float) -> float:
    """The Zipf-weighted content share in the top 10 hits when the memory does not know its speakers' names:
    content words with no name exclusion, dropping instead any word found in more than ``common`` of the
    entries (a speaker's name is in most of them)."""
    from hopmem.agent.keyword import stem

    from .signals import content_words
    from .study_verdict import _stems

    words = [w for w in content_words(r["question"], set()) if df.get(stem(w), 0) <= common * n]
    if not words:
        return 1.0
    found = frozenset().union(*(_stems(h["text"]) for h in r["rank"][:10])) if r["rank"] else frozenset()
    from hopmem.agent import english

    weights = [max(0.5, 7.0 - english.zipf(w)) for w in words]
    return sum(wt for w, wt in zip(words, weights) if stem(w) in found) / sum(weights)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent.verdict import fit_model

    p = argparse.ArgumentParser(prog="python -m research.locomo.study_design", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--no-context", action="store_true")
    p.add_argument("--target", type=float, default=TARGET_FALSE_ABSTENTION,
                   help="false abstention the threshold is set for on the training conversations (default 0.1)")
    p.add_argument("--no-names", type=float, default=None, metavar="FRACTION",
                   help="do not use the speakers' names: drop content words found in more than FRACTION of the "
                        "entries instead (what a memory that does not know its speakers can do)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = {c.id: c for c in load_folder(args.data)}
    rows = [r for r in collect(list(convs.values()), make_encoder(args.encoder, cache),
                               cache / f"signals-{args.encoder}.jsonl") if r["category"] >= 0]
    feats = [{n: SIGNALS[n](r) for n in FEATURES} for r in rows]
    if args.no_names is not None:
        from .study_verdict import _stems

        dfs = {}
        for c, conv in convs.items():
            df: dict[str, int] = {}
            for u in conv.units:
                for w in _stems(u.text):
                    df[w] = df.get(w, 0) + 1
            dfs[c] = df
        for f, r in zip(feats, rows):
            f[FEATURES[1]] = share_without_names(r, dfs[r["conversation"]], len(convs[r["conversation"]].units),
                                                 args.no_names)
    ats = {c: {u.dia_id: i for i, u in enumerate(conv.units)} for c, conv in convs.items()}
    ranking = [[h["dia"] for h in r["rank"]] if args.no_context
               else context_ranking(r, ats[r["conversation"]], convs[r["conversation"]].units) for r in rows]
    out_rows = []
    models = {}
    for c in sorted(convs):
        train = [i for i, r in enumerate(rows) if r["conversation"] != c]
        model = fit_model(FEATURES, [feats[i] for i in train if rows[i]["category"] > 0],
                          [feats[i] for i in train if rows[i]["category"] == 0])
        tau = float(np.quantile([model.log_odds(feats[i]) for i in train if rows[i]["category"] > 0],
                                args.target))
        models[c] = {"weights": model.weights, "intercept": model.intercept, "tau": tau}
        for i, r in enumerate(rows):
            if r["conversation"] != c:
                continue
            abstain = model.log_odds(feats[i]) < tau
            rec = {"conversation": c, "category": r["category"], "abstained": bool(abstain)}
            if r["category"] > 0:
                rec["rank_recall"] = evidence_recall(ranking[i][:K], r["evidence"])
                rec["recall"] = 0.0 if abstain else rec["rank_recall"]
            out_rows.append(rec)
    full = fit_model(FEATURES, [f for f, r in zip(feats, rows) if r["category"] > 0],
                     [f for f, r in zip(feats, rows) if r["category"] == 0])
    full_tau = float(np.quantile([full.log_odds(f) for f, r in zip(feats, rows) if r["category"] > 0],
                                 args.target))
    ans = [r for r in out_rows if r["category"] > 0]
    groups = [[r for r in out_rows if r["conversation"] == c] for c in sorted(convs)]

    def abst(rs: list[dict]) -> dict[str, float]:
        return abstention_scores([r["abstained"] for r in rs if r["category"] == 0],
                                 [r["abstained"] for r in rs if r["category"] > 0])

    result: dict[str, Any] = {
        "features": list(FEATURES), "context_turns": not args.no_context,
        "e2e_recall@5": {**summary([r["recall"] for r in ans]), "ci95_conversations": list(cluster_bootstrap(
            [[r for r in g if r["category"] > 0] for g in groups],
            lambda rs: float(np.mean([r["recall"] for r in rs]))))},
        "ranking_recall@5": summary([r["rank_recall"] for r in ans]),
        "by_category": {label: {"e2e": summary([r["recall"] for r in ans if r["category"] == cat]),
                                "ranking": summary([r["rank_recall"] for r in ans if r["category"] == cat])}
                        for cat, label in CATEGORIES.items()},
        "abstention": {k: {"value": v, "ci95": list(record_bootstrap(out_rows, lambda rs, k=k: abst(rs)[k], n=1000)),
                           "ci95_conversations": list(cluster_bootstrap(groups, lambda rs, k=k: abst(rs)[k]))}
                       for k, v in abst(out_rows).items()},
        "loco_models": models,
        "shipped_model": {"features": list(FEATURES), "weights": list(full.weights), "intercept": full.intercept,
                          "tau": full_tau},
    }
    e = result["e2e_recall@5"]
    print(f"e2e R@5 {e['mean']:.3f} {e['ci95']} (conversations {e['ci95_conversations']}); ranking R@5 "
          f"{result['ranking_recall@5']['mean']:.3f}")
    for label, v in result["by_category"].items():
        print(f"  {label}: e2e {v['e2e']['mean']:.3f} {v['e2e']['ci95']}, ranking {v['ranking']['mean']:.3f}")
    for k, v in result["abstention"].items():
        print(f"  {k}: {v['value']:.3f} {v['ci95']} (conversations {v['ci95_conversations']})")
    print("shipped model:", json.dumps(result["shipped_model"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
