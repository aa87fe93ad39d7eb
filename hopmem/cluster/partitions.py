"""Stable placement, and partitioned collections: one logical collection over P collections.

Nothing here imports Ray: the parts of a :class:`PartitionedCollection` are
any objects with the collection API used below (:class:`CollectionLike`):
local :class:`hopmem.store.Collection` objects, or proxies of collections
held by shard actors on other machines.

Placement
---------
:func:`stable_shard` maps ``(database, collection)`` to one of S shards by a
BLAKE2b hash of a length-prefixed UTF-8 encoding of both names: the same in
every process, on every machine, after every restart (Python's ``hash()`` of
a str is salted per process and never used).

Document ids
------------
A partition numbers its documents 1, 2, 3, ... like any collection. The
partitioned collection's id of local document ``l`` of partition ``p`` (of
``P``) is ``(l - 1) * P + p + 1`` (:func:`encode_doc_id`), so the partition of
an id is ``(id - 1) % P`` (:func:`partition_of`) and the local id
``(id - 1) // P + 1`` (:func:`local_doc_id`). Round-robin placement gives each
new document to the partition whose next id is the lowest; documents written
only through the partitioned collection are then numbered 1, 2, 3, ... in
write order, exactly as one collection numbers them.

Semantics
---------
* ``resolve(vector, limit, mode="exact")`` asks every partition for its top
  ``limit`` and merges them by (similarity descending, id ascending): the
  order and tie-break of one collection, with the same float32 scores (each
  document's score is computed alone, from its own vector), so the answer is
  exactly that of a single collection holding the same documents with the
  same ids. ``mode="indexed"`` merges the partitions' indexed answers the same
  way; each partition's candidates come from its own memory, so that answer
  may differ from a single collection's indexed one.
* ``documents.get`` / ``delete`` go to the id's partition; ``count`` sums;
  ``list(offset, limit)`` merges the partitions' pages in id order (it reads
  ``offset + limit`` documents, so deep offsets cost more than on one
  collection).
* Memory reads (``read``, ``read_scored``, ``analyze``, ``attention``,
  ``recall``) and the other memory operations are refused with
  :class:`~hopmem.errors.NotSupported`: P competitive memories, each trained
  on a share of the writes, are not one memory, and no merge of their reads
  is the read of one.
* A write is atomic per partition, not across partitions: if one partition
  fails after another committed its share, the error (its own type) carries
  a note naming the partitions that committed. Give writes a ``write_id``
  and retry with it: every partition records the id with its share, and a
  retry applies only the shares not yet applied.
* With a ``write_id`` round-robin starts at the partition :func:`stable_hash`
  of the id picks, so a retry splits the batch exactly as the first attempt
  did, whatever was written meanwhile (the ids are then not the single
  collection's 1, 2, 3, ... numbering, but still unique and still encode
  their partition). A reused id with another payload is refused by each
  partition whose share differs (the first row's partition is written first
  and alone, so most misuse is refused before anything is written); the check
  is per partition, so rows of a new batch that land on a partition that got
  none of the first are applied.
"""

from __future__ import annotations

import functools
import heapq
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import numpy as np

from ..engine.memory import as_vectors
from ..errors import InvalidInput, NotFound, NotSupported
from ..store.collection import CollectionStats, check_write_id, encode_metadata
from ..store.documents import Document, DocumentHit, Documents
from ..store.resolution import ResolveMode, check_limit, check_mode
from .placement import stable_hash, stable_shard

__all__ = [
    "stable_shard", "stable_hash", "encode_doc_id", "partition_of", "local_doc_id",
    "CollectionLike", "PartitionedCollection", "PartitionedWriteResult", "Placement",
]

logger = logging.getLogger("hopmem.cluster")

#: A key placement: the metadata of one document (None without metadata) -> its key.
Placement = str | Callable[[Any], str | bytes | int]


# -- stable hashing and ids ------------------------------------------------------------------------

def _check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInput(f"{name}: expected an integer >= 1, got {value!r}")
    return int(value)


def encode_doc_id(local_id: int, partition: int, partitions: int) -> int:
    """The partitioned collection's id of document ``local_id`` (>= 1) of ``partition``."""
    partitions = _check_count(partitions, "partitions")
    local_id = _check_count(local_id, "local_id")
    if isinstance(partition, bool) or not isinstance(partition, (int, np.integer)) \
            or not 0 <= partition < partitions:
        raise InvalidInput(f"partition: expected an integer in [0, {partitions}), got {partition!r}")
    return (local_id - 1) * partitions + int(partition) + 1


def partition_of(doc_id: int, partitions: int) -> int:
    """The partition (0..partitions-1) holding the document with this id (>= 1)."""
    return (_check_count(doc_id, "document id") - 1) % _check_count(partitions, "partitions")


def local_doc_id(doc_id: int, partitions: int) -> int:
    """The id the document with this id (>= 1) has in its partition."""
    return (_check_count(doc_id, "document id") - 1) // _check_count(partitions, "partitions") + 1


# -- what a partition must offer -------------------------------------------------------------------

class _DocumentsLike(Protocol):
    def get(self, doc_id: int, *, vector: bool = True) -> Document: ...

    def list(self, offset: int = 0, limit: int = 100, *, vectors: bool = False) -> list[Document]: ...

    def delete(self, doc_id: int, *, write_id: str | None = None) -> bool: ...

    def count(self) -> int: ...


class CollectionLike(Protocol):
    """What a partition must offer: :class:`hopmem.store.Collection` has all of it."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def next_doc_id(self) -> int: ...

    @property
    def documents(self) -> _DocumentsLike: ...

    def write(self, vectors: Any, metadata: Any = None, *, write_id: str | None = None) -> Any: ...

    def resolve(self, vector: Any, limit: int = 10, mode: ResolveMode = "exact") -> list[DocumentHit]: ...

    def stats(self) -> CollectionStats: ...


@dataclass(frozen=True)
class PartitionedWriteResult:
    """What a write to a partitioned collection did.

    ``ids``: the new documents' ids in input order (None for a write without
    metadata); ``partitions``: the partition each vector went to; ``seqs``:
    the journal entry of each partition's share (partition -> seq).
    """

    count: int
    ids: list[int] | None
    partitions: list[int]
    seqs: dict[int, int] = field(default_factory=dict)


# -- the partitioned collection --------------------------------------------------------------------

class PartitionedCollection:
    """One logical collection whose documents are spread over ``parts``.

    Parameters
    ----------
    name : str
        The logical collection's name (messages use it).
    parts : sequence of CollectionLike
        The partitions, in order (partition ``p`` is ``parts[p]``); at least
        one, all of the same dimension. Their order is part of the ids'
        meaning: keep it.
    placement : "round-robin" or callable
        ``"round-robin"`` (default) or a function of a document's metadata
        (None for a write without metadata) returning a key (str, bytes or
        int); the document goes to partition ``stable_hash(key) % P``.
    executor : concurrent.futures.Executor, optional
        Runs the partitions' resolves and write shares in parallel; without
        one they run one after another on the calling thread.

    See the module documentation for the semantics.
    """

    def __init__(self, name: str, parts: Sequence[CollectionLike], *,
                 placement: Placement = "round-robin", executor: Executor | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"name: expected a non-empty str, got {name!r}")
        parts = tuple(parts)
        if not parts:
            raise InvalidInput("parts: expected at least one collection, got none")
        dims = {int(p.dim) for p in parts}
        if len(dims) != 1:
            raise InvalidInput(f"parts: expected collections of one dimension, got dimensions "
                               f"{sorted(dims)}")
        if placement != "round-robin" and not callable(placement):
            raise InvalidInput(f"placement: expected 'round-robin' or a function of the metadata, "
                               f"got {placement!r}")
        self._name = name
        self._parts = parts
        self._dim = dims.pop()
        self._placement = placement
        self._executor = executor
        self._lock = threading.Lock()
        self._next: list[int] | None = None  # each part's next local id, as last seen
        self._bare_cursor = 0                 # round-robin of writes without metadata
        self.documents = Documents(_PartitionedDocuments(self))

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def partitions(self) -> int:
        """P, the number of partitions."""
        return len(self._parts)

    @property
    def parts(self) -> tuple[CollectionLike, ...]:
        return self._parts

    def __repr__(self) -> str:
        return f"PartitionedCollection({self._name!r}, dim={self._dim}, partitions={self.partitions})"

    # -- scatter ------------------------------------------------------------------------------------

    def _each(self, calls: list[tuple[int, Callable[[], Any]]]) -> list[tuple[int, Any, BaseException | None]]:
        """Run ``calls`` (partition, thunk); ``(partition, result, error)`` for each, in order."""
        out: list[tuple[int, Any, BaseException | None]] = []
        if self._executor is None or len(calls) < 2:
            for p, call in calls:
                try:
                    out.append((p, call(), None))
                except Exception as exc:  # noqa: BLE001 - reported with the partition
                    out.append((p, None, exc))
            return out
        futures = [(p, self._executor.submit(call)) for p, call in calls]
        for p, fut in futures:
            try:
                out.append((p, fut.result(), None))
            except Exception as exc:  # noqa: BLE001 - reported with the partition
                out.append((p, None, exc))
        return out

    # -- writes -------------------------------------------------------------------------------------

    def _next_ids(self) -> list[int]:
        if self._next is None:
            self._next = [int(p.next_doc_id) for p in self._parts]
        return self._next

    def _assign(self, n: int, metadata: list[Any] | None, write_id: str | None) -> list[int]:
        """The partition of each of the ``n`` rows (the caller holds the lock)."""
        P = self.partitions
        if P == 1:
            return [0] * n
        if callable(self._placement):
            keys = metadata if metadata is not None else [None] * n
            return [stable_hash(self._placement(m)) % P for m in keys]
        if write_id is not None:  # a pure function of the id: a retry splits the same way
            start = stable_hash(write_id) % P
            return [(start + i) % P for i in range(n)]
        if metadata is None:  # no ids to keep in step: just rotate
            start, self._bare_cursor = self._bare_cursor, (self._bare_cursor + n) % P
            return [(start + i) % P for i in range(n)]
        # Each row to the partition whose next id is the lowest.
        nxt = self._next_ids()
        heap = [(encode_doc_id(local, p, P), p) for p, local in enumerate(nxt)]
        heapq.heapify(heap)
        out = []
        for _ in range(n):
            gid, p = heap[0]
            out.append(p)
            nxt[p] += 1  # reserved: a concurrent write places after these
            heapq.heapreplace(heap, (gid + P, p))
        return out

    def write(self, vectors: Any, metadata: Any = None, *,
              write_id: str | None = None) -> PartitionedWriteResult:
        """Write vectors (and documents, with metadata) spread over the partitions.

        The arguments are :meth:`hopmem.store.Collection.write`'s and are
        checked before any partition is written. Each partition's share is
        written (and committed) by that partition; ``write_id`` goes to
        every partition with its share. See the module documentation for
        what a failure midway leaves and how a retry completes it.
        """
        wid = check_write_id(write_id)
        X, single = as_vectors(vectors, self._dim)
        n = int(X.shape[0])
        encoded = encode_metadata(metadata, n, single)  # validates every value first
        metas = None if encoded is None else [json.loads(t) for t in encoded]
        if n == 0:
            return PartitionedWriteResult(0, None if metas is None else [], [], {})
        with self._lock:  # only the placement: the shares are written outside it
            where = self._assign(n, metas, wid)
        rows: dict[int, list[int]] = {}
        for i, p in enumerate(where):
            rows.setdefault(p, []).append(i)
        order = [where[0]] + [p for p in sorted(rows) if p != where[0]]

        def share(p: int) -> Callable[[], Any]:
            idx = rows[p]
            sub = None if metas is None else [metas[i] for i in idx]
            return lambda: self._parts[p].write(X[idx], sub, write_id=wid)

        # The first row's partition first and alone: a reused id with another payload
        # is refused there before any other partition applies its share.
        results = self._each([(order[0], share(order[0]))])
        if results[0][2] is None:
            results += self._each([(p, share(p)) for p in order[1:]])
        failed = [(p, exc) for p, _, exc in results if exc is not None]
        done = {p: r for p, r, exc in results if exc is None}
        if metas is not None:
            with self._lock:
                self._note_ids(done, exact=not failed and wid is None
                               and not callable(self._placement))
        if failed:
            p, exc = failed[0]
            if done:
                exc.add_note(
                    f"write to partitioned collection {self._name!r}: partitions "
                    f"{sorted(done)} committed their share, partition(s) "
                    f"{[q for q, _ in failed]} failed (their share may or may not be "
                    f"committed); "
                    + ("retry with the same write_id to complete it" if wid is not None else
                       "without a write_id a retry would write those shares twice"))
            raise exc
        ids: list[int] | None = None
        if metas is not None:
            ids = [0] * n
            for p, result in done.items():
                for i, local in zip(rows[p], result.ids):
                    ids[i] = encode_doc_id(int(local), p, self.partitions)
        return PartitionedWriteResult(n, ids, where, {p: int(r.seq) for p, r in done.items()})

    def _note_ids(self, done: dict[int, Any], *, exact: bool) -> None:
        """Keep the parts' next ids in step with their answers (the caller holds the lock).

        ``exact``: a round-robin write that went through whole; anything else
        (a failure, a repeat answered from the record, a key placement) makes
        the next round-robin write ask the parts where they stand.
        """
        if not exact or self._next is None:
            self._next = None
            return
        for p, result in done.items():
            if result.ids:
                self._next[p] = max(self._next[p], int(max(result.ids)) + 1)

    # -- resolution -----------------------------------------------------------------------------------

    def resolve(self, vector: Any, limit: int = 10, mode: ResolveMode = "exact") -> list[DocumentHit]:
        """The ``limit`` documents most similar (cosine) to ``vector``, best first.

        Every partition answers its own top ``limit``; the merge orders them
        by similarity, ties to the lower id, as one collection does. In
        ``"exact"`` mode that is exactly one collection's answer.
        """
        check_mode(mode)
        limit = check_limit(limit)
        q, single = as_vectors(vector, self._dim, "vector")
        if not single:
            raise InvalidInput(f"vector: expected one vector (d,), got shape {q.shape}")
        query = q[0]
        P = self.partitions
        answers = self._each([(p, functools.partial(part.resolve, query, limit, mode))
                              for p, part in enumerate(self._parts)])
        hits: list[DocumentHit] = []
        for p, found, exc in answers:
            if exc is not None:
                raise exc
            hits += [DocumentHit(encode_doc_id(int(h.id), p, P), h.similarity, h.metadata)
                     for h in found]
        hits.sort(key=lambda h: (-h.similarity, h.id))
        return hits[:limit]

    # -- statistics --------------------------------------------------------------------------------------

    def partition_stats(self) -> list[CollectionStats]:
        """Each partition's statistics, in partition order."""
        answers = self._each([(p, part.stats) for p, part in enumerate(self._parts)])
        for _, _, exc in answers:
            if exc is not None:
                raise exc
        return [s for _, s, _ in answers]

    def stats(self) -> CollectionStats:
        """The partitions' statistics together.

        Counts and weights are sums, ``max_write_weight`` the largest,
        ``avg_write_weight`` the mean over all locations, ``current_eta`` the
        lowest of the partitions' learning rates (each memory decays its own).
        """
        each = self.partition_stats()
        locations = sum(s.num_locations for s in each)
        total = float(sum(s.total_weight for s in each))
        return CollectionStats(
            num_locations=locations, writes=sum(s.writes for s in each), total_weight=total,
            current_eta=min(s.current_eta for s in each),
            avg_write_weight=total / locations if locations else 0.0,
            max_write_weight=max(s.max_write_weight for s in each),
            documents=sum(s.documents for s in each))

    # -- refused: memory operations ---------------------------------------------------------------

    def _refuse(self, what: str) -> NoReturn:
        raise NotSupported(
            f"{what}: expected a collection with one memory, got partitioned collection "
            f"{self._name!r} of {self.partitions} partitions (P competitive memories are not one "
            f"memory); its documents answer resolve(vector, limit, mode='exact'), exactly as one "
            f"collection would")

    def read(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported` (see the module documentation)."""
        self._refuse("read")

    def read_scored(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("read_scored")

    def analyze(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("analyze")

    def attention(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("attention")

    def recall(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("recall")

    def remember(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: each partition would learn its own centering mean from its share."""
        self._refuse("remember")

    def calibrate(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("calibrate")

    def compress(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("compress")

    def fingerprint(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("fingerprint")

    def snapshot(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: :class:`~hopmem.errors.NotSupported`."""
        self._refuse("snapshot")


class _PartitionedDocuments:
    """The :class:`~hopmem.store.documents.DocumentSource` of a partitioned collection."""

    def __init__(self, owner: PartitionedCollection) -> None:
        self._owner = owner

    def _route(self, doc_id: int) -> tuple[CollectionLike, int, int] | None:
        if doc_id < 1:
            return None
        P = self._owner.partitions
        p = (doc_id - 1) % P
        return self._owner.parts[p], p, (doc_id - 1) // P + 1

    def _missing(self, doc_id: int) -> NotFound:
        return NotFound(f"document {doc_id} not found in collection {self._owner.name!r}")

    def get(self, doc_id: int, with_vector: bool) -> Document:
        route = self._route(doc_id)
        if route is None:
            raise self._missing(doc_id)
        part, _, local = route
        try:
            doc = part.documents.get(local, vector=with_vector)
        except NotFound:
            raise self._missing(doc_id) from None
        return Document(doc_id, doc.metadata, doc.created_at, doc.vector)

    def page(self, offset: int, limit: int, vectors: bool) -> list[Document]:
        P = self._owner.partitions
        want = offset + limit
        step = min(max(want, 1), 10_000)

        def stream(p: int, part: CollectionLike) -> Iterator[Document]:
            at = 0
            while at < want:
                page = part.documents.list(at, step, vectors=vectors)
                for doc in page:
                    yield Document(encode_doc_id(doc.id, p, P), doc.metadata, doc.created_at,
                                   doc.vector)
                if len(page) < step:
                    return
                at += len(page)

        merged = heapq.merge(*(stream(p, part) for p, part in enumerate(self._owner.parts)),
                             key=lambda d: d.id)
        out = []
        for i, doc in enumerate(merged):
            if i >= want:
                break
            if i >= offset:
                out.append(doc)
        return out

    def delete(self, doc_id: int, write_id: str | None) -> bool:
        check_write_id(write_id)
        route = self._route(doc_id)
        if route is None:
            return False
        part, _, local = route
        return bool(part.documents.delete(local, write_id=write_id))

    def count(self) -> int:
        return sum(int(part.documents.count()) for part in self._owner.parts)

    def resolve(self, vector: Any, limit: int, mode: ResolveMode) -> list[DocumentHit]:
        return self._owner.resolve(vector, limit, mode)

