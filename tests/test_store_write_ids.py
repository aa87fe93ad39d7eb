"""Write ids: a repeated write, delete or compress with the same id is applied once.

The id is recorded in the change's own SQLite transaction, so it survives
reopening and SIGKILL exactly as the change does; a repeat answers the
recorded result; the same id with another payload is refused.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import random
import signal
import sqlite3
import sys
import threading
import time

import numpy as np
import pytest

import hopmem
from crash_support import run_and_kill
from hopmem import InvalidInput, Memory, StoreError
from hopmem.store import collection as collection_module
from hopmem.store import schema
from hopmem.text.encoders import HashingEncoder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER = os.path.join(ROOT, "tests", "fixtures", "store_crash_writer.py")


def _data(n, d=16, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _ids_recorded(db, name):
    return [w for (w,) in db._file.reader().execute(
        "SELECT write_id FROM write_ids JOIN collections USING (cid) WHERE name = ? ORDER BY rid",
        (name,))]


def _same(a, b) -> bool:
    """Two write results are equal (their location arrays compared element-wise)."""
    return ((a.count, a.ids, a.seq, a.merges) == (b.count, b.ids, b.seq, b.merges)
            and len(a.touched) == len(b.touched)
            and all(np.array_equal(x, y) for x, y in zip(a.touched + a.created,
                                                          b.touched + b.created)))


def test_repeated_write_returns_the_recorded_result_and_writes_nothing(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(3, seed=1), metadata=["a", "b", "c"])
        first = coll.write(_data(4, seed=2), metadata=[1, 2, 3, 4], write_id="w-1")
        state, seq = coll.snapshot(), coll.seq
        again = coll.write(_data(4, seed=2), metadata=[1, 2, 3, 4], write_id="w-1")
        assert again.ids == first.ids == [4, 5, 6, 7]
        assert (again.seq, again.count) == (first.seq, first.count) == (2, 4)
        assert again.merges == first.merges
        for a, b in zip(again.touched + again.created, first.touched + first.created):
            assert np.array_equal(a, b)
        assert coll.seq == seq and coll.snapshot() == state and coll.documents.count() == 7
        # Without metadata: no documents, and still applied once.
        bare = coll.write(_data(2, seed=3), write_id="w-2")
        assert _same(coll.write(_data(2, seed=3), write_id="w-2"), bare)
        assert bare.ids is None and coll.seq == seq + 1


def test_same_id_with_another_payload_or_kind_is_refused(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(2), metadata=["x", "y"], write_id="w")
        seq = coll.seq
        for vectors, meta in ((_data(2, seed=9), ["x", "y"]), (_data(2), ["x", "z"]),
                              (_data(2), None), (_data(1), ["x"])):
            with pytest.raises(InvalidInput, match=r"^write_id: expected 'w' with the payload "
                                                   r"it was first used with \(a write of"):
                coll.write(vectors, metadata=meta, write_id="w")
        with pytest.raises(InvalidInput, match="write_id: expected 'w' .* got a document delete"):
            coll.documents.delete(1, write_id="w")
        with pytest.raises(InvalidInput, match="got a compress"):
            coll.compress(write_id="w")
        assert coll.seq == seq and 1 in coll.documents


@pytest.mark.parametrize("bad", ["", "x" * 257, 7, b"bytes", ["w"]])
def test_bad_write_ids_are_refused(tmp_path, bad):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        with pytest.raises(InvalidInput, match=r"^write_id: expected a non-empty string of at "
                                               r"most 256 characters, got "):
            coll.write(_data(1), write_id=bad)
        assert coll.seq == 0
        coll.write(_data(1), write_id="x" * 256)  # the longest accepted


def test_ids_are_per_collection(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        a, b = db.collection("a"), db.collection("b")
        assert a.write(_data(2), metadata=[1, 2], write_id="same").ids == [1, 2]
        assert b.write(_data(3, seed=5), metadata=[1, 2, 3], write_id="same").ids == [1, 2, 3]
        assert (a.seq, b.seq) == (1, 1)


def test_repeated_delete_answers_the_first_result(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(3), metadata=[1, 2, 3])
        assert coll.documents.delete(2, write_id="d") is True
        assert coll.documents.delete(2, write_id="d") is True   # the recorded answer
        assert coll.documents.delete(2) is False                # a new delete: nothing left
        assert coll.documents.delete(9, write_id="d9") is False
        assert coll.documents.delete(9, write_id="d9") is False
        with pytest.raises(InvalidInput, match="write_id: expected 'd' .* got a different one"):
            coll.documents.delete(3, write_id="d")
        assert coll.documents.count() == 2


def test_repeated_compress_compresses_once(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16, k=4) as db:
        coll = db.collection("c")
        coll.write(_data(60, seed=4))
        first = coll.compress(10, write_id="cmp")
        seq, state = coll.seq, coll.snapshot()
        assert coll.compress(10, write_id="cmp") == first
        assert coll.seq == seq and coll.snapshot() == state
        with pytest.raises(InvalidInput, match="got a different one"):
            coll.compress(5, write_id="cmp")


def test_write_ids_survive_reopening(tmp_path):
    path = str(tmp_path / "a.hopmem")
    with hopmem.open(path, dim=16) as db:
        first = db.collection("c").write(_data(2), metadata=[1, 2], write_id="w")
        db.collection("c").documents.delete(1, write_id="d")
    with hopmem.open(path) as db:
        coll = db.get_collection("c")
        assert _same(coll.write(_data(2), metadata=[1, 2], write_id="w"), first)
        assert coll.documents.delete(1, write_id="d") is True
        assert coll.seq == 1 and coll.documents.count() == 1


def test_old_ids_are_pruned_beyond_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(collection_module, "WRITE_ID_RETENTION", 10)
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        for i in range(40):
            coll.write(_data(1, seed=i), metadata=[i], write_id=f"w{i}")
            held = _ids_recorded(db, "c")
            assert len(held) <= 11 and held[-1] == f"w{i}"
        held = _ids_recorded(db, "c")
        assert held == [f"w{i}" for i in range(40 - len(held), 40)] and len(held) >= 10
        # A remembered id answers its result; a pruned one is a new write.
        assert coll.write(_data(1, seed=39), metadata=[39], write_id="w39").ids == [40]
        assert coll.write(_data(1, seed=0), metadata=[0], write_id="w0").ids == [41]


def test_dropping_a_collection_forgets_its_ids(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        db.collection("c").write(_data(2), metadata=[1, 2], write_id="w")
        assert db.drop_collection("c")
        assert db._file.reader().execute("SELECT count(*) FROM write_ids").fetchone()[0] == 0
        again = db.collection("c")  # may reuse the dropped collection's row id
        assert again.write(_data(2, seed=1), metadata=[3, 4], write_id="w").ids == [1, 2]


def test_a_failed_commit_records_nothing_and_the_retry_applies(tmp_path):
    from test_store_durability import _commit_fails

    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        coll.write(_data(2), metadata=[1, 2])
        undo = _commit_fails(db._file._writer)
        with pytest.raises(StoreError, match="was not committed"):
            coll.write(_data(3, seed=1), metadata=[3, 4, 5], write_id="w")
        undo()
        assert _ids_recorded(db, "c") == []
        res = coll.write(_data(3, seed=1), metadata=[3, 4, 5], write_id="w")
        assert res.ids == [3, 4, 5] and res.seq == 2
        assert _same(coll.write(_data(3, seed=1), metadata=[3, 4, 5], write_id="w"), res)


def test_concurrent_repeats_apply_once(tmp_path):
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=16) as db:
        coll = db.collection("c")
        results = []

        def go():
            results.append(coll.write(_data(5), metadata=list(range(5)), write_id="w"))

        threads = [threading.Thread(target=go) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 6 and all(_same(r, results[0]) for r in results)
        assert coll.seq == 1 and coll.documents.count() == 5


def test_remember_with_a_write_id(tmp_path):
    enc = HashingEncoder(64)
    texts = [f"fact number {i} about topic {i % 7}" for i in range(40)]
    with hopmem.open(str(tmp_path / "a.hopmem"), encoder=enc) as db:
        coll = db.collection("notes")
        first = coll.remember(texts, write_id="r1")  # the first batch: also learns the mean
        assert coll.remember(texts, write_id="r1") == first
        more = coll.remember(["one more fact"], write_id="r2")
        assert coll.remember(["one more fact"], write_id="r2") == more == [41]
        assert coll.documents.count() == 41 and coll.seq == 2
        with pytest.raises(InvalidInput, match="write_id"):
            coll.remember(["another fact"], write_id="r2")


# -- migration ------------------------------------------------------------------------------------

def test_a_version_2_file_migrates_and_keeps_its_contents(tmp_path, monkeypatch):
    path = str(tmp_path / "v2.hopmem")
    with monkeypatch.context() as m:  # a file as the version 2 layout writes it
        m.setattr(schema, "SCHEMA_VERSION", 2)
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
        m.setattr(schema, "migrate", functools.partial(schema.migrate, target=2))
        with hopmem.open(path, dim=16) as db:
            coll = db.collection("c")
            coll.write(_data(5), metadata=list(range(5)))
            coll.write(_data(3, seed=1))
            coll.documents.delete(2)
            state = coll.snapshot()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'write_ids'"
                       ).fetchone()[0] == 0
    raw.close()
    with hopmem.open(path) as db:
        assert db.schema_version == schema.SCHEMA_VERSION == 3
        coll = db.get_collection("c")
        assert coll.snapshot() == state
        assert [d.id for d in coll.documents] == [1, 3, 4, 5]
        res = coll.write(_data(2, seed=2), metadata=["a", "b"], write_id="w")
        assert _same(coll.write(_data(2, seed=2), metadata=["a", "b"], write_id="w"), res)
        assert res.ids == [6, 7]


# -- SIGKILL: a retried write id is applied once ----------------------------------------------------

def _load_writer():
    spec = importlib.util.spec_from_file_location("store_crash_writer", WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.subprocess
def test_sigkill_then_retry_with_write_ids_applies_each_operation_once(tmp_path):
    writer = _load_writer()
    path = str(tmp_path / "crash.hopmem")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rnd = random.Random(int(os.environ.get("HOPMEM_CRASH_SEED", "4321")))
    deadline = time.monotonic() + float(os.environ.get("HOPMEM_CRASH_SECONDS", "20"))
    answered: dict[int, str] = {}   # journal entry of each acknowledged operation
    kills = repeats = 0
    while kills < 10 and time.monotonic() < deadline:
        acked = max(answered, default=0)
        # A client that lost the last answer retries that operation too (half the time).
        start = max(0, acked - rnd.randint(0, 1))
        repeats += start < acked
        _, out = run_and_kill([sys.executable, WRITER, path, str(start)], env, rnd, 0.25)
        kills += 1
        for line in out.splitlines():
            if line.startswith("ack "):
                _, entry, seq = line.split()
                answered[int(entry)] = seq
    assert kills >= 5 and repeats >= 1 and answered

    with hopmem.open(path) as db:
        coll = db.get_collection(writer.COLLECTION)
        seq = coll.seq
        # Operation i is journal entry i + 1, whether its answer came first or from the record.
        for entry, got in answered.items():
            assert got in ("-", str(entry))
        assert max(answered) <= seq <= max(answered) + 1
        fresh = Memory(writer.DIM, **writer.CONFIG)
        docs = []
        for i in range(seq):
            kind, *args = writer.op(i)
            if kind == "compress":
                fresh.compress(args[0])
            else:
                fresh.write(args[0])
                docs += args[1] or []
        assert coll.snapshot() == fresh.snapshot()
        assert [d.metadata for d in coll.documents] == docs
