"""Per-question verdict signals for the design study, collected once per encoder and cached as JSON lines.

For every question (answerable and never-mentioned) of every conversation,
with one agent memory per conversation at library defaults:

* what the memory's ``recall`` did today (abstained, its verdict features and
  log-odds statistic, the read's first contact);
* its ``rank`` list (top 20 with each hit's turn, text and per-list ranks),
  from which the evidence recall of "rank, then a verdict" follows;
* raw dense cosines (top 1, mean of the top 10) and centered cosines;
* the same for self-calibration probes (category -1: made from the memory's
  own entries; -2: the shipped generic questions, see :mod:`.probes`);
* content words of the question: lowercase words of 3+ letters that are not
  one of the two speakers' names, not a stop word (the agent's keyword stop
  list) and not an everyday word (Zipf frequency in English >= 6.0, wordfreq),
  matched by the agent's light stemmer against the top hits' words and
  against the whole memory, with their English Zipf values and their
  document frequency in the memory (for weighted shares).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from benchmarks.locomo.cache import CachedEncoder
from benchmarks.locomo.data import Conversation
from benchmarks.locomo.run import open_memory

from .probes import entry_probes, generic_probes

__all__ = ["EVERYDAY_ZIPF", "content_words", "collect", "load_signals"]

#: A word at least this frequent in English (Zipf) is everyday vocabulary, not a question's subject.
EVERYDAY_ZIPF = 6.0
TOP = 20


class _Asked:
    def __init__(self, text: str, category: int, evidence: tuple[str, ...]) -> None:
        self.text, self.category, self.evidence = text, category, evidence


def content_words(text: str, names: set[str]) -> list[str]:
    from hopmem.agent import english
    from hopmem.agent.keyword import STOP_WORDS

    out = []
    for w in re.findall(r"[a-z][a-z'-]*[a-z]", text.lower()):
        w = re.sub(r"'s$", "", w)
        if len(w) < 3 or w in names or w in STOP_WORDS or english.zipf(w) >= EVERYDAY_ZIPF or w in out:
            continue
        out.append(w)
    return out


def _stems(text: str) -> set[str]:
    from hopmem.agent.keyword import query_terms, stem

    return {stem(t) for t in query_terms(text)}


def collect_conversation(conv: Conversation, encoder: CachedEncoder) -> list[dict[str, Any]]:
    from hopmem.agent import english
    from hopmem.agent.keyword import stem

    mem, _ = open_memory(conv, encoder)
    try:
        texts = [u.text for u in conv.units]
        raw = encoder.encode(texts)
        raw = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        centered = np.atleast_2d(mem.centerer.transform(encoder.encode(texts)))
        unit_stems = [_stems(t) for t in texts]
        df: dict[str, int] = {}
        for s in unit_stems:
            for w in s:
                df[w] = df.get(w, 0) + 1
        names = {n.lower() for n in conv.speakers}
        probes = ([(t, -1) for t in entry_probes([(u.speaker, u.text) for u in conv.units],
                                                  lambda t: content_words(t, names))]
                  + [(t, -2) for t in generic_probes(conv.speakers)])
        asked = [(q.text, q.category, q.evidence) for q in [*conv.questions, *conv.never]]
        asked += [(t, c, ()) for t, c in probes]
        out = []
        for text, category, evidence in asked:
            q = _Asked(text, category, evidence)
            sel = mem.recall(q.text, limit=5, record=False)
            ranked = mem.rank(q.text, limit=TOP)
            qraw = encoder.encode([q.text])[0]
            qraw = qraw / np.linalg.norm(qraw)
            qc = np.atleast_2d(mem.centerer.transform(encoder.encode([q.text])))[0]
            cos_raw = np.sort(raw @ qraw)[::-1]
            cos_c = np.sort(centered @ qc)[::-1]
            words = content_words(q.text, names)
            out.append({
                "conversation": conv.id, "question": q.text, "category": q.category, "evidence": list(q.evidence),
                "abstained": bool(sel.abstained), "override": sel.override, "statistic": sel.statistic,
                "features": sel.features, "first_contact": sel.first_contact, "novelty": sel.novelty,
                "recall_ids": [h.metadata["dia_id"] for h in sel.hits],
                "rank": [{"dia": h.metadata["dia_id"], "text": h.text, "ranks": h.explanation.ranks,
                          "semantic": h.explanation.semantic, "keyword": h.explanation.keyword,
                          "evidence": h.explanation.evidence} for h in ranked],
                "dense_top1": float(cos_raw[0]), "dense_top10": float(cos_raw[:10].mean()),
                "centered_top1": float(cos_c[0]), "centered_top10": float(cos_c[:10].mean()),
                "words": [{"w": w, "zipf": english.zipf(w), "df": df.get(stem(w), 0)} for w in words],
                "entries": len(texts),
            })
        return out
    finally:
        mem.close()


def collect(convs: list[Conversation], encoder: CachedEncoder, path: Path) -> list[dict[str, Any]]:
    """The signal records of ``convs`` (read from ``path`` when it holds them all; else computed and saved)."""
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        if {r["conversation"] for r in rows} >= {c.id for c in convs}:
            return [r for r in rows if r["conversation"] in {c.id for c in convs}]
    rows = []
    for conv in tqdm(convs, desc="conversations", unit="conv"):
        rows.extend(collect_conversation(conv, encoder))
        encoder.save()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def load_signals(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
