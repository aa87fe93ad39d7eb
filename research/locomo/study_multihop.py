"""Design study: associative multi-hop (pattern completion seeded by the first hits), by ablation.

Usage::

    python -m research.locomo.study_multihop DATA_DIR [--encoder minilm] [--json out.json]

Base: the agent memory's ranking (``rank()``, library defaults; its top 20
from the signals file of :mod:`.study_verdict`). Each variant builds one more
ranked list from the base's first hits and fuses it into the base by
reciprocal rank fusion (``1 / (20 + rank)``, the memory's ``rrf_k``; the
added list weighs ``w``). Vectors are the memory's own (centered, unit) and a
Hopfield read is the exact modern-Hopfield update the engine computes in plain
mode: ``r = X^T softmax(beta X s)``.

Variants:

* ``hit neighbours``: entries nearest any of the top 3 hits;
* ``read (question + hits)``: one read from the question moved toward the mean
  of the top 3 hits, its reconstruction's nearest entries;
* ``read per hit``: one read per top-3 hit from ``question + hit``, lists fused;
* ``residual semantic``: the question minus its projection on the top hit:
  what the question asks that the first hit does not say;
* ``residual keywords``: BM25 over the question's content words that the top 3
  hits do not contain;
* ``adjacent turns``: the turns just before and after the top 3 hits (not
  associative: a chat's own structure, for comparison);
* ``adjacent turns + read per hit``: both lists, fused;
* ``context vectors``: not an expansion but a second vector per turn, of the
  turn with the turn before it (same session): a reply ("Yes, twice!") is
  found by what it answers.

Each at weights 0.25, 0.5, 1 and with the base's first two hits kept in place
(``keep top 2``) or not.
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

from benchmarks.locomo.baselines import BM25, order  # noqa: E402
from benchmarks.locomo.cache import default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import CATEGORIES, load_folder  # noqa: E402
from benchmarks.locomo.metrics import evidence_recall, summary  # noqa: E402

from .signals import collect, content_words  # noqa: E402

RRF_K = 20.0
SEEDS = 3
K = 5


def fuse(base: list[int], extra: list[int], w: float, keep: int = 0) -> list[int]:
    """``base`` and ``extra`` fused by RRF (``extra`` weighs ``w``); the first ``keep`` of ``base`` stay first."""
    score: dict[int, float] = {}
    for r, i in enumerate(base, 1):
        score[i] = score.get(i, 0.0) + 1.0 / (RRF_K + r)
    for r, i in enumerate(extra, 1):
        score[i] = score.get(i, 0.0) + w / (RRF_K + r)
    fused = sorted(score, key=lambda i: (-score[i], i))
    head = base[:keep]
    return head + [i for i in fused if i not in head]


def read(X: np.ndarray, state: np.ndarray, beta: float) -> np.ndarray:
    a = beta * (X @ state)
    p = np.exp(a - a.max())
    p /= p.sum()
    r = X.T @ p
    return r / max(float(np.linalg.norm(r)), 1e-12)


def variants(X: np.ndarray, q: np.ndarray, base: list[int], bm25: BM25, missing: list[str],
             session_of: list[tuple[int, int]], beta: float, C: np.ndarray) -> dict[str, list[int]]:
    seeds = base[:SEEDS]
    out: dict[str, list[int]] = {}
    out["context vectors"] = order(C @ q)[:50]
    sims = X @ X[seeds].T
    out["hit neighbours"] = [i for i in order(sims.max(axis=1)) if i not in seeds][:50]
    mixed = q + X[seeds].mean(axis=0)
    out["read (question + hits)"] = order(X @ read(X, mixed / np.linalg.norm(mixed), beta))[:50]
    per_hit: list[int] = []
    lists = []
    for s in seeds:
        st = q + X[s]
        lists.append(order(X @ read(X, st / np.linalg.norm(st), beta))[:50])
    score: dict[int, float] = {}
    for lst in lists:
        for r, i in enumerate(lst, 1):
            score[i] = score.get(i, 0.0) + 1.0 / (RRF_K + r)
    per_hit = sorted(score, key=lambda i: -score[i])
    out["read per hit"] = per_hit[:50]
    top = X[seeds[0]]
    res = q - (q @ top) * top
    out["residual semantic"] = order(X @ (res / max(float(np.linalg.norm(res)), 1e-12)))[:50]
    if missing:
        bm = bm25.scores(" ".join(missing))
        out["residual keywords"] = [i for i in order(bm) if bm[i] > 0][:50]
    else:
        out["residual keywords"] = []
    pos = {key: i for i, key in enumerate(session_of)}
    adj = []
    for s in seeds:
        sess, idx = session_of[s]
        for d in (-1, 1, -2, 2):
            j = pos.get((sess, idx + d))
            if j is not None and j not in adj:
                adj.append(j)
    out["adjacent turns"] = adj
    both: dict[int, float] = {}
    for lst in (adj, per_hit[:50]):
        for r, i in enumerate(lst, 1):
            both[i] = both.get(i, 0.0) + 1.0 / (RRF_K + r)
    out["adjacent turns + read per hit"] = sorted(both, key=lambda i: -both[i])
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent import AgentMemory
    from hopmem.agent.keyword import query_terms, stem

    p = argparse.ArgumentParser(prog="python -m research.locomo.study_multihop", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--beta", type=float, default=20.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = load_folder(args.data)
    encoder = make_encoder(args.encoder, cache)
    rows = collect(convs, encoder, cache / f"signals-{args.encoder}.jsonl")
    by_conv: dict[str, list[dict]] = {}
    for r in rows:
        if r["category"] > 0:
            by_conv.setdefault(r["conversation"], []).append(r)
    settings = [(w, keep) for keep in (0, 2) for w in (0.25, 0.5, 1.0)]
    results: dict[str, dict[str, list[float]]] = {}  # name -> category -> recalls
    for conv in convs:
        ids = [u.dia_id for u in conv.units]
        at = {d: i for i, d in enumerate(ids)}
        with AgentMemory.open(":memory:", encoder=encoder, namespace="probe") as mem:
            centerer = mem.centerer  # the memory's own vector space: its frozen centering mean
        X = np.atleast_2d(centerer.transform(encoder.encode([u.text for u in conv.units])))
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        contexts = [(conv.units[i - 1].text + " " if i and conv.units[i - 1].session == u.session else "") + u.text
                    for i, u in enumerate(conv.units)]
        C = np.atleast_2d(centerer.transform(encoder.encode(contexts)))
        C = C / np.linalg.norm(C, axis=1, keepdims=True)
        encoder.save()
        bm25 = BM25([u.text for u in conv.units])
        session_of = [(u.session, int(u.dia_id.split(":")[1])) for u in conv.units]
        names = {n.lower() for n in conv.speakers}
        for r in by_conv.get(conv.id, []):
            base = [at[h["dia"]] for h in r["rank"]]
            q = np.atleast_2d(centerer.transform(encoder.encode([r["question"]])))[0]
            q = q / np.linalg.norm(q)
            found = {stem(t) for i in base[:SEEDS] for t in query_terms(conv.units[i].text)}
            missing = [w for w in content_words(r["question"], names) if stem(w) not in found]
            cat = CATEGORIES[r["category"]]
            results.setdefault("base (rank)", {}).setdefault(cat, []).append(
                evidence_recall([ids[i] for i in base[:K]], r["evidence"]))
            for name, extra in variants(X, q, base, bm25, missing, session_of, args.beta, C).items():
                for w, keep in settings:
                    got = fuse(base, extra, w, keep)[:K]
                    results.setdefault(f"{name}, w={w}, keep top {keep}", {}).setdefault(cat, []).append(
                        evidence_recall([ids[i] for i in got], r["evidence"]))
    cats = list(CATEGORIES.values())
    base_all = np.array([x for c in cats for x in results["base (rank)"].get(c, [])])
    table = {name: {**{c: summary(v[c]) for c in cats if c in v},
                    "all": summary([x for c in cats for x in v.get(c, [])]),
                    # paired: the same questions with and without the variant
                    "gain_over_base": summary(list(np.array([x for c in cats for x in v.get(c, [])]) - base_all))}
             for name, v in results.items()}
    print("| variant | all | gain over base [95% CI, paired] | " + " | ".join(cats) + " |")
    print("|---|---|---|" + "---|" * len(cats))
    for name, v in table.items():
        g = v["gain_over_base"]
        print(f"| {name} | {v['all']['mean']:.3f} | {g['mean']:+.3f} [{g['ci95'][0]:+.3f}, {g['ci95'][1]:+.3f}] | "
              + " | ".join(f"{v[c]['mean']:.3f}" for c in cats) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
