"""The LoCoMo benchmark script on two tiny made-up conversations in LoCoMo's format (hashing encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.locomo import run
from benchmarks.locomo.data import load_folder, normalize_evidence
from benchmarks.locomo.metrics import abstention_scores, auc, evidence_recall

FIXTURE = Path(__file__).parent / "fixtures" / "locomo_tiny"


def test_protocol_units_questions_and_never_mentioned() -> None:
    convs = {c.id: c for c in load_folder(FIXTURE)}
    a1, b2 = convs["a1"], convs["b2"]
    assert len(a1.units) == 13
    assert a1.units[6].text == ("Alice: Ha! Here is my cello recital poster. "
                                "(shares a photo: a poster of a cello concert in a church)")
    assert a1.units[1].created_at == a1.units[0].created_at + 1
    # category 5 is not asked; a question left without evidence is not scored
    assert len(a1.questions) == 5 and a1.unscored == 1
    by_text = {q.text: q.evidence for q in a1.questions}
    assert by_text["Who teaches Alice the cello?"] == ("D1:5",)  # "D:1:5"
    assert by_text["Where was Alice's cello recital?"] == ("D2:4", "D2:2")  # "D2:04; D2:2"
    assert by_text["Which piece did Rosa enjoy?"] == ("D3:2",)  # "D9:99" does not exist
    # never-mentioned: the other conversation's questions, speakers renamed (possessive too)
    assert len(b2.never) == 4 and len(a1.never) == 4
    for q in b2.never:
        assert "Bob" not in q.text and "Alice" not in q.text and q.category == 0
    assert "What is the name of Dan's greyhound?" in {q.text for q in b2.never}


def test_normalize_evidence() -> None:
    known = {"D11:26", "D30:5", "D8:6", "D9:17"}
    assert normalize_evidence(["D:11:26", "D30:05", "D8:6; D9:17", "D", "D1:1"], known) == (
        ("D11:26", "D30:5", "D8:6", "D9:17"), 2)


def test_metrics_known_values() -> None:
    assert evidence_recall(["D1:1", "D1:2"], ["D1:2", "D3:3"]) == 0.5
    assert evidence_recall([], ["D1:2"]) == 0.0
    s = abstention_scores([True, True, False, False], [True, False, False, False])
    assert s["recall"] == 0.5 and s["false_abstention"] == 0.25 and s["precision"] == pytest.approx(2 / 3)
    assert auc([3, 4], [1, 2]) == 1.0 and auc([1], [1]) == 0.5


def test_run_on_tiny_fixture(tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"
    records = tmp_path / "records.jsonl"
    out = run.main([str(FIXTURE), "--encoder", "hashing", "--limit", "1", "--json", str(out_json),
                    "--records", str(records), "--quiet", "--no-cache"])
    saved = json.loads(out_json.read_text())
    assert saved["questions"] == {"answerable": 9, "never_mentioned": 8}
    assert saved["unscored_questions"] == 1
    assert set(saved["systems"]) == {"agent", "agent_rank", "bm25", "dense", "rrf"}
    for entry in saved["systems"].values():
        r = entry["recall@1"]
        assert 0.0 <= r["ci95"][0] <= r["mean"] <= r["ci95"][1] <= 1.0
    assert set(saved["by_category"]) <= {"multi-hop", "temporal", "open-domain", "single-hop"}
    for name in ("false_abstention", "never_mentioned_abstention", "precision", "f1"):
        assert 0.0 <= saved["abstention"][name]["value"] <= 1.0
    assert saved["latency_ms"]["encoder_excluded"]["p50"] > 0
    assert out["systems"]["bm25"] == saved["systems"]["bm25"]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 17
    by_question = {(r["conversation"], r["question"]): r for r in rows}
    # known answers: the only turns with "sneakers" / "marathon" come first, for every system
    sneakers = by_question[("a1", "When did Pepper chew Bob's sneakers?")]
    assert not sneakers["abstained"]
    assert [sneakers[f"recall_{s}"] for s in ("agent", "agent_rank", "bm25", "dense", "rrf")] == [1.0] * 5
    assert by_question[("b2", "Which marathon is Dan training for?")]["recall_bm25"] == 1.0
    # a two-turn question scored at limit 1 gets at most half
    assert by_question[("b2", "What happened to Carol's first bowl and what is she making now?")]["recall_bm25"] == 0.5
    # an abstention retrieves nothing
    for r in rows:
        if r["category"] > 0 and r["abstained"]:
            assert r["recall_agent"] == 0.0


def test_latency_on_tiny_fixture(tmp_path: Path) -> None:
    from benchmarks.locomo import latency

    out_json = tmp_path / "latency.json"
    out = latency.main([str(FIXTURE), "--conversation", "a1", "--entries", "300", "--repeats", "2",
                        "--encoder", "hashing", "--json", str(out_json)])
    saved = json.loads(out_json.read_text())
    assert saved["entries"] == 300 and saved["conversation"] == "a1"
    for name in ("defaults", "without subject and date steps"):
        assert 0.0 < saved[name]["p50_ms"] <= saved[name]["p95_ms"]
    assert out["paired_difference_ms"] == saved["paired_difference_ms"]


def test_run_with_a_refitted_verdict(tmp_path: Path) -> None:
    from hopmem.agent.verdict import DEFAULT_GATES, DEFAULT_MODELS

    shipped = DEFAULT_MODELS["hybrid"], DEFAULT_GATES["hybrid"]
    fit = tmp_path / "fit.json"  # what fit_defaults --json writes; a threshold nothing reaches
    fit.write_text(json.dumps({"features": list(shipped[0].features), "weights": [1.0, 1.0, 1.0],
                               "intercept": -1.0, "tau": 1e6}))
    out = run.main([str(FIXTURE), "--encoder", "hashing", "--limit", "1", "--quiet", "--no-cache",
                    "--verdict", str(fit)])
    assert out["verdict"]["tau"] == 1e6 and out["verdict"]["weights"] == [1.0, 1.0, 1.0]
    assert out["abstention"]["false_abstention"]["value"] == 1.0  # every question abstained
    assert (DEFAULT_MODELS["hybrid"], DEFAULT_GATES["hybrid"]) == shipped  # the library's verdict is back
    assert run.main([str(FIXTURE), "--encoder", "hashing", "--quiet", "--no-cache"])["verdict"] == {
        "source": "library defaults"}


def test_split_encoder_sends_stored_texts_one_way_and_the_rest_the_other() -> None:
    from benchmarks.locomo.cache import CachedEncoder, SplitEncoder
    from hopmem.text.encoders import HashingEncoder

    split = SplitEncoder(CachedEncoder("a", lambda: HashingEncoder(64, seed=1), None),
                         CachedEncoder("b", lambda: HashingEncoder(64, seed=2), None))
    split.set_passages(["a stored turn"])
    got = split.encode(["a question?", "a stored turn"])
    assert np.array_equal(got[1], HashingEncoder(64, seed=1).encode(["a stored turn"])[0])
    assert np.array_equal(got[0], HashingEncoder(64, seed=2).encode(["a question?"])[0])
    assert split.dim == 64 and len(split.fingerprint) == 16


def test_latency_against_the_deeper_reads(tmp_path: Path) -> None:
    from benchmarks.locomo import latency

    out = latency.main([str(FIXTURE), "--conversation", "a1", "--entries", "300", "--repeats", "2",
                        "--encoder", "hashing", "--baseline", "aggregation"])
    for name in ("defaults", "without deeper reads"):
        assert 0.0 < out[name]["p50_ms"] <= out[name]["p95_ms"]


def test_fit_reranker_on_tiny_fixture(tmp_path: Path) -> None:
    from benchmarks.locomo import fit_reranker
    from hopmem.agent import AgentMemory
    from hopmem.agent.encoding import space_centerer
    from hopmem.agent.rerank import LinearReranker, shipped_reranker
    from hopmem.text.encoders import HashingEncoder

    out_json = tmp_path / "fit.json"
    out = fit_reranker.main([str(FIXTURE), "--encoder", "hashing", "--depth", "8", "--sets", "dev", "--write",
                             "--out", str(tmp_path), "--json", str(out_json)])
    saved = json.loads(out_json.read_text())
    table = saved["loco"]
    assert set(table) == {"plain", "bound", *fit_reranker.VARIANTS}
    assert all(table["bound"]["all"] >= table[name]["all"] - 1e-12 for name in fit_reranker.VARIANTS)
    for name, row in table.items():
        assert 0.0 <= row["all"] <= 1.0 and row["ci"][0] <= row["all"] + 1e-12 <= row["ci"][1] + 2e-12
        if name not in ("plain", "bound"):
            assert row["gain"]["mean"] == pytest.approx(row["all"] - table["plain"]["all"])
    written = Path(out["written"])
    assert written.parent == tmp_path
    enc = HashingEncoder(384)
    model = shipped_reranker(written.stem, 384, space_centerer(enc, 384).fingerprint, directory=tmp_path)
    assert isinstance(model, LinearReranker) and model.depth == 8
    # the written model works in a memory: its order is a re-ordering of the fused order's first 8
    with AgentMemory.open(":memory:", encoder=enc, namespace="t", reranker=model) as mem, \
            AgentMemory.open(":memory:", encoder=enc, namespace="t", reranker=False) as plain:
        for m in (mem, plain):
            m.remember_many([f"A: note {i} about the garden and the lake trip {i % 3}" for i in range(20)],
                            progress=False)
        got = {h.entry_id for h in mem.rank("garden lake trip", limit=5)}
        assert got <= {h.entry_id for h in plain.rank("garden lake trip", limit=8)}


def test_latency_against_no_reranker(tmp_path: Path) -> None:
    from benchmarks.locomo import latency

    out = latency.main([str(FIXTURE), "--conversation", "a1", "--entries", "300", "--repeats", "2",
                        "--encoder", "hashing", "--baseline", "rerank"])
    for name in ("defaults", "without the reranker"):
        assert 0.0 < out[name]["p50_ms"] <= out[name]["p95_ms"]
