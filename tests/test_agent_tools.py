"""Tools for a model: definitions, dispatch, absence as an answer, approval for forget, fuzzed arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopmem.agent import NOTHING_REMEMBERED, AgentMemory, LabelPolicy, memory_tools
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

ENC = HashingEncoder(384)


@pytest.fixture
def mem(tmp_path):
    m = AgentMemory.open(tmp_path / "tools.db", encoder=ENC, namespace="ns", clock=lambda: 5000.0,
                         label_policy=LabelPolicy({"topic": ["deploys", "billing"]}))
    modes = ("hybrid", "associative", "keyword")
    # verdict gate at 0.1, bands cut at 0.3 (hashing-encoder scale)
    m.set_gates({k: calibrate([0.2, 0.3], [-0.1, 0.0]) for k in modes},
                {k: calibrate([0.4, 0.5], [0.1, 0.2]) for k in modes})
    yield m
    m.close()


def test_definitions_are_function_calling_json(mem):
    tools = memory_tools(mem, session_id="s1")
    assert [t.name for t in tools] == ["remember", "recall", "forget"]
    openai = tools.definitions("openai")
    assert all(d["type"] == "function" and d["function"]["parameters"]["type"] == "object" for d in openai)
    anthropic = tools.definitions("anthropic")
    assert all(set(d) == {"name", "description", "input_schema"} for d in anthropic)
    json.dumps(openai)
    json.dumps(anthropic)
    remember = tools.get("remember").parameters
    assert remember["required"] == ["text"]
    assert remember["properties"]["labels"]["properties"]["topic"]["items"]["enum"] == ["billing", "deploys"]
    with pytest.raises(ValueError):
        tools[0].definition("xml")


def test_remember_and_recall_through_tools(mem):
    tools = memory_tools(mem, session_id="s1")
    out = tools.call("remember", json.dumps({"text": "Production deploys require a database snapshot first.",
                                             "kind": "fact", "importance": 0.8, "labels": {"topic": ["deploys"]}}))
    assert out == {"ok": True, "id": out["id"], "merged": False, "message": "Remembered."}
    again = tools.call("remember", {"text": "Production deploys require a database snapshot first."})
    assert again["merged"] is True and again["id"] == out["id"]
    found = tools.call("recall", {"query": "What do production deploys require?"})
    assert found["found"] is True and found["memories"][0]["id"] == out["id"]
    assert found["memories"][0]["confidence"] in ("vivid", "clear", "vague")
    assert found["memories"][0]["why"]
    assert mem.complete(found["selection_id"], 1.0) is True


def test_nothing_relevant_is_an_answer_not_an_error(mem):
    tools = memory_tools(mem, session_id="s1")
    out = tools.call("recall", {"query": "the airspeed velocity of an unladen swallow"})
    assert out["ok"] is True and out["found"] is False and out["message"] == NOTHING_REMEMBERED


@pytest.mark.parametrize("args, needle", [
    ({}, "missing required argument 'text'"),
    ({"text": 5}, "expected a string"),
    ({"text": "ok text", "importance": 3}, "expected <= 1"),
    ({"text": "ok text", "kind": "rumour"}, "expected one of"),
    ({"text": "ok text", "labels": {"topic": ["gardening"]}}, "not allowed"),
    ("{not json", "not valid JSON"),
    ([1, 2], "arguments: expected an object"),
])
def test_bad_arguments_come_back_as_errors(mem, args, needle):
    out = memory_tools(mem, session_id="s1").call("remember", args)
    assert out["ok"] is False and needle in out["error"]
    assert len(mem) == 0


def test_unknown_tool_name(mem):
    assert memory_tools(mem, session_id="s1").call("delete_everything", {})["ok"] is False


def test_forget_requires_approval_by_default(mem):
    entry = mem.remember("The billing service runs on Postgres 16.")
    tools = memory_tools(mem, session_id="s1")
    out = tools.call("forget", {"id": entry.id})
    assert out["ok"] is False and out["needs_approval"] is True
    assert mem.get(entry.id).text.startswith("The billing")
    out = tools.call("forget", {"id": entry.id}, approved=True)
    assert out["ok"] is True and out["forgotten"] is True
    assert len(mem) == 0


def test_forget_with_an_approval_callback_and_without_forget(mem):
    keep = mem.remember("The billing service runs on Postgres 16.")
    drop = mem.remember("Deploy windows are on Tuesdays.")
    asked = []

    def approve(entry):
        asked.append(entry.id)
        return entry.id == drop.id

    tools = memory_tools(mem, session_id="s1", approve=approve)
    assert tools.call("forget", {"id": keep.id})["needs_approval"] is True
    assert tools.call("forget", {"id": drop.id})["forgotten"] is True
    assert asked == [keep.id, drop.id]
    assert [t.name for t in memory_tools(mem, session_id="s1", include_forget=False)] == ["remember", "recall"]
    no_approval = memory_tools(mem, session_id="s1", forget_requires_approval=False)
    assert no_approval.call("forget", {"id": keep.id})["forgotten"] is True


def test_tools_can_be_restricted_to_session_writes(mem):
    tools = memory_tools(mem, session_id="s1", allow_shared_writes=False)
    props = tools.get("remember").parameters["properties"]
    assert props["durability"]["enum"] == ["session"]
    out = tools.call("remember", {"text": "Working on the invoice export bug."})
    assert mem.get(out["id"], session_id="s1").durability == "session"
    assert tools.call("remember", {"text": "x y z", "durability": "shared"})["ok"] is False


# -- fuzzed arguments ---------------------------------------------------------------------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)
KEYS = ("text", "query", "id", "limit", "labels", "importance", "ttl_days", "durability", "kind",
        "session_id", "namespace", "approved")
ESCAPES = st.sampled_from([{}, {}, {"session_id": "s2"}, {"session_id": "other"}, {"namespace": "elsewhere"}])


def near_valid_call(name, required, optional):
    """Valid arguments for ``name``, plus at most one key a model might add to reach another tenant."""
    args = st.fixed_dictionaries(required, optional=optional)
    return st.tuples(st.just(name), st.tuples(args, ESCAPES).map(lambda pair: {**pair[0], **pair[1]}))


near_valid = st.one_of(  # calls a model might really make
    near_valid_call("remember", {"text": st.sampled_from(["deploy Friday", "billing runs on Postgres"])},
                    {"durability": st.sampled_from(["shared", "session"]), "importance": st.floats(0, 1),
                     "kind": st.sampled_from(["fact", "event"]), "ttl_days": st.floats(0.1, 100),
                     "labels": st.just({"topic": ["billing"]})}),
    near_valid_call("recall", {"query": st.sampled_from(["deploy Friday", "billing", "freeze"])},
                    {"limit": st.integers(1, 10), "labels": st.just({"topic": ["billing"]})}),
    near_valid_call("forget", {"id": st.integers(0, 200)}, {}),
)
any_call = st.tuples(st.sampled_from(["remember", "recall", "forget", "nope"]),
                     st.one_of(json_values, st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5),
                               st.text(max_size=40)))  # the last: a raw (maybe not JSON) string


# The fixture's memory is shared by the examples on purpose: entries pile up as in one long
# session, and the binding must hold throughout.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(st.one_of(near_valid, any_call), st.booleans()), min_size=1, max_size=6))
def test_fuzzed_tool_calls_answer_in_json_and_stay_in_their_binding(mem, calls):
    other_session = mem.remember("The s2 deploy freeze starts Friday", session_id="s2", durability="session")
    other_tenant = AgentMemory.open(mem._state.store.path, encoder=ENC, namespace="elsewhere", clock=lambda: 5000.0)
    tools = memory_tools(mem, session_id="s1")
    for (name, args), approved in calls:
        result = tools.call(name, args, approved=approved)
        assert isinstance(result, dict) and isinstance(result["ok"], bool)
        json.dumps(result, allow_nan=False)  # strict JSON, as function-calling APIs need
        if not result["ok"]:
            assert result.get("error") or result.get("needs_approval") or result.get("forgotten") is False
    # nothing the model wrote reached another session, and the other session's entry is intact
    assert mem.get(other_session.id, session_id="s2").text == other_session.text
    assert all(e.session_id in (None, "s1") for e in mem.entries(session_id="s1"))
    for session in ("s2", "other", "session", "namespace"):  # session ids a model might try to name
        assert [e.id for e in mem.entries(session_id=session) if e.session_id is not None] == \
            ([other_session.id] if session == "s2" else [])
    assert other_tenant.entries() == []
    other_tenant.close()
    mem.forget(other_session.id, session_id="s2")


def test_feedback_and_inspection_tools_are_opt_in_and_scoped(mem):
    assert [t.name for t in memory_tools(mem, session_id="s1")] == ["remember", "recall", "forget"]
    tools = memory_tools(mem, session_id="s1", include_feedback=True, include_inspection=True)
    assert [t.name for t in tools] == ["remember", "recall", "forget", "complete", "feedback", "list_memories",
                                       "inspect_memory"]
    assert tools.get("forget").destructive and tools.get("recall").read_only and tools.get("list_memories").read_only
    mine = tools.call("remember", {"text": "Production deploys need a database snapshot.", "durability": "session"})
    other = memory_tools(mem, session_id="s2", include_feedback=True, include_inspection=True)
    theirs = other.call("remember", {"text": "Billing runs on the first of the month.", "durability": "session"})

    assert [m["id"] for m in tools.call("list_memories", {})["memories"]] == [mine["id"]]
    assert tools.call("list_memories", {"include_hidden": "yes"})["error"].startswith("include_hidden: expected")
    detail = tools.call("inspect_memory", {"id": mine["id"]})
    assert detail["memory"]["text"].startswith("Production") and detail["variants"] == []
    assert tools.call("inspect_memory", {"id": theirs["id"]})["ok"] is False  # another session's
    assert tools.call("feedback", {"id": theirs["id"], "value": 1.0})["ok"] is False
    assert tools.call("feedback", {"id": mine["id"], "value": -0.5})["value"] == -0.5
    assert tools.call("feedback", {"id": mine["id"]})["value"] is None  # cleared

    selection = tools.call("recall", {"query": "What do production deploys need?"})
    assert tools.call("complete", {"selection_id": selection["selection_id"], "score": 0.9})["recorded"] is True
    assert tools.call("complete", {"selection_id": selection["selection_id"], "score": 0.9})["recorded"] is False
    assert tools.call("complete", {"selection_id": "x", "score": 1.5})["ok"] is False


def test_recall_abstention_says_why(mem):
    tools = memory_tools(mem, session_id="s1")
    out = tools.call("recall", {"query": "quantum chromodynamics on a lattice"})
    assert out["found"] is False and isinstance(out["reason"], str) and out["reason"]
