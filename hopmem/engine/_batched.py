"""Batched full-activation reads of a plain memory as blocked matrix products.

A batch of queries against a plain memory that activates every location
(``k >= L``) and whose locations are each one written input (weight 1) is the
modern Hopfield update for many queries at once, which runs at matrix-product
speed. Rows go in tiles: per tile, the scores of every query (queries x
rows), each query's running maximum logit, the weights ``exp(logit - max)``
(float32), and the weighted sum of the tile's rows (a second product), added
in float64 to the query's accumulator after rescaling by ``exp(old max - new
max)``: the online softmax of the streamed kernel with a GEMM-sized tile. A
fast read reads each location out as its norm times its address (the input it
holds), an iterative step the addresses (its unit patterns), as the streamed
kernel does.

Two ways to compute the products:

- **AMX bf16 tiles**, the default where the CPU has them (Intel AMX-TILE and
  AMX-BF16, and Linux grants the process the tile state; ``amx_active``);
  ``HOPMEM_AMX=0`` in the environment or ``use_amx(False)`` keeps float32
  BLAS: each float32
  operand split into two bf16 pieces (``x = hi + lo`` within 2^-16 of x) and
  the three products ``hi hi + hi lo + lo hi`` summed in float32 on the tiles
  (kernels/amx_batch.c), scores over tiles of ``AMX_TILE_ROWS`` rows, the
  read-out over ``TILE_ROWS``. The addresses' pieces, in both products'
  layouts, are packed once per state (8 bytes per address element with
  padding: twice the float32 addresses) and rebuilt after any change.
- **float32 BLAS** (``sgemm``), elsewhere, tiles of ``TILE_ROWS`` rows.

Neither is the kernel's fixed order, so a batch is not bit-equal to single
reads; each stays within the bound docs/hopfield.md gives for it
(tests/test_hopfield.py and tests/test_batched_amx.py enforce them against a
float64 evaluation). The bits are deterministic: the AMX products run on the
calling thread in a fixed order; BLAS's for a given BLAS and BLAS thread count
(the engine pins BLAS to ``HOPMEM_BLAS_THREADS``, one by default). Batches
below ``MIN_BATCH`` queries, memories below ``MIN_ROWS`` locations, and
memories this does not apply to are read by the kernel (bit-equal to single
reads).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np

from . import _kernel

__all__ = ["TILE_ROWS", "MIN_BATCH", "MIN_ROWS", "AMX_TILE_ROWS", "SCORE_PRECISION", "READ_PRECISION",
           "applies", "read_batch", "amx_active", "use_amx", "packed_bytes"]

TILE_ROWS = 1024  # rows per tile: the read-out's float32 sums run over at most this many
MIN_BATCH = 16    # fewer queries: the kernel's streamed pass (four queries a pass) is as fast
MIN_ROWS = 256    # fewer locations: per-tile overheads outweigh the GEMM
_TINY = 1e-12     # HM_TINY: a query or state shorter than this scores zero
_NORM_MIN, _NORM_MAX = 1e-20, 1e30  # the kernel's range for a read-out by norm


def applies(state: Any, cfg: Any, nq: int, fast: bool) -> bool:
    """Whether a batch of ``nq`` reads of this memory takes the blocked path."""
    n = int(state.size)
    if nq < MIN_BATCH or n < MIN_ROWS or cfg.mode != "plain" or cfg.k < n:
        return False
    if state.norms is None or not bool((state.weights[:n] == 1.0).all()):
        return False
    if fast:
        top = float(state.norms[:n].max())
        return _NORM_MIN <= top <= _NORM_MAX
    return True


def _unit32(V: np.ndarray) -> np.ndarray:
    """Rows of ``V`` (float64) made unit and rounded to float32; zeros when shorter than TINY."""
    norms = np.sqrt(np.einsum("ij,ij->i", V, V))
    out = np.zeros(V.shape, dtype=np.float32)
    ok = norms >= _TINY
    out[ok] = V[ok] / norms[ok, None]
    return out


def _normalized(V: np.ndarray) -> np.ndarray:
    """Rows of ``V`` over their norms, in place; rows shorter than TINY left as they are."""
    norms = np.sqrt(np.einsum("ij,ij->i", V, V))
    ok = norms >= _TINY
    V[ok] /= norms[ok, None]
    return V


# -- AMX bf16 tiles ---------------------------------------------------------------------------

AMX_TILE_ROWS = 2048  # rows per tile of scores and softmax (the read-out still sums TILE_ROWS)
SCORE_PRECISION = 3  # products of pieces for the scores: 3 (two pieces a side) or 6 (three)
READ_PRECISION = 3   # and for the read-out (3 only: its bound in the tests assumes it)
_PIECES = {3: 2, 6: 3}
# On where the CPU has AMX unless HOPMEM_AMX=0: within 1.3x of a float32 GEMM's
# share for a batch of 64 where it was measured (docs/hopfield.md), 2x faster
# than float32 BLAS, within its own documented bound.
_amx_on = os.environ.get("HOPMEM_AMX", "").strip() != "0"


def use_amx(on: bool) -> bool:
    """Let blocked batches run on AMX bf16 tiles where the CPU has them (``True``, the
    default unless ``HOPMEM_AMX=0``), or keep float32 BLAS (``False``). For tests and
    comparisons; not thread-safe. Returns the previous setting."""
    global _amx_on
    before, _amx_on = _amx_on, bool(on)
    return before


def amx_active() -> bool:
    """Whether blocked batches run on AMX bf16 tiles here (the CPU has them and they are on)."""
    return _amx_on and _kernel.amx_available()


def _pad(n: int) -> int:
    return (n + 31) // 32 * 32


class _Packed:
    """The addresses' bf16 pieces, per tile of rows, in both products' layouts."""

    def __init__(self, state: Any) -> None:
        n, d = int(state.size), int(state.dim)
        A = state.addresses[:n]
        self.addresses = weakref.ref(state.addresses)
        self.key = (n, int(state.writes), int(state.next_id))
        dp = _pad(d)
        sp, rp = _PIECES[SCORE_PRECISION], _PIECES[READ_PRECISION]
        # scores: B = tile^T (d x rows), tiles of AMX_TILE_ROWS; read-out:
        # B = tile (rows x d), tiles of TILE_ROWS (the float32 sums' length)
        self.scores = [_kernel.amx_pack_b(A[lo:lo + AMX_TILE_ROWS].T, sp, dp,
                                          _pad(len(A[lo:lo + AMX_TILE_ROWS])))
                       for lo in range(0, n, AMX_TILE_ROWS)]
        self.reads = [_kernel.amx_pack_b(A[lo:lo + TILE_ROWS], rp, _pad(len(A[lo:lo + TILE_ROWS])), dp)
                      for lo in range(0, n, TILE_ROWS)]
        self.nbytes = sum(b.nbytes for b in self.scores) + sum(b.nbytes for b in self.reads)
        # a fast read's scale (the norms, float32), converted once per state
        self.norms = None if state.norms is None else state.norms[:n].astype(np.float32)

    def fresh(self, state: Any) -> bool:
        return (self.addresses() is state.addresses
                and self.key == (int(state.size), int(state.writes), int(state.next_id)))


_PACKED: weakref.WeakKeyDictionary[Any, _Packed] = weakref.WeakKeyDictionary()
_PACK_LOCK = threading.Lock()


def _packed(state: Any) -> _Packed:
    """The state's packed pieces, built on first use and again after any change."""
    with _PACK_LOCK:
        got = _PACKED.get(state)
        if got is None or not got.fresh(state):
            del got
            _PACKED.pop(state, None)  # free the stale pieces before building
            got = _Packed(state)
            _PACKED[state] = got
        return got


def packed_bytes(state: Any) -> int:
    """Bytes held for the state's AMX pieces (0 when none are built)."""
    got = _PACKED.get(state)
    return 0 if got is None else got.nbytes


def _step_amx(P: _Packed, scale: np.ndarray | None, Qu: np.ndarray, beta: float,
              n: int) -> np.ndarray:
    """``_step`` with both products on AMX tiles; the softmax of a tile (maxima, ``exp``,
    norms, the weights' pieces) in one C pass, the accumulator rescaled and added in another."""
    nq, d = Qu.shape
    mp, dp = _pad(nq), _pad(d)
    sp, rp = _PIECES[SCORE_PRECISION], _PIECES[READ_PRECISION]
    Qs = np.empty((sp, mp, dp), dtype=np.uint16)
    b = np.float32(beta)
    # the pieces of beta q (float32 products): the products give the logits
    _kernel.amx_split(Qu, np.full(d, b, dtype=np.float32), sp, mp, dp, Qs)
    # two score tiles: the next one's products run while this one's softmax
    # pass runs between them (one C call, the same bits as two)
    S = [np.empty((mp, _pad(min(n, AMX_TILE_ROWS))), dtype=np.float32) for _ in range(2)]
    # the weights' pieces for each TILE_ROWS block of a score tile, one after another
    W = np.empty(rp * mp * AMX_TILE_ROWS, dtype=np.uint16)
    Y = np.empty((mp, dp), dtype=np.float32)
    M = np.full(nq, -np.inf)
    new = np.empty(nq)
    acc = np.zeros((nq, d))
    starts = list(range(0, n, AMX_TILE_ROWS))
    _kernel.amx_gemm(Qs, P.scores[0], S[0][:, :_pad(min(AMX_TILE_ROWS, n))], SCORE_PRECISION)
    for t, lo in enumerate(starts):
        nt = min(AMX_TILE_ROWS, n - lo)
        St = S[t % 2]  # float32 logits (beta q . a), queries x rows
        # the running maxima and the pieces of exp(logit - max) (times the norms),
        # in one pass over the tile, beside the next tile's scores
        sc = None if scale is None else scale[lo:lo + nt]
        if t + 1 < len(starts):
            nn = min(AMX_TILE_ROWS, n - starts[t + 1])
            _kernel.amx_gemm_softmax(Qs, P.scores[t + 1], S[(t + 1) % 2][:, :_pad(nn)], SCORE_PRECISION,
                                     St, nq, nt, M, new, sc, TILE_ROWS, mp, W)
        else:
            _kernel.amx_softmax_split(St, nq, nt, M, new, sc, TILE_ROWS, mp, W)
        alpha: np.ndarray | None = np.exp(M - new)  # 0 for the first tile
        for s0 in range(0, nt, TILE_ROWS):  # read-out: float32 sums over TILE_ROWS rows
            nsp = _pad(min(TILE_ROWS, nt - s0))
            off = (s0 // TILE_ROWS) * rp * mp * TILE_ROWS
            Wt = W[off:off + rp * mp * nsp].reshape(rp, mp, nsp)
            _kernel.amx_gemm(Wt, P.reads[(lo + s0) // TILE_ROWS], Y, READ_PRECISION)
            _kernel.amx_accumulate(acc, alpha, Y)  # acc * alpha + Y, then acc + Y
            alpha = None
        M, new = new, M
    return acc


def _step(A: np.ndarray, scale: np.ndarray | None, Qu: np.ndarray, beta: float) -> np.ndarray:
    """sum_j exp(beta A_j . q - M_q) scale_j A_j for each unit float32 query q (float64 rows)."""
    nq, d = Qu.shape
    n = A.shape[0]
    M = np.full(nq, -np.inf)
    acc = np.zeros((nq, d))
    b = np.float32(beta)
    for lo in range(0, n, TILE_ROWS):
        At = A[lo:lo + TILE_ROWS]
        S = Qu @ At.T  # float32 logits, queries x rows
        S *= b
        top = S.max(axis=1).astype(np.float64)
        new = np.maximum(M, top)
        S -= new.astype(np.float32)[:, None]  # each max a float32 value: exact
        np.exp(S, out=S)
        if scale is not None:
            S *= scale[lo:lo + TILE_ROWS]
        Y = S @ At
        acc *= np.exp(M - new)[:, None]  # 0 for the first tile
        acc += Y
        M = new
    return acc


def read_batch(state: Any, cfg: Any, Q: np.ndarray, fast: bool) -> np.ndarray:
    """The reconstructions (float32 (nq, d)) of a batch this applies to."""
    n = int(state.size)
    A = state.addresses[:n]
    beta = float(cfg.beta)
    step: Any
    norms: np.ndarray | None = None
    if amx_active():
        packed = _packed(state)
        norms = packed.norms

        def step(A: np.ndarray, scale: np.ndarray | None, Qu: np.ndarray, beta: float) -> np.ndarray:
            return _step_amx(packed, scale, Qu, beta, n)
    else:
        step = _step
    if fast:
        scale = state.norms[:n].astype(np.float32) if norms is None else norms
        acc = step(A, scale, _unit32(Q.astype(np.float64)), beta)
        return _normalized(acc).astype(np.float32)
    xi = _normalized(Q.astype(np.float64))
    steps = np.zeros(len(Q), dtype=np.int64)
    active = np.arange(len(Q)) if cfg.t_max > 0 else np.arange(0)
    while active.size:
        nxt = _normalized(step(A, None, _unit32(xi[active]), beta))
        old = xi[active]
        na = np.sqrt(np.einsum("ij,ij->i", old, old))
        nb = np.sqrt(np.einsum("ij,ij->i", nxt, nxt))
        dots = np.einsum("ij,ij->i", old, nxt)
        ok = (na >= _TINY) & (nb >= _TINY)
        cos = np.where(ok, dots / np.where(ok, na * nb, 1.0), 0.0)
        xi[active] = nxt
        steps[active] += 1
        keep = ~(cos > 1.0 - cfg.epsilon) & (steps[active] < cfg.t_max)
        active = active[keep]
    return xi.astype(np.float32)
