"""Design study: what the agent memory's dedup (merge) and automatic supersession do on chat.

Usage::

    python -m research.locomo.study_dedup DATA_DIR [--encoder minilm] [--sample 100]
        [--labels labels.json] [--show]

Every turn is stored with the library defaults (as :mod:`.run` does). The
script lists every merged pair (a later turn merged into an earlier entry)
and every supersession pair (an older turn marked superseded by a newer one),
with the properties the issue's rule of thumb needs: same speaker or not,
time between them, whether either is small talk (a greeting or a short
reaction), and whether the newer turn carries an update cue.

Precision needs a person: ``--show`` prints a seeded sample of flagged pairs
(``--sample``, default 100) for hand-checking; ``--labels FILE`` reads the
verdicts (``{"conv:D1:2>D3:4": true, ...}``, ids only, no conversation text)
and reports precision with a 95% interval. The labels of the development
conversations are kept in ``dedup_labels.json`` beside this script; the
labelled pairs were sampled from what an earlier version flagged, so
``labelled_pairs_still_flagged`` reports which of them the current library
still flags (and how many flagged pairs no label covers).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.locomo.cache import default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import load_folder  # noqa: E402

SMALL_TALK = re.compile(
    r"^(hey|hi|hello|thanks|thank you|bye|good ?bye|see you|take care|wow|awesome|great|cool|nice|congrats|"
    r"congratulations|glad|sounds|that's (great|awesome|amazing|so|really)|same|sure|you too|me too)\b",
    re.IGNORECASE)


def small_talk(text: str) -> bool:
    """A greeting, thanks or short reaction ("Wow, that's great!"): says nothing about anyone's state."""
    body = re.sub(r"^[^:]+:\s*", "", text).strip()
    return bool(SMALL_TALK.match(body)) and len(body.split()) <= 12 or len(body.split()) <= 4


def pairs(conv: Any, encoder: Any) -> list[dict[str, Any]]:
    from hopmem.agent import AgentMemory
    from hopmem.agent.config import DEFAULT_UPDATE_CUES

    cues = re.compile(DEFAULT_UPDATE_CUES, re.IGNORECASE)
    unit = {u.dia_id: u for u in conv.units}
    out = []
    with AgentMemory.open(":memory:", encoder=encoder, namespace=f"locomo-{conv.id}") as mem:
        entries = mem.remember_many([{"text": u.text, "created_at": u.created_at,
                                      "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}}
                                     for u in conv.units], progress=False)
        first: dict[int, Any] = {}
        for u, e in zip(conv.units, entries):
            if e.merged:
                out.append(("merge", first[e.id], u))
            else:
                first[e.id] = u
        by_id = {e.id: e for e in mem.entries()}
        for e in by_id.values():
            if e.superseded_by is not None:
                out.append(("supersede", unit[e.metadata["dia_id"]], unit[by_id[e.superseded_by].metadata["dia_id"]]))
    rows = []
    for kind, old, new in out:
        rows.append({"key": f"{conv.id}:{old.dia_id}>{new.dia_id}", "kind": kind, "conversation": conv.id,
                     "old": old.dia_id, "new": new.dia_id, "old_text": old.text, "new_text": new.text,
                     "same_speaker": old.speaker == new.speaker, "days": (new.created_at - old.created_at) / 86400,
                     "same_session": old.session == new.session,
                     "small_talk": small_talk(old.text) or small_talk(new.text),
                     "cue": bool(cues.search(new.text))})
    return rows


#: Words that say a state *changed* (a stricter list than the library's update cues, which also hold
#: "new", "now", "again", "started", "currently": everyday words in chat).
CHANGE_CUES = re.compile(
    r"\b(no longer|not .{0,20} anymore|anymore|any more|switched|moved|changed|replaced|instead|quit|"
    r"stopped|left|lost|sold|retired|broke up|divorced|cancel(?:l)?ed|gave up)\b", re.IGNORECASE)


def strict(row: dict[str, Any]) -> bool:
    """A stricter rule: merges only of the same text by the same speaker; supersession only by the same
    speaker, neither turn small talk, and the newer turn saying a state changed (:data:`CHANGE_CUES`)."""
    if row["kind"] == "merge":
        return row["same_speaker"] and _norm(row["old_text"]) == _norm(row["new_text"])
    return row["same_speaker"] and not row["small_talk"] and bool(CHANGE_CUES.search(row["new_text"]))


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def proposed(row: dict[str, Any]) -> bool:
    """A first rule for chat: a merge only within a session by the same speaker (or verbatim); a
    supersession only by the same speaker, with an update cue, and neither turn small talk."""
    if row["kind"] == "merge":
        return row["same_speaker"] and (row["same_session"] or row["old_text"] == row["new_text"])
    return row["same_speaker"] and row["cue"] and not row["small_talk"]


def precision(labels: list[bool]) -> dict[str, float]:
    n = len(labels)
    if not n:
        return {"n": 0}
    p = sum(labels) / n
    rng = np.random.default_rng(0)
    boot = rng.choice(np.array(labels, float), size=(2000, n)).mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {"n": n, "precision": p, "ci95": [float(lo), float(hi)]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m research.locomo.study_dedup", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--sample", type=int, default=100)
    p.add_argument("--show", action="store_true", help="print the sample to hand-check")
    p.add_argument("--labels", default=str(Path(__file__).with_name("dedup_labels.json")))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = load_folder(args.data)
    encoder = make_encoder(args.encoder, cache)
    rows = [r for conv in convs for r in pairs(conv, encoder)]
    turns = sum(len(c.units) for c in convs)
    out: dict[str, Any] = {"turns": turns}
    for kind in ("merge", "supersede"):
        rs = [r for r in rows if r["kind"] == kind]
        out[kind] = {"pairs": len(rs), "cross_speaker": sum(not r["same_speaker"] for r in rs),
                     "small_talk": sum(r["small_talk"] for r in rs),
                     "over_a_day_apart": sum(r["days"] > 1 for r in rs),
                     "kept_by_proposed_rule": sum(proposed(r) for r in rs),
                     "kept_by_strict_rule": sum(strict(r) for r in rs)}
    rng = random.Random(0)
    sample = rng.sample(rows, min(args.sample, len(rows)))
    if args.show:
        for r in sample:
            print(f"{r['key']} [{r['kind']}, same speaker {r['same_speaker']}, {r['days']:.1f} days, "
                  f"small talk {r['small_talk']}, cue {r['cue']}]\n"
                  f"  OLD {r['old_text'][:160]}\n  NEW {r['new_text'][:160]}")
    labels_path = Path(args.labels)
    if labels_path.is_file():
        labels = json.loads(labels_path.read_text())
        checked = [r for r in sample if r["key"] in labels]
        flagged = {r["key"]: r for r in rows}
        out["labelled_pairs_still_flagged"] = {
            "labelled": len(labels), "correct_labelled": sum(labels.values()),
            "still_flagged": precision([labels[k] for k in labels if k in flagged]),
            "correct_still_flagged": sum(1 for k, ok in labels.items() if ok and k in flagged),
            "flagged_unlabelled": sum(1 for k in flagged if k not in labels),
        }
        out["hand_checked"] = {
            "today": precision([labels[r["key"]] for r in checked]),
            "today_merge": precision([labels[r["key"]] for r in checked if r["kind"] == "merge"]),
            "today_supersede": precision([labels[r["key"]] for r in checked if r["kind"] == "supersede"]),
            "proposed_rule": precision([labels[r["key"]] for r in checked if proposed(r)]),
            "proposed_rule_recall_of_correct": (
                sum(1 for r in checked if labels[r["key"]] and proposed(r))
                / max(1, sum(1 for r in checked if labels[r["key"]]))),
            "strict_rule": precision([labels[r["key"]] for r in checked if strict(r)]),
            "strict_rule_recall_of_correct": (
                sum(1 for r in checked if labels[r["key"]] and strict(r))
                / max(1, sum(1 for r in checked if labels[r["key"]]))),
        }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
