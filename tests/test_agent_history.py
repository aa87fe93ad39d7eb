"""History helpers: memory injection, cached summaries, extraction after a run."""

from __future__ import annotations

import pytest

from hopmem.agent import (
    AgentMemory,
    RecallingHistory,
    RememberingRunner,
    SummarisingHistory,
    format_memories,
    inject_memories,
)
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

ENC = HashingEncoder(384)


@pytest.fixture
def mem(tmp_path):
    m = AgentMemory.open(tmp_path / "hist.db", encoder=ENC, namespace="ns", clock=lambda: 100.0)
    modes = ("hybrid", "associative", "keyword")
    # verdict gate at 0.1, bands cut at 0.3 (hashing-encoder scale)
    m.set_gates({k: calibrate([0.2, 0.3], [-0.1, 0.0]) for k in modes},
                {k: calibrate([0.4, 0.5], [0.1, 0.2]) for k in modes})
    m.remember("Ada wants answers written in British English.", kind="preference")
    m.remember("The billing service runs on Postgres 16.")
    yield m
    m.close()


def chat(*turns):
    return [{"role": role, "content": text} for role, text in turns]


def test_inject_memories_before_the_latest_user_turn(mem):
    messages = chat(("system", "Be brief."), ("user", "hi"), ("assistant", "hello"),
                    ("user", "Which database does the billing service use?"))
    out, selection = inject_memories(mem, messages, session_id=None)
    assert len(out) == 5 and out[3]["role"] == "system"
    assert "<memories>" in out[3]["content"] and "Postgres 16" in out[3]["content"]
    assert out[4] == messages[3]
    assert messages[3] == {"role": "user", "content": "Which database does the billing service use?"}
    assert selection is not None and not selection.abstained


def test_nothing_is_injected_when_recall_abstains(mem):
    messages = chat(("user", "the airspeed velocity of an unladen swallow"))
    out, selection = inject_memories(mem, messages, session_id=None)
    assert out == messages and selection.abstained
    assert format_memories(selection) is None
    assert inject_memories(mem, chat(("system", "x")), session_id=None) == ([{"role": "system", "content": "x"}], None)


def test_summarising_history_caches_until_the_boundary_moves():
    calls = []

    def summariser(messages):
        calls.append(len(messages))
        return f"{len(messages)} earlier messages"

    history = SummarisingHistory(summariser, keep_recent=2)
    messages = chat(("system", "Be brief."), ("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"))
    first = history.prepare(messages)
    assert [m["content"] for m in first] == ["Be brief.", "Summary of the earlier conversation: 2 earlier messages",
                                             "c", "d"]
    history.prepare(messages)
    history.prepare(list(messages))
    assert calls == [2]  # cached: same boundary, same older part
    history.prepare(messages + chat(("user", "e")))
    assert calls == [2, 3]  # the boundary moved
    assert history.summaries_computed == 2
    assert SummarisingHistory(summariser, keep_recent=10).prepare(messages) == messages


def test_summarising_never_splits_a_tool_call_from_its_results():
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {"role": "assistant", "content": "done"},
    ]
    history = SummarisingHistory(lambda ms: "s", keep_recent=2)
    out = history.prepare(messages)
    roles = [m["role"] for m in out]
    assert roles == ["system", "assistant", "tool", "assistant"]  # moved back to include the call
    dangling = SummarisingHistory(lambda ms: "s", keep_recent=5).prepare(
        [{"role": "tool", "tool_call_id": "zz", "content": "orphan"}, {"role": "user", "content": "hi"}])
    assert [m["role"] for m in dangling] == ["user"]


def test_recalling_history_composes_with_an_inner_strategy(mem):
    inner = SummarisingHistory(lambda ms: "older stuff", keep_recent=1)
    history = RecallingHistory(mem, session_id=None, inner=inner)
    out = history.prepare(chat(("user", "hi"), ("assistant", "hello"),
                               ("user", "How should answers be written for Ada?")))
    assert out[0]["content"].endswith("older stuff")
    assert any("<memories>" in m["content"] for m in out)
    assert history.last_selection is not None


def test_remembering_runner_keeps_what_the_extractor_returns(mem):
    events = []
    mem.subscribe(events.append, types=["extracted"])

    def extractor(question, answer):
        return ["Ada's team ships on Thursdays.",
                {"text": "Ada dislikes emoji in answers.", "kind": "preference", "importance": 0.9},
                {"text": "trivia nobody needs", "importance": 0.1}]

    runner = RememberingRunner(lambda q: q.upper(), mem, extractor, min_importance=0.3, max_items=5)
    assert runner("hello") == "HELLO"
    assert [e.text for e in runner.last_entries] == ["Ada dislikes emoji in answers.", "Ada's team ships on Thursdays."]
    assert events[0].data["count"] == 2
    assert all(e.text != "trivia nobody needs" for e in mem.entries())


def test_remembering_runner_drops_the_surplus_by_importance(mem):
    items = [{"text": f"Fact number {i} about the deploy process.", "importance": i / 10} for i in range(3, 10)]
    runner = RememberingRunner(lambda q: "ok", mem, lambda q, a: items, max_items=2)
    runner("x")
    assert [e.importance for e in runner.last_entries] == [0.9, 0.8]


def test_a_failing_extractor_never_breaks_the_run(mem):
    failures = []
    mem.subscribe(failures.append, types=["extraction_failed"])

    def extractor(question, answer):
        raise TimeoutError("extraction model timed out")

    runner = RememberingRunner(lambda q: "the answer", mem, extractor)
    assert runner.run("question") == "the answer"
    assert failures and "timed out" in failures[0].data["error"]
    bad_items = RememberingRunner(lambda q: "fine", mem, lambda q, a: [42])
    assert bad_items("q") == "fine"
    assert len(failures) == 2


def test_a_failing_run_fails_as_usual(mem):
    def run(q):
        raise ValueError("model error")

    with pytest.raises(ValueError):
        RememberingRunner(run, mem, lambda q, a: [])("q")


def test_publish_sends_an_event_on_the_memorys_clock(mem):
    from hopmem.errors import InvalidInput

    seen = []
    mem.subscribe(seen.append, types=["extracted"])
    assert mem.now() == 100.0
    mem.publish("extracted", "s1", count=0, texts=[], dropped=0)
    assert [(e.type, e.session_id, e.at, e.data) for e in seen] == [
        ("extracted", "s1", 100.0, {"count": 0, "texts": [], "dropped": 0})]
    with pytest.raises(InvalidInput, match="event_type"):
        mem.publish("exploded")
