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
``/mcp``). The ``mcp`` package (``pip install "hopmem[mcp]"``) is imported only
when a server is built, so the library works without it (and ``hopmem.agent`` only when the server starts, so
the ``hopmem`` command's other subcommands do not pay for it).
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING, Any

from .errors import HopmemError

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.lowlevel import Server

    from .agent import AgentMemory, MemoryToolkit

__all__ = ["MCPUnavailable", "STATS_URI", "DEFAULT_HOST", "DEFAULT_PORT", "ENCODERS", "add_arguments", "build_server",
           "desktop_config", "open_memory", "toolkit", "main"]

logger = logging.getLogger("hopmem.mcp")

STATS_URI = "hopmem://stats"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: ``--encoder`` values: the bundled MiniLM model (``hopmem[text]``) or the model-free hashing encoder.
ENCODERS = ("default", "hashing")
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
    from .agent import AgentMemory
    from .agent.store import recorded_encoder
    from .encoders import HashingEncoder, builtin_encoder, default_encoder
    from .errors import InvalidInput

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
    from .agent import memory_tools  # imported when used: ``hopmem --help`` stays light

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
        from .errors import NotFound

        if str(params.uri) != STATS_URI:
            raise NotFound(f"uri: expected {STATS_URI!r}, got {str(params.uri)!r}")
        import asyncio

        stats = await asyncio.to_thread(memory.stats)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=STATS_URI, mime_type="application/json", text=json.dumps(stats, ensure_ascii=False))])

    from . import __version__

    return Server("hopmem", version=__version__,
                  instructions=("Long-term memory for this user: recall before answering about their preferences, "
                                "plans or past decisions; remember durable facts as self-contained sentences."),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_read_resource=read_resource)


async def _serve_stdio(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _serve_http(server: Server, host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    logger.info("hopmem mcp: streamable HTTP on http://%s:%d/mcp", host, port)
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


def main(args: argparse.Namespace) -> int:
    """Run ``hopmem mcp`` with parsed arguments until the client disconnects (or Ctrl-C over HTTP)."""
    _require_mcp()
    import anyio

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # stderr
    memory = open_memory(args.path, args.namespace, encoder=args.encoder)
    try:
        server = build_server(memory, session_id=args.session, include_forget=not args.no_forget)
        if args.http:
            _serve_http(server, args.host, args.port)
        else:
            anyio.run(_serve_stdio, server)
    finally:
        memory.close()
    return 0
