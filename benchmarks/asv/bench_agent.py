"""asv benchmarks for agent memory (hopmem.agent): recall per retriever, remember, remember_many, reopen.

The memory holds 1,000 or 10,000 template statements (the agent evaluation's
latency filler, ``benchmarks/agent_eval/run.py``), built once per size in
``setup_cache`` and copied for each benchmark. The encoder is the hashing
encoder: the issue's latency target excludes encoder time, and this keeps the
suite free of the model. ``python -m benchmarks.agent_eval.run`` measures the
same recall with all-MiniLM-L6-v2 vectors, on the real questions.

BLAS is pinned to one thread for the whole process (CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from threadpoolctl import threadpool_limits

_BLAS_LIMITS = threadpool_limits(limits=1)

from benchmarks.agent_eval.run import filler_texts  # noqa: E402
from hopmem.agent import AgentMemory  # noqa: E402
from hopmem.text.encoders import HashingEncoder  # noqa: E402

ENCODER = HashingEncoder(384)
SIZES = [1000, 10000]
QUERIES = ["What did Priya note about the billing migration?", "Which ticket covers the flaky deploy?",
           "OPS-10042", "Who noted that the cache warms slowly?", "What happened on sprint 12?",
           "What is the capital of Peru?"]


def _open(path: str) -> AgentMemory:
    return AgentMemory.open(path, encoder=ENCODER, namespace="bench", clock=lambda: 1_000_000.0)


class AgentSuite:
    params = (SIZES,)
    param_names = ["entries"]
    timeout = 300

    def setup_cache(self):
        """One file per size, filled once (remember_many: batched encoding)."""
        root = tempfile.mkdtemp(prefix="hopmem-asv-agent-")
        for n in SIZES:
            mem = _open(os.path.join(root, f"{n}.db"))
            mem.remember_many(filler_texts(n), progress=False)
            mem.close()
        return root

    def setup(self, root, entries):
        self.tmp = tempfile.mkdtemp(prefix="hopmem-asv-agent-run-")
        path = os.path.join(self.tmp, "bench.db")
        shutil.copyfile(os.path.join(root, f"{entries}.db"), path)
        self.path = path
        self.mem = _open(path)
        self.mem.rank(QUERIES[0], limit=1)  # the engine is built on the first read after open: not timed here
        self.i = 0

    def teardown(self, root, entries):
        self.mem.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _query(self) -> str:
        self.i += 1
        return QUERIES[self.i % len(QUERIES)]

    def time_recall_hybrid(self, root, entries):
        self.mem.recall(self._query(), record=False)

    def time_recall_associative(self, root, entries):
        self.mem.recall(self._query(), mode="associative", record=False)

    def time_recall_keyword(self, root, entries):
        self.mem.recall(self._query(), mode="keyword", record=False)

    def time_recall_with_receipt(self, root, entries):
        self.mem.recall(self._query())  # the receipt and exposure write included

    def time_remember(self, root, entries):
        self.i += 1
        self.mem.remember(f"Bench statement {self.i}: the nightly export moved to cluster {self.i % 97}.")

    def time_remember_many_100(self, root, entries):
        self.i += 1
        self.mem.remember_many([f"Batch {self.i} item {j}: rotate the key on host {j}." for j in range(100)],
                               progress=False)

    def time_open_and_first_recall(self, root, entries):
        """Open the file and recall once: the engine is rebuilt from the stored vectors on the first read."""
        mem = _open(self.path)
        mem.recall(QUERIES[1], record=False)
        mem.close()
