"""Partitioned collections: exactly one collection's answers, write ids across partitions.

The property: for any documents (duplicates, ties, zero vectors, deletes),
exact top-k over a PartitionedCollection of P local collections equals a
single collection holding the same documents: the same ids, the same float32
scores, the same order.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hopmem
from hopmem.cluster.partitions import (
    PartitionedCollection,
    encode_doc_id,
    local_doc_id,
    partition_of,
    stable_hash,
    stable_shard,
)
from hopmem.errors import InvalidInput, NotFound, NotSupported, StoreError

DIM = 6
GRID = st.sampled_from([-1.0, 0.0, 0.0, 0.5, 1.0, 2.0])  # coarse values: duplicates, ties, zeros
VECTOR = st.lists(GRID, min_size=DIM, max_size=DIM)


def _setup(db, P, prefix="p"):
    single = db.collection("single")
    parts = [db.collection(f"{prefix}{p}") for p in range(P)]
    return single, parts


# -- ids and placement -------------------------------------------------------------------------------

def test_stable_shard_is_fixed_and_in_range():
    assert all(0 <= stable_shard("db", f"c{i}", 5) < 5 for i in range(100))
    assert len({stable_shard("db", f"c{i}", 5) for i in range(100)}) == 5
    # Length-prefixed: moving characters between the names changes the input.
    assert stable_hash("x") == stable_hash("x") != stable_hash(b"x") != stable_hash(1)
    assert stable_shard("ab", "c", 1 << 30) != stable_shard("a", "bc", 1 << 30)
    with pytest.raises(InvalidInput, match="shards: expected an integer >= 1, got 0"):
        stable_shard("db", "c", 0)
    with pytest.raises(InvalidInput, match="database: expected a str"):
        stable_shard(b"db", "c", 2)


def test_stable_shard_pinned_values():
    # Computed once; a change here moves collections between shards.
    import hashlib

    def reference(db, coll, shards):
        h = hashlib.blake2b(digest_size=8, person=b"hopmem.place")
        for f in (db.encode(), coll.encode()):
            h.update(len(f).to_bytes(8, "little"))
            h.update(f)
        return int.from_bytes(h.digest(), "big") % shards

    for db, coll, shards in (("default", "notes", 16), ("t", "user-42", 3), ("é", "ü", 7)):
        assert stable_shard(db, coll, shards) == reference(db, coll, shards)


def test_doc_id_encoding_round_trips_and_matches_one_collection():
    for P in (1, 2, 3, 4):
        seen = []
        for local in range(1, 6):
            for p in range(P):
                g = encode_doc_id(local, p, P)
                assert partition_of(g, P) == p and local_doc_id(g, P) == local
                seen.append(g)
        assert sorted(seen) == list(range(1, 5 * P + 1))
    with pytest.raises(InvalidInput, match="partition: expected an integer in \\[0, 2\\), got 2"):
        encode_doc_id(1, 2, 2)
    with pytest.raises(InvalidInput, match="document id: expected an integer >= 1, got 0"):
        partition_of(0, 2)


# -- the property ---------------------------------------------------------------------------------------

@st.composite
def scenarios(draw):
    P = draw(st.integers(1, 4))
    batches = draw(st.lists(st.lists(VECTOR, min_size=0, max_size=7), min_size=1, max_size=5))
    bare = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    total = sum(len(b) for b, no_meta in zip(batches, bare) if not no_meta)
    deletes = draw(st.lists(st.integers(0, total + 2), max_size=4))
    queries = draw(st.lists(VECTOR, min_size=1, max_size=3))
    limit = draw(st.sampled_from([1, 3, 10, 50]))
    return P, batches, bare, deletes, queries, limit


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios())
def test_exact_top_k_equals_one_collection(scenario):
    P, batches, bare, deletes, queries, limit = scenario
    with tempfile.TemporaryDirectory() as tmp, hopmem.open(f"{tmp}/d.hopmem", dim=DIM) as db:
        single, parts = _setup(db, P)
        pc = PartitionedCollection("logical", parts)
        for b, (batch, no_meta) in enumerate(zip(batches, bare)):
            X = np.array(batch, np.float32).reshape(-1, DIM)
            meta = None if no_meta else [{"b": b, "i": i} for i in range(len(batch))]
            one = single.write(X, meta)
            spread = pc.write(X, meta)
            assert spread.ids == one.ids and spread.count == one.count
        for doc_id in deletes:
            assert pc.documents.delete(doc_id) == single.documents.delete(doc_id)
        assert pc.documents.count() == single.documents.count()
        for q in queries:
            for mode_limit in (limit, 10):
                want = single.resolve(np.array(q, np.float32), mode_limit)
                got = pc.resolve(np.array(q, np.float32), mode_limit)
                assert [(h.id, h.metadata) for h in got] == [(h.id, h.metadata) for h in want]
                # Bit-identical scores, not merely close ones.
                assert np.array_equal(np.array([h.similarity for h in got], np.float32).view(np.int32),
                                      np.array([h.similarity for h in want], np.float32).view(np.int32))
        def shown(docs):  # created_at differs: the two were written at different moments
            return [(d.id, d.metadata) for d in docs]

        want = single.documents.list(0, 10_000)
        assert shown(pc.documents.list(0, 10_000)) == shown(want)
        assert shown(pc.documents.list(2, 3)) == shown(single.documents.list(2, 3))
        for doc in want[:5]:
            got = pc.documents.get(doc.id)
            assert (got.id, got.metadata) == (doc.id, doc.metadata)
            assert np.array_equal(got.vector, single.documents.get(doc.id).vector)


def test_exact_top_k_over_many_documents_with_an_executor(tmp_path):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    X[100:200] = X[0:100]  # duplicates: ties on every query near them
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=32) as db, ThreadPoolExecutor(3) as pool:
        single, parts = _setup(db, 3)
        pc = PartitionedCollection("logical", parts, executor=pool)
        for lo in range(0, 3000, 500):
            meta = [{"row": i} for i in range(lo, lo + 500)]
            assert pc.write(X[lo:lo + 500], meta).ids == single.write(X[lo:lo + 500], meta).ids
        for q in list(X[:5]) + list(rng.standard_normal((5, 32)).astype(np.float32)):
            want, got = single.resolve(q, 10), pc.resolve(q, 10)
            assert [(h.id, h.similarity) for h in got] == [(h.id, h.similarity) for h in want]
        assert pc.stats().documents == 3000 and pc.stats().writes == 3000


# -- routing and errors ---------------------------------------------------------------------------------

def test_documents_are_routed_by_id(tmp_path):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 3)
        pc = PartitionedCollection("logical", parts)
        res = pc.write(np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0]], ["a", "b", "c", "d", "e"])
        assert res.ids == [1, 2, 3, 4, 5] and res.partitions == [0, 1, 2, 0, 1]
        assert [p.documents.count() for p in parts] == [2, 2, 1]
        assert pc.documents.get(4).metadata == "d" and parts[0].documents.get(2).metadata == "d"
        assert 5 in pc.documents and 6 not in pc.documents
        for missing in (0, -3, 6, 99):
            with pytest.raises(NotFound, match=f"document {missing} not found in collection 'logical'"):
                pc.documents.get(missing)
        assert pc.documents.delete(2) is True and pc.documents.delete(2) is False
        assert pc.documents.delete(0) is False
        assert [d.id for d in pc.documents] == [1, 3, 4, 5] and len(pc.documents) == 4
        with pytest.raises(InvalidInput, match="document id: expected an integer, got str"):
            pc.documents.get("1")


def test_bad_input_is_refused_before_any_partition_writes(tmp_path):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 2)
        pc = PartitionedCollection("logical", parts)
        with pytest.raises(InvalidInput, match=r"metadata\[1\]: expected a JSON value"):
            pc.write(np.ones((2, 4)), [1, object()])
        with pytest.raises(InvalidInput, match="metadata: expected 2 values"):
            pc.write(np.ones((2, 4)), [1])
        with pytest.raises(hopmem.DimensionMismatch):
            pc.write(np.ones((2, 5)))
        assert [p.seq for p in parts] == [0, 0]
        with pytest.raises(InvalidInput, match="mode: expected 'indexed' or 'exact'"):
            pc.resolve(np.ones(4), 3, "fuzzy")
        with pytest.raises(InvalidInput, match="limit: expected an integer >= 1, got 0"):
            pc.resolve(np.ones(4), 0)
        with pytest.raises(InvalidInput, match=r"vector: expected one vector \(d,\)"):
            pc.resolve(np.ones((2, 4)))
    with pytest.raises(InvalidInput, match="parts: expected at least one collection"):
        PartitionedCollection("x", [])


@pytest.mark.parametrize("method", ["read", "read_scored", "analyze", "attention", "recall",
                                    "remember", "calibrate", "compress", "fingerprint"])
def test_memory_reads_are_refused_clearly(tmp_path, method):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 2)
        pc = PartitionedCollection("logical", parts)
        pc.write(np.eye(4), [1, 2, 3, 4])
        with pytest.raises(NotSupported, match=rf"^{method}: expected a collection with one memory, "
                                               r"got partitioned collection 'logical' of 2 partitions"):
            getattr(pc, method)(np.ones(4))
        assert issubclass(NotSupported, InvalidInput)  # the server answers 400


def test_key_placement_keeps_a_key_on_one_partition(tmp_path):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 3)
        pc = PartitionedCollection("logical", parts, placement=lambda m: m["user"])
        meta = [{"user": f"u{i % 4}", "i": i} for i in range(20)]
        res = pc.write(np.random.default_rng(0).standard_normal((20, 4)), meta)
        by_user = {}
        for m, p, doc_id in zip(meta, res.partitions, res.ids):
            by_user.setdefault(m["user"], set()).add(p)
            assert partition_of(doc_id, 3) == p and pc.documents.get(doc_id).metadata == m
        assert all(len(ps) == 1 for ps in by_user.values())
        assert by_user["u1"] == {stable_hash("u1") % 3}


# -- write ids through partitions ------------------------------------------------------------------------

class _FailsOnceAfterCommit:
    """A partition whose next write commits, then reports a failure (an ambiguous answer)."""

    def __init__(self, part):
        self._part = part
        self.armed = True

    def __getattr__(self, name):
        return getattr(self._part, name)

    def write(self, *args, **kwargs):
        result = self._part.write(*args, **kwargs)
        if self.armed:
            self.armed = False
            raise StoreError("connection to the shard lost")
        return result


def test_write_ids_make_a_retry_after_a_partial_failure_apply_once(tmp_path):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 3)
        X = np.random.default_rng(1).standard_normal((7, 4)).astype(np.float32)
        meta = [{"i": i} for i in range(7)]
        start = stable_hash("batch-1") % 3
        flaky = _FailsOnceAfterCommit(parts[(start + 1) % 3])  # not the first one written
        wrapped = [flaky if p is flaky._part else p for p in parts]
        pc = PartitionedCollection("logical", wrapped)
        with pytest.raises(StoreError, match="connection to the shard lost") as info:
            pc.write(X, meta, write_id="batch-1")
        assert any("retry with the same write_id" in n for n in info.value.__notes__)
        first = pc.write(X, meta, write_id="batch-1")       # the retry completes it
        again = pc.write(X, meta, write_id="batch-1")       # and a repeat changes nothing
        assert first == again and len(set(first.ids)) == 7
        assert pc.documents.count() == 7 and [p.seq for p in parts] == [1, 1, 1]
        assert [pc.documents.get(i).metadata for i in first.ids] == meta
        # The same id with another batch: refused, nothing written.
        with pytest.raises(InvalidInput, match="write_id: expected 'batch-1'"):
            pc.write(X[::-1], meta, write_id="batch-1")
        assert pc.documents.count() == 7 and [p.seq for p in parts] == [1, 1, 1]
        # Deletes with ids go to the id's partition and answer once.
        assert pc.documents.delete(first.ids[3], write_id="del-1") is True
        assert pc.documents.delete(first.ids[3], write_id="del-1") is True
        assert pc.documents.count() == 6


def test_a_write_without_id_failing_midway_says_what_committed(tmp_path):
    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db:
        _, parts = _setup(db, 2)
        flaky = _FailsOnceAfterCommit(parts[1])
        pc = PartitionedCollection("logical", [parts[0], flaky])
        with pytest.raises(StoreError) as info:
            pc.write(np.eye(4), [1, 2, 3, 4])
        assert any("partitions [0] committed their share" in n and "twice" in n
                   for n in info.value.__notes__)
        # The next write re-reads where each partition stands: ids stay unique.
        res = pc.write(np.eye(4), [5, 6, 7, 8])
        assert len(set(res.ids)) == 4 and pc.documents.count() == 8
        assert sorted(d.id for d in pc.documents) == list(range(1, 9))


def test_concurrent_writers_get_unique_ids_that_route_back(tmp_path):
    import threading

    with hopmem.open(str(tmp_path / "d.hopmem"), dim=4) as db, ThreadPoolExecutor(2) as pool:
        _, parts = _setup(db, 2)
        pc = PartitionedCollection("logical", parts, executor=pool)
        answers = []

        def client(c):
            rng = np.random.default_rng(c)
            for b in range(5):
                meta = [{"c": c, "b": b, "i": i} for i in range(3)]
                wid = f"c{c}-b{b}" if c % 2 else None
                answers.append((pc.write(rng.standard_normal((3, 4)), meta, write_id=wid), meta))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [i for res, _ in answers for i in res.ids]
        assert len(ids) == len(set(ids)) == 60 and pc.documents.count() == 60
        for res, meta in answers:
            assert [pc.documents.get(i).metadata for i in res.ids] == meta


def test_numbering_continues_across_reopening_with_parts_in_separate_files(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 8)).astype(np.float32)
    paths = [str(tmp_path / f"shard{p}.hopmem") for p in range(3)]
    with hopmem.open(str(tmp_path / "one.hopmem"), dim=8) as one_db:
        single = one_db.collection("c")
        dbs = [hopmem.open(path, dim=8) for path in paths]
        pc = PartitionedCollection("c", [db.collection("c") for db in dbs])
        assert pc.write(X[:10], list(range(10))).ids == single.write(X[:10], list(range(10))).ids
        for db in dbs:
            db.close()
        dbs = [hopmem.open(path) for path in paths]  # a new process would see the same
        try:
            pc = PartitionedCollection("c", [db.get_collection("c") for db in dbs])
            meta = list(range(10, 30))
            assert pc.write(X[10:], meta).ids == single.write(X[10:], meta).ids == list(range(11, 31))
            for q in X[:3]:
                want = [(h.id, h.similarity) for h in single.resolve(q, 5)]
                assert [(h.id, h.similarity) for h in pc.resolve(q, 5)] == want
                indexed = pc.resolve(q, 5, "indexed")  # each partition's own candidates, merged
                assert all(pc.documents.get(h.id).metadata == h.metadata for h in indexed)
                assert [h.similarity for h in indexed] == sorted((h.similarity for h in indexed),
                                                                 reverse=True)
        finally:
            for db in dbs:
                db.close()
