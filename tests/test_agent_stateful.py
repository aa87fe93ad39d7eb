"""Random sequences of agent-memory operations against a plain model of what must be stored and visible.

A hypothesis state machine drives one :class:`AgentMemory` (hashing encoder,
injected clock, a real SQLite file) through remember, recall, complete,
feedback, forget, end_session, prune, clock moves, bad input and reopening the
file, and after every step checks:

* each session (and the shared scope) sees exactly the entries the model says
  it may: its namespace's shared ones plus its own session's, nothing
  forgotten or pruned, nothing of another session or namespace;
* a hit is recallable when it is returned (not expired, not another session's);
* a rejected call changes nothing;
* a reopened file holds the same entries, byte for byte in what they say.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from hopmem.agent import AgentMemory
from hopmem.agent.validation import MissingIdentity
from hopmem.encoders import HashingEncoder
from hopmem.errors import HopmemError, InvalidInput

ENC = HashingEncoder(64)
SESSIONS = (None, "s1", "s2")
WORDS = ("deploy", "billing", "postgres", "standup", "PROJ-4417", "ticket", "friday", "cluster", "coffee",
         "Ada", "Berlin", "invoice", "rotation", "v2.3.1", "staging")
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class AgentMemoryMachine(RuleBasedStateMachine):
    entries = Bundle("entries")
    selections = Bundle("selections")

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.path = f"{self.dir.name}/agent.db"
        self.clock = Clock()
        self.mem = self._open("team")
        self.other = self._open("other")  # a second tenant in the same file
        self.other.remember("deploy billing postgres standup")
        # the model: id -> (scope's session id or None for shared)
        self.alive: dict[int, str | None] = {}
        self.expired: set[int] = set()

    def _open(self, namespace: str) -> AgentMemory:
        return AgentMemory.open(self.path, encoder=ENC, namespace=namespace, clock=self.clock)

    def teardown(self) -> None:
        self.mem.close()
        self.other.close()
        self.dir.cleanup()

    def _visible(self, session: str | None) -> set[int]:
        return {i for i, s in self.alive.items() if s is None or s == session}

    # -- writes ----------------------------------------------------------------------------------------------

    @rule(target=entries, text=texts, session=st.sampled_from(SESSIONS), scoped=st.booleans(),
          importance=st.floats(0, 1), ttl=st.one_of(st.none(), st.floats(1, 500)))
    def remember(self, text, session, scoped, importance, ttl):
        durability = "session" if scoped and session else "shared"
        entry = self.mem.remember(text, session_id=session, durability=durability, importance=importance, ttl=ttl)
        # a merge stays in its scope; a new entry is in the scope asked for
        assert entry.durability == durability
        assert entry.session_id == (session if durability == "session" else entry.session_id)
        scope = session if durability == "session" else None
        if entry.id in self.alive:
            assert self.alive[entry.id] == scope
        self.alive[entry.id] = scope
        if entry.expires_at is not None and entry.expires_at <= self.clock.t:
            self.expired.add(entry.id)
        return entry.id

    @rule(text=st.one_of(st.just(""), st.just("   "), texts), importance=st.sampled_from([-0.1, 1.5, float("nan")]),
          durability=st.sampled_from(["shared", "session", "forever"]))
    def rejected_remember(self, text, importance, durability):
        before = self.mem.entries()
        with pytest.raises((InvalidInput, MissingIdentity)):  # durability "session" without a session id
            self.mem.remember(text, importance=importance, durability=durability)
        assert self.mem.entries() == before

    @rule(entry_id=consumes(entries), session=st.sampled_from(SESSIONS))
    def forget(self, entry_id, session):
        scope = self.alive.get(entry_id, "gone")
        done = self.mem.forget(entry_id, session_id=session)
        assert done == (scope != "gone" and (scope is None or scope == session))
        if done:
            del self.alive[entry_id]
            self.expired.discard(entry_id)

    @rule(entry_id=entries, value=st.one_of(st.none(), st.floats(-1, 1)))
    def feedback(self, entry_id, value):
        if entry_id in self.alive:
            try:
                entry = self.mem.feedback(entry_id, value)
            except HopmemError:  # a session entry is not reachable without its session: fine, but nothing else
                assert self.alive[entry_id] is not None
                return
            assert entry.manual_feedback == value
        else:
            with pytest.raises(HopmemError):
                self.mem.feedback(entry_id, value)

    # -- reads -----------------------------------------------------------------------------------------------

    @rule(target=selections, text=texts, session=st.sampled_from(SESSIONS),
          mode=st.sampled_from(["hybrid", "associative", "keyword"]), limit=st.integers(1, 8))
    def recall(self, text, session, mode, limit):
        sel = self.mem.recall(text, session_id=session, mode=mode, limit=limit)
        assert len(sel.hits) <= limit and sel.abstained == (not sel.hits)
        visible = self._visible(session)
        for hit in sel.hits:
            assert hit.entry_id in visible, (hit.entry_id, session)
            assert hit.entry_id not in self.expired
            assert self.mem.get(hit.entry_id, session_id=session).recallable
        # rank() ignores the gate (an uncalibrated gate admits little), never visibility or expiry
        for hit in self.mem.rank(text, session_id=session, mode=mode, limit=limit):
            assert hit.entry_id in visible and hit.entry_id not in self.expired, (hit.entry_id, session)
        return sel.id

    @rule(selection_id=consumes(selections), score=st.floats(0, 1))
    def complete(self, selection_id, score):
        first = self.mem.complete(selection_id, score)
        assert self.mem.complete(selection_id, score) is False  # a receipt is used once
        assert isinstance(first, bool)

    # -- time and maintenance --------------------------------------------------------------------------------

    @rule(seconds=st.floats(0, 400))
    def advance(self, seconds):
        self.clock.t += seconds
        for entry in self.mem.entries():
            if entry.expires_at is not None and entry.expires_at <= self.clock.t:
                self.expired.add(entry.id)
        for session in ("s1", "s2"):
            for entry in self.mem.entries(session_id=session):
                if entry.expires_at is not None and entry.expires_at <= self.clock.t:
                    self.expired.add(entry.id)

    @rule(session=st.sampled_from(["s1", "s2"]))
    def end_session(self, session):
        self.mem.end_session(session)
        self.expired |= {i for i, s in self.alive.items() if s == session}

    @rule()
    def prune(self):
        self.mem.prune()
        for entry_id in self.expired:
            self.alive.pop(entry_id, None)
        self.expired.clear()

    @precondition(lambda self: len(self.alive) > 0)
    @rule()
    def reopen(self):
        before = {s: [e.to_dict() for e in self.mem.entries(session_id=s)] for s in SESSIONS}
        self.mem.close()
        self.mem = self._open("team")
        assert {s: [e.to_dict() for e in self.mem.entries(session_id=s)] for s in SESSIONS} == before

    # -- what must always hold -------------------------------------------------------------------------------

    @invariant()
    def each_scope_sees_exactly_its_entries(self):
        for session in SESSIONS:
            seen = {e.id for e in self.mem.entries(session_id=session)}
            assert seen == self._visible(session), session
            recallable = {e.id for e in self.mem.entries(session_id=session, include_hidden=False)}
            assert recallable == self._visible(session) - self.expired, session

    @invariant()
    def the_other_tenant_is_untouched(self):
        assert [e.text for e in self.other.entries()] == ["deploy billing postgres standup"]
        assert not {e.id for e in self.other.entries()} & set(self.alive)


AgentMemoryMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestAgentMemoryMachine = AgentMemoryMachine.TestCase
