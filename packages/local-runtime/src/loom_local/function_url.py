"""A Lambda Function URL, played locally: HTTP request -> payload v2.0 event -> function -> HTTP response.

Locally the URL listens on 127.0.0.1 only and asks for no credentials. The deployed URL uses
``AWS_IAM`` auth: every request must be SigV4-signed by an identity allowed ``lambda:InvokeFunctionUrl``
(the ``loom`` CLI signs automatically for non-loopback URLs). To keep the event faithful, the local
URL fills ``requestContext.authorizer.iam`` with a fixed local identity, as an IAM-authorized call
would have one.

Mapping rules (AWS "Invoking Lambda function URLs"): header names lower-cased, repeated headers
joined with commas, cookies moved to ``cookies``, ``queryStringParameters`` joined likewise, text
bodies passed as is and other bodies base64-encoded. A response without ``statusCode`` is sent as
200 ``application/json`` with the JSON of what the function returned; a function error, timeout or
crash is a 502, as Lambda answers. Lambda's payload limits hold: a request over 6 MB is a 413, a
response over 6 MB (``Function.ResponseSizeTooLarge``) a 502.

Whoever calls the URL is an operator (the ``loom`` CLI, the console, the MCP server, a script), so
each request is recorded, with a :class:`~loom_local.calls.CallLog`, as the operator's
``lambda:InvokeFunctionUrl`` call on the function, to be checked against the operator policy.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .calls import OPERATOR, CallLog
from .functions import Function
from .limits import LAMBDA_REQUEST_MAX_BYTES, REQUEST_TOO_LARGE

Observer = Callable[[str, dict[str, Any]], None]
MAX_BODY_BYTES = LAMBDA_REQUEST_MAX_BYTES
"""Lambda's request payload limit for synchronous invocation."""
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-www-form-urlencoded",
               "application/javascript", "+json", "+xml")


@dataclass(frozen=True)
class UrlConfig:
    url_id: str
    """The deployed URL's id: https://<url_id>.lambda-url.<region>.on.aws/"""
    region: str
    account: str
    auth_type: str


LOCAL_IAM_IDENTITY = {
    # Nobody is authenticated locally: the caller Loom records (started_by, cancelled_by, ...) is "local".
    "accessKey": "LOCALACCESSKEY0000000",
    "accountId": "123456789012",
    "callerId": "local",
    "cognitoIdentity": None,
    "principalOrgId": None,
    "userArn": "local",
    "userId": "local",
}


def _is_text(content_type: str) -> bool:
    ct = content_type.lower().split(";")[0].strip()
    return not ct or any(ct.startswith(t) or ct.endswith(t) for t in _TEXT_TYPES)


def to_event(cfg: UrlConfig, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
             source_ip: str, now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or dt.datetime.now(dt.timezone.utc)
    split = urllib.parse.urlsplit(target)
    path = split.path or "/"
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    domain = f"{cfg.url_id}.lambda-url.{cfg.region}.on.aws"
    joined["host"] = domain
    joined.setdefault("x-forwarded-proto", "https")
    joined.setdefault("x-forwarded-port", "443")
    joined["x-forwarded-for"] = source_ip
    joined.setdefault("x-amzn-trace-id", f"Root=1-{int(now.timestamp()):08x}-{uuid.uuid4().hex[:24]}")
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": split.query,
        "headers": joined,
        "requestContext": {
            "accountId": cfg.account if cfg.auth_type == "AWS_IAM" else "anonymous",
            "apiId": cfg.url_id,
            "authentication": None,
            "authorizer": {"iam": dict(LOCAL_IAM_IDENTITY)} if cfg.auth_type == "AWS_IAM" else None,
            "domainName": domain,
            "domainPrefix": cfg.url_id,
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                     "userAgent": joined.get("user-agent", "")},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if split.query:
        params: dict[str, str] = {}
        for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
            params[k] = f"{params[k]},{v}" if k in params else v
        event["queryStringParameters"] = params
    if body:
        if _is_text(joined.get("content-type", "")):
            try:
                event["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
        else:
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    return event


def to_http(payload: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """A function's return value as (status, headers, body), by Lambda's inference rules."""
    if not (isinstance(payload, dict) and "statusCode" in payload):
        return 200, [("content-type", "application/json")], json.dumps(payload).encode()
    status = int(payload["statusCode"])
    headers = [(str(k), str(v)) for k, v in (payload.get("headers") or {}).items()]
    for name, values in (payload.get("multiValueHeaders") or {}).items():
        headers.extend((str(name), str(v)) for v in values)
    headers.extend(("set-cookie", str(c)) for c in payload.get("cookies") or [])
    body = payload.get("body")
    if body is None:
        raw = b""
    elif payload.get("isBase64Encoded"):
        raw = base64.b64decode(body)
    else:
        raw = (body if isinstance(body, str) else json.dumps(body)).encode()
    return status, headers, raw


class FunctionUrlServer:
    def __init__(self, cfg: UrlConfig, function: Function, host: str = "127.0.0.1", port: int = 0,
                 observer: Observer | None = None, calls: CallLog | None = None):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the local Function URL listens on loopback only, not {host!r}")
        self.cfg, self.function, self.observer, self.calls = cfg, function, observer, calls
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "loom-local-function-url"

            def _too_large(self) -> None:
                self._send(413, [("content-type", "application/json"),
                                 ("x-amzn-errortype", REQUEST_TOO_LARGE["errorType"])],
                           json.dumps({"Message": REQUEST_TOO_LARGE["errorMessage"]}).encode())

            def _handle(self) -> None:
                outer._record_call()
                length = int(self.headers.get("content-length") or 0)
                if length > MAX_BODY_BYTES:
                    left = min(length, 8 * MAX_BODY_BYTES)  # read it first, so the client sees the answer
                    while left > 0:
                        chunk = self.rfile.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        left -= len(chunk)
                    self._too_large()
                    return
                body = self.rfile.read(length) if length else b""
                event = to_event(outer.cfg, self.command, self.path, list(self.headers.items()), body,
                                 self.client_address[0])
                result = outer.function.invoke(event)
                outer._notify("http", method=self.command, path=event["rawPath"], status=result.status,
                              pid=result.pid)
                if result.status == "request_too_large":  # the event around the body passed 6 MB
                    self._too_large()
                    return
                if not result.ok:
                    self._send(502, [("content-type", "application/json"),
                                     ("x-amzn-errortype", str((result.error or {}).get("errorType", "")))],
                               json.dumps({"Message": "Internal Server Error"}).encode())
                    return
                try:
                    status, headers, raw = to_http(result.payload)
                except (TypeError, ValueError, KeyError) as exc:
                    self._send(502, [("content-type", "application/json")],
                               json.dumps({"Message": f"Internal Server Error: bad function response ({exc})"}).encode())
                    return
                self._send(status, headers, raw)

            def _send(self, status: int, headers: list[tuple[str, str]], raw: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(raw)))
                self.send_header("x-amzn-requestid", str(uuid.uuid4()))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the function logs are the record
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _record_call(self) -> None:
        if self.calls is not None:
            self.calls.record(OPERATOR, "lambda", "InvokeFunctionUrl", {"FunctionName": self.function.spec.arn},
                              context={"lambda:FunctionUrlAuthType": self.cfg.auth_type,
                                       "lambda:InvokedViaFunctionUrl": "true"})

    def _notify(self, kind: str, **details: Any) -> None:
        if self.observer is not None:
            try:
                self.observer(kind, {"function": self.function.spec.name, **details})
            except Exception:  # noqa: BLE001
                pass

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, name="function-url", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
