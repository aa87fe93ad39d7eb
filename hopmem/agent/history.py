"""History helpers: what goes into the next prompt, and what is kept after a run.

Messages are plain dicts in the common chat shape: ``{"role": ..., "content":
...}``, with ``role`` one of ``system``, ``user``, ``assistant``, ``tool``;
an assistant message may carry ``tool_calls`` (ids) that later ``tool``
messages answer with ``tool_call_id``. Nothing here calls a model itself: the
summariser and the extractor are callables the application supplies.

* :class:`RecallingHistory` injects the memories relevant to the turn about to
  be sent (so the context changes with the question), optionally after an
  inner strategy has trimmed the history.
* :class:`SummarisingHistory` keeps the last ``keep_recent`` messages verbatim
  and replaces the older ones by one summary, cached: the summariser runs only
  when the boundary between summarised and verbatim moves. The boundary never
  separates a tool result from the assistant turn that called it.
* :class:`RememberingRunner` wraps a run function; after each successful run
  it asks an extractor what is worth keeping and remembers it. An extractor (or
  a write) that fails is logged and published as ``extraction_failed``; the
  run's result is returned regardless.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .memory import AgentMemory, Selection

__all__ = [
    "Message",
    "format_memories",
    "inject_memories",
    "RecallingHistory",
    "SummarisingHistory",
    "RememberingRunner",
]

logger = logging.getLogger("hopmem.agent")

Message = dict[str, Any]

DEFAULT_HEADER = ("Relevant memories (recalled, may be incomplete or outdated; confidence in brackets). "
                  "Use them only if they help with the user's latest message:")


def _last_user_text(messages: Sequence[Message]) -> tuple[int, str] | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and isinstance(message.get("content"), str) and message["content"].strip():
            return index, message["content"]
    return None


def format_memories(selection: Selection, header: str = DEFAULT_HEADER) -> str | None:
    """The recalled hits as a clearly delimited block, or None when the recall abstained."""
    if selection.abstained or not selection.hits:
        return None
    lines = [f"- [{hit.band}] {hit.text}" for hit in selection.hits]
    return "<memories>\n" + header + "\n" + "\n".join(lines) + "\n</memories>"


def inject_memories(
    memory: AgentMemory,
    messages: Sequence[Message],
    *,
    session_id: str | None,
    limit: int = 5,
    role: str = "system",
    header: str = DEFAULT_HEADER,
) -> tuple[list[Message], Selection | None]:
    """Recall on the latest user message and insert the memories just before it.

    Returns the new message list (the input is not modified) and the selection
    (None when there is no user message). When the recall abstains, the
    messages come back unchanged: no memories is better than irrelevant ones.
    """
    found = _last_user_text(messages)
    out = [dict(m) for m in messages]
    if found is None:
        return out, None
    index, text = found
    selection = memory.recall(text, session_id=session_id, limit=limit)
    block = format_memories(selection, header)
    if block is not None:
        out.insert(index, {"role": role, "content": block})
    return out, selection


class RecallingHistory:
    """Inject relevant memories before the next turn, after an optional inner strategy."""

    def __init__(self, memory: AgentMemory, *, session_id: str | None, inner: Any = None, limit: int = 5,
                 role: str = "system", header: str = DEFAULT_HEADER) -> None:
        self.memory = memory
        self.session_id = session_id
        self.inner = inner
        self.limit = limit
        self.role = role
        self.header = header
        self.last_selection: Selection | None = None

    def prepare(self, messages: Sequence[Message]) -> list[Message]:
        """The messages to send: the inner strategy's, plus a memories block."""
        trimmed = self.inner.prepare(messages) if self.inner is not None else list(messages)
        out, selection = inject_memories(self.memory, trimmed, session_id=self.session_id, limit=self.limit,
                                         role=self.role, header=self.header)
        self.last_selection = selection
        return out


def _digest(messages: Sequence[Message]) -> str:
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True, default=str).encode()).hexdigest()


class SummarisingHistory:
    """Recent turns verbatim, older turns as one cached summary.

    Parameters
    ----------
    summariser : callable
        ``summariser(messages) -> str`` for the older messages. Called only
        when the boundary moves (or the older part changed).
    keep_recent : int
        How many trailing messages stay verbatim (at least; the boundary moves
        earlier rather than split a tool call from its results).
    role : str
        Role of the summary message.
    """

    def __init__(self, summariser: Callable[[list[Message]], str], *, keep_recent: int = 8,
                 role: str = "system", prefix: str = "Summary of the earlier conversation: ") -> None:
        if not callable(summariser):
            raise TypeError("summariser: expected a callable messages -> str")
        if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 1:
            raise ValueError(f"keep_recent: expected an int >= 1, got {keep_recent!r}")
        self.summariser = summariser
        self.keep_recent = keep_recent
        self.role = role
        self.prefix = prefix
        self._cache: tuple[int, str, str] | None = None  # (boundary, digest of older part, summary)
        self.summaries_computed = 0

    @staticmethod
    def _safe_boundary(messages: Sequence[Message], boundary: int) -> int:
        """Move the boundary earlier until the verbatim part does not start inside a tool exchange."""
        while boundary > 0 and messages[boundary].get("role") == "tool":
            boundary -= 1
        return boundary

    def prepare(self, messages: Sequence[Message]) -> list[Message]:
        system = [dict(m) for m in messages if m.get("role") == "system"]
        body = [dict(m) for m in messages if m.get("role") != "system"]
        if len(body) <= self.keep_recent:
            return system + _repair_tool_results(body)
        boundary = self._safe_boundary(body, len(body) - self.keep_recent)
        if boundary == 0:
            return system + _repair_tool_results(body)
        older = body[:boundary]
        digest = _digest(older)
        if self._cache is not None and self._cache[0] == boundary and self._cache[1] == digest:
            summary = self._cache[2]
        else:
            summary = str(self.summariser(older))
            self.summaries_computed += 1
            self._cache = (boundary, digest, summary)
        recent = _repair_tool_results(body[boundary:])
        return system + [{"role": self.role, "content": self.prefix + summary}] + recent


def _repair_tool_results(messages: list[Message]) -> list[Message]:
    """Drop tool results whose calling assistant turn is not in ``messages`` (providers reject them)."""
    called: set[str] = set()
    out = []
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                call_id = call.get("id") if isinstance(call, Mapping) else call
                if call_id is not None:
                    called.add(str(call_id))
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None or str(call_id) not in called:
                continue
        out.append(message)
    return out


class RememberingRunner:
    """Wrap ``run(input) -> output``; after each successful run, remember what an extractor returns.

    Parameters
    ----------
    run : callable
        The agent's run function.
    memory : AgentMemory
    extractor : callable
        ``extractor(input, output) -> iterable`` of texts or dicts with
        ``text`` and optionally ``kind``, ``importance``, ``labels``,
        ``durability``, ``ttl``, ``metadata``.
    session_id : str or None
        Scope of what is remembered (session durability needs it).
    min_importance : float
        Items below this importance are dropped (default 0.3; a plain text
        counts as 0.5).
    max_items : int
        At most this many items per run are kept, most important first; the
        surplus is dropped, not everything.
    """

    def __init__(self, run: Callable[[Any], Any], memory: AgentMemory, extractor: Callable[[Any, Any], Any], *,
                 session_id: str | None = None, min_importance: float = 0.3, max_items: int = 10) -> None:
        self.run_fn = run
        self.memory = memory
        self.extractor = extractor
        self.session_id = session_id
        self.min_importance = min_importance
        self.max_items = max_items
        self.last_entries: list[Any] = []

    def __call__(self, value: Any) -> Any:
        return self.run(value)

    def run(self, value: Any) -> Any:
        output = self.run_fn(value)  # a failing run fails as it would without memory
        self.last_entries = []
        try:
            items = list(self.extractor(value, output) or ())
            normalized = []
            for item in items:
                if isinstance(item, str):
                    item = {"text": item}
                if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
                    raise TypeError(f"extractor returned {item!r}; expected a str or a dict with 'text'")
                normalized.append(dict(item))
            kept = [i for i in normalized if float(i.get("importance", 0.5)) >= self.min_importance]
            kept.sort(key=lambda i: -float(i.get("importance", 0.5)))
            dropped = len(kept) - self.max_items
            kept = kept[: self.max_items]
            for item in kept:
                text = item.pop("text")
                item.setdefault("session_id", self.session_id)
                self.last_entries.append(self.memory.remember(text, **item))
            self.memory.publish("extracted", self.session_id, count=len(self.last_entries),
                                texts=[e.text for e in self.last_entries], dropped=max(0, dropped))
        except Exception as exc:  # noqa: BLE001 - memory is an enhancement: never break a good answer
            logger.warning("hopmem.agent: extraction failed; the run's result is kept: %s", exc)
            try:
                self.memory.publish("extraction_failed", self.session_id, error=repr(exc),
                                    remembered=len(self.last_entries))
            except Exception:
                logger.exception("hopmem.agent: could not publish extraction_failed")
        return output
