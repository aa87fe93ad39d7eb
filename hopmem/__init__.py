"""hopmem: a Hopfield-style associative memory with a native kernel."""

from __future__ import annotations

from ._state import Snapshot
from .config import MemoryConfig
from .errors import (
    AlreadyExists,
    CorruptStore,
    DimensionMismatch,
    EmptyMemory,
    HopmemError,
    IncompatibleStore,
    InvalidConfig,
    InvalidInput,
    NotFound,
    StoreError,
)
from .memory import AttentionResult, CompressResult, Memory, Stats, Trace, WriteResult

__version__ = "0.1.0"

__all__ = [
    "Memory", "MemoryConfig", "Snapshot", "WriteResult", "Trace", "AttentionResult",
    "Stats", "CompressResult",
    "HopmemError", "InvalidInput", "InvalidConfig", "DimensionMismatch", "EmptyMemory",
    "NotFound", "AlreadyExists", "StoreError", "IncompatibleStore", "CorruptStore",
    "__version__",
]

# The embedded durable store (hopmem.store): appended after __version__, which it reads.
from .errors import StoreLocked  # noqa: E402
from .store import Collection, Database, DataDir, Document, DocumentHit, open  # noqa: E402

__all__ += ["open", "DataDir", "Database", "Collection", "Document", "DocumentHit", "StoreLocked"]
