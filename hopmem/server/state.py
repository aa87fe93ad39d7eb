"""The server's runtime state: open databases and collections, locks, the thread pool.

Engine and store calls run in worker threads (the kernel releases the GIL), so
the event loop never waits on them. Concurrency rules:

* any number of reads run at once (the memory's own readers-writer lock);
  single-query reads of one collection go to the threads in groups, so that
  they share the hand-offs (:mod:`.reads`);
* mutations of one collection (write, compress, document delete, drop,
  remember, calibrate) are serialised here by an ``asyncio.Lock`` per
  collection, so a queue of writers waits on the loop instead of holding
  worker threads;
* a mutation, once started, always runs to completion: it is never abandoned
  on timeout or shutdown. Shutdown waits for the in-flight ones (``drain``).

Opening databases and collections goes through one lock so that two requests
never open two copies of the same one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from hopmem.errors import NotFound

from .auth import AuthPolicy
from .errors import HTTPError
from .models import Limits
from .reads import ReadGroups, ReadTimeout

__all__ = ["ServerState", "DbHandle", "DEFAULT_DB"]

logger = logging.getLogger("hopmem.server")

DEFAULT_DB = "default"
T = TypeVar("T")


class DbHandle:
    """An open database and what the server caches about it."""

    __slots__ = ("name", "db", "dim", "collections", "text")

    def __init__(self, name: str, db: Any, dim: int) -> None:
        self.name = name
        self.db = db
        self.dim = dim
        self.collections: dict[str, Any] = {}
        self.text: dict[str, Any] = {}


class ServerState:
    def __init__(self, datadir: Any, *, limits: Limits, policy: AuthPolicy,
                 default_dim: int | None, default_encoder: str | None = None,
                 threads: int = 16,
                 shutdown_timeout: float = 30.0) -> None:
        self.datadir = datadir
        self.limits = limits
        self.policy = policy
        self.default_dim = default_dim
        self.default_encoder = default_encoder
        self.threads = threads
        self.shutdown_timeout = shutdown_timeout
        self.dbs: dict[str, DbHandle] = {}
        self._write_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._open_lock: asyncio.Lock | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._reads: ReadGroups | None = None
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self.draining = False
        self.started = False

    # -- threads ---------------------------------------------------------------------------

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.threads,
                                                thread_name_prefix="hopmem-worker")
        return self._executor

    def _timed_out(self) -> HTTPError:
        return HTTPError(503, f"request timed out after {self.limits.request_timeout:g} s",
                         {"Retry-After": "1"})

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a read-only call in a worker thread, bounded by the request timeout.

        On timeout the thread is abandoned (it finishes in the background and
        changes nothing) and the client gets 503.
        """
        future = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                return await future
        except TimeoutError:
            raise self._timed_out() from None

    @property
    def reads(self) -> ReadGroups:
        """Single-query reads, grouped per collection: as many groups at once as there
        are cores besides the event loop's (at least one, at most ``threads``)."""
        if self._reads is None:
            cores = os.cpu_count() or 1
            self._reads = ReadGroups(self.executor, max(1, min(self.threads, cores - 1)))
        return self._reads

    async def read(self, coll: Any, method: str, query: Any, strategy: str) -> Any:
        """``coll.analyze`` or ``coll.read_scored`` (``method``) for one query, grouped with
        concurrent reads of the same collection (see :mod:`.reads`), bounded by the
        request timeout."""
        try:
            return await self.reads.read(coll, method, query, strategy,
                                         self.limits.request_timeout)
        except ReadTimeout:
            raise self._timed_out() from None

    async def run_to_end(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a mutation in a worker thread; never abandoned once started.

        Even if the awaiting request is cancelled (a forced shutdown), this
        waits for the call to finish, so the caller's collection lock is held
        until the store has committed or rolled back.
        """
        future = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                try:
                    await asyncio.wait({future})
                except asyncio.CancelledError:
                    continue
            raise

    # -- mutations ---------------------------------------------------------------------------

    def _lock_for(self, db: str, collection: str) -> asyncio.Lock:
        key = (db, collection)
        lock = self._write_locks.get(key)
        if lock is None:
            lock = self._write_locks[key] = asyncio.Lock()
        return lock

    @contextlib.asynccontextmanager
    async def mutating(self, db: str, collection: str) -> AsyncIterator[None]:
        """One writer per collection; counted for graceful shutdown.

        Waiting for the lock is bounded by the request timeout (503, nothing
        done); once held, the mutation runs to completion.
        """
        if self.draining:
            raise HTTPError(503, "server is shutting down", {"Retry-After": "1"})
        lock = self._lock_for(db, collection)
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                await lock.acquire()
        except TimeoutError:
            raise HTTPError(503, f"timed out after {self.limits.request_timeout:g} s waiting "
                            f"for another write to collection {collection!r}",
                            {"Retry-After": "1"}) from None
        self._inflight += 1
        if self._idle is not None:
            self._idle.clear()
        try:
            yield
        finally:
            lock.release()
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()

    async def drain(self) -> None:
        """Refuse new mutations and wait (bounded) for the in-flight ones to finish."""
        self.draining = True
        if self._inflight == 0:
            return
        self._idle = asyncio.Event()
        logger.info("waiting for %d in-flight write(s) to finish", self._inflight)
        try:
            await asyncio.wait_for(self._idle.wait(), self.shutdown_timeout)
        except TimeoutError:  # pragma: no cover - only with a stuck store
            logger.error("%d write(s) still running after %.0f s", self._inflight,
                         self.shutdown_timeout)

    # -- databases and collections ----------------------------------------------------------

    @property
    def open_lock(self) -> asyncio.Lock:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        return self._open_lock

    @staticmethod
    def _dim_of(db: Any) -> int:
        return int(db.info()["dimension"])  # the store's record always has it

    async def database(self, name: str) -> DbHandle:
        """The open database ``name``; 404 when it does not exist."""
        handle = self.dbs.get(name)
        if handle is not None:
            return handle
        async with self.open_lock:
            handle = self.dbs.get(name)
            if handle is None:
                def open_() -> DbHandle:
                    db = self.datadir.get(name)
                    return DbHandle(name, db, self._dim_of(db))
                handle = await self.run_to_end(open_)
                self.dbs[name] = handle
        return handle

    async def collection(self, handle: DbHandle, name: str, *, create: bool) -> Any:
        """The collection ``name``: created when missing if ``create``, else 404."""
        coll = handle.collections.get(name)
        if coll is not None:
            return coll
        async with self.open_lock:
            coll = handle.collections.get(name)
            if coll is None:
                fn = handle.db.collection if create else handle.db.get_collection
                coll = await self.run_to_end(fn, name)
                if self.dbs.get(handle.name) is handle:
                    handle.collections[name] = coll
        return coll

    def forget_collection(self, handle: DbHandle, name: str) -> None:
        handle.collections.pop(name, None)
        handle.text.pop(name, None)

    def forget_database(self, name: str) -> DbHandle | None:
        for key in [k for k in self._write_locks if k[0] == name]:
            if not self._write_locks[key].locked():
                del self._write_locks[key]
        return self.dbs.pop(name, None)

    # -- lifecycle -------------------------------------------------------------------------------

    def ensure_default(self) -> None:
        """Open (or create, with the configured dimension) the database ``default``."""
        try:
            db = self.datadir.get(DEFAULT_DB)
        except NotFound:
            if self.default_dim is None:
                raise RuntimeError(
                    f"database {DEFAULT_DB!r} does not exist yet: pass --dimension (or set "
                    "HOPMEM_DIMENSION) so it can be created") from None
            encoder = None
            if self.default_encoder is not None:
                from .text_routes import make_encoder
                try:
                    encoder = make_encoder(self.default_encoder, self.default_dim)
                except HTTPError as exc:
                    raise RuntimeError(exc.message) from None
            db = self.datadir.create(DEFAULT_DB, self.default_dim, encoder=encoder)
            logger.info("created database %r with dimension %d", DEFAULT_DB,
                        self.default_dim)
        dim = self._dim_of(db)
        if self.default_dim is not None and dim != self.default_dim:
            raise RuntimeError(
                f"database {DEFAULT_DB!r} has dimension {dim}, but dimension "
                f"{self.default_dim} was given: pass --dimension {dim} or use another "
                "data directory")
        self.dbs[DEFAULT_DB] = DbHandle(DEFAULT_DB, db, dim)

    def close_all(self) -> None:
        try:
            self._close_databases()
        finally:
            if self._executor is not None:
                # Abandoned reads (timed out) may still run; they change nothing.
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
                self._reads = None

    def _close_databases(self) -> None:
        close_datadir = getattr(self.datadir, "close", None)
        if close_datadir is not None:  # the store's DataDir closes every database it opened
            try:
                close_datadir()
            except Exception:  # pragma: no cover - logged, shutdown goes on
                logger.exception("closing the data directory failed")
            self.dbs.clear()
            return
        for handle in list(self.dbs.values()):
            close = getattr(handle.db, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # pragma: no cover - logged, shutdown goes on
                    logger.exception("closing database %r failed", handle.name)
        self.dbs.clear()
