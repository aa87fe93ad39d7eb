"""Export and import of one collection as a portable file.

The file is a ZIP archive (ZIP64) readable with nothing but ``zipfile``,
``json`` and NumPy:

``manifest.json``
    ``{"format": "hopmem-collection", "version": 1, "name", "dim", "config",
    "centering", "gate", "encoder", "entries", "vectors", "documents",
    "next_doc_id", "exported_at", "hopmem_version"}``.
``journal.jsonl``
    One line per journal entry, in order: ``{"seq", "kind": "write", "n",
    "created_at"}`` or ``{"seq", "kind": "compress", "max_locations"}``. The
    vectors of the write entries are the consecutive rows of ``vectors.npy``.
``vectors.npy``
    Every vector ever written, float32 little-endian ``(vectors, dim)``, in
    write order (documents that were deleted keep their rows: their vectors
    shaped the memory).
``documents.jsonl``
    One line per live document: ``{"id", "row", "metadata", "created_at"}``;
    ``row`` indexes ``vectors.npy``.

Importing replays the journal with the same batch boundaries, so the imported
memory is bit-identical to the exported one, and the documents keep their ids.
An import is one transaction: all of it or nothing.

This module needs only the open file (:class:`~hopmem.store.dbfile.DatabaseFile`),
so both :meth:`Collection.export <hopmem.store.Collection.export>` and
:class:`~hopmem.store.Database`'s ``export_collection`` and
``import_collection`` build on it; :func:`export_collection` and
:func:`import_collection` here call those methods.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeVar

import numpy as np

from ..engine.config import MemoryConfig
from ..engine.memory import Memory
from ..errors import CorruptStore, IncompatibleStore, NotFound
from . import journal
from .dbfile import DatabaseFile, hopmem_version
from .names import check_collection_name
from .schema import KIND_COMPRESS, KIND_WRITE

__all__ = ["FORMAT", "VERSION", "export_collection", "import_collection", "read_manifest",
           "write_export", "plan_import", "run_import", "ImportPlan", "Imported"]

FORMAT = "hopmem-collection"
VERSION = 1

Progress = Callable[[int], Any] | None
_Collection = TypeVar("_Collection", covariant=True)


class Exporter(Protocol):
    """A database that exports collections (:class:`hopmem.store.Database`)."""

    def export_collection(self, name: str, path: str | os.PathLike[str], *,
                          progress: Progress = None) -> dict[str, Any]: ...


class Importer(Protocol[_Collection]):
    """A database that imports collections (:class:`hopmem.store.Database`)."""

    def import_collection(self, path: str | os.PathLike[str], name: str | None = None, *,
                          progress: Progress = None) -> _Collection: ...


def export_collection(db: Exporter, name: str, path: str | os.PathLike[str], *,
                      progress: Progress = None) -> dict[str, Any]:
    """Write collection ``name`` of ``db`` to the portable file ``path``; returns the manifest.

    The same as ``db.export_collection(name, path, progress=progress)``.
    """
    return db.export_collection(name, path, progress=progress)


def import_collection(db: Importer[_Collection], path: str | os.PathLike[str],
                      name: str | None = None, *, progress: Progress = None) -> _Collection:
    """Create a collection in ``db`` from the portable file ``path``; returns it.

    The same as ``db.import_collection(path, name, progress=progress)``.
    """
    return db.import_collection(path, name, progress=progress)


def write_export(db: DatabaseFile, name: str, path: str | os.PathLike[str], *,
                 progress: Progress = None) -> dict[str, Any]:
    """Write collection ``name`` of the open file ``db`` to the portable file ``path``.

    Reads one consistent view of the collection (writes may go on meanwhile).
    ``progress(k)`` is called as each ``k`` vectors are written out (a
    ``tqdm.update`` fits). Returns the manifest.
    """
    check_collection_name(name)
    db.check_open()
    target = os.path.abspath(os.fspath(path))
    tmp = f"{target}.tmp-{os.getpid()}"
    where = f"export of collection {name!r} of {db.path}"
    try:
        with db.read_transaction(where) as conn:
            row = conn.execute(
                "SELECT cid, config, centering, gate, next_doc_id FROM collections WHERE name = ?",
                (name,)).fetchone()
            if row is None:
                raise NotFound(f"collection {name!r} not found in database {db.name!r}")
            cid, config_text, centering, gate, next_doc_id = row
            entries = conn.execute(
                "SELECT jid, seq, kind, n, arg, crc, created_at FROM journal WHERE cid = ? "
                "ORDER BY seq", (cid,)).fetchall()
            total = sum(e[3] for e in entries if e[2] == KIND_WRITE)
            first_row: dict[int, int] = {}
            row_at = 0
            for jid, _, kind, n, *_ in entries:
                if kind == KIND_WRITE:
                    first_row[jid] = row_at
                    row_at += n
            docs = conn.execute(
                "SELECT doc_id, jid, pos, metadata, created_at FROM documents WHERE cid = ? "
                "ORDER BY doc_id", (cid,)).fetchall()
            manifest = {
                "format": FORMAT, "version": VERSION, "name": name, "dim": db.dim,
                "config": json.loads(config_text),
                "centering": None if centering is None else json.loads(centering),
                "gate": None if gate is None else json.loads(gate),
                "encoder": None if db.encoder is None else db.encoder.to_dict(),
                "entries": len(entries), "vectors": total, "documents": len(docs),
                "next_doc_id": int(next_doc_id), "exported_at": time.time(),
                "hopmem_version": hopmem_version(),
            }
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED,
                                 allowZip64=True) as zf:
                zf.writestr("manifest.json", json.dumps(manifest, indent=1))
                lines = []
                for _jid, seq, kind, n, arg, _, created in entries:
                    if kind == KIND_WRITE:
                        lines.append({"seq": seq, "kind": "write", "n": n, "created_at": created})
                    else:
                        lines.append({"seq": seq, "kind": "compress", "max_locations": arg})
                zf.writestr("journal.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
                zf.writestr("documents.jsonl", "".join(
                    json.dumps({"id": d, "row": first_row[j] + p, "metadata": json.loads(m),
                                "created_at": t}, ensure_ascii=False) + "\n"
                    for d, j, p, m, t in docs))
                info = zipfile.ZipInfo("vectors.npy", time.localtime()[:6])
                info.compress_type = zipfile.ZIP_STORED  # float noise does not compress
                with zf.open(info, "w", force_zip64=True) as out:
                    header = {"descr": "<f4", "fortran_order": False, "shape": (total, db.dim)}
                    np.lib.format.write_array_header_2_0(out, header)
                    for jid, seq, kind, n, _arg, crc, _ in entries:
                        if kind != KIND_WRITE:
                            continue
                        blob = conn.execute("SELECT vectors FROM journal WHERE jid = ?",
                                            (jid,)).fetchone()[0]
                        if blob is None or len(blob) != 4 * n * db.dim or (
                                crc is not None and journal.crc32(blob) != crc):
                            raise CorruptStore(f"{where}: journal entry {seq} is damaged")
                        out.write(blob)
                        if progress is not None:
                            progress(n)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a portable file (validated format and version)."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as zf:
            manifest = json.loads(zf.read("manifest.json"))
    except FileNotFoundError:
        raise NotFound(f"{path}: no such file") from None
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise CorruptStore(f"{path}: not a hopmem collection export ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptStore(f"{path}: not a hopmem collection export (format "
                           f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != VERSION:
        raise IncompatibleStore(f"{path}: export format version {manifest.get('version')!r}, "
                                f"this hopmem reads version {VERSION}")
    return manifest


def _read_npy_header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except ValueError as exc:
        raise CorruptStore(f"{where}: vectors.npy is not a NumPy file ({exc})") from exc
    if fortran or dtype != np.dtype("<f4") or len(shape) != 2:
        raise CorruptStore(f"{where}: vectors.npy: expected C-order little-endian float32 (n, d), "
                           f"got {dtype} {shape} fortran={fortran}")
    return shape, dtype


@dataclass(frozen=True)
class ImportPlan:
    """A portable file checked against the database it goes into (:func:`plan_import`)."""

    source: str
    name: str
    manifest: dict[str, Any]
    config: MemoryConfig
    where: str


@dataclass
class Imported:
    """What :func:`run_import` created: the collection's record and its rebuilt memory."""

    cid: int
    name: str
    config: MemoryConfig
    rebuilt: journal.Rebuilt
    next_doc_id: int
    doc_count: int
    centering: Any
    gate: Any


def plan_import(db: DatabaseFile, path: str | os.PathLike[str], name: str | None = None) -> ImportPlan:
    """Read and check the portable file ``path`` for an import into ``db`` (nothing is written).

    ``name`` defaults to the exported name. The dimension must equal the
    database's, and when both sides recorded an encoder fingerprint they must
    match.
    """
    src = os.fspath(path)
    manifest = read_manifest(src)
    name = check_collection_name(name if name is not None else manifest.get("name"))
    where = f"import of {src} into {db.path}"
    db.check_writable(f"import collection {name!r}")
    if int(manifest["dim"]) != db.dim:
        raise IncompatibleStore(
            f"{where}: the export has dim={manifest['dim']}, the database dim={db.dim}")
    enc = manifest.get("encoder") or {}
    have = db.encoder
    if have is not None and have.fingerprint and enc.get("fingerprint") and \
            enc["fingerprint"] != have.fingerprint:
        raise IncompatibleStore(
            f"{where}: the export was written with encoder {enc.get('name')!r} (fingerprint "
            f"{enc['fingerprint']}), the database with encoder {have.name!r} (fingerprint "
            f"{have.fingerprint})")
    try:
        config = MemoryConfig.from_dict(manifest["config"])
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptStore(f"{where}: bad config in the manifest ({exc})") from exc
    if config.dim != db.dim:
        raise IncompatibleStore(f"{where}: the export's config has dim={config.dim}, the "
                                f"database dim={db.dim}")
    return ImportPlan(src, name, manifest, config, where)


def run_import(db: DatabaseFile, plan: ImportPlan, *, progress: Progress = None) -> Imported:
    """Replay ``plan``'s file into a new collection of ``db``, in one transaction.

    The caller checked that no collection has the name, and keeps it so
    (holds the database's collection lock). On any failure nothing is
    created. ``progress(k)`` is called as ``k`` more vectors are replayed.
    """
    src, name, manifest, config, where = plan.source, plan.name, plan.manifest, plan.config, plan.where
    dim = db.dim
    with zipfile.ZipFile(src) as zf:
        try:
            entries = [json.loads(line) for line in
                       zf.read("journal.jsonl").decode("utf-8").splitlines() if line]
            docs_by_row: dict[int, tuple[int, str, float]] = {}
            for line in zf.read("documents.jsonl").decode("utf-8").splitlines():
                if line:
                    d = json.loads(line)
                    docs_by_row[int(d["row"])] = (
                        int(d["id"]), json.dumps(d["metadata"], ensure_ascii=False,
                                                 separators=(",", ":")),
                        float(d.get("created_at", 0.0)))
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptStore(f"{where}: damaged journal or documents ({exc})") from exc
        memory = Memory.from_config(config)
        now = time.time()
        with zf.open("vectors.npy") as f, db.transaction(where) as conn:
            shape, _ = _read_npy_header(f, where)
            if shape[1] != dim:
                raise CorruptStore(f"{where}: vectors.npy has width {shape[1]}, expected {dim}")
            cid = conn.execute(
                "INSERT INTO collections (name, config, centering, gate, next_doc_id, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (name, json.dumps(config.to_dict()),
                 None if manifest.get("centering") is None else json.dumps(manifest["centering"]),
                 None if manifest.get("gate") is None else json.dumps(manifest["gate"]),
                 int(manifest.get("next_doc_id", 1)), now)).lastrowid
            assert cid is not None  # an executed INSERT sets it
            row_at = 0
            seq = 0
            doc_count = 0
            max_doc = 0
            for entry in entries:
                seq += 1
                kind = entry.get("kind")
                if kind == "write":
                    n = int(entry["n"])
                    blob = f.read(4 * n * dim)
                    X = journal.vectors_from_blob(blob, n, dim, f"{where}: entry {seq}")
                    with memory.exclusive():
                        result = memory.write_exclusive(X)
                    after = memory.scalars()
                    jid = conn.execute(
                        "INSERT INTO journal (cid, seq, kind, n, vectors, arg, writes_after, "
                        "next_id_after, size_after, eta_after, rng_after, crc, created_at) "
                        "VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?)",
                        (cid, seq, KIND_WRITE, n, blob, after[0], after[1], after[2],
                         after[3], journal.to_signed64(after[4]), journal.crc32(blob),
                         float(entry.get("created_at", now)))).lastrowid
                    docs = []
                    for i in range(n):
                        doc = docs_by_row.get(row_at + i)
                        if doc is None:
                            continue
                        doc_id, meta, created = doc
                        docs.append((cid, doc_id, jid, i, meta, created,
                                     np.asarray(result.postings(i), "<i8").tobytes()))
                        max_doc = max(max_doc, doc_id)
                    conn.executemany(
                        "INSERT INTO documents (cid, doc_id, jid, pos, metadata, created_at, "
                        "locations) VALUES (?, ?, ?, ?, ?, ?, ?)", docs)
                    doc_count += len(docs)
                    merges = result.merges
                    row_at += n
                    if progress is not None:
                        progress(n)
                elif kind == "compress":
                    arg = entry.get("max_locations")
                    bound = None if arg is None else int(arg)
                    merges = memory.compress(bound).merges
                    after = memory.scalars()
                    conn.execute(
                        "INSERT INTO journal (cid, seq, kind, n, vectors, arg, writes_after, "
                        "next_id_after, size_after, eta_after, rng_after, crc, created_at) "
                        "VALUES (?, ?, ?, 0, NULL, ?, ?, ?, ?, ?, ?, NULL, ?)",
                        (cid, seq, KIND_COMPRESS, None if arg is None else int(arg),
                         after[0], after[1], after[2], after[3],
                         journal.to_signed64(after[4]), now))
                else:
                    raise CorruptStore(f"{where}: journal entry {seq} has kind {kind!r}")
                if merges:
                    conn.execute("INSERT INTO merges (cid, seq, pairs) VALUES (?, ?, ?)",
                                 (cid, seq, np.asarray(merges, "<i8").reshape(-1).tobytes()))
            if row_at != shape[0] or doc_count != len(docs_by_row):
                raise CorruptStore(
                    f"{where}: the journal covers {row_at} vectors and {doc_count} documents, "
                    f"the file holds {shape[0]} and {len(docs_by_row)}")
            next_doc_id = max(int(manifest.get("next_doc_id", 1)), max_doc + 1)
            conn.execute("UPDATE collections SET next_doc_id = ? WHERE cid = ?",
                         (next_doc_id, cid))
            journal.save_checkpoint(conn, cid, seq, memory.snapshot(), dim)
    assert cid is not None  # an executed INSERT sets it
    return Imported(int(cid), name, config, journal.Rebuilt(memory, seq, seq, 0, 0, 0.0), next_doc_id,
                    doc_count, manifest.get("centering"), manifest.get("gate"))
