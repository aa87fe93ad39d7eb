"""In-process events: what the memory did, as plain data, to any subscriber.

Event types: ``remembered``, ``merged``, ``superseded``, ``recalled`` (with
the recalled statements themselves, not a count), ``completed``, ``feedback``,
``forgotten``, ``expired``, ``evicted``, ``pruned``, ``extracted``,
``extraction_failed``, ``labeling_failed``.

A subscriber is a callable taking one :class:`MemoryEvent`. It runs
synchronously on the thread that caused the event, after the store has
committed. A subscriber that raises is logged and skipped: observing the
memory never breaks it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryEvent", "EventBus", "EVENT_TYPES"]

logger = logging.getLogger("hopmem.agent")

EVENT_TYPES: frozenset[str] = frozenset({
    "remembered", "merged", "superseded", "recalled", "completed", "feedback", "forgotten",
    "expired", "evicted", "pruned", "extracted", "extraction_failed", "labeling_failed",
})


@dataclass(frozen=True)
class MemoryEvent:
    """One event: its ``type``, scope, time on the memory's clock, and ``data`` (plain JSON-like values)."""

    type: str
    namespace: str
    session_id: str | None
    at: float
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "namespace": self.namespace, "session_id": self.session_id,
                "at": self.at, "data": self.data}


class EventBus:
    """Subscribers, optionally per event type."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[tuple[Callable[[MemoryEvent], Any], frozenset[str] | None]] = []

    def subscribe(self, callback: Callable[[MemoryEvent], Any],
                  types: Iterable[str] | None = None) -> Callable[[], None]:
        """Call ``callback`` for every event (or only those of ``types``); returns an unsubscribe function."""
        if not callable(callback):
            raise TypeError(f"callback: expected a callable, got {type(callback).__name__}")
        wanted = None
        if types is not None:
            wanted = frozenset([types] if isinstance(types, str) else types)
            unknown = wanted - EVENT_TYPES
            if unknown:
                from ..errors import InvalidInput
                raise InvalidInput(f"types: unknown event types {sorted(unknown)}; known: {sorted(EVENT_TYPES)}")
        entry = (callback, wanted)
        with self._lock:
            self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    def emit(self, event: MemoryEvent) -> None:
        with self._lock:
            targets = [cb for cb, wanted in self._subscribers if wanted is None or event.type in wanted]
        for callback in targets:
            try:
                callback(event)
            except Exception:  # an observer must never break the memory
                logger.exception("hopmem.agent: event subscriber %r failed on %s", callback, event.type)
