"""Every recall of the evaluation sets, question by question, as JSON lines: to diff two commits.

Usage::

    python -m benchmarks.recall_dump locomo DATA_DIR OUT.jsonl [--encoder onnx-int8|hashing] [--cache DIR]
    python -m benchmarks.recall_dump agent_eval OUT.jsonl [--encoder onnx-int8|hashing] [--cache DIR]
        [--sets dev,dev2,test,...]

A change meant to keep recall's behaviour (a refactor) must leave the file
identical: run it before and after, then ``cmp`` (or ``diff``) the two. One
line per recall: the set, the question, the mode and whether it is a
``recall`` (the verdict applies) or a ``rank`` (every candidate admitted), with
the selection's hits in order (id, score, band, full explanation), abstention,
reason, statistic, features and gate; the selection's random id and timings
are left out. For the project's sets (``benchmarks/data/agent_eval``) each
set is recalled with the default gates, then once per fold of the
evaluation's 2-fold split after calibrating on the other fold (the gates and
models fitted are dumped too). For LoCoMo (``DATA_DIR``: one ``*.json`` per
conversation, see :mod:`benchmarks.locomo.data`) each conversation's
answerable and never-mentioned questions are recalled with the defaults.
Writes are dumped as well: which turns merged into which entry, and what
superseded what. Memories run on a fixed clock, so a dump does not depend on
the day it was made. Vectors come through :mod:`benchmarks.locomo.cache`, so
both runs see the same ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

MODES = ("hybrid", "associative", "keyword")
DAY = 86400.0


def selection_record(sel: Any) -> dict[str, Any]:
    """A selection as plain data, without what differs from run to run (its id, its timings)."""
    out = sel.to_dict()
    for key in ("id", "timings"):
        out.pop(key, None)
    return out


def hits_record(hits: list[Any]) -> list[dict[str, Any]]:
    return [h.to_dict() for h in hits]


def writes_record(mem: Any) -> list[dict[str, Any]]:
    return [{"id": e.id, "merged_count": e.merged_count, "superseded_by": e.superseded_by, "kind": e.kind,
             "labels": e.labels, "inferred_labels": e.inferred_labels} for e in mem.entries()]


def calibration_record(mem: Any, gates: dict[str, Any]) -> dict[str, Any]:
    return {"gates": {m: repr(g.tau) for m, g in gates.items()},
            "band_gates": {m: repr(g.tau) for m, g in mem.band_gates.items()},
            "models": {m: [list(v.features), [repr(float(w)) for w in v.weights], repr(float(v.intercept))]
                       for m, v in mem.verdict_models.items()}}


def ask(mem: Any, question: str, *, set_name: str, stage: str) -> Iterator[dict[str, Any]]:
    for mode in MODES:
        sel = mem.recall(question, limit=5, mode=mode, record=False)
        yield {"set": set_name, "stage": stage, "question": question, "mode": mode, "call": "recall",
               **selection_record(sel)}
        yield {"set": set_name, "stage": stage, "question": question, "mode": mode, "call": "rank",
               "hits": hits_record(mem.rank(question, limit=10, mode=mode))}


def locomo(data_dir: Path, encoder: Any) -> Iterator[dict[str, Any]]:
    from benchmarks.locomo.data import load_folder
    from hopmem.agent import AgentMemory

    for conv in load_folder(data_dir):
        clock = [max(u.created_at for u in conv.units) + DAY]
        mem = AgentMemory.open(":memory:", encoder=encoder, namespace=f"locomo-{conv.id}",
                               clock=lambda: clock[0])
        try:
            mem.remember_many([{"text": u.text, "created_at": u.created_at,
                                "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}} for u in conv.units],
                              progress=False)
            yield {"set": conv.id, "stage": "writes", "entries": writes_record(mem)}
            for q in [*conv.questions, *conv.never]:
                yield from ask(mem, q.text, set_name=conv.id, stage="default")
        finally:
            mem.close()


def agent_eval(sets: list[str], encoder: Any) -> Iterator[dict[str, Any]]:
    import tempfile

    from benchmarks.agent_eval.run import build_memory, folds, load

    for name in sets:
        data = load(name)
        questions = data["questions"]
        with tempfile.TemporaryDirectory() as tmp:
            mem, _, _ = build_memory(os.path.join(tmp, "dump.db"), encoder, data)
            try:
                yield {"set": name, "stage": "writes", "entries": writes_record(mem)}
                for q in questions:
                    yield from ask(mem, q["question"], set_name=name, stage="default")
                fold_idx = folds(questions, 0)
                for f in (0, 1):
                    calib = [questions[i] for i in fold_idx[1 - f]]
                    gates = mem.calibrate([q["question"] for q in calib if q["answers"]],
                                          [q["question"] for q in calib if not q["answers"]])
                    yield {"set": name, "stage": f"calibrated fold {f}", **calibration_record(mem, gates)}
                    for i in fold_idx[f]:
                        yield from ask(mem, questions[i]["question"], set_name=name, stage=f"fold {f}")
            finally:
                mem.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=("locomo", "agent_eval"))
    parser.add_argument("paths", nargs="+", metavar="[DATA_DIR] OUT", help="LoCoMo's data folder (locomo only), "
                        "then the output file (JSON lines)")
    parser.add_argument("--encoder", default="onnx-int8", choices=("onnx-int8", "hashing"),
                        help="onnx-int8: the library's default encoder (MiniLM, int8); hashing: no model")
    parser.add_argument("--cache", type=Path, default=None,
                        help="vector cache folder (default: benchmarks.locomo.cache's default)")
    parser.add_argument("--sets", default="dev,dev2,test," + ",".join(f"test{n}" for n in range(2, 14)),
                        help="agent_eval: the named sets, comma-separated")
    args = parser.parse_args(argv)
    want = 2 if args.which == "locomo" else 1
    if len(args.paths) != want:
        parser.error(f"{args.which}: expected {'DATA_DIR OUT' if want == 2 else 'OUT'}")

    from benchmarks.locomo.cache import default_cache_dir, make_encoder

    encoder = make_encoder(args.encoder, args.cache or default_cache_dir())
    if args.which == "locomo":
        records = locomo(Path(args.paths[0]), encoder)
    else:
        records = agent_eval([s.strip() for s in args.sets.split(",") if s.strip()], encoder)
    n = 0
    with open(args.paths[-1], "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")
            n += 1
    encoder.save()
    print(f"{n} records -> {args.paths[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
