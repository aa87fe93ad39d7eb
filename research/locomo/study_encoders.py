"""Two encoders compared on LoCoMo: the dense baseline under each prefix choice, and paired differences of two runs.

Usage::

    python -m research.locomo.study_encoders LOCOMO_DATA_DIR [--cache DIR] [--limit 5]
        [--runs minilm.jsonl e5.jsonl ...] [--json out.json]

**Dense baseline.** Cosine top-k over each conversation's turns with the raw
vectors of: all-MiniLM-L6-v2; multilingual-e5-small with ``"query: "`` on every
text (what :class:`benchmarks.locomo.e5.E5SmallEncoder` does by default); with
``"passage: "`` on every text (``role="passage"``); and the model's intended
asymmetric use, ``"passage: "`` on the turns and ``"query: "`` on the questions,
which the one-``encode`` encoder protocol cannot express (a memory encodes
what it stores and what it is asked with the same call). Vectors come from the
cache that :mod:`.run` fills (``--encoder minilm``, ``e5`` and ``e5-passage``):
run those first, or this script encodes what is missing.

**Paired differences.** ``--runs`` takes :mod:`.run`'s ``--records`` files (the
first is the reference) and reports, for each system, the mean difference of
evidence recall@k on the same questions with a 95% bootstrap interval over
questions, overall and per category.
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

from benchmarks.locomo.baselines import dense_ranking  # noqa: E402
from benchmarks.locomo.cache import default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import CATEGORIES, load_folder  # noqa: E402
from benchmarks.locomo.metrics import bootstrap, evidence_recall, summary  # noqa: E402

#: Dense variants: name -> (encoder for the turns, encoder for the questions), as ``make_encoder`` kinds.
VARIANTS = {
    "minilm": ("minilm", "minilm"),
    "e5 query/query": ("e5", "e5"),
    "e5 passage/passage": ("e5-passage", "e5-passage"),
    "e5 passage/query (asymmetric)": ("e5-passage", "e5"),
}
SYSTEMS = ("agent", "agent_rank", "bm25", "dense", "rrf")


def _paired(a: list[float], b: list[float]) -> dict[str, Any]:
    d = np.asarray(b, float) - np.asarray(a, float)
    lo, hi = bootstrap(d)
    return {"mean": float(d.mean()), "ci95": [lo, hi], "n": len(d)}


def dense_study(data: str, cache: Path | None, k: int) -> dict[str, Any]:
    convs = load_folder(data)
    encoders = {kind: make_encoder(kind, cache) for pair in VARIANTS.values() for kind in pair}
    scores: dict[str, list[float]] = {name: [] for name in VARIANTS}
    categories: list[int] = []
    for conv in convs:
        units = [u.dia_id for u in conv.units]
        texts = [u.text for u in conv.units]
        vecs = {kind: enc.encode(texts) for kind, enc in encoders.items()}
        questions = [q for q in conv.questions]
        qvecs = {kind: enc.encode([q.text for q in questions]) for kind, enc in encoders.items()}
        for i, q in enumerate(questions):
            categories.append(q.category)
            for name, (turns, asked) in VARIANTS.items():
                got = [units[j] for j in dense_ranking(vecs[turns], qvecs[asked][i])[:k]]
                scores[name].append(evidence_recall(got, q.evidence))
    for enc in encoders.values():
        enc.save()
    out: dict[str, Any] = {"limit": k, "variants": {}}
    for name, values in scores.items():
        entry: dict[str, Any] = {f"recall@{k}": summary(values)}
        if name != "minilm":
            entry["minus_minilm"] = _paired(scores["minilm"], values)
        entry["by_category"] = {label: summary([v for v, c in zip(values, categories) if c == cat])
                                for cat, label in CATEGORIES.items()}
        out["variants"][name] = entry
    return out


def paired_runs(paths: Sequence[str]) -> dict[str, Any]:
    runs = []
    for path in paths:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        runs.append({(r["conversation"], r["question"]): r for r in rows if r["category"] > 0})
    ref = runs[0]
    out: dict[str, Any] = {"reference": str(paths[0]), "against": {}}
    for path, run in zip(paths[1:], runs[1:]):
        keys = [key for key in ref if key in run]
        entry: dict[str, Any] = {}
        for system in SYSTEMS:
            col = f"recall_{system}"
            entry[system] = {"all": _paired([ref[key][col] for key in keys], [run[key][col] for key in keys])}
            for cat, label in CATEGORIES.items():
                ks = [key for key in keys if ref[key]["category"] == cat]
                entry[system][label] = _paired([ref[key][col] for key in ks], [run[key][col] for key in ks])
        out["against"][str(path)] = entry
    return out


def _fmt(s: dict[str, Any], signed: bool = False) -> str:
    lo, hi = s["ci95"]
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(s['mean'])} [{f.format(lo)}, {f.format(hi)}]"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m research.locomo.study_encoders", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="LOCOMO_DATA_DIR")
    p.add_argument("--cache", default=None, help="the embedding cache folder run.py filled")
    p.add_argument("--limit", type=int, default=5)
    p.add_argument("--runs", nargs="+", default=None, metavar="RECORDS",
                   help="run.py --records files to compare, the first as the reference")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    out: dict[str, Any] = {"dense": dense_study(args.data, cache, args.limit)}
    k = args.limit
    print(f"dense cosine top-{k}, evidence recall@{k} [95% CI, questions]; difference from MiniLM, paired")
    print("| variant | recall@k | minus MiniLM | " + " | ".join(CATEGORIES.values()) + " |")
    print("|---|---|---|" + "---|" * len(CATEGORIES))
    for name, entry in out["dense"]["variants"].items():
        diff = _fmt(entry["minus_minilm"], signed=True) if "minus_minilm" in entry else ""
        cats = " | ".join(f"{entry['by_category'][label]['mean']:.3f}" for label in CATEGORIES.values())
        print(f"| {name} | {_fmt(entry[f'recall@{k}'])} | {diff} | {cats} |")
    if args.runs:
        out["paired"] = paired_runs(args.runs)
        for path, entry in out["paired"]["against"].items():
            print(f"\n{path} minus {args.runs[0]}, evidence recall@{k}, paired [95% CI, questions]")
            print("| system | all | " + " | ".join(CATEGORIES.values()) + " |")
            print("|---|---|" + "---|" * len(CATEGORIES))
            for system, cells in entry.items():
                print(f"| {system} | " + " | ".join(_fmt(cells[c], signed=True)
                                                    for c in ("all", *CATEGORIES.values())) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
