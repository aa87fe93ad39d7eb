"""The agent memory's SQLite file: schema, migrations record, and every query.

One file (WAL) holds any number of namespaces. Every query that reads or
changes entries names its namespace: the namespace is a storage partition, not
a tag. Each visibility partition (a namespace's shared pool, and each session
of it) has its own FTS5 table (``porter unicode61`` tokenizer), so BM25
statistics and keyword candidates never mix tenants or sessions.

Tables
    ``meta``      key/value: schema version, dimension, encoder name and
                  fingerprint, the centerer, calibrated gates.
    ``entries``   one row per remembered statement (text, centered unit vector
                  as float32 BLOB, scope, kind, importance, labels, times,
                  supersession link, utility aggregates, exposure count).
    ``variants``  texts merged into an entry (a merge never destroys text).
    ``receipts``  short-lived selection receipts for :meth:`complete`.
    ``fts_tables`` which FTS5 table serves which partition.
    ``fts_<h>``   one FTS5 index over ``entries.text`` per partition.
    ``write_ids`` the write id a :meth:`AgentMemory.remember` call carried,
                  with the entry it made or merged into (the last
                  :data:`WRITE_ID_RETENTION` of the file), so a retried call
                  is applied once.

All writes run in explicit ``BEGIN IMMEDIATE`` transactions; an entry is
committed before :meth:`AgentMemory.remember` returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import CorruptStore, IncompatibleStore, StoreError

__all__ = ["AgentStore", "SCHEMA_VERSION", "ENTRY_COLUMNS", "WRITE_ID_RETENTION", "recorded_encoder"]

SCHEMA_VERSION = 1
_APP_ID = "hopmem.agent"

ENTRY_COLUMNS = (
    "id", "namespace", "session_id", "durability", "kind", "text", "norm_text", "vector",
    "importance", "labels", "inferred_labels", "metadata", "created_at", "updated_at",
    "reinforced_at", "expires_at", "merged_count", "superseded_by", "eval_sum", "eval_weight",
    "manual_feedback", "exposures", "last_recalled_at", "expired_notified",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    session_id TEXT,
    durability TEXT NOT NULL CHECK (durability IN ('shared', 'session')),
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    norm_text TEXT NOT NULL,
    vector BLOB NOT NULL,
    importance REAL NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    inferred_labels TEXT NOT NULL DEFAULT '{}',
    metadata TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    reinforced_at REAL NOT NULL,
    expires_at REAL,
    merged_count INTEGER NOT NULL DEFAULT 0,
    superseded_by INTEGER,
    eval_sum REAL NOT NULL DEFAULT 0,
    eval_weight REAL NOT NULL DEFAULT 0,
    manual_feedback REAL,
    exposures INTEGER NOT NULL DEFAULT 0,
    last_recalled_at REAL,
    expired_notified INTEGER NOT NULL DEFAULT 0,
    CHECK ((durability = 'shared' AND session_id IS NULL)
        OR (durability = 'session' AND session_id IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS entries_scope ON entries (namespace, durability, session_id);
CREATE INDEX IF NOT EXISTS entries_norm ON entries (namespace, norm_text);
CREATE TABLE IF NOT EXISTS variants (
    entry_id INTEGER NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    metadata TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS variants_entry ON variants (entry_id);
CREATE TABLE IF NOT EXISTS receipts (
    selection_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    session_id TEXT,
    entry_ids TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS receipts_age ON receipts (namespace, created_at);
CREATE TABLE IF NOT EXISTS fts_tables (
    namespace TEXT NOT NULL,
    session_key TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    PRIMARY KEY (namespace, session_key)
);
CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, note TEXT);
CREATE TABLE IF NOT EXISTS write_ids (
    namespace TEXT NOT NULL,
    write_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    entry_id INTEGER NOT NULL,
    merged INTEGER NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (namespace, write_id)
);
"""

#: Write ids kept per file (the oldest go first): a retry comes seconds after its call.
WRITE_ID_RETENTION = 100_000


def recorded_encoder(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The encoder an agent-memory file records (``name``, ``dimension``, ``fingerprint``), read-only.

    None when the file does not exist, is not an agent memory, or records no
    encoder yet. Lets a program reopen a file with the encoder it was written
    with (:func:`hopmem.text.encoders.builtin_encoder` of the name).
    """
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error:
        return None
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('app', 'encoder')").fetchall())
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    if rows.get("app") != _APP_ID or "encoder" not in rows:
        return None
    record = json.loads(rows["encoder"])
    return record if isinstance(record, dict) else None


def vector_blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def blob_vector(blob: bytes, dim: int) -> np.ndarray:
    arr = np.frombuffer(blob, dtype="<f4")
    if arr.shape != (dim,):
        raise CorruptStore(f"an entry vector holds {arr.size} floats, expected {dim}")
    return arr.astype(np.float32)


class AgentStore:
    """Thin, typed access to the file. Not thread-safe by itself: the owner locks."""

    def __init__(self, path: str, *, now: float) -> None:
        self.path = str(path)
        try:
            self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        except sqlite3.DatabaseError as exc:
            raise CorruptStore(f"cannot open {self.path} as an agent memory: {exc}") from exc
        try:
            self._refuse_foreign()  # before anything writes to the file, its journal mode included
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            with self.transaction():
                for statement in _SCHEMA.split(";"):  # not executescript: it would commit early
                    if statement.strip():
                        self.conn.execute(statement)
                version = self.get_meta("schema_version")
                if version is None:
                    self.set_meta("app", _APP_ID)
                    self.set_meta("schema_version", str(SCHEMA_VERSION))
                    self.conn.execute("INSERT OR IGNORE INTO migrations VALUES (?, ?, ?)",
                                      (SCHEMA_VERSION, now, "initial schema"))
                elif int(version) != SCHEMA_VERSION:
                    raise IncompatibleStore(
                        f"{self.path} has agent-memory schema version {version}; this hopmem reads version "
                        f"{SCHEMA_VERSION}")
        except BaseException as exc:
            self.conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise CorruptStore(f"cannot open {self.path} as an agent memory: {exc}") from exc
            raise
        self._lock = threading.RLock()

    def _refuse_foreign(self) -> None:
        """An SQLite file that holds tables but is not an agent memory is someone else's: leave it as it is."""
        tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return  # a new (or empty) file
        app = None
        if "meta" in tables:
            try:
                row = self.conn.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
            except sqlite3.OperationalError:  # a table named meta, of another shape
                row = None
            app = row[0] if row else None
        if app != _APP_ID:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise IncompatibleStore(f"{self.path} is not a hopmem agent memory (app {app!r}; tables {shown}); "
                                    f"it was left untouched")

    # -- plumbing --------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception."""
        if self.conn.in_transaction:  # nested: join the outer transaction
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        try:
            self.conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(sqlite3.DatabaseError):
                self.conn.execute("ROLLBACK")
            raise StoreError(f"commit failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(sqlite3.ProgrammingError):
            self.conn.close()

    def data_version(self) -> int:
        """Changes when another connection commits to the file."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def delete_meta(self, key: str) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def get_json(self, key: str) -> Any:
        raw = self.get_meta(key)
        return None if raw is None else json.loads(raw)

    def set_json(self, key: str, value: Any) -> None:
        self.set_meta(key, json.dumps(value, sort_keys=True))

    # -- write ids ------------------------------------------------------------------------------

    def write_id(self, namespace: str, write_id: str) -> tuple[str, int, bool] | None:
        """``(digest, entry_id, merged)`` recorded for ``write_id`` in ``namespace``, or None."""
        row = self.conn.execute("SELECT digest, entry_id, merged FROM write_ids "
                                "WHERE namespace = ? AND write_id = ?", (namespace, write_id)).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), bool(row[2]))

    def record_write_id(self, namespace: str, write_id: str, digest: str, entry_id: int, merged: bool,
                        now: float) -> None:
        """Record a write id; inside the caller's transaction (the one that wrote the entry)."""
        cur = self.conn.execute("INSERT INTO write_ids (namespace, write_id, digest, entry_id, merged, "
                                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                                (namespace, write_id, digest, entry_id, int(merged), now))
        if cur.lastrowid is not None and cur.lastrowid > WRITE_ID_RETENTION:
            self.conn.execute("DELETE FROM write_ids WHERE rowid <= ?", (cur.lastrowid - WRITE_ID_RETENTION,))

    # -- FTS tables: one per visibility partition --------------------------------------------

    @staticmethod
    def _session_key(session_id: str | None) -> str:
        return "" if session_id is None else "s:" + session_id

    def fts_tables(self, namespace: str) -> dict[str | None, str]:
        """The FTS5 table of each partition of ``namespace``: ``None`` (shared) or a session id."""
        out: dict[str | None, str] = {}
        rows = self.conn.execute("SELECT session_key, name FROM fts_tables WHERE namespace = ?", (namespace,))
        for key, name in rows:
            out[None if key == "" else key[2:]] = name
        return out

    def create_fts(self, namespace: str, session_id: str | None, *, now: float) -> str:
        """Create (if needed) and return the FTS5 table of one partition, in its own transaction."""
        key = self._session_key(session_id)
        row = self.conn.execute("SELECT name FROM fts_tables WHERE namespace = ? AND session_key = ?",
                                (namespace, key)).fetchone()
        if row is not None:
            return row[0]
        name = "fts_" + hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()[:24]
        with self.transaction():
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} "
                              "USING fts5(text, tokenize='porter unicode61')")
            self.conn.execute("INSERT OR IGNORE INTO fts_tables VALUES (?, ?, ?, ?)", (namespace, key, name, now))
        return name

    def drop_fts(self, namespace: str, session_id: str | None) -> None:
        """Drop an (empty) partition's FTS table; inside the caller's transaction."""
        key = self._session_key(session_id)
        row = self.conn.execute("SELECT name FROM fts_tables WHERE namespace = ? AND session_key = ?",
                                (namespace, key)).fetchone()
        if row is None:
            return
        self.conn.execute(f"DROP TABLE IF EXISTS {row[0]}")
        self.conn.execute("DELETE FROM fts_tables WHERE namespace = ? AND session_key = ?", (namespace, key))

    # -- entries -------------------------------------------------------------------------------

    def insert_entry(self, fts: str, values: dict[str, Any]) -> int:
        cols = [c for c in ENTRY_COLUMNS if c != "id" and c in values]
        sql = f"INSERT INTO entries ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        cur = self.conn.execute(sql, [values[c] for c in cols])
        rowid = cur.lastrowid
        assert rowid is not None  # an executed INSERT sets it
        entry_id = int(rowid)
        self.conn.execute(f"INSERT INTO {fts} (rowid, text) VALUES (?, ?)", (entry_id, values["text"]))
        return entry_id

    def update_entry(self, entry_id: int, namespace: str, **values: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in values)
        # "+namespace": look rows up by id, never by scanning the namespace index
        self.conn.execute(f"UPDATE entries SET {sets} WHERE id = ? AND +namespace = ?",
                          [*values.values(), entry_id, namespace])

    def delete_entries(self, namespace: str, ids_by_fts: dict[str, list[int]]) -> int:
        """Delete entries (and their FTS rows), given as ``{fts table: [ids]}``."""
        n = 0
        for fts, ids in ids_by_fts.items():
            for chunk in _chunks(list(ids), 500):
                marks = ",".join("?" * len(chunk))
                cur = self.conn.execute(f"DELETE FROM entries WHERE +namespace = ? AND id IN ({marks})",
                                        [namespace, *chunk])
                n += cur.rowcount
                self.conn.execute(f"DELETE FROM {fts} WHERE rowid IN ({marks})", chunk)
                self._unlink(namespace, chunk)
        return n

    def _unlink(self, namespace: str, chunk: list[int]) -> None:
        """Links into deleted rows would dangle otherwise."""
        marks = ",".join("?" * len(chunk))
        self.conn.execute(
            f"UPDATE entries SET superseded_by = NULL WHERE namespace = ? AND superseded_by IN ({marks})",
            [namespace, *chunk])

    def add_variant(self, entry_id: int, text: str, metadata: str | None, now: float) -> None:
        self.conn.execute("INSERT INTO variants VALUES (?, ?, ?, ?)", (entry_id, text, metadata, now))

    def variants(self, entry_id: int) -> list[tuple[str, Any, float]]:
        rows = self.conn.execute(
            "SELECT text, metadata, created_at FROM variants WHERE entry_id = ? ORDER BY rowid", (entry_id,))
        return [(t, None if m is None else json.loads(m), c) for t, m, c in rows]

    def load_entries(self, namespace: str, after_id: int = 0) -> list[sqlite3.Row]:
        cur = self.conn.execute(
            f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE namespace = ? AND id > ? ORDER BY id",
            (namespace, after_id))
        cur.row_factory = sqlite3.Row
        return cur.fetchall()

    def entry_ids(self, namespace: str) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT id FROM entries WHERE namespace = ?", (namespace,))]

    # -- keyword search ------------------------------------------------------------------------

    def keyword_search(self, fts: str, match: str, limit: int) -> list[tuple[int, float]]:
        """``(id, bm25)`` best first (FTS5's bm25 is lower-is-better; we return it negated)."""
        try:
            rows = self.conn.execute(
                f"SELECT rowid, bm25({fts}) FROM {fts} WHERE {fts} MATCH ? ORDER BY rank LIMIT ?",
                (match, limit)).fetchall()
        except sqlite3.OperationalError:  # an FTS syntax problem: no keyword evidence, not an error
            return []
        return [(int(r), -float(b)) for r, b in rows]

    def phrase_ids(self, fts: str, phrase: str, limit: int) -> list[int]:
        try:
            rows = self.conn.execute(f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?", (phrase, limit))
            return [int(r[0]) for r in rows]
        except sqlite3.OperationalError:
            return []

    # -- receipts ------------------------------------------------------------------------------

    def insert_receipt(self, selection_id: str, namespace: str, session_id: str | None, entry_ids: Sequence[int],
                       labels: dict, now: float, ttl: float) -> None:
        self.conn.execute("INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (selection_id, namespace, session_id, json.dumps(list(entry_ids)),
                           json.dumps(labels, sort_keys=True), now, now + ttl))

    def take_receipt(self, selection_id: str, namespace: str, now: float) -> list[int] | None:
        """Delete and return a live receipt's entry ids (None if absent or expired)."""
        row = self.conn.execute(
            "SELECT entry_ids, expires_at FROM receipts WHERE selection_id = ? AND namespace = ?",
            (selection_id, namespace)).fetchone()
        if row is None:
            return None
        self.conn.execute("DELETE FROM receipts WHERE selection_id = ?", (selection_id,))
        if row[1] <= now:
            return None
        return [int(i) for i in json.loads(row[0])]

    def prune_receipts(self, namespace: str, now: float, keep: int) -> int:
        n = self.conn.execute("DELETE FROM receipts WHERE namespace = ? AND expires_at <= ?", (namespace, now)).rowcount
        n += self.conn.execute(
            "DELETE FROM receipts WHERE namespace = ? AND selection_id NOT IN "
            "(SELECT selection_id FROM receipts WHERE namespace = ? ORDER BY created_at DESC, rowid DESC LIMIT ?)",
            (namespace, namespace, keep)).rowcount
        return n

    def count_receipts(self, namespace: str) -> int:
        return int(self.conn.execute("SELECT count(*) FROM receipts WHERE namespace = ?", (namespace,)).fetchone()[0])

    def bump_exposures(self, namespace: str, ids: Sequence[int], now: float) -> None:
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        self.conn.execute(
            "UPDATE entries SET exposures = exposures + 1, last_recalled_at = ? "
            f"WHERE +namespace = ? AND id IN ({marks})",
            [now, namespace, *ids])


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
