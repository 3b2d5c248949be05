"""The control-plane Lambda, fed Function URL requests shaped like tests/events/function_url_*.json."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from loom_test_support.lambda_harness import FakeContext, SerializedClient, function_url_event, load_event, load_handler

ORDER = {"order_id": "o-1001", "amount_cents": 4999}


def call(module, method: str, path: str, body: str | bytes | None = None, *, base64: bool = False):
    reply = module.handler(function_url_event(method, path, body, base64=base64), FakeContext())
    headers = {k.lower(): v for k, v in (reply.get("headers") or {}).items()}
    assert headers.get("content-type") == "application/json", reply
    return reply["statusCode"], json.loads(reply["body"]), headers


def start_body(workflow: str = "order_fulfillment", payload: dict | None = None, token: str | None = None) -> str:
    body = {"workflow": workflow, "input": ORDER if payload is None else payload}
    if token is not None:
        body["idempotency_token"] = token
    return json.dumps(body)


def test_sample_post_event_when_sent_as_stored_starts_an_execution(lambdas, world):
    # given
    event = load_event("function_url_post_execution")
    # when
    reply = lambdas.control_plane.handler(event, FakeContext())
    # then
    assert reply["statusCode"] == 202
    body = json.loads(reply["body"])
    assert body["workflow"] == "order_fulfillment" and body["created"] is True


def test_start_when_valid_returns_202_and_enqueues_the_first_step(lambdas, world):
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    # then
    assert status == 202
    eid = body["execution_id"]
    assert body == {"execution_id": eid, "workflow": "order_fulfillment", "status": "RUNNING", "current_step": 0,
                    "created": True, "links": {"self": f"/executions/{eid}", "history": f"/executions/{eid}/history"}}
    assert world.meta(eid)["status"]["S"] == "RUNNING"
    queued = [json.loads(m["Body"]) for m in world.drain(world.queue_url)]
    assert queued == [{"execution_id": eid, "step": 0, "version": 1}]


def test_start_when_body_is_base64_encoded_is_decoded(lambdas, world):
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", start_body(), base64=True)
    # then
    assert status == 202 and body["created"] is True


def test_start_when_token_repeats_with_same_input_returns_200_and_starts_nothing(lambdas, world):
    # given
    first_status, first, _ = call(lambdas.control_plane, "POST", "/executions", start_body(token="order-o-1001"))
    world.drain(world.queue_url)
    items = world.items()
    # when
    status, again, _ = call(lambdas.control_plane, "POST", "/executions", start_body(token="order-o-1001"))
    # then
    assert (first_status, status) == (202, 200)
    assert again == {**first, "created": False}
    assert world.items() == items and world.visible_count(world.queue_url) == 0


def test_start_when_token_repeats_after_completion_returns_the_finished_execution(lambdas, world):
    # given
    _, first, _ = call(lambdas.control_plane, "POST", "/executions",
                       start_body("flaky_greeting", {"name": "Ada", "failures": 0}, token="greet-ada"))
    assert lambdas.pump.run_until_settled(first["execution_id"]) == "COMPLETED"
    items = world.items()
    # when
    status, again, _ = call(lambdas.control_plane, "POST", "/executions",
                            start_body("flaky_greeting", {"name": "Ada", "failures": 0}, token="greet-ada"))
    # then
    assert status == 200
    assert (again["execution_id"], again["status"], again["created"]) == (first["execution_id"], "COMPLETED", False)
    assert world.items() == items and world.visible_count(world.queue_url) == 0


def test_start_when_token_repeats_with_different_input_returns_409(lambdas, world):
    # given
    call(lambdas.control_plane, "POST", "/executions", start_body(token="order-o-1001"))
    world.drain(world.queue_url)
    items = world.items()
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions",
                           start_body(payload={**ORDER, "amount_cents": 1}, token="order-o-1001"))
    # then
    assert status == 409 and body["error"] == "idempotency_conflict"
    assert "new token" in body["message"]
    assert body["execution_status"] == "RUNNING"  # as every 409: the status of the execution the token started
    assert world.items() == items and world.visible_count(world.queue_url) == 0


def test_start_when_ten_containers_race_with_one_token_makes_one_execution(lambdas, world, clock, logs):
    # given: ten cold-started control planes (as ten concurrent Lambda instances would be)
    lock = threading.Lock()
    containers = []
    for i in range(10):
        module = load_handler("loom_control_plane.handler", clock, logs, as_name=f"control_plane_{i}")
        module.runtime.engine.store.client = SerializedClient(module.runtime.engine.store.client, lock)
        module.runtime.engine.queue.client = SerializedClient(module.runtime.engine.queue.client, lock)
        containers.append(module)
    barrier, replies = threading.Barrier(10), [None] * 10

    def request(i: int) -> None:
        event = function_url_event("POST", "/executions", start_body(token="same-token"))
        barrier.wait()
        replies[i] = containers[i].handler(event, FakeContext())

    # when
    threads = [threading.Thread(target=request, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then
    bodies = [json.loads(r["body"]) for r in replies]
    assert sorted(r["statusCode"] for r in replies) == [200] * 9 + [202]
    assert len({b["execution_id"] for b in bodies}) == 1
    assert [b["created"] for b in bodies].count(True) == 1
    metas = [i for i in world.items() if i["SK"]["S"] == "#META"]
    assert len(metas) == 1
    assert len(world.drain(world.queue_url)) == 1


@pytest.fixture
def crash_after_create():
    """The control plane dies right after the durable write, before the first enqueue."""
    from engine_core import faults

    def hook(name: str, info: dict) -> None:
        if name == "control.after_create":
            raise SystemExit("container killed after the write")

    faults.install(hook)
    yield
    faults.install(None)


def test_start_when_process_dies_after_write_still_runs_via_sweeper(lambdas, world, clock, crash_after_create):
    # given: the first request wrote the execution and died without enqueueing or answering
    with pytest.raises(SystemExit):
        lambdas.control_plane.handler(function_url_event("POST", "/executions", start_body(token="t-1")), FakeContext())
    assert world.visible_count(world.queue_url) == 0
    # when: the client retries with its token, and the sweeper finds the stalled execution
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", start_body(token="t-1"))
    clock.advance(121)
    swept = lambdas.sweeper.handler(load_event("eventbridge_scheduled"), FakeContext())
    # then
    assert (status, body["created"]) == (200, False)
    assert swept["redriven"] == {"stalled_lease": 1}
    assert lambdas.pump.run_until_settled(body["execution_id"]) == "COMPLETED"


def test_start_when_first_enqueue_fails_is_acknowledged_and_sweeper_starts_it(lambdas, world, clock, monkeypatch):
    # given: SQS refuses the send after the execution was written
    from botocore.exceptions import ClientError

    def refuse(**kwargs):
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "SendMessage")

    monkeypatch.setattr(lambdas.control_plane.runtime.engine.queue.client, "send_message", refuse)
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    clock.advance(121)
    lambdas.pump.tick()
    # then
    assert status == 202 and world.meta(body["execution_id"])["status"]["S"] == "RUNNING"
    assert lambdas.pump.run_until_settled(body["execution_id"]) == "COMPLETED"


def test_get_execution_when_it_exists_returns_its_state(lambdas, world, clock):
    # given
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    lambdas.pump.deliver()
    # when
    status, body, _ = call(lambdas.control_plane, "GET", f"/executions/{started['execution_id']}")
    # then
    assert status == 200
    assert (body["workflow"], body["status"]) == ("order_fulfillment", "RUNNING")
    assert (body["current_step"], body["version"]) == (1, 3)  # start, claim of step 0, its commit
    assert body["context"]["order_id"] == "o-1001" and body["context"]["reservation_id"].startswith("res-")
    assert body["current_step_name"] == "charge_payment" and body["error"] is None
    for key in ("next_wake_at", "created_at", "updated_at"):
        assert body[key].endswith("Z")


def test_history_when_steps_ran_lists_them_in_order_and_flags_corrupt_records(lambdas, world):
    # given: a finished execution, plus a history item damaged in storage
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    eid = started["execution_id"]
    assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    world.dynamodb.put_item(TableName="loom-test", Item={
        "PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "STEP#005#mangled"}, "status": {"S": "???"}})
    # when
    status, body, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}/history")
    # then
    assert status == 200 and body["execution_id"] == eid
    steps = body["steps"]
    assert [s.get("name") for s in steps[:5]] == ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup",
                                                  "ship_order", "notify_customer"]
    assert all(s["status"] == "SUCCEEDED" and s["attempts"] >= 1 and s["started_at"] and s["finished_at"]
               for s in steps[:5] if s["name"] != "wait_for_carrier_pickup")
    assert steps[1]["result"]["charge_id"].startswith("ch_")
    assert steps[5]["corrupt"] is True and steps[5]["sort_key"] == "STEP#005#mangled"


def test_history_when_step_failed_shows_its_error(lambdas, world):
    # given
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body("poison_pill", {}))
    assert lambdas.pump.run_until_settled(started["execution_id"]) == "FAILED"
    # when
    _, body, _ = call(lambdas.control_plane, "GET", f"/executions/{started['execution_id']}/history")
    # then
    poison = body["steps"][1]
    assert (poison["status"], poison["attempts"], poison["final"]) == ("FAILED", 3, True)
    assert poison["error"]["code"] == "step_error" and "PoisonError" in poison["error"]["message"]


def test_workflows_when_listed_show_steps_and_retry_policies(lambdas, world):
    # when
    status, body, _ = call(lambdas.control_plane, "GET", "/workflows")
    # then
    assert status == 200
    workflows = {w["name"]: w for w in body["workflows"]}
    assert {"order_fulfillment", "flaky_greeting", "poison_pill"} <= set(workflows)
    order = workflows["order_fulfillment"]
    assert [s["name"] for s in order["steps"]] == ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup",
                                                   "ship_order", "notify_customer"]
    assert order["steps"][2] == {"index": 2, "name": "wait_for_carrier_pickup", "kind": "sleep", "sleep_s": 20.0}
    assert order["retry"]["max_attempts"] == 5


# -- the error table, row by row -------------------------------------------------------------------
BIG = 256 * 1024


def _padded(size: int) -> str:
    """A valid start body of exactly ``size`` bytes."""
    shell = start_body(payload={"order_id": "o-1", "amount_cents": 1, "pad": ""})
    body = shell.replace('"pad": ""', '"pad": "' + "x" * (size - len(shell)) + '"')
    assert len(body.encode()) == size
    return body


ERROR_ROWS = [
    # (row id, method, path, body, status, code)
    ("broken-json", "POST", "/executions", '{"workflow": "order_fulfillment", "input": {', 400, "invalid_json"),
    ("empty-body", "POST", "/executions", "", 400, "invalid_json"),
    ("nan", "POST", "/executions", '{"workflow": "order_fulfillment", "input": {"x": NaN}}', 400, "invalid_json"),
    ("not-utf8", "POST", "/executions", b'{"workflow": "\xff"}', 400, "invalid_json"),
    ("body-is-array", "POST", "/executions", "[]", 400, "invalid_request"),
    ("missing-workflow", "POST", "/executions", '{"input": {}}', 400, "invalid_request"),
    ("missing-input", "POST", "/executions", '{"workflow": "order_fulfillment"}', 400, "invalid_request"),
    ("workflow-not-string", "POST", "/executions", '{"workflow": 7, "input": {}}', 400, "invalid_request"),
    ("workflow-empty", "POST", "/executions", '{"workflow": "", "input": {}}', 400, "invalid_request"),
    ("workflow-129-chars", "POST", "/executions", json.dumps({"workflow": "w" * 129, "input": {}}), 400,
     "invalid_request"),
    ("workflow-bad-chars", "POST", "/executions", '{"workflow": "order fulfillment!", "input": {}}', 400,
     "invalid_request"),
    ("workflow-key-injection", "POST", "/executions", '{"workflow": "EXEC#x", "input": {}}', 400, "invalid_request"),
    ("input-list", "POST", "/executions", '{"workflow": "order_fulfillment", "input": [1]}', 400, "invalid_request"),
    ("input-string", "POST", "/executions", '{"workflow": "order_fulfillment", "input": "x"}', 400, "invalid_request"),
    ("input-null", "POST", "/executions", '{"workflow": "order_fulfillment", "input": null}', 400, "invalid_request"),
    ("unknown-field", "POST", "/executions", '{"workflow": "order_fulfillment", "input": {}, "priority": 1}', 400,
     "invalid_request"),
    ("token-empty", "POST", "/executions", start_body(token=""), 400, "invalid_request"),
    ("token-129-chars", "POST", "/executions", start_body(token="t" * 129), 400, "invalid_request"),
    ("token-control-char", "POST", "/executions", start_body(token="a\nb"), 400, "invalid_request"),
    ("token-not-string", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {}, "idempotency_token": 5}', 400, "invalid_request"),
    ("unknown-workflow", "POST", "/executions", '{"workflow": "no_such_flow", "input": {}}', 404, "unknown_workflow"),
    ("too-large", "POST", "/executions", _padded(BIG + 1), 413, "input_too_large"),
    ("execution-missing", "GET", f"/executions/{uuid.uuid4()}", None, 404, "execution_not_found"),
    ("execution-malformed-id", "GET", "/executions/not-a-uuid", None, 404, "execution_not_found"),
    ("execution-id-injection", "GET", "/executions/x%23META", None, 404, "execution_not_found"),
    ("history-missing", "GET", f"/executions/{uuid.uuid4()}/history", None, 404, "execution_not_found"),
    ("history-malformed-id", "GET", "/executions/%00/history", None, 404, "execution_not_found"),
    ("unknown-route", "GET", "/nope", None, 404, "not_found"),
    ("unknown-nested-route", "POST", "/executions/x/y/z", "{}", 404, "not_found"),
    ("root", "GET", "/", None, 404, "not_found"),
    ("delete-on-executions", "DELETE", "/executions", None, 405, "method_not_allowed"),
    ("delete-execution", "DELETE", f"/executions/{uuid.uuid4()}", None, 405, "method_not_allowed"),
    ("post-history", "POST", f"/executions/{uuid.uuid4()}/history", "{}", 405, "method_not_allowed"),
    ("put-workflows", "PUT", "/workflows", "{}", 405, "method_not_allowed"),
    # A segment with a character Powertools' resolver did not take in a parameter was once refused as "GET is
    # not supported on it; use GET": every character but "/" is the segment's.
    ("quote-in-execution-id", "GET", '/executions/a"b', None, 404, "execution_not_found"),
    ("hash-in-callback-token", "POST", "/callbacks/a#b", "{}", 404, "callback_not_found"),
    # names are matched whole: `$` would let a trailing newline through
    ("workflow-trailing-newline", "POST", "/executions", json.dumps({"workflow": "order_fulfillment\n", "input": {}}),
     400, "invalid_request"),
    ("workflow-trailing-crlf", "POST", "/executions", json.dumps({"workflow": "order_fulfillment\r\n", "input": {}}),
     400, "invalid_request"),
    ("start-route-trailing-newline", "GET", "/executions\n", None, 404, "not_found"),
    ("workflows-route-trailing-newline", "POST", "/workflows\n", "{}", 404, "not_found"),
    ("history-route-trailing-newline", "POST", f"/executions/{uuid.uuid4()}/history\n", "{}", 404, "not_found"),
    # values the engine cannot store answer 400, never 500
    ("input-nested-100000-deep", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {"x": ' + "[" * 100000 + "]" * 100000 + "}}", 400, "invalid_request"),
    ("body-nested-100000-deep-unclosed", "POST", "/executions", "[" * 100000, 400, "invalid_request"),
    ("input-nested-past-the-codec-limit", "POST", "/executions",
     '{"workflow": "defaults_tour", "input": {"x": ' + "[" * 500 + "]" * 500 + "}}", 400, "invalid_request"),
    ("input-lone-surrogate-value", "POST", "/executions",
     '{"workflow": "defaults_tour", "input": {"name": "Ada \\ud800"}}', 400, "invalid_request"),
    ("input-lone-surrogate-key", "POST", "/executions",
     '{"workflow": "defaults_tour", "input": {"ok": {"\\udc00": 1}}}', 400, "invalid_request"),
    ("workflow-lone-surrogate", "POST", "/executions", '{"workflow": "order\\ud800", "input": {}}', 400,
     "invalid_request"),
    ("token-lone-surrogate", "POST", "/executions", start_body(token="t-\ud800"), 400, "invalid_request"),
    ("unknown-field-lone-surrogate", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {}, "\\ud800": 1}', 400, "invalid_request"),
    ("input-int-5001-digits", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {"n": 1' + "0" * 5000 + "}}", 400, "invalid_request"),
    ("input-negative-int-5001-digits", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {"n": [-1' + "0" * 5000 + "]}}", 400, "invalid_request"),
    ("input-float-overflows-to-infinity", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {"n": 1e400}}', 400, "invalid_request"),
    ("input-negative-float-overflows", "POST", "/executions",
     '{"workflow": "order_fulfillment", "input": {"n": -1.5E+999}}', 400, "invalid_request"),
    ("not-utf8-encoded-surrogate", "POST", "/executions",
     b'{"workflow": "order_fulfillment", "input": {"x": "\xed\xa0\x80"}}', 400, "invalid_json"),
]


def test_an_execution_id_pasted_with_a_space_is_refused_showing_it_quoted_and_saying_so(lambdas, world):
    # given: a real execution, asked for with a space after its id (as a copy-paste brings)
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    eid = started["execution_id"]
    # when
    status, got, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}%20")
    # then: the id is shown quoted, the space visible, and what to do named (before: `execution <id>  does not
    # exist`, which reads like the right id)
    assert (status, got["error"]) == (404, "execution_not_found"), got
    assert f"execution '{eid} ' does not exist" in got["message"] and "copy it again" in got["message"], got


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [r[1:] for r in ERROR_ROWS],
                         ids=[r[0] for r in ERROR_ROWS])
def test_error_row_when_request_is_rejected_returns_json_error_and_changes_nothing(lambdas, world, method, path,
                                                                                     body, status, code):
    # when
    got_status, got, headers = call(lambdas.control_plane, method, path, body)
    # then
    assert (got_status, got["error"]) == (status, code), got
    assert set(got) == {"error", "message"} and len(got["message"]) > 20
    assert "Traceback" not in got["message"] and 'File "' not in got["message"]
    if status == 405:
        assert headers["allow"] in ("GET", "POST", "GET, POST")
    assert world.items() == []
    assert world.visible_count(world.queue_url) == 0 and world.visible_count(world.dlq_url) == 0


@pytest.mark.parametrize(("body", "says"), [
    ('{"workflow": "order_fulfillment", "input": {"order_id": "o-1", "amount_cents": 1, "a": {"name": "Ada \\ud800"}}}',
     ["input['a']['name']", "surrogate"]),
    ('{"workflow": "order_fulfillment", "input": {"n": 1' + "0" * 5000 + "}}", ["input['n']", "5001 digits", "4300 digits"]),
    ('{"workflow": "order_fulfillment", "input": {"n": 1e400}}', ["input['n']", "1e400"]),
    ('{"workflow": "order_fulfillment", "input": {"x": ' + "[" * 100000 + "]" * 100000 + "}}", ["nested"]),
    ('{"workflow": "order_fulfillment", "input": {"order_id": "o-1", "amount_cents": 1, "x": ' + "[" * 100 + "]" * 100
     + "}}", ["input['x']", "nesting"]),
    (json.dumps({"workflow": "order_fulfillment\n", "input": {}}), ["'workflow' must be 1-128 characters"]),
], ids=["surrogate", "huge-int", "huge-float", "deep-json", "deep-input", "trailing-newline"])
def test_start_with_a_value_that_cannot_be_stored_names_it_in_a_400(lambdas, world, body, says):
    # when
    status, got, _ = call(lambdas.control_plane, "POST", "/executions", body)
    # then
    assert (status, got["error"]) == (400, "invalid_request"), got
    for words in says:
        assert words in got["message"], got["message"]
    assert "step result" not in got["message"]
    assert world.items() == [] and world.visible_count(world.queue_url) == 0


def test_start_when_body_text_holds_a_lone_surrogate_is_a_400_not_a_500(lambdas, world):
    # given: an event whose (not base64) body string carries a raw lone surrogate
    event = function_url_event("POST", "/executions", "{}")
    event["body"] = '{"workflow": "order_fulfillment", "input": {"x": "\ud800"}}'
    # when
    reply = lambdas.control_plane.handler(event, FakeContext())
    # then
    assert reply["statusCode"] == 400, reply
    assert json.loads(reply["body"])["error"] == "invalid_json"
    assert world.items() == []


def test_start_when_input_holds_big_ints_within_the_limit_keeps_them_exact(lambdas, world):
    # given
    n = 10**4299 + 7
    body = '{"workflow": "order_fulfillment", "input": {"order_id": "o-1", "amount_cents": 1, "n": ' + str(n) + "}}"
    # when
    status, got, _ = call(lambdas.control_plane, "POST", "/executions", body)
    # then
    assert status == 202, got
    key = {"PK": {"S": f"EXEC#{got['execution_id']}"}, "SK": {"S": "#INPUT"}}
    stored = world.dynamodb.get_item(TableName="loom-test", Key=key, ConsistentRead=True)["Item"]
    assert '"n":' + str(n) in stored["input"]["S"]


def test_start_when_body_is_exactly_256_kb_is_accepted(lambdas, world):
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", _padded(BIG))
    # then
    assert status == 202 and body["created"] is True


def test_invalid_request_message_names_the_field_and_the_fix(lambdas, world):
    # when
    _, body, _ = call(lambdas.control_plane, "POST", "/executions", '{"workflow": "a b", "input": [], "x": 1}')
    # then
    assert "'workflow' must be 1-128 characters" in body["message"]
    assert "'input' must be a JSON object" in body["message"]
    assert "'x' is not a known field" in body["message"]


def test_unexpected_failure_when_store_breaks_returns_generic_500_without_trace(lambdas, world, logs, monkeypatch):
    # given
    def broken(*args, **kwargs):
        raise RuntimeError("secret internal detail at /var/task/engine_core/storage/dynamodb.py")

    monkeypatch.setattr(lambdas.control_plane.runtime.engine.store, "create", broken)
    # when
    status, body, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    # then
    assert status == 500 and body["error"] == "internal_error"
    assert "secret" not in body["message"] and "/var/task" not in body["message"]
    assert world.visible_count(world.queue_url) == 0
    errors = [line for line in logs.lines() if line["message"] == "unhandled error"]
    assert errors and "secret internal detail" in errors[0]["exception"]


def test_start_logs_carry_the_request_id_and_emit_metrics(lambdas, world, logs, capsys):
    # given
    event = function_url_event("POST", "/executions", start_body())
    capsys.readouterr()
    # when
    lambdas.control_plane.handler(event, FakeContext())
    # then
    started = [line for line in logs.lines() if line["message"] == "execution started"]
    assert started and started[0]["workflow"] == "order_fulfillment"
    assert started[0]["correlation_id"] == event["requestContext"]["requestId"]
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert "ExecutionsStarted" in {m["Name"] for m in blobs[-1]["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


def test_start_when_input_does_not_fit_the_workflows_model_is_400_invalid_input_naming_each_field(lambdas, world):
    # when: order_fulfillment declares an input model; this start lacks order_id and has a bad amount
    status, body, _ = call(lambdas.control_plane, "POST", "/executions",
                           start_body("order_fulfillment", {"amount_cents": -3}))
    # then: nothing written, every field named
    assert status == 400 and body["error"] == "invalid_input", body
    assert {p["field"] for p in body["problems"]} == {"order_id", "amount_cents"}
    assert "GET /workflows" in body["message"]
    assert world.items() == []


def test_workflows_publish_their_input_json_schema(lambdas):
    status, body, _ = call(lambdas.control_plane, "GET", "/workflows")
    schemas = {w["name"]: w["input_schema"] for w in body["workflows"]}
    assert status == 200 and schemas["order_fulfillment"]["required"] == ["order_id", "amount_cents"]
    assert schemas["defaults_tour"] is None


def _page(lambdas, eid: str, query: dict) -> dict:
    import urllib.parse

    event = function_url_event("GET", f"/executions/{eid}/history")
    event.update(rawQueryString=urllib.parse.urlencode(query), queryStringParameters=query)
    return json.loads(lambdas.control_plane.handler(event, FakeContext())["body"])


def test_get_execution_after_its_deliveries_shows_its_cost_ledger_and_the_history_carries_it(lambdas, world):
    # given: an order (five steps, one of them a sleep) run to the end through the worker
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    eid = started["execution_id"]
    assert lambdas.pump.run_until_settled(eid) == "COMPLETED"
    # when
    status, body, _ = call(lambdas.control_plane, "GET", f"/executions/{eid}")
    first = _page(lambdas, eid, {"limit": "2"})
    second = _page(lambdas, eid, {"limit": "2", "next_token": first["next_token"]})
    # then: every step wrote its record and committed (at least two writes a step), the sleep made a
    # second delivery, and DynamoDB's reported units are on it; the history's first page carries the same
    cost = body["cost"]
    assert status == 200 and set(cost) == {"requests", "read_units", "write_units", "messages", "lambda_ms"}
    assert cost["requests"] >= 2 * 5 and cost["messages"] >= 2
    assert cost["write_units"] >= 2 * 5 and cost["read_units"] > 0
    assert first["cost"] == cost and "cost" not in second


def test_get_execution_before_any_delivery_has_no_cost_ledger(lambdas, world):
    # given: started, its first message not delivered
    _, started, _ = call(lambdas.control_plane, "POST", "/executions", start_body())
    # when
    _, body, _ = call(lambdas.control_plane, "GET", f"/executions/{started['execution_id']}")
    # then: nothing counted yet, so no key at all
    assert "cost" not in body


def test_history_names_each_branch_by_its_step_while_the_step_has_no_record():
    # given: a map step fanning out (its record is written at the fan-in)
    from engine_core import Registry, map_, workflow
    from engine_core.testing import LocalRunner
    from loom_control_plane.responses import history_reply

    registry = Registry()

    def items(ctx):
        return {"xs": [1, 2, 3]}

    def double(ctx):
        return ctx["item"] * 2

    @workflow("named_branches", registry=registry)
    class NamedBranches:
        steps = [items, map_(double, over="xs", name="doubles")]

    runner = LocalRunner(registry)
    eid = runner.start("named_branches", {})
    for _ in range(2):
        runner.step_once()
    # when
    reply = history_reply(eid, runner.engine.operator.history_page(eid), {})
    # then: the branches carry their step's name though no record of the step is on the page
    branches = [s for s in reply["steps"] if s["kind"] == "branch"]
    assert not [s for s in reply["steps"] if s["kind"] == "fanout"]
    assert [b["branch"] for b in branches] == [0, 1, 2] and {b["name"] for b in branches} == {"doubles"}


def test_an_execution_view_counts_each_fan_outs_branches_also_once_the_execution_ended():
    # given: a map one branch at a time whose second item fails for good (the two after it never begin), and
    # an execution with no fan-out
    from engine_core import PermanentStepError, Registry
    from engine_core.durable import durable, map, step
    from engine_core.testing import LocalRunner
    from loom_control_plane.responses import ExecutionView, dump, history_reply

    registry = Registry()

    def each(item):
        if item == "bad":
            raise PermanentStepError("no such item")
        return item

    @durable("one_at_a_time", registry=registry)
    def one_at_a_time(input):
        step("list", lambda: 1)
        return map("each", each, ["a", "bad", "c", "d"], max_concurrency=1)

    @durable("no_fan_out", registry=registry)
    def no_fan_out(input):
        return step("only", lambda: 1)

    runner = LocalRunner(registry)
    failed, plain = runner.start("one_at_a_time", {}), runner.start("no_fan_out", {})
    runner.run_until_done(failed)
    runner.run_until_done(plain)
    # when
    view = dump(ExecutionView.of(runner.engine.state(failed), registry))
    other = dump(ExecutionView.of(runner.engine.state(plain), registry))
    history = history_reply(failed, runner.engine.operator.history_page(failed), {})
    began = {s["branch"] for s in history["steps"] if s["kind"] == "branch"}
    # then: the ended execution still says how many branches its map has (its history shows only those that began)
    assert view["status"] == "FAILED" and "fanout" not in view, view
    assert view["fanouts"] == [{"step_index": 1, "branches": 4, "succeeded": 1, "max_concurrency": 1}], view
    assert began == {0, 1}, history
    # and an execution that never fanned out has no such key
    assert other["status"] == "COMPLETED" and "fanouts" not in other, other


def test_a_code_first_execution_that_failed_or_was_cancelled_names_the_step_it_stopped_at():
    # given: a code-first function whose second step fails for good, and one that sleeps
    from engine_core import PermanentStepError, Registry
    from engine_core.durable import durable, sleep, step
    from engine_core.testing import LocalRunner
    from loom_control_plane.responses import ExecutionView

    registry = Registry()

    def refuse():
        raise PermanentStepError("card declined")

    @durable("stops_at_charge", registry=registry)
    def stops_at_charge(input):
        step("reserve", lambda: 1)
        return step("charge", refuse)

    @durable("sleeps_then_ships", registry=registry)
    def sleeps_then_ships(input):
        step("reserve", lambda: 1)
        sleep(hours=1, name="pickup")
        return step("ship", lambda: 2)

    runner = LocalRunner(registry)
    failed = runner.start("stops_at_charge", {})
    runner.run_until_done(failed)
    cancelled = runner.start("sleeps_then_ships", {})
    for _ in range(3):
        runner.step_once()
    runner.engine.operator.cancel(cancelled, "ops")
    runner.run_until_done(cancelled)
    # when
    views = {eid: ExecutionView.of(runner.engine.state(eid), registry) for eid in (failed, cancelled)}
    # then: each names where it stopped, as a step list's does
    assert (views[failed].status, views[failed].current_step, views[failed].current_step_name) == ("FAILED", 1, "charge")
    assert (views[cancelled].status, views[cancelled].current_step_name) == ("CANCELLED", "pickup")


def test_a_code_first_execution_undoing_its_steps_names_the_step_being_undone():
    # given: a code-first saga whose third step fails for good, with slow-to-look-at compensations
    from engine_core import PermanentStepError, Registry
    from engine_core.durable import durable, step
    from engine_core.testing import LocalRunner
    from loom_control_plane.responses import ExecutionView

    registry = Registry()
    undone: list[str] = []

    def ship():
        raise PermanentStepError("carrier refused")

    @durable("walks_back", registry=registry)
    def walks_back(input):
        step("reserve", lambda: "r-1", compensate=lambda result: undone.append("release"))
        step("charge", lambda: "ch-1", compensate=lambda result: undone.append("refund"))
        return step("ship", ship)

    from engine_core import EngineSettings

    runner = LocalRunner(registry, settings=EngineSettings(max_chain_steps=1))  # one undo a delivery, each seen
    eid = runner.start("walks_back", {})
    seen = []
    for _ in range(20):
        view = ExecutionView.of(runner.engine.state(eid), registry)
        if view.compensating and view.status == "RUNNING":
            seen.append((view.current_step, view.current_step_name, list(undone)))
        if view.status in ("FAILED", "COMPENSATION_FAILED", "COMPLETED"):
            break
        runner.step_once()
    # then: while it walks back, the name is that of the step whose compensation runs, not the failed one
    assert seen and all(name == {1: "charge", 0: "reserve"}[step] for step, name, _ in seen), seen
    assert {s for s, _, _ in seen} == {0, 1} and undone == ["refund", "release"]
    view = ExecutionView.of(runner.engine.state(eid), registry)
    assert (view.status, view.current_step_name) == ("FAILED", "ship")  # where it stopped, once done


def test_an_invocation_that_is_not_a_function_url_request_is_answered_400_in_json(lambdas, world):
    # given: a direct invoke with neither a path nor a method (not a Function URL request, not a schedule's firing)
    reply = lambdas.control_plane.handler({"hello": "world"}, FakeContext())
    # then: an answer that says what the function takes, not a Lambda error
    body = json.loads(reply["body"])
    assert (reply["statusCode"], body["error"]) == (400, "invalid_request"), reply
    assert "this event is neither" in body["message"] and "POST /executions" in body["message"]
    assert world.items() == []
