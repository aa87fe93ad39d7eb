"""Where things live: stable hashes of names and keys onto shards and partitions.

A hash must give the same answer in every process, on every machine and after
every restart, so it is a BLAKE2b digest of an unambiguous encoding (each
field prefixed by its length; never Python's ``hash()``, which is salted per
process). A change here would move collections between shards, so the values
are pinned by tests.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import InvalidInput

__all__ = ["stable_hash", "stable_shard"]


def _hash64(*fields: bytes) -> int:
    digest = hashlib.blake2b(digest_size=8, person=b"hopmem.place")
    for data in fields:
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return int.from_bytes(digest.digest(), "big")


def stable_hash(key: str | bytes | int) -> int:
    """A 64-bit hash of ``key`` (its kind included, so ``"1"``, ``b"1"`` and ``1`` differ)."""
    if isinstance(key, str):
        return _hash64(b"s", key.encode("utf-8"))
    if isinstance(key, bytes):
        return _hash64(b"b", key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return _hash64(b"i", str(int(key)).encode("ascii"))
    raise InvalidInput(f"key: expected a str, bytes or int, got {type(key).__name__}")


def stable_shard(database: str, collection: str, shards: int) -> int:
    """The shard (``0 .. shards-1``) of collection ``collection`` of database ``database``.

    The hash of the two names (UTF-8, each length-prefixed, so ``("ab", "c")``
    and ``("a", "bc")`` differ) modulo ``shards``.
    """
    for name, value in (("database", database), ("collection", collection)):
        if not isinstance(value, str):
            raise InvalidInput(f"{name}: expected a str, got {type(value).__name__}")
    if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
        raise InvalidInput(f"shards: expected an integer >= 1, got {shards!r}")
    return _hash64(database.encode("utf-8"), collection.encode("utf-8")) % int(shards)
