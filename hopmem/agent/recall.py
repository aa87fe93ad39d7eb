"""Recall: the pipeline from a query to a :class:`~hopmem.agent.Selection`.

The recall itself runs in :class:`~hopmem.agent._recaller.Recaller` (its stages in
:mod:`~hopmem.agent._stages`); here it is checked, encoded and, with ``record=True``,
followed by a receipt, exposure counts and events.
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
from ._table import Query
from .config import RECALL_MODES
from .core import MemoryCore
from .index import Row
from .parts import split_parts
from .results import MemoryHit, Selection
from .temporal import parse_time_hints
from .validation import identity, statement

__all__ = ["RecallMixin"]

logger = logging.getLogger("hopmem.agent")


class RecallMixin(MemoryCore):
    """:meth:`recall` and :meth:`rank`."""

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
        statement(text)
        session_id = identity(session_id, "session_id", required=False)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        wanted = self.label_policy.normalise(labels, strict=True) if labels else {}
        kind_set = None
        if kinds is not None:
            kind_set = frozenset([kinds] if isinstance(kinds, str) else kinds)
            unknown = kind_set - set(self.kinds)
            if unknown:
                raise InvalidInput(f"kinds: unknown kinds {sorted(unknown)}; known: {sorted(self.kinds)}")
        t0 = time.perf_counter()
        qvec, pieces = self._encode_query(text.strip())
        t1 = time.perf_counter()
        query_labels = {}
        if self.labeler is not None and self.config.label_boost > 0:
            try:
                query_labels = self.label_policy.normalise(self.labeler(text), strict=False)
            except Exception as exc:  # noqa: BLE001 - a user's labeler failing costs the labels, not the recall
                logger.warning("hopmem.agent: labeler failed on a query: %s", exc)
        with self._lock:
            self._check_open()
            self._sync()
            now = self._now()
            selection, newly_expired = self._retrieve(
                text.strip(), qvec, session_id=session_id, wanted=wanted, kind_set=kind_set, limit=limit,
                mode=mode, since=since, until=until, query_labels=query_labels, now=now, pieces=pieces)
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

    def _encode_query(self, text: str) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
        """The query's vector, and its parts with theirs when it is a multi-part question and the conversation
        steps are on (one encoder call)."""
        parts = split_parts(text, kw.query_terms) if self.settings.question_parts else []
        vecs = self._encode([text, *parts])
        return vecs[0], list(zip(parts, vecs[1:]))

    def _retrieve(self, text: str, qvec: np.ndarray, *, session_id: str | None, wanted: dict,
                  kind_set: frozenset | None, limit: int, mode: str, since: float | None, until: float | None,
                  query_labels: dict, now: float, admit_all: bool = False,
                  pieces: Sequence[tuple[str, np.ndarray]] = ()) -> tuple[Selection, list[Row]]:
        """One recall through the pipeline (:class:`~hopmem.agent._recaller.Recaller`): its selection, and the
        rows it found newly expired."""
        query = Query(text=text, vector=qvec, mode=mode, limit=limit, now=now,
                      hints=parse_time_hints(text, now, self.day_zero, comparisons=True),
                      question_parts=tuple(pieces), session_id=session_id, labels=query_labels,
                      admit_all=admit_all)
        scope = self._recaller.scope(query, wanted, kind_set, since, until)
        return self._recaller.run(query, scope), scope.newly_expired

    def rank(self, text: str, *, session_id: str | None = None, limit: int = 10,
             mode: str = "hybrid") -> list[MemoryHit]:
        """The fused ranking of every candidate, ignoring the gate (no receipts, no events).

        For debugging ("why was this not recalled?") and for evaluating the
        ranking separately from the abstention decision. Each hit's
        ``explanation.admitted_by`` says whether recall would have admitted it.
        """
        self._check_open()
        text = statement(text)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        session_id = identity(session_id, "session_id", required=False)
        vec, pieces = self._encode_query(text)
        with self._lock:
            self._sync()
            sel, _ = self._retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None,
                                    limit=limit, mode=mode, since=None, until=None, query_labels={},
                                    now=self._now(), admit_all=True, pieces=pieces)
        return list(sel.hits)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidInput(f"limit: expected an int in [1, 100], got {limit!r}")
