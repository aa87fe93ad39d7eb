"""AgentMemory: scoped, labelled, hybrid-recall memory for agents, on one SQLite file.

No language model is on the write or the recall path: a write is an encoder
call, a centring, a few cosines and one SQLite transaction; a recall is an
encoder call, two engine reads per visible partition, one FTS5 query per
partition and one small transaction (receipt and exposure counts).

Architecture (decisions, briefly)
---------------------------------
* **Storage** is :class:`hopmem.agent.store.AgentStore`: one WAL SQLite file,
  entries with their centred unit vectors, one FTS5 table per visibility
  partition, receipts. The durable collection store (:mod:`hopmem.store`) is
  not used: an agent entry needs mutable per-row state (expiry, supersession
  links, utility aggregates, exposure counts) and a keyword index in the same
  transaction as the text, which a collection's documents do not model.
* **Associative side**: per visibility partition (the namespace's shared pool,
  and each session's own entries) a :class:`hopmem.Memory` in plain mode (one
  location per entry: an exact modern Hopfield network), rebuilt from the
  stored vectors on open. A recall reads the shared partition and, with a
  session id, that session's partition, independently, so one scope cannot
  crowd the other out and no session's entries ever shape another's
  reconstruction. The read's activated locations are the question's nearest
  entries (exact cosines); the reconstruction is resolved by a second,
  one-step activation of the same memory.
* **Keyword side**: FTS5 BM25 per partition, plus rare exact tokens
  (identifiers) found by phrase queries and confirmed in the text.
* **Fusion**: reciprocal rank fusion of the semantic, associative, keyword,
  exact-token and time-window lists; scores are never averaged.
* **Admission** is by evidence only (see :class:`RecallConfig`): the verdict
  statistic must pass the calibrated gate, or a rare exact token of the query
  must occur in the entry, or the query's time window must contain it.
  Boosts (labels, utility, recency, version order) only reorder hits that were
  admitted.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..centering import Centerer
from ..errors import HopmemError, IncompatibleStore, InvalidInput, NotFound
from ..gates import Bands, Gate, calibrate as _calibrate_scores
from ..memory import Memory, top_k_dot
from . import keyword as kw
from .events import EventBus, MemoryEvent
from .labels import LabelPolicy, Labeler, labels_match, labels_overlap, merge_labels
from .retention import DEFAULT_KINDS, ForgettingPolicy, KindPolicy, entry_value, retention, utility
from .store import AgentStore, blob_vector, vector_blob
from .temporal import parse_time_hints

__all__ = [
    "AgentMemory",
    "Entry",
    "Explanation",
    "Hit",
    "Selection",
    "RecallConfig",
    "MissingIdentity",
    "MODES",
    "DEFAULT_GATES",
    "DEFAULT_BAND_GATES",
]

logger = logging.getLogger("hopmem.agent")

MODES = ("hybrid", "associative", "keyword")
DURABILITIES = ("shared", "session")


class MissingIdentity(HopmemError, ValueError):
    """A namespace or session id that scoping needs is missing: the call fails closed."""


# ----------------------------------------------------------------------------- config


#: Words that phrase a statement as a change of an earlier one. A new statement
#: containing one supersedes its most similar current statement (same kind and
#: scope, cosine >= ``supersede_cosine``). English only; replace or disable
#: (``update_cues=None``: every similar statement supersedes) in RecallConfig.
DEFAULT_UPDATE_CUES = (
    r"\b(now|new|newer|moved|moves|switched|changed|replaced|instead|no longer|increased|decreased|dropped|"
    r"raised|lowered|grown|improved|slipped|again|down to|up to|cut down|latest|retired|refinanced|migrated|"
    r"finished|upgraded|downgraded|rescheduled|postponed|reduced|updated|anymore|any more|stopped|started|"
    r"promoted|renamed|left|quit|became|nowadays|currently)\b"
)


#: Weight of each ranked list in reciprocal rank fusion.
DEFAULT_RRF_WEIGHTS: Mapping[str, float] = {
    "semantic": 1.0, "associative": 0.5, "keyword": 1.0, "exact": 1.0, "time": 1.0,
}


@dataclass(frozen=True)
class RecallConfig:
    """Retrieval and admission parameters; the defaults are documented in docs/agent-memory.md.

    Evidence of one candidate entry ``e`` for the query ``q`` (centred unit
    vectors, ``r`` the engine's reconstruction, ``f = cos(q, r)``):

    * ``semantic = cos(q, e)``; ``associative = max(f, 0) * cos(r, e)``;
      ``path = max(semantic, associative)`` (as in :mod:`hopmem.recall`);
    * ``keyword = b / (b + bm25_half)`` with ``b`` the entry's BM25 score for
      the query's words (always-positive IDF, see ``_lexical_scorer``);
    * hybrid ``evidence = path + keyword_weight * keyword``; associative mode
      uses ``path``; keyword mode uses ``keyword``.

    The verdict (abstain or not) compares one statistic with the verdict
    gate's ``tau``: hybrid ``best keyword + grounding_semantic_weight * best
    path``, keyword mode the best keyword, associative mode the best path (or,
    with ``associative_statistic="first_contact"``, the read's first contact);
    modes that read keywords subtract ``novelty_weight * novelty`` (the share
    of the query's IDF mass in words no visible entry contains). Once the
    verdict is yes, a hit needs ``evidence >= floor_ratio * best evidence``; the
    band gate labels it. Independently of the verdict, a rare exact token or
    the query's time window admits an entry, and the newer (or older) version
    of an admitted hit is pulled in on its own evidence.
    """

    beta: float = 30.0
    assoc_k: int = 32
    activation: str = "compact"
    over_fetch: int = 50
    rrf_k: float = 20.0
    keyword_weight: float = 0.5
    grounding_semantic_weight: float = 0.3
    novelty_weight: float = 0.2
    common_fraction: float = 0.05
    bm25_half: float = 4.0
    floor_ratio: float = 0.6
    close_margin: float = 0.02
    rare_min: int = 3
    rare_fraction: float = 0.01
    dedup_cosine: float = 0.95
    supersede_cosine: float = 0.5
    update_cues: str | None = DEFAULT_UPDATE_CUES
    label_boost: float = 0.15
    utility_boost: float = 0.25
    recency_boost: float = 0.1
    rrf_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RRF_WEIGHTS))
    associative_statistic: str = "evidence"
    rebuild_dead_fraction: float = 0.2

    def __post_init__(self) -> None:
        for name in ("beta", "rrf_k", "bm25_half"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise InvalidInput(f"{name}: expected a number > 0, got {value!r}")
        for name in ("assoc_k", "over_fetch", "rare_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("floor_ratio", "rare_fraction", "rebuild_dead_fraction", "common_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InvalidInput(f"{name}: expected a number in [0, 1], got {value!r}")
        for name in ("dedup_cosine", "supersede_cosine"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not -1.0 <= value <= 1.01:
                raise InvalidInput(f"{name}: expected a cosine in [-1, 1] (above 1 disables), got {value!r}")
        if self.update_cues is not None:
            try:
                object.__setattr__(self, "_cues", re.compile(self.update_cues, re.IGNORECASE))
            except (re.error, TypeError) as exc:
                raise InvalidInput(f"update_cues: expected a regular expression or None: {exc}") from None
        if self.activation not in ("exact", "compact"):
            raise InvalidInput(f"activation: expected 'exact' or 'compact', got {self.activation!r}")
        if self.associative_statistic not in ("evidence", "first_contact"):
            raise InvalidInput(
                f"associative_statistic: expected 'evidence' or 'first_contact', got {self.associative_statistic!r}")


def _default_gate(tau: float) -> Gate:
    return Gate(tau=tau, coverage=0.0, error_rate=0.0, auc=0.5, n_relevant=0, n_irrelevant=0,
                calibrated_writes=None, calibrated_locations=None,
                bands=Bands(vivid=tau + 0.15, clear=tau), separated=False,
                holdout_coverage=None, holdout_error_rate=None)


#: Used until :meth:`AgentMemory.calibrate` is called: deliberately strict
#: (they abstain more than a calibrated gate usually does), and every
#: selection's ``reason`` says the gate is uncalibrated.
DEFAULT_GATES: Mapping[str, Gate] = {
    "hybrid": _default_gate(0.6),
    "associative": _default_gate(0.5),
    "keyword": _default_gate(0.75),
}
#: Cut points for a hit's band (on its evidence) until calibrated.
DEFAULT_BAND_GATES: Mapping[str, Gate] = {
    "hybrid": _default_gate(0.6),
    "associative": _default_gate(0.5),
    "keyword": _default_gate(0.5),
}


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Entry:
    """One stored statement, as inspected (also what :meth:`AgentMemory.remember` returns)."""

    id: int
    text: str
    namespace: str
    session_id: str | None
    durability: str
    kind: str
    importance: float
    labels: dict[str, list[str]]
    inferred_labels: dict[str, list[str]]
    metadata: Any
    created_at: float
    updated_at: float
    reinforced_at: float
    expires_at: float | None
    merged_count: int
    superseded_by: int | None
    utility: float
    manual_feedback: float | None
    exposures: int
    retention: float
    expired: bool
    suppressed: bool
    merged: bool = False

    @property
    def recallable(self) -> bool:
        return not (self.expired or self.suppressed)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Explanation:
    """Why a hit is there and where it ranks: every number behind the decision."""

    sources: tuple[str, ...]
    ranks: dict[str, int]
    semantic: float
    associative: float
    keyword: float
    bm25: float | None
    evidence: float
    matched_terms: tuple[str, ...]
    exact_tokens: tuple[str, ...]
    time_match: bool
    admitted_by: str
    boosts: dict[str, float]
    fused: float
    superseded_by: int | None = None
    via: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.matched_terms:
            parts.append("matched " + ", ".join(self.matched_terms))
        if self.exact_tokens:
            parts.append("exact token " + ", ".join(self.exact_tokens))
        if self.sources:
            parts.append("fused from " + " + ".join(self.sources))
        parts.append(f"semantic {self.semantic:.2f}, associative {self.associative:.2f}, "
                     f"keyword {self.keyword:.2f}")
        parts.append(f"admitted by {self.admitted_by}")
        if self.via is not None:
            parts.append(f"pulled in as a version of #{self.via}")
        if self.superseded_by is not None:
            parts.append(f"superseded by #{self.superseded_by}")
        applied = {k: v for k, v in self.boosts.items() if abs(v - 1.0) > 1e-9}
        if applied:
            parts.append("boosts " + ", ".join(f"{k} x{v:.2f}" for k, v in applied.items()))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["summary"] = str(self)
        return out


@dataclass(frozen=True)
class Hit:
    """One recalled entry: its text, fused score, confidence band and explanation."""

    entry_id: int
    text: str
    score: float
    band: str
    explanation: Explanation
    kind: str
    durability: str
    session_id: str | None
    labels: dict[str, list[str]]
    metadata: Any
    created_at: float
    importance: float

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "explanation"}
        out["explanation"] = self.explanation.to_dict()
        return out


@dataclass(frozen=True)
class Selection:
    """The result of a recall: a selection id, ranked hits, and the abstention verdict.

    ``abstained`` is True when no hit is returned; ``reason`` then says why:
    no candidates, all below the gate, or too close to call (and whether the
    gate is calibrated). Pass ``id`` to :meth:`AgentMemory.complete` later.
    """

    id: str
    query: str
    namespace: str
    session_id: str | None
    mode: str
    hits: tuple[Hit, ...]
    abstained: bool
    reason: str
    statistic: float | None
    evidence: float | None
    novelty: float
    override: str | None
    tau: float
    calibrated: bool
    first_contact: float | None
    time_hints: dict[str, Any]
    timings: dict[str, float]
    created_at: float

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self):
        return iter(self.hits)

    @property
    def entry_ids(self) -> list[int]:
        return [h.entry_id for h in self.hits]

    @property
    def texts(self) -> list[str]:
        return [h.text for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "hits"}
        out["hits"] = [h.to_dict() for h in self.hits]
        return out


# ----------------------------------------------------------------------------- in-memory index


class _Row:
    __slots__ = (
        "id", "session_id", "durability", "kind", "text", "norm_text", "vector", "importance", "labels",
        "inferred_labels", "metadata", "created_at", "updated_at", "reinforced_at", "expires_at",
        "merged_count", "superseded_by", "eval_sum", "eval_weight", "manual_feedback", "exposures",
        "expired_notified", "part", "supersedes", "value_tokens", "stems",
    )

    def __init__(self, **values: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, values.get(name))


class _Partition:
    """The vectors of one visibility scope and the engine memory over them."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.n = 0
        self.alive = np.zeros(0, dtype=bool)
        self.row_of: dict[int, int] = {}
        self.dead = 0
        self.memory: Memory | None = None
        self.loc_rows: dict[int, int] = {}
        self.df: dict[str, int] = {}  # light-stemmed word -> live entries containing it
        self.total_terms = 0  # sum of live entries' content-word counts (BM25 length normalisation)

    def count_terms(self, stems: Iterable[str], delta: int) -> None:
        stems = list(stems)
        self.total_terms += delta * len(stems)
        for st in stems:
            value = self.df.get(st, 0) + delta
            if value > 0:
                self.df[st] = value
            else:
                self.df.pop(st, None)

    def append(self, entry_id: int, vector: np.ndarray) -> None:
        if self.n == self.matrix.shape[0]:
            cap = max(16, self.n * 2)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[: self.n] = self.matrix[: self.n]
            self.matrix = grown
            ids = np.zeros(cap, dtype=np.int64)
            ids[: self.n] = self.ids[: self.n]
            self.ids = ids
            alive = np.zeros(cap, dtype=bool)
            alive[: self.n] = self.alive[: self.n]
            self.alive = alive
        self.matrix[self.n] = vector
        self.ids[self.n] = entry_id
        self.alive[self.n] = True
        self.row_of[entry_id] = self.n
        self.n += 1

    def kill(self, entry_id: int) -> None:
        row = self.row_of.pop(entry_id, None)
        if row is not None:
            self.alive[row] = False
            self.dead += 1

    @property
    def live(self) -> int:
        return self.n - self.dead

    def compact_if_needed(self, fraction: float) -> None:
        if self.dead and self.dead > max(16, fraction * max(self.live, 1)):
            keep = np.flatnonzero(self.alive[: self.n])
            self.matrix = np.ascontiguousarray(self.matrix[keep])
            self.ids = self.ids[keep].copy()
            self.alive = np.ones(len(keep), dtype=bool)
            self.n = len(keep)
            self.row_of = {int(i): r for r, i in enumerate(self.ids)}
            self.dead = 0
            self.memory = None  # rebuilt on next read

    def engine(self, beta: float, k: int, activation: str = "exact") -> Memory | None:
        """The plain-mode engine memory over this partition's rows (built lazily)."""
        if self.live == 0:
            return None
        if self.memory is None:
            try:
                mem = Memory(self.dim, mode="plain", k=k, beta=beta, activation=activation)
            except TypeError:  # an engine without the activation option: exact scans
                mem = Memory(self.dim, mode="plain", k=k, beta=beta)
            rows = np.flatnonzero(self.alive[: self.n])
            result = mem.write(self.matrix[rows])
            self.loc_rows = {int(result.created[i][0]): int(r) for i, r in enumerate(rows)}
            self.memory = mem
        return self.memory

    def engine_append(self, entry_id: int) -> None:
        if self.memory is not None:
            row = self.row_of[entry_id]
            result = self.memory.write(self.matrix[row])
            self.loc_rows[int(result.created[0][0])] = row


# ----------------------------------------------------------------------------- helpers


def _now_checked(clock: Callable[[], float]) -> float:
    value = clock()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"clock: expected a callable returning finite seconds, got {value!r}")
    return float(value)


def _seconds(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"{name}: expected seconds > 0 (or a timedelta), got {value!r}")
    return float(value)


def _identity(value: Any, name: str, *, required: bool) -> str | None:
    if value is None:
        if required:
            raise MissingIdentity(f"{name} is required: scoping fails closed without it")
        return None
    if not isinstance(value, str) or not value.strip():
        raise MissingIdentity(f"{name}: expected a non-empty string, got {value!r}")
    if len(value) > 256:
        raise InvalidInput(f"{name}: expected at most 256 characters, got {len(value)}")
    return value


def _value_tokens(text: str) -> frozenset[str]:
    """Tokens holding a digit: values that make two similar sentences different facts."""
    return frozenset(t for t in kw._WORD.findall(text.lower()) if any(c.isdigit() for c in t))


def _centerer_reference_texts() -> list[str]:
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "conversation.json")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    texts = [s["text"] for s in data.get("statements", [])]
    texts += [q["question"] for q in data.get("related", [])]
    texts += list(data.get("unrelated", []))
    return texts


# ----------------------------------------------------------------------------- the memory


class AgentMemory:
    """Agent memory bound to one namespace of one SQLite file.

    Open with :meth:`open`. Thread-safe: one lock serialises operations (the
    engine reads release the GIL inside). Close with :meth:`close` (idempotent)
    or use it as a context manager.
    """

    # -- construction -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Any,
        namespace: str,
        reinforcement: bool = False,
        forgetting: ForgettingPolicy | float | None = None,
        clock: Callable[[], float] | None = None,
        label_policy: LabelPolicy | None = None,
        labeler: Labeler | None = None,
        kinds: Mapping[str, KindPolicy] | None = None,
        capacity: int | None = None,
        session_ttl: float | _dt.timedelta | None = None,
        centerer: Centerer | None = None,
        config: RecallConfig | None = None,
        day_zero: float | None = None,
        receipt_ttl: float | _dt.timedelta = 3600.0,
        max_receipts: int = 1000,
    ) -> "AgentMemory":
        """Open (or create) the memory at ``path`` for ``namespace``.

        Parameters
        ----------
        path : path-like
            The SQLite file (created if missing; ``":memory:"`` for a throwaway one).
        encoder : Encoder
            Text encoder (``name``, ``dimension``, ``fingerprint``, ``encode``).
            The file records the first encoder's name, dimension and
            fingerprint and refuses another (:class:`~hopmem.errors.IncompatibleStore`);
            see :meth:`reembed`.
        namespace : str
            The storage partition every operation is confined to. Required.
        reinforcement : bool
            Let learned utility reorder hits and stretch half-lives.
        forgetting : ForgettingPolicy, float (half-life seconds) or None
            Age-based suppression; None: nothing is suppressed for age.
        clock : callable returning seconds, optional
            The time source for TTLs, decay, receipts and created times.
        label_policy, labeler
            Allowed labels; an optional automatic labeller (boost only).
        kinds : mapping of kind to :class:`KindPolicy`, optional
            Overrides of the default TTL and half-life factor per kind.
        capacity : int, optional
            At most this many entries in the namespace; beyond it the least
            valuable entry is evicted.
        session_ttl : seconds or timedelta, optional
            Default expiry of session-scoped entries.
        centerer : Centerer, optional
            The centring mean for a new file; by default it is fitted on the
            reference texts bundled with hopmem. Stored in the file.
        config : RecallConfig, optional
        day_zero : float, optional
            Clock time of "day 0", so that a query's "day N" means a time window.
        receipt_ttl, max_receipts
            Selection receipts expire after ``receipt_ttl`` and at most
            ``max_receipts`` are kept per namespace.
        """
        self = cls.__new__(cls)
        self._init(path, encoder=encoder, namespace=namespace, reinforcement=reinforcement,
                   forgetting=forgetting, clock=clock, label_policy=label_policy, labeler=labeler,
                   kinds=kinds, capacity=capacity, session_ttl=session_ttl, centerer=centerer,
                   config=config, day_zero=day_zero, receipt_ttl=receipt_ttl, max_receipts=max_receipts)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use AgentMemory.open(path, encoder=..., namespace=...)")

    def _init(self, path, *, encoder, namespace, reinforcement, forgetting, clock, label_policy, labeler,
              kinds, capacity, session_ttl, centerer, config, day_zero, receipt_ttl, max_receipts) -> None:
        self.namespace = _identity(namespace, "namespace", required=True)
        if encoder is None or not hasattr(encoder, "encode"):
            raise InvalidInput("encoder: expected an Encoder (with encode, name, dimension, fingerprint)")
        self._clock = clock if clock is not None else time.time
        if not callable(self._clock):
            raise InvalidInput(f"clock: expected a callable returning seconds, got {type(clock).__name__}")
        if isinstance(forgetting, (int, float)) and not isinstance(forgetting, bool):
            forgetting = ForgettingPolicy(half_life=float(forgetting))
        if forgetting is not None and not isinstance(forgetting, ForgettingPolicy):
            raise InvalidInput(f"forgetting: expected a ForgettingPolicy, seconds or None, got {forgetting!r}")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise InvalidInput(f"capacity: expected an int >= 1 or None, got {capacity!r}")
        if isinstance(max_receipts, bool) or not isinstance(max_receipts, int) or max_receipts < 1:
            raise InvalidInput(f"max_receipts: expected an int >= 1, got {max_receipts!r}")
        if label_policy is not None and not isinstance(label_policy, LabelPolicy):
            raise InvalidInput(f"label_policy: expected a LabelPolicy, got {type(label_policy).__name__}")
        if labeler is not None and not callable(labeler):
            raise InvalidInput("labeler: expected a callable text -> labels")
        self.encoder = encoder
        self.dim = int(encoder.dimension)
        self.reinforcement = bool(reinforcement)
        self.forgetting = forgetting
        self.label_policy = label_policy or LabelPolicy()
        self.labeler = labeler
        self.kinds: dict[str, KindPolicy] = dict(DEFAULT_KINDS)
        if kinds:
            for name, policy in kinds.items():
                if not isinstance(policy, KindPolicy):
                    raise InvalidInput(f"kinds[{name!r}]: expected a KindPolicy, got {type(policy).__name__}")
                self.kinds[str(name)] = policy
        self.capacity = capacity
        self.session_ttl = _seconds(session_ttl, "session_ttl")
        self.config = config or RecallConfig()
        if not isinstance(self.config, RecallConfig):
            raise InvalidInput(f"config: expected a RecallConfig, got {type(self.config).__name__}")
        self.day_zero = None if day_zero is None else float(day_zero)
        self.receipt_ttl = _seconds(receipt_ttl, "receipt_ttl")
        self.max_receipts = max_receipts
        self.events = EventBus()
        self._lock = threading.RLock()
        self._closed = False
        now = self._now()
        self._store = AgentStore(os.fspath(path), now=now)
        try:
            self._check_contract(centerer, now)
            self._load()
        except BaseException:
            self._store.close()
            raise

    def _now(self) -> float:
        return _now_checked(self._clock)

    def _check_contract(self, centerer: Centerer | None, now: float) -> None:
        """Record or verify the encoder and the centring mean: never mix vector spaces."""
        store = self._store
        name = str(getattr(self.encoder, "name", type(self.encoder).__name__))
        fingerprint = str(self.encoder.fingerprint)
        recorded = store.get_json("encoder")
        if recorded is None:
            if centerer is None:
                centerer = Centerer(self.dim).fit(self.encoder.encode(_centerer_reference_texts()))
            if not centerer.fitted or centerer.dim != self.dim:
                raise InvalidInput(f"centerer: expected a fitted Centerer of dimension {self.dim}")
            if not centerer.frozen:
                centerer = Centerer.from_dict(centerer.to_dict()).freeze()
            with store.transaction():
                store.set_json("encoder", {"name": name, "dimension": self.dim, "fingerprint": fingerprint})
                store.set_json("centerer", centerer.to_dict())
                store.set_meta("created_at", repr(now))
        else:
            if recorded["dimension"] != self.dim or recorded["fingerprint"] != fingerprint:
                raise IncompatibleStore(
                    f"{store.path} was written with encoder {recorded['name']!r} (dimension "
                    f"{recorded['dimension']}, fingerprint {recorded['fingerprint']}); got {name!r} (dimension "
                    f"{self.dim}, fingerprint {fingerprint}). Open it with that encoder, or migrate with "
                    f"AgentMemory.reembed().")
            stored = Centerer.from_dict(store.get_json("centerer"))
            if centerer is not None and centerer.fingerprint != stored.fingerprint:
                raise IncompatibleStore(
                    f"{store.path} was centred with mean {stored.fingerprint}; the centerer given has "
                    f"{centerer.fingerprint}")
            centerer = stored
        self.centerer = centerer
        self.encoder_info = {"name": name, "dimension": self.dim, "fingerprint": fingerprint}

    # -- the in-memory index --------------------------------------------------------------

    def _load(self) -> None:
        recorded = self._store.get_json("encoder")
        if recorded is not None and recorded.get("fingerprint") != self.encoder_info["fingerprint"]:
            raise IncompatibleStore(
                f"{self._store.path} now holds vectors of encoder {recorded.get('name')!r} (fingerprint "
                f"{recorded.get('fingerprint')}); this controller uses {self.encoder_info['name']!r}: reopen it "
                "with that encoder")
        self._rows: dict[int, _Row] = {}
        self._by_time: list[tuple[float, int]] = []  # (created_at, id), sorted: time windows
        self._parts: dict[str | None, _Partition] = {}
        self._max_id = 0
        self._fts: dict[str | None, str] = self._store.fts_tables(self.namespace)
        self._ingest(self._store.load_entries(self.namespace))
        self._data_version = self._store.data_version()
        self._receipts = self._store.count_receipts(self.namespace)
        self._recalls = 0
        self._gates: dict[str, Gate] = {}
        self._band_gates: dict[str, Gate] = {}
        for mode in MODES:
            raw = self._store.get_json(f"gate:{self.namespace}:{mode}")
            if raw is not None:
                self._gates[mode] = Gate.from_dict(raw)
            raw = self._store.get_json(f"bands:{self.namespace}:{mode}")
            if raw is not None:
                self._band_gates[mode] = Gate.from_dict(raw)

    def _ingest(self, rows: Iterable[Any]) -> None:
        for rec in rows:
            row = _Row(
                id=int(rec["id"]), session_id=rec["session_id"], durability=rec["durability"], kind=rec["kind"],
                text=rec["text"], norm_text=rec["norm_text"], vector=blob_vector(rec["vector"], self.dim),
                importance=float(rec["importance"]), labels=json.loads(rec["labels"]),
                inferred_labels=json.loads(rec["inferred_labels"]),
                metadata=None if rec["metadata"] is None else json.loads(rec["metadata"]),
                created_at=float(rec["created_at"]), updated_at=float(rec["updated_at"]),
                reinforced_at=float(rec["reinforced_at"]),
                expires_at=None if rec["expires_at"] is None else float(rec["expires_at"]),
                merged_count=int(rec["merged_count"]),
                superseded_by=None if rec["superseded_by"] is None else int(rec["superseded_by"]),
                eval_sum=float(rec["eval_sum"]), eval_weight=float(rec["eval_weight"]),
                manual_feedback=None if rec["manual_feedback"] is None else float(rec["manual_feedback"]),
                exposures=int(rec["exposures"]), expired_notified=bool(rec["expired_notified"]),
            )
            self._add_row(row)
        for row in self._rows.values():
            row.supersedes = []
        for row in self._rows.values():
            if row.superseded_by is not None and row.superseded_by in self._rows:
                self._rows[row.superseded_by].supersedes.append(row.id)

    def _add_row(self, row: _Row) -> None:
        row.part = row.session_id if row.durability == "session" else None
        row.value_tokens = _value_tokens(row.text)
        row.stems = frozenset(kw.stem(t) for t in kw.query_terms(row.text))
        if row.supersedes is None:
            row.supersedes = []
        self._rows[row.id] = row
        bisect.insort(self._by_time, (row.created_at, row.id))
        part = self._parts.get(row.part)
        if part is None:
            part = self._parts[row.part] = _Partition(self.dim)
        part.append(row.id, row.vector)
        part.engine_append(row.id)
        part.count_terms(row.stems, +1)
        self._max_id = max(self._max_id, row.id)

    def _drop_rows(self, ids: Iterable[int]) -> None:
        for entry_id in ids:
            row = self._rows.pop(entry_id, None)
            if row is None:
                continue
            at = bisect.bisect_left(self._by_time, (row.created_at, row.id))
            if at < len(self._by_time) and self._by_time[at] == (row.created_at, row.id):
                del self._by_time[at]
            part = self._parts.get(row.part)
            if part is not None:
                part.kill(entry_id)
                part.count_terms(row.stems, -1)
                part.compact_if_needed(self.config.rebuild_dead_fraction)
            newer = self._rows.get(row.superseded_by) if row.superseded_by is not None else None
            if newer is not None and entry_id in newer.supersedes:
                newer.supersedes.remove(entry_id)
            for older_id in row.supersedes:
                older = self._rows.get(older_id)
                if older is not None and older.superseded_by == entry_id:
                    older.superseded_by = None

    def _sync(self) -> None:
        """Reload when another connection has committed to the file since we last looked."""
        version = self._store.data_version()
        if version != self._data_version:
            logger.debug("hopmem.agent: %s changed on disk; reloading namespace %r", self._store.path, self.namespace)
            self._load()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput("this AgentMemory is closed")

    def _fts_for(self, part_key: str | None) -> str:
        name = self._fts.get(part_key)
        if name is None:
            name = self._fts[part_key] = self._store.create_fts(self.namespace, part_key, now=self._now())
            self._data_version = self._store.data_version()
        return name

    def _delete(self, rows: Iterable[_Row]) -> None:
        """Delete rows from the file (inside the caller's transaction), grouped by FTS table."""
        by_fts: dict[str, list[int]] = {}
        for row in rows:
            by_fts.setdefault(self._fts_for(row.part), []).append(row.id)
        if by_fts:
            self._store.delete_entries(self.namespace, by_fts)

    # -- encoding -------------------------------------------------------------------------------

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        raw = np.asarray(self.encoder.encode(list(texts)), dtype=np.float32)
        if raw.shape != (len(texts), self.dim) or not np.isfinite(raw).all():
            raise InvalidInput(f"encoder returned shape {raw.shape} or non-finite values for {len(texts)} texts")
        return np.atleast_2d(self.centerer.transform(raw))

    # -- derived per-row values ------------------------------------------------------------------------

    def _utility(self, row: _Row) -> float:
        return utility(row.eval_sum, row.eval_weight, row.manual_feedback)

    def _retention(self, row: _Row, now: float) -> float:
        kind = self.kinds.get(row.kind)
        return retention(self.forgetting, now=now, reinforced_at=row.reinforced_at, importance=row.importance,
                         utility_value=self._utility(row) if self.reinforcement else 0.0,
                         manual=row.manual_feedback, kind_factor=kind.half_life_factor if kind else 1.0)

    def _expired(self, row: _Row, now: float) -> bool:
        return row.expires_at is not None and row.expires_at <= now

    def _suppressed(self, row: _Row, now: float) -> bool:
        return self.forgetting is not None and self._retention(row, now) < self.forgetting.threshold

    def _entry(self, row: _Row, now: float, merged: bool = False) -> Entry:
        return Entry(
            id=row.id, text=row.text, namespace=self.namespace, session_id=row.session_id,
            durability=row.durability, kind=row.kind, importance=row.importance,
            labels={k: list(v) for k, v in row.labels.items()},
            inferred_labels={k: list(v) for k, v in row.inferred_labels.items()},
            metadata=row.metadata, created_at=row.created_at, updated_at=row.updated_at,
            reinforced_at=row.reinforced_at, expires_at=row.expires_at, merged_count=row.merged_count,
            superseded_by=row.superseded_by, utility=self._utility(row), manual_feedback=row.manual_feedback,
            exposures=row.exposures, retention=self._retention(row, now), expired=self._expired(row, now),
            suppressed=self._suppressed(row, now), merged=merged,
        )

    def _emit(self, type_: str, session_id: str | None, now: float, **data: Any) -> None:
        if self.events.has_subscribers():
            self.events.emit(MemoryEvent(type_, self.namespace, session_id, now, data))

    # -- remember -------------------------------------------------------------------------------------

    def remember(
        self,
        text: str,
        *,
        session_id: str | None = None,
        durability: str = "shared",
        kind: str = "fact",
        importance: float = 0.5,
        labels: Mapping[str, Any] | None = None,
        ttl: float | _dt.timedelta | None = None,
        metadata: Any = None,
        created_at: float | None = None,
        supersedes: int | None = None,
    ) -> Entry:
        """Store a self-contained statement; returns the (new or merged-into) :class:`Entry`.

        The entry (text, vector, explicit labels) is committed before this
        returns. A near-identical statement in the same scope is merged into
        the existing entry (``merged_count`` grows, nothing is lost: the new
        wording is kept as a variant). A similar statement that differs (same
        kind and scope, cosine at least ``config.supersede_cosine``) supersedes
        the older one: the old entry links to the new one.

        ``durability="session"`` needs ``session_id`` and makes the entry
        visible only to recalls with that session id. ``created_at`` (clock
        seconds) back-dates an import; by default it is the clock's now.
        ``supersedes`` names the entry this statement replaces (it must be
        visible in the same scope); without it supersession is detected as
        described in :class:`RecallConfig`.
        """
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"text: expected a non-empty string, got {text!r:.80}")
        text = text.strip()
        if durability not in DURABILITIES:
            raise InvalidInput(f"durability: expected 'shared' or 'session', got {durability!r}")
        session_id = _identity(session_id, "session_id", required=durability == "session")
        if kind not in self.kinds:
            raise InvalidInput(f"kind: expected one of {sorted(self.kinds)}, got {kind!r}")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0.0 <= importance <= 1.0:
            raise InvalidInput(f"importance: expected a number in [0, 1], got {importance!r}")
        explicit = self.label_policy.normalise(labels, strict=True)
        ttl_s = _seconds(ttl, "ttl")
        try:
            meta_json = None if metadata is None else json.dumps(metadata, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"metadata: expected JSON-serialisable data: {exc}") from None
        vector = self._encode([text])[0]
        if not np.any(vector):
            raise InvalidInput(f"text: the encoder gives it no direction after centring: {text!r:.80}")
        with self._lock:
            self._check_open()
            self._sync()
            now = self._now()
            created = now if created_at is None else float(created_at)
            part_key = session_id if durability == "session" else None
            norm = kw.normalise_text(text)
            if ttl_s is None:
                kind_ttl = self.kinds[kind].ttl
                ttl_s = kind_ttl
                if durability == "session" and self.session_ttl is not None:
                    ttl_s = self.session_ttl if ttl_s is None else min(ttl_s, self.session_ttl)
            expires = None if ttl_s is None else created + ttl_s
            if supersedes is not None:
                old_row = self._row(supersedes)
                if old_row.part != part_key:
                    raise NotFound(f"no entry {supersedes} in this scope to supersede")
            target, similar = self._find_duplicate(part_key, kind, text, norm, vector, now)
            if target is not None:
                return self._merge(target, text, meta_json, explicit, importance, expires, session_id, now)
            values = {
                "namespace": self.namespace, "session_id": session_id if durability == "session" else None,
                "durability": durability, "kind": kind, "text": text, "norm_text": norm,
                "vector": vector_blob(vector), "importance": float(importance),
                "labels": json.dumps(explicit, sort_keys=True), "inferred_labels": "{}",
                "metadata": meta_json, "created_at": created, "updated_at": now, "reinforced_at": created,
                "expires_at": expires,
            }
            superseded = self._supersession_target(similar, kind, text, created, supersedes)
            evicted: list[_Row] = []
            fts = self._fts_for(part_key)
            with self._store.transaction():
                entry_id = self._store.insert_entry(fts, values)
                for old in superseded:
                    self._store.update_entry(old.id, self.namespace, superseded_by=entry_id, updated_at=now)
                if self.capacity is not None:
                    evicted = self._choose_evictions(now, exclude=entry_id, adding=1)
                    self._delete(evicted)
            self._data_version = self._store.data_version()
            row = _Row(id=entry_id, session_id=values["session_id"], durability=durability, kind=kind, text=text,
                       norm_text=norm, vector=vector, importance=float(importance), labels=explicit,
                       inferred_labels={}, metadata=metadata, created_at=created, updated_at=now,
                       reinforced_at=created, expires_at=expires, merged_count=0, superseded_by=None,
                       eval_sum=0.0, eval_weight=0.0, manual_feedback=None, exposures=0,
                       expired_notified=False, supersedes=[])
            self._add_row(row)
            for old in superseded:
                old.superseded_by = entry_id
                old.updated_at = now
                row.supersedes.append(old.id)
            self._drop_rows(r.id for r in evicted)
        self._emit("remembered", session_id, now, id=entry_id, text=text, kind=kind, durability=durability,
                   labels=explicit)
        for old in superseded:
            self._emit("superseded", session_id, now, id=old.id, text=old.text, superseded_by=entry_id)
        for gone in evicted:
            self._emit("evicted", gone.session_id, now, id=gone.id, text=gone.text)
        self._infer_labels(entry_id, text, session_id)
        with self._lock:
            return self._entry(row, self._now())

    def _find_duplicate(self, part_key: str | None, kind: str, text: str, norm: str, vector: np.ndarray,
                        now: float) -> tuple[_Row | None, list[tuple[float, _Row]]]:
        """The entry to merge into (if any) and the similar entries a new one would supersede."""
        part = self._parts.get(part_key)
        if part is None or part.live == 0:
            return None, []
        rows_idx, scores = top_k_dot(part.matrix[: part.n], vector[None, :], min(16, part.n))
        tokens = _value_tokens(text)
        similar: list[_Row] = []
        best: _Row | None = None
        for r, s in zip(rows_idx[0], scores[0]):
            if not part.alive[r]:
                continue
            row = self._rows.get(int(part.ids[r]))
            if row is None or self._expired(row, now):
                continue
            if row.norm_text == norm:
                return row, []
            if row.kind == kind and s >= self.config.dedup_cosine and row.value_tokens == tokens and best is None:
                best = row
            if s >= self.config.supersede_cosine:
                similar.append((float(s), row))
        if best is not None:
            return best, []
        return None, similar

    def _supersession_target(self, similar: list[tuple[float, _Row]], kind: str, text: str, created: float,
                             explicit: int | None) -> list[_Row]:
        """What a new statement supersedes: the entry named by ``supersedes``, or the most similar
        current statement of the same kind and scope when the new one is phrased as a change."""
        if explicit is not None:
            return [self._row(explicit)]
        cues = getattr(self.config, "_cues", None)
        if cues is not None and not cues.search(text):
            return []
        heads = [(s, r) for s, r in similar if r.superseded_by is None and r.kind == kind and r.created_at <= created]
        if not heads:
            return []
        return [max(heads, key=lambda t: (t[0], t[1].created_at))[1]]

    def _merge(self, row: _Row, text: str, meta_json: str | None, explicit: dict, importance: float,
               expires: float | None, session_id: str | None, now: float) -> Entry:
        labels = self.label_policy.merge(row.labels, explicit)
        new_importance = max(row.importance, float(importance))
        new_expires = None if (row.expires_at is None or expires is None) else max(row.expires_at, expires)
        with self._store.transaction():
            self._store.update_entry(
                row.id, self.namespace, merged_count=row.merged_count + 1, importance=new_importance,
                labels=json.dumps(labels, sort_keys=True), updated_at=now, reinforced_at=now,
                expires_at=new_expires)
            if text != row.text or meta_json is not None:
                self._store.add_variant(row.id, text, meta_json, now)
        self._data_version = self._store.data_version()
        row.merged_count += 1
        row.importance = new_importance
        row.labels = labels
        row.updated_at = now
        row.reinforced_at = now
        row.expires_at = new_expires
        self._emit("merged", session_id, now, id=row.id, text=row.text, merged_text=text,
                   merged_count=row.merged_count)
        return self._entry(row, now, merged=True)

    def _infer_labels(self, entry_id: int, text: str, session_id: str | None) -> None:
        if self.labeler is None:
            return
        try:
            inferred = self.label_policy.normalise(self.labeler(text), strict=False)
        except Exception as exc:  # a labeller failure leaves a valid, unlabelled entry
            logger.warning("hopmem.agent: labeller failed on entry %s: %s", entry_id, exc)
            self._emit("labeling_failed", session_id, self._now(), id=entry_id, error=repr(exc))
            return
        if not inferred:
            return
        with self._lock:
            row = self._rows.get(entry_id)
            if row is None:
                return
            with self._store.transaction():
                self._store.update_entry(entry_id, self.namespace, inferred_labels=json.dumps(inferred, sort_keys=True))
            self._data_version = self._store.data_version()
            row.inferred_labels = inferred

    def _choose_evictions(self, now: float, exclude: int, adding: int) -> list[_Row]:
        """Least valuable entries beyond capacity (never ``exclude``, the one being written)."""
        excess = len(self._rows) + adding - self.capacity
        if excess <= 0:
            return []
        scale = self.forgetting.half_life if self.forgetting else 30 * 86400.0
        scored = []
        for row in self._rows.values():
            if row.id == exclude:
                continue
            recency = math.exp(-max(0.0, now - max(row.reinforced_at, row.created_at)) / scale)
            value = entry_value(row.importance, self._utility(row), recency)
            if self._expired(row, now):
                value -= 10.0  # expired entries go first
            scored.append((value, row.created_at, row.id, row))
        scored.sort(key=lambda t: (t[0], t[1], t[2]))
        return [t[3] for t in scored[:excess]]

    def remember_many(self, items: Iterable[str | Mapping[str, Any]], **defaults: Any) -> list[Entry]:
        """:meth:`remember` each item (a text, or a dict of remember's arguments with ``text``)."""
        out = []
        for item in items:
            args = dict(defaults)
            if isinstance(item, str):
                args["text"] = item
            elif isinstance(item, Mapping):
                args.update(item)
            else:
                raise InvalidInput(f"items: expected str or dict, got {type(item).__name__}")
            text = args.pop("text", None)
            out.append(self.remember(text, **args))
        return out

    # -- recall -----------------------------------------------------------------------------------------

    def recall(
        self,
        text: str,
        *,
        session_id: str | None = None,
        labels: Mapping[str, Any] | None = None,
        kinds: Iterable[str] | None = None,
        limit: int = 5,
        mode: str = "hybrid",
        since: float | None = None,
        until: float | None = None,
        record: bool = True,
    ) -> Selection:
        """Recall what is relevant to ``text``; returns a :class:`Selection`.

        Sees the namespace's shared entries plus, with ``session_id``, that
        session's entries. ``labels`` filters on explicit labels (every key
        given must match one of its values); ``kinds`` filters kinds;
        ``since``/``until`` filter creation time. ``mode`` picks the retrievers:
        ``"hybrid"`` (default), ``"associative"`` (engine reads only) or
        ``"keyword"`` (FTS5 and exact tokens only). With ``record`` (default)
        the selection gets a receipt for :meth:`complete`, exposures are
        counted and a ``recalled`` event is emitted.
        """
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"text: expected a non-empty string, got {text!r:.80}")
        session_id = _identity(session_id, "session_id", required=False)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            raise InvalidInput(f"limit: expected an int in [1, 100], got {limit!r}")
        if mode not in MODES:
            raise InvalidInput(f"mode: expected one of {MODES}, got {mode!r}")
        wanted = self.label_policy.normalise(labels, strict=True) if labels else {}
        kind_set = None
        if kinds is not None:
            kind_set = frozenset([kinds] if isinstance(kinds, str) else kinds)
            unknown = kind_set - set(self.kinds)
            if unknown:
                raise InvalidInput(f"kinds: unknown kinds {sorted(unknown)}; known: {sorted(self.kinds)}")
        t0 = time.perf_counter()
        qvec = self._encode([text.strip()])[0]
        t1 = time.perf_counter()
        query_labels = {}
        if self.labeler is not None and self.config.label_boost > 0:
            try:
                query_labels = self.label_policy.normalise(self.labeler(text), strict=False)
            except Exception as exc:
                logger.warning("hopmem.agent: labeller failed on a query: %s", exc)
        with self._lock:
            self._check_open()
            self._sync()
            now = self._now()
            selection, newly_expired = self._retrieve(
                text.strip(), qvec, session_id=session_id, wanted=wanted, kind_set=kind_set, limit=limit,
                mode=mode, since=since, until=until, query_labels=query_labels, now=now)
            t2 = time.perf_counter()
            timings = {"encode_ms": (t1 - t0) * 1e3, "retrieve_ms": (t2 - t1) * 1e3}
            if record:
                ids = selection.entry_ids
                with self._store.transaction():
                    if ids:
                        self._store.insert_receipt(selection.id, self.namespace, session_id, ids,
                                                   query_labels, now, self.receipt_ttl)
                        self._store.bump_exposures(self.namespace, ids, now)
                        self._receipts += 1
                    self._recalls += 1
                    # receipts stay bounded: by count at once, by age every 64 recalls (an expired
                    # receipt is refused by complete() anyway)
                    if self._receipts > self.max_receipts or self._recalls % 64 == 0:
                        self._store.prune_receipts(self.namespace, now, self.max_receipts)
                        self._receipts = self._store.count_receipts(self.namespace)
                    for row in newly_expired:
                        self._store.update_entry(row.id, self.namespace, expired_notified=1)
                self._data_version = self._store.data_version()
                for entry_id in ids:
                    self._rows[entry_id].exposures += 1
                for row in newly_expired:
                    row.expired_notified = True
            timings["total_ms"] = (time.perf_counter() - t0) * 1e3
            selection = replace(selection, timings=timings)
        if record:
            for row in newly_expired:
                self._emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
            self._emit("recalled", session_id, now, selection_id=selection.id, query=selection.query,
                       abstained=selection.abstained, reason=selection.reason,
                       hits=[{"id": h.entry_id, "text": h.text, "score": h.score, "band": h.band}
                             for h in selection.hits])
        return selection

    def _visible(self, row: _Row, session_id: str | None, now: float, wanted: dict, kind_set: frozenset | None,
                 since: float | None, until: float | None, expired_out: list[_Row]) -> bool:
        if row.durability == "session" and (session_id is None or row.session_id != session_id):
            return False
        if self._expired(row, now):
            if not row.expired_notified:
                expired_out.append(row)
            return False
        if kind_set is not None and row.kind not in kind_set:
            return False
        if wanted and not labels_match(row.labels, wanted):
            return False
        if since is not None and row.created_at < since:
            return False
        if until is not None and row.created_at >= until:
            return False
        if self._suppressed(row, now):
            return False
        return True

    def _gate(self, mode: str) -> tuple[Gate, Gate, bool]:
        """The verdict gate, the band gate, and whether they are calibrated."""
        gate = self._gates.get(mode)
        if gate is not None:
            return gate, self._band_gates.get(mode, gate), True
        return DEFAULT_GATES[mode], DEFAULT_BAND_GATES[mode], False

    def _retrieve(self, text: str, qvec: np.ndarray, *, session_id: str | None, wanted: dict,
                  kind_set: frozenset | None, limit: int, mode: str, since: float | None, until: float | None,
                  query_labels: dict, now: float, admit_all: bool = False) -> tuple[Selection, list[_Row]]:
        cfg = self.config
        use_vectors = mode in ("hybrid", "associative")
        use_keywords = mode in ("hybrid", "keyword")
        expired_out: list[_Row] = []
        visible_cache: dict[int, bool] = {}

        def visible(entry_id: int) -> bool:
            hit = visible_cache.get(entry_id)
            if hit is None:
                row = self._rows.get(entry_id)
                hit = row is not None and self._visible(row, session_id, now, wanted, kind_set, since, until,
                                                         expired_out)
                visible_cache[entry_id] = hit
            return hit

        part_keys: list[str | None] = [None] if session_id is None else [None, session_id]
        parts = [p for p in (self._parts.get(k) for k in part_keys) if p is not None and p.live > 0]
        n_visible_scope = sum(p.live for p in parts)
        hints = parse_time_hints(text, now, self.day_zero)

        semantic: dict[int, float] = {}
        associative: dict[int, float] = {}
        sem_list: list[tuple[float, int]] = []
        assoc_list: list[tuple[float, int]] = []
        first_contact = None
        if use_vectors:
            for part in parts:
                mem = part.engine(cfg.beta, cfg.assoc_k, cfg.activation)
                if mem is None:
                    continue
                trace = mem.analyze(qvec)
                fc = float(trace.first_contact)
                fid = float(trace.fidelity)
                if first_contact is None or fc > first_contact:
                    first_contact = fc
                for loc, sim in zip(trace.activated, trace.similarities):
                    row = part.loc_rows.get(int(loc))
                    if row is None or not part.alive[row]:
                        continue
                    entry_id = int(part.ids[row])
                    if visible(entry_id):
                        semantic[entry_id] = float(sim)
                        sem_list.append((float(sim), entry_id))
                # resolve the reconstruction: its nearest entries, found by the engine's own
                # activation (exact scores; with activation="compact" a float16 pre-scan)
                weight = max(fid, 0.0)
                resolved = mem.analyze(trace.result, strategy="fast")
                for loc, sim in zip(resolved.activated, resolved.similarities):
                    row = part.loc_rows.get(int(loc))
                    if row is None or not part.alive[row]:
                        continue
                    entry_id = int(part.ids[row])
                    if visible(entry_id):
                        associative[entry_id] = weight * float(sim)
                        assoc_list.append((weight * float(sim), entry_id))
        keyword_scores: dict[int, float] = {}
        kw_list: list[tuple[float, int]] = []
        exact: dict[int, list[str]] = {}
        terms = kw.query_terms(text)
        tables = [self._fts[k] for k in part_keys if k in self._fts]
        novelty = 0.0
        if use_keywords and n_visible_scope:
            match = kw.fts_or_query(self._selective_terms(terms, parts, n_visible_scope))
            if match is not None:
                want = max(cfg.over_fetch, 4 * limit)
                for table in tables:  # each partition has its own BM25 statistics; merged by score
                    fetch = want
                    for _ in range(3):  # widen when hidden (expired, filtered) rows crowd the visible out
                        found = self._store.keyword_search(table, match, fetch)
                        kept = [(b, i) for i, b in found if visible(i)]
                        if len(kept) >= want or len(found) < fetch:
                            break
                        fetch *= 4
                    for b, i in kept:
                        keyword_scores[i] = b
                        kw_list.append((b, i))
            rare_max = max(cfg.rare_min, int(math.ceil(cfg.rare_fraction * n_visible_scope)))
            for token in kw.identifier_tokens(text):
                phrase = kw.fts_phrase(token)
                if phrase is None:
                    continue
                ids = [i for table in tables for i in self._store.phrase_ids(table, phrase, 4 * rare_max + 8)
                       if visible(i) and kw.contains_token(self._rows[i].text, token)]
                if 1 <= len(ids) <= rare_max:
                    for i in ids:
                        exact.setdefault(i, []).append(token)
            cue_words = {w for cue in hints.cues for w in cue.split()}  # time scaffolding is not a subject
            novelty = self._novelty([t for t in terms if t not in cue_words], parts)
        window_ids: list[int] = []
        if hints.window is not None and n_visible_scope:
            start, end = hints.window
            lo = bisect.bisect_left(self._by_time, (start, -1))
            hi = bisect.bisect_left(self._by_time, (end, -1))
            window_ids = [i for _, i in self._by_time[lo:hi] if visible(i)]

        # every candidate gets all of its evidence, whichever list found it
        candidates = set(semantic) | set(associative) | set(keyword_scores) | set(exact) | set(window_ids)
        gate, band_gate, calibrated = self._gate(mode)
        selection_id = uuid.uuid4().hex
        override = "exact token" if exact else ("time window" if window_ids else None)
        base = dict(id=selection_id, query=text, namespace=self.namespace, session_id=session_id, mode=mode,
                    novelty=round(novelty, 4), override=override, tau=gate.tau, calibrated=calibrated,
                    first_contact=first_contact,
                    time_hints={"order": hints.order, "window": hints.window, "cues": list(hints.cues)},
                    timings={}, created_at=now)
        suffix = ""
        if not calibrated:
            suffix = f"; gate not calibrated: conservative default tau={gate.tau:.2f} (call calibrate())"
        elif gate.calibrated_writes and gate.is_stale({"writes": len(self._rows), "num_locations": len(self._rows)}):
            suffix = f"; gate calibrated at {gate.calibrated_writes} entries, now {len(self._rows)}: recalibrate"
        if not candidates:
            return Selection(hits=(), abstained=True, reason="no candidates: nothing visible in this scope matches"
                             + suffix, statistic=None, evidence=None, **base), expired_out

        cand = sorted(candidates)
        missing = [i for i in cand if i not in semantic] if use_vectors else []
        if missing:  # found by keyword, exact token or time only: score them against the query too
            direct = np.stack([self._rows[i].vector for i in missing]) @ qvec
            for i, s in zip(missing, direct):
                semantic[i] = float(s)
        ev: dict[int, float] = {}
        kwn: dict[int, float] = {}
        lexical = self._lexical_scorer(terms, parts) if use_keywords else None

        def score(i: int) -> None:
            b = lexical(self._rows[i]) if lexical is not None else 0.0
            kwn[i] = b / (b + cfg.bm25_half) if b > 0 else 0.0
            path = max(semantic.get(i, 0.0), associative.get(i, 0.0)) if use_vectors else 0.0
            if mode == "hybrid":
                ev[i] = path + cfg.keyword_weight * kwn[i]
            elif mode == "associative":
                ev[i] = path
            else:
                ev[i] = kwn[i]

        for i in cand:
            score(i)
        best_id = max(cand, key=lambda i: (ev[i], -i))
        best_ev = ev[best_id]
        # the verdict: is anything relevant remembered at all?
        if mode == "hybrid":
            best_kw = max(kwn.values())
            best_path = max(max(semantic.get(i, 0.0), associative.get(i, 0.0)) for i in cand)
            statistic = best_kw + cfg.grounding_semantic_weight * best_path
            what = f"grounding {best_kw:.3f} + {cfg.grounding_semantic_weight:.2f} x {best_path:.3f}"
        elif mode == "associative" and cfg.associative_statistic == "first_contact" and first_contact is not None:
            statistic = first_contact
            what = f"first contact {statistic:.3f}"
        else:
            statistic = best_ev
            what = f"best evidence {best_ev:.3f}"
        if use_keywords:
            statistic -= cfg.novelty_weight * novelty
            if novelty > 0.005:
                what += f" - novelty {cfg.novelty_weight:.2f} x {novelty:.2f}"
        what = f"statistic {statistic:.3f} ({what})"
        passes = statistic >= gate.tau
        # which hits: those near the best one, once the verdict is yes
        floor = cfg.floor_ratio * best_ev
        in_window = set(window_ids)

        admitted: dict[int, str] = {}
        for i in cand:
            if exact.get(i):
                admitted[i] = "exact token"
            elif passes and ev[i] >= band_gate.tau:
                admitted[i] = "gate"
            elif passes and ev[i] >= floor:
                admitted[i] = "weak evidence in an admitted recall"
            elif i in in_window and ev[i] >= 0.0:
                admitted[i] = "time window"
            elif admit_all:
                admitted[i] = "nothing (ranking without the gate)"
        if not admitted:
            if statistic >= gate.tau - cfg.close_margin:
                reason = (f"too close to call: {what} is within {cfg.close_margin:.2f} "
                          f"below tau {gate.tau:.3f}")
            else:
                reason = f"below the gate: {what} < tau {gate.tau:.3f}"
            return Selection(hits=(), abstained=True, reason=reason + suffix, statistic=statistic,
                             evidence=best_ev, **base), expired_out

        # reciprocal rank fusion over the lists that found each candidate
        lists: dict[str, list[int]] = {}
        if sem_list:
            lists["semantic"] = [i for _, i in sorted(sem_list, key=lambda t: (-t[0], t[1]))]
        if assoc_list:
            lists["associative"] = [i for _, i in sorted(assoc_list, key=lambda t: (-t[0], t[1]))]
        if kw_list:
            lists["keyword"] = [i for _, i in sorted(kw_list, key=lambda t: (-t[0], t[1]))]
        if exact:
            lists["exact"] = sorted(exact, key=lambda i: (-len(exact[i]), -ev[i], i))
        if window_ids:
            lists["time"] = sorted(in_window, key=lambda i: (-ev[i], i))
        ranks: dict[int, dict[str, int]] = {i: {} for i in cand}
        fused: dict[int, float] = {i: 0.0 for i in cand}
        for name, ordered in lists.items():
            seen = set()
            rank = 0
            for i in ordered:
                if i in seen or i not in fused:
                    continue
                seen.add(i)
                rank += 1
                ranks[i][name] = rank
                fused[i] += cfg.rrf_weights.get(name, 1.0) / (cfg.rrf_k + rank)

        # only the head of the fused ranking can reach the top ``limit`` through bounded boosts and
        # version swaps: post-process that pool (and every exact-token hit) only
        pool_size = max(24, 4 * limit)
        if len(admitted) > pool_size:
            keep = set(sorted(admitted, key=lambda i: (-fused[i], -ev[i], i))[:pool_size]) | set(exact)
            admitted = {i: why for i, why in admitted.items() if i in keep}

        # versions: the other end of an admitted entry's supersession chain becomes a candidate; it is
        # admitted on its own evidence only
        order = hints.order or "recent"
        via: dict[int, int] = {}
        for i in list(admitted):
            relative = self._chain_end(i, order, visible)
            if relative is None or relative == i or relative in admitted:
                continue
            if relative not in ev:
                if use_vectors:
                    semantic[relative] = float(self._rows[relative].vector @ qvec)
                score(relative)
                ranks[relative] = {}
            if ev[relative] >= floor:
                admitted[relative] = ("newer" if order == "recent" else "older") + " version of an admitted hit"
                via[relative] = i
                fused[relative] = max(fused.get(relative, 0.0), fused[i] * 0.999)

        # boosts: reorder admitted hits only
        final: dict[int, float] = {}
        boosts: dict[int, dict[str, float]] = {}
        newest = sorted(admitted, key=lambda i: (self._rows[i].created_at, i))
        recency_rank = {i: r for r, i in enumerate(newest)}
        for i in admitted:
            row = self._rows[i]
            b: dict[str, float] = {}
            if query_labels:
                overlap = labels_overlap(query_labels, merge_labels(row.labels, row.inferred_labels))
                b["labels"] = 1.0 + cfg.label_boost * overlap
            if self.reinforcement:
                b["utility"] = 1.0 + cfg.utility_boost * self._utility(row)
            if self.forgetting is not None:
                b["retention"] = 0.5 + 0.5 * self._retention(row, now)
            if hints.order == "recent" and len(newest) > 1:
                b["recency"] = 1.0 + cfg.recency_boost * recency_rank[i] / (len(newest) - 1)
            elif hints.order == "origin" and len(newest) > 1:
                b["recency"] = 1.0 + cfg.recency_boost * (1.0 - recency_rank[i] / (len(newest) - 1))
            if i in in_window:
                b["time window"] = 1.0 + cfg.recency_boost
            factor = 1.0
            for v in b.values():
                factor *= v
            boosts[i] = b
            final[i] = fused[i] * factor
        # versions of one fact trade places among themselves (newest first, or oldest first when the
        # query asks for an earlier state); an entry matched by an exact token keeps its place
        for group in self._version_groups([i for i in admitted if i not in exact and ev[i] >= floor]):
            scores = sorted((final[i] for i in group), reverse=True)
            by_time = sorted(group, key=lambda i: (self._rows[i].created_at, i), reverse=(order == "recent"))
            for i, value in zip(by_time, scores):
                if final[i] > 0 and abs(value - final[i]) > 1e-12:
                    boosts[i]["version order"] = value / final[i]
                final[i] = value
        ordered_ids = sorted(admitted, key=lambda i: (-final[i], -ev[i], i))[:limit]
        # matched terms for the explanation, by the light stemmer (FTS5's Porter stemmer decided the ranking)
        term_stems = [(t, kw.stem(t)) for t in terms] if use_keywords else []
        matched = {i: [t for t, st in term_stems if st in self._rows[i].stems] for i in ordered_ids}

        hits = []
        for i in ordered_ids:
            row = self._rows[i]
            sources = tuple(name for name in ("keyword", "semantic", "associative", "exact", "time")
                            if name in ranks.get(i, {}))
            band = band_gate.band(ev[i])
            if admitted[i] == "exact token" and band == "vague":
                band = "clear"
            expl = Explanation(
                sources=sources, ranks=dict(ranks.get(i, {})), semantic=round(semantic.get(i, 0.0), 4),
                associative=round(associative.get(i, 0.0), 4), keyword=round(kwn.get(i, 0.0), 4),
                bm25=keyword_scores.get(i), evidence=round(ev[i], 4), matched_terms=tuple(matched.get(i, [])),
                exact_tokens=tuple(exact.get(i, [])), time_match=i in in_window, admitted_by=admitted[i],
                boosts={k: round(v, 4) for k, v in boosts[i].items()}, fused=round(fused[i], 6),
                superseded_by=row.superseded_by, via=via.get(i))
            hits.append(Hit(entry_id=i, text=row.text, score=round(final[i], 6), band=band, explanation=expl,
                            kind=row.kind, durability=row.durability, session_id=row.session_id,
                            labels={k: list(v) for k, v in row.labels.items()}, metadata=row.metadata,
                            created_at=row.created_at, importance=row.importance))
        top = hits[0].explanation.admitted_by
        if passes:
            reason = f"admitted: {what} >= tau {gate.tau:.3f}"
        else:
            reason = f"admitted by {top} ({what} < tau {gate.tau:.3f})"
        return Selection(hits=tuple(hits), abstained=False, reason=reason + suffix, statistic=statistic,
                         evidence=best_ev, **base), expired_out

    def _selective_terms(self, terms: list[str], parts: Sequence[_Partition], n: int) -> list[str]:
        """Drop terms in more than ``common_fraction`` of the visible entries (keeping the rarest).

        They add almost nothing to BM25 (tiny IDF) but make FTS5 score most of
        the partition, which is what costs time on a large memory.
        """
        cut = self.config.common_fraction * n
        if len(terms) < 2 or n < 200:
            return terms
        dfs = [(sum(p.df.get(kw.stem(t), 0) for p in parts), t) for t in terms]
        kept = [t for df, t in dfs if df <= cut]
        return kept or [min(dfs)[1]]

    def _lexical_scorer(self, terms: Sequence[str], parts: Sequence[_Partition]) -> Callable[[_Row], float]:
        """BM25 of an entry for the query's words, as keyword *evidence*.

        FTS5 ranks the keyword candidates, but its IDF, ``log((N - n + 0.5) /
        (n + 0.5))``, is zero or clamped for a word in half the entries, so in a
        small memory every match scores ~0. Evidence uses the always-positive
        IDF ``log(1 + (N - n + 0.5) / (n + 0.5))`` (Lucene's), binary term
        frequency and the light stemmer, over the visible partitions;
        k1 = 1.2, b = 0.75.
        """
        n = sum(p.live for p in parts)
        avgdl = max(1.0, sum(p.total_terms for p in parts) / max(n, 1))
        weights = {}
        for st in dict.fromkeys(kw.stem(t) for t in terms):
            df = sum(p.df.get(st, 0) for p in parts)
            if df:
                weights[st] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        k1, b = 1.2, 0.75

        def score(row: _Row) -> float:
            matched = sum(w for st, w in weights.items() if st in row.stems)
            if not matched:
                return 0.0
            return matched * (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * len(row.stems) / avgdl))

        return score

    def _novelty(self, terms: Sequence[str], parts: Sequence[_Partition]) -> float:
        """Share of the query's IDF mass in words no visible entry contains (0 = all known)."""
        stems = [kw.stem(t) for t in terms]
        if not stems:
            return 0.0
        n = sum(p.live for p in parts)
        total = unknown = 0.0
        for st in dict.fromkeys(stems):
            df = sum(p.df.get(st, 0) for p in parts)
            idf = math.log((n + 1.0) / (df + 0.5))
            total += idf
            if df == 0:
                unknown += idf
        return unknown / total if total > 0 else 0.0

    def _version_groups(self, ids: Sequence[int]) -> list[list[int]]:
        """Groups of ``ids`` connected through supersession links (at least two members each)."""
        members = set(ids)
        root: dict[int, int] = {}

        def find(i: int) -> int:
            while root.get(i, i) != i:
                i = root[i]
            return i

        for i in ids:
            nxt, seen = self._rows[i].superseded_by, {i}
            while nxt is not None and nxt not in seen and nxt in self._rows:
                seen.add(nxt)
                if nxt in members:
                    a, b = find(i), find(nxt)
                    if a != b:
                        root[a] = b
                nxt = self._rows[nxt].superseded_by
        groups: dict[int, list[int]] = {}
        for i in ids:
            groups.setdefault(find(i), []).append(i)
        return [g for g in groups.values() if len(g) > 1]

    def rank(self, text: str, *, session_id: str | None = None, limit: int = 10, mode: str = "hybrid") -> list[Hit]:
        """The fused ranking of every candidate, ignoring the gate (no receipts, no events).

        For debugging ("why was this not recalled?") and for evaluating the
        ranking separately from the abstention decision. Each hit's
        ``explanation.admitted_by`` says whether recall would have admitted it.
        """
        self._check_open()
        if mode not in MODES:
            raise InvalidInput(f"mode: expected one of {MODES}, got {mode!r}")
        session_id = _identity(session_id, "session_id", required=False)
        vec = self._encode([text.strip()])[0]
        with self._lock:
            self._sync()
            sel, _ = self._retrieve(text.strip(), vec, session_id=session_id, wanted={}, kind_set=None,
                                    limit=limit, mode=mode, since=None, until=None, query_labels={},
                                    now=self._now(), admit_all=True)
        return list(sel.hits)

    def _chain_end(self, entry_id: int, order: str, visible: Callable[[int], bool]) -> int | None:
        """The newest (``recent``) or oldest (``origin``) visible version of an entry."""
        row = self._rows.get(entry_id)
        if row is None:
            return None
        seen = {entry_id}
        best = entry_id
        if order == "recent":
            nxt = row.superseded_by
            while nxt is not None and nxt not in seen and nxt in self._rows:
                seen.add(nxt)
                if visible(nxt):
                    best = nxt
                nxt = self._rows[nxt].superseded_by
        else:
            frontier = list(row.supersedes)
            oldest = (row.created_at, entry_id)
            while frontier:
                cur = frontier.pop()
                if cur in seen or cur not in self._rows:
                    continue
                seen.add(cur)
                r = self._rows[cur]
                if visible(cur) and (r.created_at, cur) < oldest:
                    oldest = (r.created_at, cur)
                    best = cur
                frontier.extend(r.supersedes)
        return best

    # -- calibration --------------------------------------------------------------------------------------

    def _measure(self, texts: Sequence[str], session_id: str | None, mode: str) -> list[Selection]:
        if mode not in MODES:
            raise InvalidInput(f"mode: expected one of {MODES}, got {mode!r}")
        if isinstance(texts, str):
            raise InvalidInput("texts: expected a list of str, got a single str")
        texts = [t.strip() if isinstance(t, str) else t for t in texts]
        if not all(isinstance(t, str) and t for t in texts):
            raise InvalidInput("texts: expected non-empty strings")
        vectors = self._encode(texts)
        with self._lock:
            self._sync()
            now = self._now()
            return [self._retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None, limit=5, mode=mode,
                                   since=None, until=None, query_labels={}, now=now)[0]
                    for text, vec in zip(texts, vectors)]

    def gate_statistics(self, texts: Sequence[str], *, session_id: str | None = None,
                        mode: str = "hybrid") -> list[float | None]:
        """The verdict statistic each query would get now (no receipts, no events).

        None for a query the gate does not decide: one with an exact rare
        token or a time window that matches entries (admitted regardless), and
        -1 for one with no candidates at all.
        """
        return [None if sel.override is not None else (-1.0 if sel.statistic is None else sel.statistic)
                for sel in self._measure(texts, session_id, mode)]

    def calibrate(self, related: Sequence[str], unrelated: Sequence[str], *, session_id: str | None = None,
                  error_budget: float = 0.2, modes: Iterable[str] = MODES, holdout_fraction: float = 0.0,
                  seed: int = 0) -> dict[str, Gate]:
        """Derive and store the abstention gates from held-out queries.

        ``related`` are queries this memory holds an answer to, ``unrelated``
        queries it does not; neither should be queries you will evaluate on.
        For each mode two gates are fitted with :func:`hopmem.gates.calibrate`
        (at most ``error_budget`` of the unrelated queries pass, on the fitting
        part): the verdict gate on the recall statistic (does the memory hold
        anything relevant?) and the band gate on the best hit's evidence (how
        strong is a hit: "vague" below its ``tau``, "vivid" from its median
        relevant value). Queries the gate does not decide (an exact rare token
        or a time window matched) are left out. Both are stored in the file and
        used by every later recall of this namespace. Returns the verdict gates.
        """
        gates: dict[str, Gate] = {}
        bands: dict[str, Gate] = {}
        for mode in modes:
            rel = [sel for sel in self._measure(related, session_id, mode) if sel.override is None]
            unrel = [sel for sel in self._measure(unrelated, session_id, mode) if sel.override is None]
            n = len(self._rows)
            common = dict(holdout_fraction=holdout_fraction, seed=seed, writes=n, locations=n)
            gates[mode] = _calibrate_scores([-1.0 if s.statistic is None else s.statistic for s in rel],
                                            [-1.0 if s.statistic is None else s.statistic for s in unrel],
                                            error_budget, **common)
            bands[mode] = _calibrate_scores([-1.0 if s.evidence is None else s.evidence for s in rel],
                                            [-1.0 if s.evidence is None else s.evidence for s in unrel],
                                            error_budget, **common)
        self.set_gates(gates, bands)
        return gates

    def set_gates(self, gates: Mapping[str, Gate | None], band_gates: Mapping[str, Gate] | None = None) -> None:
        """Store verdict gates (``None`` removes one, back to the default) and, optionally, band gates.

        A mode given a verdict gate but no band gate bands its hits with the
        verdict gate's cut points.
        """
        self._check_open()
        band_gates = dict(band_gates or {})
        with self._lock:
            with self._store.transaction():
                for mode, gate in gates.items():
                    if mode not in MODES:
                        raise InvalidInput(f"gates: unknown mode {mode!r}; expected one of {MODES}")
                    key, band_key = f"gate:{self.namespace}:{mode}", f"bands:{self.namespace}:{mode}"
                    band = band_gates.get(mode)
                    for name, value in (("gate", gate), ("band gate", band)):
                        if value is not None and not isinstance(value, Gate):
                            raise InvalidInput(f"{name} of {mode!r}: expected a Gate, got {type(value).__name__}")
                    if gate is None:
                        self._store.delete_meta(key)
                        self._store.delete_meta(band_key)
                        self._gates.pop(mode, None)
                        self._band_gates.pop(mode, None)
                        continue
                    self._store.set_json(key, gate.to_dict())
                    self._gates[mode] = gate
                    if band is None:
                        self._store.delete_meta(band_key)
                        self._band_gates.pop(mode, None)
                    else:
                        self._store.set_json(band_key, band.to_dict())
                        self._band_gates[mode] = band
            self._data_version = self._store.data_version()

    @property
    def gates(self) -> dict[str, Gate]:
        """The calibrated verdict gates (modes without one use :data:`DEFAULT_GATES`)."""
        return dict(self._gates)

    @property
    def band_gates(self) -> dict[str, Gate]:
        """The calibrated band gates (hits are banded by the verdict gate where none is set)."""
        return dict(self._band_gates)

    # -- selections and feedback ---------------------------------------------------------------------------

    def complete(self, selection_id: str, score: float) -> bool:
        """Report how well the work that used a selection went (``score`` in [0, 1]).

        The centred score ``2 * (score - 0.5)`` is spread over the selected
        entries with weight ``1 / n`` each. Consuming the receipt and updating
        the aggregates is one transaction: a second call (or a call after the
        receipt expired) changes nothing and returns False.
        """
        self._check_open()
        if not isinstance(selection_id, str) or not selection_id:
            raise InvalidInput(f"selection_id: expected a non-empty str, got {selection_id!r}")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            raise InvalidInput(f"score: expected a number in [0, 1], got {score!r}")
        with self._lock:
            self._sync()
            now = self._now()
            centred = 2.0 * (float(score) - 0.5)
            with self._store.transaction():
                ids = self._store.take_receipt(selection_id, self.namespace, now)
                updated = []
                if ids:
                    weight = 1.0 / len(ids)
                    for entry_id in ids:
                        row = self._rows.get(entry_id)
                        if row is None:
                            continue
                        values = {"eval_sum": row.eval_sum + weight * centred,
                                  "eval_weight": row.eval_weight + weight, "updated_at": now}
                        if self.reinforcement and centred > 0:
                            values["reinforced_at"] = now
                        self._store.update_entry(entry_id, self.namespace, **values)
                        updated.append((row, values))
            self._data_version = self._store.data_version()
            for row, values in updated:
                row.eval_sum = values["eval_sum"]
                row.eval_weight = values["eval_weight"]
                row.updated_at = now
                if "reinforced_at" in values:
                    row.reinforced_at = now
        if ids is None:
            return False
        self._emit("completed", None, now, selection_id=selection_id, score=float(score),
                   entry_ids=[r.id for r, _ in updated])
        return True

    def feedback(self, entry_id: int, value: float | None) -> Entry:
        """Set, replace (a number in [-1, 1]) or clear (None) an entry's manual value."""
        self._check_open()
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not -1.0 <= value <= 1.0):
            raise InvalidInput(f"value: expected a number in [-1, 1] or None, got {value!r}")
        with self._lock:
            self._sync()
            row = self._row(entry_id)
            now = self._now()
            values: dict[str, Any] = {"manual_feedback": None if value is None else float(value), "updated_at": now}
            if self.reinforcement and value is not None and value > 0:
                values["reinforced_at"] = now
            with self._store.transaction():
                self._store.update_entry(row.id, self.namespace, **values)
            self._data_version = self._store.data_version()
            row.manual_feedback = values["manual_feedback"]
            row.updated_at = now
            if "reinforced_at" in values:
                row.reinforced_at = now
            entry = self._entry(row, now)
        self._emit("feedback", row.session_id, now, id=row.id, value=value)
        return entry

    # -- inspection, forgetting, maintenance ------------------------------------------------------------

    def _row(self, entry_id: Any) -> _Row:
        if isinstance(entry_id, bool) or not isinstance(entry_id, (int, np.integer)):
            raise InvalidInput(f"entry_id: expected an int, got {entry_id!r}")
        row = self._rows.get(int(entry_id))
        if row is None:
            raise NotFound(f"no entry {entry_id} in namespace {self.namespace!r}")
        return row

    def get(self, entry_id: int, *, session_id: str | None = None) -> Entry:
        """Inspect one entry, including expired and suppressed ones.

        A session entry is only returned with its own ``session_id``
        (otherwise :class:`~hopmem.errors.NotFound`, as if it did not exist).
        """
        self._check_open()
        with self._lock:
            self._sync()
            row = self._row(entry_id)
            if row.durability == "session" and row.session_id != session_id:
                raise NotFound(f"no entry {entry_id} in namespace {self.namespace!r}")
            return self._entry(row, self._now())

    def entries(self, *, session_id: str | None = None, include_hidden: bool = True) -> list[Entry]:
        """Entries visible to ``session_id`` (shared plus that session's), oldest first."""
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            out = []
            for row in sorted(self._rows.values(), key=lambda r: r.id):
                if row.durability == "session" and row.session_id != session_id:
                    continue
                entry = self._entry(row, now)
                if include_hidden or entry.recallable:
                    out.append(entry)
            return out

    def variants(self, entry_id: int, *, session_id: str | None = None) -> list[dict[str, Any]]:
        """Texts merged into an entry (a merge never loses the wording)."""
        self.get(entry_id, session_id=session_id)
        with self._lock:
            return [{"text": t, "metadata": m, "created_at": c} for t, m, c in self._store.variants(int(entry_id))]

    def forget(self, entry_id: int, *, session_id: str | None = None) -> bool:
        """Delete an entry now, text and vector, irreversibly. False if it was not there.

        A session entry can only be forgotten with its own ``session_id``.
        """
        self._check_open()
        with self._lock:
            self._sync()
            row = self._rows.get(int(entry_id)) if isinstance(entry_id, (int, np.integer)) and \
                not isinstance(entry_id, bool) else None
            if row is None:
                if not isinstance(entry_id, (int, np.integer)) or isinstance(entry_id, bool):
                    raise InvalidInput(f"entry_id: expected an int, got {entry_id!r}")
                return False
            if row.durability == "session" and row.session_id != session_id:
                return False
            now = self._now()
            with self._store.transaction():
                self._delete([row])
            self._data_version = self._store.data_version()
            self._drop_rows([row.id])
        self._emit("forgotten", row.session_id, now, id=row.id, text=row.text)
        return True

    def end_session(self, session_id: str) -> int:
        """Expire every entry of a session now (they stay inspectable until :meth:`prune`)."""
        self._check_open()
        session_id = _identity(session_id, "session_id", required=True)
        with self._lock:
            self._sync()
            now = self._now()
            rows = [r for r in self._rows.values() if r.durability == "session" and r.session_id == session_id
                    and not self._expired(r, now)]
            with self._store.transaction():
                for row in rows:
                    self._store.update_entry(row.id, self.namespace, expires_at=now, updated_at=now)
            self._data_version = self._store.data_version()
            for row in rows:
                row.expires_at = now
        return len(rows)

    def prune(self) -> dict[str, int]:
        """Physically delete expired entries and entries below the retention threshold.

        Returns counts by cause; emits ``expired`` (if not already announced)
        and ``pruned`` events. Old receipts are dropped too.
        """
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            expired = [r for r in self._rows.values() if self._expired(r, now)]
            suppressed = [r for r in self._rows.values() if not self._expired(r, now) and self._suppressed(r, now)]
            gone = expired + suppressed
            leaving: dict[str | None, int] = {}
            for row in gone:
                leaving[row.part] = leaving.get(row.part, 0) + 1
            emptied = [k for k, n in leaving.items() if k is not None and self._parts[k].live == n]
            with self._store.transaction():
                self._delete(gone)
                receipts = self._store.prune_receipts(self.namespace, now, self.max_receipts)
                for key in emptied:  # a finished session leaves no table behind
                    self._store.drop_fts(self.namespace, key)
            self._data_version = self._store.data_version()
            self._drop_rows([r.id for r in gone])
            for key in emptied:
                self._fts.pop(key, None)
                self._parts.pop(key, None)
        for row in expired:
            if not row.expired_notified:
                self._emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
        for row in gone:
            self._emit("pruned", row.session_id, now, id=row.id, text=row.text,
                       cause="expired" if row in expired else "retention")
        return {"expired": len(expired), "suppressed": len(suppressed), "receipts": receipts}

    def stats(self) -> dict[str, Any]:
        """Counts for observability."""
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            rows = list(self._rows.values())
            return {
                "namespace": self.namespace,
                "entries": len(rows),
                "shared": sum(r.durability == "shared" for r in rows),
                "session": sum(r.durability == "session" for r in rows),
                "sessions": len({r.session_id for r in rows if r.durability == "session"}),
                "expired": sum(self._expired(r, now) for r in rows),
                "suppressed": sum(self._suppressed(r, now) for r in rows),
                "superseded": sum(r.superseded_by is not None for r in rows),
                "receipts": self._store.count_receipts(self.namespace),
                "calibrated_modes": sorted(self._gates),
                "encoder": dict(self.encoder_info),
            }

    def reembed(self, encoder: Any, *, centerer: Centerer | None = None) -> int:
        """Migrate every namespace of the file to a new encoder (re-encode all texts).

        The centring mean is refitted (on the reference texts, or ``centerer``),
        vectors are replaced in one transaction, the encoder record changes,
        and all calibrated gates are dropped (recalibrate). Returns the number
        of entries re-embedded. This memory then uses the new encoder.
        """
        self._check_open()
        if encoder is None or not hasattr(encoder, "encode"):
            raise InvalidInput("encoder: expected an Encoder")
        dim = int(encoder.dimension)
        if centerer is None:
            centerer = Centerer(dim).fit(encoder.encode(_centerer_reference_texts()))
        if not centerer.frozen:
            centerer = Centerer.from_dict(centerer.to_dict()).freeze()
        with self._lock:
            rows = self._store.conn.execute("SELECT id, text FROM entries ORDER BY id").fetchall()
            vectors = np.zeros((0, dim), np.float32)
            if rows:
                raw = np.asarray(encoder.encode([t for _, t in rows]), dtype=np.float32)
                vectors = np.atleast_2d(centerer.transform(raw))
            with self._store.transaction():
                for (entry_id, _), vec in zip(rows, vectors):
                    self._store.conn.execute("UPDATE entries SET vector = ? WHERE id = ?", (vector_blob(vec), entry_id))
                self._store.set_json("encoder", {"name": str(getattr(encoder, "name", type(encoder).__name__)),
                                                 "dimension": dim, "fingerprint": str(encoder.fingerprint)})
                self._store.set_json("centerer", centerer.to_dict())
                self._store.conn.execute("DELETE FROM meta WHERE key LIKE 'gate:%' OR key LIKE 'bands:%'")
            self.encoder = encoder
            self.dim = dim
            self.centerer = centerer
            self.encoder_info = {"name": str(getattr(encoder, "name", type(encoder).__name__)), "dimension": dim,
                                 "fingerprint": str(encoder.fingerprint)}
            self._load()
        return len(rows)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._store.close()

    def __enter__(self) -> "AgentMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._rows)} entries"
        return f"AgentMemory({self._store.path!r}, namespace={self.namespace!r}, {state})"

    def subscribe(self, callback: Callable[[MemoryEvent], Any], types: Iterable[str] | None = None) -> Callable[[], None]:
        """Subscribe to events (see :mod:`hopmem.agent.events`); returns an unsubscribe function."""
        return self.events.subscribe(callback, types)
