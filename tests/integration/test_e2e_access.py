"""The per-workflow allow-list end to end: the deployed control plane refusing what its lists do not allow,
through the local Function URL (whose caller is always `local`) and, for another identity, through the
deployed function itself.

The allow-list is set on the session's stack for this module only, as `aws lambda
update-function-configuration` sets it (the control plane's LOOM_WORKFLOW_ACCESS, what Terraform's
`workflow_access` input renders; tests/terraform applies envs/local with one and checks that rendering),
and taken off again when the module ends. Tests run one after another on a stack, so no other test sees
it; the checks here look only at executions this module started (from its start time on, or by id).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator

import pytest

from loom_local.function_url import to_event
from loom_local.stack import LocalStack

ONCALL_ROLE = "arn:aws:iam::123456789012:role/oncall"
ONCALL_SESSION = "arn:aws:sts::123456789012:assumed-role/oncall/ana"  # a session of ONCALL_ROLE
# Locally every caller is `local`: it may start orders but only on-call may operate them, and only the
# expenses app may start expenses. flaky_greeting is listed nowhere (and there is no "*"): open.
ACCESS = {
    "order_fulfillment": {"start": ["local"], "operate": [ONCALL_ROLE]},
    "expense_approval": {"start": ["arn:aws:iam::123456789012:role/expenses-app"], "operate": ["local"]},
}
# As Terraform renders the input (send: null, the operate list, when it is not given).
RENDERED = {name: {**lists, "send": None} for name, lists in ACCESS.items()}
ORDER = {"order_id": "acl-1", "amount_cents": 1200, "items": [{"sku": "mug", "qty": 1}], "email": "a@example.com"}


@pytest.fixture(scope="module")
def stack(loom) -> Iterator[LocalStack]:
    """The session's stack with the allow-list on its control plane, and without it again afterwards.

    Lambda's UpdateFunctionConfiguration, then a redeploy of the same zips through Lambda's API, which
    reads every function's configuration back and starts the next invocations in new environments (an
    apply would cost some 20 CPU-seconds each way)."""
    lam = loom.stack.client("lambda")
    name = loom.deployment.functions["control-plane"].name
    before = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    lam.update_function_configuration(FunctionName=name, Environment={"Variables": {
        **before, "LOOM_WORKFLOW_ACCESS": json.dumps(RENDERED)}})
    try:
        loom.stack.redeploy(loom.stack.zip_dir, via="api")
        yield loom.stack
    finally:
        lam.update_function_configuration(FunctionName=name, Environment={"Variables": before})
        loom.stack.redeploy(loom.stack.zip_dir, via="api")
        assert loom.stack.deployment.functions["control-plane"].environment == before


class _Api:
    """The local Function URL as the CLI calls it, with refusals returned instead of raised."""

    def __init__(self, stack: LocalStack):
        from loom_cli.client import Client

        self.client = Client.create(stack.url, sign=False)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        from loom_cli.client import ApiError

        try:
            return self.client.request(method, path, body)
        except ApiError as refused:
            return refused.status, refused.document


def _as(stack: LocalStack, caller: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """A request from another IAM identity, to the deployed control plane (the local URL is always `local`)."""
    raw = b"" if body is None else json.dumps(body).encode()
    event = to_event(stack.deployment.url, method, path, [("content-type", "application/json")], raw, "127.0.0.1")
    event["requestContext"]["authorizer"] = {"iam": {"accountId": "123456789012", "callerId": "AROAEXAMPLE:ana",
                                                     "userArn": caller, "accessKey": "ASIAEXAMPLE"}}
    result = stack.functions["control-plane"].invoke(event)
    assert result.status == "ok", result.error
    return result.payload["statusCode"], json.loads(result.payload["body"])


def _next_whole_second() -> str:
    """The next whole second (UTC, as `started_after` takes it), once it has begun."""
    now = dt.datetime.now(dt.timezone.utc)
    start = now.replace(microsecond=0) + dt.timedelta(seconds=1)
    time.sleep((start - now).total_seconds())
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_local_stack_with_an_allow_list_refuses_what_it_does_not_allow_and_writes_nothing(stack, loom):
    # given: the control plane running with the allow-list (as the runtime read it back from Lambda)
    api = _Api(stack)
    assert json.loads(stack.deployment.functions["control-plane"].environment["LOOM_WORKFLOW_ACCESS"]) == RENDERED
    since = _next_whole_second()  # the API's window is whole seconds: nothing an earlier test started is in it
    refused_token = f"acl-expense-{uuid.uuid4().hex[:12]}"

    # when: `local` starts an order (allowed) and tries to cancel it (operate: on-call only)
    status, started = api.request("POST", "/executions", {"workflow": "order_fulfillment", "input": ORDER})
    assert status == 202, started
    eid = started["execution_id"]
    refused, denied = api.request("POST", f"/executions/{eid}/cancel", {"reason": "not mine to cancel"})
    # and starts an expense (start: the expenses app only) and an unlisted workflow (open)
    refused_start, start_denied = api.request("POST", "/executions", {
        "workflow": "expense_approval", "input": {"expense_id": "e-1", "amount_cents": 900},
        "idempotency_token": refused_token})
    open_status, greeting = api.request("POST", "/executions", {"workflow": "flaky_greeting", "input": {"name": "Ada"}})

    # then: 403 access_denied, naming the caller and the list, and nothing changed
    assert (refused, denied["error"]) == (403, "access_denied"), denied
    assert "local may not cancel, redrive or wake executions of workflow 'order_fulfillment'" in denied["message"]
    _, order = api.request("GET", f"/executions/{eid}")
    assert order["status"] != "CANCELLED" and order["cancelled_by"] is None and order["started_by"] == "local"
    assert (refused_start, start_denied["error"]) == (403, "access_denied")
    assert "may not start workflow 'expense_approval'" in start_denied["message"]
    # the refused start wrote nothing: not the execution its token names, nor any other since this test began
    missing, _ = api.request("GET", f"/executions/{loom.execution_id_for(refused_token)}")
    assert missing == 404
    deadline = time.monotonic() + 10  # the list index is eventually consistent: give it time to show one
    while time.monotonic() < deadline:
        _, listed = api.request("GET", f"/executions?workflow=expense_approval&started_after={since}")
        assert listed["executions"] == []
        _, others = api.request("GET", f"/executions?workflow=flaky_greeting&started_after={since}")
        if others["executions"]:
            break
        time.sleep(0.5)
    assert open_status == 202 and [e["execution_id"] for e in others["executions"]] == [greeting["execution_id"]]

    # when: an on-call session (on the operate list by its role's ARN) cancels the order
    status, cancelled = _as(stack, ONCALL_SESSION, "POST", f"/executions/{eid}/cancel", {"reason": "duplicate"})
    stranger, refused_again = _as(stack, "arn:aws:sts::123456789012:assumed-role/oncall-admin/eve", "POST",
                                  f"/executions/{eid}/wake")

    # then
    assert status == 200 and cancelled["cancelled_by"] == ONCALL_SESSION, cancelled
    assert cancelled["status"] in ("CANCELLED", "RUNNING")  # RUNNING while its compensations (if any) undo
    assert (stranger, refused_again["error"]) == (403, "access_denied")
