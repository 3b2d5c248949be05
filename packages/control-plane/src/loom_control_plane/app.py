"""The control plane's Function URL app: ``routes.ROUTES`` on a Powertools ``LambdaFunctionUrlResolver``,
every reply JSON, errors included (404 and 405 are built from the routes; an unexpected error is a 500
that says what to do)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError

from engine_core.adapters.bootstrap import Runtime

from .access import AccessPolicy
from .errors import ApiError, error_for
from .request_models import caller_identity
from .routes import ROUTE_LIST, ROUTES, Request, Route, allowed_methods

Settings = Callable[[], tuple[AccessPolicy, Any, "str | None"]]
"""What a request is checked and answered with, read at each request: the access policy, the schedules
document and its problem (``schedules.load``)."""


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


def build_app(runtime: Runtime, logger: Logger, settings: Settings) -> LambdaFunctionUrlResolver:
    """The resolver for ``handler``: each route's function called with ``runtime`` and the request."""
    app = LambdaFunctionUrlResolver()

    def reject(error: ApiError) -> Response:
        logger.info("request rejected", extra={"status": error.status, "error": error.code})
        return _json(error.status, error.body(), error.headers)

    def endpoint_for(route: Route) -> Callable[..., Response]:
        def endpoint(**params: str) -> Response:
            event = app.current_event
            access, schedules, schedules_problem = settings()
            # A Function URL hands the path over as the client encoded it: a segment is read (and named in
            # a refusal) as the client meant it.
            params = {key: urllib.parse.unquote(value) for key, value in params.items()}
            request = Request(params=params, body=event.body, is_base64_encoded=event.is_base64_encoded,
                              query=event.query_string_parameters,
                              caller=caller_identity(event.raw_event.get("requestContext")), access=access,
                              schedules=schedules, schedules_problem=schedules_problem)
            return _json(*route.func(runtime, request))
        return endpoint

    for route in ROUTES:
        app.route(route.path, method=route.method)(endpoint_for(route))

    @app.not_found
    def no_route(_: NotFoundError) -> Response:
        event = app.current_event
        method, path = event.http_method.upper(), event.path
        allowed = allowed_methods(path)
        if allowed is not None:
            allow = ", ".join(allowed)
            return reject(ApiError(405, "method_not_allowed", f"{method} is not supported on {path}; use {allow}",
                                   headers={"Allow": allow}))
        return reject(ApiError(404, "not_found", f"no route for {method} {path}; routes are {ROUTE_LIST}"))

    def whole_path(app: LambdaFunctionUrlResolver, next_middleware: Callable[..., Response]) -> Response:
        """Powertools matches routes with ``$``, which lets "/executions\\n" through: match the path whole."""
        if allowed_methods(app.current_event.path) is None:
            return no_route(NotFoundError())
        return next_middleware(app)

    app.use(middlewares=[whole_path])

    @app.exception_handler(Exception)
    def on_error(exc: Exception) -> Response:
        error = error_for(exc)
        if error is None:
            logger.exception("unhandled error")
            error = ApiError(500, "internal_error", "the request failed on our side; retry it (a start with an "
                                                    "idempotency_token is safe to repeat) and report it if it persists")
        return reject(error)

    return app


__all__ = ["Settings", "build_app"]
