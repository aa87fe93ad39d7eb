"""What one recall reads: the user's :class:`~hopmem.agent.RecallConfig` and the
:class:`~hopmem.agent.Tuning`, with the conversation switch applied, as one flat set of values.

The stages and the modules they call (:mod:`~hopmem.agent.candidates`,
:mod:`~hopmem.agent.evidence`, :mod:`~hopmem.agent.verdict`, :mod:`~hopmem.agent.ranking`)
read their values from here, whichever of the two holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .config import RecallConfig
from .tuning import Tuning

__all__ = ["RecallSettings"]


@dataclass(frozen=True)
class RecallSettings:
    """The values recall runs with (see :class:`~hopmem.agent.RecallConfig` and :class:`~hopmem.agent.Tuning`
    for what each means). With ``conversation`` off the conversation steps are off: ``aggregation_k`` is
    ``assoc_k``, ``context_weight``, ``subject_boost``, ``date_boost`` and ``part_weight`` are 0, and
    ``question_parts`` is False."""

    assoc_k: int
    activation: Literal["exact", "compact"]
    over_fetch: int
    keyword_weight: float
    floor_ratio: float
    rare_min: int
    rare_fraction: float
    label_boost: float
    utility_boost: float
    recency_boost: float
    beta: float
    rrf_k: float
    bm25_half: float
    novelty_ceiling: float
    common_fraction: float
    close_margin: float
    rebuild_dead_fraction: float
    rrf_weights: Mapping[str, float]
    aggregation_k: int
    context_weight: float
    subject_boost: float
    date_boost: float
    part_weight: float
    question_parts: bool

    @classmethod
    def resolve(cls, config: RecallConfig | None = None, tuning: Tuning | None = None) -> RecallSettings:
        """The values of ``config`` and ``tuning`` (the defaults for None)."""
        config = config if config is not None else RecallConfig()
        tuning = tuning if tuning is not None else Tuning()
        on = config.conversation
        return cls(
            assoc_k=config.assoc_k, activation=config.activation, over_fetch=config.over_fetch,
            keyword_weight=config.keyword_weight, floor_ratio=config.floor_ratio, rare_min=config.rare_min,
            rare_fraction=config.rare_fraction, label_boost=config.label_boost,
            utility_boost=config.utility_boost, recency_boost=config.recency_boost,
            beta=tuning.beta, rrf_k=tuning.rrf_k, bm25_half=tuning.bm25_half,
            novelty_ceiling=tuning.novelty_ceiling, common_fraction=tuning.common_fraction,
            close_margin=tuning.close_margin, rebuild_dead_fraction=tuning.rebuild_dead_fraction,
            rrf_weights=dict(tuning.rrf_weights),
            aggregation_k=tuning.aggregation_k if on else config.assoc_k,
            context_weight=tuning.context_weight if on else 0.0,
            subject_boost=tuning.subject_boost if on else 0.0,
            date_boost=tuning.date_boost if on else 0.0,
            part_weight=tuning.part_weight if on else 0.0,
            question_parts=on)
