"""The tuning record: the fitted defaults and the constants they depend on are data, not Python literals."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import pytest

import hopmem.agent as agent
from hopmem.agent import AgentMemory, RecallConfig, tuning, verdict
from hopmem.text.encoders import HashingEncoder

AGENT = Path(agent.__file__).parent


def test_the_defaults_are_the_records():
    rec = tuning.record()
    assert {m: v.to_dict() for m, v in verdict.DEFAULT_MODELS.items()} == {
        m: {**v, "weights": list(v["weights"])} for m, v in rec["models"].items()}
    assert {m: g.tau for m, g in verdict.DEFAULT_GATES.items()} == rec["gates"]
    assert {m: g.tau for m, g in verdict.DEFAULT_BAND_GATES.items()} == rec["band_gates"]
    config = RecallConfig()
    for name, value in rec["settings"].items():
        assert getattr(config, name) == value, name
    assert tuning.unfitted_settings(config) == {}
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
    names = [*tuning.record()["constants"], "DEFAULT_MODELS", "DEFAULT_GATES", "DEFAULT_BAND_GATES",
             "DEFAULT_RRF_WEIGHTS"]
    for name in names:
        assert name in assigned, name
        assert not any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(
            n.value, bool) for n in ast.walk(assigned[name])), f"{name} is a literal"
    fields = {f.name: f for f in dataclasses.fields(RecallConfig)}
    source = (AGENT / "config.py").read_text(encoding="utf-8")
    for name in tuning.record()["settings"]:
        assert f"{name}: " in source and name in fields
        line = next(ln for ln in source.splitlines() if ln.strip().startswith(f"{name}: "))
        assert "setting(" in line or "default_factory" in line, line


def test_opening_with_settings_the_models_were_not_fitted_under_warns_naming_them(tmp_path):
    enc = HashingEncoder(64)
    with pytest.warns(tuning.UnfittedSettings, match=r"beta 30\.0, given 20\.0.*rrf_k"):
        AgentMemory.open(tmp_path / "a.db", encoder=enc, namespace="n",
                         config=RecallConfig(beta=20.0, rrf_k=10.0)).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AgentMemory.open(tmp_path / "b.db", encoder=enc, namespace="n", config=RecallConfig(assoc_k=16)).close()
