"""asv benchmarks for full activation: the streamed read, its batches and hopmem.hopfield.

A plain memory with every pattern activated (``k = N``) is the modern Hopfield
update; d = 384, beta = 10, random unit patterns, iterative reads of 3 steps.
The NumPy textbook (two float32 matrix-vector products a step) runs beside them
as the reference point; ``python -m benchmarks.hopfield_compare`` gives the
interleaved side-by-side with ratios.
"""

from __future__ import annotations

import numpy as np

import hopmem
from hopmem import Memory
from hopmem.engine import _batched

D = 384
BETA = 10.0
STEPS = 3
BATCH = 64


def _patterns(n: int) -> np.ndarray:
    X = np.random.default_rng(0).standard_normal((n, D)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


class FullActivationSuite:
    params = ([1000, 10000], ["fast", "iterative"])
    param_names = ["n", "read"]

    def setup(self, n, read):
        self.X = _patterns(n)
        rng = np.random.default_rng(1)
        self.q = (self.X[7] + 0.03 * rng.standard_normal(D)).astype(np.float32)
        self.Q = (self.X[rng.integers(0, n, BATCH)]
                  + 0.03 * rng.standard_normal((BATCH, D))).astype(np.float32)
        self.steps = 1 if read == "fast" else STEPS
        self.mem = Memory(D, mode="plain", k=n, beta=BETA, t_max=self.steps, epsilon=0.0)
        self.mem.write(self.X)
        self.mem.read(self.q, read)

    def time_read(self, n, read):
        self.mem.read(self.q, read)

    def time_read_batch64(self, n, read):
        self.mem.read(self.Q, read)  # on AMX bf16 tiles where the CPU has them

    def time_read_batch64_float32(self, n, read):
        """The same batch on float32 BLAS even where the CPU has AMX (what HOPMEM_AMX=0 selects)."""
        before = _batched.use_amx(False)
        try:
            self.mem.read(self.Q, read)
        finally:
            _batched.use_amx(before)

    def time_hopfield(self, n, read):
        hopmem.hopfield(self.X, self.q, BETA, steps=self.steps)

    def time_hopfield_batch64(self, n, read):
        hopmem.hopfield(self.X, self.Q, BETA, steps=self.steps)

    def time_numpy_textbook(self, n, read):
        xi = self.q
        for _ in range(self.steps):
            s = BETA * (self.X @ xi)
            p = np.exp(s - s.max())
            xi = self.X.T @ (p / p.sum())
