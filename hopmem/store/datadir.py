"""A directory of named databases, one file each: ``ROOT/<name>.hopmem``.

Names follow :data:`hopmem.store.names.DATABASE_NAME`. Dropping a database moves its files
into ``ROOT/.trash/<name>-<UTC time>/`` rather than deleting them at once;
:meth:`DataDir.purge_trash` deletes what has been there long enough.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import Any

from ..errors import AlreadyExists, IncompatibleStore, InvalidInput, NotFound
from .database import Database
from .dbfile import try_lock
from .names import DATABASE_NAME, check_database_name

__all__ = ["DataDir", "SUFFIX", "open_or_create", "purge_trash_folder"]

SUFFIX = ".hopmem"
_SIDE_FILES = ("", "-wal", "-shm", ".lock")


class DataDir:
    """Named databases under one root directory (created if missing).

    Databases are opened once and cached (a database file can only be open
    for writing once); :meth:`close` closes them all. Thread safe.

    Parameters
    ----------
    root : str or os.PathLike
        The directory.
    **options
        Passed to every :class:`Database` opened here (``synchronous``,
        ``checkpoint_every``, ``replay_budget``, ``readonly``).
    """

    def __init__(self, root: str | os.PathLike[str], **options: Any) -> None:
        self.root = os.path.abspath(os.fspath(root))
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise InvalidInput(f"data dir: {self.root} exists and is not a directory")
        os.makedirs(self.root, exist_ok=True)
        unknown = set(options) - {"synchronous", "checkpoint_every", "replay_budget", "readonly"}
        if unknown:
            raise InvalidInput(f"data dir: unknown option(s) {', '.join(sorted(unknown))}")
        self._options = options
        self._open: dict[str, Database] = {}
        self._lock = threading.RLock()

    def path(self, name: str) -> str:
        """The file of database ``name`` (whether or not it exists)."""
        return os.path.join(self.root, check_database_name(name) + SUFFIX)

    def exists(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    __contains__ = exists

    def list(self) -> list[str]:
        """Names of the databases, sorted."""
        names = []
        for entry in os.listdir(self.root):
            if entry.endswith(SUFFIX):
                stem = entry[: -len(SUFFIX)]
                if DATABASE_NAME.fullmatch(stem) and os.path.isfile(os.path.join(self.root, entry)):
                    names.append(stem)
        return sorted(names)

    def create(self, name: str, dim: int, *, encoder: Any = None, **config: Any) -> Database:
        """Create database ``name``; :class:`~hopmem.errors.AlreadyExists` if it exists."""
        path = self.path(name)
        with self._lock:
            if os.path.exists(path):
                raise AlreadyExists(f"database {name!r} already exists")
            db = Database(path, dim, encoder=encoder, name=name, **self._options, **config)
            self._open[name] = db
            return db

    def get(self, name: str, *, encoder: Any = None) -> Database:
        """The existing database ``name`` (opened once, then cached); NotFound if missing."""
        path = self.path(name)
        with self._lock:
            db = self._open.get(name)
            if db is not None and not db.closed:
                return db
            if not os.path.exists(path):
                raise NotFound(f"database {name!r} not found")
            db = Database(path, encoder=encoder, name=name, **self._options)
            self._open[name] = db
            return db

    def open(self, name: str, dim: int | None = None, *, encoder: Any = None,
             **config: Any) -> Database:
        """Get database ``name``, creating it (with ``dim`` and ``config``) if missing."""
        with self._lock:
            return open_or_create(self, name, dim, encoder, config)

    def drop(self, name: str) -> bool:
        """Move database ``name`` into the trash; False if it did not exist.

        Closes it here first; refuses (:class:`~hopmem.errors.StoreLocked`)
        while another process has it open for writing.
        """
        path = self.path(name)
        with self._lock:
            db = self._open.pop(name, None)
            if db is not None:
                db.close()
            if not os.path.exists(path):
                return False
            lock = try_lock(path, f"database {name!r}")
            try:
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                trash = os.path.join(self.root, ".trash", f"{name}-{stamp}")
                suffix = 1
                while os.path.exists(trash):
                    suffix += 1
                    trash = os.path.join(self.root, ".trash", f"{name}-{stamp}-{suffix}")
                os.makedirs(trash)
                for side in _SIDE_FILES:
                    if side != ".lock" and os.path.exists(path + side):
                        os.replace(path + side, os.path.join(trash, os.path.basename(path + side)))
            finally:
                lock.release()
            return True

    def purge_trash(self, older_than: float = 7 * 86400.0) -> int:
        """Delete dropped databases moved aside more than ``older_than`` seconds ago."""
        return purge_trash_folder(os.path.join(self.root, ".trash"), older_than)

    def close(self) -> None:
        """Close every database opened here."""
        with self._lock:
            dbs, self._open = list(self._open.values()), {}
        for db in dbs:
            db.close()

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataDir({self.root!r})"


def purge_trash_folder(trash: str, older_than: float) -> int:
    """Delete the entries of the folder ``trash`` last changed more than ``older_than`` seconds ago.

    Returns how many were deleted (0 when the folder does not exist).
    """
    if not os.path.isdir(trash):
        return 0
    removed = 0
    cutoff = time.time() - older_than
    for entry in os.listdir(trash):
        full = os.path.join(trash, entry)
        if os.path.getmtime(full) <= cutoff:
            shutil.rmtree(full, ignore_errors=True)
            removed += 1
    return removed


def open_or_create(datadir: Any, name: str, dim: int | None, encoder: Any, config: dict[str, Any]) -> Any:
    """``datadir.open``'s rule for any object with ``exists``, ``get`` and ``create``.

    Gets database ``name`` (checking ``dim`` when given), or creates it with
    ``dim`` and ``config`` when it is missing.
    """
    if datadir.exists(name):
        db = datadir.get(name, encoder=encoder)
        if dim is not None and dim != db.dim:
            raise IncompatibleStore(f"database {name!r} was created with dim={db.dim}, opened with dim={dim}")
        return db
    if dim is None:
        raise NotFound(f"database {name!r} not found (give dim to create it)")
    return datadir.create(name, dim, encoder=encoder, **config)
