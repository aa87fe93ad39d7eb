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

Measured
--------
``benchmarks/store_bench.py`` on 2 shared CPUs (load ~3: wall times are noisy,
the CPU column is the steadier one); default config, clustered data, the
collection pre-filled with 2,000 vectors::

    measure                                   wall         CPU         engine alone
    single durable write, d=384 (826 loc.)    0.155 ms     0.155 ms    0.076 ms
      ... with metadata                       0.35 ms      0.35 ms     0.12 ms
      ... synchronous="full"                  0.49 ms      0.31 ms     0.075 ms
    batch of 100, d=384 (1,481 loc.)          6.2k vec/s   12.0k vec/s 13.7k vec/s
    batch of 100, d=128 (2,193 loc.)          26.9k vec/s  26.9k vec/s 26.8k vec/s
    HeatherDB, published, d=128               3.7 ms single; 0.12 ms/vector in batches of 100
    reopen after 100,000 writes (17,466 loc.) 0.78 s       0.54 s      (clean close)
    first document query after that reopen    0.99 s       0.60 s      (loads the indexes)
    document query over 100,000 docs          indexed 3.5 ms, exact 14 ms
    disk per written vector, d=384            2,571 B with metadata (1,536 B vector,
                                              172 B document, 808 B checkpoint share);
                                              1,560 B without metadata or checkpoint

The write paths are bound by the engine (its cost grows with the number of
locations); the store adds ~0.08 ms per single write, ~10-15 % to a batch
without metadata and ~35-40 % with metadata. Reopening after a crash replays
the journal since the last checkpoint at the engine's speed (1,000 vectors at
17,466 locations: 5 s wall), bounded by the checkpoint policy (see
:mod:`hopmem.store.database`).
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
