"""``hopmem mcp`` driven by the MCP SDK's own client, over stdio and streamable HTTP.

The stdio server is started from the configuration snippet in docs/mcp.md (its
``command`` and ``args``), with the file path swapped for a temporary one and
the model-free hashing encoder so the test needs no model.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from hopmem.agent import NOTHING_REMEMBERED, AgentMemory, memory_tools  # noqa: E402
from hopmem.server.mcp import STATS_URI, desktop_config  # noqa: E402
from hopmem.text.encoders import HashingEncoder  # noqa: E402
from mcp_support import serving_http  # noqa: E402

pytestmark = pytest.mark.subprocess

DOCS = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"
TOOLS = ["remember", "recall", "forget", "complete", "feedback", "list_memories", "inspect_memory"]


def _docs_snippet() -> dict[str, Any]:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"<!-- mcp-config:[^>]*-->\s*```json\n(.*?)```", text, re.S)
    assert match, "docs/mcp.md lost its mcp-config snippet"
    return json.loads(match.group(1))["mcpServers"]["hopmem"]


def _server_params(path: Path, namespace: str) -> StdioServerParameters:
    """The docs' entry, run by this interpreter, on ``path`` and ``namespace``, with the hashing encoder."""
    entry = _docs_snippet()
    assert entry["command"] == "hopmem"
    args = list(entry["args"])
    args[args.index("--path") + 1] = str(path)
    args[args.index("--namespace") + 1] = namespace
    return StdioServerParameters(command=sys.executable, args=["-m", "hopmem.cli", *args, "--encoder", "hashing"],
                                 env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})


def _result(res: Any) -> dict[str, Any]:
    assert isinstance(res.structured_content, dict)
    assert json.loads(res.content[0].text) == res.structured_content or res.is_error
    return res.structured_content


def test_the_docs_snippet_is_what_desktop_config_makes():
    entry = _docs_snippet()
    args = entry["args"]
    made = desktop_config(args[args.index("--path") + 1], args[args.index("--namespace") + 1])
    assert made["mcpServers"]["hopmem"] == entry


def test_tool_schemas_are_memory_tools_own():
    memory = AgentMemory.open(":memory:", encoder=HashingEncoder(64), namespace="n")
    try:
        from hopmem.server.mcp import toolkit

        served = {t.name: t for t in toolkit(memory)}
        plain = {t.name: t for t in memory_tools(memory, session_id=None, shared_only=True)}
        for name in plain:
            assert served[name].parameters == plain[name].parameters
            assert served[name].description == plain[name].description
        assert list(served) == TOOLS
    finally:
        memory.close()


def test_without_the_extra_the_error_names_it(monkeypatch):
    from hopmem.errors import HopmemError
    from hopmem.server.mcp import build_server

    memory = AgentMemory.open(":memory:", encoder=HashingEncoder(64), namespace="n")
    try:
        monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed
        with pytest.raises(HopmemError, match=r"hopmem\[mcp\]"):
            build_server(memory)
    finally:
        memory.close()


def test_stdio_remember_recall_forget_and_namespaces(tmp_path):
    path = tmp_path / "agent.db"

    async def scenario() -> None:
        async with stdio_client(_server_params(path, "alice"), errlog=sys.stderr) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                listed = (await session.list_tools()).tools
                assert [t.name for t in listed] == TOOLS
                by_name = {t.name: t for t in listed}
                assert by_name["forget"].annotations.destructive_hint is True
                assert by_name["recall"].annotations.read_only_hint is True
                assert by_name["remember"].input_schema["required"] == ["text"]

                stored = _result(await session.call_tool("remember", {"text": "Alice deploys on Fridays."}))
                assert stored["ok"] and stored["id"] >= 1
                hit = _result(await session.call_tool("recall", {"query": "When does Alice deploy?"}))
                assert hit["found"] is True and hit["memories"][0]["id"] == stored["id"]
                miss = _result(await session.call_tool("recall", {"query": "quantum chromodynamics lattice"}))
                assert miss["found"] is False and miss["message"] == NOTHING_REMEMBERED and miss["reason"]

                rated = _result(await session.call_tool("complete", {"selection_id": hit["selection_id"],
                                                                     "score": 1.0}))
                assert rated["recorded"] is True
                valued = _result(await session.call_tool("feedback", {"id": stored["id"], "value": 0.5}))
                assert valued["value"] == 0.5
                listed_mem = _result(await session.call_tool("list_memories", {}))
                assert [m["id"] for m in listed_mem["memories"]] == [stored["id"]]
                detail = _result(await session.call_tool("inspect_memory", {"id": stored["id"]}))
                assert detail["memory"]["manual_feedback"] == 0.5

                stats = await session.read_resource(STATS_URI)
                assert json.loads(stats.contents[0].text)["entries"] == 1

                # errors are tool errors with the library's message; the server keeps serving
                bad = await session.call_tool("recall", {"query": "x", "namespace": "bob"})
                assert bad.is_error and "unexpected argument 'namespace'" in bad.content[0].text
                bad = await session.call_tool("complete", {"selection_id": "s", "score": 2})
                assert bad.is_error and "score" in bad.content[0].text

                gone = _result(await session.call_tool("forget", {"id": stored["id"]}))
                assert gone["forgotten"] is True
                again = _result(await session.call_tool("recall", {"query": "When does Alice deploy?"}))
                assert again["found"] is False
                _result(await session.call_tool("remember", {"text": "Alice's cat is called Miso."}))

        async with stdio_client(_server_params(path, "bob"), errlog=sys.stderr) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                other = _result(await session.call_tool("recall", {"query": "What is Alice's cat called?"}))
                assert other["found"] is False
                assert _result(await session.call_tool("list_memories", {}))["memories"] == []
                missing = await session.call_tool("inspect_memory", {"id": 2})
                assert missing.is_error

    anyio.run(scenario)


def test_streamable_http(tmp_path):
    with serving_http("--path", str(tmp_path / "agent.db"), "--namespace", "n", "--session", "s1",
                      "--encoder", "hashing", timeout=30) as port:

        async def scenario() -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
                async with ClientSession(*streams) as session:
                    await session.initialize()
                    assert [t.name for t in (await session.list_tools()).tools] == TOOLS
                    stored = _result(await session.call_tool(
                        "remember", {"text": "Bob prefers tea over coffee.", "durability": "session"}))
                    hit = _result(await session.call_tool("recall", {"query": "Does Bob prefer tea or coffee?"}))
                    assert hit["found"] is True and hit["memories"][0]["id"] == stored["id"]

        anyio.run(scenario)


def test_default_encoder_reopens_a_file_with_the_encoder_it_records(tmp_path):
    from hopmem.agent.store import recorded_encoder
    from hopmem.server.mcp import open_memory

    path = str(tmp_path / "m.db")
    assert recorded_encoder(path) is None  # no file yet
    with open_memory(path, "ns", encoder="hashing") as memory:
        memory.remember("The deploy key lives in the vault.")
    assert recorded_encoder(path)["name"] == "hashing-384"
    with open_memory(path, "ns") as memory:  # "default": the file's own encoder, not the model
        assert memory.encoder.name == "hashing-384"
        assert memory.recall("Where is the deploy key?").hits
    (tmp_path / "other.db").write_bytes(b"not a database")
    assert recorded_encoder(str(tmp_path / "other.db")) is None
