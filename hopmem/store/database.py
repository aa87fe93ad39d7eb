"""A hopmem database: one SQLite file holding collections, their journals and documents.

Design
------
*Journal + checkpoints, not state rows.* A write appends ONE row to the
``journal`` table (the input vectors, float32, plus the memory's scalars after
the write) and its documents, in one ``BEGIN IMMEDIATE`` transaction; the
location state itself is cached in a checkpoint that is rewritten now and
then, and reopening loads the checkpoint and replays the entries after it (the
kernel is deterministic, so the replayed state is bit-identical). The
alternative, updating the touched location rows in the write's transaction,
was measured in bare SQLite at d = 384 with 2,000 locations and k = 20
(``benchmarks/store_bench.py --design-only``): 0.05 ms and 12 KiB of WAL per
write for the journal row, 0.5 to 0.6 ms and 117 KiB of WAL for the 20 row
updates. The journal also gives export, audit and exact rebuilds for free; its
cost is disk (4 x d bytes per vector, kept) and a replay on reopen (bounded by
the checkpoint policy).

*Posting lists.* A document's posting list (the locations its write touched
or created) is stored with the document as one blob; merges are logged per
journal entry; the location -> documents index is built in memory on the
first document query (CSR arrays) and maintained incrementally. Schema
version 1 kept one ``postings`` row per (location, document) instead, as the
issue suggested: at 30,000 documents a batch of 100 documents (2,100
posting rows) then cost about 30 ms of CPU, 14 us per row, because the rows
land all over a location-ordered B-tree and each commit dirties pages across
it (see :mod:`hopmem.store.schema`, migration 2). Deleting
a document deletes one row; the in-memory index drops it lazily.

*Checkpoint policy.* A checkpoint is worth writing when replaying the entries
since the last one would cost more than the checkpoint does. The store measures
both: the engine time of the writes since the last checkpoint (what a replay
would redo) against the time the last checkpoint took to write. It checkpoints
after a commit once that replay time exceeds ``max(0.25 s, 2 x checkpoint
time)``, after opening when the replay took that long, and on :meth:`Database.close` (so a clean reopen
replays nothing). The factor 2 bounds the time spent checkpointing to a third
of the engine's, and the replay after a crash to about twice a checkpoint.
``replay_budget=S`` replaces this with a hard bound of S seconds (reopening
after a crash stays fast, at the price of more checkpoint time on writes), and
``checkpoint_every=N`` with a fixed "every N vectors" rule (deterministic;
for tests).
A checkpoint is a cache: the state never depends on when they are taken.

*Durability.* WAL mode with ``synchronous="normal"`` (the default): a commit is
in the WAL before ``write`` returns, so killing the process at any instant loses
no acknowledged write. A power failure can lose the last commits unless the
database is opened with ``synchronous="full"`` (an fsync per commit; slower).

*Memory and disk never diverge.* A write is applied to the in-memory memory
under its exclusive lock, committed, and only then is the lock released, so a
reader never observes a write that is not on disk. If anything fails between
the two (including the commit itself), the memory is rebuilt from disk
(checkpoint + journal) before the lock is released, and a
:class:`~hopmem.errors.StoreError` says the write was not committed. (A
``compress`` runs under the memory's own lock, so a reader may see its result
a moment before its commit; a failed commit is undone the same way.)

*Processes and threads.* A writable open takes an exclusive ``flock`` on
``PATH.lock``; a second writable open (another process, or another handle in
this one) gets :class:`~hopmem.errors.StoreLocked` at once. ``readonly=True``
takes no lock and sees the collections as of their loading (SQLite's WAL
isolation keeps that consistent while a writer works). Within a process, any
number of threads may read (each uses its own SQLite connection; reads of the
memory share its readers-writer lock); writes to one collection are serialised
by the collection, and transactions of the whole database by the database.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..config import MemoryConfig
from ..errors import (
    AlreadyExists,
    CorruptStore,
    IncompatibleStore,
    InvalidInput,
    NotFound,
    StoreError,
)
from . import journal, schema
from ._sqlite import SQLITE_HEADER, LockFile, connect, map_errors
from .names import check_collection_name

__all__ = ["Database", "EncoderInfo", "open", "SYNCHRONOUS"]

logger = logging.getLogger("hopmem.store")

SYNCHRONOUS = ("normal", "full")
_MAX_READERS = 64
_PAGE_SIZE = 16384  # for new files; an existing file keeps its own


@dataclass(frozen=True)
class EncoderInfo:
    """The encoder a database's vectors come from: name, dimension, fingerprint."""

    name: str
    dimension: int
    fingerprint: str | None

    @classmethod
    def of(cls, encoder: Any) -> "EncoderInfo":
        """Read ``name``, ``dimension`` and ``fingerprint`` from any encoder object."""
        try:
            name, dimension = str(encoder.name), int(encoder.dimension)
            fingerprint = encoder.fingerprint
        except AttributeError as exc:
            raise InvalidInput(
                f"encoder: expected an object with name, dimension and fingerprint "
                f"attributes, got {type(encoder).__name__} ({exc})") from None
        return cls(name, dimension, None if fingerprint is None else str(fingerprint))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dimension": self.dimension, "fingerprint": self.fingerprint}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _describe(config: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={config[k]!r}" for k in keys)


class Database:
    """One database file: collections of memories, with their documents.

    Use :func:`hopmem.open` (or :class:`hopmem.DataDir`) rather than this
    constructor directly; the arguments are the same.

    Parameters
    ----------
    path : str or os.PathLike
        The database file. Created (with ``dim`` and the config) when missing.
    dim : int, optional
        Required to create; checked against the file otherwise.
    encoder : object, optional
        Anything with ``name``, ``dimension`` and ``fingerprint``. Recorded in
        a file that has none; checked against a file that has one.
    synchronous : {"normal", "full"}
        ``"normal"`` survives a killed process; ``"full"`` also a power loss.
    readonly : bool
        Open without the write lock; nothing can be changed.
    checkpoint_every : int, optional
        Checkpoint every N written vectors instead of by measured cost.
    replay_budget : float, optional
        A hard bound, in seconds of engine time, on what a reopen after a crash
        may have to replay (more checkpoints, slower writes). Default: adaptive
        (see the module docs).
    **config
        Defaults for new collections (see :class:`~hopmem.config.MemoryConfig`);
        on an existing file, each given field must equal the recorded one.

    Raises
    ------
    IncompatibleStore
        The file's dimension, config or encoder fingerprint differs from the
        ones given; the message names each difference.
    CorruptStore
        The file is not a hopmem database, or it is damaged.
    StoreLocked
        Another process (or handle) has it open for writing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dim: int | None = None,
        *,
        encoder: Any = None,
        synchronous: str = "normal",
        readonly: bool = False,
        checkpoint_every: int | None = None,
        replay_budget: float | None = None,
        name: str | None = None,
        **config: Any,
    ) -> None:
        self._closed = True
        self._lock_file: LockFile | None = None
        self._conn: sqlite3.Connection | None = None
        self.path = os.path.abspath(os.fspath(path))
        self.name = name if name is not None else os.path.splitext(os.path.basename(self.path))[0]
        self.readonly = bool(readonly)
        if not isinstance(synchronous, str) or synchronous.lower() not in SYNCHRONOUS:
            raise InvalidInput(f"synchronous: expected 'normal' or 'full', got {synchronous!r}")
        self.synchronous = synchronous.lower()
        if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or
                                             int(checkpoint_every) != checkpoint_every or
                                             checkpoint_every < 1):
            raise InvalidInput(
                f"checkpoint_every: expected an integer >= 1 or None, got {checkpoint_every!r}")
        self._checkpoint_every = None if checkpoint_every is None else int(checkpoint_every)
        if replay_budget is not None and (isinstance(replay_budget, bool) or
                                          not isinstance(replay_budget, (int, float)) or
                                          not replay_budget >= 0):
            raise InvalidInput(
                f"replay_budget: expected seconds >= 0 or None, got {replay_budget!r}")
        self._replay_budget = None if replay_budget is None else float(replay_budget)
        if dim is not None and (isinstance(dim, bool) or int(dim) != dim or dim < 1):
            raise InvalidInput(f"dim: expected an integer >= 1, got {dim!r}")
        enc = None if encoder is None else EncoderInfo.of(encoder)
        # The live encoder, for collection.remember/recall/calibrate (hopmem.text).
        self.encoder_object = encoder
        if enc is not None:
            if dim is None:
                dim = enc.dimension
            elif enc.dimension != dim:
                raise IncompatibleStore(
                    f"encoder {enc.name!r} produces dimension {enc.dimension}, but dim={dim} "
                    f"was given")

        self._sql_lock = threading.RLock()      # one transaction at a time on _conn
        self._coll_lock = threading.RLock()     # loading / creating / dropping collections
        self._collections: dict[str, Any] = {}
        self._local = threading.local()
        self._readers: list[tuple[weakref.ref[threading.Thread], sqlite3.Connection]] = []
        self._readers_lock = threading.Lock()

        where = f"database {self.path}"
        exists = os.path.exists(self.path) and os.path.getsize(self.path) > 0
        if os.path.isdir(self.path):
            raise InvalidInput(f"{where}: is a directory, expected a database file")
        if exists:
            with builtins.open(self.path, "rb") as fh:
                header = fh.read(len(SQLITE_HEADER))
            if header != SQLITE_HEADER:
                raise CorruptStore(f"{where}: not a hopmem database (not an SQLite file)")
        elif self.readonly:
            raise NotFound(f"{where}: no such database")
        elif dim is None:
            raise InvalidInput(f"{where}: does not exist; give dim to create it")

        try:
            if not self.readonly:
                self._lock_file = LockFile(self.path + ".lock", where)
            self._open(dim, enc, config, where)
        except BaseException:
            self._release()
            raise
        self._closed = False

    # -- opening --------------------------------------------------------------------------------

    def _open(self, dim: int | None, enc: EncoderInfo | None, config: dict[str, Any],
              where: str) -> None:
        with map_errors(where):
            self._conn = conn = connect(self.path, readonly=self.readonly)
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                raise CorruptStore(f"{where}: not a hopmem database or damaged ({exc})") from exc
            fresh = app_id == 0 and version == 0 and tables == 0
            if not fresh and app_id != schema.APPLICATION_ID:
                raise CorruptStore(
                    f"{where}: an SQLite database, but not a hopmem database "
                    f"(application_id {app_id:#x}, expected {schema.APPLICATION_ID:#x})")
            if fresh:
                if self.readonly:
                    raise NotFound(f"{where}: empty file, not yet a database")
                if dim is None:
                    raise InvalidInput(f"{where}: is empty; give dim to create it")
                self._create(conn, int(dim), enc, config)
            elif version > schema.SCHEMA_VERSION:
                raise IncompatibleStore(
                    f"{where}: schema version {version} is newer than this hopmem supports "
                    f"({schema.SCHEMA_VERSION}); upgrade hopmem")
            elif version < schema.SCHEMA_VERSION:
                if self.readonly:
                    raise IncompatibleStore(
                        f"{where}: schema version {version} needs a migration to "
                        f"{schema.SCHEMA_VERSION}; open it once without readonly")
                self._migrate(conn, version, where)
            if not self.readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                conn.execute("PRAGMA journal_size_limit = 67108864")
            self._read_meta(conn, where)
            self._check_against(dim, enc, config, where)

    def _create(self, conn: sqlite3.Connection, dim: int, enc: EncoderInfo | None,
                config: dict[str, Any]) -> None:
        defaults = MemoryConfig.from_dict({**config, "dim": dim})
        # 16 KiB pages (set before the first table and before WAL mode): a batch's
        # journal row is ~150 KB at d = 384, and a commit writes a quarter as many
        # WAL frames, each with its header and checksum, as with 4 KiB pages.
        conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
            schema.migrate(conn, 0)
            from .. import __version__
            meta = {
                "format": schema.FORMAT,
                "dim": str(dim),
                "config": json.dumps(defaults.to_dict()),
                "created_at": _iso(time.time()),
                "hopmem_version": __version__,
            }
            if enc is not None:
                meta.update(self._encoder_meta(enc))
            conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             meta.items())
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        logger.info("created database %s (dim=%d)", self.path, dim)

    @staticmethod
    def _encoder_meta(enc: EncoderInfo) -> dict[str, str]:
        meta = {"encoder_name": enc.name, "encoder_dimension": str(enc.dimension)}
        if enc.fingerprint is not None:
            meta["encoder_fingerprint"] = enc.fingerprint
        return meta

    def _migrate(self, conn: sqlite3.Connection, version: int, where: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            applied = schema.migrate(conn, version)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        logger.info("%s: migrated schema %d -> %d (%s)", where, version, schema.SCHEMA_VERSION,
                    applied)

    def _read_meta(self, conn: sqlite3.Connection, where: str) -> None:
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            raise CorruptStore(f"{where}: not a hopmem database (no meta table: {exc})") from exc
        if meta.get("format") != schema.FORMAT:
            raise CorruptStore(f"{where}: not a hopmem database (meta format "
                               f"{meta.get('format')!r})")
        try:
            self.dim = int(meta["dim"])
            self.config = MemoryConfig.from_dict(json.loads(meta["config"]))
            self.schema_version = int(meta["schema_version"])
            self.created_at = meta.get("created_at", "")
            if "encoder_name" in meta:
                self.encoder: EncoderInfo | None = EncoderInfo(
                    meta["encoder_name"], int(meta["encoder_dimension"]),
                    meta.get("encoder_fingerprint"))
            else:
                self.encoder = None
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptStore(f"{where}: damaged meta table ({exc!r})") from exc

    def _check_against(self, dim: int | None, enc: EncoderInfo | None, config: dict[str, Any],
                       where: str) -> None:
        if dim is not None and int(dim) != self.dim:
            raise IncompatibleStore(
                f"{where}: database was created with dim={self.dim}, opened with dim={dim}")
        if config:
            recorded = self.config.to_dict()
            wanted = MemoryConfig.from_dict({**recorded, **config}).to_dict()
            differ = [k for k in config if wanted.get(k) != recorded.get(k)]
            if differ:
                raise IncompatibleStore(
                    f"{where}: database was created with {_describe(recorded, differ)}, "
                    f"opened with {_describe(wanted, differ)}")
        if enc is not None:
            have = self.encoder
            if have is not None and have.fingerprint is not None and enc.fingerprint is not None \
                    and have.fingerprint != enc.fingerprint:
                raise IncompatibleStore(
                    f"{where}: database was written with encoder {have.name!r} (fingerprint "
                    f"{have.fingerprint}), opened with encoder {enc.name!r} (fingerprint "
                    f"{enc.fingerprint})")
            if have is None or (have.fingerprint is None and enc.fingerprint is not None):
                if not self.readonly:
                    with self._transaction(where) as conn:
                        conn.executemany(
                            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                            self._encoder_meta(enc).items())
                    logger.info("%s: recorded encoder %s", where, enc.name)
                self.encoder = enc

    # -- connections and transactions -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"database {self.path} is closed")

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.readonly:
            raise StoreError(f"database {self.path} is open read-only: cannot {what}")

    @contextlib.contextmanager
    def _transaction(self, where: str) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the writer connection (rolled back on error)."""
        with self._sql_lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"database {self.path} is closed")
            with map_errors(where):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:  # pragma: no cover - the original error matters
                            logger.exception("%s: ROLLBACK failed", where)
                    raise

    def _reader(self) -> sqlite3.Connection:
        """This thread's own read connection (WAL readers never wait for the writer)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        self._check_open()
        with map_errors(f"database {self.path}"):
            conn = connect(self.path, readonly=True)
        with self._readers_lock:
            if len(self._readers) >= _MAX_READERS:  # drop the connections of finished threads
                alive = []
                for ref, other in self._readers:
                    if ref() is None or not ref().is_alive():  # type: ignore[union-attr]
                        other.close()
                    else:
                        alive.append((ref, other))
                self._readers = alive
            self._readers.append((weakref.ref(threading.current_thread()), conn))
        self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def _read_transaction(self, where: str) -> Iterator[sqlite3.Connection]:
        """A consistent view (one SQLite read transaction) on this thread's connection."""
        conn = self._reader()
        with map_errors(where):
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    # -- collections ------------------------------------------------------------------------------

    def collection(self, name: str, **config: Any):
        """The collection ``name``, created with the database's config (plus ``config``) if missing.

        On an existing collection each given config field must equal the
        recorded one (:class:`~hopmem.errors.IncompatibleStore` otherwise).
        """
        from .collection import Collection

        check_collection_name(name)
        self._check_open()
        coll = self._collections.get(name)
        if coll is None:
            with self._coll_lock:
                coll = self._collections.get(name)
                if coll is None:
                    coll = self._load(name)
                    if coll is None:
                        self._check_writable(f"create collection {name!r}")
                        coll = Collection._create(self, name, self._collection_config(name, config))
                    self._collections[name] = coll
        if config:
            recorded = coll.config.to_dict()
            wanted = self._collection_config(name, config, base=recorded).to_dict()
            differ = [k for k in config if wanted.get(k) != recorded.get(k)]
            if differ:
                raise IncompatibleStore(
                    f"collection {name!r} exists with {_describe(recorded, differ)}; requested "
                    f"{_describe(wanted, differ)}")
        return coll

    def _collection_config(self, name: str, overrides: dict[str, Any],
                           base: dict[str, Any] | None = None) -> MemoryConfig:
        if "dim" in overrides and overrides["dim"] != self.dim:
            raise IncompatibleStore(
                f"collection {name!r}: every collection of database {self.name!r} has "
                f"dim={self.dim}, requested dim={overrides['dim']}")
        return MemoryConfig.from_dict({**(base or self.config.to_dict()), **overrides})

    def get_collection(self, name: str):
        """The existing collection ``name``; :class:`~hopmem.errors.NotFound` if missing."""
        check_collection_name(name)
        self._check_open()
        coll = self._collections.get(name)
        if coll is not None:
            return coll
        with self._coll_lock:
            coll = self._collections.get(name)
            if coll is None:
                coll = self._load(name)
                if coll is None:
                    raise NotFound(f"collection {name!r} not found in database {self.name!r}")
                self._collections[name] = coll
        return coll

    def has_collection(self, name: str) -> bool:
        check_collection_name(name)
        self._check_open()
        if name in self._collections:
            return True
        with map_errors(f"database {self.path}"):
            return self._reader().execute(
                "SELECT 1 FROM collections WHERE name = ?", (name,)).fetchone() is not None

    __contains__ = has_collection

    def collections(self) -> list[str]:
        """Names of the collections, sorted."""
        self._check_open()
        with map_errors(f"database {self.path}"):
            return [r[0] for r in self._reader().execute(
                "SELECT name FROM collections ORDER BY name")]

    def _load(self, name: str):
        from .collection import Collection

        where = f"collection {name!r} of {self.path}"
        with self._read_transaction(where) as conn:
            row = conn.execute(
                "SELECT cid, config, centering, gate, next_doc_id FROM collections WHERE name = ?",
                (name,)).fetchone()
            if row is None:
                return None
            cid, config_text, centering, gate, next_doc_id = row
            try:
                config = MemoryConfig.from_dict(json.loads(config_text))
                centering = None if centering is None else json.loads(centering)
                gate = None if gate is None else json.loads(gate)
            except (ValueError, TypeError) as exc:
                raise CorruptStore(f"{where}: damaged collection record ({exc})") from exc
            if config.dim != self.dim:
                raise CorruptStore(f"{where}: recorded dim={config.dim}, database dim={self.dim}")
            t0 = time.perf_counter()
            rebuilt = journal.rebuild(conn, cid, config, where)
            doc_count = conn.execute("SELECT count(*) FROM documents WHERE cid = ?",
                                     (cid,)).fetchone()[0]
        logger.info("%s: loaded in %.3f s (checkpoint at entry %d, replayed %d entries)",
                    where, time.perf_counter() - t0, rebuilt.checkpoint_seq,
                    rebuilt.replayed_entries)
        coll = Collection(self, cid, name, config, rebuilt, int(next_doc_id), int(doc_count),
                          centering, gate)
        if not self.readonly:
            coll._maybe_checkpoint(after_open=True)
        return coll

    def drop_collection(self, name: str) -> bool:
        """Delete a collection and everything in it; False if it did not exist."""
        check_collection_name(name)
        self._check_writable(f"drop collection {name!r}")
        with self._coll_lock:
            coll = self._collections.get(name)
            guard = coll._wlock if coll is not None else contextlib.nullcontext()
            with guard:
                with self._transaction(f"drop collection {name!r}") as conn:
                    row = conn.execute("SELECT cid FROM collections WHERE name = ?",
                                       (name,)).fetchone()
                    if row is None:
                        return False
                    for table in ("merges", "documents", "checkpoint_parts", "checkpoints",
                                  "journal", "collections"):
                        conn.execute(f"DELETE FROM {table} WHERE cid = ?", (row[0],))
                if coll is not None:
                    coll._dropped = True
                    self._collections.pop(name, None)
        logger.info("database %s: dropped collection %r", self.path, name)
        return True

    # -- whole database ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``{name, created_at, dimension, collections}`` (collections: sorted names)."""
        return {"name": self.name, "created_at": self.created_at, "dimension": self.dim,
                "collections": self.collections()}

    def checkpoint(self) -> None:
        """Checkpoint every loaded collection now (reopening then replays nothing)."""
        self._check_writable("checkpoint")
        for coll in list(self._collections.values()):
            coll.checkpoint()

    def backup(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Copy the database, while open, to ``path`` (SQLite's online backup).

        The copy is consistent (writes wait while it is taken), self-contained
        (rollback journal mode, no -wal file) and a normal hopmem database.
        Returns the absolute path.
        """
        self._check_open()
        target = os.path.abspath(os.fspath(path))
        if target == self.path:
            raise InvalidInput(f"backup: target {target} is the database itself")
        if os.path.exists(target) and not overwrite:
            raise AlreadyExists(f"backup: {target} exists (pass overwrite=True)")
        tmp = f"{target}.tmp-{os.getpid()}-{threading.get_ident()}"
        where = f"backup of {self.path} to {target}"
        try:
            with self._sql_lock, map_errors(where):
                dst = sqlite3.connect(tmp, isolation_level=None)
                try:
                    self._conn.backup(dst)  # type: ignore[union-attr]
                    dst.execute("PRAGMA journal_mode = DELETE")
                finally:
                    dst.close()
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def export_collection(self, name: str, path: str | os.PathLike[str], *,
                          progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
        """Write collection ``name`` to a portable file; see :mod:`hopmem.store.portable`."""
        from .portable import export_collection
        return export_collection(self, name, path, progress=progress)

    def import_collection(self, path: str | os.PathLike[str], name: str | None = None, *,
                          progress: Callable[[int], Any] | None = None):
        """Create a collection from a portable file; see :mod:`hopmem.store.portable`."""
        from .portable import import_collection
        return import_collection(self, path, name, progress=progress)

    def ping(self) -> None:
        """Raise :class:`~hopmem.errors.StoreError` unless the file answers a read (readiness)."""
        self._check_open()
        with map_errors(f"database {self.path}"):
            self._reader().execute("SELECT count(*) FROM meta").fetchone()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Checkpoint what a reopen would otherwise replay, then release everything. Idempotent."""
        if self._closed:
            return
        try:
            for coll in list(self._collections.values()):
                with coll._wlock:  # an in-flight write finishes first
                    if not self.readonly:
                        try:
                            coll._maybe_checkpoint(closing=True)
                        except Exception:  # a cache that could not be written must not block
                            logger.exception("database %s: checkpoint on close failed", self.path)
                    coll._closed = True
        finally:
            self._closed = True
            for coll in self._collections.values():
                coll._closed = True
            self._collections.clear()
            self._release()

    def _release(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for _, conn in readers:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        if self._lock_file is not None:
            self._lock_file.release()
            self._lock_file = None

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.readonly else "open")
        return f"Database({self.path!r}, dim={getattr(self, 'dim', None)}, {state})"


def open(  # noqa: A001 - hopmem.open is the public name
    path: str | os.PathLike[str],
    dim: int | None = None,
    *,
    encoder: Any = None,
    synchronous: str = "normal",
    readonly: bool = False,
    checkpoint_every: int | None = None,
    replay_budget: float | None = None,
    **config: Any,
) -> Database:
    """Open (or create) the hopmem database in the file ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        One SQLite file; created when missing (``dim`` is then required).
    dim : int, optional
        The vectors' dimension; checked against an existing file.
    encoder : object, optional
        An encoder (``name``, ``dimension``, ``fingerprint``); its fingerprint is
        recorded, and checked on later opens so that vector spaces never mix.
    synchronous : {"normal", "full"}
        ``"normal"``: durable across a killed process. ``"full"``: also across
        a power loss (an fsync per commit).
    readonly : bool
        Open without the write lock (works while another process writes);
        nothing can be changed, and collections are as of their loading.
    checkpoint_every : int, optional
        Checkpoint every N vectors (default: by measured replay cost).
    replay_budget : float, optional
        Bound (seconds of engine time) on the journal a reopen after a crash
        may replay; default adaptive (see :mod:`hopmem.store.database`).
    **config
        Default :class:`~hopmem.config.MemoryConfig` fields of new collections.

    Returns
    -------
    Database

    Raises
    ------
    IncompatibleStore, CorruptStore, StoreLocked, InvalidInput, NotFound

    Examples
    --------
    >>> import numpy as np, hopmem, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.hopmem")
    >>> with hopmem.open(path, dim=4) as db:
    ...     notes = db.collection("notes")
    ...     ids = notes.write(np.eye(4, dtype=np.float32), metadata=["a", "b", "c", "d"]).ids
    ...     [hit.metadata for hit in notes.documents.query(np.eye(4)[2], n=1)]
    ['c']
    """
    return Database(path, dim, encoder=encoder, synchronous=synchronous, readonly=readonly,
                    checkpoint_every=checkpoint_every, replay_budget=replay_budget, **config)


def try_lock(path: str, what: str) -> LockFile:
    """Take a database's write lock without opening it (used to move files aside)."""
    return LockFile(os.path.abspath(path) + ".lock", what)
