"""What recall's stages pass along: the question (:class:`Query`), what it may see (:class:`Scope`) and the
candidate table (:class:`CandidateTable`), one record per candidate (:class:`Candidate`).

The table is immutable: a stage (:mod:`hopmem.agent._stages`) returns a new table with the columns it
computed replaced (:meth:`CandidateTable.but`), and never changes the columns of the table it was given.
Columns are keyed by entry id; :meth:`CandidateTable.record` reads one candidate's record across them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .candidates import Candidates
from .evidence import Evidence
from .index import Partition, Row
from .temporal import TimeHints
from .verdict import Verdict

__all__ = ["Query", "Scope", "CandidateTable", "Candidate"]


@dataclass(frozen=True)
class Query:
    """One recall's question and how it is asked."""

    text: str
    vector: np.ndarray
    mode: str
    limit: int
    now: float
    hints: TimeHints
    #: The question parts of a multi-part question, each with its vector (:mod:`hopmem.agent.parts`).
    question_parts: tuple[tuple[str, np.ndarray], ...] = ()
    session_id: str | None = None
    labels: Mapping[str, Any] = field(default_factory=dict)  # the query's labels (from the labeler): boosts
    admit_all: bool = False  # ranking alone (``rank()``): every candidate admitted

    @property
    def reads_keywords(self) -> bool:
        return self.mode in ("hybrid", "keyword")


@dataclass(frozen=True)
class Scope:
    """What one recall may see: its visible partitions, their FTS5 tables, and a memoised visibility test
    (which notes the rows it finds newly expired, for the ``expired`` events)."""

    partitions: tuple[Partition, ...]
    tables: tuple[str, ...]
    visible: Callable[[int], bool]
    newly_expired: list[Row]


@dataclass(frozen=True)
class Candidate:
    """One candidate's record, read across the table's columns (for explanations, tests and debugging)."""

    entry_id: int
    ranks: Mapping[str, int]
    semantic: float | None
    associative: float | None
    keyword: float | None
    evidence: float | None
    fused: float | None
    boosts: Mapping[str, float]
    final: float | None
    admitted_by: str | None
    via: int | None
    question_parts: tuple[int, ...]  # which question parts (1-based) found it


@dataclass(frozen=True)
class CandidateTable:
    """The candidates of one recall, column by column (keyed by entry id).

    ``ids`` are the candidates the retrievers found (sorted); ``own`` those the verdict reads; ``lists``
    each retriever's ranking; ``ranks`` and ``fused`` the reciprocal rank fusion; ``admitted`` why each
    admitted hit was; ``via`` the hit each version pulled in stands for; ``final`` and ``boosts`` the
    boosted scores; ``order`` the hits, best first (once ordered); ``context_of`` the hit each turn of
    context was brought by; ``moved_by`` the last step that re-ordered the first hits.
    """

    found: Candidates
    part_found: tuple[Candidates, ...] = ()
    ids: tuple[int, ...] = ()
    own: tuple[int, ...] = ()
    in_window: frozenset[int] = frozenset()
    evidence: Evidence | None = None
    part_evidence: tuple[Evidence, ...] = ()
    verdict: Verdict | None = None
    lists: Mapping[str, Sequence[int]] = field(default_factory=dict)
    ranks: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    fused: Mapping[int, float] = field(default_factory=dict)
    admitted: Mapping[int, str] = field(default_factory=dict)
    via: Mapping[int, int] = field(default_factory=dict)
    final: Mapping[int, float] = field(default_factory=dict)
    boosts: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    order: tuple[int, ...] = ()
    context_of: Mapping[int, int] = field(default_factory=dict)
    moved_by: str = "context"

    def but(self, **columns: Any) -> CandidateTable:
        """This table with ``columns`` replaced (a shallow copy: the columns it keeps are shared, and no stage
        changes a column it was given)."""
        copied = self.__dict__.copy()
        copied.update(columns)
        out = object.__new__(CandidateTable)
        object.__setattr__(out, "__dict__", copied)
        return out

    @property
    def ev(self) -> Mapping[int, float]:
        """Each scored candidate's evidence."""
        return self.evidence.value if self.evidence is not None else {}

    def record(self, entry_id: int) -> Candidate:
        e = self.evidence
        return Candidate(
            entry_id=entry_id, ranks=dict(self.ranks.get(entry_id, {})),
            semantic=e.semantic.get(entry_id) if e else None, associative=e.associative.get(entry_id) if e else None,
            keyword=e.keyword.get(entry_id) if e else None, evidence=self.ev.get(entry_id),
            fused=self.fused.get(entry_id), boosts=dict(self.boosts.get(entry_id, {})),
            final=self.final.get(entry_id), admitted_by=self.admitted.get(entry_id), via=self.via.get(entry_id),
            question_parts=tuple(n for n, pf in enumerate(self.part_found, 1) if entry_id in pf.ids))
