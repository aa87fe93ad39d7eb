"""Where a collection lives: the stable hash of (database, collection) onto a shard.

The hash must give the same shard in every process, on every machine and after
every restart, so it is a cryptographic digest of an unambiguous encoding of the
two names (never Python's ``hash()``, which is salted per process).
"""

from __future__ import annotations

import hashlib

from ..errors import InvalidInput

__all__ = ["stable_shard"]


def _encode(value: str) -> bytes:
    data = value.encode("utf-8")
    return len(data).to_bytes(8, "big") + data


def stable_shard(database: str, collection: str, shards: int) -> int:
    """The shard (``0 .. shards-1``) of collection ``collection`` of database ``database``.

    The BLAKE2b digest of the two names, each prefixed by its UTF-8 length (so
    ``("ab", "c")`` and ``("a", "bc")`` differ), taken modulo ``shards``.
    """
    if not isinstance(database, str) or not isinstance(collection, str):
        raise InvalidInput(f"stable_shard: expected two names (str), got "
                           f"{type(database).__name__} and {type(collection).__name__}")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidInput(f"shards: expected an integer >= 1, got {shards!r}")
    digest = hashlib.blake2b(_encode(database) + _encode(collection), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
