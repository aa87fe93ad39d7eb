"""The embedded durable store: SQLite files of collections, journals and documents.

Nothing to start: one file per database (``hopmem.open``), or a directory of
named databases (``hopmem.DataDir``). Each collection is a
:class:`~hopmem.memory.Memory` whose writes are journaled and committed before
they return, plus the documents written with metadata and their index.

Modules
-------
database
    :class:`Database` and :func:`open`; the design notes (journal and
    checkpoints, durability, locking, threads).
collection
    :class:`Collection`: the memory API, durable writes, documents, resolution.
documents
    :class:`Document`, :class:`DocumentHit` and the ``collection.documents`` view.
journal
    Journal entries, checkpoints, and the verified deterministic replay.
schema
    The file layout, its version and the ordered migrations.
portable
    Export and import of a collection as a portable ZIP file.
datadir
    :class:`DataDir`: named databases in one directory.
"""

from __future__ import annotations

from ..errors import StoreLocked
from .collection import Collection, CollectionStats, StoredWriteResult
from .database import Database, EncoderInfo, open
from .datadir import DataDir
from .documents import Document, DocumentHit, Documents
from .schema import SCHEMA_VERSION

__all__ = [
    "open", "Database", "DataDir", "Collection", "CollectionStats", "StoredWriteResult",
    "Document", "DocumentHit", "Documents", "EncoderInfo", "StoreLocked", "SCHEMA_VERSION",
]
