"""The per-workflow allow-list end to end: terraform/envs/local applied with a `workflow_access` input,
the deployed control plane refusing what its lists do not allow, through the local Function URL (whose
caller is always `local`) and, for another identity, through the deployed function itself.

The allow-list changes what the whole stack accepts, so this module runs a stack of its own (an apply
of about a minute) instead of the session's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from loom_local import terraform
from loom_local.function_url import to_event
from loom_local.stack import LocalStack, StackOptions

REPO = Path(__file__).resolve().parents[2]
ONCALL_ROLE = "arn:aws:iam::123456789012:role/oncall"
ONCALL_SESSION = "arn:aws:sts::123456789012:assumed-role/oncall/ana"  # a session of ONCALL_ROLE
# Locally every caller is `local`: it may start orders but only on-call may operate them, and only the
# expenses app may start expenses. flaky_greeting is listed nowhere (and there is no "*"): open.
ACCESS = {
    "order_fulfillment": {"start": ["local"], "operate": [ONCALL_ROLE]},
    "expense_approval": {"start": ["arn:aws:iam::123456789012:role/expenses-app"], "operate": ["local"]},
}
ORDER = {"order_id": "acl-1", "amount_cents": 1200, "items": [{"sku": "mug", "qty": 1}], "email": "a@example.com"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    env_dir = REPO / "terraform" / "envs" / "local"
    declared = terraform.declared_variables(env_dir)
    assert "workflow_access" in declared, "terraform/envs/local has no workflow_access variable"
    tf_vars = {"workflow_access": json.dumps(ACCESS),
               **{k: v for k, v in {"lease_s": "5", "worker_timeout_s": "20"}.items() if k in declared}}
    run_dir = tmp_path_factory.mktemp("loom-access")
    stack = LocalStack(StackOptions(repo=REPO, run_dir=run_dir, env_dir=env_dir, tf_vars=tf_vars, sweep_every_s=2.0,
                                    function_env={"LOOM_EXAMPLES_LEDGER_PATH": str(run_dir / "ledger.jsonl")}))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


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


@pytest.mark.timeout(900)
def test_local_stack_with_an_allow_list_refuses_what_it_does_not_allow_and_writes_nothing(stack):
    # given: the control plane deployed with the allow-list through Terraform
    api = _Api(stack)
    assert json.loads(stack.deployment.functions["control-plane"].environment["LOOM_WORKFLOW_ACCESS"]) == {
        name: {**lists, "send": None} for name, lists in ACCESS.items()}

    # when: `local` starts an order (allowed) and tries to cancel it (operate: on-call only)
    status, started = api.request("POST", "/executions", {"workflow": "order_fulfillment", "input": ORDER})
    assert status == 202, started
    eid = started["execution_id"]
    refused, denied = api.request("POST", f"/executions/{eid}/cancel", {"reason": "not mine to cancel"})
    # and starts an expense (start: the expenses app only) and an unlisted workflow (open)
    refused_start, start_denied = api.request("POST", "/executions",
                                              {"workflow": "expense_approval", "input": {"expense_id": "e-1", "amount_cents": 900}})
    open_status, greeting = api.request("POST", "/executions", {"workflow": "flaky_greeting", "input": {"name": "Ada"}})

    # then: 403 access_denied, naming the caller and the list, and nothing changed
    assert (refused, denied["error"]) == (403, "access_denied"), denied
    assert "local may not cancel, redrive or wake executions of workflow 'order_fulfillment'" in denied["message"]
    _, order = api.request("GET", f"/executions/{eid}")
    assert order["status"] != "CANCELLED" and order["cancelled_by"] is None and order["started_by"] == "local"
    assert (refused_start, start_denied["error"]) == (403, "access_denied")
    assert "may not start workflow 'expense_approval'" in start_denied["message"]
    deadline = time.monotonic() + 10  # the list index is eventually consistent: give it time to show one
    while time.monotonic() < deadline:
        _, listed = api.request("GET", "/executions?workflow=expense_approval")
        assert listed["executions"] == []
        _, others = api.request("GET", "/executions?workflow=flaky_greeting")
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
