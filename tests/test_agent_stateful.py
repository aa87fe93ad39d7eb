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
* a reopened file holds the same entries, byte for byte in what they say;
* a second controller of the same file agrees with the first;
* a merge keeps every wording remembered into an entry (as its text or a variant).

A second machine adds a capacity, age-based forgetting and a label policy.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from hopmem.agent import DEFAULT_MODELS, AgentMemory
from hopmem.agent.validation import MissingIdentity
from hopmem.errors import HopmemError, InvalidInput
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

ENC = HashingEncoder(64)
SESSIONS = (None, "s1", "s2")
WORDS = ("deploy", "billing", "postgres", "standup", "PROJ-4417", "ticket", "friday", "cluster", "coffee",
         "Ada", "Berlin", "invoice", "rotation", "v2.3.1", "staging")
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


def admit_almost_everything(mem: AgentMemory) -> None:
    """Gates far below any real log-odds, so recalls return hits and their checks bite (the strict
    uncalibrated defaults abstain on nearly every query of a hashing encoder)."""
    gate = calibrate([1.0, 2.0], [-1000.0, -999.0])
    mem.set_gates({mode: gate for mode in DEFAULT_MODELS}, models=dict(DEFAULT_MODELS))


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
        admit_almost_everything(self.mem)
        self.twin = self._open("team")  # a second controller of the same namespace: sees the first's commits
        self.other = self._open("other")  # a second tenant in the same file
        self.other.remember("deploy billing postgres standup")
        # the model: id -> (scope's session id or None for shared)
        self.alive: dict[int, str | None] = {}
        self.expired: set[int] = set()
        self.texts: dict[int, set[str]] = {}  # every wording remembered into each entry

    def _open(self, namespace: str) -> AgentMemory:
        return AgentMemory.open(self.path, encoder=ENC, namespace=namespace, clock=self.clock)

    def teardown(self) -> None:
        self.mem.close()
        self.twin.close()
        self.other.close()
        self.dir.cleanup()

    def _via(self, twin: bool) -> AgentMemory:
        return self.twin if twin else self.mem

    def _visible(self, session: str | None) -> set[int]:
        return {i for i, s in self.alive.items() if s is None or s == session}

    # -- writes ----------------------------------------------------------------------------------------------

    @rule(target=entries, text=texts, session=st.sampled_from(SESSIONS), scoped=st.booleans(),
          importance=st.floats(0, 1), ttl=st.one_of(st.none(), st.floats(1, 500)), twin=st.booleans())
    def remember(self, text, session, scoped, importance, ttl, twin):
        durability = "session" if scoped and session else "shared"
        entry = self._via(twin).remember(text, session_id=session, durability=durability, importance=importance,
                                         ttl=ttl)
        # a merge stays in its scope; a new entry is in the scope asked for
        assert entry.durability == durability
        assert entry.session_id == (session if durability == "session" else entry.session_id)
        scope = session if durability == "session" else None
        if entry.id in self.alive:
            assert self.alive[entry.id] == scope
        self.alive[entry.id] = scope
        self.texts.setdefault(entry.id, set()).add(text)
        if entry.expires_at is not None and entry.expires_at <= self.clock.t:
            self.expired.add(entry.id)
        return entry.id

    @rule(entry_id=entries, shout=st.booleans(), twin=st.booleans())
    def remember_again(self, entry_id, shout, twin):
        """The same statement again, differently cased or spaced, in its scope: merged, never a second row."""
        if entry_id not in self.alive or entry_id in self.expired:
            return
        scope = self.alive[entry_id]
        text = self.mem.get(entry_id, session_id=scope).text
        again = text.upper() if shout else "  " + text.replace(" ", "  ") + " "
        entry = self._via(twin).remember(again, session_id=scope, durability="session" if scope else "shared")
        assert entry.id == entry_id and entry.merged
        self.texts[entry_id].add(again.strip())

    @rule(text=st.one_of(st.just(""), st.just("   "), texts), importance=st.sampled_from([-0.1, 1.5, float("nan")]),
          durability=st.sampled_from(["shared", "session", "forever"]))
    def rejected_remember(self, text, importance, durability):
        before = self.mem.entries()
        with pytest.raises((InvalidInput, MissingIdentity)):  # durability "session" without a session id
            self.mem.remember(text, importance=importance, durability=durability)
        assert self.mem.entries() == before

    @rule(entry_id=consumes(entries), session=st.sampled_from(SESSIONS), twin=st.booleans())
    def forget(self, entry_id, session, twin):
        scope = self.alive.get(entry_id, "gone")
        done = self._via(twin).forget(entry_id, session_id=session)
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
          mode=st.sampled_from(["hybrid", "associative", "keyword"]), limit=st.integers(1, 8), twin=st.booleans())
    def recall(self, text, session, mode, limit, twin):
        mem = self._via(twin)
        sel = mem.recall(text, session_id=session, mode=mode, limit=limit)
        assert len(sel.hits) <= limit and sel.abstained == (not sel.hits)
        visible = self._visible(session)
        for hit in sel.hits:
            assert hit.entry_id in visible, (hit.entry_id, session)
            assert hit.entry_id not in self.expired
            assert mem.get(hit.entry_id, session_id=session).recallable
        # rank() ignores the gate (an uncalibrated gate admits little), never visibility or expiry
        for hit in mem.rank(text, session_id=session, mode=mode, limit=limit):
            assert hit.entry_id in visible and hit.entry_id not in self.expired, (hit.entry_id, session)
        return sel.id

    @rule(selection_id=consumes(selections), score=st.floats(0, 1), twin=st.booleans())
    def complete(self, selection_id, score, twin):
        first = self._via(twin).complete(selection_id, score)
        assert self.mem.complete(selection_id, score) is False  # a receipt is used once, by either controller
        assert self.twin.complete(selection_id, score) is False
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

    @rule(session=st.sampled_from(["s1", "s2"]), twin=st.booleans())
    def end_session(self, session, twin):
        self._via(twin).end_session(session)
        self.expired |= {i for i, s in self.alive.items() if s == session}

    @rule(twin=st.booleans())
    def prune(self, twin):
        self._via(twin).prune()
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
        for mem in (self.mem, self.twin):
            for session in SESSIONS:
                seen = {e.id for e in mem.entries(session_id=session)}
                assert seen == self._visible(session), session
                recallable = {e.id for e in mem.entries(session_id=session, include_hidden=False)}
                assert recallable == self._visible(session) - self.expired, session

    @invariant()
    def a_merge_loses_no_wording(self):
        for entry_id, scope in self.alive.items():
            kept = {self.mem.get(entry_id, session_id=scope).text}
            kept |= {v["text"] for v in self.mem.variants(entry_id, session_id=scope)}
            assert self.texts[entry_id] <= kept, entry_id

    @invariant()
    def both_controllers_agree(self):
        for session in SESSIONS:
            assert [e.to_dict() for e in self.mem.entries(session_id=session)] == \
                [e.to_dict() for e in self.twin.entries(session_id=session)], session

    @invariant()
    def the_other_tenant_is_untouched(self):
        assert [e.text for e in self.other.entries()] == ["deploy billing postgres standup"]
        assert not {e.id for e in self.other.entries()} & set(self.alive)


# Expensive (every example runs up to 30 steps against a store): fewer examples than the profile's;
# too_slow would fire on that cost, which is the point of the test, not a slow strategy.
AgentMemoryMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                                suppress_health_check=[HealthCheck.too_slow])
TestAgentMemoryMachine = AgentMemoryMachine.TestCase


DAY = 86400.0
TOPICS = ("ops", "billing", "people")


class BoundedMemoryMachine(RuleBasedStateMachine):
    """A capacity, age-based forgetting and controlled labels: what is kept, suppressed and filtered."""

    CAPACITY = 5

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        from hopmem.agent import ForgettingPolicy, LabelPolicy

        self.dir = tempfile.TemporaryDirectory()
        self.clock = Clock()
        self.kwargs = dict(encoder=ENC, namespace="team", clock=self.clock, capacity=self.CAPACITY,
                           forgetting=ForgettingPolicy(half_life=2 * DAY, min_half_life=DAY, max_half_life=8 * DAY),
                           label_policy=LabelPolicy(allowed={"topic": TOPICS}))
        self.path = f"{self.dir.name}/bounded.db"
        self.mem = AgentMemory.open(self.path, **self.kwargs)
        admit_almost_everything(self.mem)

    def teardown(self) -> None:
        self.mem.close()
        self.dir.cleanup()

    @rule(text=texts, topics=st.lists(st.sampled_from(TOPICS), max_size=2, unique=True),
          kind=st.sampled_from(["fact", "preference", "event", "task", "observation"]), importance=st.floats(0, 1))
    def remember(self, text, topics, kind, importance):
        entry = self.mem.remember(text, kind=kind, importance=importance,
                                  labels={"topic": topics} if topics else None)
        assert entry.id in {e.id for e in self.mem.entries()}  # the entry being written is never the one evicted

    @rule(topic=st.sampled_from(TOPICS))
    def rejected_label(self, topic):
        before = self.mem.entries()
        with pytest.raises(InvalidInput):
            self.mem.remember("deploy", labels={"colour": [topic]})  # a key the policy does not allow
        assert self.mem.entries() == before

    @rule(text=texts, topic=st.one_of(st.none(), st.sampled_from(TOPICS)))
    def recall(self, text, topic):
        wanted = {"topic": [topic]} if topic else None
        selection = self.mem.recall(text, labels=wanted)
        for hit in list(selection.hits) + self.mem.rank(text, limit=10):
            assert self.mem.get(hit.entry_id).recallable
        for hit in selection.hits:
            assert not topic or topic in hit.labels.get("topic", [])

    @rule(days=st.floats(0, 6))
    def advance(self, days):
        self.clock.t += days * DAY

    @rule(value=st.one_of(st.none(), st.floats(-1, 1)), pick=st.integers(0, 100))
    def feedback(self, value, pick):
        entries = self.mem.entries()
        if entries:
            entry = self.mem.feedback(entries[pick % len(entries)].id, value)
            assert entry.manual_feedback == value

    @rule()
    def prune(self):
        self.mem.prune()
        assert all(e.recallable for e in self.mem.entries())  # what stays is recallable

    @rule()
    def reopen(self):
        before = [e.to_dict() for e in self.mem.entries()]
        self.mem.close()
        self.mem = AgentMemory.open(self.path, **self.kwargs)
        assert [e.to_dict() for e in self.mem.entries()] == before

    @invariant()
    def never_above_capacity(self):
        assert len(self.mem.entries()) <= self.CAPACITY

    @invariant()
    def suppressed_is_exactly_low_retention(self):
        for entry in self.mem.entries():
            assert entry.suppressed == (entry.retention < 0.05 and not entry.expired) or entry.expired


# Expensive, as AgentMemoryMachine above.
BoundedMemoryMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30,
                                                  suppress_health_check=[HealthCheck.too_slow])
TestBoundedMemoryMachine = BoundedMemoryMachine.TestCase
