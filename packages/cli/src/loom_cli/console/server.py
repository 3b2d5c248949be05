"""The console's HTTP server: pages, static files, the /api/* forwarder and the SSE live view.

It listens on 127.0.0.1 only. The browser never talks to the control plane: ``/api/<path>`` is sent on
through the SDK's client (:class:`~loom_cli.sdk.LoomClient`), unsigned to the local stack and
SigV4-signed with the caller's AWS credentials for a Function URL, so no credential reaches the page.
Because a signing proxy on localhost is worth attacking from other web pages, every request must name
this server in its Host header (no DNS rebinding), and every /api call must carry the page's
per-process token in the ``x-loom-console-token`` header (a cross-site form or fetch cannot set it
without a CORS preflight, which this server never grants).

Live updates: ``/sse/executions/{id}`` follows ``LoomClient.stream`` (a poll every ``interval_s``, an
ended execution five times less often, and at once after an action sent through this console), and
``/sse/list`` polls the first page; each pushes the re-rendered fragment (``pages.py``) when it changed.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from ..args import not_json_constant
from ..sdk import LoomClient, LoomError
from ..sdk.errors import INVALID_ARGUMENT
from ..sdk.models import History, ListPage, Workflow
from . import forms, pages
from .schedules_page import schedules_body
from ._html import esc
from .icons import FAVICON

MAX_BODY_BYTES = 1 << 20
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
WORKFLOWS_TTL_S = 30.0
HEARTBEAT_S = 15.0
ENDED_SLOWER = 5
"""An ended execution changes only by an operator's redrive: poll it this many times less often."""
TOKEN_HEADER = "x-loom-console-token"
DRAIN_BYTES = 16 * 1024 * 1024
"""An oversized body up to this is read off before the 413, so the caller (still sending) reads the answer."""
_ACTION = re.compile(r"\A/executions/([^/]+)/(cancel|redrive|wake|events/[^/]+)\Z")


def _problem(exc: LoomError) -> tuple[int, dict[str, Any]]:
    if exc.status is not None:  # the API's own answer: a refusal, or its failure
        return exc.status, exc.document
    if exc.code == INVALID_ARGUMENT:  # what the page sent, refused before any request: the caller's to mend
        return 400, {"error": exc.code, "message": exc.message}
    return 502, {"error": exc.code, "message": exc.message}



class Console:
    """A running console: ``Console(client).start()`` serves it on a free port of 127.0.0.1.

    Example:
        >>> console = Console(LoomClient("http://127.0.0.1:4566/")).start()
        >>> console.url            # 'http://127.0.0.1:54321/'
        >>> console.stop()
    """

    def __init__(self, client: LoomClient, port: int = 0, interval_s: float = 1.0):
        self.client, self.interval_s = client, max(0.1, interval_s)
        self.token = secrets.token_urlsafe(24)
        self.stopping = threading.Event()
        self._workflows: tuple[float, list[Workflow]] | None = None
        self._lock = threading.Lock()
        self._wakes: dict[str, set[threading.Event]] = {}
        self._more: dict[str, tuple[float, bool]] = {}
        handler = type("Handler", (_Handler,), {"console": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread: threading.Thread | None = None

    def start(self) -> Console:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="loom-console", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self._lock:
            for wakes in self._wakes.values():
                for wake in wakes:
                    wake.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def workflows(self) -> list[Workflow]:
        """``GET /workflows``, kept for WORKFLOWS_TTL_S (the step list of a deployment changes rarely)."""
        with self._lock:
            if self._workflows and time.monotonic() - self._workflows[0] < WORKFLOWS_TTL_S:
                return self._workflows[1]
        workflows = self.client.workflows()
        with self._lock:
            self._workflows = (time.monotonic(), workflows)
        return workflows

    def pinned(self, e) -> Workflow | None:
        """The workflow as the execution runs it: None when its pinned version is not the newest (the timeline
        then draws what its history holds, never another version's steps)."""
        wf = self.workflow(e.workflow)
        return wf if wf is not None and wf.version == e.workflow_version else None

    def workflow(self, name: str | None) -> Workflow | None:
        try:
            return next((w for w in self.workflows() if w.name == name), None)
        except LoomError:
            return None

    # -- live views: an action sent through this console wakes the streams of its execution at once --
    def watching(self, execution_id: str) -> threading.Event:
        wake = threading.Event()
        with self._lock:
            self._wakes.setdefault(execution_id, set()).add(wake)
        return wake

    def unwatch(self, execution_id: str, wake: threading.Event) -> None:
        with self._lock:
            self._wakes.get(execution_id, set()).discard(wake)

    def nudge(self, execution_id: str) -> None:
        with self._lock:
            for wake in self._wakes.get(execution_id, ()):
                wake.set()

    def listing(self, workflow: str | None, status: str | None, next_token: str | None, limit: int) -> ListPage:
        """A page, its ``next_token`` kept only when an older page has executions in it. Whether one does is
        looked up once per token a while (the list view polls every interval; older entries rarely change)."""
        page = self.client.list_page(workflow=workflow, status=status, next_token=next_token, limit=limit)
        token = page.next_token
        if not token:
            return page
        key = f"{workflow}|{status}|{token}"
        with self._lock:
            known = self._more.get(key)
        if known is None or time.monotonic() - known[0] > WORKFLOWS_TTL_S:
            after = self.client.list_page(workflow=workflow, status=status, next_token=token, limit=1)
            known = (time.monotonic(), bool(after.executions))
            with self._lock:
                self._more[key] = known
        return page if known[1] else page.model_copy(update={"next_token": None})


class _Handler(BaseHTTPRequestHandler):
    console: Console
    protocol_version = "HTTP/1.1"
    server_version = "loom-console"

    def log_message(self, *args: Any) -> None:  # the terminal shows the URL, not every request
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        if self.headers.get("host") not in (f"127.0.0.1:{self.console.port}", f"localhost:{self.console.port}"):
            return self._send_json(403, {"error": "forbidden_host", "message": "the console answers only to "
                                         f"127.0.0.1:{self.console.port}"})
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path, dict(urllib.parse.parse_qsl(split.query))
        try:
            if path.startswith("/api/"):
                return self._forward(method, path[4:], split.query)
            if method != "GET":
                return self._send_json(405, {"error": "method_not_allowed", "message": f"{method} {path}"})
            if path in ("/favicon.ico", "/static/favicon.svg"):
                return self._send(200, FAVICON.encode(), "image/svg+xml", {"cache-control": "max-age=86400"})
            if path.startswith("/static/"):
                return self._static(path[len("/static/"):])
            if path.startswith("/sse/"):
                return self._sse(path[len("/sse"):], query)
            return self._page(path, query)
        except OSError:  # the browser went away (a closed tab ends its event stream this way)
            return None

    def _page(self, path: str, query: dict[str, str]) -> None:
        c, token = self.console, self.console.token
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        try:
            if not parts:
                workflow, status = query.get("workflow") or None, (query.get("status") or "").upper() or None
                next_token = query.get("next_token") or None
                raw_limit = query.get("limit") or "20"
                if not (raw_limit.isascii() and raw_limit.isdigit()):
                    return self._error_page(400, "invalid_request", f"limit must be a whole number from 1 to 100, got "
                                                                    f"{raw_limit!r}")
                limit = int(raw_limit)
                listing = c.listing(workflow, status, next_token, limit)
                names = [w.name for w in c.workflows()]
                return self._send_html(200, pages.list_page(listing, names, workflow, status, next_token, token))
            if parts == ["workflows"]:
                return self._send_html(200, pages.workflows_page(c.workflows(), token))
            if parts == ["schedules"]:
                body = schedules_body(c.client.schedules())
                return self._send_html(200, pages.page("Schedules", body, token))
            if len(parts) == 3 and parts[0] == "workflows" and parts[2] == "start":
                wf = c.workflow(parts[1])
                if wf is None:
                    return self._error_page(404, "unknown_workflow", f"no workflow named {parts[1]!r}")
                return self._send_html(200, forms.start_form(wf, token))
            if len(parts) == 2 and parts[0] == "executions":
                e, history = c.client.get(parts[1]), c.client.history(parts[1])
                return self._send_html(200, pages.execution_page(e, history, c.pinned(e), token))
        except LoomError as exc:
            status, doc = _problem(exc)
            return self._error_page(status, doc["error"], doc["message"])
        return self._error_page(404, "not_found", f"no page at {path}")

    def _error_page(self, status: int, code: str, message: str) -> None:
        body = f'<h1>{esc(code)}</h1><pre class="error big"><b>{esc(code)}</b>: {esc(message)}</pre>' \
               '<p><a href="/">back to the executions</a></p>'
        self._send_html(status, pages.page(code, body, self.console.token))

    def _static(self, name: str) -> None:
        if name not in STATIC:
            return self._send_json(404, {"error": "not_found", "message": f"no static file {name!r}"})
        data = resources.files(__package__).joinpath("static", name).read_bytes()
        self._send(200, data, STATIC[name], {"cache-control": "no-cache"})

    def _forward(self, method: str, api_path: str, raw_query: str) -> None:
        if not secrets.compare_digest(self.headers.get(TOKEN_HEADER, ""), self.console.token):
            return self._send_json(403, {"error": "forbidden", "message": f"an /api call needs the page's "
                                         f"{TOKEN_HEADER} header; reload the console page"})
        body = None
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            if length <= DRAIN_BYTES:  # read it off first, so the caller still sending it gets this answer
                for start in range(0, length, 65536):
                    self.rfile.read(min(65536, length - start))
            return self._send_json(413, {"error": "input_too_large", "message": (
                f"the request body is {length:,} bytes, over the {MAX_BODY_BYTES:,} the console forwards (the API "
                "takes request bodies of at most 256 KB: keep large data elsewhere, such as S3, and pass its key)")})
        if length:
            try:
                body = json.loads(self.rfile.read(length), parse_constant=not_json_constant)
            except ValueError as exc:
                return self._send_json(400, {"error": "invalid_json", "message": f"the body is not JSON: {exc}"})
        target = api_path + (f"?{raw_query}" if raw_query else "")
        try:
            status, answer = self.console.client.request(method, target, body)
        except LoomError as exc:
            return self._send_json(*_problem(exc))
        action = _ACTION.match(api_path) if method == "POST" else None
        if action:  # the page shows the result now, not at the next (slower, once ended) poll
            self.console.nudge(urllib.parse.unquote(action.group(1)))
        self._send_json(status, answer)

    # ------------------------------------------------------------ live view

    def _sse(self, path: str, query: dict[str, str]) -> None:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if len(parts) == 2 and parts[0] == "executions":
            return self._stream_execution(parts[1])
        if parts == ["list"]:
            return self._stream_list(query.get("workflow") or None, (query.get("status") or "").upper() or None)
        return self._send_json(404, {"error": "not_found", "message": f"no event stream at {path}"})

    def _open_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"retry: 2000\n\n")

    def _stream_execution(self, eid: str) -> None:
        c = self.console
        wake = c.watching(eid)
        beat = _Heartbeat(self)
        self._open_stream()
        try:
            for change in c.client.stream(eid, interval_s=c.interval_s, ended_interval_s=c.interval_s * ENDED_SLOWER,
                                          stop=c.stopping, wake=wake, on_poll=beat.maybe):
                if change.problem is not None:
                    self._event("problem", json.dumps(_problem(change.problem)[1]))
                elif change.execution is not None:
                    e, history = change.execution, change.history or History(execution_id=eid)
                    html = pages.execution_fragment(e, history, c.pinned(e),
                                                    failures=change.failed_attempts)
                    self._event("update", json.dumps({"html": html, "status": e.status}))
        finally:
            c.unwatch(eid, wake)

    def _stream_list(self, workflow: str | None, status: str | None) -> None:
        c = self.console
        beat = _Heartbeat(self)
        self._open_stream()
        last = None
        while not c.stopping.is_set():
            try:
                listing = c.listing(workflow, status, None, 20)
                if listing != last:
                    self._event("update", json.dumps({"html": pages.list_fragment(listing, workflow, status, None)}))
                    last = listing
            except LoomError as exc:
                self._event("problem", json.dumps(_problem(exc)[1]))
            beat.maybe()
            c.stopping.wait(c.interval_s)

    def _event(self, name: str, data: str) -> None:
        self.wfile.write(f"event: {name}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    # ------------------------------------------------------------ replies

    def _send_html(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/html; charset=utf-8")

    def _send_json(self, status: int, body: Any) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("x-content-type-options", "nosniff")
        self.send_header("referrer-policy", "no-referrer")
        self.send_header("content-security-policy", "default-src 'self'; frame-ancestors 'none'")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class _Heartbeat:
    """A comment line now and then, so proxies and the browser keep a quiet stream open."""

    def __init__(self, handler: _Handler):
        self.handler, self.last = handler, time.monotonic()

    def maybe(self) -> None:
        if time.monotonic() - self.last > HEARTBEAT_S:
            self.handler.wfile.write(b": keep-alive\n\n")
            self.handler.wfile.flush()
            self.last = time.monotonic()
