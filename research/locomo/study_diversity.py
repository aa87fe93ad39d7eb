"""Design study: the final top 5 for multi-hop questions (diversity, coverage, the subject, dates), by ablation.

Usage::

    python -m research.locomo.study_diversity DATA_DIR [--encoder minilm] [--cache DIR] [--json out.json]
        [--sentences]

Multi-hop questions ("What activities does Melanie partake in?") have 2-4
evidence turns, mostly in different sessions; the idea under test is that
the top 5 is filled with near-duplicates of one aspect. Everything is scored
end to end (an abstention retrieves nothing), with paired 95% intervals of
the gain over the base on the same questions (bootstrap over questions).

Part 1, the library's own steps (each memory opened with the configuration):

* ``subject_boost`` x ``date_boost`` on a grid; the choice is checked by leave
  one conversation out (the setting best on four conversations, scored on
  the fifth, pooled);
* the conversational context off, for every question or only for
  aggregation questions (below).

Part 2, reorderings of the shipped defaults' final list. The pool is the
memory's top 5 (``recall(limit=5)``, what it returns) followed by the rest of
``recall(limit=40)``, so the base is exactly the library's answer. Variants,
each applied to every question or only to the questions whose English form
marks an aggregation ("how many", "both", "in common", "what are ...", or a
plural noun after "what"/"which" before the verb: "What *activities* does
...", "Which *cities* ..."):

* ``session diversity``: at most ``m`` hits of one session in the top 5;
* ``MMR``: maximal marginal relevance over the memory's centered vectors,
  relevance ``1 / (20 + position)`` scaled to 1 at the top, weight ``lambda``;
* ``coverage``: greedily the hit that adds the most uncovered content words
  of the question (a set cover), the first hit kept;
* ``short turns down``: turns with fewer than 5 content words (greetings,
  "Bye Nate!") scored x0.5;
* ``sentence vectors`` (``--sentences``: encodes every sentence of every turn,
  which calls the model once): the turns ranked by their best sentence's
  cosine with the question, fused into the order by reciprocal rank fusion.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.locomo.cache import CachedEncoder, default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import CATEGORIES, Conversation, load_folder  # noqa: E402
from benchmarks.locomo.metrics import evidence_recall, summary  # noqa: E402
from hopmem.agent.parts import asks_for_several  # noqa: E402

from .signals import content_words  # noqa: E402

K = 5
DEPTH = 40
SUBJECT_GRID = (0.0, 0.1, 0.25, 0.5, 1.0)
DATE_GRID = (0.0, 0.25, 0.5, 1.0)


def _open(conv: Conversation, encoder: CachedEncoder, **settings: Any) -> Any:
    """A memory of the conversation; ``settings`` are RecallConfig, Tuning or WritePolicy fields."""
    from benchmarks.agent_eval.run import open_options
    from hopmem.agent import AgentMemory

    mem = AgentMemory.open(":memory:", encoder=encoder, namespace=f"locomo-{conv.id}",
                           **open_options(settings))
    mem.remember_many([{"text": u.text, "created_at": u.created_at,
                        "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}} for u in conv.units], progress=False)
    return mem


def top(conv: Conversation, encoder: CachedEncoder, depth: int = 0, **config: Any) -> list[dict[str, Any]]:
    """Each answerable question's record: its top ``K`` (``depth``: then the rest of ``recall(limit=depth)``)."""
    mem = _open(conv, encoder, **config)
    try:
        out = []
        for q in conv.questions:
            sel = mem.recall(q.text, limit=K, record=False)
            got = [h.metadata["dia_id"] for h in sel.hits]
            if depth and not sel.abstained:
                got += [d for d in (h.metadata["dia_id"] for h in mem.recall(q.text, limit=depth, record=False).hits)
                        if d not in got]
            out.append({"conversation": conv.id, "question": q.text, "category": q.category,
                        "evidence": list(q.evidence), "abstained": bool(sel.abstained), "pool": got})
        return out
    finally:
        mem.close()


def score(rows: list[dict[str, Any]], order: Callable[[dict[str, Any]], list[str]] | None = None,
          gate: Callable[[str], bool] | None = None) -> list[float]:
    """End-to-end recall@K of each record, its pool reordered by ``order`` (for the questions ``gate`` admits)."""
    out = []
    for r in rows:
        if r["abstained"]:
            out.append(0.0)
            continue
        pool = r["pool"]
        if order is not None and (gate is None or gate(r["question"])):
            pool = order(r)
        out.append(evidence_recall(pool[:K], r["evidence"]))
    return out


def line(name: str, rows: list[dict[str, Any]], values: Sequence[float], base: Sequence[float]) -> dict[str, Any]:
    cats = {label: float(np.mean([v for v, r in zip(values, rows) if r["category"] == c]))
            for c, label in CATEGORIES.items()}
    gain = summary(list(np.asarray(values) - np.asarray(base)))
    return {"variant": name, "all": float(np.mean(values)), "gain": gain["mean"], "gain_ci95": gain["ci95"], **cats}


class Units:
    """A conversation's turns by id: centered unit vectors, sessions, speakers and stems."""

    def __init__(self, conv: Conversation, encoder: CachedEncoder, centerer: Any) -> None:
        from hopmem.agent.keyword import query_terms, stem

        X = np.atleast_2d(centerer.transform(encoder.encode([u.text for u in conv.units])))
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        self.vec = {u.dia_id: X[i] for i, u in enumerate(conv.units)}
        self.session = {u.dia_id: u.session for u in conv.units}
        self.stems = {u.dia_id: {stem(t) for t in query_terms(u.text)} for u in conv.units}
        body = {u.dia_id: u.text.split(": ", 1)[-1].split(" (shares a photo")[0] for u in conv.units}
        self.terms = {d: len(query_terms(t)) for d, t in body.items()}
        self.names = {n.lower() for n in conv.speakers}


def session_diversity(pool: list[str], u: Units, m: int) -> list[str]:
    chosen: list[str] = []
    count: dict[int, int] = defaultdict(int)
    for d in pool:
        if count[u.session[d]] < m:
            chosen.append(d)
            count[u.session[d]] += 1
        if len(chosen) == K:
            break
    return chosen + [d for d in pool if d not in chosen]


def mmr(pool: list[str], u: Units, lam: float, n: int = 20) -> list[str]:
    cand = pool[:n]
    rel = {d: 21.0 / (20.0 + r) for r, d in enumerate(cand, 1)}
    chosen = cand[:1]
    left = cand[1:]
    while len(chosen) < K and left:
        best = max(left, key=lambda d: lam * rel[d] - (1 - lam) * max(float(u.vec[d] @ u.vec[c]) for c in chosen))
        chosen.append(best)
        left.remove(best)
    return chosen + left + pool[n:]


def coverage(pool: list[str], u: Units, question: str, n: int = 15) -> list[str]:
    from hopmem.agent.keyword import stem

    words = {stem(w) for w in content_words(question, u.names)}
    cand = pool[:n]
    chosen = cand[:1]
    covered = set().union(*(u.stems[c] & words for c in chosen))
    left = cand[1:]
    while len(chosen) < K and left:
        gain, _, d = max((len((u.stems[d] & words) - covered), -i, d) for i, d in enumerate(left))
        d = d if gain else left[0]
        chosen.append(d)
        left.remove(d)
        covered |= u.stems[d] & words
    return chosen + left + pool[n:]


def rescore(pool: list[str], factor: Callable[[str], float], keep: int = 1) -> list[str]:
    head = pool[:keep]
    s = {d: factor(d) / (20.0 + r) for r, d in enumerate(pool, 1)}
    return head + sorted((d for d in pool if d not in head), key=lambda d: -s[d])


def fuse(base: list[str], extra: list[str], w: float) -> list[str]:
    s: dict[str, float] = defaultdict(float)
    for r, d in enumerate(base, 1):
        s[d] += 1.0 / (20.0 + r)
    for r, d in enumerate(extra, 1):
        s[d] += w / (20.0 + r)
    position = {d: i for i, d in enumerate([*base, *extra])}
    return sorted(s, key=lambda d: (-s[d], position[d]))


def sentence_lists(conv: Conversation, encoder: CachedEncoder, centerer: Any) -> dict[str, list[str]]:
    """Per question, the turns ranked by their best sentence's centered cosine with it (top 50)."""
    texts, owner = [], []
    for u in conv.units:
        speaker, body = u.text.split(": ", 1)
        caption = ""
        if " (shares a photo: " in body:
            body, caption = body.split(" (shares a photo: ", 1)
        parts = [s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if s.strip()]
        if caption:
            parts.append(caption.rstrip(")"))
        texts += [f"{speaker}: {s}" for s in parts]
        owner += [u.dia_id] * len(parts)
    V = np.atleast_2d(centerer.transform(encoder.encode(texts)))
    V = V / np.linalg.norm(V, axis=1, keepdims=True)
    out = {}
    for q in conv.questions:
        qv = np.atleast_2d(centerer.transform(encoder.encode([q.text])))[0]
        sims = V @ (qv / np.linalg.norm(qv))
        best: dict[str, float] = {}
        for d, s in zip(owner, sims):
            best[d] = max(best.get(d, -2.0), float(s))
        out[q.text] = sorted(best, key=lambda d: -best[d])[:50]
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent import AgentMemory

    p = argparse.ArgumentParser(prog="python -m research.locomo.study_diversity",
                                description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--sentences", action="store_true", help="also the sentence-vector variant (calls the model once)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = load_folder(args.data)
    encoder = make_encoder(args.encoder, cache)
    result: dict[str, Any] = {}

    # part 1: the library's steps, on a grid
    grid: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for s, d in itertools.product(SUBJECT_GRID, DATE_GRID):
        grid[(s, d)] = [r for c in convs for r in top(c, encoder, subject_boost=s, date_boost=d)]
    encoder.save()
    rows0 = grid[(0.0, 0.0)]
    base0 = score(rows0)
    table = [line(f"subject_boost {s}, date_boost {d}", rows, score(rows), base0) for (s, d), rows in grid.items()]
    picked, held = [], []
    for c in sorted({r["conversation"] for r in rows0}):
        best = max(grid, key=lambda k: np.mean([v for v, r in zip(score(grid[k]), grid[k]) if r["conversation"] != c]))
        picked.append({"held_out": c, "subject_boost": best[0], "date_boost": best[1]})
        held += [(r, v) for r, v in zip(grid[best], score(grid[best])) if r["conversation"] == c]
    order0 = {(r["conversation"], r["question"]): v for r, v in zip(rows0, base0)}
    table.append(line("leave one conversation out (the setting best on the other four)", [r for r, _ in held],
                      [v for _, v in held], [order0[(r["conversation"], r["question"])] for r, _ in held]))
    result["library"] = {"table": table, "loco_choices": picked}

    # part 2: reorderings of the defaults' final list
    rows = [r for c in convs for r in top(c, encoder, depth=40)]
    no_context = [r for c in convs for r in top(c, encoder, context_weight=0.0)]
    with AgentMemory.open(":memory:", encoder=encoder, namespace="study") as mem:
        centerer = mem.centerer
    units = {c.id: Units(c, encoder, centerer) for c in convs}
    sentences = {}
    if args.sentences:
        for c in convs:
            sentences.update({(c.id, q): lst for q, lst in sentence_lists(c, encoder, centerer).items()})
        encoder.save()
    base = score(rows)
    variants: dict[str, Callable[[dict[str, Any]], list[str]]] = {}
    for m in (1, 2):
        variants[f"session diversity, at most {m} per session"] = (
            lambda r, m=m: session_diversity(r["pool"], units[r["conversation"]], m))
    for lam in (0.6, 0.7, 0.8, 0.9):
        variants[f"MMR, lambda {lam}"] = lambda r, lam=lam: mmr(r["pool"], units[r["conversation"]], lam)
    variants["coverage of content words"] = lambda r: coverage(r["pool"], units[r["conversation"]], r["question"])
    variants["short turns down (< 5 content words, x0.5)"] = lambda r: rescore(
        r["pool"], lambda d, u=units[r["conversation"]]: 0.5 if u.terms[d] < 5 else 1.0)
    if sentences:
        for w in (0.25, 0.5):
            variants[f"sentence vectors fused, weight {w}"] = (
                lambda r, w=w: fuse(r["pool"], sentences[(r["conversation"], r["question"])], w))
    table2 = [line("the defaults (subject 0.25, date 0.5)", rows, base, base)]
    for name, fn in variants.items():
        table2.append(line(name + ", every question", rows, score(rows, fn), base))
        table2.append(line(name + ", aggregation questions only", rows, score(rows, fn, asks_for_several), base))
    nc = score(no_context)
    table2.append(line("no conversational context, every question", rows, nc, base))
    table2.append(line("no conversational context, aggregation questions only", rows,
                       [n if asks_for_several(r["question"]) else b for r, n, b in zip(rows, nc, base)], base))
    counts = {label: [sum(asks_for_several(r["question"]) for r in rows if r["category"] == c),
                      sum(1 for r in rows if r["category"] == c)] for c, label in CATEGORIES.items()}
    result["reorderings"] = {"table": table2, "aggregation_questions_by_category": counts}

    cats = list(CATEGORIES.values())
    for title, tab in (("library steps (end to end R@5)", table), ("reorderings of the defaults", table2)):
        print(f"\n{title}\n")
        print("| variant | R@5 | gain [95% CI, paired] | " + " | ".join(cats) + " |")
        print("|---|---|---|" + "---|" * len(cats))
        for t in tab:
            lo, hi = t["gain_ci95"]
            print(f"| {t['variant']} | {t['all']:.3f} | {t['gain']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
                  + " | ".join(f"{t[c]:.3f}" for c in cats) + " |")
    print("\nleave one conversation out choices:", json.dumps(picked))
    print("aggregation questions by category (rule / all):", json.dumps(counts))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
