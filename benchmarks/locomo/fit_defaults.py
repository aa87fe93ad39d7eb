"""Fit the hybrid mode's uncalibrated verdict (``DEFAULT_MODELS`` and ``DEFAULT_GATES`` in
``hopmem/agent/verdict.py``) on the development conversations of both benchmarks.

Usage::

    python -m benchmarks.locomo.fit_defaults LOCOMO_DATA_DIR [--sets dev,dev2] [--target 0.08] [--json out.json]
        [--encoder minilm|e5|e5-passage|e5-split|hashing] [--write | --check]

One agent memory per conversation, library defaults, no ``calibrate`` call:
the LoCoMo development conversations in ``LOCOMO_DATA_DIR`` (answerable
questions against never-mentioned ones, as :mod:`.run` builds them) and the
project's development sets ``benchmarks/agent_eval/{dev,dev2}_conversations.json``
(answerable questions against the ``abstention`` category). Every question is
recalled once (``limit=5``) and its selection's verdict features kept.

* **Model**: :func:`hopmem.agent.verdict.fit_model` over hybrid mode's
  :data:`~hopmem.agent.verdict.VERDICT_FEATURES`, on every question that
  has candidates. Each pool (LoCoMo, the project's sets) weighs the same: the
  smaller pool's questions are repeated ``round(larger / smaller)`` times, so
  that neither benchmark dominates.
* **Threshold**: per pool, the ``--target`` quantile (default 0.08) of the
  model's log-odds over its answerable questions (a question without
  candidates counts as abstained); the shipped ``tau`` is the lowest of
  them, so that no development pool abstains on more than ``--target`` of its
  answerable questions. 8% leaves a margin under a 10% false-abstention
  target for conversations that differ from these.

Prints the model and threshold, and per pool the false abstention and the
abstention on unanswerable questions at that threshold. ``--write`` puts them
(rounded to 3 decimals) into the tuning record
``hopmem/data/tuning/default.json`` (:mod:`hopmem.agent.tuning`) with their
provenance: this command, the commit and a SHA-256 of the data fitted on (the
LoCoMo files and the project's sets). ``--check`` refits and exits 1 unless
the record it would write equals the shipped file byte for byte, the commit
aside (:mod:`benchmarks.provenance`: the refit is compared with the shipped
commit in place, and a ``--write`` that changes nothing keeps it). The model applies
to the features the library computes, so refit after changing how any of them
is computed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.provenance import check_text, compare, data_hash, refit_text  # noqa: E402

from .cache import ENCODERS, default_cache_dir, make_encoder  # noqa: E402
from .data import Conversation, load_folder  # noqa: E402
from .project_sets import eval_conversation  # noqa: E402
from .run import open_memory  # noqa: E402

TARGET = 0.08
#: The command the tuning record names as the hybrid defaults' provenance.
COMMAND = "python -m benchmarks.locomo.fit_defaults LOCOMO_DATA_DIR --write"
ENCODER = "all-MiniLM-L6-v2 (sentence-transformers, torch)"


def data_files(locomo_dir: str, sets: Sequence[str]) -> list[Path]:
    """The files fitted on, in the order their hash reads them: the LoCoMo files by name, then the sets."""
    from benchmarks.agent_eval.run import SETS

    return [*sorted(Path(locomo_dir).glob("*.json")), *(SETS[name] for name in sets)]


def tuning_record(result: dict[str, Any], data: str, commit: str) -> str:
    """The shipped tuning record's text with the hybrid model, threshold and provenance replaced."""
    from hopmem.agent.tuning import TUNING_FILE

    record = json.loads(TUNING_FILE.read_text(encoding="utf-8"))
    record["models"]["hybrid"] = {"features": result["features"],
                                  "weights": [round(w, 3) for w in result["weights"]],
                                  "intercept": round(result["intercept"], 3)}
    record["gates"]["hybrid"] = round(result["tau"], 3)
    record["provenance"]["hybrid"] = {"command": COMMAND, "encoder": ENCODER, "commit": commit, "data": data}
    return json.dumps(record, indent=1) + "\n"


def collect(conv: Conversation, encoder: Any, pool: str) -> list[dict[str, Any]]:
    """Each question's verdict features (None without candidates) and whether it is answerable."""
    mem, _ = open_memory(conv, encoder)
    try:
        out = []
        for q in [*conv.questions, *conv.never]:
            sel = mem.recall(q.text, limit=5, record=False)
            out.append({"pool": pool, "conversation": conv.id, "answerable": q.category > 0,
                        "features": dict(sel.features) if sel.features else None})
        return out
    finally:
        mem.close()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent.verdict import VERDICT_FEATURES, fit_model

    p = argparse.ArgumentParser(prog="python -m benchmarks.locomo.fit_defaults", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="LOCOMO_DATA_DIR")
    p.add_argument("--sets", default="dev,dev2", help="the project's development sets (default dev,dev2)")
    p.add_argument("--encoder", choices=ENCODERS, default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--target", type=float, default=TARGET,
                   help="the most false abstention any development pool may have (default 0.08)")
    p.add_argument("--json", default=None)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write the fit into hopmem/data/tuning/default.json")
    action.add_argument("--check", action="store_true",
                        help="exit 1 unless the refit equals the shipped tuning record byte for byte")
    args = p.parse_args(argv)
    if (args.write or args.check) and args.encoder != "minilm":
        p.error("--write and --check: the shipped defaults are fitted with --encoder minilm")
    cache = Path(args.cache) if args.cache else default_cache_dir()
    encoder = make_encoder(args.encoder, cache)
    rows: list[dict[str, Any]] = []
    convs = [(conv, "locomo") for conv in load_folder(args.data)]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    convs += [(eval_conversation(name), "agent_eval") for name in sets]
    if hasattr(encoder, "set_passages"):  # e5-split: "passage: " on what the memories store
        encoder.set_passages([u.text for conv, _ in convs for u in conv.units])
    for conv, pool in convs:
        rows.extend(collect(conv, encoder, pool))
    encoder.save()
    features = VERDICT_FEATURES["hybrid"]
    pools = sorted({r["pool"] for r in rows})
    sizes = {pool: sum(1 for r in rows if r["pool"] == pool and r["features"]) for pool in pools}
    repeat = {pool: max(1, round(max(sizes.values()) / sizes[pool])) for pool in pools}
    fit = [r for r in rows if r["features"] for _ in range(repeat[r["pool"]])]
    model = fit_model(features, [r["features"] for r in fit if r["answerable"]],
                      [r["features"] for r in fit if not r["answerable"]])

    def log_odds(r: dict[str, Any]) -> float:
        return model.log_odds(r["features"]) if r["features"] else -np.inf

    taus = {pool: float(np.quantile([log_odds(r) for r in rows if r["pool"] == pool and r["answerable"]],
                                    args.target)) for pool in pools}
    tau = min(taus.values())
    result: dict[str, Any] = {
        "features": list(features), "weights": list(model.weights), "intercept": model.intercept, "tau": tau,
        "target": args.target, "repeat": repeat, "pools": {}}
    for pool in pools:
        ans = [log_odds(r) < tau for r in rows if r["pool"] == pool and r["answerable"]]
        unans = [log_odds(r) < tau for r in rows if r["pool"] == pool and not r["answerable"]]
        result["pools"][pool] = {"answerable": len(ans), "unanswerable": len(unans), "tau_at_target": taus[pool],
                                 "false_abstention": float(np.mean(ans)),
                                 "abstention_unanswerable": float(np.mean(unans))}
    weights = ", ".join(f"{w:.3f}" for w in model.weights)
    print(f"hybrid model: {list(features)} weights ({weights}) intercept {model.intercept:.3f}; tau {tau:.3f}")
    for pool, v in result["pools"].items():
        print(f"  {pool}: {v['answerable']} answerable, {v['unanswerable']} unanswerable; at tau {tau:.3f}: false "
              f"abstention {v['false_abstention']:.3f}, abstention on unanswerable {v['abstention_unanswerable']:.3f} "
              f"(its own {args.target:.0%} threshold {v['tau_at_target']:.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.write or args.check:
        from hopmem.agent.tuning import TUNING_FILE

        shipped = TUNING_FILE.read_text(encoding="utf-8")
        commit = json.loads(shipped)["provenance"].get("hybrid", {}).get("commit")
        data = data_hash(data_files(args.data, sets))

        def render(at: str) -> str:
            return tuning_record(result, data, at)

        text = refit_text(render, shipped, commit) if args.write else check_text(render, commit)
        if args.write:
            TUNING_FILE.write_text(text, encoding="utf-8")
            print(f"wrote {TUNING_FILE}")
        elif not (same := compare(shipped, text))[0]:
            import difflib

            sys.stdout.writelines(difflib.unified_diff(shipped.splitlines(True), text.splitlines(True),
                                                       "shipped", "refit"))
            print(f"{TUNING_FILE}: the refit {same[1]}")
            result["check"] = False
        else:
            print(f"{TUNING_FILE}: the refit equals the shipped record, {same[1]}")
            result["check"] = True
    return result


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("check", True) else 1)
