"""Documents of the store: get, list, delete, query (indexed and exact), resolve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hopmem
from conftest import clustered
from hopmem import InvalidInput, NotFound
from hopmem.store.resolution import PostingIndex, VectorIndex


def unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


@pytest.fixture
def db(store_opener):
    """A 16-d database: a local file, then one on a Ray cluster (``store_opener``)."""
    with store_opener(dim=16) as database:
        yield database


def test_get_list_and_exact_vectors(db):
    coll = db.collection("c")
    X = clustered(30, 16, rng=0, noise=0.15, centre_seed=99)
    ids = coll.write(X, metadata=[{"i": i} for i in range(30)]).ids
    assert ids == list(range(1, 31))
    doc = coll.documents.get(7)
    assert doc.id == 7 and doc.metadata == {"i": 6}
    assert doc.vector.dtype == np.float32 and np.array_equal(doc.vector, X[6])
    assert coll.documents.get(7, vector=False).vector is None
    page = coll.documents.list(offset=10, limit=5)
    assert [d.id for d in page] == [11, 12, 13, 14, 15]
    assert all(d.vector is None for d in page)
    with_vectors = coll.documents.list(0, 3, vectors=True)
    assert np.array_equal(np.stack([d.vector for d in with_vectors]), X[:3])
    assert coll.documents.list(offset=30) == []
    assert len(coll.documents) == 30 and 5 in coll.documents and 31 not in coll.documents
    assert [d.id for d in coll.documents] == ids
    assert doc.to_dict() == {"id": 7, "metadata": {"i": 6}}
    with pytest.raises(NotFound, match="document 99 not found"):
        coll.documents.get(99)
    with pytest.raises(InvalidInput, match="document id"):
        coll.documents.get("7")
    with pytest.raises(InvalidInput, match="limit"):
        coll.documents.list(0, 0)
    with pytest.raises(InvalidInput, match="offset"):
        coll.documents.list(-1)


@pytest.mark.parametrize("mode", ["indexed", "exact"])
def test_query_finds_each_document_by_its_own_vector(db, mode):
    coll = db.collection("c")
    X = clustered(60, 16, rng=3, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(60)))
    for i in (0, 17, 59):
        hits = coll.resolve(X[i], limit=3, mode=mode)
        assert hits[0].id == i + 1 and hits[0].metadata == i
        assert hits[0].similarity == pytest.approx(1.0, abs=1e-6)
        sims = [h.similarity for h in hits]
        assert sims == sorted(sims, reverse=True)
        assert hits[0].to_dict() == {"id": i + 1, "similarity": hits[0].similarity, "metadata": i}


def test_exact_similarities_are_cosines(db):
    coll = db.collection("c")
    X = clustered(25, 16, rng=4, noise=0.15, centre_seed=99)
    coll.write(X, metadata=[None] * 25)
    q = clustered(1, 16, rng=8, noise=0.15, centre_seed=99)[0]
    hits = coll.resolve(q, limit=25, mode="exact")
    cos = np.array([unit(x) @ unit(q) for x in X])
    order = np.argsort(-cos, kind="stable")
    assert [h.id for h in hits] == (order + 1).tolist()
    assert np.allclose([h.similarity for h in hits], cos[order], atol=1e-5)


def test_indexed_results_are_a_subset_of_exact(db):
    coll = db.collection("c", k=3)
    X = clustered(80, 16, rng=5, centers=10, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(80)))
    q = X[10] + 0.05
    exact = {h.id: h.similarity for h in coll.resolve(q, limit=80, mode="exact")}
    indexed = coll.resolve(q, limit=80, mode="indexed")
    assert 0 < len(indexed) < 80  # k=3 activates only part of the memory
    for h in indexed:
        assert h.similarity == pytest.approx(exact[h.id], abs=1e-6)


def test_delete_removes_from_get_list_and_both_query_modes(db, store_opener):
    coll = db.collection("c")
    X = clustered(20, 16, rng=6, noise=0.15, centre_seed=99)
    coll.write(X, metadata=[f"d{i}" for i in range(20)])
    coll.resolve(X[0], limit=1, mode="indexed")  # load the in-memory indexes before deleting
    state = coll.snapshot()
    assert coll.documents.delete(5) is True
    assert coll.documents.delete(5) is False  # idempotent
    assert coll.documents.delete(12345) is False
    with pytest.raises(NotFound):
        coll.documents.get(5)
    assert 5 not in [d.id for d in coll.documents.list(0, 100)]
    for mode in ("indexed", "exact"):
        hits = coll.resolve(X[4], limit=20, mode=mode)
        assert 5 not in [h.id for h in hits]
        assert len(hits) == (19 if mode == "exact" else len(hits))
    assert coll.documents.count() == 19 and coll.stats().documents == 19
    assert coll.snapshot() == state  # superposition: the memory is unchanged
    # After a reopen too, and ids are never reused.
    reopen = store_opener
    db.close()
    with reopen() as db2:
        c2 = db2.collection("c")
        assert 5 not in c2.documents
        for mode in ("indexed", "exact"):
            assert 5 not in [h.id for h in c2.resolve(X[4], limit=20, mode=mode)]
        assert c2.write(X[:1], metadata=["new"]).ids == [21]


def test_delete_before_the_indexes_are_loaded(db):
    coll = db.collection("c")
    X = clustered(10, 16, rng=7, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(10)))
    assert coll.documents.delete(3)
    for mode in ("indexed", "exact"):
        assert 3 not in [h.id for h in coll.resolve(X[2], limit=10, mode=mode)]


def test_document_on_a_freshly_spawned_location_is_found_indexed(tmp_path):
    with hopmem.open(str(tmp_path / "s.hopmem"), dim=64) as db:
        coll = db.collection("c", tau_split=0.3)
        coll.write(clustered(40, 64, rng=8, centers=3, noise=0.15, centre_seed=99))
        # Orthogonal to every address: the write cannot absorb, so it spawns.
        A = coll.addresses.astype(np.float64)
        v = np.random.default_rng(1).standard_normal(64)
        q, _ = np.linalg.qr(A.T)
        novel = (v - q @ (q.T @ v)).astype(np.float32)
        before = set(coll.ids.tolist())
        res = coll.write(novel, metadata={"novel": True})
        created = set(res.created[0].tolist())
        assert created and not created & before
        hits = coll.resolve(novel, limit=1, mode="indexed")
        assert hits and hits[0].id == res.ids[0] and hits[0].metadata == {"novel": True}
        # Also when the indexes were already loaded before the write.
        res2 = coll.write(-novel, metadata="opposite")
        assert coll.resolve(-novel, limit=1, mode="indexed")[0].id == res2.ids[0]


def test_postings_follow_merges_in_writes_and_compress(tmp_path):
    path = str(tmp_path / "m.hopmem")
    X = clustered(120, 16, rng=9, centers=20, noise=0.3, centre_seed=99)
    with hopmem.open(path, dim=16, max_locations=8, k=4) as db:
        coll = db.collection("c")
        merges = 0
        for b in range(6):
            res = coll.write(X[b * 20:(b + 1) * 20], metadata=list(range(b * 20, (b + 1) * 20)))
            merges += len(res.merges)
        assert merges > 0
        coll.compress(4)
        found = [coll.resolve(x, limit=1, mode="indexed") for x in X]
        assert all(f and f[0].metadata == i for i, f in enumerate(found))
        live = set(coll.ids.tolist())
        locations = coll._posting_index.locations()
        assert set(locations.tolist()) <= live  # every posting names a live location
    with hopmem.open(path) as db:
        coll = db.collection("c")
        again = [coll.resolve(x, limit=1, mode="indexed") for x in X]
        assert [f[0].id for f in again] == [f[0].id for f in found]
        assert set(coll._posting_index.locations().tolist()) <= set(coll.ids.tolist())


def test_resolve_a_reconstruction(db):
    coll = db.collection("c", beta=20.0)
    X = clustered(50, 16, rng=10, centers=5, noise=0.05, centre_seed=99)
    coll.write(X, metadata=[{"i": i} for i in range(50)])
    recon = coll.read(X[3] + 0.1)
    hits = coll.resolve(recon, limit=5)
    assert len(hits) == 5
    cos = [float(unit(X[h.id - 1]) @ unit(recon)) for h in hits]
    assert np.allclose([h.similarity for h in hits], cos, atol=1e-5)
    assert coll.resolve(recon, limit=5, mode="indexed")[0].similarity <= hits[0].similarity + 1e-6


def test_query_validation_and_empty_cases(db):
    coll = db.collection("c")
    assert coll.resolve(np.ones(16), limit=3, mode="indexed") == []
    assert coll.resolve(np.ones(16), limit=3, mode="exact") == []
    coll.write(np.ones((2, 16)))  # no metadata: no documents
    assert coll.resolve(np.ones(16), limit=3, mode="exact") == []
    assert coll.resolve(np.ones(16), limit=3, mode="indexed") == []
    with pytest.raises(InvalidInput, match="mode"):
        coll.resolve(np.ones(16), mode="fuzzy")
    with pytest.raises(InvalidInput, match="limit:"):
        coll.resolve(np.ones(16), limit=0, mode="indexed")
    with pytest.raises(hopmem.DimensionMismatch):
        coll.resolve(np.ones(5), mode="indexed")


def test_vector_index_compacts_and_keeps_order(rng):
    index = VectorIndex(4, capacity=16)
    V = rng.standard_normal((3000, 4)).astype(np.float32)
    index.add(np.arange(1, 3001), V)
    for doc in range(1, 2500):
        assert index.remove(doc)
    assert not index.remove(1)
    assert len(index) == 501
    ids, sims = index.search(V[2800], 3)
    assert ids[0] == 2801
    with pytest.raises(InvalidInput):
        index.add(np.array([5]), V[:1])
    assert index.alive(np.array([1, 2600, 9999])).tolist() == [False, True, False]


def test_the_half_copy_is_built_by_the_first_exact_search_and_kept_in_step():
    rng = np.random.default_rng(1)
    V = rng.standard_normal((3000, 8)).astype(np.float32)
    index = VectorIndex.adopt(np.arange(1, 2001), V[:2000].copy())
    ids, _ = index.search(V[7], 3, candidates=np.arange(1, 50))  # indexed: no half copy
    assert ids[0] == 8 and index._half is None

    def in_step():
        n = index._size
        np.testing.assert_array_equal(index._half[:n].view(np.uint16),
                                      index._vectors[:n].astype(np.float16).view(np.uint16))

    assert index.search(V[123], 5)[0][0] == 124  # exact: scans the half copy, built now
    in_step()
    index.add(np.arange(2001, 3001), V[2000:])  # grows the arrays past their capacity
    in_step()
    for doc in range(1, 1100):
        index.remove(doc)  # compacts once more than 1,024 are dead
    assert index.dead < 1099
    in_step()
    assert index.search(V[2555], 1)[0][0] == 2556
    fresh = VectorIndex.adopt(index._ids[:index._size].copy(), index._vectors[:index._size].copy())
    for q in V[::150]:  # built late or kept in step: the same answers
        np.testing.assert_array_equal(fresh.search(q, 7)[0], index.search(q, 7)[0])


# Generating up to 20 documents' location lists is slow (too_slow), and so is each example.
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 30), st.lists(st.integers(1, 12), min_size=1, max_size=4)),
                min_size=1, max_size=20),
       st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), max_size=8))
def test_posting_index_build_equals_incremental(docs, merges):
    """Building from lists + merge log equals adding, then applying merges in order."""
    uniq = {}
    for doc, locs in docs:
        uniq.setdefault(doc, sorted(set(locs)))
    doc_ids = sorted(uniq)
    # Keep merges meaningful: a removed location never comes back.
    seen_removed, pairs = set(), []
    for r, s in merges:
        if r != s and r not in seen_removed and s not in seen_removed:
            pairs.append((r, s))
            seen_removed.add(r)
    inc = PostingIndex()
    for d in doc_ids:
        inc.add(d, np.array(uniq[d]))
    inc.merge(pairs)
    batched = PostingIndex()  # the same documents in one add_many (lists, as the store posts)
    batched.add_many(doc_ids, [uniq[d] for d in doc_ids])
    batched.merge(pairs)
    lengths = np.array([len(uniq[d]) for d in doc_ids])
    flat = np.concatenate([uniq[d] for d in doc_ids]).astype(np.int64)
    built = PostingIndex.build(np.array(doc_ids), lengths, flat, np.array(pairs, np.int64))
    # Built from the log, updated incrementally, and folded: all the same.
    half = PostingIndex.build(np.array(doc_ids), lengths, flat, np.zeros(0, np.int64))
    half.merge(pairs)
    folded = PostingIndex.build(np.array(doc_ids), lengths, flat, np.zeros(0, np.int64))
    folded.merge(pairs)
    folded.compact(lambda ids: np.ones(len(ids), bool))
    for loc in range(1, 13):
        want = inc.documents(np.array([loc])).tolist()
        for other in (built, half, folded, batched):
            assert other.documents(np.array([loc])).tolist() == want
    assert inc.locations().tolist() == built.locations().tolist() == folded.locations().tolist()


@pytest.mark.parametrize("top", [1, 300, 70_000, 2**33])
def test_radix_argsort_of_ids_is_a_stable_argsort(top):
    from hopmem.store.resolution import _argsort_ids

    x = np.random.default_rng(top).integers(0, top, 5000)
    assert np.array_equal(_argsort_ids(x), np.argsort(x, kind="stable"))


def test_posting_index_reads_and_adds_from_threads():
    """Readers copy what they take from the delta: a view would pin its buffer
    and make a concurrent add fail (BufferError)."""
    import threading

    index = PostingIndex()
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                index.documents(np.arange(8))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for doc in range(20_000):
            index.add_many([doc], [[doc % 8]])
    finally:
        stop.set()
        reader.join()
    assert not errors, errors
    assert index.documents(np.array([3])).tolist() == list(range(3, 20_000, 8))


# -- deprecated names: they still work, with a DeprecationWarning ----------------------------------

def test_documents_query_is_a_deprecated_alias_of_resolve(db):
    coll = db.collection("c")
    X = clustered(20, 16, rng=0, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(20)))
    with pytest.warns(DeprecationWarning, match=r"documents\.query is deprecated.*Collection\.resolve"):
        hits = coll.documents.query(X[3], 2)
    assert hits == coll.resolve(X[3], 2, mode="exact")  # the same default mode as resolve
    with pytest.warns(DeprecationWarning, match="documents.query"):
        assert coll.documents.query(X[3], 2, mode="indexed") == coll.resolve(X[3], 2, mode="indexed")


def test_documents_query_n_is_a_deprecated_name_of_limit(db):
    coll = db.collection("c")
    X = clustered(20, 16, rng=0, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(20)))
    with pytest.warns(DeprecationWarning, match=r"use Collection\.resolve \(limit= instead of n=\)"):
        assert len(coll.documents.query(X[0], n=3)) == 3
    with pytest.raises(TypeError, match="limit"):
        coll.documents.query(X[0], 4, n=3)


def test_resolve_n_is_a_deprecated_name_of_limit(db):
    coll = db.collection("c")
    X = clustered(20, 16, rng=0, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(20)))
    with pytest.warns(DeprecationWarning, match=r"Collection\.resolve\(n=\.\.\.\) is deprecated.*limit="):
        assert coll.resolve(X[0], n=3) == coll.resolve(X[0], limit=3)
    with pytest.raises(TypeError, match="limit"):
        coll.resolve(X[0], limit=4, n=3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        coll.resolve(X[0], count=3)
