"""asv benchmarks for the durable store (hopmem.store).

Each suite works in its own temporary directory, on a collection pre-filled
with 2,000 clustered vectors (default config), so that a benchmark's setup
stays in the seconds. ``benchmarks/store_bench.py`` prints the full table
(targets, HeatherDB reference row, reopen of 100,000 writes, bytes per vector).

BLAS is pinned to one thread for the whole process (CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
from threadpoolctl import threadpool_limits

_BLAS_LIMITS = threadpool_limits(limits=1)

import hopmem  # noqa: E402

PREFILL = 2000
SEED = 0


def _data(dim: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    C = np.random.default_rng(SEED).standard_normal((200, dim))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    X = C[rng.integers(0, 200, n)] + 0.5 * rng.standard_normal((n, dim)) / np.sqrt(dim)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


class _Store:
    params = ([128, 384],)
    param_names = ["dim"]

    def setup(self, dim):
        self.tmp = tempfile.mkdtemp(prefix="hopmem-asv-")
        self.path = os.path.join(self.tmp, "bench.hopmem")
        self.db = hopmem.open(self.path, dim=dim)
        self.coll = self.db.collection("bench")
        self.coll.write(_data(dim, PREFILL, 1), metadata=list(range(PREFILL)))
        self.one = _data(dim, 1, 2)[0]
        self.hundred = _data(dim, 100, 3)
        self.meta = [{"i": i} for i in range(100)]

    def teardown(self, dim):
        self.db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class WriteSuite(_Store):
    def time_write_single(self, dim):
        self.coll.write(self.one)

    def time_write_single_metadata(self, dim):
        self.coll.write(self.one, metadata={"i": 0})

    def time_write_batch100(self, dim):
        self.coll.write(self.hundred)

    def time_write_batch100_metadata(self, dim):
        self.coll.write(self.hundred, metadata=self.meta)


class QuerySuite(_Store):
    def setup(self, dim):
        super().setup(dim)
        self.coll.resolve(self.one, limit=1, mode="indexed")  # load the document indexes once

    def time_query_indexed(self, dim):
        self.coll.resolve(self.one, limit=10, mode="indexed")

    def time_query_exact(self, dim):
        self.coll.resolve(self.one, limit=10, mode="exact")

    def time_document_get(self, dim):
        self.coll.documents.get(17)


class ReopenSuite(_Store):
    params = ([384],)

    def setup(self, dim):
        super().setup(dim)
        for seed in range(8):
            self.coll.write(_data(dim, 1000, 10 + seed))
        self.state = self.coll.snapshot()
        self.db.close()

    def teardown(self, dim):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_reopen_collection(self, dim):
        with hopmem.open(self.path) as db:
            db.collection("bench")

    def peakmem_reopen_collection(self, dim):
        with hopmem.open(self.path) as db:
            db.collection("bench")


class CheckpointSuite(_Store):
    params = ([384],)

    def time_checkpoint(self, dim):
        self.coll.checkpoint()

    def time_export(self, dim):
        self.coll.export(os.path.join(self.tmp, "export.zip"))
