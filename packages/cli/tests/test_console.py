"""``loom console`` without a browser: its pages, the /api forwarder's guards, and the SSE live view,
against the loopback fake control plane (conftest.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from fake_control_plane import execution_doc

from loom_cli.sdk import LoomClient
from loom_cli.console import Console
from loom_cli.console._html import span

EID = "6f1c2b1e-0000-4000-8000-00000000000a"
T0 = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def console(control_plane):
    c = Console(LoomClient(control_plane.url), interval_s=0.1).start()
    yield c
    c.stop()


def get(console, path: str, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(console.url.rstrip("/") + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def api(console, method: str, path: str, body=None, token: str | None = "page") -> tuple[int, dict]:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["x-loom-console-token"] = console.token if token == "page" else token
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(console.url + "api" + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def retrying_order(control_plane) -> None:
    control_plane.add(
        execution_doc(EID, step=1, timer="retry", next_wake_at="2999-01-01T00:00:00.000000Z", attempt=2,
                      total_attempts=3, redrives=1),
        steps=[{"step_index": 0, "name": "reserve_inventory", "status": "SUCCEEDED", "attempts": 2, "started_at": T0,
                "finished_at": "2026-01-01T00:00:01.400000Z", "result": {"reservation_id": "res-1", "note": "x" * 300},
                "error": {"code": "step_error", "message": "RuntimeError: inventory timed out"}, "final": False},
               {"step_index": 1, "name": "charge_payment", "status": "RUNNING", "attempts": 1, "started_at": T0,
                "finished_at": None, "result": None, "error": {"code": "step_error", "message": "card <declined>"},
                "final": False}],
        operations=[{"op": "redrive", "by": "arn:aws:iam::1:user/ops", "at": T0, "version": 7, "reason": None,
                     "detail": {"step_name": "charge_payment", "attempts": 5,
                                "error": {"code": "permanent_error", "message": "feed broken"}}}])


def test_span_reads_like_a_person_would_say_it():
    assert [span(s) for s in (0.25, 12, 200, 7300, 90000)] == ["250 ms", "12 s", "3 min 20 s", "2 h 01 min", "1 d 1 h"]


def test_list_page_shows_newest_first_with_filters_and_an_older_page(console, control_plane):
    # given: 25 executions, one of them of another workflow
    for i in range(25):
        control_plane.add(execution_doc(f"e-{i:02d}", workflow="free_form" if i == 3 else "order_fulfillment",
                                        status="FAILED" if i % 2 else "RUNNING",
                                        created_at=f"2026-01-01T00:00:{i:02d}.000000Z"))
    # when
    status, html = get(console, "/")
    # then: the first page of 20, newest first, statuses as badges, a link to the next page
    assert status == 200
    assert html.index("e-24") < html.index("e-23") and "e-04" not in html
    assert 'class="badge s-failed"' in html and 'class="badge s-running"' in html
    token = "2026-01-01T00%3A00%3A05.000000Z%23e-05"  # the key of the page's last entry
    assert f'id="next-page" href="/?limit=20&amp;next_token={token}"' in html
    assert 'data-sse="/sse/list?limit=20"' in html
    status, older = get(console, f"/?next_token={token}")
    assert "e-04" in older and "e-24" not in older and "newest" in older and "data-sse" not in older
    # filters go to the API as its query parameters
    status, html = get(console, "/?workflow=order_fulfillment&status=failed")
    assert [r["path"] for r in control_plane.requests if r["path"].startswith("/executions?")][-1] == \
        "/executions?workflow=order_fulfillment&status=FAILED&limit=20"
    assert "e-03" not in html and "e-02" not in html and "e-01" in html
    assert '<option value="FAILED" selected>' in html and '<option value="order_fulfillment" selected>' in html


def test_timeline_shows_attempts_errors_in_full_retries_and_marks(console, control_plane):
    retrying_order(control_plane)
    status, html = get(console, f"/executions/{EID}")
    assert status == 200
    # every planned step is on the timeline, in order, with its state
    for i, state in enumerate(["done", "retrying", "pending", "pending", "pending"]):
        assert f'class="step t-{state} k-{"sleep" if i == 2 else "step"}" data-step="{i}"' in html, state
    assert "2 attempts (retried)" in html and "took 1 s" in html
    assert "RuntimeError: inventory timed out" in html and "card &lt;declined&gt;" in html  # errors in full, escaped
    assert "attempt 2 failed; next attempt" in html and "data-left" in html
    assert 'summary>result (' in html                   # a large result is collapsed
    assert "sleep 20 s" in html
    assert "redriven ×1" in html and "after charge_payment failed (5 attempts)" in html and "feed broken" in html
    assert 'data-action="cancel"' in html and 'data-action="wake"' in html
    assert 'data-action="send"' not in html  # order_fulfillment never waits for an event
    assert 'data-action="redrive"' not in html
    assert f'data-sse="/sse/executions/{EID}"' in html


def test_a_sleeping_execution_sleeps_in_its_sleep_step_and_the_next_one_waits(console, control_plane):
    # given: as the engine records it: the sleep step settled with its wake_at, current_step is the next one
    control_plane.add(execution_doc("s1", status="SLEEPING", step=3, timer="sleep",
                                    next_wake_at="2999-01-01T00:00:00.000000Z"),
                      steps=[{"step_index": i, "name": n, "status": "SUCCEEDED", "attempts": 1, "started_at": T0,
                              "finished_at": T0, "result": {"wake_at": "2999-01-01T00:00:00.000000Z"} if i == 2 else {},
                              "error": None, "final": False}
                             for i, n in enumerate(["reserve_inventory", "charge_payment", "wait_for_carrier_pickup"])])
    _, html = get(console, "/executions/s1")
    assert 'class="step t-sleeping k-sleep" data-step="2"' in html and "left</time> (until 2999-01-01" in html
    assert 'class="step t-pending k-step" data-step="3"' in html and "runs when the sleep ends" in html
    assert 'data-action="wake"' in html


def test_timeline_renders_waits_compensation_and_branches_when_present(console, control_plane):
    control_plane.add(execution_doc("w1", workflow="expense_approval", status="WAITING", step=1,
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00Z"}))
    _, html = get(console, "/executions/w1")
    assert 'class="step t-waiting' in html and "waiting for event <b>approved</b>" in html
    assert 'data-action="send" data-event="approved"' in html
    control_plane.add(
        execution_doc("c1", status="FAILED", step=1, compensated=True,
                      error={"code": "permanent_error", "message": "card declined"}),
        steps=[{"step_index": 0, "name": "fan_out", "status": "SUCCEEDED", "attempts": 1, "started_at": T0,
                "finished_at": T0, "result": None, "error": None, "final": False},
               {"step_index": 0, "name": "fan_out", "branch": 1, "status": "SUCCEEDED", "attempts": 3,
                "started_at": T0, "finished_at": T0, "result": {"n": 1}, "error": None, "final": False},
               {"step_index": 0, "name": "undo_reserve", "kind": "compensation", "status": "SUCCEEDED",
                "attempts": 1, "started_at": T0, "finished_at": T0, "result": None, "error": None, "final": False}])
    _, html = get(console, "/executions/c1")
    assert "</svg> compensated</span>" in html and "<h2>Compensation</h2>" in html and "undoes step 0 undo_reserve" in html
    assert '<table class="branches"><tbody><tr class="t-done"><td class="idx">1</td>' in html
    assert 'data-action="redrive"' not in html and "card declined" in html  # compensated: the API refuses a redrive
    assert 'data-action="cancel"' not in html


def test_timeline_shows_waits_fan_outs_undo_steps_events_and_a_failed_compensation(console, control_plane):
    # given: an approval waiting for its event, with an event already sent to it
    control_plane.add(execution_doc("a1", workflow="expense_approval", status="WAITING", step=1,
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00.000000Z"}))
    control_plane.events.append({"execution_id": "a1", "event": "approved", "event_id": "mail-9", "data": {"ok": True}})
    _, html = get(console, "/executions/a1")
    assert 'class="step t-waiting k-wait_for_event" data-step="1"' in html and "times out <time" in html
    assert "undo: refund" in html and "waits for event" not in html.split('data-step="1"')[1].split("</li>")[0]
    assert "<h2>Events</h2>" in html and "mail-9" in html and "kept until a wait for it" in html
    # once an event came (arrived), until its delivery: it came and resumes the execution, not "waiting for"
    control_plane.add(execution_doc("a3", workflow="expense_approval", status="WAITING", step=1,
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00.000000Z",
                                                 "arrived": True}))
    _, html = get(console, "/executions/a3")
    step = html.split('data-step="1"')[1].split("</li>")[0]
    assert "event <b>approved</b> came: its delivery resumes the execution" in step, step
    assert "waiting for event" not in step and "it came, its delivery resumes the execution" in html
    # once the execution ended, no wait will take it
    control_plane.add(execution_doc("a2", workflow="expense_approval", status="COMPLETED", step=3))
    control_plane.events.append({"execution_id": "a2", "event": "approved", "event_id": "mail-10", "data": {}})
    _, html = get(console, "/executions/a2")
    assert "mail-10" in html and "not consumed" in html and "kept until a wait for it" not in html
    # a map fanning out: its progress, and its many branches collapsed (opened when one failed)
    branches = [{"step_index": 1, "branch": i, "kind": "branch", "status": "FAILED" if i == 7 else "SUCCEEDED",
                 "attempts": 1, "started_at": T0, "finished_at": T0, "next_wake_at": None, "result": {"n": i},
                 "error": {"code": "step_error", "message": "throttled"} if i == 7 else None, "generation": 0}
                for i in range(12)]
    control_plane.add(execution_doc("m1", workflow="batch_resize", step=1,
                                    fanout={"branches": 12, "succeeded": 11, "max_concurrency": 10}), steps=branches)
    _, html = get(console, "/executions/m1")
    assert "11/12 branches done, at most 10 at once" in html and "map over <code>images</code>" in html
    assert '<details class="branches" open><summary>12 branches: 11 done, 1 failed</summary>' in html
    assert "throttled" in html
    # a failed compensation: where it failed and why the undo did not finish
    control_plane.add(execution_doc("c2", workflow="expense_approval", status="COMPENSATION_FAILED", step=3,
                                    failed_step=2, compensated=False,
                                    error={"code": "permanent_error", "message": "card declined"},
                                    compensation_error={"code": "step_error", "message": "refund API down"}))
    _, html = get(console, "/executions/c2")
    assert 'class="badge s-compensation_failed"' in html and "compensation failed" in html
    assert "refund API down" in html and 'class="step t-stopped k-step" data-step="2"' in html
    assert 'data-action="redrive"' not in html  # the API refuses to redrive COMPENSATION_FAILED
    # an undo a deploy stopped: the deploy's error, the failure it was undoing, and the redrive offered
    control_plane.add(execution_doc("c3", workflow="expense_approval", status="FAILED", step=0, failed_step=2,
                                    compensating=True,
                                    error={"code": "workflow_version_missing", "message": "version 1 is gone"},
                                    compensating_for={"code": "permanent_error", "message": "card declined"}))
    _, html = get(console, "/executions/c3")
    assert "version 1 is gone" in html and "undoing its completed steps after this failure" in html
    assert "card declined" in html and 'data-action="redrive"' in html
    assert "its undo stopped at this step" in html and "compensating after" not in html


def test_start_form_is_generated_from_the_input_schema(console, control_plane):
    status, html = get(console, "/workflows/order_fulfillment/start")
    assert status == 200
    assert 'type="text" minlength="1" name="order_id"' in html and "Order Id *" in html
    assert 'type="number" step="1" min="1" name="amount_cents"' in html
    assert 'data-kind="json"' in html and "[{&quot;sku&quot;: &quot;&quot;, &quot;qty&quot;: 0}]" in html
    assert 'type="checkbox" name="gift"' in html and "<option selected>standard</option>" in html
    assert 'id="in-email" data-field="email" data-kind="string"' in html and "leave empty for none" in html
    assert "The shop&#x27;s order id" in html and 'id="in-token"' in html
    _, free = get(console, "/workflows/free_form/start")
    assert "data-raw" in free
    assert get(console, "/workflows/nope/start")[0] == 404
    _, listing = get(console, "/workflows")
    assert 'href="/workflows/order_fulfillment/start"' in listing and "wait_for_carrier_pickup" in listing
    assert "input: order_id*: string, amount_cents*: integer" in listing and "retries: 5 attempts" in listing


def test_api_forwarding_needs_the_page_token_and_passes_refusals_through(console, control_plane):
    retrying_order(control_plane)
    # without the page's token (another site's form, a curl): refused before anything reaches the API
    seen = len(control_plane.requests)
    assert api(console, "POST", f"/executions/{EID}/cancel", {"reason": "x"}, token=None)[0] == 403
    assert api(console, "POST", f"/executions/{EID}/cancel", {"reason": "x"}, token="guess")[0] == 403
    assert len(control_plane.requests) == seen
    # with it: forwarded as it came
    status, e = api(console, "POST", f"/executions/{EID}/cancel", {"reason": "duplicate"})
    assert (status, e["status"], e["cancel_reason"]) == (200, "CANCELLED", "duplicate")
    assert control_plane.requests[-1]["body"] == {"reason": "duplicate"}
    # the API's refusals come back with their status and whole document
    status, err = api(console, "POST", f"/executions/{EID}/wake")
    assert status == 409 and err == {"error": "execution_ended", "message": f"execution {EID} is CANCELLED",
                                     "execution_status": "CANCELLED"}
    status, err = api(console, "POST", "/executions", {"workflow": "order_fulfillment", "input": {"order_id": "o"}})
    assert status == 400 and err["error"] == "invalid_input" and err["problems"][0]["field"] == "amount_cents"
    status, r = api(console, "POST", f"/executions/{EID}/events/go", {"data": {}})
    assert status == 409
    status, listing = api(console, "GET", "/executions?limit=5")
    assert status == 200 and listing["executions"][0]["execution_id"] == EID


def test_against_a_deployment_the_console_signs_and_the_browser_never_sees_credentials(control_plane, monkeypatch):
    # given: a console whose client signs (as for a Function URL), credentials from the environment
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    signed = Console(LoomClient(control_plane.url, sign=True, region="eu-west-1"), interval_s=0.1).start()
    try:
        retrying_order(control_plane)
        # when: a page, an /api call and the live view, as the browser makes them (unsigned)
        status, html = get(signed, f"/executions/{EID}")
        api_status, _ = api(signed, "POST", f"/executions/{EID}/cancel", {"reason": "signed"})
        resp = urllib.request.urlopen(signed.url + f"sse/executions/{EID}", timeout=10)
        (event,) = read_events(resp, 1)
        resp.close()
    finally:
        signed.stop()
    # then: every request that reached the API was SigV4-signed; nothing the browser got holds a credential
    assert (status, api_status) == (200, 200)
    assert control_plane.requests and all(
        {k.lower(): v for k, v in r["headers"].items()}["authorization"].startswith(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") for r in control_plane.requests)
    for text in (html, json.dumps(event)):
        assert "AKIDEXAMPLE" not in text and "EXAMPLEKEY" not in text


def test_requests_naming_another_host_are_refused(console):
    # a DNS-rebinding page reaches 127.0.0.1 under its own name: the Host header gives it away
    status, body = get(console, "/", headers={"host": "evil.example:80"})
    assert status == 403 and "forbidden_host" in body


def test_a_missing_execution_is_an_error_page_with_the_api_code(console):
    status, html = get(console, "/executions/nope")
    assert status == 404 and "execution_not_found" in html and "execution nope does not exist" in html


def read_events(resp, count: int, timeout_s: float = 10) -> list[tuple[str, dict]]:
    events, name, deadline = [], None, time.monotonic() + timeout_s
    while len(events) < count and time.monotonic() < deadline:
        line = resp.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name:
            events.append((name, json.loads(line[6:])))
            name = None
    return events


def test_the_live_view_pushes_the_timeline_when_the_execution_changes(console, control_plane):
    # given: an order running its first step
    control_plane.add(execution_doc(EID))
    resp = urllib.request.urlopen(console.url + f"sse/executions/{EID}", timeout=10)
    assert resp.headers["content-type"].startswith("text/event-stream")
    (first,) = read_events(resp, 1)
    assert first[0] == "update" and first[1]["status"] == "RUNNING"
    # when: it goes to sleep (the console polls every 0.1 s here)
    control_plane.update(EID, status="SLEEPING", current_step=2, timer="sleep",
                         next_wake_at="2999-01-01T00:00:00.000000Z")
    # then: one update with the re-rendered fragment, and none while nothing changes
    (second,) = read_events(resp, 1)
    assert second[1]["status"] == "SLEEPING" and 'class="step t-sleeping k-sleep" data-step="2"' in second[1]["html"]
    control_plane.update(EID, status="COMPLETED", current_step=5, timer=None, next_wake_at=None)
    (third,) = read_events(resp, 1)
    assert third[1]["status"] == "COMPLETED" and "data-action" not in third[1]["html"]
    resp.close()
    # the history is read only when the execution changed (three times), not on every poll
    polls = [r["path"] for r in control_plane.requests if r["path"].startswith(f"/executions/{EID}")]
    assert polls.count(f"/executions/{EID}") >= 3
    assert len([p for p in polls if "/history" in p]) == 3


def test_the_live_view_keeps_each_failed_attempts_error_after_the_step_succeeds(console, control_plane):
    # given: a step failing its first attempt (its record keeps only the latest error, and none on success)
    record = {"step_index": 0, "name": "reserve_inventory", "status": "FAILED", "attempts": 1, "started_at": T0,
              "finished_at": T0, "result": None, "error": {"code": "step_error", "message": "TimeoutError: slow"},
              "final": False}
    control_plane.add(execution_doc(EID, timer="retry", next_wake_at="2999-01-01T00:00:00.000000Z"), steps=[record])
    resp = urllib.request.urlopen(console.url + f"sse/executions/{EID}", timeout=10)
    read_events(resp, 1)
    # when: the next attempt succeeds
    control_plane.update(EID, current_step=1, timer="lease",
                         steps=[{**record, "status": "SUCCEEDED", "attempts": 2, "error": None, "result": {"ok": 1}}])
    (update,) = read_events(resp, 1)
    # then: the page still shows what the first attempt died of
    assert "2 attempts (retried)" in update[1]["html"]
    assert "attempt 1 failed: <b>step_error</b>: TimeoutError: slow" in update[1]["html"]
    resp.close()


def test_the_list_stream_pushes_new_executions(console, control_plane):
    resp = urllib.request.urlopen(console.url + "sse/list?workflow=order_fulfillment", timeout=10)
    (first,) = read_events(resp, 1)
    assert "No executions match" in first[1]["html"]
    control_plane.add(execution_doc("new-one"))
    (second,) = read_events(resp, 1)
    assert "new-one" in second[1]["html"]
    resp.close()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_loom_console_prints_its_url_serves_and_stops_on_ctrl_c_even_started_with_sigint_ignored(control_plane,
                                                                                                 sigint):
    # given: a console started as a shell starts a background job (SIGINT ignored, inherited), or plainly
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    proc = subprocess.Popen([sys.executable, "-m", "loom_cli.main", "--url", control_plane.url, "console"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        assert line.startswith("loom console: http://127.0.0.1:") and "unsigned" in line, line
        url = line.split()[2]
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and "Executions" in r.read().decode()
        # when
        proc.send_signal(signal.SIGINT)
        # then: it stops, and says so
        assert proc.wait(timeout=10) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:  # never leave it running, whatever failed above
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def test_loom_console_refuses_a_port_in_use(control_plane, capsys):
    from loom_cli.main import main

    busy = Console(LoomClient(control_plane.url))
    try:
        assert main(["--url", control_plane.url, "console", "--port", str(busy.port)]) == 2
        assert "cannot listen on 127.0.0.1" in capsys.readouterr().err
    finally:
        busy.httpd.server_close()


def test_loom_console_open_opens_the_printed_url_in_the_browser(control_plane, monkeypatch, capsys):
    from http.server import ThreadingHTTPServer

    import loom_cli.console as console_module
    from loom_cli.main import main

    opened = []
    monkeypatch.setattr(console_module.webbrowser, "open", opened.append)
    monkeypatch.setattr(ThreadingHTTPServer, "serve_forever", lambda self, poll_interval=0.5: (_ for _ in ()).throw(
        KeyboardInterrupt()))  # Ctrl-C as soon as it serves
    assert main(["--url", control_plane.url, "console", "--open"]) == 0
    url = capsys.readouterr().out.split()[2]
    assert opened == [url] and url.startswith("http://127.0.0.1:")


def test_the_execution_page_shows_its_cost_ledger_with_the_priced_line_on_hover(console, control_plane):
    # given: an execution whose ledger counted 12 requests and 9.5 units over 3 messages
    cost = {"requests": 12, "read_units": 1.5, "write_units": 8.0, "messages": 3, "lambda_ms": 420}
    control_plane.add(execution_doc(EID, step=1, cost=cost))
    # when
    status, html = get(console, f"/executions/{EID}")
    # then
    assert status == 200
    assert "<dt>cost so far</dt>" in html and "12 requests · 9.5 units · 3 msgs · ~$" in html
    assert 'title="12 DynamoDB requests, 1.5 read units, 8 write units, 3 messages, 420 worker ms: about $' in html


def test_timeline_names_a_step_that_fanned_out_by_its_branches_when_nothing_else_names_it():
    # given: a code-first execution cancelled while its map step fanned out: no record of the step, no step
    # list to name it, its branches named by the API
    from loom_cli.console.timeline import timeline
    from loom_cli.sdk.models import Execution, FanOutProgress, History

    e = Execution.model_validate({"execution_id": "e-1", "workflow": "fan", "status": "CANCELLED", "current_step": 1,
                                  "style": "code", "step_count": 2})
    history = History.model_validate({"execution_id": "e-1", "steps": [
        {"step_index": 0, "name": "list", "kind": "task", "status": "SUCCEEDED", "attempts": 1, "result": [1, 2]},
        {"step_index": 1, "branch": 0, "kind": "branch", "name": "resize", "status": "SUCCEEDED", "attempts": 1},
        {"step_index": 1, "branch": 1, "kind": "branch", "name": "resize", "status": "PENDING",
         "next_wake_at": "2026-12-01T00:00:00Z"}]})
    # when
    html = timeline(e, history, None)
    # then
    assert '<span class="name">resize</span>' in html and "step 1" not in html, html
    # and the branch that never ran is skipped, not waiting for an attempt that will not come
    assert re.search(r'<tr class="t-skipped"><td class="idx">1</td><td class="state">skipped</td>', html), html
    assert "next attempt" not in html
    # and: branches with no row never began (max_concurrency held them back), as `loom history` says
    assert "a branch with no row here never started (the execution ended first)" in html
    # and with the execution's count of the step's branches: how many, and why; none when all have a row
    counted = e.model_copy(update={"fanouts": [FanOutProgress(step_index=1, branches=4, succeeded=1, max_concurrency=2)]})
    assert "2 of its 4 branches never started (max_concurrency 2 held them back and the execution ended first): " \
           "they have no row here" in timeline(counted, history, None)
    whole = e.model_copy(update={"fanouts": [FanOutProgress(step_index=1, branches=2, succeeded=1, max_concurrency=2)]})
    assert "never started" not in timeline(whole, history, None)
    done = e.model_copy(update={"status": "COMPLETED"})
    finished = History.model_validate({"execution_id": "e-1", "steps": [
        {"step_index": 1, "name": "resize", "kind": "fanout", "status": "SUCCEEDED", "attempts": 1},
        {"step_index": 1, "branch": 0, "kind": "branch", "name": "resize", "status": "SUCCEEDED", "attempts": 1}]})
    assert "never started" not in timeline(done, finished, None)


def test_timeline_of_a_wait_whose_definition_is_not_deployed_says_so_instead_of_a_question_mark():
    from loom_cli.console.timeline import timeline
    from loom_cli.sdk.models import Execution, History

    # given: a WAITING execution whose version this deployment does not have (the API cannot name the event)
    e = Execution.model_validate({"execution_id": "e-1", "workflow": "approval", "status": "WAITING",
                                  "current_step": 1, "timer": "event", "step_count": 2,
                                  "waiting_for": {"event": None, "timeout_at": "2026-12-08T00:00:00Z"}})
    # when
    html = timeline(e, History.model_validate({"execution_id": "e-1", "steps": []}), None)
    # then
    assert "<b>?</b>" not in html and "the definition it waits on is not deployed here" in html, html


def test_the_execution_page_of_a_wait_whose_version_is_not_deployed_says_it_cannot_go_on(console, control_plane):
    # given: a WAITING execution pinned to a version this deployment does not have
    problem = {"code": "workflow_version_missing", "message": "this execution started on version 1 of workflow "
               "'expense_approval' and runs to its end on it, but ..."}
    control_plane.add(execution_doc(EID, "expense_approval", "WAITING", 1, timer="event", workflow_version=1,
                                    waiting_for={"event": None, "timeout_at": "2999-01-01T00:00:00Z"},
                                    cannot_run=problem))
    # when
    status, html = get(console, f"/executions/{EID}")
    # then: no "event None", and what its next delivery fails it with
    assert status == 200
    assert "<b>None</b>" not in html and "the definition it waits on is not deployed here" in html
    assert "cannot go on here" in html and "workflow_version_missing" in html


def test_timeline_of_a_sleep_a_cancel_cut_short_shows_it_stopped_not_done(console, control_plane):
    # given: an order cancelled while it slept at step 2 (its sleep's record says SUCCEEDED, written as it began)
    sleep_row = {"step_index": 2, "name": "wait_for_carrier_pickup", "kind": "sleep", "status": "SUCCEEDED",
                 "attempts": 1, "started_at": "2026-01-01T00:00:00.000000Z",
                 "finished_at": "2026-01-01T00:00:00.000000Z", "result": {"wake_at": "2026-01-01T00:00:20.000000Z"},
                 "error": None, "final": False}
    control_plane.add(execution_doc("c-1", status="CANCELLED", step=2, cancelled_by="ops"), steps=[sleep_row],
                      operations=[{"op": "cancel", "by": "ops", "at": "2026-01-01T00:00:05.000000Z", "version": 5,
                                   "reason": None, "detail": {}}])
    # when
    _, html = get(console, "/executions/c-1")
    # then: the sleep is stopped, and says the cancel cut it short
    item = html.split('data-step="2"')[0].rsplit("<li", 1)[1] + html.split('data-step="2"')[1].split("</li>")[0]
    assert "t-stopped" in item and "cancelled while sleeping" in item, item


def test_the_api_passthrough_refuses_nan_as_the_caller_s_error_and_says_what_an_oversized_body_needs(console,
                                                                                                    control_plane):
    # given: a body with NaN (Python's json reads it; JSON has none), and one over what the console forwards
    def raw(data: bytes) -> tuple[int, dict]:
        req = urllib.request.Request(console.url + "api/executions", data=data, method="POST",
                                     headers={"content-type": "application/json", "x-loom-console-token": console.token})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    # when
    nan_status, nan = raw(b'{"workflow": "free_form", "input": {"x": NaN}}')
    big_status, big = raw(b'{"workflow": "free_form", "input": {"x": "' + b"a" * (2 * 1024 * 1024) + b'"}}')
    # then: 400 invalid_json (before: 502, as if the API had failed), nothing sent on; 413 saying the limits
    assert (nan_status, nan["error"]) == (400, "invalid_json") and "NaN" in nan["message"], nan
    assert not any(r["method"] == "POST" for r in control_plane.requests)
    assert big_status == 413 and "the API takes request bodies of at most 256 KB" in big["message"], big


@pytest.mark.parametrize("limit", ["0", "-5", "abc", "101"])
def test_a_list_page_with_a_bad_limit_says_so_instead_of_showing_twenty(console, control_plane, limit):
    # when (before: -5 and abc showed 20 rows as if no limit was asked; 0 and 101 were the API's refusal)
    status, html = get(console, f"/?limit={limit}")
    # then
    assert status == 400 and "limit must be" in html, (status, html[:500])
