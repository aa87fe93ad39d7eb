"""Catch-up of replicated shards from the leader's replication journal, without Ray.

Real shard hosts (:class:`ShardHost`, each over its own directory) and a real
catalog (:class:`Catalog`, SQLite) in this process, joined by an in-process
transport that calls the other host directly; a host "cut off" is one the
transport cannot reach (its calls fail as a lost host's do). The same paths
run on Ray in ``tests/test_cluster_failover.py`` (a follower paused with
SIGSTOP, a deposed leader). Checked here: a copy that missed writes catches
up by the leader's journal suffix and then equals the leader bit for bit; a
copy whose entries are no longer kept, or which applied a write the new
leader never had, or whose process restarted, gets a full copy instead.
"""

from __future__ import annotations

import pytest

from conftest import clustered
from hopmem.errors import StoreError

D = 8


class InProcess:
    """The :class:`~hopmem.cluster.replication.Peers` of one host: the other hosts and the
    catalog, called directly; hosts in ``cut`` do not answer."""

    def __init__(self, net: Net) -> None:
        self.net = net

    def send(self, host_id, method, args):
        from hopmem.cluster.wire import answer, pack_error
        if host_id in self.net.cut:
            envelope = (False, pack_error(StoreError(f"host {host_id}: unreachable")))
        else:
            envelope = answer(getattr(self.net.hosts[host_id], method), *args)
        return lambda timeout: envelope

    def replicate(self, host_id, method, args, timeout):
        return self.send(host_id, method, args)(timeout)

    def catalog(self, method, *args):
        return getattr(self.net.catalog, method)(*args)


class Net:
    def __init__(self, tmp, n: int = 2, **options) -> None:
        from hopmem.cluster.catalog import Catalog
        self.tmp, self.options = tmp, options
        self.catalog = Catalog(str(tmp / "catalog.sqlite"))
        self.cut: set[str] = set()
        self.hosts = {}
        for i in range(n):
            self.start(f"h{i}")
            self.catalog.register_host(f"h{i}", f"actor-h{i}", f"node{i}", str(tmp / f"h{i}"))

    def start(self, host_id: str):
        """(Re)start host ``host_id`` over its directory: a restarted process."""
        from hopmem.cluster.host import ShardHost
        old = self.hosts.get(host_id)
        if old is not None:
            old.close()
        host = ShardHost(host_id, str(self.tmp / host_id), replica_timeout=1.0, **self.options)
        host.replication.peers = InProcess(self)
        self.hosts[host_id] = host
        return host

    def create(self, name: str):
        from hopmem.cluster.shardlog import new_history
        record = self.catalog.create_database(name, D, 1, "", None, {}, 2, list(self.hosts))
        state = record["replication"][0]
        history = new_history()
        for h in state["replicas"]:
            self.hosts[h].create_shard(name, 0, D, None, {})
            self.hosts[h].become(name, 0, state["epoch"], state["leader"],
                                 state["replicas"][1:], True, history)
        leader = self.hosts[state["leader"]]
        leader.lead(name, 0, state["epoch"], "database_call", (name, 0, "collection", ("c",), {}))
        return state

    def write(self, name: str, k: int) -> None:
        state = self.catalog.shard_state(name, 0)
        args = (name, 0, "c", "write", (clustered(1, D, rng=k),),
                {"metadata": [k], "write_id": f"w{k}"})
        self.hosts[state["leader"]].lead(name, 0, state["epoch"], "collection_call", args)

    def snapshot(self, host_id: str, name: str):
        return self.hosts[host_id].collection_call(name, 0, "c", "snapshot", (), {})

    def documents(self, host_id: str, name: str):
        return [d.metadata for d in
                self.hosts[host_id].collection_call(name, 0, "c", "documents.list", (),
                                                    {"limit": 1000})]

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        self.catalog.close()


@pytest.fixture
def net(tmp_path, monkeypatch):
    from hopmem.cluster import replication
    # The leader's background rejoin (which would catch the copy up on its own) waits
    # longer than these tests: each catch-up here is the one the test runs.
    monkeypatch.setattr(replication, "REJOIN_SECONDS", 0.0)
    n = Net(tmp_path, replica_journal_entries=20)
    yield n
    n.close()


def _equal(net: Net, name: str) -> None:
    state = net.catalog.shard_state(name, 0)
    leader = net.snapshot(state["leader"], name)
    for h in state["replicas"]:
        assert net.snapshot(h, name) == leader, f"copy on {h} differs from its leader"
        assert net.documents(h, name) == net.documents(state["leader"], name)


def test_a_follower_that_missed_writes_catches_up_by_the_journal_suffix(net):
    state = net.create("a")
    leader, follower = state["leader"], state["replicas"][1]
    for k in range(3):
        net.write("a", k)
    net.cut.add(follower)  # writes go on without it: it leaves the in-sync set
    net.write("a", 3)
    assert net.catalog.shard_state("a", 0)["isr"] == [leader]
    for k in range(4, 12):
        net.write("a", k)
    net.cut.clear()
    out = net.hosts[leader].catch_up("a", 0, state["epoch"], follower)
    assert out["isr"] == [leader, follower]
    done = out["caught_up"]
    # Entries 1..4 reached it (the collection, writes 0-2); 5..13 did not.
    assert done["how"] == "journal" and done["entries"] == 9 and done["mutations"] == 9, done
    assert net.hosts[leader].catch_ups("a", 0)[follower]["how"] == "journal"
    _equal(net, "a")
    assert net.documents(follower, "a") == list(range(12))
    net.write("a", 12)  # and it follows the next write as a member of the in-sync set again
    assert net.catalog.shard_state("a", 0)["isr"] == [leader, follower]
    _equal(net, "a")


def test_a_follower_too_far_behind_gets_a_full_copy(net):
    state = net.create("b")
    leader, follower = state["leader"], state["replicas"][1]
    net.write("b", 0)
    net.cut.add(follower)
    for k in range(1, 31):  # 30 entries: more than the 20 the leader keeps
        net.write("b", k)
    net.cut.clear()
    done = net.hosts[leader].catch_up("b", 0, state["epoch"], follower)["caught_up"]
    assert done["how"] == "copy" and done["bytes"] > 0, done
    assert "keeps entries after" in done["why"]
    _equal(net, "b")
    net.write("b", 31)  # the copy continues from the leader's position
    assert net.catalog.shard_state("b", 0)["isr"] == [leader, follower]
    _equal(net, "b")


def test_a_deposed_leader_that_committed_an_unacknowledged_write_gets_a_full_copy(net):
    from hopmem.cluster.wire import NotLeader
    state = net.create("c")
    old, new = state["leader"], state["replicas"][1]
    for k in range(3):
        net.write("c", k)
    # The follower is promoted while the old leader lives on, cut off from it.
    net.catalog.promote("c", 0, state["epoch"], old, new)
    net.cut.add(new)
    args = ("c", 0, "c", "write", (clustered(1, D, rng=99),), {"metadata": [99]})
    with pytest.raises(NotLeader):  # it committed 99 itself, but cannot acknowledge it
        net.hosts[old].lead("c", 0, state["epoch"], "collection_call", args)
    assert 99 in net.documents(old, "c")
    net.cut.clear()
    for k in range(3, 6):
        net.write("c", k)  # the new leader, at epoch 2
    assert 99 not in net.documents(new, "c")
    done = net.hosts[new].catch_up("c", 0, state["epoch"] + 1, old)["caught_up"]
    assert done["how"] == "copy" and "never acknowledged" in done["why"], done
    _equal(net, "c")
    assert net.documents(old, "c") == list(range(6))


def test_a_deposed_leader_without_unacknowledged_writes_catches_up_by_the_journal(net):
    state = net.create("d")
    old, new = state["leader"], state["replicas"][1]
    for k in range(3):
        net.write("d", k)
    net.catalog.promote("d", 0, state["epoch"], old, new)
    net.hosts[new].become("d", 0, state["epoch"] + 1, new, [], False)
    for k in range(3, 7):
        net.write("d", k)
    done = net.hosts[new].catch_up("d", 0, state["epoch"] + 1, old)["caught_up"]
    assert done["how"] == "journal" and done["entries"] == 4, done
    _equal(net, "d")


def test_a_follower_whose_process_restarted_gets_a_full_copy(net):
    state = net.create("e")
    leader, follower = state["leader"], state["replicas"][1]
    for k in range(3):
        net.write("e", k)
    net.start(follower)  # its journal (in memory) is gone: its position is unknown
    net.write("e", 3)  # it refuses the next entry, and leaves the in-sync set
    assert net.catalog.shard_state("e", 0)["isr"] == [leader]
    done = net.hosts[leader].catch_up("e", 0, state["epoch"], follower)["caught_up"]
    assert done["how"] == "copy" and "unknown" in done["why"], done
    _equal(net, "e")


def test_a_new_leader_catches_up_a_lagging_follower_by_its_journal(tmp_path, monkeypatch):
    """Three copies: the leader dies after one follower applied its last entry and the other
    did not; the promoted one (which has it) brings the other up by the journal."""
    from hopmem.cluster import replication
    monkeypatch.setattr(replication, "REJOIN_SECONDS", 0.0)
    net = Net(tmp_path, n=3)
    try:
        record = net.catalog.create_database("f", D, 1, "", None, {}, 3, list(net.hosts))
        state = record["replication"][0]
        from hopmem.cluster.shardlog import new_history
        history = new_history()
        for h in state["replicas"]:
            net.hosts[h].create_shard("f", 0, D, None, {})
            net.hosts[h].become("f", 0, 1, state["leader"], state["replicas"][1:], True, history)
        leader, a, b = state["replicas"]
        net.hosts[leader].lead("f", 0, 1, "database_call", ("f", 0, "collection", ("c",), {}))
        net.write("f", 0)
        net.cut.add(b)
        net.write("f", 1)  # b misses it and leaves the in-sync set
        net.cut = {leader}  # the leader is lost
        state = net.catalog.promote("f", 0, 1, leader, a)
        net.catalog.expand_isr("f", 0, 2, a, b)  # b is a replica again, out of date
        net.hosts[a].become("f", 0, 2, a, [b], False)
        net.write("f", 2)  # the new leader first brings b up to its own position
        done = net.hosts[a].catch_ups("f", 0)[b]
        assert done["how"] == "journal" and done["entries"] == 1, done
        assert net.documents(b, "f") == [0, 1, 2]
        assert net.snapshot(a, "f") == net.snapshot(b, "f")
    finally:
        net.close()


def test_the_journal_keeps_its_latest_entries_and_owns_their_arrays():
    import numpy as np

    from hopmem.cluster.shardlog import ShardLog
    log = ShardLog("h", max_entries=100, max_bytes=10_000)
    backing = np.zeros((100, 8), np.float32)
    for i in range(10):
        view = backing[i:i + 5]  # 160 bytes of vectors viewing memory the journal must not pin
        log.append(1 + i // 5, [("collection_call", ("db", 0, "c", "write", (view,), {}))])
    assert log.position() == ("h", 10, 2)
    kept = log.after(log.base)
    assert all(e.calls[0][1][4][0].flags.owndata for e in kept)
    assert log.why_not_suffix(("h", 3, 1)) == "" and [e.pos for e in log.after(3)] == [4, 5, 6, 7,
                                                                                       8, 9, 10]
    assert "another history" in log.why_not_suffix(("g", 3, 1))
    assert "never acknowledged" in log.why_not_suffix(("h", 7, 1))  # entry 7 is of epoch 2
    assert "never acknowledged" in log.why_not_suffix(("h", 11, 2))  # ahead of the leader
    for _ in range(60):  # past the byte bound: the oldest entries go
        log.append(2, [("collection_call", ("db", 0, "c", "write", (backing[:5],), {}))])
    assert log.bytes <= 10_000 and log.pos == 70 and log.base > 3
    assert "keeps entries after" in log.why_not_suffix(("h", 3, 1))
