"""Single-query reads, grouped per collection so that they share worker-thread hops.

Handing a call to a worker thread and its answer back costs the server more
CPU than the engine's read itself on a small machine (thread wake-ups, GIL
hand-offs, future plumbing). So the reads of one collection queue here, on the
event loop, and go to the workers in groups: at most ``parallel`` groups of a
collection are in the workers at once, and a group is one worker-thread call
that runs its reads one after another. Under light load a group is a single
read that starts at once; under load the reads that arrived meanwhile form the
next group.

A cluster's collection (:mod:`hopmem.cluster`) has ``read_group``: a group of its
reads then travels as one actor call to the shard's host instead of one call
per read.

Every read is still computed alone (``Collection.analyze`` or
``Collection.read_scored`` with one query), so its numbers are exactly those of
a read on its own, and an error (say, an empty
memory) belongs to its read only. Only the event loop touches this state: no
locks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["ReadGroups", "ReadTimeout"]

# One queued read: the bound method, the query, the strategy, the future awaiting it.
_Read = tuple[Callable[[Any, str], Any], Any, str, asyncio.Future]


def _run_group(reads: list[_Read]) -> list[tuple[bool, Any]]:
    """In a worker thread: each read's ``(ok, trace or exception)``, in order."""
    owner = getattr(reads[0][0], "__self__", None) if reads else None
    if callable(getattr(owner, "read_group", None)):
        return _run_remote_group(owner, reads)
    out: list[tuple[bool, Any]] = []
    for method, query, strategy, future in reads:
        if future.done():  # cancelled meanwhile (timed out, client gone): skip the work
            out.append((False, None))
            continue
        try:
            out.append((True, method(query, strategy)))
        except Exception as exc:  # noqa: BLE001 - one bad query answers its own error, not the batch's
            out.append((False, exc))
    return out


def _run_remote_group(owner: Any, reads: list[_Read]) -> list[tuple[bool, Any]]:
    """A group of reads of a remote collection (a cluster's): ONE call per read method
    (``owner.read_group(method, [(query, strategy), ...])``), each read still answered alone."""
    out: list[tuple[bool, Any]] = [(False, None)] * len(reads)
    by_method: dict[str, list[int]] = {}
    for i, (method, _, _, future) in enumerate(reads):
        if not future.done():  # cancelled meanwhile: skip the work
            by_method.setdefault(method.__name__, []).append(i)
    for name, idx in by_method.items():
        try:
            answers = owner.read_group(name, [(reads[i][1], reads[i][2]) for i in idx])
        except Exception as exc:  # noqa: BLE001 - the call failed: every read in it answers that
            answers = [(False, exc)] * len(idx)
        for i, outcome in zip(idx, answers):
            out[i] = outcome
    return out


class ReadTimeout(Exception):
    """A grouped read did not finish within its time limit."""


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(ReadTimeout())


class _Lane:
    """The reads of one collection: those waiting, and how many groups are out."""

    __slots__ = ("waiting", "running")

    def __init__(self) -> None:
        self.waiting: list[_Read] = []
        self.running = 0


class ReadGroups:
    """``await read(coll, method, query, strategy)``: one query's
    ``getattr(coll, method)(query, strategy)``, grouped per collection."""

    def __init__(self, executor: Executor, parallel: int) -> None:
        if parallel < 1:
            raise ValueError(f"parallel: expected an integer >= 1, got {parallel!r}")
        self._executor = executor
        self._parallel = parallel
        self._lanes: dict[int, _Lane] = {}

    async def read(self, coll: Any, method: str, query: Any, strategy: str,
                   timeout: float) -> Any:
        """One read's answer (``method`` is ``"analyze"`` or ``"read_scored"``).

        Raises :class:`ReadTimeout` after ``timeout`` seconds (a timer on the read's
        future: cheaper than an ``asyncio.timeout`` scope, and the read is then
        skipped if its group has not reached it). Cancelling the awaiting task
        drops the read in the same way.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        key = id(coll)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.waiting.append((getattr(coll, method), query, strategy, future))
        if lane.running < self._parallel:
            self._start(loop, key, lane)
        timer = loop.call_later(timeout, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    def _start(self, loop: asyncio.AbstractEventLoop, key: int, lane: _Lane) -> None:
        reads = [r for r in lane.waiting if not r[3].done()]
        lane.waiting = []
        if not reads:
            self._forget_if_idle(key, lane)
            return
        try:
            job = self._executor.submit(_run_group, reads)
        except RuntimeError as exc:  # the executor shut down (the server is stopping)
            for read in reads:
                read[3].set_exception(exc)
            self._forget_if_idle(key, lane)
            return
        lane.running += 1

        def finished(job: Future) -> None:  # in the worker thread (or here, if cancelled)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(self._finish, loop, key, lane, reads, job)

        job.add_done_callback(finished)

    def _finish(self, loop: asyncio.AbstractEventLoop, key: int, lane: _Lane,
                reads: list[_Read], job: Future) -> None:
        lane.running -= 1
        if job.cancelled():  # the executor shut down before the group started
            for read in reads:
                read[3].cancel()
        else:
            failure = job.exception()
            outcomes = job.result() if failure is None else [(False, failure)] * len(reads)
            for (_, _, _, future), (ok, value) in zip(reads, outcomes):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        if lane.waiting and lane.running < self._parallel:
            self._start(loop, key, lane)
        else:
            self._forget_if_idle(key, lane)

    def _forget_if_idle(self, key: int, lane: _Lane) -> None:
        # A lane lives only while it has work, so an id() is never reused for a stale lane.
        if not lane.waiting and not lane.running and self._lanes.get(key) is lane:
            del self._lanes[key]
