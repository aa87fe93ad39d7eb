"""Validation of database and collection names (clear errors, never a silent fix)."""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidInput

__all__ = ["DATABASE_NAME", "DATABASE_NAME_PATTERN", "check_database_name", "check_collection_name",
           "COLLECTION_NAME_MAX"]

#: Database names, the one definition (the HTTP server and its OpenAPI schema use it too):
#: a lowercase letter, then up to 62 of ``a-z 0-9 _ -``. Match with ``fullmatch``.
DATABASE_NAME_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
DATABASE_NAME = re.compile(DATABASE_NAME_PATTERN)
COLLECTION_NAME_MAX = 128


def check_database_name(name: Any) -> str:
    """Return ``name`` if it is a valid database name, else raise InvalidInput."""
    if not isinstance(name, str):
        raise InvalidInput(f"database name: expected a string, got {type(name).__name__}")
    if not DATABASE_NAME.fullmatch(name):
        raise InvalidInput(
            f"database name: expected a lowercase letter followed by up to 62 of a-z, 0-9, "
            f"'_' and '-' (pattern {DATABASE_NAME_PATTERN}), got {name!r}")
    return name


def check_collection_name(name: Any) -> str:
    """Return ``name`` if it is a valid collection name, else raise InvalidInput.

    1 to 128 characters; no control characters; no ``/`` or ``\\``; not ``.``
    or ``..``; no leading or trailing whitespace.
    """
    if not isinstance(name, str):
        raise InvalidInput(f"collection name: expected a string, got {type(name).__name__}")
    if not 1 <= len(name) <= COLLECTION_NAME_MAX:
        raise InvalidInput(
            f"collection name: expected 1 to {COLLECTION_NAME_MAX} characters, got {len(name)}")
    bad = next((c for c in name if ord(c) < 32 or 0x7F <= ord(c) < 0xA0), None)
    if bad is not None:
        raise InvalidInput(
            f"collection name: control characters are not allowed, got {name!r}")
    if "/" in name or "\\" in name:
        raise InvalidInput(f"collection name: '/' and '\\' are not allowed, got {name!r}")
    if name in (".", ".."):
        raise InvalidInput(f"collection name: {name!r} is reserved")
    if name != name.strip():
        raise InvalidInput(
            f"collection name: leading or trailing whitespace is not allowed, got {name!r}")
    return name
