"""Learned re-ranking of a recall's first hits.

The fused ranking (:mod:`~hopmem.agent.ranking`) orders candidates by how
strongly each retriever found them. What it cannot see is which of them say
something: on a long chat the first places fill with turns that share the
question's words but carry nothing ("Cool! What did it look like?"), while the
turns that answer a question asking for several things ("What activities does
Melanie partake in?": "I just signed up for a pottery class") resemble the
question less than they resemble each other. A reranker re-orders the first
:attr:`Reranker.depth` hits (after the verdict, so it never changes whether a
recall abstains), and the first ``limit`` of its order are returned.

:class:`LinearReranker` is a logistic model of "this hit is evidence for the
question" over:

* the hit's place and the numbers behind it (:data:`FEATURES`: its position,
  semantic, associative and keyword evidence, fused score relative to the
  first hit's, matched terms, whether it is the question's subject's own
  turn, whether its text names a date ("yesterday": it reports an event),
  whether only the conversational context brought it, its length and
  punctuation), with a few interactions with the question's form
  (:func:`~hopmem.agent.parts.asks_for_several`,
  :func:`~hopmem.agent.temporal.asks_for_date`);
* the entry's stored vector (what kind of statement carries information),
  the same times "the question asks for several things", and the vector's
  elementwise product with the question's (a learned re-weighting of the
  cosine's dimensions).

A model is fitted for one encoder (its vectors are that encoder's) and ships
as ``hopmem/data/rerank/<encoder fingerprint>.json``
(``python -m benchmarks.locomo.fit_reranker`` writes it, with a
``provenance`` key the loader does not read: the fit command, commit, data
hash and tuning settings, see docs/tuning.md). A memory opened with
an encoder that has none does not re-rank. Any object with ``depth`` and
``order(...)`` (:class:`Reranker`) can be given to
:meth:`~hopmem.agent.AgentMemory.open` instead, e.g. a cross-encoder.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import InvalidInput
from .parts import asks_for_several
from .ranking import named_among, source_key
from .results import MemoryHit
from .temporal import asks_for_date

logger = logging.getLogger(__name__)

__all__ = ["FEATURES", "RERANK_DIR", "LinearReranker", "Reranker", "design", "hit_features", "rerank",
           "shipped_reranker"]

#: Folder of shipped models: ``<encoder fingerprint>.json`` per encoder (see :func:`shipped_reranker`).
RERANK_DIR = Path(__file__).resolve().parents[1] / "data" / "rerank"
_FORMAT = "hopmem.reranker"

#: Each hit's scalar features, in the order of :func:`hit_features`.
FEATURES = (
    "position",            # -log(1 + place in the fused order)
    "semantic",            # the explanation's semantic, associative and keyword evidence
    "associative",
    "keyword",
    "evidence",
    "fused_share",         # fused score / the first hit's
    "matched_terms",       # how many of the question's terms the entry holds
    "subject",             # the entry is the question's subject's own turn
    "dated",               # its text names a date relative to its own time ("yesterday": it reports an event)
    "context",             # only the conversational context brought it
    "length",              # log(1 + words)
    "ends_with_question",  # the entry ends with "?"
    "asks",                # it holds a "?"
    "exclaims",            # it holds a "!"
    "term_share",          # matched_terms / the most any hit matches
    "semantic_gap",        # semantic minus the best semantic among the hits
    "several_position",    # position, for a question that asks for several things (else 0)
    "several_subject",     # subject, likewise
    "several_semantic",    # semantic, likewise
    "when_dated",          # dated, for a question that asks when (else 0)
)
#: The question-times-entry block is scaled by this (its products are small: unit vectors' coordinates).
PRODUCT_SCALE = 20.0


@runtime_checkable
class Reranker(Protocol):
    """What :meth:`~hopmem.agent.AgentMemory.open` accepts as ``reranker``."""

    @property
    def depth(self) -> int:
        """How many of the fused order's first hits it re-orders (a recall asks the fusion for this many)."""
        ...

    def order(self, question: str, qvec: np.ndarray, hits: Sequence[MemoryHit], vectors: np.ndarray) -> list[int]:
        """The hits' new order, as indices into ``hits`` (a permutation). ``vectors`` are the hits'
        stored unit vectors, ``qvec`` the question's, both centered as the memory stores them."""
        ...


def hit_features(question: str, hits: Sequence[MemoryHit]) -> np.ndarray:
    """The :data:`FEATURES` of each hit, ``(len(hits), len(FEATURES))`` float64, from what the hits show."""
    several, when = asks_for_several(question), asks_for_date(question)
    subject = named_among(question, (h.metadata for h in hits))
    first = hits[0].explanation.fused if hits and hits[0].explanation.fused > 0 else 1.0
    most_terms = max((len(h.explanation.matched_terms) for h in hits), default=0) or 1
    best = max((h.explanation.semantic for h in hits), default=0.0)
    out = np.zeros((len(hits), len(FEATURES)))
    for n, h in enumerate(hits):
        x = h.explanation
        own = float(subject is not None and source_key(h.metadata) == subject)
        dated = float(bool(h.dates))
        position = -math.log1p(n)
        text = h.text.rstrip()
        out[n] = (position, x.semantic, x.associative, x.keyword, x.evidence, x.fused / first,
                  len(x.matched_terms), own, dated, float(x.admitted_by.startswith("stored next to")),
                  math.log1p(len(text.split())), float(text.endswith("?")), float("?" in text), float("!" in text),
                  len(x.matched_terms) / most_terms, x.semantic - best,
                  several * position, several * own, several * x.semantic, when * dated)
    return out


def design(question: str, qvec: np.ndarray, hits: Sequence[MemoryHit],
           vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hits' scalar features (:func:`hit_features`) and vector blocks ``[v, PRODUCT_SCALE * q * v,
    several * v]``, ``(len(hits), 3 * dim)``: what a :class:`LinearReranker` reads."""
    v = np.asarray(vectors, dtype=np.float64).reshape(len(hits), -1)
    q = np.asarray(qvec, dtype=np.float64).ravel()
    several = float(asks_for_several(question))
    return hit_features(question, hits), np.hstack([v, PRODUCT_SCALE * v * q, several * v])


@dataclass(frozen=True)
class LinearReranker:
    """A logistic model over :func:`design`'s features: ``intercept + ((H - mean) / scale) . weights +
    blocks . vector_weights``; hits are re-ordered by it (ties keep the fused order)."""

    fingerprint: str
    centerer: str
    depth: int
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    vector_weights: np.ndarray
    intercept: float

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or not 1 <= self.depth <= 100:
            raise InvalidInput(f"LinearReranker: depth must be an int in [1, 100], got {self.depth!r}")
        arrays = {n: np.asarray(getattr(self, n), dtype=np.float64) for n in
                  ("mean", "scale", "weights", "vector_weights")}
        for n in ("mean", "scale", "weights"):
            if arrays[n].shape != (len(FEATURES),):
                raise InvalidInput(f"LinearReranker: {n} must hold {len(FEATURES)} values, got {arrays[n].shape}")
        if arrays["vector_weights"].ndim != 1 or arrays["vector_weights"].size % 3:
            raise InvalidInput("LinearReranker: vector_weights must be three blocks of the vectors' dimension")
        if not all(np.isfinite(a).all() for a in arrays.values()) or not math.isfinite(self.intercept):
            raise InvalidInput("LinearReranker: expected finite values")
        if (arrays["scale"] <= 0).any():
            raise InvalidInput("LinearReranker: scale must be > 0")
        for n, a in arrays.items():
            a.setflags(write=False)
            object.__setattr__(self, n, a)

    @property
    def dim(self) -> int:
        """The vectors' dimension."""
        return int(self.vector_weights.size // 3)

    def scores(self, question: str, qvec: np.ndarray, hits: Sequence[MemoryHit], vectors: np.ndarray) -> np.ndarray:
        """Each hit's log-odds of being evidence for the question."""
        if not hits:
            return np.zeros(0)
        scalar, blocks = design(question, qvec, hits, vectors)
        if blocks.shape[1] != self.vector_weights.size:
            raise InvalidInput(f"LinearReranker: vectors of dimension {blocks.shape[1] // 3}, model for {self.dim}")
        return self.intercept + ((scalar - self.mean) / self.scale) @ self.weights + blocks @ self.vector_weights

    def order(self, question: str, qvec: np.ndarray, hits: Sequence[MemoryHit], vectors: np.ndarray) -> list[int]:
        s = self.scores(question, qvec, hits, vectors)
        return [int(i) for i in np.argsort(-s, kind="stable")]

    def to_dict(self) -> dict[str, Any]:
        return {"format": _FORMAT, "fingerprint": self.fingerprint, "centerer": self.centerer, "depth": self.depth,
                "features": list(FEATURES),
                "mean": self.mean.tolist(), "scale": self.scale.tolist(), "weights": self.weights.tolist(),
                "vector_weights": self.vector_weights.tolist(), "intercept": self.intercept}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinearReranker:
        if data.get("format") != _FORMAT or list(data.get("features", ())) != list(FEATURES):
            raise InvalidInput("LinearReranker: not a reranker of this version (format or features differ)")
        return cls(fingerprint=str(data["fingerprint"]), centerer=str(data["centerer"]), depth=int(data["depth"]),
                   mean=np.asarray(data["mean"], float), scale=np.asarray(data["scale"], float),
                   weights=np.asarray(data["weights"], float), vector_weights=np.asarray(data["vector_weights"], float),
                   intercept=float(data["intercept"]))


def shipped_reranker(fingerprint: str, dim: int, centerer: str, directory: Path | None = None) -> LinearReranker | None:
    """The model shipped for the encoder ``fingerprint`` (in ``directory``, :data:`RERANK_DIR` by default) and
    the centering mean ``centerer`` (its fingerprint: the model reads centered vectors); None when none is
    shipped, or the one shipped is for another dimension or centering mean (a file centered with its own mean)."""
    path = (RERANK_DIR if directory is None else directory) / f"{fingerprint}.json"
    if not fingerprint.isalnum() or not path.is_file():
        return None
    try:
        model = LinearReranker.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, InvalidInput) as exc:
        logger.warning("could not read the shipped reranker %s (%s); recall does not re-rank", path, exc)
        return None
    if model.fingerprint != fingerprint or model.dim != dim:
        logger.warning("shipped reranker %s is for another encoder or dimension; recall does not re-rank", path)
        return None
    return model if model.centerer == centerer else None


def rerank(reranker: Reranker, question: str, qvec: np.ndarray, hits: Sequence[MemoryHit], vectors: np.ndarray,
           limit: int) -> list[MemoryHit]:
    """The first ``limit`` of ``hits`` with their first ``reranker.depth`` in ``reranker``'s order (the rest
    follow in the fused order); ``vectors`` are those first hits' stored vectors. Scores follow the new
    order: a hit placed above one that outscored it keeps its score, and the other takes one just below
    the hit before it (its explanation's ``boosts["rerank"]`` says by how much), as the fused order's own
    steps do."""
    head = hits[:reranker.depth]
    if len(head) < 2:
        return list(hits[:limit])
    order = reranker.order(question, qvec, head, vectors[:len(head)])
    if sorted(order) != list(range(len(head))):
        raise InvalidInput(f"reranker: order must be a permutation of the {len(head)} hits' indices")
    ordered = [head[i] for i in order] + list(hits[len(head):])
    out: list[MemoryHit] = []
    previous = math.inf
    for h in ordered[:limit]:
        if h.score >= previous:
            lowered = previous * (1.0 - 1e-3)
            boosts = dict(h.explanation.boosts)
            if h.score > 0:
                boosts["rerank"] = round(lowered / h.score, 4)
            h = replace(h, score=round(lowered, 6), explanation=replace(h.explanation, boosts=boosts))
        previous = h.score
        out.append(h)
    return out
