"""The engine: one associative memory (one collection) over hard locations.

This module validates input, holds the state and its lock, and hands the hot
loops to the compiled kernel (``hopmem.engine._kernel``), or to the NumPy reference
when ``backend="reference"`` (the oracle the tests compare against; slow).
The engine's calls into the kernel all go through here; elsewhere only the
state's half-precision conversion (``hopmem.engine._state``), the thread settings
(``hopmem.engine.threads``) and the store's posting lists use it directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from .._deprecation import warn_deprecated
from ..errors import DimensionMismatch, EmptyMemory, InvalidInput
from . import _batched, _reference
from ._rwlock import RWLock
from ._state import Snapshot, State
from .config import DEFAULT_PROBE, MemoryConfig

__all__ = [
    "Memory", "WriteResult", "Trace", "ScoredRead", "AttentionResult", "Stats", "CompressResult",
    "as_vectors", "Strategy", "top_k_dot", "top_k_cosine", "Scalars",
]

Strategy = Literal["iterative", "fast"]
STRATEGIES = ("iterative", "fast")


# -- results -----------------------------------------------------------------------

@dataclass(frozen=True)
class WriteResult:
    """What a write did.

    ``touched[i]`` are the ids of the locations that absorbed vector ``i``,
    ``created[i]`` the ids it created, and ``merges`` every (removed id,
    surviving id) pair merged during the batch, in order. Ids only, never rows.
    """

    count: int
    touched: list[np.ndarray]
    created: list[np.ndarray]
    merges: list[tuple[int, int]]

    def postings(self, i: int) -> np.ndarray:
        """Location ids that vector ``i`` touched or created (its posting list)."""
        return np.unique(np.concatenate([self.touched[i], self.created[i]]))


@dataclass(frozen=True)
class Trace:
    """How one read went: activated locations, weights, iterations, fidelities."""

    activated: np.ndarray     # int64 location ids, best first
    similarities: np.ndarray  # cos(query, address) for each activated location
    weights: np.ndarray       # softmax weights of the step that produced the result
    iterations: int
    converged: bool
    result: np.ndarray        # float32 (d,)
    fidelity: float           # cos(query, result)
    first_contact: float      # cos(query, one-step read): what gates calibrate on
    strategy: str = "iterative"


@dataclass(frozen=True)
class ScoredRead:
    """A read's reconstruction with its two scores: a trace without the activation."""

    result: np.ndarray        # float32 (d,)
    fidelity: float           # cos(query, result)
    first_contact: float      # cos(query, one-step read)


@dataclass(frozen=True)
class AttentionResult:
    result: np.ndarray        # float32 (d,), not normalized
    scale: float
    activated: np.ndarray
    similarities: np.ndarray
    weights: np.ndarray


@dataclass(frozen=True)
class Stats:
    """A memory's size and learning state at one moment (:meth:`Memory.stats`).

    Attributes
    ----------
    num_locations : int
        Hard locations in the memory.
    writes : int
        Vectors written so far (not the sum of weights).
    total_weight : float
        Sum of the locations' evidence ``n_j`` (each write spreads one unit of
        activation weight over the locations it touches, so this exceeds
        ``writes`` when several locations absorb each write).
    current_eta : float
        The learning rate the next write uses.
    avg_write_weight : float
        Mean evidence per location, ``total_weight / num_locations`` (0 when empty).
    max_write_weight : float
        The largest evidence of any location (0 when empty).
    """

    num_locations: int
    writes: int
    total_weight: float
    current_eta: float
    avg_write_weight: float
    max_write_weight: float

    @property
    def avg_write_count(self) -> float:
        """Deprecated name of :attr:`avg_write_weight` (it is a weight, not a count)."""
        warn_deprecated("Stats.avg_write_count", "Stats.avg_write_weight")
        return self.avg_write_weight

    @property
    def max_write_count(self) -> float:
        """Deprecated name of :attr:`max_write_weight` (it is a weight, not a count)."""
        warn_deprecated("Stats.max_write_count", "Stats.max_write_weight")
        return self.max_write_weight

    def to_dict(self) -> dict[str, Any]:
        """The fields by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class Scalars(NamedTuple):
    """A memory's scalar state: what the store records after each journal entry."""

    writes: int
    next_id: int
    size: int
    eta: float
    rng: int


@dataclass(frozen=True)
class CompressResult:
    locations_before: int
    locations_after: int
    merges: list[tuple[int, int]] = field(default_factory=list)


# -- input validation -----------------------------------------------------------------

def as_vectors(value: Any, dim: int, name: str = "vectors") -> tuple[np.ndarray, bool]:
    """Validate one vector ``(d,)`` or a batch ``(n, d)``.

    Returns a C-contiguous float32 ``(n, d)`` array (a copy whenever the input
    is not already exactly that; the input is never written to) and whether a
    single vector was given.
    """
    if (type(value) is np.ndarray and value.ndim == 1 and value.dtype == _F32
            and value.shape[0] == dim and value.flags.c_contiguous and _all_finite(value)):
        return value.reshape(1, dim), True  # the common query: nothing to convert
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(
                f"{name}: expected an array of numbers, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "fiub":  # float, signed, unsigned, bool
        what = "complex" if arr.dtype.kind == "c" else f"dtype {arr.dtype}"
        raise InvalidInput(f"{name}: expected real numbers, got {what}")
    single = arr.ndim == 1
    if arr.ndim not in (1, 2):
        raise InvalidInput(f"{name}: expected shape (d,) or (n, d), got shape {arr.shape}")
    arr2 = arr.reshape(1, -1) if single else arr
    if arr2.shape[1] != dim:
        raise DimensionMismatch(dim, arr2.shape[1], name)
    if arr2.dtype == np.float32:
        out = np.ascontiguousarray(arr2)
    else:
        with np.errstate(over="ignore"):  # too large for float32: caught just below
            out = np.ascontiguousarray(arr2, dtype=np.float32)
    if not _all_finite(out.reshape(-1)):
        bad = np.argwhere(~np.isfinite(out))[0]
        where = f"[{bad[1]}]" if single else f"[{bad[0]}, {bad[1]}]"
        raise InvalidInput(
            f"{name}{where}: expected a finite float32 value, got {arr2[tuple(bad)]!r}")
    return out, single


_F32 = np.dtype(np.float32)


def _all_finite(flat: np.ndarray) -> bool:
    global _finite_check
    if _finite_check is None:
        try:
            from ._kernel import all_finite as check
        except ImportError:  # the reference backend works without the build
            def check(values: npt.NDArray[np.float32]) -> bool:
                return bool(np.isfinite(values).all())
        _finite_check = check
    return _finite_check(flat)


_finite_check: Callable[[npt.NDArray[np.float32]], bool] | None = None


# -- engines: the kernel and the reference behind one interface ------------------------

class _ReferenceEngine:
    name = "reference"

    def prepare(self, cfg: MemoryConfig) -> MemoryConfig:
        return cfg

    def may_fail_midway(self, n: int) -> bool:
        return True

    def read_one(self, state, cfg, q, strategy, scores=False):
        return None  # no lean path: Memory.read takes the general one

    def read_results(self, state, cfg, Q, strategy):
        out = np.empty(Q.shape, dtype=np.float32)
        for i, q in enumerate(Q):
            out[i] = _reference.read(state, cfg, q, strategy).result
        return out

    def write(self, state: State, cfg: MemoryConfig, X: np.ndarray):
        log = _reference.write(state, cfg, X)
        touched = [np.asarray(t, dtype=np.int64) for t in log.touched]
        created = [np.asarray(c, dtype=np.int64) for c in log.created]
        merges = [m for ms in log.merges for m in ms]
        return touched, created, merges

    def state_replaced(self, state: State) -> None:
        pass

    def read(self, state: State, cfg: MemoryConfig, Q: np.ndarray, strategy: str):
        out = []
        for q in Q:
            t = _reference.read(state, cfg, q, strategy)
            out.append((t.rows, t.similarities, t.weights, t.iterations, t.converged,
                        t.result, t.fast_result, _reference.cosine(q, t.result),
                        _reference.cosine(q, t.fast_result)))
        return out

    def attention(self, state, cfg, q, scale):
        return _reference.attention(state, cfg, q, scale)

    def merge_closest_until(self, state, bound):
        return _reference.merge_closest_until(state, bound)

    def merge_above(self, state, tau):
        return _reference.merge_above(state, tau)


class _NativeEngine:
    name = "native"

    def __init__(self) -> None:
        from . import _kernel  # the engine's calls into the compiled module
        self._k = _kernel

    def prepare(self, cfg: MemoryConfig):
        return self._k.KernelConfig(cfg)

    def may_fail_midway(self, n: int) -> bool:
        return n > self._k.WRITE_CHUNK

    def write(self, state: State, cfg, X: np.ndarray):
        if cfg.config.activation == "approximate":
            with _blas_threads():  # the index assigns rows with BLAS: pinned, as batched reads
                return self._k.write(state, cfg, X)
        return self._k.write(state, cfg, X)

    def state_replaced(self, state: State) -> None:
        """The state was restored wholesale: its location index is due again."""
        self._k.note_change(state)

    def _index(self, state: State, cfg) -> None:
        """Build the location index the state is due for (the first read after changes).

        Readers hold the memory's shared lock, so no writer runs meanwhile; the
        lock here keeps concurrent readers from building it twice, and readers
        that do not wait scan until it is published.
        """
        with _INDEX_BUILD:
            if state.index_pending:
                try:
                    if cfg.config.activation == "approximate":
                        with _blas_threads():
                            self._k.approximate_index(state, cfg.k)
                    else:
                        self._k.maintain_index(state, cfg.k)
                except MemoryError:  # derived data: a read never fails for it, it scans
                    state.index, state.index_pending = None, False

    def read(self, state: State, cfg, Q: np.ndarray, strategy: str):
        if state.index_pending:
            self._index(state, cfg)
        if Q.shape[0] == 1:
            return self._k.read(state, cfg, Q, strategy == "fast")
        with _blas_threads():
            return self._k.read(state, cfg, Q, strategy == "fast")

    def read_one(self, state: State, cfg, q: Any, strategy: str, scores: bool = False):
        if state.index_pending:
            self._index(state, cfg)
        return self._k.read_one(state, cfg, q, strategy == "fast", scores)

    def read_results(self, state: State, cfg, Q: np.ndarray, strategy: str):
        if state.index_pending:
            self._index(state, cfg)
        if Q.shape[0] == 1:
            return self._k.read_results(state, cfg, Q, strategy == "fast")
        with _blas_threads():
            if _batched.applies(state, cfg.config, Q.shape[0], strategy == "fast"):
                # plain, full activation: blocked matrix products (hopmem/engine/_batched.py)
                return _batched.read_batch(state, cfg.config, Q, strategy == "fast")
            return self._k.read_results(state, cfg, Q, strategy == "fast")

    def attention(self, state, cfg, q, scale):
        if state.index_pending:
            self._index(state, cfg)
        return self._k.attention(state, cfg, q, scale)

    def merge_closest_until(self, state, bound):
        return self._k.merge_closest_until(state, bound)

    def merge_above(self, state, tau):
        return self._k.merge_above(state, tau)


_BLAS_CONTROLLER = None
_INDEX_BUILD = threading.Lock()


def _blas_threads():
    """Pin BLAS (batched reads, an approximate index's fits) to HOPMEM_BLAS_THREADS threads, default 1.

    Thread pools are unpredictable on small shared machines; single-query reads
    never touch BLAS. Set HOPMEM_BLAS_THREADS=0 to leave BLAS as configured.
    """
    global _BLAS_CONTROLLER
    threads = int(os.environ.get("HOPMEM_BLAS_THREADS", "1"))
    if threads <= 0:
        return contextlib.nullcontext()
    if _BLAS_CONTROLLER is None:
        from threadpoolctl import ThreadpoolController
        _BLAS_CONTROLLER = ThreadpoolController()
    return _BLAS_CONTROLLER.limit(limits=threads, user_api="blas")


_ENGINES: dict[str, Any] = {}


def _engine(name: str):
    if name not in ("native", "reference"):
        raise InvalidInput(f"backend: expected 'native' or 'reference', got {name!r}")
    if name not in _ENGINES:
        _ENGINES[name] = _NativeEngine() if name == "native" else _ReferenceEngine()
    return _ENGINES[name]


def top_k_dot(matrix: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k rows of ``matrix`` by dot product, for each row of ``queries``.

    ``matrix`` float32 ``(n, d)``, ``queries`` float32 ``(q, d)`` (both made
    C-contiguous here). Returns ``(rows int64 (q, k'), scores float32 (q, k'))``
    with ``k' = min(k, n)``, best first, ties to the lower row. Runs in the
    native kernel (single thread, GIL released); normalize the rows first for
    cosine. This is the scan behind exact document resolution.
    """
    matrix, queries, k, empty = _search_inputs("top_k_dot", matrix, queries, k)
    if empty is not None:
        return empty
    from . import _kernel
    return _kernel.search(matrix, queries, k)


def _search_inputs(name: str, matrix: Any, queries: Any, k: Any):
    """Validate a top-k search: float32 C-contiguous (n, d) rows and (q, d)
    queries (one (d,) query is a batch of one), k >= 1. Returns (matrix,
    queries, k, empty) where empty is the result for n == 0, else None."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise InvalidInput(f"k: expected an integer >= 1, got {k!r}")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if queries.ndim == 1:
        queries = queries.reshape(1, -1)
    if matrix.ndim != 2 or queries.ndim != 2 or matrix.shape[1] != queries.shape[1]:
        raise InvalidInput(
            f"{name}: expected rows (n, d) and queries (q, d), got {matrix.shape} "
            f"and {queries.shape}")
    empty = None
    if matrix.shape[0] == 0:
        empty = (np.zeros((queries.shape[0], 0), np.int64),
                 np.zeros((queries.shape[0], 0), np.float32))
    return matrix, queries, int(k), empty


def top_k_cosine(unit_rows: np.ndarray, queries: np.ndarray, k: int,
                 half: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k rows by cosine, for rows of norm <= 1 (e.g. unit documents).

    Each query is scored as ``q / |q|`` (a zero query scores 0 everywhere).
    ``half``, a float16 copy of ``unit_rows`` (``unit_rows.astype(np.float16)``),
    halves the bytes scanned: the half copy ranks candidates and every row
    within its proven error bound of the k-th best is re-scored exactly in
    float32, so the answer is the same as without it. Returns ``(rows int64
    (q, k'), cosines float32 (q, k'))``, best first, ties to the lower row.
    """
    unit_rows, queries, k, empty = _search_inputs("top_k_cosine", unit_rows, queries, k)
    if empty is not None:
        return empty
    from . import _kernel
    return _kernel.search_unit(unit_rows, half, queries, k)


# -- the memory --------------------------------------------------------------------------

class Memory:
    """A Hopfield-style associative memory over a matrix of hard locations.

    ``mode="competitive"`` (default) adapts a bounded set of locations by
    competitive learning; ``mode="plain"`` keeps one location per written
    vector, which makes reads exactly a modern Hopfield network. See
    :class:`MemoryConfig` for the parameters.

    Thread safety: any number of threads may read at once (the kernel releases
    the GIL); writes are exclusive.

    Examples
    --------
    >>> import numpy as np, hopmem
    >>> mem = hopmem.Memory(8, mode="plain", beta=30.0)
    >>> _ = mem.write(np.eye(8, dtype=np.float32)[:3])
    >>> out = mem.read(np.eye(8, dtype=np.float32)[1] + 0.1)
    >>> int(np.argmax(out))
    1
    """

    def __init__(
        self,
        dim: int,
        *,
        mode: Literal["competitive", "plain"] = "competitive",
        k: int = 20,
        beta: float = 5.0,
        t_max: int = 10,
        epsilon: float = 1e-6,
        eta0: float = 0.01,
        eta_decay: float = 0.9999,
        eta_min: float = 0.001,
        tau_split: float = 0.3,
        tau_merge: float = 0.95,
        tau_overload: float | None = None,
        gamma: float = 1.0,
        tau_damp: float = 10.0,
        max_locations: int | None = None,
        seed: int = 0,
        activation: Literal["exact", "compact", "approximate"] = "exact",
        probe: int = DEFAULT_PROBE,
        backend: Literal["native", "reference"] = "native",
    ) -> None:
        config = MemoryConfig(
            dim=dim, mode=mode, k=k, beta=beta, t_max=t_max, epsilon=epsilon, eta0=eta0,
            eta_decay=eta_decay, eta_min=eta_min, tau_split=tau_split, tau_merge=tau_merge,
            tau_overload=tau_overload, gamma=gamma, tau_damp=tau_damp,
            max_locations=max_locations, seed=seed, activation=activation,
            probe=probe,
        )
        self._init(config, None, backend)

    def _init(self, config: MemoryConfig, snapshot: Snapshot | None, backend: str) -> None:
        self._config = config
        self._engine = _engine(backend)
        self._kcfg = self._engine.prepare(config)  # config in the engine's own form
        self._kcfgs: dict[int, Any] = {}  # the same for reads that activate another k
        self._lock = RWLock()
        compact = config.activation == "compact" and self._engine.name == "native"
        norms = config.mode == "plain" and self._engine.name == "native"
        # plain locations' counters implied by address and norm while they can be (State)
        implied = norms
        if snapshot is None:
            self._state = State(config.dim, config.eta0, config.seed, compact=compact, norms=norms,
                                implied=implied)
        else:
            self._state = State.from_snapshot(config.dim, snapshot, compact=compact, norms=norms,
                                              implied=implied)
            self._engine.state_replaced(self._state)

    @classmethod
    def from_config(cls, config: MemoryConfig, snapshot: Snapshot | None = None,
                    *, backend: Literal["native", "reference"] = "native") -> Memory:
        """A memory with this config, empty or restored bit-exactly from a snapshot."""
        if not isinstance(config, MemoryConfig):
            raise InvalidInput(f"config: expected a MemoryConfig, got {type(config).__name__}")
        mem = cls.__new__(cls)
        if snapshot is not None:
            _check_snapshot(config, snapshot)
        mem._init(config, snapshot, backend)
        return mem

    # -- properties ------------------------------------------------------------------------

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def dim(self) -> int:
        return self._config.dim

    @property
    def backend(self) -> str:
        return self._engine.name

    def __len__(self) -> int:
        return self._state.size

    def __repr__(self) -> str:
        return (f"Memory(dim={self.dim}, mode={self._config.mode!r}, "
                f"locations={len(self)}, writes={self._state.writes})")

    def _frozen(self, arr: np.ndarray) -> np.ndarray:
        out = arr.copy()
        out.flags.writeable = False
        return out

    @property
    def ids(self) -> np.ndarray:
        """Location ids (int64, ascending); a read-only copy."""
        with self._lock.read():
            return self._frozen(self._state.ids[: self._state.size])

    @property
    def addresses(self) -> np.ndarray:
        """Unit addresses used for activation, float32 ``(L, d)``; read-only copy."""
        with self._lock.read():
            return self._frozen(self._state.addresses[: self._state.size])

    @property
    def counters(self) -> np.ndarray:
        """Counters (weighted sums of absorbed inputs), float64 ``(L, d)``."""
        with self._lock.read():
            return self._frozen(self._state.counters[: self._state.size])

    @property
    def weights(self) -> np.ndarray:
        """Evidence n_j of each location (sum of absorbed activation weights)."""
        with self._lock.read():
            return self._frozen(self._state.weights[: self._state.size])

    @property
    def patterns(self) -> np.ndarray:
        """Patterns p_j = c_j / n_j, float32 ``(L, d)``."""
        with self._lock.read():
            n = self._state.size
            p = (self._state.counters[:n] / self._state.weights[:n, None]).astype(np.float32)
        p.flags.writeable = False
        return p

    # -- state -------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The complete state, copied; ``Memory.from_config(config, snap)`` restores it."""
        with self._lock.read():
            return self._state.snapshot()

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the state with ``snapshot`` (bit-exact)."""
        _check_snapshot(self._config, snapshot)
        with self._lock.write():
            self._state.restore(snapshot)
            self._engine.state_replaced(self._state)

    # -- writes ------------------------------------------------------------------------------

    def write(self, vectors: Any) -> WriteResult:
        """Write one vector ``(d,)`` or a batch ``(n, d)``, in order.

        A batch is all or nothing: if anything fails midway, the state is
        rolled back to what it was before the call.
        """
        X, _ = as_vectors(vectors, self.dim)
        with self._lock.write():
            return self._write_locked(X)

    def _write_locked(self, X: np.ndarray) -> WriteResult:
        if X.shape[0] == 0:
            return WriteResult(0, [], [], [])
        # The kernel checks everything before it mutates, so a batch that fits
        # one kernel call cannot fail halfway; only longer batches (several
        # calls) and the Python reference need a snapshot to roll back to.
        # A plain write only appends rows: undone by cutting them off (State.rewind),
        # where a snapshot would copy every row the memory holds.
        midway = self._engine.may_fail_midway(X.shape[0])
        plain = midway and not self._config.competitive
        before = self._state.snapshot() if midway and not plain else None
        mark = self._state.mark() if plain else None
        try:
            touched, created, merges = self._engine.write(self._state, self._kcfg, X)
        except BaseException:
            if before is not None:
                self._state.restore(before)
                self._engine.state_replaced(self._state)
            elif mark is not None:
                self._state.rewind(mark)
                self._engine.state_replaced(self._state)
            raise
        return WriteResult(X.shape[0], touched, created, merges)

    def compress(self, max_locations: int | None = None) -> CompressResult:
        """Merge locations that have become near-duplicates, then enforce a bound.

        Every pair whose addresses' cosine exceeds ``tau_merge`` is merged (most
        similar first, the older id survives; counters and weights add). Then,
        if ``max_locations`` (or the config's) is set, the most similar pairs
        are merged until the memory fits.
        """
        bound = self._config.max_locations if max_locations is None else max_locations
        if bound is not None and (isinstance(bound, bool) or int(bound) != bound or bound < 1):
            raise InvalidInput(f"max_locations: expected an integer >= 1, got {bound!r}")
        with self._lock.write():
            before = len(self)
            merges = list(self._engine.merge_above(self._state, self._config.tau_merge))
            if bound is not None:
                merges += list(self._engine.merge_closest_until(self._state, int(bound)))
            self._state.drop_implied_counters()  # held for the merges (no merge: implied still)
            if merges and self._config.activation == "approximate":
                # rows left: fit the index anew, as a restore of this state would
                self._state.index = None
                self._state.index_pending = True
            return CompressResult(before, len(self), merges)

    # -- the store's interface ---------------------------------------------------------------
    #
    # Internal: hopmem.store applies journaled writes through these, holding the
    # memory's write lock until its SQLite commit so that no reader ever sees a
    # state that is not on disk. Not for general use; they skip the validation and
    # the rollback that ``write`` and ``restore`` do.

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the memory's write lock (readers and writers wait) for a block (internal)."""
        with self._lock.write():
            yield

    def write_exclusive(self, X: np.ndarray) -> WriteResult:
        """Write a validated C-contiguous float32 ``(n, d)`` batch under :meth:`exclusive` (internal).

        No rollback snapshot: if it fails, the state is undefined and the
        caller must replace it (:meth:`restore_exclusive`); the store rebuilds
        it from disk.
        """
        touched, created, merges = self._engine.write(self._state, self._kcfg, X)
        return WriteResult(int(X.shape[0]), touched, created, merges)

    def restore_exclusive(self, snapshot: Snapshot) -> None:
        """Replace the state with ``snapshot`` (copied, not checked) under :meth:`exclusive` (internal)."""
        self._state.restore(snapshot)
        self._engine.state_replaced(self._state)

    def scalars(self) -> Scalars:
        """(writes, next_id, size, eta, rng) now, in O(1) (internal; exact under :meth:`exclusive`)."""
        s = self._state
        return Scalars(int(s.writes), int(s.next_id), int(s.size), float(s.eta), int(s.rng))

    @classmethod
    def adopting(cls, config: MemoryConfig, snapshot: Snapshot,
                 *, backend: Literal["native", "reference"] = "native") -> Memory:
        """``from_config(config, snapshot)`` that takes over the snapshot's arrays (internal).

        For a snapshot nothing else holds (a checkpoint just loaded from disk):
        it must not be used afterwards. Its arrays need the spare capacity of
        :func:`hopmem.engine._state.restore_capacity` to be adopted without a copy.
        """
        if not isinstance(config, MemoryConfig):
            raise InvalidInput(f"config: expected a MemoryConfig, got {type(config).__name__}")
        _check_snapshot(config, snapshot)
        mem = cls.__new__(cls)
        mem._init(config, None, backend)
        mem._state = State.adopt(config.dim, snapshot, compact=mem._state.addresses16 is not None,
                                 norms=mem._state.norms is not None, implied=mem._state.implied)
        mem._engine.state_replaced(mem._state)
        return mem

    # -- reads -------------------------------------------------------------------------------

    def _check_strategy(self, strategy: str) -> None:
        if strategy not in STRATEGIES:
            raise InvalidInput(
                f"strategy: expected 'iterative' or 'fast', got {strategy!r}")

    def _read_config(self, k: int | None) -> Any:
        """The engine's config for a read that activates ``k`` locations (None: the memory's own ``k``)."""
        if k is None:
            return self._kcfg
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInput(f"k: expected an int >= 1 or None, got {k!r}")
        if k == self._config.k:
            return self._kcfg
        prepared = self._kcfgs.get(int(k))
        if prepared is None:
            prepared = self._kcfgs[int(k)] = self._engine.prepare(dataclasses.replace(self._config, k=int(k)))
        return prepared

    def _read_traces(self, query: Any, strategy: str, k: int | None = None) -> tuple[list[Trace], bool]:
        self._check_strategy(strategy)
        cfg = self._read_config(k)
        Q, single = as_vectors(query, self.dim, "query")
        with self._lock.read():
            if self._state.size == 0:
                raise EmptyMemory()
            raw = self._engine.read(self._state, cfg, Q, strategy)
            ids = self._state.ids
            traces = [
                Trace(activated=ids[np.asarray(rows, dtype=np.int64)],  # a copy (fancy index)
                      similarities=np.asarray(sims, dtype=np.float64),
                      weights=np.asarray(weights, dtype=np.float64),
                      iterations=int(iterations), converged=bool(converged), result=result,
                      fidelity=fidelity, first_contact=first_contact, strategy=strategy)
                for rows, sims, weights, iterations, converged, result, _, fidelity,
                first_contact in raw]
        return traces, single

    def read(self, query: Any, strategy: Strategy = "iterative", *, k: int | None = None) -> np.ndarray:
        """Reconstruct from a query: float32 ``(d,)`` for one, ``(n, d)`` for a batch.

        ``k`` activates that many locations for this read only (default: the
        memory's own ``k``); the memory is not changed.
        """
        self._check_strategy(strategy)
        cfg = self._read_config(k)
        # The common query (one finite float32 vector) in one kernel call; None otherwise.
        lock = self._lock
        lock.acquire_read()
        try:
            out = self._engine.read_one(self._state, cfg, query, strategy)
        finally:
            lock.release_read()
        if out is not None:
            return out
        Q, single = as_vectors(query, self.dim, "query")
        with self._lock.read():
            if self._state.size == 0:
                raise EmptyMemory()
            out = self._engine.read_results(self._state, cfg, Q, strategy)
        return out[0] if single else out

    def analyze(self, query: Any, strategy: Strategy = "iterative", *, k: int | None = None) -> Trace | list[Trace]:
        """A read with its trace (one Trace, or a list for a batch); ``k`` as in :meth:`read`."""
        traces, single = self._read_traces(query, strategy, k)
        return traces[0] if single else traces

    def read_scored(self, query: Any, strategy: Strategy = "iterative", *,
                    k: int | None = None) -> ScoredRead | list[ScoredRead]:
        """A read with its fidelity and first contact (one, or a list for a batch).

        The same numbers as :meth:`analyze`'s, without the activated set: the
        common query (one finite float32 vector) takes one kernel call and no
        trace is built, which is what a server answering reads wants. ``k`` as
        in :meth:`read`.
        """
        self._check_strategy(strategy)
        cfg = self._read_config(k)
        lock = self._lock
        lock.acquire_read()
        try:
            out = self._engine.read_one(self._state, cfg, query, strategy, True)
        finally:
            lock.release_read()
        if out is not None:
            return ScoredRead(*out)
        traces, single = self._read_traces(query, strategy, k)
        scored = [ScoredRead(t.result, t.fidelity, t.first_contact) for t in traces]
        return scored[0] if single else scored

    def attention(self, query: Any, scale: float) -> AttentionResult:
        """Softmax attention over the activated locations.

        logits = scale * (q . p_j) + ln(n_j) with the raw patterns as keys and
        values; the result is ``sum_j alpha_j p_j``, not normalized. In plain
        mode with ``k >= len(memory)`` this is exactly softmax attention.
        """
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise InvalidInput(f"scale: expected a finite number, got {scale!r}")
        Q, single = as_vectors(query, self.dim, "query")
        if not single:
            raise InvalidInput(f"query: expected one vector (d,), got shape {Q.shape}")
        with self._lock.read():
            if self._state.size == 0:
                raise EmptyMemory()
            rows, sims, alpha, result = self._engine.attention(
                self._state, self._kcfg, Q[0], float(scale))
            ids = self._state.ids[np.asarray(rows, dtype=np.int64)].copy()
        return AttentionResult(result, float(scale), ids, np.asarray(sims), np.asarray(alpha))

    def fingerprint(self) -> np.ndarray | None:
        """normalize(sum of counters), refined by an iterative read; None when empty."""
        with self._lock.read():
            n = self._state.size
            if n == 0:
                return None
            total = self._state.counters[:n].sum(axis=0)
        seed = _reference.normalize(total).astype(np.float32)
        return self.read(seed, "iterative")

    def stats(self) -> Stats:
        with self._lock.read():
            n = self._state.size
            w = self._state.weights[:n]
            total = float(w.sum()) if n else 0.0
            return Stats(
                num_locations=n,
                writes=int(self._state.writes),
                total_weight=total,
                current_eta=float(self._state.eta),
                avg_write_weight=total / n if n else 0.0,
                max_write_weight=float(w.max()) if n else 0.0,
            )


def _check_snapshot(config: MemoryConfig, snap: Snapshot) -> None:
    """Raise InvalidInput unless ``snap`` is a snapshot of a memory with this config's dimension."""
    if not isinstance(snap, Snapshot):
        raise InvalidInput(f"snapshot: expected a Snapshot, got {type(snap).__name__}")
    n = snap.ids.shape[0]
    shapes_ok = (
        snap.ids.ndim == 1
        and snap.addresses.shape == (n, config.dim)
        and snap.counters.shape == (n, config.dim)
        and snap.weights.shape == (n,)
    )
    if not shapes_ok:
        raise InvalidInput(
            f"snapshot: expected arrays for {n} locations of dimension {config.dim}, got "
            f"addresses {snap.addresses.shape}, counters {snap.counters.shape}, "
            f"weights {snap.weights.shape}")
    if n and (np.any(np.diff(snap.ids) <= 0) or snap.ids[-1] >= snap.next_id):
        raise InvalidInput("snapshot: expected ids ascending and below next_id, got others")
