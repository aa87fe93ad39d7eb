"""hopmem: a Hopfield-style associative memory with a native kernel.

The public API, re-exported; nothing else lives here.

- :class:`Memory`: the engine (one collection), competitive or plain mode.
- :func:`open`, :class:`DataDir`: the embedded durable store (SQLite).
- :mod:`hopmem.text.encoders`, :class:`Centerer`, :mod:`hopmem.text.gates`,
  :class:`TextCollection`: text in, calibrated answers out.
- :func:`set_threads`, :func:`get_threads`: threads for the kernel's scans.
- :mod:`hopmem.agent`: agent memory; :mod:`hopmem.server`: the HTTP server.
"""

from __future__ import annotations

__version__ = "0.2.0"  # first: the store records it in the files it creates

from ._deprecation import install_moved_modules as _install_moved_modules
from ._deprecation import module_aliases as _module_aliases
from ._deprecation import moved_module as _moved_module
from .engine._state import Snapshot
from .engine.config import MemoryConfig
from .engine.functional import hopfield  # the modern Hopfield update on your own arrays
from .engine.memory import AttentionResult, CompressResult, Memory, ScoredRead, Stats, Trace, WriteResult
from .engine.threads import get_threads, set_threads
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
from .store import Collection, Database, DataDir, Document, DocumentHit, open
from .text.centering import Centerer
from .text.collection import TextCollection
from .text.recall import RecallGate, RecallHit, RecallResult

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
_names = _module_aliases(__name__, {"Hit": ("RecallHit", lambda: RecallHit)})


def __getattr__(name: str) -> object:
    """Deprecated names, and the modules moved into :mod:`hopmem.engine` and :mod:`hopmem.text` by their old paths."""
    module = _moved_module(__name__, name)
    return module if module is not None else _names(name)


_install_moved_modules()  # ``import hopmem.engine.memory`` and the other 0.2 module paths, until 0.3
