"""Fixtures for the CLI's tests: ``control_plane``, the fake control plane (fake_control_plane.py) on loopback;
and, for every test, a state file of its own (``LOOM_STATE_FILE``, empty) and no ``LOOM_URL``, so a local
stack the developer has up is never found, read or written by a test."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# the tests import the fake's helpers by name; importlib mode does not add this directory
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_control_plane import FakeControlPlane  # noqa: E402


@pytest.fixture(autouse=True)
def _own_state_file(tmp_path, monkeypatch):
    state = tmp_path / "loom-state" / "local.json"
    monkeypatch.setenv("LOOM_STATE_FILE", str(state))
    monkeypatch.delenv("LOOM_URL", raising=False)
    return state


@pytest.fixture
def state_file(_own_state_file):
    """The test's own per-user state file (absent until the test writes it)."""
    return _own_state_file


@pytest.fixture
def control_plane():
    fake = FakeControlPlane()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                status, payload = 400, {"error": "invalid_json", "message": "not JSON"}
            else:
                fake.requests.append({"method": self.command, "path": self.path, "body": body,
                                      "headers": dict(self.headers)})
                status, payload = fake.route(self.command, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()
