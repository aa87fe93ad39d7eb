"""Agent memory: scopes, labels, hybrid keyword and associative recall, selections,
feedback, forgetting, tools and history helpers, on one SQLite file.

No language model is on the write or recall path. Start with
:meth:`AgentMemory.open` (or :meth:`AsyncAgentMemory.open` in asyncio code); see
docs/agent-memory.md.
"""

from __future__ import annotations

from .._deprecation import module_aliases
from .aio import AsyncAgentMemory
from .events import EVENT_TYPES, EventBus, MemoryEvent
from .history import (
    RecallingHistory,
    RememberingRunner,
    SummarisingHistory,
    format_memories,
    inject_memories,
)
from .labels import LabelPolicy
from .memory import (
    DEFAULT_BAND_GATES,
    DEFAULT_GATES,
    RECALL_MODES,
    AgentMemory,
    Entry,
    Explanation,
    MemoryHit,
    MissingIdentity,
    RecallConfig,
    Selection,
)
from .rerank import LinearReranker, Reranker
from .retention import DEFAULT_KINDS, KINDS, ForgettingPolicy, KindPolicy
from .temporal import TimeHints, parse_time_hints
from .tools import NOTHING_REMEMBERED, MemoryTool, MemoryToolkit, memory_tools
from .tuning import Tuning, UnfittedSettings
from .verdict import DEFAULT_MODELS, VerdictModel
from .write_policy import WritePolicy

__all__ = [
    "AgentMemory", "AsyncAgentMemory", "Entry", "Explanation", "MemoryHit", "Selection", "RecallConfig",
    "MissingIdentity", "RECALL_MODES", "DEFAULT_GATES", "DEFAULT_BAND_GATES", "DEFAULT_MODELS", "VerdictModel",
    "Reranker", "LinearReranker",
    "LabelPolicy", "ForgettingPolicy", "KindPolicy", "WritePolicy", "Tuning", "UnfittedSettings", "KINDS",
    "DEFAULT_KINDS",
    "EventBus", "MemoryEvent", "EVENT_TYPES",
    "memory_tools", "MemoryTool", "MemoryToolkit", "NOTHING_REMEMBERED",
    "inject_memories", "format_memories", "RecallingHistory", "SummarisingHistory", "RememberingRunner",
    "TimeHints", "parse_time_hints",
]

__getattr__ = module_aliases(__name__, {"Hit": ("MemoryHit", lambda: MemoryHit),
                                        "MODES": ("RECALL_MODES", lambda: RECALL_MODES)})
