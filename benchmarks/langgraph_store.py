"""HopmemStore.search(query=...) against the agent memory's own recall, at the same size, encoder excluded.

Builds one LangGraph namespace of N items (default 10,000 generated personal statements, ``{"text": ...}``)
through :class:`hopmem.integrations.langgraph.HopmemStore`, then asks Q questions (about stored topics, and
unrelated ones that abstain) two ways, alternating, R rounds:

* ``store.search(namespace, query=q, limit=5)``: LangGraph's call path (``BaseStore.search`` -> ``batch``),
  the recall, the items read from SQLite and built into ``SearchItem`` objects;
* ``store.memory(namespace).recall(q, limit=5, record=False)``: the same agent memory, called directly.

The encoder is wrapped in a cache that holds every text's vector before timing starts, so both sides pay a
dictionary lookup instead of the model. Reports the medians (p50) and p95 of each and the difference.

    python -m benchmarks.langgraph_store                 # 10,000 items, all-MiniLM-L6-v2 vectors
    python -m benchmarks.langgraph_store --items 2000 --encoder hashing --json out.json

Target (issue 35): search p50 within 2 ms of recall p50 at 10,000 items.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.agent_eval.run import CachedEncoder

NAMES = ["Alice", "Bruno", "Chidi", "Dana", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kaito", "Lena",
         "Mateo", "Nia", "Oskar", "Priya", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Vera", "Wen", "Yara", "Zane"]
#: (what a statement says, how a question asks about it)
THINGS = [("climbs at", "climb"), ("teaches piano in", "teach piano"), ("rents a flat in", "rent a flat"),
          ("runs a bakery in", "run a bakery"), ("volunteers at a shelter in", "volunteer"),
          ("keeps bees near", "keep bees"), ("studies Portuguese for a trip to", "plan a trip"),
          ("repairs old bicycles in", "repair bicycles"), ("sings in a choir in", "sing in a choir"),
          ("swims in the lake near", "swim"), ("grows tomatoes in", "grow tomatoes"),
          ("coaches under-12 football in", "coach football"), ("photographs birds around", "photograph birds"),
          ("restores furniture in", "restore furniture"), ("drives a tram in", "drive a tram")]
PLACES = ["Lyon", "Porto", "Tromso", "Kyoto", "Valparaiso", "Graz", "Accra", "Hobart", "Tartu", "Cusco",
          "Bergen", "Oaxaca", "Tbilisi", "Leeds", "Pune", "Quebec", "Malmo", "Zadar", "Ghent", "Perth", "Bilbao",
          "Cork", "Split", "Turku", "Kazan"]
UNRELATED = ["What is the boiling point of tungsten?", "Who wrote the Brothers Karamazov?",
             "How many moons does Neptune have?", "How do I reverse a linked list in Rust?",
             "When was the Treaty of Westphalia signed?"]


def statements(n: int) -> list[str]:
    combos = itertools.product(NAMES, THINGS, PLACES, range(1 + n // (len(NAMES) * len(THINGS) * len(PLACES))))
    return [f"{name} {thing[0]} {place}" + (f" since {2000 + k}." if k else ".") for name, thing, place, k in
            itertools.islice(combos, n)]


def questions(n: int) -> list[str]:
    asked = [f"Where does {NAMES[i % len(NAMES)]} {THINGS[(3 * i) % len(THINGS)][1]}?" for i in range(n)]
    return asked + UNRELATED


def make_encoder(name: str) -> Any:
    from hopmem.text.encoders import HashingEncoder, default_encoder

    return HashingEncoder(384) if name == "hashing" else default_encoder()


def run(items: int, rounds: int, n_questions: int, encoder_name: str, path: Path) -> dict[str, Any]:
    from langgraph.store.base import PutOp

    from hopmem.integrations.langgraph import HopmemStore

    texts, asked = statements(items), questions(n_questions)
    encoder = CachedEncoder(make_encoder(encoder_name))
    t0 = time.perf_counter()
    encoder.preload(texts + asked)
    encode_s = time.perf_counter() - t0
    ns = ("memories", "bench-user")
    with HopmemStore.open(path, index={"fields": ["text"]}, encoder=encoder) as store:
        t0 = time.perf_counter()
        for start in range(0, items, 1000):
            store.batch([PutOp(ns, f"k{i}", {"text": texts[i]}) for i in range(start, min(items, start + 1000))])
        build_s = time.perf_counter() - t0
        memory = store.memory(ns)
        assert len(memory) == items, (len(memory), items)
        search_ms: list[float] = []
        recall_ms: list[float] = []
        answered = 0
        for q in asked:  # warm both paths
            store.search(ns, query=q, limit=5)
            memory.recall(q, limit=5, record=False)
        for r in range(rounds):
            for q in asked:
                pair = [("search", lambda q=q: store.search(ns, query=q, limit=5)),
                        ("recall", lambda q=q: memory.recall(q, limit=5, record=False))]
                for name, call in (pair if r % 2 == 0 else pair[::-1]):
                    t = time.perf_counter()
                    out = call()
                    (search_ms if name == "search" else recall_ms).append((time.perf_counter() - t) * 1e3)
                    if name == "search" and r == 0:
                        answered += bool(out)

    def q95(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=20)[-1]

    s50, r50 = statistics.median(search_ms), statistics.median(recall_ms)
    return {"items": items, "encoder": encoder.name, "questions": len(asked), "rounds": rounds,
            "answered": answered, "build_s": round(build_s, 2), "encode_s": round(encode_s, 2),
            "search_p50_ms": round(s50, 3), "recall_p50_ms": round(r50, 3), "difference_p50_ms": round(s50 - r50, 3),
            "search_p95_ms": round(q95(search_ms), 3), "recall_p95_ms": round(q95(recall_ms), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--encoder", choices=["default", "hashing"], default="default",
                    help="the vectors' model (its time is excluded either way); default: all-MiniLM-L6-v2")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.items, args.rounds, args.questions, args.encoder, Path(tmp) / "bench.db")
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["difference_p50_ms"] <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
