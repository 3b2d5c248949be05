"""The API's one route table: each route's method, path and function, from which the resolver's routes,
the 404 and 405 replies and the route list in them are all built.

A route function takes the runtime and the :class:`Request` and returns ``(status, document)``; it
parses its input (``request_models``), calls engine-core and builds its reply (``responses``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine_core.adapters.bootstrap import Runtime
from engine_core.schedules.config import Schedules

from . import responses
from .access import AccessPolicy
from .request_models import (
    no_body,
    parse_cancel_request,
    parse_event_request,
    parse_list_query,
    parse_page_query,
    parse_start_request,
)
from .responses import EventSentView, ExecutionStarted, ExecutionView, ListReply, dump
from .schedules import list_schedules
from .versions import parse_redrive_request, workflows_reply


@dataclass(frozen=True)
class Request:
    """What a route sees of a Function URL request."""

    params: dict[str, str]
    """The path's parameters (``execution_id``, ``name``, ``token``)."""
    body: str | None = None
    is_base64_encoded: bool = False
    query: dict[str, str] | None = None
    caller: str = "local"
    """The IAM principal the Function URL authenticated, ``local`` without one."""
    access: AccessPolicy = field(default_factory=AccessPolicy)
    """Who may start and operate which workflow (``access.py``); open unless configured."""
    schedules: Schedules = field(default_factory=Schedules)
    """The deployed schedules (``LOOM_SCHEDULES``)."""
    schedules_problem: str | None = None
    """Why ``LOOM_SCHEDULES`` could not be read, if it could not."""


Reply = tuple[int, dict[str, Any]]


def _execution(rt: Runtime, execution_id: str) -> dict[str, Any]:
    return dump(ExecutionView.of(rt.engine.state(execution_id), rt.registry))


def start_execution(rt: Runtime, req: Request) -> Reply:
    request = parse_start_request(req.body, req.is_base64_encoded)
    req.access.check("start", request.workflow, req.caller)
    result = rt.engine.start(request.workflow, request.input, request.idempotency_token, by=req.caller,
                             version=request.version)
    return (202 if result.created else 200), dump(ExecutionStarted.of(result.execution, result.created))


def list_executions(rt: Runtime, req: Request) -> Reply:
    q = parse_list_query(req.query)
    page = rt.engine.operator.list(workflow=q.workflow, status=q.status, started_after=q.started_after,
                                   started_before=q.started_before, limit=q.limit, next_token=q.next_token)
    return 200, dump(ListReply.of(page.executions, page.next_token))


def get_execution(rt: Runtime, req: Request) -> Reply:
    return 200, _execution(rt, req.params["execution_id"])


def get_history(rt: Runtime, req: Request) -> Reply:
    eid = req.params["execution_id"]
    q = parse_page_query(req.query)
    view = rt.engine.operator.history_page(eid, q.limit, q.next_token)
    consumed = rt.engine.operator.consumed_events(eid) if q.next_token is None else None
    return 200, responses.history_reply(eid, view, consumed)


def get_events(rt: Runtime, req: Request) -> Reply:
    eid = req.params["execution_id"]
    q = parse_page_query(req.query, default_limit=100)
    events, consumed, token = rt.engine.operator.events(eid, q.limit, q.next_token)
    return 200, responses.events_reply(eid, events, consumed, token)


def get_operations(rt: Runtime, req: Request) -> Reply:
    eid = req.params["execution_id"]
    q = parse_page_query(req.query, default_limit=100)
    operations, token = rt.engine.operator.operations(eid, q.limit, q.next_token)
    return 200, responses.operations_reply(eid, operations, token)


def cancel_execution(rt: Runtime, req: Request) -> Reply:
    request = parse_cancel_request(req.body, req.is_base64_encoded)
    req.access.check_execution("operate", rt.engine, req.params["execution_id"], req.caller)
    e = rt.engine.operator.cancel(req.params["execution_id"], by=req.caller, reason=request.reason)
    return 200, _execution(rt, e.execution_id)


def redrive_execution(rt: Runtime, req: Request) -> Reply:
    to_version = parse_redrive_request(req.body, req.is_base64_encoded)
    req.access.check_execution("operate", rt.engine, req.params["execution_id"], req.caller)
    e = rt.engine.operator.redrive(req.params["execution_id"], by=req.caller, to_version=to_version)
    return 202, _execution(rt, e.execution_id)


def wake_execution(rt: Runtime, req: Request) -> Reply:
    no_body(req.body, "POST /executions/{id}/wake")
    req.access.check_execution("operate", rt.engine, req.params["execution_id"], req.caller)
    e = rt.engine.operator.wake(req.params["execution_id"], by=req.caller)
    return 200, _execution(rt, e.execution_id)


def send_event(rt: Runtime, req: Request) -> Reply:
    request = parse_event_request(req.body, req.is_base64_encoded, "POST /executions/{id}/events/{name}")
    req.access.check_execution("send", rt.engine, req.params["execution_id"], req.caller)
    sent = rt.engine.operator.send_event(req.params["execution_id"], req.params["name"], request.data,
                                         by=req.caller, event_id=request.event_id)
    return 202, dump(EventSentView(**sent.as_dict()))


def complete_callback(rt: Runtime, req: Request) -> Reply:
    request = parse_event_request(req.body, req.is_base64_encoded, "POST /callbacks/{token}", allow_id=False)
    req.access.check_callback(rt.engine, req.params["token"], req.caller)
    sent = rt.engine.operator.complete_callback(req.params["token"], request.data, by=req.caller)
    return 200, dump(EventSentView(**sent.as_dict()))


def list_workflows(rt: Runtime, req: Request) -> Reply:
    return 200, workflows_reply(rt, req.query or {})


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    """Powertools' syntax: ``<name>`` is a path parameter."""
    func: Callable[[Runtime, Request], Reply] = field(compare=False)
    doc: str = ""

    @property
    def shown(self) -> str:
        """The path as the docs write it: ``/executions/{id}/events/{name}``."""
        return re.sub(r"<(\w+)>", lambda m: "{id}" if m[1] == "execution_id" else "{" + m[1] + "}", self.path)


ROUTES: tuple[Route, ...] = (
    Route("POST", "/executions", start_execution, "start (idempotent with idempotency_token)"),
    Route("GET", "/executions", list_executions, "list and search, newest first, paginated"),
    Route("GET", "/executions/<execution_id>", get_execution, "status, current step, context, error, next wake time"),
    Route("GET", "/executions/<execution_id>/history", get_history,
          "step records in order (paginated by count and size), with the first page of actions and events"),
    Route("GET", "/executions/<execution_id>/events", get_events, "the events sent to the execution (paginated)"),
    Route("GET", "/executions/<execution_id>/operations", get_operations, "the operators' actions (paginated)"),
    Route("POST", "/executions/<execution_id>/cancel", cancel_execution, "end a live execution CANCELLED"),
    Route("POST", "/executions/<execution_id>/redrive", redrive_execution, "resume a FAILED execution from its failed step"),
    Route("POST", "/executions/<execution_id>/wake", wake_execution, "end the current sleep, retry backoff or event wait now"),
    Route("POST", "/executions/<execution_id>/events/<name>", send_event,
          "deliver an event (kept until a wait_for_event of that name consumes it)"),
    Route("POST", "/callbacks/<token>", complete_callback, "complete the wait a callback token was issued for, once"),
    Route("GET", "/workflows", list_workflows, "registered workflows, their steps, retry policies and input schemas"),
    Route("GET", "/schedules", list_schedules, "the deployed schedules, each with its next firing and its last one"),
)

ROUTE_LIST = ", ".join(f"{r.method} {r.shown}" for r in ROUTES)


def _shapes() -> dict[re.Pattern[str], list[str]]:
    """Path shape -> its methods, for telling a wrong method (405) from an unknown path (404). Matched
    whole (\\A...\\Z, fullmatch): ``$`` also matches before a trailing "\\n"."""
    shapes: dict[str, list[str]] = {}
    for r in ROUTES:
        shapes.setdefault(re.sub(r"<\w+>", "[^/]+", r.path), []).append(r.method)
    return {re.compile(rf"\A{shape}\Z"): sorted(methods) for shape, methods in shapes.items()}


SHAPES = _shapes()


def allowed_methods(path: str) -> list[str] | None:
    """The methods a known path takes (a 405 names them), or None for an unknown path (a 404)."""
    return next((methods for pattern, methods in SHAPES.items() if pattern.fullmatch(path)), None)
