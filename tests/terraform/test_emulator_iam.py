"""The roles of envs/local and envs/dev as the emulator holds them: exactly the grants each function's
code needs, no wildcard, and the worker's covering every AWS call engine-core's adapters make."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deployed_stacks import HANDLERS, Deployed, grants_of, role_statements

pytestmark = pytest.mark.timeout(1200)


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_role_policy_has_no_wildcard_action_or_resource(deployed: Deployed, role: str) -> None:
    # given
    own_log_streams = (f"arn:aws:logs:us-east-1:{deployed.account}:log-group:"
                       f"/aws/lambda/{deployed.out['function_names'][role]}:*")

    # when
    grants = grants_of(role_statements(deployed, role))

    # then
    assert grants
    for action, resource in grants:
        assert "*" not in action, f"wildcard action {action}"
        assert resource != "*", f"{action} on every resource"
        # The only "*" allowed: the stream names of the function's own log group.
        assert "*" not in resource or resource == own_log_streams, f"{action} on {resource}"


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_role_policy_grants_exactly_the_contract(deployed: Deployed, role: str) -> None:
    # given
    out = deployed.out
    table, queue, dlq = out["table_arn"], out["queue_arn"], out["dlq_arn"]
    logs = {(a, f"arn:aws:logs:us-east-1:{deployed.account}:log-group:/aws/lambda/{out['function_names'][role]}:*")
            for a in ("logs:CreateLogStream", "logs:PutLogEvents")}
    expected = {
        "worker": {(f"dynamodb:{a}", table) for a in ("GetItem", "PutItem", "UpdateItem", "Query")}
        | {(f"sqs:{a}", queue) for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes",
                                          "ChangeMessageVisibility", "SendMessage")}
        | {("sqs:SendMessage", dlq)},
        "sweeper": {("dynamodb:Query", f"{table}/index/GSI1")}
        | {(f"dynamodb:{a}", table) for a in ("GetItem", "PutItem", "UpdateItem", "Query")}
        | {("sqs:SendMessage", queue), ("sqs:SendMessage", dlq)},
        "control_plane": {(f"dynamodb:{a}", table) for a in ("PutItem", "GetItem", "UpdateItem", "Query", "BatchGetItem")}
        | {("dynamodb:Query", f"{table}/index/GSI2"), ("dynamodb:Query", f"{table}/index/GSI1"),
           ("sqs:SendMessage", queue)},
    }[role] | logs
    if deployed.spec.status_events:
        expected |= {("events:PutEvents", out["status_event_bus_arn"])}

    # when
    grants = grants_of(role_statements(deployed, role))

    # then
    assert grants == expected
    assert not any(a == "dynamodb:DeleteItem" for a, _ in grants)


_ENGINE = Path(__file__).resolve().parents[2] / "packages" / "engine-core" / "src" / "engine_core"
# boto3 operation -> the IAM actions it needs. TransactWriteItems is authorized per item action.
_IAM_FOR = {
    "get_item": {"dynamodb:GetItem"}, "put_item": {"dynamodb:PutItem"}, "update_item": {"dynamodb:UpdateItem"},
    "query": {"dynamodb:Query"}, "transact_write_items": {"dynamodb:PutItem", "dynamodb:UpdateItem"},
    "batch_get_item": {"dynamodb:BatchGetItem"},
    "send_message": {"sqs:SendMessage"}, "change_message_visibility": {"sqs:ChangeMessageVisibility"},
    "put_events": {"events:PutEvents"},
}
_LIST_ONLY = {"batch_get_item"}
"""Calls only a list page makes (the control plane's GET /executions): the worker never lists."""
_STATUS_EVENTS = {"put_events"}
"""Calls made only with ``status_events`` on (events.tf grants them then)."""


def test_roles_cover_every_aws_call_engine_core_makes(deployed: Deployed) -> None:
    # given: the boto3 operations every adapter module calls (the worker runs every path but listing)
    sources = sorted((_ENGINE / "adapters").glob("*.py"))
    texts = [src.read_text("utf-8") for src in sources]
    calls = {op for text in texts for op in re.findall(r"(?:self|store)\.client\.([a-z_]+)\(", text)}
    assert {"transact_write_items", "send_message", "put_events"} <= calls, "the scan no longer finds the calls"
    unknown = calls - set(_IAM_FOR)
    assert not unknown, (f"engine-core now calls {sorted(unknown)}: grant it in terraform/modules/loom/iam.tf "
                         "(least privilege, per function) and add it to _IAM_FOR here")
    other_clients = {m for text in texts for m in re.findall(r"\b(?!self\b|store\b)(\w+)\.client\.[a-z_]+\(", text)}
    assert not other_clients, f"AWS calls through {other_clients}: scan them here too"
    transact_kinds = {kind for text in texts for kind in re.findall(r'\{"(Put|Update|Delete|ConditionCheck)":', text)}
    assert transact_kinds <= {"Put", "Update"}, f"transactions now hold {transact_kinds}: grant the item actions"

    # when
    worker = {a for a, _ in grants_of(role_statements(deployed, "worker"))}
    control_plane = {a for a, _ in grants_of(role_statements(deployed, "control_plane"))}

    # then
    assert set().union(*(_IAM_FOR[op] for op in calls - _LIST_ONLY - _STATUS_EVENTS)) <= worker
    events = set().union(*(_IAM_FOR[op] for op in _STATUS_EVENTS))
    assert (events <= worker and events <= control_plane) is deployed.spec.status_events, (worker, control_plane)
    assert set().union(*(_IAM_FOR[op] for op in _LIST_ONLY)) <= control_plane
    assert _LIST_ONLY <= calls, "a list-only call is gone: drop it from _LIST_ONLY and its grant"
