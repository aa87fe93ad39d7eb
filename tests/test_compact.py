"""Approximate scores never change the answer.

Compact activation scans a float16 copy of the addresses, batched reads score
with BLAS, and top_k_cosine(half=...) scans a float16 copy of the documents.
In each case every row within the proven error bound of the k-th best is
re-scored exactly, so the results must be *bit-equal* to the exact float32
path, ties included (duplicated rows are the hard case for a candidate pool).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import clustered
from hopmem import Memory
from hopmem.engine.memory import top_k_cosine, top_k_dot


def twins(dim: int, **config) -> tuple[Memory, Memory]:
    return Memory(dim, **config), Memory(dim, activation="compact", **config)


@settings(max_examples=40)  # expensive: two memories of 300 rows written and read per example
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([1, 2, 7, 16, 33, 128]),
       mode=st.sampled_from(["competitive", "plain"]), k=st.sampled_from([1, 3, 20, 500]),
       noise=st.sampled_from([0.0, 0.05, 0.5]), duplicates=st.sampled_from([0, 40]))
def test_compact_memory_equals_exact_memory(seed, dim, mode, k, noise, duplicates):
    rng = np.random.default_rng(seed)
    X = clustered(300, dim, rng=rng, centers=6, noise=noise, duplicates=duplicates)  # ties in every score
    exact, compact = twins(dim, mode=mode, k=k, tau_overload=6.0)
    exact.write(X)
    compact.write(X)
    # Writes activate through the same path: the states must be identical.
    assert exact.snapshot() == compact.snapshot()
    Q = np.concatenate([X[:5], clustered(5, dim, rng=rng, centers=6, noise=1.0), np.zeros((1, dim), np.float32)])
    for strategy in ("fast", "iterative"):
        for a, b in zip(exact.analyze(Q, strategy), compact.analyze(Q, strategy)):
            np.testing.assert_array_equal(a.activated, b.activated)
            np.testing.assert_array_equal(a.similarities, b.similarities)
            np.testing.assert_array_equal(a.result, b.result)
            assert a.iterations == b.iterations


@pytest.mark.parametrize("activation", ["exact", "compact"])
def test_batched_reads_equal_single_reads_with_ties(activation):
    rng = np.random.default_rng(3)
    X = clustered(2000, 64, rng=rng, centers=20, noise=0.3, duplicates=200)
    mem = Memory(64, mode="plain", k=20, activation=activation)
    mem.write(X)
    Q = np.concatenate([X[:70], clustered(60, 64, rng=rng, centers=20, noise=0.5)])  # > one block of 64
    batch = mem.analyze(Q)
    for q, t in zip(Q, batch):
        single = mem.analyze(q)
        np.testing.assert_array_equal(single.activated, t.activated)
        np.testing.assert_array_equal(single.result, t.result)


@settings(max_examples=30)  # expensive: up to 3000 x 384 documents searched three ways per example
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 5, 64, 3000]),
       dim=st.sampled_from([1, 3, 48, 384]), k=st.sampled_from([1, 10, 100]),
       duplicates=st.booleans(), spread=st.sampled_from([1.0, 1e-3]))
def test_half_document_search_equals_float32_search(seed, n, dim, k, duplicates, spread):
    rng = np.random.default_rng(seed)
    # spread 1e-3: near-duplicates whose scores differ below float16 resolution,
    # so only the error bound keeps the right rows in the candidate pool.
    M = (rng.normal(size=dim) + spread * rng.normal(size=(n, dim))).astype(np.float32)
    if duplicates and n > 4:
        M[n // 2:] = M[0]
    M /= np.maximum(np.linalg.norm(M, axis=1, keepdims=True), 1e-30)
    Q = np.concatenate([M[:3] + 0.01, rng.normal(size=(3, dim)).astype(np.float32)])
    exact_rows, exact_scores = top_k_cosine(M, Q, k)
    half_rows, half_scores = top_k_cosine(M, Q, k, half=M.astype(np.float16))
    np.testing.assert_array_equal(exact_rows, half_rows)
    np.testing.assert_array_equal(exact_scores, half_scores)
    if spread < 1.0:
        return  # near-ties: NumPy's own unit query may round differently
    # ... and the same ranking as the plain float32 scan of unit queries, up to
    # near-ties: NumPy's unit query may round differently from the kernel's, so
    # two rows whose scores differ by float32 rounding may swap (about once in
    # a few dozen runs of this test). The score at every rank must agree.
    unit = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    rows, _ = top_k_dot(M, unit.astype(np.float32), k)
    scores64 = M.astype(np.float64) @ unit.astype(np.float64).T  # (n, queries)
    for j in range(len(Q)):
        np.testing.assert_allclose(scores64[rows[j], j], scores64[exact_rows[j], j],
                                   rtol=0, atol=1e-6)
    assert (rows != exact_rows).mean() < 0.05


def test_compact_option_is_validated():
    with pytest.raises(ValueError, match="activation"):
        Memory(4, activation="fuzzy")
