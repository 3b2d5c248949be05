"""Control-plane Lambda: Loom's JSON API behind a Function URL with AWS_IAM auth.

Routes:
    POST /executions                  start (idempotent with idempotency_token)
    GET  /executions/{id}             status, current step, context, error, next wake time
    GET  /executions/{id}/history     step records in order; unreadable ones flagged
    GET  /workflows                   registered workflows, their steps and retry policies

Every response is JSON, errors included: ``{"error": code, "message": text}``, never a stack trace.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core import views
from engine_core.bootstrap import from_environment

from .api_models import ApiError, ExecutionStarted, error_for, parse_start_request

logger = Logger()
metrics = Metrics()
# Invocations that only acknowledge or reject emit no metric; that is normal, not worth a warning.
warnings.filterwarnings("ignore", "No application metrics to publish")
runtime = from_environment(metrics=metrics)
copy_config_to_registered_loggers(source_logger=logger, include={"engine_core"})
app = LambdaFunctionUrlResolver()

# Path shapes and their methods, for telling a wrong method (405) from an unknown path (404).
# Matched whole (\A...\Z, fullmatch): `$` also matches before a trailing "\n".
_ROUTES = {re.compile(r"\A/executions\Z"): "POST", re.compile(r"\A/executions/[^/]+\Z"): "GET",
           re.compile(r"\A/executions/[^/]+/history\Z"): "GET", re.compile(r"\A/workflows\Z"): "GET"}


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


@app.post("/executions")
def start_execution() -> Response:
    event = app.current_event
    request = parse_start_request(event.body, event.is_base64_encoded)
    result = runtime.engine.start(request.workflow, request.input, request.idempotency_token)
    e = result.execution
    reply = ExecutionStarted.of(e.execution_id, e.workflow, e.status.value, e.current_step, result.created)
    return _json(202 if result.created else 200, reply.body())


@app.get("/executions/<execution_id>")
def get_execution(execution_id: str) -> Response:
    return _json(200, views.execution_view(runtime.engine.state(execution_id), runtime.registry))


@app.get("/executions/<execution_id>/history")
def get_history(execution_id: str) -> Response:
    records = runtime.engine.history(execution_id)
    return _json(200, {"execution_id": execution_id, "steps": [views.record_view(r) for r in records]})


@app.get("/workflows")
def list_workflows() -> Response:
    return _json(200, {"workflows": [wf.describe() for wf in runtime.registry.all()]})


@app.not_found
def no_route(_: NotFoundError) -> Response:
    event = app.current_event
    method, path = event.http_method.upper(), event.path
    allowed = next((m for pattern, m in _ROUTES.items() if pattern.fullmatch(path)), None)
    if allowed is not None:
        return _reject(ApiError(405, "method_not_allowed", f"{method} is not supported on {path}; use {allowed}",
                                headers={"Allow": allowed}))
    return _reject(ApiError(404, "not_found", (
        f"no route for {method} {path}; routes are POST /executions, GET /executions/{{id}}, "
        "GET /executions/{id}/history and GET /workflows")))


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
