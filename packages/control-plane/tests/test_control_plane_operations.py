"""The operator's routes through the control-plane handler on moto: list, cancel, redrive, wake, history pages.

Each refusal is checked to answer the JSON envelope with its code and to write nothing.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid

import pytest
from loom_test_support.lambda_harness import FakeContext, function_url_event

OPERATOR_ARN = "arn:aws:sts::123456789012:assumed-role/loom-operator/loom-operator"  # in the event files
ORDER = {"order_id": "o-1", "amount_cents": 100}


def call(module, method: str, path: str, body: str | None = None, *, query: dict | None = None,
         iam: dict | None | bool = True):
    event = function_url_event(method, path, body)
    if query:
        event["rawQueryString"] = urllib.parse.urlencode(query)
        event["queryStringParameters"] = {k: str(v) for k, v in query.items()}
    if iam is None:
        event["requestContext"]["authorizer"] = None
    elif isinstance(iam, dict):
        event["requestContext"]["authorizer"] = {"iam": iam}
    reply = module.handler(event, FakeContext())
    headers = {k.lower(): v for k, v in (reply.get("headers") or {}).items()}
    assert headers.get("content-type") == "application/json", reply
    return reply["statusCode"], json.loads(reply["body"]), headers


def start(lambdas, workflow: str = "order_fulfillment", payload: dict | None = None) -> str:
    status, body, _ = call(lambdas.control_plane, "POST", "/executions",
                           json.dumps({"workflow": workflow, "input": ORDER if payload is None else payload}))
    assert status == 202, body
    return body["execution_id"]


def status_of(world, eid: str) -> str:
    return world.meta(eid)["status"]["S"]


def run_until(lambdas, world, eid: str, check, max_rounds: int = 200) -> None:
    """Deliver (and tick the sweeper when the queue is empty) until ``check(meta item)`` holds."""
    for _ in range(max_rounds):
        if check(world.meta(eid)):
            return
        if not lambdas.pump.deliver():
            lambdas.pump.tick()
    raise AssertionError(f"{eid} never got there: {world.meta(eid)}")


def sleeping(lambdas, world, workflow="order_fulfillment", payload=None) -> str:
    eid = start(lambdas, workflow, payload)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "SLEEPING")
    return eid


def failed_import(lambdas, world, fixes, feed: str = "payroll") -> str:
    eid = sleeping(lambdas, world, "fragile_import", {"feed": feed})
    assert call(lambdas.control_plane, "POST", f"/executions/{eid}/wake")[0] == 200
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "FAILED")
    return eid


@pytest.fixture
def fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_EXAMPLES_FIXES_DIR", str(tmp_path))
    return tmp_path


def assert_refused(lambdas, world, method, path, body=None, *, status, code, query=None):
    items, queued = world.items(), world.visible_count(world.queue_url)
    got_status, got, _ = call(lambdas.control_plane, method, path, body, query=query)
    assert (got_status, got["error"]) == (status, code), got
    assert set(got) <= {"error", "message", "execution_status"} and len(got["message"]) > 20
    assert world.items() == items and world.visible_count(world.queue_url) == queued
    return got


# -- list ----------------------------------------------------------------------------------------
def test_list_when_executions_exist_returns_them_newest_first_with_filters_and_pages(lambdas, world, clock):
    # given: an order and a greeting that COMPLETED, then three orders still live, a minute apart
    ids = [start(lambdas)]
    clock.advance(60)
    ids.append(start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0}))
    for eid in ids:
        assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    for _ in range(3):
        clock.advance(60)
        ids.append(start(lambdas))
    # when
    status, body, _ = call(lambdas.control_plane, "GET", "/executions")
    # then
    assert status == 200 and body["next_token"] is None
    assert [x["execution_id"] for x in body["executions"]] == ids[::-1]
    assert body["executions"][3] == {"execution_id": ids[1], "workflow": "flaky_greeting", "status": "COMPLETED",
                                     "created_at": "2026-11-29T13:01:00.000000Z"}
    assert [x["status"] for x in body["executions"]] == ["RUNNING"] * 3 + ["COMPLETED"] * 2  # each its real status
    # filters
    _, done, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "completed"})
    assert [x["execution_id"] for x in done["executions"]] == [ids[1], ids[0]]
    _, live, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "LIVE", "workflow": "order_fulfillment"})
    assert [x["execution_id"] for x in live["executions"]] == [ids[4], ids[3], ids[2]]
    _, running, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "running"})
    assert [x["execution_id"] for x in running["executions"]] == [ids[4], ids[3], ids[2]]
    _, sleeping, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "SLEEPING"})
    assert sleeping["executions"] == [] and sleeping["next_token"] is None
    _, orders, _ = call(lambdas.control_plane, "GET", "/executions", query={"workflow": "order_fulfillment"})
    assert [x["execution_id"] for x in orders["executions"]] == [ids[4], ids[3], ids[2], ids[0]]
    # started_after is inclusive, started_before exclusive: consecutive windows do not overlap
    fourth = body["executions"][1]["created_at"]
    _, window, _ = call(lambdas.control_plane, "GET", "/executions", query={
        "started_after": "2026-11-29T13:01:00Z", "started_before": fourth})
    assert [x["execution_id"] for x in window["executions"]] == [ids[2], ids[1]]
    _, offset, _ = call(lambdas.control_plane, "GET", "/executions", query={
        "started_after": "2026-11-29T14:00:00+01:00", "started_before": "2026-11-29T13:00:30"})
    assert [x["execution_id"] for x in offset["executions"]] == [ids[0]]
    # pages of two, through every execution once
    seen, token, pages = [], None, 0
    while True:
        query = {"limit": 2, **({"next_token": token} if token else {})}
        _, page, _ = call(lambdas.control_plane, "GET", "/executions", query=query)
        seen += [x["execution_id"] for x in page["executions"]]
        pages += 1
        token = page["next_token"]
        if token is None:
            break
    assert seen == ids[::-1] and pages == 3


@pytest.mark.parametrize(("query", "words"), [
    ({"limit": "0"}, "from 1 to 100"), ({"limit": "101"}, "from 1 to 100"), ({"limit": "ten"}, "whole number"),
    ({"limit": "-1"}, "whole number"), ({"status": "DONE"}, "must be one of"),
    ({"workflow": "a b"}, "1-128 characters"), ({"started_after": "yesterday"}, "ISO-8601"),
    ({"started_after": "2026-11-29T14:00:00Z", "started_before": "2026-11-29T13:00:00Z"}, "earlier than"),
    ({"next_token": "not a token!"}, "not a token"), ({"next_token": "e30"}, "not a token"),
    ({"next_token": "bm90LWpzb24"}, "not a token"), ({"page": "2"}, "unknown query parameter 'page'"),
    ({"started_after": "0001-01-01T00:00:00+01:00"}, "between 1970 and 9998"),
    ({"started_before": "9999-12-31T23:59:59-01:00"}, "between 1970 and 9998"),
], ids=["limit-0", "limit-101", "limit-word", "limit-negative", "status-unknown", "workflow-bad",
        "time-bad", "window-inverted", "token-bad-chars", "token-not-ours", "token-not-json", "unknown-param",
        "time-before-year-1-in-utc", "time-after-year-9999-in-utc"])
def test_list_when_query_is_invalid_answers_400_naming_the_parameter(lambdas, world, query, words):
    start(lambdas)
    got = assert_refused(lambdas, world, "GET", "/executions", query=query, status=400, code="invalid_request")
    assert words in got["message"], got["message"]


# -- cancel ----------------------------------------------------------------------------------------
def test_cancel_when_sleeping_ends_it_cancelled_out_of_the_due_index_and_nothing_runs_after(lambdas, world, clock):
    # given: an order asleep before shipping
    eid = sleeping(lambdas, world)
    assert "GSI1PK" in world.meta(eid)
    # when
    status, body, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/cancel",
                           json.dumps({"reason": "customer called to cancel"}))
    # then
    assert status == 200, body
    assert (body["status"], body["next_wake_at"], body["timer"]) == ("CANCELLED", None, None)
    assert (body["cancelled_by"], body["cancel_reason"]) == (OPERATOR_ARN, "customer called to cancel")
    assert body["started_by"] == OPERATOR_ARN
    assert "GSI1PK" not in world.meta(eid) or world.meta(eid)["GSI1PK"]["S"].startswith("FIN#")
    # and however long we wait, nothing after the sleep runs
    for _ in range(5):
        lambdas.pump.deliver() or lambdas.pump.tick()
    assert status_of(world, eid) == "CANCELLED"
    _, history, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    assert [s["name"] for s in history["steps"]] == ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup"]
    (op,) = history["operations"]
    assert (op["op"], op["by"], op["reason"]) == ("cancel", OPERATOR_ARN, "customer called to cancel")
    _, listed, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "CANCELLED"})
    assert [x["execution_id"] for x in listed["executions"]] == [eid]


def test_cancel_twice_returns_200_and_writes_nothing_the_second_time(lambdas, world):
    eid = sleeping(lambdas, world)
    assert call(lambdas.control_plane, "POST", f"/executions/{eid}/cancel")[0] == 200
    items = world.items()
    status, body, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/cancel", json.dumps({"reason": "again"}))
    assert (status, body["status"], body["cancel_reason"]) == (200, "CANCELLED", None)
    assert world.items() == items


def test_cancel_without_an_iam_identity_records_local(lambdas, world):
    eid = sleeping(lambdas, world)
    status, body, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/cancel", iam=None)
    assert (status, body["cancelled_by"]) == (200, "local")


def test_cancel_when_completed_is_409_with_its_status(lambdas, world):
    eid = start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    got = assert_refused(lambdas, world, "POST", f"/executions/{eid}/cancel", status=409, code="execution_ended")
    assert got["execution_status"] == "COMPLETED" and "COMPLETED" in got["message"]


@pytest.mark.parametrize(("body", "status", "code"), [
    ("[]", 400, "invalid_request"), ('{"reason": 5}', 400, "invalid_request"), ('{"why": "x"}', 400, "invalid_request"),
    ('{"reason": ""}', 400, "invalid_request"), ('{"reason": "a\\nb"}', 400, "invalid_request"),
    ("{bad", 400, "invalid_json"), (json.dumps({"reason": "x" * 20000}), 413, "input_too_large"),
], ids=["array", "reason-number", "unknown-field", "reason-empty", "reason-newline", "broken-json", "too-large"])
def test_cancel_when_body_is_invalid_is_refused_and_the_execution_keeps_sleeping(lambdas, world, body, status, code):
    eid = sleeping(lambdas, world)
    assert_refused(lambdas, world, "POST", f"/executions/{eid}/cancel", body, status=status, code=code)
    assert status_of(world, eid) == "SLEEPING"


# -- redrive ---------------------------------------------------------------------------------------
def test_redrive_when_failed_and_fixed_resumes_from_the_failed_step_and_keeps_the_failure(lambdas, world, fixes):
    # given: an import that failed at import_rows
    eid = failed_import(lambdas, world, fixes)
    _, failed, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    assert (failed["current_step"], failed["error"]["code"]) == (2, "permanent_error")
    _, listed, _ = call(lambdas.control_plane, "GET", "/executions", query={"status": "FAILED"})
    assert eid in [x["execution_id"] for x in listed["executions"]]
    # when: the feed is fixed and the execution redriven
    (fixes / "payroll").touch()
    status, body, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/redrive")
    # then
    assert status == 202, body
    assert (body["status"], body["current_step"], body["error"], body["redrives"]) == ("RUNNING", 2, None, 1)
    assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    _, done, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    assert done["context"]["summary"] == "3 rows imported from payroll"
    _, history, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    assert [(s["name"], s["status"]) for s in history["steps"]] == [
        ("fetch_manifest", "SUCCEEDED"), ("wait_for_export_window", "SUCCEEDED"), ("import_rows", "SUCCEEDED"),
        ("publish_summary", "SUCCEEDED")]
    wake, redrive = history["operations"]
    assert (wake["op"], redrive["op"], redrive["by"]) == ("wake", "redrive", OPERATOR_ARN)
    assert redrive["detail"]["step_name"] == "import_rows" and redrive["detail"]["attempts"] == 1
    assert redrive["detail"]["error"]["code"] == "permanent_error" and "payroll" in redrive["detail"]["error"]["message"]


def test_redrive_when_not_failed_is_409_not_failed(lambdas, world):
    eid = sleeping(lambdas, world)
    got = assert_refused(lambdas, world, "POST", f"/executions/{eid}/redrive", status=409, code="not_failed")
    assert got["execution_status"] == "SLEEPING"


def test_redrive_when_the_definition_changed_is_409_definition_changed(lambdas, world, fixes):
    eid = failed_import(lambdas, world, fixes)
    world.dynamodb.update_item(TableName="loom-test", Key={"PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "#META"}},
                               UpdateExpression="SET fingerprint = :f", ExpressionAttributeValues={":f": {"S": "old"}})
    got = assert_refused(lambdas, world, "POST", f"/executions/{eid}/redrive", status=409, code="definition_changed")
    assert got["execution_status"] == "FAILED"


def test_redrive_when_it_failed_with_corrupt_state_is_409_corrupt_state(lambdas, world, fixes):
    eid = failed_import(lambdas, world, fixes)
    error = json.dumps({"code": "corrupt_state", "message": "stored state is unreadable"})
    world.dynamodb.update_item(TableName="loom-test", Key={"PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "#META"}},
                               UpdateExpression="SET #e = :e", ExpressionAttributeNames={"#e": "error"},
                               ExpressionAttributeValues={":e": {"S": error}})
    assert_refused(lambdas, world, "POST", f"/executions/{eid}/redrive", status=409, code="corrupt_state")


def test_redrive_with_a_body_is_400(lambdas, world, fixes):
    eid = failed_import(lambdas, world, fixes)
    assert_refused(lambdas, world, "POST", f"/executions/{eid}/redrive", '{"from_step": 0}', status=400,
                   code="invalid_request")


# -- wake ------------------------------------------------------------------------------------------
def test_wake_when_sleeping_runs_the_next_step_now(lambdas, world, clock):
    # given: fragile_import asleep for two hours
    eid = sleeping(lambdas, world, "fragile_import", {"feed": "f"})
    before = clock.now()
    # when
    status, body, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/wake")
    # then: the next delivery runs import_rows, with no time passing
    assert status == 200 and body["status"] == "SLEEPING" and body["next_wake_at"] == "2026-11-29T13:00:00.000000Z", body
    assert lambdas.pump.deliver() == 1
    assert clock.now() == before
    _, e, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    assert (e["status"], e["current_step"]) == ("FAILED", 2)
    _, history, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    (op,) = history["operations"]
    assert (op["op"], op["by"], op["detail"]["was"]) == ("wake", OPERATOR_ARN, "sleep")


def test_wake_when_running_is_409_not_waiting(lambdas, world):
    eid = start(lambdas)
    got = assert_refused(lambdas, world, "POST", f"/executions/{eid}/wake", status=409, code="not_waiting")
    assert got["execution_status"] == "RUNNING"


def test_wake_when_ended_is_409_execution_ended(lambdas, world):
    eid = start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    lambdas.pump.run_until_settled(eid)
    assert_refused(lambdas, world, "POST", f"/executions/{eid}/wake", status=409, code="execution_ended")


# -- history pages ---------------------------------------------------------------------------------
def test_history_in_pages_lists_every_step_once_with_operations_on_the_first_page(lambdas, world):
    eid = sleeping(lambdas, world)
    call(lambdas.control_plane, "POST", f"/executions/{eid}/wake")
    assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    pages, token = [], None
    while True:
        _, page, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history",
                          query={"limit": 2, **({"next_token": token} if token else {})})
        pages.append(page)
        token = page["next_token"]
        if token is None:
            break
    assert [[s["step_index"] for s in p["steps"]] for p in pages] == [[0, 1], [2, 3], [4]]
    assert [len(p["operations"]) for p in pages] == [1, 0, 0]
    assert set(pages[0]["operations"][0]) == {"op", "by", "at", "version", "reason", "detail"}
    _, whole, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    assert [s["step_index"] for s in whole["steps"]] == [0, 1, 2, 3, 4] and whole["next_token"] is None


@pytest.mark.parametrize(("query", "code"), [({"limit": "0"}, "invalid_request"), ({"limit": "101"}, "invalid_request"),
                                             ({"next_token": "%%%"}, "invalid_request"),
                                             ({"next_token": "e30"}, "invalid_request"),
                                             ({"from": "1"}, "invalid_request")],
                         ids=["limit-0", "limit-101", "token-chars", "token-not-ours", "unknown-param"])
def test_history_when_query_is_invalid_is_400(lambdas, world, query, code):
    eid = start(lambdas)
    assert_refused(lambdas, world, "GET", f"/executions/{eid}/history", query=query, status=400, code=code)


# -- routes, ids and identity -------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("POST", f"/executions/{uuid.uuid4()}/cancel", 404, "execution_not_found"),
    ("POST", f"/executions/{uuid.uuid4()}/redrive", 404, "execution_not_found"),
    ("POST", f"/executions/{uuid.uuid4()}/wake", 404, "execution_not_found"),
    ("POST", "/executions/not-a-uuid/cancel", 404, "execution_not_found"),
    ("GET", f"/executions/{uuid.uuid4()}/cancel", 405, "method_not_allowed"),
    ("DELETE", f"/executions/{uuid.uuid4()}", 405, "method_not_allowed"),
    ("PUT", f"/executions/{uuid.uuid4()}/wake", 405, "method_not_allowed"),
    ("POST", f"/executions/{uuid.uuid4()}/resume", 404, "not_found"),
    ("POST", f"/executions/{uuid.uuid4()}/cancel\n", 404, "not_found"),
    ("GET", "/executions\n", 404, "not_found"),
], ids=["cancel-missing", "redrive-missing", "wake-missing", "cancel-malformed-id", "get-cancel", "delete-execution",
        "put-wake", "unknown-action", "cancel-trailing-newline", "list-trailing-newline"])
def test_operator_route_rows_are_refused_with_their_code_and_write_nothing(lambdas, world, method, path, status, code):
    got = assert_refused(lambdas, world, method, path, status=status, code=code)
    if status == 405:
        assert "POST" in got["message"] or "GET" in got["message"]


def test_405_allow_header_lists_every_method_of_the_path(lambdas, world):
    status, _, headers = call(lambdas.control_plane, "DELETE", "/executions")
    assert (status, headers["allow"]) == (405, "GET, POST")


@pytest.mark.parametrize(("iam", "expected"), [
    ({"userArn": "arn:aws:iam::111122223333:user/ops", "callerId": "AIDA1", "accountId": "111122223333"},
     "arn:aws:iam::111122223333:user/ops"),
    ({"userArn": None, "callerId": "AROA1:session", "accountId": "111122223333"}, "AROA1:session"),
    ({"accountId": "111122223333"}, "111122223333"),
    (None, "local"),
], ids=["user-arn", "caller-id", "account", "no-iam"])
def test_start_records_the_callers_identity(lambdas, world, iam, expected):
    status, body, _ = call(lambdas.control_plane, "POST", "/executions",
                           json.dumps({"workflow": "order_fulfillment", "input": ORDER}), iam=iam)
    assert status == 202
    _, e, _ = call(lambdas.control_plane, "GET", f"/executions/{body['execution_id']}")
    assert e["started_by"] == expected


# -- events and callbacks ------------------------------------------------------------------------------
EXPENSE = {"expense_id": "e-1", "amount_cents": 900}


def test_event_route_delivers_to_a_waiting_execution_once_and_it_completes(lambdas, world):
    eid = start(lambdas, "expense_approval", EXPENSE)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "WAITING")
    body = json.dumps({"data": {"approved": True, "approver": "ana"}, "event_id": "mail-1"})
    # when
    status, sent, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/approved", body)
    again, dup, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/approved", body)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "COMPLETED")
    # then
    assert (status, sent["outcome"], sent["event_id"]) == (202, "delivered", "mail-1")
    assert (again, dup["outcome"]) == (202, "duplicate")
    _, view, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    assert view["context"]["decision"] == "paid"
    _, history, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    assert [e["event_id"] for e in history["events"]] == ["mail-1"]
    assert history["events"][0]["consumed_by_step"] == 1 and history["events"][0]["by"] == OPERATOR_ARN


def test_callback_route_completes_the_wait_once_and_unknown_tokens_are_404(lambdas, world):
    eid = start(lambdas, "expense_approval", EXPENSE)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "WAITING")
    _, view, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    token = view["context"]["approval_callback"]
    assert view["waiting_for"]["event"] == "approved" and view["waiting_for"]["timeout_at"]
    # when
    ok, sent, _ = call(lambdas.control_plane, "POST", f"/callbacks/{token}", json.dumps({"data": {"approved": False}}))
    used, refused, _ = call(lambdas.control_plane, "POST", f"/callbacks/{token}", json.dumps({"data": {}}))
    missing, unknown, _ = call(lambdas.control_plane, "POST", "/callbacks/" + "A" * 46, "{}")
    # then
    assert (ok, sent["outcome"]) == (200, "delivered")
    assert (used, refused["error"]) == (409, "callback_used")
    assert (missing, unknown["error"]) == (404, "callback_not_found")
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "COMPLETED")


@pytest.mark.parametrize("path, body, code, error", [
    ("/executions/{eid}/events/approved", "[1]", 400, "invalid_request"),
    ("/executions/{eid}/events/approved", "{not json", 400, "invalid_json"),
    ("/executions/{eid}/events/approved", '{"data": [1]}', 400, "invalid_request"),
    ("/executions/{eid}/events/approved", '{"data": {}, "extra": 1}', 400, "invalid_request"),
    ("/executions/{eid}/events/shipped", "{}", 409, "unknown_event"),
    ("/executions/{eid}/events/approved", '{"data": {"approved": true}, "event_id": "callback:1"}', 400,
     "invalid_request"),  # ids reserved for callback tokens: nobody burns a token through this route
    ("/executions/{eid}/events/approved", '{"data": {"approved": "maybe"}}', 400, "invalid_event"),
    ("/executions/" + str(uuid.UUID(int=7)) + "/events/approved", "{}", 404, "execution_not_found"),
])
def test_event_route_refusals_answer_their_code_and_write_nothing(lambdas, world, path, body, code, error):
    eid = start(lambdas, "expense_approval", EXPENSE)
    # when
    status, reply, _ = call(lambdas.control_plane, "POST", path.format(eid=eid), body)
    # then
    assert (status, reply["error"]) == (code, error), reply
    assert not [i for i in world.items() if i["SK"]["S"].startswith("EVT#")]


def test_event_route_refuses_data_its_waits_model_refuses_naming_each_field(lambdas, world):
    eid = start(lambdas, "expense_approval", EXPENSE)
    # when
    status, reply, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/approved",
                            json.dumps({"data": {"approved": "maybe", "approver": 7}}))
    # then
    assert (status, reply["error"]) == (400, "invalid_event")
    assert sorted(p["field"] for p in reply["problems"]) == ["approved", "approver"]
    assert "event_schema" in reply["message"]


def test_events_and_operations_have_their_own_paged_routes_and_the_first_history_page_points_at_them(lambdas, world):
    eid = start(lambdas, "expense_approval", EXPENSE)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "WAITING")
    for i in range(3):
        call(lambdas.control_plane, "POST", f"/executions/{eid}/events/approved",
             json.dumps({"data": {"approved": True}, "event_id": f"mail-{i}"}))
    # when
    _, history, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    pages, token = [], None
    while True:
        _, page, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/events",
                          query={"limit": "2", **({"next_token": token} if token else {})})
        pages.append([e["event_id"] for e in page["events"]])
        token = page["next_token"]
        if token is None:
            break
    status, ops, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/operations")
    # then
    assert [e["event_id"] for e in history["events"]] == ["mail-0", "mail-1", "mail-2"]
    assert history["events_next_token"] is None and history["operations_next_token"] is None
    assert pages == [["mail-0", "mail-1"], ["mail-2"]]
    assert status == 200 and ops == {"execution_id": eid, "operations": [], "next_token": None}


def test_a_percent_encoded_path_segment_is_decoded_before_it_is_read_or_named(lambdas, world):
    eid = start(lambdas, "expense_approval", EXPENSE)
    # when: a client encodes the event name as a URL path segment must be (a space is %20)
    status, reply, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/{urllib.parse.quote('bad name')}",
                            "{}")
    sent, ok, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/{urllib.parse.quote('approved')}",
                       json.dumps({"data": {"approved": True, "approver": "kim"}}))
    # then: the refusal names what the client meant, not its encoding
    assert (status, reply["error"]) == (400, "invalid_request"), reply
    assert "'bad name'" in reply["message"] and "%20" not in reply["message"], reply
    assert (sent, ok["event"]) == (202, "approved"), ok  # kept: the execution has not reached its wait yet


@pytest.mark.parametrize("query, says", [({"live": "x"}, "'live' must be 1 or 0"), ({"foo": "1"}, "unknown query parameter 'foo'"),
                                          ({"live": "0", "limit": "5"}, "unknown query parameter 'limit'")])
def test_workflows_refuse_an_unknown_query_parameter_or_live_value_as_the_other_reads_do(lambdas, world, query, says):
    status, body, _ = call(lambdas.control_plane, "GET", "/workflows", query=query)
    assert (status, body["error"]) == (400, "invalid_request") and says in body["message"], body
    _, counted, _ = call(lambdas.control_plane, "GET", "/workflows", query={"live": "1"})
    _, uncounted, _ = call(lambdas.control_plane, "GET", "/workflows", query={"live": "0"})
    assert {"live", "undeployed"} <= set(counted) and not {"live", "undeployed"} & set(uncounted)


def test_a_wait_an_event_woke_still_shows_its_own_timeout_not_the_moment_the_event_came(lambdas, world, clock):
    # given: an approval waiting for its event, then an event sent while nothing delivers it yet
    eid = start(lambdas, "expense_approval", EXPENSE)
    run_until(lambdas, world, eid, lambda m: m["status"]["S"] == "WAITING")
    _, before, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    clock.advance(30)
    status, sent, _ = call(lambdas.control_plane, "POST", f"/executions/{eid}/events/approved",
                           json.dumps({"data": {"approved": True, "approver": "ana"}}))
    assert (status, sent["outcome"]) == (202, "delivered")
    # when
    _, after, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    # then: still WAITING until its delivery comes, timing out when it always would (it showed the send time)
    assert after["status"] == "WAITING" and after["next_wake_at"] != before["next_wake_at"]
    assert after["waiting_for"] == {**before["waiting_for"], "arrived": True}, (before["waiting_for"], after["waiting_for"])
    assert before["waiting_for"]["arrived"] is False and after["next_wake_at"] < after["waiting_for"]["timeout_at"]
