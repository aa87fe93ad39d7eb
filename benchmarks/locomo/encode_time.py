"""Encode time of the LoCoMo scripts' model encoders on the development conversations' own texts.

Usage::

    python -m benchmarks.locomo.encode_time LOCOMO_DATA_DIR [--encoders minilm e5] [--questions 60]
        [--batches 8] [--batch 64] [--json out.json]

Each encoder is constructed as :func:`.cache.make_encoder` builds it (one
thread), never cached, and warmed up with one call. Then, alternating between
the encoders call by call so that the machine's load falls on all of them alike:

* **per query**: ``--questions`` questions drawn with a fixed seed, each encoded
  alone (a recall encodes its question in one call);
* **per turn batch**: ``--batches`` runs of ``--batch`` consecutive turns, each
  encoded in one call (what ``remember_many`` hands the encoder).

Reports the median and the 10th-90th percentiles of each, in milliseconds, and
the turn batch's median per turn.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .cache import make_encoder  # noqa: E402
from .data import load_folder  # noqa: E402


def _stats(seconds: list[float]) -> dict[str, float]:
    ms = 1e3 * np.asarray(seconds)
    return {"median": float(np.median(ms)), "p10": float(np.percentile(ms, 10)),
            "p90": float(np.percentile(ms, 90)), "n": len(ms)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.locomo.encode_time", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="LOCOMO_DATA_DIR")
    p.add_argument("--encoders", nargs="+", default=["minilm", "e5"], choices=("minilm", "e5"))
    p.add_argument("--questions", type=int, default=60, help="questions encoded one at a time (default 60)")
    p.add_argument("--batches", type=int, default=8, help="turn batches (default 8)")
    p.add_argument("--batch", type=int, default=64, help="turns per batch (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    convs = load_folder(args.data)
    rng = np.random.default_rng(args.seed)
    questions = [q.text for c in convs for q in c.questions]
    questions = [questions[i] for i in rng.choice(len(questions), size=min(args.questions, len(questions)),
                                                  replace=False)]
    turns = [u.text for c in convs for u in c.units]
    starts = rng.choice(len(turns) - args.batch, size=args.batches, replace=False)
    batches = [turns[s:s + args.batch] for s in sorted(starts)]
    encoders = {name: make_encoder(name, None).inner for name in args.encoders}
    for enc in encoders.values():
        enc.encode(["warm-up call"])
    times: dict[str, dict[str, list[float]]] = {name: {"query": [], "batch": []} for name in encoders}
    for q in questions:
        for name, enc in encoders.items():
            t0 = time.perf_counter()
            enc.encode([q])
            times[name]["query"].append(time.perf_counter() - t0)
    for b in batches:
        for name, enc in encoders.items():
            t0 = time.perf_counter()
            enc.encode(b)
            times[name]["batch"].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"batch": args.batch, "encoders": {}}
    for name, t in times.items():
        batch = _stats(t["batch"])
        out["encoders"][name] = {"model": encoders[name].name, "per_query_ms": _stats(t["query"]),
                                 "per_batch_ms": batch, "per_turn_ms": batch["median"] / args.batch}
        q = out["encoders"][name]["per_query_ms"]
        print(f"{name} ({encoders[name].name}): per query median {q['median']:.1f} ms "
              f"[p10 {q['p10']:.1f}, p90 {q['p90']:.1f}], n {q['n']}; per batch of {args.batch} turns median "
              f"{batch['median']:.0f} ms [p10 {batch['p10']:.0f}, p90 {batch['p90']:.0f}], n {batch['n']} "
              f"({batch['median'] / args.batch:.1f} ms a turn)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
