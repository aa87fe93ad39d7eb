"""The shard host: one node-local data directory of shard files, served by the store.

:class:`ShardHost` is plain Python (no Ray): the cluster runs one inside each
``ShardHost`` actor (:mod:`hopmem.cluster.runtime`), and every call the clients
make arrives here as ``(method, args, kwargs)``. A shard is one ordinary
hopmem database file, ``ROOT/<database>/shard-NNNN.hopmem``, opened with
:class:`hopmem.store.Database`; collections, journals, documents, durability and
locking are the store's, unchanged. Files are opened lazily at their first
call, so an actor restarted after a crash reopens (and, if needed, replays)
exactly the shards it is asked for.

Moving a shard away (:meth:`ShardHost.freeze`) stops new calls to it (they
answer :class:`~hopmem.cluster.wire.NotHere`, which makes clients look the
shard up again), waits for the calls in flight, takes a consistent backup and
closes the file; :meth:`ShardHost.release` then moves it into the trash once
the catalog points elsewhere, or :meth:`ShardHost.thaw` reopens it if the
move failed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidInput, StoreError
from ..store import Database
from ..store.datadir import purge_trash_folder
from ..store.names import check_collection_name, check_database_name
from .replication import Replication
from .shardlog import DEFAULT_BYTES, DEFAULT_ENTRIES
from .wire import NotHere, NotOpen

__all__ = ["ShardHost", "shard_file", "agent_file", "COLLECTION_METHODS", "DATABASE_METHODS"]

logger = logging.getLogger("hopmem.cluster")

#: Collection methods a client may call (``documents.*`` go to ``collection.documents``).
COLLECTION_METHODS = frozenset({
    "read", "analyze", "read_scored", "attention", "fingerprint", "stats", "snapshot",
    "write", "compress", "resolve", "checkpoint", "export",
    "documents.get", "documents.list", "documents.delete", "documents.count",
})
#: Collection attributes a client may read (``get:NAME``); ``centering`` and ``gate`` may be set.
COLLECTION_ATTRIBUTES = frozenset({
    "seq", "ids", "addresses", "counters", "weights", "patterns", "centering", "gate",
    "backend", "config", "dim", "next_doc_id",
})
SETTABLE = frozenset({"centering", "gate"})
#: Database methods a client may call.
DATABASE_METHODS = frozenset({
    "collections", "has_collection", "drop_collection", "info", "checkpoint",
    "export_collection", "backup",
})
_CHUNK = 8 << 20


def shard_file(root: str, database: str, shard: int) -> str:
    """The file of shard ``shard`` of ``database`` under a host's ``root``."""
    return os.path.join(root, check_database_name(database), f"shard-{shard:04d}.hopmem")


def agent_file(root: str, database: str, shard: int) -> str:
    """The agent-memory file of a shard (every namespace placed in the shard), next to it."""
    return os.path.join(root, check_database_name(database), f"agent-{shard:04d}.sqlite")


def _summary(coll: Any) -> dict[str, Any]:
    return {"name": coll.name, "config": coll.config}


class ShardHost:
    """Shard files under ``root``, opened on demand; thread safe (calls run concurrently)."""

    def __init__(self, host_id: str, root: str, replica_timeout: float = 5.0,
                 replica_journal_entries: int = DEFAULT_ENTRIES,
                 replica_journal_mb: float = DEFAULT_BYTES / (1 << 20), **options: Any) -> None:
        self.host_id = host_id
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._options = options
        self._open: dict[tuple[str, int], Database] = {}
        self._frozen: set[tuple[str, int]] = set()
        self._inflight: dict[tuple[str, int], int] = {}
        self._cond = threading.Condition(threading.RLock())
        self._write_ids: dict[str, bool] = {}
        self._agents: dict[tuple[str, int, str], Any] = {}
        #: Replicated shards: this host's role in each, and the leader's forwarding.
        self.replication = Replication(self, timeout=float(replica_timeout),
                                       journal_entries=int(replica_journal_entries),
                                       journal_bytes=int(float(replica_journal_mb) * (1 << 20)))
        logger.info("shard host %s serving %s (pid %d)", host_id, self.root, os.getpid())

    # -- about the host -------------------------------------------------------------------------

    def pid(self) -> int:
        """The process id of this host (the fault tests kill it)."""
        return os.getpid()

    def supports_write_ids(self, method: str = "write") -> bool:
        """Whether the store's ``Collection.<method>`` (``documents.<method>``: ``Documents``';
        ``agent.<method>``: ``AgentMemory``') takes ``write_id=`` (a retry applied once)."""
        if method not in self._write_ids:
            from ..store import Collection
            from ..store.documents import Documents
            if method.startswith("agent."):
                from ..agent import AgentMemory
                fn = getattr(AgentMemory, method[6:], None)
            elif method.startswith("documents."):
                fn = getattr(Documents, method[10:], None)
            else:
                fn = getattr(Collection, method, None)
            self._write_ids[method] = fn is not None and \
                "write_id" in inspect.signature(fn).parameters
        return self._write_ids[method]

    def shards(self) -> list[tuple[str, int]]:
        """``(database, shard)`` of every shard file under the root, sorted."""
        out = []
        for db in sorted(os.listdir(self.root)):
            folder = os.path.join(self.root, db)
            if db.startswith(".") or not os.path.isdir(folder):
                continue
            for entry in sorted(os.listdir(folder)):
                if entry.startswith("shard-") and entry.endswith(".hopmem"):
                    out.append((db, int(entry[6:-7])))
        return out

    # -- shard lifecycle -------------------------------------------------------------------------

    def create_shard(self, database: str, shard: int, dim: int, encoder: Any,
                     config: dict[str, Any]) -> dict[str, Any]:
        """Create the shard file; returns its ``info()``. AlreadyExists-safe: an existing
        shard of the same dimension is reopened (a retried create)."""
        path = shard_file(self.root, database, shard)
        key = (database, shard)
        with self._cond:
            db = self._open.get(key)
            if db is None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                db = Database(path, dim, encoder=encoder, name=database, **self._options, **config)
                self._open[key] = db
            return db.info()

    def drop_shard(self, database: str, shard: int) -> bool:
        """Close the shard and move its files into ``ROOT/.trash``; False if absent."""
        key = (database, shard)
        path = shard_file(self.root, database, shard)
        self.replication.forget(database, shard)
        with self._cond:
            self._close_agents(database, shard)
            db = self._open.pop(key, None)
            if db is not None:
                db.close()
            agents = agent_file(self.root, database, shard)
            self._trash(agents, f"{database}-{shard:04d}-agents")
            return self._trash(path, f"{database}-{shard:04d}")

    def _trash(self, path: str, label: str) -> bool:
        if not os.path.exists(path):
            return False
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        trash = os.path.join(self.root, ".trash", f"{label}-{stamp}-{time.time_ns()}")
        os.makedirs(trash)
        for side in ("", "-wal", "-shm"):
            if os.path.exists(path + side):
                os.replace(path + side, os.path.join(trash, os.path.basename(path + side)))
        with contextlib.suppress(OSError):
            os.remove(path + ".lock")
        return True

    def purge_trash(self, older_than: float) -> int:
        return purge_trash_folder(os.path.join(self.root, ".trash"), older_than)

    def close(self) -> None:
        """Checkpoint and close every open shard (a clean stop; reopening replays nothing)."""
        with self._cond:
            for memory in self._agents.values():
                memory.close()
            self._agents.clear()
            dbs, self._open = list(self._open.values()), {}
        for db in dbs:
            db.close()

    def _database(self, database: str, shard: int) -> Database:
        key = (database, shard)
        db = self._open.get(key)
        if db is not None and not db.closed:
            return db
        with self._cond:
            db = self._open.get(key)
            if db is None or db.closed:
                path = shard_file(self.root, database, shard)
                if not os.path.exists(path):
                    raise NotHere(f"host {self.host_id} holds no shard {shard} of {database!r}")
                db = Database(path, name=database, **self._options)
                self._open[key] = db
            return db

    @contextlib.contextmanager
    def _using(self, database: str, shard: int) -> Iterator[Database]:
        key = (database, shard)
        with self._cond:
            if key in self._frozen:
                raise NotHere(f"shard {shard} of {database!r} is moving")
            self._inflight[key] = self._inflight.get(key, 0) + 1
        try:
            yield self._database(database, shard)
        finally:
            with self._cond:
                self._inflight[key] -= 1
                if not self._inflight[key]:
                    del self._inflight[key]
                    self._cond.notify_all()

    # -- the calls -------------------------------------------------------------------------------

    def database_call(self, database: str, shard: int, method: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
        """``method`` of the shard's database (``collection`` and ``get_collection`` answer a
        summary ``{name, config}`` instead of the object; ``encoder``, ``created_at``, ``config``: attributes)."""
        with self._using(database, shard) as db:
            if method in ("collection", "get_collection"):
                return _summary(getattr(db, method)(*args, **kwargs))
            if method in ("encoder", "created_at", "config"):
                return getattr(db, method)
            if method not in DATABASE_METHODS:
                raise InvalidInput(f"method: expected one of {sorted(DATABASE_METHODS)}, got {method!r}")
            return getattr(db, method)(*args, **kwargs)

    def collection_call(self, database: str, shard: int, collection: str, method: str,
                        args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``method`` of a collection: a method name, ``get:ATTR``, ``set:ATTR`` or ``len``."""
        check_collection_name(collection)
        with self._using(database, shard) as db:
            coll = db.get_collection(collection)
            if method == "len":
                return len(coll)
            if method.startswith("get:") and method[4:] in COLLECTION_ATTRIBUTES:
                return getattr(coll, method[4:])
            if method.startswith("set:") and method[4:] in SETTABLE:
                setattr(coll, method[4:], args[0])
                return None
            if method not in COLLECTION_METHODS:
                raise InvalidInput(f"method: expected one of {sorted(COLLECTION_METHODS)}, got "
                                   f"{method!r}")
            if method in ("write", "compress", "documents.delete") and "write_id" in kwargs:
                if kwargs["write_id"] is None:
                    del kwargs["write_id"]
                elif not self.supports_write_ids(method):
                    raise InvalidInput("write_id: expected a store that records write ids, got "
                                       "one without them (upgrade hopmem on the hosts)")
            target: Any = coll
            name = method
            if method.startswith("documents."):
                target, name = coll.documents, method[10:]
            return getattr(target, name)(*args, **kwargs)

    def read_group(self, database: str, shard: int, collection: str, method: str,
                   queries: list[tuple[Any, str]]) -> list[tuple[bool, Any]]:
        """Several single-query reads of one collection in one call, each answered alone."""
        from .wire import answer
        return [answer(self.collection_call, database, shard, collection, method, (q, s), {})
                for q, s in queries]

    # -- agent memory: a namespace lives in a shard like a collection --------------------------------

    def agent_open(self, database: str, shard: int, namespace: str, encoder: Any,
                   options: dict[str, Any]) -> None:
        """Open (or create) the agent memory of ``namespace`` in the shard's agent file."""
        from ..agent import AgentMemory
        key = (database, shard, namespace)
        with self._using(database, shard):
            with self._cond:
                if key not in self._agents:
                    self._agents[key] = AgentMemory.open(
                        agent_file(self.root, database, shard), encoder=encoder,
                        namespace=namespace, **options)

    def agent_call(self, database: str, shard: int, namespace: str, method: str,
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``method`` of an open agent memory: a call, or ``get:NAME`` for an attribute."""
        if method.startswith("_") or method in ("close", "subscribe"):
            raise InvalidInput(f"method: expected a public AgentMemory method, got {method!r}")
        with self._using(database, shard):
            memory = self._agents.get((database, shard, namespace))
            if memory is None:
                raise NotOpen(namespace)
            if method.startswith("get:"):
                value = getattr(memory, method[4:])
                return "<callable>" if callable(value) else value
            return getattr(memory, method)(*args, **kwargs)

    def _close_agents(self, database: str, shard: int) -> None:
        with self._cond:
            for key in [k for k in self._agents if k[:2] == (database, shard)]:
                self._agents.pop(key).close()

    # -- moving a shard ----------------------------------------------------------------------------

    def freeze(self, database: str, shard: int, backup_path: str) -> int:
        """Stop serving the shard, wait for its calls in flight, back it up to ``backup_path``
        (a path under this host's root) and close it. Returns the backup's size in bytes."""
        key = (database, shard)
        self._database(database, shard)  # NotHere if this host does not hold it
        with self._cond:
            self._frozen.add(key)
            while self._inflight.get(key):
                self._cond.wait(1.0)
        try:
            db = self._database(database, shard)
            db.checkpoint()
            target = self._inside(backup_path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            db.backup(target, overwrite=True)
            with self._cond:
                self._open.pop(key, None)
            db.close()
            return os.path.getsize(target)
        except BaseException:
            self.thaw(database, shard)
            raise

    def freeze_agents(self, database: str, shard: int, backup_path: str) -> int:
        """After :meth:`freeze`: close the shard's agent memories and back up their file to
        ``backup_path`` (SQLite's online backup). Returns its size, or -1 when there is none."""
        if (database, shard) not in self._frozen:
            raise StoreError(f"shard {shard} of {database!r} must be frozen before its agent file is copied")
        source = agent_file(self.root, database, shard)
        if not os.path.exists(source):
            return -1
        self._close_agents(database, shard)
        target = self._inside(backup_path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(target)
        src = sqlite3.connect(source)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        return os.path.getsize(target)

    def adopt_agents(self, database: str, shard: int, relative: str) -> None:
        """Install a transferred agent file as this host's agent file of the shard."""
        source = self._inside(relative)
        path = agent_file(self.root, database, shard)
        with self._cond:
            if os.path.exists(path):
                raise StoreError(f"host {self.host_id} already holds agent memories of shard {shard} "
                                 f"of {database!r}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(source, "rb") as f:
                os.fsync(f.fileno())
            os.replace(source, path)

    def thaw(self, database: str, shard: int) -> None:
        """Serve a frozen shard again (its move failed)."""
        with self._cond:
            self._frozen.discard((database, shard))

    def release(self, database: str, shard: int, backup_path: str) -> bool:
        """After a move: trash the shard's files here and forget it."""
        with self._cond:
            self._frozen.discard((database, shard))
            self._open.pop((database, shard), None)
            for leftover in (backup_path, backup_path + ".agents"):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.root, leftover))
            agents = agent_file(self.root, database, shard)
            if os.path.exists(agents):
                self._trash(agents, f"{database}-{shard:04d}-agents")
            return self._trash(shard_file(self.root, database, shard), f"{database}-{shard:04d}")

    def read_chunk(self, relative: str, offset: int, size: int = _CHUNK) -> bytes:
        """``size`` bytes of a file under the root, from ``offset`` (a move's transfer)."""
        path = self._inside(relative)
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def write_chunk(self, relative: str, offset: int, data: bytes) -> int:
        """Write ``data`` at ``offset`` of a file under the root (created if missing)."""
        path = self._inside(relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "r+b" if os.path.exists(path) else "wb") as f:
            f.seek(offset)
            f.write(data)
            if offset == 0:
                f.truncate(len(data))
        return len(data)

    def adopt(self, database: str, shard: int, relative: str) -> dict[str, Any]:
        """Install a transferred copy as this host's shard file, open it, and return its info."""
        source = self._inside(relative)
        path = shard_file(self.root, database, shard)
        with self._cond:
            if os.path.exists(path):
                raise StoreError(f"host {self.host_id} already holds shard {shard} of {database!r}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(source, "rb") as f:
                os.fsync(f.fileno())
            os.replace(source, path)
            self._frozen.discard((database, shard))
        return self._database(database, shard).info()

    def _inside(self, relative: str) -> str:
        path = os.path.abspath(os.path.join(self.root, relative))
        if not path.startswith(self.root + os.sep):
            raise InvalidInput(f"path: expected one under the host's root, got {relative!r}")
        return path

    # -- replicated shards (see :mod:`.replication`) -------------------------------------------

    def lead(self, database: str, shard: int, epoch: int, method: str,
             args: tuple[Any, ...]) -> Any:
        """A client's call to a replicated shard, run here as its leader at ``epoch``."""
        return self.replication.lead(database, shard, epoch, method, args)

    def become(self, database: str, shard: int, epoch: int, leader: str, followers: list[str],
               synced: bool = False, history: str | None = None) -> None:
        self.replication.become(database, shard, epoch, leader, followers, synced, history)

    def catch_up(self, database: str, shard: int, epoch: int, target: str) -> dict[str, Any]:
        return self.replication.catch_up(database, shard, epoch, target)

    def role(self, database: str, shard: int) -> dict[str, Any] | None:
        return self.replication.role(database, shard)

    def apply_entries(self, database: str, shard: int, epoch: int, leader: str, history: str,
                      prev_epoch: int, entries: list[tuple[int, int, list[Any]]]) -> list[Any]:
        return self.replication.apply_entries(database, shard, epoch, leader, history,
                                              prev_epoch, entries)

    def log_position(self, database: str, shard: int) -> tuple[str, int, int] | None:
        return self.replication.position(database, shard)

    def catch_ups(self, database: str, shard: int) -> dict[str, dict[str, Any]]:
        """What the last catch-up of each copy of the shard did (this host leading it)."""
        return self.replication.catch_ups(database, shard)

    def install(self, database: str, shard: int, epoch: int, leader: str, relative: str,
                position: tuple[str, int, int]) -> None:
        self.replication.install(database, shard, epoch, leader, relative, position)

    def receive_chunk(self, relative: str, offset: int, data: bytes) -> int:
        return self.write_chunk(relative, offset, data)

    def database_for_copy(self, database: str, shard: int) -> Database:
        return self._database(database, shard)

    def inside(self, relative: str) -> str:
        return self._inside(relative)

    def replace_shard(self, database: str, shard: int, relative: str) -> None:
        """Install the transferred copy ``relative`` as this host's file of the shard, in
        place of the one it holds (if any): calls wait while it is swapped."""
        key = (database, shard)
        source = self._inside(relative)
        path = shard_file(self.root, database, shard)
        with self._cond:
            self._frozen.add(key)
            while self._inflight.get(key):
                self._cond.wait(1.0)
        try:
            with self._cond:
                db = self._open.pop(key, None)
            if db is not None:
                db.close()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            for side in ("-wal", "-shm", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + side)
            with open(source, "rb") as f:
                os.fsync(f.fileno())
            os.replace(source, path)
        finally:
            self.thaw(database, shard)
        self._database(database, shard)

    def shard_seq(self, database: str, shard: int) -> int:
        """The shard's journal entries committed, over all its collections (a copy's lag is
        its leader's count minus its own)."""
        with self._using(database, shard) as db:
            return sum(db.get_collection(name).seq for name in db.collections())

    def shard_info(self, database: str, shard: int) -> dict[str, Any]:
        with self._using(database, shard) as db:
            info = db.info()
        return {**info, "path": db.path, "bytes": os.path.getsize(db.path)}

    def __repr__(self) -> str:
        return f"ShardHost({self.host_id!r}, {self.root!r})"
