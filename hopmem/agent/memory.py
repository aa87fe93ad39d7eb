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

Modules
-------
:class:`AgentMemory` combines operations written as mixins over one core:

* :mod:`~hopmem.agent.core`: the state (store, encoder contract, in-memory
  index of :mod:`~hopmem.agent.index`, gates, clock, lock, events) and shared helpers;
* :mod:`~hopmem.agent.writes`: remember, dedup by merging, supersession, eviction;
* :mod:`~hopmem.agent.recall`: the recall pipeline, built from
  :mod:`~hopmem.agent.candidates` (the retrievers), :mod:`~hopmem.agent.evidence`
  (per-candidate evidence), :mod:`~hopmem.agent.verdict` (abstention and admission)
  and :mod:`~hopmem.agent.ranking` (fusion, versions, boosts, hits);
* :mod:`~hopmem.agent.calibration`: fitting and storing the gates;
* :mod:`~hopmem.agent.feedback`: selections' completion and manual feedback;
* :mod:`~hopmem.agent.maintenance`: inspection, forgetting, pruning, re-embedding.

:mod:`~hopmem.agent.config` (:class:`RecallConfig`), :mod:`~hopmem.agent.results`
(:class:`Entry`, :class:`Selection`, :class:`MemoryHit`, :class:`Explanation`) and
:mod:`~hopmem.agent.validation` (:class:`MissingIdentity`) hold the public types,
all importable from here and from :mod:`hopmem.agent`.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .._deprecation import module_aliases
from ..errors import InvalidInput
from ..text.centering import Centerer
from ..text.encoders import Encoder
from .calibration import CalibrationMixin
from .config import DURABILITIES, RECALL_MODES, RecallConfig  # noqa: F401 (importable from here)
from .events import EVENT_TYPES, MemoryEvent
from .feedback import FeedbackMixin
from .labels import Labeler, LabelPolicy
from .maintenance import MaintenanceMixin
from .rerank import Reranker
from .results import Entry, Explanation, MemoryHit, Selection
from .retention import ForgettingPolicy, KindPolicy
from .tuning import Tuning
from .validation import MissingIdentity
from .verdict import DEFAULT_BAND_GATES, DEFAULT_GATES
from .write_policy import WritePolicy
from .writes import WritesMixin

__all__ = [
    "AgentMemory",
    "Entry",
    "Explanation",
    "MemoryHit",
    "Selection",
    "RecallConfig",
    "MissingIdentity",
    "RECALL_MODES",
    "DEFAULT_GATES",
    "DEFAULT_BAND_GATES",
]


class AgentMemory(WritesMixin, CalibrationMixin, FeedbackMixin, MaintenanceMixin):
    """Agent memory bound to one namespace of one SQLite file.

    Open with :meth:`open`. Thread-safe: one lock serialises operations (the
    engine reads release the GIL inside). Close with :meth:`close` (idempotent)
    or use it as a context manager.
    """

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Encoder,
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
        reranker: Reranker | Literal[False] | None = None,
        write_policy: WritePolicy | None = None,
        tuning: Tuning | None = None,
    ) -> AgentMemory:
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
            Allowed labels; an optional automatic labeler (boost only).
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
            The knobs of recall (what to read, admit and boost; the
            conversation steps' switch).
        day_zero : float, optional
            Clock time of "day 0", so that a query's "day N" means a time window.
        receipt_ttl, max_receipts
            Selection receipts expire after ``receipt_ttl`` and at most
            ``max_receipts`` are kept per namespace.
        reranker : Reranker, False or None
            What re-orders a hybrid recall's first hits after the verdict
            (:mod:`hopmem.agent.rerank`). None (the default): the model
            shipped for the encoder, if there is one (the default encoder has
            one); False: none, the fused order stands; or any object with an
            int ``depth`` and ``order(question, qvec, hits, vectors)``.
        write_policy : WritePolicy, optional
            When a new statement is merged into a stored one or supersedes one.
        tuning : Tuning, optional
            The constants the shipped models were fitted under and the
            conversation steps' values; by default the tuning record's. Other
            settings warn (:class:`~hopmem.agent.tuning.UnfittedSettings`).
        """
        self = cls.__new__(cls)
        self._init(path, encoder=encoder, namespace=namespace, reinforcement=reinforcement,
                   forgetting=forgetting, clock=clock, label_policy=label_policy, labeler=labeler,
                   kinds=kinds, capacity=capacity, session_ttl=session_ttl, centerer=centerer,
                   config=config, day_zero=day_zero, receipt_ttl=receipt_ttl, max_receipts=max_receipts,
                   reranker=reranker, write_policy=write_policy, tuning=tuning)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use AgentMemory.open(path, encoder=..., namespace=...)")

    # -- lifecycle ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._store.close()

    def __enter__(self) -> AgentMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._rows)} entries"
        return f"AgentMemory({self._store.path!r}, namespace={self.namespace!r}, {state})"

    def subscribe(self, callback: Callable[[MemoryEvent], Any],
                  types: Iterable[str] | None = None) -> Callable[[], None]:
        """Subscribe to events (see :mod:`hopmem.agent.events`); returns an unsubscribe function."""
        return self.events.subscribe(callback, types)

    def publish(self, event_type: str, session_id: str | None = None, **data: Any) -> None:
        """Send an event of ``event_type`` (one of :data:`~hopmem.agent.events.EVENT_TYPES`) about ``session_id``
        to this memory's subscribers, stamped with the memory's clock (:meth:`now`).

        The memory publishes its own events; this is for helpers that act on
        its behalf, such as :class:`~hopmem.agent.RememberingRunner`
        (``extracted``, ``extraction_failed``). ``data`` should be plain
        JSON-like values.
        """
        if event_type not in EVENT_TYPES:
            raise InvalidInput(f"event_type: expected one of {sorted(EVENT_TYPES)}, got {event_type!r}")
        self._emit(event_type, session_id, self._now(), **data)

    def now(self) -> float:
        """The memory's current time in seconds: its ``clock`` (see :meth:`open`), checked."""
        return self._now()


__getattr__ = module_aliases(__name__, {"Hit": ("MemoryHit", lambda: MemoryHit),
                                        "MODES": ("RECALL_MODES", lambda: RECALL_MODES)})
