"""``loom mcp``: Loom's API as Model Context Protocol tools, served on stdio with the official ``mcp`` SDK.

Each tool is one API call through the CLI's :class:`~loom_cli.client.Client` (unsigned to the local
stack, SigV4-signed to a Function URL with the caller's credentials), so an agent gets exactly what
``loom`` gets. A tool's result is the API's JSON document (``structured_content``, and the same JSON as
text); a refusal is a tool error whose text is ``code (HTTP status): message`` and whose structured
content is the API's error document. ``mcp`` is imported only here: the Lambdas never load it.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

from .client import ApiError, CliError, Client

_ID = {"type": "string", "minLength": 1, "description": "The execution's id (a UUID), as start_execution or "
                                                        "list_executions returned it."}
_STATUSES = ["LIVE", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED"]
INSTRUCTIONS = (
    "Loom runs durable workflows: ordered, checkpointed steps with retries and sleeps. Call list_workflows to see "
    "each workflow's steps and input JSON Schema, start_execution to start one, get_execution for its status "
    "(RUNNING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED, COMPENSATION_FAILED), get_history for its step "
    "records. Errors carry the API's code (e.g. invalid_input, execution_not_found, execution_ended, not_failed).")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    schema: dict[str, Any]
    call: Callable[[Client, dict[str, Any]], Any]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _get(path: str) -> Callable[[Client, dict], Any]:
    return lambda client, a: client.request("GET", path.format(**{k: _q(v) for k, v in a.items()}))[1]


def _list(client: Client, a: dict) -> Any:
    query = {k: a[k] for k in ("workflow", "status", "started_after", "started_before", "limit", "next_token") if k in a}
    return client.request("GET", "/executions" + (f"?{urllib.parse.urlencode(query)}" if query else ""))[1]


def _history(client: Client, a: dict) -> Any:
    from .main import full_history

    return full_history(client, a["execution_id"])


def _start(client: Client, a: dict) -> Any:
    body = {"workflow": a["workflow"], "input": a.get("input", {})}
    if "idempotency_token" in a:
        body["idempotency_token"] = a["idempotency_token"]
    return client.request("POST", "/executions", body)[1]


def _send(client: Client, a: dict) -> Any:
    body: dict[str, Any] = {"data": a.get("data", {})}
    if "event_id" in a:
        body["event_id"] = a["event_id"]
    return client.request("POST", f"/executions/{_q(a['execution_id'])}/events/{_q(a['event'])}", body)[1]


def _callback(client: Client, a: dict) -> Any:
    return client.request("POST", f"/callbacks/{_q(a['token'])}", {"data": a.get("data", {})})[1]


def _post(action: str, with_reason: bool = False) -> Callable[[Client, dict], Any]:
    def call(client: Client, a: dict) -> Any:
        body = {"reason": a["reason"]} if with_reason and "reason" in a else None
        return client.request("POST", f"/executions/{_q(a['execution_id'])}/{action}", body)[1]
    return call


TOOLS = [
    ToolSpec("list_workflows", "List workflows",
             "List the workflows registered in this Loom deployment: each one's name, ordered steps (kind 'step' or "
             "'sleep', with sleep_s), retry policy, and input_schema, the JSON Schema that start_execution's input "
             "must satisfy (null: any JSON object).",
             _obj({}), _get("/workflows"), read_only=True, idempotent=True),
    ToolSpec("start_execution", "Start an execution",
             "Start an execution of a workflow with an input object. Returns the new execution (execution_id, "
             "status RUNNING, created true). With an idempotency_token, the same token and input return the same "
             "execution (created false) instead of starting another; the same token with another input is refused "
             "(idempotency_conflict). An input the workflow's schema refuses is invalid_input, with problems per field.",
             _obj({"workflow": {"type": "string", "minLength": 1, "description": "A workflow name from list_workflows."},
                   "input": {"type": "object", "description": "The input, matching the workflow's input_schema.",
                             "default": {}},
                   "idempotency_token": {"type": "string", "minLength": 1,
                                         "description": "Optional: start at most one execution per token."}},
                  ["workflow"]), _start),
    ToolSpec("get_execution", "Get an execution's status",
             "Get one execution: status (RUNNING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED, "
             "COMPENSATION_FAILED), current_step and current_step_name out of step_count, the context (input merged "
             "with every finished step's result), error (code, message) when FAILED, next_wake_at and timer "
             "('sleep', 'retry', 'lease') while live, waiting_for while WAITING, started_by, cancelled_by, redrives.",
             _obj({"execution_id": _ID}, ["execution_id"]), _get("/executions/{execution_id}"),
             read_only=True, idempotent=True),
    ToolSpec("get_history", "Get an execution's history",
             "Get every step record of an execution in order (step_index, name, status SUCCEEDED/FAILED/RUNNING, "
             "attempts, started_at, finished_at, result, error) and the operator actions on it (operations: op "
             "cancel/redrive/wake, by, at, reason, detail). Every page is read and returned as one document.",
             _obj({"execution_id": _ID}, ["execution_id"]), _history, read_only=True, idempotent=True),
    ToolSpec("list_executions", "List executions",
             "List executions newest first, optionally of one workflow, one status and a start-time window "
             "(started_after <= created_at < started_before). Status LIVE means running, sleeping or waiting "
             "(get_execution tells which). Returns {executions: [{execution_id, workflow, status, created_at}], "
             "next_token}; pass next_token back for the next page. The index is eventually consistent.",
             _obj({"workflow": {"type": "string", "minLength": 1, "description": "Only this workflow."},
                   "status": {"type": "string", "enum": _STATUSES, "description": "Only this status."},
                   "started_after": {"type": "string", "description": "ISO-8601 time, e.g. 2026-03-01T12:00:00Z."},
                   "started_before": {"type": "string", "description": "ISO-8601 time, exclusive."},
                   "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                             "description": "Executions per page."},
                   "next_token": {"type": "string", "description": "From the previous page's next_token."}}),
             _list, read_only=True, idempotent=True),
    ToolSpec("send_event", "Send an event to an execution",
             "Send a named event with a data object to a live execution. If it is WAITING for that event "
             "(waiting_for.event) it resumes with the data (outcome 'delivered'); otherwise the event is kept until it "
             "waits for it ('buffered'). An event_id already sent is ignored ('duplicate'). An ended execution "
             "refuses it (execution_ended).",
             _obj({"execution_id": _ID,
                   "event": {"type": "string", "minLength": 1, "description": "The event's name, as the workflow's "
                                                                             "wait_for_event step names it."},
                   "data": {"type": "object", "default": {}, "description": "The event's payload."},
                   "event_id": {"type": "string", "minLength": 1,
                                "description": "Optional deduplication id: the same id is delivered at most once."}},
                  ["execution_id", "event"]), _send, idempotent=False),
    ToolSpec("complete_callback", "Complete a callback",
             "Answer a callback token that a step issued (ctx.callback_token(event); workflows hand it to a person or "
             "a system, e.g. in an approval link, and it shows in the execution's context): the wait it stands for "
             "resumes with the data. A token can be used once (callback_used); an unknown one is callback_not_found.",
             _obj({"token": {"type": "string", "minLength": 1, "description": "The callback token, as issued."},
                   "data": {"type": "object", "default": {}, "description": "The answer's payload."}},
                  ["token"]), _callback),
    ToolSpec("cancel_execution", "Cancel an execution",
             "End a live execution CANCELLED: a sleeping or waiting one stops at once; a step body that is running "
             "finishes, but nothing after it runs. Cancelling a CANCELLED execution again changes nothing; a "
             "COMPLETED or FAILED one is refused (execution_ended). Returns the execution.",
             _obj({"execution_id": _ID, "reason": {"type": "string", "description": "Why; kept in its history."}},
                  ["execution_id"]), _post("cancel", with_reason=True), destructive=True, idempotent=True),
    ToolSpec("redrive_execution", "Redrive a failed execution",
             "Resume a FAILED execution from its failed step with fresh attempts, under the same execution_id (fix "
             "the cause first). Refused unless FAILED (not_failed), or if the deployed step list changed "
             "(definition_changed). Returns the execution, RUNNING, with redrives incremented.",
             _obj({"execution_id": _ID}, ["execution_id"]), _post("redrive")),
    ToolSpec("wake_execution", "Wake a sleeping execution",
             "End the current durable sleep or retry backoff now, so the next step or attempt runs at once. Refused "
             "when nothing is waiting on a timer (not_waiting) or the execution ended (execution_ended).",
             _obj({"execution_id": _ID}, ["execution_id"]), _post("wake")),
]
BY_NAME = {t.name: t for t in TOOLS}


def call_tool(client: Client, name: str, arguments: dict[str, Any] | None) -> tuple[bool, Any]:
    """Run one tool synchronously: ``(ok, document)``; a refusal's document is the API's error document."""
    import jsonschema

    spec = BY_NAME.get(name)
    if spec is None:
        return False, {"error": "unknown_tool", "message": f"no tool named {name!r}; tools: {', '.join(BY_NAME)}"}
    args = dict(arguments or {})
    problems = sorted(jsonschema.Draft202012Validator(spec.schema).iter_errors(args), key=lambda e: list(e.path))
    if problems:
        return False, {"error": "invalid_arguments", "message": "; ".join(
            f"{'/'.join(map(str, p.path)) or 'arguments'}: {p.message}" for p in problems)}
    try:
        return True, spec.call(client, args)
    except ApiError as exc:
        return False, {**exc.body, "status": exc.status}
    except CliError as exc:
        return False, {"error": "unreachable", "message": str(exc)}


def build_server(client: Client):
    """The MCP server object (``mcp.server.Server``) with Loom's tools, bound to ``client``."""
    import anyio
    import mcp.types as types
    from mcp.server import Server

    from . import __version__

    tools = [types.Tool(name=t.name, title=t.title, description=t.description, input_schema=t.schema,
                        annotations=types.ToolAnnotations(title=t.title, read_only_hint=t.read_only,
                                                          destructive_hint=t.destructive, idempotent_hint=t.idempotent,
                                                          open_world_hint=False))
             for t in TOOLS]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def handle_call(ctx, params) -> types.CallToolResult:
        ok, doc = await anyio.to_thread.run_sync(call_tool, client, params.name, params.arguments)
        if ok:
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(doc, indent=2, sort_keys=True))],
                                        structured_content=doc)
        status = f" (HTTP {doc['status']})" if doc.get("status") else ""
        return types.CallToolResult(content=[types.TextContent(text=f"{doc.get('error')}{status}: {doc.get('message')}")],
                                    structured_content=doc, is_error=True)

    return Server("loom", version=__version__, title="Loom", instructions=INSTRUCTIONS,
                  get_tool_input_schema=lambda name: BY_NAME[name].schema if name in BY_NAME else None,
                  on_list_tools=list_tools, on_call_tool=handle_call)


def serve(client: Client) -> int:
    """Serve the tools on stdin/stdout until the client closes them."""
    try:
        import anyio
        from mcp.server.stdio import stdio_server
    except ImportError:
        raise CliError("`loom mcp` needs the MCP SDK: pip install 'loom-cli[mcp]' (or the `mcp` package)", 2) from None
    server = build_server(client)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
    return 0
