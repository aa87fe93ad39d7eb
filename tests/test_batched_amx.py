"""Blocked batch reads on AMX bf16 tiles (hopmem/engine/_batched.py, kernels/amx_batch.c).

Where the CPU has AMX, a blocked batch computes both products of a tile on
bf16 tiles: the scores from three bf16 pieces of each float32 operand (six
products), the read-out from two (three products). It is held here to the
error bound docs/hopfield.md states for it (``amx_bound``) against a float64
textbook, to the same bits every time, and its packed pieces to the state
they were built from. The AMX path is the default where the CPU has it
(``HOPMEM_AMX=0`` or ``_batched.use_amx(False)`` keeps float32 BLAS; this
module turns it on for its tests whatever the environment says). Machines without AMX run the float32 path (held to its
own bound in tests/test_hopfield.py) and skip the AMX tests; the switch that
keeps the float32 path is tested everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_batch_agrees_with_single_reads
from hopmem import Memory
from hopmem.engine import _batched, _kernel

U32 = 2.0 ** -24

needs_amx = pytest.mark.skipif(
    not _kernel.amx_available(),
    reason="this CPU, OS or build does not run AMX bf16 tiles (the float32 fallback serves batches)")


@pytest.fixture(autouse=True, scope="module")
def _amx_on() -> Iterator[None]:
    """Batches take AMX tiles here (where the CPU has them) whatever HOPMEM_AMX says."""
    before = _batched.use_amx(True)
    yield
    _batched.use_amx(before)


@pytest.fixture
def fallback() -> Iterator[None]:
    """Batches read with float32 BLAS for the test's length."""
    before = _batched.use_amx(False)
    try:
        yield
    finally:
        _batched.use_amx(before)


def full_memory(X: np.ndarray, beta: float, k: int = 0, **cfg: float) -> Memory:
    mem = Memory(X.shape[1], mode="plain", k=k or len(X) + 3, beta=beta, **cfg)
    mem.write(X)
    return mem


def textbook64(Y: np.ndarray, c: np.ndarray, beta: float) -> np.ndarray:
    """sum_j softmax(beta c)_j Y_j in float64."""
    z = beta * c
    p = np.exp(z - z.max())
    return (p / p.sum()) @ Y


def amx_bound(Y: np.ndarray, v: np.ndarray, beta: float, d: int) -> float:
    """|batch read - normalize(v)|_2 for a blocked batch read on AMX tiles (docs/hopfield.md).

    A product of pieces is exact in float32; the tiles' float32 sums err by at
    most one unit in the last place (2^-23) an added product. Scores, as a
    fraction of |q| |a_j| = 1 (the query rounded to float32: 2^-24): with
    two pieces a side (precision 3) each operand keeps its value within 2^-16
    and the three products drop at most 2^-14 of a term, and the sums of 3 d
    products add 6 d 2^-24; with three pieces (precision 6) a float32 is held
    exactly, the six products drop at most 2^-23, and the sums of 6 d
    products add 12 d 2^-24 (flushed subnormal pieces at most d 2^-100). The
    logit (beta q rounded before the product), its shift and exp and the
    scale by the norm add what the float32 path's do. Read-out (precision 3):
    2^-14 of each term dropped, the sums of 3 T products a tile 6 T 2^-24,
    the address's rounding 2^-24; weights that flush to zero (below 2^-109)
    at most n 2^-109 in all.
    """
    from hopmem.engine._batched import READ_PRECISION, SCORE_PRECISION, TILE_ROWS

    assert (SCORE_PRECISION, READ_PRECISION) in ((3, 3), (6, 3))
    if SCORE_PRECISION == 6:
        delta = (12.0 * d + 3.0) * U32
    else:
        delta = 6.0 * d * U32 + 2.0 ** -14
    delta += U32 + d * 2.0 ** -100
    eps = math.expm1(2.0 * beta * (delta + 3.0 * U32)) + 8.0 * U32
    read = (6.0 * TILE_ROWS + 1.0) * U32 + 2.0 ** -14
    ymax = float(np.sqrt((Y * Y).sum(axis=1)).max())
    nv = float(np.linalg.norm(v))
    if nv == 0.0:
        return math.inf
    flushed = len(Y) * 2.0 ** -109
    return 2.0 * ((eps + read + 1e-12) * ymax + flushed) / nv + 2.0 * U32


def test_the_switch_keeps_the_float32_path_everywhere(fallback):
    assert not _batched.amx_active()
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 20)).astype(np.float32)
    Q = rng.standard_normal((_batched.MIN_BATCH, 20)).astype(np.float32)
    mem = full_memory(X, beta=5.0)
    assert _batched.applies(mem._state, mem.config, len(Q), True)
    got = mem.read(Q, "fast")
    state = mem._state
    n = int(state.size)
    acc = _batched._step(state.addresses[:n], state.norms[:n].astype(np.float32),
                         _batched._unit32(Q.astype(np.float64)), 5.0)
    np.testing.assert_array_equal(got, _batched._normalized(acc).astype(np.float32))
    assert _batched.packed_bytes(state) == 0  # nothing packed for the fallback


@st.composite
def amx_cases(draw):
    n = draw(st.integers(_batched.MIN_ROWS, 4400))  # one to three tiles, any remainder
    d = draw(st.integers(1, 70))  # below, across and above multiples of 32
    m = draw(st.integers(_batched.MIN_BATCH, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * draw(st.sampled_from([1.0, 1e-3, 1e6]))
    if draw(st.booleans()):
        X[rng.integers(0, n, max(1, n // 4))] = X[0]  # duplicates
    if draw(st.booleans()):
        X[rng.integers(0, n, 3)] = 0.0  # zero patterns
    Q = rng.standard_normal((m, d))
    near = rng.integers(0, n, m)
    Q[: m // 2] = X[near[: m // 2]] + 0.1 * Q[: m // 2]  # near stored patterns
    Q[-1] = 0.0  # a zero query
    return X.astype(np.float32), Q.astype(np.float32)


@needs_amx
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(amx_cases(), st.sampled_from([1e-6, 0.5, 5.0, 30.0, 200.0, 1000.0]))
def test_amx_batch_read_is_within_its_bound_of_a_float64_textbook(case, beta):
    X, Q = case
    n, d = X.shape
    mem = full_memory(X, beta=beta)
    assert _batched.amx_active() and _batched.applies(mem._state, mem.config, len(Q), True)
    got = mem.read(Q, "fast")
    np.testing.assert_array_equal(mem.read(Q, "fast"), got)  # deterministic
    A = mem.addresses.astype(np.float64)
    Y = mem.counters / mem.weights[:, None]
    for q, row in zip(Q.astype(np.float64), got.astype(np.float64), strict=True):
        nq = np.linalg.norm(q)
        c = A @ (q / nq) if nq >= 1e-12 else np.zeros(n)
        v = textbook64(Y, c, beta)
        want = v / np.linalg.norm(v) if np.linalg.norm(v) >= 1e-12 else v
        assert np.linalg.norm(row - want) <= amx_bound(Y, v, beta, d)


@needs_amx
def test_amx_batches_agree_with_single_reads_and_ignore_thread_counts():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((3000, 48)).astype(np.float32)
    Q = (X[rng.integers(0, 3000, 40)] + 0.3 * rng.standard_normal((40, 48))).astype(np.float32)
    mem = full_memory(X, beta=6.0, t_max=3, epsilon=0.0)
    for strategy in ("fast", "iterative"):
        assert_batch_agrees_with_single_reads(mem, Q, strategy, atol=2e-5)


@needs_amx
def test_amx_pieces_follow_every_change_of_the_memory():
    # After a write, a restore or a compression the batch reads what a memory
    # built fresh with the same rows reads, bit for bit: the pieces were rebuilt.
    rng = np.random.default_rng(5)
    X = rng.standard_normal((700, 40)).astype(np.float32)
    Q = rng.standard_normal((20, 40)).astype(np.float32)
    mem = full_memory(X[:500], beta=8.0, k=1000)
    before = mem.read(Q, "fast")
    snap = mem.snapshot()
    nbytes = _batched.packed_bytes(mem._state)
    # scores: the pieces of d x rows, read-out: of rows x d, each padded to 32
    pieces = {3: 2, 6: 3}
    both = pieces[_batched.SCORE_PRECISION] + pieces[_batched.READ_PRECISION]
    assert nbytes == 2 * both * 64 * 512
    mem.write(X[500:])
    assert _batched.applies(mem._state, mem.config, len(Q), True)
    np.testing.assert_array_equal(mem.read(Q, "fast"), full_memory(X, beta=8.0).read(Q, "fast"))
    mem.restore(snap)
    np.testing.assert_array_equal(mem.read(Q, "fast"), before)
    mem.write(X[500:])
    mem.compress(max_locations=650)  # merged locations: weight 2, the kernel reads them
    assert not _batched.applies(mem._state, mem.config, len(Q), True)


@needs_amx
def test_amx_gemm_against_float64():
    rng = np.random.default_rng(9)
    M, K, N = 64, 96, 160
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    terms = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    for precision, pieces, rel in ((6, 3, (12 * K + 2) * U32), (3, 2, 2.0 ** -14 + 6 * K * U32)):
        Ap = np.empty((pieces, M, K), dtype=np.uint16)
        _kernel.amx_split(A, None, pieces, M, K, Ap)
        Bp = _kernel.amx_pack_b(B, pieces, K, N)
        C = np.empty((M, N), dtype=np.float32)
        _kernel.amx_gemm(Ap, Bp, C, precision)
        assert (np.abs(C - exact) <= rel * terms).all()
    with pytest.raises(ValueError, match="amx_gemm"):
        _kernel.amx_gemm(Ap, Bp, C, 6)  # two pieces cannot give precision 6


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@needs_amx
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.integers(1, 2500), st.sampled_from([32, 64, 1024]),
       st.floats(1e-3, 300.0), st.booleans(), st.integers(0, 2**32 - 1))
def test_amx_softmax_split_is_exp_rounded_once_then_split(nq, nt, sub, spread, scaled, seed):
    # One C pass: the running maxima, w = exp(logit - max) (float32 subtraction,
    # a float32 exp within 3 2^-24 of exp, relative), times the scale
    # in float32, split into two bf16 pieces (within 2^-16 of w, or 2^-133 where the
    # second piece is subnormal), zero padding.
    rng = np.random.default_rng(seed)
    mp = (nq + 31) // 32 * 32 + 32 * int(rng.integers(0, 2))
    S = (rng.standard_normal((nq, nt + 5)) * spread).astype(np.float32)
    m_old = np.where(rng.random(nq) < 0.5, -np.inf,
                     (S[:, :nt].max(axis=1) + rng.standard_normal(nq) * spread).astype(np.float32)
                     ).astype(np.float64)
    m_new = np.empty(nq)
    scale = (rng.random(nt) * 3).astype(np.float32) if scaled else None
    nsub = (nt + sub - 1) // sub
    W = np.full(nsub * 2 * mp * sub, 0xFFFF, dtype=np.uint16)
    _kernel.amx_softmax_split(S, nq, nt, m_old, m_new, scale, sub, mp, W)
    want_m = np.maximum(m_old, S[:, :nt].max(axis=1).astype(np.float64))
    np.testing.assert_array_equal(m_new, want_m)
    x = (S[:, :nt] - want_m.astype(np.float32)[:, None]).astype(np.float64)  # float32 subtraction
    e = np.exp(x)
    sc = np.ones(nt) if scale is None else scale.astype(np.float64)
    for b in range(nsub):
        lo, ns = b * sub, min(sub, nt - b * sub)
        pw = (ns + 31) // 32 * 32
        block = W[b * 2 * mp * sub: b * 2 * mp * sub + 2 * mp * pw].reshape(2, mp, pw)
        assert (block[:, nq:, :] == 0).all() and (block[:, :, ns:] == 0).all()
        got = _bf16(block[0, :nq, :ns]) + _bf16(block[1, :nq, :ns])
        ideal = e[:, lo:lo + ns] * sc[lo:lo + ns]
        tol = ideal * (3 * 2.0 ** -24 * (1 + U32) + U32 + 2.0 ** -16) * (1 + 2.0 ** -15) \
            + 2.0 ** -149 + 2.0 ** -133  # a piece below 2^-126 keeps bf16's subnormal spacing, 2^-133
        bad = np.abs(got - ideal) > tol
        assert not bad.any(), (got[bad][:5], ideal[bad][:5], x[:, lo:lo + ns][bad][:5])


@needs_amx
def test_amx_exp_is_within_three_units_of_float32_rounding():
    # The softmax pass's float32 exp (kernels/amx_batch.c derives 2.2 2^-24),
    # on a grid over [-150, 0] and random points: within 3 2^-24 of exp,
    # relative, for normal results, 2^-149 absolute below.
    rng = np.random.default_rng(4)
    x = np.concatenate([np.arange(-150.0, 0.0, 2.0 ** -10), -rng.random(200_000),
                        -np.abs(rng.standard_normal(200_000)) * 40, [0.0, -0.0, -1e-30, -150.5, -1e4]])
    x = x.astype(np.float32)
    got = _kernel.amx_exp(x).astype(np.float64)
    e = np.exp(x.astype(np.float64))
    normal = e >= 2.0 ** -126
    assert (np.abs(got - e)[normal] <= 3 * U32 * e[normal]).all()
    assert (np.abs(got - e)[~normal] <= 2.0 ** -149).all()
    assert got[-1] == 0.0 and got[-5] == 1.0


@needs_amx
@settings(max_examples=15, deadline=None)
@given(st.integers(1, 64), st.integers(1, 2200), st.integers(1, 300), st.booleans(), st.integers(0, 2**32 - 1))
def test_amx_gemm_softmax_gives_the_bits_of_its_two_calls(nq, nt, n_next, scaled, seed):
    # The next tile's score products with this tile's softmax pass run between
    # them: the same products and the same weights as one call after the other.
    rng = np.random.default_rng(seed)
    mp, dp = (nq + 31) // 32 * 32, 64
    A = rng.standard_normal((nq, 50)).astype(np.float32)
    Ap = np.empty((2, mp, dp), dtype=np.uint16)
    _kernel.amx_split(A, None, 2, mp, dp, Ap)
    npad = (n_next + 31) // 32 * 32
    Bp = _kernel.amx_pack_b(rng.standard_normal((50, n_next)).astype(np.float32), 2, dp, npad)
    S = (rng.standard_normal((mp, nt)) * 5).astype(np.float32)
    m_old = np.full(nq, -np.inf)
    scale = (rng.random(nt) * 2).astype(np.float32) if scaled else None
    size = ((nt + 1023) // 1024) * 2 * mp * 1024
    got_c, want_c = (np.empty((mp, npad), dtype=np.float32) for _ in range(2))
    got_w, want_w = (np.zeros(size, dtype=np.uint16) for _ in range(2))
    got_m, want_m = np.empty(nq), np.empty(nq)
    _kernel.amx_gemm_softmax(Ap, Bp, got_c, 3, S, nq, nt, m_old, got_m, scale, 1024, mp, got_w)
    _kernel.amx_gemm(Ap, Bp, want_c, 3)
    _kernel.amx_softmax_split(S, nq, nt, m_old, want_m, scale, 1024, mp, want_w)
    np.testing.assert_array_equal(got_c, want_c)
    np.testing.assert_array_equal(got_m, want_m)
    np.testing.assert_array_equal(got_w, want_w)


@pytest.mark.subprocess
def test_hopmem_amx_0_forces_float32_and_amx_is_the_default_where_the_cpu_has_it():
    import os
    import subprocess
    import sys

    code = "from hopmem.engine import _batched, _kernel; print(_batched.amx_active(), _kernel.amx_available())"
    for value, want in (("0", "False"), ("", None), ("1", None)):
        env = dict(os.environ)
        env.pop("HOPMEM_AMX", None)
        if value:
            env["HOPMEM_AMX"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        assert out[0] == (want or out[1])  # 0: float32; otherwise AMX wherever it runs


def test_the_softmax_tile_entry_points_refuse_bad_arguments_before_any_amx_instruction():
    from hopmem.engine import _kernel

    S, m = np.zeros((2, 64), np.float32), np.zeros(2)
    A, B, C = np.zeros((2, 32, 32), np.uint16), np.zeros((2, 32 * 32), np.uint16), np.zeros((32, 32), np.float32)
    for name, call in (("amx_softmax_split", lambda *a: _kernel.amx_softmax_split(*a)),
                       ("amx_gemm_softmax", lambda *a: _kernel.amx_gemm_softmax(A, B, C, 3, *a))):
        with pytest.raises(ValueError, match=f"{name}: expected S"):
            call(S, 2, 64, m, m, None, 32, 2, np.zeros(10, np.uint16))  # W too small
        with pytest.raises(ValueError, match="scale: expected 64 float32 values"):
            call(S, 2, 64, m, m, np.zeros(3, np.float32), 32, 2, np.zeros(4096, np.uint16))
