"""The replication journal of one replicated shard on one host: the mutations it applied, in order.

Every batch of mutations a leader applies and forwards is one entry of the
shard's replication journal, numbered 1, 2, ... (its *position*) and tagged
with the epoch of the leader that made it; a follower appends the same entry
when it applies it. Entries are identified by ``(position, epoch)``: one
leader per epoch numbers them, and a follower accepts entry ``p`` only when
its last entry is the leader's entry ``p - 1`` (same position and epoch), so
two copies whose last entries match hold the same history up to there
(Raft's log matching). A copy that returns after missing writes is caught up
by replaying the leader's entries after its position, with the same engine
code: same entries, same order, same bits.

Why not the store's journal (:mod:`hopmem.store.journal`): it holds what a
collection's *memory* needs (written vectors, compressions), not the rest of
a shard (document metadata, deletes, write ids, settings, collections
created or dropped), so replaying it alone would not make two shard files
equal. The replication journal holds the calls themselves.

It lives in the host's memory and keeps the latest entries only (bounded by
count and bytes, :data:`DEFAULT_ENTRIES`, :data:`DEFAULT_BYTES`): a copy
whose process restarted has no position (its journal is gone), and one that
needs entries no longer kept, or whose last entry is not in the leader's
history (a deposed leader that committed a write nobody acknowledged), is
refilled by a full copy instead. A journal that starts from such a copy (or
from a new shard) begins a new *history* (a random id) at the copied
position, shared by the copies made from it.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ShardLog", "Entry", "DEFAULT_ENTRIES", "DEFAULT_BYTES", "new_history"]

#: Entries a host keeps per replicated shard (a batch of queued mutations is one entry).
DEFAULT_ENTRIES = 100_000
#: Bytes of mutations (vectors mostly) a host keeps per replicated shard.
DEFAULT_BYTES = 64 << 20


def new_history() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Entry:
    """One batch of mutations: ``calls`` are ``(host method, args)`` applied in order."""

    pos: int
    epoch: int
    calls: list[tuple[str, tuple[Any, ...]]]
    size: int


def _owned(item: Any) -> Any:
    """``item`` with every NumPy array in it that views memory it does not own copied: an
    argument Ray handed over without a copy views its object store, and keeping it in the
    journal would pin that memory there."""
    if isinstance(item, np.ndarray):
        return item if item.flags.owndata else item.copy()
    if isinstance(item, tuple):
        return tuple(_owned(x) for x in item)
    if isinstance(item, list):
        return [_owned(x) for x in item]
    if isinstance(item, dict):
        return {k: _owned(v) for k, v in item.items()}
    return item


def call_bytes(calls: list[tuple[str, tuple[Any, ...]]]) -> int:
    """About the memory an entry holds: its arrays' bytes plus a little per call."""
    total = 0
    stack: list[Any] = [args for _, args in calls]
    while stack:
        item = stack.pop()
        if isinstance(item, np.ndarray):
            total += item.nbytes
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (str, bytes)):
            total += len(item)
    return total + 64 * len(calls)


class ShardLog:
    """A shard's replication journal on one host (the caller serialises changes)."""

    def __init__(self, history: str, base: int = 0, base_epoch: int = 0, *,
                 max_entries: int = DEFAULT_ENTRIES, max_bytes: int = DEFAULT_BYTES) -> None:
        self.history = history
        #: The position before the first kept entry, and that entry's epoch.
        self.base = base
        self.base_epoch = base_epoch
        self.entries: deque[Entry] = deque()
        self.bytes = 0
        self.max_entries = max(0, int(max_entries))
        self.max_bytes = max(0, int(max_bytes))

    @property
    def pos(self) -> int:
        """The position of the last entry applied."""
        return self.base + len(self.entries)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else self.base_epoch

    def position(self) -> tuple[str, int, int]:
        """``(history, position, epoch of that entry)``: what a leader compares."""
        return self.history, self.pos, self.last_epoch

    def epoch_at(self, pos: int) -> int | None:
        """The epoch of entry ``pos``, or None when it is not known here (not kept, or ahead)."""
        if pos == self.base:
            return self.base_epoch
        if self.base < pos <= self.pos:
            return self.entries[pos - self.base - 1].epoch
        return None

    def append(self, epoch: int, calls: list[tuple[str, tuple[Any, ...]]]) -> Entry:
        calls = [(method, _owned(args)) for method, args in calls]
        entry = Entry(self.pos + 1, epoch, calls, call_bytes(calls))
        self.entries.append(entry)
        self.bytes += entry.size
        while self.entries and (len(self.entries) > self.max_entries
                                or self.bytes > self.max_bytes):
            old = self.entries.popleft()
            self.base, self.base_epoch = old.pos, old.epoch
            self.bytes -= old.size
        return entry

    def why_not_suffix(self, position: tuple[str, int, int] | None) -> str:
        """Why a copy at ``position`` cannot be caught up from this journal ('' if it can)."""
        if position is None:
            return "its journal position is unknown (a new or restarted process)"
        history, pos, epoch = position
        if history != self.history:
            return "it holds another history (filled from another copy)"
        if pos > self.pos:
            return (f"it is at entry {pos}, ahead of this leader's {self.pos}: it applied "
                    f"writes that were never acknowledged")
        if pos < self.base:
            return (f"it needs entries after {pos}, and this leader keeps entries after "
                    f"{self.base} only")
        if self.epoch_at(pos) != epoch:
            return (f"its entry {pos} (epoch {epoch}) is not this leader's (epoch "
                    f"{self.epoch_at(pos)}): it applied writes that were never acknowledged")
        return ""

    def after(self, pos: int) -> list[Entry]:
        """The entries after ``pos`` (``base <= pos <= self.pos``)."""
        return list(self.entries)[pos - self.base:]
