"""Failover and repair of replicated shards, driven by a client through the catalog.

* :func:`fail_over`: the leader's node is gone, so an in-sync replica on a
  live node is promoted (a compare-and-set on the epoch in the catalog: of
  several clients racing, one wins and the others follow it).
* :func:`repair`: start a host on every live node without one, fail over
  shards led from lost nodes, forget copies on lost hosts, and catch up the
  missing copies from the leader (the suffix of its replication journal a
  copy lacks, or a full copy of the shard) until each shard has R in-sync
  copies again (or as many as there are live hosts).
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import StoreError
from .catalog import pick_hosts
from .wire import HostLost, StaleEpoch, unpack_error

__all__ = ["fail_over", "repair", "shard_lag", "shard_catch_ups"]

logger = logging.getLogger("hopmem.cluster")


def fail_over(transport: Any, database: str, shard: int, lost: str) -> dict[str, Any]:
    """Promote an in-sync replica of ``shard`` on a live node in place of leader ``lost``;
    returns the shard's state (unchanged if ``lost`` no longer leads it)."""
    state: dict[str, Any] = transport.catalog("shard_state", database, shard)
    if state["leader"] != lost:
        return state
    live = [h for h in state["isr"] if h != lost and transport.host_alive(h)]
    if not live:
        raise StoreError(f"shard {shard} of {database!r}: its leader {lost} is lost and no "
                         f"in-sync replica is alive (in sync: {state['isr']})")
    try:
        state = transport.catalog("promote", database, shard, state["epoch"], lost, live[0])
    except StaleEpoch:  # another client failed it over first
        return dict(transport.catalog("shard_state", database, shard))
    logger.warning("shard %d of %r: leader %s lost, %s leads at epoch %d", shard, database,
                   lost, state["leader"], state["epoch"])
    ok, value = transport.host(state["leader"], "become", (
        database, shard, state["epoch"], state["leader"],
        [h for h in state["isr"] if h != state["leader"]], False), True)
    if not ok:  # it learns its role from the catalog at its next call anyway
        logger.warning("shard %d of %r: telling %s it leads failed (%s)", shard, database,
                       state["leader"], unpack_error(value))
    return state


def _call(transport: Any, host: str, method: str, *args: Any) -> Any:
    ok, value = transport.host(host, method, args, True)
    if not ok:
        raise unpack_error(value)
    return value


def shard_lag(transport: Any, database: str, state: dict[str, Any]) -> dict[str, int | None]:
    """Each replica's journal entries behind its leader (None: lost, or no answer)."""
    seqs: dict[str, int | None] = {}
    for host in state["replicas"]:
        try:
            seqs[host] = None if not transport.host_alive(host) else \
                int(_call(transport, host, "shard_seq", database, state["shard"]))
        except Exception:  # noqa: BLE001 - a copy that cannot answer has no known lag
            seqs[host] = None
    top = seqs.get(state["leader"])
    return {h: None if s is None or top is None else max(0, top - s) for h, s in seqs.items()}


def shard_catch_ups(transport: Any, database: str, state: dict[str, Any]
                    ) -> dict[str, dict[str, Any]]:
    """What the last catch-up of each copy did, as its leader recorded it (see
    :meth:`.replication.Replication.catch_ups`); {} if the leader does not answer."""
    try:
        return dict(_call(transport, state["leader"], "catch_ups", database, state["shard"]))
    except Exception:  # noqa: BLE001 - a leader that cannot answer reports nothing
        return {}


def repair(transport: Any) -> list[dict[str, Any]]:
    """Restore R in-sync copies of every shard of every replicated database (see module)."""
    added = transport.add_node_hosts()
    if added:
        logger.info("repair: started hosts %s", added)
    hosts = transport.catalog("hosts")
    node = {h["host_id"]: h["node_id"] for h in hosts}
    live = {h["host_id"] for h in hosts if transport.host_alive(h["host_id"])}
    records = [transport.catalog("database", name) for name in transport.catalog("databases")]
    load = {h: 0 for h in live}
    for record in records:
        for state in record["replication"]:
            for h in state["replicas"]:
                if h in load:
                    load[h] += 1
    out = []
    for record in records:
        name, R = record["name"], int(record["replicas"])
        if R < 2:
            continue
        for shard in range(record["shards"]):
            state = transport.catalog("shard_state", name, shard)
            if state["leader"] not in live:
                try:
                    state = fail_over(transport, name, shard, state["leader"])
                except StoreError as exc:  # no in-sync copy is alive: nothing to copy from
                    out.append({"database": name, **state, "copied": [], "error": str(exc)})
                    continue
            leader, epoch = state["leader"], state["epoch"]
            keep = [h for h in state["replicas"] if h in live]
            if keep != state["replicas"]:
                state = transport.catalog("set_replicas", name, shard, epoch, leader, keep)
            new = pick_hosts({h: load[h] for h in live}, node, R - len(keep), keep)
            for h in new:
                load[h] += 1
            copied, caught_up = [], {}
            for target in [h for h in keep if h not in state["isr"]] + new:
                try:
                    state = _call(transport, leader, "catch_up", name, shard, epoch, target)
                    copied.append(target)
                    caught_up[target] = state.pop("caught_up", None)
                except HostLost:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported; the next repair retries
                    logger.warning("repair: shard %d of %r onto %s failed (%s)", shard, name,
                                   target, exc)
            state = transport.catalog("shard_state", name, shard)
            out.append({"database": name, **state, "copied": copied, "caught_up": caught_up})
    return out
