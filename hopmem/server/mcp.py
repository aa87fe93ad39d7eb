"""``hopmem mcp``: the agent memory of one file and namespace as a Model Context Protocol server.

A thin layer over :func:`hopmem.agent.memory_tools`: the tools' names,
descriptions and input schemas, their argument checks and their results are
the toolkit's own, so an MCP client and a function-calling API see the same
tools. The server adds only what MCP carries besides:

* tool annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``,
  ``openWorldHint``) from the tools' hints: ``forget`` is marked destructive, so
  the MCP host asks the user before calling it (the server does not ask again);
* a tool result whose ``ok`` is false (bad arguments, an unknown id, a library
  error) is an MCP tool error (``isError``) carrying the library's message; an
  unexpected exception is logged and becomes a tool error too, never a crash;
* the resource ``hopmem://stats``: :meth:`AgentMemory.stats` as JSON.

Transports: stdio (the default, what desktop clients start) and streamable
HTTP (``--http``, bound to 127.0.0.1 unless ``--host`` says otherwise, at
``/mcp``). Over HTTP, ``--token-file FILE`` (or ``HOPMEM_MCP_TOKEN_FILE``)
requires ``Authorization: Bearer <token>`` with one of the file's tokens (one a
line; a request without a valid one is answered 401, see :class:`BearerTokens`);
a non-loopback address is refused without tokens. On a loopback address the
SDK's DNS-rebinding protection (the ``Host`` and ``Origin`` headers must name
the loopback) stays on. The ``mcp`` package (``pip install "hopmem[mcp]"``) is imported only
when a server is built, so the library works without it (and ``hopmem.agent`` only when the server starts, so
the ``hopmem`` command's other subcommands do not pay for it).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from ..errors import HopmemError

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.lowlevel import Server

    from ..agent import AgentMemory, MemoryToolkit

__all__ = ["MCPUnavailable", "STATS_URI", "DEFAULT_HOST", "DEFAULT_PORT", "ENCODERS", "TOKEN_FILE_ENV", "BearerTokens",
           "add_arguments", "build_server", "desktop_config", "open_memory", "toolkit", "main"]

logger = logging.getLogger("hopmem.mcp")

STATS_URI = "hopmem://stats"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: ``--encoder`` values: the bundled MiniLM model (``hopmem[text]``) or the model-free hashing encoder.
ENCODERS = ("default", "hashing")
#: The environment variable ``--token-file`` defaults to.
TOKEN_FILE_ENV = "HOPMEM_MCP_TOKEN_FILE"
_MCP_HINT = 'pip install "hopmem[mcp]"'


class MCPUnavailable(HopmemError, ImportError):
    """The ``mcp`` package (the ``hopmem[mcp]`` extra) is not installed."""


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise MCPUnavailable(f"hopmem mcp: expected the mcp package, got {exc}. Install it with {_MCP_HINT}") \
            from exc


def desktop_config(path: str, namespace: str, *, session: str | None = None, encoder: str = "default",
                   command: str = "hopmem", name: str = "hopmem") -> dict[str, Any]:
    """The ``mcpServers`` entry a desktop MCP client needs to start this server over stdio."""
    args = ["mcp", "--path", path, "--namespace", namespace]
    if session is not None:
        args += ["--session", session]
    if encoder != "default":
        args += ["--encoder", encoder]
    return {"mcpServers": {name: {"command": command, "args": args}}}


def open_memory(path: str, namespace: str, *, encoder: str = "default") -> AgentMemory:
    """Open the agent memory at ``path`` for ``namespace`` with the named encoder (see :data:`ENCODERS`)."""
    from ..agent import AgentMemory
    from ..agent.store import recorded_encoder
    from ..errors import InvalidInput
    from ..text.encoders import HashingEncoder, builtin_encoder, default_encoder

    if encoder == "hashing":
        enc: Any = HashingEncoder(384)
    elif encoder == "default":
        # A file keeps the name of the encoder it was written with: reopen it with that one
        # (a file from 0.2 was written by the torch model), a new file with the default.
        recorded = recorded_encoder(path)
        enc = builtin_encoder(recorded["name"]) if recorded is not None else default_encoder()
    else:
        raise InvalidInput(f"encoder: expected one of {list(ENCODERS)}, got {encoder!r}")
    return AgentMemory.open(path, encoder=enc, namespace=namespace)


def toolkit(memory: AgentMemory, *, session_id: str | None = None, include_forget: bool = True) -> MemoryToolkit:
    """The tools the server offers: :func:`memory_tools` with feedback and inspection.

    Without ``session_id`` the tools see and write only the shared pool. Forget
    needs no approval from the toolkit: the MCP host confirms destructive tools.
    """
    from ..agent import memory_tools  # imported when used: ``hopmem --help`` stays light

    return memory_tools(memory, session_id=session_id, shared_only=session_id is None,
                        include_forget=include_forget, forget_requires_approval=False,
                        include_feedback=True, include_inspection=True)


def build_server(memory: AgentMemory, *, session_id: str | None = None, include_forget: bool = True) -> Server:
    """An MCP server (``mcp.server.lowlevel.Server``) over ``memory``'s tools and stats."""
    _require_mcp()
    import mcp_types as types
    from mcp.server.lowlevel import Server

    tools = toolkit(memory, session_id=session_id, include_forget=include_forget)
    listed = [
        types.Tool(name=t.name, title=t.name.replace("_", " ").capitalize(), description=t.description,
                   input_schema=t.parameters,
                   annotations=types.ToolAnnotations(
                       title=t.name.replace("_", " ").capitalize(), read_only_hint=t.read_only,
                       destructive_hint=t.destructive, idempotent_hint=t.idempotent, open_world_hint=False))
        for t in tools]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        try:
            result = await tools.acall(params.name, params.arguments or {})
        except Exception as exc:  # a tool call must never take the server down
            logger.exception("hopmem mcp: tool %s failed", params.name)
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        error = not result.get("ok", False)
        text = result["error"] if error and "error" in result else json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result,
                                    is_error=error)

    async def list_resources(ctx: Any, params: Any) -> Any:
        return types.ListResourcesResult(resources=[types.Resource(
            uri=STATS_URI, name="stats", title="Memory statistics", mime_type="application/json",
            description=f"Counts of the memory's entries, sessions and receipts (namespace {memory.namespace!r}).")])

    async def read_resource(ctx: Any, params: Any) -> Any:
        from ..errors import NotFound

        if str(params.uri) != STATS_URI:
            raise NotFound(f"uri: expected {STATS_URI!r}, got {str(params.uri)!r}")
        import asyncio

        stats = await asyncio.to_thread(memory.stats)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=STATS_URI, mime_type="application/json", text=json.dumps(stats, ensure_ascii=False))])

    from .. import __version__

    return Server("hopmem", version=__version__,
                  instructions=("Long-term memory for this user: recall before answering about their preferences, "
                                "plans or past decisions; remember durable facts as self-contained sentences."),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_read_resource=read_resource)


async def _serve_stdio(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class BearerTokens:
    """ASGI middleware: an HTTP request needs ``Authorization: Bearer <token>`` (or ``X-API-Key``, as
    ``hopmem serve`` reads keys) naming one of the tokens in ``path``, else it is answered 401.

    The file holds one token a line (blank lines and lines starting with ``#`` are skipped) and is read
    again when it changes, so adding or removing a token needs no restart. Only the tokens' SHA-256
    digests are kept, and a presented token is compared with every one in constant time.
    """

    def __init__(self, app: Any, path: str | os.PathLike[str]) -> None:
        self.app = app
        self.path = os.fspath(path)
        self._stamp: tuple[int, int, int] | None = None
        self._digests: list[bytes] = []
        if not self.digests():
            raise HopmemError(f"hopmem mcp: the token file {self.path} is missing or holds no token (one a line)")

    def digests(self) -> list[bytes]:
        """The current tokens' digests (the file re-read if it changed; an unreadable file: none)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with open(self.path, encoding="utf-8") as fh:
                tokens = [line.strip() for line in fh]
            self._digests = [_digest(t) for t in tokens if t and not t.startswith("#")]
            self._stamp = stamp
        return self._digests

    def allows(self, token: str | None) -> bool:
        presented = _digest(token or "")
        ok = False
        for digest in self.digests():  # every one compared: the time does not say which matched
            ok |= hmac.compare_digest(presented, digest)
        return ok and bool(token)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            from .auth import token_from_headers

            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not self.allows(token_from_headers(headers)):
                body = json.dumps({"error": "unauthorized", "message": "a valid bearer token is required"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="hopmem mcp"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def check_bind(host: str, token_file: str | None) -> None:
    """Refuse to serve a non-loopback address without tokens (:class:`~hopmem.errors.InvalidInput`)."""
    from ..errors import InvalidInput
    from .auth import is_loopback

    if not token_file and not is_loopback(host):
        raise InvalidInput(f"hopmem mcp: refusing to serve HTTP on {host} without tokens: anyone who can reach it "
                           f"could read and change the memory. Pass --token-file FILE (one bearer token a line; "
                           f"or set {TOKEN_FILE_ENV}), or bind a loopback address (--host 127.0.0.1)")


def _serve_http(server: Server, host: str, port: int, token_file: str | None = None) -> None:
    import uvicorn

    check_bind(host, token_file)
    # on a loopback host the SDK turns on its DNS-rebinding protection (Host and Origin checked)
    app: Any = server.streamable_http_app(host=host)
    if token_file:
        app = BearerTokens(app, token_file)
    logger.info("hopmem mcp: streamable HTTP on http://%s:%d/mcp (%s)", host, port,
                "bearer tokens required" if token_file else "no authentication: loopback only")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hopmem mcp``."""
    parser.add_argument("--path", required=True, help="the agent memory's SQLite file (created if missing)")
    parser.add_argument("--namespace", required=True, help="the namespace every tool is confined to")
    parser.add_argument("--session", default=None,
                        help="bind a session id (its session memories too); default: the shared pool only")
    parser.add_argument("--encoder", choices=ENCODERS, default="default",
                        help="default: all-MiniLM-L6-v2 (hopmem[text]); hashing: model-free, word overlap only")
    parser.add_argument("--no-forget", action="store_true", help="do not offer the forget tool")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP bind address (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    parser.add_argument("--token-file", default=None,
                        help="HTTP: require 'Authorization: Bearer <token>' with a token of FILE (one a line); "
                             f"default: ${TOKEN_FILE_ENV}. Needed to bind a non-loopback address")


def main(args: argparse.Namespace) -> int:
    """Run ``hopmem mcp`` with parsed arguments until the client disconnects (or Ctrl-C over HTTP)."""
    _require_mcp()
    import anyio

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # stderr
    token_file = getattr(args, "token_file", None) or os.environ.get(TOKEN_FILE_ENV) or None
    if args.http:
        check_bind(args.host, token_file)  # before the memory is opened
        if token_file:
            BearerTokens(None, token_file)  # a missing or empty token file fails here, not at the first request
    elif getattr(args, "token_file", None):
        from ..errors import InvalidInput

        raise InvalidInput("hopmem mcp: --token-file applies to --http only (stdio is the client's own process)")
    memory = open_memory(args.path, args.namespace, encoder=args.encoder)
    try:
        server = build_server(memory, session_id=args.session, include_forget=not args.no_forget)
        if args.http:
            _serve_http(server, args.host, args.port, token_file)
        else:
            anyio.run(_serve_stdio, server)
    finally:
        memory.close()
    return 0
