"""Tools for a model: definitions, dispatch, absence as an answer, approval for forget."""

from __future__ import annotations

import json

import pytest

from hopmem.agent import NOTHING_REMEMBERED, AgentMemory, LabelPolicy, memory_tools
from hopmem.encoders import HashingEncoder
from hopmem.gates import calibrate

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
    ([1, 2], "must be an object"),
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
