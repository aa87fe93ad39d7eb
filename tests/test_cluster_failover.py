"""Replicated shards on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``).

One head node (the catalog's, never removed) and three worker nodes, one
shard host per node, databases with R = 2 copies of each shard. Nodes are
removed (``Cluster.remove_node``: the raylet and every worker on it are
killed) while four clients write; half of the rounds delete the node's data
directory too. Every acknowledged write must be present afterwards, exactly
once; writes must be accepted again within 10 s; after a repair every copy's
snapshot must equal its leader's bit for bit. A leader whose epoch is stale
must not acknowledge a write, even one sent while it was frozen (SIGSTOP: alive,
but unable to answer or reach anything) and delivered after a new leader was
promoted. A follower frozen while writes go on catches up, once it answers
again, from the leader's replication journal; one too far behind, or a
deposed leader holding a write nobody acknowledged, by a full copy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import CLUSTER_SKIP, clustered, ray_installed

if not ray_installed():
    pytest.skip(CLUSTER_SKIP, allow_module_level=True)

# Read by Ray when it is first imported: without it Ray swaps 127.0.0.1 for the machine's
# address when a process connects to a cluster, and the worker nodes never reach the head.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

D = 16
WORKERS = 3
#: Replication journal entries each host keeps per shard (small: the too-far-behind test).
JOURNAL = 40


class Nodes:
    """A head node and worker nodes on this machine, loopback only; hopmem connected."""

    def __init__(self, root: str) -> None:
        import tempfile

        from ray.cluster_utils import Cluster
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        os.environ["RAY_worker_niceness"] = "0"
        self.temp = tempfile.mkdtemp(prefix="hmr-")
        # Cluster.add_node records the head's address in Ray's default temp dir, which may
        # not exist yet (the head's own files go to self.temp).
        from ray._private.utils import get_ray_address_file
        os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1",
            "temp_dir": self.temp, "object_store_memory": 80 << 20})
        self.workers = [self.add() for _ in range(WORKERS)]
        import hopmem.cluster
        self.root = root
        self.hopmem = hopmem.cluster.connect(self.cluster.address, root=root, retry_timeout=20.0,
                                             replica_timeout=3.0,
                                             replica_journal_entries=JOURNAL)

    def add(self):
        return self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1",
                                     object_store_memory=80 << 20)

    def host_of_node(self, node) -> str:
        return next(h["host_id"] for h in self.hopmem.hosts() if h["node_id"] == node.node_id)

    def node_of_host(self, host_id: str):
        node_id = next(h["node_id"] for h in self.hopmem.hosts() if h["host_id"] == host_id)
        return next((n for n in self.workers if n.node_id == node_id), None)

    def remove(self, node) -> None:
        self.workers.remove(node)
        self.cluster.remove_node(node)

    def shutdown(self) -> None:
        try:
            self.hopmem.shutdown()
        finally:
            self.cluster.shutdown()
            shutil.rmtree(self.temp, ignore_errors=True)


class Alone:
    """This module's outcomes from a fresh interpreter: a process connects to one Ray cluster
    only, so when another module's cluster already runs in this one (this file sorts before
    the other cluster tests, but a command line may order them otherwise), the module runs
    in a child pytest and each test here reports its own outcome there."""

    def __init__(self, tmp: Path) -> None:
        report = tmp / "report.xml"
        env = {**os.environ, "HOPMEM_FAILOVER_ALONE": "1"}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        __file__, f"--junitxml={report}"], env=env, check=False,
                       cwd=Path(__file__).resolve().parent.parent)
        self.outcomes: dict[str, str | None] = {}
        for case in ET.parse(report).iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            self.outcomes[case.get("name", "")] = None if bad is None else bad.get("message", "")

    def check(self, name: str) -> None:
        assert name in self.outcomes, f"{name} did not run in the child pytest"
        assert self.outcomes[name] is None, self.outcomes[name]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    import ray
    if ray.is_initialized() and not os.environ.get("HOPMEM_FAILOVER_ALONE"):
        yield Alone(tmp_path_factory.mktemp("alone"))
        return
    n = Nodes(str(tmp_path_factory.mktemp("replicas")))
    try:
        yield n
    finally:
        n.shutdown()
    left = subprocess.run(["pgrep", "-f", n.temp], capture_output=True, text=True).stdout.split()
    assert not left, f"Ray processes left behind: {left}"


def _copies_equal_leader(cluster, db, names) -> None:
    """Every copy of each collection's shard holds its leader's snapshot, bit for bit."""
    t = cluster.transport
    db.refresh()
    for name in names:
        shard = db.shard_of(name)
        state = db.replication[shard]
        assert len(state["isr"]) == 2, state
        snaps = {}
        for host in state["replicas"]:
            ok, snap = t.host(host, "collection_call", (db.name, shard, name, "snapshot", (), {}),
                              True)
            assert ok, snap
            snaps[host] = snap
        leader = snaps[state["leader"]]
        for host, snap in snaps.items():
            assert snap == leader, f"{name}: copy on {host} differs from leader {state['leader']}"


def test_the_catalog_lives_on_the_head_and_copies_on_distinct_nodes(nodes, request):
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    head = nodes.cluster.head_node.node_id
    hosts = {h["host_id"]: h["node_id"] for h in c.hosts()}
    assert len(set(hosts.values())) == 1 + WORKERS
    db = c.create("placed", D, shards=8, replicas=2)
    for state in db.replication:
        assert len(state["replicas"]) == 2 and state["isr"] == state["replicas"]
        assert len({hosts[h] for h in state["replicas"]}) == 2  # on distinct nodes
        assert state["epoch"] == 1
    assert len({s["leader"] for s in db.replication}) == 1 + WORKERS  # leaders spread
    import ray

    from hopmem.cluster.runtime import CATALOG_ACTOR, NAMESPACE
    catalog = ray.get_actor(CATALOG_ACTOR, namespace=NAMESPACE)
    assert ray.get(catalog.node_id.remote()) == head  # survives the loss of any other node
    c.drop("placed")


def test_a_call_the_leader_refuses_keeps_its_followers_in_sync(nodes, request):
    """The leader forwards a mutation before applying it: a call it refuses (bad input) its
    followers refuse the same way, so they stay in the in-sync set, equal to the leader."""
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    from hopmem.errors import DimensionMismatch
    db = nodes.hopmem.create("refused", D, shards=2, replicas=2)
    coll = db.collection("c")
    coll.write(clustered(4, D, rng=1), metadata=[0, 1, 2, 3])
    with pytest.raises(DimensionMismatch):
        coll.write(np.ones(D + 3, dtype=np.float32), metadata=[9])
    coll.write(clustered(2, D, rng=2), metadata=[4, 5])
    # Concurrent writers, some refused: the leader runs what queued for the shard's lock
    # as one batch, forwarded in one call; each caller hears its own outcome.
    outcomes: list[str] = []

    def writer(t: int) -> None:
        rows = clustered(10, D, rng=10 + t)
        for i in range(10):
            bad = (t + i) % 4 == 0
            try:
                coll.write(np.ones(D + 1, dtype=np.float32) if bad else rows[i],
                           metadata=[100 * t + i])
                outcomes.append("bad acknowledged" if bad else "ok")
            except DimensionMismatch:
                outcomes.append("refused" if bad else "good refused")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(outcomes)) == ["ok", "refused"], outcomes
    assert outcomes.count("refused") == sum((t + i) % 4 == 0 for t in range(6) for i in range(10))
    _copies_equal_leader(nodes.hopmem, db, ["c"])
    nodes.hopmem.drop("refused")


def test_a_stale_leader_cannot_acknowledge_a_write(nodes, request):
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    t = c.transport
    db = c.create("fence", D, shards=1, replicas=2)
    coll = db.collection("c")
    coll.write(clustered(3, D, rng=1), metadata=[1, 2, 3])
    old = db.replication[0]
    stale_leader, follower = old["leader"], old["isr"][1]
    # The catalog promotes the follower (as a client that lost the leader would), without
    # telling the old leader, which stays alive and still believes it leads at epoch 1.
    t.catalog("promote", "fence", 0, old["epoch"], stale_leader, follower)
    db.refresh()
    assert coll.write(clustered(1, D, rng=2), metadata=[4]).ids == [4]  # the new leader
    assert db.replication[0]["leader"] == follower and db.replication[0]["epoch"] == 2
    # A client still at epoch 1 writes to the old leader: it must not be acknowledged.
    args = ("fence", 0, "c", "write", (clustered(1, D, rng=3),), {"metadata": [99],
                                                                 "write_id": "stale-1"})
    ok, err = t.host(stale_leader, "lead", ("fence", 0, old["epoch"], "collection_call", args),
                     True)
    assert not ok
    from hopmem.cluster.wire import NotLeader, unpack_error
    assert isinstance(unpack_error(err), NotLeader), unpack_error(err)
    # ... nor can it lead at the new epoch the catalog does not give it.
    ok, err = t.host(stale_leader, "lead", ("fence", 0, 2, "collection_call", args), True)
    assert not ok and isinstance(unpack_error(err), NotLeader)
    assert [d.metadata for d in coll.documents.list()] == [1, 2, 3, 4]  # no 99 on the leader
    # The deposed leader rejoins as a follower through repair: a full copy, since it holds a
    # write (99) the new leader never had; then bit-identical.
    report = c.repair()
    mine = next(r for r in report if r["database"] == "fence")
    assert mine["copied"] == [stale_leader]
    assert mine["caught_up"][stale_leader]["how"] == "copy", mine
    assert "never acknowledged" in mine["caught_up"][stale_leader]["why"]
    _copies_equal_leader(c, db, ["c"])
    c.drop("fence")


def _pid(cluster, host: str) -> int:
    ok, pid = cluster.transport.host(host, "pid", (), True)
    assert ok, pid
    return int(pid)


def _wait_in_sync(db, shard: int, seconds: float = 40.0) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        db.refresh()
        state = db.replication[shard]
        if len(state["isr"]) == 2:
            return state
        time.sleep(0.2)
    raise AssertionError(f"shard {shard} not back in sync: {db.replication[shard]}")


def test_a_leader_frozen_while_a_new_one_is_promoted_cannot_acknowledge_a_write(nodes, request):
    """The leader's process is frozen (SIGSTOP: alive, unable to answer or reach the
    catalog, as if cut off), a client's write to it waits in its queue, the follower is
    promoted (as a client that lost the leader would) and acknowledges writes; when the old
    leader runs again, the queued write is refused, not acknowledged."""
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    t = c.transport
    db = c.create("frozen", D, shards=1, replicas=2)
    coll = db.collection("c")
    coll.write(clustered(3, D, rng=1), metadata=[1, 2, 3])
    old = db.replication[0]
    stale, follower = old["leader"], old["isr"][1]
    pid = _pid(c, stale)
    os.kill(pid, signal.SIGSTOP)
    answers: list = []
    try:
        args = ("frozen", 0, "c", "write", (clustered(1, D, rng=3),),
                {"metadata": [99], "write_id": "queued-1"})
        sender = threading.Thread(target=lambda: answers.append(t.host(
            stale, "lead", ("frozen", 0, old["epoch"], "collection_call", args), False)))
        sender.start()
        time.sleep(0.3)
        state = t.catalog("promote", "frozen", 0, old["epoch"], stale, follower)
        ok, err = t.host(follower, "become", ("frozen", 0, state["epoch"], follower, [], False),
                         True)
        assert ok, err
        db.refresh()
        assert coll.write(clustered(1, D, rng=2), metadata=[4]).ids == [4]  # the new leader
    finally:
        os.kill(pid, signal.SIGCONT)
    sender.join(30)
    assert answers, "the queued write never answered"
    ok, err = answers[0]
    from hopmem.cluster.wire import NotLeader, unpack_error
    assert not ok and isinstance(unpack_error(err), NotLeader), answers
    assert [d.metadata for d in coll.documents.list()] == [1, 2, 3, 4]
    report = next(r for r in c.repair() if r["database"] == "frozen")
    assert report["caught_up"][stale]["how"] == "copy", report  # it committed 99 itself
    _copies_equal_leader(c, db, ["c"])
    c.drop("frozen")


def test_a_frozen_follower_catches_up_from_the_leader_journal(nodes, request):
    """A follower frozen (SIGSTOP) while writes go on leaves the in-sync set after the
    replica timeout; when it runs again the leader catches it up on its own, by the entries
    of its replication journal the follower lacks, and it equals the leader bit for bit. A
    follower frozen longer than the leader's journal reaches gets a full copy."""
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    db = c.create("paused", D, shards=1, replicas=2)
    coll = db.collection("c")
    coll.write(clustered(3, D, rng=1), metadata=[0, 1, 2])
    state = db.replication[0]
    follower = state["isr"][1]
    k = 3
    for behind, expect in ((10, "journal"), (JOURNAL + 10, "copy")):
        pid = _pid(c, follower)
        os.kill(pid, signal.SIGSTOP)
        try:
            for _ in range(behind):  # the first waits for the replica timeout
                coll.write(clustered(1, D, rng=k), metadata=[k], write_id=f"p{k}")
                k += 1
            db.refresh()
            assert db.replication[0]["isr"] == [state["leader"]]
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait_in_sync(db, 0)
        states = c.shard_states("paused", lag=True)
        done = states[0]["caught_up"][follower]
        assert done["how"] == expect, done
        if expect == "journal":
            # The first write of the pause reached it (it applies it when it runs again).
            assert behind - 1 <= done["entries"] <= behind, done
        assert states[0]["lag"] == {state["leader"]: 0, follower: 0}
        _copies_equal_leader(c, db, ["c"])
    assert [d.metadata for d in coll.documents.list(limit=1000)] == list(range(k))
    c.drop("paused")


def test_a_write_id_retried_across_a_failover_is_applied_once(nodes, request):
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    db = c.create("once", D, shards=4, replicas=2)
    # A collection whose shard is led from a worker node (the head is never removed).
    name = next(f"c{i}" for i in range(100)
                if nodes.node_of_host(db.replication[db.shard_of(f"c{i}")]["leader"]))
    coll = db.collection(name)
    X = clustered(5, D, rng=4)
    first = coll.write(X, metadata=list(range(5)), write_id="retry-me")
    leader = db.replication[coll.shard]["leader"]
    nodes.remove(nodes.node_of_host(leader))
    again = coll.write(X, metadata=list(range(5)), write_id="retry-me")  # fails over, then dedups
    assert again.ids == first.ids
    assert db.replication[coll.shard]["leader"] != leader
    assert db.replication[coll.shard]["epoch"] == 2
    assert coll.documents.count() == 5
    nodes.workers.append(nodes.add())
    c.repair()
    _copies_equal_leader(c, db, [name])
    assert coll.documents.count() == 5
    c.drop("once")


def test_cli_lists_leaders_replicas_epochs_and_lag_and_repairs(nodes, capsys, request):
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    import json

    from hopmem.cli import main
    c = nodes.hopmem
    db = c.create("listed", D, shards=2, replicas=2)
    db.collection("c").write(clustered(4, D, rng=5), metadata=[1, 2, 3, 4])
    address = nodes.cluster.address
    assert main(["shard", "--ray", address, "--json", "list", "listed"]) == 0
    states = json.loads(capsys.readouterr().out)["replication"]["listed"]
    assert [s["shard"] for s in states] == [0, 1]
    for s in states:
        assert s["epoch"] == 1 and s["isr"] == s["replicas"] and len(s["replicas"]) == 2
        assert set(s["lag"].values()) == {0}
    assert main(["shard", "--ray", address, "list", "listed"]) == 0
    text = capsys.readouterr().out
    assert f"listed shard 0: leader {states[0]['leader']}, epoch 1" in text and "lag" in text
    assert main(["shard", "--ray", address, "repair"]) == 0
    assert "listed shard 1: leader" in capsys.readouterr().out
    c.drop("listed")


class Writers:
    """Four client threads writing one vector at a time (each with its write id) to their
    own collection until stopped; records what was acknowledged and when."""

    def __init__(self, colls, acked, unknown, errors, counter) -> None:
        self.colls, self.acked, self.unknown, self.errors = colls, acked, unknown, errors
        self.counter = counter
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.removed_at = 0.0
        self.after: dict[str, float] = {}  # client -> first ack of a write sent after removal
        self.threads = [threading.Thread(target=self.run, args=(c,)) for c in colls]

    def run(self, coll) -> None:
        name = coll.name
        while not self.stop.is_set():
            with self.lock:
                self.counter[0] += 1
                k = self.counter[0]
            started = time.monotonic()
            try:
                coll.write(clustered(1, D, rng=k, noise=0.2, centre_seed=3), metadata=[k],
                           write_id=f"{name}-{k}")
            except Exception as exc:  # noqa: BLE001 - outcome unknown: checked below
                self.unknown[name].append(k)
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            self.acked[name].append(k)
            if self.removed_at and started > self.removed_at and name not in self.after:
                self.after[name] = time.monotonic() - self.removed_at

    def __enter__(self) -> Writers:
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for th in self.threads:
            th.join()


def test_node_loss_during_writes_from_four_clients_loses_no_acknowledged_write(nodes, request):
    if isinstance(nodes, Alone):
        return nodes.check(request.node.name)
    c = nodes.hopmem
    db = c.create("loss", D, shards=4, replicas=2)
    names = [f"w{w}" for w in range(4)]
    colls = [db.collection(n) for n in names]
    acked: dict[str, list[int]] = {n: [] for n in names}
    unknown: dict[str, list[int]] = {n: [] for n in names}
    counter = [0]
    recovered: list[float] = []
    errors: list[str] = []
    kinds: list[str] = []
    for rnd in range(10):
        # Alternate the victim: the node leading the round's collection, then one following it.
        db.refresh()
        state = db.replication[db.shard_of(names[rnd % 4])]
        want = state["leader"] if rnd % 2 == 0 else state["replicas"][1] \
            if state["replicas"][0] == state["leader"] else state["replicas"][0]
        victim = nodes.node_of_host(want) or nodes.workers[rnd % len(nodes.workers)]
        host = nodes.host_of_node(victim)
        leading = any(db.replication[db.shard_of(n)]["leader"] == host for n in names)
        kinds.append("leader" if leading else "follower")
        lose_disk = rnd % 2 == 1
        with Writers(colls, acked, unknown, errors, counter) as writers:
            time.sleep(0.4)
            writers.removed_at = time.monotonic()
            nodes.remove(victim)
            if lose_disk:
                shutil.rmtree(os.path.join(nodes.root, "hosts", host), ignore_errors=True)
            deadline = time.monotonic() + 15
            while len(writers.after) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
        after = writers.after
        assert len(after) == 4, (f"round {rnd}: clients without an acknowledged write after the "
                                 f"removal: {after}; errors: {errors[:5]}")
        recovered.append(max(after.values()))
        assert max(after.values()) < 10.0, after
        nodes.workers.append(nodes.add())
        c.repair()
        _copies_equal_leader(c, db, names)
        for name, coll in zip(names, colls):
            got = [d.metadata for d in coll.documents.list(limit=10_000)]
            assert len(got) == len(set(got)), f"{name}: a write applied twice"
            missing = set(acked[name]) - set(got)
            assert not missing, f"round {rnd} ({host} lost, disk lost: {lose_disk}): {missing}"
            assert set(got) <= set(acked[name]) | set(unknown[name])
    assert sum(len(v) for v in acked.values()) > 100
    assert kinds.count("leader") >= 3 and kinds.count("follower") >= 3, kinds
    print(f"rounds: {kinds}; writes accepted again after {max(recovered):.2f} s at most "
          f"(median {float(np.median(recovered)):.2f} s); "
          f"{sum(len(v) for v in unknown.values())} writes with an unknown outcome")
    c.drop("loss")
