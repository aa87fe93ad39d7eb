"""Recall: the pipeline from a query to a :class:`~hopmem.agent.Selection`.

:class:`Recall` owns the :class:`~hopmem.agent._recaller.Recaller`, which runs the recall
itself (its stages in :mod:`~hopmem.agent._stages`) over a read-only
:class:`~hopmem.agent._recaller.RecallView` of the state; here a query is checked,
encoded and, with ``record=True``, followed by a receipt, exposure counts and events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import InvalidInput
from . import keyword as kw
from ._recaller import Recaller, RecallView
from ._table import Query
from .config import RECALL_MODES, RecallConfig
from .core import MemoryState
from .index import Row
from .parts import split_parts
from .results import MemoryHit, Selection
from .temporal import parse_time_hints
from .validation import identity, statement

__all__ = ["Recall"]

logger = logging.getLogger("hopmem.agent")


class Recall:
    """:meth:`recall` and :meth:`rank` of :class:`~hopmem.agent.AgentMemory` over its state; :meth:`retrieve` for
    calibration."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._recaller = Recaller(recall_view(state))

    @property
    def config(self) -> RecallConfig:
        """The state's recall settings."""
        return self._state.config

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
        """See :meth:`hopmem.agent.AgentMemory.recall`."""
        state = self._state
        state.check_open()
        statement(text)
        session_id = identity(session_id, "session_id", required=False)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        wanted = state.label_policy.normalize(labels, strict=True) if labels else {}
        kind_set = None
        if kinds is not None:
            kind_set = frozenset([kinds] if isinstance(kinds, str) else kinds)
            unknown = kind_set - set(state.kinds)
            if unknown:
                raise InvalidInput(f"kinds: unknown kinds {sorted(unknown)}; known: {sorted(state.kinds)}")
        t0 = time.perf_counter()
        qvec, pieces = self._encode_query(text.strip())
        t1 = time.perf_counter()
        query_labels = {}
        if state.labeler is not None and self.config.label_boost > 0:
            try:
                query_labels = state.label_policy.normalize(state.labeler(text), strict=False)
            except Exception as exc:  # noqa: BLE001 - a user's labeler failing costs the labels, not the recall
                logger.warning("hopmem.agent: labeler failed on a query: %s", exc)
        with state.lock:
            state.check_open()
            state.sync()
            now = state.now()
            selection, newly_expired = self.retrieve(
                text.strip(), qvec, session_id=session_id, wanted=wanted, kind_set=kind_set, limit=limit,
                mode=mode, since=since, until=until, query_labels=query_labels, now=now, pieces=pieces)
            t2 = time.perf_counter()
            timings = {"encode_ms": (t1 - t0) * 1e3, "retrieve_ms": (t2 - t1) * 1e3}
            if record:
                ids = selection.entry_ids
                with state.store.transaction():
                    if ids:
                        state.store.insert_receipt(selection.id, state.namespace, session_id, ids,
                                                   query_labels, now, state.receipt_ttl)
                        state.store.bump_exposures(state.namespace, ids, now)
                        state.receipts += 1
                    state.recalls += 1
                    # receipts stay bounded: by count at once, by age every 64 recalls (an expired
                    # receipt is refused by complete() anyway)
                    if state.receipts > state.max_receipts or state.recalls % 64 == 0:
                        state.store.prune_receipts(state.namespace, now, state.max_receipts)
                        state.receipts = state.store.count_receipts(state.namespace)
                    for row in newly_expired:
                        state.store.update_entry(row.id, state.namespace, expired_notified=1)
                state.mark_synced()
                for entry_id in ids:
                    state.rows[entry_id].exposures += 1
                for row in newly_expired:
                    row.expired_notified = True
            timings["total_ms"] = (time.perf_counter() - t0) * 1e3
            selection = replace(selection, timings=timings)
        if record:
            for row in newly_expired:
                state.emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
            state.emit("recalled", session_id, now, selection_id=selection.id, query=selection.query,
                       abstained=selection.abstained, reason=selection.reason,
                       hits=[{"id": h.entry_id, "text": h.text, "score": h.score, "band": h.band}
                             for h in selection.hits])
        return selection

    def _encode_query(self, text: str) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
        """The query's vector, and its parts with theirs when it is a multi-part question and the conversation
        steps are on (one encoder call)."""
        parts = split_parts(text, kw.query_terms) if self._state.settings.question_parts else []
        vecs = self._state.encode([text, *parts])
        return vecs[0], list(zip(parts, vecs[1:]))

    def retrieve(self, text: str, qvec: np.ndarray, *, session_id: str | None, wanted: dict,
                 kind_set: frozenset | None, limit: int, mode: str, since: float | None, until: float | None,
                 query_labels: dict, now: float, admit_all: bool = False,
                 pieces: Sequence[tuple[str, np.ndarray]] = ()) -> tuple[Selection, list[Row]]:
        """One recall through the pipeline (:class:`~hopmem.agent._recaller.Recaller`): its selection, and the
        rows it found newly expired."""
        query = Query(text=text, vector=qvec, mode=mode, limit=limit, now=now,
                      hints=parse_time_hints(text, now, self._state.day_zero, comparisons=True),
                      question_parts=tuple(pieces), session_id=session_id, labels=query_labels,
                      admit_all=admit_all)
        scope = self._recaller.scope(query, wanted, kind_set, since, until)
        return self._recaller.run(query, scope), scope.newly_expired

    def rank(self, text: str, *, session_id: str | None = None, limit: int = 10,
             mode: str = "hybrid") -> list[MemoryHit]:
        """See :meth:`hopmem.agent.AgentMemory.rank`."""
        state = self._state
        state.check_open()
        text = statement(text)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        session_id = identity(session_id, "session_id", required=False)
        vec, pieces = self._encode_query(text)
        with state.lock:
            state.sync()
            sel, _ = self.retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None,
                                   limit=limit, mode=mode, since=None, until=None, query_labels={},
                                   now=state.now(), admit_all=True, pieces=pieces)
        return list(sel.hits)


def recall_view(state: MemoryState) -> RecallView:
    """What recall reads of the state (:class:`~hopmem.agent._recaller.RecallView`), read afresh at each call: a
    reload or a re-embedding replaces the index's containers."""
    return RecallView(
        namespace=state.namespace, config=lambda: state.settings, rows=lambda: state.rows,
        by_time=lambda: state.by_time, partitions=lambda: state.partitions, fts=lambda: state.fts,
        store=lambda: state.store, reranker=lambda: state.reranker,
        gates=lambda: (state.gates, state.band_gates, state.models), expired=state.expired,
        suppressed=state.suppressed, utility=lambda: state.utility if state.reinforcement else None,
        retention=lambda: state.retention if state.forgetting is not None else None)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidInput(f"limit: expected an int in [1, 100], got {limit!r}")
