"""AgentMemory: scoped, labelled, hybrid-recall memory for agents, on one SQLite file.

No language model is on the write or the recall path: a write is an encoder
call, a centering, a few cosines and one SQLite transaction; a recall is an
encoder call, two engine reads per visible partition, one FTS5 query per
partition and one small transaction (receipt and exposure counts).

Architecture (decisions, briefly)
---------------------------------
* **Storage** is :class:`hopmem.agent.store.AgentStore`: one WAL SQLite file,
  entries with their centered unit vectors, one FTS5 table per visibility
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
:class:`AgentMemory` composes parts, each a small class over one shared state:

* :mod:`~hopmem.agent.core`: :class:`~hopmem.agent.core.MemoryState`, the state (store,
  encoder contract, in-memory index of :mod:`~hopmem.agent.index`, gates and models, clock,
  lock, events, settings and policies) and the helpers every part uses; its public
  attributes and methods are the only interface the parts see;
* :mod:`~hopmem.agent.writes`: ``Writes``: remember, dedup by merging, supersession, eviction;
* :mod:`~hopmem.agent.recall`: ``Recall``: the recall pipeline (it owns the
  :class:`~hopmem.agent._recaller.Recaller`), built from
  :mod:`~hopmem.agent.candidates` (the retrievers), :mod:`~hopmem.agent.evidence`
  (per-candidate evidence), :mod:`~hopmem.agent.verdict` (abstention and admission)
  and :mod:`~hopmem.agent.ranking` (fusion, versions, boosts, hits);
* :mod:`~hopmem.agent.calibration`: ``Calibration``: fitting and storing the gates (it
  measures queries with the ``Recall`` it is given);
* :mod:`~hopmem.agent.feedback`: ``Feedback``: selections' completion and manual feedback;
* :mod:`~hopmem.agent.maintenance`: ``Maintenance``: inspection, forgetting, pruning, re-embedding.

Each public method of :class:`AgentMemory` (its signature and documentation are
here) hands its arguments to the part that does the work.

:mod:`~hopmem.agent.config` (:class:`RecallConfig`), :mod:`~hopmem.agent.results`
(:class:`Entry`, :class:`Selection`, :class:`MemoryHit`, :class:`Explanation`) and
:mod:`~hopmem.agent.validation` (:class:`MissingIdentity`) hold the public types,
all importable from here and from :mod:`hopmem.agent`.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from .._deprecation import module_aliases
from ..errors import InvalidInput
from ..text.centering import Centerer
from ..text.encoders import Encoder
from ..text.gates import Gate
from .calibration import DEFAULT_MIN_COVERAGE, Calibration
from .config import DURABILITIES, RECALL_MODES, RecallConfig  # noqa: F401 (importable from here)
from .core import MemoryState
from .events import EVENT_TYPES, EventBus, MemoryEvent
from .feedback import Feedback
from .labels import Labeler, LabelPolicy
from .maintenance import Maintenance
from .recall import Recall
from .rerank import Reranker
from .results import Entry, Explanation, MemoryHit, Selection
from .retention import ForgettingPolicy, KindPolicy
from .tuning import Tuning
from .validation import MissingIdentity
from .verdict import DEFAULT_BAND_GATES, DEFAULT_GATES, VerdictModel
from .write_policy import WritePolicy
from .writes import Writes

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


class AgentMemory:
    """Agent memory bound to one namespace of one SQLite file.

    Open with :meth:`open`. Thread-safe: one lock serialises operations (the
    engine reads release the GIL inside). Close with :meth:`close` (idempotent)
    or use it as a context manager.
    """

    # the shared state, and the parts that work on it (made by :meth:`open`)
    _state: MemoryState
    _writes: Writes
    _recall: Recall
    _calibration: Calibration
    _feedback: Feedback
    _maintenance: Maintenance

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
            The centering mean for a new file; by default it is fitted on the
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
        self._state = state = MemoryState(
            path, encoder=encoder, namespace=namespace, reinforcement=reinforcement, forgetting=forgetting,
            clock=clock, label_policy=label_policy, labeler=labeler, kinds=kinds, capacity=capacity,
            session_ttl=session_ttl, centerer=centerer, config=config, day_zero=day_zero, receipt_ttl=receipt_ttl,
            max_receipts=max_receipts, reranker=reranker, write_policy=write_policy, tuning=tuning)
        self._writes = Writes(state)
        self._recall = Recall(state)
        self._calibration = Calibration(state, self._recall)
        self._feedback = Feedback(state)
        self._maintenance = Maintenance(state)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use AgentMemory.open(path, encoder=..., namespace=...)")

    # -- what it was opened with -----------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """The namespace every operation is confined to."""
        return self._state.namespace

    @property
    def encoder(self) -> Encoder:
        """The text encoder (another one after :meth:`reembed`)."""
        return self._state.encoder

    @property
    def dim(self) -> int:
        """The encoder's dimension."""
        return self._state.dim

    @property
    def centerer(self) -> Centerer:
        """The centering mean of the file's vector space."""
        return self._state.centerer

    @property
    def encoder_info(self) -> dict[str, Any]:
        """The encoder's record in the file: name, dimension, fingerprint."""
        return self._state.encoder_info

    @property
    def config(self) -> RecallConfig:
        """The knobs of recall."""
        return self._state.config

    @property
    def write_policy(self) -> WritePolicy:
        """When a write merges into a stored statement or supersedes one."""
        return self._state.write_policy

    @property
    def tuning(self) -> Tuning:
        """The constants the shipped models were fitted under, and the conversation steps' values."""
        return self._state.tuning

    @property
    def reinforcement(self) -> bool:
        """Whether learned utility reorders hits and stretches half-lives."""
        return self._state.reinforcement

    @property
    def forgetting(self) -> ForgettingPolicy | None:
        """The age-based suppression policy (None: nothing is suppressed for age)."""
        return self._state.forgetting

    @property
    def label_policy(self) -> LabelPolicy:
        """The allowed labels."""
        return self._state.label_policy

    @property
    def labeler(self) -> Labeler | None:
        """The automatic labeler, if any (boost labels only)."""
        return self._state.labeler

    @property
    def kinds(self) -> dict[str, KindPolicy]:
        """The TTL and half-life factor of each kind."""
        return self._state.kinds

    @property
    def capacity(self) -> int | None:
        """At most this many entries in the namespace (None: unbounded)."""
        return self._state.capacity

    @property
    def session_ttl(self) -> float | None:
        """Default expiry of session-scoped entries, in seconds (None: none)."""
        return self._state.session_ttl

    @property
    def day_zero(self) -> float | None:
        """Clock time of "day 0", for a query's "day N"."""
        return self._state.day_zero

    @property
    def receipt_ttl(self) -> float:
        """Seconds a selection's receipt lasts."""
        return self._state.receipt_ttl

    @property
    def max_receipts(self) -> int:
        """At most this many receipts are kept per namespace."""
        return self._state.max_receipts

    @property
    def events(self) -> EventBus:
        """The event bus (see :meth:`subscribe`)."""
        return self._state.events

    # -- lifecycle -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the file. Idempotent."""
        self._state.close()

    def __enter__(self) -> AgentMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._state.rows)

    def __repr__(self) -> str:
        state = "closed" if self._state.closed else f"{len(self._state.rows)} entries"
        return f"AgentMemory({self._state.store.path!r}, namespace={self.namespace!r}, {state})"

    # -- remembering: Writes ---------------------------------------------------------------------------------

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
        write_id: str | None = None,
    ) -> Entry:
        """Store a self-contained statement; returns the (new or merged-into) :class:`Entry`.

        The entry (text, vector, explicit labels) is committed before this
        returns. The same statement again in the same scope, or a
        near-identical one made within :data:`~hopmem.agent.writes.NEAR_DUPLICATE_WINDOW` of it, is
        merged into the existing entry (``merged_count`` grows, nothing is
        lost: the new wording, its metadata and its time are kept as a variant,
        see :meth:`variants`); a near-identical statement made later is a new
        entry. A similar statement phrased as a change (same kind and scope,
        cosine at least ``write_policy.supersede_cosine``, an update cue) supersedes
        the older one (the old entry links to the new one). A conversation
        turn, a statement whose ``metadata`` names its ``"speaker"`` or
        ``"source"``, merges only with the same source's statements and
        neither supersedes nor is superseded automatically (``supersedes=``
        still works).

        ``durability="session"`` needs ``session_id`` and makes the entry
        visible only to recalls with that session id. ``created_at`` (clock
        seconds) back-dates an import; by default it is the clock's now.
        ``supersedes`` names the entry this statement replaces (it must be
        visible in the same scope); without it supersession is detected as
        described in :class:`WritePolicy`.

        ``write_id`` (a non-empty string of at most 256 characters, unique per
        call) is recorded in the transaction that stores the statement, so a
        call retried after an ambiguous failure (a lost connection, a host
        that died before answering) is applied once: a repeat answers the
        entry the first call made or merged into (as it is now), without
        storing anything; the same id with another statement or scope is
        :class:`~hopmem.errors.InvalidInput`.
        """
        return self._writes.remember(text, session_id=session_id, durability=durability, kind=kind,
                                     importance=importance, labels=labels, ttl=ttl, metadata=metadata,
                                     created_at=created_at, supersedes=supersedes, write_id=write_id)

    def remember_many(self, items: Iterable[str | Mapping[str, Any]], *, progress: bool | None = None,
                      **defaults: Any) -> list[Entry]:
        """:meth:`remember` each item: a text, or a dict of :meth:`remember`'s arguments with ``text``.

        ``defaults`` apply to every item (an item's own arguments win). Every
        item is checked for a text and known argument names, and all texts are
        encoded in batches, before anything is stored: encoding statement by
        statement is about 2.7 times slower with all-MiniLM-L6-v2. Then each
        is stored as :meth:`remember` stores it, in order, :data:`~hopmem.agent.writes.WRITE_BATCH`
        statements to a transaction; an item that :meth:`remember` would
        refuse raises with the items before it stored (and committed). Every
        returned entry is committed; a crash or a failed write during the
        call keeps whole batches only, and events and the labeler follow
        each batch's commit.
        ``progress`` shows a bar while encoding (default: from
        :data:`~hopmem.agent.encoding.PROGRESS_FROM` items on, when stderr is a terminal).
        """
        return self._writes.remember_many(items, progress=progress, **defaults)

    # -- recalling: Recall -----------------------------------------------------------------------------------

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
        return self._recall.recall(text, session_id=session_id, labels=labels, kinds=kinds, limit=limit, mode=mode,
                                   since=since, until=until, record=record)

    def rank(self, text: str, *, session_id: str | None = None, limit: int = 10,
             mode: str = "hybrid") -> list[MemoryHit]:
        """The fused ranking of every candidate, ignoring the gate (no receipts, no events).

        For debugging ("why was this not recalled?") and for evaluating the
        ranking separately from the abstention decision. Each hit's
        ``explanation.admitted_by`` says whether recall would have admitted it.
        """
        return self._recall.rank(text, session_id=session_id, limit=limit, mode=mode)

    # -- calibrating: Calibration ----------------------------------------------------------------------------

    def calibrate(self, related: Sequence[str], unrelated: Sequence[str], *, error_budget: float = 0.25,
                  holdout: float = 0.0, seed: int = 0, session_id: str | None = None,
                  min_coverage: float = DEFAULT_MIN_COVERAGE, modes: Iterable[str] = RECALL_MODES,
                  **deprecated: Any) -> dict[str, Gate]:
        """Derive and store the abstention gates (and verdict models) from held-out queries.

        ``related`` are queries this memory holds an answer to, ``unrelated``
        queries it does not; neither should be queries you will evaluate on.
        For each mode, a logistic :class:`~hopmem.agent.verdict.VerdictModel`
        is fitted on the queries' verdict features (on the fitting part); then
        two gates are fitted with :func:`hopmem.text.gates.calibrate` (at most
        ``error_budget`` of the unrelated queries pass, on the fitting part,
        and for the verdict gate at least ``min_coverage`` of the related ones,
        which wins where the two conflict: a verdict that cannot separate the
        queries would otherwise keep its budget by abstaining on most
        answerable ones): the verdict gate on the model's log-odds (does the
        memory hold anything relevant?) and the band gate on the best hit's
        evidence (how strong is a hit: "vague" below its ``tau``, "vivid" from
        its median relevant value). Queries the gate does not decide (an exact
        rare token or a time window matched) are left out; if no query with
        candidates is left on one side, the mode keeps the default model.
        ``holdout`` holds out that share of each group (seeded by ``seed``) to
        measure the gates. Gates and models are stored in the file and used by
        every later recall of this namespace. Returns the verdict gates.

        The defaults differ from :func:`hopmem.text.gates.calibrate`'s
        (``error_budget=0.0``, ``holdout=0.3``) on purpose. The verdict gate
        is fitted on out-of-fold log-odds: each query is scored by a model
        fitted without it, so the gate's figures already estimate new
        queries, and a holdout (which only measures the gates) would take
        queries away from the few, hand-written ones an agent calibrates on.
        And some unanswerable questions always look answerable to a memory
        (a detail never stated about a remembered thing): a budget of 0 would
        then abstain on most answerable ones. 0.25, with the ``min_coverage``
        floor, was the smallest budget within half a point of the best
        recall with an abstention F1 of at least 0.8 on the evaluation's
        development conversations (docs/agent-eval.md): a starting point.

        ``holdout_fraction`` is the deprecated name of ``holdout``.
        """
        return self._calibration.calibrate(related, unrelated, error_budget=error_budget, holdout=holdout, seed=seed,
                                           session_id=session_id, min_coverage=min_coverage, modes=modes,
                                           **deprecated)

    def gate_statistics(self, texts: Sequence[str], *, session_id: str | None = None,
                        mode: str = "hybrid") -> list[float | None]:
        """The verdict statistic each query would get now (no receipts, no events).

        None for a query the gate does not decide: one with an exact rare
        token or a time window that matches entries (admitted regardless), and
        -1 (grounding statistic) or -1000 (a model's log-odds) for one with no
        candidates at all. The inputs of a model's statistic are in each
        selection's ``features`` (see :meth:`recall`).
        """
        return self._calibration.gate_statistics(texts, session_id=session_id, mode=mode)

    def set_gates(self, gates: Mapping[str, Gate | None], band_gates: Mapping[str, Gate] | None = None,
                  models: Mapping[str, VerdictModel | None] | None = None) -> None:
        """Store verdict gates (``None`` removes one, back to the default), and optionally band gates and
        verdict models.

        A mode given a verdict gate but no band gate bands its hits with the
        verdict gate's cut points. A verdict gate applies to its mode's model's
        log-odds when ``models`` gives one, otherwise to the fixed grounding
        statistic (:func:`~hopmem.agent.verdict.grounding_statistic`), which is
        also what gates stored before verdict models existed apply to.
        """
        return self._calibration.set_gates(gates, band_gates, models)

    @property
    def gates(self) -> dict[str, Gate]:
        """The calibrated verdict gates (modes without one use :data:`DEFAULT_GATES`)."""
        return self._calibration.gates

    @property
    def band_gates(self) -> dict[str, Gate]:
        """The calibrated band gates (hits are banded by the verdict gate where none is set)."""
        return self._calibration.band_gates

    @property
    def verdict_models(self) -> dict[str, VerdictModel]:
        """The verdict models stored with the calibrated gates (a gate without one is on the grounding
        statistic; modes without a gate use :data:`~hopmem.agent.verdict.DEFAULT_MODELS`)."""
        return self._calibration.verdict_models

    # -- feedback: Feedback ----------------------------------------------------------------------------------

    def complete(self, selection_id: str, score: float) -> bool:
        """Report how well the work that used a selection went (``score`` in [0, 1]).

        The centered score ``2 * (score - 0.5)`` is spread over the selected
        entries with weight ``1 / n`` each. Consuming the receipt and updating
        the aggregates is one transaction: a second call (or a call after the
        receipt expired) changes nothing and returns False.
        """
        return self._feedback.complete(selection_id, score)

    def feedback(self, entry_id: int, value: float | None) -> Entry:
        """Set, replace (a number in [-1, 1]) or clear (None) an entry's manual value."""
        return self._feedback.feedback(entry_id, value)

    # -- inspecting and maintaining: Maintenance -------------------------------------------------------------

    def get(self, entry_id: int, *, session_id: str | None = None) -> Entry:
        """Inspect one entry, including expired and suppressed ones.

        A session entry is only returned with its own ``session_id``
        (otherwise :class:`~hopmem.errors.NotFound`, as if it did not exist).
        """
        return self._maintenance.get(entry_id, session_id=session_id)

    def entries(self, *, session_id: str | None = None, include_hidden: bool = True) -> list[Entry]:
        """Entries visible to ``session_id`` (shared plus that session's), oldest first."""
        return self._maintenance.entries(session_id=session_id, include_hidden=include_hidden)

    def variants(self, entry_id: int, *, session_id: str | None = None) -> list[dict[str, Any]]:
        """Texts merged into an entry (a merge never loses the wording)."""
        return self._maintenance.variants(entry_id, session_id=session_id)

    def forget(self, entry_id: int, *, session_id: str | None = None) -> bool:
        """Delete an entry now, text and vector, irreversibly. False if it was not there.

        A session entry can only be forgotten with its own ``session_id``.
        """
        return self._maintenance.forget(entry_id, session_id=session_id)

    def end_session(self, session_id: str) -> int:
        """Expire every entry of a session now (they stay inspectable until :meth:`prune`)."""
        return self._maintenance.end_session(session_id)

    def prune(self) -> dict[str, int]:
        """Physically delete expired entries and entries below the retention threshold.

        Returns counts by cause; emits ``expired`` (if not already announced)
        and ``pruned`` events. Old receipts are dropped too.
        """
        return self._maintenance.prune()

    def stats(self) -> dict[str, Any]:
        """Counts for observability."""
        return self._maintenance.stats()

    def reembed(self, encoder: Encoder, *, centerer: Centerer | None = None, progress: bool | None = None) -> int:
        """Migrate every namespace of the file to a new encoder (re-encode all texts).

        The centering mean is refitted (on the reference texts, or ``centerer``),
        vectors are replaced in one transaction, the encoder record changes,
        and all calibrated gates (and their verdict models) are dropped (recalibrate). Returns the number
        of entries re-embedded. This memory then uses the new encoder.

        Every text is encoded, in batches and checked (shape and finite values), before anything is
        written: an encoder that fails or returns a bad vector leaves the file and this memory as they
        were. ``progress`` shows a bar while encoding (default: from
        :data:`~hopmem.agent.encoding.PROGRESS_FROM` entries on, when stderr is a terminal).
        """
        return self._maintenance.reembed(encoder, centerer=centerer, progress=progress)

    # -- events and time -------------------------------------------------------------------------------------

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
        self._state.emit(event_type, session_id, self._state.now(), **data)

    def now(self) -> float:
        """The memory's current time in seconds: its ``clock`` (see :meth:`open`), checked."""
        return self._state.now()


__getattr__ = module_aliases(__name__, {"Hit": ("MemoryHit", lambda: MemoryHit),
                                        "MODES": ("RECALL_MODES", lambda: RECALL_MODES)})
