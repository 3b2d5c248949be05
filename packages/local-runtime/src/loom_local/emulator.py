"""moto's server on 127.0.0.1, with DynamoDB requests made atomic, as a child process of the runtime.

This is ``moto_server`` (same application, same routing) with one difference: moto applies a
conditional write in several unlocked Python steps, so two racing requests can both pass the same
condition (measured: more than one winner in 8 of 40 races against its threaded server). Real
DynamoDB never does that, and Loom's guarantees rest on it. So DynamoDB requests run one at a time;
every other service (SQS long polls included) stays concurrent.

It also records every call a Loom principal makes (``--calls-dir``, see :mod:`loom_local.calls`) and
refuses what AWS refuses but moto lets through (:mod:`loom_local.limits`).

It binds the port itself (``--port 0`` picks a free one) and writes it to ``--ready-file``, so there
is no window in which another process can take the port.

    python -m loom_local.emulator --port 0 --ready-file .loom/run/moto.port --calls-dir .loom/run/calls
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .calls import CallLog, parse_request, principal_of, resource_params
from .limits import put_events_refusal


class SerializeDynamoDB:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with self.lock:
                # The whole response body is produced under the lock: moto builds it eagerly.
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


class InspectCalls:
    """Records each call of a Loom principal, and answers AWS's error for a PutEvents over 256 KB."""

    def __init__(self, app, calls_dir: str | None):
        self.app = app
        self.log = CallLog(calls_dir, "emulator") if calls_dir else None

    def __call__(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        parsed = parse_request(environ.get("HTTP_X_AMZ_TARGET", ""), environ.get("CONTENT_TYPE", ""), body)
        if parsed is None:
            return self.app(environ, start_response)
        service, operation, params = parsed
        principal = principal_of(environ.get("HTTP_AUTHORIZATION", ""))
        if principal is not None and self.log is not None:
            self.log.record(principal, service, operation, resource_params(service, operation, params))
        if service == "events" and operation == "PutEvents":
            refusal = put_events_refusal(params)
            if refusal is not None:
                raw = json.dumps({"__type": refusal[0], "message": refusal[1]}).encode()
                start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.1"),
                                                   ("Content-Length", str(len(raw))),
                                                   ("x-amzn-ErrorType", refusal[0])])
                return [raw]
        return self.app(environ, start_response)


def _watch_parent(parent: int, server) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            server.shutdown()
            os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--parent", type=int, default=0, help="exit when this process is gone")
    parser.add_argument("--calls-dir", default=None, help="record the calls of Loom's principals here")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"refusing to bind {args.host}: the local emulator only listens on loopback", file=sys.stderr)
        return 2

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = InspectCalls(SerializeDynamoDB(DomainDispatcherApplication(create_backend_app)), args.calls_dir)
    server = make_server(args.host, args.port, app, threaded=True)
    port = server.server_port
    os.environ["MOTO_PORT"] = str(port)  # moto builds some URLs (queue URLs) from it

    ready = Path(args.ready_file)
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(ready)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.parent:
        threading.Thread(target=_watch_parent, args=(args.parent, server), daemon=True).start()
    print(f"moto listening on http://{args.host}:{port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
