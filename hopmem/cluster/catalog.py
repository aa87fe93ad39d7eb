"""The catalog: which databases exist, their shard count S, and which host holds each shard.

A replicated database (R >= 2 copies of each shard) also has, per shard, its
replicas (hosts holding a copy), its in-sync set (ISR: replicas that have
committed every acknowledged write) and an epoch that grows at every change of
leader; ``shards.host_id`` is the leader. Every change of leader or of the ISR
is a compare-and-set on the epoch (:meth:`Catalog.promote`,
:meth:`Catalog.shrink_isr`, :meth:`Catalog.expand_isr`), serialised by this
one SQLite file: the catalog is the single arbiter of who leads.

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

from ..errors import AlreadyExists, InvalidInput, NotFound, NotSupported
from ..store.names import check_database_name
from .wire import StaleEpoch

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
CREATE TABLE IF NOT EXISTS replication (name TEXT NOT NULL, shard INTEGER NOT NULL,
    replicas TEXT NOT NULL, isr TEXT NOT NULL, epoch INTEGER NOT NULL,
    PRIMARY KEY (name, shard));
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
                        encoder: Any, config: dict[str, Any], replicas: int = 1,
                        live: list[str] | None = None) -> dict[str, Any]:
        """Record a new database and place its shards on the least-loaded hosts.

        With ``replicas`` R >= 2, each shard gets R hosts (on distinct nodes
        when there are R nodes with hosts; distinct hosts otherwise), the first
        its leader, all in sync, epoch 1. ``live``: the hosts that may be used
        (default: every registered host).
        """
        check_database_name(name)
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise InvalidInput(f"shards: expected an integer >= 1, got {shards!r}")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InvalidInput(f"replicas: expected an integer >= 1, got {replicas!r}")
        hosts = [h for h in self.hosts() if live is None or h["host_id"] in live]
        if not hosts:
            raise InvalidInput("hosts: expected at least one registered shard host, got none")
        if replicas > len(hosts):
            raise InvalidInput(f"replicas: expected at most {len(hosts)} (the live shard hosts), "
                               f"got {replicas}")
        load = {h["host_id"]: self._copies(h["host_id"]) for h in hosts}
        node = {h["host_id"]: h["node_id"] for h in hosts}
        placement = []
        copies: list[list[str]] = []
        leads: dict[str, int] = {}
        for _ in range(shards):
            chosen = pick_hosts(load, node, replicas, [])
            for host in chosen:
                load[host] += 1
            lead = min(chosen, key=lambda h: leads.get(h, 0))  # leaders spread too
            leads[lead] = leads.get(lead, 0) + 1
            chosen = [lead] + [h for h in chosen if h != lead]
            placement.append(chosen[0])
            copies.append(chosen)
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
                if replicas > 1:
                    self._conn.executemany(
                        "INSERT INTO replication VALUES (?, ?, ?, ?, 1)",
                        [(name, i, json.dumps(c), json.dumps(c)) for i, c in enumerate(copies)])
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
            replication = [self._state_row(name, i, leader)
                           for i, leader in enumerate(placement)]
        dim, shards, created_at, enc, config = row
        return {"name": name, "dim": int(dim), "shards": int(shards), "created_at": created_at,
                "encoder": None if enc is None else json.loads(enc),
                "config": json.loads(config), "placement": placement,
                "replicas": max(len(r["replicas"]) for r in replication) if replication else 1,
                "replication": replication}

    # -- replication ----------------------------------------------------------------------------

    def _copies(self, host_id: str) -> int:
        """How many shard copies ``host_id`` holds (leaders and followers)."""
        with self._lock:
            plain = self._conn.execute(
                "SELECT count(*) FROM shards s WHERE host_id = ? AND NOT EXISTS (SELECT 1 FROM "
                "replication r WHERE r.name = s.name AND r.shard = s.shard)",
                (host_id,)).fetchone()[0]
            copies = sum(host_id in json.loads(r) for (r,) in self._conn.execute(
                "SELECT replicas FROM replication"))
        return int(plain) + copies

    def _state_row(self, name: str, shard: int, leader: str) -> dict[str, Any]:
        """Shard ``shard``'s ``{shard, leader, replicas, isr, epoch}`` (caller holds the lock)."""
        row = self._conn.execute(
            "SELECT replicas, isr, epoch FROM replication WHERE name = ? AND shard = ?",
            (name, shard)).fetchone()
        if row is None:  # not replicated: one copy, never a change of leader
            return {"shard": shard, "leader": leader, "replicas": [leader], "isr": [leader],
                    "epoch": 0}
        replicas, isr, epoch = row
        return {"shard": shard, "leader": leader, "replicas": json.loads(replicas),
                "isr": json.loads(isr), "epoch": int(epoch)}

    def shard_state(self, name: str, shard: int) -> dict[str, Any]:
        """``{shard, leader, replicas, isr, epoch}`` of one shard; NotFound if absent."""
        with self._lock:
            row = self._conn.execute("SELECT host_id FROM shards WHERE name = ? AND shard = ?",
                                     (name, shard)).fetchone()
            if row is None:
                raise NotFound(f"shard {shard} of database {name!r} not found")
            return self._state_row(name, shard, row[0])

    def _change(self, name: str, shard: int, epoch: int, leader: str, what: str,
                change: Any) -> dict[str, Any]:
        """Apply ``change(state) -> state`` if the shard is still led by ``leader`` at ``epoch``."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT host_id FROM shards WHERE name = ? AND shard = ?",
                    (name, shard)).fetchone()
                if row is None:
                    raise NotFound(f"shard {shard} of database {name!r} not found")
                state = self._state_row(name, shard, row[0])
                if state["epoch"] == 0:
                    raise NotSupported(f"shard {shard} of database {name!r} is not replicated")
                if state["epoch"] != epoch or state["leader"] != leader:
                    raise StaleEpoch(
                        f"{what} shard {shard} of {name!r}: expected leader {leader} at epoch "
                        f"{epoch}, the catalog has {state['leader']} at epoch {state['epoch']}")
                new = change(dict(state))
                self._conn.execute("UPDATE shards SET host_id = ? WHERE name = ? AND shard = ?",
                                   (new["leader"], name, shard))
                self._conn.execute(
                    "UPDATE replication SET replicas = ?, isr = ?, epoch = ? WHERE name = ? AND "
                    "shard = ?", (json.dumps(new["replicas"]), json.dumps(new["isr"]),
                                  new["epoch"], name, shard))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return new

    def promote(self, name: str, shard: int, epoch: int, lost: str,
                leader: str) -> dict[str, Any]:
        """Make in-sync replica ``leader`` the leader in place of ``lost`` (epoch + 1); the
        old leader leaves the in-sync set. StaleEpoch unless ``lost`` leads at ``epoch``."""
        def change(state: dict[str, Any]) -> dict[str, Any]:
            if leader not in state["isr"] or leader == lost:
                raise StaleEpoch(f"promote shard {shard} of {name!r}: {leader} is not an in-sync "
                                 f"replica (in sync: {state['isr']})")
            return {**state, "leader": leader, "epoch": epoch + 1,
                    "isr": [leader] + [h for h in state["isr"] if h not in (leader, lost)]}
        return self._change(name, shard, epoch, lost, "promote", change)

    def shrink_isr(self, name: str, shard: int, epoch: int, leader: str,
                   remove: list[str]) -> dict[str, Any]:
        """Take ``remove`` out of the in-sync set (their copies missed a write)."""
        def change(state: dict[str, Any]) -> dict[str, Any]:
            return {**state, "isr": [h for h in state["isr"] if h == leader or h not in remove]}
        return self._change(name, shard, epoch, leader, "shrink the in-sync set of", change)

    def expand_isr(self, name: str, shard: int, epoch: int, leader: str,
                   add: str) -> dict[str, Any]:
        """Record ``add`` as an in-sync replica (it caught up), and a replica."""
        def change(state: dict[str, Any]) -> dict[str, Any]:
            replicas = state["replicas"] + ([add] if add not in state["replicas"] else [])
            isr = state["isr"] + ([add] if add not in state["isr"] else [])
            return {**state, "replicas": replicas, "isr": isr}
        return self._change(name, shard, epoch, leader, "expand the in-sync set of", change)

    def set_replicas(self, name: str, shard: int, epoch: int, leader: str,
                     replicas: list[str]) -> dict[str, Any]:
        """Record the replica set (repair forgets copies on lost hosts); the ISR keeps only
        members of it."""
        def change(state: dict[str, Any]) -> dict[str, Any]:
            keep = [leader] + [h for h in replicas if h != leader]
            return {**state, "replicas": keep, "isr": [h for h in state["isr"] if h in keep]}
        return self._change(name, shard, epoch, leader, "set the replicas of", change)

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
                self._conn.execute("DELETE FROM replication WHERE name = ?", (name,))
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
            if self._conn.execute("SELECT 1 FROM replication WHERE name = ? AND shard = ?",
                                  (name, shard)).fetchone():
                raise NotSupported(f"shard {shard} of database {name!r} is replicated: its "
                                   f"copies change with repair, not with a move")
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


def pick_hosts(load: dict[str, int], node: dict[str, Any], count: int,
               taken: list[str]) -> list[str]:
    """``count`` hosts not in ``taken``, least loaded first (ties by id), each on a node none
    of the others (``taken`` included) is on while such hosts remain."""
    chosen: list[str] = []
    for _ in range(count):
        used = {node.get(h) for h in taken + chosen}
        free = [h for h in sorted(load) if h not in taken + chosen]
        if not free:
            break
        apart = [h for h in free if node.get(h) not in used] or free
        chosen.append(min(apart, key=lambda h: load[h]))
    return chosen
