"""hopmem on a Ray cluster: sharded databases, shard hosts, a catalog, one HTTP front.

A logical database is split into S shard files (S fixed at creation and kept in
the catalog); a collection lives in shard ``stable_shard(database, collection, S)``.
Each shard host (a Ray actor owning a node-local directory) runs the ordinary
store over its shard files; the catalog (a named, detached actor over a small
SQLite file) maps shards to hosts. :func:`connect` and :func:`start_local`
return a :class:`~hopmem.cluster.client.ClusterDataDir`: the ``DataDir`` /
``Database`` / ``Collection`` API with the same results and errors, plus
``shutdown()``. See ``docs/scale-out.md``.

A replicated database (``cluster.create(name, dim, replicas=R)``) keeps R
copies of each shard on R hosts: the leader forwards every mutation to the
in-sync followers before acknowledging it (:mod:`hopmem.cluster.replication`),
the catalog arbitrates leaders and in-sync sets by epoch, clients fail over
to an in-sync copy when a leader's node is lost, and ``cluster.repair()``
(:mod:`hopmem.cluster.repair`) restores R copies.

A partitioned collection (``db.collection(name, partitions=P)``, a
:class:`~hopmem.cluster.client.ClusterPartitionedCollection` over the logic of
:mod:`hopmem.cluster.partitions`, which needs no Ray) spreads one collection's
documents over P parts on different shards and answers exact queries as one
collection would.

Ray is the optional extra ``hopmem[cluster]``; importing this package does
not import it (only :func:`connect` and :func:`start_local` do).
"""

from __future__ import annotations

from typing import Any

from .placement import stable_shard

__all__ = ["connect", "start_local", "stable_shard", "ClusterDataDir", "ClusterDatabase",
           "ClusterCollection", "ClusterPartitionedCollection"]


def connect(address: str = "auto", **options: Any) -> Any:
    """Join a Ray cluster; see :func:`hopmem.cluster.runtime.connect`."""
    from .runtime import connect as connect_
    return connect_(address, **options)


def start_local(hosts: int = 2, root: Any = "hopmem-cluster", **options: Any) -> Any:
    """Start a local Ray cluster; see :func:`hopmem.cluster.runtime.start_local`."""
    from .runtime import start_local as start_local_
    return start_local_(hosts, root, **options)


def __getattr__(name: str) -> Any:
    if name in ("ClusterDataDir", "ClusterDatabase", "ClusterCollection",
                "ClusterPartitionedCollection"):
        from . import client
        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
