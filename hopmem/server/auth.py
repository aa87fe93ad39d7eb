"""API keys: created by ``hopmem keys``, checked by the server.

A key is a random token ``hm_<key id>_<secret>``, shown once when created. The
file ``<data dir>/keys.sqlite`` stores only its SHA-256 (and the key id, scope
and timestamps), so reading the file does not reveal a usable key. A key's
scope is one database name, or ``*`` for every database and for database
management (``POST /db``, ``DELETE /db/{db}``).

The server keeps the active keys in memory and reloads them when another
connection commits to the file (``PRAGMA data_version``), so ``keys create`` and ``keys revoke``
take effect on a running server without a restart.

When auth applies (see ``AuthPolicy``): a missing or unknown key is 401, a key
used outside its scope is 403.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ALL", "KeyStore", "KeyInfo", "AuthPolicy", "KEYS_FILE", "AUTH_MODES"]

ALL = "*"
KEYS_FILE = "keys.sqlite"
AUTH_MODES = ("auto", "on", "off")
_PREFIX = "hm_"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id     TEXT PRIMARY KEY,
    hash       TEXT NOT NULL,
    scope      TEXT NOT NULL,
    label      TEXT,
    created_at REAL NOT NULL,
    revoked_at REAL
)
"""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    scope: str
    label: str | None
    created_at: float
    revoked_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class KeyStore:
    """The key file: create, list, revoke, verify."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / KEYS_FILE
        self._lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._inode: tuple[int, int] | None = None
        self._version: int | None = None
        self._active: dict[str, tuple[str, str]] = {}  # key_id -> (hash, scope)

    # -- file ---------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():  # owner-only from the start, not chmod-ed afterwards
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        conn.execute(_SCHEMA)
        return conn

    def create(self, scope: str, label: str | None = None) -> tuple[KeyInfo, str]:
        """A new key for ``scope`` (a database name or ``*``): its info and the token."""
        key_id = secrets.token_hex(6)
        token = f"{_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        info = KeyInfo(key_id, scope, label, time.time(), None)
        conn = self._connect()
        try:
            conn.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, NULL)",
                         (key_id, _hash(token), scope, label, info.created_at))
        finally:
            conn.close()
        return info, token

    def list(self, include_revoked: bool = False) -> list[KeyInfo]:
        if not self.path.exists():
            return []
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT key_id, scope, label, created_at, revoked_at FROM api_keys "
                + ("" if include_revoked else "WHERE revoked_at IS NULL ")
                + "ORDER BY created_at").fetchall()
        finally:
            conn.close()
        return [KeyInfo(*row) for row in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke by key id (or by the whole token); False if no active key matched."""
        if key_id.startswith(_PREFIX) and key_id.count("_") >= 2:
            key_id = key_id[len(_PREFIX):].split("_", 1)[0]
        if not self.path.exists():
            return False
        conn = self._connect()
        try:
            cur = conn.execute("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND "
                               "revoked_at IS NULL", (time.time(), key_id))
            return cur.rowcount > 0
        finally:
            conn.close()

    # -- server side -----------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Reload the active keys if another connection committed since the last look.

        ``PRAGMA data_version`` on a connection kept open changes whenever any
        other connection commits, so a revoke is seen on the next request; the
        inode check catches the file being replaced or removed.
        """
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._close_reader()
                self._active = {}
                return
            inode = (st.st_dev, st.st_ino)
            if self._reader is None or inode != self._inode:
                self._close_reader()
                self._reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                               timeout=10.0, check_same_thread=False)
                self._inode = inode
                self._version = None
            try:
                version = self._reader.execute("PRAGMA data_version").fetchone()[0]
                if version == self._version:
                    return
                active: dict[str, tuple[str, str]] = {}
                for key_id, digest, scope in self._reader.execute(
                        "SELECT key_id, hash, scope FROM api_keys WHERE revoked_at IS NULL"):
                    active[key_id] = (digest, scope)
            except sqlite3.OperationalError:  # file created, schema not written yet
                self._close_reader()
                self._active = {}
                return
            self._active = active
            self._version = version

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader = None
        self._inode = None
        self._version = None

    def has_active_keys(self) -> bool:
        self._refresh()
        return bool(self._active)

    def verify(self, token: str) -> str | None:
        """The scope of a valid, unrevoked token; None otherwise (constant-time compare)."""
        self._refresh()
        key_id = ""
        if token.startswith(_PREFIX):
            key_id = token[len(_PREFIX):].split("_", 1)[0]
        entry = self._active.get(key_id)
        digest = _hash(token)
        expected = entry[0] if entry else "0" * 64
        ok = hmac.compare_digest(digest, expected)
        return entry[1] if ok and entry else None


def token_from_headers(headers: Any) -> str | None:
    """The key from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``."""
    value = headers.get("authorization")
    if value:
        scheme, _, rest = value.partition(" ")
        if scheme.lower() == "bearer" and rest.strip():
            return rest.strip()
        return None
    value = headers.get("x-api-key")
    return value.strip() if value else None


def is_loopback(host: str) -> bool:
    import ipaddress
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AuthPolicy:
    """Whether a request needs a key, and whether its key covers a database.

    ``mode="auto"`` (default): keys are required when the server binds any
    non-loopback address, and on loopback as soon as at least one active key
    exists (creating the first key turns auth on; revoking the last turns it
    off). ``"on"``: always required. ``"off"``: never (refused off loopback).
    """

    def __init__(self, keys: KeyStore, mode: str = "auto", loopback: bool = True) -> None:
        if mode not in AUTH_MODES:
            raise ValueError(f"auth: expected one of {', '.join(AUTH_MODES)}, got {mode!r}")
        if mode == "off" and not loopback:
            raise ValueError("auth 'off' is only allowed when binding a loopback address")
        self.keys = keys
        self.mode = mode
        self.loopback = loopback

    @property
    def always(self) -> bool:
        return self.mode == "on" or (self.mode == "auto" and not self.loopback)

    def enabled(self) -> bool:
        if self.mode == "off":
            return False
        return self.always or self.keys.has_active_keys()
