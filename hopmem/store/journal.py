"""Journal entries, checkpoints and the deterministic replay that rebuilds a memory.

The state of a collection is a pure function of its config and its journal
(the kernel is deterministic), so the journal of input vectors is the source of
truth and a checkpoint is only a cache of the state after entry ``seq``.
Rebuilding = load the latest checkpoint (CRC-checked), then replay the entries
after it in order, checking each entry's CRC and, after applying it, that the
memory's scalars (writes, next id, number of locations, eta, generator state)
equal the ones recorded when the entry was first written. Any difference is a
:class:`~hopmem.errors.CorruptStore` naming the entry.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine._state import Snapshot, restore_capacity
from ..engine.config import MemoryConfig
from ..engine.memory import Memory, Scalars
from ..errors import CorruptStore
from .schema import KIND_COMPRESS, KIND_WRITE

try:  # ISA-L's CRC-32 (SIMD: about 4x zlib's speed on a journal entry), the same values as zlib's
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - a dependency wherever it has wheels
    from zlib import crc32

__all__ = ["crc32", "to_signed64", "to_unsigned64", "le_blob", "vectors_blob", "vectors_from_blob",
           "save_checkpoint", "load_checkpoint", "Rebuilt", "rebuild", "CHECKPOINT_PART_BYTES"]

_MASK64 = (1 << 64) - 1
#: Upper bound of one checkpoint part's bytes. Small parts make loading a
#: large checkpoint cheap: each part's blobs are freed before the next is
#: fetched, and blobs this size are recycled by the allocator instead of being
#: mapped fresh each time (first touches of fresh pages were most of a reopen:
#: 17,466 locations at d = 384 reopened in 0.08-0.10 s from 1 MB parts, against
#: 0.18-0.50 s from 32 MB parts). Files with other part sizes load the same.
CHECKPOINT_PART_BYTES = 1 << 20


def to_signed64(value: int) -> int:
    """A uint64 as the int64 SQLite can store."""
    value &= _MASK64
    return value - (1 << 64) if value >= (1 << 63) else value


def to_unsigned64(value: int) -> int:
    return int(value) & _MASK64


def le_blob(a: np.ndarray, dtype: str) -> bytes | memoryview:
    """The bytes of ``a`` as the little-endian ``dtype``, row-major.

    A view of ``a`` itself when it already is exactly that (the usual case: a
    batch's ~150 KB or a checkpoint's megabytes are not copied here; SQLite
    copies a bound blob), bytes otherwise (an empty array too: a memoryview
    with a zero in its shape cannot be cast).
    """
    if a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.size:
        return a.data.cast("B")  # a.data is memoryview(a)
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def vectors_blob(X: np.ndarray) -> bytes | memoryview:
    """Little-endian float32 row-major bytes of a ``(n, d)`` batch."""
    return le_blob(X, "<f4")


def vectors_from_blob(blob: bytes, n: int, dim: int, where: str) -> np.ndarray:
    if blob is None or len(blob) != 4 * n * dim:
        got = "nothing" if blob is None else f"{len(blob)} bytes"
        raise CorruptStore(f"{where}: expected {4 * n * dim} bytes of vectors "
                           f"({n} x {dim} float32), got {got}")
    # A read-only view of the blob where float32 is little-endian (no copy).
    return np.frombuffer(blob, dtype="<f4").astype(np.float32, copy=False).reshape(n, dim)


# -- checkpoints ------------------------------------------------------------------------------

def save_checkpoint(conn: sqlite3.Connection, cid: int, seq: int, snap: Snapshot,
                    dim: int) -> int:
    """Replace collection ``cid``'s checkpoint with ``snap`` (state after ``seq``).

    The caller owns the transaction. Returns the bytes written.
    """
    size = int(snap.ids.shape[0])
    rows_per_part = max(1, CHECKPOINT_PART_BYTES // (dim * 12 + 16))
    conn.execute("DELETE FROM checkpoint_parts WHERE cid = ?", (cid,))
    crc = 0
    total = 0
    starts = list(range(0, size, rows_per_part)) or [0]
    for part, start in enumerate(starts):
        stop = min(size, start + rows_per_part)
        blobs = (
            le_blob(snap.ids[start:stop], "<i8"),
            le_blob(snap.addresses[start:stop], "<f4"),
            le_blob(snap.counters[start:stop], "<f8"),
            le_blob(snap.weights[start:stop], "<f8"),
        )
        for b in blobs:
            crc = crc32(b, crc)
            total += len(b)
        conn.execute("INSERT INTO checkpoint_parts (cid, part, ids, addresses, counters, weights)"
                     " VALUES (?, ?, ?, ?, ?, ?)", (cid, part, *blobs))
    conn.execute(
        "INSERT OR REPLACE INTO checkpoints (cid, seq, size, eta, writes, next_id, rng, parts, "
        "crc, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (cid, seq, size, float(snap.eta), int(snap.writes), int(snap.next_id),
         to_signed64(snap.rng), len(starts), crc, time.time()))
    return total


def load_checkpoint(conn: sqlite3.Connection, cid: int, dim: int,
                    where: str) -> tuple[int, Snapshot] | None:
    """The latest checkpoint of ``cid`` as ``(seq, snapshot)``, or None.

    The snapshot's arrays are the first rows of larger ones, ready for
    ``State.adopt``; it is a valid snapshot either way.
    """
    row = conn.execute(
        "SELECT seq, size, eta, writes, next_id, rng, parts, crc FROM checkpoints WHERE cid = ?",
        (cid,)).fetchone()
    if row is None:
        return None
    seq, size, eta, writes, next_id, rng, parts, crc_expected = row
    if not 0 <= size < 1 << 40:
        raise CorruptStore(f"{where}: checkpoint records {size} locations")
    # Allocated with the headroom a restored state gets, so that the memory can
    # take these arrays over instead of copying them (State.adopt).
    cap = restore_capacity(size)
    ids = np.zeros(cap, np.int64)[:size]
    addresses = np.zeros((cap, dim), np.float32)[:size]
    counters = np.zeros((cap, dim), np.float64)[:size]
    weights = np.zeros(cap, np.float64)[:size]
    crc = 0
    count = 0
    at = 0
    for part, b_ids, b_addr, b_cnt, b_w in conn.execute(
            "SELECT part, ids, addresses, counters, weights FROM checkpoint_parts "
            "WHERE cid = ? ORDER BY part", (cid,)):
        if part != count:
            raise CorruptStore(f"{where}: checkpoint part {count} is missing")
        count += 1
        for b in (b_ids, b_addr, b_cnt, b_w):
            crc = crc32(b, crc)
        n = len(b_ids) // 8
        if len(b_ids) != 8 * n or len(b_addr) != 4 * n * dim or len(b_cnt) != 8 * n * dim \
                or len(b_w) != 8 * n or at + n > size:
            raise CorruptStore(f"{where}: checkpoint part {part} has inconsistent sizes")
        ids[at:at + n] = np.frombuffer(b_ids, "<i8")
        addresses[at:at + n] = np.frombuffer(b_addr, "<f4").reshape(n, dim)
        counters[at:at + n] = np.frombuffer(b_cnt, "<f8").reshape(n, dim)
        weights[at:at + n] = np.frombuffer(b_w, "<f8")
        at += n
    if count != parts:
        raise CorruptStore(f"{where}: checkpoint has {count} of its {parts} parts")
    if crc_expected is not None and crc != crc_expected:
        raise CorruptStore(f"{where}: checkpoint at entry {seq} fails its CRC check")
    if at != size:
        raise CorruptStore(f"{where}: checkpoint holds {at} locations, recorded {size}")
    snap = Snapshot(ids=ids, addresses=addresses, counters=counters, weights=weights,
                    eta=float(eta), writes=int(writes), next_id=int(next_id),
                    rng=to_unsigned64(rng))
    return int(seq), snap


# -- replay ------------------------------------------------------------------------------------

@dataclass
class Rebuilt:
    """A memory rebuilt from disk and what it took."""

    memory: Memory
    seq: int                 # last journal entry applied
    checkpoint_seq: int      # entry the checkpoint covered (0: none)
    replayed_entries: int
    replayed_vectors: int
    replay_seconds: float    # engine time spent replaying (what a checkpoint would save)


def check_after(where: str, seq: int, scalars: Scalars, row: tuple[Any, ...]) -> None:
    """Raise CorruptStore unless the memory's scalars after entry ``seq`` equal the recorded ``row``."""
    writes, next_id, size, eta, rng = row
    expected = (int(writes), int(next_id), int(size), float(eta), to_unsigned64(rng))
    got = (scalars.writes, scalars.next_id, scalars.size, scalars.eta, to_unsigned64(scalars.rng))
    if got != expected:
        names = ("writes", "next_id", "locations", "eta", "rng")
        diff = ", ".join(f"{k} {g!r} (recorded {e!r})"
                         for k, g, e in zip(names, got, expected) if g != e)
        raise CorruptStore(
            f"{where}: replaying journal entry {seq} gave {diff}; the file is damaged or was "
            f"written by an incompatible build of the kernel")


def rebuild(conn: sqlite3.Connection, cid: int, config: MemoryConfig, where: str,
            backend: str = "native") -> Rebuilt:
    """Checkpoint + journal replay, verified; the caller holds a read transaction."""
    dim = config.dim
    loaded = load_checkpoint(conn, cid, dim, where)
    if loaded is None:
        ckpt_seq, memory = 0, Memory.from_config(config, backend=backend)  # type: ignore[arg-type]
    else:
        ckpt_seq, snap = loaded
        try:
            memory = Memory.adopting(config, snap, backend=backend)  # type: ignore[arg-type]
        except ValueError as exc:
            raise CorruptStore(f"{where}: checkpoint does not fit the config: {exc}") from exc
    seq = ckpt_seq
    entries = vectors = 0
    engine_s = 0.0
    cursor = conn.execute(
        "SELECT seq, kind, n, vectors, arg, crc, writes_after, next_id_after, size_after, "
        "eta_after, rng_after FROM journal WHERE cid = ? AND seq > ? ORDER BY seq",
        (cid, ckpt_seq))
    for row in cursor:
        entry, kind, n, blob, arg, crc = row[:6]
        if entry != seq + 1:
            raise CorruptStore(f"{where}: journal entry {seq + 1} is missing (next is {entry})")
        seq = entry
        t0 = time.perf_counter()
        if kind == KIND_WRITE:
            if crc is not None and (blob is None or crc32(blob) != crc):
                raise CorruptStore(f"{where}: journal entry {entry} fails its CRC check")
            X = vectors_from_blob(blob, n, dim, f"{where}: journal entry {entry}")
            with memory.exclusive():
                memory.write_exclusive(X)
            vectors += n
        elif kind == KIND_COMPRESS:
            memory.compress(None if arg is None else int(arg))
        else:
            raise CorruptStore(f"{where}: journal entry {entry} has unknown kind {kind!r}")
        engine_s += time.perf_counter() - t0
        entries += 1
        check_after(where, entry, memory.scalars(), row[6:])
    return Rebuilt(memory, seq, ckpt_seq, entries, vectors, engine_s)
