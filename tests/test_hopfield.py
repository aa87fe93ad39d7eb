"""Full activation (k >= L) and hopmem.hopfield: the streamed kernel.

A read that activates every location streams the rows once a step (an online
softmax over fixed blocks of rows) instead of ranking them. Its sums run in
row order, not the reference's best-first order, so it is held to a float64
textbook within the error bound docs/hopfield.md states (``fast_bound`` and
``hopfield_bound`` here), and, bit for bit, to itself: single reads, traces,
batches and any thread count give the same bits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hopmem
from conftest import assert_batch_agrees_with_single_reads
from hopmem import InvalidInput, Memory
from hopmem.engine import _kernel
from hopmem.errors import DimensionMismatch

U32 = 2.0 ** -24


@pytest.fixture(autouse=True, scope="module")
def _float32_batches():
    """Blocked batches here take the float32 BLAS path, whose bound this module holds, whatever
    HOPMEM_AMX says (the AMX path, the default on CPUs that have it: tests/test_batched_amx.py)."""
    from hopmem.engine import _batched

    before = _batched.use_amx(False)
    yield
    _batched.use_amx(before)


def score_error(d: int) -> float:
    """The kernel's bound on a float32 activation score (hm_score_error)."""
    return 4.0 * d * U32


def textbook64(Y: np.ndarray, c: np.ndarray, beta: float) -> np.ndarray:
    """sum_j softmax(beta c)_j Y_j in float64."""
    z = beta * c
    p = np.exp(z - z.max())
    return (p / p.sum()) @ Y


def fast_bound(Y: np.ndarray, v: np.ndarray, beta: float, d: int) -> float:
    """|read - normalize(v)|_2 for a streamed fast read (docs/hopfield.md).

    Scores within delta = 4 d 2^-24 of the float64 cosines move each weight by a
    factor within exp(+-2 beta delta), so the weights move by at most
    eps_p = exp(2 beta delta) - 1 in l1; the weighted sum by eps_p max|Y_j|
    (float64 sums add ~1e-12 of it); normalizing at most doubles the relative
    error; rounding to float32 adds 2^-23.

    A plain memory whose locations all have weight 1 reads each out as
    norm * address in float32 (the address rounded: 2^-24 of |Y_j|; the
    factor rounded to float32 and the products summed over tiles of 16 rows:
    17 2^-24 of sum_j p_j |Y_j|; taken 20 2^-24 together), the others their
    float64 counters; the bound covers both.
    """
    eps_p = math.expm1(2.0 * beta * score_error(d))
    ymax = float(np.sqrt((Y * Y).sum(axis=1)).max())
    nv = float(np.linalg.norm(v))
    if nv == 0.0:
        return math.inf
    return 2.0 * (eps_p + 20.0 * U32 + 1e-12) * ymax / nv + 2.0 * U32


def hopfield_bound(X: np.ndarray, xi: np.ndarray, beta: float, r: np.ndarray) -> float:
    """|hopfield(X, xi, beta) - textbook64|_2 for one step (docs/hopfield.md).

    Float32 scores of the float32-rounded state: within (d + 2) 2^-24 |x_j| |xi|
    each (taken 4x); float32 read-out (weights rounded to float32, fused
    multiply-adds summed over tiles of 16 rows): within 17 2^-24 of
    sum_j p_j |x_j| (taken 20); float32 result: 2^-23 |r|.
    """
    d = X.shape[1]
    xmax = float(np.sqrt((X.astype(np.float64) ** 2).sum(axis=1)).max())
    delta = 4.0 * (d + 2) * U32 * xmax * float(np.linalg.norm(xi))
    eps_p = math.expm1(2.0 * beta * delta)
    return (eps_p + 20.0 * U32) * xmax + 2.0 * U32 * float(np.linalg.norm(r))


def full_memory(X: np.ndarray, mode: str = "plain", **cfg) -> Memory:
    mem = Memory(X.shape[1], mode=mode, k=max(1, len(X)) + 3, **cfg)
    mem.write(X)
    return mem


# -- the same bits everywhere ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["plain", "competitive"])
@pytest.mark.parametrize("strategy", ["fast", "iterative"])
@pytest.mark.parametrize("n,d", [(1, 3), (7, 1), (300, 17), (700, 64)])
def test_full_activation_reads_are_one_computation(mode, strategy, n, d):
    rng = np.random.default_rng([n, d])
    X = rng.standard_normal((n, d)).astype(np.float32)
    X[n // 2] = X[0]  # duplicates
    native = full_memory(X, mode, beta=8.0)
    reference = Memory.from_config(native.config, native.snapshot(), backend="reference")
    Q = rng.standard_normal((9, d)).astype(np.float32)
    Q[3] = 0.0  # a zero query
    batch = native.read(Q, strategy)
    traces = native.analyze(Q, strategy)
    ref = reference.analyze(Q, strategy)
    for i, q in enumerate(Q):
        np.testing.assert_array_equal(native.read(q, strategy), batch[i])
        np.testing.assert_array_equal(traces[i].result, batch[i])
        scored = native.read_scored(q, strategy)
        np.testing.assert_array_equal(scored.result, batch[i])
        assert (scored.fidelity, scored.first_contact) == (traces[i].fidelity,
                                                           traces[i].first_contact)
        # The trace is the reference's: every location best first, its weights.
        np.testing.assert_array_equal(traces[i].activated, ref[i].activated)
        assert (traces[i].iterations, traces[i].converged) == (ref[i].iterations,
                                                               ref[i].converged)
        np.testing.assert_allclose(traces[i].weights, ref[i].weights, atol=2e-5)
        np.testing.assert_allclose(traces[i].result, ref[i].result, atol=2e-5)
        assert traces[i].weights.sum() == pytest.approx(1.0, abs=1e-12)


def test_full_activation_bits_do_not_depend_on_threads():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3000, 48)).astype(np.float32)
    Q = rng.standard_normal((10, 48)).astype(np.float32)
    mem = full_memory(X, beta=12.0)
    before = hopmem.get_threads()
    try:
        hopmem.set_threads(1)
        one = [mem.read(Q, s) for s in ("fast", "iterative")] + [hopmem.hopfield(X, Q, 3.0, steps=4)]
        hopmem.set_threads(4)
        _kernel.set_split(0, 0, 0)  # share even these small passes, in the smallest chunks
        many = [mem.read(Q, s) for s in ("fast", "iterative")] + [hopmem.hopfield(X, Q, 3.0, steps=4)]
    finally:
        _kernel.set_split()
        hopmem.set_threads(before)
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_pass_gives_the_same_bits_in_either_direction():
    # Passes alternate between first-to-last and last-to-first block order
    # (each starts on the rows the previous one left in cache); each block's
    # partial is its own and the merge runs in block order, so two reads in a
    # row, which run in opposite directions, give the same bits, over one
    # block and over several.
    rng = np.random.default_rng(17)
    for n in (500, 3500):
        X = rng.standard_normal((n, 24)).astype(np.float32)
        q = rng.standard_normal(24).astype(np.float32)
        mem = full_memory(X, beta=9.0)
        for strategy in ("fast", "iterative"):
            first, second = mem.read(q, strategy), mem.read(q, strategy)
            np.testing.assert_array_equal(first, second)
        first, second = hopmem.hopfield(X, q, 2.0), hopmem.hopfield(X, q, 2.0)
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("n, d", [(1, 1), (37, 5), (700, 33), (300, 384), (129, 17), (40, 600),
                                  (1100, 4)])
def test_the_portable_stream_gives_the_bits_of_the_vector_one(n, d):
    # fmaf/fma per lane and the block's own exp against AVX2+FMA instructions:
    # the same operations, each correctly rounded. Tiles of 16 rows and groups
    # of four end mid-block (n = 129, 37), two blocks of up to 1,024 rows are
    # merged (n = 1,100), long rows read out a query at a time (d = 600),
    # merged locations read out their float64 counters, and a large beta
    # raises the block's reference logit (and rescales) often, down to
    # weights of 0.
    rng = np.random.default_rng(11)
    X = rng.standard_normal((n, d)).astype(np.float32)
    Q = rng.standard_normal((6, d)).astype(np.float32)
    mem = full_memory(X, beta=7.0)
    merged = full_memory(X, beta=40.0)
    if n > 2:
        merged.compress(max_locations=max(1, n - n // 4))
    runs = []
    for portable in (False, True):
        _kernel.stream_force_portable(portable)
        try:
            runs.append([mem.read(Q, "fast"), mem.read(Q, "iterative"), mem.read(Q[0], "fast"),
                         mem.read(Q[0], "iterative"), hopmem.hopfield(X, Q, 0.5, steps=3),
                         hopmem.hopfield(X, Q[:1], 0.5, steps=3),
                         hopmem.hopfield(X, Q[:5], 900.0, steps=2),
                         merged.read(Q, "fast"), merged.read(Q[2], "fast"),
                         mem.analyze(Q[1], "iterative").weights])
        finally:
            _kernel.stream_force_portable(False)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_plain_memory_with_merged_locations_still_reads_iteratively():
    # A merged location (weight 2) has a unit pattern that is not its address:
    # the iterative read takes the ranked path; the fast read still streams.
    rng = np.random.default_rng(9)
    X = rng.standard_normal((40, 8)).astype(np.float32)
    mem = full_memory(X, beta=6.0)
    mem.compress(max_locations=30)
    assert (mem.weights != 1.0).any()
    reference = Memory.from_config(mem.config, mem.snapshot(), backend="reference")
    Q = rng.standard_normal((5, 8)).astype(np.float32)
    for strategy in ("fast", "iterative"):
        np.testing.assert_allclose(mem.read(Q, strategy), reference.read(Q, strategy), atol=2e-5)


def norms_now(mem: Memory) -> np.ndarray:
    """The row norms the kernel computes from the counters as they are now."""
    state = mem._state
    kept = state.norms.copy()
    _kernel.sync_norms(state)
    fresh = state.norms.copy()
    state.norms[:] = kept
    return fresh[: state.size]


def test_plain_row_norms_never_go_stale():
    # The norms a plain memory's fast read scales its addresses by are kept by
    # every change of a row: writes (with growth), merges, compress, restore,
    # adoption; always the kernel's |counters row|, bit for bit.
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((300, 12)) * rng.uniform(0.1, 10.0, (300, 1))).astype(np.float32)
    mem = Memory(12, mode="plain", k=1000, beta=5.0)
    assert Memory(12, k=5)._state.norms is None  # competitive: none kept
    assert Memory(12, mode="plain", backend="reference")._state.norms is None

    def check() -> None:
        n = len(mem)
        np.testing.assert_array_equal(mem._state.norms[:n], norms_now(mem))
        np.testing.assert_allclose(mem._state.norms[:n], np.linalg.norm(mem.counters, axis=1),
                                   rtol=1e-14)

    for part in np.array_split(X, 7):
        mem.write(part)
        check()
    snap = mem.snapshot()
    q = X[5] + 0.1 * rng.standard_normal(12).astype(np.float32)
    before = mem.read(q, "fast")
    mem.write(X[:50] * 3.0)
    mem.compress(max_locations=200)
    check()
    assert (mem.weights != 1.0).any()
    mem.restore(snap)
    check()
    np.testing.assert_array_equal(mem.read(q, "fast"), before)
    again = Memory.from_config(mem.config, snap)
    np.testing.assert_array_equal(again._state.norms[: len(again)], norms_now(again))
    np.testing.assert_array_equal(again.read(q, "fast"), before)
    from hopmem.engine._state import restore_capacity  # adoption takes over spare-capacity arrays

    n = len(snap.ids)
    spare = [np.zeros((restore_capacity(n),) + a.shape[1:], a.dtype) for a in
             (snap.ids, snap.addresses, snap.counters, snap.weights)]
    for buf, a in zip(spare, (snap.ids, snap.addresses, snap.counters, snap.weights),
                      strict=True):
        buf[:n] = a
    adopted = Memory.adopting(mem.config, type(snap)(
        ids=spare[0][:n], addresses=spare[1][:n], counters=spare[2][:n], weights=spare[3][:n],
        eta=snap.eta, writes=snap.writes, next_id=snap.next_id, rng=snap.rng))
    assert adopted._state.counters is spare[2]
    np.testing.assert_array_equal(adopted._state.norms[:n], norms_now(adopted))
    np.testing.assert_array_equal(adopted.read(q, "fast"), before)


@pytest.mark.parametrize("scale", [1e-30, 1e36])
def test_plain_fast_read_of_extreme_inputs_keeps_the_float64_read_out(scale):
    # Norms outside float32's comfortable range: the counters are read out.
    rng = np.random.default_rng(6)
    X = rng.standard_normal((40, 8)).astype(np.float64) * scale
    mem = full_memory(X.astype(np.float32), beta=4.0)
    Q = rng.standard_normal((3, 8)).astype(np.float32)
    got = mem.read(Q, "fast")
    assert np.isfinite(got).all()
    reference = Memory.from_config(mem.config, mem.snapshot(), backend="reference")
    np.testing.assert_allclose(got, reference.read(Q, "fast"), atol=2e-5)


# -- the error bound against a float64 textbook ------------------------------------------------

betas = st.sampled_from([1e-6, 0.5, 5.0, 30.0, 200.0])


@st.composite
def memories(draw):
    n = draw(st.integers(1, 300))
    d = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * draw(st.sampled_from([1.0, 1e-3, 1e6]))
    if draw(st.booleans()):
        X[rng.integers(0, n, max(1, n // 4))] = X[0]  # duplicates
    if draw(st.booleans()):
        X[rng.integers(0, n)] = 0.0  # a zero pattern
    q = rng.standard_normal(d)
    if draw(st.booleans()):
        q = X[rng.integers(0, n)] + 0.1 * q  # near a stored pattern
    return X.astype(np.float32), q.astype(np.float32)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories(), betas, st.booleans())
def test_streamed_fast_read_is_within_its_bound_of_a_float64_textbook(case, beta, strided):
    X, q = case
    n, d = X.shape
    mem = full_memory(X, beta=beta)
    if strided:  # a non-contiguous query takes the validating path: the same read
        buf = np.zeros((d, 2), dtype=np.float32)
        buf[:, 0] = q
        query = buf[:, 0]
    else:
        query = q
    got = mem.read(query, "fast").astype(np.float64)
    A = mem.addresses.astype(np.float64)
    Y = mem.counters / mem.weights[:, None]
    q64 = q.astype(np.float64)
    nq = np.linalg.norm(q64)
    c = A @ (q64 / nq) if nq >= 1e-12 else np.zeros(n)
    v = textbook64(Y, c, beta)
    want = v / np.linalg.norm(v) if np.linalg.norm(v) >= 1e-12 else v
    assert np.linalg.norm(got - want) <= fast_bound(Y, v, beta, d)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memories(), betas, st.integers(1, 4))
def test_hopfield_step_is_within_its_bound_of_a_float64_textbook(case, beta, m):
    X, q = case
    X = X / max(1.0, float(np.abs(X).max()))  # keep X @ xi inside float32's range
    rng = np.random.default_rng(m)
    Q = np.stack([q / max(1.0, float(np.abs(q).max()))]
                 + [rng.standard_normal(X.shape[1]).astype(np.float32) for _ in range(m - 1)])
    out = hopmem.hopfield(X, Q, beta)
    X64 = X.astype(np.float64)
    for xi, got in zip(Q, out, strict=True):
        r = textbook64(X64, X64 @ xi.astype(np.float64), beta)
        assert np.linalg.norm(got - r) <= hopfield_bound(X, xi, beta, r)
        np.testing.assert_array_equal(hopmem.hopfield(X, xi, beta), got)  # batch == single


# -- batches of plain full-activation reads: blocked matrix products -----------------------


def batch_bound(Y: np.ndarray, v: np.ndarray, beta: float, d: int) -> float:
    """|batch read - normalize(v)|_2 for a blocked batch read (docs/hopfield.md).

    Float32 GEMM scores within delta = 4 d 2^-24 of the cosines, the float32
    logit and its shift by the tile's maximum add 3 beta 2^-24: the weights
    move by a factor within exp(+-2 beta (delta + 3 2^-24)); float32 exp (at
    most 4 2^-24 off) and the scale by the rounded norm add 8 2^-24. The
    read-out (a float32 GEMM over a tile of at most TILE_ROWS rows, the
    address rounded) is within (TILE_ROWS + 1) 2^-24 of sum_j p_j |Y_j|;
    normalizing at most doubles it; float32 adds 2^-23.
    """
    from hopmem.engine._batched import TILE_ROWS

    eps_b = math.expm1(2.0 * beta * (score_error(d) + 3.0 * U32)) + 8.0 * U32
    ymax = float(np.sqrt((Y * Y).sum(axis=1)).max())
    nv = float(np.linalg.norm(v))
    if nv == 0.0:
        return math.inf
    return 2.0 * (eps_b + (TILE_ROWS + 1) * U32 + 1e-12) * ymax / nv + 2.0 * U32


@st.composite
def batch_cases(draw):
    from hopmem.engine._batched import MIN_BATCH, MIN_ROWS

    n = draw(st.integers(MIN_ROWS, 2600))  # one to three tiles
    d = draw(st.integers(1, 24))
    m = draw(st.integers(MIN_BATCH, MIN_BATCH + 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * draw(st.sampled_from([1.0, 1e-3, 1e6]))
    if draw(st.booleans()):
        X[rng.integers(0, n, max(1, n // 4))] = X[0]  # duplicates
    if draw(st.booleans()):
        X[rng.integers(0, n)] = 0.0  # a zero pattern
    Q = rng.standard_normal((m, d))
    near = rng.integers(0, n, m)
    Q[: m // 2] = X[near[: m // 2]] + 0.1 * Q[: m // 2]  # near stored patterns
    Q[-1] = 0.0  # a zero query
    return X.astype(np.float32), Q.astype(np.float32)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_cases(), betas)
def test_blocked_batch_read_is_within_its_bound_of_a_float64_textbook(case, beta):
    from hopmem.engine import _batched

    X, Q = case
    n, d = X.shape
    mem = full_memory(X, beta=beta)
    assert _batched.applies(mem._state, mem.config, len(Q), True)
    got = mem.read(Q, "fast").astype(np.float64)
    np.testing.assert_array_equal(mem.read(Q, "fast"), got.astype(np.float32))  # deterministic
    A = mem.addresses.astype(np.float64)
    Y = mem.counters / mem.weights[:, None]
    for q, row in zip(Q.astype(np.float64), got, strict=True):
        nq = np.linalg.norm(q)
        c = A @ (q / nq) if nq >= 1e-12 else np.zeros(n)
        v = textbook64(Y, c, beta)
        want = v / np.linalg.norm(v) if np.linalg.norm(v) >= 1e-12 else v
        assert np.linalg.norm(row - want) <= batch_bound(Y, v, beta, d)


def test_blocked_batch_reads_agree_with_single_reads():
    # Not the same bits (BLAS sums in its own order), the same reads: fast
    # within the bound above, iterative (3 steps) as close, the same bits every
    # time and on any number of hopmem threads (BLAS is pinned).
    from hopmem.engine import _batched

    rng = np.random.default_rng(12)
    X = rng.standard_normal((3000, 48)).astype(np.float32)
    Q = (X[rng.integers(0, 3000, 40)] + 0.3 * rng.standard_normal((40, 48))).astype(np.float32)
    mem = full_memory(X, beta=6.0, t_max=3, epsilon=0.0)
    for strategy in ("fast", "iterative"):
        assert _batched.applies(mem._state, mem.config, len(Q), strategy == "fast")
        assert_batch_agrees_with_single_reads(mem, Q, strategy, atol=2e-6)


def test_batches_the_blocked_path_does_not_serve_are_the_kernels_bits():
    # Below MIN_BATCH queries or MIN_ROWS locations, k < L, competitive
    # memories and merged locations (weight != 1): the kernel, bit-equal to
    # single reads.
    from hopmem.engine import _batched

    rng = np.random.default_rng(13)
    X = rng.standard_normal((600, 16)).astype(np.float32)
    Q = rng.standard_normal((_batched.MIN_BATCH + 4, 16)).astype(np.float32)
    merged = full_memory(X, beta=5.0)
    merged.compress(max_locations=500)
    small = full_memory(X[: _batched.MIN_ROWS - 1], beta=5.0)
    topk = Memory(16, mode="plain", k=20, beta=5.0)
    topk.write(X)
    competitive = full_memory(X, "competitive", beta=5.0)
    few = full_memory(X, beta=5.0)
    for mem, Qm in ((merged, Q), (small, Q), (topk, Q), (competitive, Q),
                    (few, Q[: _batched.MIN_BATCH - 1])):
        for strategy in ("fast", "iterative"):
            assert not _batched.applies(mem._state, mem.config, len(Qm), strategy == "fast")
            batch = mem.read(Qm, strategy)
            for q, row in zip(Qm, batch, strict=True):
                np.testing.assert_array_equal(mem.read(q, strategy), row)


# -- hopmem.hopfield: the functional entry point ---------------------------------------------


def numpy_update(X, xi, beta, steps):
    for _ in range(steps):
        s = beta * (X @ xi)
        p = np.exp(s - s.max())
        xi = X.T @ (p / p.sum())
    return xi


def test_hopfield_is_the_numpy_ten_lines():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 64)).astype(np.float32) / 8
    Q = X[:5] + 0.05 * rng.standard_normal((5, 64)).astype(np.float32)
    for steps in (1, 3):
        got = hopmem.hopfield(X, Q, 4.0, steps=steps)
        want = np.stack([numpy_update(X.astype(np.float64), x.astype(np.float64), 4.0, steps)
                         for x in Q])
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
        assert got.dtype == np.float32 and got.shape == Q.shape
    assert hopmem.hopfield(X, Q[0], 4.0).shape == (64,)


def test_hopfield_reads_the_callers_array_in_place():
    from hopmem.engine.functional import _patterns

    X = np.random.default_rng(1).standard_normal((50, 6)).astype(np.float32)
    X.flags.writeable = False  # read, never written
    assert _patterns(X) is X
    hopmem.hopfield(X, X[0], 2.0)
    # Anything else is converted first: the same answer.
    Xf = np.asfortranarray(X)
    assert _patterns(Xf) is not Xf
    np.testing.assert_array_equal(hopmem.hopfield(Xf, X[:3], 2.0), hopmem.hopfield(X, X[:3], 2.0))
    np.testing.assert_array_equal(hopmem.hopfield(X.astype(np.float64).tolist(), X[:3], 2.0),
                                  hopmem.hopfield(X, X[:3], 2.0))


def test_hopfield_stops_early_at_epsilon():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((100, 16)).astype(np.float32)
    q = X[3] * 1.01
    fixed = hopmem.hopfield(X, q, 5.0, steps=50, epsilon=1e-6)
    _, its = _kernel.hopfield(X, q.reshape(1, -1), 5.0, 50, 1e-6)
    assert 1 <= its[0] < 50
    np.testing.assert_allclose(hopmem.hopfield(X, fixed, 5.0), fixed, atol=1e-5)


@pytest.mark.parametrize("kwargs,message", [
    (dict(beta=0.0), "beta: expected a finite number > 0, got 0.0"),
    (dict(beta=float("inf")), "beta: expected a finite number > 0, got inf"),
    (dict(beta="1"), "beta: expected a real number, got '1'"),
    (dict(steps=0), "steps: expected an integer >= 1, got 0"),
    (dict(steps=True), "steps: expected an integer >= 1, got True"),
    (dict(epsilon=-0.1), "epsilon: expected a finite number >= 0, got -0.1"),
])
def test_hopfield_validates_its_arguments(kwargs, message):
    X = np.ones((3, 2), dtype=np.float32)
    args = dict(beta=1.0) | kwargs
    beta = args.pop("beta")
    with pytest.raises(InvalidInput) as err:
        hopmem.hopfield(X, X[0], beta, **args)
    assert str(err.value) == message


def test_hopfield_validates_its_arrays():
    X = np.ones((3, 2), dtype=np.float32)
    with pytest.raises(InvalidInput, match=r"^patterns: expected shape \(n, d\), got shape \(2,\)$"):
        hopmem.hopfield(X[0], X[0], 1.0)
    with pytest.raises(InvalidInput, match=r"^patterns: expected at least one row"):
        hopmem.hopfield(np.zeros((0, 2), np.float32), X[0], 1.0)
    with pytest.raises(InvalidInput, match=r"^patterns: expected real numbers, got complex$"):
        hopmem.hopfield(X.astype(complex), X[0], 1.0)
    with pytest.raises(DimensionMismatch):
        hopmem.hopfield(X, np.ones(3, np.float32), 1.0)
    with pytest.raises(InvalidInput, match=r"^queries\[1\]: expected a finite float32 value"):
        hopmem.hopfield(X, np.array([1.0, np.nan], np.float32), 1.0)
    bad = X.copy()
    bad[2, 1] = np.inf
    with pytest.raises(InvalidInput, match=r"^patterns\[2, 1\]: expected a finite float32 value"):
        hopmem.hopfield(bad, X[0], 1.0)
    with pytest.raises(InvalidInput, match=r"^queries: expected dot products with the patterns"):
        hopmem.hopfield(X * 1e30, X[0] * 1e30, 1.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 2500), st.integers(1, 40), st.sampled_from([0.5, 30.0, 2000.0]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_a_rising_maximum_keeps_the_streamed_reads_within_their_bounds(n, d, beta, rising, seed):
    # Rows sorted by their score against the query, ascending: a block's
    # reference logit rises at every tile whose largest logit exceeds it by
    # more than the slack, so what the block has summed is rescaled up to
    # once a tile (and, with a large beta, most weights are below the
    # smallest double: exp underflows to 0 as the C library's does), with
    # weights up to exp(slack) in between. Descending: it never rises after
    # the block's first rows. Both are the same memory in another row order,
    # within the same bounds; up to 2,500 rows, so up to three blocks.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    order = np.argsort(X.astype(np.float64) @ q.astype(np.float64))
    X = np.ascontiguousarray(X[order if rising else order[::-1]])
    mem = full_memory(X, beta=beta)
    got = mem.read(q, "fast").astype(np.float64)
    A = mem.addresses.astype(np.float64)
    Y = mem.counters / mem.weights[:, None]
    q64 = q.astype(np.float64)
    v = textbook64(Y, A @ (q64 / np.linalg.norm(q64)), beta)
    assert np.linalg.norm(got - v / np.linalg.norm(v)) <= fast_bound(Y, v, beta, d)
    Xs = X / max(1.0, float(np.abs(X).max()))
    qs = q / max(1.0, float(np.abs(q).max()))
    X64 = Xs.astype(np.float64)
    r = textbook64(X64, X64 @ qs.astype(np.float64), beta)
    assert np.linalg.norm(hopmem.hopfield(Xs, qs, beta) - r) <= hopfield_bound(Xs, qs, beta, r)
