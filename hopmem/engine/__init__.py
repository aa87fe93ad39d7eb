"""The engine: a matrix of hard locations, its writes and attractor reads, over the compiled kernel.

- :mod:`hopmem.engine.memory`: :class:`~hopmem.engine.memory.Memory`, one collection in memory.
- :mod:`hopmem.engine.config`: :class:`~hopmem.engine.config.MemoryConfig`.
- :mod:`hopmem.engine.functional`: the modern Hopfield update on your own arrays.
- :mod:`hopmem.engine.threads`: threads for the kernel's scans.

The compiled kernel (``_kernel``), its NumPy reference twin (``_reference``)
and the state they share (``_state``) are private to this package: the layers
above (text, store, agent, server, cluster) call the engine, never the kernel.
"""

from __future__ import annotations

from ._kernel import posting_lists
from .config import MemoryConfig
from .memory import Memory

__all__ = ["Memory", "MemoryConfig", "posting_lists"]
