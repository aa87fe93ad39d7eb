"""The embedded durable store: SQLite files of collections, journals and documents.

Nothing to start: one file per database (``hopmem.open``), or a directory of
named databases (``hopmem.DataDir``). Each collection is a
:class:`~hopmem.engine.memory.Memory` whose writes are journaled and committed before
they return, plus the documents written with metadata and their index.

Modules
-------
Each module imports only those listed before it:

names, schema, _sqlite
    Name validation; the file layout, its version and the ordered
    migrations; SQLite connections, error mapping and the lock file.
journal
    Journal entries, checkpoints, and the verified deterministic replay.
dbfile
    The open file (internal): connections, transactions, recorded settings,
    :class:`EncoderInfo`.
documents
    :class:`Document`, :class:`DocumentHit` and the ``collection.documents`` view.
portable
    Export and import of a collection as a portable ZIP file.
collection
    :class:`Collection`: the memory API, durable writes, documents, resolution.
database
    :class:`Database` and :func:`open`; the design notes (journal and
    checkpoints, durability, locking, threads).
datadir
    :class:`DataDir`: named databases in one directory.

Measured
--------
``benchmarks/store_bench.py`` on 2 shared CPUs (load ~1, the kernel on its
default 2 threads), default config, clustered data, the collection pre-filled
with 2,000 vectors: one run, and the range over repeated runs (details in
``docs/store.md``)::

    measure                                   wall (one run)  range
    single durable write, d=384 (826 loc.)    0.236 ms        0.15-0.26 ms
    batch of 100, d=384 (1,481 loc.)          30.4k vec/s     22.3-42.7k vec/s
      ... with metadata (2,131 loc.)          18.9k vec/s     15.5-23.9k vec/s
    batch of 100, d=128 (2,193 loc.)          60.1k vec/s     48-75k vec/s
    HeatherDB, published, d=128               3.7 ms single; 0.12 ms/vector in batches of 100
    reopen after 100,000 writes (17,466 loc.) 0.215 s         0.19-0.30 s (clean close)
      ... in a fresh process                  0.078 s         0.053-0.078 s
      ... after a crash (10 entries replayed) 0.306 s         0.25-0.44 s
    disk per written vector, d=384            2,578 B with metadata (1,536 B vector,
                                              172 B document, 808 B checkpoint share)

The write paths are bound by the engine (its cost grows with the number of
locations); the store adds 0.3-0.6 ms to a batch of 100 without metadata and
1.2-2.2 ms with it (the document rows and their JSON). Reopening after a crash
replays the journal since the last checkpoint at the engine's speed, bounded
by the checkpoint policy (see :mod:`hopmem.store.database`).
"""

from __future__ import annotations

from ..errors import StoreLocked
from .collection import Collection, CollectionStats, StoredWriteResult
from .database import Database, open
from .datadir import DataDir
from .dbfile import EncoderInfo
from .documents import Document, DocumentHit, Documents
from .schema import SCHEMA_VERSION

__all__ = [
    "open", "Database", "DataDir", "Collection", "CollectionStats", "StoredWriteResult",
    "Document", "DocumentHit", "Documents", "EncoderInfo", "StoreLocked", "SCHEMA_VERSION",
]
