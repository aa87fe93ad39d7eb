"""Mathematical properties of the memory, checked against NumPy written here.

Nothing in this file uses hopmem's reference implementation: the expected
values are the textbook formulas, so a shared mistake in kernel and reference
would still show up.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem import Memory

BACKENDS = ["native", "reference"]


def unit_rows(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na < 1e-12 or nb < 1e-12 else float(a @ b / (na * nb))


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


@st.composite
def stored_and_query(draw, max_rows: int = 12):
    """Gaussian rows with varied lengths (so raw and unit patterns differ) and a query."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dim = draw(st.integers(2, 24))
    n = draw(st.integers(1, max_rows))
    lengths = 2.0 ** rng.uniform(-3, 3, size=(n, 1))
    X = (rng.standard_normal((n, dim)) * lengths).astype(np.float32)
    q = rng.standard_normal(dim).astype(np.float32)
    if draw(st.booleans()):  # a noisy version of a stored row
        q = (X[rng.integers(n)] + 0.3 * q * np.linalg.norm(X[0]) / math.sqrt(dim)).astype(np.float32)
    return X, q


# -- the textbook update ----------------------------------------------------------------------


@given(stored_and_query(), st.sampled_from([0.5, 2.0, 8.0, 20.0]), st.sampled_from(BACKENDS))
def test_plain_fast_read_is_the_modern_hopfield_update(data, beta, backend):
    X, q = data
    mem = Memory(X.shape[1], mode="plain", k=X.shape[0] + 3, beta=beta, backend=backend)
    mem.write(X)
    Xhat = unit_rows(X)
    expected = X.astype(np.float64).T @ softmax(beta * (Xhat @ unit_rows(q)))
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(mem.read(q, "fast"), expected, atol=1e-5)


@given(stored_and_query(), st.sampled_from([0.5, 2.0, 8.0, 20.0]), st.integers(1, 15),
       st.sampled_from([1e-3, 1e-6]), st.sampled_from(BACKENDS))
def test_plain_iterative_read_is_the_iterated_update(data, beta, t_max, epsilon, backend):
    X, q = data
    mem = Memory(X.shape[1], mode="plain", k=X.shape[0], beta=beta, t_max=t_max,
                 epsilon=epsilon, backend=backend)
    mem.write(X)
    Xhat = unit_rows(X)
    xi = unit_rows(q)
    states, cosines = [], []  # every step up to t_max, to locate the stopping rule
    for _ in range(t_max):
        nxt = Xhat.T @ softmax(beta * (Xhat @ xi))
        nxt /= np.linalg.norm(nxt)
        cosines.append(cos(xi, nxt))
        states.append(nxt)
        xi = nxt
    stops = [c > 1 - epsilon for c in cosines]
    iterations = stops.index(True) + 1 if True in stops else t_max
    trace = mem.analyze(q, "iterative")
    if trace.iterations != iterations:
        # Only a convergence test decided within rounding of 1 - epsilon may go
        # the other way (the kernel keeps unit patterns in float32).
        decisive = cosines[min(trace.iterations, iterations) - 1]
        assert abs(decisive - (1 - epsilon)) < 1e-9, (trace.iterations, iterations)
    assert trace.converged == stops[trace.iterations - 1]
    np.testing.assert_allclose(trace.result, states[trace.iterations - 1], atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stored_pattern_is_a_fixed_point_at_large_beta(backend):
    rng = np.random.default_rng(11)
    X = rng.standard_normal((12, 64)).astype(np.float32)  # pairwise cos ~ N(0, 1/8): separated
    mem = Memory(64, mode="plain", k=12, beta=50.0, backend=backend)
    mem.write(X)
    for i, (x, trace) in enumerate(zip(X, mem.analyze(X, "iterative"))):
        assert cos(trace.result, x) > 0.999
        assert trace.converged and trace.iterations <= 3
        assert trace.activated[0] == i + 1  # its own location is the best match
        assert trace.weights[0] > 0.99


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_go_to_the_lower_id(backend):
    rng = np.random.default_rng(12)
    x = rng.standard_normal(10).astype(np.float32)
    others = rng.standard_normal((3, 10)).astype(np.float32)
    mem = Memory(10, mode="plain", k=2, backend=backend)
    mem.write(np.stack([others[0], x, others[1], x * 4, x, others[2]]))  # x at ids 2, 4, 5
    trace = mem.analyze(x, "fast")
    assert trace.activated.tolist() == [2, 4]
    assert trace.similarities[0] == trace.similarities[1]  # a bit-exact tie
    assert mem.attention(x, 1.0).activated.tolist() == [2, 4]


# -- softmax weights, convergence, fidelities --------------------------------------------------


@given(stored_and_query(max_rows=20), st.sampled_from(["competitive", "plain"]),
       st.integers(1, 8), st.sampled_from(BACKENDS))
def test_softmax_weights_are_a_distribution(data, mode, k, backend):
    X, q = data
    mem = Memory(X.shape[1], mode=mode, k=k, beta=5.0, backend=backend)
    mem.write(X)
    kk = min(k, len(mem))
    fast = mem.analyze(q, "fast")
    iterative = mem.analyze(q, "iterative")
    attention = mem.attention(q, 1.0 / math.sqrt(X.shape[1]))
    for w in (fast.weights, iterative.weights, attention.weights):
        assert w.shape == (kk,)
        assert np.all(w >= 0) and math.isclose(w.sum(), 1.0, abs_tol=1e-9)
    # One softmax step over scores sorted best first: weights never increase.
    assert np.all(np.diff(fast.weights) <= 1e-15)
    np.testing.assert_allclose(fast.weights, softmax(5.0 * fast.similarities), atol=1e-9)


@given(stored_and_query(max_rows=20), st.sampled_from(["competitive", "plain"]),
       st.sampled_from(["fast", "iterative"]), st.sampled_from(BACKENDS))
def test_fidelity_and_first_contact(data, mode, strategy, backend):
    X, q = data
    mem = Memory(X.shape[1], mode=mode, k=4, beta=6.0, backend=backend)
    mem.write(X)
    trace = mem.analyze(q, strategy)
    fast = mem.read(q, "fast")
    assert trace.fidelity == pytest.approx(cos(q, trace.result), abs=1e-9)
    # analyze's first step and read("fast") reach the same state by different
    # summation orders; a cosine of nearly cancelling sums magnifies that (seen: 3.5e-9).
    assert trace.first_contact == pytest.approx(cos(q, fast), abs=1e-7)
    if strategy == "fast":
        assert trace.fidelity == trace.first_contact
    sims = [cos(q, a) for a in mem.addresses]
    expected = sorted(sims, reverse=True)[:min(4, len(mem))]
    np.testing.assert_allclose(trace.similarities, expected, atol=1e-6)


@given(stored_and_query(), st.sampled_from([1.0, 5.0, 10.0]), st.sampled_from(BACKENDS))
def test_iterative_reads_converge(data, beta, backend):
    X, q = data
    mem = Memory(X.shape[1], mode="plain", k=X.shape[0], beta=beta, t_max=200, backend=backend)
    mem.write(X)
    trace = mem.analyze(q, "iterative")
    assert trace.converged and 1 <= trace.iterations <= 200
    # Converged means one more step barely moves it.
    again = mem.analyze(trace.result, "iterative")
    assert cos(again.result, trace.result) > 1 - 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_iterations_are_capped_by_t_max(backend):
    # beta tiny: the state creeps towards the mean, far from converged in 2 steps.
    rng = np.random.default_rng(3)
    X = rng.standard_normal((10, 16)).astype(np.float32)
    mem = Memory(16, mode="plain", k=10, beta=0.5, t_max=2, epsilon=1e-12, backend=backend)
    mem.write(X)
    trace = mem.analyze(X[0], "iterative")
    assert (trace.iterations, trace.converged) == (2, False)


# -- determinism ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_and_writes_give_identical_memories(backend):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 9)).astype(np.float32)
    a = Memory(9, k=4, tau_overload=2.0, max_locations=10, seed=42, backend=backend)
    b = Memory(9, k=4, tau_overload=2.0, max_locations=10, seed=42, backend=backend)
    a.write(X)
    for chunk in np.array_split(X, 7):  # batching must not matter either
        b.write(chunk)
    assert a.snapshot() == b.snapshot()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_seed_matters_only_through_splits(backend):
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((2, 9))[rng.integers(0, 2, 30)]
         + 0.2 * rng.standard_normal((30, 9))).astype(np.float32)

    def run(seed: int, tau_overload: float) -> Memory:
        mem = Memory(9, k=3, tau_overload=tau_overload, seed=seed, backend=backend)
        mem.write(X)
        return mem

    calm = run(1, 1e9), run(2, 1e9)
    a, b = run(1, 2.0), run(2, 2.0)
    assert min(len(a), len(b)) > len(calm[0])  # the splits happened
    assert not (a.addresses.shape == b.addresses.shape
                and np.array_equal(a.addresses, b.addresses))
    np.testing.assert_array_equal(calm[0].addresses, calm[1].addresses)
    np.testing.assert_array_equal(calm[0].counters, calm[1].counters)


# -- the learning-rate schedule, novelty, overload -------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_eta_decays_per_absorbing_write_and_floors(backend):
    mem = Memory(4, eta0=0.1, eta_decay=0.5, eta_min=0.01, tau_overload=1e9, backend=backend)
    expected = 0.1
    mem.write([1.0, 0.0, 0.0, 0.0])  # first write only spawns: no decay
    assert mem.stats().current_eta == expected
    rng = np.random.default_rng(6)
    for _ in range(6):
        mem.write([1.0, *(0.1 * rng.standard_normal(3))])
        expected = max(expected * 0.5, 0.01)
        assert mem.stats().current_eta == expected
    assert expected == 0.01  # the floor was reached
    # A write no location absorbs (orthogonal to all) spawns without decaying eta.
    mem2 = Memory(4, eta0=0.1, eta_decay=0.5, eta_min=0.01, backend=backend)
    mem2.write([1.0, 0.0, 0.0, 0.0])
    res = mem2.write([0.0, 0.0, 1.0, 0.0])
    assert res.touched[0].tolist() == [] and mem2.stats().current_eta == 0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_writes_never_touch_eta(backend):
    mem = Memory(3, mode="plain", eta0=0.1, eta_decay=0.5, eta_min=0.01, backend=backend)
    mem.write(np.ones((5, 3)))
    assert mem.stats().current_eta == 0.1 and len(mem) == 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_winner_moves_towards_the_input_at_the_damped_rate(backend):
    mem = Memory(2, eta0=0.2, eta_decay=1.0, eta_min=0.2, tau_damp=10.0, tau_overload=1e9,
                 backend=backend)
    mem.write([1.0, 0.0])
    x = np.array([1.0, 1.0])
    mem.write(x)
    # n_winner was 1 before the write: rate = 0.2 / (1 + 1/10); the input is unnormalized.
    rate = 0.2 / 1.1
    a = np.array([1.0, 0.0]) + rate * (x - np.array([1.0, 0.0]))
    np.testing.assert_allclose(mem.addresses[0], a / np.linalg.norm(a), atol=1e-7)
    assert mem.weights[0] == 2.0  # the only (hence top) location absorbs weight 1
    np.testing.assert_allclose(mem.counters[0], [2.0, 1.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_novelty_spawns_a_location(backend):
    mem = Memory(5, k=3, tau_split=0.3, tau_overload=1e9, backend=backend)
    mem.write(np.eye(5, dtype=np.float32)[0])
    res = mem.write(np.eye(5, dtype=np.float32)[3] * 7)  # orthogonal: s_max = 0
    assert res.created[0].tolist() == [2] and res.touched[0].tolist() == []
    np.testing.assert_array_equal(mem.addresses[1], np.eye(5)[3])
    np.testing.assert_array_equal(mem.counters[1], np.eye(5)[3] * 7)
    assert mem.weights.tolist() == [1.0, 1.0]
    # Correlated but below tau_split: absorbed by the nearest AND a new location.
    weak = np.array([0.2, 0, 0, 0, 1.0], np.float32)  # cos with e0 ~ 0.196 < 0.3
    res = mem.write(weak)
    assert res.created[0].tolist() == [3] and res.touched[0].tolist() == [1]
    # Above tau_split: absorbed only.
    res = mem.write(np.array([1.0, 0.2, 0, 0, 0], np.float32))
    assert res.created[0].tolist() == [] and 1 in res.touched[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_overload_splits_the_winner(backend):
    mem = Memory(8, k=2, tau_overload=1.5, seed=9, backend=backend)
    x = np.arange(1, 9, dtype=np.float32)
    mem.write(x)
    res = mem.write(x)  # the winner's weight reaches 2 > 1.5: split
    assert res.touched[0].tolist() == [1] and res.created[0].tolist() == [2]
    assert mem.weights.tolist() == [1.0, 1.0]  # parent and child each keep half
    np.testing.assert_allclose(mem.counters[0], x)  # (2x) / 2
    np.testing.assert_allclose(mem.counters[1], x)
    parent, child = mem.addresses.astype(np.float64)
    assert np.linalg.norm(child) == pytest.approx(1.0, abs=1e-6)
    # child = normalize(parent + 0.1 r) with |r| = 1: close to, but not, the parent.
    assert 0.99 - 1e-6 <= cos(parent, child) < 1.0 - 1e-9
    big = Memory(8, k=2, tau_overload=2.5, seed=9, backend=backend)
    big.write(np.stack([x, x]))
    assert len(big) == 1  # weight 2 does not exceed 2.5


@st.composite
def write_plan(draw):
    """Clustered inputs and how to cut them into batches (sizes around the kernel's block of 8)."""
    dim = draw(st.sampled_from([3, 16, 17, 40]))
    n = draw(st.integers(90, 260))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((draw(st.integers(2, 12)), dim))
    X = (centers[rng.integers(0, len(centers), n)] + draw(st.sampled_from([0.2, 0.6])) *
         rng.standard_normal((n, dim))).astype(np.float32)
    cuts = draw(st.lists(st.sampled_from([1, 2, 7, 8, 9, 17, 64, 100]), min_size=1, max_size=8))
    return X, cuts


@settings(max_examples=40)  # expensive: every plan is written twice, batched and one at a time
@given(write_plan(),
       st.sampled_from([{}, {"tau_overload": 2.0}, {"tau_split": 0.9, "tau_overload": 1.5, "tau_merge": 0.92},
                        {"tau_split": 0.9, "max_locations": 80}, {"activation": "compact", "k": 5},
                        {"k": 100}, {"tau_split": 0.9, "k": 5}]))
def test_a_batch_write_is_the_same_vectors_written_one_at_a_time(plan, overrides):
    # The kernel scores a batch's writes in blocks (one pass over the addresses
    # for several inputs, re-scoring for the later inputs each row a write changes):
    # the memory must come out bit for bit as if every vector came alone.
    X, cuts = plan
    batched, single = Memory(X.shape[1], **overrides), Memory(X.shape[1], **overrides)
    logs_b, i, c = [], 0, 0
    while i < len(X):
        size = cuts[c % len(cuts)]
        r = batched.write(X[i:i + size])
        logs_b += [(t.tolist(), k.tolist()) for t, k in zip(r.touched, r.created)]
        i += size
        c += 1
    logs_s = []
    for x in X:
        r = single.write(x)
        logs_s += [(t.tolist(), k.tolist()) for t, k in zip(r.touched, r.created)]
    assert logs_b == logs_s
    for name in ("ids", "addresses", "patterns", "weights"):
        np.testing.assert_array_equal(getattr(batched, name), getattr(single, name))
    assert batched.stats() == single.stats()


@pytest.mark.parametrize("overrides", [{}, {"tau_split": 0.9, "tau_overload": 3.0}])
def test_large_memories_write_in_large_blocks_and_stay_bit_equal(overrides):
    # Past 8 MB of addresses the kernel scores writes 64 at a time (the matrix
    # no longer fits in cache): the state must still be that of single writes.
    from hopmem.engine._state import Snapshot

    rng = np.random.default_rng(7)
    d, L = 1024, 2200  # 9 MB of float32 addresses
    A = rng.standard_normal((L, d))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    weights = rng.integers(1, 6, L).astype(np.float64)
    snap = Snapshot(ids=np.arange(L, dtype=np.int64), addresses=A.astype(np.float32),
                    counters=A * weights[:, None], weights=weights, eta=0.01, writes=int(L),
                    next_id=L, rng=12345)
    config = Memory(d, **overrides).config
    # Inputs near stored rows (they update them) and fresh ones (they spawn).
    X = np.vstack([A[rng.integers(0, L, 100)] + 0.3 * rng.standard_normal((100, d)) / np.sqrt(d),
                   rng.standard_normal((40, d))]).astype(np.float32)
    X = X[rng.permutation(len(X))]
    batched, single = Memory.from_config(config, snap), Memory.from_config(config, snap)
    r = batched.write(X)
    logs_s = [single.write(x) for x in X]
    assert [t.tolist() for t in r.touched] == [s.touched[0].tolist() for s in logs_s]
    assert [c.tolist() for c in r.created] == [s.created[0].tolist() for s in logs_s]
    assert batched.snapshot() == single.snapshot()
