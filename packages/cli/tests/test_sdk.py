"""``LoomClient`` against the fake control plane: each method, its models, paging, waiting, streaming, and
the one error type."""

from __future__ import annotations

import json
import threading

import pytest
from fake_control_plane import execution_doc, scenario

from loom_cli.sdk import (
    BranchRecord,
    EventSent,
    Execution,
    ListEntry,
    LoomClient,
    LoomError,
    Started,
    StepRecord,
)


@pytest.fixture
def client(control_plane) -> LoomClient:
    return LoomClient(control_plane.url)


def test_start_returns_the_started_execution_and_says_whether_this_call_created_it(client, control_plane):
    started = client.start("free_form", {"x": 1}, idempotency_token="t-1")
    assert isinstance(started, Started) and started.created is True and started.status == "RUNNING"
    assert started.links is not None and started.links.self_ == f"/executions/{started.execution_id}"
    assert started.document()["links"]["self"] == f"/executions/{started.execution_id}"
    assert control_plane.requests[-1]["body"] == {"workflow": "free_form", "input": {"x": 1}, "idempotency_token": "t-1"}


def test_get_returns_the_execution_typed_and_keeps_fields_it_does_not_know(client, control_plane):
    control_plane.add(execution_doc("w-1", workflow="expense_approval", status="WAITING", step=1, timer="event",
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00.000000Z"},
                                    a_field_of_a_newer_api="kept"))
    e = client.get("w-1")
    assert isinstance(e, Execution) and e.waiting_for is not None and e.waiting_for.event == "approved"
    assert e.ended is False and e.model_extra == {"a_field_of_a_newer_api": "kept"}
    assert e.document() == control_plane.executions["w-1"]


def test_list_iterates_every_page_and_stops_at_a_limit(client, control_plane):
    for i in range(25):
        control_plane.add(execution_doc(f"e-{i:02d}", created_at=f"2026-01-01T00:00:{i:02d}.000000Z"))
    seen = len(control_plane.requests)
    entries = list(client.list(page_size=10))
    assert [x.execution_id for x in entries] == [f"e-{i:02d}" for i in range(24, -1, -1)]
    assert all(isinstance(x, ListEntry) for x in entries)
    assert len(control_plane.requests) - seen == 3
    assert len(list(client.list(page_size=10, limit=12))) == 12
    assert [x.execution_id for x in client.list(status="RUNNING", limit=2)] == ["e-24", "e-23"]


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": -1}, {"limit": "5"}, {"limit": 2.5}, {"limit": True},
                                 {"page_size": 0}, {"page_size": "10"}, {"page_size": 500}])
def test_list_refuses_a_limit_or_page_size_that_is_not_a_positive_whole_number_before_any_request(client, control_plane,
                                                                                                  bad):
    control_plane.add(execution_doc("e-1"))
    seen = len(control_plane.requests)
    with pytest.raises(LoomError) as refused:
        client.list(**bad)  # at the call, not at the first iteration
    (what, value), = bad.items()
    assert refused.value.code == "invalid_argument"
    needs = "of at least 1" if what == "limit" else "from 1 to 100"
    assert f"{what} must be a whole number {needs}" in str(refused.value) and f"got {value!r}" in str(refused.value)
    assert len(control_plane.requests) == seen


@pytest.mark.parametrize("page_size", [0, 101, "50"])
def test_history_pages_refuses_a_page_size_outside_1_to_100_naming_it_before_any_request(client, control_plane,
                                                                                       page_size):
    control_plane.add(execution_doc("e-1"))
    seen = len(control_plane.requests)
    with pytest.raises(LoomError) as refused:
        client.history_pages("e-1", page_size=page_size)
    assert refused.value.code == "invalid_argument" and "page_size must be a whole number from 1 to 100" in str(refused.value)
    assert len(control_plane.requests) == seen


@pytest.mark.parametrize(("call", "words"), [
    (lambda c: c.start("wf", {"when": __import__("datetime").datetime(2026, 1, 1)}), "not JSON serializable"),
    (lambda c: c.start("wf", {"tags": {"a", "b"}}), "not JSON serializable"),
    (lambda c: c.start("wf", {"ratio": float("nan")}), "Out of range float values are not JSON compliant"),
    (lambda c: c.send("e-1", "go", {"x": float("inf")}), "Out of range float values"),
    (lambda c: c.list_page(started_after=5), "started_after and started_before take a datetime"),
    (lambda c: c.get(None), "an execution id, event name or callback token is a string, got NoneType"),
    (lambda c: c.get(""), "the execution id is empty; pass the one its start answered with"),
    (lambda c: c.cancel(" "), "the execution id is empty"),
    (lambda c: c.complete_callback(""), "the callback token is empty"),
], ids=["datetime", "set", "nan", "infinity-in-an-event", "time-of-another-type", "id-none", "id-empty",
        "id-blank", "token-empty"])
def test_an_argument_no_request_can_carry_is_an_invalid_argument_before_any_request(client, control_plane, call, words):
    control_plane.add(execution_doc("e-1"))
    seen = len(control_plane.requests)
    with pytest.raises(LoomError) as refused:
        call(client)
    assert refused.value.code == "invalid_argument" and words in str(refused.value), str(refused.value)
    assert len(control_plane.requests) == seen


def test_list_page_with_check_more_drops_a_token_nothing_follows(client, control_plane):
    for i in range(20):
        control_plane.add(execution_doc(f"e-{i:02d}", created_at=f"2026-01-01T00:00:{i:02d}.000000Z"))
    assert client.list_page(limit=20).next_token  # what the API hands out for a full page
    page = client.list_page(limit=20, check_more=True)
    assert page.next_token is None and page.document()["next_token"] is None


def test_history_reads_every_page_and_keeps_operations_and_events_of_the_first(client, control_plane):
    eid = control_plane.play("map")
    pages = list(client.history_pages(eid, page_size=3))
    assert [len(p.steps) for p in pages] == [3, 3, 1] and pages[0].events == [] and pages[1].events is None
    h = client.history(eid)
    assert len(h.steps) == 7 and h.next_token is None
    assert [type(r) for r in h.steps].count(BranchRecord) == 4
    assert [r.name for r in h.records()] == ["list_images", "resize_images", "summarize"]
    assert [b.branch for b in h.branches(1)] == [0, 1, 2, 3]
    assert h.document()["steps"] == scenario("map")["sequence"][-1]["history"]["steps"]


def test_history_sorts_out_compensations_and_events(client, control_plane):
    eid = control_plane.play("compensated")
    h = client.history(eid)
    assert [(r.step_index, r.name) for r in h.compensations()] == [(1, "charge_payment")]
    assert all(isinstance(r, StepRecord) and r.kind != "compensation" for r in h.records())
    eid = control_plane.play("waiting")
    assert [(ev.event, ev.event_id, ev.consumed_by_step) for ev in client.history(eid).events] == [
        ("approved", "mail-7", 1)]


def test_operator_actions_return_the_execution_and_send_returns_the_outcome(client, control_plane):
    control_plane.add(execution_doc("o-1", workflow="expense_approval", status="WAITING", step=1, timer="event",
                                    waiting_for={"event": "approved", "timeout_at": None}))
    sent = client.send("o-1", "approved", {"approved": True}, event_id="mail-1")
    assert isinstance(sent, EventSent) and (sent.outcome, sent.event_id) == ("delivered", "mail-1")
    assert client.send("o-1", "approved", event_id="mail-1").outcome == "duplicate"
    assert client.complete_callback("cb-1", {"approved": True}).outcome == "delivered"
    cancelled = client.cancel("o-1", reason="duplicate order")
    assert (cancelled.status, cancelled.cancel_reason) == ("CANCELLED", "duplicate order")
    control_plane.add(execution_doc("f-1", status="FAILED", step=1))
    assert client.redrive("f-1").redrives == 1
    control_plane.add(execution_doc("s-1", status="SLEEPING", step=3, timer="sleep", next_wake_at="2999-01-01T00:00:00Z"))
    assert client.wake("s-1").status == "RUNNING"
    assert [w.name for w in client.workflows()][:2] == ["order_fulfillment", "expense_approval"]
    assert client.workflow("expense_approval").waits_for() == ["approved"]


def test_every_failure_is_a_loom_error_with_the_apis_code_message_status_and_execution_status(client, control_plane):
    control_plane.add(execution_doc("done", status="COMPLETED", step=5))
    with pytest.raises(LoomError) as refused:
        client.redrive("done")
    exc = refused.value
    assert (exc.code, exc.status, exc.execution_status, exc.is_refusal) == ("not_failed", 409, "COMPLETED", True)
    assert exc.message == "execution done is COMPLETED" and str(exc) == "not_failed (HTTP 409): execution done is COMPLETED"
    with pytest.raises(LoomError) as invalid:
        client.start("order_fulfillment", {"order_id": "o"})
    assert invalid.value.code == "invalid_input" and invalid.value.problems[0]["field"] == "amount_cents"
    with pytest.raises(LoomError) as bad_name:
        client.send("done", "not a name")
    assert (bad_name.value.code, bad_name.value.status) == ("invalid_argument", None)
    with pytest.raises(LoomError) as unreachable:
        LoomClient("http://127.0.0.1:9").get("x")
    assert (unreachable.value.code, unreachable.value.status, unreachable.value.is_refusal) == ("unreachable", None, False)


def test_a_server_that_drops_the_connection_mid_request_is_an_unreachable_loom_error():
    # given: a server that reads the request, then resets the connection without an answer (a killed process)
    import socket
    import struct

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def drop_one():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        conn.close()

    server = threading.Thread(target=drop_one, daemon=True)
    server.start()
    try:
        # when
        with pytest.raises(LoomError) as dropped:
            LoomClient(f"http://127.0.0.1:{listener.getsockname()[1]}").get("x")
    finally:
        server.join(5)
        listener.close()
    # then: a LoomError saying what happened and what to do, not a raw socket error
    assert dropped.value.code == "unreachable" and "connection broke" in dropped.value.message
    assert "read the execution before retrying" in dropped.value.message


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://127.0.0.1:9", "is not an http(s) URL"),
    ("http://127.0.0.1:9?x=1", "carries a query or a fragment; pass the control plane's URL alone (http://127.0.0.1:9)"),
    ("http://127.0.0.1:9/#top", "carries a query or a fragment"), ("http://127.0.0.1:9?", "carries a query"),
], ids=["scheme", "query", "fragment", "empty-query"])
def test_a_url_that_is_not_the_control_planes_alone_is_a_configuration_error(url, words):
    with pytest.raises(LoomError) as refused:
        LoomClient(url)
    assert refused.value.code == "configuration" and words in refused.value.message


def test_without_a_url_it_finds_the_local_stack_from_the_state_file_or_says_how(control_plane, state_file):
    with pytest.raises(LoomError) as missing:
        LoomClient()
    assert missing.value.code == "configuration" and str(state_file) in missing.value.message
    state_file.parent.mkdir(parents=True)
    state_file.write_text(json.dumps({"url": control_plane.url, "queue_url": "q"}))
    assert LoomClient().url == control_plane.url and LoomClient().signed is False


def test_wait_returns_the_execution_once_it_is_in_a_wanted_status(client, control_plane):
    eid = control_plane.play("waiting", at=None)
    assert client.wait(eid, "WAITING", interval_s=0.001).status == "WAITING"
    assert client.wait(eid, interval_s=0.001).status == "COMPLETED"


def test_wait_times_out_or_stops_when_it_ended_elsewhere_naming_the_status(client, control_plane):
    control_plane.add(execution_doc("r-1"))
    with pytest.raises(LoomError) as late:
        client.wait("r-1", timeout_s=0.2, interval_s=0.05)
    assert (late.value.code, late.value.execution_status, late.value.status) == ("wait_timeout", "RUNNING", None)
    control_plane.add(execution_doc("c-1", status="COMPLETED", step=5))
    with pytest.raises(LoomError) as ended:
        client.wait("c-1", "WAITING", timeout_s=5)
    assert (ended.value.code, ended.value.execution_status) == ("execution_ended", "COMPLETED")
    with pytest.raises(LoomError) as typo:
        client.wait("c-1", "DONE")
    assert typo.value.code == "invalid_argument"


def test_stream_yields_each_change_with_its_history_and_ends_with_the_execution(client, control_plane):
    eid = control_plane.play("map", at=None)
    changes = list(client.stream(eid, interval_s=0.001))
    assert [c.execution.status for c in changes] == ["RUNNING", "RUNNING", "RUNNING", "COMPLETED"]
    assert [(c.execution.fanout.succeeded if c.execution.fanout else None) for c in changes] == [None, 0, 2, None]
    assert [len(c.history.steps) for c in changes] == [0, 5, 5, 7]


def test_stream_keeps_each_failed_attempt_seen_after_the_step_succeeded(client, control_plane):
    failed = {"step_index": 0, "name": "reserve_inventory", "status": "FAILED", "attempts": 1, "started_at": None,
              "finished_at": None, "result": None, "error": {"code": "step_error", "message": "slow"}, "final": False,
              "kind": "task"}
    retry = execution_doc("r-2", timer="retry", next_wake_at="2999-01-01T00:00:00.000000Z")
    done = execution_doc("r-2", status="COMPLETED", step=5, version=9)
    control_plane.add(retry)
    control_plane.scripts["r-2"] = [
        {"execution": retry, "history": {"steps": [failed], "operations": []}},
        {"execution": done, "history": {"steps": [{**failed, "status": "SUCCEEDED", "attempts": 2, "error": None}],
                                        "operations": []}}]
    changes = list(client.stream("r-2", interval_s=0.001))
    assert [(f.step_index, f.attempt, f.error.message) for f in changes[-1].failed_attempts] == [(0, 1, "slow")]


def test_stream_keeps_each_failed_attempt_of_a_branch_though_the_execution_did_not_change(client, control_plane):
    # given: a map whose branch 1 fails its first attempt and then succeeds; the execution document stays the
    # same meanwhile (branches retry on their own items)
    fanning = execution_doc("m-1", step=1, fanout={"branches": 2, "succeeded": 1, "max_concurrency": 2})
    branch = {"step_index": 1, "branch": 1, "kind": "branch", "name": "each", "status": "RETRY", "attempts": 1,
              "error": {"code": "step_error", "message": "flaky"}}
    done = execution_doc("m-1", status="COMPLETED", step=5, version=9)
    control_plane.add(fanning)
    control_plane.scripts["m-1"] = [
        {"execution": fanning, "history": {"steps": [], "operations": []}},
        {"execution": fanning, "history": {"steps": [branch], "operations": []}},
        {"execution": fanning, "history": {"steps": [{**branch, "status": "SUCCEEDED", "attempts": 2, "error": None}],
                                           "operations": []}},
        {"execution": done, "history": {"steps": [], "operations": []}}]
    # when
    changes = list(client.stream("m-1", interval_s=0.001, branch_interval_s=0.001))
    # then: the branch's failed attempt is seen (a change of its own), and kept to the end
    assert [(f.step_index, f.branch, f.attempt, f.error.message) for f in changes[-1].failed_attempts] == [
        (1, 1, 1, "flaky")]
    assert [c.execution.status for c in changes] == ["RUNNING", "RUNNING", "COMPLETED"]


def test_stream_goes_on_after_the_end_when_asked_and_stops_on_its_event(client, control_plane):
    control_plane.add(execution_doc("x-1", status="FAILED", step=1))
    stop, wake = threading.Event(), threading.Event()
    seen = []
    for change in client.stream("x-1", interval_s=0.01, ended_interval_s=0.01, stop=stop, wake=wake):
        seen.append(change.execution.status)
        if len(seen) == 1:
            client.redrive("x-1")
            wake.set()
        else:
            stop.set()
    assert seen == ["FAILED", "RUNNING"]


def test_stream_reports_a_failed_poll_and_goes_on(control_plane):
    client = LoomClient(control_plane.url)
    changes = client.stream("nope", interval_s=0.001)
    first = next(changes)
    assert first.execution is None and first.problem.code == "execution_not_found"
    control_plane.add(execution_doc("nope", status="COMPLETED", step=5))
    assert next(changes).execution.status == "COMPLETED"


@pytest.mark.parametrize("call", [lambda c: c.wait("e-1", interval_s=0), lambda c: c.wait("e-1", interval_s=-1),
                                  lambda c: c.wait("e-1", interval_s=float("nan")),
                                  lambda c: c.stream("e-1", interval_s=0),
                                  lambda c: c.stream("e-1", branch_interval_s=-1)])
def test_a_poll_interval_of_zero_or_less_is_refused_at_the_call_before_any_request(client, control_plane, call):
    control_plane.add(execution_doc("e-1"))
    seen = len(control_plane.requests)
    with pytest.raises(LoomError) as refused:
        call(client)
    assert refused.value.code == "invalid_argument" and "must be a number of seconds above 0" in str(refused.value)
    assert len(control_plane.requests) == seen


def test_an_answer_cut_off_after_its_status_line_is_a_loom_error_not_a_raw_http_exception():
    # given: a server that sends a 409's head with a body length, then closes (killed mid-answer)
    import socket
    import threading

    from loom_cli.sdk import LoomClient

    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: 164\r\n\r\n")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        # when
        with pytest.raises(LoomError) as broke:
            LoomClient(f"http://127.0.0.1:{listener.getsockname()[1]}").cancel("e-1")
    finally:
        listener.close()
    # then: the SDK's one exception, saying the write may or may not have been applied
    assert broke.value.code == "unreachable" and "may or may not have been applied" in broke.value.message, broke.value


def test_a_request_body_is_sent_as_utf_8_so_the_apis_size_limit_counts_the_text_not_escapes(client, control_plane):
    # given: 100,000 characters of non-ASCII text: 230,000 bytes in UTF-8, 660,000 as \uXXXX escapes
    text = "é" * 80_000 + "😀" * 10_000 + "日" * 10_000
    # when
    client.start("free_form", {"note": text})
    # then: the body the API measured against its 256 KB limit is the UTF-8 text, and it reads back the same
    sent = next(r for r in control_plane.requests if r["method"] == "POST")
    size = int(sent["headers"]["Content-Length"])
    assert size == len(text.encode()) + len('{"workflow": "free_form", "input": {"note": ""}}'), size
    assert size < 256 * 1024 and sent["body"]["input"]["note"] == text


def test_a_lone_surrogate_which_utf_8_cannot_carry_is_sent_escaped(client, control_plane):
    client.start("free_form", {"note": "a\ud800b"})
    sent = next(r for r in control_plane.requests if r["method"] == "POST")
    assert sent["body"]["input"]["note"] == "a\ud800b"
