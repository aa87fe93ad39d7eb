"""The on-disk layout of a hopmem database and its ordered migrations.

A database file is SQLite marked with ``PRAGMA application_id = 0x484F504D``
("HOPM"). Its schema version is kept twice: in ``PRAGMA user_version`` (cheap to
read before anything else) and in the ``meta`` table; every migration that was
applied is logged in the ``migrations`` table with its time.

Migrations are a fixed, ordered list. A new file runs all of them in order; an
older file runs the ones it lacks, all in one transaction (SQLite's DDL is
transactional, so a migration either completes or leaves the file untouched).
Never edit a released migration: append a new one and bump
:data:`SCHEMA_VERSION`.

Layout (version 3)
------------------
``meta(key, value)``
    ``format`` ("hopmem"), ``schema_version``, ``dim``, ``config`` (the default
    :class:`~hopmem.engine.config.MemoryConfig` of new collections, JSON),
    ``created_at`` (ISO 8601, UTC), ``encoder_name``, ``encoder_dimension``,
    ``encoder_fingerprint`` (absent when no encoder was recorded),
    ``hopmem_version`` (of the build that created the file).
``collections(cid, name, config, centering, gate, next_doc_id, created_at)``
    One row per collection; ``config`` is the collection's MemoryConfig as JSON,
    ``centering`` and ``gate`` opaque JSON owned by the text layer.
``journal(jid, cid, seq, kind, n, vectors, arg, *_after, crc, created_at)``
    The write-ahead history of each collection, ``seq`` = 1, 2, ... without
    gaps. ``kind`` 1 is a write of ``n`` vectors (``vectors``: little-endian
    float32, row-major ``(n, dim)``), ``kind`` 2 a ``compress(arg)``. The
    ``*_after`` columns (writes, next_id, size, eta, rng) record the memory's
    scalars after the entry, so that a replay verifies itself; ``crc`` is the
    zlib CRC-32 of ``vectors`` (NULL in rows written by version 1).
``documents(cid, doc_id, jid, pos, metadata, created_at, locations)``
    A document is row ``pos`` of journal entry ``jid`` plus its metadata (JSON
    text). Its exact vector is read from the journal, not stored twice.
    ``locations`` is its posting list as written (little-endian int64 location
    ids that the write touched or created).
``merges(cid, seq, pairs)``
    The (removed, survivor) location pairs merged by journal entry ``seq``
    (int64 pairs), so that a posting list written before a merge resolves to
    the survivor. The location -> documents index is derived from these two
    in memory. (Version 1 kept a ``postings(cid, location, doc_id)`` table
    instead; see migration 2.)
``checkpoints(cid, seq, size, eta, writes, next_id, rng, parts, crc, created_at)``
and ``checkpoint_parts(cid, part, ids, addresses, counters, weights)``
    The latest snapshot of each collection's memory, covering journal entries
    ``1..seq``, in parts of at most ~32 MiB; ``crc`` covers every part's bytes.
``write_ids(rid, cid, write_id, kind, digest, result, arrays, created_at)``
    The client-supplied ids of recent writes, deletes and compressions of
    each collection (unique per collection), each inserted in the same
    transaction as the change it names: ``kind`` (1 write, 2 compress,
    3 delete), ``digest`` (SHA-256 of the request), ``result`` (the answer
    given, JSON) and, for a write, ``arrays`` (its touched and created
    location ids and merges, little-endian int64). A repeat of the id answers
    ``result`` instead of applying the change again. ``rid`` orders the rows
    for pruning (the oldest beyond a bound are deleted).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "APPLICATION_ID", "SCHEMA_VERSION", "FORMAT", "Migration", "MIGRATIONS", "migrate",
    "KIND_WRITE", "KIND_COMPRESS", "KIND_DELETE",
]

#: ``PRAGMA application_id`` of every hopmem database: b"HOPM" as a big-endian int.
APPLICATION_ID = 0x484F504D
#: The schema version this build writes (the last migration's version).
SCHEMA_VERSION = 3
#: ``meta.format`` of every hopmem database.
FORMAT = "hopmem"

KIND_WRITE = 1
KIND_COMPRESS = 2
#: ``write_ids.kind`` of a document delete (writes and compressions use the journal's kinds).
KIND_DELETE = 3


@dataclass(frozen=True)
class Migration:
    """One step of the schema: from ``version - 1`` to ``version``."""

    version: int
    description: str
    apply: Callable[[sqlite3.Connection], None]


def _v1(conn: sqlite3.Connection) -> None:
    for stmt in _V1_STATEMENTS:
        conn.execute(stmt)


_V1_STATEMENTS = (
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE migrations (
        version INTEGER PRIMARY KEY,
        description TEXT NOT NULL,
        applied_at TEXT NOT NULL
    )""",
    """CREATE TABLE collections (
        cid INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        config TEXT NOT NULL,
        centering TEXT,
        next_doc_id INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE journal (
        jid INTEGER PRIMARY KEY,
        cid INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        n INTEGER NOT NULL,
        vectors BLOB,
        arg INTEGER,
        writes_after INTEGER NOT NULL,
        next_id_after INTEGER NOT NULL,
        size_after INTEGER NOT NULL,
        eta_after REAL NOT NULL,
        rng_after INTEGER NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (cid, seq)
    )""",
    """CREATE TABLE documents (
        cid INTEGER NOT NULL,
        doc_id INTEGER NOT NULL,
        jid INTEGER NOT NULL,
        pos INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (cid, doc_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE postings (
        cid INTEGER NOT NULL,
        location INTEGER NOT NULL,
        doc_id INTEGER NOT NULL,
        PRIMARY KEY (cid, location, doc_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX postings_by_doc ON postings (cid, doc_id)",
    """CREATE TABLE checkpoints (
        cid INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        size INTEGER NOT NULL,
        eta REAL NOT NULL,
        writes INTEGER NOT NULL,
        next_id INTEGER NOT NULL,
        rng INTEGER NOT NULL,
        parts INTEGER NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE checkpoint_parts (
        cid INTEGER NOT NULL,
        part INTEGER NOT NULL,
        ids BLOB NOT NULL,
        addresses BLOB NOT NULL,
        counters BLOB NOT NULL,
        weights BLOB NOT NULL,
        PRIMARY KEY (cid, part)
    )""",
)


def _v2(conn: sqlite3.Connection) -> None:
    # Integrity: CRC-32 of each journal entry's vectors and of each checkpoint
    # (NULL in older rows: not verified). The gate of the text layer.
    conn.execute("ALTER TABLE journal ADD COLUMN crc INTEGER")
    conn.execute("ALTER TABLE checkpoints ADD COLUMN crc INTEGER")
    conn.execute("ALTER TABLE collections ADD COLUMN gate TEXT")
    # Posting lists move from one row per (location, document) -- every batch
    # dirtied pages all over a location-ordered B-tree: measured 14 us of CPU per
    # posting row and ~8 MB of WAL per 100 documents once 30,000 documents were
    # in -- into one append-only blob per document plus a log of merges. The
    # location -> documents direction is rebuilt in memory when first needed.
    conn.execute("ALTER TABLE documents ADD COLUMN locations BLOB")
    conn.execute("""CREATE TABLE merges (
        cid INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        pairs BLOB NOT NULL,
        PRIMARY KEY (cid, seq)
    ) WITHOUT ROWID""")
    # Version 1 redirected postings at each merge, so its rows already name the
    # surviving locations: they become the documents' lists, with no merge log.
    batch: list[tuple[bytes, int, int]] = []
    current: tuple[int, int] | None = None
    locations: list[int] = []

    def flush() -> None:
        if current is not None:
            batch.append((np.asarray(locations, "<i8").tobytes(), current[0], current[1]))

    for cid, doc_id, location in conn.execute(
            "SELECT cid, doc_id, location FROM postings ORDER BY cid, doc_id, location"):
        if (cid, doc_id) != current:
            flush()
            current, locations = (cid, doc_id), []
        locations.append(location)
    flush()
    conn.executemany("UPDATE documents SET locations = ? WHERE cid = ? AND doc_id = ?", batch)
    conn.execute("UPDATE documents SET locations = X'' WHERE locations IS NULL")
    conn.execute("DROP TABLE postings")


def _v3(conn: sqlite3.Connection) -> None:
    # Write ids: a client retrying a write after an ambiguous failure (a timeout,
    # a lost connection, a restarted server) gets the first answer back instead
    # of a second application. A rowid table: rid orders the rows for pruning.
    conn.execute("""CREATE TABLE write_ids (
        rid INTEGER PRIMARY KEY,
        cid INTEGER NOT NULL,
        write_id TEXT NOT NULL,
        kind INTEGER NOT NULL,
        digest BLOB NOT NULL,
        result TEXT NOT NULL,
        arrays BLOB,
        created_at REAL NOT NULL,
        UNIQUE (cid, write_id)
    )""")
    conn.execute("CREATE INDEX write_ids_by_age ON write_ids (cid, rid)")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial layout: meta, collections, journal, documents, postings, "
                 "checkpoints", _v1),
    Migration(2, "CRC-32 of journal entries and checkpoints; collections.gate; posting lists "
                 "as one blob per document plus a merge log (table postings dropped)", _v2),
    Migration(3, "write_ids: client-supplied ids of recent changes with their answers, so that "
                 "a retried change is applied once", _v3),
)

assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def migrate(conn: sqlite3.Connection, current: int, target: int = SCHEMA_VERSION) -> list[int]:
    """Apply the migrations after ``current`` up to ``target``, in order.

    The caller owns the transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), so the
    whole upgrade is atomic. Records each step in ``migrations``, and the final
    version in ``meta`` (when it exists) and ``PRAGMA user_version``. Returns
    the versions applied.
    """
    applied = []
    for migration in MIGRATIONS:
        if current < migration.version <= target:
            migration.apply(conn)
            conn.execute(
                "INSERT INTO migrations (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, _now_iso()))
            applied.append(migration.version)
    if applied:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                     (str(target),))
        conn.execute(f"PRAGMA user_version = {int(target)}")
    return applied
