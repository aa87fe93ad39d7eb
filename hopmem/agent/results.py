"""What the agent memory returns: an inspected :class:`Entry`, a recall's :class:`Selection` of
:class:`MemoryHit` objects, and each hit's :class:`Explanation`. Plain, frozen data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._deprecation import module_aliases
from .temporal import DateMention

__all__ = ["Entry", "Explanation", "MemoryHit", "Selection"]


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
class MemoryHit:
    """One recalled entry: its text, fused score, confidence band and explanation.

    ``created_at`` is the entry's own time (clock seconds): for an imported
    conversation, when the turn was said. ``dates`` are the dates the entry's
    relative phrases name ("yesterday", "last Saturday", "next month"),
    resolved against that time (:func:`hopmem.agent.temporal.resolve_dates`):
    a turn stored on 8 May 2023 saying "I went to the support group
    yesterday" carries ``DateMention("yesterday", "2023-05-07")``.

    Named apart from the hits of a text collection's recall (:mod:`hopmem.text.recall`); ``Hit`` is its
    deprecated name.
    """

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
    dates: tuple[DateMention, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "explanation"}
        out["explanation"] = self.explanation.to_dict()
        out["dates"] = [{"phrase": d.phrase, "date": d.date} for d in self.dates]
        return out


@dataclass(frozen=True)
class Selection:
    """The result of a recall: a selection id, ranked hits, and the abstention verdict.

    ``abstained`` is True when no hit is returned; ``reason`` then says why:
    no candidates, all below the gate, or too close to call (and whether the
    gate is calibrated). ``statistic`` is the verdict statistic compared with
    ``tau`` and ``features`` the verdict features it was computed from (see
    :mod:`hopmem.agent.verdict`; empty without candidates). ``parts`` are the
    parts a multi-part question was also searched by (:mod:`hopmem.agent.parts`;
    empty for a single question). Pass ``id`` to :meth:`AgentMemory.complete` later.
    """

    id: str
    query: str
    namespace: str
    session_id: str | None
    mode: str
    hits: tuple[MemoryHit, ...]
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
    features: dict[str, float] = field(default_factory=dict)
    parts: tuple[str, ...] = ()

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


__getattr__ = module_aliases(__name__, {"Hit": ("MemoryHit", lambda: MemoryHit)})
