"""Agent-memory evaluation: development sets to choose on, test sets to report on.

    python -m benchmarks.agent_eval.run                 # the first test set (conversations.json), full latency run
    python -m benchmarks.agent_eval.run --data dev      # the development set (dev_conversations.json)
    python -m benchmarks.agent_eval.run --data dev2 --splits 5   # the second one, means over 5 fold splits
    python -m benchmarks.agent_eval.run --data test10,test11,test12,test13 --splits 5 --no-latency   # the
                                                                                   # primary estimate
    python -m benchmarks.agent_eval.run --quick         # fewer latency entries and repeats
    python -m benchmarks.agent_eval.run --encoder hashing   # no model (lexical hashing encoder)
    python -m benchmarks.agent_eval.run --encoder default   # the library's default encoder (int8 MiniLM)
    python -m benchmarks.agent_eval.run --splits 5 --plot docs/img/agent_eval.png   # and the figure
    python -m benchmarks.agent_eval.run --data dev --fit-defaults   # the uncalibrated verdict models
    python -m benchmarks.agent_eval.run --data dev --fit-defaults --check   # exit 1 unless they refit the record
    python -m benchmarks.agent_eval.run --data test10,test11,test12,test13 --no-calibrate --no-latency   # the
                                                                                   # defaults, no calibrate()

Fifteen sets of conversations in the same format and categories (single-fact,
multi-session, knowledge-update, temporal, identifier, abstention), about
different people, facts and sessions, in ``benchmarks/data/agent_eval/``:
``dev_conversations.json`` (117 turns in 12 sessions, 165 questions) and
``dev2_conversations.json`` (120 turns in 12 sessions, 195 questions, written
by a separate writer without sight of the others) are where defaults, weights
and the verdict model's features were chosen; ``conversations.json`` and
``test2_conversations.json`` to ``test13_conversations.json`` (118-119 turns in
12 sessions and 190 questions each) were each written blind, before the
choice they test was committed, and run once after it (docs/agent-eval.md
says when each was written and what was chosen on it since). ``test10`` to
``test13`` pooled, never chosen on, are the primary estimate.
``abstention_topics.json`` labels every unanswerable question's subject
(never mentioned, or a remembered thing's unstated detail), read from the
data alone. The evaluation's history, with the options each step compared,
can be rerun from the git tag ``eval-round-13`` (commit 2ddfbf61aed3).

What it does, on any set
------------------------
1. Remembers the turns of the sessions into a fresh :class:`AgentMemory` (one
   shared namespace: one user across sessions), each at its session's day on
   an injected clock (``day * 86400 + turn index``), with ``day_zero = 0`` so
   that "day N" in a question is a time window.
2. Calibrates the abstention gates (and verdict models) without ever
   calibrating on a question it evaluates: the questions are split in two
   folds, stratified by category (seeded by ``--seed``); each fold is evaluated
   with gates calibrated on the other fold (answerable questions = related,
   abstention questions = unrelated, the library's default ``error_budget``
   unless ``--error-budget`` is given).
3. Asks every question with ``limit=5`` under four retrievers: hybrid (the
   default), associative only, keyword only, and plain cosine top-k (uncentered
   MiniLM cosine over all turns, no gate: the baseline that never abstains).
4. Reports, per category, recall@1 and recall@5 where recall@k = |gold in
   top-k| / min(k, |gold|), end to end (an abstention scores 0 on an
   answerable question) and for the ranking alone (``rank()``, gate ignored);
   abstention precision, recall and F1 over all questions (positive = the
   system abstained); with ``--sweep``, F1 and end-to-end R@5 per error budget
   averaged over several fold splits; 95% bootstrap intervals (resampling
   questions) for the worst category gap and the abstention F1, since a
   category holds only 24 to 46 questions; and recall latency with 10,000 entries
   (the test set's turns plus synthetic filler), encoder time excluded and
   reported separately.

Filler for the latency run: template sentences (realistic FTS5 postings) whose
vectors are random mixtures of real MiniLM turn vectors plus noise, because
encoding 10,000 texts with MiniLM takes minutes on a 2-core machine and the
latency of a recall depends on the number of entries and the dimension, not
on what the vectors mean. The encoder's own time per query is measured on
the real questions and reported on its own line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.agent_eval.scoring import CATEGORIES, RETRIEVERS, bootstrap_f1, bootstrap_gap, mean_tables, score
from hopmem.text.encoders import encoder_dim

#: Where the conversations and their labels are.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "agent_eval"
DATA = DATA_DIR / "conversations.json"  # the first test set: report on it, choose nothing on it
#: Every named set (docs/agent-eval.md says when each was written and what was chosen on it): ``dev``
#: (choose defaults on it), ``dev2`` (written later, independently), ``test`` (the first test set) and
#: ``test2`` to ``test13`` (each written blind before the choice it tests, and run once after it).
SETS = {"test": DATA, **{name: DATA_DIR / f"{name}_conversations.json"
                         for name in ("dev", "dev2", *(f"test{n}" for n in range(2, 14)))}}
#: Each unanswerable question's subject: never-mentioned or mentioned (labelled from the data alone).
SUBJECTS = DATA_DIR / "abstention_topics.json"
DAY = 86400.0


class CachedEncoder:
    """Wraps an encoder: remembers vectors by text, and can be given vectors for texts it never encodes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = encoder_dim(inner)
        self._cache: dict[str, np.ndarray] = {}
        self.calls = 0
        self.seconds = 0.0

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def save(self, path: str) -> None:
        texts = list(self._cache)
        np.savez(path, texts=np.array(texts, dtype=object), vectors=np.stack([self._cache[t] for t in texts]))

    def load(self, path: str) -> None:
        if os.path.exists(path):
            data = np.load(path, allow_pickle=True)
            for t, v in zip(data["texts"], data["vectors"]):
                self._cache[str(t)] = v

    def preload(self, texts: list[str], vectors: np.ndarray | None = None) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if vectors is not None:
            for t, v in zip(texts, vectors):
                self._cache[t] = np.asarray(v, dtype=np.float32)
            return
        if missing:
            out = self.inner.encode(missing)
            for t, v in zip(missing, out):
                self._cache[t] = v

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self._cache]
        if missing:
            t0 = time.perf_counter()
            out = self.inner.encode(list(dict.fromkeys(missing)))
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            for t, v in zip(dict.fromkeys(missing), out):
                self._cache[t] = v
        return np.stack([self._cache[t] for t in texts]).astype(np.float32)


def load(which: str = "test") -> dict[str, Any]:
    """A named set (:data:`SETS`: ``"test"`` to ``"test13"``, ``"dev"``, ``"dev2"``), or a file in the
    same format. A named set's unanswerable questions get their ``subject`` label from :data:`SUBJECTS`."""
    path = SETS.get(which, Path(which))
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    labels = json.loads(SUBJECTS.read_text(encoding="utf-8"))["labels"].get(which, {}) if SUBJECTS.exists() else {}
    for q in data["questions"]:
        if q["id"] in labels:
            q["subject"] = labels[q["id"]]
    return data


def pooled(sets: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Several sets' questions as one list (ids prefixed by the set's name when there are several), for
    scoring results that were computed set by set, each in its own memory."""
    if len(sets) == 1:
        return sets[0]
    return {"questions": [{**q, "id": f"{name}:{q['id']}"} for name, data in zip(names, sets)
                          for q in data["questions"]]}


def make_encoder(name: str) -> Any:
    from hopmem.text.encoders import HashingEncoder, SentenceTransformerEncoder, default_encoder

    if name == "minilm":
        return SentenceTransformerEncoder()
    if name == "default":
        return default_encoder()
    if name == "hashing":
        return HashingEncoder(384)
    raise SystemExit(f"--encoder: expected minilm, default or hashing, got {name!r}")


def build_memory(path: str, encoder: Any, data: dict[str, Any], options: dict[str, Any] | None = None,
                 reranker: Any = None):
    """The set's memory; ``options`` are more :meth:`AgentMemory.open` arguments (see :func:`open_options`)."""
    from hopmem.agent import AgentMemory

    clock = [0.0]
    mem = AgentMemory.open(path, encoder=encoder, namespace="eval-user", clock=lambda: clock[0], day_zero=0.0,
                           reranker=reranker, **(options or {}))
    entry_of: dict[int, str] = {}
    for session in data["sessions"]:
        for index, turn in enumerate(session["turns"]):
            clock[0] = session["day"] * DAY + index
            entry = mem.remember(turn["text"], metadata={"turn": turn["id"], "session": session["session_id"],
                                                          "day": session["day"]})
            entry_of[entry.id] = turn["id"]
    clock[0] = (max(s["day"] for s in data["sessions"]) + 1) * DAY
    return mem, entry_of, clock


def folds(questions: list[dict[str, Any]], seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out: list[list[int]] = [[], []]
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(questions):
        by_cat[q["category"]].append(i)
    for cat in sorted(by_cat):
        idx = list(rng.permutation(by_cat[cat]))
        for j, i in enumerate(idx):
            out[j % 2].append(int(i))
    return out


def evaluate(mem: Any, entry_of: dict[int, str], data: dict[str, Any], cosine: Any, *, holdout: float = 0.0,
             error_budget: float | None = None, seed: int = 0, modes: tuple[str, ...] = RETRIEVERS,
             calibrate_args: dict[str, Any] | None = None, calibrated: bool = True) -> dict[str, Any]:
    """Every question under each retriever, with gates calibrated on the other fold (``calibrated``
    False: the library's uncalibrated default gates, no ``calibrate`` call)."""
    questions = data["questions"]
    fold_idx = folds(questions, seed)
    results: dict[str, list[dict[str, Any]]] = {r: [None] * len(questions) for r in modes}  # type: ignore
    gates_used: dict[str, list[float]] = defaultdict(list)
    for f in (0, 1):
        evaluate_idx, calib_idx = fold_idx[f], fold_idx[1 - f]
        related = [questions[i]["question"] for i in calib_idx if questions[i]["answers"]]
        unrelated = [questions[i]["question"] for i in calib_idx if not questions[i]["answers"]]
        extra = {**(calibrate_args or {}), **({} if error_budget is None else {"error_budget": error_budget})}
        gates = mem.calibrate(related, unrelated, holdout=holdout, **extra) if calibrated else {}
        for mode, gate in gates.items():
            gates_used[mode].append(gate.tau)
        for i in evaluate_idx:
            q = questions[i]
            for mode in [m for m in modes if m != "cosine"]:
                sel = mem.recall(q["question"], limit=5, mode=mode, record=False)
                ranking = mem.rank(q["question"], limit=5, mode=mode)
                results[mode][i] = {"ranked": [entry_of[h.entry_id] for h in sel.hits], "abstained": sel.abstained,
                                    "ranking": [entry_of[h.entry_id] for h in ranking]}
            if "cosine" in modes:
                top = cosine(q["question"])
                results["cosine"][i] = {"ranked": top, "abstained": False, "ranking": top}
    return {"results": results, "gates": {m: v for m, v in gates_used.items()}}


def sweep(mem: Any, entry_of: dict[int, str], data: dict[str, Any], cosine: Any, budgets: list[float],
          seeds: int) -> str:
    """Abstention F1 and end-to-end R@5 per error budget, averaged over fold seeds."""
    lines = ["| error budget | " + " | ".join(f"{r} F1 | {r} R@5" for r in RETRIEVERS if r != "cosine") + " |",
             "|---|" + "---|" * (2 * (len(RETRIEVERS) - 1))]
    for budget in budgets:
        acc: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for seed in range(seeds):
            ev = evaluate(mem, entry_of, data, cosine, error_budget=budget, seed=seed,
                          modes=("hybrid", "associative", "keyword"))
            table = score(data, ev["results"])
            for r, t in table.items():
                acc[r].append((t["abstention"]["f1"], t["categories"]["overall"]["r5"]))
        cells = []
        for r in ("hybrid", "associative", "keyword"):
            cells += [f"{100 * np.mean([a for a, _ in acc[r]]):.1f}", f"{100 * np.mean([b for _, b in acc[r]]):.1f}"]
        lines.append(f"| {budget:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cosine_baseline(encoder: Any, data: dict[str, Any]):
    turns = [t for s in data["sessions"] for t in s["turns"]]
    vecs = encoder.encode([t["text"] for t in turns]).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [t["id"] for t in turns]

    def ranked(question: str, k: int = 5) -> list[str]:
        q = encoder.encode([question])[0]
        q = q / np.linalg.norm(q)
        order = np.argsort(-(vecs @ q), kind="stable")[:k]
        return [ids[j] for j in order]

    return ranked


# --------------------------------------------------------------------------------------------- latency

_SUBJECTS = ["the billing service", "the search cluster", "the mobile app", "the data warehouse", "the CI pipeline",
             "the payments API", "the onboarding flow", "the support queue", "the analytics dashboard",
             "the staging cluster", "the auth service", "the recommendation model", "the email worker",
             "the invoice exporter", "the image resizer", "the feature flag service"]
_VERBS = ["was migrated to", "now depends on", "was rolled back from", "is blocked by", "was load-tested against",
          "moved its nightly job to", "started logging to", "was rewritten to use", "gained an alert on",
          "lost its dependency on"]
_OBJECTS = ["Postgres 16", "a Redis cache", "Kafka", "the new VPC", "an S3 bucket", "a feature flag", "gRPC",
            "the legacy cron host", "a read replica", "the EU region", "a canary release", "OpenTelemetry"]
_PEOPLE = ["Alex", "Bea", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jin", "Kira", "Lars"]


def filler_texts(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append(f"{rng.choice(_PEOPLE)} noted that {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
                   f"{rng.choice(_OBJECTS)} in ticket OPS-{10000 + i} on sprint {int(rng.integers(1, 80))}.")
    return out


def latency(encoder: CachedEncoder, data: dict[str, Any], n_entries: int, repeats: int) -> dict[str, Any]:
    from hopmem.agent import AgentMemory

    turns = [t["text"] for s in data["sessions"] for t in s["turns"]]
    questions = [q["question"] for q in data["questions"]]
    encoder.preload(turns + questions)
    base = np.stack([encoder.encode([t])[0] for t in turns])
    filler = filler_texts(max(0, n_entries - len(turns)))
    rng = np.random.default_rng(7)
    mix = rng.dirichlet(np.full(len(base), 0.05), size=len(filler)).astype(np.float32)
    vectors = mix @ base + 0.02 * rng.standard_normal((len(filler), base.shape[1])).astype(np.float32)
    encoder.preload(filler, vectors)
    with tempfile.TemporaryDirectory() as tmp:
        clock = [0.0]
        mem = AgentMemory.open(os.path.join(tmp, "latency.db"), encoder=encoder, namespace="latency",
                               clock=lambda: clock[0])
        t0 = time.perf_counter()
        for i, text in enumerate(turns + filler):
            clock[0] = float(i)
            mem.remember(text)
        write_s = time.perf_counter() - t0
        mem.calibrate(questions[:20], questions[-20:])  # any gate: latency does not depend on its value
        out: dict[str, Any] = {"entries": len(mem), "write_ms_mean": write_s / max(1, len(turns) + len(filler)) * 1e3,
                               "load": " / ".join(f"{x:.1f}" for x in os.getloadavg())}
        # warm-up: builds the engine memory, fills caches
        for q in questions[:5]:
            mem.recall(q, record=True)
        matrix = np.stack([r.vector for r in mem._state.rows.values()])
        for mode in ("hybrid", "associative", "keyword"):
            samples = []
            for _ in range(repeats):
                for q in questions:
                    sel = mem.recall(q, mode=mode, record=True)
                    samples.append(sel.timings["total_ms"] - sel.timings["encode_ms"])
            out[mode] = {"median_ms": statistics.median(samples), "p95_ms": float(np.percentile(samples, 95))}
        from hopmem.engine.memory import top_k_dot
        samples = []
        for _ in range(repeats):
            for q in questions:
                qv = mem._state.encode([q])[0]
                t1 = time.perf_counter()
                top_k_dot(matrix, qv[None, :], 5)
                samples.append((time.perf_counter() - t1) * 1e3)
        out["cosine"] = {"median_ms": statistics.median(samples), "p95_ms": float(np.percentile(samples, 95))}
        mem.close()
    return out


def encoder_latency(inner: Any, data: dict[str, Any], n: int = 40) -> dict[str, float]:
    questions = [q["question"] for q in data["questions"]][:n]
    inner.encode(questions[:2])
    samples = []
    for q in questions:
        t0 = time.perf_counter()
        inner.encode([q])
        samples.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(samples), "p95_ms": float(np.percentile(samples, 95))}


# --------------------------------------------------------------------------------------------- report


def _recall_rows(table: dict, at1: str, at5: str) -> list[str]:
    """One markdown row per category (then overall): R@1 and R@5 of every retriever,
    read from the ``at1`` and ``at5`` fields (end to end, or ranking alone)."""
    rows = []
    for cat in [c for c in CATEGORIES if c != "abstention"] + ["overall"]:
        n = table["hybrid"]["categories"][cat]["n"]
        cells = []
        for r in RETRIEVERS:
            c = table[r]["categories"][cat]
            cells += [f"{100 * c[at1]:.1f}", f"{100 * c[at5]:.1f}"]
        name = f"**{cat}**" if cat == "overall" else cat
        rows.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return rows


def markdown(table: dict[str, Any], lat: dict[str, Any] | None, enc_lat: dict[str, float] | None,
             meta: dict[str, Any]) -> str:
    splits = meta.get("splits", 1)
    gates = ("the library's uncalibrated defaults (no calibrate() call" if meta.get("uncalibrated")
             else f"2-fold cross-validated calibration (error budget {meta['error_budget']}")
    lines = [f"Data: {meta['data']}; encoder: {meta['encoder']}; gates: {gates}"
             + (f"; means over {splits} fold splits" if splits > 1 else "")
             + "); limit 5. R@k counts an abstention on an answerable question as a miss.", ""]
    header = "| category | n | " + " | ".join(f"{r} R@1 | {r} R@5" for r in RETRIEVERS) + " |"
    lines.append(header)
    lines.append("|" + "---|" * (2 + 2 * len(RETRIEVERS)))
    lines += _recall_rows(table, "r1", "r5")
    lines += ["", "Ranking alone (the gate ignored: every candidate admitted; the cosine baseline is unchanged):", "",
              header, "|" + "---|" * (2 + 2 * len(RETRIEVERS))]
    lines += _recall_rows(table, "k1", "k5")
    lines += ["", f"| abstention | precision | recall | F1 | abstained (of {meta['questions']}) |",
              "|---|---|---|---|---|"]
    for r in RETRIEVERS:
        a = table[r]["abstention"]
        lines.append(f"| {r} | {100 * a['precision']:.1f} | {100 * a['recall']:.1f} | {100 * a['f1']:.1f} | "
                     f"{a['abstained']:g} |")
    if "abstention_by_subject" in table["hybrid"]:
        subjects = table["hybrid"]["abstention_by_subject"]
        n_never = subjects.get("never-mentioned", {}).get("n", 0)
        n_known = subjects.get("mentioned", {}).get("n", 0)
        lines += ["", "Abstention by the unanswerable question's subject (abstentions/questions on never-mentioned "
                      "topics, the issue's definition, and on remembered ones asking an unstated detail; F1 with "
                      "only the never-mentioned counted as unanswerable):", "",
                  f"| retriever | abstained: never-mentioned ({n_never}) | abstained: mentioned ({n_known}) | "
                  "F1, never-mentioned only |", "|---|---|---|---|"]
        for r in RETRIEVERS:
            b = table[r].get("abstention_by_subject", {})
            lines.append(f"| {r} | {100 * b.get('never-mentioned', {}).get('abstained', 0.0):.1f} | "
                         f"{100 * b.get('mentioned', {}).get('abstained', 0.0):.1f} | "
                         f"{100 * b.get('f1_never_mentioned', 0.0):.1f} |")
    lines += ["", "Hits returned on answerable questions (precision: the share that are gold answers):", "",
              "| retriever | hit precision | hits per question |", "|---|---|---|"]
    for r in RETRIEVERS:
        h = table[r]["hits"]
        lines.append(f"| {r} | {100 * h['precision']:.1f} | {h['per_question']:.2f} |")
    if lat is not None:
        lines += ["", f"Recall latency with {lat['entries']} entries (encoder excluded; includes the receipt and "
                      f"exposure write; mean remember {lat['write_ms_mean']:.2f} ms):", "",
                  "| retriever | median ms | p95 ms |", "|---|---|---|"]
        for r in RETRIEVERS:
            lines.append(f"| {r} | {lat[r]['median_ms']:.2f} | {lat[r]['p95_ms']:.2f} |")
    if enc_lat is not None:
        lines += ["", f"Encoder alone, one question: median {enc_lat['median_ms']:.1f} ms, "
                      f"p95 {enc_lat['p95_ms']:.1f} ms."]
    return "\n".join(lines)


def targets(table: dict[str, Any], lat: dict[str, Any] | None, data: dict[str, Any] | None = None,
            splits: list[dict[str, list[dict[str, Any]]]] | None = None) -> list[str]:
    """The target lines; with ``data`` and the per-split ``results``, each figure with its 95% bootstrap interval."""
    out = []
    for key, label in (("r5", "end to end (abstentions count as misses)"), ("k5", "ranking alone (gate ignored)")):
        h = table["hybrid"]["categories"]
        others = [r for r in RETRIEVERS if r != "hybrid"]
        beats = all(h["overall"][key] > table[r]["categories"]["overall"][key] for r in others)
        margins = ", ".join(f"{r} {100 * (h['overall'][key] - table[r]['categories']['overall'][key]):+.1f}"
                            for r in others)
        worst = min((h[c][key] - table[r]["categories"][c][key], c, r)
                    for c in CATEGORIES if c != "abstention" and c in h for r in others)
        interval = closest = ""
        if data is not None and splits:
            lo, hi = bootstrap_gap(data, splits, worst[1], "hybrid", worst[2], key)
            interval = f"; 95% interval {100 * lo:+.1f} to {100 * hi:+.1f} over its {h[worst[1]]['n']} questions"
            rival = max(others, key=lambda r: table[r]["categories"]["overall"][key])
            lo, hi = bootstrap_gap(data, splits, "overall", "hybrid", rival, key)
            closest = f"; vs {rival}, 95% interval {100 * lo:+.1f} to {100 * hi:+.1f}"
        out.append(f"- R@5, {label}: hybrid beats every single retriever overall: {'yes' if beats else 'NO'} "
                   f"({margins}{closest}); worst category gap {100 * worst[0]:+.1f} points ({worst[1]} vs {worst[2]}"
                   f"{interval}): {'within' if worst[0] >= -0.05 else 'NOT within'} 5 points")
    f1 = table["hybrid"]["abstention"]["f1"]
    met = f1 >= 0.8 - 1e-9  # F1 exactly 0.8 (e.g. 24 of 28 abstentions right, 24 of 32 found) meets it
    interval = ""
    if data is not None and splits:
        lo, hi = bootstrap_f1(data, splits)
        interval = f" (95% interval {100 * lo:.1f} to {100 * hi:.1f})"
    out.append(f"- abstention F1 (hybrid, calibrated gate): {100 * f1:.1f}{interval}: {'met' if met else 'NOT met'} "
               f"(target 80)")
    subjects = table["hybrid"].get("abstention_by_subject")
    if subjects and "never-mentioned" in subjects:
        f1 = subjects["f1_never_mentioned"]
        interval = ""
        if data is not None and splits:
            lo, hi = bootstrap_f1(data, splits, subject="never-mentioned")
            interval = f" (95% interval {100 * lo:.1f} to {100 * hi:.1f})"
        out.append(f"- the same, never-mentioned topics only as unanswerable (the issue's definition; "
                   f"{subjects['never-mentioned']['n']} questions): {100 * f1:.1f}{interval}: "
                   f"{'met' if f1 >= 0.8 - 1e-9 else 'NOT met'} (target 80)")
    if lat is not None:
        med = lat["hybrid"]["median_ms"]
        out.append(f"- median hybrid recall with {lat['entries']} entries: {med:.2f} ms: "
                   f"{'met' if med <= 5.0 else 'NOT met'} (target 5 ms; load average {lat.get('load', '?')})")
    return out


def open_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """``--set`` overrides as :meth:`AgentMemory.open` arguments: each name goes to the
    :class:`RecallConfig`, :class:`Tuning` or :class:`WritePolicy` field of that name."""
    import dataclasses

    from hopmem.agent import RecallConfig, Tuning, WritePolicy

    out = {}
    for arg, cls in (("config", RecallConfig), ("tuning", Tuning), ("write_policy", WritePolicy)):
        names = {f.name for f in dataclasses.fields(cls)}
        mine = {k: v for k, v in overrides.items() if k in names}
        if mine:
            out[arg] = cls(**mine)
    unknown = set(overrides) - {f.name for cls in (RecallConfig, Tuning, WritePolicy) for f in dataclasses.fields(cls)}
    if unknown:
        raise SystemExit(f"--set: unknown settings {sorted(unknown)}")
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="test", metavar="test|test2..test13|dev|dev2|PATH[,...]",
                        help="the conversations: test (conversations.json, the default), test2 "
                             "(test2_conversations.json), test3 to test13 (test3_conversations.json ...), dev "
                             "(dev_conversations.json), dev2 (dev2_conversations.json) or a file in the same format; "
                             "several, separated by commas, "
                             "are pooled (each set in its own memory and calibrated on its own questions, every "
                             "question then scored once)")
    parser.add_argument("--quick", action="store_true", help="smaller latency run (2,000 entries, 1 repeat)")
    parser.add_argument("--encoder", default="minilm", choices=("minilm", "default", "hashing"),
                        help="minilm: all-MiniLM-L6-v2 on torch (the figures in the docs); default: the library's "
                             "default encoder (the same model, int8 on ONNX Runtime); hashing: no model")
    parser.add_argument("--entries", type=int, default=None, help="entries for the latency run (default 10000)")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--error-budget", type=float, default=None,
                        help="calibration error budget (default: AgentMemory.calibrate's)")
    parser.add_argument("--sweep", metavar="BUDGETS", default=None,
                        help="also report F1 and R@5 for these comma-separated error budgets, averaged over "
                             "--sweep-seeds fold splits")
    parser.add_argument("--sweep-seeds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--splits", type=int, default=1,
                        help="report the mean over this many fold splits (seeds --seed, --seed + 1, ...)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a RecallConfig, Tuning or WritePolicy field (for experiments)")
    parser.add_argument("--calibrate", action="append", default=[], metavar="ARG=VALUE",
                        help="pass an argument to AgentMemory.calibrate (for experiments), e.g. min_coverage=0.95")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="no calibrate() call: the library's default verdict models and gates")
    parser.add_argument("--fit-defaults", action="store_true",
                        help="fit the uncalibrated verdict models and gates (hopmem.agent.verdict.DEFAULT_MODELS and "
                             "DEFAULT_GATES) on every question of --data (use dev) at error budget 0.1, print them "
                             "and exit (benchmarks.agent_eval.fit_defaults)")
    fit_action = parser.add_mutually_exclusive_group()
    fit_action.add_argument("--write", action="store_true",
                            help="with --fit-defaults: write the associative and keyword models into the tuning "
                                 "record hopmem/data/tuning/default.json")
    fit_action.add_argument("--check", action="store_true",
                            help="with --fit-defaults: exit 1 unless the refit equals the shipped tuning record")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--dump", metavar="PATH", help="write per-question results here (the first fold split)")
    parser.add_argument("--plot", metavar="PATH", help="draw recall@5 per category and abstention, with 95%% "
                                                       "intervals, to this PNG (benchmarks.agent_eval.plot)")
    parser.add_argument("--cache", metavar="PATH", help="keep encoded vectors in this .npz between runs")
    args = parser.parse_args(argv)
    if args.splits < 1:
        parser.error("--splits: expected at least 1")

    names = [n.strip() for n in args.data.split(",") if n.strip()]
    sets = [load(name) for name in names]
    if len(sets) > 1 and (args.fit_defaults or args.sweep):
        parser.error("--fit-defaults and --sweep take one set in --data")
    if (args.write or args.check) and not (args.fit_defaults and names == ["dev"] and args.encoder == "minilm"
                                           and not args.set):
        parser.error("--write and --check: the shipped models are fitted with --fit-defaults --data dev "
                     "--encoder minilm and no --set")
    inner = make_encoder(args.encoder)
    encoder = CachedEncoder(inner)
    if args.cache:
        encoder.load(args.cache)
    for data in sets:
        encoder.preload([t["text"] for s in data["sessions"] for t in s["turns"]]
                        + [q["question"] for q in data["questions"]])
    if args.cache:
        encoder.save(args.cache)
    config = open_options(parse_overrides(args.set))
    if args.fit_defaults:
        from benchmarks.agent_eval import fit_defaults

        action = "write" if args.write else "check" if args.check else None
        return fit_defaults.main(encoder, sets[0], SETS.get(names[0], Path(names[0])), config, action)
    sweep_table = None
    per_set = []  # per set, one evaluate() per fold split
    with tempfile.TemporaryDirectory() as tmp:
        for k, data in enumerate(sets):
            mem, entry_of, _ = build_memory(os.path.join(tmp, f"eval{k}.db"), encoder, data, config)
            cosine = cosine_baseline(encoder, data)
            per_set.append([evaluate(mem, entry_of, data, cosine, error_budget=args.error_budget,
                                     seed=args.seed + n, calibrate_args=parse_overrides(args.calibrate),
                                     calibrated=not args.no_calibrate)
                            for n in range(args.splits)])
            if args.sweep:
                budgets = [float(b) for b in args.sweep.split(",") if b.strip()]
                sweep_table = sweep(mem, entry_of, data, cosine, budgets, args.sweep_seeds)
            mem.close()
    # each set in its own memory; the questions and their results pooled, so every question weighs once
    evs = [{"results": {m: [row for runs in per_set for row in runs[n]["results"][m]] for m in RETRIEVERS},
            "gates": per_set[0][n]["gates"]} for n in range(args.splits)]
    ev = evs[0]
    data = pooled(sets, names)
    table = mean_tables([score(data, e["results"]) for e in evs])
    lat = None
    if not args.no_latency:
        n = args.entries or (2000 if args.quick else 10000)
        lat = latency(encoder, sets[0], n, 1 if args.quick else 3)
    enc_lat = None if args.no_latency else encoder_latency(inner, sets[0], 20 if args.quick else 40)
    budget = args.error_budget
    if budget is None:
        import inspect

        from hopmem.agent import AgentMemory
        budget = inspect.signature(AgentMemory.calibrate).parameters["error_budget"].default
    meta = {"encoder": inner.name, "error_budget": budget, "gates": ev["gates"], "data": args.data,
            "uncalibrated": args.no_calibrate,
            "questions": len(data["questions"]), "splits": args.splits, "seed": args.seed}
    print(markdown(table, lat, enc_lat, meta))
    if sweep_table:
        print(f"\nError-budget sweep (mean over {args.sweep_seeds} fold splits):\n")
        print(sweep_table)
    print()
    print("Targets:")
    print("\n".join(targets(table, lat, data, [e["results"] for e in evs])))
    which = " (first fold split)" if args.splits > 1 else ""
    which += f" ({names[0]})" if len(names) > 1 else ""
    taus = ", ".join(f"{m} {', '.join(f'{t:.3f}' for t in v)}" for m, v in ev["gates"].items())
    print(f"\nGate tau per fold{which}: {taus}")
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "latency": lat, "encoder_latency": enc_lat,
                                               "meta": meta, "sweep": sweep_table}, indent=2))
    if args.plot:
        from benchmarks.agent_eval.plot import figure

        title = (f"{' and '.join(names)} {'sets pooled' if len(names) > 1 else 'set'}, {inner.name}, "
                 f"error budget {budget:g}"
                 + (f", means over {args.splits} fold splits" if args.splits > 1 else f", fold split {args.seed}"))
        print(f"Figure: {figure(data, [e['results'] for e in evs], args.plot, title=title)}")
    if args.dump:
        qs = data["questions"]
        rows = [{"id": q["id"], "category": q["category"], "question": q["question"], "answers": q["answers"],
                 **{m: ev["results"][m][i] for m in RETRIEVERS}} for i, q in enumerate(qs)]
        Path(args.dump).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
