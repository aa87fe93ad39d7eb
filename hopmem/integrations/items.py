"""The key-value side of :class:`~hopmem.integrations.langgraph.HopmemStore`: namespaced items in the agent
memory's SQLite file, and LangGraph's value filters. No LangGraph import here.

Two tables live next to the agent memory's own (the file is an agent memory first: it is opened as one
before these are created, so a file of someone else's is refused as it is for :class:`~hopmem.agent.AgentMemory`):

* ``lg_items``: one row per (namespace, key): the value as JSON text, ``created_at`` / ``updated_at`` in
  microseconds since the epoch, the TTL (minutes) and its expiry, the agent-memory entries that index the
  item's fields, and ``seq``, its place in listing order;
* ``lg_namespaces``: each namespace that holds items, with its ``seq``.

A namespace is stored as its labels joined by ``.`` (LangGraph refuses labels with a period, an empty label
or a NUL), so a prefix is a text prefix. Listing order is LangGraph's in-memory store's: namespaces in the
order they first received an item (since they were last empty), items in the order their key was first put
(an overwrite keeps its place, a delete and a new put moves it to the end).

Not thread-safe by itself: :class:`HopmemStore` holds its lock around every call.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

__all__ = ["ItemRow", "ItemTable", "matches", "ns_text", "ns_tuple"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_namespaces (ns TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lg_items (
    ns         TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    ttl        REAL,
    expires_at INTEGER,
    entries    TEXT NOT NULL DEFAULT '[]',
    seq        INTEGER NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE INDEX IF NOT EXISTS lg_items_expiry ON lg_items (expires_at) WHERE expires_at IS NOT NULL;
"""

_COLUMNS = "ns, key, value, created_at, updated_at, ttl, expires_at, entries, seq"


def ns_text(namespace: Sequence[str]) -> str:
    """A namespace as stored: its labels joined by ``.``."""
    return ".".join(namespace)


def ns_tuple(text: str) -> tuple[str, ...]:
    return tuple(text.split(".")) if text else ()


@dataclass
class ItemRow:
    """One stored item, its value still JSON text."""

    ns: str
    key: str
    value: str
    created_at: int
    updated_at: int
    ttl: float | None
    expires_at: int | None
    entries: list[int]
    seq: int

    @property
    def namespace(self) -> tuple[str, ...]:
        return ns_tuple(self.ns)

    def decoded(self) -> dict[str, Any]:
        return dict(json.loads(self.value))


def _row(r: tuple[Any, ...]) -> ItemRow:
    return ItemRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), r[8])


def _prefix_clause(prefix: str, table: str = "i") -> tuple[str, list[Any]]:
    if not prefix:
        return "1", []
    return f"({table}.ns = ? OR substr({table}.ns, 1, ?) = ?)", [prefix, len(prefix) + 1, prefix + "."]


class ItemTable:
    """The items of one file, on a connection the caller owns (an agent-memory file's)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        with self.transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self.conn.execute(statement)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- reads ----------------------------------------------------------------------------------------------

    def get(self, ns: str, key: str, now: int) -> ItemRow | None:
        r = self.conn.execute(f"SELECT {_COLUMNS} FROM lg_items WHERE ns = ? AND key = ? AND "
                              "(expires_at IS NULL OR expires_at > ?)", (ns, key, now)).fetchone()
        return None if r is None else _row(r)

    def get_many(self, pairs: Iterable[tuple[str, str]], now: int) -> dict[tuple[str, str], ItemRow]:
        """The live items of ``pairs`` (namespace text, key), by pair."""
        wanted = list(dict.fromkeys(pairs))
        out: dict[tuple[str, str], ItemRow] = {}
        for start in range(0, len(wanted), 400):  # SQLite's bound-parameter limit, with room
            chunk = wanted[start:start + 400]
            where = " OR ".join(["(ns = ? AND key = ?)"] * len(chunk))
            params: list[Any] = [v for pair in chunk for v in pair]
            for r in self.conn.execute(f"SELECT {_COLUMNS} FROM lg_items WHERE ({where}) AND "
                                       "(expires_at IS NULL OR expires_at > ?)", [*params, now]):
                row = _row(r)
                out[(row.ns, row.key)] = row
        return out

    def under(self, prefix: str, now: int) -> list[ItemRow]:
        """The live items whose namespace starts with ``prefix`` (namespace text), in listing order."""
        clause, params = _prefix_clause(prefix)
        cols = ", ".join(f"i.{c.strip()}" for c in _COLUMNS.split(","))
        return [_row(r) for r in self.conn.execute(
            f"SELECT {cols} FROM lg_items i JOIN lg_namespaces n ON n.ns = i.ns WHERE {clause} AND "
            "(i.expires_at IS NULL OR i.expires_at > ?) ORDER BY n.seq, i.seq", [*params, now])]

    def indexed_namespaces(self, prefix: str) -> list[str]:
        """The namespaces under ``prefix`` with at least one item indexed in the agent memory."""
        clause, params = _prefix_clause(prefix, "n")
        return [ns for (ns,) in self.conn.execute(
            f"SELECT n.ns FROM lg_namespaces n WHERE {clause} AND EXISTS "
            "(SELECT 1 FROM lg_items i WHERE i.ns = n.ns AND i.entries != '[]') ORDER BY n.seq", params)]

    def namespaces(self) -> list[str]:
        return [ns for (ns,) in self.conn.execute("SELECT ns FROM lg_namespaces ORDER BY seq")]

    def expired(self, now: int) -> list[ItemRow]:
        return [_row(r) for r in self.conn.execute(
            f"SELECT {_COLUMNS} FROM lg_items WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))]

    # -- writes (inside :meth:`transaction`) --------------------------------------------------------------------

    def put(self, ns: str, key: str, value: str, now: int, ttl: float | None, entries: list[int]) -> list[int]:
        """Insert or overwrite an item; returns the entries the old version had (empty for a new item).

        An overwrite keeps the item's ``created_at`` and its place in listing order; an expired
        item that was not swept yet counts as gone.
        """
        old = self.conn.execute("SELECT created_at, seq, entries, expires_at FROM lg_items WHERE ns = ? AND key = ?",
                                (ns, key)).fetchone()
        expires = None if ttl is None else now + int(round(ttl * 60e6))
        if old is not None and (old[3] is None or old[3] > now):
            self.conn.execute("UPDATE lg_items SET value = ?, updated_at = ?, ttl = ?, expires_at = ?, entries = ? "
                              "WHERE ns = ? AND key = ?", (value, now, ttl, expires, json.dumps(entries), ns, key))
            return list(json.loads(old[2]))
        stale: list[int] = []
        if old is not None:
            stale = list(json.loads(old[2]))
            self.delete(ns, key)
        if self.conn.execute("SELECT 1 FROM lg_namespaces WHERE ns = ?", (ns,)).fetchone() is None:
            self.conn.execute("INSERT INTO lg_namespaces VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 "
                              "FROM lg_namespaces))", (ns,))
        self.conn.execute("INSERT INTO lg_items VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                          "(SELECT COALESCE(MAX(seq), 0) + 1 FROM lg_items))",
                          (ns, key, value, now, now, ttl, expires, json.dumps(entries)))
        return stale

    def delete(self, ns: str, key: str) -> list[int]:
        """Delete an item (and its namespace once empty); returns its entries (empty if it was not there)."""
        old = self.conn.execute("SELECT entries FROM lg_items WHERE ns = ? AND key = ?", (ns, key)).fetchone()
        if old is None:
            return []
        self.conn.execute("DELETE FROM lg_items WHERE ns = ? AND key = ?", (ns, key))
        self.conn.execute("DELETE FROM lg_namespaces WHERE ns = ? AND NOT EXISTS "
                          "(SELECT 1 FROM lg_items WHERE ns = ?)", (ns, ns))
        return list(json.loads(old[0]))

    def refresh(self, rows: Iterable[ItemRow], now: int) -> None:
        """Restart the TTL of ``rows`` that have one (a read that refreshes)."""
        updates = [(now + int(round(r.ttl * 60e6)), r.ns, r.key) for r in rows if r.ttl is not None]
        if updates:  # (inside a transaction the caller opens only when some row has a TTL)
            self.conn.executemany("UPDATE lg_items SET expires_at = ? WHERE ns = ? AND key = ?", updates)


# -- LangGraph's value filters ------------------------------------------------------------------------------------

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a LangGraph ``filter``: every field's condition holds.

    A condition is a value (equal, compared as JSON: a dict field by field, a list element by element), or
    a dict of operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``), as LangGraph's stores
    read it. An order comparison between values that are not numbers is false (LangGraph's in-memory
    store raises there; its Postgres store compares JSONB and finds no match for a missing field).
    """
    if not conditions:
        return True
    return all(_compare(value.get(field), wanted) for field, wanted in conditions.items())


def _compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        if not isinstance(value, dict):
            return False
        return all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(value, wanted)))
    return bool(value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _OPERATORS:
        raise InvalidInput(f"filter: unsupported operator {op!r}; expected one of {list(_OPERATORS)}")
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b
