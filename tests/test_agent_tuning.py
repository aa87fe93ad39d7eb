"""The tuning record: the fitted defaults and the constants they depend on are data, not Python literals."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import pytest

import hopmem.agent as agent
from hopmem.agent import AgentMemory, RecallConfig, Tuning, WritePolicy, tuning, verdict
from hopmem.agent._settings import RecallSettings
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder

AGENT = Path(agent.__file__).parent


def test_the_defaults_are_the_records():
    rec = tuning.record()
    assert {m: v.to_dict() for m, v in verdict.DEFAULT_MODELS.items()} == {
        m: {**v, "weights": list(v["weights"])} for m, v in rec["models"].items()}
    assert {m: g.tau for m, g in verdict.DEFAULT_GATES.items()} == rec["gates"]
    assert {m: g.tau for m, g in verdict.DEFAULT_BAND_GATES.items()} == rec["band_gates"]
    default = Tuning()
    for name, value in {**rec["settings"], **rec["conversation"]}.items():
        assert getattr(default, name) == value, name
    assert set(default.to_dict()) == {*rec["settings"], *rec["conversation"]}
    assert tuning.unfitted_settings(default) == {}
    for part in rec["provenance"].values():
        assert part["command"].startswith("python -m benchmarks.") and part["commit"]


def _assignments() -> dict[str, ast.expr]:
    out = {}
    for path in AGENT.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                out[node.target.id] = node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                out[node.targets[0].id] = node.value
    return out


def test_no_tuning_constant_is_a_literal_in_the_source():
    assigned = _assignments()
    names = [*tuning.record()["constants"], "DEFAULT_MODELS", "DEFAULT_GATES", "DEFAULT_BAND_GATES"]
    for name in names:
        assert name in assigned, name
        assert not any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(
            n.value, bool) for n in ast.walk(assigned[name])), f"{name} is a literal"
    fields = {f.name: f for f in dataclasses.fields(Tuning)}
    source = (AGENT / "tuning.py").read_text(encoding="utf-8")
    for name in [*tuning.record()["settings"], *tuning.record()["conversation"]]:
        assert name in fields
        line = next(ln for ln in source.splitlines() if ln.strip().startswith(f"{name}: "))
        assert f'setting("{name}")' in line, line


def test_recall_config_holds_only_the_knobs_a_user_tunes():
    assert len(dataclasses.fields(RecallConfig)) <= 12
    doc = RecallConfig.__doc__ or ""
    for f in dataclasses.fields(RecallConfig):
        assert f.name in doc, f"{f.name} is not documented"
    for moved, where in (("beta", "Tuning"), ("subject_boost", "conversation"), ("dedup_cosine", "WritePolicy")):
        with pytest.raises(InvalidInput, match=where):
            RecallConfig(**{moved: 0.5})
    with pytest.raises(InvalidInput, match="no such setting"):
        RecallConfig(bogus=1)


def test_the_conversation_switch_turns_every_conversation_step_off():
    on, off = RecallSettings.resolve(RecallConfig()), RecallSettings.resolve(RecallConfig(conversation=False))
    rec = tuning.record()["conversation"]
    assert (on.aggregation_k, on.context_weight, on.subject_boost, on.date_boost, on.part_weight) == (
        rec["aggregation_k"], rec["context_weight"], rec["subject_boost"], rec["date_boost"], rec["part_weight"])
    assert on.question_parts and not off.question_parts
    assert off.aggregation_k == off.assoc_k
    assert (off.context_weight, off.subject_boost, off.date_boost, off.part_weight) == (0, 0, 0, 0)


def test_a_memory_without_conversation_steps_does_not_split_questions(tmp_path):
    enc = HashingEncoder(64)
    question = "Where do I climb now, and what's the hardest route there?"
    with AgentMemory.open(tmp_path / "a.db", encoder=enc, namespace="n") as on, \
            AgentMemory.open(tmp_path / "b.db", encoder=enc, namespace="n",
                             config=RecallConfig(conversation=False)) as off:
        for mem in (on, off):
            mem.remember("I climb at the Boulder Barn now.")
            mem.remember("The hardest route at the Boulder Barn is a V7.")
        assert on.recall(question).parts and not off.recall(question).parts


def test_tuning_and_write_policy_reject_bad_values():
    for bad in ({"beta": 0}, {"novelty_ceiling": 11}, {"aggregation_k": 0}, {"context_weight": 2.0},
                {"rrf_weights": {"semantic": -1.0}}, {"close_margin": -0.1}):
        with pytest.raises(InvalidInput):
            Tuning(**bad)
    for bad in ({"dedup_cosine": 2.0}, {"supersede_cosine": "x"}, {"update_cues": "(unclosed"}):
        with pytest.raises(InvalidInput):
            WritePolicy(**bad)
    assert WritePolicy(update_cues=None).phrased_as_change("anything")
    assert not WritePolicy().phrased_as_change("I like tea.")
    assert WritePolicy().phrased_as_change("I switched to coffee.")


def test_opening_with_settings_the_models_were_not_fitted_under_warns_naming_them(tmp_path):
    enc = HashingEncoder(64)
    with pytest.warns(tuning.UnfittedSettings, match=r"beta 30\.0, given 20\.0.*rrf_k"):
        AgentMemory.open(tmp_path / "a.db", encoder=enc, namespace="n",
                         tuning=Tuning(beta=20.0, rrf_k=10.0)).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AgentMemory.open(tmp_path / "b.db", encoder=enc, namespace="n", config=RecallConfig(assoc_k=16),
                         tuning=Tuning(subject_boost=0.0)).close()
