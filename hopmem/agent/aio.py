"""``AgentMemory`` for asyncio code: every call runs in a worker thread.

A recall takes a few milliseconds and the encoder tens more (all-MiniLM-L6-v2
on a CPU); called directly from a coroutine, that time blocks the event loop
and every other request it serves. :class:`AsyncAgentMemory` awaits the same
calls in a thread (:func:`asyncio.to_thread`), so the loop keeps running.
The memory underneath is the ordinary, thread-safe :class:`AgentMemory`
(``.sync``): the results, errors, storage and guarantees are its own, and
sync and async code may share one. Event subscribers are called in the worker
thread that made the change. Cancelling an await does not stop the call: a
thread cannot be interrupted, so a cancelled ``remember`` still lands (whole,
in its own transaction) once its thread finishes.

    mem = await AsyncAgentMemory.open("agent.db", encoder=encoder, namespace="team")
    await mem.remember("Production deploys require a database snapshot.")
    selection = await mem.recall("What do deploys need?")
    await mem.close()

The tools have ``await toolkit.acall(name, arguments)`` for the same reason.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from .memory import AgentMemory

__all__ = ["AsyncAgentMemory"]

P = ParamSpec("P")
R = TypeVar("R")


def _in_thread(method: Callable[Concatenate[AgentMemory, P], R]
               ) -> Callable[Concatenate[AsyncAgentMemory, P], Coroutine[Any, Any, R]]:
    """``AgentMemory.method`` as a coroutine method of :class:`AsyncAgentMemory` (same signature and docs)."""

    @functools.wraps(method)
    async def call(self: AsyncAgentMemory, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    return call


class AsyncAgentMemory:
    """An :class:`AgentMemory` whose calls are awaited in a worker thread; see the module's docs."""

    def __init__(self, memory: AgentMemory) -> None:
        if not isinstance(memory, AgentMemory):
            raise TypeError(f"memory: expected an AgentMemory, got {type(memory).__name__}; "
                            "use `await AsyncAgentMemory.open(...)`")
        #: The memory underneath, for sync code and for what is not a call (``gates``, ``subscribe``, ...).
        self.sync = memory

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncAgentMemory:
        """:meth:`AgentMemory.open` in a worker thread (it reads the file and builds the index)."""
        return cls(await asyncio.to_thread(AgentMemory.open, path, **options))

    remember = _in_thread(AgentMemory.remember)
    remember_many = _in_thread(AgentMemory.remember_many)
    recall = _in_thread(AgentMemory.recall)
    rank = _in_thread(AgentMemory.rank)
    complete = _in_thread(AgentMemory.complete)
    feedback = _in_thread(AgentMemory.feedback)
    forget = _in_thread(AgentMemory.forget)
    get = _in_thread(AgentMemory.get)
    entries = _in_thread(AgentMemory.entries)
    variants = _in_thread(AgentMemory.variants)
    end_session = _in_thread(AgentMemory.end_session)
    prune = _in_thread(AgentMemory.prune)
    stats = _in_thread(AgentMemory.stats)
    calibrate = _in_thread(AgentMemory.calibrate)
    gate_statistics = _in_thread(AgentMemory.gate_statistics)
    reembed = _in_thread(AgentMemory.reembed)
    close = _in_thread(AgentMemory.close)

    async def __aenter__(self) -> AsyncAgentMemory:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncAgentMemory({self.sync!r})"
