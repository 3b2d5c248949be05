"""The loom CLI against a loopback HTTP server: output, exit codes, URL resolution and SigV4 signing."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loom_cli.main import main
from loom_cli.watch import progress_line

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

    def route(self, method: str, target: str, body: dict | None) -> tuple[int, dict]:
        split = urllib.parse.urlsplit(target)
        path, query = split.path, dict(urllib.parse.parse_qsl(split.query))
        extra = getattr(self, "extra_route", None)
        if extra is not None:
            answer = extra(method, path, query, body)
            if answer is not None:
                return answer
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


def test_input_from_a_file_saved_with_a_byte_order_mark_is_read(api, tmp_path, capsys):
    path = tmp_path / "in.json"
    path.write_bytes(b'\xef\xbb\xbf{"qty": 2}')  # as some Windows editors save UTF-8
    assert main(["--url", api.url, "--json", "start", "order_fulfillment", "--input", f"@{path}"]) == 0
    assert json.loads(api.requests[0]["raw"])["input"] == {"qty": 2}


@pytest.mark.parametrize("value, message", [("[1]", "must be a JSON object"), ("{bad", "not valid JSON"), ("@/nonexistent.json", "cannot read")])
def test_bad_input_is_a_usage_error_and_sends_nothing(api, capsys, value, message):
    assert main(["--url", api.url, "start", "order_fulfillment", "--input", value]) == 2
    assert message in capsys.readouterr().err and api.requests == []


@pytest.mark.parametrize("content, message", [
    (b'\xff{"qty": 2}', "is not UTF-8 text (invalid start byte at byte 0)"),
    (b'{"qty": NaN}', "NaN is not a JSON number"), (b'{"qty": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"qty": 1e400}', "1e400 is too large for a 64-bit float"),
], ids=["not-utf8", "nan", "infinity", "past-a-float"])
def test_input_python_reads_but_json_does_not_carry_is_a_usage_error_and_sends_nothing(api, tmp_path, capsys, content,
                                                                                      message):
    path = tmp_path / "in.json"
    path.write_bytes(content)
    assert main(["--url", api.url, "start", "order_fulfillment", "--input", f"@{path}"]) == 2
    assert message in capsys.readouterr().err and api.requests == []


@pytest.mark.parametrize("since", ["99999999d", "0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z"])
def test_list_since_before_1970_lists_since_1970(api, capsys, since):
    api.extra_route = lambda m, p, q, b: (200, {"executions": [], "next_token": None})
    assert main(["--url", api.url, "list", "--since", since]) == 0
    sent = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(api.requests[0]["path"]).query))["started_after"]
    assert sent == "1970-01-01T00:00:00.000000Z"


def test_list_since_after_9998_is_a_usage_error(api, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--url", api.url, "list", "--since", "9999-12-31T23:59:59-01:00"])
    assert exit_.value.code == 2 and "after the times Loom lists" in capsys.readouterr().err and api.requests == []


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
    line = progress_line(_doc("SLEEPING", 3, timer="sleep", next_wake_at="2999-01-01T00:00:00.000000Z"))
    assert line.startswith("SLEEPING  step 3/5 ship  sleeping, ") and line.endswith(" left (until 2999-01-01T00:00:00.000000Z)")


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


# -- list, cancel, redrive, wake, paginated history, watch without the ticking ---------------------------
def _entry(i: int, status: str = "FAILED") -> dict:
    return {"execution_id": f"00000000-0000-4000-8000-{i:012d}", "workflow": "fragile_import", "status": status,
            "created_at": f"2026-01-01T00:00:{i:02d}.000000Z"}


def test_list_sends_the_filters_and_prints_a_table_with_a_hint_for_more(api, capsys):
    api.extra_route = lambda m, p, q, b: (200, {"executions": [_entry(2), _entry(1)], "next_token": "tok-2"}) \
        if (m, p) == ("GET", "/executions") else None
    assert main(["--url", api.url, "list", "--workflow", "fragile_import", "--status", "failed", "--since", "2h",
                 "--limit", "2"]) == 0
    out = capsys.readouterr().out
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(api.requests[0]["path"]).query))
    assert query.pop("started_after").endswith("Z")
    assert query == {"workflow": "fragile_import", "status": "FAILED", "limit": "2"}
    assert "execution_id" in out and _entry(2)["execution_id"] in out and "FAILED" in out
    assert out.strip().endswith("more: add --all, or --next-token tok-2")


def test_list_since_a_duration_is_that_long_ago(api, capsys):
    import datetime as dt

    api.extra_route = lambda m, p, q, b: (200, {"executions": [], "next_token": None})
    assert main(["--url", api.url, "list", "--since", "1h30m"]) == 0
    assert capsys.readouterr().out.strip() == "no executions match"
    sent = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(api.requests[0]["path"]).query))["started_after"]
    when = dt.datetime.strptime(sent, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    assert abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds() - 5400) < 60


def test_list_all_follows_every_page_and_json_works_after_the_command(api, capsys):
    pages = {None: ([_entry(3), _entry(2)], "t1"), "t1": ([_entry(1)], None)}
    api.extra_route = lambda m, p, q, b: (200, dict(zip(("executions", "next_token"), pages[q.get("next_token")]))) \
        if p == "/executions" else None
    assert main(["--url", api.url, "list", "--all", "--limit", "2", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [x["execution_id"] for x in body["executions"]] == [_entry(i)["execution_id"] for i in (3, 2, 1)]
    assert body["next_token"] is None and len(api.requests) == 2


@pytest.mark.parametrize("argv", [["list", "--since", "yesterday"], ["list", "--limit", "0"], ["list", "--limit", "101"],
                                  ["list", "--status", "DONE"], ["cancel"], ["frobnicate", EID]])
def test_bad_usage_exits_2_and_sends_nothing(api, capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(["--url", api.url, *argv])
    assert exc.value.code == 2 and api.requests == []


def _operated(status: str, **extra) -> dict:
    return {"execution_id": EID, "workflow": "fragile_import", "status": status, "current_step": 2, "step_count": 4,
            "current_step_name": "import_rows", "version": 9, "redrives": 1, "cancelled_by": None,
            "cancel_reason": None, **extra}


def test_cancel_sends_the_reason_and_prints_who_cancelled(api, capsys):
    api.extra_route = lambda m, p, q, b: (200, _operated("CANCELLED", cancelled_by="local",
                                                          cancel_reason=b["reason"])) if p.endswith("/cancel") else None
    assert main(["--url", api.url, "cancel", EID, "--reason", "duplicate order"]) == 0
    assert capsys.readouterr().out.strip() == f"{EID}  fragile_import  CANCELLED  by local (duplicate order)"
    assert (api.requests[0]["method"], api.requests[0]["path"]) == ("POST", f"/executions/{EID}/cancel")
    assert json.loads(api.requests[0]["raw"]) == {"reason": "duplicate order"}


def test_cancel_without_a_reason_sends_no_body(api, capsys):
    api.extra_route = lambda m, p, q, b: (200, _operated("CANCELLED", cancelled_by="local"))
    assert main(["--url", api.url, "--json", "cancel", EID]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "CANCELLED" and api.requests[0]["raw"] == b""


def test_cancel_of_an_ended_execution_exits_3_with_the_code(api, capsys):
    api.extra_route = lambda m, p, q, b: (409, {"error": "execution_ended", "message": "already ended COMPLETED",
                                                 "execution_status": "COMPLETED"})
    assert main(["--url", api.url, "cancel", EID]) == 3
    assert "execution_ended: already ended COMPLETED" in capsys.readouterr().err


def test_redrive_and_wake_post_to_their_routes_and_say_what_happens(api, capsys):
    api.extra_route = lambda m, p, q, b: (202, _operated("RUNNING")) if p.endswith("/redrive") else \
        (200, _operated("SLEEPING")) if p.endswith("/wake") else None
    assert main(["--url", api.url, "redrive", EID]) == 0
    assert capsys.readouterr().out.strip() == f"{EID}  fragile_import  RUNNING  redriven from step 2/4 import_rows (redrive 1)"
    assert main(["--url", api.url, "wake", EID]) == 0
    assert capsys.readouterr().out.strip() == f"{EID}  fragile_import  SLEEPING  woken: step 2/4 import_rows runs now"
    assert [(r["method"], r["path"]) for r in api.requests if r["method"] == "POST"] == [
        ("POST", f"/executions/{EID}/redrive"), ("POST", f"/executions/{EID}/wake")]


def _record(i: int) -> dict:
    return {"step_index": i, "name": f"s{i}", "status": "SUCCEEDED", "attempts": 1, "started_at": "t0",
            "finished_at": "t1", "result": {"n": i}, "error": None, "final": False}


REDRIVE_OP = {"op": "redrive", "by": "arn:aws:iam::123456789012:user/ops", "at": "2026-01-01T03:00:00.000000Z",
              "version": 7, "reason": None, "detail": {"step_index": 2, "step_name": "import_rows", "attempts": 1,
                                                       "error": {"code": "permanent_error", "message": "row 2"}}}


def test_history_reads_every_page(api, capsys):
    pages = {None: ([_record(0), _record(1)], [REDRIVE_OP], "p2"), "p2": ([_record(2), _record(3)], [], "p3"),
             "p3": ([_record(4)], [], None)}

    def route(m, p, q, b):
        if p.endswith("/history"):
            steps, ops, token = pages[q.get("next_token")]
            return 200, {"execution_id": EID, "steps": steps, "operations": ops, "next_token": token}
        return None

    api.extra_route = route
    assert main(["--url", api.url, "history", EID, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [s["step_index"] for s in body["steps"]] == [0, 1, 2, 3, 4] and body["operations"] == [REDRIVE_OP]
    assert len(api.requests) == 3
    assert main(["--url", api.url, "history", EID]) == 0
    out = capsys.readouterr().out
    assert "s4" in out and "redrive" in out and "after import_rows failed (1 attempt): permanent_error: row 2" in out


def test_history_names_the_versions_of_a_redrive_onto_another_version(api, capsys):
    onto = {**REDRIVE_OP, "detail": {**REDRIVE_OP["detail"], "from_version": 1, "to_version": 2}}

    def route(m, p, q, b):
        if p.endswith("/history"):
            return 200, {"execution_id": EID, "steps": [_record(0)], "operations": [onto], "next_token": None}
        return None

    api.extra_route = route
    assert main(["--url", api.url, "history", EID]) == 0
    out = capsys.readouterr().out
    assert "onto version 2 from 1; after import_rows failed (1 attempt)" in out, out


class Script:
    """Answers GET /executions/{id} from a list of documents, repeating the last one."""

    def __init__(self, docs: list[dict], history: dict | None = None):
        self.docs, self.polls, self.history = docs, 0, history

    def __call__(self, m, p, q, b):
        if p == f"/executions/{EID}":
            doc = self.docs[min(self.polls, len(self.docs) - 1)]
            self.polls += 1
            return 200, doc
        if p.endswith("/history"):
            return 200, self.history or {"execution_id": EID, "steps": [], "operations": [], "next_token": None}
        return None


def _doc(status: str, step: int, **extra) -> dict:
    base = {"execution_id": EID, "workflow": "order_fulfillment", "status": status, "current_step": step,
            "step_count": 5, "current_step_name": ["reserve", "charge", "pickup", "ship", "notify", None][step],
            "version": 1, "timer": None, "next_wake_at": None, "total_attempts": step, "error": None}
    return {**base, **extra}


def test_watch_prints_one_line_for_a_long_sleep_however_many_polls(api, capsys):
    sleeping = _doc("SLEEPING", 3, timer="sleep", next_wake_at="2999-01-01T00:00:00.000000Z")
    api.extra_route = Script([_doc("RUNNING", 2)] + [sleeping] * 40 + [_doc("RUNNING", 3), _doc("COMPLETED", 5)])
    assert main(["--url", api.url, "watch", EID, "--interval", "0.001"]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.split(" ")[0] in ("RUNNING", "SLEEPING", "COMPLETED")]
    assert [line.split()[0] for line in progress] == ["RUNNING", "SLEEPING", "RUNNING", "COMPLETED"], lines
    assert progress[1].startswith("SLEEPING  step 3/5 ship  sleeping, ")
    assert progress[3].startswith("COMPLETED step 5/5 (done)")


def test_watch_shows_each_failed_attempts_error(api, capsys):
    history = {"execution_id": EID, "operations": [], "next_token": None, "steps": [
        {"step_index": 1, "name": "charge", "status": "FAILED", "attempts": 1, "error": {"code": "step_error",
                                                                                       "message": "card declined"}}]}
    retry = _doc("RUNNING", 1, timer="retry", next_wake_at="2999-01-01T00:00:00.000000Z", total_attempts=2)
    api.extra_route = Script([_doc("RUNNING", 1, total_attempts=2)] + [retry] * 5 + [_doc("COMPLETED", 5)], history)
    assert main(["--url", api.url, "watch", EID, "--interval", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "RUNNING   step 1/5 charge  attempt 1 failed: step_error: card declined;  retry in " in out
    assert out.split("#  step")[0].count("card declined") == 1  # once in the progress lines, then the history


def test_watch_shows_each_failed_attempt_of_a_map_branch_once(api, capsys):
    # given: a map at step 2 whose branch 3 fails twice; the execution document stays the same meanwhile
    branch = {"step_index": 2, "branch": 3, "kind": "branch", "name": "pickup", "status": "RETRY", "attempts": 2,
              "error": {"code": "step_error", "message": "carrier busy"}}
    history = {"execution_id": EID, "operations": [], "next_token": None, "steps": [branch]}
    fanning = _doc("RUNNING", 2, fanout={"branches": 4, "succeeded": 3, "max_concurrency": 2})
    api.extra_route = Script([fanning] * 6 + [_doc("COMPLETED", 5)], history)
    # when
    assert main(["--url", api.url, "watch", EID, "--interval", "0.001"]) == 0
    # then: the branch's failure, once, before the history table
    progress = capsys.readouterr().out.split("#  step")[0]
    assert progress.count("step 2 branch 3: attempt 2 failed: step_error: carrier busy") == 1, progress


def test_watch_exits_1_for_a_cancelled_execution(api, capsys):
    api.extra_route = Script([_doc("CANCELLED", 3, cancelled_by="local", cancel_reason="dup")])
    assert main(["--url", api.url, "watch", EID, "--interval", "0.001"]) == 1
    assert "CANCELLED step 3/5 ship  by local: dup" in capsys.readouterr().out


def test_watch_piped_to_a_reader_that_leaves_still_exits_1_for_a_cancelled_execution(api):
    import subprocess
    import sys

    # given: `loom watch ID | true`: the reader closes the pipe before anything is printed
    api.extra_route = Script([_doc("CANCELLED", 3, cancelled_by="local", cancel_reason="dup")])
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from loom_cli.main import main; sys.exit(main(sys.argv[1:]))",
                             "--url", api.url, "watch", EID, "--interval", "0.001"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    # when
    _, err = proc.communicate(timeout=60)
    # then: the exit status still says it did not complete, and nothing is printed of the broken pipe
    assert proc.returncode == 1, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_status_numbers_steps_as_watch_does(api, capsys):
    api.extra_route = Script([{**_doc("SLEEPING", 3, timer="sleep", next_wake_at="2999-01-01T00:00:00.000000Z"),
                               "context": {}, "created_at": "c", "updated_at": "u", "started_by": "local"}])
    assert main(["--url", api.url, "status", EID, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["current_step"] == 3
    assert main(["--url", api.url, "status", EID]) == 0
    out = capsys.readouterr().out
    assert "current step  3/5 ship" in out and "started by    local" in out


@pytest.mark.parametrize("argv", [["watch", EID, "--interval", "0"], ["watch", EID, "--interval", "-1"],
                                  ["watch", EID, "--timeout", "0"], ["console", "--interval", "0"],
                                  ["dev", "--sweep-every", "0"], ["dev", "--sweep-every", "nan"]])
def test_a_poll_interval_of_zero_or_less_is_a_usage_error_not_a_busy_loop(api, capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(["--url", api.url, *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "must be a number of seconds above 0" in err, err
    assert api.requests == []


def test_cancel_of_an_execution_undoing_a_failure_says_the_cancel_changed_nothing(api, capsys):
    # given: the execution failed at step 2 and is undoing its completed steps (the API answers it unchanged)
    api.extra_route = lambda m, p, q, b: (200, _operated(
        "RUNNING", compensating=True, failed_step=2, current_step=1,
        error={"code": "permanent_error", "message": "card declined", "step_name": "import_rows"}))
    # when
    assert main(["--url", api.url, "cancel", EID, "--reason", "stop it"]) == 0
    # then: not "by -; compensating its completed steps first", as if this cancel had started the undo
    out = capsys.readouterr().out.strip()
    assert out == (f"{EID}  fragile_import  RUNNING  not cancelled: it is already undoing its completed steps "
                   "because step 2/4 import_rows failed (permanent_error), and ends FAILED once they are undone; "
                   "the cancel changes nothing (loom watch follows it)"), out


def test_history_of_a_redrive_after_a_failure_no_step_attempt_made_names_where_it_stood_not_unknown_attempts(api, capsys):
    # given: a redrive of an execution failed workflow_version_missing (no step's attempts failed it: the engine's
    # operation detail has no step name and no attempts)
    missing = {**REDRIVE_OP, "detail": {"step_index": 1, "error": {"code": "workflow_version_missing",
                                                                    "message": "version 1 is not deployed"},
                                        "from_version": 1, "to_version": 2}}

    def route(m, p, q, b):
        if p.endswith("/history"):
            return 200, {"execution_id": EID, "steps": [_record(0)], "operations": [missing], "next_token": None}
        return None

    api.extra_route = route
    # when
    assert main(["--url", api.url, "history", EID]) == 0
    out = capsys.readouterr().out
    # then: where it stood, without an attempt count it never had
    assert "onto version 2 from 1; after it failed at step 1: workflow_version_missing: version 1 is not deployed" in out, out
    assert "?" not in out.split("workflow_version_missing")[0].rsplit("\n", 1)[-1], out


@pytest.mark.parametrize("how", ["cancelled", "woken", "ran"])
def test_history_of_a_sleep_says_when_a_cancel_cut_it_short_or_a_wake_ended_it_early(api, capsys, how):
    # given: a sleep recorded when it began (SUCCEEDED, due at 01:00), then cancelled or woken at 00:10, or neither
    sleep_row = {"step_index": 1, "name": "nap", "kind": "sleep", "status": "SUCCEEDED", "attempts": 1,
                 "started_at": "2026-01-01T00:00:00.000000Z", "finished_at": "2026-01-01T00:00:00.000000Z",
                 "result": {"wake_at": "2026-01-01T01:00:00.000000Z"}, "error": None, "final": False}
    at = "2026-01-01T00:10:00.000000Z"
    ops = {"cancelled": [{"op": "cancel", "by": "ops", "at": at, "version": 4, "reason": None, "detail": {}}],
           "woken": [{"op": "wake", "by": "ops", "at": at, "version": 4, "reason": None,
                      "detail": {"was": "sleep", "due": "2026-01-01T01:00:00+00:00"}}],
           "ran": []}[how]
    steps = [_record(0), sleep_row] + ([_record(2)] if how != "cancelled" else [])

    def route(m, p, q, b):
        if p.endswith("/history"):
            return 200, {"execution_id": EID, "steps": steps, "operations": ops, "next_token": None}
        return None

    api.extra_route = route
    # when
    assert main(["--url", api.url, "history", EID]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if " nap " in line)
    # then: the row says how the sleep ended when it did not sleep its time
    expected = {"cancelled": "cancelled while sleeping (due 2026-01-01T01:00:00.000000Z)",
                "woken": "woken early (due 2026-01-01T01:00:00.000000Z)",
                "ran": "wake at 2026-01-01T01:00:00.000000Z"}[how]
    assert row.endswith(expected), row
    # and its status column: a sleep a cancel cut short did not succeed (its record, written as it began, says so)
    assert row.split()[3] == ("CANCELLED" if how == "cancelled" else "SUCCEEDED"), row


def test_watch_goes_on_through_a_poll_that_failed_and_gives_up_when_the_api_stays_down(api, capsys):
    # given: the control plane answers 502 to two polls in a row (a function timed out under load)
    gets = {"n": 0, "down": {2, 3}}

    def flaky(method, path, query, body):
        if method == "GET" and path == f"/executions/{EID}":
            gets["n"] += 1
            if gets["n"] in gets["down"]:
                return 502, {"message": "Internal Server Error"}
        return None

    api.extra_route = flaky
    # when / then: it follows the execution to its end, saying what failed (before: it ended at the first 502)
    assert main(["--url", api.url, "watch", EID, "--interval", "0.01"]) == 0
    captured = capsys.readouterr()
    assert "COMPLETED" in captured.out and "loom watch: a poll failed" in captured.err and "(1 of 5)" in captured.err
    # and: when it stays down, it gives up after five polls in a row, exit 4
    gets.update(n=0, down=set(range(1, 100)))
    assert main(["--url", api.url, "watch", EID, "--interval", "0.01"]) == 4
    assert "(4 of 5)" in capsys.readouterr().err
