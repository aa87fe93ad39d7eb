"""Recall as a pipeline: :class:`Recaller` runs the stages of :mod:`hopmem.agent._stages` over one
question's candidate table (:mod:`hopmem.agent._table`) and returns its :class:`~hopmem.agent.Selection`.

A memory builds one :class:`Recaller` over a read-only view of its state (:class:`RecallView`: the index,
the gates and models, the configuration, the reranker). Where to change a step: find it in
:meth:`Recaller.run`, then in :mod:`~hopmem.agent._stages`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..text.gates import Gate
from ._settings import RecallSettings
from ._stages import (
    add_context,
    admit,
    boost,
    find,
    fuse,
    fuse_question_parts,
    judge,
    keep_head,
    order_versions,
    prefer_subject,
    pull_versions,
    score,
    settle,
    sort,
)
from ._table import CandidateTable, Query, Scope
from .index import Partition, Row
from .labels import labels_match
from .ranking import build_hits
from .rerank import Reranker, rerank
from .results import MemoryHit, Selection
from .verdict import VerdictModel, abstention_reason, admission_reason, gate_note, select_gates

__all__ = ["RecallView", "Recaller"]


class RecallView:
    """What recall reads of a memory, and nothing else. Each getter reads the memory's current state (a reload
    replaces its index; the view follows): ``rows`` (entries by id), ``by_time`` (``(created_at, id)``,
    sorted), ``partitions`` and ``fts`` (per partition key), ``store`` (keyword searches), ``reranker``,
    ``gates`` (verdict gates, band gates, models), ``config``; and per row ``expired``, ``suppressed``,
    ``utility`` (None: no reinforcement) and ``retention`` (None: no forgetting)."""

    def __init__(self, *, namespace: str, config: Callable[[], RecallSettings], rows: Callable[[], Mapping[int, Row]],
                 by_time: Callable[[], list[tuple[float, int]]],
                 partitions: Callable[[], Mapping[str | None, Partition]], fts: Callable[[], Mapping[str | None, str]],
                 store: Callable[[], Any], reranker: Callable[[], Reranker | None],
                 gates: Callable[[], tuple[Mapping[str, Gate], Mapping[str, Gate], Mapping[str, VerdictModel]]],
                 expired: Callable[[Row, float], bool], suppressed: Callable[[Row, float], bool],
                 utility: Callable[[], Callable[[Row], float] | None],
                 retention: Callable[[], Callable[[Row, float], float] | None]) -> None:
        self.namespace = namespace
        self._config, self._rows, self._by_time, self._partitions, self._fts = config, rows, by_time, partitions, fts
        self._store, self._reranker, self._gates = store, reranker, gates
        self._expired, self._suppressed, self._utility, self._retention = expired, suppressed, utility, retention

    @property
    def config(self) -> RecallSettings:
        return self._config()

    @property
    def rows(self) -> Mapping[int, Row]:
        return self._rows()

    @property
    def by_time(self) -> list[tuple[float, int]]:
        return self._by_time()

    @property
    def store(self) -> Any:
        return self._store()

    @property
    def reranker(self) -> Reranker | None:
        return self._reranker()

    def partitions(self, keys: list[str | None]) -> tuple[tuple[Partition, ...], tuple[str, ...]]:
        """The partitions of ``keys`` that hold live entries, and the FTS5 tables of ``keys``."""
        partitions, fts = self._partitions(), self._fts()
        parts = tuple(p for p in (partitions.get(k) for k in keys) if p is not None and p.live > 0)
        return parts, tuple(fts[k] for k in keys if k in fts)

    def gates(self, mode: str) -> tuple[Gate, Gate, VerdictModel | None, bool]:
        return select_gates(*self._gates(), mode)

    def visibility(self, session_id: str | None, now: float, wanted: Mapping[str, Any],
                   kinds: frozenset[str] | None, since: float | None, until: float | None,
                   newly_expired: list[Row]) -> Callable[[int], bool]:
        """Whether an entry is visible to a recall with these filters (memoised: recall asks again and again);
        the rows it finds expired, and not yet notified, are added to ``newly_expired``."""
        rows, expired = self._rows(), self._expired
        # without forgetting (no retention) nothing is suppressed: the test is skipped
        suppressed = self._suppressed if self._retention() is not None else None
        seen: dict[int, bool] = {}

        def visible(entry_id: int) -> bool:
            hit = seen.get(entry_id)
            if hit is not None:
                return hit
            row = rows.get(entry_id)
            if row is None or (row.durability == "session" and (session_id is None or row.session_id != session_id)):
                hit = False
            elif expired(row, now):
                if not row.expired_notified:
                    newly_expired.append(row)
                hit = False
            else:
                hit = ((kinds is None or row.kind in kinds) and (not wanted or labels_match(row.labels, wanted))
                       and (since is None or row.created_at >= since) and (until is None or row.created_at < until)
                       and (suppressed is None or not suppressed(row, now)))
            seen[entry_id] = hit
            return hit

        return visible

    def utility(self) -> Callable[[Row], float] | None:
        return self._utility()

    def retention(self, now: float) -> Callable[[Row], float] | None:
        retention = self._retention()
        return None if retention is None else (lambda row: retention(row, now))


class Recaller:
    """Runs recall's stages for one memory (see :meth:`run`)."""

    def __init__(self, view: RecallView) -> None:
        self.view = view

    def scope(self, query: Query, wanted: Mapping[str, Any], kinds: frozenset[str] | None, since: float | None,
              until: float | None) -> Scope:
        """The partitions and entries a recall may see (the shared pool, and the session's own with one)."""
        expired: list[Row] = []
        visible = self.view.visibility(query.session_id, query.now, wanted, kinds, since, until, expired)
        keys: list[str | None] = [None] if query.session_id is None else [None, query.session_id]
        partitions, tables = self.view.partitions(keys)
        return Scope(partitions=partitions, tables=tables, visible=visible, newly_expired=expired)

    def run(self, query: Query, scope: Scope) -> Selection:
        """Recall: find candidates, score them, fuse, judge, admit, then order the admitted hits."""
        view, cfg, rows = self.view, self.view.config, self.view.rows
        gate, band_gate, model, calibrated = view.gates(query.mode)
        table = find(query, scope, cfg, view.store, rows, view.by_time)
        outcome = _Outcome(query, table, gate, calibrated, view.namespace, len(rows))
        if not table.ids:
            return outcome.abstain("no candidates: nothing visible in this scope matches")
        table = score(query, table, cfg, rows, scope)
        table = fuse(query, table, cfg)
        table = judge(query, table, cfg, gate, model, rows, scope)
        table = admit(query, table, band_gate, cfg)
        if not table.admitted:
            return outcome.abstain(abstention_reason(table.verdict, gate, cfg), table)  # type: ignore[arg-type]
        reranker = view.reranker if query.mode == "hybrid" else None
        # a reranker re-orders the first ``depth`` hits, of which the first ``limit`` are returned
        depth = max(query.limit, reranker.depth) if reranker is not None else query.limit
        table = fuse_question_parts(query, table, cfg)
        table = keep_head(query, table, depth)
        table = pull_versions(query, table, rows, scope)
        table = boost(query, table, cfg, rows, view.utility(), view.retention(query.now))
        table = order_versions(query, table, rows)
        table = by_score = sort(query, table)
        table = add_context(query, table, cfg, rows, view.by_time, scope)
        table = prefer_subject(query, table, cfg, rows, depth)
        table = settle(query, table, by_score.order, depth)
        hits = self.hits(query, table, band_gate, reranker)
        return outcome.admit(hits, table)

    def hits(self, query: Query, table: CandidateTable, band_gate: Gate, reranker: Reranker | None
             ) -> list[MemoryHit]:
        """The ordered table's hits, with the reranker's order of the first ``reranker.depth``."""
        rows = self.view.rows
        hits = build_hits(rows, table, band_gate, query.reads_keywords)
        if reranker is None:
            return hits
        vectors = np.array([rows[h.entry_id].vector for h in hits[:reranker.depth]])
        return rerank(reranker, query.text, query.vector, hits, vectors, query.limit)


class _Outcome:
    """The :class:`Selection` of one recall: the fields every outcome shares, then an abstention or hits."""

    def __init__(self, query: Query, table: CandidateTable, gate: Gate, calibrated: bool, namespace: str,
                 entries: int) -> None:
        found, hints = table.found, query.hints
        self.gate = gate
        self.suffix = gate_note(gate, calibrated, entries)
        self.selection = functools.partial(
            Selection, id=uuid.uuid4().hex, query=query.text, namespace=namespace, session_id=query.session_id,
            mode=query.mode, novelty=round(found.novelty, 4),
            override="exact token" if found.exact else ("time window" if found.window_ids else None),
            tau=gate.tau, calibrated=calibrated, first_contact=found.first_contact,
            time_hints={"order": hints.order, "window": hints.window, "cues": list(hints.cues)},
            timings={}, created_at=query.now, parts=tuple(text for text, _ in query.question_parts))

    def abstain(self, reason: str, table: CandidateTable | None = None) -> Selection:
        verdict = table.verdict if table is not None else None
        if verdict is None:
            return self.selection(hits=(), abstained=True, reason=reason + self.suffix, statistic=None, evidence=None)
        return self.selection(hits=(), abstained=True, reason=reason + self.suffix, statistic=verdict.statistic,
                              evidence=verdict.best_evidence, features=verdict.features)

    def admit(self, hits: list[MemoryHit], table: CandidateTable) -> Selection:
        verdict = table.verdict
        assert verdict is not None
        reason = admission_reason(verdict, self.gate, hits[0].explanation.admitted_by)
        return self.selection(hits=tuple(hits), abstained=False, reason=reason + self.suffix,
                              statistic=verdict.statistic, evidence=verdict.best_evidence, features=verdict.features)
