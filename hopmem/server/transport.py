"""One socket write per response: uvicorn's HTTP protocol over a coalescing transport.

uvicorn writes a response's status line and headers as soon as the application
starts the response, and the body as a second write: two ``send`` system calls
and two TCP segments for every small JSON answer, so the client is woken twice.
:class:`CoalescingTransport` collects the writes made while one event-loop
callback runs and hands them to the socket together once it returns (a
``call_soon``), which is one system call and one segment per response. Bytes
and their order are unchanged; a ``close()`` writes what is pending first.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport", "coalescing"]


class CoalescingTransport:
    """Wraps an ``asyncio.Transport``: writes wait for the end of the current callback."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)

    def flush(self) -> None:
        """Write what is pending now (a no-op when nothing is, or the connection is gone)."""
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped transport's
        return getattr(self._transport, name)


def coalescing(protocol_class: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A subclass of a uvicorn HTTP protocol class whose connections write through
    :class:`CoalescingTransport` (pass it as ``uvicorn.Config(http=...)``)."""

    class Coalescing(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            loop = asyncio.get_running_loop()
            super().connection_made(CoalescingTransport(transport, loop))

    Coalescing.__name__ = Coalescing.__qualname__ = f"Coalescing{protocol_class.__name__}"
    return Coalescing
