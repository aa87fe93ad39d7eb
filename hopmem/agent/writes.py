"""Writes: remember a statement, merging duplicates, linking supersession, evicting beyond capacity.

A write is one encoder call, a centering, a few cosines against the entry's own
partition and one SQLite transaction; the entry is committed before
:meth:`Writes.remember` returns. An optional labeler runs after the
commit and can only add boost labels.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..engine.memory import top_k_dot
from ..errors import InvalidInput, NotFound
from . import keyword as kw
from .config import DURABILITIES
from .core import MemoryState
from .index import Row, source_of, value_tokens
from .results import Entry
from .retention import entry_value
from .store import vector_blob
from .validation import identity, seconds, statement
from .write_policy import WritePolicy

__all__ = ["Writes", "NEAR_DUPLICATE_WINDOW"]

logger = logging.getLogger("hopmem.agent")

#: Seconds between two statements' creation times within which a near-duplicate (not the same text) is
#: merged as a restatement; further apart it is stored as a new entry.
NEAR_DUPLICATE_WINDOW = 3600.0

#: Statements :meth:`Writes.remember_many` stores per SQLite transaction. One commit per batch
#: instead of one per statement is what makes bulk imports fast: the full-text index is flushed and
#: merged once per commit, which costs more than storing the statement itself.
WRITE_BATCH = 256


class Writes:
    """:meth:`remember` and :meth:`remember_many` of :class:`~hopmem.agent.AgentMemory`, over its state, with
    dedup, supersession and eviction."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        #: While :meth:`remember_many` holds a batch's transaction open: what to run once it commits
        #: (events and the labeler, which must not see a write that could still be rolled back).
        self._after_commit: list[Callable[[], None]] | None = None

    @property
    def write_policy(self) -> WritePolicy:
        """The state's write policy (its dedup and supersession thresholds)."""
        return self._state.write_policy

    def _when_committed(self, action: Callable[[], None]) -> None:
        """Run ``action`` now, or after the open batch's commit (dropped if the batch rolls back)."""
        if self._after_commit is None:
            action()
        else:
            self._after_commit.append(action)

    def remember(
        self,
        text: str,
        *,
        session_id: str | None = None,
        durability: str = "shared",
        kind: str = "fact",
        importance: float = 0.5,
        labels: Mapping[str, Any] | None = None,
        ttl: float | _dt.timedelta | None = None,
        metadata: Any = None,
        created_at: float | None = None,
        supersedes: int | None = None,
        write_id: str | None = None,
    ) -> Entry:
        """See :meth:`hopmem.agent.AgentMemory.remember`."""
        return self._remember(text, None, session_id=session_id, durability=durability, kind=kind,
                              importance=importance, labels=labels, ttl=ttl, metadata=metadata,
                              created_at=created_at, supersedes=supersedes, write_id=write_id)

    def _remember(self, text: str, vector: np.ndarray | None, *, session_id: str | None, durability: str,
                  kind: str, importance: float, labels: Mapping[str, Any] | None,
                  ttl: float | _dt.timedelta | None, metadata: Any, created_at: float | None,
                  supersedes: int | None, write_id: str | None = None) -> Entry:
        """:meth:`remember`, with the statement's centered vector when the caller has encoded it already."""
        state = self._state
        state.check_open()
        text = statement(text)
        if durability not in DURABILITIES:
            raise InvalidInput(f"durability: expected 'shared' or 'session', got {durability!r}")
        session_id = identity(session_id, "session_id", required=durability == "session")
        if kind not in state.kinds:
            raise InvalidInput(f"kind: expected one of {sorted(state.kinds)}, got {kind!r}")
        if isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0.0 <= importance <= 1.0:
            raise InvalidInput(f"importance: expected a number in [0, 1], got {importance!r}")
        explicit = state.label_policy.normalize(labels, strict=True)
        ttl_s = seconds(ttl, "ttl")
        try:
            meta_json = None if metadata is None else json.dumps(metadata, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"metadata: expected JSON-serialisable data: {exc}") from None
        wid = _check_write_id(write_id)
        digest = "" if wid is None else hashlib.sha256(json.dumps(
            [text, session_id, durability, kind, meta_json]).encode()).hexdigest()
        if vector is None:
            vector = state.encode([text])[0]
        if not np.any(vector):
            raise InvalidInput(f"text: the encoder gives it no direction after centering: {text!r:.80}")
        with state.lock:
            state.check_open()
            state.sync()
            now = state.now()
            if wid is not None:
                repeat = state.store.write_id(state.namespace, wid)
                if repeat is not None:
                    return self._repeated(wid, digest, repeat, now)
            created = now if created_at is None else float(created_at)
            partition_key = session_id if durability == "session" else None
            norm = kw.normalize_text(text)
            if ttl_s is None:
                kind_ttl = state.kinds[kind].ttl
                ttl_s = kind_ttl
                if durability == "session" and state.session_ttl is not None:
                    ttl_s = state.session_ttl if ttl_s is None else min(ttl_s, state.session_ttl)
            expires = None if ttl_s is None else created + ttl_s
            if supersedes is not None:
                old_row = state.row(supersedes)
                if old_row.partition != partition_key:
                    raise NotFound(f"no entry {supersedes} in this scope to supersede")
            target, similar = self._find_duplicate(partition_key, kind, text, norm, vector, now, created,
                                                      metadata)
            if target is not None:
                return self._merge(target, text, meta_json, explicit, importance, expires, session_id, now,
                                   created, wid, digest)
            values = {
                "namespace": state.namespace, "session_id": session_id if durability == "session" else None,
                "durability": durability, "kind": kind, "text": text, "norm_text": norm,
                "vector": vector_blob(vector), "importance": float(importance),
                "labels": json.dumps(explicit, sort_keys=True), "inferred_labels": "{}",
                "metadata": meta_json, "created_at": created, "updated_at": now, "reinforced_at": created,
                "expires_at": expires,
            }
            superseded = self._supersession_target(similar, kind, text, created, supersedes, metadata)
            evicted: list[Row] = []
            fts = state.fts_for(partition_key)
            with state.store.transaction():
                entry_id = state.store.insert_entry(fts, values)
                if wid is not None:
                    state.store.record_write_id(state.namespace, wid, digest, entry_id, False, now)
                for old in superseded:
                    state.store.update_entry(old.id, state.namespace, superseded_by=entry_id, updated_at=now)
                if state.capacity is not None:
                    evicted = self._choose_evictions(now, exclude=entry_id, adding=1)
                    state.delete(evicted)
            state.mark_synced()
            row = Row(id=entry_id, session_id=values["session_id"], durability=durability, kind=kind, text=text,
                       norm_text=norm, vector=vector, importance=float(importance), labels=explicit,
                       inferred_labels={}, metadata=metadata, created_at=created, updated_at=now,
                       reinforced_at=created, expires_at=expires, merged_count=0, superseded_by=None,
                       eval_sum=0.0, eval_weight=0.0, manual_feedback=None, exposures=0,
                       expired_notified=False, supersedes=[])
            state.add_row(row)
            for old in superseded:
                old.superseded_by = entry_id
                old.updated_at = now
                row.supersedes.append(old.id)
            state.drop_rows(r.id for r in evicted)

        def announce() -> None:
            state.emit("remembered", session_id, now, id=entry_id, text=text, kind=kind, durability=durability,
                       labels=explicit)
            for old in superseded:
                state.emit("superseded", session_id, now, id=old.id, text=old.text, superseded_by=entry_id)
            for gone in evicted:
                state.emit("evicted", gone.session_id, now, id=gone.id, text=gone.text)
            self._infer_labels(entry_id, text, session_id)

        self._when_committed(announce)
        with state.lock:
            return state.entry(row, state.now())

    def _find_duplicate(self, partition_key: str | None, kind: str, text: str, norm: str, vector: np.ndarray,
                        now: float, created: float, metadata: Any) -> tuple[Row | None, list[tuple[float, Row]]]:
        """The entry to merge into (if any) and the similar entries a new one would supersede.

        The same normalized text in the scope is merged whenever it was said,
        unless the two statements' metadata name different sources. A
        near-duplicate (same kind, cosine at least ``dedup_cosine``, the same
        value tokens) is merged only when created within
        :data:`NEAR_DUPLICATE_WINDOW` of the entry: a restatement in the same
        conversation. A similar statement made later is a new event (in chat,
        "next month I'm having an art show" and, weeks later, "I'm putting
        together an art show next month") and is stored as its own entry.
        """
        state = self._state
        partition = state.partitions.get(partition_key)
        if partition is None or partition.live == 0:
            return None, []
        rows_idx, scores = top_k_dot(partition.matrix[: partition.n], vector[None, :], min(16, partition.n))
        tokens = value_tokens(text)
        similar: list[tuple[float, Row]] = []
        best: Row | None = None
        for r, s in zip(rows_idx[0], scores[0]):
            if not partition.alive[r]:
                continue
            row = state.rows.get(int(partition.ids[r]))
            if row is None or state.expired(row, now):
                continue
            if not _samesource_of(row.metadata, metadata):
                if s >= self.write_policy.supersede_cosine:
                    similar.append((float(s), row))
                continue
            if row.norm_text == norm:
                return row, []
            if (row.kind == kind and s >= self.write_policy.dedup_cosine and row.value_tokens == tokens and best is None
                    and abs(created - row.created_at) <= NEAR_DUPLICATE_WINDOW):
                best = row
            if s >= self.write_policy.supersede_cosine:
                similar.append((float(s), row))
        if best is not None:
            return best, []
        return None, similar

    def _supersession_target(self, similar: list[tuple[float, Row]], kind: str, text: str, created: float,
                             explicit: int | None, metadata: Any) -> list[Row]:
        """What a new statement supersedes: the entry named by ``supersedes``, or the most similar
        current statement of the same kind and scope when the new one is phrased as a change.

        A conversation turn (a statement whose metadata names its source, :data:`hopmem.agent.index.SOURCE_KEYS`) never
        supersedes and is never superseded automatically: in chat, update cues ("now", "new", "again")
        are everyday words, and a similar later turn is nearly always a new event, not a change of the
        earlier one's state. ``supersedes=`` still links turns explicitly."""
        if explicit is not None:
            return [self._state.row(explicit)]
        if source_of(metadata) is not None or not self.write_policy.phrased_as_change(text):
            return []
        heads = [(s, r) for s, r in similar if r.superseded_by is None and r.kind == kind and r.created_at <= created
                 and source_of(r.metadata) is None]
        if not heads:
            return []
        return [max(heads, key=lambda t: (t[0], t[1].created_at))[1]]

    def _repeated(self, wid: str, digest: str, repeat: tuple[str, int, bool], now: float) -> Entry:
        """The answer to a repeated write id (the caller holds the lock)."""
        first, entry_id, merged = repeat
        if first != digest:
            raise InvalidInput(f"write_id: expected {wid!r} with the statement and scope it was first "
                               f"used with, got another (give each call its own id)")
        row = self._state.rows.get(entry_id)
        if row is None:
            raise NotFound(f"write_id {wid!r}: its entry {entry_id} has been forgotten or evicted since")
        return self._state.entry(row, now, merged=merged)

    def _merge(self, row: Row, text: str, meta_json: str | None, explicit: dict, importance: float,
               expires: float | None, session_id: str | None, now: float, created: float,
               wid: str | None = None, digest: str = "") -> Entry:
        state = self._state
        labels = state.label_policy.merge(row.labels, explicit)
        new_importance = max(row.importance, float(importance))
        new_expires = None if (row.expires_at is None or expires is None) else max(row.expires_at, expires)
        with state.store.transaction():
            state.store.update_entry(
                row.id, state.namespace, merged_count=row.merged_count + 1, importance=new_importance,
                labels=json.dumps(labels, sort_keys=True), updated_at=now, reinforced_at=now,
                expires_at=new_expires)
            if text != row.text or meta_json is not None:  # the merged statement's own time and metadata
                state.store.add_variant(row.id, text, meta_json, created)
            if wid is not None:
                state.store.record_write_id(state.namespace, wid, digest, row.id, True, now)
        state.mark_synced()
        row.merged_count += 1
        row.importance = new_importance
        row.labels = labels
        row.updated_at = now
        row.reinforced_at = now
        row.expires_at = new_expires
        merged_count = row.merged_count
        self._when_committed(lambda: state.emit("merged", session_id, now, id=row.id, text=row.text,
                                                merged_text=text, merged_count=merged_count))
        return state.entry(row, now, merged=True)

    def _infer_labels(self, entry_id: int, text: str, session_id: str | None) -> None:
        state = self._state
        if state.labeler is None:
            return
        try:
            inferred = state.label_policy.normalize(state.labeler(text), strict=False)
        except Exception as exc:  # noqa: BLE001 - a labeler failure leaves a valid, unlabelled entry
            logger.warning("hopmem.agent: labeler failed on entry %s: %s", entry_id, exc)
            state.emit("labeling_failed", session_id, state.now(), id=entry_id, error=repr(exc))
            return
        if not inferred:
            return
        with state.lock:
            row = state.rows.get(entry_id)
            if row is None:
                return
            with state.store.transaction():
                state.store.update_entry(entry_id, state.namespace,
                                         inferred_labels=json.dumps(inferred, sort_keys=True))
            state.mark_synced()
            row.inferred_labels = inferred

    def _choose_evictions(self, now: float, exclude: int, adding: int) -> list[Row]:
        """Least valuable entries beyond capacity (never ``exclude``, the one being written)."""
        state = self._state
        if state.capacity is None:  # unbounded: nothing to evict (callers check this first)
            return []
        excess = len(state.rows) + adding - state.capacity
        if excess <= 0:
            return []
        scale = state.forgetting.half_life if state.forgetting else 30 * 86400.0
        scored = []
        for row in state.rows.values():
            if row.id == exclude:
                continue
            recency = math.exp(-max(0.0, now - max(row.reinforced_at, row.created_at)) / scale)
            value = entry_value(row.importance, state.utility(row), recency)
            if state.expired(row, now):
                value -= 10.0  # expired entries go first
            scored.append((value, row.created_at, row.id, row))
        scored.sort(key=lambda t: (t[0], t[1], t[2]))
        return [t[3] for t in scored[:excess]]

    def remember_many(self, items: Iterable[str | Mapping[str, Any]], *, progress: bool | None = None,
                      **defaults: Any) -> list[Entry]:
        """See :meth:`hopmem.agent.AgentMemory.remember_many`."""
        self._state.check_open()
        if defaults.get("write_id") is not None:
            raise InvalidInput("write_id: expected one per item (in the item's dict), got one for every item")
        unknown = set(defaults) - REMEMBER_ARGS
        if unknown:
            raise InvalidInput(f"remember_many: unknown argument(s) {sorted(unknown)}; "
                               f"expected {sorted(REMEMBER_ARGS)}")
        calls: list[tuple[str, dict[str, Any]]] = []
        for i, item in enumerate(items):
            args = dict(defaults)
            if isinstance(item, str):
                args["text"] = item
            elif isinstance(item, Mapping):
                args.update(item)
            else:
                raise InvalidInput(f"items[{i}]: expected a str or a dict, got {type(item).__name__}")
            unknown = set(args) - REMEMBER_ARGS - {"text"}
            if unknown:
                raise InvalidInput(f"items[{i}]: unknown argument(s) {sorted(unknown)}")
            try:
                text = statement(args.pop("text", None))
            except InvalidInput as exc:
                raise InvalidInput(f"items[{i}]: {exc}") from None
            calls.append((text, args))
        vectors = self._state.encode([text for text, _ in calls], progress)
        stored: list[Entry] = []
        for start in range(0, len(calls), WRITE_BATCH):
            refused = self._remember_batch(calls[start:start + WRITE_BATCH], vectors[start:start + WRITE_BATCH],
                                           stored)
            if refused is not None:
                raise refused
        return stored

    def _remember_batch(self, calls: list[tuple[str, dict[str, Any]]], vectors: np.ndarray,
                        stored: list[Entry]) -> BaseException | None:
        """Store ``calls`` in one transaction, appending their entries to ``stored``.

        A statement refused before it wrote anything (bad arguments, a repeated write id) ends the batch:
        the ones before it are committed and its exception is returned for the caller to raise. A
        failure after a statement started writing, or of the commit, rolls the whole batch back, reloads
        the rows from the file, and raises. (No savepoint per statement: FTS5 flushes its index at each
        one, which is the cost the batch is there to save.)"""
        state = self._state
        refused: BaseException | None = None
        with state.lock:
            state.check_open()
            pending: list[Callable[[], None]] = []
            self._after_commit = pending
            try:
                with state.store.transaction() as conn:
                    for (text, args), vector in zip(calls, vectors):
                        before = conn.total_changes
                        try:
                            stored.append(self._remember(text, vector, **{**REMEMBER_DEFAULTS, **args}))
                        except BaseException as exc:
                            if conn.total_changes != before:
                                raise  # half written: the batch rolls back
                            refused = exc  # raised by the caller once the ones before it are committed
                            break
            except BaseException:
                state.load()  # the file rolled the batch back: so do the rows in memory
                raise
            finally:
                self._after_commit = None
            state.mark_synced()
        for action in pending:
            action()
        return refused


def _check_write_id(write_id: Any) -> str | None:
    """``write_id`` if it is None or a non-empty str of at most 256 characters; else InvalidInput."""
    if write_id is None:
        return None
    if not isinstance(write_id, str) or not 1 <= len(write_id) <= 256:
        got = (f"a string of {len(write_id)} characters" if isinstance(write_id, str)
               else type(write_id).__name__)
        raise InvalidInput(f"write_id: expected a non-empty string of at most 256 characters, got {got}")
    return write_id


def _samesource_of(old: Any, new: Any) -> bool:
    """Whether two statements' metadata do not name different sources (either naming none counts as the same)."""
    a, b = source_of(old), source_of(new)
    return a is None or b is None or a == b


#: :meth:`Writes.remember`'s keyword arguments and their defaults.
REMEMBER_DEFAULTS: dict[str, Any] = {
    name: p.default for name, p in inspect.signature(Writes.remember).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY}
REMEMBER_ARGS = frozenset(REMEMBER_DEFAULTS)
