"""hopmem.cluster: placement, the error envelope, and what a cluster adds to the store's API.

The store's own API tests (test_store_basic.py, test_store_documents.py) run
against a cluster too, through the ``store_opener`` fixture; this file covers
what only a cluster has: shards, hosts, the catalog, moves.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

import hopmem
from conftest import cluster_db_name, clustered
from hopmem import AlreadyExists, DimensionMismatch, EmptyMemory, InvalidInput, NotFound
from hopmem.cluster.placement import stable_shard
from hopmem.cluster.wire import answer, pack_error, unpack_error


def test_stable_shard_is_fixed_and_unambiguous():
    # Fixed values: the same in every process and release (a change would strand data).
    assert [stable_shard("docs", f"c{i}", 8) for i in range(6)] == \
        [stable_shard("docs", f"c{i}", 8) for i in range(6)]
    assert stable_shard("ab", "c", 1 << 30) != stable_shard("a", "bc", 1 << 30)
    counts = np.bincount([stable_shard("db", f"user-{i}", 4) for i in range(4000)], minlength=4)
    assert counts.min() > 850  # spread evenly
    with pytest.raises(InvalidInput, match="shards: expected an integer >= 1"):
        stable_shard("a", "b", 0)


def test_stable_shard_agrees_across_processes():
    code = ("from hopmem.cluster.placement import stable_shard;"
            "print([stable_shard('docs', f'c{i}', 7) for i in range(20)])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == str([stable_shard("docs", f"c{i}", 7) for i in range(20)])


@pytest.mark.parametrize("exc", [
    DimensionMismatch(16, 5), EmptyMemory(), NotFound("collection 'x' not found"),
    InvalidInput("limit: expected an integer >= 1, got 0"), KeyError("k"),
])
def test_errors_cross_the_envelope_as_themselves(exc):
    ok, packed = answer(lambda: (_ for _ in ()).throw(exc))
    assert not ok
    again = unpack_error(packed)
    assert type(again) is type(exc) and str(again) == str(exc) and again.args == exc.args


def test_an_unknown_error_class_becomes_a_runtime_error():
    packed = ("no.such.module", "Err", ("boom",), {})
    assert str(unpack_error(packed)) == "no.such.module.Err: boom"
    assert pack_error(ValueError(object()))[2]  # an argument that pickles stays


def test_importing_hopmem_cluster_does_not_import_ray():
    code = "import sys, hopmem.cluster, hopmem.cluster.client; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the catalog and a shard host, without Ray ----------------------------------------------------


def test_catalog_places_shards_on_the_least_loaded_hosts(tmp_path):
    from hopmem.cluster.catalog import Catalog
    cat = Catalog(str(tmp_path / "catalog.sqlite"))
    with pytest.raises(InvalidInput, match="at least one registered shard host"):
        cat.create_database("a", 4, 2, "", None, {})
    for h in ("h0", "h1", "h2"):
        cat.register_host(h, f"actor-{h}", None, str(tmp_path / h))
    assert cat.create_database("a", 4, 4, "", None, {})["placement"] == ["h0", "h1", "h2", "h0"]
    assert cat.create_database("b", 4, 2, "", None, {"k": 3})["placement"] == ["h1", "h2"]
    with pytest.raises(AlreadyExists):
        cat.create_database("a", 4, 1, "", None, {})
    cat.move_shard("a", 3, "h2")
    again = Catalog(cat.path)  # the file is the catalog: a restarted actor reads it back
    assert again.database("a")["placement"] == ["h0", "h1", "h2", "h2"]
    assert again.database("b")["config"] == {"k": 3}
    assert again.cluster_id() == cat.cluster_id()
    with pytest.raises(NotFound, match="host 'h9' not found"):
        again.move_shard("a", 0, "h9")
    assert again.drop_database("a") and not again.drop_database("a")
    assert again.databases() == ["b"]


def test_shard_host_serves_the_store_and_answers_not_here(tmp_path):
    import inspect

    from hopmem.cluster.host import ShardHost
    from hopmem.cluster.wire import NotHere
    from hopmem.store import Collection
    host = ShardHost("h0", str(tmp_path / "h0"))
    host.create_shard("db", 1, 8, None, {})
    summary = host.database_call("db", 1, "collection", ("c",), {})
    assert summary["name"] == "c" and summary["config"].dim == 8
    res = host.collection_call("db", 1, "c", "write", (np.eye(8)[:2], ["a", "b"]), {})
    assert res.ids == [1, 2]
    assert host.collection_call("db", 1, "c", "resolve", (np.eye(8)[1], 1, "exact"), {})[0].metadata == "b"
    with pytest.raises(NotHere):
        host.database_call("db", 0, "collections", (), {})
    with pytest.raises(InvalidInput, match="method: expected one of"):
        host.collection_call("db", 1, "c", "_memory", (), {})
    if "write_id" not in inspect.signature(Collection.write).parameters:
        with pytest.raises(InvalidInput, match="write_id: expected a store that records"):
            host.collection_call("db", 1, "c", "write", (np.eye(8)[:1],), {"write_id": "x"})
    assert host.shards() == [("db", 1)]
    size = host.freeze("db", 1, ".moves/x.hopmem")
    assert size > 0
    with pytest.raises(NotHere, match="moving"):
        host.collection_call("db", 1, "c", "stats", (), {})
    host.thaw("db", 1)
    assert host.collection_call("db", 1, "c", "stats", (), {}).documents == 2
    host.close()


def test_a_group_of_server_reads_is_one_call_per_method_to_a_remote_collection():
    pytest.importorskip("starlette")
    import asyncio

    from hopmem.server.reads import _run_group

    class Remote:  # what a cluster collection offers the server's read groups
        def __init__(self):
            self.calls = []

        def read_group(self, method, queries):
            self.calls.append((method, len(queries)))
            return [(True, (method, q)) if q >= 0 else (False, InvalidInput("bad")) for q, _ in queries]

        def analyze(self, query, strategy):
            raise AssertionError("a remote collection's reads travel as groups")

        def read_scored(self, query, strategy):
            raise AssertionError("a remote collection's reads travel as groups")

    loop = asyncio.new_event_loop()
    try:
        remote = Remote()
        futures = [loop.create_future() for _ in range(5)]
        futures[2].cancel()  # a read given up meanwhile is not sent
        reads = [(remote.analyze, 0, "iterative", futures[0]), (remote.read_scored, 1, "fast", futures[1]),
                 (remote.analyze, 2, "iterative", futures[2]), (remote.analyze, -1, "iterative", futures[3]),
                 (remote.analyze, 4, "iterative", futures[4])]
        out = _run_group(reads)
    finally:
        loop.close()
    assert sorted(remote.calls) == [("analyze", 3), ("read_scored", 1)]
    assert out[0] == (True, ("analyze", 0)) and out[1] == (True, ("read_scored", 1))
    assert out[2] == (False, None) and out[3][0] is False and out[4] == (True, ("analyze", 4))


# -- on a local Ray cluster ----------------------------------------------------------------------


def test_databases_are_split_over_shards_and_hosts(ray_cluster):
    name = cluster_db_name()
    db = ray_cluster.create(name, 8, shards=4)
    assert db.shards == 4 and sorted(set(db.placement)) == ["h0", "h1"]
    # 40 names: every one of 4 shards gets one unless 40 stable hashes all miss it (p ~ 4e-5);
    # with 12, some database names (they depend on the test order) left a shard empty.
    names = [f"c{i}" for i in range(40)]
    for n in names:
        db.collection(n).write(np.full((1, 8), 1.0 + len(n)), metadata=[n])
    assert db.collections() == sorted(names)
    assert {db.shard_of(n) for n in names} == {0, 1, 2, 3}
    assert db.info()["collections"] == sorted(names) and db.info()["dimension"] == 8
    assert name in ray_cluster.list() and name in ray_cluster
    with pytest.raises(AlreadyExists, match=f"database '{name}' already exists"):
        ray_cluster.create(name, 8)
    assert ray_cluster.open(name).dim == 8
    with pytest.raises(hopmem.IncompatibleStore, match="dim=8, opened with dim=4"):
        ray_cluster.open(name, 4)
    assert ray_cluster.drop(name) is True and ray_cluster.drop(name) is False
    with pytest.raises(NotFound, match=f"database '{name}' not found"):
        ray_cluster.get(name)
    with pytest.raises(NotFound, match="give dim"):
        ray_cluster.open(name)


def test_a_failed_create_leaves_nothing(ray_cluster):
    name = cluster_db_name()
    with pytest.raises(hopmem.InvalidConfig):
        ray_cluster.create(name, 8, k=-3)
    assert name not in ray_cluster.list()
    assert ray_cluster.create(name, 8).dim == 8


def test_move_a_shard_and_keep_serving(ray_cluster):
    name = cluster_db_name()
    db = ray_cluster.create(name, 16, shards=2)
    coll = db.collection("moving")
    X = clustered(40, 16, rng=1, noise=0.15, centre_seed=99)
    coll.write(X, metadata=list(range(40)))
    before = coll.snapshot()
    shard = coll.shard
    source = db.placement[shard]
    target = "h0" if source == "h1" else "h1"
    done = ray_cluster.move_shard(name, shard, target)
    assert done["moved"] and done["from"] == source and done["to"] == target
    assert ray_cluster.placement(name)[shard] == target
    # This client follows the move (the old host answers "not here"), state bit-identical.
    assert coll.snapshot() == before
    assert coll.resolve(X[5], limit=1)[0].metadata == 5
    assert coll.write(X[:1], metadata=["after"]).ids == [41]
    with pytest.raises(InvalidInput, match="host: expected one of"):
        ray_cluster.move_shard(name, shard, "h9")
    assert ray_cluster.move_shard(name, shard, target)["moved"] is False


def test_text_remember_and_recall_run_over_the_cluster(ray_cluster, tmp_path):
    from hopmem.text.encoders import HashingEncoder
    enc = HashingEncoder(64)
    texts = [f"{w} note number {i}" for i in range(5)
             for w in ("the cat sat on the mat", "rain tomorrow", "markets fell", "bread recipe")]
    name = cluster_db_name()
    db = ray_cluster.create(name, 64, encoder=enc)
    assert db.encoder.fingerprint == enc.fingerprint
    coll = db.collection("notes")
    with hopmem.open(str(tmp_path / "local.hopmem"), 64, encoder=enc) as local_db:
        local = local_db.collection("notes")
        assert coll.remember(texts) == local.remember(texts)
        assert coll.centering == local.centering
        for question in ("cat on a mat", "will it rain"):
            assert coll.recall(question, limit=3).to_dict() == local.recall(question, limit=3).to_dict()
    plain = ray_cluster.create(cluster_db_name(), 64).collection("x")
    with pytest.raises(InvalidInput, match="need the database opened with an encoder"):
        plain.remember(["a"])


def test_cli_shard_list_and_move(ray_cluster, capsys):
    import json

    from hopmem.cli import main
    name = cluster_db_name()
    db = ray_cluster.create(name, 8, shards=2)
    coll = db.collection("c")
    coll.write(np.eye(8), metadata=list(range(8)))
    assert main(["shard", "--json", "list", name]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["databases"][name] == db.placement
    assert {h["host_id"] for h in listed["hosts"]} == {"h0", "h1"}
    target = "h0" if db.placement[coll.shard] == "h1" else "h1"
    assert main(["shard", "move", name, str(coll.shard), target]) == 0
    assert f"to {target}" in capsys.readouterr().out
    assert ray_cluster.placement(name)[coll.shard] == target
    assert coll.resolve(np.eye(8)[3], limit=1)[0].metadata == 3
    assert main(["shard", "move", name, "7", target]) == 1
    assert "shard: expected an integer in 0..1, got 7" in capsys.readouterr().err


def test_agent_memory_runs_on_the_namespace_shard(ray_cluster, tmp_path):
    from hopmem.agent import AgentMemory
    from hopmem.text.encoders import HashingEncoder
    enc = HashingEncoder(64)
    facts = ["Ticket PROJ-4417 tracks the duplicate webhook deliveries.",
             "Production deploys require a database snapshot first.",
             "The billing service runs on Postgres 16."]
    clock = {"clock": lambda: 1_000_000.0}
    db = ray_cluster.create(cluster_db_name(), 64)
    remote = db.agent_memory("team", encoder=enc, **clock)
    assert remote.shard == stable_shard(db.name, "team", db.shards)
    local = AgentMemory.open(tmp_path / "agent.db", encoder=enc, namespace="team", **clock)
    try:
        for fact in facts:
            assert remote.remember(fact).id == local.remember(fact).id
        got = remote.recall("which database does billing use?", limit=2)
        want = local.recall("which database does billing use?", limit=2)
        assert [(h.text, h.score) for h in got.hits] == [(h.text, h.score) for h in want.hits]
        assert remote.stats() == local.stats()
        with pytest.raises(InvalidInput, match="public AgentMemory method"):
            remote.subscribe(print)
        # The shard's host restarts: the memory is opened there again and still has its entries.
        ok, pid = ray_cluster.transport.host(db.placement[remote.shard], "pid", (), True)
        import os
        import signal
        os.kill(pid, signal.SIGKILL)
        assert remote.stats() == local.stats()
        # Moving the namespace's shard carries its agent file: the memory answers from the new host.
        source = db.placement[remote.shard]
        target = "h0" if source == "h1" else "h1"
        done = ray_cluster.move_shard(db.name, remote.shard, target)
        assert done["moved"] and ray_cluster.placement(db.name)[remote.shard] == target
        assert remote.stats() == local.stats()
        got = remote.recall("which database does billing use?", limit=2)
        assert [(h.text, h.score) for h in got.hits] == [(h.text, h.score) for h in want.hits]
        assert remote.remember("Deploys happen on Tuesdays.").id == local.remember("Deploys happen on Tuesdays.").id
    finally:
        local.close()


def test_agent_remember_records_its_write_id(tmp_path):
    """Ray-free: what lets the cluster retry AgentMemory.remember after a host failure."""
    from hopmem.agent import AgentMemory
    from hopmem.text.encoders import HashingEncoder
    enc = HashingEncoder(64)
    path = tmp_path / "agent.db"
    with AgentMemory.open(path, encoder=enc, namespace="team", clock=lambda: 1_000_000.0) as memory:
        first = memory.remember("The billing service runs on Postgres 16.", write_id="r-1")
        again = memory.remember("The billing service runs on Postgres 16.", write_id="r-1")
        assert again.id == first.id and not again.merged and again.merged_count == 0
        merged = memory.remember("The billing service runs on Postgres 16.", write_id="r-2")
        assert merged.id == first.id and merged.merged and merged.merged_count == 1
        assert memory.remember("The billing service runs on Postgres 16.", write_id="r-2").merged
        with pytest.raises(InvalidInput, match="write_id: expected 'r-1' with the statement"):
            memory.remember("Deploys need a snapshot first.", write_id="r-1")
        with pytest.raises(InvalidInput, match="write_id: expected a non-empty string"):
            memory.remember("Deploys need a snapshot first.", write_id="")
        with pytest.raises(InvalidInput, match="write_id: expected one per item"):
            memory.remember_many(["a b c", "d e f"], write_id="x")
        assert memory.stats()["entries"] == 1
    # Recorded in the file: another process (a restarted host) answers the repeat the same way.
    with AgentMemory.open(path, encoder=enc, namespace="team", clock=lambda: 1_000_000.0) as memory:
        assert memory.remember("The billing service runs on Postgres 16.", write_id="r-1").id == first.id
        assert memory.stats()["entries"] == 1


def test_reads_from_any_in_sync_copy_answer_as_the_leader(ray_cluster):
    name = cluster_db_name("any")
    db = ray_cluster.create(name, 8, shards=2, replicas=2)
    assert db.replicas == 2
    coll = db.collection("c")
    coll.write(np.eye(8), metadata=list(range(8)))
    state = db.replication[coll.shard]
    assert state["isr"] == state["replicas"] and len(state["replicas"]) == 2
    for host in state["replicas"]:  # each copy, asked directly, holds the leader's state
        ok, snap = ray_cluster.transport.host(
            host, "collection_call", (name, coll.shard, "c", "snapshot", (), {}), True)
        assert ok and snap == coll.snapshot()
    q = np.eye(8)[5]
    for _ in range(4):  # spread over both copies
        assert coll.resolve(q, limit=2, read_from="any") == coll.resolve(q, limit=2)
        np.testing.assert_array_equal(coll.read(q, read_from="any"), coll.read(q))
    # A read goes to the copy with the fewest reads in flight from this process, so
    # concurrent readers use both copies at once.
    copies = list(state["isr"])
    with ray_cluster.reading_from(copies) as first:
        with ray_cluster.reading_from(copies) as second:
            assert {first, second} == set(copies)
            with ray_cluster.reading_from(copies), ray_cluster.reading_from(copies) as fourth:
                assert fourth in copies
        with ray_cluster.reading_from(copies) as again:
            assert again == second  # the least busy one
    hits: list[Any] = []

    def reader() -> None:
        hits.extend(coll.resolve(q, limit=2, read_from="any") for _ in range(5))

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(hits) == 30 and all(h == coll.resolve(q, limit=2) for h in hits)
    assert ray_cluster._reading == {}  # every read counted out
    ray_cluster.read_from = "any"  # the client's default
    try:
        assert coll.snapshot() == coll.snapshot(read_from="leader")
    finally:
        ray_cluster.read_from = "leader"
    with pytest.raises(InvalidInput, match="read_from: expected one of"):
        coll.resolve(q, read_from="nearest")
    with pytest.raises(hopmem.errors.NotSupported, match="agent memories are not replicated"):
        db.agent_memory("ns", encoder=None)
    with pytest.raises(hopmem.errors.NotSupported, match="replicated"):
        ray_cluster.move_shard(name, coll.shard, state["replicas"][1])
