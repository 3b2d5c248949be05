"""The console's HTTP server: pages, static files, the /api/* forwarder and the SSE live view.

It listens on 127.0.0.1 only. The browser never talks to the control plane: ``/api/<path>`` is sent on
through the CLI's :class:`~loom_cli.client.Client`, unsigned to the local stack and SigV4-signed with the
caller's AWS credentials for a Function URL, so no credential reaches the page. Because a signing proxy
on localhost is worth attacking from other web pages, every request must name this server in its Host
header (no DNS rebinding), and every /api call must carry the page's per-process token in the
``x-loom-console-token`` header (a cross-site form or fetch cannot set it without a CORS preflight,
which this server never grants).

Live updates: ``/sse/executions/{id}`` and ``/sse/list`` poll the API every ``interval_s`` and push the
re-rendered fragment (``pages.py``) as a server-sent event when the documents changed.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from ..client import ApiError, CliError, Client
from . import forms, pages
from ._html import ENDED, esc

MAX_BODY_BYTES = 1 << 20
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
WORKFLOWS_TTL_S = 30.0
HEARTBEAT_S = 15.0
TOKEN_HEADER = "x-loom-console-token"


class Console:
    """A running console: ``Console(client).start()`` serves it on a free port of 127.0.0.1.

    Example:
        >>> console = Console(Client.create("http://127.0.0.1:4566/")).start()
        >>> console.url            # 'http://127.0.0.1:54321/'
        >>> console.stop()
    """

    def __init__(self, client: Client, port: int = 0, interval_s: float = 1.0):
        self.client, self.interval_s = client, max(0.1, interval_s)
        self.token = secrets.token_urlsafe(24)
        self.stopping = threading.Event()
        self._workflows: tuple[float, dict] | None = None
        self._lock = threading.Lock()
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
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def workflows(self) -> dict:
        """``GET /workflows``, kept for WORKFLOWS_TTL_S (the step list of a deployment changes rarely)."""
        with self._lock:
            if self._workflows and time.monotonic() - self._workflows[0] < WORKFLOWS_TTL_S:
                return self._workflows[1]
        _, body = self.client.request("GET", "/workflows")
        with self._lock:
            self._workflows = (time.monotonic(), body)
        return body

    def workflow(self, name: str | None) -> dict | None:
        try:
            return next((w for w in self.workflows().get("workflows", []) if w.get("name") == name), None)
        except CliError:
            return None

    def execution_docs(self, execution_id: str) -> tuple[dict, dict]:
        from ..main import full_history

        quoted = urllib.parse.quote(execution_id, safe="")
        _, e = self.client.request("GET", f"/executions/{quoted}")
        return e, full_history(self.client, execution_id)


class _Handler(BaseHTTPRequestHandler):
    console: Console
    protocol_version = "HTTP/1.1"
    server_version = "loom-console"

    def log_message(self, *args: Any) -> None:  # the terminal shows the URL, not every request
        pass

    # ------------------------------------------------------------ dispatch

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
            if path.startswith("/static/"):
                return self._static(path[len("/static/"):])
            if path.startswith("/sse/"):
                return self._sse(path[len("/sse"):], query)
            return self._page(path, query)
        except OSError:  # the browser went away (a closed tab ends its event stream this way)
            return None

    # ------------------------------------------------------------ pages

    def _page(self, path: str, query: dict[str, str]) -> None:
        c, token = self.console, self.console.token
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        try:
            if not parts:
                workflow, status = query.get("workflow") or None, (query.get("status") or "").upper() or None
                next_token = query.get("next_token") or None
                limit = query.get("limit") if (query.get("limit") or "").isdigit() else "20"
                q = pages.list_query(workflow, status, next_token, int(limit))
                _, listing = c.client.request("GET", f"/executions?{q}")
                names = [w["name"] for w in c.workflows().get("workflows", [])]
                return self._send_html(200, pages.list_page(listing, names, workflow, status, next_token, token))
            if parts == ["workflows"]:
                return self._send_html(200, pages.workflows_page(c.workflows(), token))
            if len(parts) == 3 and parts[0] == "workflows" and parts[2] == "start":
                wf = c.workflow(parts[1])
                if wf is None:
                    return self._error_page(404, "unknown_workflow", f"no workflow named {parts[1]!r}")
                return self._send_html(200, forms.start_form(wf, token))
            if len(parts) == 2 and parts[0] == "executions":
                e, history = c.execution_docs(parts[1])
                return self._send_html(200, pages.execution_page(e, history, c.workflow(e.get("workflow")), token))
        except ApiError as exc:
            return self._error_page(exc.status, exc.code, exc.api_message)
        except CliError as exc:
            return self._error_page(502, "unreachable", str(exc))
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

    # ------------------------------------------------------------ /api forwarding

    def _forward(self, method: str, api_path: str, raw_query: str) -> None:
        if not secrets.compare_digest(self.headers.get(TOKEN_HEADER, ""), self.console.token):
            return self._send_json(403, {"error": "forbidden", "message": f"an /api call needs the page's "
                                         f"{TOKEN_HEADER} header; reload the console page"})
        body = None
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            return self._send_json(413, {"error": "input_too_large", "message": f"over {MAX_BODY_BYTES} bytes"})
        if length:
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as exc:
                return self._send_json(400, {"error": "invalid_json", "message": f"the body is not JSON: {exc}"})
        target = api_path + (f"?{raw_query}" if raw_query else "")
        try:
            status, answer = self.console.client.request(method, target, body)
        except ApiError as exc:
            return self._send_json(exc.status, exc.body)
        except CliError as exc:
            return self._send_json(502, {"error": "unreachable", "message": str(exc)})
        self._send_json(status, answer)

    # ------------------------------------------------------------ live view

    def _sse(self, path: str, query: dict[str, str]) -> None:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        c = self.console
        if len(parts) == 2 and parts[0] == "executions":
            eid = parts[1]
            failures: dict[tuple[int, int], dict] = {}
            last: dict[str, Any] = {}

            def poll() -> tuple[Any, str, bool]:
                _, e = c.client.request("GET", f"/executions/{urllib.parse.quote(eid, safe='')}")
                if e != last.get("execution"):
                    # the engine writes the execution with every history record: unchanged, no history read
                    from ..main import full_history

                    last.update(execution=e, history=full_history(c.client, eid))
                history = last["history"]
                for r in history.get("steps", []):
                    # a failed attempt's record, before the next attempt replaces it: kept for the page
                    if r.get("status") == "FAILED" and r.get("error") and "step_index" in r \
                            and r.get("branch") is None and r.get("kind") != "compensation":
                        failures.setdefault((r["step_index"], r.get("attempts") or 0), r["error"])
                html = pages.execution_fragment(e, history, c.workflow(e.get("workflow")), failures=failures)
                return (e, history, len(failures)), json.dumps({"html": html, "status": e.get("status")}), \
                    e.get("status") in ENDED
        elif parts == ["list"]:
            q = pages.list_query(query.get("workflow"), query.get("status"), None, 20)

            def poll() -> tuple[Any, str, bool]:
                _, listing = c.client.request("GET", f"/executions?{q}")
                html = pages.list_fragment(listing, query.get("workflow"), query.get("status"), None)
                return listing, json.dumps({"html": html}), False
        else:
            return self._send_json(404, {"error": "not_found", "message": f"no event stream at {path}"})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"retry: 2000\n\n")
        last_key, last_beat = None, time.monotonic()
        while not c.stopping.is_set():
            ended = False
            try:
                key, data, ended = poll()
                if key != last_key:
                    self._event("update", data)
                    last_key = key
            except ApiError as exc:
                self._event("problem", json.dumps(exc.body))
            except CliError as exc:
                self._event("problem", json.dumps({"error": "unreachable", "message": str(exc)}))
            if time.monotonic() - last_beat > HEARTBEAT_S:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                last_beat = time.monotonic()
            # an ended execution changes only by an operator's redrive: look less often
            c.stopping.wait(c.interval_s * (5 if ended else 1))

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
