"""The lifecycle arithmetic: utility, retention, half-life bounds, eviction value."""

from __future__ import annotations

import math

import pytest

from hopmem.agent.retention import DAY, ForgettingPolicy, KindPolicy, entry_value, retention, utility
from hopmem.errors import InvalidInput


def test_utility_blends_manual_and_shrunk_eval_and_is_neutral_without_signals():
    assert utility(0.0, 0.0, None) == 0.0
    assert utility(1.0, 1.0, None) == pytest.approx(0.5)  # one full positive eval, shrunk by a prior of 1
    assert utility(0.0, 0.0, 1.0) == pytest.approx(0.7)
    assert utility(1.0, 1.0, -1.0) == pytest.approx(0.7 * -1.0 + 0.3 * 0.5)
    assert -1.0 <= utility(100.0, 1.0, 1.0) <= 1.0


def test_retention_is_exponential_in_age_and_one_without_forgetting():
    policy = ForgettingPolicy(half_life=10 * DAY)
    args = dict(now=20 * DAY, reinforced_at=10 * DAY, importance=0.5, utility_value=0.0, manual=None)
    assert retention(None, **args) == 1.0
    assert retention(policy, **args) == pytest.approx(math.exp(-1.0))
    assert retention(policy, **{**args, "now": 5 * DAY}) == 1.0  # age never negative


def test_importance_and_utility_stretch_the_half_life_within_bounds():
    policy = ForgettingPolicy(half_life=10 * DAY, min_half_life=4 * DAY, max_half_life=30 * DAY)
    assert policy.effective_half_life(0.5, 0.0) == pytest.approx(10 * DAY)
    assert policy.effective_half_life(1.0, 0.0) == pytest.approx(20 * DAY)
    assert policy.effective_half_life(0.0, 0.0) == pytest.approx(5 * DAY)
    assert policy.effective_half_life(1.0, 1.0) == pytest.approx(30 * DAY)  # clipped at the top
    assert policy.effective_half_life(0.0, -1.0) == pytest.approx(4 * DAY)  # clipped at the bottom
    assert policy.effective_half_life(0.5, 0.0, kind_factor=2.0) == pytest.approx(20 * DAY)


def test_manual_protection():
    policy = ForgettingPolicy(half_life=DAY, min_half_life=DAY, protect_at=0.9)
    old = dict(now=100 * DAY, reinforced_at=0.0, importance=0.0, utility_value=0.0)
    assert retention(policy, manual=0.95, **old) == 1.0
    assert retention(policy, manual=0.5, **old) < 1e-6


def test_eviction_value_prefers_important_useful_recent():
    assert entry_value(0.9, 0.0, 0.0) > entry_value(0.1, 0.0, 1.0)
    assert entry_value(0.5, 1.0, 0.5) > entry_value(0.5, -1.0, 0.5)
    assert entry_value(0.5, 0.0, 1.0) > entry_value(0.5, 0.0, 0.0)


@pytest.mark.parametrize("kwargs", [dict(half_life=0), dict(threshold=1.0), dict(min_half_life=5, max_half_life=1),
                                    dict(importance_gain=-1)])
def test_policy_validation(kwargs):
    with pytest.raises(InvalidInput):
        ForgettingPolicy(**kwargs)
    with pytest.raises(InvalidInput):
        KindPolicy(ttl=-1)
