"""``hopmem mcp --http --token-file``: a real server process on 127.0.0.1, driven by the MCP SDK's HTTP client.

No token and a wrong token are answered 401 (the SDK's client fails to initialise; a plain request sees the
status); the right token works, tools and all; a token added to the file works without a restart; the
DNS-rebinding protection still refuses a foreign Host header even with a valid token; and binding 0.0.0.0
without tokens is refused with a message that says what to do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_support import free_port, mcp_command, serving_http  # noqa: E402

pytestmark = pytest.mark.subprocess

TOKEN = "tok-3f9a1c2e7d"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _args(tmp_path: Path, *extra: str) -> tuple[str, ...]:
    return ("--path", str(tmp_path / "m.db"), "--namespace", "n", "--encoder", "hashing", *extra)


@pytest.fixture
def server(tmp_path):
    """A server with a token file holding a comment, a blank line and TOKEN; yields (url, token file)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("# the agents' tokens\n\n" + TOKEN + "\n", encoding="utf-8")
    with serving_http(*_args(tmp_path, "--token-file", str(tokens))) as port:
        yield f"http://127.0.0.1:{port}/mcp", tokens


async def _session(url: str, token: str | None) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                stored = await session.call_tool("remember", {"text": "Dana rotates the API keys every March."})
                assert not stored.is_error
                found = await session.call_tool("recall", {"query": "When does Dana rotate the API keys?"})
                assert found.structured_content["found"] is True
                return [t.name for t in (await session.list_tools()).tools]


def _fails(url: str, token: str | None) -> BaseException:
    async def attempt() -> None:
        with anyio.fail_after(30):
            await _session(url, token)

    with pytest.raises(BaseException) as info:  # the SDK raises its transport's error (in a group)
        anyio.run(attempt)
    assert not isinstance(info.value, (AssertionError, TimeoutError)), info.value
    return info.value


def test_no_token_and_a_wrong_token_are_401_and_the_right_one_works(server):
    url, tokens = server
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN}x"},
                    {"Authorization": f"Basic {TOKEN}"}, {"X-API-Key": "wrong"}):
        r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, **headers})
        assert r.status_code == 401, (headers, r.status_code)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"] == "unauthorized"
    _fails(url, None)  # the SDK's client gets no session either way
    _fails(url, "wrong")
    assert "recall" in anyio.run(_session, url, TOKEN)
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"X-API-Key": TOKEN}):  # as hopmem serve reads keys
        r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, **headers})
        assert r.status_code == 200, headers


def test_tokens_are_reread_when_the_file_changes(server):
    url, tokens = server
    _fails(url, "second-token")
    tokens.write_text(TOKEN + "\nsecond-token\n", encoding="utf-8")
    assert "remember" in anyio.run(_session, url, "second-token")
    tokens.write_text("second-token\n", encoding="utf-8")  # TOKEN revoked
    r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 401


def test_dns_rebinding_protection_stays_on_with_tokens(server):
    url, _ = server
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, **auth, "host": "evil.example:80"})
    assert r.status_code in (400, 403, 421), r.status_code
    r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, **auth, "origin": "http://evil.example"})
    assert r.status_code in (400, 403), r.status_code


def test_a_public_bind_without_tokens_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HOPMEM_MCP_TOKEN_FILE"}
    out = subprocess.run(mcp_command("--http", "--host", "0.0.0.0", "--port", str(free_port()), *_args(tmp_path)),
                         env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "refusing to serve HTTP on 0.0.0.0 without tokens" in out.stderr
    assert "--token-file" in out.stderr
    assert not (tmp_path / "m.db").exists()  # refused before anything was opened


def test_the_environment_names_the_token_file_and_an_empty_one_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n\n", encoding="utf-8")
    out = subprocess.run(mcp_command("--http", "--host", "0.0.0.0", "--port", str(free_port()), *_args(tmp_path)),
                         env={**os.environ, "HOPMEM_MCP_TOKEN_FILE": str(empty)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "holds no token" in out.stderr
    out = subprocess.run(mcp_command(*_args(tmp_path, "--token-file", str(empty))), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "--http only" in out.stderr
