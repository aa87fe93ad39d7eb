"""The store's access to a Memory's internals: one place, with a public fallback.

The store applies writes through the memory's engine directly, under the
memory's own write lock, and keeps that lock held until the SQLite commit, so
that no reader ever sees a state that is not on disk. It needs no rollback
snapshot (``Memory.write`` takes one for batches longer than a kernel chunk):
the disk is the authority, and when anything fails the store rebuilds the
state from the checkpoint and the journal.

If the engine's internals ever change shape, every function here falls back to
the public API (slower, and readers may then briefly see a write before its
commit); nothing else in the store touches private attributes.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import numpy as np

from .._state import Snapshot, State
from ..config import MemoryConfig
from ..memory import CompressResult, Memory, WriteResult, _check_snapshot

__all__ = ["fast_path", "write_lock", "apply_write", "apply_compress", "scalars",
           "restore_locked", "restore_adopting", "Scalars"]

Scalars = tuple[int, int, int, float, int]  # writes, next_id, size, eta, rng


def _probe() -> bool:
    memory = Memory(1)
    state = getattr(memory, "_state", None)
    return (
        getattr(memory, "_engine", None) is not None
        and getattr(memory, "_lock", None) is not None
        and hasattr(getattr(memory, "_lock", None), "write")
        and getattr(memory, "_kcfg", None) is not None
        and state is not None
        and all(hasattr(state, a) for a in ("writes", "next_id", "size", "eta", "rng", "restore"))
    )


_FAST = _probe()  # checked once: the internals exist in this build of the engine


def fast_path(memory: Memory) -> bool:
    """Whether the engine internals the store relies on are present."""
    return _FAST and type(memory) is Memory


def write_lock(memory: Memory) -> ContextManager[Any]:
    """The memory's exclusive lock (readers wait), or a no-op in fallback mode."""
    if fast_path(memory):
        return memory._lock.write()
    return contextlib.nullcontext()


def apply_write(memory: Memory, X: np.ndarray) -> WriteResult:
    """Write a validated float32 ``(n, d)`` batch; the caller holds :func:`write_lock`.

    No rollback snapshot: a failure leaves the state undefined and the caller
    must rebuild it (:func:`restore_locked`).
    """
    if not fast_path(memory):
        return memory.write(X)
    touched, created, merges = memory._engine.write(memory._state, memory._kcfg, X)
    return WriteResult(int(X.shape[0]), touched, created, merges)


def apply_compress(memory: Memory, max_locations: int | None) -> CompressResult:
    """``Memory.compress``; must be called without holding :func:`write_lock`."""
    return memory.compress(max_locations)


def scalars(memory: Memory) -> Scalars:
    """(writes, next_id, size, eta, rng) now; O(1) on the fast path."""
    if fast_path(memory):
        s = memory._state
        return int(s.writes), int(s.next_id), int(s.size), float(s.eta), int(s.rng)
    snap = memory.snapshot()
    return int(snap.writes), int(snap.next_id), int(snap.ids.shape[0]), float(snap.eta), int(snap.rng)


def restore_locked(memory: Memory, snapshot: Snapshot) -> None:
    """Replace the state in place; the caller holds :func:`write_lock` (fast path)."""
    if fast_path(memory):
        memory._state.restore(snapshot)
        memory._engine.state_replaced(memory._state)
    else:
        memory.restore(snapshot)


def restore_adopting(config: MemoryConfig, snapshot: Snapshot, backend: str = "native") -> Memory:
    """``Memory.from_config(config, snapshot)`` taking over the snapshot's arrays.

    For a snapshot nothing else holds (a checkpoint just loaded): it must not
    be used afterwards. Falls back to the public, copying restore.
    """
    memory = Memory.from_config(config, backend=backend)  # type: ignore[arg-type]
    if not fast_path(memory):
        return Memory.from_config(config, snapshot, backend=backend)  # type: ignore[arg-type]
    _check_snapshot(config, snapshot)
    memory._state = State.adopt(config.dim, snapshot, compact=memory._state.addresses16 is not None)
    memory._engine.state_replaced(memory._state)
    return memory
