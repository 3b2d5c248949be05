"""The loom CLI against a loopback HTTP server: output, exit codes, URL resolution and SigV4 signing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loom_cli.main import main, progress_line

EID = "3f1c2a8e-0d7b-4c1e-9a55-1b2c3d4e5f60"


class FakeApi:
    """Answers like the control plane; records every request it saw."""

    def __init__(self):
        self.requests: list[dict] = []
        self.polls = 0
        self.final_status = "COMPLETED"

    def execution(self) -> dict:
        self.polls += 1
        status = "RUNNING" if self.polls < 2 else ("SLEEPING" if self.polls < 3 else self.final_status)
        return {
            "execution_id": EID, "workflow": "order_fulfillment", "status": status, "current_step": min(self.polls, 4),
            "step_count": 5, "current_step_name": "ship_order", "version": self.polls + 1, "context": {"order_id": "o-1"},
            "error": {"code": "step_error", "message": "boom"} if status == "FAILED" else None,
            "next_wake_at": "2999-01-01T00:00:00.000000Z" if status == "SLEEPING" else None,
            "timer": "sleep" if status == "SLEEPING" else None, "total_attempts": self.polls,
            "created_at": "2026-01-01T00:00:00.000000Z", "updated_at": "2026-01-01T00:00:01.000000Z", "expires_at": None,
        }

    def route(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if method == "POST" and path == "/executions":
            if body["workflow"] == "missing":
                return 404, {"error": "unknown_workflow", "message": "no workflow named 'missing'"}
            return 202, {"execution_id": EID, "workflow": body["workflow"], "status": "RUNNING", "current_step": 0, "created": True}
        if method == "GET" and path == f"/executions/{EID}":
            return 200, self.execution()
        if method == "GET" and path == f"/executions/{EID}/history":
            return 200, {"execution_id": EID, "steps": [
                {"step_index": 0, "name": "reserve_inventory", "status": "SUCCEEDED", "attempts": 1, "started_at": "t0",
                 "finished_at": "t1", "result": {"reserved": True}, "error": None, "final": False},
                {"corrupt": True, "sort_key": "STEP#001#charge_payment", "detail": "TypeError"}]}
        if method == "GET" and path == "/workflows":
            return 200, {"workflows": [{"name": "order_fulfillment", "retry": {"max_attempts": 5, "base": 2, "max_delay": 900},
                                        "steps": [{"name": "reserve_inventory"}, {"name": "charge_payment"}]}]}
        if path.startswith("/executions/"):
            return 404, {"error": "execution_not_found", "message": "execution nope does not exist"}
        return 404, {"error": "not_found", "message": "no route"}


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            fake.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "raw": raw})
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
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()


def test_start_prints_the_new_execution_and_exits_zero(api, capsys):
    code = main(["--url", api.url, "start", "order_fulfillment", "--input", '{"order_id": "o-1"}', "--token", "t1"])
    assert code == 0
    assert f"{EID}  order_fulfillment  RUNNING  started" in capsys.readouterr().out
    sent = json.loads(api.requests[0]["raw"])
    assert sent == {"workflow": "order_fulfillment", "input": {"order_id": "o-1"}, "idempotency_token": "t1"}
    assert "authorization" not in {k.lower() for k in api.requests[0]["headers"]}  # loopback: unsigned


def test_start_reads_input_from_a_file(api, tmp_path, capsys):
    path = tmp_path / "in.json"
    path.write_text('{"qty": 2}')
    assert main(["--url", api.url, "--json", "start", "order_fulfillment", "--input", f"@{path}"]) == 0
    assert json.loads(api.requests[0]["raw"])["input"] == {"qty": 2}
    assert json.loads(capsys.readouterr().out)["execution_id"] == EID


@pytest.mark.parametrize("value, message", [("[1]", "must be a JSON object"), ("{bad", "not valid JSON"), ("@/nonexistent.json", "cannot read")])
def test_bad_input_is_a_usage_error_and_sends_nothing(api, capsys, value, message):
    assert main(["--url", api.url, "start", "order_fulfillment", "--input", value]) == 2
    assert message in capsys.readouterr().err and api.requests == []


def test_api_errors_show_code_and_message_with_exit_3(api, capsys):
    assert main(["--url", api.url, "start", "missing"]) == 3
    assert "unknown_workflow: no workflow named 'missing'" in capsys.readouterr().err
    assert main(["--url", api.url, "--json", "status", "nope"]) == 3
    assert json.loads(capsys.readouterr().err) == {"error": "execution_not_found", "message": "execution nope does not exist", "status": 404}


def test_status_history_and_workflows_render_tables(api, capsys):
    assert main(["--url", api.url, "status", EID]) == 0
    out = capsys.readouterr().out
    assert "order_fulfillment" in out and "status" in out and '{"order_id": "o-1"}' in out
    assert main(["--url", api.url, "history", EID]) == 0
    out = capsys.readouterr().out
    assert "reserve_inventory" in out and "SUCCEEDED" in out and "CORRUPT" in out and "STEP#001#charge_payment" in out
    assert main(["--url", api.url, "workflows"]) == 0
    assert "reserve_inventory > charge_payment" in capsys.readouterr().out


def test_watch_follows_until_completed(api, capsys):
    assert main(["--url", api.url, "watch", EID, "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "RUNNING" in out and "sleeping" in out and "left" in out and "COMPLETED" in out


def test_watch_exits_1_when_the_execution_failed(api, capsys):
    api.final_status = "FAILED"
    assert main(["--url", api.url, "watch", EID, "--interval", "0.01"]) == 1
    assert "step_error: boom" in capsys.readouterr().out


def test_unreachable_url_exits_4(capsys):
    assert main(["--url", "http://127.0.0.1:9", "workflows"]) == 4
    assert "cannot reach" in capsys.readouterr().err


def test_url_resolution_prefers_flag_then_env_then_local_state(api, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOM_URL", raising=False)
    assert main(["workflows"]) == 2 and "no control plane URL" in capsys.readouterr().err
    (tmp_path / ".loom").mkdir()
    (tmp_path / ".loom" / "local.json").write_text(json.dumps({"url": api.url}))
    assert main(["workflows"]) == 0
    monkeypatch.setenv("LOOM_URL", "http://127.0.0.1:9")
    assert main(["workflows"]) == 4
    assert main(["--url", api.url, "workflows"]) == 0


def test_signed_requests_carry_a_valid_sigv4_signature(api, monkeypatch, capsys):
    # given: credentials from the standard chain (here: environment variables)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # when
    assert main(["--url", api.url, "--sign", "--region", "eu-west-1", "start", "order_fulfillment", "--input", '{"a": 1}']) == 0
    # then: recomputing the signature from what the server received gives the same value
    seen = api.requests[0]
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    auth = headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") and "/eu-west-1/lambda/aws4_request" in auth
    assert _recompute_signature(api.url + seen["path"], seen["raw"], headers) == auth.split("Signature=")[1]
    # and tampering with the body breaks it
    assert _recompute_signature(api.url + seen["path"], seen["raw"] + b" ", headers) != auth.split("Signature=")[1]


def test_signing_without_credentials_is_a_clear_usage_error(api, monkeypatch, tmp_path, capsys):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["--url", api.url, "--sign", "--region", "us-east-1", "workflows"]) == 2
    assert "no AWS credentials" in capsys.readouterr().err and api.requests == []


def test_progress_line_shows_time_left_on_a_sleep():
    line = progress_line({"status": "SLEEPING", "current_step": 3, "step_count": 5, "current_step_name": "ship",
                          "timer": "sleep", "next_wake_at": "2999-01-01T00:00:00.000000Z"})
    assert line.startswith("SLEEPING  step 4/5 ship  sleeping, ") and line.endswith(" left")


def _recompute_signature(url: str, body: bytes, headers: dict) -> str:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signed = [h for h in headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")]
    request = AWSRequest(method="POST", url=url, data=body, headers={h: headers[h] for h in signed if h in headers})
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "lambda", "eu-west-1")
    canonical = auth.canonical_request(request)
    return auth.signature(auth.string_to_sign(request, canonical), request)
