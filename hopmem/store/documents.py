"""Documents: what a write with metadata leaves behind, and how to find it again.

A write with metadata creates one document per vector: a stable id (per
collection, ascending, never reused), the exact input vector (read from the
journal entry that wrote it: it is stored once), the metadata (any JSON value)
and the time. **A write without metadata creates no document**: the vectors
still shape the memory, but nothing can resolve back to them.

Deleting a document removes it from :meth:`Documents.get`, :meth:`Documents.list`
and both query modes at once (its posting rows go in the same transaction). It
does **not** un-write the document's contribution to the memory: locations
are superpositions, and reads keep reflecting every vector ever written.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .._deprecation import warn_deprecated
from ..errors import InvalidInput
from .resolution import ResolveMode

__all__ = ["Document", "DocumentHit", "Documents", "DocumentSource", "check_doc_id"]


@dataclass(frozen=True)
class Document:
    """One stored document.

    Attributes
    ----------
    id : int
        Stable within its collection; never reused after a delete.
    metadata : Any
        The JSON value given at write time.
    created_at : float
        Unix time (seconds) of the write that created it.
    vector : numpy.ndarray or None
        The exact float32 input vector (as written, e.g. after centering);
        ``None`` in :meth:`Documents.list` results unless asked for.
    """

    id: int
    metadata: Any
    created_at: float
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """``{id, metadata}``: the HTTP shape."""
        return {"id": self.id, "metadata": self.metadata}


@dataclass(frozen=True)
class DocumentHit:
    """A document found by a query: its id, cosine similarity and metadata."""

    id: int
    similarity: float
    metadata: Any

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "similarity": self.similarity, "metadata": self.metadata}


class DocumentSource(Protocol):
    """What :class:`Documents` needs of its collection (the collection passes one in).

    ``doc_id``, ``offset`` and ``limit`` arrive validated.
    """

    def get(self, doc_id: int, with_vector: bool) -> Document: ...

    def page(self, offset: int, limit: int, vectors: bool) -> builtins.list[Document]: ...

    def delete(self, doc_id: int, write_id: str | None) -> bool: ...

    def count(self) -> int: ...

    def resolve(self, vector: Any, limit: int, mode: ResolveMode) -> builtins.list[DocumentHit]: ...


def check_doc_id(doc_id: Any) -> int:
    if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)):
        raise InvalidInput(f"document id: expected an integer, got {type(doc_id).__name__}")
    return int(doc_id)


class Documents:
    """The documents of one collection (``collection.documents``).

    Reads run on the calling thread's own SQLite connection and never wait for
    a writer (WAL); deletes are serialised with the collection's writes.
    """

    def __init__(self, source: DocumentSource) -> None:
        self._c = source

    def get(self, doc_id: int, *, vector: bool = True) -> Document:
        """The document with this id; :class:`~hopmem.errors.NotFound` if none.

        ``vector=False`` skips reading the stored vector.
        """
        return self._c.get(check_doc_id(doc_id), vector)

    def list(self, offset: int = 0, limit: int = 100, *, vectors: bool = False) -> list[Document]:
        """Documents in id order, from ``offset`` (0-based), at most ``limit`` (1..10,000)."""
        for name, value, low in (("offset", offset, 0), ("limit", limit, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise InvalidInput(f"{name}: expected an integer >= {low}, got {value!r}")
        if limit > 10_000:
            raise InvalidInput(f"limit: expected at most 10000, got {limit}")
        return self._c.page(int(offset), int(limit), vectors)

    def delete(self, doc_id: int, *, write_id: str | None = None) -> bool:
        """Delete a document; True if it existed. Idempotent.

        The memory is not changed: a written vector stays superposed in its
        locations; the document just stops being found. With ``write_id``
        (see :meth:`Collection.write <hopmem.store.Collection.write>`) a
        repeat answers what the first call answered (True if that one
        deleted it).
        """
        return self._c.delete(check_doc_id(doc_id), write_id)

    def query(self, vector: Any, limit: int = 10, mode: ResolveMode = "exact",
              **deprecated: Any) -> builtins.list[DocumentHit]:
        """Deprecated: use :meth:`Collection.resolve <hopmem.store.Collection.resolve>`.

        The same function, with the same defaults (``mode="exact"``); ``n=``
        is a deprecated name of ``limit``.
        """
        unknown = set(deprecated) - {"n"}
        if unknown:
            raise TypeError(f"Documents.query() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        if "n" in deprecated and limit != 10:
            raise TypeError("Documents.query() got multiple values for argument 'limit'")
        # One warning for the old function and its old keyword together.
        warn_deprecated("Collection.documents.query", "Collection.resolve" + (
            " (limit= instead of n=)" if "n" in deprecated else ""))
        return self._c.resolve(vector, deprecated.get("n", limit), mode)

    def count(self) -> int:
        """The number of live documents."""
        return self._c.count()

    def __len__(self) -> int:
        return self.count()

    def __contains__(self, doc_id: object) -> bool:
        try:
            self._c.get(check_doc_id(doc_id), False)
        except (KeyError, ValueError):
            return False
        return True

    def __iter__(self) -> Iterator[Document]:
        offset = 0
        while True:
            page = self.list(offset, 1000)
            if not page:
                return
            yield from page
            offset += len(page)
