"""Every fitted file hopmem ships says where it came from (docs/tuning.md: provenance)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.centering_means import decode
from benchmarks.provenance import check_text, compare, data_hash, refit_text
from hopmem.agent.encoding import CENTERING_DIR
from hopmem.agent.rerank import RERANK_DIR
from hopmem.agent.tuning import TUNING_FILE
from hopmem.errors import InvalidInput

COMMIT = re.compile(r"[0-9a-f]{7,40}")
DATA = re.compile(r"sha256:[0-9a-f]{64}")


def _well_formed(prov: dict[str, Any]) -> None:
    assert COMMIT.fullmatch(prov["commit"]), prov
    assert DATA.fullmatch(prov["data"]), prov
    words = prov["command"].split()
    assert words[:2] == ["python", "-m"], prov
    assert importlib.util.find_spec(words[2]) is not None, f"{words[2]}: no such module"


def test_the_tuning_record_names_the_provenance_of_every_fitted_model() -> None:
    record = json.loads(TUNING_FILE.read_text(encoding="utf-8"))
    fits = {part: prov for part, prov in record["provenance"].items() if part != "conversation"}
    covered = {mode.strip() for part in fits for mode in part.split(",")}
    assert covered == set(record["models"]) == set(record["gates"])
    for prov in fits.values():
        _well_formed(prov)
        assert prov["encoder"]
    # the conversation steps' values were chosen by studies, not fitted: how is said in words
    _well_formed(record["provenance"]["conversation"])
    assert set(record["conversation"]) <= set(record["provenance"]["conversation"]["chosen"].replace(",", " ").split())


@pytest.mark.parametrize("path", sorted(RERANK_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_rerank_model_names_its_fit_and_the_settings_it_was_fitted_under(path: Path) -> None:
    prov = json.loads(path.read_text(encoding="utf-8"))["provenance"]
    _well_formed(prov)
    assert {"--encoder", "--write"} <= set(prov["command"].split())
    # fitted under the settings the library runs with: a changed setting asks for a refit
    assert prov["settings"] == json.loads(TUNING_FILE.read_text(encoding="utf-8"))["settings"]


def test_a_refit_equal_but_for_the_commit_keeps_the_shipped_commit() -> None:
    def render(commit: str) -> str:
        return json.dumps({"weights": [1.5], "provenance": {"commit": commit}})

    shipped = render("abc1234")
    assert check_text(render, "abc1234") == shipped
    assert refit_text(render, shipped, "abc1234") == shipped
    other = json.dumps({"weights": [1.25], "provenance": {"commit": "abc1234"}})
    assert check_text(render, "abc1234") != other


def test_a_refit_equals_the_shipped_file_within_the_tolerance_of_encoder_floats() -> None:
    shipped = json.dumps({"weights": [0.123, 0.44991205422929637], "gate": -0.207, "mode": "hybrid"})
    assert compare(shipped, shipped) == (True, "byte for byte")
    assert compare(shipped, json.dumps(json.loads(shipped), indent=1))[0]
    # a full-precision float from torch's last bits: equal
    same, how = compare(shipped, shipped.replace("0.44991205422929637", "0.4499120493172224"))
    assert same and how.startswith("within tolerance")
    # a rounded value may move by one unit of its last decimal, not by three
    assert compare(shipped, shipped.replace("0.123", "0.124"))[0]
    assert not compare(shipped, shipped.replace("0.123", "0.126"))[0]
    assert not compare(shipped, shipped.replace("-0.207", "-0.2"))[0]
    # a full-precision value that happens to be short is not taken for a rounded one
    assert not compare(json.dumps({"mean": [0.5]}), json.dumps({"mean": [0.53125]}))[0]
    assert not compare(json.dumps({"mean": [0.0]}), json.dumps({"mean": [0.05]}))[0]
    # structure, strings and types must match exactly
    assert not compare(shipped, shipped.replace("hybrid", "keyword"))[0]
    assert not compare(shipped, json.dumps({"weights": [0.123], "gate": -0.207, "mode": "hybrid"}))[0]
    assert not compare(json.dumps({"on": True}), json.dumps({"on": 1}))[0]
    assert not compare(shipped, shipped.replace("0.44991205422929637", "0.452"))[0]


def test_a_number_in_a_list_is_compared_at_the_scale_of_its_list() -> None:
    # a fitted weight near zero: torch's last bits on another CPU move it by 0.6% of itself, 1e-4 of its vector
    shipped = json.dumps({"weights": [1.0335752824786002, -0.014985300058190968]})
    same, how = compare(shipped, shipped.replace("-0.014985300058190968", "-0.01489782312312716"))
    assert same and how.startswith("within tolerance")
    # by 1.2e-3 of its vector: a different fit
    assert not compare(shipped, shipped.replace("-0.014985300058190968", "-0.0162"))[0]
    # a number alone has no vector to be small beside
    alone = json.dumps({"weight": -0.014985300058190968})
    assert not compare(alone, alone.replace("-0.014985300058190968", "-0.01489782312312716"))[0]


def _with_mean(text: str, mean: np.ndarray) -> str:
    """A shipped centering file with ``mean`` (float32) and that mean's fingerprint."""
    record = json.loads(text)
    bits = mean.astype("<f4").tobytes()
    record["centerer"] = {**record["centerer"], "mean_f32_b64": base64.b64encode(bits).decode("ascii"),
                          "fingerprint": hashlib.sha256(bits).hexdigest()[:16]}
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def test_a_centering_mean_is_compared_as_numbers_and_its_fingerprint_against_itself() -> None:
    shipped = (CENTERING_DIR / "dfee011ccb7dbd89.json").read_text(encoding="utf-8")  # the hashing encoder's
    mean = np.frombuffer(base64.b64decode(json.loads(shipped)["centerer"]["mean_f32_b64"]), "<f4")
    # another CPU's last bits: another fingerprint, the same mean to float rounding
    nudged = _with_mean(shipped, np.nextafter(mean, np.float32(1.0)))
    assert not compare(shipped, nudged)[0]
    same, how = compare(shipped, nudged, decode=decode)
    assert same and how.startswith("within tolerance"), how
    # a mean fitted on other texts
    assert not compare(shipped, _with_mean(shipped, mean * np.float32(1.01)), decode=decode)[0]
    # a file whose fingerprint is not its own mean's hash is refused, not compared
    forged = json.loads(nudged)
    forged["centerer"]["fingerprint"] = json.loads(shipped)["centerer"]["fingerprint"]
    with pytest.raises(InvalidInput, match="fingerprint"):
        compare(shipped, json.dumps(forged), decode=decode)


def test_the_data_hash_reads_names_and_bytes_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("1")
    b.write_text("2")
    assert data_hash([a, b]) != data_hash([b, a])
    before = data_hash([a, b])
    b.write_text("3")
    assert data_hash([a, b]) != before
    assert DATA.fullmatch(before)


@pytest.mark.parametrize("path", sorted(CENTERING_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_centering_mean_names_its_fit(path: Path) -> None:
    shipped = json.loads(path.read_text(encoding="utf-8"))
    _well_formed({**shipped["provenance"], "data": f"sha256:{shipped['reference_texts_sha256']}"})
