"""Resolution: from a vector (usually a reconstruction) to the documents behind it.

Two modes, as in ALGORITHM.md (Documents):

- ``"exact"``: cosine against every live document's stored vector, top ``n``.
  A linear scan in the native kernel (:func:`hopmem.memory.top_k_dot`) over a
  float32 matrix of unit-normalised document vectors kept in memory.
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

from typing import Callable, Literal

import numpy as np

from ._rwlock import RWLock
from .errors import EmptyMemory, InvalidInput
from .memory import Memory, as_vectors, top_k_dot

__all__ = ["ResolveMode", "MODES", "VectorIndex", "PostingIndex", "resolve_exact", "resolve_indexed",
           "check_mode", "check_n"]

ResolveMode = Literal["indexed", "exact"]
MODES = ("indexed", "exact")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidInput(f"mode: expected 'indexed' or 'exact', got {mode!r}")
    return mode


def check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidInput(f"n: expected an integer >= 1, got {n!r}")
    return int(n)


def _unit_rows(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    norms = np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    return (X / np.where(norms < 1e-12, 1.0, norms)).astype(np.float32)


class VectorIndex:
    """Unit-normalised document vectors with ascending integer ids, in memory.

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
        self._alive = np.zeros(capacity, bool)
        self._size = 0
        self._dead = 0
        self._lock = RWLock()

    def __len__(self) -> int:
        return self._size - self._dead

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
        self._ids, self._vectors, self._alive = ids, vectors, alive

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Append documents (ids ascending and above every id already added)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size == 0:
            return
        vectors = _unit_rows(np.asarray(vectors, np.float32).reshape(ids.size, self.dim))
        with self._lock.write():
            last = self._ids[self._size - 1] if self._size else 0
            if ids[0] <= last or np.any(np.diff(ids) <= 0):
                raise InvalidInput("VectorIndex.add: ids must ascend above the ids already held")
            self._reserve(ids.size)
            s, e = self._size, self._size + ids.size
            self._ids[s:e] = ids
            self._vectors[s:e] = vectors
            self._alive[s:e] = True
            self._size = e

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
            self._dead += 1
            if self._dead > max(1024, self._size // 4):
                self._compact()
            return True

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._size])
        n = keep.size
        self._ids[:n] = self._ids[keep]
        self._vectors[:n] = self._vectors[keep]
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

    def search(self, query: np.ndarray, n: int,
               candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``n`` live documents by cosine with ``query``: ``(ids, similarities)``.

        With ``candidates`` (document ids), only those are scored.
        """
        q = _unit_rows(np.asarray(query, np.float32).reshape(1, self.dim))
        with self._lock.read():
            if candidates is None:
                if self._size == 0 or self._size == self._dead:
                    return np.zeros(0, np.int64), np.zeros(0, np.float32)
                k = min(self._size, n + self._dead)
                rows, scores = top_k_dot(self._vectors[: self._size], q, k)
                rows, scores = rows[0], scores[0]
                live = self._alive[rows]
                rows, scores = rows[live][:n], scores[live][:n]
                return self._ids[rows].copy(), scores.astype(np.float32)
            rows = np.unique(self._rows(candidates))  # ascending: id order for ties
            if rows.size == 0:
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            sub_rows, scores = top_k_dot(self._vectors[rows], q, min(n, rows.size))
            return self._ids[rows[sub_rows[0]]].copy(), scores[0].astype(np.float32)


class PostingIndex:
    """Location id -> ids of the documents posted on it, in memory.

    Built from each document's posting list (the locations its write touched
    or created) and the ordered (removed, survivor) merges since: a posting on
    a location that was merged away belongs to the survivor. Deleted documents
    are not removed here (the caller filters candidates against the live
    documents; see :meth:`VectorIndex.search`); :meth:`compact` drops them.
    Thread safe.
    """

    def __init__(self) -> None:
        self._lists: dict[int, list[int]] = {}
        self._lock = RWLock()

    @classmethod
    def build(cls, doc_ids: np.ndarray, lengths: np.ndarray, locations: np.ndarray,
              merges: np.ndarray) -> "PostingIndex":
        """From documents (``doc_ids``, with ``lengths[i]`` of the flat ``locations``
        each) and the merges ``(m, 2)`` in the order they happened."""
        index = cls()
        doc_ids = np.asarray(doc_ids, np.int64)
        locations = np.asarray(locations, np.int64)
        if locations.size == 0:
            return index
        owners = np.repeat(doc_ids, np.asarray(lengths, np.int64))
        parent: dict[int, int] = {int(r): int(s) for r, s in np.asarray(merges, np.int64).reshape(-1, 2)}
        if parent:
            unique = np.unique(locations)
            final = np.array([_follow(parent, int(x)) for x in unique], np.int64)
            locations = final[np.searchsorted(unique, locations)]
        order = np.lexsort((owners, locations))
        locations, owners = locations[order], owners[order]
        starts = np.flatnonzero(np.r_[True, locations[1:] != locations[:-1]])
        ends = np.r_[starts[1:], locations.size]
        for s, e in zip(starts.tolist(), ends.tolist()):
            index._lists[int(locations[s])] = owners[s:e].tolist()
        return index

    def add(self, doc_id: int, locations: np.ndarray) -> None:
        with self._lock.write():
            for loc in np.asarray(locations).reshape(-1).tolist():
                self._lists.setdefault(loc, []).append(doc_id)

    def merge(self, pairs: list[tuple[int, int]]) -> None:
        """Apply merges in order: the removed location's documents go to the survivor."""
        with self._lock.write():
            for removed, survivor in pairs:
                moved = self._lists.pop(int(removed), None)
                if moved:
                    self._lists.setdefault(int(survivor), []).extend(moved)

    def documents(self, locations: np.ndarray) -> np.ndarray:
        """Unique ids of the documents posted on any of ``locations`` (ascending)."""
        with self._lock.read():
            parts = [self._lists.get(loc, ()) for loc in np.asarray(locations).reshape(-1).tolist()]
            total = sum(len(p) for p in parts)
            if not total:
                return np.zeros(0, np.int64)
            out = np.fromiter((d for p in parts for d in p), np.int64, total)
        return np.unique(out)

    def compact(self, alive: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep only the documents for which ``alive(ids)`` is True."""
        with self._lock.write():
            for loc, docs in list(self._lists.items()):
                arr = np.asarray(docs, np.int64)
                keep = arr[alive(arr)].tolist()
                if keep:
                    self._lists[loc] = keep
                else:
                    del self._lists[loc]

    def __len__(self) -> int:
        return sum(len(v) for v in self._lists.values())


def _follow(parent: dict[int, int], x: int) -> int:
    """The final survivor of location ``x`` (with path compression)."""
    path = []
    while x in parent:
        path.append(x)
        x = parent[x]
    for p in path:
        parent[p] = x
    return x


def resolve_exact(index: VectorIndex, vector: np.ndarray, n: int = 10
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Exact mode: the ``n`` documents nearest ``vector`` by cosine, best first."""
    q, single = as_vectors(vector, index.dim, "vector")
    if not single:
        raise InvalidInput(f"vector: expected one vector (d,), got shape {q.shape}")
    return index.search(q[0], check_n(n))


def resolve_indexed(memory: Memory, index: VectorIndex, vector: np.ndarray,
                    postings: Callable[[np.ndarray], np.ndarray], n: int = 10
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Indexed mode: documents posted on the locations ``vector`` activates.

    ``postings(location_ids)`` returns the document ids posted on those
    locations. An empty memory has no documents: the result is empty.
    """
    q, single = as_vectors(vector, index.dim, "vector")
    if not single:
        raise InvalidInput(f"vector: expected one vector (d,), got shape {q.shape}")
    n = check_n(n)
    try:
        trace = memory.analyze(q[0], "fast")
    except EmptyMemory:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    candidates = np.asarray(postings(trace.activated), np.int64)
    return index.search(q[0], n, candidates)
