"""all-MiniLM-L6-v2 on torch against ONNX Runtime (float32 and int8): encode, ingest, recall and open times.

Usage::

    python -m benchmarks.encoders [LOCOMO_DIR] [--encoders torch onnx onnx-int8] [--runs 3]
        [--entries 10000] [--json PATH] [--quick] [--encode-only]

``LOCOMO_DIR`` is the LoCoMo data folder (one ``*.json`` per conversation);
without it the turns and questions come from hopmem's bundled
``data/conversation.json`` (far fewer). Per encoder, each figure is the median
over ``--runs`` runs:

* ``encode_p50_ms``: one query per ``encode`` call (questions of the data),
  after a warm-up; the p50 of a run.
* ``encode_turns_per_s``: every turn encoded by one ``encode`` call (the
  encoder alone, batched as it batches), turns over seconds.
* ``batch_max_abs_diff``: the largest difference between a text's vector
  encoded alone and inside the batch of all turns (40 turns): 0 for an
  encoder whose vectors do not depend on their batch.
* ``ingest_turns_per_s``: every turn of every conversation written into a
  fresh agent memory file with ``remember_many``, end to end (open, encode,
  store, close); turns over seconds.
* ``recall_p50_ms``: ``AgentMemory.recall`` of a question, the encoder
  included, in a memory of ``--entries`` entries (the data's turns plus
  synthetic ones whose vectors mix the turns' vectors: filling 10,000 entries
  through torch would take minutes and tells nothing about recall).
* ``open_new_s``: ``AgentMemory.open`` of a new file with a constructed
  encoder, then close (the shipped centering mean makes this encode nothing).
* ``construct_s``: building the encoder (the first one of its kind in the
  process; the ONNX graph cache already written by a previous run).
* ``min_cosine_vs_torch`` / ``mean_cosine_vs_torch``: agreement of the vectors
  of every turn with the torch encoder's.

``--encode-only`` measures only the single-query encode p50, with the
encoders taking turns within each run, so that a change of load on a shared
machine falls on all of them alike (a minute instead of a quarter of an hour).

BLAS and OpenMP threads are pinned to one and every encoder runs one intra-op
thread, so the backends compare on equal terms. Times are wall clock, each
with the process's CPU time beside it: on a shared, busy machine the CPU time
of a one-thread run is the better estimate of an idle machine's wall time. The table is printed; the
numbers are written as JSON (``--json``, default ``build/encoders-bench.json``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

#: The encoders compared, by label.
LABELS = ("torch", "onnx", "onnx-int8")


def make(label: str, threads: int = 1) -> Any:
    from hopmem.text.encoders import OnnxEncoder, SentenceTransformerEncoder

    if label == "torch":
        return SentenceTransformerEncoder(num_threads=threads)
    if label == "onnx":
        return OnnxEncoder(num_threads=threads)
    if label == "onnx-int8":
        return OnnxEncoder(quantize="int8", num_threads=threads)
    raise SystemExit(f"--encoders: expected some of {', '.join(LABELS)}, got {label!r}")


def load_data(folder: str | None) -> tuple[list[list[dict[str, Any]]], list[str], str]:
    """(turns per conversation as remember_many items, questions, a description of the data)."""
    if folder:
        from benchmarks.locomo.data import load_folder

        convs = load_folder(folder)
        turns = [[{"text": u.text, "created_at": u.created_at} for u in c.units] for c in convs]
        questions = [q.text for c in convs for q in c.questions]
        return turns, questions, f"LoCoMo {folder} ({len(convs)} conversations)"
    data = json.loads((Path(__file__).resolve().parents[1] / "hopmem" / "data" / "conversation.json").read_text())
    turns = [[{"text": s["text"], "created_at": float(i)} for i, s in enumerate(data["statements"])]]
    questions = [q["question"] for q in data["related"]] + list(data["unrelated"])
    return turns, questions, "hopmem/data/conversation.json"


class Prefilled:
    """``inner`` with some texts' vectors given in advance (same name, dim, fingerprint)."""

    def __init__(self, inner: Any, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.inner, self.name, self.dim, self.fingerprint = inner, inner.name, inner.dim, inner.fingerprint
        self.table = dict(zip(texts, vectors))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if texts and all(t in self.table for t in texts):
            return np.stack([self.table[t] for t in texts]).astype(np.float32)
        return self.inner.encode(texts)


def filler_texts(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    people = ["Ana", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana"]
    subjects = ["the billing job", "the garden", "her new camera", "the team offsite", "his violin lessons",
                "the kitchen tap", "a trip to Lisbon", "the quarterly report"]
    verbs = ["needs", "finished", "postponed", "started", "mentioned", "fixed", "cancelled", "booked"]
    objects = ["by Friday", "after the rain", "with a friend", "for the kids", "at the library", "twice"]
    return [f"{rng.choice(people)} said {rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} "
            f"(note {i})." for i in range(n)]


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn()``. On a shared machine the CPU time of a
    one-thread computation is close to what the wall time would be on an idle one."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def p50s(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """Median wall and median CPU time, in ms."""
    return 1e3 * statistics.median(w for w, _ in pairs), 1e3 * statistics.median(c for _, c in pairs)


def encode_p50(encoder: Any, questions: list[str]) -> tuple[float, float]:
    for q in questions[:10]:
        encoder.encode([q])
    return p50s([timed(lambda: encoder.encode([q])) for q in questions])


def ingest(encoder: Any, conversations: list[list[dict[str, Any]]], tmp: Path, run: int) -> tuple[float, float]:
    """Turns per second of wall time and of CPU time."""
    from hopmem.agent import AgentMemory

    def write_all() -> None:
        for i, items in enumerate(conversations):
            with AgentMemory.open(tmp / f"ingest-{run}-{i}.db", encoder=encoder, namespace="bench") as mem:
                mem.remember_many(items, progress=False)

    turns = sum(len(c) for c in conversations)
    wall, cpu = timed(write_all)
    return turns / wall, turns / cpu


def recall_p50s(encoder: Any, base_texts: list[str], base_vectors: np.ndarray, entries: int,
                questions: list[str], runs: int, tmp: Path) -> list[tuple[float, float]]:
    from hopmem.agent import AgentMemory

    filler = filler_texts(max(0, entries - len(base_texts)))
    rng = np.random.default_rng(7)
    mix = rng.dirichlet(np.full(len(base_vectors), 0.05), size=len(filler)).astype(np.float32)
    vectors = mix @ base_vectors + 0.02 * rng.standard_normal((len(filler), base_vectors.shape[1])).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    prefilled = Prefilled(encoder, base_texts + filler, np.concatenate([base_vectors, vectors]))
    texts = (base_texts + filler)[:entries]
    out = []
    with AgentMemory.open(tmp / "recall.db", encoder=prefilled, namespace="bench") as mem:
        mem.remember_many([{"text": t, "created_at": float(i)} for i, t in enumerate(texts)], progress=False)
        for q in questions[:10]:
            mem.recall(q, record=False)
        for run in range(runs):
            chosen = questions[run::runs][:150]
            out.append(p50s([timed(lambda: mem.recall(q, record=False)) for q in chosen]))
    return out


def open_new(encoder: Any, tmp: Path, runs: int) -> list[float]:
    from hopmem.agent import AgentMemory

    def once(i: int) -> None:
        with AgentMemory.open(tmp / f"new-{i}.db", encoder=encoder, namespace="bench"):
            pass

    once(-1)  # the first open imports the agent layer
    return [timed(lambda: once(i))[0] for i in range(runs)]


def measure(label: str, conversations: list[list[dict[str, Any]]], questions: list[str], runs: int,
            entries: int, reference: np.ndarray | None, threads: int = 1) -> tuple[dict[str, Any], np.ndarray]:
    t0 = time.perf_counter()
    encoder = make(label, threads)
    construct = time.perf_counter() - t0
    texts = [item["text"] for items in conversations for item in items]
    vectors = encoder.encode(texts)
    out: dict[str, Any] = {"name": encoder.name, "fingerprint": str(encoder.fingerprint),
                           "construct_s": round(construct, 3)}
    sample = range(0, len(texts), max(1, len(texts) // 40))
    alone = np.stack([encoder.encode([texts[i]])[0] for i in sample])
    out["batch_max_abs_diff"] = float(np.abs(alone - vectors[list(sample)]).max())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        bulk = [timed(lambda: encoder.encode(texts)) for _ in range(runs)]
        bulk = [(len(texts) / wall, len(texts) / cpu) for wall, cpu in bulk]
        enc = [encode_p50(encoder, questions[:300]) for _ in range(runs)]
        ing = [ingest(encoder, conversations, tmp, run) for run in range(runs)]
        rec = recall_p50s(encoder, texts, vectors, entries, questions, runs, tmp)
        opn = open_new(encoder, tmp, runs)
    def med(pairs: list[tuple[float, float]], i: int, digits: int) -> float:
        return round(statistics.median(p[i] for p in pairs), digits)

    out.update({
        "encode_p50_ms": med(enc, 0, 2), "encode_p50_cpu_ms": med(enc, 1, 2),
        "encode_turns_per_s": med(bulk, 0, 1), "encode_turns_per_cpu_s": med(bulk, 1, 1),
        "ingest_turns_per_s": med(ing, 0, 1), "ingest_turns_per_cpu_s": med(ing, 1, 1),
        "recall_p50_ms": med(rec, 0, 2), "recall_p50_cpu_ms": med(rec, 1, 2),
        "open_new_s": round(statistics.median(opn), 3),
        "runs": {"encode_p50_ms": enc, "encode_turns_per_s": bulk, "ingest_turns_per_s": ing,
                 "recall_p50_ms": rec, "open_new_s": opn},
    })
    if reference is not None:
        cosines = (vectors * reference).sum(axis=1) / np.maximum(
            np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1), 1e-12)
        out["min_cosine_vs_torch"] = round(float(cosines.min()), 6)
        out["mean_cosine_vs_torch"] = round(float(cosines.mean()), 6)
    return out, vectors


def encode_only(labels: list[str], questions: list[str], runs: int, threads: int = 1) -> dict[str, Any]:
    """Single-query encode p50 per encoder, the encoders taking turns within each run (so a change in the
    machine's load falls on all of them alike): the quick comparison."""
    encoders = {label: make(label, threads) for label in labels}
    for encoder in encoders.values():
        for q in questions[:20]:
            encoder.encode([q])
    runs_ms: dict[str, list[float]] = {label: [] for label in labels}
    for run in range(runs):
        for label, encoder in encoders.items():
            runs_ms[label].append(encode_p50(encoder, questions[run::runs][:150])[0])
    return {label: {"encode_p50_ms": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]}
            for label, v in runs_ms.items()}


def table(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"{meta['data']}: {meta['turns']} turns, {meta['questions']} questions; recall at "
             f"{meta['entries']} entries; medians of {meta['runs']} runs; {meta['threads']} encoder thread(s) each",
             "", "Each time is wall (CPU of the process): on a busy machine the CPU time of one-thread runs "
             "is closer to what an idle machine's wall time would be.", "",
             "| encoder | encode p50 ms | encode turns/s | ingest turns/s | recall p50 ms (encoder incl.) | "
             "open new s | construct s | min / mean cosine vs torch | batch max abs diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        agree = (f"{r['min_cosine_vs_torch']:.4f} / {r['mean_cosine_vs_torch']:.5f}"
                 if "min_cosine_vs_torch" in r else "-")
        lines.append(f"| {label} | {r['encode_p50_ms']:.2f} ({r['encode_p50_cpu_ms']:.2f}) | "
                     f"{r['encode_turns_per_s']:.0f} ({r['encode_turns_per_cpu_s']:.0f}) | "
                     f"{r['ingest_turns_per_s']:.0f} ({r['ingest_turns_per_cpu_s']:.0f}) | "
                     f"{r['recall_p50_ms']:.2f} ({r['recall_p50_cpu_ms']:.2f}) | {r['open_new_s']:.3f} | "
                     f"{r['construct_s']:.2f} | {agree} | {r['batch_max_abs_diff']:.1e} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.encoders", description=__doc__.split("\n")[0])
    parser.add_argument("data", nargs="?", metavar="LOCOMO_DIR", help="LoCoMo data folder (default: bundled texts)")
    parser.add_argument("--encoders", nargs="+", default=list(LABELS), choices=LABELS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads of every encoder (default 1, the like-for-like comparison; "
                             "the library's default is up to 2)")
    parser.add_argument("--entries", type=int, default=10000, help="entries in the recall memory (default 10000)")
    parser.add_argument("--quick", action="store_true", help="one run, 2,000 entries (a smoke test)")
    parser.add_argument("--encode-only", action="store_true",
                        help="only the single-query encode p50, the encoders taking turns within each run")
    parser.add_argument("--json", metavar="PATH", default="build/encoders-bench.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    runs, entries = (1, 2000) if args.quick else (args.runs, args.entries)
    conversations, questions, description = load_data(args.data)
    meta = {"data": description, "turns": sum(len(c) for c in conversations), "questions": len(questions),
            "entries": entries, "runs": runs, "threads": args.threads, "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg()}
    if args.encode_only:
        quick = encode_only(list(args.encoders), questions, runs, args.threads)
        print(f"{description}: single-query encode p50 ms, median of {runs} runs (encoders taking turns), "
              f"load average {os.getloadavg()[0]:.1f}")
        for label, r in quick.items():
            print(f"{label}: {r['encode_p50_ms']:.2f} (runs {r['runs']})")
        return write_json(args.json, {"meta": meta, "encode_only": quick})
    results: dict[str, dict[str, Any]] = {}
    reference = None
    for label in sorted(args.encoders, key=lambda name: name != "torch"):  # torch first: the reference
        print(f"measuring {label} ...", file=sys.stderr, flush=True)
        results[label], vectors = measure(label, conversations, questions, runs, entries, reference, args.threads)
        if label == "torch":
            reference = vectors
    meta["load_average_after"] = os.getloadavg()
    print(table(results, meta))
    return write_json(args.json, {"meta": meta, "results": results})


def write_json(path: str | None, out: dict[str, Any]) -> dict[str, Any]:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
