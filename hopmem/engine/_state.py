"""The mutable state of one memory: location arrays with spare capacity.

Rows are kept in ascending id order (new locations are appended, removals
shift later rows down), so "lower id" and "lower row" mean the same thing and
the tie rule can work on rows. Both the C kernel and the NumPy reference
operate on this one structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _kernel

__all__ = ["State", "Snapshot", "SPLITMIX_GAMMA", "restore_capacity", "to_half"]

SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def to_half(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x`` (float32) as IEEE halves, the same bits as ``x.astype(np.float16)``.

    Converted by the kernel's vectorised loop where the array allows (NumPy's
    conversion is element by element: ~150 ms for 100,000 x 384, which a
    reopened store's first document query used to pay). ``out``: a C-contiguous
    float16 array of ``x``'s shape to write into; a new one by default.
    """
    if out is None:
        out = np.empty(x.shape, np.float16)
    if not (x.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
            and out.dtype == np.float16 and out.shape == x.shape
            and _kernel.to_half(x.reshape(-1), out.reshape(-1))):
        out[...] = x
    return out


ALIGN = 64  # bytes: a cache line


def zeros_aligned(shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """``np.zeros(shape, dtype)`` whose data starts on a cache line.

    The kernel scans rows with 32-byte loads; at NumPy's usual 16-byte
    alignment every other load of a row whose length is a multiple of 64
    bytes straddles two cache lines, which costs a second access. Zeroed
    like ``np.zeros`` (pages untouched until written).
    """
    item = np.dtype(dtype).itemsize
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(count * item + ALIGN, dtype=np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + count * item].view(dtype).reshape(shape)


def restore_capacity(n: int) -> int:
    """Rows a state restored with ``n`` locations is given: headroom of an
    eighth, so that the first writes after a restore (a reopened store's
    replay, say) fit without doubling, and so copying, every array."""
    return n + max(16, n // 8)


def _spare_base(a: np.ndarray, capacity: int) -> np.ndarray | None:
    """The array ``a`` is the first rows of, when that array has ``capacity`` rows; else None."""
    b = a.base
    if (isinstance(b, np.ndarray) and b.base is None and b.dtype == a.dtype and b.ndim == a.ndim
            and b.shape[0] == capacity and b.shape[1:] == a.shape[1:] and b.flags.c_contiguous
            and b.flags.writeable and a.ctypes.data == b.ctypes.data):
        return b
    return None


@dataclass(frozen=True)
class Snapshot:
    """The complete state of a memory, exact-size copies (see ``Memory.snapshot``)."""

    ids: np.ndarray        # int64 (L,)
    addresses: np.ndarray  # float32 (L, d)
    counters: np.ndarray   # float64 (L, d)
    weights: np.ndarray    # float64 (L,)
    eta: float
    writes: int
    next_id: int
    rng: int

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (
            np.array_equal(self.ids, other.ids)
            and self.addresses.tobytes() == other.addresses.tobytes()
            and self.counters.tobytes() == other.counters.tobytes()
            and self.weights.tobytes() == other.weights.tobytes()
            and self.eta == other.eta
            and self.writes == other.writes
            and self.next_id == other.next_id
            and self.rng == other.rng
        )

    __hash__ = None  # type: ignore[assignment]


class LocationIndex:
    """The native kernel's location index: derived data, never part of a snapshot.

    Rows grouped around unit centroids with radii that bound each row's
    distance to its centroid, so an activation can skip whole groups exactly
    (see "location index" in ``kernels/hopmem_kernel.c``). The kernel keeps it
    valid through writes and merges; it is rebuilt as the memory grows.
    """

    def __init__(self, groups: int, dim: int, capacity: int, rows: int, k: int) -> None:
        self.groups = groups
        self.rows = rows  # rows when built
        self.k = k        # the activation's k it was judged for
        self.useful = False  # whether reads use it (judged once built)
        self.visits = 1.0    # estimated rows + centroids scored per read, over the rows
        # An approximate memory's index: fitted on the rows alone (see
        # hopmem.engine._kernel.approximate_index), rows assigned with BLAS.
        self.approximate = False
        self.centroids = np.zeros((groups, dim), dtype=np.float32)
        self.radius = np.zeros(groups, dtype=np.float64)
        self.group_of = np.zeros(capacity, dtype=np.int32)
        self.members = np.zeros(capacity, dtype=np.int64)
        self.start = np.zeros(groups + 1, dtype=np.int64)

    def grow(self, capacity: int, n: int) -> None:
        group_of = np.zeros(capacity, dtype=np.int32)
        members = np.zeros(capacity, dtype=np.int64)
        group_of[:n] = self.group_of[:n]
        members[:n] = self.members[:n]
        self.group_of, self.members = group_of, members


class State:
    """Location arrays (capacity >= size) plus the scalar state.

    ``implied=True`` (plain memories on the native kernel, which keep norms):
    a plain location's counters are its one input x, and for a unit x (all but
    about one in 50,000) x == float(address * |x|) component by component:
    implied by the address and the norm (see "implied counters"
    in ``kernels/hopmem_kernel.c``). While every location is of weight 1 with
    a norm in the read-out range, the state holds no counters array
    (``held_counters`` None: 4 bytes a component instead of 12); the few rows
    whose counters are not implied keep theirs (``exception_rows``,
    ascending, and ``exception_counters``). ``counters`` makes them all, bit
    for bit what a state that holds them holds. The kernel holds them
    (:meth:`hold_counters`) before a merge or a write of an input outside
    that range; :meth:`drop_implied_counters` lets them go again.
    """

    def __init__(self, dim: int, eta: float, seed: int, capacity: int = 16,
                 compact: bool = False, norms: bool = False, implied: bool = False) -> None:
        self.dim = dim
        capacity = max(capacity, 1)
        self.ids = np.zeros(capacity, dtype=np.int64)
        self.addresses = zeros_aligned((capacity, dim), np.float32)
        # Compact activation keeps an IEEE half copy of the addresses, which
        # the kernel updates row by row with every address it changes.
        self.addresses16 = np.zeros((capacity, dim), dtype=np.float16) if compact else None
        self.implied = bool(implied and norms)
        self.held_counters: np.ndarray | None = (
            None if self.implied else zeros_aligned((capacity, dim), np.float64))
        self.exception_rows = np.zeros(0, dtype=np.int64)
        self.exception_counters = np.zeros((0, dim), dtype=np.float64)
        self.n_exceptions = 0
        # A plain memory on the native kernel keeps each row's |counters|, which
        # the kernel updates with every row it changes (derived data, never in a
        # snapshot): its fast read then reads a location of weight 1 out as
        # norm * address, float32 rows, instead of the float64 counters.
        self.norms = np.zeros(capacity, dtype=np.float64) if norms else None
        self.weights = np.zeros(capacity, dtype=np.float64)
        self.size = 0
        self.eta = float(eta)
        self.writes = 0
        self.next_id = 1
        # The generator's state starts from the seed mixed once, so that seed 0
        # does not start from an all-zero state.
        self.rng = (int(seed) * SPLITMIX_GAMMA + 0x2545F4914F6CDD1D) & _MASK64
        self.index: LocationIndex | None = None  # built and kept by the native kernel
        self.index_pending = False  # an index is due: the next read builds it

    @property
    def capacity(self) -> int:
        return self.ids.shape[0]

    @property
    def counters(self) -> np.ndarray:
        """The counters, float64 (capacity, d): the held array, or (implied) rows
        [0, size) made from the addresses and norms, read-only."""
        if self.held_counters is not None:
            return self.held_counters
        out = self._implied_rows()
        out.flags.writeable = False
        return out

    @counters.setter
    def counters(self, value: np.ndarray) -> None:
        self.held_counters = value

    def _implied_rows(self) -> np.ndarray:
        """Rows [0, size) of the counters, made by the kernel (held or not)."""
        out = np.empty((self.size, self.dim), dtype=np.float64)
        _kernel.counter_rows(self, 0, self.size, out)
        return out

    def hold_counters(self) -> None:
        """Hold the counters as an array (the kernel writes them), if not held so far."""
        if self.held_counters is None:
            held = zeros_aligned((self.capacity, self.dim), np.float64)
            _kernel.counter_rows(self, 0, self.size, held[: self.size])
            self.held_counters = held
            self.exception_rows = np.zeros(0, dtype=np.int64)
            self.exception_counters = np.zeros((0, self.dim), dtype=np.float64)
            self.n_exceptions = 0

    def drop_implied_counters(self) -> None:
        """Stop holding the counters where every row allows it (an implied state)."""
        if self.implied and self.held_counters is not None:
            _kernel.release_counters(self)

    def reserve_exceptions(self, extra: int) -> None:
        """Make room for ``extra`` more exception rows (amortised doubling)."""
        need = self.n_exceptions + extra
        have = self.exception_rows.shape[0]
        if need <= have:
            return
        new = max(need, 2 * have, 16)
        rows = np.zeros(new, dtype=np.int64)
        counters = np.zeros((new, self.dim), dtype=np.float64)
        rows[: self.n_exceptions] = self.exception_rows[: self.n_exceptions]
        counters[: self.n_exceptions] = self.exception_counters[: self.n_exceptions]
        self.exception_rows, self.exception_counters = rows, counters

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more rows (amortised doubling)."""
        need = self.size + extra
        if need <= self.capacity:
            return
        new = max(need, 2 * self.capacity)
        n = self.size
        ids = np.zeros(new, dtype=np.int64)
        addresses = zeros_aligned((new, self.dim), np.float32)
        weights = np.zeros(new, dtype=np.float64)
        ids[:n] = self.ids[:n]
        addresses[:n] = self.addresses[:n]
        if self.addresses16 is not None:
            half = np.zeros((new, self.dim), dtype=np.float16)
            half[:n] = self.addresses16[:n]
            self.addresses16 = half
        counters = None
        if self.held_counters is not None:
            counters = zeros_aligned((new, self.dim), np.float64)
            counters[:n] = self.held_counters[:n]
        if self.norms is not None:
            norms = np.zeros(new, dtype=np.float64)
            norms[:n] = self.norms[:n]
            self.norms = norms
        weights[:n] = self.weights[:n]
        self.ids, self.addresses, self.held_counters, self.weights = ids, addresses, counters, weights
        if self.index is not None:
            self.index.grow(new, n)

    def mark(self) -> tuple:
        """What :meth:`rewind` needs to undo a plain write (rows only appended)."""
        return (self.size, self.writes, self.next_id, self.eta, self.rng, self.n_exceptions,
                self.held_counters is None)

    def rewind(self, mark: tuple) -> None:
        """Undo the rows appended since ``mark`` (a plain write that failed midway):
        cheaper than a snapshot, which copies every row. The index is dropped
        (the caller marks it due again)."""
        size, self.writes, self.next_id, self.eta, self.rng, n_exceptions, lean = mark
        for array in (self.ids, self.addresses, self.held_counters, self.weights, self.norms,
                      self.addresses16):
            if array is not None:
                array[size:self.size] = 0
        self.size = size
        self.n_exceptions = n_exceptions if self.held_counters is None else 0
        self.index, self.index_pending = None, False
        if lean:
            self.drop_implied_counters()  # held for an input of the write: no longer needed

    def snapshot(self) -> Snapshot:
        n = self.size
        return Snapshot(
            ids=self.ids[:n].copy(),
            addresses=self.addresses[:n].copy(),
            counters=(self._implied_rows() if self.held_counters is None
                      else self.held_counters[:n].copy()),
            weights=self.weights[:n].copy(),
            eta=self.eta,
            writes=self.writes,
            next_id=self.next_id,
            rng=self.rng,
        )

    @classmethod
    def from_snapshot(cls, dim: int, snap: Snapshot, compact: bool = False,
                      norms: bool = False, implied: bool = False) -> State:
        n = int(snap.ids.shape[0])
        state = cls(dim, snap.eta, 0, capacity=restore_capacity(n), compact=compact, norms=norms,
                    implied=implied)
        state.hold_counters()
        state.ids[:n] = snap.ids
        state.addresses[:n] = snap.addresses
        state.counters[:n] = snap.counters
        state.weights[:n] = snap.weights
        state._set_scalars(snap)
        return state

    @classmethod
    def adopt(cls, dim: int, snap: Snapshot, compact: bool = False,
              norms: bool = False, implied: bool = False) -> State:
        """``from_snapshot`` that takes over the snapshot's arrays instead of copying them.

        For a snapshot made to be adopted: each array the first rows of a
        zero-padded array of ``restore_capacity(n)`` rows (as
        ``hopmem.store.journal.load_checkpoint`` allocates them). The state
        then owns that memory, so the snapshot must not be used afterwards.
        Restoring a large memory is mostly the first touch of its pages (in a
        VM especially), and this touches them once instead of twice. Any other
        snapshot is copied, as by ``from_snapshot``.
        """
        n = int(snap.ids.shape[0])
        arrays = (snap.ids, snap.addresses, snap.counters, snap.weights)
        bases = [_spare_base(a, restore_capacity(n)) for a in arrays]
        spare = [b for b in bases if b is not None]
        if len(spare) < len(bases):
            return cls.from_snapshot(dim, snap, compact=compact, norms=norms, implied=implied)
        state = cls(dim, snap.eta, 0, capacity=1, compact=compact)
        state.implied = bool(implied and norms)
        state.ids, state.addresses, state.counters, state.weights = spare
        if compact:
            state.addresses16 = np.zeros((restore_capacity(n), dim), dtype=np.float16)
        if norms:
            state.norms = np.zeros(restore_capacity(n), dtype=np.float64)
        state._set_scalars(snap)
        return state

    def _set_scalars(self, snap: Snapshot) -> None:
        """Size, scalars and the half copy from ``snap`` (the arrays already hold its rows)."""
        n = int(snap.ids.shape[0])
        self.size = n
        self.eta = float(snap.eta)
        self.writes = int(snap.writes)
        self.next_id = int(snap.next_id)
        self.rng = int(snap.rng) & _MASK64
        if self.addresses16 is not None:
            # IEEE round-to-nearest-even, as the kernel's own conversion.
            to_half(np.ascontiguousarray(snap.addresses, np.float32), self.addresses16[:n])
        if self.norms is not None:
            _kernel.sync_norms(self)  # the kernel's own arithmetic, as its writes keep them
        self.drop_implied_counters()

    def restore(self, snap: Snapshot) -> None:
        """Overwrite this state in place with a snapshot (used to roll back)."""
        other = State.from_snapshot(self.dim, snap, compact=self.addresses16 is not None,
                                    norms=self.norms is not None, implied=self.implied)
        self.__dict__.update(other.__dict__)
