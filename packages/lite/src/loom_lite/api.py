"""The control plane's HTTP API on 127.0.0.1: each request becomes the Function URL event (payload 2.0) the
deployed control plane receives, goes to that package's own handler (``loom_control_plane.handler``:
its routes, its errors, its 404 and 405, unchanged), and its reply goes back as HTTP. So ``loom``, the
console, MCP and ``LoomClient`` see exactly the API they see on AWS.

The handler module builds its runtime at import through ``lambda_setup``; here that seam hands it this
process's runtime (the SQLite store and queue) instead of one built from a Lambda's environment. Requests
are answered one at a time, as one Lambda container does (the resolver keeps the current event on itself).
Nobody is authenticated: the caller Loom records is ``local``, as on the local stack.
"""

from __future__ import annotations

import base64
import datetime as dt
import gc
import importlib
import json
import os
import sys
import threading
import urllib.parse
import uuid
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

from engine_core.adapters.bootstrap import Runtime
from engine_core.schedules.config import ENV as SCHEDULES_ENV
from engine_core.schedules.config import Schedules

HANDLER = "loom_control_plane.handler"
MAX_BODY_BYTES = 6 * 1024 * 1024
"""A Function URL's request limit."""
DRAIN_BYTES = 64 * 1024 * 1024
"""A refused body up to this size is read and dropped before the answer (a larger one: the connection closes)."""
LOCAL_IDENTITY = {"userArn": "local", "callerId": "local", "accountId": "000000000000"}
_TEXT_TYPES = ("text/", "application/json", "+json", "application/x-www-form-urlencoded")


@dataclass
class _Context:
    """What Powertools reads of a Lambda context."""

    function_name: str = "loom-lite-control-plane"
    memory_limit_in_mb: int = 0
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:loom-lite-control-plane"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    """The listen backlog: the standard library's 5 reset connections when a few dozen clients called at once."""


def load_handler(runtime: Runtime, schedules: Schedules | None = None) -> ModuleType:
    """A fresh import of the control plane's handler module, serving ``runtime`` (``GET /schedules``: ``schedules``,
    the ones this process fires)."""
    from aws_lambda_powertools import Logger, Metrics

    from engine_core.adapters import lambda_runtime

    def lite_setup(**_: Any) -> lambda_runtime.LambdaSetup:
        warnings.filterwarnings("ignore", lambda_runtime.NO_METRICS_WARNING)
        return lambda_runtime.LambdaSetup(Logger(service="loom-lite", level="WARNING"),
                                          Metrics(namespace="LoomLite", service="loom-lite"), runtime)

    original = lambda_runtime.lambda_setup
    lambda_runtime.lambda_setup = lite_setup
    # The handler module reads LOOM_SCHEDULES at import; here the runtime has read it already (an invalid one
    # refused `loom dev` at start, naming the problem) and fires what it lists: the routes list the same.
    deployment_schedules = os.environ.pop(SCHEDULES_ENV, None)
    try:
        sys.modules.pop(HANDLER, None)
        module = importlib.import_module(HANDLER)
        module.schedules, module.schedules_problem = schedules or Schedules(), None
        return module
    finally:
        if deployment_schedules is not None:
            os.environ[SCHEDULES_ENV] = deployment_schedules
        lambda_runtime.lambda_setup = original
        gc.enable()  # the handler's init turns it off until its last line; a failed import must not leave it off


def to_event(method: str, target: str, headers: list[tuple[str, str]], body: bytes, source_ip: str) -> dict[str, Any]:
    split = urllib.parse.urlsplit(target)
    path = split.path or "/"
    joined: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    now = dt.datetime.now(dt.timezone.utc)
    event: dict[str, Any] = {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": split.query, "headers": joined,
        "requestContext": {
            "accountId": LOCAL_IDENTITY["accountId"], "apiId": "loom-lite", "domainName": joined.get("host", "127.0.0.1"),
            "authorizer": {"iam": dict(LOCAL_IDENTITY)},
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                     "userAgent": joined.get("user-agent", "")},
            "requestId": str(uuid.uuid4()), "routeKey": "$default", "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"), "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if split.query:
        params: dict[str, str] = {}
        for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
            params[k] = f"{params[k]},{v}" if k in params else v
        event["queryStringParameters"] = params
    if body:
        content_type = joined.get("content-type", "").split(";")[0].strip().lower()
        textual = not content_type or any(content_type.startswith(t) or content_type.endswith(t) for t in _TEXT_TYPES)
        if textual:
            try:
                event["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                textual = False
        if not textual:
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    return event


def to_http(payload: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """A handler's return value as (status, headers, body), by a Function URL's rules."""
    if not (isinstance(payload, dict) and "statusCode" in payload):
        return 200, [("content-type", "application/json")], json.dumps(payload).encode()
    headers = [(str(k), str(v)) for k, v in (payload.get("headers") or {}).items()]
    for name, values in (payload.get("multiValueHeaders") or {}).items():
        headers.extend((str(name), str(v)) for v in values)
    body = payload.get("body")
    raw = b"" if body is None else base64.b64decode(body) if payload.get("isBase64Encoded") else (
        body if isinstance(body, str) else json.dumps(body)).encode()
    return int(payload["statusCode"]), headers, raw


class ApiServer:
    """The API on ``host:port`` (port 0: a free one) until ``stop()``."""

    def __init__(self, runtime: Runtime, host: str = "127.0.0.1", port: int = 0, schedules: Schedules | None = None):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the API listens on loopback only (nobody is authenticated), not {host!r}")
        self.module = load_handler(runtime, schedules)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "loom-lite"

            def _handle(self) -> None:
                text = self.headers.get("content-length") or "0"
                length = int(text) if text.isascii() and text.isdigit() else None
                if length is None or length > MAX_BODY_BYTES:
                    # Read what was sent (up to a bound), so the client gets this answer rather than a reset and
                    # none of the body is taken for a request of its own; then close the connection.
                    self.close_connection = True
                    if length is not None and length <= DRAIN_BYTES:
                        _drain(self.rfile, length)
                    error = {"error": "invalid_request", "message": f"content-length {text[:40]!r} is not a byte count"} \
                        if length is None else {"error": "input_too_large", "message": f"the body is {length} bytes; a "
                                                f"request takes at most {MAX_BODY_BYTES} (a Function URL's limit)"}
                    self._send(400 if length is None else 413, [("content-type", "application/json")],
                               json.dumps(error).encode())
                    return
                body = self.rfile.read(length) if length else b""
                event = to_event(self.command, self.path, list(self.headers.items()), body, self.client_address[0])
                status, headers, raw = outer.invoke(event)
                self._send(status, headers, raw)

            def _send(self, status: int, headers: list[tuple[str, str]], raw: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(raw)))
                if self.close_connection:
                    self.send_header("connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

            def log_message(self, fmt: str, *args: Any) -> None:  # the runtime's own log says what happened
                pass

        self.server = _Server((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def invoke(self, event: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            try:
                payload = self.module.handler(event, _Context())
            except Exception as exc:  # noqa: BLE001 - a function error: the Function URL answers 502
                return 502, [("content-type", "application/json")], json.dumps(
                    {"error": "internal_error", "message": f"the control plane failed: {type(exc).__name__}: {exc}"}
                ).encode()
        return to_http(payload)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, name="loom-lite-api", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _drain(stream: Any, length: int) -> None:
    """Read and drop ``length`` bytes of a request body (fewer if the client stops sending)."""
    while length > 0:
        chunk = stream.read(min(length, 1 << 16))
        if not chunk:
            return
        length -= len(chunk)
