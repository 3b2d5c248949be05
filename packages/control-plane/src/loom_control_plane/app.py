"""The control plane's Function URL app: a request (payload format 2.0) matched against ``routes.ROUTES``,
every reply JSON, errors included (404 and 405 are built from the routes; an unexpected error is a 500
that says what to do).

The route table already builds the 404 and 405 replies and the route list in them, so matching it is a
few lines here. Powertools' resolver would add nothing the API uses, and importing it loads every event
source's resolver and data class, with asyncio: without it the handler's init in its zip went from 125 to
90 ms over the floor (``python -m bench --only coldstart``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

from engine_core.adapters.bootstrap import Runtime

from .access import AccessPolicy
from .errors import ApiError, error_for
from .request_models import caller_identity
from .routes import ROUTE_LIST, ROUTES, Request, Route, allowed_methods

Settings = Callable[[], tuple[AccessPolicy, Any, "str | None"]]
"""What a request is checked and answered with, read at each request: the access policy, the schedules
document and its problem (``schedules.load``)."""

INTERNAL_ERROR = ApiError(500, "internal_error", "the request failed on our side; retry it (a start with an "
                                                 "idempotency_token is safe to repeat) and report it if it persists")


def _pattern(path: str) -> re.Pattern[str]:
    """``/executions/<execution_id>`` -> a pattern matched whole, one path segment per parameter."""
    return re.compile(re.sub(r"<(\w+)>", r"(?P<\1>[^/]+)", path))


def _reply(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A Function URL response: the body as compact JSON."""
    return {"statusCode": status, "headers": {"Content-Type": "application/json", **(headers or {})},
            "body": json.dumps(body, separators=(",", ":")), "isBase64Encoded": False, "cookies": []}


class App:
    """Answers Function URL requests with the routes' functions, called with ``runtime`` and the request."""

    def __init__(self, runtime: Runtime, logger: Logger, settings: Settings) -> None:
        self.runtime, self.logger, self.settings = runtime, logger, settings
        self.routes = [(route.method, _pattern(route.path), route) for route in ROUTES]

    def resolve(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        """The reply to one Function URL request; never raises."""
        try:
            return self._answer(event)
        except Exception as exc:  # noqa: BLE001 - a request never escapes as a Lambda error
            error = error_for(exc)
            if error is None:
                self.logger.exception("unhandled error")
                error = INTERNAL_ERROR
            return self._reject(error)

    def _answer(self, event: dict[str, Any]) -> dict[str, Any]:
        http = (event.get("requestContext") or {}).get("http") or {}
        method, path = str(http.get("method") or "").upper(), str(event.get("rawPath") or http.get("path") or "/")
        if not method:
            raise ApiError(400, "invalid_request", "the control plane answers Function URL requests (payload format "
                                                   "2.0: requestContext.http.method and rawPath) and EventBridge "
                                                   f"Scheduler firings; this event is neither. Call {ROUTE_LIST}")
        route, params = self._match(method, path)
        access, schedules, schedules_problem = self.settings()
        # A Function URL hands the path over as the client encoded it: a segment is read (and named in a
        # refusal) as the client meant it.
        request = Request(params={key: urllib.parse.unquote(value) for key, value in params.items()},
                          body=event.get("body"), is_base64_encoded=bool(event.get("isBase64Encoded")),
                          query=event.get("queryStringParameters"),
                          caller=caller_identity(event.get("requestContext")), access=access,
                          schedules=schedules, schedules_problem=schedules_problem)
        return _reply(*route.func(self.runtime, request))

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route for ``method path`` and its parameters, or the 404 or 405 naming what would work."""
        for route_method, pattern, route in self.routes:
            if route_method == method and (found := pattern.fullmatch(path)) is not None:
                return route, found.groupdict()
        allowed = allowed_methods(path)
        if allowed is not None:
            allow = ", ".join(allowed)
            raise ApiError(405, "method_not_allowed", f"{method} is not supported on {path}; use {allow}",
                           headers={"Allow": allow})
        raise ApiError(404, "not_found", f"no route for {method} {path}; routes are {ROUTE_LIST}")

    def _reject(self, error: ApiError) -> dict[str, Any]:
        self.logger.info("request rejected", extra={"status": error.status, "error": error.code})
        return _reply(error.status, error.body(), error.headers)


__all__ = ["App", "Settings"]
