"""Inspection and maintenance: get, list and forget entries, end sessions, prune, stats, re-embed.

Expired and suppressed entries stay inspectable until :meth:`MaintenanceMixin.prune`
deletes them; :meth:`MaintenanceMixin.forget` deletes one entry now;
:meth:`MaintenanceMixin.reembed` migrates the whole file to a new encoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidInput, NotFound
from ..text.centering import Centerer
from ..text.encoders import Encoder
from .core import MemoryCore
from .encoding import encode_batches, encoder_record, is_encoder, space_centerer
from .results import Entry
from .store import vector_blob
from .validation import identity

__all__ = ["MaintenanceMixin"]


class MaintenanceMixin(MemoryCore):
    """get, entries, variants, forget, end_session, prune, stats and reembed."""

    def get(self, entry_id: int, *, session_id: str | None = None) -> Entry:
        """Inspect one entry, including expired and suppressed ones.

        A session entry is only returned with its own ``session_id``
        (otherwise :class:`~hopmem.errors.NotFound`, as if it did not exist).
        """
        self._check_open()
        with self._lock:
            self._sync()
            row = self._row(entry_id)
            if row.durability == "session" and row.session_id != session_id:
                raise NotFound(f"no entry {entry_id} in namespace {self.namespace!r}")
            return self._entry(row, self._now())

    def entries(self, *, session_id: str | None = None, include_hidden: bool = True) -> list[Entry]:
        """Entries visible to ``session_id`` (shared plus that session's), oldest first."""
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            out = []
            for row in sorted(self._rows.values(), key=lambda r: r.id):
                if row.durability == "session" and row.session_id != session_id:
                    continue
                entry = self._entry(row, now)
                if include_hidden or entry.recallable:
                    out.append(entry)
            return out

    def variants(self, entry_id: int, *, session_id: str | None = None) -> list[dict[str, Any]]:
        """Texts merged into an entry (a merge never loses the wording)."""
        self.get(entry_id, session_id=session_id)
        with self._lock:
            return [{"text": t, "metadata": m, "created_at": c} for t, m, c in self._store.variants(int(entry_id))]

    def forget(self, entry_id: int, *, session_id: str | None = None) -> bool:
        """Delete an entry now, text and vector, irreversibly. False if it was not there.

        A session entry can only be forgotten with its own ``session_id``.
        """
        self._check_open()
        with self._lock:
            self._sync()
            row = self._rows.get(int(entry_id)) if isinstance(entry_id, (int, np.integer)) and \
                not isinstance(entry_id, bool) else None
            if row is None:
                if not isinstance(entry_id, (int, np.integer)) or isinstance(entry_id, bool):
                    raise InvalidInput(f"entry_id: expected an int, got {entry_id!r}")
                return False
            if row.durability == "session" and row.session_id != session_id:
                return False
            now = self._now()
            with self._store.transaction():
                self._delete([row])
            self._data_version = self._store.data_version()
            self._drop_rows([row.id])
        self._emit("forgotten", row.session_id, now, id=row.id, text=row.text)
        return True

    def end_session(self, session_id: str) -> int:
        """Expire every entry of a session now (they stay inspectable until :meth:`prune`)."""
        self._check_open()
        session_id = identity(session_id, "session_id", required=True)
        with self._lock:
            self._sync()
            now = self._now()
            rows = [r for r in self._rows.values() if r.durability == "session" and r.session_id == session_id
                    and not self._expired(r, now)]
            with self._store.transaction():
                for row in rows:
                    self._store.update_entry(row.id, self.namespace, expires_at=now, updated_at=now)
            self._data_version = self._store.data_version()
            for row in rows:
                row.expires_at = row.updated_at = now
        return len(rows)

    def prune(self) -> dict[str, int]:
        """Physically delete expired entries and entries below the retention threshold.

        Returns counts by cause; emits ``expired`` (if not already announced)
        and ``pruned`` events. Old receipts are dropped too.
        """
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            expired = [r for r in self._rows.values() if self._expired(r, now)]
            suppressed = [r for r in self._rows.values() if not self._expired(r, now) and self._suppressed(r, now)]
            gone = expired + suppressed
            leaving: dict[str | None, int] = {}
            for row in gone:
                leaving[row.partition] = leaving.get(row.partition, 0) + 1
            emptied = [k for k, n in leaving.items() if k is not None and self._partitions[k].live == n]
            with self._store.transaction():
                self._delete(gone)
                receipts = self._store.prune_receipts(self.namespace, now, self.max_receipts)
                for key in emptied:  # a finished session leaves no table behind
                    self._store.drop_fts(self.namespace, key)
            self._data_version = self._store.data_version()
            self._drop_rows([r.id for r in gone])
            for key in emptied:
                self._fts.pop(key, None)
                self._partitions.pop(key, None)
        for row in expired:
            if not row.expired_notified:
                self._emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
        for row in gone:
            self._emit("pruned", row.session_id, now, id=row.id, text=row.text,
                       cause="expired" if row in expired else "retention")
        return {"expired": len(expired), "suppressed": len(suppressed), "receipts": receipts}

    def stats(self) -> dict[str, Any]:
        """Counts for observability."""
        self._check_open()
        with self._lock:
            self._sync()
            now = self._now()
            rows = list(self._rows.values())
            return {
                "namespace": self.namespace,
                "entries": len(rows),
                "shared": sum(r.durability == "shared" for r in rows),
                "session": sum(r.durability == "session" for r in rows),
                "sessions": len({r.session_id for r in rows if r.durability == "session"}),
                "expired": sum(self._expired(r, now) for r in rows),
                "suppressed": sum(self._suppressed(r, now) for r in rows),
                "superseded": sum(r.superseded_by is not None for r in rows),
                "receipts": self._store.count_receipts(self.namespace),
                "calibrated_modes": sorted(self._gates),
                "encoder": dict(self.encoder_info),
            }

    def reembed(self, encoder: Encoder, *, centerer: Centerer | None = None, progress: bool | None = None) -> int:
        """Migrate every namespace of the file to a new encoder (re-encode all texts).

        The centring mean is refitted (on the reference texts, or ``centerer``),
        vectors are replaced in one transaction, the encoder record changes,
        and all calibrated gates (and their verdict models) are dropped (recalibrate). Returns the number
        of entries re-embedded. This memory then uses the new encoder.

        Every text is encoded, in batches and checked (shape and finite values), before anything is
        written: an encoder that fails or returns a bad vector leaves the file and this memory as they
        were. ``progress`` shows a bar while encoding (default: from
        :data:`~hopmem.agent.encoding.PROGRESS_FROM` entries on, when stderr is a terminal).
        """
        self._check_open()
        if not is_encoder(encoder):
            raise InvalidInput(f"encoder: expected an Encoder (with encode, dim, fingerprint), got {encoder!r}")
        info = encoder_record(encoder)
        dim = info["dimension"]
        centerer = space_centerer(encoder, dim, centerer)
        with self._lock:
            rows = self._store.conn.execute("SELECT id, text FROM entries ORDER BY id").fetchall()
            vectors = encode_batches(encoder, centerer, dim, [t for _, t in rows], progress=progress,
                                     desc="re-embedding")
            with self._store.transaction():
                for (entry_id, _), vec in zip(rows, vectors):
                    self._store.conn.execute("UPDATE entries SET vector = ? WHERE id = ?", (vector_blob(vec), entry_id))
                self._store.set_json("encoder", info)
                self._store.set_json("centerer", centerer.to_dict())
                self._store.conn.execute(
                    "DELETE FROM meta WHERE key LIKE 'gate:%' OR key LIKE 'bands:%' OR key LIKE 'verdict:%'")
            self.encoder = encoder
            self.dim = dim
            self.centerer = centerer
            self.encoder_info = info
            self._reranker = self._resolve_reranker()
            self._load()
        return len(rows)
