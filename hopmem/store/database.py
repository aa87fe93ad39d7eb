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
version 1 kept one ``postings`` row per (location, document) instead: at
30,000 documents a batch of 100 documents (2,100 posting rows) then cost
about 30 ms of CPU, 14 us per row, because the rows land all over a
location-ordered B-tree and each commit dirties pages across it (see
:mod:`hopmem.store.schema`, migration 2). Deleting a document deletes one
row; the in-memory index drops it lazily.

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

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine.config import MemoryConfig
from ..engine.memory import Memory
from ..errors import AlreadyExists, CorruptStore, IncompatibleStore, NotFound
from . import journal, portable
from ._sqlite import map_errors
from .collection import Collection
from .dbfile import SYNCHRONOUS, DatabaseFile, EncoderInfo, describe, try_lock
from .names import check_collection_name

__all__ = ["Database", "EncoderInfo", "open", "SYNCHRONOUS", "try_lock"]

logger = logging.getLogger("hopmem.store")


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
        Anything with ``name``, ``dim`` and ``fingerprint``. Recorded in
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
        Defaults for new collections (see :class:`~hopmem.engine.config.MemoryConfig`);
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
        self._coll_lock = threading.RLock()     # loading / creating / dropping collections
        self._collections: dict[str, Collection] = {}
        self._file = DatabaseFile(path, dim, encoder=encoder, synchronous=synchronous,
                                  readonly=readonly, checkpoint_every=checkpoint_every,
                                  replay_budget=replay_budget, name=name, config=config)

    # -- what the file records --------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The database file's absolute path."""
        return self._file.path

    @property
    def name(self) -> str:
        """The database's name (its file name without the suffix, or the DataDir name)."""
        return self._file.name

    @property
    def readonly(self) -> bool:
        return self._file.readonly

    @property
    def synchronous(self) -> str:
        return self._file.synchronous

    @property
    def dim(self) -> int:
        """The dimension of every vector in the database."""
        return self._file.dim

    @property
    def config(self) -> MemoryConfig:
        """The default config of new collections."""
        return self._file.config

    @property
    def schema_version(self) -> int:
        return self._file.schema_version

    @property
    def created_at(self) -> str:
        """When the file was created, ISO 8601 UTC."""
        return self._file.created_at

    @property
    def encoder(self) -> EncoderInfo | None:
        """The encoder recorded in the file (name, dim, fingerprint), or None."""
        return self._file.encoder

    @property
    def encoder_object(self) -> Any:
        """The live encoder this database was opened with (for remember, recall, calibrate), or None."""
        return self._file.encoder_object

    # -- collections ------------------------------------------------------------------------------

    def collection(self, name: str, **config: Any) -> Collection:
        """The collection ``name``, created with the database's config (plus ``config``) if missing.

        On an existing collection each given config field must equal the
        recorded one (:class:`~hopmem.errors.IncompatibleStore` otherwise).
        """
        check_collection_name(name)
        self._file.check_open()
        coll = self._collections.get(name)
        if coll is None:
            with self._coll_lock:
                coll = self._collections.get(name)
                if coll is None:
                    coll = self._load(name)
                    if coll is None:
                        self._file.check_writable(f"create collection {name!r}")
                        coll = self._create(name, self._collection_config(name, config))
                    self._collections[name] = coll
        if config:
            recorded = coll.config.to_dict()
            wanted = self._collection_config(name, config, base=recorded).to_dict()
            differ = [k for k in config if wanted.get(k) != recorded.get(k)]
            if differ:
                raise IncompatibleStore(
                    f"collection {name!r} exists with {describe(recorded, differ)}; requested "
                    f"{describe(wanted, differ)}")
        return coll

    def _collection_config(self, name: str, overrides: dict[str, Any],
                           base: dict[str, Any] | None = None) -> MemoryConfig:
        if "dim" in overrides and overrides["dim"] != self.dim:
            raise IncompatibleStore(
                f"collection {name!r}: every collection of database {self.name!r} has "
                f"dim={self.dim}, requested dim={overrides['dim']}")
        return MemoryConfig.from_dict({**(base or self.config.to_dict()), **overrides})

    def _create(self, name: str, config: MemoryConfig) -> Collection:
        with self._file.transaction(f"create collection {name!r}") as conn:
            cid = conn.execute(
                "INSERT INTO collections (name, config, next_doc_id, created_at) "
                "VALUES (?, ?, 1, ?)", (name, json.dumps(config.to_dict()), time.time())).lastrowid
            assert cid is not None  # an executed INSERT sets it
        rebuilt = journal.Rebuilt(Memory.from_config(config), 0, 0, 0, 0, 0.0)
        logger.info("database %s: created collection %r", self.path, name)
        return Collection(self, self._file, int(cid), name, config, rebuilt, 1, 0, None, None)

    def get_collection(self, name: str) -> Collection:
        """The existing collection ``name``; :class:`~hopmem.errors.NotFound` if missing."""
        check_collection_name(name)
        self._file.check_open()
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
        self._file.check_open()
        if name in self._collections:
            return True
        with map_errors(f"database {self.path}"):
            return self._file.reader().execute(
                "SELECT 1 FROM collections WHERE name = ?", (name,)).fetchone() is not None

    __contains__ = has_collection

    def collections(self) -> list[str]:
        """Names of the collections, sorted."""
        self._file.check_open()
        with map_errors(f"database {self.path}"):
            return [r[0] for r in self._file.reader().execute(
                "SELECT name FROM collections ORDER BY name")]

    def _load(self, name: str) -> Collection | None:
        where = f"collection {name!r} of {self.path}"
        with self._file.read_transaction(where) as conn:
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
        coll = Collection(self, self._file, cid, name, config, rebuilt, int(next_doc_id),
                          int(doc_count), centering, gate)
        if not self.readonly:
            coll.checkpoint_if_due()
        return coll

    def drop_collection(self, name: str) -> bool:
        """Delete a collection and everything in it; False if it did not exist."""
        check_collection_name(name)
        self._file.check_writable(f"drop collection {name!r}")
        with self._coll_lock:
            coll = self._collections.get(name)
            guard = coll.exclusive() if coll is not None else contextlib.nullcontext()
            with guard:
                with self._file.transaction(f"drop collection {name!r}") as conn:
                    row = conn.execute("SELECT cid FROM collections WHERE name = ?",
                                       (name,)).fetchone()
                    if row is None:
                        return False
                    for table in ("merges", "documents", "checkpoint_parts", "checkpoints",
                                  "journal", "write_ids", "collections"):
                        conn.execute(f"DELETE FROM {table} WHERE cid = ?", (row[0],))
                if coll is not None:
                    coll.mark_dropped()
                    self._collections.pop(name, None)
        logger.info("database %s: dropped collection %r", self.path, name)
        return True

    # -- whole database ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``{name, created_at, dimension, collections}`` (collections: sorted names).

        The keys are the HTTP API's database record (``dimension`` is :attr:`dim`).
        """
        return {"name": self.name, "created_at": self.created_at, "dimension": self.dim,
                "collections": self.collections()}

    def checkpoint(self) -> None:
        """Checkpoint every loaded collection now (reopening then replays nothing)."""
        self._file.check_writable("checkpoint")
        for coll in list(self._collections.values()):
            coll.checkpoint()

    def backup(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Copy the database, while open, to ``path`` (SQLite's online backup).

        The copy is consistent (writes wait while it is taken), self-contained
        (rollback journal mode, no -wal file) and a normal hopmem database.
        Returns the absolute path.
        """
        return self._file.backup(path, overwrite=overwrite)

    def export_collection(self, name: str, path: str | os.PathLike[str], *,
                          progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
        """Write collection ``name`` to a portable file; see :mod:`hopmem.store.portable`."""
        return portable.write_export(self._file, name, path, progress=progress)

    def import_collection(self, path: str | os.PathLike[str], name: str | None = None, *,
                          progress: Callable[[int], Any] | None = None) -> Collection:
        """Create a collection from a portable file; see :mod:`hopmem.store.portable`.

        ``name`` defaults to the exported name; :class:`~hopmem.errors.AlreadyExists`
        if the database has a collection by that name. One transaction: on any
        failure nothing is created.
        """
        plan = portable.plan_import(self._file, path, name)
        with self._coll_lock:
            if self.has_collection(plan.name):
                raise AlreadyExists(
                    f"collection {plan.name!r} already exists in database {self.name!r}")
            done = portable.run_import(self._file, plan, progress=progress)
            coll = Collection(self, self._file, done.cid, done.name, done.config, done.rebuilt,
                              done.next_doc_id, done.doc_count, done.centering, done.gate)
            self._collections[done.name] = coll
        return coll

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        """Checkpoint what a reopen would otherwise replay, then release everything. Idempotent."""
        if self._file.closed:
            return
        try:
            for coll in list(self._collections.values()):
                coll.close_for_database()
        finally:
            for coll in self._collections.values():
                coll.mark_closed()
            self._collections.clear()
            self._file.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self.readonly else "open")
        return f"Database({self.path!r}, dim={self.dim}, {state})"


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
        An encoder (``name``, ``dim``, ``fingerprint``); its fingerprint is
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
        Default :class:`~hopmem.engine.config.MemoryConfig` fields of new collections.

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
    ...     [hit.metadata for hit in notes.resolve(np.eye(4)[2], limit=1)]
    ['c']
    """
    return Database(path, dim, encoder=encoder, synchronous=synchronous, readonly=readonly,
                    checkpoint_every=checkpoint_every, replay_budget=replay_budget, **config)
