"""The MCP tools ``loom mcp`` offers: each a description, a JSON Schema for its arguments, honest hints
(read-only, destructive, idempotent) and one SDK call. No ``mcp`` import here: ``mcp_server`` serves them.

A tool's result is the API's JSON document; a refusal is ``{"error", "message", "status"?, ...}``.
``select`` narrows the set: ``--read-only`` keeps the tools that change nothing, ``--tools`` an allow-list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .sdk import STATUSES, LoomClient, LoomError
from .sdk.errors import INVALID_ARGUMENT

_ID = {"type": "string", "minLength": 1, "description": "The execution's id (a UUID), as start_execution or "
                                                        "list_executions returned it."}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    schema: dict[str, Any]
    call: Callable[[LoomClient, dict[str, Any]], Any]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


def _list(c: LoomClient, a: dict) -> Any:
    filters = {k: a[k] for k in ("workflow", "status", "started_after", "started_before", "next_token") if k in a}
    return c.list_page(**filters, limit=a.get("limit", 20), check_more=True).document()


TOOLS = [
    ToolSpec("list_workflows", "List workflows",
             "List the workflows registered in this Loom deployment: each one's name, ordered steps (kind 'step', "
             "'sleep' with sleep_s, 'wait_for_event' with its event, 'map' or 'parallel'), retry policy, and "
             "input_schema, the JSON Schema that start_execution's input must satisfy (null: any JSON object); "
             "version (the newest, what a start runs) and versions: each deployed version with its steps and live, the "
             "executions running on it to their end. Beside them, undeployed: live executions on versions this "
             "deployment no longer has (they fail when next delivered), and live: whether the counts are complete.",
             _obj({}), lambda c, a: c.live_versions(), read_only=True,
             idempotent=True),
    ToolSpec("list_schedules", "List schedules",
             "List the schedules deployed with this Loom (EventBridge Scheduler, from Terraform's schedules input): "
             "each one's name, workflow, expression (cron/rate/at), timezone, overlap ('skip': a firing starts nothing "
             "while the schedule's previous execution is live; 'allow': it starts anyway), enabled, input, "
             "next_firing (UTC; null when disabled, ended, or a rate schedule that has not fired yet), last_firing "
             "(scheduled_at, outcome started/skipped/failed, execution_id, duplicates: repeated deliveries that "
             "started nothing, error), last_started and problem (e.g. its workflow is not deployed).",
             _obj({}), lambda c, a: c.schedules().document(), read_only=True, idempotent=True),
    ToolSpec("start_execution", "Start an execution",
             "Start an execution of a workflow with an input object. Returns the new execution (execution_id, "
             "status RUNNING, created true). With an idempotency_token, the same token and input return the same "
             "execution (created false) instead of starting another; the same token with another input is refused "
             "(idempotency_conflict). An input the workflow's schema refuses is invalid_input, with problems per field; "
             "a step list longer than the deployment's step cap is over_step_cap (the operator raises it).",
             _obj({"workflow": {"type": "string", "minLength": 1, "description": "A workflow name from list_workflows."},
                   "input": {"type": "object", "description": "The input, matching the workflow's input_schema.",
                             "default": {}},
                   "idempotency_token": {"type": "string", "minLength": 1,
                                         "description": "Optional: start at most one execution per token."},
                   "version": {"type": "integer", "minimum": 1,
                               "description": "Optional: a version from list_workflows (default: the newest)."}},
                  ["workflow"]),
             lambda c, a: c.start(a["workflow"], a.get("input", {}), idempotency_token=a.get("idempotency_token"),
                                  version=a.get("version")).document()),
    ToolSpec("get_execution", "Get an execution's status",
             "Get one execution: status (RUNNING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED, "
             "COMPENSATION_FAILED), current_step and current_step_name out of step_count, the context (input merged "
             "with every finished step's result), error (code, message) when FAILED, next_wake_at and timer "
             "('sleep', 'retry', 'lease', 'event') while live, waiting_for while WAITING (event, timeout_at, and "
             "arrived: an event came and its delivery is due), fanout while a map or parallel step runs, fanouts "
             "(each map or parallel step that fanned out: step_index, branches, succeeded, max_concurrency; its "
             "history has a row only for each branch that began), compensating/compensated (FAILED and still "
             "compensating: its undo stopped; "
             "compensating_for is the failure it was undoing, and redrive_execution goes on undoing), started_by, "
             "cancelled_by, redrives.",
             _obj({"execution_id": _ID}, ["execution_id"]), lambda c, a: c.get(a["execution_id"]).document(),
             read_only=True, idempotent=True),
    ToolSpec("get_history", "Get an execution's history",
             "Get every record of an execution in order: each step's (step_index, name, kind task/event/fanout/"
             "compensation, status SUCCEEDED/FAILED/RUNNING, attempts, started_at, finished_at, result, error), each "
             "branch of a map or parallel step (kind 'branch', with its branch number), the operator actions "
             "(operations: cancel/redrive/wake, by, at, reason, detail) and the events sent. Every page is read and "
             "returned as one document.",
             _obj({"execution_id": _ID}, ["execution_id"]), lambda c, a: c.history(a["execution_id"]).document(),
             read_only=True, idempotent=True),
    ToolSpec("list_executions", "List executions",
             "List executions newest first, optionally of one workflow, one status and a start-time window "
             "(started_after <= created_at < started_before). Returns {executions: [{execution_id, workflow, status, "
             "created_at}], next_token}; pass next_token back for the next page (null: nothing follows). The index "
             "is eventually consistent: a start or an end shows a moment later.",
             _obj({"workflow": {"type": "string", "minLength": 1, "description": "Only this workflow."},
                   "status": {"type": "string", "enum": [*STATUSES, "LIVE"],
                              "description": "Only this status (LIVE: any of RUNNING, SLEEPING, WAITING)."},
                   "started_after": {"type": "string", "description": "ISO-8601 time, e.g. 2026-03-01T12:00:00Z."},
                   "started_before": {"type": "string", "description": "ISO-8601 time, exclusive."},
                   "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                             "description": "Executions per page."},
                   "next_token": {"type": "string", "description": "From the previous page's next_token."}}),
             _list, read_only=True, idempotent=True),
    ToolSpec("send_event", "Send an event to an execution",
             "Send a named event with a data object to a live execution. If it is WAITING for that event "
             "(waiting_for.event) it resumes with the data (outcome 'delivered'); otherwise the event is kept until it "
             "waits for it ('buffered'). An event_id already sent is ignored ('duplicate'). Data that does not fit "
             "the wait's model is refused (invalid_event); one that could not be checked (sent before the wait, to a "
             "code-first workflow that declares no events) is passed over by the wait: check that status moved on. "
             "The data decides what "
             "the workflow does next (an approval, say): send one only when the person or system it stands for asked "
             "you to. An ended execution refuses it (execution_ended).",
             _obj({"execution_id": _ID,
                   "event": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_.-]+$",
                             "description": "The event's name, as the workflow's wait_for_event step names it."},
                   "data": {"type": "object", "default": {}, "description": "The event's payload."},
                   "event_id": {"type": "string", "minLength": 1,
                                "description": "Optional deduplication id: the same id is delivered at most once."}},
                  ["execution_id", "event"]),
             lambda c, a: c.send(a["execution_id"], a["event"], a.get("data", {}), event_id=a.get("event_id")).document(),
             destructive=True),
    ToolSpec("complete_callback", "Answer a callback (an approval)",
             "Answer a callback token that a step issued (ctx.callback_token(event)): workflows hand these to a "
             "person or a system, e.g. in an approval link, and they show in the execution's context. Answering one "
             "decides for that person (approving or declining an expense, say): do it only when they asked you to. "
             "The wait it stands for resumes with the data. A token can be used once (callback_used); an unknown one "
             "is callback_not_found; one whose execution's workflow version is not deployed is "
             "workflow_version_missing and stays usable once that version is deployed again.",
             _obj({"token": {"type": "string", "minLength": 1, "description": "The callback token, as issued."},
                   "data": {"type": "object", "default": {}, "description": "The answer's payload."}},
                  ["token"]),
             lambda c, a: c.complete_callback(a["token"], a.get("data", {})).document(), destructive=True),
    ToolSpec("cancel_execution", "Cancel an execution",
             "End a live execution CANCELLED: a sleeping or waiting one stops at once; a step body that is running "
             "finishes, but nothing after it runs; steps with compensations are undone first (compensating). "
             "Cancelling a CANCELLED execution again changes nothing, nor does cancelling one already undoing its "
             "steps after a failure (compensating true, cancelled_by null in the answer: it ends FAILED); another "
             "ended one is refused "
             "(execution_ended), and so is one whose version is not deployed and that completed steps with "
             "compensations (definition_changed: the version must be deployed again first). Returns the execution.",
             _obj({"execution_id": _ID, "reason": {"type": "string", "description": "Why; kept in its history."}},
                  ["execution_id"]), lambda c, a: c.cancel(a["execution_id"], reason=a.get("reason")).document(),
             destructive=True, idempotent=True),
    ToolSpec("redrive_execution", "Redrive a failed execution",
             "Resume a FAILED execution from its failed step with fresh attempts, under the same execution_id (fix "
             "the cause first). Refused unless FAILED (not_failed), if the deployed step list changed "
             "(definition_changed), its steps were compensated (compensated) or a safety cap it stopped at is not raised "
             "yet (over_step_cap, over_attempt_cap: the operator raises it first). With to_version, it resumes on that "
             "version of its workflow, refused (steps_differ) unless the steps before the failed one are the same "
             "there. One that failed with cancel_requested still true finishes that cancel instead of running on. "
             "Returns the execution, RUNNING, with redrives incremented.",
             _obj({"execution_id": _ID, "to_version": {"type": "integer", "minimum": 1, "description": (
                 "Optional: resume on this version (list_workflows lists them).")}}, ["execution_id"]),
             lambda c, a: c.redrive(a["execution_id"], to_version=a.get("to_version")).document()),
    ToolSpec("wake_execution", "Wake an execution now",
             "End the current durable sleep or retry backoff now, so the next step or attempt runs at once. On an "
             "execution WAITING for an event it ends the wait as a timeout: the wait's default is taken, or it waits "
             "again when its retry policy allows another period, or the step fails (and compensations undo the "
             "completed steps); do that only when told to. Refused when nothing "
             "waits on a timer (not_waiting) or the execution ended (execution_ended).",
             _obj({"execution_id": _ID}, ["execution_id"]), lambda c, a: c.wake(a["execution_id"]).document(),
             destructive=True),
]
BY_NAME = {t.name: t for t in TOOLS}


class SelectionError(ValueError):
    """``--tools`` or ``--read-only`` asked for something that cannot be offered; the message says what."""


def select(read_only: bool = False, names: str | None = None) -> list[ToolSpec]:
    """The tools to offer: all, the read-only ones, or those ``names`` (comma-separated) lists."""
    chosen = [t for t in TOOLS if t.read_only or not read_only]
    if names is None:
        return chosen
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown or not wanted:
        raise SelectionError(f"--tools names no tool: {', '.join(unknown) or '(empty)'}; tools are "
                             f"{', '.join(BY_NAME)}")
    writing = [n for n in wanted if not BY_NAME[n].read_only] if read_only else []
    if writing:
        raise SelectionError(f"--read-only offers no tool that changes anything, and --tools names {', '.join(writing)}; "
                             "drop one of the two")
    return [t for t in chosen if t.name in wanted]


def _as_the_api_reads(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """A value of a choice in another case (``status: "completed"``) as the API reads it (upper case), so a
    tool takes what the API, the CLI and the SDK take."""
    for key, value in args.items():
        choices = spec.schema["properties"].get(key, {}).get("enum")
        if choices and isinstance(value, str) and value not in choices and value.upper() in choices:
            args[key] = value.upper()
    return args


def call_tool(connect: Callable[[], LoomClient], tools: dict[str, ToolSpec], name: str,
              arguments: dict[str, Any] | None) -> tuple[bool, Any]:
    """Run one tool synchronously: ``(ok, document)``; a refusal's document is the API's error document."""
    import jsonschema

    spec = tools.get(name)
    if spec is None:
        return False, {"error": "unknown_tool", "message": f"no tool named {name!r} here; tools: {', '.join(tools)}"}
    args = _as_the_api_reads(spec, dict(arguments or {}))
    problems = sorted(jsonschema.Draft202012Validator(spec.schema).iter_errors(args), key=lambda e: list(e.path))
    if problems:  # the SDK's code for what it refuses before any request, as the CLI's
        return False, {"error": INVALID_ARGUMENT, "message": "; ".join(
            f"{'/'.join(map(str, p.path)) or 'arguments'}: {p.message}" for p in problems)
            + f"; nothing was sent. The tool's inputSchema lists what {name} takes"}
    # JSON Schema's "integer" takes 1.0 (a number with no fraction), which an agent's JSON may hold: sent as 1,
    # as the API wants it.
    args = {k: int(v) if type(v) is float and v.is_integer() and spec.schema["properties"].get(k, {}).get("type")
            == "integer" else v for k, v in args.items()}
    try:
        return True, spec.call(connect(), args)
    except LoomError as exc:
        return False, {**exc.document, **({"status": exc.status} if exc.status is not None else {})}
