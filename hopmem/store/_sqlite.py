"""SQLite plumbing: connections, error mapping, the inter-process lock file."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator

from ..errors import CorruptStore, HopmemError, StoreError, StoreLocked

try:  # POSIX advisory locks; on other systems the lock is best effort (see LockFile)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["SQLITE_HEADER", "connect", "map_errors", "is_corruption", "LockFile"]

SQLITE_HEADER = b"SQLite format 3\x00"
_CORRUPT_NAMES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def connect(path: str, *, readonly: bool, timeout: float = 10.0) -> sqlite3.Connection:
    """An autocommit connection (we issue BEGIN/COMMIT ourselves), usable from any thread."""
    if readonly:
        uri = "file:" + urllib.parse.quote(path, safe="/") + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                               timeout=timeout)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                               timeout=timeout)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return conn


def is_corruption(exc: BaseException) -> bool:
    """Whether an sqlite3 error says the file is damaged or not a database."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name:
        return name.startswith(_CORRUPT_NAMES)
    msg = str(exc).lower()
    return "malformed" in msg or "not a database" in msg


@contextlib.contextmanager
def map_errors(where: str) -> Iterator[None]:
    """Turn sqlite3 errors into StoreError / CorruptStore naming ``where``."""
    try:
        yield
    except HopmemError:
        raise
    except sqlite3.Error as exc:
        if is_corruption(exc):
            raise CorruptStore(f"{where}: the database file is damaged ({exc})") from exc
        raise StoreError(f"{where}: {exc}") from exc


class LockFile:
    """An exclusive, non-blocking ``flock`` on ``path``, held until :meth:`release`.

    ``flock`` locks belong to an open file description, so a second handle in
    the same process conflicts too, and the lock dies with the process (a
    SIGKILL never leaves a stale lock). The holder's pid is written into the
    file for the error message of whoever is refused.
    """

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self._fd: int | None = None
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = ""
                try:
                    pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                    if pid:
                        holder = f" (pid {pid})"
                except OSError:
                    pass
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise StoreLocked(
                        f"{what} is already open for writing by another process{holder} or "
                        f"another handle in this process; close that one first, or open with "
                        f"readonly=True") from None
                raise StoreError(f"{what}: cannot lock {path}: {exc}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError:  # the pid is only a courtesy
            pass
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None
