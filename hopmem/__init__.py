"""hopmem: a Hopfield-style associative memory with a native kernel.

The public API, re-exported; nothing else lives here.

- :class:`Memory`: the engine (one collection), competitive or plain mode.
- :func:`open`, :class:`DataDir`: the embedded durable store (SQLite).
- :mod:`hopmem.encoders`, :class:`Centerer`, :mod:`hopmem.gates`,
  :class:`TextCollection`: text in, calibrated answers out.
- :func:`set_threads`, :func:`get_threads`: threads for the kernel's scans.
- :mod:`hopmem.agent`: agent memory; :mod:`hopmem.server`: the HTTP server.
"""

from __future__ import annotations

__version__ = "0.2.0"  # first: the store records it in the files it creates

from ._deprecation import module_aliases as _module_aliases
from ._state import Snapshot
from .centering import Centerer
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
    StoreLocked,
)
from .functional import hopfield  # the modern Hopfield update on your own arrays
from .memory import AttentionResult, CompressResult, Memory, ScoredRead, Stats, Trace, WriteResult
from .recall import RecallGate, RecallHit, RecallResult
from .store import Collection, Database, DataDir, Document, DocumentHit, open
from .text import TextCollection
from .threads import get_threads, set_threads

__all__ = [
    "Memory", "MemoryConfig", "hopfield", "Snapshot", "WriteResult", "Trace", "ScoredRead", "AttentionResult",
    "Stats", "CompressResult",
    "open", "DataDir", "Database", "Collection", "Document", "DocumentHit",
    "Centerer", "TextCollection", "RecallResult", "RecallGate", "RecallHit",
    "HopmemError", "InvalidInput", "InvalidConfig", "DimensionMismatch", "EmptyMemory",
    "NotFound", "AlreadyExists", "StoreError", "StoreLocked", "IncompatibleStore",
    "CorruptStore", "set_threads", "get_threads",
    "__version__",
]

#: Names deprecated in 0.2 (removed in 0.3), served with a ``DeprecationWarning``.
__getattr__ = _module_aliases(__name__, {"Hit": ("RecallHit", lambda: RecallHit)})
