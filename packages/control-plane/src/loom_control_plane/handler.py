"""Control-plane Lambda: Loom's JSON API behind a Function URL with AWS_IAM auth.

Routes (``ROUTES`` below is the one table; 404 and 405 answers are built from it):
    POST /executions                  start (idempotent with idempotency_token)
    GET  /executions                  list and search, newest first, paginated
    GET  /executions/{id}             status, current step, context, error, next wake time
    GET  /executions/{id}/history     step records in order (paginated) and the operators' actions
    POST /executions/{id}/cancel      end a live execution CANCELLED
    POST /executions/{id}/redrive     resume a FAILED execution from its failed step
    POST /executions/{id}/wake        end the current sleep, retry backoff or event wait now
    POST /executions/{id}/events/{n}  deliver event n (kept until a wait_for_event(n) consumes it)
    POST /callbacks/{token}           complete the wait a callback token was issued for, once
    GET  /workflows                   registered workflows, their steps and retry policies

Every response is JSON, errors included: ``{"error": code, "message": text}``, never a stack trace.
Start, cancel, redrive and wake record who asked: the IAM principal of the request (``caller_identity``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core import views
from engine_core.bootstrap import from_environment

from .api_models import (
    ApiError,
    ExecutionStarted,
    caller_identity,
    error_for,
    list_entry_view,
    no_body,
    operation_view,
    parse_cancel_request,
    parse_event_request,
    parse_list_query,
    parse_page_query,
    parse_start_request,
)

logger = Logger()
metrics = Metrics()
# Invocations that only acknowledge or reject emit no metric; that is normal, not worth a warning.
warnings.filterwarnings("ignore", "No application metrics to publish")
runtime = from_environment(metrics=metrics)
copy_config_to_registered_loggers(source_logger=logger, include={"engine_core"})
app = LambdaFunctionUrlResolver()


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


def _caller() -> str:
    return caller_identity(app.current_event.raw_event.get("requestContext"))


def _view(execution_id: str) -> dict[str, Any]:
    return views.execution_view(runtime.engine.state(execution_id), runtime.registry)


def start_execution() -> Response:
    event = app.current_event
    request = parse_start_request(event.body, event.is_base64_encoded)
    result = runtime.engine.start(request.workflow, request.input, request.idempotency_token, by=_caller())
    e = result.execution
    reply = ExecutionStarted.of(e.execution_id, e.workflow, e.status.value, e.current_step, result.created)
    return _json(202 if result.created else 200, reply.body())


def list_executions() -> Response:
    q = parse_list_query(app.current_event.query_string_parameters)
    page = runtime.engine.operator.list(workflow=q.workflow, status=q.status, started_after=q.started_after,
                                        started_before=q.started_before, limit=q.limit, next_token=q.next_token)
    return _json(200, {"executions": [list_entry_view(x) for x in page.executions], "next_token": page.next_token})


def get_execution(execution_id: str) -> Response:
    return _json(200, _view(execution_id))


def get_history(execution_id: str) -> Response:
    q = parse_page_query(app.current_event.query_string_parameters)
    steps, operations, token = runtime.engine.operator.history_page(execution_id, q.limit, q.next_token)
    reply = {"execution_id": execution_id, "steps": [views.record_view(r) for r in steps],
             "operations": [operation_view(r) for r in operations], "next_token": token}
    if q.next_token is None:  # like operations: with the first page
        reply["events"] = runtime.engine.operator.events(execution_id)
    return _json(200, reply)


def cancel_execution(execution_id: str) -> Response:
    event = app.current_event
    request = parse_cancel_request(event.body, event.is_base64_encoded)
    e = runtime.engine.operator.cancel(execution_id, by=_caller(), reason=request.reason)
    return _json(200, _view(e.execution_id))


def redrive_execution(execution_id: str) -> Response:
    no_body(app.current_event.body, "POST /executions/{id}/redrive")
    e = runtime.engine.operator.redrive(execution_id, by=_caller())
    return _json(202, _view(e.execution_id))


def wake_execution(execution_id: str) -> Response:
    no_body(app.current_event.body, "POST /executions/{id}/wake")
    e = runtime.engine.operator.wake(execution_id, by=_caller())
    return _json(200, _view(e.execution_id))


def send_event(execution_id: str, name: str) -> Response:
    event = app.current_event
    request = parse_event_request(event.body, event.is_base64_encoded, "POST /executions/{id}/events/{name}")
    sent = runtime.engine.operator.send_event(execution_id, name, request.data, by=_caller(), event_id=request.event_id)
    return _json(202, sent.as_dict())


def complete_callback(token: str) -> Response:
    event = app.current_event
    request = parse_event_request(event.body, event.is_base64_encoded, "POST /callbacks/{token}", allow_id=False)
    sent = runtime.engine.operator.complete_callback(token, request.data, by=_caller())
    return _json(200, sent.as_dict())


def list_workflows() -> Response:
    return _json(200, {"workflows": [wf.describe() for wf in runtime.registry.all()]})


ROUTES: list[tuple[str, str, Callable[..., Response]]] = [
    ("POST", "/executions", start_execution),
    ("GET", "/executions", list_executions),
    ("GET", "/executions/<execution_id>", get_execution),
    ("GET", "/executions/<execution_id>/history", get_history),
    ("POST", "/executions/<execution_id>/cancel", cancel_execution),
    ("POST", "/executions/<execution_id>/redrive", redrive_execution),
    ("POST", "/executions/<execution_id>/wake", wake_execution),
    ("POST", "/executions/<execution_id>/events/<name>", send_event),
    ("POST", "/callbacks/<token>", complete_callback),
    ("GET", "/workflows", list_workflows),
]
for _method, _path, _func in ROUTES:
    app.route(_path, method=_method)(_func)


def _shapes() -> dict[re.Pattern[str], list[str]]:
    """Path shape -> its methods, for telling a wrong method (405) from an unknown path (404).
    Matched whole (\\A...\\Z, fullmatch): ``$`` also matches before a trailing "\\n"."""
    shapes: dict[str, list[str]] = {}
    for method, path, _ in ROUTES:
        shapes.setdefault(re.sub(r"<\w+>", "[^/]+", path), []).append(method)
    return {re.compile(rf"\A{shape}\Z"): sorted(methods) for shape, methods in shapes.items()}


_SHAPES = _shapes()
def _shown(path: str) -> str:
    return re.sub(r"<(\w+)>", lambda m: "{id}" if m[1] == "execution_id" else "{" + m[1] + "}", path)


_ROUTE_LIST = ", ".join(f"{m} {_shown(p)}" for m, p, _ in ROUTES)


@app.not_found
def no_route(_: NotFoundError) -> Response:
    event = app.current_event
    method, path = event.http_method.upper(), event.path
    allowed = next((m for pattern, m in _SHAPES.items() if pattern.fullmatch(path)), None)
    if allowed is not None:
        allow = ", ".join(allowed)
        return _reject(ApiError(405, "method_not_allowed", f"{method} is not supported on {path}; use {allow}",
                                headers={"Allow": allow}))
    return _reject(ApiError(404, "not_found", f"no route for {method} {path}; routes are {_ROUTE_LIST}"))


def _whole_path(app: LambdaFunctionUrlResolver, next_middleware: Callable[..., Response]) -> Response:
    """Powertools matches routes with ``$``, which lets "/executions\n" through: match the path whole."""
    if not any(pattern.fullmatch(app.current_event.path) for pattern in _SHAPES):
        return no_route(NotFoundError())
    return next_middleware(app)


app.use(middlewares=[_whole_path])


@app.exception_handler(Exception)
def on_error(exc: Exception) -> Response:
    error = error_for(exc)
    if error is None:
        logger.exception("unhandled error")
        error = ApiError(500, "internal_error", "the request failed on our side; retry it (a start with an "
                                                "idempotency_token is safe to repeat) and report it if it persists")
    return _reject(error)


def _reject(error: ApiError) -> Response:
    logger.info("request rejected", extra={"status": error.status, "error": error.code})
    return _json(error.status, error.body(), error.headers)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
