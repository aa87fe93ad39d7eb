"""The kernel's top-k selection against a NumPy ranking of the very same scores.

The kernel picks the k best of its own float32 scores by one of three routes
(sort everything for large k, block maxima + candidates for many values,
sorted insertion otherwise); every route must give the k best in the order
value descending, then row ascending, exactly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hopmem.engine import _kernel
from hopmem.engine.memory import top_k_dot


def numpy_top_k(scores: np.ndarray, k: int) -> np.ndarray:
    return np.lexsort((np.arange(scores.size), -scores.astype(np.float64)))[:k]


@given(seed=st.integers(0, 2**32 - 1),
       n=st.one_of(st.integers(1, 40), st.integers(240, 300), st.integers(900, 2100)),
       dim=st.sampled_from([1, 3, 16, 33]),
       k=st.one_of(st.integers(1, 5), st.integers(6, 64)),
       levels=st.sampled_from([0, 2, 5, 50]),
       order=st.sampled_from(["random", "ascending", "descending"]))
def test_top_k_equals_the_numpy_ranking_of_the_same_scores(seed, n, dim, k, levels, order):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, dim)).astype(np.float32)
    if levels:  # few distinct rows: ties everywhere, including +0.0 and -0.0 scores
        M = np.round(M * levels / 3) * (3 / levels)
        M[rng.random(n) < 0.1] = -0.0
        M = M.astype(np.float32)
    q = rng.standard_normal(dim).astype(np.float32)
    if order != "random":  # adversarial for insertion: every row a new best, or none
        s = M @ q
        idx = np.argsort(s, kind="stable")
        M = np.ascontiguousarray(M[idx if order == "ascending" else idx[::-1]])
    scores = _kernel.dots(M, q)  # the float32 scores the search ranks
    rows, top = top_k_dot(M, q, k)
    expect = numpy_top_k(scores, k)
    np.testing.assert_array_equal(rows[0], expect)
    np.testing.assert_array_equal(top[0], scores[expect])


def test_nan_scores_do_not_break_the_selection(rng):
    M = rng.standard_normal((1000, 8)).astype(np.float32)
    M[[3, 500]] = np.nan
    rows, top = top_k_dot(M, M[7], 10)
    assert rows.shape == (1, 10) and len(set(rows[0].tolist())) == 10
    assert 7 in rows[0]
