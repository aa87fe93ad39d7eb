"""Moving a shard to another host: freeze, back up, copy, reopen there, update the catalog.

1. The source host stops serving the shard (new calls answer "not here", so
   clients wait and look it up again), waits for the calls in flight, takes a
   consistent backup (SQLite's online backup, after a checkpoint) and closes it.
   The shard's agent-memory file (its namespaces), if any, is closed and
   backed up the same way.
2. The backups are copied to the target host in chunks (through Ray's object
   store, so the two hosts may be on different machines), installed as the
   shard file there and opened (which checks it).
3. The catalog points the shard at the target; the source moves its copy into
   its trash (kept until ``purge_trash``).

If anything fails before step 3 the source serves the shard again and the
target's partial copy is discarded: a failed move changes nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import InvalidInput, NotSupported
from .wire import unpack_error

__all__ = ["move_shard"]

logger = logging.getLogger("hopmem.cluster")
_CHUNK = 8 << 20


def _call(transport: Any, host: str, method: str, *args: Any) -> Any:
    ok, value = transport.host(host, method, args, True)
    if not ok:
        raise unpack_error(value)
    return value


def _copy(transport: Any, source: str, target: str, relative: str, size: int) -> None:
    offset = 0
    while offset < size:
        data = _call(transport, source, "read_chunk", relative, offset, _CHUNK)
        if not data:
            break
        _call(transport, target, "write_chunk", relative, offset, data)
        offset += len(data)


def move_shard(transport: Any, database: str, shard: int, target: str) -> dict[str, Any]:
    """Move shard ``shard`` of ``database`` to host ``target``; returns what was done."""
    record = transport.catalog("database", database)
    if record.get("replicas", 1) > 1:
        raise NotSupported(f"database {database!r} is replicated: its shards' copies change "
                           f"with repair, not with a move")
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < record["shards"]:
        raise InvalidInput(f"shard: expected an integer in 0..{record['shards'] - 1}, got {shard!r}")
    hosts = {h["host_id"] for h in transport.catalog("hosts")}
    if target not in hosts:
        raise InvalidInput(f"host: expected one of {sorted(hosts)}, got {target!r}")
    source = record["placement"][shard]
    if source == target:
        return {"database": database, "shard": shard, "from": source, "to": target,
                "bytes": 0, "seconds": 0.0, "moved": False}
    t0 = time.perf_counter()
    relative = f".moves/{database}-{shard:04d}.hopmem"
    agents = relative + ".agents"
    size = int(_call(transport, source, "freeze", database, shard, relative))
    try:
        agent_size = int(_call(transport, source, "freeze_agents", database, shard, agents))
        _copy(transport, source, target, relative, size)
        if agent_size >= 0:
            _copy(transport, source, target, agents, agent_size)
        _call(transport, target, "adopt", database, shard, relative)
        if agent_size >= 0:
            _call(transport, target, "adopt_agents", database, shard, agents)
        transport.catalog("move_shard", database, shard, target)
    except BaseException:
        _call(transport, source, "thaw", database, shard)
        raise
    _call(transport, source, "release", database, shard, relative)
    seconds = time.perf_counter() - t0
    logger.info("moved shard %d of %r from %s to %s (%d bytes, %.2f s)", shard, database,
                source, target, size, seconds)
    size += max(agent_size, 0)
    return {"database": database, "shard": shard, "from": source, "to": target, "bytes": size,
            "seconds": round(seconds, 3), "moved": True}
