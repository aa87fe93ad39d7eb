"""Files of the store: incompatible, corrupt and foreign files, locking, migration, backup."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hopmem
from hopmem import CorruptStore, IncompatibleStore, Memory, StoreError, StoreLocked
from hopmem.store import journal
from hopmem.store.schema import APPLICATION_ID, SCHEMA_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


@dataclass
class FakeEncoder:
    name: str = "hashing-8"
    dim: int = 8
    fingerprint: str | None = "aaaa1111"


def damage(path, *statements):
    """Change the file behind the store's back, as damage or a foreign writer would:
    each statement is SQL, or ``(sql, parameters)``."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(*((statement,) if isinstance(statement, str) else statement))
    conn.commit()
    conn.close()


def fetch_one(path, sql):
    """The first value of the first row of a query on the file."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def assert_open_fails(path, match):
    """Opening collection "c" reports the damage, naming it."""
    with hopmem.open(path) as db:
        with pytest.raises(CorruptStore, match=match):
            db.collection("c")


def make_db(path, n=50, d=8, metadata=True):
    X = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    with hopmem.open(path, dim=d) as db:
        coll = db.collection("c")
        coll.write(X, metadata=list(range(n)) if metadata else None)
        coll.checkpoint()
        return coll.snapshot()


# -- incompatible --------------------------------------------------------------------------

def test_dimension_mismatch_names_both(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path)
    with pytest.raises(IncompatibleStore,
                       match=r"database was created with dim=8, opened with dim=128"):
        hopmem.open(path, dim=128)


def test_config_mismatch_names_each_field(tmp_path):
    path = str(tmp_path / "a.hopmem")
    hopmem.open(path, dim=8, k=20, beta=5.0).close()
    with pytest.raises(IncompatibleStore) as err:
        hopmem.open(path, k=10, beta=5.0, tau_split=0.2)
    msg = str(err.value)
    assert "created with k=20, tau_split=0.3" in msg and "opened with k=10, tau_split=0.2" in msg
    assert "beta" not in msg
    hopmem.open(path, k=20).close()  # equal values are fine


def test_encoder_is_recorded_and_checked(tmp_path):
    path = str(tmp_path / "a.hopmem")
    with hopmem.open(path, encoder=FakeEncoder()) as db:
        assert db.dim == 8
        assert db.encoder == hopmem.store.EncoderInfo("hashing-8", 8, "aaaa1111")
    with hopmem.open(path) as db:  # without an encoder: raw vectors, fine
        assert db.encoder.fingerprint == "aaaa1111"
    with pytest.raises(IncompatibleStore, match=r"written with encoder 'hashing-8' \(fingerprint "
                                                r"aaaa1111\), opened with encoder 'other' "
                                                r"\(fingerprint bbbb2222\)"):
        hopmem.open(path, encoder=FakeEncoder(name="other", fingerprint="bbbb2222"))
    with pytest.raises(IncompatibleStore, match="produces dimension 8, but dim=16"):
        hopmem.open(path, 16, encoder=FakeEncoder())


def test_encoder_recorded_on_a_database_that_had_none(tmp_path):
    path = str(tmp_path / "a.hopmem")
    hopmem.open(path, dim=8).close()
    hopmem.open(path, encoder=FakeEncoder()).close()
    with hopmem.open(path) as db:
        assert db.encoder.name == "hashing-8"
    with pytest.raises(hopmem.InvalidInput, match="encoder"):
        hopmem.open(path, encoder=object())


def test_newer_schema_version_is_refused(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(IncompatibleStore, match="newer than this hopmem supports"):
        hopmem.open(path)


# -- foreign and corrupt ---------------------------------------------------------------------

def test_foreign_text_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am not a database\n" * 100)
    with pytest.raises(CorruptStore, match="not a hopmem database \\(not an SQLite file\\)"):
        hopmem.open(str(path))
    assert path.read_text().startswith("hello")  # untouched


def test_foreign_sqlite_database(tmp_path):
    path = str(tmp_path / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptStore, match="an SQLite database, but not a hopmem database"):
        hopmem.open(path, dim=8)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1234")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptStore, match="application_id 0x4d2"):
        hopmem.open(path, dim=8)


def test_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.hopmem"
    path.write_bytes(b"")
    with hopmem.open(str(path), dim=4) as db:
        db.collection("c").write(np.ones(4))
    assert sqlite3.connect(str(path)).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_truncated_file_is_corrupt(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path, n=400)
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(CorruptStore):
        with hopmem.open(path) as db:
            db.collection("c")


def test_overwritten_pages_are_corrupt(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path, n=400)
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:  # trash every page after the first two
        fh.seek(8192)
        fh.write(np.random.default_rng(1).integers(0, 256, size - 8192, dtype=np.uint8).tobytes())
    with pytest.raises(CorruptStore):
        with hopmem.open(path) as db:
            db.collection("c").documents.list()


def test_flipped_bits_in_journal_vectors_fail_the_crc(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path, n=10, metadata=False)
    blob = bytearray(fetch_one(path, "SELECT vectors FROM journal WHERE seq = 1"))
    blob[17] ^= 0x10
    damage(path, "DELETE FROM checkpoints", "DELETE FROM checkpoint_parts",  # force a replay
           ("UPDATE journal SET vectors = ? WHERE seq = 1", (bytes(blob),)))
    assert_open_fails(path, "journal entry 1 fails its CRC check")


@given(st.lists(st.binary(max_size=5000), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_the_store_crc_is_zlibs(parts, start):
    # Files written with zlib's CRC-32 (and by builds without ISA-L) must keep
    # verifying: the store's crc32 gives zlib's values, chained or not.
    assert journal.crc32(b"".join(parts)) == zlib.crc32(b"".join(parts))
    a = b = start
    for part in parts:
        a, b = journal.crc32(part, a), zlib.crc32(part, b)
    assert a == b
    X = np.random.default_rng(len(parts)).standard_normal((7, 13)).astype(np.float32)
    assert journal.crc32(journal.vectors_blob(X)) == zlib.crc32(X.astype("<f4").tobytes())


@pytest.mark.subprocess
def test_files_move_between_builds_with_and_without_isal(tmp_path):
    # A file written with ISA-L's CRC verifies where isal is missing, and the
    # other way round: a process with the import blocked reopens (checkpoint and
    # journal CRCs checked), writes more, and this process reopens that.
    if journal.crc32 is zlib.crc32:
        pytest.skip("isal is not installed here")
    path = str(tmp_path / "a.hopmem")
    X = np.random.default_rng(3).standard_normal((30, 8)).astype(np.float32)
    with hopmem.open(path, dim=8) as db:
        coll = db.collection("c")
        coll.write(X[:10])
        coll.checkpoint()
        coll.write(X[10:20])  # after the checkpoint: replayed, CRC-checked
    code = (
        "import sys; sys.modules['isal'] = None\n"
        "import zlib, numpy as np, hopmem\n"
        "from hopmem.store import journal\n"
        "assert journal.crc32 is zlib.crc32\n"
        f"with hopmem.open({path!r}) as db:\n"
        "    c = db.get_collection('c')\n"
        "    print('READ', c.stats().writes)\n"
        f"    c.write(np.load({str(tmp_path / 'x.npy')!r}))\n"
    )
    np.save(tmp_path / "x.npy", X[20:])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "READ 20" in out.stdout, out.stderr
    with hopmem.open(path) as db:
        coll = db.collection("c")
        reference = Memory.from_config(coll.config)
        reference.write(X)  # the same vectors in one batch: the same state, bit for bit
        assert coll.snapshot() == reference.snapshot()


def test_damaged_checkpoint_fails_the_crc(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path, n=10)
    blob = bytearray(fetch_one(path, "SELECT counters FROM checkpoint_parts"))
    blob[3] ^= 0x01
    damage(path, ("UPDATE checkpoint_parts SET counters = ?", (bytes(blob),)))
    assert_open_fails(path, "checkpoint at entry 1 fails its CRC check")


def multi_part_db(path, monkeypatch, n=300, d=16):
    """A database whose checkpoint spans several parts (part size made small)."""
    from hopmem.store import journal
    monkeypatch.setattr(journal, "CHECKPOINT_PART_BYTES", 20 * (d * 12 + 16))  # 20 rows a part
    X = np.random.default_rng(3).standard_normal((n, d)).astype(np.float32)
    with hopmem.open(path, dim=d, tau_split=0.5) as db:
        coll = db.collection("c")
        coll.write(X)
        coll.checkpoint()
        return coll.snapshot(), X


def test_a_checkpoint_in_many_parts_reopens_bit_exact_and_takes_over_its_arrays(tmp_path, monkeypatch):
    path = str(tmp_path / "a.hopmem")
    snap, X = multi_part_db(path, monkeypatch)
    conn = sqlite3.connect(path)
    parts = conn.execute("SELECT count(*) FROM checkpoint_parts").fetchone()[0]
    conn.close()
    assert parts == -(-len(snap.ids) // 20) > 3
    with hopmem.open(path) as db:
        coll = db.collection("c")
        assert coll.snapshot() == snap
        state = coll._memory._state
        # loaded once, into arrays with room to grow: no copy, no doubling on the next writes
        assert state.capacity > state.size == len(snap.ids)
        assert not state.addresses[state.size:].any() and not state.counters[state.size:].any()
        coll.write(X[:5])
        ref = Memory.from_config(coll.config, snap)
        ref.write(X[:5])
        assert coll.snapshot() == ref.snapshot()


def test_a_loaded_checkpoint_is_adopted_and_any_other_snapshot_copied(tmp_path, monkeypatch):
    from hopmem.engine._state import State
    from hopmem.store import journal
    path = str(tmp_path / "a.hopmem")
    snap, _ = multi_part_db(path, monkeypatch)
    conn = sqlite3.connect(path)
    seq, loaded = journal.load_checkpoint(conn, 1, 16, "test")
    conn.close()
    assert loaded == snap
    state = State.adopt(16, loaded)
    for name in ("ids", "addresses", "counters", "weights"):
        assert np.shares_memory(getattr(state, name), getattr(loaded, name))  # taken over
    state = State.adopt(16, snap)  # exact-size arrays: copied, the snapshot untouched
    for name in ("ids", "addresses", "counters", "weights"):
        assert not np.shares_memory(getattr(state, name), getattr(snap, name))
    assert state.snapshot() == snap


def test_a_missing_middle_part_of_a_checkpoint_is_reported(tmp_path, monkeypatch):
    path = str(tmp_path / "a.hopmem")
    multi_part_db(path, monkeypatch)
    damage(path, "DELETE FROM checkpoint_parts WHERE part = 2")
    assert_open_fails(path, "checkpoint part 2 is missing")


def test_a_replay_that_diverges_is_reported(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path, n=10)
    damage(path, "DELETE FROM checkpoints", "DELETE FROM checkpoint_parts",
           "UPDATE journal SET size_after = size_after + 1")
    assert_open_fails(path, "replaying journal entry 1 gave locations")


# -- a second opener ---------------------------------------------------------------------------

def test_second_writable_open_in_process_is_locked(tmp_path):
    path = str(tmp_path / "a.hopmem")
    db = hopmem.open(path, dim=4)
    try:
        with pytest.raises(StoreLocked, match=rf"already open for writing by another process "
                                              rf"\(pid {os.getpid()}\)"):
            hopmem.open(path)
        with hopmem.open(path, readonly=True) as ro:  # readers are welcome
            assert ro.dim == 4
    finally:
        db.close()
    hopmem.open(path).close()  # released on close


@pytest.mark.subprocess
def test_second_process_gets_a_clear_error_and_can_read(tmp_path):
    path = str(tmp_path / "a.hopmem")
    code = (
        "import sys, hopmem\n"
        "try:\n"
        f"    hopmem.open({path!r})\n"
        "except hopmem.StoreLocked as e:\n"
        "    print('LOCKED', e)\n"
        f"with hopmem.open({path!r}, readonly=True) as db:\n"
        "    c = db.get_collection('c')\n"
        "    print('READ', c.stats().writes, c.documents.count())\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with hopmem.open(path, dim=4) as db:
        db.collection("c").write(np.eye(4), metadata=list("abcd"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
    assert "LOCKED" in out.stdout and "already open for writing" in out.stdout, out.stderr
    assert "READ 4 4" in out.stdout, out.stderr


def test_lock_is_released_when_open_fails(tmp_path):
    path = str(tmp_path / "a.hopmem")
    make_db(path)
    with pytest.raises(IncompatibleStore):
        hopmem.open(path, dim=3)
    hopmem.open(path).close()


# -- migration -----------------------------------------------------------------------------------

def _fixture_generator():
    spec = importlib.util.spec_from_file_location(
        "make_schema_v1", os.path.join(FIXTURES, "make_schema_v1.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_migration_from_schema_version_1(tmp_path):
    gen = _fixture_generator()
    path = str(tmp_path / "old.hopmem")
    shutil.copy(os.path.join(FIXTURES, "schema_v1.hopmem"), path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    old_postings = raw.execute("SELECT doc_id, location FROM postings ORDER BY doc_id, location"
                               ).fetchall()
    raw.close()
    with pytest.raises(IncompatibleStore, match="needs a migration"):
        hopmem.open(path, readonly=True)

    with hopmem.open(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        versions = db._file.reader().execute("SELECT version FROM migrations ORDER BY version").fetchall()
        assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
        coll = db.get_collection("old")
        # The state equals a fresh memory fed the fixture's plan.
        expected = Memory(gen.DIM, **gen.CONFIG)
        meta = []
        for seq, (kind, n, with_meta) in enumerate(gen.PLAN, start=1):
            if kind == "write":
                expected.write(gen.vectors(seq, n))
                if with_meta:
                    meta += [{"seq": seq, "i": i} for i in range(n)]
            else:
                expected.compress(3)
        assert coll.snapshot() == expected.snapshot()
        assert [d.metadata for d in coll.documents] == meta
        # Posting lists moved into the documents, intact.
        moved = sorted((d, int(loc)) for d, blob in db._file.reader().execute(
            "SELECT doc_id, locations FROM documents") for loc in np.frombuffer(blob, "<i8"))
        assert moved == old_postings
        for doc in coll.documents.list(0, 100, vectors=True):
            assert coll.resolve(doc.vector, limit=1, mode="indexed")[0].id == doc.id
        # New features work on the migrated file.
        coll.gate = {"tau": 0.5}
        res = coll.write(gen.vectors(99, 2), metadata=["x", "y"])
        assert res.ids == [len(meta) + 1, len(meta) + 2]
        state = coll.snapshot()
    with hopmem.open(path) as db:
        coll = db.get_collection("old")
        assert coll.snapshot() == state and coll.gate == {"tau": 0.5}


def test_migration_is_atomic(tmp_path, monkeypatch):
    from hopmem.store import schema

    path = str(tmp_path / "old.hopmem")
    shutil.copy(os.path.join(FIXTURES, "schema_v1.hopmem"), path)

    def broken(conn):
        conn.execute("ALTER TABLE journal ADD COLUMN crc INTEGER")
        raise sqlite3.OperationalError("disk on fire")

    monkeypatch.setattr(schema, "MIGRATIONS", (schema.MIGRATIONS[0],
                                               schema.Migration(2, "broken", broken)))
    with pytest.raises(StoreError, match="disk on fire"):
        hopmem.open(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    cols = [r[1] for r in raw.execute("PRAGMA table_info(journal)")]
    assert "crc" not in cols
    raw.close()


# -- backup ---------------------------------------------------------------------------------------

def test_backup_while_open(tmp_path):
    path = str(tmp_path / "a.hopmem")
    target = str(tmp_path / "backup.hopmem")
    with hopmem.open(path, dim=8) as db:
        coll = db.collection("c")
        coll.write(np.random.default_rng(0).standard_normal((30, 8)), metadata=list(range(30)))
        state = coll.snapshot()
        assert db.backup(target) == target
        coll.write(np.ones(8))  # after the backup: not in it
        with pytest.raises(hopmem.AlreadyExists):
            db.backup(target)
        with pytest.raises(hopmem.InvalidInput):
            db.backup(path)
    assert not os.path.exists(target + "-wal")
    with hopmem.open(target) as copy:
        c = copy.get_collection("c")
        assert c.snapshot() == state and c.documents.count() == 30
    assert json.loads(json.dumps(hopmem.open(target, readonly=True).info()))["collections"] == ["c"]
