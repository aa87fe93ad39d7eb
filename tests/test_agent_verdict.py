"""The verdict of a recall: the calibrated logistic model, its features, its storage, and the grounding
statistic it replaced (kept for gates stored without a model). Hashing encoder, injected clock."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from hopmem.agent import DEFAULT_GATES, DEFAULT_MODELS, AgentMemory, RecallConfig, VerdictModel
from hopmem.agent.calibration import DEFAULT_MIN_COVERAGE
from hopmem.agent.verdict import (
    CALIBRATED_FEATURES,
    CROSS_FIT_FOLDS,
    CROWD_COSINE,
    MARGIN_NEIGHBOURS,
    VERDICT_FEATURES,
    cross_fitted_log_odds,
    fit_model,
    margin,
)
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import auc, calibrate

ENC = HashingEncoder(384)

FACTS = [
    "Ticket PROJ-4417 tracks the duplicate webhook deliveries.",
    "Production deploys require a database snapshot first.",
    "The billing service runs on Postgres 16.",
    "Ada wants answers written in British English.",
    "The team standup is every morning at 9:30.",
    "The staging cluster is rebuilt every Friday night.",
    "Our on-call rotation changes every Monday at noon.",
]
RELATED = ["Which database does the billing service use?", "What do deploys require?",
           "When is the team standup?", "How should answers be written?", "When is staging rebuilt?",
           "When does the on-call rotation change?"]
UNRELATED = ["What is the capital of Peru?", "How do volcanoes form?", "Best pizza dough recipe",
             "Who won the 1998 world cup?", "How tall is Mount Everest?", "Which bird migrates the farthest?"]


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path, name="mem.db", **kwargs):
    clock = Clock()
    mem = AgentMemory.open(tmp_path / name, encoder=ENC, namespace="team", clock=clock, **kwargs)
    for i, fact in enumerate(FACTS):
        clock.t += 60 * (i + 1)
        mem.remember(fact)
    return mem, clock


# -- the model ------------------------------------------------------------------------------------------


def test_fit_model_learns_the_direction_and_is_deterministic():
    rng = np.random.default_rng(3)
    rel = [{"evidence": 0.8 + 0.1 * rng.standard_normal(), "novelty": 0.1 * rng.random()} for _ in range(30)]
    irr = [{"evidence": 0.4 + 0.1 * rng.standard_normal(), "novelty": 0.5 + 0.3 * rng.random()} for _ in range(30)]
    model = fit_model(("evidence", "novelty"), rel, irr)
    assert model == fit_model(("evidence", "novelty"), rel, irr)
    assert model.weights[0] > 0 > model.weights[1]
    scores_rel = [model.log_odds(v) for v in rel]
    scores_irr = [model.log_odds(v) for v in irr]
    assert np.mean(scores_rel) > 0 > np.mean(scores_irr)


def test_fit_model_gives_a_constant_feature_no_weight():
    rel = [{"evidence": 0.9, "margin": 0.2}, {"evidence": 0.8, "margin": 0.2}]
    irr = [{"evidence": 0.3, "margin": 0.2}, {"evidence": 0.2, "margin": 0.2}]
    model = fit_model(("evidence", "margin"), rel, irr)
    assert model.weights[1] == 0.0 and model.weights[0] > 0
    assert all(math.isfinite(w) for w in (*model.weights, model.intercept))


def test_fit_model_needs_both_kinds_of_query():
    with pytest.raises(InvalidInput):
        fit_model(("evidence",), [{"evidence": 1.0}], [])


def _random_features(rng, n, names=("evidence", "novelty", "margin", "crowd")):
    return [{name: float(rng.standard_normal()) for name in names} for _ in range(n)]


def test_cross_fitted_log_odds_score_each_query_with_a_model_fitted_without_its_fold():
    rng = np.random.default_rng(7)
    names = ("evidence", "novelty")
    rel, irr = _random_features(rng, 13, names), _random_features(rng, 8, names)
    got_rel, got_irr = cross_fitted_log_odds(names, rel, irr, seed=4)
    # the documented folds: each group shuffled with default_rng(seed), relevant first, dealt round-robin
    k = min(CROSS_FIT_FOLDS, len(rel), len(irr))
    folds_rng = np.random.default_rng(4)
    fold_of = []
    for group in (rel, irr):
        order = folds_rng.permutation(len(group))
        fold_of.append({int(i): pos % k for pos, i in enumerate(order)})
    for j in range(k):
        model = fit_model(names, [v for i, v in enumerate(rel) if fold_of[0][i] != j],
                          [v for i, v in enumerate(irr) if fold_of[1][i] != j])
        for group, got, folds in ((rel, got_rel, fold_of[0]), (irr, got_irr, fold_of[1])):
            for i, v in enumerate(group):
                if folds[i] == j:
                    assert got[i] == pytest.approx(model.log_odds(v), abs=1e-12)
    again = cross_fitted_log_odds(names, rel, irr, seed=4)
    assert np.array_equal(again[0], got_rel) and np.array_equal(again[1], got_irr)


def test_cross_fitted_log_odds_with_a_group_of_one_are_in_sample():
    rng = np.random.default_rng(8)
    rel, irr = _random_features(rng, 6, ("evidence",)), _random_features(rng, 1, ("evidence",))
    model = fit_model(("evidence",), rel, irr)
    got_rel, got_irr = cross_fitted_log_odds(("evidence",), rel, irr)
    assert got_rel == pytest.approx([model.log_odds(v) for v in rel])
    assert got_irr == pytest.approx([model.log_odds(v) for v in irr])
    with pytest.raises(InvalidInput):
        cross_fitted_log_odds(("evidence",), rel, [])


def test_cross_fitting_removes_the_optimism_of_in_sample_log_odds():
    """Labels independent of the features: a model fitted on the queries it scores still "separates"
    them; scored out of fold it does not. A gate fitted in sample would let more than its budget of new
    unrelated queries through."""
    in_sample, out_of_fold, admitted_in, admitted_out = [], [], [], []
    names = ("evidence", "novelty", "margin", "crowd")
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        rel, irr = _random_features(rng, 40, names), _random_features(rng, 16, names)
        fresh = _random_features(rng, 400, names)  # new unrelated queries (as unrelated as the old)
        model = fit_model(names, rel, irr)
        in_rel, in_irr = [model.log_odds(v) for v in rel], [model.log_odds(v) for v in irr]
        oof_rel, oof_irr = cross_fitted_log_odds(names, rel, irr, seed=seed)
        in_sample.append(auc(in_rel, in_irr))
        out_of_fold.append(auc(oof_rel, oof_irr))
        fresh_scores = np.array([model.log_odds(v) for v in fresh])
        admitted_in.append(np.mean(fresh_scores >= calibrate(in_rel, in_irr, error_budget=0.25, holdout=0).tau))
        admitted_out.append(np.mean(fresh_scores >= calibrate(oof_rel, oof_irr, error_budget=0.25, holdout=0).tau))
    # measured: AUC 0.65 in sample, 0.46 out of fold; new unrelated admitted 46% in sample, 24% out of fold
    assert np.mean(in_sample) > 0.6 and abs(np.mean(out_of_fold) - 0.5) < 0.08
    assert np.mean(admitted_in) > 0.35 and np.mean(admitted_out) <= 0.3


def test_verdict_model_validates_and_round_trips():
    model = VerdictModel(("evidence", "novelty"), (2.0, -1.5), -0.5)
    assert model.log_odds({"evidence": 1.0, "novelty": 0.2}) == pytest.approx(2.0 - 0.3 - 0.5)
    assert VerdictModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model
    with pytest.raises(InvalidInput):
        VerdictModel(("evidence",), (1.0, 2.0), 0.0)
    with pytest.raises(InvalidInput):
        VerdictModel(("evidence",), (float("nan"),), 0.0)


def test_default_models_read_each_modes_features():
    for mode, features in VERDICT_FEATURES.items():
        assert DEFAULT_MODELS[mode].features == features
        if mode != "hybrid":
            assert DEFAULT_GATES[mode].tau > 0  # strict: a positive log-odds is needed until calibrated
    # hybrid's default is fitted to answer (8% false abstention on the development pools), and every one
    # of its features counts for "something relevant is remembered"
    assert all(w > 0 for w in DEFAULT_MODELS["hybrid"].weights)


@pytest.mark.parametrize("option", ["verdict", "margin_feature", "crowd_feature", "grounding_semantic_weight",
                                    "novelty_weight", "associative_statistic"])
def test_the_verdict_has_no_alternatives_to_configure(option):
    # the verdict is always the model over VERDICT_FEATURES
    with pytest.raises(InvalidInput, match="no such setting"):
        RecallConfig(**{option: None})


# -- features and statistic -----------------------------------------------------------------------------


def test_selection_carries_the_verdict_features_and_their_log_odds(tmp_path):
    mem, _ = make(tmp_path)
    for mode in ("hybrid", "associative", "keyword"):
        sel = mem.recall("Which database does the billing service use?", mode=mode, record=False)
        # the default model's features and those calibrate() fits on
        assert set(sel.features) == set(CALIBRATED_FEATURES[mode]) | set(VERDICT_FEATURES[mode])
        assert not sel.calibrated and sel.tau == DEFAULT_GATES[mode].tau
        assert sel.statistic == pytest.approx(DEFAULT_MODELS[mode].log_odds(sel.features), abs=1e-5)
        assert "log-odds from evidence" in sel.reason
        assert sel.features["evidence"] == pytest.approx(sel.evidence, abs=1e-5)


def test_margin_is_the_nearest_cosine_above_the_mean_of_the_nearest_ten(tmp_path):
    mem, _ = make(tmp_path)
    query = "Which database does the billing service use?"
    sel = mem.recall(query, mode="associative", record=False)
    ranked = mem.rank(query, mode="associative", limit=100)
    cosines = sorted((h.explanation.semantic for h in ranked), reverse=True)[:MARGIN_NEIGHBOURS]
    assert sel.features["margin"] == pytest.approx(cosines[0] - np.mean(cosines), abs=1e-3)


# -- calibration and storage ----------------------------------------------------------------------------


def test_calibrate_fits_and_stores_a_model_per_mode(tmp_path):
    mem, _ = make(tmp_path)
    gates = mem.calibrate(RELATED, UNRELATED)
    models = mem.verdict_models
    assert set(models) == set(gates) == {"hybrid", "associative", "keyword"}
    for mode, model in models.items():
        assert model.features == CALIBRATED_FEATURES[mode]  # calibrate fits every feature it can weigh
    assert models["hybrid"] != DEFAULT_MODELS["hybrid"] and models["associative"] != DEFAULT_MODELS["associative"]
    # no unrelated query shares a word with the memory: keyword mode has no candidates for them, nothing to
    # fit a model on, and keeps the default one (its gate still separates them from the related queries)
    assert mem.gate_statistics(UNRELATED, mode="keyword") == [-1000.0] * len(UNRELATED)
    assert models["keyword"] == DEFAULT_MODELS["keyword"]
    sel = mem.recall("Which database does billing run on?", record=False)
    assert sel.calibrated and not sel.abstained and sel.hits[0].text == FACTS[2]
    assert sel.statistic == pytest.approx(models["hybrid"].log_odds(sel.features), abs=1e-5)
    assert mem.recall("How do volcanoes form?", record=False).abstained
    mem.close()
    # stored in the file with the gates: a new controller uses the same model and gate
    again = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=Clock())
    assert again.verdict_models == models and again.gates == gates
    other = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="other", clock=Clock())
    assert other.verdict_models == {} and other.gates == {}


def test_calibration_without_a_floor_never_lets_more_than_the_budget_of_unrelated_queries_pass(tmp_path):
    mem, _ = make(tmp_path)
    gates = mem.calibrate(RELATED, UNRELATED, error_budget=0.2, min_coverage=0.0, modes=["hybrid"])
    stats = mem.gate_statistics(UNRELATED)
    decided = [s for s in stats if s is not None]
    assert sum(s >= gates["hybrid"].tau for s in decided) <= math.floor(0.2 * len(decided))
    assert gates["hybrid"].error_rate <= 0.2


def test_the_coverage_floor_wins_over_the_budget_where_queries_do_not_separate(tmp_path):
    mem, _ = make(tmp_path)
    # related and unrelated queries of the same two kinds: the budget alone refuses related ones too
    related, unrelated = RELATED[:3] + UNRELATED[:3], RELATED[3:] + UNRELATED[3:]
    budget_only = mem.calibrate(related, unrelated, error_budget=0.2, min_coverage=0.0, modes=["hybrid"])["hybrid"]
    assert budget_only.error_rate <= 0.2 and budget_only.coverage < 0.95
    floored = mem.calibrate(related, unrelated, error_budget=0.2, modes=["hybrid"])["hybrid"]  # the default floor
    assert floored.coverage >= DEFAULT_MIN_COVERAGE and floored.tau < budget_only.tau
    assert floored.error_rate > 0.2  # the budget gave way, and the gate says so


def test_an_unknown_calibrate_keyword_is_refused_and_nothing_is_stored(tmp_path):
    mem, _ = make(tmp_path)
    with pytest.raises(TypeError, match="floor_auc"):
        mem.calibrate(RELATED, UNRELATED, floor_auc=0.9)
    assert mem.gates == {} and mem.verdict_models == {}


@pytest.mark.parametrize("floor", [-0.1, 1.5, float("nan"), "0.9"])
def test_a_bad_coverage_floor_is_refused_and_nothing_is_stored(tmp_path, floor):
    mem, _ = make(tmp_path)
    with pytest.raises(InvalidInput, match="min_coverage"):
        mem.calibrate(RELATED, UNRELATED, min_coverage=floor)
    assert mem.gates == {} and mem.verdict_models == {}


def test_calibrate_with_holdout_measures_the_held_out_part(tmp_path):
    mem, _ = make(tmp_path)
    gate = mem.calibrate(RELATED, UNRELATED, holdout=0.34, seed=1, modes=["hybrid"])["hybrid"]
    assert gate.n_relevant == len(RELATED) and gate.n_irrelevant == len(UNRELATED)
    assert gate.holdout_coverage is not None and gate.holdout_error_rate is not None
    # the model saw only the fitting part (4 + 4 queries): fitted on all 6 + 6 it differs
    held_out_model = mem.verdict_models["hybrid"]
    mem.calibrate(RELATED, UNRELATED, modes=["hybrid"])
    assert mem.verdict_models["hybrid"] != held_out_model


def test_holdout_fraction_is_the_deprecated_name_of_holdout(tmp_path):
    mem, _ = make(tmp_path)
    gate = mem.calibrate(RELATED, UNRELATED, holdout=0.34, seed=1, modes=["hybrid"])["hybrid"]
    with pytest.warns(DeprecationWarning, match="holdout_fraction"):
        assert mem.calibrate(RELATED, UNRELATED, holdout_fraction=0.34, seed=1, modes=["hybrid"])["hybrid"] == gate
    with pytest.raises(TypeError, match="both"):
        mem.calibrate(RELATED, UNRELATED, holdout=0.34, holdout_fraction=0.34)


def test_a_gate_that_barely_separates_says_so_in_every_reason(tmp_path):
    mem, _ = make(tmp_path)
    # related and unrelated queries of the same two kinds: nothing to separate them by
    gate = mem.calibrate(RELATED[:3] + UNRELATED[:3], RELATED[3:] + UNRELATED[3:], modes=["hybrid"])["hybrid"]
    assert gate.auc < 0.65
    for query in ("How do volcanoes form?", "When is the team standup?"):
        assert "weak gate: calibration separated related from unrelated queries with AUC" in \
            mem.recall(query, record=False).reason
    mem.calibrate(RELATED, UNRELATED, modes=["hybrid"])  # well separated: no note
    assert "weak gate" not in mem.recall("When is the team standup?", record=False).reason


def test_gate_statistics_marks_queries_without_candidates(tmp_path):
    mem = AgentMemory.open(tmp_path / "empty.db", encoder=ENC, namespace="team", clock=Clock())
    assert mem.gate_statistics(["anything at all?"]) == [-1000.0]
    assert mem.recall("anything at all?").features == {}


def test_a_gate_set_without_a_model_is_on_the_grounding_statistic(tmp_path):
    mem, _ = make(tmp_path)
    mem.set_gates({"hybrid": calibrate([0.3, 0.4], [0.0, 0.1])})
    sel = mem.recall("Which database does the billing service use?", record=False)
    assert sel.calibrated and "grounding" in sel.reason and "log-odds" not in sel.reason
    assert mem.verdict_models == {}
    model = DEFAULT_MODELS["hybrid"]
    mem.set_gates({"hybrid": calibrate([0.3, 0.4], [0.0, 0.1])}, models={"hybrid": model})
    sel = mem.recall("Which database does the billing service use?", record=False)
    assert sel.statistic == pytest.approx(model.log_odds(sel.features), abs=1e-5)
    mem.set_gates({"hybrid": None})  # back to the defaults: the default model, uncalibrated
    assert mem.verdict_models == {} and not mem.recall("billing database?", record=False).calibrated
    with pytest.raises(InvalidInput):
        mem.set_gates({"keyword": calibrate([0.3, 0.4], [0.0, 0.1])}, models={"keyword": model})  # wrong features
    with pytest.raises(InvalidInput):
        mem.set_gates({"hybrid": calibrate([0.3, 0.4], [0.0, 0.1])}, models={"hybrid": "a model"})


def test_a_file_calibrated_before_models_existed_keeps_its_statistic(tmp_path):
    mem, _ = make(tmp_path)
    mem.calibrate(RELATED, UNRELATED, modes=["hybrid"])
    mem.close()
    conn = sqlite3.connect(tmp_path / "mem.db")  # what an older hopmem wrote: the gate, no model
    conn.execute("DELETE FROM meta WHERE key LIKE 'verdict:%'")
    conn.commit()
    conn.close()
    old = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=Clock())
    sel = old.recall("Which database does the billing service use?", record=False)
    assert sel.calibrated and "grounding" in sel.reason


def test_reembed_drops_the_models_with_the_gates(tmp_path):
    mem, _ = make(tmp_path)
    mem.calibrate(RELATED, UNRELATED)
    mem.reembed(HashingEncoder(256))
    assert mem.gates == {} and mem.verdict_models == {}
    conn = sqlite3.connect(tmp_path / "mem.db")
    assert conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'verdict:%'").fetchone()[0] == 0
    conn.close()


def test_exact_tokens_still_admit_whatever_the_model_says(tmp_path):
    mem, _ = make(tmp_path)
    mem.set_gates({"hybrid": calibrate([1e3, 2e3], [9e2, 9.5e2])}, models={"hybrid": DEFAULT_MODELS["hybrid"]})
    sel = mem.recall("PROJ-4417", record=False)
    assert not sel.abstained and sel.hits[0].text == FACTS[0]
    assert sel.hits[0].explanation.admitted_by == "exact token" and sel.override == "exact token"


# -- margin and crowd ---------------------------------------------------------------------------------


def test_crowd_counts_the_next_nearest_within_crowd_cosine_of_the_nearest(tmp_path):
    mem, _ = make(tmp_path)
    for i in range(12):  # enough entries for ten neighbours
        mem.remember(f"Note {i}: the billing service database {['backup', 'index', 'replica'][i % 3]} "
                     f"number {i} was checked.")
    query = "Which database does the billing service use?"
    sel = mem.recall(query, mode="associative", record=False)
    ranked = mem.rank(query, mode="associative", limit=100)
    cosines = sorted((h.explanation.semantic for h in ranked), reverse=True)
    assert len(cosines) >= MARGIN_NEIGHBOURS
    assert sel.features["margin"] == pytest.approx(cosines[0] - np.mean(cosines[:MARGIN_NEIGHBOURS]), abs=1e-3)
    crowd = sum(c >= cosines[0] - CROWD_COSINE for c in cosines[1:MARGIN_NEIGHBOURS])
    assert sel.features["crowd"] == crowd
    assert margin([0.8, 0.79, 0.78, 0.3, 0.3]) == pytest.approx(0.8 - 2.97 / 5)
    assert margin([0.8]) == 0.0 and margin([]) == 0.0


def test_a_stored_model_reading_fewer_features_keeps_reading_them(tmp_path):
    # models fitted before the crowd feature existed read evidence, novelty and margin only
    mem, _ = make(tmp_path)
    model = VerdictModel(("evidence", "novelty", "margin"), (1.532, -3.111, 10.531), -1.036)
    mem.set_gates({"hybrid": calibrate([0.3, 0.4], [0.0, 0.1])}, models={"hybrid": model})
    mem.close()
    again = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=Clock())
    sel = again.recall("Which database does the billing service use?", record=False)
    assert again.verdict_models["hybrid"] == model and sel.calibrated
    computed = set(CALIBRATED_FEATURES["hybrid"]) | set(VERDICT_FEATURES["hybrid"])
    assert set(sel.features) == computed | set(model.features)
    assert sel.statistic == pytest.approx(model.log_odds(sel.features), abs=1e-5)
    with pytest.raises(InvalidInput):  # keyword mode cannot compute a margin
        again.set_gates({"keyword": calibrate([0.3, 0.4], [0.0, 0.1])}, models={"keyword": model})


def test_a_stored_model_reading_features_no_longer_computed_falls_back_to_the_defaults(tmp_path, caplog):
    mem, _ = make(tmp_path)
    mem.calibrate(RELATED, UNRELATED, modes=["hybrid"])
    mem.close()
    conn = sqlite3.connect(tmp_path / "mem.db")  # a model fitted on a margin variant recall no longer computes
    conn.execute("UPDATE meta SET value = ? WHERE key = 'verdict:team:hybrid'",
                 (json.dumps({"features": ["evidence", "margin_after3"], "weights": [1.0, 2.0], "intercept": 0.0}),))
    conn.commit()
    conn.close()
    with caplog.at_level("WARNING", logger="hopmem.agent"):
        old = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=Clock())
    assert "no longer computed" in caplog.text
    assert old.gates == {} and old.verdict_models == {}
    sel = old.recall("Which database does the billing service use?", record=False)
    assert not sel.calibrated and sel.tau == DEFAULT_GATES["hybrid"].tau
