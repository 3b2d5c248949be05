"""The per-workflow allow-list (LOOM_WORKFLOW_ACCESS): who may start, operate and send to which workflow.

The policy's own rules first (parsing, matching principals), then through the handler on moto: a caller
not on a list is refused 403 ``access_denied`` and nothing is written; a caller on it gets the route's
usual answer.
"""

from __future__ import annotations

import json

import pytest
from loom_test_support.lambda_harness import FakeContext, function_url_event

from loom_control_plane.access import AccessPolicy
from loom_control_plane.errors import ApiError

ACCOUNT = "123456789012"
ONCALL_ROLE = f"arn:aws:iam::{ACCOUNT}:role/teams/oncall"
ONCALL = f"arn:aws:sts::{ACCOUNT}:assumed-role/oncall/ana"  # a session of ONCALL_ROLE
APP = f"arn:aws:iam::{ACCOUNT}:user/orders-app"
APPROVER = f"arn:aws:sts::{ACCOUNT}:assumed-role/approvals/mailer"
STRANGER = f"arn:aws:sts::{ACCOUNT}:assumed-role/oncall-admin/eve"  # its role name only starts like oncall's
ORDER = {"order_id": "o-1", "amount_cents": 100}
EXPENSE = {"expense_id": "e-1", "amount_cents": 900}
POLICY = {
    "order_fulfillment": {"start": [APP], "operate": [ONCALL_ROLE]},
    "expense_approval": {"start": ["*"], "operate": [ONCALL_ROLE], "send": [f"arn:aws:sts::{ACCOUNT}:assumed-role/approvals/*"]},
    "*": {"start": [ONCALL_ROLE], "operate": [ONCALL_ROLE]},
}


# -- the policy ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [None, "", "  "])
def test_policy_when_unset_or_empty_is_open(raw):
    # when
    policy = AccessPolicy.parse(raw)
    # then
    assert not policy.restricts
    policy.check("start", "anything", "anyone")  # does not raise


@pytest.mark.parametrize("raw, words", [
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"w": {"start": ["a"]}}', "operate"),
    ('{"w": {"start": ["a"], "operate": [], "stat": []}}', "stat"),
    ('{"w": {"start": ["two words"], "operate": []}}', "start.0"),
    ('{"w": {"start": "arn:aws:iam::1:user/a", "operate": []}}', "start"),
])
def test_policy_when_malformed_refuses_every_guarded_action_saying_what_is_wrong(raw, words):
    # given
    policy = AccessPolicy.parse(raw)
    # when
    with pytest.raises(ApiError) as refused:
        policy.check("start", "w", "anyone")
    # then: refused (never let through), naming the setting, its Terraform input and the problem
    assert policy.restricts and words in policy.problem
    assert (refused.value.status, refused.value.code) == (500, "access_policy_invalid")
    assert "LOOM_WORKFLOW_ACCESS" in refused.value.message and "workflow_access" in refused.value.message


@pytest.mark.parametrize("entry, caller, allowed", [
    (APP, APP, True),
    (APP, APP + "x", False),
    (ONCALL_ROLE, ONCALL, True),                                  # a role ARN (with a path) matches its sessions
    (ONCALL_ROLE, STRANGER, False),                               # not another role whose name starts the same
    (ONCALL_ROLE, "arn:aws:sts::210987654321:assumed-role/oncall/ana", False),  # nor the same name elsewhere
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/approvals/*", APPROVER, True),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/approvals/*", ONCALL, False),
    ("*", "local", True),
    ("local", "local", True),
    (ACCOUNT, ACCOUNT, True),
    ("arn:aws:iam::123456789012:user/a.b", "arn:aws:iam::123456789012:user/aXb", False),  # "." is literal
])
def test_policy_principal_entry_matches_the_recorded_caller_as_documented(entry, caller, allowed):
    # given
    policy = AccessPolicy.parse(json.dumps({"w": {"start": [entry], "operate": []}}))
    # when
    try:
        policy.check("start", "w", caller)
        got = True
    except ApiError as refused:
        assert (refused.status, refused.code) == (403, "access_denied")
        got = False
    # then
    assert got is allowed


def test_policy_lists_apply_to_their_workflow_then_star_and_send_defaults_to_operate():
    # given
    policy = AccessPolicy.parse(json.dumps({"named": {"start": ["a"], "operate": ["b"]},
                                            "*": {"start": ["c"], "operate": []}}))

    def allowed(action: str, workflow: str, caller: str) -> bool:
        try:
            policy.check(action, workflow, caller)
            return True
        except ApiError:
            return False

    # then
    assert allowed("start", "named", "a") and not allowed("start", "named", "c")  # the name wins over "*"
    assert allowed("start", "other", "c") and not allowed("start", "other", "a")
    assert allowed("send", "named", "b") and not allowed("send", "named", "a")    # send: the operate list
    assert not allowed("operate", "other", "c")                                   # an empty list: nobody
    assert AccessPolicy.parse('{"named": {"start": [], "operate": []}}').check("start", "other", "x") is None


# -- through the control plane ---------------------------------------------------------------------------
@pytest.fixture
def guarded(monkeypatch, lambdas):
    """The control plane cold-started with POLICY in its environment."""
    monkeypatch.setenv("LOOM_WORKFLOW_ACCESS", json.dumps(POLICY))
    return lambdas


def _as(caller: str) -> dict:
    return {"accessKey": "ASIAEXAMPLE", "accountId": ACCOUNT, "callerId": "AROAEXAMPLE:x", "userArn": caller}


def call(lambdas, method: str, path: str, body: dict | None = None, caller: str = ONCALL) -> tuple[int, dict]:
    event = function_url_event(method, path, None if body is None else json.dumps(body))
    event["requestContext"]["authorizer"] = {"iam": _as(caller)}
    reply = lambdas.control_plane.handler(event, FakeContext())
    return reply["statusCode"], json.loads(reply["body"])


def start(lambdas, workflow: str, payload: dict, caller: str) -> str:
    status, body = call(lambdas, "POST", "/executions", {"workflow": workflow, "input": payload}, caller)
    assert status == 202, body
    return body["execution_id"]


def run_until(lambdas, world, eid: str, status: str, max_rounds: int = 200) -> None:
    for _ in range(max_rounds):
        if world.meta(eid)["status"]["S"] == status:
            return
        if not lambdas.pump.deliver():
            lambdas.pump.tick()
    raise AssertionError(f"{eid} never reached {status}: {world.meta(eid)}")


def assert_denied(lambdas, world, method: str, path: str, body: dict | None, caller: str, words: str) -> None:
    items = world.items()
    status, reply = call(lambdas, method, path, body, caller)
    assert (status, reply["error"]) == (403, "access_denied"), reply
    assert caller in reply["message"] and words in reply["message"] and "workflow_access" in reply["message"]
    assert world.items() == items


def test_start_when_the_caller_is_not_on_the_start_list_is_403_and_writes_nothing(guarded, world):
    # when / then: the orders app may start orders; on-call may not (it operates them)
    assert_denied(guarded, world, "POST", "/executions", {"workflow": "order_fulfillment", "input": ORDER}, ONCALL,
                  "may not start workflow 'order_fulfillment'")
    eid = start(guarded, "order_fulfillment", ORDER, APP)
    _, view = call(guarded, "GET", f"/executions/{eid}", caller=STRANGER)  # reads are not restricted
    assert view["started_by"] == APP


def test_start_of_an_unlisted_workflow_follows_the_star_rule(guarded, world):
    # then
    assert_denied(guarded, world, "POST", "/executions", {"workflow": "flaky_greeting", "input": {"name": "Ada"}},
                  APP, "every workflow not listed by name")
    start(guarded, "flaky_greeting", {"name": "Ada"}, ONCALL)


def test_operator_actions_when_the_caller_is_not_an_operator_are_403_and_change_nothing(guarded, world, clock):
    # given: an order asleep, started by the app
    eid = start(guarded, "order_fulfillment", ORDER, APP)
    run_until(guarded, world, eid, "SLEEPING")
    # when / then: neither the app nor another role may cancel, wake or redrive it
    for caller in (APP, STRANGER):
        assert_denied(guarded, world, "POST", f"/executions/{eid}/cancel", {"reason": "no"}, caller,
                      "may not cancel, redrive or wake executions of workflow 'order_fulfillment'")
        assert_denied(guarded, world, "POST", f"/executions/{eid}/wake", None, caller, "'operate' allow-list")
        assert_denied(guarded, world, "POST", f"/executions/{eid}/redrive", None, caller, "'operate' allow-list")
    # and an on-call session may
    status, woken = call(guarded, "POST", f"/executions/{eid}/wake", caller=ONCALL)
    assert (status, woken["execution_id"]) == (200, eid)
    status, cancelled = call(guarded, "POST", f"/executions/{eid}/cancel", {"reason": "duplicate"}, ONCALL)
    assert (status, cancelled["status"], cancelled["cancelled_by"]) == (200, "CANCELLED", ONCALL)


def test_operator_action_on_an_unknown_execution_is_still_404(guarded, world):
    # when
    status, reply = call(guarded, "POST", "/executions/6f1c2b1e-0000-4000-8000-000000000001/cancel", {}, STRANGER)
    # then
    assert (status, reply["error"]) == (404, "execution_not_found")


def test_events_and_callbacks_follow_the_send_list(guarded, world):
    # given: an expense waiting for approval (anyone may start one)
    eid = start(guarded, "expense_approval", EXPENSE, STRANGER)
    run_until(guarded, world, eid, "WAITING")
    _, view = call(guarded, "GET", f"/executions/{eid}")
    token = view["context"]["approval_callback"]
    # when / then: on-call operates expenses but is not on their send list; the approvals role is
    assert_denied(guarded, world, "POST", f"/executions/{eid}/events/approved", {"data": {"approved": True}}, ONCALL,
                  "may not send events to executions of workflow 'expense_approval'")
    assert_denied(guarded, world, "POST", f"/callbacks/{token}", {"data": {"approved": True}}, ONCALL, "'send'")
    status, sent = call(guarded, "POST", f"/callbacks/{token}", {"data": {"approved": True}}, APPROVER)
    assert (status, sent["outcome"]) == (200, "delivered")
    run_until(guarded, world, eid, "COMPLETED")


def test_callback_with_an_unknown_token_is_still_404(guarded, world):
    # when
    status, reply = call(guarded, "POST", "/callbacks/" + "A" * 46, {}, APPROVER)
    # then
    assert (status, reply["error"]) == (404, "callback_not_found")


def test_control_plane_with_a_malformed_allow_list_refuses_starts_and_still_reads(monkeypatch, lambdas, world):
    # given
    monkeypatch.setenv("LOOM_WORKFLOW_ACCESS", '{"order_fulfillment": {"start": ["a"]}}')
    # when
    status, reply = call(lambdas, "POST", "/executions", {"workflow": "order_fulfillment", "input": ORDER}, APP)
    listed, workflows = call(lambdas, "GET", "/workflows", caller=APP)
    # then
    assert (status, reply["error"]) == (500, "access_policy_invalid") and "operate" in reply["message"]
    assert listed == 200 and workflows["workflows"]
    assert not world.items()


def test_control_plane_without_an_allow_list_lets_every_caller_start_and_operate(lambdas, world):
    # when: no LOOM_WORKFLOW_ACCESS (what every deployment had before it)
    eid = start(lambdas, "order_fulfillment", ORDER, STRANGER)
    status, cancelled = call(lambdas, "POST", f"/executions/{eid}/cancel", {}, APP)
    # then
    assert (status, cancelled["status"]) == (200, "CANCELLED")
