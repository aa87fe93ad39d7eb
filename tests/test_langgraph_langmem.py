"""LangMem's memory tools on HopmemStore, inside a LangGraph graph, driven by a scripted chat model.

The graph is the usual tool-calling loop (a model node, LangGraph's ``ToolNode``, a checkpointer for
threads) compiled with a :class:`HopmemStore`. The model is langchain-core's ``GenericFakeChatModel``
fed the messages a real model would send (tool calls, then an answer), so no LLM and no network are
needed; everything else is real: LangMem's ``create_manage_memory_tool`` and ``create_search_memory_tool``
with the namespace ``("memories", "{user_id}")``, LangGraph's runtime giving them the store, the
all-MiniLM-L6-v2 encoder and the SQLite file.

Alice tells the agent something in one thread; in another thread the agent searches and finds it. Bob,
in his own namespace, finds nothing of Alice's: his search abstains (an empty list), it does not return
his nearest unrelated memory. Alice's memory is updated through the tool and the search then returns
the new wording; a fresh store on the same file still has it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langmem")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langmem import create_manage_memory_tool, create_search_memory_tool  # noqa: E402

from hopmem.integrations.langgraph import HopmemStore  # noqa: E402
from hopmem.text.encoders import default_encoder, encoder_available  # noqa: E402

pytestmark = pytest.mark.model

NAMESPACE = ("memories", "{user_id}")


@pytest.fixture(scope="module")
def encoder():
    if not encoder_available():
        pytest.skip("the default encoder (hopmem[text]) is not installed")
    return default_encoder()


def _call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def _graph(script: list[AIMessage], store: HopmemStore, checkpointer: InMemorySaver) -> Any:
    """The tool-calling loop with LangMem's two tools; the model says what ``script`` says, in order."""
    tools = [create_manage_memory_tool(namespace=NAMESPACE), create_search_memory_tool(namespace=NAMESPACE)]
    model = GenericFakeChatModel(messages=iter(script))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, store=store)


def _run(store: HopmemStore, checkpointer: InMemorySaver, script: list[AIMessage], user: str, thread: str,
         text: str) -> list[Any]:
    graph = _graph(script, store, checkpointer)
    config = {"configurable": {"thread_id": thread, "user_id": user}}
    return graph.invoke({"messages": [{"role": "user", "content": text}]}, config)["messages"]


def _tool_output(messages: list[Any]) -> str:
    outputs = [m.content for m in messages if isinstance(m, ToolMessage)]
    assert outputs, "the tool did not run"
    return outputs[-1]


def test_langmem_tools_store_in_one_thread_and_find_in_another_per_user(tmp_path, encoder):
    path = tmp_path / "agent.db"
    saver = InMemorySaver()
    with HopmemStore.open(path, index={"fields": ["content"]}, encoder=encoder) as store:
        # thread 1: Alice says where she climbs; the model stores it with LangMem's manage tool
        said = _run(store, saver, [
            _call("manage_memory", {"content": "Alice climbs at Fontainebleau every spring.", "action": "create"},
                  "c1"),
            AIMessage(content="Noted."),
        ], "alice", "thread-1", "I go bouldering at Fontainebleau each spring.")
        created = _tool_output(said)
        assert created.startswith("created memory ")
        memory_id = created.removeprefix("created memory ")
        # Bob has memories of his own
        _run(store, saver, [
            _call("manage_memory", {"content": "Bob is allergic to peanuts.", "action": "create"}, "c2"),
            AIMessage(content="Got it."),
        ], "bob", "thread-2", "Remember that I'm allergic to peanuts.")
        assert store.list_namespaces(prefix=("memories",)) == [("memories", "alice"), ("memories", "bob")]

        # thread 3: Alice asks; the model searches, in a thread that never saw the first
        found = json.loads(_tool_output(_run(store, saver, [
            _call("search_memory", {"query": "Where does Alice go climbing?"}, "c3"),
            AIMessage(content="At Fontainebleau."),
        ], "alice", "thread-3", "Where do I usually climb?")))
        assert [m["key"] for m in found] == [memory_id]
        assert found[0]["value"] == {"content": "Alice climbs at Fontainebleau every spring."}
        assert found[0]["namespace"] == ["memories", "alice"] and found[0]["score"] is not None

        # Bob asks the same: his namespace holds nothing about climbing, and the search abstains
        bobs = json.loads(_tool_output(_run(store, saver, [
            _call("search_memory", {"query": "Where does Alice go climbing?"}, "c4"),
            AIMessage(content="I don't know."),
        ], "bob", "thread-4", "Where does Alice climb?")))
        assert bobs == []

        # Alice updates the memory through the tool (same id); the search returns the new wording
        _run(store, saver, [
            _call("manage_memory", {"content": "Alice now climbs at Ceuse in the summer.", "action": "update",
                                    "id": memory_id}, "c5"),
            AIMessage(content="Updated."),
        ], "alice", "thread-5", "Actually I've moved on to Ceuse, in the summer.")
        item = store.get(("memories", "alice"), memory_id)
        assert item is not None and item.value == {"content": "Alice now climbs at Ceuse in the summer."}
        assert item.updated_at > item.created_at

    # a new process's store on the same file: the memory is there, and the thread-1 conversation too
    with HopmemStore.open(path, index={"fields": ["content"]}, encoder=encoder) as store:
        found = json.loads(_tool_output(_run(store, saver, [
            _call("search_memory", {"query": "Where does Alice climb in summer?"}, "c6"),
            AIMessage(content="Ceuse."),
        ], "alice", "thread-6", "Where do I climb in summer?")))
        assert [(m["key"], m["value"]["content"]) for m in found] == [
            (memory_id, "Alice now climbs at Ceuse in the summer.")]
        # delete through the tool: gone from get, search and listing
        _run(store, saver, [
            _call("manage_memory", {"action": "delete", "id": memory_id}, "c7"),
            AIMessage(content="Forgotten."),
        ], "alice", "thread-7", "Forget where I climb.")
        assert store.get(("memories", "alice"), memory_id) is None
        assert store.search(("memories", "alice"), query="Where does Alice climb?") == []
        assert store.list_namespaces(prefix=("memories",)) == [("memories", "bob")]
    assert len(saver.get_tuple({"configurable": {"thread_id": "thread-1"}}).checkpoint["channel_values"]
               ["messages"]) == 4  # user, tool call, tool result, answer
