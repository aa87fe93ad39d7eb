"""Fit the agent memory's reranker (:class:`hopmem.agent.rerank.LinearReranker`) and measure it, leave one
conversation out.

Usage::

    python -m benchmarks.locomo.fit_reranker LOCOMO_DATA_DIR [--depth 30] [--l2 1.0] [--sets dev,dev2]
        [--encoder onnx-int8] [--write [--out DIR] | --check] [--json out.json]

Every development memory is opened with library defaults and a *collecting*
reranker: it keeps, for each answerable question, the first ``--depth`` hits
of the fused order exactly as recall hands them to a reranker (question,
question vector, hits, stored vectors), and leaves the order as it is. A hit
is a positive when it is one of the question's evidence turns. The pools are
the LoCoMo development conversations in ``LOCOMO_DATA_DIR`` (categories 1-4)
and the project's development sets (``benchmarks/data/agent_eval/{dev,dev2}``,
stored as :mod:`benchmarks.agent_eval.run` stores them); each pool weighs the
same in the fit.

The model is a logistic regression (L2 ``--l2`` on standardised scalar
features and on the vector blocks; the intercept free) over
:func:`hopmem.agent.rerank.design`. Reported:

* **leave one conversation out**: for each LoCoMo conversation, the model
  fitted on the other four and the project's sets re-orders that
  conversation's collected hits; end-to-end evidence recall@5 by category
  (an abstention retrieves nothing, as in :mod:`.run`) against the memory
  without a reranker (``reranker=False``), paired 95% intervals over
  questions, for the full model and for ablations (scalar features only;
  plus the entry's vector; the full model adds the question-times-entry
  block);
* with ``--write``, the model fitted on everything is written to
  ``hopmem/data/rerank/<encoder fingerprint>.json``, where the library finds it,
  with its ``provenance``: the command that refits it, the commit, a SHA-256
  of the data (the LoCoMo files and the sets fitted on) and the tuning
  record's ``settings`` the features were computed under. With ``--check``
  it is fitted (without the leave-one-out measurement) and compared with that
  shipped file: exit 1 unless they are equal byte for byte, the commit aside
  (:mod:`benchmarks.provenance`; a ``--write`` that changes nothing keeps the
  shipped commit).
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
from .data import CATEGORIES, Conversation, load_folder  # noqa: E402
from .metrics import bootstrap, evidence_recall  # noqa: E402

DEPTH = 30
L2 = 1.0
#: Column masks of the ablations over design()'s [scalar features | v | q*v | several*v].
VARIANTS = ("scalar features only", "+ the entry's vector", "full: + question x entry")


class Collector:
    """A reranker that keeps what recall hands it and leaves the order as it is."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.calls: list[tuple[str, np.ndarray, list[Any], np.ndarray]] = []

    def order(self, question: str, qvec: np.ndarray, hits: Sequence[Any], vectors: np.ndarray) -> list[int]:
        self.calls.append((question, np.array(qvec), list(hits), np.array(vectors)))
        return list(range(len(hits)))


def _question_rows(question: str, collector: Collector, evidence: Sequence[str], key: str) -> dict[str, Any]:
    from hopmem.agent.rerank import design

    if not collector.calls:
        return {"ids": [], "X": None, "y": None}
    q, qvec, hits, vectors = collector.calls.pop()
    scalar, blocks = design(q, qvec, hits, vectors)
    ids = [str(h.metadata[key]) for h in hits]
    return {"ids": ids, "X": np.hstack([scalar, blocks]), "y": np.array([i in evidence for i in ids], float)}


def collect_locomo(conv: Conversation, encoder: Any, depth: int) -> list[dict[str, Any]]:
    """Each answerable question's collected hits, and the top 5 of the memory without a reranker."""
    from hopmem.agent import AgentMemory

    rows = []
    mems = {}
    for name, reranker in (("collect", Collector(depth)), ("plain", False)):
        mem = AgentMemory.open(":memory:", encoder=encoder, namespace=f"locomo-{conv.id}", reranker=reranker)
        mem.remember_many([{"text": u.text, "created_at": u.created_at,
                            "metadata": {"dia_id": u.dia_id, "speaker": u.speaker}} for u in conv.units],
                          progress=False)
        mems[name] = (mem, reranker)
    try:
        collector = mems["collect"][1]
        for q in conv.questions:
            sel = mems["collect"][0].recall(q.text, limit=5, record=False)
            row = _question_rows(q.text, collector, q.evidence, "dia_id")
            plain = mems["plain"][0].recall(q.text, limit=5, record=False)
            row.update(pool="locomo", conversation=conv.id, category=q.category, evidence=list(q.evidence),
                       abstained=sel.abstained, plain=[h.metadata["dia_id"] for h in plain.hits])
            rows.append(row)
    finally:
        for mem, _ in mems.values():
            mem.close()
    return rows


def collect_project(name: str, encoder: Any, depth: int) -> list[dict[str, Any]]:
    """The same for one of the project's sets, stored as its evaluation stores it."""
    from benchmarks.agent_eval.run import build_memory, load

    data = load(name)
    collector = Collector(depth)
    mem, _, _ = build_memory(":memory:", encoder, data, reranker=collector)
    rows = []
    try:
        for q in data["questions"]:
            if not q["answers"]:
                continue
            sel = mem.recall(q["question"], limit=5, record=False)
            row = _question_rows(q["question"], collector, q["answers"], "turn")
            row.update(pool="agent_eval", conversation=name, category=0, evidence=list(q["answers"]),
                       abstained=sel.abstained, plain=[])
            rows.append(row)
    finally:
        mem.close()
    return rows


def _columns(variant: str, n_scalar: int, n_total: int) -> np.ndarray:
    dim = (n_total - n_scalar) // 3
    keep = np.zeros(n_total, bool)
    keep[:n_scalar] = True
    if variant != VARIANTS[0]:
        keep[n_scalar:n_scalar + dim] = True  # v
    if variant == VARIANTS[2]:
        keep[n_scalar + dim:] = True  # q * v and several * v
    return keep


def fit(rows: Sequence[dict[str, Any]], *, l2: float, variant: str = VARIANTS[2]) -> dict[str, Any]:
    """The reranker's parameters fitted on ``rows`` (questions with collected hits), each pool weighing
    the same."""
    from hopmem.agent.rerank import FEATURES
    from hopmem.agent.verdict import fit_logistic

    rows = [r for r in rows if r["X"] is not None]
    X = np.vstack([r["X"] for r in rows])
    y = np.concatenate([r["y"] for r in rows])
    pools = [r["pool"] for r in rows for _ in range(len(r["y"]))]
    count = {p: pools.count(p) for p in set(pools)}
    weight = np.array([len(pools) / (len(count) * count[p]) for p in pools])
    n = len(FEATURES)
    mean = X[:, :n].mean(axis=0)
    scale = X[:, :n].std(axis=0)
    scale[scale < 1e-12] = 1.0
    Z = np.hstack([(X[:, :n] - mean) / scale, X[:, n:]])
    keep = _columns(variant, n, X.shape[1])
    coef, intercept = fit_logistic(Z[:, keep], y, l2=l2, sample_weight=weight)
    full = np.zeros(X.shape[1])
    full[keep] = coef
    return {"mean": mean, "scale": scale, "weights": full[:n], "vector_weights": full[n:], "intercept": intercept}


def reorder(params: dict[str, Any], row: dict[str, Any]) -> list[str]:
    from hopmem.agent.rerank import FEATURES

    if row["X"] is None:
        return []
    n = len(FEATURES)
    s = ((row["X"][:, :n] - params["mean"]) / params["scale"]) @ params["weights"] + row["X"][:, n:] @ \
        params["vector_weights"]
    return [row["ids"][i] for i in np.argsort(-s, kind="stable")]


def _score(rows: Sequence[dict[str, Any]], top: dict[int, list[str]]) -> np.ndarray:
    return np.array([0.0 if r["abstained"] else evidence_recall(top[i][:5], r["evidence"]) for i, r in enumerate(rows)])


def loco(rows: list[dict[str, Any]], *, l2: float) -> dict[str, Any]:
    locomo = [r for r in rows if r["pool"] == "locomo"]
    convs = sorted({r["conversation"] for r in locomo})
    plain = _score(locomo, {i: r["plain"] for i, r in enumerate(locomo)})
    cats = np.array([r["category"] for r in locomo])
    out: dict[str, Any] = {"plain": _by_category(plain, cats)}
    # a bound: every evidence turn among the collected hits put first
    bound = _score(locomo, {i: sorted(r["ids"], key=lambda x, ev=set(r["evidence"]): x not in ev)
                            for i, r in enumerate(locomo)})
    out["bound"] = _by_category(bound, cats)
    for variant in VARIANTS:
        top: dict[int, list[str]] = {}
        for held in convs:
            params = fit([r for r in rows if r["conversation"] != held], l2=l2, variant=variant)
            for i, r in enumerate(locomo):
                if r["conversation"] == held:
                    top[i] = reorder(params, r)
        got = _score(locomo, top)
        res = _by_category(got, cats)
        res["gain"] = _paired(got - plain)
        res["multi_hop_gain"] = _paired((got - plain)[cats == 1])
        out[variant] = res
    return out


def _paired(diff: np.ndarray) -> dict[str, Any]:
    return {"mean": float(diff.mean()), "ci": list(bootstrap(diff))}


def _by_category(values: np.ndarray, cats: np.ndarray) -> dict[str, Any]:
    return {"all": float(values.mean()), "ci": list(bootstrap(values)),
            **{CATEGORIES[c]: float(values[cats == c].mean()) for c in CATEGORIES},
            "multi_hop_ci": list(bootstrap(values[cats == 1]))}


def report(result: dict[str, Any]) -> str:
    lines = [f"Leave one LoCoMo conversation out (depth {result['depth']}, l2 {result['l2']}): end-to-end "
             "evidence recall@5, paired 95% intervals over questions", "",
             "| reranker | R@5 [95% CI] | gain [95% CI] | multi-hop [95% CI] | multi-hop gain | temporal | "
             "open-domain | single-hop |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result["loco"].items():
        gain = f"{r['gain']['mean']:+.3f} [{r['gain']['ci'][0]:+.3f}, {r['gain']['ci'][1]:+.3f}]" if "gain" in r else ""
        mh = (f"{r['multi_hop_gain']['mean']:+.3f} [{r['multi_hop_gain']['ci'][0]:+.3f}, "
              f"{r['multi_hop_gain']['ci'][1]:+.3f}]") if "gain" in r else ""
        label = {"plain": "none (`reranker=False`)",
                 "bound": f"bound: the evidence among the first {result['depth']} put first"}.get(name, name)
        lines.append(f"| {label} | {r['all']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {gain} | "
                     f"{r['multi-hop']:.3f} [{r['multi_hop_ci'][0]:.3f}, {r['multi_hop_ci'][1]:.3f}] | {mh} | "
                     f"{r['temporal']:.3f} | {r['open-domain']:.3f} | {r['single-hop']:.3f} |")
    if result.get("written"):
        lines += ["", f"wrote {result['written']}"]
    return "\n".join(lines)


def data_files(locomo_dir: str, sets: Sequence[str]) -> list[Path]:
    """The files fitted on, in the order their hash reads them: the LoCoMo files by name, then the sets."""
    from benchmarks.agent_eval.run import SETS

    return [*sorted(Path(locomo_dir).glob("*.json")), *(SETS[name] for name in sets)]


def provenance(args: argparse.Namespace, sets: Sequence[str], data: str, commit: str) -> dict[str, Any]:
    """The shipped file's ``provenance``: the command that refits it, the commit, the data's hash and the
    tuning record's settings the collected features were computed under (the library defaults)."""
    from hopmem.agent.tuning import record

    command = ["python -m benchmarks.locomo.fit_reranker LOCOMO_DATA_DIR", f"--encoder {args.encoder}"]
    command += [f"--sets {','.join(sets)}"] if sets else []
    command += [f"--depth {args.depth}"] if args.depth != DEPTH else []
    command += [f"--l2 {args.l2:g}"] if args.l2 != L2 else []
    return {"command": " ".join([*command, "--write"]), "commit": commit, "data": data,
            "settings": dict(record()["settings"])}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent.rerank import RERANK_DIR, LinearReranker
    from hopmem.text.encoders import default_encoder

    p = argparse.ArgumentParser(prog="python -m benchmarks.locomo.fit_reranker", description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="LOCOMO_DATA_DIR")
    p.add_argument("--sets", default="", help="also fit on these project sets, comma-separated (e.g. dev,dev2; "
                   "default none: see the docs)")
    p.add_argument("--encoder", choices=ENCODERS, default="onnx-int8")
    p.add_argument("--cache", default=None)
    p.add_argument("--depth", type=int, default=DEPTH)
    p.add_argument("--l2", type=float, default=L2)
    p.add_argument("--write", action="store_true", help="write the model fitted on everything where the library "
                                                        "finds it")
    p.add_argument("--out", default=None, help="the folder --write writes to (default: the library's, "
                                               "hopmem/data/rerank)")
    p.add_argument("--check", action="store_true", help="refit and exit 1 unless the model equals the shipped "
                                                        "file (see benchmarks.provenance; no leave-one-out run)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.check and args.write:
        p.error("--check and --write: one or the other")
    cache = Path(args.cache) if args.cache else default_cache_dir()
    encoder = make_encoder(args.encoder, cache)
    rows: list[dict[str, Any]] = []
    for conv in load_folder(args.data):
        rows += collect_locomo(conv, encoder, args.depth)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    for name in sets:
        rows += collect_project(name, encoder, args.depth)
    encoder.save()
    result: dict[str, Any] = {"depth": args.depth, "l2": args.l2}
    if not args.check:
        result["loco"] = loco(rows, l2=args.l2)
    if args.write or args.check:
        params = fit(rows, l2=args.l2)
        fingerprint = str(encoder.fingerprint)
        if args.encoder == "onnx-int8" and fingerprint != str(default_encoder().fingerprint):
            raise SystemExit("the encoder's fingerprint is not the library default's")
        from hopmem.agent.encoding import space_centerer

        centerer = space_centerer(encoder, int(encoder.dim))
        model = LinearReranker(fingerprint=fingerprint, centerer=centerer.fingerprint, depth=args.depth,
                               intercept=params["intercept"], mean=params["mean"], scale=params["scale"],
                               weights=params["weights"], vector_weights=params["vector_weights"])
        path = (Path(args.out) if args.out else RERANK_DIR) / f"{fingerprint}.json"
        shipped = path.read_text(encoding="utf-8") if path.is_file() else None
        commit = json.loads(shipped).get("provenance", {}).get("commit") if shipped else None
        fitted = model.to_dict()
        data = data_hash(data_files(args.data, sets))

        def render(at: str) -> str:
            return json.dumps({**fitted, "provenance": provenance(args, sets, data, at)}) + "\n"

        if args.check:
            result["check"], how = compare(shipped, check_text(render, commit)) if shipped else (False, "missing")
            print(f"{path}: the refit {'equals the shipped model, ' if result['check'] else ''}{how}")
            return result
        text = refit_text(render, shipped, commit)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        result["written"] = str(path)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("check", True) else 1)
