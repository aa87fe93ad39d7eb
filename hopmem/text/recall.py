"""Recall: a question vector in, banded documents (or a reasoned abstention) out.

This module is the logic of recall, independent of storage and of text. It
talks to a *source* (:class:`RecallSource`: a memory that can be read, plus
the documents written with metadata) and returns a :class:`RecallResult`.
:mod:`hopmem.text` binds an encoder and a centering mean to a collection and
calls it; tests call it with a small in-process stand-in.

How a recall is answered
------------------------
1. Read. ``source.analyze(q)`` runs the iterative read: it gives the
   reconstruction ``r``, ``fidelity = cos(q, r)`` and ``first_contact``
   (the cosine with the one-step read). An empty memory abstains with the
   reason ``"empty memory"``.
2. Two candidate lists. The ``pool`` documents nearest to the question and the
   ``pool`` documents nearest to the reconstruction (HeatherDB's two-pass
   semantic search). Their union is scored exactly against the stored vectors.
   No document at all: abstain, ``"no candidates"``.
3. Fuse. Every candidate gets the *path score*::

       confidence(d) = max(cos(q, d), fidelity * cos(r, d))

   the strength of the best path from the question to the document: direct,
   or through the reconstruction, discounted by how far the read travelled
   from the question (``fidelity``; a read with ``fidelity <= 0`` offers no
   path, and the score is ``cos(q, d)``). Hits are ordered by it (ties:
   lower id).
   Because the path score is a maximum of two terms, the top ``limit`` over
   all documents always lie in the union of the two top-``limit`` lists, so with exact
   candidate lists the fused ranking is exact. Other rules (question only,
   reconstruction only, max of the two cosines, reciprocal-rank fusion) are in
   :data:`FUSIONS` for comparison; docs/recall.md has the measurements that
   chose ``"path"``, plain mode and ``beta = 30``.
4. Gate. With a :class:`RecallGate`, the gate's statistic (by default
   ``"confidence"``, the best hit's confidence; or ``"first_contact"``) is
   compared with its ``tau``; below it the result abstains with a reason such
   as ``"below gate (confidence 0.31 < tau 0.35)"`` and carries no hits, so a
   careless caller cannot use them. Otherwise each hit is labelled
   ``"vivid"``, ``"clear"`` or ``"vague"`` by the gate's bands. Without a gate
   nothing abstains for lack of evidence and ``band`` is ``None``.

Abstention is a value (``result.abstained``, ``result.reason``), never an
exception; only bad input raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._arguments import deprecated_arguments
from .._deprecation import module_aliases
from ..errors import EmptyMemory, InvalidInput
from . import gates
from .gates import Bands, Gate

__all__ = [
    "DEFAULT_BETA",
    "DEFAULT_FUSION",
    "DEFAULT_MODE",
    "FUSIONS",
    "STATISTICS",
    "TEXT_COLLECTION_CONFIG",
    "QuestionStatistics",
    "RecallHit",
    "RecallGate",
    "RecallResult",
    "RecallSource",
    "calibrate_gate",
    "fuse",
    "question_statistics",
    "recall_vector",
]

#: Memory mode and inverse temperature recommended for text collections, chosen
#: by measurement (docs/recall.md): plain mode keeps one location per
#: statement, so the reconstruction lands on statements rather than on
#: prototypes; beta 30 keeps it from drifting to cluster means.
DEFAULT_MODE = "plain"
DEFAULT_BETA = 30.0
TEXT_COLLECTION_CONFIG: Mapping[str, Any] = {"mode": DEFAULT_MODE, "beta": DEFAULT_BETA}

#: Ranking rules :func:`fuse` knows; ``"path"`` is the default.
FUSIONS = ("path", "question", "reconstruction", "max", "rrf")
DEFAULT_FUSION = "path"

#: Scores a gate can be calibrated on.
STATISTICS = ("confidence", "first_contact")

_RRF_K = 60.0  # the constant of reciprocal-rank fusion (Cormack et al. 2009)
_TINY = 1e-12


# --------------------------------------------------------------------- results


@dataclass(frozen=True)
class RecallHit:
    """One recalled document (``hopmem.text.recall.Hit`` before 0.2).

    Attributes
    ----------
    text : str or None
        The remembered text (the ``text_key`` of its metadata); ``None`` for a
        document written without one.
    id : int
        The document id.
    metadata : Any
        The metadata the document was written with, less the text key when it
        is a dict.
    confidence : float
        The path score ``max(cos(q, d), fidelity * cos(r, d))`` (see the
        module docstring).
    band : str or None
        ``"vivid"``, ``"clear"`` or ``"vague"`` under the gate's bands; ``None``
        when no gate is calibrated.
    sources : tuple of str
        Which candidate lists found it: ``"question"``, ``"reconstruction"``.
    """

    text: str | None
    id: int
    metadata: Any
    confidence: float
    band: str | None
    sources: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "id": self.id,
            "metadata": self.metadata,
            "confidence": self.confidence,
            "band": self.band,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class RecallResult:
    """The answer to one recall.

    Attributes
    ----------
    fidelity : float or None
        ``cos(question, reconstruction)``; ``None`` when the memory is empty.
    first_contact : float or None
        ``cos(question, one-step read)``; ``None`` when the memory is empty.
    hits : list of RecallHit
        Best first; empty when the recall abstained.
    abstained : bool
        Whether the caller should proceed without recalled context.
    reason : str or None
        Why it abstained: ``"empty memory"``, ``"no candidates"`` or
        ``"below gate (<statistic> <value> < tau <tau>)"``; ``None`` when it
        answered.
    score : float or None
        The value the gate compared (or would compare): the gate statistic, by
        default the best hit's confidence.
    gate_stale : bool
        Whether the memory has outgrown the load the gate was calibrated at
        (:meth:`hopmem.text.gates.Gate.is_stale`): calibrate again.
    """

    fidelity: float | None
    first_contact: float | None
    hits: list[RecallHit] = field(default_factory=list)
    abstained: bool = False
    reason: str | None = None
    score: float | None = None
    gate_stale: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "fidelity": self.fidelity,
            "first_contact": self.first_contact,
            "hits": [hit.to_dict() for hit in self.hits],
            "abstained": self.abstained,
            "reason": self.reason,
            "score": self.score,
            "gate_stale": self.gate_stale,
        }


# ---------------------------------------------------------------------- source


@runtime_checkable
class RecallSource(Protocol):
    """What recall needs from a collection (vectors already prepared).

    ``analyze(vector)`` returns a :class:`hopmem.Trace` (or raises
    :class:`~hopmem.errors.EmptyMemory`); ``nearest_documents(vector, limit)``
    returns up to ``limit`` document ids, best first; ``fetch_documents(ids)``
    returns ``(found_ids, vectors, metadata)`` for those of ``ids`` that still
    exist (a document deleted in between is left out), in order, with the
    stored vectors as a ``(len(found_ids), d)`` array; ``stats()`` returns the
    memory's load (``writes``, ``num_locations``).
    """

    def analyze(self, vector: np.ndarray) -> Any: ...

    def nearest_documents(self, vector: np.ndarray, limit: int) -> Sequence[int]: ...

    def fetch_documents(self, ids: Sequence[int]) -> tuple[Sequence[int], np.ndarray, list[Any]]: ...

    def stats(self) -> Any: ...


# ---------------------------------------------------------------------- fusion


def _check_rule(rule: str) -> str:
    if rule not in FUSIONS:
        raise InvalidInput(f"fusion: expected one of {', '.join(map(repr, FUSIONS))}, got {rule!r}")
    return rule


def _ranks(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """0-based rank of each candidate: higher score first, then lower id."""
    order = np.lexsort((ids, -scores))
    ranks = np.empty(scores.size, dtype=np.int64)
    ranks[order] = np.arange(scores.size)
    return ranks


def fuse(
    question_scores: Any,
    reconstruction_scores: Any,
    fidelity: float,
    rule: str = DEFAULT_FUSION,
    *,
    ids: Any = None,
) -> np.ndarray:
    """Fused ranking scores of candidates (higher is better).

    Parameters
    ----------
    question_scores, reconstruction_scores : array_like, 1-D
        ``cos(q, d)`` and ``cos(r, d)`` of the same candidates, aligned.
    fidelity : float
        ``cos(q, r)``; only ``"path"`` uses it.
    rule : str, optional
        ``"path"``: ``max(cos(q,d), fidelity * cos(r,d))``, or ``cos(q,d)``
        when ``fidelity <= 0`` (the read points away from the question);
        ``"question"``: ``cos(q, d)``; ``"reconstruction"``: ``cos(r, d)``;
        ``"max"``: ``max(cos(q,d), cos(r,d))``; ``"rrf"``: reciprocal-rank
        fusion ``1/(60 + rank_q) + 1/(60 + rank_r)`` over these candidates.
    ids : array_like, optional
        Candidate ids, for the tie rule of ``"rrf"`` ranks (lower id first);
        positions are used when omitted.

    Returns
    -------
    numpy.ndarray
        float64, one score per candidate.
    """
    _check_rule(rule)
    qs = np.asarray(question_scores, dtype=np.float64)
    rs = np.asarray(reconstruction_scores, dtype=np.float64)
    if qs.ndim != 1 or qs.shape != rs.shape:
        raise InvalidInput(
            f"question_scores, reconstruction_scores: expected aligned 1-D arrays, "
            f"got shapes {qs.shape} and {rs.shape}")
    f = float(fidelity)
    if not math.isfinite(f):
        raise InvalidInput(f"fidelity: expected a finite number, got {fidelity!r}")
    if rule == "path":
        # A read that ended up pointing away from the question offers no path.
        return np.maximum(qs, f * rs) if f > 0.0 else qs.copy()
    if rule == "question":
        return qs.copy()
    if rule == "reconstruction":
        return rs.copy()
    if rule == "max":
        return np.maximum(qs, rs)
    order_ids = np.arange(qs.size) if ids is None else np.asarray(ids, dtype=np.int64)
    return 1.0 / (_RRF_K + _ranks(qs, order_ids)) + 1.0 / (_RRF_K + _ranks(rs, order_ids))


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    norm = float(np.sqrt(v @ v))
    return v / norm if norm > _TINY else v


def _unit_rows(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m))
    norms[norms <= _TINY] = 1.0  # zero rows stay zero: cosine 0
    return m / norms[:, None]


# ------------------------------------------------------------------------ gate


@dataclass(frozen=True)
class RecallGate:
    """A calibrated gate for recall, as stored in a collection's ``gate`` slot.

    Attributes
    ----------
    gate : hopmem.text.gates.Gate
        The threshold on :attr:`statistic` and the evidence for it (AUC,
        coverage, error, held-out figures, calibrated load).
    statistic : str
        ``"confidence"`` (the best hit's confidence) or ``"first_contact"``.
    bands : hopmem.text.gates.Bands
        Cut points for a hit's confidence. With ``statistic="confidence"``
        they are ``gate.bands`` (so every admitted best hit is at least
        "clear"); otherwise they come from a second calibration on confidences.
    encoder, centering : str or None
        Fingerprints of the encoder and the centering mean the gate was
        measured under; a gate is meaningless under others.
    """

    gate: Gate
    statistic: str = "confidence"
    bands: Bands | None = None
    encoder: str | None = None
    centering: str | None = None

    _FORMAT = "hopmem.recall-gate"
    _VERSION = 1

    def __post_init__(self) -> None:
        if not isinstance(self.gate, Gate):
            raise InvalidInput(f"gate: expected a hopmem.text.gates.Gate, got {type(self.gate).__name__}")
        if self.statistic not in STATISTICS:
            raise InvalidInput(f"statistic: expected one of {STATISTICS}, got {self.statistic!r}")
        if self.bands is None:
            object.__setattr__(self, "bands", self.gate.bands)
        elif not isinstance(self.bands, Bands):
            raise InvalidInput(f"bands: expected a hopmem.text.gates.Bands, got {type(self.bands).__name__}")

    @property
    def tau(self) -> float:
        return self.gate.tau

    def admits(self, score: float) -> bool:
        return self.gate.admits(score)

    def band(self, confidence: float) -> str:
        assert self.bands is not None
        return self.bands.band(confidence)

    def is_stale(self, stats: Any, growth: float = 2.0) -> bool:
        """:meth:`hopmem.text.gates.Gate.is_stale` of the underlying gate."""
        return self.gate.is_stale(stats, growth)

    def to_dict(self) -> dict[str, Any]:
        assert self.bands is not None
        return {
            "format": self._FORMAT,
            "version": self._VERSION,
            "statistic": self.statistic,
            "gate": self.gate.to_dict(),
            "bands": self.bands.to_dict(),
            "encoder": self.encoder,
            "centering": self.centering,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecallGate:
        if not isinstance(data, Mapping) or data.get("format") != cls._FORMAT:
            raise InvalidInput(
                f"data: expected a dict from RecallGate.to_dict() (format {cls._FORMAT!r}), got {data!r:.80}")
        if data.get("version") != cls._VERSION:
            raise InvalidInput(f"data['version']: expected {cls._VERSION}, got {data.get('version')!r}")
        try:
            return cls(
                gate=Gate.from_dict(data["gate"]),
                statistic=data["statistic"],
                bands=Bands.from_dict(data["bands"]),
                encoder=data.get("encoder"),
                centering=data.get("centering"),
            )
        except KeyError as exc:
            raise InvalidInput(f"data: expected the key {exc.args[0]!r}, got a dict without it") from None


# ---------------------------------------------------------------------- recall


def _check_limit(value: Any, name: str = "limit") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
    return int(value)


def _split_metadata(metadata: Any, text_key: str) -> tuple[str | None, Any]:
    if isinstance(metadata, Mapping) and isinstance(metadata.get(text_key), str):
        rest = {k: v for k, v in metadata.items() if k != text_key}
        return metadata[text_key], rest
    return None, metadata


@deprecated_arguments("hopmem.text.recall.recall_vector", {"n": "limit"})
def recall_vector(
    source: RecallSource,
    question: Any,
    limit: int = 5,
    *,
    gate: RecallGate | None = None,
    fusion: str = DEFAULT_FUSION,
    pool: int | None = None,
    text_key: str = "text",
) -> RecallResult:
    """Recall documents for one prepared (encoded and centered) question vector.

    Parameters
    ----------
    source : RecallSource
        The memory and its documents.
    question : array_like, shape (d,)
        The question, prepared exactly as the documents were.
    limit : int, optional
        Hits to return at most (``n`` before 0.2, deprecated).
    gate : RecallGate or None, optional
        Abstain below its tau and band the hits; ``None``: never abstain for
        lack of evidence, no bands.
    fusion : str, optional
        Ranking rule, one of :data:`FUSIONS` (see :func:`fuse`).
    pool : int or None, optional
        Candidates taken from each list; ``None`` is ``max(limit, 10)``. With
        ``"path"`` any ``pool >= limit`` gives the exact fused top ``limit``.
    text_key : str, optional
        The metadata key holding a document's text.

    Returns
    -------
    RecallResult
    """
    limit = _check_limit(limit)
    pool = max(limit, 10) if pool is None else _check_limit(pool, "pool")
    _check_rule(fusion)
    q = np.asarray(question)
    if q.ndim != 1:
        raise InvalidInput(f"question: expected one vector (d,), got shape {q.shape}")
    try:
        trace = source.analyze(q)
    except EmptyMemory:
        return RecallResult(None, None, [], True, "empty memory")
    fidelity = float(trace.fidelity)
    first_contact = float(trace.first_contact)
    stale = bool(gate.is_stale(source.stats())) if gate is not None else False

    from_question = [int(i) for i in source.nearest_documents(q, pool)]
    from_reconstruction = [int(i) for i in source.nearest_documents(trace.result, pool)]
    ids = list(dict.fromkeys(from_question + from_reconstruction))  # union, first-seen order
    if ids:
        found, vectors, metadata = source.fetch_documents(ids)
        ids = [int(i) for i in found]
    if not ids:
        score = first_contact if gate is not None and gate.statistic == "first_contact" else None
        return RecallResult(fidelity, first_contact, [], True, "no candidates", score, stale)

    unit_docs = _unit_rows(vectors)
    question_scores = unit_docs @ _unit(q)
    reconstruction_scores = unit_docs @ _unit(trace.result)
    ids_arr = np.asarray(ids, dtype=np.int64)
    confidence = fuse(question_scores, reconstruction_scores, fidelity, "path")
    ranking = confidence if fusion == "path" else fuse(
        question_scores, reconstruction_scores, fidelity, fusion, ids=ids_arr)
    order = np.lexsort((ids_arr, -ranking))[:limit]

    best = float(confidence[order[0]])
    score = first_contact if gate is not None and gate.statistic == "first_contact" else best
    if gate is not None and not gate.admits(score):
        reason = f"below gate ({gate.statistic} {score:.2f} < tau {gate.tau:.2f})"
        return RecallResult(fidelity, first_contact, [], True, reason, score, stale)

    in_question, in_reconstruction = set(from_question), set(from_reconstruction)
    hits = []
    for row in order:
        doc_id = int(ids_arr[row])
        text, rest = _split_metadata(metadata[row], text_key)
        conf = float(confidence[row])
        sources = tuple(name for name, found in (("question", doc_id in in_question),
                                                 ("reconstruction", doc_id in in_reconstruction))
                        if found)
        hits.append(RecallHit(text, doc_id, rest, conf, gate.band(conf) if gate is not None else None, sources))
    return RecallResult(fidelity, first_contact, hits, False, None, score, stale)


# ----------------------------------------------------------------- calibration


@dataclass(frozen=True)
class QuestionStatistics:
    """Per-question recall statistics (no gate applied), aligned with the questions.

    ``confidence`` is the best hit's confidence (NaN when there was no
    candidate), ``top_ids`` its document id (-1 when none); ``fidelity`` and
    ``first_contact`` come from the read (NaN for an empty memory).
    """

    confidence: np.ndarray
    first_contact: np.ndarray
    fidelity: np.ndarray
    top_ids: np.ndarray

    def statistic(self, name: str) -> np.ndarray:
        if name not in STATISTICS:
            raise InvalidInput(f"statistic: expected one of {STATISTICS}, got {name!r}")
        return self.confidence if name == "confidence" else self.first_contact


def question_statistics(
    source: RecallSource, questions: Any, *, fusion: str = DEFAULT_FUSION, pool: int | None = None,
) -> QuestionStatistics:
    """Recall every row of ``questions`` ungated and collect its statistics."""
    Q = np.asarray(questions)
    if Q.ndim != 2:
        raise InvalidInput(f"questions: expected shape (n, d), got {Q.shape}")
    conf, fc, fid, top = [], [], [], []
    for q in Q:
        res = recall_vector(source, q, limit=1, fusion=fusion, pool=pool)
        conf.append(res.hits[0].confidence if res.hits else math.nan)
        top.append(res.hits[0].id if res.hits else -1)
        fc.append(math.nan if res.first_contact is None else res.first_contact)
        fid.append(math.nan if res.fidelity is None else res.fidelity)
    return QuestionStatistics(np.asarray(conf, dtype=np.float64), np.asarray(fc, dtype=np.float64),
                              np.asarray(fid, dtype=np.float64), np.asarray(top, dtype=np.int64))


@deprecated_arguments("hopmem.text.recall.calibrate_gate", {"holdout_fraction": "holdout"},
                      positional=("error_budget",))
def calibrate_gate(
    source: RecallSource,
    related: Any,
    unrelated: Any,
    *,
    error_budget: float = 0.0,
    holdout: float = 0.3,
    seed: int = 0,
    statistic: str = "confidence",
    fusion: str = DEFAULT_FUSION,
    encoder: str | None = None,
    centering: str | None = None,
) -> RecallGate:
    """Calibrate a recall gate from prepared related and unrelated question vectors.

    Each question is recalled ungated; :func:`hopmem.text.gates.calibrate` then
    derives ``tau`` from the chosen statistic with ``error_budget`` and holds
    out ``holdout`` (a fraction) of each group, shuffled with ``seed``, to
    report ``gate.holdout_coverage`` and ``gate.holdout_error_rate``, measured
    on questions that had no say in ``tau``. The memory's current load is
    recorded so :meth:`RecallGate.is_stale` can tell when to recalibrate.
    ``holdout_fraction=`` and ``error_budget`` by position still work, with a
    ``DeprecationWarning``, until hopmem 0.3.

    Raises
    ------
    InvalidInput
        Fewer than two questions in a group, an empty memory or one without
        documents (nothing to calibrate against), or a bad argument.
    """
    if statistic not in STATISTICS:
        raise InvalidInput(f"statistic: expected one of {STATISTICS}, got {statistic!r}")
    # Check the cheap arguments before recalling anything.
    for name, value in (("error_budget", error_budget), ("holdout", holdout)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not 0.0 <= float(value) < 1.0:
            raise InvalidInput(f"{name}: expected a number in [0, 1), got {value!r}")
    for name, group in (("related", related), ("unrelated", unrelated)):
        if np.ndim(group) != 2 or len(group) < 2:
            raise InvalidInput(f"{name}: expected at least 2 question vectors (n, d), got shape "
                               f"{np.shape(group)}")
    rel = question_statistics(source, related, fusion=fusion)
    irr = question_statistics(source, unrelated, fusion=fusion)
    for name, group in (("related", rel), ("unrelated", irr)):
        if np.isnan(group.first_contact).any():
            raise InvalidInput("source: expected a memory holding something to calibrate against, got an "
                               "empty memory (remember something first)")
        if np.isnan(group.confidence).any():
            raise InvalidInput(
                f"{name}: expected every question to find a document, got some that found no document "
                "(was everything written without metadata?)")
    stats = source.stats()
    writes, locations = int(stats.writes), int(stats.num_locations)
    gate = gates.calibrate(rel.statistic(statistic), irr.statistic(statistic), error_budget=error_budget,
                           holdout=holdout, seed=seed, writes=writes, locations=locations)
    bands = gate.bands if statistic == "confidence" else gates.calibrate(
        rel.confidence, irr.confidence, error_budget=error_budget,
        holdout=holdout, seed=seed, writes=writes, locations=locations).bands
    return RecallGate(gate=gate, statistic=statistic, bands=bands, encoder=encoder, centering=centering)


#: Names deprecated in 0.2 (removed in 0.3), served with a ``DeprecationWarning``.
__getattr__ = module_aliases(__name__, {"Hit": ("RecallHit", lambda: RecallHit)})
