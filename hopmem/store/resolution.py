"""Resolution: from a vector (usually a reconstruction) to the documents behind it.

Two modes:

- ``"exact"``: cosine against every live document's stored vector, top ``limit``.
  A linear scan in the native kernel (:func:`hopmem.engine.memory.top_k_cosine`)
  over a float16 copy of the unit-normalized document vectors kept in memory,
  with every candidate within the half copy's proven error bound re-scored
  exactly in float32: half the bytes of a float32 scan, the same answer.
- ``"indexed"``: only the documents on the posting lists of the locations the
  vector activates in the memory, then exact cosine among them. Cheaper on a
  large collection; it can miss documents whose locations the probe does not
  activate.

Deleted documents leave both indexes at once; deleting never un-writes a
document's contribution to the memory (superposition).

Ties are broken by the lower document id (rows are kept in id order and the
kernel breaks ties by the lower row).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._arguments import deprecated_arguments
from .._deprecation import module_aliases
from ..engine._rwlock import RWLock
from ..engine._state import to_half
from ..engine.memory import Memory, Trace, as_vectors, top_k_cosine, top_k_dot
from ..errors import EmptyMemory, InvalidInput

__all__ = ["ResolveMode", "RESOLVE_MODES", "VectorIndex", "PostingIndex", "resolve_exact",
           "resolve_indexed", "check_mode", "check_limit"]

ResolveMode = Literal["indexed", "exact"]
#: The resolution modes (``MODES`` before 0.2).
RESOLVE_MODES = ("indexed", "exact")


def check_mode(mode: str) -> str:
    if mode not in RESOLVE_MODES:
        raise InvalidInput(f"mode: expected 'indexed' or 'exact', got {mode!r}")
    return mode


def check_limit(limit: int, name: str = "limit") -> int:
    """``limit`` as an int, if it is an integer >= 1 (a result count); else InvalidInput."""
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise InvalidInput(f"{name}: expected an integer >= 1, got {limit!r}")
    return int(limit)


def _unit_rows(X: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows scaled to unit length (rows with norm < 1e-12 stay zero), float32.

    Norms are float32 dot products (einsum): one pass, no float64 copy of a
    large matrix; the relative error (~1e-7) is far below what cosine ranking
    can see.
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    if out is None:
        out = np.empty_like(X)
    step = 8192
    for s in range(0, X.shape[0], step):
        chunk = X[s: s + step]
        norms = np.sqrt(np.einsum("ij,ij->i", chunk, chunk))
        np.divide(chunk, np.where(norms < 1e-12, np.float32(1.0), norms)[:, None],
                  out=out[s: s + step])
    return out


class VectorIndex:
    """Unit-normalized document vectors with ascending integer ids, in memory.

    Append-only ids (each :meth:`add` must bring ids above every id seen);
    :meth:`remove` marks a row dead and the matrix is compacted when a quarter
    of it is dead. Thread safe: searches share a readers-writer lock.

    Parameters
    ----------
    dim : int
        The vectors' dimension.
    """

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = int(dim)
        capacity = max(16, int(capacity))
        self._ids = np.zeros(capacity, np.int64)
        self._vectors = np.zeros((capacity, self.dim), np.float32)
        # The float16 copy an exact search scans first (see search()): built by the
        # first exact search, then kept in step; None until then (indexed
        # queries never need it, and it is half the vectors' memory).
        self._half: np.ndarray | None = None
        self._alive = np.zeros(capacity, bool)
        self._size = 0
        self._dead = 0
        self._lock = RWLock()

    def __len__(self) -> int:
        return self._size - self._dead

    @classmethod
    def adopt(cls, ids: np.ndarray, vectors: np.ndarray) -> VectorIndex:
        """An index over ``vectors`` (float32 ``(n, d)``, normalized in place and kept,
        not copied) with ascending ``ids``."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if vectors.dtype != np.float32 or not vectors.flags.c_contiguous or \
                vectors.shape[0] != ids.size:
            raise InvalidInput("VectorIndex.adopt: expected C-contiguous float32 (n, d) for n ids")
        if ids.size > 1 and np.any(np.diff(ids) <= 0):
            raise InvalidInput("VectorIndex.adopt: expected ascending ids, got ids out of order")
        index = cls(vectors.shape[1], capacity=16)
        _unit_rows(vectors, out=vectors)
        index._ids = ids.copy() if ids.size else np.zeros(16, np.int64)
        index._vectors = vectors if ids.size else np.zeros((16, vectors.shape[1]), np.float32)
        index._half = None
        index._alive = np.ones(max(ids.size, 16), bool)
        index._size = int(ids.size)
        return index

    def _reserve(self, extra: int) -> None:
        need = self._size + extra
        cap = self._ids.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        n = self._size
        ids, vectors, alive = (np.zeros(new, np.int64), np.zeros((new, self.dim), np.float32),
                               np.zeros(new, bool))
        ids[:n], vectors[:n], alive[:n] = self._ids[:n], self._vectors[:n], self._alive[:n]
        if self._half is not None:
            half = np.zeros((new, self.dim), np.float16)
            half[:n] = self._half[:n]
            self._half = half
        self._ids, self._vectors, self._alive = ids, vectors, alive

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Append documents (ids ascending and above every id already added)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size == 0:
            return
        vectors = np.asarray(vectors, np.float32).reshape(ids.size, self.dim)
        with self._lock.write():
            last = self._ids[self._size - 1] if self._size else 0
            if ids[0] <= last or np.any(np.diff(ids) <= 0):
                raise InvalidInput("VectorIndex.add: expected ascending ids above the ids already held, got "
                                   "ids out of order")
            self._reserve(ids.size)
            s, e = self._size, self._size + ids.size
            self._ids[s:e] = ids
            _unit_rows(vectors, out=self._vectors[s:e])
            if self._half is not None:
                to_half(self._vectors[s:e], self._half[s:e])
            self._alive[s:e] = True
            self._size = e

    def _build_half(self) -> None:
        """The float16 copy of the vectors, once (writers keep it in step after)."""
        with self._lock.write():
            if self._half is None:
                half = np.zeros(self._vectors.shape, np.float16)
                to_half(self._vectors[: self._size], half[: self._size])
                self._half = half

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the live documents among ``ids`` (unknown or dead ids dropped)."""
        held = self._ids[: self._size]
        ids = np.asarray(ids, np.int64).reshape(-1)
        rows = np.searchsorted(held, ids)
        ok = rows < self._size
        rows, ids = rows[ok], ids[ok]
        ok = held[rows] == ids
        rows = rows[ok]
        return rows[self._alive[rows]]

    def remove(self, doc_id: int) -> bool:
        """Drop one document; False if it was not held."""
        with self._lock.write():
            rows = self._rows(np.array([doc_id]))
            if rows.size == 0:
                return False
            self._alive[rows[0]] = False
            self._vectors[rows[0]] = 0.0
            if self._half is not None:
                self._half[rows[0]] = 0.0
            self._dead += 1
            if self._dead > max(1024, self._size // 4):
                self._compact()
            return True

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._size])
        n = keep.size
        self._ids[:n] = self._ids[keep]
        self._vectors[:n] = self._vectors[keep]
        if self._half is not None:
            self._half[:n] = self._half[keep]
        self._alive[:n] = True
        self._alive[n: self._size] = False
        self._size, self._dead = n, 0

    def alive(self, ids: np.ndarray) -> np.ndarray:
        """A boolean mask: which of ``ids`` are live documents here."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        with self._lock.read():
            held = self._ids[: self._size]
            rows = np.minimum(np.searchsorted(held, ids), max(self._size - 1, 0))
            if self._size == 0:
                return np.zeros(ids.shape, bool)
            return (held[rows] == ids) & self._alive[rows]

    @property
    def dead(self) -> int:
        """Rows removed since the last compaction."""
        return self._dead

    def vector(self, doc_id: int) -> np.ndarray | None:
        """The unit vector held for ``doc_id`` (a copy), or None."""
        with self._lock.read():
            rows = self._rows(np.array([doc_id]))
            return None if rows.size == 0 else self._vectors[rows[0]].copy()

    @deprecated_arguments("VectorIndex.search", {"n": "limit"})
    def search(self, query: np.ndarray, limit: int,
               candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``limit`` live documents by cosine with ``query``: ``(ids, similarities)``.

        With ``candidates`` (document ids), only those are scored.
        """
        q = _unit_rows(np.asarray(query, np.float32).reshape(1, self.dim))
        if candidates is None and self._half is None:
            self._build_half()
        with self._lock.read():
            if candidates is None:
                if self._size == 0 or self._size == self._dead:
                    return np.zeros(0, np.int64), np.zeros(0, np.float32)
                k = min(self._size, limit + self._dead)
                half = self._half
                assert half is not None  # built above; once built it is never dropped
                rows, scores = top_k_cosine(self._vectors[: self._size], q, k,
                                            half=half[: self._size])
                rows, scores = rows[0], scores[0]
                live = self._alive[rows]
                rows, scores = rows[live][:limit], scores[live][:limit]
                return self._ids[rows].copy(), scores.astype(np.float32)
            rows = np.unique(self._rows(candidates))  # ascending: id order for ties
            if rows.size == 0:
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            sub_rows, scores = top_k_dot(self._vectors[rows], q, min(limit, rows.size))
            return self._ids[rows[sub_rows[0]]].copy(), scores[0].astype(np.float32)


class PostingIndex:
    """Location id -> ids of the documents posted on it, in memory.

    Built from each document's posting list (the locations its write touched
    or created) and the ordered (removed, survivor) merges since: a posting on
    a location that was merged away belongs to the survivor.

    Layout: a compact base (location ids sorted, offsets, document ids: CSR
    arrays, 8 bytes per posting) plus a small delta (``array('q')`` per
    location: not tracked by the garbage collector, which would otherwise walk
    every posting of the delta on each full collection) for what was added
    since, folded into the base when it grows; merges after the build
    are kept as survivor -> absorbed locations. Deleted documents are not
    removed at once (the caller filters candidates against the live documents,
    see :meth:`VectorIndex.alive`); :meth:`compact` drops them. Thread safe.
    """

    def __init__(self) -> None:
        self._keys = np.zeros(0, np.int64)     # sorted location ids of the base
        self._starts = np.zeros(1, np.int64)   # _keys[i] holds _docs[_starts[i]:_starts[i + 1]]
        self._docs = np.zeros(0, np.int64)
        self._delta: dict[int, array] = {}
        self._delta_size = 0
        self._absorbed: dict[int, list[int]] = {}  # survivor -> base keys merged into it
        self._gone: set[int] = set()                # locations merged away since the build
        self._lock = RWLock()

    @classmethod
    def build(cls, doc_ids: np.ndarray, lengths: np.ndarray, locations: np.ndarray,
              merges: np.ndarray) -> PostingIndex:
        """From documents (``doc_ids``, with ``lengths[i]`` of the flat ``locations``
        each) and the merges ``(m, 2)`` in the order they happened."""
        index = cls()
        locations = np.asarray(locations, np.int64)
        owners = np.repeat(np.asarray(doc_ids, np.int64), np.asarray(lengths, np.int64))
        parent: dict[int, int] = {int(r): int(s)
                                  for r, s in np.asarray(merges, np.int64).reshape(-1, 2).tolist()}
        if parent and locations.size:
            unique, inverse = np.unique(locations, return_inverse=True)
            final = np.array([_follow(parent, x) for x in unique.tolist()], np.int64)
            locations = final[inverse.reshape(-1)]
        index._set_base(locations, owners)
        return index

    def _set_base(self, locations: np.ndarray, owners: np.ndarray) -> None:
        order = _argsort_ids(locations)
        locations, owners = locations[order], owners[order]
        if locations.size:
            first = np.flatnonzero(np.r_[True, locations[1:] != locations[:-1]])
            self._keys = locations[first]
            self._starts = np.r_[first, locations.size].astype(np.int64)
        else:
            self._keys, self._starts = np.zeros(0, np.int64), np.zeros(1, np.int64)
        self._docs = owners
        self._absorbed = {}
        self._gone = set()

    def _base(self, location: int) -> np.ndarray:
        i = int(np.searchsorted(self._keys, location))
        if i < self._keys.size and self._keys[i] == location:
            return self._docs[self._starts[i]: self._starts[i + 1]]
        return self._docs[:0]

    def add(self, doc_id: int, locations: np.ndarray) -> None:
        self.add_many([doc_id], [locations])

    def add_many(self, doc_ids: Sequence[int], postings: Sequence[Any]) -> None:
        """Post each document ``doc_ids[i]`` on the locations ``postings[i]`` (ids)."""
        with self._lock.write():
            delta = self._delta
            for doc_id, locations in zip(doc_ids, postings):
                locs = (np.asarray(locations).reshape(-1).tolist()
                        if isinstance(locations, np.ndarray) else list(locations))
                for loc in locs:
                    docs = delta.get(loc)
                    if docs is None:
                        docs = delta[loc] = array("q")
                    docs.append(doc_id)
                self._delta_size += len(locs)
            if self._delta_size > max(200_000, self._docs.size):
                self._fold(None)

    def merge(self, pairs: list[tuple[int, int]]) -> None:
        """Apply merges in order: the removed location's documents go to the survivor."""
        with self._lock.write():
            for removed, survivor in pairs:
                removed, survivor = int(removed), int(survivor)
                moved = self._delta.pop(removed, None)
                if moved:
                    self._delta.setdefault(survivor, array("q")).extend(moved)
                absorbed = self._absorbed.setdefault(survivor, [])
                absorbed.append(removed)
                absorbed.extend(self._absorbed.pop(removed, ()))
                self._gone.add(removed)

    def documents(self, locations: np.ndarray) -> np.ndarray:
        """Unique ids of the documents posted on any of ``locations`` (ascending)."""
        with self._lock.read():
            parts = []
            for loc in np.asarray(locations).reshape(-1).tolist():
                if loc in self._gone:
                    continue  # merged away: its documents answer for the survivor
                parts.append(self._base(loc))
                for old in self._absorbed.get(loc, ()):
                    parts.append(self._base(old))
                extra = self._delta.get(loc)
                if extra:
                    # A copy: a view would pin the array('q'), and a writer's
                    # append to it after the lock is released would fail.
                    parts.append(np.array(extra, np.int64))
        if not parts:
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate(parts))

    def _fold(self, alive: Callable[[np.ndarray], np.ndarray] | None) -> None:
        """Merge delta and merges into a new base; keep only ``alive`` documents."""
        keys = np.repeat(self._keys, np.diff(self._starts))
        if self._absorbed:
            final = {old: new for new, olds in self._absorbed.items() for old in olds}
            unique, inverse = np.unique(keys, return_inverse=True)
            keys = np.array([final.get(k, k) for k in unique.tolist()],
                            np.int64)[inverse.reshape(-1)]
        locs = [keys] + [np.full(len(v), k, np.int64) for k, v in self._delta.items()]
        owners = [self._docs] + [np.asarray(v, np.int64) for v in self._delta.values()]
        locations, docs = np.concatenate(locs), np.concatenate(owners)
        if alive is not None and docs.size:
            keep = alive(docs)
            locations, docs = locations[keep], docs[keep]
        self._set_base(locations, docs)
        self._delta, self._delta_size = {}, 0

    def compact(self, alive: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep only the documents for which ``alive(ids)`` is True."""
        with self._lock.write():
            self._fold(alive)

    def locations(self) -> np.ndarray:
        """Location ids that hold postings (merged-away ones resolved), ascending."""
        with self._lock.read():
            final = {old: new for new, olds in self._absorbed.items() for old in olds}
            keys = {final.get(k, k) for k in self._keys.tolist()}
            keys.update(k for k, v in self._delta.items() if v)
        return np.array(sorted(keys), np.int64)

    def __len__(self) -> int:
        return int(self._docs.size) + self._delta_size


def _argsort_ids(x: np.ndarray) -> np.ndarray:
    """A stable argsort of non-negative ids: LSD radix sort by 16-bit digits.

    NumPy's stable sort is a radix sort for 16-bit keys and a merge sort
    otherwise; two 16-bit passes sort 2 million ids about 3x faster than
    ``np.argsort`` on int64 (this is the bulk of building a posting index).
    """
    if x.size == 0:
        return np.zeros(0, np.int64)
    top = int(x.max())
    if int(x.min()) < 0 or top >= 1 << 32:
        return np.argsort(x, kind="stable")
    order = np.argsort((x & 0xFFFF).astype(np.uint16), kind="stable")
    if top >= 1 << 16:
        high = (x >> 16).astype(np.uint16)[order]
        order = order[np.argsort(high, kind="stable")]
    return order


def _follow(parent: dict[int, int], x: int) -> int:
    """The final survivor of location ``x`` (with path compression)."""
    path = []
    while x in parent:
        path.append(x)
        x = parent[x]
    for p in path:
        parent[p] = x
    return x


@deprecated_arguments("hopmem.store.resolution.resolve_exact", {"n": "limit"})
def resolve_exact(index: VectorIndex, vector: np.ndarray, limit: int = 10
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Exact mode: the ``limit`` documents nearest ``vector`` by cosine, best first."""
    q, single = as_vectors(vector, index.dim, "vector")
    if not single:
        raise InvalidInput(f"vector: expected one vector (d,), got shape {q.shape}")
    return index.search(q[0], check_limit(limit))


@deprecated_arguments("hopmem.store.resolution.resolve_indexed", {"n": "limit"})
def resolve_indexed(memory: Memory, index: VectorIndex, vector: np.ndarray,
                    postings: Callable[[np.ndarray], np.ndarray], limit: int = 10
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Indexed mode: documents posted on the locations ``vector`` activates.

    ``postings(location_ids)`` returns the document ids posted on those
    locations. An empty memory has no documents: the result is empty.
    """
    q, single = as_vectors(vector, index.dim, "vector")
    if not single:
        raise InvalidInput(f"vector: expected one vector (d,), got shape {q.shape}")
    limit = check_limit(limit)
    try:
        trace = memory.analyze(q[0], "fast")
    except EmptyMemory:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    assert isinstance(trace, Trace)  # one vector: one trace
    candidates = np.asarray(postings(trace.activated), np.int64)
    return index.search(q[0], limit, candidates)


def _check_n(n: int) -> int:
    """The deprecated ``check_n``: :func:`check_limit` with the old parameter name in errors."""
    return check_limit(n, "n")


#: Names deprecated in 0.2 (removed in 0.3), served with a ``DeprecationWarning``.
__getattr__ = module_aliases(__name__, {"MODES": ("RESOLVE_MODES", lambda: RESOLVE_MODES),
                                        "check_n": ("check_limit", lambda: _check_n)})
