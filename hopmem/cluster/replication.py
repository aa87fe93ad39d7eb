"""Replicated shards on the hosts: the leader applies, forwards, and acknowledges.

A replicated shard has R copies on R hosts. The leader of a shard sends each
mutation (a write, a compression, a delete, a collection created or dropped,
a setting), with the epoch and the write id it carries, to every in-sync
follower, applies and commits it itself meanwhile, then waits for each
follower to commit it: a replicated write costs the slower of the two
copies, not their sum. Mutations of one shard hold the shard's lock from
the sending to the last follower's answer, so one batch is in flight at a
time and followers apply them in the leader's order; the mutations that
queued for the lock meanwhile go as the next batch (one call to each
follower, applied there in order, each answered alone), so the cost of a
call between hosts is shared by concurrent writers. The engine and the store are
deterministic, so a follower's memory equals the leader's bit for bit, and a
call the leader refuses (bad input) the followers refuse the same way.

A follower that fails to answer (its node is gone, it timed out, it refused)
or whose outcome differs from the leader's is taken out of the in-sync set in the catalog (a compare-and-set on the
epoch) BEFORE the write is acknowledged without it. If that change is refused
(the catalog has a newer epoch: this leader was deposed) the write is not
acknowledged: a deposed leader cannot acknowledge anything. Followers refuse
messages from an epoch older than the newest they know, and a host refuses to
lead at an epoch the catalog does not give it.

Every batch is one entry of the shard's replication journal
(:mod:`.shardlog`), kept by the leader and by each follower that applies it.
A copy that missed entries is caught up by replaying the leader's entries
after its position (first without the shard's lock, then the last ones
under it); one whose position the leader cannot continue (it restarted, the
entries it needs are no longer kept, or it applied a write the leader never
had, like a deposed leader) is refilled by a full copy of the leader's shard
(SQLite's online backup, sent in chunks through Ray's object store as a
move does) under the shard's lock. It then joins the in-sync set. What each
catch-up did is recorded (:meth:`Replication.catch_ups`). A leader that
took a follower out of the in-sync set keeps trying, in the background, to
catch it up once it answers again (a restarted or paused process, a node
back); ``repair`` does it for copies on lost hosts.

Plain Python: the host actor gives :class:`Replication` its peers (calls to
other hosts and to the catalog) as a :class:`Peers` object.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InvalidInput, StoreError
from .shardlog import DEFAULT_BYTES, DEFAULT_ENTRIES, ShardLog, new_history
from .wire import Envelope, NotHere, NotLeader, OutOfSync, StaleEpoch, answer, unpack_error

__all__ = ["Replication", "Peers", "Pending", "mutates", "REPLICATED_METHODS"]

logger = logging.getLogger("hopmem.cluster")

#: The host methods a client may call on a replicated shard's leader through ``lead``.
REPLICATED_METHODS = frozenset({"collection_call", "database_call", "read_group", "shard_info"})
_COLLECTION_MUTATIONS = frozenset({"write", "compress", "documents.delete"})
_DATABASE_MUTATIONS = frozenset({"collection", "drop_collection"})
_CHUNK = 8 << 20
#: How long a leader keeps trying to catch up a copy that left the in-sync set on its own.
REJOIN_SECONDS = 600.0


def mutates(method: str, args: tuple[Any, ...]) -> bool:
    """Whether host call ``method(*args)`` changes a shard's state (so it is replicated)."""
    if method == "collection_call":
        name = args[3]
        return name in _COLLECTION_MUTATIONS or str(name).startswith("set:")
    if method == "database_call":
        return args[2] in _DATABASE_MUTATIONS
    return False


#: A replication call sent and not yet answered: call it with a timeout to get its envelope.
Pending = Callable[[float], Envelope]


class Peers(Protocol):
    """What a host reaches outside itself: other hosts' replication calls, and the catalog."""

    def replicate(self, host_id: str, method: str, args: tuple[Any, ...],
                  timeout: float) -> Envelope: ...

    def send(self, host_id: str, method: str, args: tuple[Any, ...]) -> Pending:
        """Start ``replicate`` without waiting: the returned call waits (up to its timeout, in
        seconds) and answers the envelope (a failure envelope if the host did not answer)."""
        ...

    def catalog(self, method: str, *args: Any) -> Any: ...


@dataclass
class Role:
    """What this host knows of one replicated shard: its epoch, leader and followers."""

    epoch: int
    leader: str
    followers: list[str] = field(default_factory=list)
    #: Followers may miss the last writes (leadership taken over): refill them first.
    unsynced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Replication:
    """The replication side of a shard host (``host``: a :class:`~.host.ShardHost`)."""

    def __init__(self, host: Any, timeout: float = 5.0, journal_entries: int = DEFAULT_ENTRIES,
                 journal_bytes: int = DEFAULT_BYTES) -> None:
        self.host = host
        self.peers: Peers | None = None
        self.timeout = timeout
        self.journal_entries = int(journal_entries)
        self.journal_bytes = int(journal_bytes)
        self._roles: dict[tuple[str, int], Role] = {}
        #: Each replicated shard's replication journal here (absent: position unknown).
        self._logs: dict[tuple[str, int], ShardLog] = {}
        #: What the last catch-up of each copy did, per shard this host led it for.
        self._catch_ups: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        #: Mutations waiting for their shard's lock: the holder runs them all as one batch.
        self._queues: dict[tuple[str, int], list[_Mutation]] = {}
        self._guard = threading.Lock()

    @property
    def me(self) -> str:
        return str(self.host.host_id)

    def _peers(self) -> Peers:
        if self.peers is None:
            raise StoreError(f"host {self.me}: no peers (not running in a cluster)")
        return self.peers

    # -- roles --------------------------------------------------------------------------------

    def _role_from_catalog(self, database: str, shard: int) -> Role:
        """This host's role for the shard, as the catalog has it now (recorded here)."""
        state = self._peers().catalog("shard_state", database, shard)
        key = (database, shard)
        with self._guard:
            old = self._roles.get(key)
            if old is not None and old.epoch > state["epoch"]:
                raise StaleEpoch(f"shard {shard} of {database!r}: the catalog's epoch "
                                 f"{state['epoch']} is older than {old.epoch}")
            if old is not None and old.epoch == state["epoch"] and old.leader == state["leader"]:
                return old
            followers = [h for h in state["isr"] if h != state["leader"]]
            role = Role(state["epoch"], state["leader"], followers if state["leader"] == self.me
                        else [], unsynced=bool(followers) and state["leader"] == self.me)
            if old is not None:
                role.lock = old.lock
            self._roles[key] = role
            return role

    def become(self, database: str, shard: int, epoch: int, leader: str,
               followers: list[str], synced: bool, history: str | None = None) -> None:
        """Take role ``leader``/``followers`` at ``epoch``; a new shard is ``synced``, every
        copy starting replication journal ``history`` (the same on each) empty."""
        key = (database, shard)
        with self._guard:
            old = self._roles.get(key)
            if old is not None and old.epoch > epoch:
                raise StaleEpoch(f"shard {shard} of {database!r}: epoch {epoch} is older than "
                                 f"{old.epoch}")
            role = Role(epoch, leader, list(followers) if leader == self.me else [],
                        unsynced=not synced and leader == self.me and bool(followers))
            if old is not None:
                role.lock = old.lock
            self._roles[key] = role
            if synced:
                self._logs[key] = self._new_log(history or f"{database}/{shard}/e{epoch}")

    def _new_log(self, history: str, base: int = 0, base_epoch: int = 0) -> ShardLog:
        return ShardLog(history, base, base_epoch, max_entries=self.journal_entries,
                        max_bytes=self.journal_bytes)

    def forget(self, database: str, shard: int) -> None:
        """The shard was dropped here: forget its role and journal."""
        key = (database, shard)
        with self._guard:
            self._roles.pop(key, None)
            self._logs.pop(key, None)
            self._catch_ups.pop(key, None)

    def position(self, database: str, shard: int) -> tuple[str, int, int] | None:
        """``(history, position, epoch)`` of the last journal entry applied here (None:
        unknown, e.g. this process restarted)."""
        log = self._logs.get((database, shard))
        return None if log is None else log.position()

    def catch_ups(self, database: str, shard: int) -> dict[str, dict[str, Any]]:
        """What the last catch-up of each copy did, as this host (its leader) ran it:
        ``{host: {how: "journal" | "copy", entries, mutations, bytes, why, seconds, epoch}}``."""
        return {h: dict(r) for h, r in self._catch_ups.get((database, shard), {}).items()}

    def role(self, database: str, shard: int) -> dict[str, Any] | None:
        """``{epoch, leader, followers}`` as this host knows it, or None."""
        role = self._roles.get((database, shard))
        if role is None:
            return None
        return {"epoch": role.epoch, "leader": role.leader, "followers": list(role.followers),
                "position": self.position(database, shard)}

    def _leading(self, database: str, shard: int, epoch: int) -> Role:
        role = self._roles.get((database, shard))
        if role is None or role.epoch < epoch:
            role = self._role_from_catalog(database, shard)
        if role.leader != self.me or role.epoch != epoch:
            raise NotLeader(f"host {self.me} does not lead shard {shard} of {database!r} at "
                            f"epoch {epoch} (it knows {role.leader} at epoch {role.epoch})")
        return role

    # -- the leader ---------------------------------------------------------------------------

    def lead(self, database: str, shard: int, epoch: int, method: str,
             args: tuple[Any, ...]) -> Any:
        """Run host call ``method(*args)`` as the shard's leader at ``epoch``; a mutation is
        committed here and on every in-sync follower (or they leave the in-sync set) first."""
        if method not in REPLICATED_METHODS:
            raise InvalidInput(f"method: expected one of {sorted(REPLICATED_METHODS)}, got "
                               f"{method!r}")
        call: Callable[..., Any] = getattr(self.host, method)
        role = self._leading(database, shard, epoch)
        if not mutates(method, args):
            return call(*args)
        mine = _Mutation(epoch, method, args)
        key = (database, shard)
        with self._guard:
            self._queues.setdefault(key, []).append(mine)
        with role.lock:
            if not mine.done:
                self._lead_batch(database, shard, epoch)
        if mine.error is not None:
            raise mine.error
        return mine.result

    def _lead_batch(self, database: str, shard: int, epoch: int) -> None:
        """Run every queued mutation of the shard at ``epoch`` as one batch (the caller holds
        the shard's lock): sent to the followers in one call, applied here meanwhile, in the
        order they arrived; then wait for the followers. Mutations at another epoch stay
        queued for their own callers."""
        key = (database, shard)
        with self._guard:
            queue = self._queues.get(key, [])
            batch = [m for m in queue if m.epoch == epoch]
            rest = [m for m in queue if m.epoch != epoch]
            if rest:
                self._queues[key] = rest
            else:
                self._queues.pop(key, None)
        try:
            role = self._leading(database, shard, epoch)
            if role.unsynced:
                self._resync_all(database, shard, role)
            log = self._leader_log(key)
            with self._guard:
                prev_epoch = log.last_epoch
                entry = log.append(epoch, [(m.method, m.args) for m in batch])
            # Forwarded first, applied here meanwhile: the shard's lock is held until every
            # follower answered, so one batch of the shard is in flight at a time and the
            # followers apply the mutations in this host's order.
            sent = self._send(database, shard, role, "apply_entries",
                              (log.history, prev_epoch,
                               [(entry.pos, entry.epoch, entry.calls)]))
            outcomes: list[Exception | None] = []
            for m in batch:
                try:
                    m.result = getattr(self.host, m.method)(*m.args)
                    outcomes.append(None)
                except Exception as exc:  # noqa: BLE001 - the caller's error, raised there
                    m.error = exc
                    outcomes.append(exc)
            self._settle(database, shard, role, sent, outcomes)
        except Exception as exc:  # noqa: BLE001 - not acknowledged: every caller hears why
            for m in batch:
                m.result, m.error = None, exc
        finally:
            for m in batch:
                m.done = True

    def _send(self, database: str, shard: int, role: Role, method: str,
              args: tuple[Any, ...]) -> list[tuple[str, Pending]]:
        """Send ``method(database, shard, epoch, leader, *args)`` to every follower, without
        waiting for their answers."""
        peers = self._peers()
        return [(follower, peers.send(follower, method,
                                      (database, shard, role.epoch, self.me, *args)))
                for follower in list(role.followers)]

    def _settle(self, database: str, shard: int, role: Role, sent: list[tuple[str, Pending]],
                local: list[Exception | None]) -> None:
        """Wait for the followers' answers to a batch this host applied with outcomes
        ``local`` (per mutation, None: it succeeded; else the error it raised). A follower
        whose outcome differs for any of them (it failed, timed out, refused, or succeeded
        where this host failed) leaves the in-sync set (in the catalog) before this returns;
        one that raised the same error as this host did the same (deterministic) thing."""
        deadline = time.monotonic() + self.timeout
        failed: list[str] = []
        for follower, pending in sent:
            ok, value = pending(max(deadline - time.monotonic(), 0.001))
            # value: one answer per entry sent (None: it had applied that entry already).
            why = (value[0] is not None and _differs(local, value[0])) if ok \
                else repr(unpack_error(value))
            if why:
                logger.warning("shard %d of %r: follower %s leaves the in-sync set (%s)", shard,
                               database, follower, why)
                failed.append(follower)
        if failed:
            self._shrink(database, shard, role, failed)

    def _shrink(self, database: str, shard: int, role: Role, failed: list[str]) -> None:
        try:
            state = self._peers().catalog("shrink_isr", database, shard, role.epoch, self.me,
                                          failed)
        except StaleEpoch as exc:
            raise NotLeader(f"host {self.me} was deposed as leader of shard {shard} of "
                            f"{database!r}: {exc}") from None
        role.followers = [h for h in state["isr"] if h != self.me]
        for host in failed:
            threading.Thread(target=self._rejoin, args=(database, shard, role.epoch, host),
                             name=f"hopmem-rejoin-{host}", daemon=True).start()

    def _rejoin(self, database: str, shard: int, epoch: int, host: str) -> None:
        """In the background: catch ``host`` up (a full copy) once it answers again, e.g. after
        its process restarted, while this host leads at ``epoch`` and ``host`` is still one of
        the shard's replicas out of sync; gives up after ``REJOIN_SECONDS``."""
        deadline = time.monotonic() + REJOIN_SECONDS
        delay = 1.0
        while time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(2 * delay, 15.0)
            try:
                state = self._peers().catalog("shard_state", database, shard)
                if state["epoch"] != epoch or state["leader"] != self.me \
                        or host not in state["replicas"] or host in state["isr"]:
                    return
                ok, _ = self._peers().replicate(host, "pid", (), self.timeout)
                if ok:
                    self.catch_up(database, shard, epoch, host)
                    return
            except Exception as exc:  # noqa: BLE001 - tried again until the deadline
                logger.info("shard %d of %r: %s not caught up yet (%s)", shard, database, host,
                            exc)

    def _leader_log(self, key: tuple[str, int]) -> ShardLog:
        """This leader's journal of the shard; a new history if its position is unknown (its
        process restarted): copies then catch up from it by a full copy."""
        with self._guard:
            log = self._logs.get(key)
            if log is None:
                log = self._logs[key] = self._new_log(new_history())
            return log

    def _resync_all(self, database: str, shard: int, role: Role) -> None:
        """After taking over leadership: catch up every follower (they may lack a write this
        host has: the journal's suffix; or hold one it does not: a full copy); the ones that
        fail leave the in-sync set."""
        failed = []
        for follower in list(role.followers):
            try:
                self._sync(database, shard, role, follower, locked=True)
            except Exception as exc:  # noqa: BLE001 - a follower that cannot be refilled leaves
                logger.warning("shard %d of %r: catching up %s failed (%s)", shard, database,
                               follower, exc)
                failed.append(follower)
        if failed:
            self._shrink(database, shard, role, failed)
        role.unsynced = False

    def _sync(self, database: str, shard: int, role: Role, target: str, locked: bool,
              before: dict[str, Any] | None = None) -> dict[str, Any]:
        """Bring ``target`` to this leader's journal position: replay the entries after its
        own if it is in this leader's history and they are still kept, else (only when the
        caller holds the shard's lock, ``locked``) a full copy. Returns what it did (with
        what an unlocked pass ``before`` it did); records it when ``locked`` (the catch-up
        is complete then)."""
        key = (database, shard)
        started = time.perf_counter()
        log = self._leader_log(key)
        peers = self._peers()
        answered = _check(peers.replicate(target, "log_position", (database, shard),
                                          self.timeout))
        position = None if answered is None else \
            (str(answered[0]), int(answered[1]), int(answered[2]))
        with self._guard:
            why = log.why_not_suffix(position)
            missing = [] if why or position is None else log.after(position[1])
            prev_epoch = 0 if why or position is None else log.epoch_at(position[1])
            history = log.history
        record: dict[str, Any]
        if not why:
            sent = 0
            while sent < len(missing):
                chunk: list[tuple[int, int, list[Any]]] = []
                size = 0
                for entry in missing[sent:]:
                    if chunk and size + entry.size > _CHUNK:
                        break
                    chunk.append((entry.pos, entry.epoch, entry.calls))
                    size += entry.size
                _check(peers.replicate(target, "apply_entries",
                                       (database, shard, role.epoch, self.me, history,
                                        prev_epoch, chunk), 4 * self.timeout))
                prev_epoch = chunk[-1][1]
                sent += len(chunk)
            record = {"how": "journal", "entries": len(missing),
                      "mutations": sum(len(e.calls) for e in missing), "bytes": 0, "why": ""}
            if before is not None and before["how"] == "journal":
                record["entries"] += before["entries"]
                record["mutations"] += before["mutations"]
                started -= before["seconds"]
        elif not locked:
            return {"how": "none", "why": why, "seconds": 0.0}
        else:
            size = self._copy_to(database, shard, role, target)
            record = {"how": "copy", "entries": 0, "mutations": 0, "bytes": size, "why": why}
        record.update(seconds=round(time.perf_counter() - started, 4), epoch=role.epoch,
                      at=time.time())
        if locked:
            with self._guard:
                self._catch_ups.setdefault(key, {})[target] = record
            logger.info("shard %d of %r: %s caught up by %s", shard, database, target,
                        f"a journal suffix of {record['entries']} entries"
                        if record["how"] == "journal" else
                        f"a full copy of {record['bytes']} bytes ({why})")
        return record

    def _copy_to(self, database: str, shard: int, role: Role, target: str) -> int:
        """Copy this shard's file to ``target`` and make it a follower there, at this
        leader's journal position (caller holds the shard's lock, so no write runs
        meanwhile). Returns the bytes copied."""
        peers = self._peers()
        log = self._leader_log((database, shard))
        relative = f".replicas/{database}-{shard:04d}-e{role.epoch}-{target}.hopmem"
        db = self.host.database_for_copy(database, shard)
        db.checkpoint()
        path = self.host.inside(relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        db.backup(path, overwrite=True)
        try:
            size = os.path.getsize(path)
            offset = 0
            with open(path, "rb") as f:
                while True:
                    data = f.read(_CHUNK)
                    if not data and offset:
                        break
                    _check(peers.replicate(target, "receive_chunk",
                                           (relative, offset, data), 4 * self.timeout))
                    offset += len(data)
                    if not data:
                        break
            _check(peers.replicate(target, "install", (database, shard, role.epoch, self.me,
                                                       relative, log.position()),
                                   4 * self.timeout))
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)
        return size

    def catch_up(self, database: str, shard: int, epoch: int, target: str) -> dict[str, Any]:
        """Bring ``target`` up to this shard (a journal suffix, else a full copy) and add it
        to the in-sync set (repair's step). Returns the shard's state and, as
        ``caught_up``, what the catch-up did."""
        role = self._leading(database, shard, epoch)
        # Most of a journal suffix goes while writes continue; the rest under the lock.
        before = None
        with contextlib.suppress(Exception):
            before = self._sync(database, shard, role, target, locked=False)
        with role.lock:
            role = self._leading(database, shard, epoch)
            if role.unsynced:
                self._resync_all(database, shard, role)
            record = self._sync(database, shard, role, target, locked=True, before=before)
            try:
                state: dict[str, Any] = self._peers().catalog(
                    "expand_isr", database, shard, epoch, self.me, target)
            except StaleEpoch as exc:
                raise NotLeader(str(exc)) from None
            role.followers = [h for h in state["isr"] if h != self.me]
        return {**state, "bytes": record["bytes"], "caught_up": record}

    # -- the follower -------------------------------------------------------------------------

    def _following(self, database: str, shard: int, epoch: int, leader: str) -> Role:
        """The role for a message from ``leader`` at ``epoch``; StaleEpoch if older."""
        key = (database, shard)
        with self._guard:
            role = self._roles.get(key)
            if role is not None and (role.epoch > epoch or
                                     (role.epoch == epoch and role.leader != leader)):
                raise StaleEpoch(f"host {self.me}: shard {shard} of {database!r} is at epoch "
                                 f"{role.epoch} (leader {role.leader}); refused a message of "
                                 f"epoch {epoch} from {leader}")
            if role is None or role.epoch < epoch:
                new = Role(epoch, leader)
                if role is not None:
                    new.lock = role.lock
                role = self._roles[key] = new
            return role

    def apply_entries(self, database: str, shard: int, epoch: int, leader: str, history: str,
                      prev_epoch: int, entries: list[tuple[int, int, list[Any]]]
                      ) -> list[list[tuple[bool, Any]] | None]:
        """A follower's side of journal entries ``(position, epoch, calls)`` from ``leader``:
        the first must follow this copy's last entry (same history, its position - 1 with
        epoch ``prev_epoch``), else :class:`OutOfSync`. Each call is applied in order and
        answered alone (``(True, None)`` or ``(False, packed error)``); an entry applied here
        already (a repeated message) is skipped and answers None."""
        key = (database, shard)
        role = self._following(database, shard, epoch, leader)
        with role.lock:
            self._following(database, shard, epoch, leader)
            log = self._logs.get(key)
            if not entries:
                return []
            first = entries[0][0]
            if log is None or log.history != history or log.epoch_at(first - 1) != prev_epoch:
                raise OutOfSync(
                    f"host {self.me}: shard {shard} of {database!r} is at "
                    f"{'an unknown position' if log is None else log.position()}; refused "
                    f"entries {first}.. of history {history} after epoch {prev_epoch}")
            out: list[list[tuple[bool, Any]] | None] = []
            for pos, entry_epoch, calls in entries:
                if pos <= log.pos:
                    known = log.epoch_at(pos)
                    if known is not None and known != entry_epoch:
                        raise OutOfSync(f"host {self.me}: entry {pos} of shard {shard} of "
                                        f"{database!r} is of epoch {known}, not {entry_epoch}")
                    out.append(None)
                    continue
                results: list[tuple[bool, Any]] = []
                for method, args in calls:
                    ok, value = answer(getattr(self.host, method), *args)
                    results.append((True, None) if ok else (False, value))
                log.append(entry_epoch, calls)
                out.append(results)
            return out

    def install(self, database: str, shard: int, epoch: int, leader: str,
                relative: str, position: tuple[str, int, int]) -> None:
        """Replace this host's copy of the shard with the leader's copy ``relative``, taken
        at the leader's journal ``position``."""
        key = (database, shard)
        role = self._following(database, shard, epoch, leader)
        with role.lock:
            self._following(database, shard, epoch, leader)
            with self._guard:
                self._logs.pop(key, None)  # unknown while the file is swapped
            self.host.replace_shard(database, shard, relative)
            history, pos, last_epoch = position
            with self._guard:
                self._logs[key] = self._new_log(history, int(pos), int(last_epoch))


@dataclass
class _Mutation:
    """A client's mutation queued for its shard's next batch, and its outcome."""

    epoch: int
    method: str
    args: tuple[Any, ...]
    done: bool = False
    result: Any = None
    error: Exception | None = None


def _differs(local: list[Exception | None], answers: list[tuple[bool, Any]]) -> str:
    """Why a follower's answers to a batch differ from this host's outcomes ('' if not)."""
    if len(answers) != len(local):
        return f"{len(answers)} answers to {len(local)} mutations"
    for i, (mine, (ok, value)) in enumerate(zip(local, answers)):
        if ok and mine is None:
            continue
        theirs = None if ok else unpack_error(value)
        if theirs is not None and mine is not None and type(theirs) is type(mine):
            continue
        return (f"mutation {i}: it {'succeeded' if theirs is None else repr(theirs)}, this "
                f"host {'succeeded' if mine is None else repr(mine)}")
    return ""


def _check(envelope: Envelope) -> Any:
    ok, value = envelope
    if ok:
        return value
    exc = unpack_error(value)
    if isinstance(exc, NotHere):
        raise StoreError(str(exc))
    raise exc
