"""Ray: starting or joining a cluster, the actors, and the transport the client calls through.

Safe defaults: usage statistics off (``RAY_USAGE_STATS_ENABLED=0`` unless the
environment says otherwise), no dashboard, a local cluster bound to
127.0.0.1 with its temp dir in a fresh directory that :meth:`shutdown` removes.
Workers of a local cluster run at normal priority (``RAY_worker_niceness=0``
unless set): Ray's default of 15 starves the shard hosts on a busy machine.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput, NotFound, StoreError
from .catalog import CATALOG_FILE
from .client import ClusterDataDir
from .wire import Envelope, HostLost, unpack_error

__all__ = ["connect", "start_local", "RayTransport", "NAMESPACE", "CATALOG_ACTOR", "host_actor_name"]

logger = logging.getLogger("hopmem.cluster")

NAMESPACE = "hopmem"
CATALOG_ACTOR = "hopmem-catalog"
#: Concurrent calls one host serves (reads run in parallel; the store serialises writes).
HOST_CONCURRENCY = 16


def host_actor_name(host_id: str) -> str:
    return f"hopmem-host-{host_id}"


def _ray() -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts its workers at niceness 15 by default; a shard host IS the serving work, and
    # niced it gets a fraction of a busy machine's CPU (measured: no gain from a second host).
    os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        import ray
    except ImportError:
        raise ImportError("hopmem.cluster needs Ray: pip install 'hopmem[cluster]'") from None
    return ray


class RayTransport:
    """Calls to the catalog and host actors, retried while an actor restarts (when allowed)."""

    def __init__(self, retry_timeout: float = 30.0,
                 host_options: dict[str, Any] | None = None) -> None:
        self.host_options = dict(host_options or {})
        self._ray = _ray()
        from ray.exceptions import ActorUnschedulableError, RayActorError
        self._actor_error = (RayActorError, ActorUnschedulableError)
        self.retry_timeout = retry_timeout
        self._catalog = self._ray.get_actor(CATALOG_ACTOR, namespace=NAMESPACE)
        self._hosts: dict[str, Any] = {}
        self._nodes: dict[str, str | None] = {}

    def host_alive(self, host_id: str) -> bool:
        """Whether ``host_id``'s node is alive (Ray's view; a host process restarting on a live
        node counts as alive)."""
        if host_id not in self._nodes:
            self._nodes = {h["host_id"]: h["node_id"] for h in self.catalog("hosts")}
        node = self._nodes.get(host_id)
        if node is None:
            return host_id in self._nodes
        return any(n["NodeID"] == node and n.get("Alive") for n in self._ray.nodes())

    def _get(self, submit: Any, retry: bool, what: str, host_id: str | None = None) -> Any:
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.02
        while True:
            try:
                return self._ray.get(submit())
            except (*self._actor_error, ValueError) as exc:
                if isinstance(exc, ValueError) and host_id is None:
                    raise
                if host_id is not None:
                    self._hosts.pop(host_id, None)
                    if not self.host_alive(host_id):
                        raise HostLost(host_id) from None
                if not retry:
                    raise StoreError(
                        f"{what}: the shard host failed during the call, which may or may not "
                        "have been applied (writes with a write id can be retried safely)") from None
                if time.monotonic() > deadline:
                    raise StoreError(f"{what}: unavailable for {self.retry_timeout:g} s "
                                     f"({type(exc).__name__})") from None
                time.sleep(delay)
                delay = min(2 * delay, 0.25)

    def catalog(self, method: str, *args: Any, **kwargs: Any) -> Any:
        ok, value = self._get(lambda: self._catalog.invoke.remote(method, args, kwargs), True,
                              f"catalog {method}")
        if ok:
            return value
        raise unpack_error(value)

    def _handle(self, host_id: str) -> Any:
        handle = self._hosts.get(host_id)
        if handle is None:
            handle = self._ray.get_actor(host_actor_name(host_id), namespace=NAMESPACE)
            self._hosts[host_id] = handle
        return handle

    def host(self, host_id: str, method: str, args: tuple[Any, ...], retry: bool) -> Envelope:
        return self._get(lambda: self._handle(host_id).invoke.remote(method, args), retry,
                         f"host {host_id} {method}", host_id)

    def add_node_hosts(self) -> list[str]:
        """Start a shard host on every live node that has no live one (repair's first step);
        returns the new hosts' ids."""
        known = self.catalog("hosts")
        self._nodes = {h["host_id"]: h["node_id"] for h in known}
        alive = {n["NodeID"] for n in self._ray.nodes() if n.get("Alive")}
        served = {h["node_id"] for h in known if h["node_id"] in alive}
        roots = [h["root"] for h in known]
        if not roots:
            return []
        base = os.path.dirname(roots[0])
        used = {h["host_id"] for h in known}
        added = []
        for node in sorted(alive - served):
            index = 0
            while f"n{index}" in used:
                index += 1
            host_id = f"n{index}"
            used.add(host_id)
            _start_host(self._ray, host_id, node, os.path.join(base, host_id),
                        self.host_options)
            self.catalog("register_host", host_id, host_actor_name(host_id), node,
                         os.path.join(base, host_id))
            added.append(host_id)
        self._nodes = {h["host_id"]: h["node_id"] for h in self.catalog("hosts")}
        return added

    def host_many(self, calls: Sequence[tuple[str, str, tuple[Any, ...]]],
                  retry: bool) -> list[Envelope]:
        """Several calls, ONE actor call per host, the hosts in parallel; answers in order."""
        groups: dict[str, list[int]] = {}
        for i, (host, _, _) in enumerate(calls):
            groups.setdefault(host, []).append(i)
        out: list[Envelope] = [(False, None)] * len(calls)

        def submit_all() -> Any:
            return [self._handle(h).many.remote([calls[i][1:] for i in idx])
                    for h, idx in groups.items()]

        answers = self._get(submit_all, retry, "hosts")
        for (_, idx), envelopes in zip(groups.items(), answers):
            for i, envelope in zip(idx, envelopes):
                out[i] = envelope
        return out

    def forget_hosts(self) -> None:
        self._hosts.clear()


def _actor_options(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "lifetime": "detached", "max_restarts": -1,
            "max_task_retries": 0, "num_cpus": 0, "max_concurrency": HOST_CONCURRENCY}


def _pin(node_id: str | None) -> dict[str, Any]:
    if node_id is None:
        return {}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def _deploy(ray: Any, root: str, hosts: int | None, per_node: bool,
            options: dict[str, Any]) -> None:
    """Start (or find) the catalog and the hosts it records; add hosts up to ``hosts``."""
    from . import actors
    catalog_actor: Any = actors.CatalogActor
    here = ray.get_runtime_context().get_node_id()
    # The catalog lives on the head node (Ray's own control plane: losing it loses the
    # cluster anyway), so it survives the loss of any other node.
    head = next((n["NodeID"] for n in ray.nodes() if n.get("Alive")
                 and "node:__internal_head__" in n.get("Resources", {})), here)
    try:
        catalog = ray.get_actor(CATALOG_ACTOR, namespace=NAMESPACE)
    except ValueError:
        catalog = catalog_actor.options(**_actor_options(CATALOG_ACTOR), **_pin(head)).remote(
            os.path.join(root, CATALOG_FILE))

    def call(method: str, *args: Any) -> Any:
        ok, value = ray.get(catalog.invoke.remote(method, args, {}))
        if not ok:
            raise unpack_error(value)
        return value

    known = call("hosts")
    if per_node:
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        wanted = [(f"n{i}", node) for i, node in enumerate(sorted(nodes))]
    else:
        count = max(hosts or 0, len(known))
        wanted = [(f"h{i}", here) for i in range(count)]
    by_id = {h["host_id"]: h for h in known}
    for host_id, node in wanted:
        if host_id not in by_id:
            by_id[host_id] = {"host_id": host_id, "node_id": node,
                              "root": os.path.join(root, "hosts", host_id)}
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    for host_id, h in sorted(by_id.items()):
        name = host_actor_name(host_id)
        try:
            ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            if h["node_id"] is not None and h["node_id"] not in alive:
                continue  # its node is gone: repair() replaces its copies elsewhere
            _start_host(ray, host_id, h["node_id"], h["root"], options)
        call("register_host", host_id, name, h["node_id"], h["root"])


def _start_host(ray: Any, host_id: str, node: str | None, root: str,
                options: dict[str, Any]) -> None:
    from . import actors
    host_actor: Any = actors.HostActor
    name = host_actor_name(host_id)
    handle = host_actor.options(**_actor_options(name), **_pin(node)).remote(
        host_id, root, options, NAMESPACE, CATALOG_ACTOR)
    ray.get(handle.invoke.remote("pid", ()))


def connect(address: str = "auto", *, root: str | None = None, retry_timeout: float = 30.0,
            default_shards: int | None = None, read_from: str = "leader",
            **options: Any) -> ClusterDataDir:
    """Join the Ray cluster at ``address`` and return its hopmem data directory.

    The first connection to a cluster without a hopmem catalog must give
    ``root``: the directory, on every node, under which the catalog (on this
    node) and one shard host per node (``ROOT/hosts/nID``) keep their files.
    ``options`` go to every shard's store (``synchronous``, ``checkpoint_every``,
    ``replay_budget``). :meth:`~ClusterDataDir.shutdown` disconnects (when this
    call connected) and leaves the cluster running. In a process already
    connected to Ray, the existing connection is used. ``read_from``: where
    reads of replicated shards go by default (``"leader"``, or ``"any"`` in-sync
    replica); ``replica_timeout`` (an option, seconds, default 5): how long a
    leader waits for a follower before taking it out of the in-sync set;
    ``replica_journal_entries`` and ``replica_journal_mb`` (options, default
    100,000 and 64): how much of each replicated shard's replication journal a
    host keeps to catch a returning copy up (beyond it, a full copy).
    """
    ray = _ray()
    joined = not ray.is_initialized()
    if joined:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)
    try:
        ray.get_actor(CATALOG_ACTOR, namespace=NAMESPACE)
    except ValueError:
        if root is None:
            raise NotFound("no hopmem catalog on this Ray cluster: give root= (the data "
                           "directory on every node) to create one") from None
        _deploy(ray, os.path.abspath(root), None, True, options)
    transport = RayTransport(retry_timeout, options)
    hosts = len(transport.catalog("hosts"))
    return ClusterDataDir(transport, os.path.abspath(root or os.getcwd()),
                          default_shards=default_shards or max(2, 2 * hosts),
                          on_shutdown=ray.shutdown if joined else None, read_from=read_from)


def start_local(hosts: int = 2, root: str | os.PathLike[str] = "hopmem-cluster", *,
                num_cpus: int = 2, object_store_mb: int = 256, retry_timeout: float = 30.0,
                default_shards: int | None = None, read_from: str = "leader",
                **options: Any) -> ClusterDataDir:
    """Start a one-machine Ray cluster with ``hosts`` shard hosts over ``root``.

    For tests and trials: Ray listens on 127.0.0.1 only, with no dashboard and
    no usage statistics, and keeps its temp files in a fresh directory.
    ``root`` holds the catalog and ``hosts/hN`` per host; starting again on
    the same root finds its databases again. :meth:`~ClusterDataDir.shutdown`
    stops every Ray process this started and removes the temp directory.
    """
    if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
        raise InvalidInput(f"hosts: expected an integer >= 1, got {hosts!r}")
    ray = _ray()
    if ray.is_initialized():
        raise StoreError("start_local: this process is already connected to a Ray cluster")
    root = os.path.abspath(os.fspath(root))
    os.makedirs(root, exist_ok=True)
    temp = tempfile.mkdtemp(prefix="hopmem-ray-")  # short: Ray's socket paths must fit 107 bytes

    def stop() -> None:
        atexit.unregister(stop)
        try:
            ray.shutdown()
        finally:
            shutil.rmtree(temp, ignore_errors=True)

    atexit.register(stop)  # a process that never calls shutdown() leaves nothing behind either

    try:
        ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp,
                 _node_ip_address="127.0.0.1", namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False, object_store_memory=object_store_mb << 20)
        _deploy(ray, root, hosts, False, options)
        transport = RayTransport(retry_timeout, options)
    except BaseException:
        stop()
        raise
    logger.info("local Ray cluster with %d shard host(s) over %s (Ray temp dir %s)", hosts,
                root, temp)
    cluster = ClusterDataDir(transport, root, default_shards=default_shards or 2 * hosts,
                             on_shutdown=stop, read_from=read_from)
    cluster.ray_temp_dir = temp  # type: ignore[attr-defined]
    return cluster
