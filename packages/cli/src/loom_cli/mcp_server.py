"""``loom mcp``: Loom's API as Model Context Protocol tools (``mcp_tools``), served on stdio with the
official ``mcp`` SDK, which is imported only here: the Lambdas never load it.

The control plane is looked up when a tool first needs it, not at start: an agent's host may start the
server before ``make up``, and every call then says what is missing until the stack is there. A start
that cannot serve at all (the SDK not installed, a bad ``--tools``) answers the client's first request
with a JSON-RPC error naming the problem, so the host shows why instead of a dead pipe.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable

from .mcp_tools import SelectionError, ToolSpec, call_tool, select
from .sdk import LoomClient

INSTRUCTIONS = (
    "Loom runs durable workflows: ordered, checkpointed steps with retries, sleeps, event waits, map/parallel steps "
    "and compensations. Call list_workflows to see each workflow's steps and input JSON Schema, start_execution to "
    "start one, get_execution for its status (RUNNING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED, "
    "COMPENSATION_FAILED), get_history for its records. Errors carry the API's code (e.g. invalid_input, "
    "execution_not_found, execution_ended, not_failed). Tools marked destructive decide for people (answering an "
    "approval, timing a wait out): use them only when asked.")


class _Connection:
    """The client, made on first use; a failure (no URL yet) is reported per call and tried again next time."""

    def __init__(self, connect: Callable[[], LoomClient]):
        self._connect, self._client, self._lock = connect, None, threading.Lock()

    def __call__(self) -> LoomClient:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client


def build_server(connect: Callable[[], LoomClient], tools: list[ToolSpec]):
    """The MCP server object (``mcp.server.Server``) offering ``tools``, on the client ``connect`` makes."""
    import anyio
    import mcp.types as types
    from mcp.server import Server

    from . import __version__

    offered = {t.name: t for t in tools}
    connection = _Connection(connect)
    listed = [types.Tool(name=t.name, title=t.title, description=t.description, input_schema=t.schema,
                         annotations=types.ToolAnnotations(title=t.title, read_only_hint=t.read_only,
                                                           destructive_hint=t.destructive,
                                                           idempotent_hint=t.idempotent, open_world_hint=False))
              for t in tools]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def handle_call(ctx, params) -> types.CallToolResult:
        ok, doc = await anyio.to_thread.run_sync(call_tool, connection, offered, params.name, params.arguments)
        if ok:
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(doc, indent=2, sort_keys=True))],
                                        structured_content=doc)
        status = f" (HTTP {doc['status']})" if doc.get("status") else ""
        return types.CallToolResult(content=[types.TextContent(text=f"{doc.get('error')}{status}: {doc.get('message')}")],
                                    structured_content=doc, is_error=True)

    return Server("loom", version=__version__, title="Loom", instructions=INSTRUCTIONS,
                  get_tool_input_schema=lambda name: offered[name].schema if name in offered else None,
                  on_list_tools=list_tools, on_call_tool=handle_call)


def refuse_over_stdio(message: str, stdin=None, stdout=None) -> int:
    """Answer every request on stdin with a JSON-RPC error saying ``message`` until the client hangs up."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    print(f"loom mcp: error: {message}", file=sys.stderr, flush=True)
    for line in stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict) and "id" in request and "method" in request:
            reply = {"jsonrpc": "2.0", "id": request["id"],
                     "error": {"code": -32603, "message": f"loom mcp cannot serve: {message}"}}
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()
    return 2


def serve(connect: Callable[[], LoomClient], read_only: bool = False, tools: str | None = None) -> int:
    """Serve the tools on stdin/stdout until the client closes them."""
    try:
        chosen = select(read_only, tools)
    except SelectionError as exc:
        return refuse_over_stdio(str(exc))
    try:
        import anyio
        import mcp.server.stdio  # noqa: F401 -- the SDK is there (mcp_stdio wraps its transport)
    except ImportError:
        return refuse_over_stdio("it needs the MCP SDK: pip install 'loom-cli[mcp]' (or the `mcp` package)")
    from .mcp_stdio import checked_stdio_server

    server = build_server(connect, chosen)

    async def run() -> None:
        async with checked_stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
    return 0


__all__ = ["INSTRUCTIONS", "build_server", "refuse_over_stdio", "serve"]
