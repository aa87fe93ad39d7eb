"""Threads reading while one writes (what the server's thread pool does)."""

from __future__ import annotations

import threading

import numpy as np

import hopmem
from hopmem import Memory


def batch(i, d=16):
    rng = np.random.default_rng(i)
    C = np.random.default_rng(7).standard_normal((8, d)).astype(np.float32)
    n = 1 + i % 4
    return (C[rng.integers(0, 8, n)] + 0.2 * rng.standard_normal((n, d))).astype(np.float32)


def test_readers_run_while_one_thread_writes(tmp_path):
    path = str(tmp_path / "t.hopmem")
    n_batches = 150
    errors: list[BaseException] = []
    done = threading.Event()
    with hopmem.open(path, dim=16, checkpoint_every=60) as db:
        coll = db.collection("c")
        coll.write(batch(0), metadata=[0] * len(batch(0)))

        def writer():
            try:
                for i in range(1, n_batches):
                    X = batch(i)
                    coll.write(X, metadata=[i] * len(X) if i % 2 else None)
                    if i % 50 == 0:
                        coll.compress(20)
                    if i % 7 == 0:
                        coll.documents.delete(i)  # may or may not exist: idempotent
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                done.set()

        def reader(seed):
            rng = np.random.default_rng(seed)
            seen_writes = 0
            try:
                while not done.is_set():
                    q = rng.standard_normal(16).astype(np.float32)
                    coll.read(q)
                    trace = coll.analyze(q, "fast")
                    assert len(trace.activated) > 0
                    hits = coll.resolve(q, limit=5, mode="indexed" if seed % 2 else "exact")
                    for h in hits:
                        assert isinstance(h.metadata, int)
                    page = coll.documents.list(0, 20)
                    assert [d.id for d in page] == sorted(d.id for d in page)
                    stats = coll.stats()
                    assert stats.writes >= seen_writes  # never goes back
                    seen_writes = stats.writes
                    if page:
                        try:
                            coll.documents.get(page[0].id)
                        except hopmem.NotFound:
                            pass  # deleted meanwhile
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=reader, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        state = coll.snapshot()
        live = coll.documents.count()

    expected = Memory(16)
    expected.write(batch(0))
    for i in range(1, n_batches):
        expected.write(batch(i))
        if i % 50 == 0:
            expected.compress(20)
    assert state == expected.snapshot()
    with hopmem.open(path) as db:
        coll = db.collection("c")
        assert coll.snapshot() == state
        assert coll.documents.count() == live


def test_collections_are_created_once_under_races(tmp_path):
    path = str(tmp_path / "t.hopmem")
    with hopmem.open(path, dim=4) as db:
        got = []
        barrier = threading.Barrier(4)

        def make():
            barrier.wait()
            got.append(db.collection("shared"))

        threads = [threading.Thread(target=make) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(c) for c in got}) == 1
        assert db.collections() == ["shared"]
