"""The IAM check over the calls one full end-to-end run made, against the policies Terraform rendered.

``fixtures/e2e_iam.json`` is what ``make test-integration`` recorded (every distinct call of each
function and of the operator's tools) and the policies it read back from the applied deployment. To
refresh it after the calls or the policies change:

    LOOM_E2E_IAM_RECORD=$PWD/packages/test-support/tests/fixtures/e2e_iam.json make test-integration

The end-to-end run itself checks its own calls live (tests/integration/conftest.py); these tests pin
what the check decides on real calls: the control plane's policy before issue 20's fix is refused, the
fixed policies pass, and removing any one statement denies at least one call.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from loom_test_support.iam_check import check
from loom_test_support.iam_policy import statements_of

FIXTURE = json.loads((Path(__file__).resolve().parent / "fixtures" / "e2e_iam.json").read_text())
STATEMENTS = [(principal, s.policy, s.sid) for principal, docs in sorted(FIXTURE["policies"].items())
              for s in statements_of(docs)]


def _check(policies: dict[str, Any]):
    return check(FIXTURE["calls"], policies, FIXTURE["region"], FIXTURE["account"])


def _before_the_fix(policies: dict[str, Any]) -> dict[str, Any]:
    """The control plane's statements as they were: no UpdateItem, no statement for the list index."""
    out = copy.deepcopy(policies)
    for doc in out["control-plane"].values():
        doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "QueryListIndex"]
        for s in doc["Statement"]:
            if s.get("Sid") == "ExecutionItems":
                s["Action"] = [a for a in s["Action"] if a != "dynamodb:UpdateItem"]
    return out


def test_check_on_the_control_plane_policy_before_the_fix_denies_its_list_query_and_its_updates():
    # given
    table = f"arn:aws:dynamodb:{FIXTURE['region']}:{FIXTURE['account']}:table/"

    # when
    result = _check(_before_the_fix(FIXTURE["policies"]))

    # then
    denied = {(d.request.principal, d.request.action, d.request.resource.split(table, 1)[-1]) for d in result.denied}
    assert ("control-plane", "dynamodb:Query", "loom-local/index/GSI2") in denied
    assert ("control-plane", "dynamodb:UpdateItem", "loom-local") in denied
    assert "control-plane: dynamodb:Query on " in result.report()


def test_check_on_the_fixed_policies_allows_every_call_of_the_end_to_end_tier():
    result = _check(FIXTURE["policies"])
    assert result.ok, result.report()
    assert set(result.requests) == {"worker", "sweeper", "control-plane", "operator"}


@pytest.mark.parametrize(("principal", "policy", "sid"), STATEMENTS, ids=[f"{p}-{s}" for p, _, s in STATEMENTS])
def test_check_without_any_one_statement_denies_a_call_of_the_end_to_end_tier(principal, policy, sid):
    # given: the fixed policies less one statement
    policies = copy.deepcopy(FIXTURE["policies"])
    doc = policies[principal][policy]
    doc["Statement"] = [s for i, s in enumerate(doc["Statement"]) if str(s.get("Sid") or f"#{i}") != sid]

    # when
    result = _check(policies)

    # then
    assert not result.ok, f"removing {principal}'s {policy}/{sid} denied nothing"
    assert all(d.request.principal == principal for d in result.denied)
