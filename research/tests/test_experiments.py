"""The quality experiments (research/experiments): smallest configurations run and make sense.

Each test takes a few seconds at most; the numbers checked are the ones the
theory fixes (a plain memory at high beta and low load recalls exactly what
nearest neighbour recalls; k-means recovers well-separated clusters; ...).
"""

from __future__ import annotations

import math

import pytest

from research.experiments import _common as C
from research.experiments import abstention, basins, capacity, interference, quantization, reconstruction

# -- helpers ----------------------------------------------------------------------------

def test_last_above_interpolates_and_flags_the_ends():
    assert C.last_above([0, 10, 20], [1.0, 0.8, 0.4], 0.5) == pytest.approx(17.5)
    assert math.isinf(C.last_above([1, 2, 4], [1.0, 0.95, 0.91], 0.9))
    assert math.isnan(C.last_above([1, 2, 4], [0.5, 0.95, 0.91], 0.9))
    # log interpolation: halfway in log2 between 8 and 32 is 16
    assert C.last_above([8, 32], [1.0, 0.8], 0.9, log=True) == pytest.approx(16.0)


# -- capacity ---------------------------------------------------------------------------

def test_capacity_plain_high_beta_matches_the_nn_ceiling():
    rows = capacity.recall_curves(**capacity.TINY, progress=False)
    assert {r["mode"] for r in rows} == {"plain", "competitive"}
    for r in rows:
        assert 0.0 <= r["recall"] <= 1.0 and 0.0 <= r["nn_recall"] <= 1.0
        assert r["queries"] == min(r["n_stored"], capacity.TINY["queries"])
    plain = [r for r in rows if r["mode"] == "plain" and r["beta"] == 100.0]
    assert plain and all(r["recall"] == r["nn_recall"] == 1.0 for r in plain)
    # a plain memory keeps one location per pattern
    assert all(r["locations"] == r["n_stored"] for r in rows if r["mode"] == "plain")
    table = capacity.capacity_table(rows)
    assert len(table) == 2 * 2 * 2  # modes x betas x strategies
    top = [t for t in table if t["mode"] == "plain" and t["beta"] == 100.0]
    assert all(math.isinf(t["capacity"]) and t["capacity_str"] == ">128" for t in top)


def test_capacity_at_90_is_a_number_within_the_grid():
    value = capacity.capacity_at_90(d=64, mode="plain", beta=100.0, sizes=(8, 16, 32), queries=16)
    assert value == 32.0  # never fell below 90%: the grid's largest load


def test_capacity_theory_grid_breaks_plain_mode_and_reports_the_theorem():
    rows = capacity.recall_curves(**capacity.THEORY_TINY, progress=False)
    assert {r["k"] for r in rows} == {"all"}
    assert all(0.0 <= r["retrieval"] <= 1.0 for r in rows)
    table = capacity.capacity_table(rows)
    low = [t for t in table if t["beta"] == 10.0 and t["strategy"] == "iterative"]
    # d = 16, beta = 10: fixed points merge long before 2,048 patterns (it breaks)...
    assert low and all(t["retrieval_capacity"] < 2048 for t in low)
    # ... while beta = 1,000 retrieves every pattern read from itself.
    high = [t for t in table if t["beta"] == 1000.0 and t["strategy"] == "iterative"]
    assert high and all(math.isinf(t["retrieval_capacity"]) for t in high)
    theory = capacity.theory_table(table)
    assert [row["Theorem 3 (p=0.001)"] for row in theory] == ["vacuous", "205"]


def test_theorem_capacity_reproduces_the_papers_constants():
    # Ramsauer et al.'s examples: c = 3.1546 for beta = 1, K = 3, d = 20 and
    # c = 1.3718 for beta = 1, K = 1, d = 75 (p = 0.001); in cosine terms beta
    # is beta K^2 (d - 1), and N = sqrt(p) c^((d - 1) / 4).
    assert capacity.theorem_capacity(20, 9 * 19) == pytest.approx(
        math.sqrt(0.001) * 3.1546108 ** (19 / 4), rel=1e-6)
    assert capacity.theorem_capacity(75, 74) == pytest.approx(
        math.sqrt(0.001) * 1.3718778 ** (74 / 4), rel=1e-6)
    assert math.isnan(capacity.theorem_capacity(16, 10.0))  # the condition on c fails


def test_competitive_reconstruction_of_few_near_orthogonal_inputs_is_explained():
    m = reconstruction.measure()
    reads = {(r["mode"], r["beta"], r["strategy"]): r for r in m["reads"]}
    # The default competitive iterative read lands on one or two inputs...
    assert reads[("competitive", 5.0, "iterative")]["distinct"] <= 2
    # ... because the early locations absorbed most inputs (mixtures)...
    assert max(m["absorbed"]) >= 6 and m["pattern_cos_range"][1] > 0.5
    # ... while the query's best location is mostly its own, and plain mode reads each back.
    assert sum(m["best_location_is_own"]) >= 6
    assert reads[("plain", 5.0, "iterative")]["distinct"] == len(reconstruction.TEXTS)
    assert min(reads[("plain", 5.0, "iterative")]["fidelity"]) > 0.99
    assert "| competitive | 5 | iterative |" in reconstruction.report(m)


# -- basins -----------------------------------------------------------------------------

def test_basins_recall_falls_with_the_angle():
    rows = basins.basin_curves(**basins.TINY, progress=False)
    plain_it = sorted((r for r in rows if r["mode"] == "plain" and r["strategy"] == "iterative"),
                      key=lambda r: r["angle_deg"])
    assert plain_it[0]["angle_deg"] == 0 and plain_it[0]["recall"] == 1.0
    assert plain_it[0]["mean_cos_target"] == pytest.approx(1.0, abs=1e-4)
    assert plain_it[-1]["recall"] <= plain_it[0]["recall"]
    for r in rows:
        assert r["query_cos"] == pytest.approx(math.cos(math.radians(r["angle_deg"])))
        assert r["recall"] <= 1.0 and r["nn_recall"] <= 1.0
    for t in basins.radius_table(rows):
        # nan: below 90% already at angle 0; inf: never below in the grid
        assert not 0.0 > t["radius_deg"] and not 90.0 < t["radius_deg"] < math.inf
    assert next(t for t in basins.radius_table(rows)
                if t["mode"] == "plain" and t["strategy"] == "iterative")["radius_deg"] >= 30.0
    radius = basins.basin_radius(d=64, n_stored=32, mode="plain", beta=30.0,
                                 angles_deg=(0, 30, 60, 80), queries=32)
    assert 30.0 <= radius <= 80.0


# -- interference -----------------------------------------------------------------------

def test_interference_plain_mode_forgets_nothing_at_low_load():
    rows = interference.forgetting_curves(**interference.TINY, progress=False)
    plain = [r for r in rows if r["schedule"] == "plain"]
    assert [r["later_writes"] for r in plain] == list(interference.TINY["later"])
    assert all(r["recall"] == 1.0 for r in plain)
    comp = [r for r in rows if r["schedule"] == "default"]
    assert comp and all(0.0 <= r["recall"] <= 1.0 for r in comp)
    assert comp[-1]["locations"] > comp[0]["locations"]
    table = interference.half_life_table(rows)
    assert {t["schedule"] for t in table} == {"plain", "default"}
    assert next(t for t in table if t["schedule"] == "plain")["half_life_str"] == ">256"


def test_half_life_definition():
    assert interference.half_life([0, 10, 20], [0.8, 0.6, 0.2]) == pytest.approx(15.0)
    assert math.isinf(interference.half_life([0, 10], [0.8, 0.7]))


def test_drifting_stream_overwrites_early_patterns():
    hl = interference.forgetting_half_life(stream="drifting", d=64, n_early=16,
                                           later=(0, 16, 64, 256, 1024))
    assert 0 < hl < 1024


# -- quantization -----------------------------------------------------------------------

def test_spherical_kmeans_recovers_separated_clusters(rng):
    X, labels = C.clustered_patterns(400, 32, 8, math.radians(10.0), rng)
    centers = quantization.spherical_kmeans(X, 8, iters=20, seed=0)
    qe, unused = quantization.quantisation(centers, X)
    assert unused == 0
    assert qe == pytest.approx(1 - math.cos(math.radians(10.0)), abs=0.01)


def test_quantization_smallest_configuration():
    rows = quantization.compare(**quantization.TINY, progress=False)
    assert len(rows) == 1
    r = rows[0]
    assert 1 <= r["locations"]
    for key in ("qe_addresses", "qe_patterns", "qe_kmeans"):
        assert 0.0 <= r[key] <= 2.0
    for key in ("unused_addresses", "unused_patterns", "unused_kmeans"):
        assert 0 <= r[key] < r["locations"] or r[key] == 0
    assert r["qe_kmeans"] <= r["qe_addresses"] + 1e-9  # Lloyd minimises exactly this


# -- abstention -------------------------------------------------------------------------

def test_filler_sentences_are_distinct_and_seeded():
    a = abstention.filler_sentences(300, seed=1)
    assert len(set(a)) == 300 and a == abstention.filler_sentences(300, seed=1)
    assert a != abstention.filler_sentences(300, seed=2)


def test_abstention_separates_seen_from_unrelated_with_a_hashing_encoder():
    from hopmem.text.encoders import HashingEncoder

    rows, arrays = abstention.abstention_scores(HashingEncoder(384), fillers=(0, 20),
                                                modes=("plain",), betas=(30.0,), progress=False)
    assert {(r["fillers"], r["negatives"]) for r in rows} == {
        (0, "unrelated"), (0, "held-out"), (20, "unrelated"), (20, "held-out")}
    for r in rows:
        assert r["n_seen"] == 96 and r["n_negative"] == (192 if r["negatives"] == "unrelated" else 96)
        assert 0.0 <= r["auc_first_contact"] <= 1.0
    # Lexical overlap alone already tells seen questions from unrelated ones.
    assert all(r["auc_first_contact"] > 0.6 for r in rows if r["negatives"] == "unrelated")
    assert set(arrays[(0, "plain", 30.0)]) >= {"seen", "unrelated", "held-out"}


@pytest.mark.slow  # loads all-MiniLM-L6-v2 (~30 s)
@pytest.mark.model
def test_abstention_with_the_model():
    encoder, why = abstention.model_encoder()
    if encoder is None:
        pytest.skip(f"model unavailable: {why}")
    rows, _ = abstention.abstention_scores(encoder, **abstention.TINY, progress=False)
    assert all(r["auc_first_contact"] > 0.8 for r in rows if r["negatives"] == "unrelated")
