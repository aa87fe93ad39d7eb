"""Tools a model can call: remember, recall, forget.

:func:`memory_tools` binds an :class:`~hopmem.agent.AgentMemory` (and so its
namespace) and one session id into three tools. Their JSON schemas have no
namespace or session parameter, and :meth:`MemoryTool.run` refuses any
argument the schema does not declare, so nothing a model writes in its
arguments can reach another tenant or session. A missing session id fails
closed when the tools are made.

Each tool exports its definition in the shapes function-calling APIs accept
(:meth:`MemoryTool.definition`: ``"openai"``, ``"anthropic"`` or the plain
``{"name", "description", "parameters"}``). ``run`` takes the model's
arguments (a dict or a JSON string) and returns a JSON-ready dict; it never
raises on bad arguments: the error goes back to the model as
``{"ok": False, "error": ...}`` so it can correct itself.

* ``recall`` reports absence as knowledge: ``"Nothing relevant is remembered
  about that."`` with ``found: False``; it is an answer, not an error.
* ``forget`` needs approval by default: without ``approved=True`` from the
  application (or an ``approve`` callback that says yes) it returns
  ``needs_approval: True`` and deletes nothing. Deletion is irreversible, and a
  model that misreads a correction as a retraction must not erase a profile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import HopmemError
from .memory import AgentMemory, Entry, MissingIdentity
from .validation import identity

__all__ = ["MemoryTool", "MemoryToolkit", "memory_tools", "NOTHING_REMEMBERED"]

logger = logging.getLogger("hopmem.agent")

NOTHING_REMEMBERED = "Nothing relevant is remembered about that."


@dataclass
class MemoryTool:
    """One tool: its name, description, JSON schema, and the bound function."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[dict[str, Any], bool], dict[str, Any]] = field(repr=False)
    requires_approval: bool = False
    #: What calling it does to the memory, for protocols that carry hints (MCP tool annotations):
    #: ``read_only`` changes nothing; ``destructive`` may delete irreversibly; ``idempotent``
    #: repeating the call with the same arguments has no further effect.
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def definition(self, format: str = "openai") -> dict[str, Any]:
        """The tool definition for a function-calling API.

        ``"openai"``: ``{"type": "function", "function": {name, description, parameters}}``;
        ``"anthropic"``: ``{name, description, input_schema}``;
        ``"plain"``: ``{name, description, parameters}``.
        """
        plain = {"name": self.name, "description": self.description, "parameters": self.parameters}
        if format == "openai":
            return {"type": "function", "function": plain}
        if format == "anthropic":
            return {"name": self.name, "description": self.description, "input_schema": self.parameters}
        if format == "plain":
            return plain
        raise ValueError(f"format: expected 'openai', 'anthropic' or 'plain', got {format!r}")

    async def arun(self, arguments: Mapping[str, Any] | str | None = None, *,
                   approved: bool = False) -> dict[str, Any]:
        """:meth:`run` in a worker thread, for asyncio code (the event loop keeps running)."""
        return await asyncio.to_thread(self.run, arguments, approved=approved)

    def run(self, arguments: Mapping[str, Any] | str | None = None, *, approved: bool = False) -> dict[str, Any]:
        """Run with a model's arguments; returns a JSON-ready dict (errors included, never raised)."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return {"ok": False, "error": f"arguments are not valid JSON: {exc}"}
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return {"ok": False, "error": f"arguments: expected an object, got {type(arguments).__name__}"}
        problem = _validate(arguments, self.parameters)
        if problem:
            return {"ok": False, "error": problem}
        try:
            return self.handler(dict(arguments), approved)
        except MissingIdentity:
            raise  # a binding problem is the application's, never the model's to work around
        except HopmemError as exc:
            return {"ok": False, "error": str(exc)}


class MemoryToolkit(list):
    """The tools, as a list, plus helpers to export definitions and dispatch calls."""

    def definitions(self, format: str = "openai") -> list[dict[str, Any]]:
        return [tool.definition(format) for tool in self]

    def get(self, name: str) -> MemoryTool | None:
        for tool in self:
            if tool.name == name:
                return tool
        return None

    def call(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
             approved: bool = False) -> dict[str, Any]:
        """Dispatch a model's tool call by name; an unknown name is an error result."""
        tool = self.get(name)
        if tool is None:
            return {"ok": False, "error": f"unknown tool {name!r}; available: {[t.name for t in self]}"}
        return tool.run(arguments, approved=approved)

    async def acall(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                    approved: bool = False) -> dict[str, Any]:
        """:meth:`call` in a worker thread, for asyncio code (the event loop keeps running)."""
        return await asyncio.to_thread(self.call, name, arguments, approved=approved)


def _validate(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """The subset of JSON Schema our tools use: object, required, no extra keys, types, enums, ranges."""
    props = schema.get("properties", {})
    for key in arguments:
        if key not in props:
            return (f"unexpected argument {key!r}; this tool accepts only {sorted(props)} "
                    "(scope is fixed by the application)")
    for key in schema.get("required", []):
        if key not in arguments:
            return f"missing required argument {key!r}"
    for key, value in arguments.items():
        spec = props[key]
        kind = spec.get("type")
        if kind == "string":
            if not isinstance(value, str):
                return f"{key}: expected a string, got {type(value).__name__}"
            if "maxLength" in spec and len(value) > spec["maxLength"]:
                return f"{key}: at most {spec['maxLength']} characters, got {len(value)}"
            if spec.get("minLength") and len(value.strip()) < spec["minLength"]:
                return f"{key}: expected a non-empty string"
        elif kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"{key}: expected an integer, got {value!r}"
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{key}: expected a number, got {value!r}"
        elif kind == "boolean":
            if not isinstance(value, bool):
                return f"{key}: expected a boolean, got {value!r}"
        elif kind == "object":
            if not isinstance(value, Mapping):
                return f"{key}: expected an object, got {type(value).__name__}"
        if "enum" in spec and value not in spec["enum"]:
            return f"{key}: expected one of {spec['enum']}, got {value!r}"
        if "minimum" in spec and isinstance(value, (int, float)) and value < spec["minimum"]:
            return f"{key}: expected >= {spec['minimum']}, got {value!r}"
        if "maximum" in spec and isinstance(value, (int, float)) and value > spec["maximum"]:
            return f"{key}: expected <= {spec['maximum']}, got {value!r}"
    return None


def _entry_brief(entry: Entry) -> dict[str, Any]:
    return {"id": entry.id, "text": entry.text, "kind": entry.kind, "durability": entry.durability}


def _entry_detail(entry: Entry) -> dict[str, Any]:
    """Everything an inspection shows about an entry (JSON-ready)."""
    out = _entry_brief(entry)
    for name in ("session_id", "importance", "labels", "inferred_labels", "metadata", "created_at", "updated_at",
                 "reinforced_at", "expires_at", "merged_count", "superseded_by", "utility", "manual_feedback",
                 "exposures", "retention", "expired", "suppressed"):
        out[name] = getattr(entry, name)
    out["recallable"] = entry.recallable
    return out


def memory_tools(
    memory: AgentMemory,
    *,
    session_id: str | None,
    shared_only: bool = False,
    include_forget: bool = True,
    forget_requires_approval: bool = True,
    approve: Callable[[Entry], bool] | None = None,
    default_durability: str = "shared",
    allow_shared_writes: bool = True,
    max_limit: int = 10,
    include_feedback: bool = False,
    include_inspection: bool = False,
) -> MemoryToolkit:
    """The remember / recall / forget tools, bound to ``memory``'s namespace and ``session_id``.

    Parameters
    ----------
    memory : AgentMemory
    session_id : str or None
        The session the tools act for: session writes go there and recalls see
        it. Required (``MissingIdentity`` otherwise) unless ``shared_only``.
    shared_only : bool
        Bind to no session: the tools see and write only the shared pool.
    include_forget : bool
        Offer the forget tool at all.
    forget_requires_approval : bool
        Forget deletes only when the application approves (``run(...,
        approved=True)`` or ``approve(entry)`` returning True).
    default_durability : "shared" or "session"
        What remember stores when the model does not say.
    allow_shared_writes : bool
        Whether the model may write to the shared pool.
    max_limit : int
        The largest ``limit`` a model may ask recall for.
    include_feedback : bool
        Also offer ``complete`` (rate how well the work that used a recall's
        selection went) and ``feedback`` (set or clear one memory's value).
    include_inspection : bool
        Also offer the read-only ``list_memories`` and ``inspect_memory``.
    """
    if not isinstance(memory, AgentMemory):
        raise TypeError(f"memory: expected an AgentMemory, got {type(memory).__name__}")
    if shared_only:
        if session_id is not None:
            raise MissingIdentity("shared_only tools take no session_id")
        bound_session = None
    else:
        bound_session = identity(session_id, "session_id", required=True)
    durabilities = ["session"] if bound_session is not None else []
    if allow_shared_writes:
        durabilities.insert(0, "shared")
    if not durabilities:
        raise MissingIdentity("these tools could write nowhere: bind a session_id or allow shared writes")
    if default_durability not in durabilities:
        default_durability = durabilities[0]
    label_props: dict[str, Any] = {"type": "object",
                                   "description": "Optional labels, e.g. {\"topic\": [\"deploys\"]}."}
    policy = memory.label_policy
    allowed = policy.allowed_values
    if allowed is not None:
        label_props["properties"] = {
            key: {"type": "array", "items": ({"type": "string", "enum": sorted(values)} if values else
                                             {"type": "string"}), "maxItems": policy.max_values_per_key}
            for key, values in allowed.items()}
        label_props["additionalProperties"] = False

    def remember(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        durability = args.get("durability", default_durability)
        ttl_days = args.get("ttl_days")
        entry = memory.remember(
            args["text"], session_id=bound_session,
            durability=durability, kind=args.get("kind", "fact"), importance=float(args.get("importance", 0.5)),
            labels=args.get("labels"), ttl=None if ttl_days is None else float(ttl_days) * 86400.0)
        message = "Already remembered; merged with the existing memory." if entry.merged else "Remembered."
        return {"ok": True, "id": entry.id, "merged": entry.merged, "message": message}

    def recall(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        selection = memory.recall(args["query"], session_id=bound_session, limit=int(args.get("limit", 5)),
                                  labels=args.get("labels"))
        if selection.abstained:
            return {"ok": True, "found": False, "message": NOTHING_REMEMBERED, "selection_id": selection.id,
                    "reason": selection.reason}
        return {
            "ok": True, "found": True, "selection_id": selection.id,
            "memories": [{"id": h.entry_id, "text": h.text, "confidence": h.band,
                          "why": str(h.explanation)} for h in selection.hits],
        }

    def visible(entry_id: Any) -> Entry | dict[str, Any]:
        """The entry with ``entry_id`` if this binding sees it, else the tool's error result."""
        try:
            return memory.get(entry_id, session_id=bound_session)
        except HopmemError:
            return {"ok": False, "error": f"no memory with id {entry_id} is visible here"}

    def forget(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        entry_id = args["id"]
        entry = visible(entry_id)
        if isinstance(entry, dict):
            return entry
        if forget_requires_approval and not approved:
            ok = False
            if approve is not None:
                try:
                    ok = bool(approve(entry))
                except Exception:
                    logger.exception("hopmem.agent: forget approval callback failed")
                    ok = False
            if not ok:
                return {"ok": False, "needs_approval": True, "memory": _entry_brief(entry),
                        "message": "Forgetting is irreversible and needs the user's approval; nothing was deleted."}
        done = memory.forget(entry_id, session_id=bound_session)
        return {"ok": done, "forgotten": done, "id": entry_id,
                "message": "Forgotten." if done else "Nothing was deleted."}

    def complete(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        done = memory.complete(args["selection_id"], float(args["score"]))
        return {"ok": True, "recorded": done,
                "message": "Recorded." if done else "Unknown or expired selection (or already rated); nothing changed."}

    def feedback(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        entry_id = args["id"]
        found = visible(entry_id)
        if isinstance(found, dict):
            return found
        value = args.get("value")
        entry = memory.feedback(entry_id, None if value is None else float(value))
        return {"ok": True, "id": entry.id, "value": entry.manual_feedback,
                "message": "Feedback cleared." if value is None else "Feedback recorded."}

    def list_memories(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        entries = memory.entries(session_id=bound_session, include_hidden=bool(args.get("include_hidden", False)))
        limit = int(args.get("limit", 50))
        shown = entries[-limit:]
        return {"ok": True, "total": len(entries), "memories": [_entry_brief(e) for e in shown]}

    def inspect_memory(args: dict[str, Any], approved: bool) -> dict[str, Any]:
        entry_id = args["id"]
        entry = visible(entry_id)
        if isinstance(entry, dict):
            return entry
        variants = memory.variants(entry_id, session_id=bound_session)
        return {"ok": True, "memory": _entry_detail(entry), "variants": [v["text"] for v in variants]}

    remember_params: dict[str, Any] = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 4000,
                     "description": "One self-contained statement (no pronouns): who, what, when."},
            "kind": {"type": "string", "enum": sorted(memory.kinds),
                     "description": "fact, preference, event, summary, task or observation."},
            "importance": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "0 trivia .. 1 essential; most things are 0.3-0.7."},
            "durability": {"type": "string", "enum": durabilities,
                           "description": "shared: durable, for every later conversation; session: only this one."},
            "labels": label_props,
            "ttl_days": {"type": "number", "minimum": 0.001,
                         "description": "Forget after this many days (events and observations)."},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    recall_params: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 2000,
                      "description": "What you want to know, as a question or key words."},
            "limit": {"type": "integer", "minimum": 1, "maximum": max_limit},
            "labels": {**label_props, "description": "Only memories carrying these labels."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    forget_params: dict[str, Any] = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1, "description": "The id of a memory from recall."}},
        "required": ["id"],
        "additionalProperties": False,
    }
    tools = MemoryToolkit([
        MemoryTool("remember",
                   "Store a durable fact, preference, decision or event about the user or their work, as one "
                   "self-contained sentence. Re-remembering the same thing is harmless (it merges).",
                   remember_params, remember, idempotent=True),
        MemoryTool("recall",
                   "Look up what is remembered about a topic before answering questions about the user's "
                   "preferences, plans or past decisions. found=false means nothing relevant is remembered.",
                   recall_params, recall, read_only=True),
    ])
    if include_forget:
        tools.append(MemoryTool(
            "forget",
            "Delete one memory by id when the user explicitly asks for it to be forgotten. Requires the "
            "user's approval; a correction should be remembered as a new fact instead.",
            forget_params, forget, requires_approval=forget_requires_approval, destructive=True,
            idempotent=True))
    if include_feedback:
        tools.append(MemoryTool(
            "complete",
            "After answering with what recall returned, rate how well it served: score 0 (useless or wrong) "
            "to 1 (exactly right) for the selection_id recall gave. Each selection can be rated once.",
            {"type": "object",
             "properties": {
                 "selection_id": {"type": "string", "minLength": 1, "maxLength": 200,
                                  "description": "The selection_id from a recall result."},
                 "score": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "0 useless .. 1 exactly what was needed."}},
             "required": ["selection_id", "score"], "additionalProperties": False},
            complete))
        tools.append(MemoryTool(
            "feedback",
            "Say how valuable one memory is: value -1 (wrong or harmful) to 1 (very useful); it orders later "
            "recalls. Calling it again replaces the value.",
            {"type": "object",
             "properties": {
                 "id": {"type": "integer", "minimum": 1, "description": "The id of a memory."},
                 "value": {"type": "number", "minimum": -1, "maximum": 1,
                           "description": "-1 wrong or harmful .. 1 very useful; leave out to clear."}},
             "required": ["id"], "additionalProperties": False},
            feedback, idempotent=True))
    if include_inspection:
        tools.append(MemoryTool(
            "list_memories",
            "List the most recent memories visible here (id, text, kind, durability), oldest first.",
            {"type": "object",
             "properties": {
                 "limit": {"type": "integer", "minimum": 1, "maximum": 500,
                           "description": "At most this many of the newest (default 50)."},
                 "include_hidden": {"type": "boolean",
                                    "description": "Also list expired and suppressed memories."}},
             "additionalProperties": False},
            list_memories, read_only=True, idempotent=True))
        tools.append(MemoryTool(
            "inspect_memory",
            "Show everything about one memory by id: its labels, times, expiry, usefulness, and the wordings "
            "merged into it.",
            {"type": "object",
             "properties": {"id": {"type": "integer", "minimum": 1, "description": "The id of a memory."}},
             "required": ["id"], "additionalProperties": False},
            inspect_memory, read_only=True, idempotent=True))
    return tools
