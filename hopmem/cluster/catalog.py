"""The catalog: which databases exist, their shard count S, and which host holds each shard.

:class:`Catalog` is plain Python over a small SQLite file; the cluster runs one
inside a named, detached actor (:mod:`hopmem.cluster.runtime`) so that every
client and server finds the same one. S is fixed when a database is created
(a collection's shard is ``stable_shard(database, collection, S)``); only the
shard -> host map changes, when a shard moves.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from typing import Any

from ..errors import AlreadyExists, InvalidInput, NotFound
from ..store.names import check_database_name

__all__ = ["Catalog", "CATALOG_FILE"]

CATALOG_FILE = "catalog.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (host_id TEXT PRIMARY KEY, actor TEXT NOT NULL,
    node_id TEXT, root TEXT NOT NULL, added_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS databases (name TEXT PRIMARY KEY, dim INTEGER NOT NULL,
    shards INTEGER NOT NULL, created_at TEXT NOT NULL, encoder TEXT, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shards (name TEXT NOT NULL, shard INTEGER NOT NULL,
    host_id TEXT NOT NULL, PRIMARY KEY (name, shard));
CREATE TABLE IF NOT EXISTS partitioned (name TEXT NOT NULL, collection TEXT NOT NULL,
    partitions INTEGER NOT NULL, PRIMARY KEY (name, collection));
"""


class Catalog:
    """The cluster's catalog in the SQLite file ``path`` (created if missing). Thread safe."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('cluster_id', ?)",
                               (uuid.uuid4().hex,))

    def cluster_id(self) -> str:
        with self._lock:
            return str(self._conn.execute(
                "SELECT value FROM meta WHERE key = 'cluster_id'").fetchone()[0])

    # -- hosts ----------------------------------------------------------------------------------

    def register_host(self, host_id: str, actor: str, node_id: str | None, root: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO hosts VALUES (?, ?, ?, ?, ?) ON CONFLICT(host_id) DO UPDATE SET "
                "actor = excluded.actor, node_id = excluded.node_id, root = excluded.root",
                (host_id, actor, node_id, root, time.time()))

    def hosts(self) -> list[dict[str, Any]]:
        """Every registered host: ``{host_id, actor, node_id, root, shards}``, by id."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT h.host_id, h.actor, h.node_id, h.root, count(s.shard) FROM hosts h "
                "LEFT JOIN shards s ON s.host_id = h.host_id GROUP BY h.host_id "
                "ORDER BY h.host_id").fetchall()
        return [{"host_id": h, "actor": a, "node_id": n, "root": r, "shards": int(c)}
                for h, a, n, r, c in rows]

    # -- databases --------------------------------------------------------------------------------

    def create_database(self, name: str, dim: int, shards: int, created_at: str,
                        encoder: Any, config: dict[str, Any]) -> dict[str, Any]:
        """Record a new database and place its shards on the least-loaded hosts."""
        check_database_name(name)
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise InvalidInput(f"shards: expected an integer >= 1, got {shards!r}")
        hosts = self.hosts()
        if not hosts:
            raise InvalidInput("hosts: expected at least one registered shard host, got none")
        load = {h["host_id"]: h["shards"] for h in hosts}
        placement = []
        for _ in range(shards):
            host = min(sorted(load), key=lambda h: load[h])
            placement.append(host)
            load[host] += 1
        enc = None if encoder is None else json.dumps(encoder)
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                if self._conn.execute("SELECT 1 FROM databases WHERE name = ?",
                                      (name,)).fetchone():
                    raise AlreadyExists(f"database {name!r} already exists")
                self._conn.execute("INSERT INTO databases VALUES (?, ?, ?, ?, ?, ?)",
                                   (name, dim, shards, created_at, enc, json.dumps(config)))
                self._conn.executemany("INSERT INTO shards VALUES (?, ?, ?)",
                                       [(name, i, h) for i, h in enumerate(placement)])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return self.database(name)

    def database(self, name: str) -> dict[str, Any]:
        """``{name, dim, shards, created_at, encoder, config, placement}``; NotFound if absent.

        ``placement[i]`` is the id of the host holding shard ``i``.
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT dim, shards, created_at, encoder, config FROM databases WHERE name = ?",
                (name,)).fetchone()
            if row is None:
                raise NotFound(f"database {name!r} not found")
            placement = [h for (h,) in self._conn.execute(
                "SELECT host_id FROM shards WHERE name = ? ORDER BY shard", (name,))]
        dim, shards, created_at, enc, config = row
        return {"name": name, "dim": int(dim), "shards": int(shards), "created_at": created_at,
                "encoder": None if enc is None else json.loads(enc),
                "config": json.loads(config), "placement": placement}

    def databases(self) -> list[str]:
        with self._lock:
            return [n for (n,) in self._conn.execute("SELECT name FROM databases ORDER BY name")]

    def set_created_at(self, name: str, created_at: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE databases SET created_at = ? WHERE name = ?",
                               (created_at, name))

    def drop_database(self, name: str) -> bool:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                gone = self._conn.execute("DELETE FROM databases WHERE name = ?", (name,)).rowcount
                self._conn.execute("DELETE FROM shards WHERE name = ?", (name,))
                self._conn.execute("DELETE FROM partitioned WHERE name = ?", (name,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return bool(gone)

    # -- partitioned collections --------------------------------------------------------------------

    def add_partitioned(self, name: str, collection: str, partitions: int) -> int:
        """Record collection ``collection`` of database ``name`` as split in ``partitions``
        parts, unless it is recorded already; returns the recorded number (the first
        record wins, so two clients creating it concurrently agree)."""
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 2:
            raise InvalidInput(f"partitions: expected an integer >= 2, got {partitions!r}")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._conn.execute("SELECT 1 FROM databases WHERE name = ?",
                                          (name,)).fetchone():
                    raise NotFound(f"database {name!r} not found")
                self._conn.execute("INSERT OR IGNORE INTO partitioned VALUES (?, ?, ?)",
                                   (name, collection, partitions))
                (recorded,) = self._conn.execute(
                    "SELECT partitions FROM partitioned WHERE name = ? AND collection = ?",
                    (name, collection)).fetchone()
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return int(recorded)

    def partitions_of(self, name: str, collection: str) -> int:
        """P of a partitioned collection; 1 when it is not recorded as partitioned."""
        with self._lock:
            row = self._conn.execute(
                "SELECT partitions FROM partitioned WHERE name = ? AND collection = ?",
                (name, collection)).fetchone()
        return 1 if row is None else int(row[0])

    def partitioned(self, name: str) -> dict[str, int]:
        """The partitioned collections of database ``name``: collection -> P."""
        with self._lock:
            return {c: int(p) for c, p in self._conn.execute(
                "SELECT collection, partitions FROM partitioned WHERE name = ?", (name,))}

    def drop_partitioned(self, name: str, collection: str) -> bool:
        """Forget that ``collection`` is partitioned (after its parts are dropped)."""
        with self._lock:
            return bool(self._conn.execute(
                "DELETE FROM partitioned WHERE name = ? AND collection = ?",
                (name, collection)).rowcount)

    def move_shard(self, name: str, shard: int, host_id: str) -> None:
        """Point shard ``shard`` of ``name`` at ``host_id`` (the last step of a move)."""
        with self._lock:
            if not self._conn.execute("SELECT 1 FROM hosts WHERE host_id = ?",
                                      (host_id,)).fetchone():
                raise NotFound(f"host {host_id!r} not found")
            changed = self._conn.execute(
                "UPDATE shards SET host_id = ? WHERE name = ? AND shard = ?",
                (host_id, name, shard)).rowcount
        if not changed:
            raise NotFound(f"shard {shard} of database {name!r} not found")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
