"""Control-plane Lambda: Loom's JSON API behind a Function URL with AWS_IAM auth. The routes are
``routes.ROUTES`` (404 and 405 are built from it); every reply is JSON, errors included. EventBridge
Scheduler also invokes it directly with a schedule's firing (``schedules.py``)."""

from __future__ import annotations

import gc

gc.disable()  # until init_done() at the end of this module: a cold start's collections are wasted work

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core.adapters.lambda_runtime import init_done, lambda_setup

from .access import AccessPolicy
from .errors import ApiError, error_for
from .request_models import caller_identity
from .routes import ROUTE_LIST, ROUTES, Request, Route, allowed_methods
from .schedules import is_schedule_event, on_schedule
from .schedules import load as load_schedules

setup = lambda_setup()
logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
app = LambdaFunctionUrlResolver()
access = AccessPolicy.from_env(os.environ)
if access.problem is not None:
    logger.error("LOOM_WORKFLOW_ACCESS is invalid: start and the operator's actions are refused",
                 extra={"problem": access.problem})
schedules, schedules_problem = load_schedules(os.environ)
if schedules_problem is not None:
    logger.error("LOOM_SCHEDULES is invalid: every firing fails and GET /schedules answers 500 until it is fixed",
                 extra={"problem": schedules_problem})


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


def _endpoint(route: Route) -> Callable[..., Response]:
    def endpoint(**params: str) -> Response:
        event = app.current_event
        request = Request(params=params, body=event.body, is_base64_encoded=event.is_base64_encoded,
                          query=event.query_string_parameters,
                          caller=caller_identity(event.raw_event.get("requestContext")), access=access,
                          schedules=schedules, schedules_problem=schedules_problem)
        return _json(*route.func(runtime, request))
    return endpoint


for _route in ROUTES:
    app.route(_route.path, method=_route.method)(_endpoint(_route))


@app.not_found
def no_route(_: NotFoundError) -> Response:
    event = app.current_event
    method, path = event.http_method.upper(), event.path
    allowed = allowed_methods(path)
    if allowed is not None:
        allow = ", ".join(allowed)
        return _reject(ApiError(405, "method_not_allowed", f"{method} is not supported on {path}; use {allow}",
                                headers={"Allow": allow}))
    return _reject(ApiError(404, "not_found", f"no route for {method} {path}; routes are {ROUTE_LIST}"))


def _whole_path(app: LambdaFunctionUrlResolver, next_middleware: Callable[..., Response]) -> Response:
    """Powertools matches routes with ``$``, which lets "/executions\n" through: match the path whole."""
    if allowed_methods(app.current_event.path) is None:
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
    if is_schedule_event(event):
        return on_schedule(runtime, schedules, schedules_problem, event, context.get_remaining_time_in_millis()).as_dict()
    return app.resolve(event, context)


init_done()
