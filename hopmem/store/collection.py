"""A durable collection: a :class:`~hopmem.engine.memory.Memory` whose writes are journaled.

Everything a ``Memory`` offers is here (reads delegate to the in-memory memory
and never touch the disk), plus documents and resolution. ``write`` returns only
after its SQLite transaction committed; a batch, with or without metadata, is
all or nothing. See :mod:`hopmem.store.database` for the design.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._deprecation import positional_to_keywords, rename_keywords
from ..engine import posting_lists
from ..engine._state import Snapshot
from ..engine.config import MemoryConfig
from ..engine.memory import (
    AttentionResult,
    CompressResult,
    Memory,
    ScoredRead,
    Stats,
    Strategy,
    Trace,
    WriteResult,
    as_vectors,
)
from ..errors import InvalidInput, NotFound, StoreError
from ..text.collection import TextCollection
from ..text.recall import RecallGate, RecallResult
from . import journal, portable
from ._sqlite import map_errors
from .dbfile import DatabaseFile, EncoderInfo
from .documents import Document, DocumentHit, Documents
from .resolution import (
    PostingIndex,
    ResolveMode,
    VectorIndex,
    check_limit,
    check_mode,
    resolve_exact,
    resolve_indexed,
)
from .schema import KIND_COMPRESS, KIND_DELETE, KIND_WRITE

__all__ = ["Collection", "StoredWriteResult", "CollectionStats", "DatabaseView",
           "WRITE_ID_RETENTION", "check_write_id", "encode_metadata"]

logger = logging.getLogger("hopmem.store")

#: Seconds of replay tolerated by the adaptive policy, at the least.
DEFAULT_REPLAY_BUDGET = 0.25
_INSERT_WRITE = (
    "INSERT INTO journal (cid, seq, kind, n, vectors, arg, writes_after, next_id_after, "
    "size_after, eta_after, rng_after, crc, created_at) "
    "VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?)")
#: Write ids remembered per collection: the oldest beyond this many are pruned
#: (see :meth:`Collection.write`). A retry must come before its id is pruned;
#: at 1,000 identified writes a second that is over a minute and a half.
WRITE_ID_RETENTION = 100_000
#: Longest accepted write id, in characters.
WRITE_ID_MAX_LENGTH = 256
_WRITE_ID_KIND_NAMES = {KIND_WRITE: "a write", KIND_COMPRESS: "a compress",
                        KIND_DELETE: "a document delete"}
_WRITE_BW = 200e6   # bytes/s assumed for a checkpoint before one has been measured
_READ_BW = 1e9      # bytes/s assumed for reading journal entries back


@dataclass(frozen=True)
class StoredWriteResult(WriteResult):
    """A :class:`~hopmem.engine.memory.WriteResult` that is on disk.

    ``ids`` are the new documents' ids, in input order (``None`` for a write
    without metadata: such a write creates no document). ``seq`` is the
    journal entry that holds the write.
    """

    ids: list[int] | None = None
    seq: int = 0


@dataclass(frozen=True)
class CollectionStats(Stats):
    """The memory's :class:`~hopmem.engine.memory.Stats` plus the number of live documents."""

    documents: int = 0


# json.dumps(item, allow_nan=False, ensure_ascii=False, separators=(",", ":")),
# without building an encoder per document.
_METADATA_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def encode_metadata(metadata: Any, n: int, single: bool) -> list[str] | None:
    """The metadata of a write of ``n`` vectors as JSON texts (None for none); InvalidInput if bad.

    ``single``: the write was one ``(d,)`` vector, whose metadata is one value.
    """
    if metadata is None:
        return None
    if single:
        items = [metadata]
    else:
        if isinstance(metadata, (str, bytes, Mapping)) or not isinstance(metadata, Sequence):
            raise InvalidInput(
                f"metadata: expected a list of {n} JSON values (one per vector), got "
                f"{type(metadata).__name__}")
        items = list(metadata)
        if len(items) != n:
            raise InvalidInput(
                f"metadata: expected {n} values (one per vector), got {len(items)}")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(_METADATA_JSON.encode(item))
        except (TypeError, ValueError) as exc:
            where = "metadata" if single else f"metadata[{i}]"
            raise InvalidInput(f"{where}: expected a JSON value, got {type(item).__name__} "
                               f"({exc})") from None
    return out


def _opaque_json(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if hasattr(value, "to_dict") and not isinstance(value, Mapping):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what}: expected a dict (or an object with to_dict()), got "
                           f"{type(value).__name__}")
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what}: expected a JSON-serialisable dict ({exc})") from None


def check_write_id(write_id: Any) -> str | None:
    """``write_id`` if it is None or a non-empty str of at most 256 characters; else InvalidInput."""
    if write_id is None:
        return None
    if not isinstance(write_id, str) or not 1 <= len(write_id) <= WRITE_ID_MAX_LENGTH:
        got = (f"a string of {len(write_id)} characters" if isinstance(write_id, str)
               else type(write_id).__name__)
        raise InvalidInput(f"write_id: expected a non-empty string of at most "
                           f"{WRITE_ID_MAX_LENGTH} characters, got {got}")
    return write_id


def _write_digest(X: np.ndarray, metas: list[str] | None) -> bytes:
    """SHA-256 of a write's payload: its float32 vectors and its metadata JSON."""
    h = hashlib.sha256(b"write\0")
    h.update(np.asarray(X.shape, "<i8").tobytes())
    h.update(journal.vectors_blob(X))
    if metas is None:
        h.update(b"\0")
    else:
        h.update(b"\1")
        for m in metas:
            data = m.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.digest()


def _small_digest(kind: str, value: Any) -> bytes:
    """SHA-256 of a delete's or a compress's argument."""
    return hashlib.sha256(f"{kind}\0{value!r}".encode()).digest()


def _pack_write_arrays(result: WriteResult) -> bytes:
    """A write's touched and created location ids and merges as one int64 blob."""
    touched = [np.asarray(t, np.int64).reshape(-1) for t in result.touched]
    created = [np.asarray(c, np.int64).reshape(-1) for c in result.created]
    merges = np.asarray(result.merges, np.int64).reshape(-1)
    parts = [np.array([len(touched), merges.size // 2], np.int64),
             np.array([t.size for t in touched], np.int64),
             np.array([c.size for c in created], np.int64), *touched, *created, merges]
    return np.concatenate(parts).astype("<i8").tobytes()


def _unpack_write_arrays(blob: bytes) -> tuple[list[np.ndarray], list[np.ndarray],
                                               list[tuple[int, int]]]:
    flat = np.frombuffer(blob, "<i8").astype(np.int64)
    n, m = int(flat[0]), int(flat[1])
    t_len, c_len = flat[2:2 + n], flat[2 + n:2 + 2 * n]
    at = 2 + 2 * n
    touched: list[np.ndarray] = []
    created: list[np.ndarray] = []
    for lengths, out in ((t_len, touched), (c_len, created)):
        for k in lengths.tolist():
            out.append(flat[at:at + k].copy())
            at += k
    pairs = flat[at:at + 2 * m].reshape(-1, 2).tolist()
    return touched, created, [(int(a), int(b)) for a, b in pairs]


class DatabaseView(Protocol):
    """The database a collection belongs to, as :attr:`Collection.database` shows it.

    :class:`hopmem.store.Database` is one; the protocol lets this module type
    it without importing the module that builds on this one.
    """

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def readonly(self) -> bool: ...

    @property
    def encoder(self) -> EncoderInfo | None: ...

    def collections(self) -> list[str]: ...


class Collection:
    """One named memory in a database, durable, with documents.

    Get one with :meth:`Database.collection`. Reads (``read``, ``analyze``,
    ``attention``, ``fingerprint``, ``stats``, the location views) run on the
    in-memory memory; ``write`` and ``compress`` are journaled and committed
    before they return.

    **A write without metadata creates no document**: it shapes the memory,
    but no query or resolution can return it.

    Unlike a :class:`~hopmem.engine.memory.Memory` a collection has no ``restore``:
    its state is its journal. Write vectors, or import an exported collection
    (:meth:`Database.import_collection`), instead.
    """

    def __init__(self, database: DatabaseView, file: DatabaseFile, cid: int, name: str,
                 config: MemoryConfig, rebuilt: journal.Rebuilt, next_doc_id: int, doc_count: int,
                 centering: Any, gate: Any) -> None:
        self._db = database
        self._file = file
        self._cid = cid
        self._name = name
        self._config = config
        self._memory: Memory = rebuilt.memory
        self._seq = rebuilt.seq
        self._replay_s = rebuilt.replay_seconds
        self._bytes_since = rebuilt.replayed_vectors * config.dim * 4
        self._vectors_since = rebuilt.replayed_vectors
        self._checkpoint_s: float | None = None
        self._next_doc_id = next_doc_id
        self._doc_count = doc_count
        self._centering = centering
        self._gate = gate
        self._wlock = threading.RLock()
        self._index: VectorIndex | None = None          # loaded at the first query
        self._posting_index: PostingIndex | None = None  # loaded with _index
        self._deleted_since_compact = 0
        self._write_ids: int | None = None  # write ids recorded here (counted when first needed)
        self._dropped = False
        self._closed = False
        self._broken: str | None = None
        self._text_view: TextCollection | None = None
        self.documents = Documents(_DocumentAccess(self))

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def database(self) -> DatabaseView:
        return self._db

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def dim(self) -> int:
        return self._config.dim

    @property
    def seq(self) -> int:
        """The number of journal entries (writes and compressions) committed."""
        return self._seq

    @property
    def next_doc_id(self) -> int:
        """The id the next document will get (ids start at 1 and are never reused)."""
        self._check_usable()
        return self._next_doc_id

    @property
    def backend(self) -> str:
        return self._memory.backend

    def __repr__(self) -> str:
        return (f"Collection({self._name!r}, dim={self.dim}, mode={self._config.mode!r}, "
                f"locations={len(self._memory)}, documents={self._doc_count})")

    def _where(self) -> str:
        return f"collection {self._name!r} of {self._file.path}"

    def _check_usable(self) -> Memory:
        if self._dropped:
            raise NotFound(f"collection {self._name!r} was dropped")
        if self._closed:
            raise StoreError(f"{self._where()}: the database is closed")
        if self._broken is not None:
            raise StoreError(self._broken)
        return self._memory

    def _check_writable(self, what: str) -> Memory:
        memory = self._check_usable()
        if self._file.readonly:
            raise StoreError(f"{self._where()}: the database is open read-only, cannot {what}")
        return memory

    # -- reads: the memory's API ------------------------------------------------------------------

    def read(self, query: Any, strategy: Strategy = "iterative") -> np.ndarray:
        """See :meth:`Memory.read <hopmem.engine.memory.Memory.read>`."""
        return self._check_usable().read(query, strategy)

    def analyze(self, query: Any, strategy: Strategy = "iterative") -> Trace | list[Trace]:
        """See :meth:`Memory.analyze <hopmem.engine.memory.Memory.analyze>`."""
        return self._check_usable().analyze(query, strategy)

    def read_scored(self, query: Any,
                    strategy: Strategy = "iterative") -> ScoredRead | list[ScoredRead]:
        """See :meth:`Memory.read_scored <hopmem.engine.memory.Memory.read_scored>`."""
        return self._check_usable().read_scored(query, strategy)

    def attention(self, query: Any, scale: float) -> AttentionResult:
        """See :meth:`Memory.attention <hopmem.engine.memory.Memory.attention>`."""
        return self._check_usable().attention(query, scale)

    def fingerprint(self) -> np.ndarray | None:
        """See :meth:`Memory.fingerprint <hopmem.engine.memory.Memory.fingerprint>`."""
        return self._check_usable().fingerprint()

    def stats(self) -> CollectionStats:
        """The memory's statistics plus ``documents`` (live documents)."""
        base = self._check_usable().stats()
        return CollectionStats(**base.to_dict(), documents=self._doc_count)

    def snapshot(self) -> Snapshot:
        """The memory's exact state (a copy)."""
        return self._check_usable().snapshot()

    @property
    def ids(self) -> np.ndarray:
        return self._check_usable().ids

    @property
    def addresses(self) -> np.ndarray:
        return self._check_usable().addresses

    @property
    def counters(self) -> np.ndarray:
        return self._check_usable().counters

    @property
    def weights(self) -> np.ndarray:
        return self._check_usable().weights

    @property
    def patterns(self) -> np.ndarray:
        return self._check_usable().patterns

    def __len__(self) -> int:
        return len(self._check_usable())

    # -- writes -----------------------------------------------------------------------------------

    def write(self, vectors: Any, metadata: Any = None, *,
              write_id: str | None = None) -> StoredWriteResult:
        """Write one vector ``(d,)`` or a batch ``(n, d)``; returns once committed.

        Parameters
        ----------
        vectors : array_like
            ``(d,)`` or ``(n, d)``, finite.
        metadata : optional
            For a batch, a list of ``n`` JSON values (one per vector); for a
            single ``(d,)`` vector, one JSON value. Each creates a document.
            **Without metadata no document is created.**
        write_id : str, optional
            A client-chosen id for this write (unique within the collection, at
            most 256 characters), recorded in the write's own transaction. A
            repeat with the same id and the same vectors and metadata returns
            the first call's result (the same ``ids`` and ``seq``) without
            writing again: a caller that lost the answer (a timeout, a crash,
            a restarted server) retries safely. The last
            :data:`WRITE_ID_RETENTION` ids of a collection are remembered.

        Returns
        -------
        StoredWriteResult
            ``count``, ``ids`` (document ids, or None), ``seq``, and the
            touched / created locations and merges of the write.

        Raises
        ------
        InvalidInput, DimensionMismatch
            Bad vectors or metadata, or a ``write_id`` already used for a
            different write; nothing was written.
        StoreError
            The commit failed; nothing was written and the in-memory state
            was restored from disk.
        """
        wid = check_write_id(write_id)
        X, single = as_vectors(vectors, self.dim)
        metas = encode_metadata(metadata, X.shape[0], single)
        n = int(X.shape[0])
        digest = _write_digest(X, metas) if wid is not None else b""
        with self._wlock:
            memory = self._check_writable("write")
            if wid is not None:
                recorded = self._recorded(wid, KIND_WRITE, digest)
                if recorded is not None:
                    return self._recorded_write(recorded)
            if n == 0:  # nothing to apply, so nothing recorded
                return StoredWriteResult(0, [], [], [], ids=[] if metas is not None else None,
                                         seq=self._seq)
            blob = journal.vectors_blob(X)
            crc = journal.crc32(blob)
            now = time.time()
            seq = self._seq + 1
            first_id = self._next_doc_id
            # The database's transaction slot first, then the memory's write lock: readers
            # of this collection never wait for another collection's commit or checkpoint.
            with self._file.sql_lock:
                with memory.exclusive():
                    t0 = time.perf_counter()
                    try:
                        result = memory.write_exclusive(X)
                    except BaseException:
                        self._recover_locked(seq)
                        raise
                    engine_s = time.perf_counter() - t0
                    after = memory.scalars()
                    try:
                        with self._file.transaction(f"write to {self._where()}") as conn:
                            jid = conn.execute(_INSERT_WRITE, (
                                self._cid, seq, KIND_WRITE, n, blob, after[0], after[1], after[2],
                                after[3], journal.to_signed64(after[4]), crc, now)).lastrowid
                            assert jid is not None  # an executed INSERT sets it
                            if metas is not None:
                                postings, blobs = posting_lists(result.touched, result.created)
                                self._insert_documents(conn, jid, first_id, metas, now, blobs)
                            self._log_merges(conn, seq, result.merges)
                            if wid is not None:
                                ids_rec = None if metas is None else [first_id, n]
                                self._record(conn, wid, KIND_WRITE, digest,
                                             {"count": result.count, "ids": ids_rec, "seq": seq},
                                             _pack_write_arrays(result), now)
                    except BaseException as exc:
                        committed = self._recover_locked(seq)
                        raise self._commit_error("write", exc, committed) from exc
            self._seq = seq
            self._replay_s += engine_s
            self._bytes_since += len(blob)
            self._vectors_since += n
            ids = None
            if metas is not None:
                ids = list(range(first_id, first_id + n))
                self._next_doc_id = first_id + n
                self._doc_count += n
                if self._index is not None:
                    self._index.add(np.asarray(ids, np.int64), X)
                if self._posting_index is not None:
                    self._posting_index.add_many(ids, postings)
            if result.merges and self._posting_index is not None:
                self._posting_index.merge(result.merges)
            self._maybe_checkpoint()
        return StoredWriteResult(result.count, result.touched, result.created, result.merges,
                                 ids=ids, seq=seq)

    def _insert_documents(self, conn: sqlite3.Connection, jid: int, first_id: int, metas: list[str],
                          now: float, postings: list[bytes]) -> None:
        """Insert the batch's documents; ``postings[i]``: document i's posting list as stored
        (little-endian int64 location ids)."""
        cid = self._cid
        conn.executemany(
            "INSERT INTO documents (cid, doc_id, jid, pos, metadata, created_at, locations) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(cid, first_id + i, jid, i, m, now, postings[i])
             for i, m in enumerate(metas)])
        conn.execute("UPDATE collections SET next_doc_id = ? WHERE cid = ?",
                     (first_id + len(metas), cid))

    # -- write ids ------------------------------------------------------------------------------------

    def _recorded(self, wid: str, kind: int, digest: bytes) -> tuple[str, bytes | None] | None:
        """The recorded ``(result JSON, arrays)`` of ``wid``, or None if it is new.

        InvalidInput if ``wid`` was used for another kind of change or another
        payload. The caller holds ``_wlock`` (so no commit of this collection
        can come between this look-up and its own).
        """
        with map_errors(self._where()):
            row = self._file.reader().execute(
                "SELECT kind, digest, result, arrays FROM write_ids WHERE cid = ? AND write_id = ?",
                (self._cid, wid)).fetchone()
        if row is None:
            return None
        got_kind, got_digest, result, arrays = row
        if got_kind != kind or bytes(got_digest) != digest:
            first = _WRITE_ID_KIND_NAMES.get(got_kind, f"kind {got_kind}")
            now = _WRITE_ID_KIND_NAMES[kind]
            detail = "a different one" if got_kind == kind else now
            raise InvalidInput(
                f"write_id: expected {wid!r} with the payload it was first used with ({first} "
                f"of {self._where()}), got {detail}; use a new id for a new change")
        logger.debug("%s: write id %r repeated: answering its recorded result", self._where(), wid)
        return result, arrays

    def _recorded_write(self, recorded: tuple[str, bytes | None]) -> StoredWriteResult:
        result = json.loads(recorded[0])
        touched, created, merges = _unpack_write_arrays(recorded[1] or b"")
        ids = result["ids"]
        return StoredWriteResult(int(result["count"]), touched, created, merges,
                                 ids=None if ids is None else list(range(ids[0], ids[0] + ids[1])),
                                 seq=int(result["seq"]))

    def _record(self, conn: sqlite3.Connection, wid: str, kind: int, digest: bytes,
                result: dict[str, Any], arrays: bytes | None, now: float) -> None:
        """Record ``wid`` in the caller's transaction; prune the oldest beyond the bound."""
        conn.execute(
            "INSERT INTO write_ids (cid, write_id, kind, digest, result, arrays, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self._cid, wid, kind, digest, json.dumps(result, separators=(",", ":")), arrays,
             now))
        keep = WRITE_ID_RETENTION
        count = self._write_ids
        if count is None:  # the first id this process records here: count them once
            count = int(conn.execute("SELECT count(*) FROM write_ids WHERE cid = ?",
                                     (self._cid,)).fetchone()[0])
        else:
            count += 1
        # Prune in steps of a tenth of the bound, not at every insert. (The count
        # only decides when: a rolled-back insert leaves it one too high, harmlessly.)
        if count > keep + max(1, keep // 10):
            cut = conn.execute("SELECT rid FROM write_ids WHERE cid = ? ORDER BY rid DESC "
                               "LIMIT 1 OFFSET ?", (self._cid, keep - 1)).fetchone()[0]
            conn.execute("DELETE FROM write_ids WHERE cid = ? AND rid < ?", (self._cid, cut))
            count = keep
        self._write_ids = count

    def _log_merges(self, conn: sqlite3.Connection, seq: int, merges: list[tuple[int, int]]) -> None:
        """Record the entry's merges: postings written earlier resolve to the survivors."""
        if merges:
            conn.execute("INSERT INTO merges (cid, seq, pairs) VALUES (?, ?, ?)",
                         (self._cid, seq, np.asarray(merges, "<i8").reshape(-1).tobytes()))

    def _commit_error(self, what: str, exc: BaseException, committed: bool) -> BaseException:
        if not isinstance(exc, Exception):
            return exc  # KeyboardInterrupt and friends pass through (state already restored)
        if committed:
            return StoreError(
                f"{what} to {self._where()} was committed, but finishing it failed ({exc}); the "
                f"in-memory state was reloaded from disk and includes it")
        return StoreError(
            f"{what} to {self._where()} was not committed ({exc}); the in-memory state was "
            f"restored from disk")

    def _recover_locked(self, seq: int) -> bool:
        """Rebuild the memory from disk in place; True if entry ``seq`` is on disk.

        The caller holds ``_wlock`` and the memory's :meth:`~hopmem.engine.memory.Memory.exclusive` lock.
        """
        where = self._where()
        try:
            with self._file.read_transaction(where) as conn:
                rebuilt = journal.rebuild(conn, self._cid, self._config, where)
                row = conn.execute("SELECT next_doc_id FROM collections WHERE cid = ?",
                                   (self._cid,)).fetchone()
                doc_count = conn.execute("SELECT count(*) FROM documents WHERE cid = ?",
                                         (self._cid,)).fetchone()[0]
            self._memory.restore_exclusive(rebuilt.memory.snapshot())
        except Exception as exc:
            self._broken = (f"{where}: unusable: the in-memory state could not be restored from "
                            f"disk after a failed commit ({exc}); close and reopen the database")
            logger.exception("%s: recovery failed", where)
            return False
        self._seq = rebuilt.seq
        self._next_doc_id = int(row[0])
        self._doc_count = int(doc_count)
        self._index = None  # both reloaded lazily from disk
        self._posting_index = None
        self._write_ids = None
        self._replay_s += rebuilt.replay_seconds
        logger.warning("%s: state restored from disk after a failed commit", where)
        return rebuilt.seq >= seq

    def compress(self, max_locations: int | None = None, *,
                 write_id: str | None = None) -> CompressResult:
        """See :meth:`Memory.compress <hopmem.engine.memory.Memory.compress>`; journaled and committed.

        Postings of merged locations are redirected to the survivors in the
        same transaction, so documents stay findable in indexed mode.
        ``write_id``: as for :meth:`write` (a repeat returns the first result
        and compresses nothing more).
        """
        wid = check_write_id(write_id)
        digest = _small_digest("compress", max_locations) if wid is not None else b""
        with self._wlock:
            memory = self._check_writable("compress")
            if wid is not None:
                recorded = self._recorded(wid, KIND_COMPRESS, digest)
                if recorded is not None:
                    done = json.loads(recorded[0])
                    return CompressResult(int(done["locations_before"]),
                                          int(done["locations_after"]),
                                          [(int(a), int(b)) for a, b in done["merges"]])
            seq = self._seq + 1
            with self._file.sql_lock:  # as in write(): the slot before the memory's lock
                t0 = time.perf_counter()
                result = memory.compress(max_locations)  # validates; locks itself
                engine_s = time.perf_counter() - t0
                after = memory.scalars()
                try:
                    with self._file.transaction(f"compress {self._where()}") as conn:
                        conn.execute(
                            "INSERT INTO journal (cid, seq, kind, n, vectors, arg, writes_after, "
                            "next_id_after, size_after, eta_after, rng_after, crc, created_at) "
                            "VALUES (?, ?, ?, 0, NULL, ?, ?, ?, ?, ?, ?, NULL, ?)",
                            (self._cid, seq, KIND_COMPRESS,
                             None if max_locations is None else int(max_locations),
                             after[0], after[1], after[2], after[3], journal.to_signed64(after[4]),
                             time.time()))
                        self._log_merges(conn, seq, result.merges)
                        if wid is not None:
                            self._record(conn, wid, KIND_COMPRESS, digest, {
                                "locations_before": result.locations_before,
                                "locations_after": result.locations_after,
                                "merges": [[int(a), int(b)] for a, b in result.merges],
                                "seq": seq}, None, time.time())
                except BaseException as exc:
                    with memory.exclusive():
                        committed = self._recover_locked(seq)
                    raise self._commit_error("compress", exc, committed) from exc
            self._seq = seq
            self._replay_s += engine_s
            if result.merges and self._posting_index is not None:
                self._posting_index.merge(result.merges)
            self._maybe_checkpoint()
        return result

    # -- checkpoints --------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write a checkpoint now (a reopen then replays nothing)."""
        with self._wlock:
            self._check_writable("checkpoint")
            self._checkpoint()

    def _checkpoint(self) -> None:
        snap = self._memory.snapshot()
        t0 = time.perf_counter()
        with self._file.transaction(f"checkpoint {self._where()}") as conn:
            journal.save_checkpoint(conn, self._cid, self._seq, snap, self.dim)
        self._checkpoint_s = time.perf_counter() - t0
        self._replay_s = 0.0
        self._bytes_since = 0
        self._vectors_since = 0
        logger.debug("%s: checkpoint at entry %d (%d locations) in %.3f s", self._where(),
                     self._seq, snap.ids.shape[0], self._checkpoint_s)

    def _maybe_checkpoint(self, *, closing: bool = False) -> None:
        """Checkpoint if a reopen would otherwise replay too much (see the database docs)."""
        if self._dropped or self._broken is not None or self._file.readonly:
            return
        every = self._file.checkpoint_every
        if every is not None:
            due = self._vectors_since >= every or (closing and self._vectors_since > 0)
        else:
            replay = self._replay_s + self._bytes_since / _READ_BW
            budget = self._file.replay_budget
            if closing:
                due = replay >= 0.02
            elif budget is not None:
                due = replay >= budget
            else:
                cost = self._checkpoint_s
                if cost is None:
                    cost = len(self._memory) * (self.dim * 12 + 16) / _WRITE_BW
                due = replay >= max(DEFAULT_REPLAY_BUDGET, 2.0 * cost)
        if not due:
            return
        try:
            with self._wlock:
                self._checkpoint()
        except Exception:
            # A checkpoint is a cache: the write that triggered it is committed.
            logger.exception("%s: checkpoint failed (the journal is intact)", self._where())

    # -- centering and gate (opaque JSON owned by the text layer) -----------------------------------

    @property
    def centering(self) -> dict[str, Any] | None:
        """The persisted centering description (e.g. ``Centerer.to_dict()``), or None."""
        return copy.deepcopy(self._centering)

    @centering.setter
    def centering(self, value: Any) -> None:
        self._set_opaque("centering", value)

    @property
    def gate(self) -> dict[str, Any] | None:
        """The persisted abstention gate description (e.g. ``Gate.to_dict()``), or None."""
        return copy.deepcopy(self._gate)

    @gate.setter
    def gate(self, value: Any) -> None:
        self._set_opaque("gate", value)

    def _set_opaque(self, column: str, value: Any) -> None:
        text = _opaque_json(value, column)
        with self._wlock:
            self._check_writable(f"set {column}")
            with self._file.transaction(f"set {column} of {self._where()}") as conn:
                conn.execute(f"UPDATE collections SET {column} = ? WHERE cid = ?",
                             (text, self._cid))
            setattr(self, f"_{column}", None if text is None else json.loads(text))

    # -- documents (the Documents view calls these) -------------------------------------------------

    def _doc_count_value(self) -> int:
        self._check_usable()
        return self._doc_count

    def _read_vector(self, conn: sqlite3.Connection, jid: int, pos: int) -> np.ndarray:
        size = 4 * self.dim
        with conn.blobopen("journal", "vectors", jid, readonly=True) as blob:
            blob.seek(pos * size)
            data = blob.read(size)
        if len(data) != size:
            raise StoreError(f"{self._where()}: journal entry {jid} is too short for row {pos}")
        return np.frombuffer(data, "<f4").astype(np.float32)

    def _doc_get(self, doc_id: int, with_vector: bool) -> Document:
        self._check_usable()
        with map_errors(self._where()):
            conn = self._file.reader()
            row = conn.execute(
                "SELECT jid, pos, metadata, created_at FROM documents WHERE cid = ? AND doc_id = ?",
                (self._cid, doc_id)).fetchone()
            if row is None:
                raise NotFound(f"document {doc_id} not found in collection {self._name!r}")
            jid, pos, meta, created = row
            vector = self._read_vector(conn, jid, pos) if with_vector else None
        return Document(doc_id, json.loads(meta), float(created), vector)

    def _doc_list(self, offset: int, limit: int, vectors: bool) -> list[Document]:
        self._check_usable()
        with map_errors(self._where()):
            conn = self._file.reader()
            rows = conn.execute(
                "SELECT doc_id, jid, pos, metadata, created_at FROM documents WHERE cid = ? "
                "ORDER BY doc_id LIMIT ? OFFSET ?", (self._cid, limit, offset)).fetchall()
            return [Document(d, json.loads(m), float(t),
                             self._read_vector(conn, j, p) if vectors else None)
                    for d, j, p, m, t in rows]

    def _doc_delete(self, doc_id: int, write_id: str | None = None) -> bool:
        wid = check_write_id(write_id)
        digest = _small_digest("delete", doc_id) if wid is not None else b""
        with self._wlock:
            self._check_writable("delete documents")
            if wid is not None:
                recorded = self._recorded(wid, KIND_DELETE, digest)
                if recorded is not None:
                    return bool(json.loads(recorded[0])["deleted"])
            with self._file.transaction(f"delete document {doc_id} of {self._where()}") as conn:
                deleted = conn.execute("DELETE FROM documents WHERE cid = ? AND doc_id = ?",
                                       (self._cid, doc_id)).rowcount
                if wid is not None:
                    self._record(conn, wid, KIND_DELETE, digest, {"deleted": bool(deleted)},
                                 None, time.time())
            if deleted:
                self._doc_count -= 1
                if self._index is not None:
                    self._index.remove(doc_id)
                    # Posting lists drop deleted documents lazily (queries filter them
                    # against the live set); compact once a quarter of them is dead.
                    self._deleted_since_compact += 1
                    if self._posting_index is not None and \
                            self._deleted_since_compact > max(1024, self._doc_count // 4):
                        self._posting_index.compact(self._index.alive)
                        self._deleted_since_compact = 0
        return bool(deleted)

    def _postings(self, locations: np.ndarray) -> np.ndarray:
        index = self._posting_index
        if index is None:  # pragma: no cover - _ensure_index ran first
            return np.zeros(0, np.int64)
        return index.documents(locations)

    def _ensure_index(self) -> VectorIndex:
        index = self._index
        if index is not None and self._posting_index is not None:
            return index
        with self._wlock:  # writers wait while the indexes load, so none is missed
            if self._index is None or self._posting_index is None:
                self._index, self._posting_index = self._load_indexes()
                self._deleted_since_compact = 0
            return self._index

    def _load_indexes(self) -> tuple[VectorIndex, PostingIndex]:
        """The documents' unit vectors and the location -> documents index, from disk."""
        where = self._where()
        dim = self.dim
        with self._file.read_transaction(where) as conn:
            rows = conn.execute(
                "SELECT doc_id, jid, pos, locations FROM documents WHERE cid = ? ORDER BY doc_id",
                (self._cid,)).fetchall()
            merges = [np.frombuffer(b, "<i8") for (b,) in conn.execute(
                "SELECT pairs FROM merges WHERE cid = ? ORDER BY seq", (self._cid,))]
            columns = list(zip(*rows)) or [(), (), (), ()]
            del rows
            doc_ids, jids, positions = (np.array(c, np.int64) for c in columns[:3])
            vectors = np.empty((doc_ids.size, dim), np.float32)
            if doc_ids.size:
                # Documents of one journal entry are consecutive (ids are given in write order).
                bounds = np.flatnonzero(np.diff(jids)) + 1
                for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, jids.size].tolist()):
                    jid = int(jids[lo])
                    n, blob = conn.execute("SELECT n, vectors FROM journal WHERE jid = ?",
                                           (jid,)).fetchone()
                    X = journal.vectors_from_blob(blob, n, dim, f"{where}: journal row {jid}")
                    np.take(X, positions[lo:hi], axis=0, out=vectors[lo:hi])
        blobs = [b or b"" for b in columns[3]]
        lengths = np.fromiter(map(len, blobs), np.int64, len(blobs)) // 8
        flat = np.frombuffer(b"".join(blobs), "<i8").astype(np.int64)
        pairs = np.concatenate(merges) if merges else np.zeros(0, np.int64)
        index = VectorIndex.adopt(doc_ids, vectors)
        return index, PostingIndex.build(doc_ids, lengths, flat, pairs)

    def _doc_query(self, vector: Any, n: int, mode: str) -> list[DocumentHit]:
        memory = self._check_usable()
        check_mode(mode)
        n = check_limit(n)
        as_vectors(vector, self.dim, "vector")  # validate before loading anything
        index = self._ensure_index()
        if mode == "exact":
            ids, sims = resolve_exact(index, vector, n)
        else:
            ids, sims = resolve_indexed(memory, index, vector, self._postings, n)
        if ids.size == 0:
            return []
        with map_errors(self._where()):
            marks = ",".join("?" * ids.size)
            meta = dict(self._file.reader().execute(
                f"SELECT doc_id, metadata FROM documents WHERE cid = ? AND doc_id IN ({marks})",
                (self._cid, *ids.tolist())).fetchall())
        return [DocumentHit(int(i), float(s), json.loads(meta[i]))
                for i, s in zip(ids.tolist(), sims.tolist()) if i in meta]

    def resolve(self, vector: Any, limit: int = 10, mode: ResolveMode = "exact",
                **deprecated: Any) -> list[DocumentHit]:
        """The ``limit`` documents most similar (cosine) to ``vector``, best first.

        ``vector`` is usually a reconstruction (``read``'s result) or a query.
        ``mode="exact"`` scores every document; ``"indexed"`` only those posted
        on the locations the vector activates (cheaper; can miss far
        documents). ``n=`` is a deprecated name of ``limit``.
        """
        limit = _renamed("Collection.resolve", deprecated, {"n": "limit"},
                         {"limit": (limit, 10)})["limit"]
        return self._doc_query(vector, limit, mode)

    # -- text (hopmem.text): remember, recall, calibrate with the database's encoder ----------------

    def _text(self) -> TextCollection:
        """This collection as a :class:`hopmem.text.TextCollection` over the database's encoder."""
        view = self._text_view
        if view is None:
            encoder = self._file.encoder_object
            if encoder is None:
                raise InvalidInput(
                    f"{self._where()}: remember, recall and calibrate need the database opened "
                    f"with an encoder, e.g. hopmem.open(path, encoder=HashingEncoder({self.dim}))")
            view = self._text_view = TextCollection(self, encoder)
        return view

    def remember(self, texts: Any, metadata: Any = None, *,
                 write_id: str | None = None) -> list[int]:
        """Encode, center and write ``texts`` as documents; returns their ids.

        See :meth:`hopmem.text.TextCollection.remember`; ``write_id`` as for
        :meth:`write` (a repeat returns the same ids).
        """
        return self._text().remember(texts, metadata, write_id=write_id)

    def recall(self, text: str, limit: int = 5, **options: Any) -> RecallResult:
        """A :class:`hopmem.text.recall.RecallResult` for ``text``; abstention is a value.

        At most ``limit`` hits; ``options`` go to
        :meth:`hopmem.text.TextCollection.recall`. ``n=`` is a deprecated name
        of ``limit``.
        """
        options = dict(options)
        renamed = _renamed("Collection.recall", {k: options.pop(k) for k in ("n",) if k in options},
                           {"n": "limit"}, {"limit": (limit, 5)})
        return self._text().recall(text, renamed["limit"], **options)

    def calibrate(self, related: Sequence[str] | None = None, unrelated: Sequence[str] | None = None,
                  *args: float, error_budget: float = 0.0, holdout: float = 0.3, seed: int = 0,
                  statistic: str = "confidence", **deprecated: Any) -> RecallGate:
        """Calibrate and store (in :attr:`gate`) the gate later recalls use.

        ``related`` are held-out questions this collection should answer,
        ``unrelated`` questions it should abstain on. See
        :meth:`hopmem.text.TextCollection.calibrate` for the rule and the other
        arguments.

        Deprecated: the keywords ``related_texts``, ``unrelated_texts`` and
        ``holdout_fraction`` (use ``related``, ``unrelated``, ``holdout``), and
        ``error_budget`` passed by position.
        """
        where = "Collection.calibrate"
        if args:  # error_budget by position, as the old signature allowed
            error_budget = _only_once(where, "error_budget", args[0],
                                      error_budget, 0.0)
            positional_to_keywords(where, args, ("error_budget",), {})  # warns; checks the count
        got = _renamed(where, deprecated,
                       {"related_texts": "related", "unrelated_texts": "unrelated",
                        "holdout_fraction": "holdout"},
                       {"related": (related, None), "unrelated": (unrelated, None),
                        "holdout": (holdout, 0.3)})
        if got["related"] is None or got["unrelated"] is None:
            raise TypeError(f"{where}() missing required arguments 'related' and 'unrelated'")
        return self._text().calibrate(got["related"], got["unrelated"], error_budget=error_budget,
                                      holdout=got["holdout"], seed=seed, statistic=statistic)

    # -- portability ---------------------------------------------------------------------------------

    def export(self, path: str | os.PathLike[str], *,
               progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
        """Write this collection to a portable file; returns its manifest.

        See :mod:`hopmem.store.portable` for the format.
        """
        return portable.write_export(self._file, self._name, path, progress=progress)

    # -- called by the Database that owns this collection (internal) --------------------------------

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the collection's write lock for a block: writes and deletes wait (internal)."""
        with self._wlock:
            yield

    def checkpoint_if_due(self) -> None:
        """Checkpoint if a reopen would otherwise replay too much (internal: after loading)."""
        self._maybe_checkpoint()

    def close_for_database(self) -> None:
        """Checkpoint what a reopen would replay, then refuse further use (internal: on close).

        An in-flight write finishes first; a checkpoint that fails is logged
        and does not keep the database from closing.
        """
        with self._wlock:
            if not self._file.readonly:
                try:
                    self._maybe_checkpoint(closing=True)
                except Exception:  # a cache that could not be written must not block
                    logger.exception("%s: checkpoint on close failed", self._where())
            self._closed = True

    def mark_closed(self) -> None:
        """Refuse further use: the database is closed (internal)."""
        self._closed = True

    def mark_dropped(self) -> None:
        """Refuse further use: the collection was dropped (internal; under :meth:`exclusive`)."""
        self._dropped = True


def _only_once(where: str, name: str, old: Any, new: Any, default: Any) -> Any:
    """``old`` (given the deprecated way) unless ``new`` was given too, which is a TypeError."""
    if new != default:
        raise TypeError(f"{where}() got multiple values for argument {name!r}")
    return old


def _renamed(where: str, deprecated: dict[str, Any], renames: dict[str, str],
             current: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The values of ``current`` (name: (value, default)) with deprecated keywords applied.

    A keyword not in ``renames`` is a TypeError, as for any function; a
    deprecated keyword together with its new name given a non-default value is one too.
    """
    unknown = set(deprecated) - set(renames)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    for old in deprecated:
        value_now, default = current[renames[old]]
        _only_once(where, renames[old], None, value_now, default)  # before any warning
    out = {name: value for name, (value, _) in current.items()}
    out.update(rename_keywords(where, deprecated, renames, stacklevel=5))
    return out


class _DocumentAccess:
    """A collection's documents as :class:`~hopmem.store.documents.Documents` reads them."""

    def __init__(self, collection: Collection) -> None:
        self._collection = collection

    def get(self, doc_id: int, with_vector: bool) -> Document:
        return self._collection._doc_get(doc_id, with_vector)

    def page(self, offset: int, limit: int, vectors: bool) -> list[Document]:
        return self._collection._doc_list(offset, limit, vectors)

    def delete(self, doc_id: int, write_id: str | None = None) -> bool:
        return self._collection._doc_delete(doc_id, write_id)

    def count(self) -> int:
        return self._collection._doc_count_value()

    def resolve(self, vector: Any, limit: int, mode: ResolveMode) -> list[DocumentHit]:
        return self._collection._doc_query(vector, limit, mode)
