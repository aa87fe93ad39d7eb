"""A small readers-writer lock: many concurrent readers, one writer."""

from __future__ import annotations

import threading


class _ReadSide:
    __slots__ = ("_owner",)

    def __init__(self, owner: RWLock) -> None:
        self._owner = owner

    def __enter__(self) -> None:
        self._owner.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._owner.release_read()


class _WriteSide:
    __slots__ = ("_owner",)

    def __init__(self, owner: RWLock) -> None:
        self._owner = owner

    def __enter__(self) -> None:
        self._owner.acquire_write()

    def __exit__(self, *exc: object) -> None:
        self._owner.release_write()


class RWLock:
    """Readers share; a writer waits for readers to leave and blocks new ones.

    Writers are preferred once waiting, so a stream of reads cannot starve
    them. Use ``with lock.read():`` and ``with lock.write():``. The context
    objects are plain classes (no generator per use) because reads are hot.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._read_side = _ReadSide(self)
        self._write_side = _WriteSide(self)

    def read(self) -> _ReadSide:
        return self._read_side

    def write(self) -> _WriteSide:
        return self._write_side

    # Readers take the bare lock (a C-level context manager) and touch the
    # condition only when a writer is involved: reads are the hot path.
    def acquire_read(self) -> None:
        with self._lock:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._writers_waiting:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()
