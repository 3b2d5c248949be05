"""Event and response shapes: SQS records, partial batch responses, Function URL v2, schedules, env."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest

from loom_local.deployment import DeployedFunction, DeploymentError, code_sha256, lambda_environment
from loom_local.esm import failed_ids, to_record
from loom_local.function_url import UrlConfig, to_event, to_http
from loom_local.functions import InvokeResult
from loom_local.schedule import RuleConfig, ScheduleError, rate_seconds, scheduled_event

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:loom-steps"


def test_an_sqs_message_becomes_a_lambda_record():
    message = {"MessageId": "m-1", "ReceiptHandle": "rh-1", "Body": '{"a": 1}', "MD5OfBody": "abc",
               "Attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000000", "SenderId": "AIDA",
                              "ApproximateFirstReceiveTimestamp": "1700000000001"},
               "MessageAttributes": {"k": {"StringValue": "v", "DataType": "String"}}}
    record = to_record(message, QUEUE_ARN, "us-east-1")
    assert record == {
        "messageId": "m-1", "receiptHandle": "rh-1", "body": '{"a": 1}',
        "attributes": message["Attributes"],
        "messageAttributes": {"k": {"stringValue": "v", "binaryValue": None, "stringListValues": [],
                                    "binaryListValues": [], "dataType": "String"}},
        "md5OfBody": "abc", "eventSource": "aws:sqs", "eventSourceARN": QUEUE_ARN, "awsRegion": "us-east-1"}


IDS = ["a", "b", "c"]


def _ok(payload) -> InvokeResult:
    return InvokeResult("r", "ok", payload=payload)


@pytest.mark.parametrize(("result", "report", "expected"), [
    (_ok({"batchItemFailures": []}), True, set()),
    (_ok({"batchItemFailures": None}), True, set()),
    (_ok(None), True, set()),
    (_ok({}), True, set()),
    (_ok({"batchItemFailures": [{"itemIdentifier": "b"}]}), True, {"b"}),
    (_ok({"batchItemFailures": [{"itemIdentifier": "b"}, {"itemIdentifier": "c"}]}), True, {"b", "c"}),
    (_ok({"batchItemFailures": [{"itemIdentifier": "zzz"}]}), True, set(IDS)),  # not in the batch
    (_ok({"batchItemFailures": [{"itemIdentifier": ""}]}), True, set(IDS)),
    (_ok({"batchItemFailures": [{"itemIdentifier": None}]}), True, set(IDS)),
    (_ok({"batchItemFailures": [{"wrongKey": "a"}]}), True, set(IDS)),
    (_ok({"batchItemFailures": "a"}), True, set(IDS)),
    (_ok({"batchItemFailures": [{"itemIdentifier": "b"}]}), False, set()),  # ignored without the response type
    (InvokeResult("r", "function_error", error={}), True, set(IDS)),
    (InvokeResult("r", "timeout", error={}), True, set(IDS)),
    (InvokeResult("r", "crashed", error={}), False, set(IDS)),
])
def test_partial_batch_responses_follow_lambdas_rules(result, report, expected):
    failed, why = failed_ids(result, IDS, report)
    assert failed == expected, why


URL = UrlConfig(url_id="abcdef123", region="us-east-1", account="123456789012", auth_type="AWS_IAM")
NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_an_http_request_becomes_a_function_url_event():
    event = to_event(URL, "POST", "/executions?x=1&x=2", [("Content-Type", "application/json"), ("X-A", "1"),
                                                           ("x-a", "2"), ("Cookie", "s=1; t=2")],
                     b'{"workflow": "w"}', "127.0.0.1", now=NOW)
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/executions" and event["rawQueryString"] == "x=1&x=2"
    assert event["queryStringParameters"] == {"x": "1,2"}
    assert event["headers"]["x-a"] == "1,2" and event["headers"]["content-type"] == "application/json"
    assert event["headers"]["host"] == "abcdef123.lambda-url.us-east-1.on.aws"
    assert event["cookies"] == ["s=1", "t=2"]
    assert event["body"] == '{"workflow": "w"}' and event["isBase64Encoded"] is False
    ctx = event["requestContext"]
    assert ctx["http"] == {"method": "POST", "path": "/executions", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                           "userAgent": ""}
    assert ctx["apiId"] == "abcdef123" and ctx["domainPrefix"] == "abcdef123"
    assert ctx["time"] == "01/Mar/2026:12:00:00 +0000" and ctx["timeEpoch"] == int(NOW.timestamp() * 1000)
    assert set(ctx["authorizer"]["iam"]) == {"accessKey", "accountId", "callerId", "cognitoIdentity",
                                             "principalOrgId", "userArn", "userId"}


def test_a_get_has_no_body_and_binary_bodies_are_base64():
    get = to_event(URL, "GET", "/workflows", [], b"", "127.0.0.1")
    assert "body" not in get and "queryStringParameters" not in get and "cookies" not in get
    binary = to_event(URL, "POST", "/x", [("content-type", "application/octet-stream")], b"\x00\xff", "127.0.0.1")
    assert binary["isBase64Encoded"] is True and base64.b64decode(binary["body"]) == b"\x00\xff"
    public = to_event(UrlConfig("u", "us-east-1", "1", "NONE"), "GET", "/", [], b"", "127.0.0.1")
    assert public["requestContext"]["authorizer"] is None


@pytest.mark.parametrize(("payload", "expected"), [
    ({"statusCode": 404, "headers": {"content-type": "application/json"}, "body": '{"error": "not_found"}'},
     (404, [("content-type", "application/json")], b'{"error": "not_found"}')),
    ({"statusCode": 200, "body": base64.b64encode(b"\x01").decode(), "isBase64Encoded": True}, (200, [], b"\x01")),
    ({"statusCode": 204}, (204, [], b"")),
    ({"statusCode": 201, "cookies": ["a=1"], "body": "x"}, (201, [("set-cookie", "a=1")], b"x")),
    ({"message": "hi"}, (200, [("content-type", "application/json")], b'{"message": "hi"}')),
    ("Hello", (200, [("content-type", "application/json")], b'"Hello"')),
])
def test_function_responses_become_http_by_lambdas_inference(payload, expected):
    assert to_http(payload) == expected


def test_rate_expressions():
    assert rate_seconds("rate(1 minute)") == 60
    assert rate_seconds("rate(5 minutes)") == 300
    assert rate_seconds("rate(2 hours)") == 7200
    for bad in ("rate(1 minutes)", "rate(2 minute)", "cron(0 * * * ? *)", "rate(0 minutes)"):
        with pytest.raises(ScheduleError):
            rate_seconds(bad)


def test_the_scheduled_event_looks_like_eventbridges():
    rule = RuleConfig("loom-sweeper-schedule", "arn:aws:events:us-east-1:123456789012:rule/loom-sweeper-schedule",
                      "rate(1 minute)", "123456789012", "us-east-1")
    event = scheduled_event(rule, NOW)
    assert {k: v for k, v in event.items() if k != "id"} == {
        "version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "account": "123456789012",
        "time": "2026-03-01T12:00:00Z", "region": "us-east-1", "resources": [rule.arn], "detail": {}}


def test_code_sha256_is_lambdas_base64_digest(tmp_path: Path):
    p = tmp_path / "f.zip"
    p.write_bytes(b"zip bytes")
    assert code_sha256(p) == base64.b64encode(hashlib.sha256(b"zip bytes").digest()).decode()


def _fn(env: dict[str, str]) -> DeployedFunction:
    return DeployedFunction(role="worker", name="loom-worker", arn="arn:aws:lambda:us-east-1:1:function:loom-worker",
                            handler="loom_worker.handler.handler", runtime="python3.11", timeout_s=30, memory_mb=512,
                            environment=env, code_sha256="x")


def test_the_function_environment_is_the_deployed_one_plus_what_lambda_injects(tmp_path: Path):
    env = lambda_environment(_fn({"LOOM_TABLE_NAME": "t", "TZ": "Europe/Paris"}), tmp_path, "us-east-1",
                             "http://127.0.0.1:5555", {"EXTRA": "1"})
    assert env["LOOM_TABLE_NAME"] == "t" and env["EXTRA"] == "1" and env["TZ"] == "Europe/Paris"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5555"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "loom-worker" and env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "512"
    assert env["_HANDLER"] == "loom_worker.handler.handler" and env["LAMBDA_TASK_ROOT"] == str(tmp_path)
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    with pytest.raises(DeploymentError, match="reserved variables AWS_REGION"):
        lambda_environment(_fn({"AWS_REGION": "eu-west-1"}), tmp_path, "us-east-1", "http://127.0.0.1:1")
