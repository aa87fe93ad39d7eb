"""The in-memory index of one namespace: its entries (:class:`Row`) and, per visibility
partition (the shared pool, each session), the vectors, the engine memory over them and the
word statistics that keyword evidence needs (:class:`Partition`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from ..engine.memory import Memory
from . import keyword as kw

__all__ = ["Row", "Partition", "value_tokens", "SOURCE_KEYS", "source_of"]

#: Metadata keys that name who or what a statement came from (the first one present counts). A statement
#: with a source is a conversation turn: it merges only with the same source's statements, is never
#: superseded automatically, and brings its neighbouring turns into the ranking as context.
SOURCE_KEYS = ("speaker", "source")


def source_of(metadata: Any) -> Any:
    """The source a statement's metadata names (:data:`SOURCE_KEYS`), or None."""
    if isinstance(metadata, dict):
        for key in SOURCE_KEYS:
            if key in metadata:
                return metadata[key]
    return None


class Row:
    """One entry as held in memory: the stored columns plus derived values (partition, value tokens, stems)."""

    __slots__ = (
        "id", "session_id", "durability", "kind", "text", "norm_text", "vector", "importance", "labels",
        "inferred_labels", "metadata", "created_at", "updated_at", "reinforced_at", "expires_at",
        "merged_count", "superseded_by", "eval_sum", "eval_weight", "manual_feedback", "exposures",
        "expired_notified", "partition", "supersedes", "value_tokens", "stems",
    )

    # The slots' types, for readers and type checkers (annotations only: no class attributes).
    id: int
    session_id: str | None
    durability: str  # "shared" or "session"
    kind: str
    text: str
    norm_text: str
    vector: np.ndarray
    importance: float
    labels: dict[str, list[str]]  # explicit labels: category -> values
    inferred_labels: dict[str, list[str]]
    metadata: dict[str, Any] | None
    created_at: float
    updated_at: float
    reinforced_at: float
    expires_at: float | None
    merged_count: int
    superseded_by: int | None
    eval_sum: float
    eval_weight: float
    manual_feedback: float | None
    exposures: int
    expired_notified: bool
    partition: str | None  # the visibility partition: None (shared) or the session id
    supersedes: list[int]
    value_tokens: frozenset[str]
    stems: frozenset[str]

    def __init__(self, **values: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, values.get(name))


class Partition:
    """The vectors of one visibility scope and the engine memory over them."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.n = 0
        self.alive = np.zeros(0, dtype=bool)
        self.row_of: dict[int, int] = {}
        self.dead = 0
        self.memory: Memory | None = None
        self.loc_rows: dict[int, int] = {}  # engine location -> row
        self.df: dict[str, int] = {}  # light-stemmed word -> live entries containing it
        self.total_terms = 0  # sum of live entries' content-word counts (BM25 length normalization)

    def count_terms(self, stems: Iterable[str], delta: int) -> None:
        stems = list(stems)
        self.total_terms += delta * len(stems)
        for st in stems:
            value = self.df.get(st, 0) + delta
            if value > 0:
                self.df[st] = value
            else:
                self.df.pop(st, None)

    def append(self, entry_id: int, vector: np.ndarray) -> None:
        if self.n == self.matrix.shape[0]:
            cap = max(16, self.n * 2)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[: self.n] = self.matrix[: self.n]
            self.matrix = grown
            ids = np.zeros(cap, dtype=np.int64)
            ids[: self.n] = self.ids[: self.n]
            self.ids = ids
            alive = np.zeros(cap, dtype=bool)
            alive[: self.n] = self.alive[: self.n]
            self.alive = alive
        self.matrix[self.n] = vector
        self.ids[self.n] = entry_id
        self.alive[self.n] = True
        self.row_of[entry_id] = self.n
        self.n += 1

    def kill(self, entry_id: int) -> None:
        row = self.row_of.pop(entry_id, None)
        if row is not None:
            self.alive[row] = False
            self.dead += 1

    @property
    def live(self) -> int:
        return self.n - self.dead

    def compact_if_needed(self, fraction: float) -> None:
        if self.dead and self.dead > max(16, fraction * max(self.live, 1)):
            keep = np.flatnonzero(self.alive[: self.n])
            self.matrix = np.ascontiguousarray(self.matrix[keep])
            self.ids = self.ids[keep].copy()
            self.alive = np.ones(len(keep), dtype=bool)
            self.n = len(keep)
            self.row_of = {int(i): r for r, i in enumerate(self.ids)}
            self.dead = 0
            self.memory = None  # rebuilt on next read

    def engine(self, beta: float, k: int, activation: Literal["exact", "compact"] = "exact") -> Memory | None:
        """The plain-mode engine memory over this partition's rows (built lazily; a read may activate
        another ``k`` than the one it was built with, :meth:`hopmem.Memory.analyze`)."""
        if self.live == 0:
            return None
        if self.memory is None:
            try:
                mem = Memory(self.dim, mode="plain", k=k, beta=beta, activation=activation)
            except TypeError:  # an engine without the activation option: exact scans
                mem = Memory(self.dim, mode="plain", k=k, beta=beta)
            rows = np.flatnonzero(self.alive[: self.n])
            result = mem.write(self.matrix[rows])
            self.loc_rows = {int(result.created[i][0]): int(r) for i, r in enumerate(rows)}
            self.memory = mem
        return self.memory

    def engine_append(self, entry_id: int) -> None:
        if self.memory is not None:
            row = self.row_of[entry_id]
            result = self.memory.write(self.matrix[row])
            self.loc_rows[int(result.created[0][0])] = row


def value_tokens(text: str) -> frozenset[str]:
    """Tokens holding a digit: values that make two similar sentences different facts."""
    return frozenset(t for t in kw.words(text) if any(map(str.isdigit, t)))
