"""Inspection and maintenance: get, list and forget entries, end sessions, prune, stats, re-embed.

Expired and suppressed entries stay inspectable until :meth:`Maintenance.prune`
deletes them; :meth:`Maintenance.forget` deletes one entry now;
:meth:`Maintenance.reembed` migrates the whole file to a new encoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidInput, NotFound
from ..text.centering import Centerer
from ..text.encoders import Encoder
from .core import MemoryState
from .encoding import encode_batches, encoder_record, is_encoder, space_centerer
from .results import Entry
from .store import vector_blob
from .validation import identity

__all__ = ["Maintenance"]


class Maintenance:
    """get, entries, variants, forget, end_session, prune, stats and reembed of :class:`~hopmem.agent.AgentMemory`,
    over its state."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def get(self, entry_id: int, *, session_id: str | None = None) -> Entry:
        """See :meth:`hopmem.agent.AgentMemory.get`."""
        state = self._state
        state.check_open()
        with state.lock:
            state.sync()
            row = state.row(entry_id)
            if row.durability == "session" and row.session_id != session_id:
                raise NotFound(f"no entry {entry_id} in namespace {state.namespace!r}")
            return state.entry(row, state.now())

    def entries(self, *, session_id: str | None = None, include_hidden: bool = True) -> list[Entry]:
        """See :meth:`hopmem.agent.AgentMemory.entries`."""
        state = self._state
        state.check_open()
        with state.lock:
            state.sync()
            now = state.now()
            out = []
            for row in sorted(state.rows.values(), key=lambda r: r.id):
                if row.durability == "session" and row.session_id != session_id:
                    continue
                entry = state.entry(row, now)
                if include_hidden or entry.recallable:
                    out.append(entry)
            return out

    def variants(self, entry_id: int, *, session_id: str | None = None) -> list[dict[str, Any]]:
        """See :meth:`hopmem.agent.AgentMemory.variants`."""
        self.get(entry_id, session_id=session_id)
        with self._state.lock:
            variants = self._state.store.variants(int(entry_id))
        return [{"text": t, "metadata": m, "created_at": c} for t, m, c in variants]

    def forget(self, entry_id: int, *, session_id: str | None = None) -> bool:
        """See :meth:`hopmem.agent.AgentMemory.forget`."""
        state = self._state
        state.check_open()
        with state.lock:
            state.sync()
            row = state.rows.get(int(entry_id)) if isinstance(entry_id, (int, np.integer)) and \
                not isinstance(entry_id, bool) else None
            if row is None:
                if not isinstance(entry_id, (int, np.integer)) or isinstance(entry_id, bool):
                    raise InvalidInput(f"entry_id: expected an int, got {entry_id!r}")
                return False
            if row.durability == "session" and row.session_id != session_id:
                return False
            now = state.now()
            with state.store.transaction():
                state.delete([row])
            state.mark_synced()
            state.drop_rows([row.id])
        state.emit("forgotten", row.session_id, now, id=row.id, text=row.text)
        return True

    def end_session(self, session_id: str) -> int:
        """See :meth:`hopmem.agent.AgentMemory.end_session`."""
        state = self._state
        state.check_open()
        session_id = identity(session_id, "session_id", required=True)
        with state.lock:
            state.sync()
            now = state.now()
            rows = [r for r in state.rows.values() if r.durability == "session" and r.session_id == session_id
                    and not state.expired(r, now)]
            with state.store.transaction():
                for row in rows:
                    state.store.update_entry(row.id, state.namespace, expires_at=now, updated_at=now)
            state.mark_synced()
            for row in rows:
                row.expires_at = row.updated_at = now
        return len(rows)

    def prune(self) -> dict[str, int]:
        """See :meth:`hopmem.agent.AgentMemory.prune`."""
        state = self._state
        state.check_open()
        with state.lock:
            state.sync()
            now = state.now()
            expired = [r for r in state.rows.values() if state.expired(r, now)]
            suppressed = [r for r in state.rows.values() if not state.expired(r, now) and state.suppressed(r, now)]
            gone = expired + suppressed
            leaving: dict[str | None, int] = {}
            for row in gone:
                leaving[row.partition] = leaving.get(row.partition, 0) + 1
            emptied = [k for k, n in leaving.items() if k is not None and state.partitions[k].live == n]
            with state.store.transaction():
                state.delete(gone)
                receipts = state.store.prune_receipts(state.namespace, now, state.max_receipts)
                for key in emptied:  # a finished session leaves no table behind
                    state.store.drop_fts(state.namespace, key)
            state.mark_synced()
            state.drop_rows([r.id for r in gone])
            for key in emptied:
                state.fts.pop(key, None)
                state.partitions.pop(key, None)
        for row in expired:
            if not row.expired_notified:
                state.emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
        for row in gone:
            state.emit("pruned", row.session_id, now, id=row.id, text=row.text,
                       cause="expired" if row in expired else "retention")
        return {"expired": len(expired), "suppressed": len(suppressed), "receipts": receipts}

    def stats(self) -> dict[str, Any]:
        """See :meth:`hopmem.agent.AgentMemory.stats`."""
        state = self._state
        state.check_open()
        with state.lock:
            state.sync()
            now = state.now()
            rows = list(state.rows.values())
            return {
                "namespace": state.namespace,
                "entries": len(rows),
                "shared": sum(r.durability == "shared" for r in rows),
                "session": sum(r.durability == "session" for r in rows),
                "sessions": len({r.session_id for r in rows if r.durability == "session"}),
                "expired": sum(state.expired(r, now) for r in rows),
                "suppressed": sum(state.suppressed(r, now) for r in rows),
                "superseded": sum(r.superseded_by is not None for r in rows),
                "receipts": state.store.count_receipts(state.namespace),
                "calibrated_modes": sorted(state.gates),
                "encoder": dict(state.encoder_info),
            }

    def reembed(self, encoder: Encoder, *, centerer: Centerer | None = None, progress: bool | None = None) -> int:
        """See :meth:`hopmem.agent.AgentMemory.reembed`."""
        state = self._state
        state.check_open()
        if not is_encoder(encoder):
            raise InvalidInput(f"encoder: expected an Encoder (with encode, dim, fingerprint), got {encoder!r}")
        info = encoder_record(encoder)
        dim = info["dimension"]
        centerer = space_centerer(encoder, dim, centerer)
        with state.lock:
            rows = state.store.conn.execute("SELECT id, text FROM entries ORDER BY id").fetchall()
            vectors = encode_batches(encoder, centerer, dim, [t for _, t in rows], progress=progress,
                                     desc="re-embedding")
            with state.store.transaction():
                for (entry_id, _), vec in zip(rows, vectors):
                    state.store.conn.execute("UPDATE entries SET vector = ? WHERE id = ?", (vector_blob(vec), entry_id))
                state.store.set_json("encoder", info)
                state.store.set_json("centerer", centerer.to_dict())
                state.store.conn.execute(
                    "DELETE FROM meta WHERE key LIKE 'gate:%' OR key LIKE 'bands:%' OR key LIKE 'verdict:%'")
            state.encoder = encoder
            state.dim = dim
            state.centerer = centerer
            state.encoder_info = info
            state.reranker = state.resolve_reranker()
            state.load()
        return len(rows)
