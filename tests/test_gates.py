"""Tests of hopmem.gates: calibration, AUC, ROC, bands, staleness."""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopmem.errors import InvalidInput
from hopmem.text import gates
from hopmem.text.gates import Bands, Gate, auc, calibrate, roc_curve


def brute_force_auc(relevant, irrelevant) -> float:
    wins = sum((r > i) + 0.5 * (r == i) for r in relevant for i in irrelevant)
    return wins / (len(relevant) * len(irrelevant))


def overlapping(n_rel: int = 200, n_irr: int = 300, shift: float = 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(shift, 1.0, n_rel), rng.normal(0.0, 1.0, n_irr)


scores = st.lists(st.integers(-5, 5).map(float), min_size=2, max_size=25)


class TestSeparated:
    def test_tau_in_the_gap(self):
        gate = calibrate([0.8, 0.9, 0.75, 0.95], [0.1, 0.3, 0.35])
        assert gate.separated
        assert 0.35 < gate.tau < 0.75
        assert gate.tau == pytest.approx(0.55)
        assert (gate.coverage, gate.error_rate, gate.auc) == (1.0, 0.0, 1.0)
        assert (gate.holdout_coverage, gate.holdout_error_rate) == (1.0, 0.0)
        assert gate.admits(0.8) and not gate.admits(0.35)

    def test_adjacent_floats_still_separate(self):
        low = 0.5
        high = float(np.nextafter(low, 1.0))
        gate = calibrate([high, 1.0], [0.0, low])
        assert low < gate.tau <= high
        assert gate.admits(high) and not gate.admits(low)


class TestAUC:
    def test_known_values(self):
        assert auc([2, 3], [0, 1]) == 1.0
        assert auc([0, 1], [2, 3]) == 0.0
        assert auc([1, 2, 3], [1, 2, 3]) == 0.5
        assert auc([1, 1], [1, 1]) == 0.5
        assert auc([1, 3], [2, 2]) == 0.5
        assert calibrate([1, 2, 3], [1, 2, 3]).auc == 0.5

    @given(scores, scores)
    def test_equals_brute_force_pairwise_count(self, relevant, irrelevant):
        expected = brute_force_auc(relevant, irrelevant)
        assert auc(relevant, irrelevant) == pytest.approx(expected, abs=1e-12)
        assert calibrate(relevant, irrelevant).auc == pytest.approx(expected, abs=1e-12)


class TestRoc:
    def test_shape_and_ends(self):
        fpr, tpr, thresholds = roc_curve([0.9, 0.8, 0.4], [0.5, 0.1])
        assert thresholds[0] == np.inf
        assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
        assert np.all(np.diff(thresholds) < 0)
        np.testing.assert_array_equal(tpr, [0, 1 / 3, 2 / 3, 2 / 3, 1, 1])
        np.testing.assert_array_equal(fpr, [0, 0, 0, 0.5, 0.5, 1])

    @given(scores, scores)
    def test_monotone_and_area_is_auc(self, relevant, irrelevant):
        fpr, tpr, _ = roc_curve(relevant, irrelevant)
        assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
        area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
        assert area == pytest.approx(brute_force_auc(relevant, irrelevant), abs=1e-12)


def fitting_parts(relevant, irrelevant, holdout=0.3, seed=0):
    """The split calibrate() makes, rebuilt from the documented rule."""
    rng = np.random.default_rng(seed)
    rel_fit, rel_held = gates._split(np.asarray(relevant, float), holdout, rng)
    irr_fit, irr_held = gates._split(np.asarray(irrelevant, float), holdout, rng)
    return rel_fit, rel_held, irr_fit, irr_held


def tied(n_rel, n_irr, shift, seed):
    """Overlapping scores rounded to one decimal: ties on purpose."""
    relevant, irrelevant = overlapping(n_rel, n_irr, shift=shift, seed=seed)
    return np.round(relevant, 1), np.round(irrelevant, 1)


class TestOverlapping:
    def test_budget_respected_and_figures_consistent(self):
        relevant, irrelevant = overlapping()
        gate = calibrate(relevant, irrelevant, error_budget=0.05)
        assert not gate.separated
        rel_fit, rel_held, irr_fit, irr_held = fitting_parts(relevant, irrelevant)
        assert (rel_fit.size, rel_held.size, irr_fit.size, irr_held.size) == (140, 60, 210, 90)
        assert gate.error_rate <= 0.05
        assert gate.coverage == np.mean(rel_fit >= gate.tau)
        assert gate.error_rate == np.mean(irr_fit >= gate.tau)
        assert gate.holdout_coverage == np.mean(rel_held >= gate.tau)
        assert gate.holdout_error_rate == np.mean(irr_held >= gate.tau)
        assert (gate.n_relevant, gate.n_irrelevant) == (200, 300)
        assert 0.5 < gate.auc < 1.0

    @given(
        st.integers(2, 40),
        st.integers(2, 40),
        st.floats(0.0, 0.99),
        st.floats(0.0, 0.9),
        st.integers(0, 1000),
    )
    def test_budget_respected_with_maximal_coverage(self, n_rel, n_irr, budget, holdout, seed):
        relevant, irrelevant = tied(n_rel, n_irr, shift=0.5, seed=seed)
        gate = calibrate(relevant, irrelevant, error_budget=budget, holdout=holdout, seed=seed)
        if gate.separated:
            assert irrelevant.max() < gate.tau <= relevant.min()
            return
        rel_fit, _, irr_fit, _ = fitting_parts(relevant, irrelevant, holdout, seed)
        assert np.mean(irr_fit >= gate.tau) <= budget + 1e-12
        assert gate.error_rate <= budget + 1e-12
        # Maximal coverage: every lower candidate threshold breaks the budget.
        for candidate in rel_fit[rel_fit < gate.tau]:
            assert np.mean(irr_fit >= candidate) > budget
        assert gate.bands.vivid >= gate.bands.clear == gate.tau

    def test_zero_budget_admits_no_fitting_irrelevant(self):
        relevant, irrelevant = overlapping(seed=3)
        gate = calibrate(relevant, irrelevant)
        assert gate.error_rate == 0.0
        assert gate.coverage > 0.0

    def test_larger_budget_lowers_tau(self):
        relevant, irrelevant = overlapping(seed=4)
        taus = [calibrate(relevant, irrelevant, error_budget=b).tau for b in (0.0, 0.05, 0.2, 0.5)]
        assert taus == sorted(taus, reverse=True)

    def test_deterministic_given_seed(self):
        relevant, irrelevant = overlapping(seed=5)
        once = calibrate(relevant, irrelevant, error_budget=0.1, seed=9)
        assert once == calibrate(relevant, irrelevant, error_budget=0.1, seed=9)

    def test_no_holdout(self):
        relevant, irrelevant = overlapping(seed=6)
        gate = calibrate(relevant, irrelevant, error_budget=0.1, holdout=0.0)
        assert gate.holdout_coverage is None and gate.holdout_error_rate is None
        assert gate.error_rate == np.mean(irrelevant >= gate.tau) <= 0.1

    def test_smallest_groups(self):
        gate = calibrate([0.4, 0.9], [0.5, 0.1])
        assert not gate.separated
        assert gate.holdout_coverage is not None

    def test_no_relevant_score_above_the_barrier(self):
        gate = calibrate([0.1, 0.2, 0.3], [0.9, 0.8, 0.7], holdout=0.0)
        assert gate.coverage == 0.0 and gate.error_rate == 0.0
        assert gate.tau > 0.9
        assert gate.bands == Bands(vivid=gate.tau, clear=gate.tau)


class TestMinCoverage:
    @given(st.integers(2, 40), st.integers(2, 40), st.floats(0.0, 0.99), st.floats(0.0, 1.0), st.floats(0.0, 0.9),
           st.integers(0, 1000))
    def test_floor_held_and_tau_never_above_the_budgets(self, n_rel, n_irr, budget, floor, holdout, seed):
        relevant, irrelevant = tied(n_rel, n_irr, shift=0.3, seed=seed)
        gate = calibrate(relevant, irrelevant, error_budget=budget, min_coverage=floor, holdout=holdout, seed=seed)
        plain = calibrate(relevant, irrelevant, error_budget=budget, holdout=holdout, seed=seed)
        assert gate.tau <= plain.tau  # the floor only ever lowers tau
        rel_fit, _, irr_fit, _ = fitting_parts(relevant, irrelevant, holdout, seed)
        # 1e-9: the floor's count forgives that much rounding (gates._coverage_cap), so a floor
        # of 2e-10 needs no relevant score admitted.
        assert gate.coverage == np.mean(rel_fit >= gate.tau) >= floor - 1e-9
        if gate.tau < plain.tau:
            # lowered no further than the floor needs: one relevant score fewer would break it
            admitted = np.sort(rel_fit[rel_fit >= gate.tau])
            assert (admitted.size - np.sum(admitted == admitted[0])) / rel_fit.size < floor
        assert gate.bands.vivid >= gate.bands.clear == gate.tau

    def test_zero_floor_changes_nothing(self):
        relevant, irrelevant = overlapping(seed=7)
        floorless = calibrate(relevant, irrelevant, error_budget=0.1, min_coverage=0.0)
        assert floorless == calibrate(relevant, irrelevant, error_budget=0.1)

    def test_floor_wins_over_the_budget_on_scores_that_do_not_separate(self):
        rng = np.random.default_rng(8)
        relevant, irrelevant = rng.normal(0.0, 1.0, 200), rng.normal(0.0, 1.0, 100)  # AUC about 0.5
        plain = calibrate(relevant, irrelevant, error_budget=0.25, holdout=0.0)
        assert plain.coverage < 0.4 and plain.error_rate <= 0.25
        gate = calibrate(relevant, irrelevant, error_budget=0.25, min_coverage=0.9, holdout=0.0)
        assert gate.coverage == 0.9
        assert gate.error_rate > 0.25  # the budget gave way
        assert np.sort(relevant)[19] < gate.tau <= np.sort(relevant)[20]

    def test_separated_scores_ignore_the_floor(self):
        gate = calibrate([0.8, 0.9, 0.7], [0.1, 0.3], min_coverage=1.0)
        assert gate.separated and gate.tau == 0.5


class TestBands:
    def test_labels(self):
        bands = Bands(vivid=0.8, clear=0.6)
        assert [bands.band(s) for s in (0.9, 0.8, 0.7, 0.6, 0.5)] == ["vivid", "vivid", "clear", "clear", "vague"]

    def test_from_calibration(self):
        relevant, irrelevant = [0.6, 0.7, 0.8, 0.9, 1.0], [0.1, 0.2, 0.3]
        gate = calibrate(relevant, irrelevant)
        assert gate.bands.clear == gate.tau
        assert gate.bands.vivid == 0.8  # median of the admitted relevant scores
        assert gate.band(0.95) == "vivid"
        assert gate.band(0.65) == "clear"
        assert gate.band(0.2) == "vague"

    def test_vivid_below_clear_is_refused(self):
        with pytest.raises(InvalidInput, match="vivid: expected a number >= clear"):
            Bands(vivid=0.5, clear=0.6)
        with pytest.raises(InvalidInput, match="vivid"):
            Bands(vivid=float("nan"), clear=0.6)


class TestStaleness:
    def gate(self, **loads):
        return calibrate([0.9, 0.8], [0.1, 0.2], **loads)

    def test_no_recorded_load_is_never_stale(self):
        assert self.gate().is_stale({"writes": 10**9, "num_locations": 10**9}) is False

    def test_writes_and_locations(self):
        gate = self.gate(writes=100, locations=40)
        assert not gate.is_stale({"writes": 200, "num_locations": 80})
        assert gate.is_stale({"writes": 201, "num_locations": 80})
        assert gate.is_stale(types.SimpleNamespace(writes=100, num_locations=81))
        assert gate.is_stale({"total_writes": 350, "num_locations": 40})
        assert not gate.is_stale({"writes": 350, "num_locations": 40}, growth=4.0)

    def test_only_recorded_loads_are_needed(self):
        gate = self.gate(locations=10)
        assert gate.is_stale(types.SimpleNamespace(num_locations=25))

    def test_missing_load_and_bad_growth(self):
        gate = self.gate(writes=10)
        with pytest.raises(InvalidInput, match="writes"):
            gate.is_stale({"num_locations": 5})
        with pytest.raises(InvalidInput, match="growth"):
            gate.is_stale({"writes": 5}, growth=0.5)


class TestSerialisation:
    def test_round_trip_through_json(self):
        relevant, irrelevant = overlapping(seed=7)
        for gate in (
            calibrate(relevant, irrelevant, error_budget=0.1, writes=500, locations=31),
            calibrate([0.9, 0.8], [0.1, 0.2]),
            calibrate(relevant, irrelevant, holdout=0.0),
        ):
            restored = Gate.from_dict(json.loads(json.dumps(gate.to_dict())))
            assert restored == gate

    def test_bad_dicts(self):
        d = calibrate([0.9, 0.8], [0.1, 0.2]).to_dict()
        for key, value, match in (
            ("format", "x", "format"),
            ("version", 2, "version"),
            ("tau", "high", "tau"),
            ("coverage", 1.5, "coverage"),
            ("bands", {"vivid": 0.9}, "clear"),
            ("n_relevant", -1, "n_relevant"),
        ):
            with pytest.raises(InvalidInput, match=match):
                Gate.from_dict({**d, key: value})
        missing = dict(d)
        del missing["auc"]
        with pytest.raises(InvalidInput, match="auc"):
            Gate.from_dict(missing)

    def test_frozen(self):
        gate = calibrate([0.9, 0.8], [0.1, 0.2])
        with pytest.raises(dataclasses.FrozenInstanceError):
            gate.tau = 0.0


class TestBadInput:
    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"related": [0.5]}, "related: expected at least 2"),
            ({"unrelated": []}, "unrelated: expected at least 2"),
            ({"related": [[0.5, 0.6]]}, "related: expected a 1-D array"),
            ({"related": [0.5, float("nan")]}, "related: expected finite"),
            ({"unrelated": [0.1, float("inf")]}, "unrelated: expected finite"),
            ({"related": ["a", "b"]}, "related: expected real numbers"),
            ({"error_budget": 1.0}, "error_budget"),
            ({"error_budget": -0.1}, "error_budget"),
            ({"error_budget": float("nan")}, "error_budget"),
            ({"error_budget": "0.1"}, "error_budget"),
            ({"holdout": 1.0}, "holdout"),
            ({"min_coverage": 1.5}, "min_coverage"),
            ({"min_coverage": -0.1}, "min_coverage"),
            ({"min_coverage": float("nan")}, "min_coverage"),
            ({"seed": -1}, "seed"),
            ({"writes": -5}, "writes"),
            ({"locations": 2.5}, "locations"),
        ],
    )
    def test_refused(self, kwargs, match):
        arguments = {"related": [0.9, 0.4, 0.7], "unrelated": [0.5, 0.1, 0.2], **kwargs}
        with pytest.raises(InvalidInput, match=match) as info:
            calibrate(**arguments)
        assert isinstance(info.value, ValueError)

    def test_roc_and_auc_need_one_score_each(self):
        with pytest.raises(InvalidInput, match="relevant"):
            roc_curve([], [0.1])
        with pytest.raises(InvalidInput, match="irrelevant"):
            auc([0.1], [])

    def test_admits_needs_a_number(self):
        with pytest.raises(InvalidInput, match="score"):
            calibrate([0.9, 0.8], [0.1, 0.2]).admits("high")


class TestDeprecatedNames:
    """The previous signature's names still work for a release, with a warning."""

    def test_old_keyword_names(self):
        relevant, irrelevant = [0.9, 0.4, 0.7, 0.8], [0.5, 0.1, 0.2, 0.45]
        expected = calibrate(relevant, irrelevant, error_budget=0.25, holdout=0.0)
        with pytest.warns(DeprecationWarning, match="relevant_scores"):
            got = calibrate(relevant_scores=relevant, irrelevant_scores=irrelevant, error_budget=0.25,
                            holdout=0.0)
        assert got == expected
        with pytest.warns(DeprecationWarning, match="holdout_fraction"):
            assert calibrate(relevant, irrelevant, error_budget=0.25, holdout_fraction=0.0) == expected

    def test_error_budget_by_position(self):
        relevant, irrelevant = [0.9, 0.4, 0.7, 0.8], [0.5, 0.1, 0.2, 0.45]
        with pytest.warns(DeprecationWarning, match="by position"):
            got = calibrate(relevant, irrelevant, 0.25, holdout=0.0)
        assert got == calibrate(relevant, irrelevant, error_budget=0.25, holdout=0.0)

    def test_old_and_new_name_together_is_a_type_error(self):
        with pytest.raises(TypeError):
            calibrate([0.9, 0.8], [0.1, 0.2], holdout=0.1, holdout_fraction=0.1)
