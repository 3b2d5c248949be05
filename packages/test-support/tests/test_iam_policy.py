"""The IAM check's parts: a recorded call as IAM requests, and IAM's decision on each."""

from __future__ import annotations

import pytest

from loom_test_support.iam_check import check
from loom_test_support.iam_policy import decide, statements_of
from loom_test_support.iam_requests import Request, UnknownCallError, requests_of

REGION, ACCOUNT = "us-east-1", "123456789012"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/loom"


def _allow(sid: str, actions, resources, **extra) -> dict:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources, **extra}


def _decide(statements: list[dict], action: str, resource: str, context: dict | None = None):
    request = Request("p", action, resource, tuple(sorted((context or {}).items())))
    return decide(statements_of({"policy": {"Statement": statements}}), request)


def test_decide_when_only_the_table_is_allowed_denies_its_index():
    # given
    table_only = [_allow("Items", ["dynamodb:Query"], [TABLE])]

    # when
    on_table = _decide(table_only, "dynamodb:Query", TABLE)
    on_index = _decide(table_only, "dynamodb:Query", f"{TABLE}/index/GSI2")

    # then
    assert on_table.allowed and on_table.allowed_by == ("policy/Items",)
    assert not on_index.allowed and not on_index.explicit_deny


def test_decide_matches_actions_case_insensitively_and_resources_with_wildcards():
    statements = [_allow("Indexes", "DynamoDB:query", f"{TABLE}/index/GSI?"),
                  _allow("Streams", "logs:PutLogEvents", "arn:aws:logs:*:*:log-group:/aws/lambda/w:*")]
    assert _decide(statements, "dynamodb:Query", f"{TABLE}/index/GSI2").allowed
    assert not _decide(statements, "dynamodb:Query", f"{TABLE}/index/GSI10").allowed
    assert _decide(statements, "logs:PutLogEvents",
                   f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/w:log-stream:x").allowed
    assert not _decide(statements, "logs:PutLogEvents",
                       f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/other:log-stream:x").allowed


def test_decide_when_a_deny_matches_refuses_whatever_allows_it():
    statements = [_allow("All", "sqs:*", "*"), {"Sid": "NoDlq", "Effect": "Deny", "Action": "sqs:SendMessage",
                                                "Resource": "arn:aws:sqs:*:*:loom-dlq"}]
    denied = _decide(statements, "sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:loom-dlq")
    assert (denied.allowed, denied.explicit_deny) == (False, True)
    assert _decide(statements, "sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:loom-steps").allowed


def test_decide_with_not_action_allows_everything_else():
    statements = [{"Sid": "AllButDelete", "Effect": "Allow", "NotAction": "dynamodb:DeleteItem", "Resource": TABLE}]
    assert _decide(statements, "dynamodb:PutItem", TABLE).allowed
    assert not _decide(statements, "dynamodb:DeleteItem", TABLE).allowed


def test_decide_evaluates_the_conditions_of_the_operator_policy():
    fn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:loom-control-plane"
    statements = [_allow("Url", "lambda:InvokeFunctionUrl", fn,
                         Condition={"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}),
                  _allow("Invoke", "lambda:InvokeFunction", fn,
                         Condition={"Bool": {"lambda:InvokedViaFunctionUrl": "true"}})]
    assert _decide(statements, "lambda:InvokeFunctionUrl", fn, {"lambda:FunctionUrlAuthType": "AWS_IAM"}).allowed
    assert not _decide(statements, "lambda:InvokeFunctionUrl", fn, {"lambda:FunctionUrlAuthType": "NONE"}).allowed
    assert _decide(statements, "lambda:InvokeFunction", fn, {"lambda:InvokedViaFunctionUrl": "true"}).allowed
    assert not _decide(statements, "lambda:InvokeFunction", fn, {}).allowed


def _call(principal: str, service: str, operation: str, **params) -> dict:
    return {"principal": principal, "service": service, "operation": operation, "params": params}


def test_requests_of_maps_each_operation_to_its_iam_actions_and_resources():
    queue = f"http://127.0.0.1:5000/{ACCOUNT}/loom-steps"
    cases = {
        "query an index": (_call("w", "dynamodb", "Query", TableName="loom", IndexName="GSI1"),
                           [("dynamodb:Query", f"{TABLE}/index/GSI1")]),
        "a transaction": (_call("w", "dynamodb", "TransactWriteItems",
                                TransactItems=[{"Put": {"TableName": "loom"}}, {"Update": {"TableName": "loom"}}]),
                          [("dynamodb:PutItem", TABLE), ("dynamodb:UpdateItem", TABLE)]),
        "a batch delete": (_call("w", "sqs", "DeleteMessageBatch", QueueUrl=queue, Entries=3),
                           [("sqs:DeleteMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:loom-steps")]),
        "the default bus": (_call("w", "events", "PutEvents", Entries=[{"EventBusName": "default"}]),
                            [("events:PutEvents", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default")]),
    }
    for name, (call, expected) in cases.items():
        assert [(r.action, r.resource) for r in requests_of(call, REGION, ACCOUNT)] == expected, name


def test_requests_of_a_function_url_call_needs_both_lambda_actions_with_their_context():
    call = {**_call("operator", "lambda", "InvokeFunctionUrl", FunctionName="arn:fn"),
            "context": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}
    requests = requests_of(call, REGION, ACCOUNT)
    assert [(r.action, dict(r.context)) for r in requests] == [
        ("lambda:InvokeFunctionUrl", {"lambda:FunctionUrlAuthType": "AWS_IAM"}),
        ("lambda:InvokeFunction", {"lambda:FunctionUrlAuthType": "AWS_IAM", "lambda:InvokedViaFunctionUrl": "true"})]


def test_requests_of_an_unmapped_operation_is_refused_not_passed():
    with pytest.raises(UnknownCallError, match="no IAM mapping for s3:GetObject"):
        requests_of(_call("worker", "s3", "GetObject", Bucket="b"), REGION, ACCOUNT)


def test_check_when_a_call_is_not_allowed_names_the_principal_action_resource_and_where_to_grant_it():
    # given
    calls = [_call("control-plane", "dynamodb", "Query", TableName="loom", IndexName="GSI2"),
             _call("control-plane", "dynamodb", "GetItem", TableName="loom")]
    policies = {"control-plane": {"p": {"Statement": [_allow("ExecutionItems", ["dynamodb:GetItem", "dynamodb:Query"],
                                                             [TABLE])]}}}

    # when
    result = check(calls, policies, REGION, ACCOUNT)

    # then
    assert not result.ok
    assert result.report().splitlines()[1:] == [
        f"  - control-plane: dynamodb:Query on {TABLE}/index/GSI2 (API Query) is denied: no statement allows it: "
        f"add dynamodb:Query on {TABLE}/index/GSI2 to control_plane_statements in terraform/modules/loom/iam.tf"]


def test_check_when_calls_of_a_principal_have_no_policy_refuses_to_pass_them():
    with pytest.raises(KeyError, match="calls of 'operator' were recorded but no policy"):
        check([_call("operator", "sqs", "ReceiveMessage", QueueUrl=f"http://h/{ACCOUNT}/dlq")], {}, REGION, ACCOUNT)


def test_unneeded_statements_names_a_statement_no_call_needs():
    calls = [_call("worker", "dynamodb", "GetItem", TableName="loom")]
    policies = {"worker": {"p": {"Statement": [_allow("Items", "dynamodb:GetItem", TABLE),
                                               _allow("Spare", "sqs:SendMessage", "arn:aws:sqs:*:*:q")]}}}
    assert check(calls, policies, REGION, ACCOUNT).unneeded_statements() == ["worker: p/Spare"]
