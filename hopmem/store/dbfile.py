"""The open file of a database: its connections, transactions, lock and recorded settings.

Internal to the store. A :class:`DatabaseFile` is what a collection needs of
its database (transactions on the writer connection, per-thread read
connections, the checkpoint policy, the encoder), so that
:mod:`hopmem.store.collection` depends on this module and not on
:mod:`hopmem.store.database`, which builds on both. See
:mod:`hopmem.store.database` for the design (journal, durability, locking).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.metadata
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._deprecation import warn_deprecated
from ..engine.config import MemoryConfig
from ..errors import (
    AlreadyExists,
    CorruptStore,
    IncompatibleStore,
    InvalidInput,
    NotFound,
    StoreError,
)
from ..text.encoders import matching_encoder_hint
from . import schema
from ._sqlite import SQLITE_HEADER, LockFile, connect, map_errors

__all__ = ["DatabaseFile", "EncoderInfo", "SYNCHRONOUS", "hopmem_version", "describe"]

logger = logging.getLogger("hopmem.store")

SYNCHRONOUS = ("normal", "full")
_MAX_READERS = 64
_PAGE_SIZE = 16384  # for new files; an existing file keeps its own


def hopmem_version() -> str:
    """The installed hopmem's version, recorded in the files the store writes."""
    try:
        return importlib.metadata.version("hopmem")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"


@dataclass(frozen=True)
class EncoderInfo:
    """The encoder a database's vectors come from: name, dimension ``dim``, fingerprint."""

    name: str
    dim: int
    fingerprint: str | None

    @property
    def dimension(self) -> int:
        """Deprecated name of :attr:`dim`."""
        warn_deprecated("EncoderInfo.dimension", "EncoderInfo.dim")
        return self.dim

    @classmethod
    def of(cls, encoder: Any) -> EncoderInfo:
        """Read ``name``, ``dim`` and ``fingerprint`` from any encoder object.

        An encoder with ``dimension`` instead of ``dim`` (the old protocol)
        still works, with a DeprecationWarning.
        """
        try:
            name = str(encoder.name)
            if hasattr(encoder, "dim"):
                dim = int(encoder.dim)
            else:
                dim = int(encoder.dimension)
                warn_deprecated(f"an encoder with 'dimension' and no 'dim' ({type(encoder).__name__})",
                                "an encoder with a 'dim' attribute", stacklevel=5)
            fingerprint = encoder.fingerprint
        except AttributeError as exc:
            raise InvalidInput(
                f"encoder: expected an object with name, dim and fingerprint "
                f"attributes, got {type(encoder).__name__} ({exc})") from None
        # A str subclass (hopmem.text.encoders.Fingerprint) is kept as it is: it knows the older values it answers to.
        return cls(name, dim, None if fingerprint is None else
                   fingerprint if isinstance(fingerprint, str) else str(fingerprint))

    def to_dict(self) -> dict[str, Any]:
        """``{name, dimension, fingerprint}``: the record in export manifests and ``hopmem stats``."""
        return {"name": self.name, "dimension": self.dim, "fingerprint": self.fingerprint}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def describe(config: dict[str, Any], keys: list[str]) -> str:
    """``"k=v, ..."`` of the given config keys, for messages naming differences."""
    return ", ".join(f"{k}={config[k]!r}" for k in keys)


class DatabaseFile:
    """One open database file (internal; :class:`~hopmem.store.Database` is the public face).

    Opens or creates the file, migrates its schema, reads and checks its
    recorded dimension, config and encoder; holds the write lock file, the
    writer connection (one transaction at a time, :attr:`sql_lock`) and one
    read connection per thread. The arguments are :class:`Database`'s.
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
        config: dict[str, Any] | None = None,
    ) -> None:
        config = config or {}
        self.dim: int = 0
        self.config: MemoryConfig
        self.schema_version: int = 0
        self.created_at: str = ""
        self.encoder: EncoderInfo | None = None
        self._closed = True
        self._lock_file: LockFile | None = None
        self._writer: sqlite3.Connection | None = None
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
        self.checkpoint_every = None if checkpoint_every is None else int(checkpoint_every)
        if replay_budget is not None and (isinstance(replay_budget, bool) or
                                          not isinstance(replay_budget, (int, float)) or
                                          not replay_budget >= 0):
            raise InvalidInput(
                f"replay_budget: expected seconds >= 0 or None, got {replay_budget!r}")
        self.replay_budget = None if replay_budget is None else float(replay_budget)
        if dim is not None and (isinstance(dim, bool) or int(dim) != dim or dim < 1):
            raise InvalidInput(f"dim: expected an integer >= 1, got {dim!r}")
        enc = None if encoder is None else EncoderInfo.of(encoder)
        # The live encoder, for collection.remember/recall/calibrate (hopmem.text).
        self.encoder_object = encoder
        if enc is not None:
            if dim is None:
                dim = enc.dim
            elif enc.dim != dim:
                raise IncompatibleStore(
                    f"encoder {enc.name!r} produces dimension {enc.dim}, but dim={dim} "
                    f"was given")

        self.sql_lock = threading.RLock()       # one transaction at a time on the writer
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
            self._writer = conn = connect(self.path, readonly=self.readonly)
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
            meta = {
                "format": schema.FORMAT,
                "dim": str(dim),
                "config": json.dumps(defaults.to_dict()),
                "created_at": _iso(time.time()),
                "hopmem_version": hopmem_version(),
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
        meta = {"encoder_name": enc.name, "encoder_dimension": str(enc.dim)}
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
                self.encoder = EncoderInfo(
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
                    f"{where}: database was created with {describe(recorded, differ)}, "
                    f"opened with {describe(wanted, differ)}")
        if enc is not None:
            have = self.encoder
            # != with the encoder's fingerprint on one side: a Fingerprint also equals its legacy aliases
            if have is not None and have.fingerprint is not None and enc.fingerprint is not None \
                    and enc.fingerprint != have.fingerprint:
                raise IncompatibleStore(
                    f"{where}: database was written with encoder {have.name!r} (fingerprint "
                    f"{have.fingerprint}), opened with encoder {enc.name!r} (fingerprint "
                    f"{enc.fingerprint}){matching_encoder_hint(have.name, str(have.fingerprint))}")
            if have is None or (have.fingerprint is None and enc.fingerprint is not None):
                if not self.readonly:
                    with self.transaction(where) as conn:
                        conn.executemany(
                            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                            self._encoder_meta(enc).items())
                    logger.info("%s: recorded encoder %s", where, enc.name)
                self.encoder = enc

    # -- connections and transactions -------------------------------------------------------------

    def check_open(self) -> None:
        if self._closed:
            raise StoreError(f"database {self.path} is closed")

    def check_writable(self, what: str) -> None:
        self.check_open()
        if self.readonly:
            raise StoreError(f"database {self.path} is open read-only: cannot {what}")

    @contextlib.contextmanager
    def transaction(self, where: str) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the writer connection (rolled back on error)."""
        with self.sql_lock:
            conn = self._writer
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

    def reader(self) -> sqlite3.Connection:
        """This thread's own read connection (WAL readers never wait for the writer)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        self.check_open()
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
    def read_transaction(self, where: str) -> Iterator[sqlite3.Connection]:
        """A consistent view (one SQLite read transaction) on this thread's connection."""
        conn = self.reader()
        with map_errors(where):
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    @property
    def closed(self) -> bool:
        return self._closed

    def backup(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Copy the database, while open, to ``path``; see :meth:`Database.backup`."""
        self.check_open()
        target = os.path.abspath(os.fspath(path))
        if target == self.path:
            raise InvalidInput(f"backup: target {target} is the database itself")
        if os.path.exists(target) and not overwrite:
            raise AlreadyExists(f"backup: {target} exists (pass overwrite=True)")
        tmp = f"{target}.tmp-{os.getpid()}-{threading.get_ident()}"
        where = f"backup of {self.path} to {target}"
        try:
            with self.sql_lock, map_errors(where):
                dst = sqlite3.connect(tmp, isolation_level=None)
                try:
                    self._writer.backup(dst)  # type: ignore[union-attr]
                    dst.execute("PRAGMA journal_mode = DELETE")
                finally:
                    dst.close()
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def close(self) -> None:
        """Mark closed and release the connections and the lock file. Idempotent."""
        self._closed = True
        self._release()

    def _release(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for _, conn in readers:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()
        if self._writer is not None:
            with contextlib.suppress(sqlite3.Error):
                self._writer.close()
            self._writer = None
        if self._lock_file is not None:
            self._lock_file.release()
            self._lock_file = None


def try_lock(path: str, what: str) -> LockFile:
    """Take a database's write lock without opening it (used to move files aside)."""
    return LockFile(os.path.abspath(path) + ".lock", what)
