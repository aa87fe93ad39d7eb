"""The cluster's client objects: the ``DataDir`` / ``Database`` / ``Collection`` API over shard hosts.

:class:`ClusterDataDir` (what :func:`hopmem.cluster.connect` and
:func:`hopmem.cluster.start_local` return), :class:`ClusterDatabase` and
:class:`ClusterCollection` answer like their store counterparts: the same
methods, results and errors (an error raised on a host is raised here as the
same class with the same message). Every call is one actor call to the host
holding the collection's shard (``stable_shard(database, collection, S)``);
calls that touch every shard (``collections()``) are one call per host.

Retries. Reads and settings are retried while a host restarts (up to
``retry_timeout`` seconds). A mutation (``write``, ``remember``, ``compress``,
``documents.delete``) is retried only when it carries a write id (the store
records it with the change, so a retry is applied once and answers what the
first attempt answered): the client gives each one an id when none is passed
and the hosts' store supports them. Without write ids a mutation interrupted by
a host failure raises :class:`~hopmem.errors.StoreError` saying its outcome is
unknown.

Nothing here imports Ray: the transport (:mod:`hopmem.cluster.runtime`) does.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from .._deprecation import positional_to_keywords, rename_keywords
from ..engine.config import MemoryConfig
from ..errors import IncompatibleStore, InvalidInput, NotFound, NotSupported, StoreError
from ..store import EncoderInfo
from ..store.datadir import open_or_create
from ..store.documents import Document, DocumentHit, Documents
from ..store.names import COLLECTION_NAME_MAX, check_collection_name, check_database_name
from ..text.recall import RecallGate, RecallResult
from .partitions import PartitionedCollection
from .placement import stable_shard
from .replication import mutates
from .shardlog import new_history
from .wire import Envelope, HostLost, NotHere, NotLeader, NotOpen, StaleEpoch, unpack_error

__all__ = ["ClusterDataDir", "ClusterDatabase", "ClusterCollection", "ClusterAgentMemory",
           "ClusterPartitionedCollection", "Transport", "part_name", "PART_SUFFIX"]

#: The end of a partition's own collection name, ``NAME#part-P-of-N``: reserved (the
#: cluster refuses collection names ending like this), so no user name collides with a part.
PART_SUFFIX = re.compile(r"#part-[0-9]+-of-[0-9]+\Z")

#: Threads per database running the partitions' calls of a partitioned collection in parallel.
_PARTITION_THREADS = 8


def part_name(collection: str, partition: int, partitions: int) -> str:
    """The collection holding partition ``partition`` of ``partitions`` of ``collection``."""
    return f"{collection}#part-{partition}-of-{partitions}"


def _check_name(name: Any) -> str:
    """A collection name a cluster user may give: the store's rules, minus the parts' names."""
    check_collection_name(name)
    if PART_SUFFIX.search(name):
        raise InvalidInput(
            f"collection name: expected a name not ending in '#part-N-of-M' (reserved for the "
            f"parts of partitioned collections), got {name!r}")
    return name


def _check_partitions(name: str, partitions: Any) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer)) \
            or partitions < 1:
        raise InvalidInput(f"partitions: expected an integer >= 1, got {partitions!r}")
    longest = len(part_name(name, int(partitions) - 1, int(partitions)))
    if partitions > 1 and longest > COLLECTION_NAME_MAX:
        raise InvalidInput(
            f"collection name: expected at most {COLLECTION_NAME_MAX - longest + len(name)} "
            f"characters for a collection of {partitions} partitions (each part is named "
            f"NAME#part-N-of-{partitions}), got {len(name)}")
    return int(partitions)


class Transport(Protocol):
    """How the client reaches the catalog and the hosts (Ray actors, in practice)."""

    retry_timeout: float

    def catalog(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def host(self, host_id: str, method: str, args: tuple[Any, ...], retry: bool) -> Envelope: ...

    def host_many(self, calls: Sequence[tuple[str, str, tuple[Any, ...]]],
                  retry: bool) -> list[Envelope]: ...

    def forget_hosts(self) -> None: ...

    def host_alive(self, host_id: str) -> bool: ...

    def add_node_hosts(self) -> list[str]: ...


READ_FROM = ("leader", "any")


def _check_read_from(read_from: Any) -> str:
    if read_from not in READ_FROM:
        raise InvalidInput(f"read_from: expected one of {list(READ_FROM)}, got {read_from!r}")
    return str(read_from)


def _value(envelope: Envelope) -> Any:
    ok, value = envelope
    if ok:
        return value
    raise unpack_error(value)


class ClusterDataDir:
    """Named sharded databases on a cluster: the :class:`hopmem.DataDir` API.

    ``root`` is a directory of this process (the HTTP server keeps its API
    keys there); the data itself lives in the hosts' directories.
    """

    def __init__(self, transport: Transport, root: str, *, default_shards: int = 4,
                 on_shutdown: Callable[[], None] | None = None,
                 read_from: str = "leader", default_replicas: int = 1) -> None:
        self.read_from = _check_read_from(read_from)
        #: R for databases created without ``replicas=`` (the HTTP server's, for one).
        self.default_replicas = default_replicas
        self._t = transport
        self.root = root
        self.default_shards = default_shards
        self._on_shutdown = on_shutdown
        self._open: dict[str, ClusterDatabase] = {}
        self._cluster_id: str | None = None
        self._write_ids: dict[str, bool] = {}
        #: Reads this process has in flight on each host (``read_from="any"`` picks the least).
        self._reading: dict[str, int] = {}
        self._reading_lock = threading.Lock()
        self._turn = itertools.count()

    @contextlib.contextmanager
    def reading_from(self, hosts: list[str]) -> Iterator[str]:
        """The host of ``hosts`` with the fewest reads in flight from this process (ties in
        turn), counted as reading until the block ends: a slower copy (a busier core) gets
        fewer of the reads than a round robin would give it."""
        with self._reading_lock:
            start = next(self._turn)
            order = [hosts[(start + i) % len(hosts)] for i in range(len(hosts))]
            host = min(order, key=lambda h: self._reading.get(h, 0))
            self._reading[host] = self._reading.get(host, 0) + 1
        try:
            yield host
        finally:
            with self._reading_lock:
                self._reading[host] -= 1
                if not self._reading[host]:
                    del self._reading[host]

    @property
    def transport(self) -> Transport:
        return self._t

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            self._cluster_id = str(self._t.catalog("cluster_id"))
        return self._cluster_id

    def supports_write_ids(self, method: str = "write") -> bool:
        """Whether the hosts' store records write ids for ``Collection.<method>`` (so such
        calls are retried safely)."""
        if method not in self._write_ids:
            hosts = [h["host_id"] for h in self.hosts()]
            host = next((h for h in hosts if self._t.host_alive(h)), hosts[0])
            self._write_ids[method] = bool(_value(self._t.host(host, "supports_write_ids",
                                                               (method,), True)))
        return self._write_ids[method]

    def hosts(self) -> list[dict[str, Any]]:
        """The shard hosts: ``{host_id, actor, node_id, root, shards}`` each."""
        return list(self._t.catalog("hosts"))

    def placement(self, name: str) -> list[str]:
        """The host id of each shard of database ``name``."""
        return list(self._t.catalog("database", check_database_name(name))["placement"])

    def path(self, name: str) -> str:
        """A name for database ``name`` in messages (``ray://CLUSTER/NAME``); no local file."""
        return f"ray://{self.cluster_id}/{check_database_name(name)}"

    def exists(self, name: str) -> bool:
        return check_database_name(name) in self._t.catalog("databases")

    __contains__ = exists

    def list(self) -> list[str]:
        """Names of the databases, sorted."""
        return list(self._t.catalog("databases"))

    def create(self, name: str, dim: int, *, encoder: Any = None, shards: int | None = None,
               replicas: int | None = None, **config: Any) -> ClusterDatabase:
        """Create database ``name`` split in ``shards`` shard files (default
        :attr:`default_shards`); :class:`~hopmem.errors.AlreadyExists` if it exists.

        ``replicas`` (default :attr:`default_replicas`) R >= 2 keeps R copies of each shard on R hosts (on distinct
        nodes when the cluster has R nodes with hosts): a write is acknowledged
        once every in-sync copy committed it, and a shard survives the loss of
        R - 1 of its nodes (see *Failures* in ``docs/scale-out.md``).
        """
        check_database_name(name)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InvalidInput(f"dim: expected an integer >= 1, got {dim!r}")
        shards = self.default_shards if shards is None else shards
        info = None if encoder is None else EncoderInfo.of(encoder)
        enc = None if info is None else {"name": info.name, "dim": info.dim,
                                         "fingerprint": info.fingerprint}
        replicas = self.default_replicas if replicas is None else replicas
        if replicas == 1:
            record = self._t.catalog("create_database", name, int(dim), shards, "", enc, config)
        else:
            live = [h["host_id"] for h in self.hosts() if self._t.host_alive(h["host_id"])]
            record = self._t.catalog("create_database", name, int(dim), shards, "", enc, config,
                                     replicas, live)
        copies = [(host, i) for i, state in enumerate(record["replication"])
                  for host in state["replicas"]]
        try:
            calls = [(host, "create_shard", (name, i, int(dim), info, config))
                     for host, i in copies]
            first = _value(self._t.host_many(calls[:1], True)[0])
            for envelope in self._t.host_many(calls[1:], True):
                _value(envelope)
            if replicas > 1:
                histories = [new_history() for _ in record["replication"]]
                roles = [(host, "become", (name, i, state["epoch"], state["leader"],
                                           state["replicas"][1:], True, histories[i]))
                         for i, state in enumerate(record["replication"])
                         for host in state["replicas"]]
                for envelope in self._t.host_many(roles, True):
                    _value(envelope)
        except BaseException:
            self._t.catalog("drop_database", name)
            for host, i in copies:
                self._t.host(host, "drop_shard", (name, i), True)
            raise
        self._t.catalog("set_created_at", name, first["created_at"])
        record["created_at"] = first["created_at"]
        db = ClusterDatabase(self, record, encoder)
        self._open[name] = db
        return db

    def get(self, name: str, *, encoder: Any = None) -> ClusterDatabase:
        """The existing database ``name``; :class:`~hopmem.errors.NotFound` if missing."""
        check_database_name(name)
        db = self._open.get(name)
        if db is not None and not db.closed:
            if encoder is not None:
                db.use_encoder(encoder)
            return db
        db = ClusterDatabase(self, self._t.catalog("database", name), None)
        if encoder is not None:
            db.use_encoder(encoder)
        self._open[name] = db
        return db

    def open(self, name: str, dim: int | None = None, *, encoder: Any = None,
             **config: Any) -> ClusterDatabase:
        """Get database ``name``, creating it (with ``dim`` and ``config``) if missing."""
        db: ClusterDatabase = open_or_create(self, name, dim, encoder, config)
        return db

    def drop(self, name: str) -> bool:
        """Drop database ``name`` (its shard files go to each host's trash); False if absent."""
        check_database_name(name)
        db = self._open.pop(name, None)
        if db is not None:
            db.close()
        try:
            record = self._t.catalog("database", name)
        except NotFound:
            return False
        self._t.catalog("drop_database", name)
        calls = [(host, "drop_shard", (name, i)) for i, state in enumerate(record["replication"])
                 for host in state["replicas"] if self._t.host_alive(host)]
        for envelope in self._t.host_many(calls, True):
            _value(envelope)
        return True

    def purge_trash(self, older_than: float = 7 * 86400.0) -> int:
        """Delete, on every host, dropped shards moved aside more than ``older_than`` s ago."""
        calls = [(h["host_id"], "purge_trash", (older_than,)) for h in self.hosts()]
        return sum(int(_value(e)) for e in self._t.host_many(calls, True))

    def move_shard(self, name: str, shard: int, host_id: str) -> dict[str, Any]:
        """Move shard ``shard`` of database ``name`` to host ``host_id``; see :mod:`.moves`."""
        from .moves import move_shard
        result = move_shard(self._t, name, shard, host_id)
        db = self._open.get(name)
        if db is not None:
            db.refresh()
        return result

    def shard_states(self, name: str, *, lag: bool = False) -> builtins.list[dict[str, Any]]:
        """Every shard of database ``name``: ``{shard, leader, replicas, isr, epoch}``, and
        with ``lag`` each replica's journal entries behind its leader (``lag``: host ->
        entries, None for a host that is lost or does not answer) and what the last
        catch-up of each copy did (``caught_up``: host -> ``{how: "journal" | "copy",
        entries, mutations, bytes, why, seconds, epoch, at}``, as its leader recorded it)."""
        from .repair import shard_catch_ups, shard_lag
        states = list(self._t.catalog("database", check_database_name(name))["replication"])
        if lag:
            for state in states:
                state["lag"] = shard_lag(self._t, name, state)
                state["caught_up"] = shard_catch_ups(self._t, name, state)
        return states

    def repair(self) -> builtins.list[dict[str, Any]]:
        """Restore R in-sync copies of every shard of every replicated database.

        Starts a shard host on each live node that has none, fails over shards
        whose leader's node is gone, forgets copies on lost hosts, and fills
        the missing copies on live hosts, on nodes the shard is not on yet
        where possible (the leader's journal entries a returning copy lacks,
        else a full copy of the leader's shard). Returns when every copy it
        could place is in sync: one ``{database, shard, leader, replicas, isr,
        epoch, copied, caught_up}`` per replicated shard (``caught_up``: what
        each copy's catch-up did, see :meth:`shard_states`).
        """
        from .repair import repair
        out = repair(self._t)
        for db in self._open.values():
            db.refresh()
        return out

    def close(self) -> None:
        """Forget the databases opened here (the cluster keeps running)."""
        dbs, self._open = list(self._open.values()), {}
        for db in dbs:
            db.close()

    def shutdown(self) -> None:
        """Close, then stop what this object started (a local cluster) or disconnect."""
        self.close()
        if self._on_shutdown is not None:
            stop, self._on_shutdown = self._on_shutdown, None
            stop()

    def __enter__(self) -> ClusterDataDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"ClusterDataDir({self.root!r})"


class ClusterDatabase:
    """One sharded database: the :class:`hopmem.store.Database` API."""

    def __init__(self, datadir: ClusterDataDir, record: dict[str, Any], encoder: Any) -> None:
        self._dd = datadir
        self._record = record
        self._encoder = encoder
        self._collections: dict[str, ClusterCollection | ClusterPartitionedCollection] = {}
        self._config: MemoryConfig | None = None
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None

    # -- what the catalog records ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self._record["name"])

    @property
    def path(self) -> str:
        return self._dd.path(self.name)

    @property
    def readonly(self) -> bool:
        return False

    @property
    def dim(self) -> int:
        return int(self._record["dim"])

    @property
    def shards(self) -> int:
        """S, the number of shard files (fixed at creation)."""
        return int(self._record["shards"])

    @property
    def datadir(self) -> ClusterDataDir:
        """The cluster this database belongs to."""
        return self._dd

    @property
    def placement(self) -> list[str]:
        """The host id of each shard (its leader), as this client last read it from the
        catalog."""
        return list(self._record["placement"])

    @property
    def replicas(self) -> int:
        """R, the number of copies of each shard (1: not replicated)."""
        return int(self._record.get("replicas", 1))

    @property
    def replication(self) -> list[dict[str, Any]]:
        """Each shard's ``{shard, leader, replicas, isr, epoch}``, as last read from the
        catalog."""
        return [dict(s) for s in self._record["replication"]]

    @property
    def created_at(self) -> str:
        return str(self._record["created_at"])

    @property
    def config(self) -> MemoryConfig:
        if self._config is None:
            self._config = self._db_call(0, "config")
        return self._config

    @property
    def encoder(self) -> EncoderInfo | None:
        enc = self._record["encoder"]
        return None if enc is None else EncoderInfo(enc["name"], enc["dim"], enc["fingerprint"])

    @property
    def encoder_object(self) -> Any:
        """The live encoder this client gave (for remember, recall, calibrate), or None."""
        return self._encoder

    def use_encoder(self, encoder: Any) -> None:
        """Use ``encoder`` for remember/recall/calibrate; its fingerprint must match the record."""
        info = EncoderInfo.of(encoder)
        recorded = self.encoder
        if recorded is not None and recorded.fingerprint is not None \
                and info.fingerprint != recorded.fingerprint:
            raise IncompatibleStore(
                f"database {self.name!r} was written with encoder {recorded.name!r} fingerprint "
                f"{recorded.fingerprint}; this encoder {info.name!r} has {info.fingerprint}")
        self._encoder = encoder

    def shard_of(self, collection: str) -> int:
        """The shard holding collection ``collection``."""
        return stable_shard(self.name, check_collection_name(collection), self.shards)

    def refresh(self) -> None:
        """Read the shard -> host map again from the catalog (after a move)."""
        self._record = self._dd.transport.catalog("database", self.name)

    # -- calls --------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"database {self.path} is closed")

    def invoke(self, shard: int, method: str, args: tuple[Any, ...], retry: bool,
               read_from: str | None = None) -> Any:
        """One host call for ``shard``, following the shard if it moved (or, replicated,
        its leader; a read with ``read_from="any"`` goes to any in-sync copy)."""
        self._check_open()
        if self.replicas > 1:
            return self._invoke_replicated(shard, method, args, retry, read_from)
        t = self._dd.transport
        deadline = time.monotonic() + t.retry_timeout
        while True:
            host = self._record["placement"][shard]
            ok, value = t.host(host, method, args, retry)
            if ok:
                return value
            exc = unpack_error(value)
            if isinstance(exc, NotHere) and time.monotonic() < deadline:
                time.sleep(0.05)
                self.refresh()
                continue
            raise exc

    def _invoke_replicated(self, shard: int, method: str, args: tuple[Any, ...], retry: bool,
                           read_from: str | None) -> Any:
        t = self._dd.transport
        deadline = time.monotonic() + t.retry_timeout
        mode = self._dd.read_from if read_from is None else _check_read_from(read_from)
        spread = mode == "any" and not mutates(method, args)
        while True:
            state = self._record["replication"][shard]
            host = state["leader"]
            try:
                if spread and len(state["isr"]) > 1:
                    with self._dd.reading_from(list(state["isr"])) as host:
                        ok, value = t.host(host, method, args, retry)
                else:
                    ok, value = t.host(host, "lead", (self.name, shard, state["epoch"], method,
                                                      args), retry)
            except HostLost as lost:
                if not retry or time.monotonic() > deadline:
                    raise
                if lost.host_id == state["leader"]:
                    from .repair import fail_over
                    fail_over(t, self.name, shard, lost.host_id)
                else:
                    spread = False  # a lost follower: this read goes to the leader
                self.refresh()
                continue
            if ok:
                return value
            exc = unpack_error(value)
            if isinstance(exc, (NotHere, NotLeader, StaleEpoch)) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
                self.refresh()
                continue
            if isinstance(exc, (NotLeader, StaleEpoch)):
                raise StoreError(f"shard {shard} of {self.path}: no leader answered for "
                                 f"{t.retry_timeout:g} s ({exc})") from None
            raise exc

    def _db_call(self, shard: int, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.invoke(shard, "database_call", (self.name, shard, method, args, kwargs), True)

    def _every_shard(self, method: str, *args: Any) -> list[Any]:
        """``method`` on every shard's database: one actor call per host."""
        self._check_open()
        if self.replicas > 1:
            return [self._db_call(i, method, *args) for i in range(self.shards)]
        calls: list[tuple[str, str, tuple[Any, ...]]] = [(host, "database_call", (self.name, i, method, args, {}))
                 for i, host in enumerate(self._record["placement"])]
        out = []
        for i, envelope in enumerate(self._dd.transport.host_many(calls, True)):
            ok, value = envelope
            if not ok and isinstance(unpack_error(value), NotHere):
                self.refresh()
                value = self._db_call(i, method, *args)
            else:
                value = _value(envelope)
            out.append(value)
        return out

    # -- collections ----------------------------------------------------------------------------

    def collection(self, name: str, *, partitions: int | None = None,
                   **config: Any) -> ClusterCollection | ClusterPartitionedCollection:
        """The collection ``name``, created with the database's config (plus ``config``) if missing.

        ``partitions=P`` (P >= 2) makes (or opens) a partitioned collection: P
        part collections, part ``p`` on shard ``(stable_shard(database, name, S) + p) % S``
        (so the parts land on different shards, and on different hosts when the
        shards are spread), returned as a :class:`ClusterPartitionedCollection`.
        P is recorded in the catalog; opening it again needs no ``partitions``
        (a different P is :class:`~hopmem.errors.IncompatibleStore`).
        ``partitions=1`` (or none, for a name not recorded as partitioned) is a
        plain collection. Names ending in ``#part-N-of-M`` are reserved for parts.
        """
        _check_name(name)
        self._check_open()
        want = None if partitions is None else _check_partitions(name, partitions)
        coll = self._collections.get(name)
        if coll is not None and not config and want in (None, _partitions_of(coll)):
            return coll
        recorded = int(self._dd.transport.catalog("partitions_of", self.name, name))
        if want is None:
            want = recorded
        if recorded > 1 and want != recorded:
            raise IncompatibleStore(
                f"collection {name!r} of {self.path} has {recorded} partitions, opened with "
                f"partitions={want}")
        if want == 1:
            summary = self._db_call(self.shard_of(name), "collection", name, **config)
            if coll is None:
                coll = self._collections[name] = ClusterCollection(self, name, summary["config"])
            return coll
        if recorded == 1:
            if self._db_call(self.shard_of(name), "has_collection", name):
                raise IncompatibleStore(
                    f"collection {name!r} of {self.path} exists with one partition, opened with "
                    f"partitions={want}")
            # Recorded before the parts are made: a failure midway leaves a record whose
            # missing parts the next collection(name) call creates.
            recorded = int(self._dd.transport.catalog("add_partitioned", self.name, name, want))
            if recorded != want:
                raise IncompatibleStore(
                    f"collection {name!r} of {self.path} has {recorded} partitions, opened with "
                    f"partitions={want}")
        parts = []
        for p in range(want):
            part, shard = part_name(name, p, want), self._part_shard(name, p)
            summary = self._db_call(shard, "collection", part, **config)
            parts.append(ClusterCollection(self, part, summary["config"], shard=shard))
        if coll is None:
            coll = self._collections[name] = ClusterPartitionedCollection(self, name, parts)
        return coll

    def _part_shard(self, name: str, partition: int) -> int:
        return (self.shard_of(name) + partition) % self.shards

    def partitions_of(self, name: str) -> int:
        """P of collection ``name`` as the catalog records it (1: not partitioned)."""
        return int(self._dd.transport.catalog("partitions_of", self.name, _check_name(name)))

    def get_collection(self, name: str) -> ClusterCollection | ClusterPartitionedCollection:
        """The existing collection ``name``; :class:`~hopmem.errors.NotFound` if missing.

        A partitioned one comes back as a :class:`ClusterPartitionedCollection`.
        """
        _check_name(name)
        self._check_open()
        coll = self._collections.get(name)
        if coll is not None:
            return coll
        P = self.partitions_of(name)
        if P == 1:
            summary = self._db_call(self.shard_of(name), "get_collection", name)
            coll = self._collections[name] = ClusterCollection(self, name, summary["config"])
            return coll
        parts = []
        for p in range(P):
            part, shard = part_name(name, p, P), self._part_shard(name, p)
            try:
                summary = self._db_call(shard, "get_collection", part)
            except NotFound:
                raise NotFound(
                    f"collection {name!r} of {self.path}: partition {p} of {P} is missing (its "
                    f"creation was interrupted; collection({name!r}) completes it)") from None
            parts.append(ClusterCollection(self, part, summary["config"], shard=shard))
        coll = self._collections[name] = ClusterPartitionedCollection(self, name, parts)
        return coll

    def has_collection(self, name: str) -> bool:
        _check_name(name)
        if self.partitions_of(name) > 1:
            return True
        return bool(self._db_call(self.shard_of(name), "has_collection", name))

    __contains__ = has_collection

    def collections(self) -> list[str]:
        """Names of the collections of every shard, sorted (a partitioned one once, by its name)."""
        names = {n for names in self._every_shard("collections") for n in names
                 if not PART_SUFFIX.search(n)}
        names.update(self._dd.transport.catalog("partitioned", self.name))
        return sorted(names)

    def drop_collection(self, name: str) -> bool:
        """Delete a collection and everything in it (every part of a partitioned one); False
        if it did not exist."""
        _check_name(name)
        self._check_open()
        coll = self._collections.pop(name, None)
        if coll is not None:
            coll.mark_dropped()
        P = self.partitions_of(name)
        if P == 1:
            return bool(self._db_call(self.shard_of(name), "drop_collection", name))
        # The parts first, then the record: a failure midway leaves a record that
        # get_collection reports as incomplete and a later drop finishes.
        for p in range(P):
            self._db_call(self._part_shard(name, p), "drop_collection", part_name(name, p, P))
        self._dd.transport.catalog("drop_partitioned", self.name, name)
        return True

    def partition_executor(self) -> ThreadPoolExecutor:
        """The threads that run a partitioned collection's calls to its parts in parallel."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(_PARTITION_THREADS,
                                                thread_name_prefix="hopmem-partitions")
        return self._executor

    def agent_memory(self, namespace: str, *, encoder: Any, **options: Any) -> ClusterAgentMemory:
        """The agent memory of ``namespace`` (:class:`hopmem.agent.AgentMemory`), run on the
        host of shard ``stable_shard(database, namespace, S)``.

        ``encoder`` and ``options`` (``AgentMemory.open``'s keywords) are sent to the host
        once, and again if it restarts; they must pickle. Callbacks (``subscribe``) do not
        cross processes.
        """
        if not isinstance(namespace, str) or not namespace:
            raise InvalidInput(f"namespace: expected a non-empty str, got {namespace!r}")
        if self.replicas > 1:
            raise NotSupported(f"database {self.name!r} is replicated ({self.replicas} copies): "
                               f"agent memories are not replicated; keep them in a database "
                               f"created with replicas=1")
        memory = ClusterAgentMemory(self, namespace, encoder, options)
        memory.open()
        return memory

    def info(self) -> dict[str, Any]:
        """``{name, created_at, dimension, collections}``, as :meth:`hopmem.store.Database.info`."""
        return {"name": self.name, "created_at": self.created_at, "dimension": self.dim,
                "collections": self.collections()}

    def checkpoint(self) -> None:
        """Checkpoint every loaded collection of every shard."""
        self._every_shard("checkpoint")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop using this object (the hosts keep the shards open). Idempotent."""
        self._closed = True
        for coll in self._collections.values():
            coll.mark_closed()
        self._collections.clear()
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=False)

    def __enter__(self) -> ClusterDatabase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ClusterDatabase({self.name!r}, dim={self.dim}, shards={self.shards})"


class _RemoteDocuments:
    """A cluster collection's documents as :class:`hopmem.store.Documents` reads them."""

    def __init__(self, collection: ClusterCollection) -> None:
        self._c = collection

    def get(self, doc_id: int, with_vector: bool) -> Document:
        return self._c.call("documents.get", doc_id, vector=with_vector)

    def page(self, offset: int, limit: int, vectors: bool) -> list[Document]:
        return self._c.call("documents.list", offset, limit, vectors=vectors)

    def delete(self, doc_id: int, write_id: str | None) -> bool:
        options, retry = self._c.write_options("documents.delete", write_id)
        return bool(self._c.call("documents.delete", doc_id, _retry=retry, **options))

    def count(self) -> int:
        return int(self._c.call("documents.count"))

    def resolve(self, vector: Any, limit: int, mode: Any) -> list[DocumentHit]:
        return self._c.call("resolve", vector, limit, mode)


def _resolve_limit(where: str, limit: int, default: int, deprecated: dict[str, Any]) -> int:
    """``limit``, or the deprecated ``n=`` (with its warning), as the store's methods accept them."""
    unknown = set(deprecated) - {"n"}
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if "n" in deprecated:
        if limit != default:
            raise TypeError(f"{where}() got multiple values for argument 'limit'")
        return int(rename_keywords(where, deprecated, {"n": "limit"}, stacklevel=5)["limit"])
    return limit


class ClusterCollection:
    """One collection on its shard host: the :class:`hopmem.store.Collection` API."""

    def __init__(self, database: ClusterDatabase, name: str, config: MemoryConfig, *,
                 shard: int | None = None) -> None:
        self._db = database
        self._name = name
        self._shard = database.shard_of(name) if shard is None else shard
        self._config = config
        self._state: str | None = None
        self._text: Any = None
        self.documents = Documents(_RemoteDocuments(self))

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def database(self) -> ClusterDatabase:
        return self._db

    @property
    def shard(self) -> int:
        return self._shard

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def dim(self) -> int:
        return self._config.dim

    @property
    def seq(self) -> int:
        return int(self.call("get:seq"))

    @property
    def backend(self) -> str:
        return str(self.call("get:backend"))

    @property
    def next_doc_id(self) -> int:
        """The id the next document will get (as :attr:`hopmem.store.Collection.next_doc_id`)."""
        return int(self.call("get:next_doc_id"))

    def __repr__(self) -> str:
        return (f"ClusterCollection({self._name!r}, dim={self.dim}, database={self._db.name!r}, "
                f"shard={self._shard})")

    def mark_dropped(self) -> None:
        self._state = f"collection {self._name!r} was dropped"

    def mark_closed(self) -> None:
        self._state = self._state or "closed"

    def call(self, method: str, *args: Any, _retry: bool = True, _read_from: str | None = None,
             **kwargs: Any) -> Any:
        """One call of the collection's ``method`` on its host (internal to the cluster)."""
        if self._state == "closed":
            raise StoreError(f"collection {self._name!r} of {self._db.path}: the database is closed")
        if self._state is not None:
            raise NotFound(self._state)
        return self._db.invoke(self._shard, "collection_call",
                               (self._db.name, self._shard, self._name, method, args, kwargs), _retry,
                               _read_from)

    def read_group(self, method: str, queries: list[tuple[Any, str]], *,
                   read_from: str | None = None) -> list[tuple[bool, Any]]:
        """Several one-query reads (``analyze`` or ``read_scored``) in ONE host call, each
        answered alone: ``(True, result)`` or ``(False, exception)`` per query."""
        out = self._db.invoke(self._shard, "read_group",
                              (self._db.name, self._shard, self._name, method, queries), True,
                              read_from)
        return [(ok, value if ok else unpack_error(value)) for ok, value in out]

    # -- reads --------------------------------------------------------------------------------------

    def read(self, query: Any, strategy: str = "iterative", *, read_from: str | None = None) -> np.ndarray:
        return self.call("read", query, strategy, _read_from=read_from)

    def analyze(self, query: Any, strategy: str = "iterative", *, read_from: str | None = None) -> Any:
        return self.call("analyze", query, strategy, _read_from=read_from)

    def read_scored(self, query: Any, strategy: str = "iterative", *, read_from: str | None = None) -> Any:
        return self.call("read_scored", query, strategy, _read_from=read_from)

    def attention(self, query: Any, scale: float, *, read_from: str | None = None) -> Any:
        return self.call("attention", query, scale, _read_from=read_from)

    def fingerprint(self) -> np.ndarray | None:
        return self.call("fingerprint")

    def stats(self, *, read_from: str | None = None) -> Any:
        return self.call("stats", _read_from=read_from)

    def snapshot(self, *, read_from: str | None = None) -> Any:
        return self.call("snapshot", _read_from=read_from)

    @property
    def ids(self) -> np.ndarray:
        return self.call("get:ids")

    @property
    def addresses(self) -> np.ndarray:
        return self.call("get:addresses")

    @property
    def counters(self) -> np.ndarray:
        return self.call("get:counters")

    @property
    def weights(self) -> np.ndarray:
        return self.call("get:weights")

    @property
    def patterns(self) -> np.ndarray:
        return self.call("get:patterns")

    def __len__(self) -> int:
        return int(self.call("len"))

    # -- writes -------------------------------------------------------------------------------------

    def write_options(self, method: str, write_id: str | None) -> tuple[dict[str, Any], bool]:
        """The keywords and retry rule of a mutation: with a write id it may be retried
        (one is made up when none is given and the hosts' store records them)."""
        if write_id is None and self._db.datadir.supports_write_ids(method):
            write_id = uuid.uuid4().hex
        if write_id is None:
            return {}, False
        return {"write_id": write_id}, True

    def write(self, vectors: Any, metadata: Any = None, *,
              write_id: str | None = None) -> Any:
        """Write, as :meth:`hopmem.store.Collection.write`; returns once committed on the host.

        ``write_id`` (when the store records them) makes a retry after an
        ambiguous failure apply once; the client gives one when none is passed.
        """
        options, retry = self.write_options("write", write_id)
        return self.call("write", vectors, metadata, _retry=retry, **options)

    def compress(self, max_locations: int | None = None, *, write_id: str | None = None) -> Any:
        """As :meth:`hopmem.store.Collection.compress`; retried safely with write ids, as ``write``."""
        options, retry = self.write_options("compress", write_id)
        return self.call("compress", max_locations, _retry=retry, **options)

    def checkpoint(self) -> None:
        self.call("checkpoint")

    @property
    def centering(self) -> dict[str, Any] | None:
        return self.call("get:centering")

    @centering.setter
    def centering(self, value: Any) -> None:
        self.call("set:centering", value)

    @property
    def gate(self) -> dict[str, Any] | None:
        return self.call("get:gate")

    @gate.setter
    def gate(self, value: Any) -> None:
        self.call("set:gate", value)

    # -- resolution ---------------------------------------------------------------------------------

    def resolve(self, vector: Any, limit: int = 10, mode: str = "exact", *,
                read_from: str | None = None, **deprecated: Any) -> list[DocumentHit]:
        """As :meth:`hopmem.store.Collection.resolve` (``n=`` deprecated); ``read_from``:
        ``"leader"`` or ``"any"`` in-sync copy of a replicated shard (default: the client's)."""
        limit = _resolve_limit("Collection.resolve", limit, 10, deprecated)
        return self.call("resolve", vector, limit, mode, _read_from=read_from)

    # -- text: the text layer runs here, over this collection's remote calls -------------------------

    def _text_collection(self) -> Any:
        if self._text is None:
            encoder = self._db.encoder_object
            if encoder is None:
                raise InvalidInput(
                    f"collection {self._name!r} of {self._db.path}: remember, recall and calibrate "
                    f"need the database opened with an encoder, e.g. "
                    f"cluster.get(name, encoder=HashingEncoder({self.dim}))")
            from ..text.collection import TextCollection
            self._text = TextCollection(self, encoder)
        return self._text

    def remember(self, texts: Any, metadata: Any = None, *,
                 write_id: str | None = None) -> list[int]:
        """As :meth:`hopmem.store.Collection.remember`: encoded here, written on the host with
        a write id (made up when none is given), so the write is retried safely."""
        options, _ = self.write_options("write", write_id)
        return list(self._text_collection().remember(texts, metadata, **options))

    def recall(self, text: str, limit: int = 5, **options: Any) -> RecallResult:
        options = dict(options)
        limit = _resolve_limit("Collection.recall", limit, 5,
                               {k: options.pop(k) for k in ("n",) if k in options})
        return self._text_collection().recall(text, limit, **options)

    def calibrate(self, related: Sequence[str] | None = None,
                  unrelated: Sequence[str] | None = None, *args: float,
                  error_budget: float = 0.0, holdout: float = 0.3, seed: int = 0,
                  statistic: str = "confidence", **deprecated: Any) -> RecallGate:
        """As :meth:`hopmem.store.Collection.calibrate` (the same deprecated names)."""
        where = "Collection.calibrate"
        if args:
            if error_budget != 0.0:
                raise TypeError(f"{where}() got multiple values for argument 'error_budget'")
            error_budget = positional_to_keywords(where, args, ("error_budget",), {})["error_budget"]
        unknown = set(deprecated) - {"related_texts", "unrelated_texts", "holdout_fraction"}
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        got = rename_keywords(where, deprecated, {"related_texts": "related",
                                                  "unrelated_texts": "unrelated",
                                                  "holdout_fraction": "holdout"}, stacklevel=5)
        related = got.get("related", related)
        unrelated = got.get("unrelated", unrelated)
        holdout = got.get("holdout", holdout)
        if related is None or unrelated is None:
            raise TypeError(f"{where}() missing required arguments 'related' and 'unrelated'")
        return self._text_collection().calibrate(
            related, unrelated, error_budget=error_budget, holdout=holdout, seed=seed,
            statistic=statistic)

    def export(self, path: str, **options: Any) -> dict[str, Any]:
        """Export to a portable file at ``path`` ON THE HOST's machine."""
        return self.call("export", path, **options)


class ClusterPartitionedCollection(PartitionedCollection):
    """A partitioned collection of a cluster database: a
    :class:`~hopmem.cluster.partitions.PartitionedCollection` over P
    :class:`ClusterCollection` parts (on different shards), called in parallel.

    Writes, exact ``resolve``, documents and ``stats`` answer as one collection
    holding the same documents would; memory reads (``read``, ``analyze``,
    ``attention``, ``recall``, ...) and the text layer's slots (``centering``,
    ``gate``) raise :class:`~hopmem.errors.NotSupported`.
    """

    def __init__(self, database: ClusterDatabase, name: str,
                 parts: Sequence[ClusterCollection]) -> None:
        super().__init__(name, parts, executor=database.partition_executor())
        self._db = database
        self._cluster_parts = tuple(parts)

    @property
    def database(self) -> ClusterDatabase:
        return self._db

    @property
    def config(self) -> MemoryConfig:
        """The parts' configuration (they are made with the same one)."""
        return self._cluster_parts[0].config

    @property
    def shards(self) -> list[int]:
        """The shard of each partition."""
        return [part.shard for part in self._cluster_parts]

    @property
    def centering(self) -> Any:
        """Refused: the text layer (remember, recall) needs one memory."""
        self._refuse("centering (remember, recall)")

    @property
    def gate(self) -> Any:
        """Refused: the text layer (remember, recall) needs one memory."""
        self._refuse("gate (recall, calibrate)")

    def mark_dropped(self) -> None:
        for part in self._cluster_parts:
            part.mark_dropped()

    def mark_closed(self) -> None:
        for part in self._cluster_parts:
            part.mark_closed()

    def __repr__(self) -> str:
        return (f"ClusterPartitionedCollection({self.name!r}, dim={self.dim}, "
                f"database={self._db.name!r}, partitions={self.partitions})")


def _partitions_of(coll: ClusterCollection | ClusterPartitionedCollection) -> int:
    return coll.partitions if isinstance(coll, ClusterPartitionedCollection) else 1


#: AgentMemory methods that change nothing durable: retried while a host restarts.
_AGENT_READS = frozenset({"recall", "rank", "get", "entries", "variants", "stats", "now",
                          "gate_statistics", "gates", "band_gates", "verdict_models"})


class ClusterAgentMemory:
    """An :class:`hopmem.agent.AgentMemory` living on a shard host: the same methods, called
    remotely (``memory.remember(...)``, ``memory.recall(...)``, ``memory.stats()``, ...).

    Attributes that are not methods are read from the host at each access.
    Reads (``recall``, ``get``, ``stats``, ...) are retried while a host
    restarts, and so is ``remember``: it carries a write id (made up when none
    is given; AgentMemory records it with the entry), so a retry is applied
    once. Other writes (``forget``, ``feedback``, ...) interrupted by a host
    failure are not retried (their outcome is unknown). A restarted host gets
    the memory opened again first.
    """

    def __init__(self, database: ClusterDatabase, namespace: str, encoder: Any,
                 options: dict[str, Any]) -> None:
        self._db = database
        self._namespace = namespace
        self._shard = stable_shard(database.name, namespace, database.shards)
        self._encoder = encoder
        self._options = options
        self._callable: dict[str, bool] = {}

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def shard(self) -> int:
        return self._shard

    def open(self) -> None:
        """Open the memory on its host (again, after the host restarted)."""
        self._db.invoke(self._shard, "agent_open", (self._db.name, self._shard, self._namespace,
                                                    self._encoder, self._options), True)

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        retry = method.startswith("get:") or method in _AGENT_READS
        if method == "remember":
            kwargs = {k: v for k, v in kwargs.items() if k != "write_id" or v is not None}
            if "write_id" not in kwargs and self._db.datadir.supports_write_ids("agent.remember"):
                kwargs["write_id"] = uuid.uuid4().hex
            retry = "write_id" in kwargs
        for attempt in (0, 1):
            try:
                return self._db.invoke(self._shard, "agent_call", (
                    self._db.name, self._shard, self._namespace, method, args, kwargs), retry)
            except NotOpen:
                if attempt:
                    raise
                self.open()
        raise AssertionError("unreachable")  # pragma: no cover

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        known = self._callable.get(name)
        if known is None:
            value = self._call(f"get:{name}", (), {})
            known = self._callable[name] = value == "<callable>"
            if not known:
                return value
        if not known:
            return self._call(f"get:{name}", (), {})

        def method(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, args, kwargs)
        method.__name__ = name
        return method

    def close(self) -> None:
        """Nothing to release here: the host keeps the file open for other clients."""

    def __enter__(self) -> ClusterAgentMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ClusterAgentMemory({self._namespace!r}, database={self._db.name!r}, "
                f"shard={self._shard})")
