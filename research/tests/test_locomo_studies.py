"""The LoCoMo design studies on two tiny made-up conversations in LoCoMo's format (hashing encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.locomo import run

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "locomo_tiny"


def test_study_diversity_on_tiny_fixture(tmp_path: Path) -> None:
    from research.locomo import study_diversity

    out_json = tmp_path / "study.json"
    out = study_diversity.main([str(FIXTURE), "--encoder", "hashing", "--sentences", "--json", str(out_json)])
    saved = json.loads(out_json.read_text())
    library = saved["library"]["table"]
    assert len(library) == len(study_diversity.SUBJECT_GRID) * len(study_diversity.DATE_GRID) + 1
    assert library[0]["gain"] == 0.0  # the grid's first setting (both steps off) is the base
    assert len(saved["library"]["loco_choices"]) == 2  # one per held-out conversation
    rows = saved["reorderings"]["table"]
    assert rows[0]["gain"] == 0.0 and any(r["variant"].startswith("sentence vectors") for r in rows)
    for row in library + rows:
        assert 0.0 <= row["all"] <= 1.0
        assert row["gain_ci95"][0] <= row["gain"] + 1e-12 and row["gain"] <= row["gain_ci95"][1] + 1e-12
    assert out["reorderings"]["aggregation_questions_by_category"] == saved["reorderings"][
        "aggregation_questions_by_category"]


def test_paired_differences_of_two_runs(tmp_path: Path) -> None:
    from research.locomo.study_encoders import paired_runs

    rows = [json.loads(line) for line in _records(tmp_path).read_text().splitlines()]
    better = tmp_path / "better.jsonl"
    better.write_text("\n".join(json.dumps({**r, "recall_dense": 1.0}) for r in rows))
    out = paired_runs([str(_records(tmp_path)), str(better)])["against"][str(better)]
    dense = out["dense"]["all"]
    expected = np.mean([1.0 - r["recall_dense"] for r in rows if r["category"] > 0])
    assert dense["mean"] == pytest.approx(expected) and dense["n"] == 9
    assert out["bm25"]["all"]["mean"] == 0.0 and out["bm25"]["all"]["ci95"] == [0.0, 0.0]


@pytest.mark.parametrize("question, expected", [
    ("What activities does Melanie partake in?", "activities"),
    ("Which cities has John been to?", "cities"),
    ("How many children does Melanie have?", "children"),
    ("What did Caroline research?", None),
])
def test_study_aggregation_category_word(question: str, expected: str | None) -> None:
    from research.locomo.study_aggregation import category_word

    assert category_word(question) == expected


def test_study_aggregation_on_tiny_fixture(tmp_path: Path) -> None:
    from research.locomo import study_aggregation

    out_json = tmp_path / "aggregation.json"
    out = study_aggregation.main([str(FIXTURE), "--encoder", "hashing", "--grid", "--json", str(out_json)])
    saved = json.loads(out_json.read_text())
    assert saved["effect"][0]["variant"] == "the defaults" and saved["effect"][0]["gain"] == 0.0
    assert any(f["variant"] == "feedback" for f in saved["feasibility"])
    for f in saved["feasibility"]:
        assert all(0.0 <= v <= 1.0 for k, v in f.items() if k != "variant")
    for row in saved["effect"]:
        assert 0.0 <= row["all"] <= 1.0
        assert row["gain_ci95"][0] <= row["gain"] + 1e-12 and row["gain"] <= row["gain_ci95"][1] + 1e-12
    assert len(out["effect"]) == len(saved["effect"])
    grid = saved["aggregation_k"]
    assert len(grid["table"]) == len(study_aggregation.AGGREGATION_GRID) + 1 and grid["table"][0]["gain"] == 0.0
    assert len(grid["loco_choices"]) == 2  # one per held-out conversation


def _records(tmp_path: Path) -> Path:
    path = tmp_path / "records.jsonl"
    if not path.exists():
        run.main([str(FIXTURE), "--encoder", "hashing", "--quiet", "--no-cache", "--records", str(path)])
    return path
