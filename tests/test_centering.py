"""Tests of hopmem.centering.Centerer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopmem.errors import InvalidInput
from hopmem.text.centering import Centerer


def data(n: int = 50, d: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) + 3.0).astype(np.float32)


class TestFit:
    def test_mean(self):
        X = data()
        c = Centerer().fit(X)
        assert c.mean_.dtype == np.float32
        np.testing.assert_allclose(c.mean_, X.astype(np.float64).mean(axis=0), rtol=1e-6)
        assert c.n_samples_seen_ == 50
        assert c.dim == 8 and c.fitted

    def test_fit_returns_self_and_resets(self):
        c = Centerer()
        assert c.fit(np.ones((3, 4))) is c
        c.fit(np.zeros((2, 4)))
        np.testing.assert_array_equal(c.mean_, np.zeros(4, np.float32))
        assert c.n_samples_seen_ == 2

    def test_one_vector_is_one_sample(self):
        c = Centerer().fit(np.array([1.0, 2.0]))
        assert c.n_samples_seen_ == 1
        np.testing.assert_array_equal(c.mean_, [1.0, 2.0])

    def test_partial_fit_over_chunks_equals_fit_exactly_on_integer_data(self):
        rng = np.random.default_rng(1)
        X = rng.integers(-50, 50, size=(101, 6)).astype(np.float32)
        chunked = Centerer()
        for chunk in np.array_split(X, 7):
            chunked.partial_fit(chunk)
        whole = Centerer().fit(X)
        assert chunked == whole
        np.testing.assert_array_equal(chunked.mean_, whole.mean_)

    @given(st.integers(1, 60), st.lists(st.integers(0, 60), max_size=5), st.integers(0, 2**31))
    def test_partial_fit_over_chunks_equals_fit(self, n, cuts, seed):
        X = data(n, 5, seed)
        chunked = Centerer()
        for chunk in np.split(X, sorted(min(c, n) for c in cuts)):
            chunked.partial_fit(chunk)  # empty chunks are no-ops
        whole = Centerer().fit(X)
        assert chunked.n_samples_seen_ == whole.n_samples_seen_ == n
        np.testing.assert_allclose(chunked.mean_, whole.mean_, rtol=1e-6, atol=1e-7)

    def test_partial_fit_of_nothing_changes_nothing(self):
        c = Centerer(3).partial_fit(np.empty((0, 3)))
        assert not c.fitted and c.n_samples_seen_ == 0

    def test_accepts_lists_and_ints(self):
        c = Centerer().fit([[1, 2], [3, 4]])
        np.testing.assert_array_equal(c.mean_, [2.0, 3.0])


class TestTransform:
    def test_unit_norm_rows(self):
        X = data()
        out = Centerer().fit_transform(X)
        assert out.dtype == np.float32 and out.shape == X.shape and out.flags["C_CONTIGUOUS"]
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)

    def test_is_centered_then_normalized(self):
        X = data(20, 4)
        c = Centerer().fit(X)
        expected = X.astype(np.float64) - c.mean_.astype(np.float64)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(c.transform(X), expected, rtol=1e-5, atol=1e-6)

    def test_fit_transform_equals_fit_then_transform(self):
        X = data()
        np.testing.assert_array_equal(Centerer().fit_transform(X), Centerer().fit(X).transform(X))

    def test_vector_in_vector_out(self):
        X = data()
        c = Centerer().fit(X)
        one = c.transform(X[3])
        assert one.shape == (8,)
        np.testing.assert_array_equal(one, c.transform(X)[3])

    def test_the_mean_maps_to_zero(self):
        c = Centerer().fit(np.array([[1.0, 1.0], [3.0, 3.0]]))
        np.testing.assert_array_equal(c.transform(np.array([2.0, 2.0])), [0.0, 0.0])

    def test_input_not_mutated_and_read_only_ok(self):
        X = data().astype(np.float64)
        X.setflags(write=False)
        before = X.copy()
        c = Centerer().fit(X)
        c.transform(X)
        np.testing.assert_array_equal(X, before)
        X32 = data()
        before32 = X32.copy()
        c.transform(X32)
        np.testing.assert_array_equal(X32, before32)

    def test_removes_a_shared_component(self):
        rng = np.random.default_rng(0)
        common = rng.normal(size=32)
        X = (common * 5 + rng.normal(size=(200, 32))).astype(np.float32)
        raw = X / np.linalg.norm(X, axis=1, keepdims=True)
        centered = Centerer().fit_transform(X)
        assert np.mean(raw[:100] @ raw[100:].T) > 0.8
        assert abs(np.mean(centered[:100] @ centered[100:].T)) < 0.05

    def test_unfitted_says_fit_first(self):
        with pytest.raises(InvalidInput, match="fit"):
            Centerer(3).transform(np.ones(3))


class TestFreeze:
    def test_frozen_refuses_partial_fit_and_fit(self):
        c = Centerer().fit(data())
        assert not c.frozen
        assert c.freeze() is c
        assert c.frozen
        with pytest.raises(InvalidInput, match="frozen"):
            c.partial_fit(data())
        with pytest.raises(InvalidInput, match="frozen"):
            c.fit(data())
        c.transform(data())  # still usable

    def test_cannot_freeze_unfitted(self):
        with pytest.raises(InvalidInput, match="fit"):
            Centerer().freeze()


class TestValidation:
    def test_dimension_mismatch_message(self):
        with pytest.raises(InvalidInput, match="dimension mismatch: expected 384, got 12"):
            Centerer(384).fit(np.ones((2, 12)))
        c = Centerer().fit(np.ones((2, 384)))
        with pytest.raises(InvalidInput, match="dimension mismatch: expected 384, got 12"):
            c.transform(np.ones(12))
        with pytest.raises(InvalidInput, match="dimension mismatch: expected 384, got 12"):
            c.partial_fit(np.ones((1, 12)))

    @pytest.mark.parametrize(
        "X, match",
        [
            (np.array([[1.0, np.nan]]), "finite"),
            (np.array([[1.0, np.inf]]), "finite"),
            (np.array([[1e39, 0.0]]), "finite"),  # overflows float32
            (np.ones((2, 2, 2)), "shape"),
            (np.ones(()), "shape"),
            (np.array([["a", "b"]]), "real numbers"),
            (np.array([[1 + 2j, 0]]), "real numbers"),
            ([[1.0, 2.0], [3.0]], "array of numbers"),
            (np.empty((0, 3)), "at least one vector"),
            (np.empty((3, 0)), "at least one component"),
        ],
    )
    def test_bad_X(self, X, match):
        with pytest.raises(InvalidInput, match=match) as info:
            Centerer().fit(X)
        assert isinstance(info.value, ValueError)
        assert "X" in str(info.value)

    @pytest.mark.parametrize("dim", [0, -1, 2.0, True, "3"])
    def test_bad_dim(self, dim):
        with pytest.raises(InvalidInput, match="dim"):
            Centerer(dim)


class TestIdentityAndRoundTrip:
    def test_fingerprint(self):
        assert Centerer().fingerprint is None
        a = Centerer().fit(data(seed=1))
        b = Centerer().fit(data(seed=1))
        c = Centerer().fit(data(seed=2))
        assert a.fingerprint == b.fingerprint != c.fingerprint
        assert len(a.fingerprint) == 16 and int(a.fingerprint, 16) >= 0

    def test_equality(self):
        a = Centerer().fit(data())
        assert a == Centerer().fit(data())
        assert a != Centerer().fit(data(seed=5))
        assert Centerer() == Centerer()
        assert a != Centerer()
        assert a != "not a centerer"
        with pytest.raises(TypeError):
            hash(a)

    @pytest.mark.parametrize("frozen", [False, True])
    def test_round_trip_through_json(self, frozen):
        c = Centerer(8).fit(data())
        if frozen:
            c.freeze()
        restored = Centerer.from_dict(json.loads(json.dumps(c.to_dict())))
        assert restored == c
        assert restored.frozen is frozen
        assert restored.mean_.tobytes() == c.mean_.tobytes()
        assert restored.fingerprint == c.fingerprint
        np.testing.assert_array_equal(restored.transform(data(5)), c.transform(data(5)))

    def test_partial_fit_continues_exactly_after_round_trip(self):
        c = Centerer().partial_fit(data(30, seed=1))
        restored = Centerer.from_dict(json.loads(json.dumps(c.to_dict())))
        c.partial_fit(data(20, seed=2))
        restored.partial_fit(data(20, seed=2))
        assert restored == c

    def test_round_trip_unfitted(self):
        assert Centerer.from_dict(Centerer().to_dict()) == Centerer()
        fixed = Centerer.from_dict(Centerer(4).to_dict())
        with pytest.raises(InvalidInput, match="dimension mismatch"):
            fixed.fit(np.ones((1, 5)))

    @pytest.mark.parametrize(
        "mutate, match",
        [
            (lambda d: d.pop("n_samples_seen"), "n_samples_seen"),
            (lambda d: d.update(format="other"), "format"),
            (lambda d: d.update(version=99), "version"),
            (lambda d: d.update(fingerprint="0" * 16), "fingerprint"),
            (lambda d: d.update(dim=3), "inconsistent"),
            (lambda d: d.update(mean_f32_b64="***"), "malformed"),
        ],
    )
    def test_bad_dicts(self, mutate, match):
        d = Centerer().fit(data()).to_dict()
        mutate(d)
        with pytest.raises(InvalidInput, match=match):
            Centerer.from_dict(d)
        with pytest.raises(InvalidInput):
            Centerer.from_dict("not a dict")
