"""Durability and atomicity of the store: kills, failed commits, failed writes.

The crash test starts a writer process (tests/fixtures/store_crash_writer.py),
kills it with SIGKILL at random moments many times, and checks that every
acknowledged journal entry survived and that the reopened state is bit-identical
to a fresh memory fed exactly the journaled operations.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import hopmem
from crash_support import run_and_kill
from hopmem import Memory, StoreError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER = os.path.join(ROOT, "tests", "fixtures", "store_crash_writer.py")


def _load_writer():
    spec = importlib.util.spec_from_file_location("store_crash_writer", WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replay_ops(writer, count: int) -> Memory:
    """A fresh memory fed operations 0..count-1 of the writer."""
    mem = Memory(writer.DIM, **writer.CONFIG)
    for i in range(count):
        kind, *args = writer.op(i)
        if kind == "compress":
            mem.compress(args[0])
        else:
            mem.write(args[0])
    return mem


def expected_documents(writer, count: int) -> list:
    out = []
    for i in range(count):
        kind, *args = writer.op(i)
        if kind == "write" and args[1] is not None:
            out.extend(args[1])
    return out


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.subprocess
def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path):
    writer = _load_writer()
    path = str(tmp_path / "crash.hopmem")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HOPMEM_THREADS="3", HOPMEM_CRASH_SHARE_SCANS="1")  # helper threads at work too
    rnd = random.Random(int(os.environ.get("HOPMEM_CRASH_SEED", "12345")))
    target_kills = int(os.environ.get("HOPMEM_CRASH_KILLS", "18"))
    deadline = time.monotonic() + float(os.environ.get("HOPMEM_CRASH_SECONDS", "30"))
    acked: list[int] = []
    kills = 0
    while kills < target_kills and time.monotonic() < deadline:
        _, out = run_and_kill([sys.executable, WRITER, path], env, rnd, 0.25)
        kills += 1
        acked += [int(line.split()[1]) for line in out.splitlines() if line.startswith("ack ")]
    assert kills >= 5, f"only {kills} kills within the time bound"
    assert acked, "no write was acknowledged"

    with hopmem.open(path) as db:
        coll = db.get_collection(writer.COLLECTION)
        seq = coll.seq
        # Every acknowledged entry is on disk (seq has no gaps: the journal checks that).
        assert seq >= max(acked)
        # At most the one in flight at each kill was committed without its ack.
        assert seq <= max(acked) + 1
        fresh = replay_ops(writer, seq)
        assert coll.snapshot() == fresh.snapshot()
        docs = [d.metadata for d in coll.documents]
        assert docs == expected_documents(writer, seq)
        assert coll.stats().documents == len(docs)
    print(f"crash test: {kills} kills, {len(acked)} acknowledged entries, journal at {seq}")


def _commit_fails(conn):
    """Make the next COMMIT on ``conn`` fail (interrupted); returns an undo function."""
    state = {"commit": False}

    def trace(sql):
        state["commit"] = sql.strip().upper().startswith("COMMIT")

    conn.set_trace_callback(trace)
    conn.set_progress_handler(lambda: 1 if state["commit"] else 0, 1)

    def undo():
        conn.set_progress_handler(None, 1)
        conn.set_trace_callback(None)
    return undo


def _data(n, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("with_metadata", [False, True])
def test_failed_commit_restores_memory_and_disk(tmp_path, with_metadata):
    path = str(tmp_path / "db.hopmem")
    with hopmem.open(path, dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(20), metadata=[{"i": i} for i in range(20)])
        before = coll.snapshot()
        undo = _commit_fails(db._file._writer)
        try:
            with pytest.raises(StoreError, match="not committed.*restored from disk"):
                coll.write(_data(5, seed=1), metadata=["x"] * 5 if with_metadata else None)
        finally:
            undo()
        assert coll.snapshot() == before
        assert coll.seq == 1
        assert coll.documents.count() == 20
        # The collection keeps working, and the next document ids continue.
        res = coll.write(_data(3, seed=2), metadata=["a", "b", "c"])
        assert res.ids == [21, 22, 23]
        after = coll.snapshot()
    with hopmem.open(path) as db:
        coll = db.collection("c")
        assert coll.snapshot() == after
        expected = Memory(16)
        expected.write(_data(20))
        expected.write(_data(3, seed=2))
        assert after == expected.snapshot()
        assert [d.id for d in coll.documents] == list(range(1, 21)) + [21, 22, 23]


def test_failed_statement_in_a_metadata_batch_is_atomic(tmp_path):
    path = str(tmp_path / "db.hopmem")
    with hopmem.open(path, dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(4))
        before = coll.snapshot()
        db._file._writer.execute(
            "CREATE TEMP TRIGGER fail_docs BEFORE INSERT ON main.documents "
            "WHEN NEW.doc_id = 3 BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        with pytest.raises(StoreError, match="injected failure"):
            coll.write(_data(5, seed=1), metadata=list(range(5)))
        db._file._writer.execute("DROP TRIGGER fail_docs")
        assert coll.snapshot() == before
        assert coll.documents.count() == 0
        assert coll.documents.list() == []
        assert db._file.reader().execute("SELECT count(*) FROM journal").fetchone()[0] == 1
        assert coll.write(_data(2, seed=3), metadata=[1, 2]).ids == [1, 2]


def test_failed_compress_commit_restores_memory(tmp_path):
    path = str(tmp_path / "db.hopmem")
    with hopmem.open(path, dim=16, tau_split=0.9, tau_merge=0.95) as db:
        coll = db.collection("c")
        coll.write(_data(30))
        before = coll.snapshot()
        undo = _commit_fails(db._file._writer)
        try:
            with pytest.raises(StoreError, match="compress.*not committed"):
                coll.compress(5)
        finally:
            undo()
        assert coll.snapshot() == before
        result = coll.compress(5)
        assert result.locations_after <= 5
        after = coll.snapshot()
    with hopmem.open(path) as db:
        assert db.collection("c").snapshot() == after


def test_engine_failure_midway_restores_from_disk(tmp_path, monkeypatch):
    path = str(tmp_path / "db.hopmem")
    with hopmem.open(path, dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(10))
        before = coll.snapshot()
        real = Memory.write_exclusive
        calls = []

        def half_then_fail(memory, X):
            calls.append(len(X))
            if len(calls) > 1:  # the rebuild from disk replays normally
                return real(memory, X)
            real(memory, X[: len(X) // 2])  # mutates the state, then fails
            raise RuntimeError("engine failed midway")

        monkeypatch.setattr(Memory, "write_exclusive", half_then_fail)
        with pytest.raises(RuntimeError, match="midway"):
            coll.write(_data(6, seed=1))
        monkeypatch.setattr(Memory, "write_exclusive", real)
        assert coll.snapshot() == before
        assert coll.seq == 1


@pytest.mark.subprocess
def test_acknowledged_writes_survive_without_close(tmp_path):
    """A process that exits without closing (no final checkpoint) loses nothing."""
    path = str(tmp_path / "db.hopmem")
    code = (
        "import numpy as np, hopmem, os\n"
        f"db = hopmem.open({path!r}, dim=8)\n"
        "c = db.collection('c')\n"
        "for i in range(25):\n"
        "    c.write(np.random.default_rng(i).standard_normal((3, 8)), metadata=[i] * 3)\n"
        "os._exit(0)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    expected = Memory(8)
    for i in range(25):
        expected.write(np.random.default_rng(i).standard_normal((3, 8)))
    with hopmem.open(path) as db:
        coll = db.collection("c")
        assert coll.snapshot() == expected.snapshot()
        assert coll.documents.count() == 75
