"""asv benchmarks for the engine: one ``hopmem.Memory`` of about 2,000 locations.

Suites are parametrised over the dimension (128, 384) and the mode
(competitive, plain). Every suite starts from the same pre-filled memories,
built once per asv run by ``setup_cache`` (shared by all suites through one
cache key) and restored from a snapshot in ``setup``, so a benchmark's own setup
costs milliseconds.

The data is a clustered pool (see :func:`make_pool`); ``benchmarks/compare.py``
imports :func:`workload` so that both tools measure the same memories.

BLAS is pinned to one thread for the whole benchmark process (a BLAS
pool on a small shared machine makes single-query timings erratic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

# Kept referenced for the life of the process: the limits stay in force.
# (compare.py reports BLAS_LIMITS.get_original_num_threads(), the defaults.)
BLAS_LIMITS = threadpool_limits(limits=1)

try:
    import hopmem  # noqa: F401
except ImportError:  # not installed: benchmark the working tree this suite lives in
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hopmem import Memory, MemoryConfig, Snapshot, set_threads  # noqa: E402 (after the BLAS pin)

# One thread for the kernel's scans too: the comparison is per core, like the
# peers' (helper threads are measured in store_bench.py and ab_kernel --threads).
set_threads(1)

DIMS = (128, 384)
MODES = ("competitive", "plain")
LOCATIONS = 2000       # locations in the pre-filled memory
SEED = 0

N_TOPICS = 400         # clusters in the pool; half of each parent's are written ("seen")
N_PARENTS = 40         # topics are grouped under parents, so unseen topics have seen siblings
TOPIC_SPREAD = 0.5     # topic = normalize(parent + spread * g / sqrt(d)): cos(topic, parent) ~ 0.9
SAMPLE_SPREAD = 0.5    # sample = normalize(topic + spread * g / sqrt(d)): cos(sample, topic) ~ 0.9
QUERY_NOISE = 0.75     # noisy query = normalize(x + noise * g / sqrt(d)): cos(query, x) ~ 0.8
FILL_CHUNK = 250       # competitive fill: write chunks of this size until LOCATIONS is reached
MAX_FILL_WRITES = 100_000


# -- data ------------------------------------------------------------------------------------

def _unit_rows(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms < 1e-12, 1.0, norms)


@dataclass(frozen=True)
class Pool:
    """A clustered pool of unit vectors in ``d`` dimensions.

    ``topics`` are cluster centers grouped under ``N_PARENTS`` parents; half
    the topics of every parent are the ones a memory is filled from ("seen"),
    the other half are never written ("unseen") but are siblings of seen ones,
    which keeps the seen/unseen separation from being trivial.
    """

    d: int
    topics: np.ndarray   # float64 (n_topics, d), unit rows
    seen: np.ndarray     # topic indices that are written
    unseen: np.ndarray   # topic indices that never are

    def sample(self, topic_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One unit float32 sample around each of ``topic_ids``."""
        g = rng.standard_normal((len(topic_ids), self.d))
        X = self.topics[topic_ids] + SAMPLE_SPREAD * g / np.sqrt(self.d)
        return _unit_rows(X).astype(np.float32)

    def draw(self, n: int, rng: np.random.Generator, *, seen: bool = True) -> np.ndarray:
        """``n`` samples from uniformly chosen seen (or unseen) topics."""
        ids = self.seen if seen else self.unseen
        return self.sample(ids[rng.integers(0, len(ids), n)], rng)


def make_pool(d: int, seed: int = SEED, n_topics: int = N_TOPICS,
              n_parents: int = N_PARENTS) -> Pool:
    rng = np.random.default_rng([seed, d, 1])
    parents = _unit_rows(rng.standard_normal((n_parents, d)))
    parent_of = np.arange(n_topics) % n_parents
    g = rng.standard_normal((n_topics, d))
    topics = _unit_rows(parents[parent_of] + TOPIC_SPREAD * g / np.sqrt(d))
    ids = np.arange(n_topics)
    # Topics t and t + n_parents share a parent; alternate them between seen and unseen.
    unseen_mask = (ids // n_parents) % 2 == 1
    return Pool(d, topics, ids[~unseen_mask], ids[unseen_mask])


def fill(mem: Memory, pool: Pool, locations: int, rng: np.random.Generator) -> np.ndarray:
    """Write seen-topic samples into ``mem``; returns the vectors written.

    Plain mode writes exactly ``locations`` vectors (one location each).
    Competitive mode writes chunks of ``FILL_CHUNK`` until the memory holds at
    least ``locations`` locations (it ends a little above; the count is
    reported by the tools), or gives up at ``MAX_FILL_WRITES`` vectors.
    """
    if mem.config.mode == "plain":
        X = pool.draw(locations, rng)
        mem.write(X)
        return X
    written = []
    total = 0
    chunk = max(1, min(FILL_CHUNK, locations))
    while len(mem) < locations and total < MAX_FILL_WRITES:
        X = pool.draw(chunk, rng)
        mem.write(X)
        written.append(X)
        total += chunk
    return np.concatenate(written) if written else np.zeros((0, pool.d), np.float32)


@dataclass(frozen=True)
class Workload:
    """A filled memory (as config + snapshot) and the vectors the tools use on it.

    Every array is float32 ``(n, d)`` with unit rows; none of ``probes``,
    ``inputs``, ``seen`` or ``unseen`` was written into the memory.
    """

    d: int
    mode: str
    config: MemoryConfig
    snapshot: Snapshot
    writes: int            # vectors written to fill it
    probes: np.ndarray     # read queries: fresh samples of seen topics
    inputs: np.ndarray     # vectors for timed writes: fresh samples of seen topics
    clean: np.ndarray      # vectors that were written ...
    noisy: np.ndarray      # ... and the noisy queries made from them
    seen: np.ndarray       # fresh samples of seen topics (first_contact AUC, positives)
    unseen: np.ndarray     # samples of never-written topics (AUC, negatives)

    @property
    def locations(self) -> int:
        return int(self.snapshot.ids.shape[0])

    def memory(self, backend: str = "native", headroom: int = 256) -> Memory:
        """A fresh memory restored bit-exactly from the snapshot."""
        mem = Memory.from_config(self.config, self.snapshot, backend=backend)
        ensure_headroom(mem, headroom)
        return mem


def ensure_headroom(mem: Memory, rows: int) -> None:
    """Give the memory spare capacity, as a long-lived memory has.

    A memory restored from a snapshot holds exactly its rows, so its next write
    would pay a one-off doubling of every array (an O(L d) copy that a growing
    memory amortises); a timed write must not. This reaches into the private
    state; if that changes, it does nothing.
    """
    reserve = getattr(getattr(mem, "_state", None), "reserve", None)
    if callable(reserve):
        reserve(rows)


class Rewinder:
    """Writes into a memory and puts it back to a snapshot before the next one.

    A full restore allocates and copies every state array (megabytes, written
    with non-temporal stores), so the next write would start with the address
    matrix in main memory: 2-3x its steady-state time, a cost no long-lived
    memory pays. Instead, only what the last write changed is copied back (its
    touched rows, its created rows cleared, the scalars), leaving the arrays
    where they are and warm. A write that merged locations (rows moved) gets
    the full restore. :meth:`matches_snapshot` checks the result (untimed).
    This reaches into the private state, as :func:`ensure_headroom` does.
    """

    def __init__(self, mem: Memory, snapshot: Snapshot) -> None:
        self.mem, self.snapshot = mem, snapshot
        self.row_of = {int(i): r for r, i in enumerate(snapshot.ids)}
        self.last: Any = None

    def write(self, x: np.ndarray) -> None:
        self.last = self.mem.write(x)

    def rewind(self) -> None:
        result, self.last = self.last, None
        if result is None:
            return
        state, snap = self.mem._state, self.snapshot
        n = int(snap.ids.shape[0])
        if result.merges or state.size < n:
            self.mem.restore(snap)
            ensure_headroom(self.mem, 256)
            return
        ids = {int(i) for t in result.touched for i in t}
        rows = np.array(sorted(self.row_of[i] for i in ids if i in self.row_of), dtype=np.int64)
        state.addresses[rows] = snap.addresses[rows]
        if state.held_counters is not None:  # else implied by the addresses (hopmem.engine._state)
            state.held_counters[rows] = snap.counters[rows]
        state.weights[rows] = snap.weights[rows]
        if state.addresses16 is not None:
            state.addresses16[rows] = snap.addresses[rows].astype(np.float16)
        for array in (state.ids, state.addresses, state.held_counters, state.weights,
                      state.addresses16):
            if array is not None:
                array[n:state.size] = 0
        state.size = n
        if state.norms is not None and rows.size:  # a plain memory's row norms: derived
            from hopmem.engine import _kernel
            _kernel.sync_norms(state)
        state.eta, state.writes = float(snap.eta), int(snap.writes)
        state.next_id, state.rng = int(snap.next_id), int(snap.rng) & (2**64 - 1)
        if self.mem.backend == "native":
            # the rows' groups stand (radii only grow); the created rows leave the lists
            from hopmem.engine import _kernel
            _kernel.refresh_index(state)

    def matches_snapshot(self) -> bool:
        """Whether the memory now holds exactly the snapshot (bit for bit)."""
        now, snap = self.mem.snapshot(), self.snapshot
        return all(np.array_equal(getattr(now, f), getattr(snap, f))
                   for f in ("ids", "addresses", "counters", "weights")) and \
            (now.eta, now.writes, now.next_id, now.rng) == \
            (snap.eta, snap.writes, snap.next_id, snap.rng)


def workload(d: int, mode: str, *, locations: int = LOCATIONS, seed: int = SEED,
             n_probes: int = 128, n_inputs: int = 128, n_noisy: int = 100,
             n_auc: int = 200) -> Workload:
    """Build the filled memory for ``(d, mode)`` with the native engine.

    The same pool and the same stream of written vectors serve both modes.
    """
    pool = make_pool(d, seed)
    mem = Memory(d, mode=mode, seed=seed)
    written = fill(mem, pool, locations, np.random.default_rng([seed, d, 2]))
    rng = np.random.default_rng([seed, d, 3])
    probes = pool.draw(n_probes, rng)
    inputs = pool.draw(n_inputs, rng)
    seen = pool.draw(n_auc, rng)
    unseen = pool.draw(n_auc, rng, seen=False)
    n_noisy = min(n_noisy, len(written))
    clean = written[rng.choice(len(written), n_noisy, replace=False)]
    noise = QUERY_NOISE * rng.standard_normal(clean.shape) / np.sqrt(d)
    noisy = _unit_rows(clean + noise).astype(np.float32)
    return Workload(d, mode, mem.config, mem.snapshot(), len(written), probes, inputs,
                    clean, noisy, seen, unseen)


# -- quality measures -----------------------------------------------------------------------

def auc(positives: np.ndarray, negatives: np.ndarray) -> float:
    """P(positive > negative), ties count one half (the Mann-Whitney AUC)."""
    p = np.asarray(positives, dtype=np.float64)[:, None]
    n = np.asarray(negatives, dtype=np.float64)[None, :]
    return float(np.mean((p > n) + 0.5 * (p == n)))


def cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise cosines of two ``(n, d)`` arrays."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    num = np.einsum("ij,ij->i", A, B)
    den = np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)
    return np.where(den < 1e-12, 0.0, num / np.where(den < 1e-12, 1.0, den))


def noisy_read_quality(mem: Memory, w: Workload) -> tuple[float, float]:
    """Iterative reads of the noisy queries: (mean fidelity, mean recall).

    fidelity is ``Trace.fidelity`` = cos(query, result); recall is
    cos(result, the clean vector the query was made from).
    """
    traces = mem.analyze(w.noisy, "iterative")
    results = np.stack([t.result for t in traces])
    return (float(np.mean([t.fidelity for t in traces])),
            float(np.mean(cosines(results, w.clean))))


def first_contact_auc(mem: Memory, w: Workload) -> float:
    """AUC of first_contact separating fresh samples of written topics (positives)
    from samples of never-written topics (negatives): what abstention gates use."""
    seen = mem.analyze(w.seen, "fast")
    unseen = mem.analyze(w.unseen, "fast")
    return auc([t.first_contact for t in seen], [t.first_contact for t in unseen])


def quality(mem: Memory, w: Workload) -> dict[str, float]:
    """Every quality number the suite tracks, for one filled memory."""
    fidelity, recall = noisy_read_quality(mem, w)
    return {"fidelity_noisy": fidelity, "recall_noisy": recall,
            "first_contact_auc": first_contact_auc(mem, w)}


# -- asv suites -------------------------------------------------------------------------------

def _build_cache(dims=DIMS, modes=MODES, **kwargs: Any) -> dict:
    return {(d, mode): workload(d, mode, **kwargs) for d in dims for mode in modes}


def filled_memories() -> dict:
    """asv ``setup_cache`` shared by every suite below (one cache key: this line)."""
    return _build_cache()


filled_memories.timeout = 600  # building four memories; slow on a loaded machine

_READERS: dict[int, tuple[Workload, Memory]] = {}


def _reader(w: Workload) -> Memory:
    """One memory per workload per process for the read-only suites.

    asv re-runs ``setup`` before every timed call; reads do not change the
    memory, so restoring it each time would only add setup cost.
    """
    hit = _READERS.get(id(w))
    if hit is None or hit[0] is not w:
        hit = _READERS[id(w)] = (w, w.memory())
    return hit[1]


class _Filled:
    params = (list(DIMS), list(MODES))
    param_names = ["d", "mode"]
    setup_cache = staticmethod(filled_memories)


class WriteSuite(_Filled):
    """Writes into the filled memory; asv re-runs setup (a restore) before every call."""

    def setup(self, cache, d, mode):
        self.w = cache[(d, mode)]
        self.mem = self.w.memory()
        self.x = self.w.inputs[0]
        self.batch = self.w.inputs[:100]

    def time_write_single(self, cache, d, mode):
        self.mem.write(self.x)

    def time_write_batch(self, cache, d, mode):
        """100 vectors in one call (divide by 100 for the per-vector time)."""
        self.mem.write(self.batch)


class ReadSuite(_Filled):
    def setup(self, cache, d, mode):
        self.w = cache[(d, mode)]
        self.mem = _reader(self.w)
        self.q = self.w.probes[0]
        self.batch = self.w.probes[:64]

    def time_read_iterative(self, cache, d, mode):
        self.mem.read(self.q, "iterative")

    def time_read_fast(self, cache, d, mode):
        self.mem.read(self.q, "fast")

    def time_read_batch64(self, cache, d, mode):
        """64 iterative reads in one call (divide by 64 for the per-query time)."""
        self.mem.read(self.batch, "iterative")

    def time_read_scored(self, cache, d, mode):
        """An iterative read with its fidelity and first contact (the HTTP read route's call)."""
        self.mem.read_scored(self.q, "iterative")


class QualitySuite(_Filled):
    """Quality of the filled memories (deterministic: one sample is enough)."""

    def setup(self, cache, d, mode):
        self.w = cache[(d, mode)]
        self.mem = _reader(self.w)

    def track_fidelity_noisy(self, cache, d, mode):
        """Mean Trace.fidelity = cos(query, iterative result) of noisy written vectors."""
        return noisy_read_quality(self.mem, self.w)[0]

    track_fidelity_noisy.unit = "cosine"

    def track_recall_noisy(self, cache, d, mode):
        """Mean cos(iterative result, the clean written vector) for the noisy queries."""
        return noisy_read_quality(self.mem, self.w)[1]

    track_recall_noisy.unit = "cosine"

    def track_first_contact_auc(self, cache, d, mode):
        """AUC of first_contact: fresh samples of written topics vs never-written topics."""
        return first_contact_auc(self.mem, self.w)

    track_first_contact_auc.unit = "AUC"

    def track_locations(self, cache, d, mode):
        """Locations in the filled memory (competitive: ends just above 2,000)."""
        return len(self.mem)

    track_locations.unit = "locations"


class MemorySuite:
    """Peak resident memory of the whole benchmark process (asv ``peakmem``).

    No setup_cache here: loading the filled memories would count towards the peak.
    """

    params = (list(DIMS), list(MODES))
    param_names = ["d", "mode"]
    n_vectors = 10_000

    def setup(self, d, mode):
        pool = make_pool(d)
        self.X = pool.draw(self.n_vectors, np.random.default_rng([SEED, d, 2]))

    def peakmem_write_10k(self, d, mode):
        """Write 10,000 clustered vectors (one batch) into an empty memory."""
        Memory(d, mode=mode, seed=SEED).write(self.X)


def peakmem_memory_2000x384():
    """A plain memory of 2,000 locations in 384 dimensions, built from empty."""
    X = make_pool(384).draw(2000, np.random.default_rng([SEED, 384, 2]))
    mem = Memory(384, mode="plain", seed=SEED)
    mem.write(X)
    assert len(mem) == 2000


# -- smoke check ------------------------------------------------------------------------------

def smoke(dims=(32,), locations: int = 60) -> dict[str, Any]:
    """Run every suite's setup and benchmarks once on tiny memories (CI; seconds).

    Returns what each track_ benchmark returned, by name.
    """
    cache = _build_cache(dims, locations=locations, n_probes=64, n_inputs=100,
                         n_noisy=20, n_auc=20)
    tracked: dict[str, Any] = {}
    for suite in (WriteSuite, ReadSuite, QualitySuite):
        for d in dims:
            for mode in MODES:
                for name in sorted(vars(suite)):
                    if not name.startswith(("time_", "track_")):
                        continue
                    bench = suite()
                    bench.setup(cache, d, mode)
                    value = getattr(bench, name)(cache, d, mode)
                    if name.startswith("track_"):
                        if not np.isfinite(value):
                            raise AssertionError(f"{suite.__name__}.{name}({d}, {mode}) = {value}")
                        tracked[f"{name}[{d},{mode}]"] = value
    for d in dims:
        for mode in MODES:
            bench = MemorySuite()
            bench.n_vectors = 200
            bench.setup(d, mode)
            bench.peakmem_write_10k(d, mode)
    return tracked


class ApproximateSuite:
    """Approximate activation (``activation="approximate"``) on 50,000 plain patterns,
    d = 384, clustered as ``benchmarks/ann.py``'s set: one read per probe, and
    recall@10 of the activated set against exact activation. The 1M figures
    and the peers are ``python -m benchmarks.ann`` (docs/approximate.md)."""

    params = ([2, 8, 32],)
    param_names = ["probe"]
    timeout = 300
    N = 50_000

    def setup_cache(self):
        rng = np.random.default_rng(SEED)  # 1,000 centers, cos ~0.74 to the center
        C = _unit_rows(rng.standard_normal((1000, 384)))
        P = _unit_rows(C[rng.integers(0, 1000, self.N + 64)]
                       + 0.9 / np.sqrt(384) * rng.standard_normal((self.N + 64, 384)))
        X, Q = P[64:].astype(np.float32), P[:64].astype(np.float32)
        mem = Memory(384, mode="plain", k=10, activation="approximate")
        mem.write(X)
        return mem.config, mem.snapshot(), Q

    def setup(self, cache, probe):
        import dataclasses
        config, snap, self.Q = cache
        self.mem = Memory.from_config(dataclasses.replace(config, probe=probe), snap)
        self.mem.read(self.Q[0])  # fits the index (a restored memory does at its first read)
        self.exact = Memory.from_config(dataclasses.replace(config, probe=10**6))
        self.exact._state = self.mem._state  # the same rows and index, every group probed

    def time_read(self, cache, probe):
        self.mem.read(self.Q[1])

    def time_read_fast(self, cache, probe):
        self.mem.read(self.Q[1], "fast")

    def track_recall_at_10(self, cache, probe):
        got = self.mem.analyze(self.Q, "fast")
        want = self.exact.analyze(self.Q, "fast")
        return float(np.mean([len(set(a.activated.tolist()) & set(b.activated.tolist())) / 10
                              for a, b in zip(got, want)]))

    track_recall_at_10.unit = "recall"
