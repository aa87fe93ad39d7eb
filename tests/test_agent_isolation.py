"""Isolation: sessions, namespaces and tool bindings never leak; a missing identity fails closed."""

from __future__ import annotations

import pytest

from hopmem.agent import AgentMemory, MissingIdentity, memory_tools
from hopmem.errors import NotFound
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

ENC = HashingEncoder(384)
SECRET = "Session A's deploy token for ticket SEC-9931 is stored in the vault."


def gate(tau):
    return calibrate([tau + 0.1, tau + 0.2], [tau - 0.2, tau - 0.1])


def open_ns(path, namespace, tau=0.1):
    mem = AgentMemory.open(path, encoder=ENC, namespace=namespace, clock=lambda: 1000.0)
    modes = ("hybrid", "associative", "keyword")
    mem.set_gates({m: gate(tau) for m in modes}, {m: gate(0.3) for m in modes})
    return mem


@pytest.fixture
def mem(tmp_path):
    m = open_ns(tmp_path / "iso.db", "tenant-1")
    m.remember("The team deploys on Tuesdays after the snapshot.")
    m.remember(SECRET, durability="session", session_id="A")
    m.remember("Session B is drafting the quarterly roadmap.", durability="session", session_id="B")
    yield m
    m.close()


QUERIES = ["SEC-9931", "deploy token vault", "Session A's deploy token for ticket SEC-9931 is stored in the vault."]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("mode", ["hybrid", "associative", "keyword"])
def test_a_session_never_sees_another_sessions_entries(mem, query, mode):
    assert SECRET in mem.recall(query, session_id="A", mode=mode).texts or mode != "hybrid"
    for who in ("B", None):
        sel = mem.recall(query, session_id=who, mode=mode)
        assert SECRET not in sel.texts
        assert all(h.session_id in (None, who) for h in sel.hits)
        assert SECRET not in [h.text for h in mem.rank(query, session_id=who, mode=mode, limit=50)]


def test_session_recall_sees_shared_plus_its_own(mem):
    texts = mem.rank("team deploys Tuesdays snapshot roadmap token", session_id="A", limit=10)
    scopes = {(h.durability, h.session_id) for h in texts}
    assert scopes <= {("shared", None), ("session", "A")}
    assert ("shared", None) in scopes


def test_inspection_and_forgetting_respect_sessions(mem):
    secret_id = next(e.id for e in mem.entries(session_id="A") if e.text == SECRET)
    with pytest.raises(NotFound):
        mem.get(secret_id)
    with pytest.raises(NotFound):
        mem.get(secret_id, session_id="B")
    assert mem.get(secret_id, session_id="A").text == SECRET
    assert SECRET not in [e.text for e in mem.entries(session_id="B")]
    assert mem.forget(secret_id, session_id="B") is False
    assert mem.forget(secret_id) is False
    assert mem.get(secret_id, session_id="A").text == SECRET


def test_another_sessions_words_do_not_change_keyword_statistics(tmp_path):
    mem = open_ns(tmp_path / "stats.db", "tenant-1")
    shared = mem.remember("The billing export runs nightly at 02:00.")
    before = {h.entry_id: h.explanation.bm25 for h in mem.rank("billing export nightly", session_id="A")}
    before_novelty = mem.recall("billing export nightly flamingo", session_id="A", record=False).novelty
    for i in range(30):  # another session floods the same words
        mem.remember(f"Session B note {i}: billing export nightly flamingo check {i}.", durability="session",
                     session_id="B")
    after = {h.entry_id: h.explanation.bm25 for h in mem.rank("billing export nightly", session_id="A")}
    assert after == before and shared.id in after
    assert mem.recall("billing export nightly flamingo", session_id="A", record=False).novelty == before_novelty


def test_namespaces_are_partitions_of_one_file(tmp_path):
    one = open_ns(tmp_path / "shared.db", "tenant-1")
    two = open_ns(tmp_path / "shared.db", "tenant-2")
    secret = two.remember("Tenant two's ticket SEC-4242 holds the payroll export.")
    one.remember("Tenant one keeps its runbooks in the wiki.")
    assert one.recall("SEC-4242 payroll export").texts == [] or \
        all("Tenant two" not in t for t in one.recall("SEC-4242 payroll export").texts)
    assert all("Tenant two" not in h.text for h in one.rank("SEC-4242 payroll export ticket", limit=50))
    with pytest.raises(NotFound):
        one.get(secret.id)
    assert one.forget(secret.id) is False
    assert two.get(secret.id).text.startswith("Tenant two")
    # a word only tenant two knows is unknown to tenant one
    assert one.recall("payroll", record=False).novelty == 1.0
    one.close()
    two.close()


def test_tools_cannot_escape_their_binding(mem):
    tools = memory_tools(mem, session_id="B")
    for name, args in [("recall", {"query": "SEC-9931", "session_id": "A"}),
                       ("recall", {"query": "SEC-9931", "namespace": "tenant-2"}),
                       ("remember", {"text": "x y z", "session_id": "A"}),
                       ("forget", {"id": 1, "namespace": "other"})]:
        out = tools.call(name, args)
        assert out["ok"] is False and "unexpected argument" in out["error"]
    found = tools.call("recall", {"query": "SEC-9931 deploy token vault"})
    assert SECRET not in str(found)
    secret_id = next(e.id for e in mem.entries(session_id="A") if e.text == SECRET)
    out = tools.call("forget", {"id": secret_id}, approved=True)
    assert out["ok"] is False
    assert mem.get(secret_id, session_id="A").text == SECRET
    written = tools.call("remember", {"text": "Session B decided to ship on Friday.", "durability": "session"})
    assert written["ok"]
    assert mem.get(written["id"], session_id="B").session_id == "B"
    with pytest.raises(NotFound):
        mem.get(written["id"], session_id="A")


def test_missing_identity_fails_closed(tmp_path, mem):
    with pytest.raises(MissingIdentity):
        memory_tools(mem, session_id=None)
    with pytest.raises(MissingIdentity):
        memory_tools(mem, session_id="  ")
    with pytest.raises(MissingIdentity):
        AgentMemory.open(tmp_path / "x.db", encoder=ENC, namespace=None)
    with pytest.raises(MissingIdentity):
        mem.remember("A session note without a session.", durability="session")
    with pytest.raises(MissingIdentity):
        mem.end_session("")
    shared_only = memory_tools(mem, session_id=None, shared_only=True)
    schema = shared_only.get("remember").parameters["properties"]["durability"]["enum"]
    assert schema == ["shared"]
    assert SECRET not in str(shared_only.call("recall", {"query": "SEC-9931"}))


def test_tool_schemas_expose_no_scope_parameters(mem):
    for tool in memory_tools(mem, session_id="A"):
        props = tool.parameters["properties"]
        assert not {"namespace", "session_id", "session", "tenant"} & set(props)
        assert tool.parameters["additionalProperties"] is False
