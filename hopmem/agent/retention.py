"""Kinds, utility, and forgetting: the arithmetic, free of storage.

Everything here is a pure function of an entry's stored numbers and the time
the caller passes in (the memory's injected clock), so lifecycle behaviour is
deterministic in tests.

Utility
    Each entry keeps compact aggregates: ``eval_sum`` and ``eval_weight`` from
    :meth:`AgentMemory.complete` (a centered score, ``2 * (score - 0.5)`` in
    ``[-1, 1]``, spread over the selection with weight ``1 / n``), and one
    manual value in ``[-1, 1]`` (or none) from :meth:`AgentMemory.feedback`.
    The eval mean is shrunk toward 0 by a prior weight of 1, so one lucky
    selection moves it only a little. Utility is ``manual_weight * manual +
    (1 - manual_weight) * eval`` when a manual value exists, else the eval
    mean; missing signals are neutral (0).

Forgetting (optional, :class:`ForgettingPolicy`)
    ``retention = exp(-age / effective_half_life)`` where ``age`` runs from the
    last reinforcement (creation, a merge, a positive eval or positive manual
    value). ``effective_half_life = half_life * kind_factor * 2 ** (
    importance_gain * (importance - 0.5) * 2 + utility_gain * utility)``,
    clipped to ``[min_half_life, max_half_life]``. (The formula uses
    ``exp(-age / h)`` as the seeds write it, so ``h`` is strictly a time
    constant; the name follows the seeds.) Entries whose retention falls below
    ``threshold`` stop being recalled but remain inspectable; a manual value of
    at least ``protect_at`` keeps retention at 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidInput

__all__ = [
    "KINDS",
    "KindPolicy",
    "DEFAULT_KINDS",
    "ForgettingPolicy",
    "utility",
    "retention",
    "entry_value",
]

KINDS: tuple[str, ...] = ("fact", "preference", "event", "summary", "task", "observation")

DAY = 86400.0


@dataclass(frozen=True)
class KindPolicy:
    """Defaults a kind carries: a TTL (seconds or None) and a half-life factor."""

    ttl: float | None = None
    half_life_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.ttl is not None and (not isinstance(self.ttl, (int, float)) or not self.ttl > 0):
            raise InvalidInput(f"ttl: expected seconds > 0 or None, got {self.ttl!r}")
        if not isinstance(self.half_life_factor, (int, float)) or not self.half_life_factor > 0:
            raise InvalidInput(f"half_life_factor: expected a number > 0, got {self.half_life_factor!r}")


#: Preferences outlive conversations; observations usually should not; events
#: and tasks fade. Facts and summaries need no TTL.
DEFAULT_KINDS: Mapping[str, KindPolicy] = {
    "fact": KindPolicy(None, 1.0),
    "preference": KindPolicy(None, 2.0),
    "event": KindPolicy(None, 0.5),
    "summary": KindPolicy(None, 1.0),
    "task": KindPolicy(30 * DAY, 0.5),
    "observation": KindPolicy(7 * DAY, 0.25),
}


@dataclass(frozen=True)
class ForgettingPolicy:
    """Age-based suppression; see the module docstring for the formula.

    Parameters
    ----------
    half_life : float
        Seconds; the base time constant (default 30 days).
    min_half_life, max_half_life : float
        Bounds on the effective half-life (defaults: 1 day and 365 days).
    threshold : float
        Retention below this suppresses an entry from recall (default 0.05).
    importance_gain, utility_gain : float
        Exponents (base 2) by which importance and utility stretch the half-life.
    protect_at : float
        A manual value at or above this keeps retention at 1 (default 1.0).
    """

    half_life: float = 30 * DAY
    min_half_life: float = 1 * DAY
    max_half_life: float = 365 * DAY
    threshold: float = 0.05
    importance_gain: float = 1.0
    utility_gain: float = 1.0
    protect_at: float = 1.0

    def __post_init__(self) -> None:
        for name in ("half_life", "min_half_life", "max_half_life"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
                    or not math.isfinite(value)):
                raise InvalidInput(f"{name}: expected seconds > 0, got {value!r}")
        if self.min_half_life > self.max_half_life:
            raise InvalidInput(
                f"min_half_life: expected <= max_half_life ({self.max_half_life}), got {self.min_half_life}")
        if not 0.0 <= self.threshold < 1.0:
            raise InvalidInput(f"threshold: expected a number in [0, 1), got {self.threshold!r}")
        for name in ("importance_gain", "utility_gain"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise InvalidInput(f"{name}: expected a finite number >= 0, got {value!r}")

    def effective_half_life(self, importance: float, utility_value: float, kind_factor: float = 1.0) -> float:
        exponent = self.importance_gain * (importance - 0.5) * 2.0 + self.utility_gain * utility_value
        h = self.half_life * kind_factor * (2.0 ** exponent)
        return min(max(h, self.min_half_life), self.max_half_life)


def eval_mean(eval_sum: float, eval_weight: float, prior: float = 1.0) -> float:
    """Mean centered eval score, shrunk toward 0 by ``prior`` pseudo-observations."""
    return eval_sum / (eval_weight + prior) if eval_weight > 0 else 0.0


def utility(eval_sum: float, eval_weight: float, manual: float | None, manual_weight: float = 0.7) -> float:
    """Blend of the shrunk eval mean and the manual value; 0 when neither exists."""
    ev = eval_mean(eval_sum, eval_weight)
    if manual is None:
        return max(-1.0, min(1.0, ev))
    return max(-1.0, min(1.0, manual_weight * manual + (1.0 - manual_weight) * ev))


def retention(
    policy: ForgettingPolicy | None,
    *,
    now: float,
    reinforced_at: float,
    importance: float,
    utility_value: float,
    manual: float | None,
    kind_factor: float = 1.0,
) -> float:
    """The retention multiplier in ``[0, 1]``; 1 when forgetting is off."""
    if policy is None:
        return 1.0
    if manual is not None and manual >= policy.protect_at:
        return 1.0
    age = max(0.0, now - reinforced_at)
    h = policy.effective_half_life(importance, utility_value, kind_factor)
    return math.exp(-age / h)


def entry_value(importance: float, utility_value: float, recency: float) -> float:
    """Worth of keeping an entry, for capacity eviction: importance, usefulness, recency.

    ``recency`` is in ``[0, 1]`` (1 = just written or reinforced). Weighted
    0.5 / 0.3 / 0.2; the least valuable entry is evicted first, ties to the
    older one. The oldest entry is not evicted merely for being old.
    """
    return 0.5 * importance + 0.3 * (utility_value + 1.0) / 2.0 + 0.2 * recency
