"""Recall latency at 10,000 entries on a LoCoMo conversation, two configurations interleaved (encoder excluded).

Usage::

    python -m benchmarks.locomo.latency DATA_DIR [--conversation 43] [--entries 10000] [--repeats 4]
        [--encoder onnx-int8] [--cache DIR] [--json out.json] [--baseline steps|aggregation|rerank]

One agent memory holds the conversation's turns (as the benchmark stores
them: metadata naming the turn and its speaker) plus synthetic filler turns up
to ``--entries``. The filler alternates the two speakers and its vectors are
sparse mixtures of the real turns' vectors plus noise, as in
``benchmarks.agent_eval``'s latency run, so the model is never called for
them. Every answerable question of the conversation is asked
``--repeats`` times under each configuration: the library defaults, and the
same without the final order's subject and date steps (``subject_boost=0``,
``date_boost=0``), or with ``--baseline aggregation`` the same without the
deeper reads of questions asking for several things
(``aggregation_k=assoc_k``; those questions' own times are reported too),
or with ``--baseline rerank`` the same memory opened without its reranker
(``reranker=False``). Each configuration has its own memory holding the same
entries. The two alternate question by question, so both see the same
machine load. Reported: each configuration's ``retrieve_ms`` (encoder
excluded) median and p95, and the paired difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .cache import ENCODERS, CachedEncoder, default_cache_dir, make_encoder  # noqa: E402
from .data import load_folder  # noqa: E402


class _WithFiller:
    """``inner`` (a :class:`CachedEncoder`), plus fixed vectors for the filler texts."""

    def __init__(self, inner: CachedEncoder, filler: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.filler = filler
        self.name, self.dim, self.fingerprint = inner.name, inner.dim, inner.fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.filler]
        known = dict(zip(missing, self.inner.encode(missing))) if missing else {}
        return np.stack([self.filler[t] if t in self.filler else known[t] for t in texts]).astype(np.float32)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent import AgentMemory, RecallConfig, Tuning
    from hopmem.agent.parts import asks_for_several

    p = argparse.ArgumentParser(prog="python -m benchmarks.locomo.latency", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--conversation", default=None, help="file stem (default: the folder's last conversation)")
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--encoder", choices=ENCODERS, default="onnx-int8")
    p.add_argument("--cache", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--baseline", choices=("steps", "aggregation", "rerank"), default="steps",
                   help="the configuration the defaults are compared with (see the module docstring)")
    args = p.parse_args(argv)
    convs = load_folder(args.data, [args.conversation] if args.conversation else None)
    conv = convs[-1]
    inner = make_encoder(args.encoder, Path(args.cache) if args.cache else default_cache_dir())
    base = inner.encode([u.text for u in conv.units])
    inner.save()
    rng = np.random.default_rng(7)
    n = max(0, args.entries - len(conv.units))
    a, b = conv.speakers
    texts = [f"{(a, b)[i % 2]}: filler note {i} on sprint {int(rng.integers(1, 80))} and ticket OPS-{10000 + i}"
             for i in range(n)]
    mix = rng.dirichlet(np.full(len(base), 0.05), size=n).astype(np.float32)
    vectors = mix @ base + 0.02 * rng.standard_normal((n, base.shape[1])).astype(np.float32)
    encoder = _WithFiller(inner, dict(zip(texts, vectors)))
    configs: dict[str, dict[str, Any]] = {"defaults": {}}
    if args.baseline == "aggregation":
        configs["without deeper reads"] = {"tuning": Tuning(aggregation_k=RecallConfig().assoc_k)}
    elif args.baseline == "rerank":
        configs["without the reranker"] = {"reranker": False}
    else:
        configs["without subject and date steps"] = {"tuning": Tuning(subject_boost=0.0, date_boost=0.0)}
    samples: dict[str, list[float]] = {name: [] for name in configs}
    several: dict[str, list[float]] = {name: [] for name in configs}
    start = max(u.created_at for u in conv.units) + 86400.0
    items = ([{"text": u.text, "created_at": u.created_at, "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}}
              for u in conv.units]
             + [{"text": t, "created_at": start + 600.0 * i, "metadata": {"speaker": (a, b)[i % 2]}}
                for i, t in enumerate(texts)])
    questions = [q.text for q in conv.questions]
    mems = {}
    try:
        for name, kwargs in configs.items():
            mems[name] = AgentMemory.open(":memory:", encoder=encoder, namespace=f"latency-{conv.id}", **kwargs)
            mems[name].remember_many(items, progress=False)
            for q in questions[:10]:  # warm-up: builds the engine memory, fills caches
                mems[name].recall(q, record=False)
        names = list(configs)
        for rep in range(args.repeats):
            for q in questions:
                for name in (names if rep % 2 == 0 else names[::-1]):
                    ms = mems[name].recall(q, record=False).timings["retrieve_ms"]
                    samples[name].append(ms)
                    if asks_for_several(q):
                        several[name].append(ms)
        entries = len(mems[names[0]])
    finally:
        for mem in mems.values():
            mem.close()
    inner.save()
    diff = np.asarray(samples[names[0]]) - np.asarray(samples[names[1]])
    out: dict[str, Any] = {
        "conversation": conv.id, "entries": entries, "questions": len(conv.questions), "repeats": args.repeats,
        "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
        **{name: {"p50_ms": statistics.median(v), "p95_ms": float(np.percentile(v, 95))}
           for name, v in samples.items()},
        "paired_difference_ms": {"median": float(np.median(diff)), "mean": float(diff.mean())},
    }
    if args.baseline == "aggregation":
        out["questions asking for several things"] = {
            name: {"n": len(v), "p50_ms": statistics.median(v), "p95_ms": float(np.percentile(v, 95))}
            for name, v in several.items() if v}
    print(f"conversation {conv.id}, {entries} entries, {len(questions)} questions x {args.repeats}, "
          f"load {out['load']}; retrieve_ms (encoder excluded):")
    for name in names:
        print(f"  {name}: p50 {out[name]['p50_ms']:.2f} ms, p95 {out[name]['p95_ms']:.2f} ms")
    print(f"  paired difference (defaults minus without): median {out['paired_difference_ms']['median']:+.3f} ms")
    for name, v in out.get("questions asking for several things", {}).items():
        print(f"  questions asking for several things ({v['n']}), {name}: p50 {v['p50_ms']:.2f} ms, "
              f"p95 {v['p95_ms']:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
