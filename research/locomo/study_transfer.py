"""Design study: does a verdict chosen on LoCoMo carry over to the project's own evaluation sets?

Usage::

    python -m research.locomo.study_transfer LOCOMO_DATA_DIR [--sets test4,test5,...] [--json out.json]

The shipped-model candidate of :mod:`.study_design` (fitted on every LoCoMo
development conversation) is applied, uncalibrated, to the conversations of
``benchmarks/agent_eval`` (by default ``test4`` to ``test9``, that
evaluation's primary estimate): one memory per set, library defaults, no
``calibrate`` call. Answerable questions are the negatives of abstention, the
``abstention`` category the positives (some of those ask an unstated detail
of a remembered thing, harder than LoCoMo's never-mentioned questions).
Reported per feature and for the model: AUC, and at the model's LoCoMo
threshold the false abstention and the abstention on unanswerable questions,
next to what today's uncalibrated default verdict does on the same questions.
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
from benchmarks.locomo.data import load_folder  # noqa: E402
from benchmarks.locomo.metrics import abstention_scores, auc, evidence_recall  # noqa: E402
from benchmarks.locomo.project_sets import eval_conversation  # noqa: E402

from .signals import collect, collect_conversation  # noqa: E402
from .study_design import FEATURES  # noqa: E402
from .study_verdict import SIGNALS, TARGET_FALSE_ABSTENTION  # noqa: E402


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent.verdict import fit_model

    p = argparse.ArgumentParser(prog="python -m research.locomo.study_transfer", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="LOCOMO_DATA_DIR")
    p.add_argument("--sets", default="test4,test5,test6,test7,test8,test9")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--target", type=float, default=TARGET_FALSE_ABSTENTION,
                   help="the threshold's false abstention on the LoCoMo answerable questions (default 0.1)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    encoder = make_encoder(args.encoder, cache)
    locomo = [r for r in collect(load_folder(args.data), encoder, cache / f"signals-{args.encoder}.jsonl")
              if r["category"] >= 0]
    feats = [{n: SIGNALS[n](r) for n in FEATURES} for r in locomo]
    model = fit_model(FEATURES, [f for f, r in zip(feats, locomo) if r["category"] > 0],
                      [f for f, r in zip(feats, locomo) if r["category"] == 0])
    tau = float(np.quantile([model.log_odds(f) for f, r in zip(feats, locomo) if r["category"] > 0],
                            args.target))
    path = cache / f"signals-agent-eval-{args.encoder}.jsonl"
    rows: list[dict] = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    have = {r["conversation"] for r in rows}
    for name in args.sets.split(","):
        if name not in have:
            rows.extend(r for r in collect_conversation(eval_conversation(name), encoder) if r["category"] >= 0)
            encoder.save()
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = [r for r in rows if r["conversation"] in args.sets.split(",")]
    ans = np.array([r["category"] > 0 for r in rows])
    out: dict[str, Any] = {"sets": args.sets.split(","), "answerable": int(ans.sum()),
                           "unanswerable": int((~ans).sum()), "features": {}}
    for name in (*FEATURES, "default log-odds (today)"):
        s = np.array([SIGNALS[name](r) for r in rows])
        out["features"][name] = {"auc_here": auc(s[ans], s[~ans])}
    lo = np.array([model.log_odds({n: SIGNALS[n](r) for n in FEATURES}) for r in rows])
    abst_new = lo < tau
    abst_today = np.array([r["abstained"] for r in rows])
    rank5 = np.array([evidence_recall([h["dia"] for h in r["rank"][:5]], r["evidence"]) if r["category"] > 0 else 0.0
                      for r in rows])
    for label, abst in (("locomo_model", abst_new), ("today_default", abst_today)):
        s = abstention_scores(list(abst[~ans]), list(abst[ans]))
        out[label] = {"false_abstention": s["false_abstention"], "unanswerable_abstention": s["recall"], "f1": s["f1"],
                      "e2e_recall@5": float(np.mean(np.where(abst[ans], 0.0, rank5[ans])))}
    out["locomo_model_auc_here"] = auc(lo[ans], lo[~ans])
    out["ranking_recall@5"] = float(rank5[ans].mean())
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
