"""Partitioned collections on a cluster: ``ClusterDatabase.collection(name, partitions=P)``.

P part collections on different shards, recorded in the catalog, answering
exact resolve exactly as one collection holding the same documents; memory
reads refused with NotSupported (a 400 through the HTTP server). Every test
uses the session's one local cluster (``ray_cluster``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hopmem
from conftest import cluster_db_name, clustered
from hopmem.cluster.client import ClusterPartitionedCollection, part_name
from hopmem.errors import IncompatibleStore, InvalidInput, NotFound, NotSupported

D = 8
_NAMES = itertools.count()


@pytest.fixture(scope="module")
def pdb(ray_cluster):
    """A cluster database of 3 shards (the session's cluster has 2 hosts)."""
    return ray_cluster.create(cluster_db_name("p"), D, shards=3)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """A local database: the single collections the partitioned ones are compared with."""
    with hopmem.open(str(tmp_path_factory.mktemp("oracle") / "one.hopmem"), D) as db:
        yield db


# Ray round trips dominate: a few examples cover the merge (its own property test in
# test_partitions.py runs many more examples without Ray).
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(n=st.integers(0, 40), batches=st.integers(1, 3), partitions=st.integers(2, 3),
       duplicates=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_exact_top10_equals_one_collection(pdb, oracle, n, batches, partitions, duplicates, seed):
    name = f"prop{next(_NAMES)}"
    coll = pdb.collection(name, partitions=partitions)
    one = oracle.collection(name)
    X = clustered(n, D, rng=seed, duplicates=min(duplicates, n), noise=0.2) if n else \
        np.zeros((0, D), np.float32)
    meta = [{"i": i} for i in range(n)]
    for chunk in np.array_split(np.arange(n), batches):
        if len(chunk):
            got = coll.write(X[chunk], [meta[i] for i in chunk])
            want = one.write(X[chunk], [meta[i] for i in chunk])
            assert got.ids == list(want.ids)
    rng = np.random.default_rng(seed)
    queries = [rng.standard_normal(D).astype(np.float32)] + ([X[0]] if n else [])
    for q in queries:
        assert coll.resolve(q, 10, "exact") == one.resolve(q, limit=10, mode="exact")
    assert coll.documents.count() == n
    assert [(d.id, d.metadata) for d in coll.documents.list(0, 100)] == \
        [(d.id, d.metadata) for d in one.documents.list(0, 100)]


def test_parts_on_different_shards_listed_once_dropped_together(ray_cluster):
    pdb = ray_cluster.create(cluster_db_name("p"), D, shards=3)
    coll = pdb.collection("spread", partitions=3)
    assert isinstance(coll, ClusterPartitionedCollection) and coll.partitions == 3
    assert sorted(coll.shards) == [0, 1, 2]
    assert coll.shards[0] == pdb.shard_of("spread")
    assert {ray_cluster.placement(pdb.name)[s] for s in coll.shards} == \
        set(ray_cluster.placement(pdb.name))  # both hosts hold a part
    assert [p.name for p in coll.parts] == [part_name("spread", p, 3) for p in range(3)]
    coll.write(np.eye(D)[:5], metadata=list("abcde"))
    assert pdb.collections().count("spread") == 1
    assert not [n for n in pdb.collections() if "#part-" in n]
    assert "spread" in pdb and pdb.partitions_of("spread") == 3
    # Another client (a fresh view of the database) finds it partitioned, without partitions=.
    pdb.close()
    db = ray_cluster.get(pdb.name)
    again = db.get_collection("spread")
    assert isinstance(again, ClusterPartitionedCollection) and again.partitions == 3
    assert db.collection("spread") is again
    assert again.documents.count() == 5 and again.stats().documents == 5
    assert again.documents.get(4, vector=False).metadata == "d"
    with pytest.raises(IncompatibleStore, match="has 3 partitions, opened with partitions=2"):
        db.collection("spread", partitions=2)
    assert db.drop_collection("spread") is True
    assert "spread" not in db.collections() and "spread" not in db
    with pytest.raises(NotFound):
        again.documents.count()
    with pytest.raises(NotFound):
        db.get_collection("spread")
    assert db.collection("spread", partitions=2).documents.count() == 0  # nothing left behind
    assert db.drop_collection("spread") and not db.drop_collection("spread")


def test_partition_counts_and_names(ray_cluster):
    db = ray_cluster.get(ray_cluster.create(cluster_db_name("p"), D, shards=2).name)
    plain = db.collection("plain", partitions=1)
    assert not isinstance(plain, ClusterPartitionedCollection) and db.partitions_of("plain") == 1
    with pytest.raises(IncompatibleStore, match="exists with one partition"):
        db.collection("plain", partitions=2)
    with pytest.raises(InvalidInput, match="reserved for the parts"):
        db.collection("x#part-0-of-2")
    with pytest.raises(InvalidInput, match="reserved for the parts"):
        db.get_collection("x#part-1-of-2")
    with pytest.raises(InvalidInput, match="partitions: expected an integer >= 1, got 0"):
        db.collection("y", partitions=0)
    with pytest.raises(InvalidInput, match="expected at most 116 characters"):
        db.collection("z" * 120, partitions=2)
    assert db.collection("z" * 116, partitions=2).partitions == 2
    assert db.collections() == ["plain", "z" * 116]


def test_memory_reads_are_refused_clearly(ray_cluster, pdb):
    coll = pdb.collection("refuse", partitions=2)
    coll.write(np.eye(D)[:4], metadata=[1, 2, 3, 4])
    q = np.eye(D)[1]
    for call in (lambda: coll.read(q), lambda: coll.read_scored(q), lambda: coll.analyze(q),
                 lambda: coll.attention(q, 1.0), lambda: coll.recall("hello"),
                 lambda: coll.remember(["hello"]), lambda: coll.compress(),
                 lambda: coll.snapshot(), lambda: coll.centering):
        with pytest.raises(NotSupported, match="partitioned collection 'refuse' of 2 partitions"):
            call()
    assert coll.resolve(q, 1)[0].metadata == 2  # the documents still answer


def test_partitioned_writes_and_deletes_with_write_ids(pdb):
    coll = pdb.collection("ids", partitions=2)
    first = coll.write(np.eye(D)[:4], metadata=list("abcd"), write_id="w-1")
    again = coll.write(np.eye(D)[:4], metadata=list("abcd"), write_id="w-1")
    assert again.ids == first.ids and coll.documents.count() == 4
    doomed = first.ids[1]
    assert coll.documents.delete(doomed, write_id="d-1") is True
    assert coll.documents.delete(doomed, write_id="d-1") is True  # the first answer, again
    assert coll.documents.delete(doomed) is False
    assert coll.documents.count() == 3


def test_http_server_serves_a_partitioned_collection(ray_cluster, tmp_path):
    from starlette.testclient import TestClient

    from hopmem.server import create_app
    name = cluster_db_name("h")
    db = ray_cluster.create(name, D, shards=2)
    db.collection("docs", partitions=2)
    root = ray_cluster.root
    (tmp_path / "data").mkdir()
    ray_cluster.root = str(tmp_path / "data")
    try:
        dim = None if "default" in ray_cluster else D  # the server needs a database "default"
        with TestClient(create_app(tmp_path / "data", dim, datadir=ray_cluster)) as c:
            base = f"/db/{name}/collections/docs"
            r = c.post(f"{base}/write", json={"vectors": np.eye(D)[:5].tolist(),
                                              "metadata": list("abcde")})
            assert r.status_code == 200 and r.json() == {"count": 5, "ids": [1, 2, 3, 4, 5]}
            r = c.post(f"{base}/documents/query", json={"query": np.eye(D)[3].tolist(), "n": 2,
                                                        "mode": "exact"})
            assert r.status_code == 200 and r.json()["results"][0]["metadata"] == "d"
            assert c.get(f"{base}/documents/4").json()["metadata"] == "d"
            assert c.delete(f"{base}/documents/4").json() == {"deleted": True}
            assert c.get(f"{base}/stats").json()["documents"] == 4
            assert c.get(f"{base}/config").json()["config"]["dim"] == D
            assert c.get(f"/db/{name}/collections").json()["collections"] == ["docs"]
            r = c.post(f"/db/{name}/collections", json={"name": "wide", "partitions": 3})
            assert r.status_code == 200 and r.json() == {"name": "wide", "created": True}
            assert db.partitions_of("wide") == 3
            r = c.post(f"/db/{name}/collections", json={"name": "bad", "partitions": 0})
            assert r.status_code == 400 and "partitions: expected an integer >= 1, got 0" in r.json()["error"]
            for route in ("read", "analyze", "attention"):
                r = c.post(f"{base}/{route}", json={"query": np.eye(D)[0].tolist()})
                assert r.status_code == 400, (route, r.text)
                assert "partitioned collection 'docs' of 2 partitions" in r.json()["error"]
    finally:
        ray_cluster.root = root
