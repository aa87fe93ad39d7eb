"""The exception hierarchy.

Every error hopmem raises is a :class:`HopmemError`. Each subclass also
inherits the builtin that matches it, so ``except ValueError`` and
``except KeyError`` keep working for code that does not know hopmem.
Abstention is never an exception: it is a value on the result.
"""

from __future__ import annotations

__all__ = [
    "HopmemError",
    "InvalidInput",
    "InvalidConfig",
    "DimensionMismatch",
    "EmptyMemory",
    "NotFound",
    "AlreadyExists",
    "IncompatibleStore",
    "StoreError",
    "CorruptStore",
    "StoreLocked",
    "NotSupported",
]


class HopmemError(Exception):
    """Base class of every error hopmem raises."""


class InvalidInput(HopmemError, ValueError):
    """An argument has the wrong shape, type or value; the message names it."""


class NotSupported(InvalidInput):
    """An operation this object does not offer, e.g. a memory read on a partitioned collection.

    The message says what the object is and what to use instead. A
    :class:`InvalidInput` (so a ``ValueError``): the call, not the data, is
    wrong, and the HTTP server answers it with 400.
    """


class InvalidConfig(InvalidInput):
    """A configuration field is out of range; the message names the field."""


class DimensionMismatch(InvalidInput):
    """A vector's dimension differs from the memory's."""

    def __init__(self, expected: int, got: int, what: str = "vector") -> None:
        self.expected = int(expected)
        self.got = int(got)
        super().__init__(f"dimension mismatch: expected {expected}, got {got} ({what})")


class EmptyMemory(HopmemError, LookupError):
    """A read was asked of a memory that holds no location yet."""

    def __init__(self, message: str = "the memory is empty: write before reading") -> None:
        super().__init__(message)


class NotFound(HopmemError, KeyError):
    """A named database, collection or document does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class AlreadyExists(HopmemError, FileExistsError):
    """Creating something that already exists."""


class StoreError(HopmemError, OSError):
    """The durable store failed; the in-memory state was restored."""


class IncompatibleStore(StoreError):
    """A database was opened with a dimension, config or encoder that differs."""


class CorruptStore(StoreError):
    """The file is not a hopmem database, or it is damaged."""


class StoreLocked(StoreError):
    """The database file is held open for writing by another process (or handle)."""
