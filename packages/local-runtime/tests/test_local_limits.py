"""AWS's size limits, hit on the local runtime, each answered with AWS's own error code and message.

Lambda's 6 MB (the Function URL and the SQS event source mapping) is the runtime's; PutEvents' 256 KB
is the emulator's wrapper; the DynamoDB item and Query page limits and SQS's message size are moto's,
checked here through the emulator the stack runs.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from loom_local.calls import ACCESS_KEYS, read_calls
from loom_local.esm import MappingConfig, QueuePoller, describe_record, fit_payload
from loom_local.function_url import FunctionUrlServer, UrlConfig
from loom_local.limits import LAMBDA_REQUEST_MAX_BYTES, put_events_entry_bytes
from loom_local.stack import Emulator

MB = 1024 * 1024


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("emulator")
    emu = Emulator(run_dir, run_dir / "moto.log", run_dir / "calls")
    emu.start()
    yield emu
    emu.stop()


def _client(emulator: Emulator, service: str, key: str = "testing"):
    return boto3.client(service, endpoint_url=emulator.endpoint, region_name="us-east-1", aws_access_key_id=key,
                        aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))


@pytest.fixture(scope="module")
def table(emulator):
    db = _client(emulator, "dynamodb")
    db.create_table(TableName="limits", BillingMode="PAY_PER_REQUEST",
                    KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                    AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                          {"AttributeName": "SK", "AttributeType": "S"}])
    return "limits"


def _error(exc: pytest.ExceptionInfo) -> tuple[str, str]:
    err = exc.value.response["Error"]
    return err["Code"], err["Message"]


def test_dynamodb_item_over_400_kb_is_refused_with_awss_validation_exception(emulator, table):
    # given
    db = _client(emulator, "dynamodb")
    big = {"S": "x" * (400 * 1024)}

    # when
    with pytest.raises(ClientError) as put:
        db.put_item(TableName=table, Item={"PK": {"S": "big"}, "SK": {"S": "1"}, "v": big})
    with pytest.raises(ClientError) as update:
        db.update_item(TableName=table, Key={"PK": {"S": "big"}, "SK": {"S": "2"}}, UpdateExpression="SET v = :v",
                       ExpressionAttributeValues={":v": big})

    # then
    assert _error(put) == ("ValidationException", "Item size has exceeded the maximum allowed size")
    assert _error(update) == ("ValidationException", "Item size to update has exceeded the maximum allowed size")
    assert "Item" not in db.get_item(TableName=table, Key={"PK": {"S": "big"}, "SK": {"S": "1"}})


def test_dynamodb_query_over_1_mb_ends_its_page_with_a_last_evaluated_key(emulator, table):
    # given: 3 MB of items under one partition key
    db = _client(emulator, "dynamodb")
    for i in range(30):
        db.put_item(TableName=table, Item={"PK": {"S": "page"}, "SK": {"S": f"{i:03d}"}, "v": {"S": "x" * 100_000}})

    # when
    pages, key = [], None
    while True:
        kwargs = {"ExclusiveStartKey": key} if key else {}
        page = db.query(TableName=table, KeyConditionExpression="PK = :p",
                        ExpressionAttributeValues={":p": {"S": "page"}}, **kwargs)
        pages.append(page["Items"])
        key = page.get("LastEvaluatedKey")
        if not key:
            break

    # then: every page at most 1 MB, all 30 items read once, in order
    assert len(pages) >= 3
    assert all(sum(len(i["v"]["S"]) for i in p) <= MB for p in pages)
    assert [i["SK"]["S"] for p in pages for i in p] == [f"{i:03d}" for i in range(30)]


def test_sqs_message_over_the_queues_maximum_size_is_refused_with_invalid_parameter_value(emulator):
    # given: a queue with SQS's default maximum (1 MiB) and one at 256 KiB
    sqs = _client(emulator, "sqs")
    default = sqs.create_queue(QueueName="limits-default")["QueueUrl"]
    small = sqs.create_queue(QueueName="limits-256k", Attributes={"MaximumMessageSize": str(256 * 1024)})["QueueUrl"]

    # when
    with pytest.raises(ClientError) as over_default:
        sqs.send_message(QueueUrl=default, MessageBody="x" * (MB + 1))
    with pytest.raises(ClientError) as over_small:
        sqs.send_message(QueueUrl=small, MessageBody="x" * (256 * 1024 + 1))

    # then
    assert _error(over_default) == ("InvalidParameterValue", "One or more parameters are invalid. Reason: Message "
                                                             "must be shorter than 1048576 bytes.")
    assert _error(over_small) == ("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must "
                                                           "be shorter than 262144 bytes.")
    sqs.send_message(QueueUrl=small, MessageBody="x" * (256 * 1024 - 1))  # just under: accepted


def test_eventbridge_put_events_over_256_kb_is_refused_with_validation_exception(emulator):
    # given
    events = _client(emulator, "events")
    detail = json.dumps({"pad": "x" * (256 * 1024)})
    entry = {"Source": "loom", "DetailType": "Loom Execution Status Change", "Detail": detail}
    fits = {**entry, "Detail": json.dumps({"pad": "x" * 1000})}

    # when
    with pytest.raises(ClientError) as refused:
        events.put_events(Entries=[entry])
    accepted = events.put_events(Entries=[fits])

    # then
    assert _error(refused) == ("ValidationException", "Total size of the entries in the request is over the limit.")
    assert accepted["FailedEntryCount"] == 0
    assert put_events_entry_bytes({**entry, "Time": 1, "Resources": ["ab"]}) == 14 + len("loom") + len("Loom Execution Status Change") + len(detail) + 2


def test_emulator_records_the_calls_of_loom_principals_only(emulator, table):
    # given
    worker = _client(emulator, "dynamodb", ACCESS_KEYS["worker"])

    # when
    worker.get_item(TableName=table, Key={"PK": {"S": "a"}, "SK": {"S": "b"}})
    worker.get_item(TableName=table, Key={"PK": {"S": "c"}, "SK": {"S": "d"}})
    _client(emulator, "dynamodb").get_item(TableName=table, Key={"PK": {"S": "a"}, "SK": {"S": "b"}})

    # then: one line for the worker's two identical calls, none for the unattributed key
    calls = read_calls(emulator.calls_dir)
    assert calls == [{"principal": "worker", "service": "dynamodb", "operation": "GetItem",
                      "params": {"TableName": table}}]


# -- Lambda's 6 MB ------------------------------------------------------------------------------------
def test_function_url_request_over_6_mb_is_refused_with_413_request_entity_too_large(make_function):
    # given
    server = FunctionUrlServer(UrlConfig("abc", "us-east-1", "123456789012", "AWS_IAM"),
                               make_function("tiny_handlers.control"))
    server.start()
    try:
        # when
        req = urllib.request.Request(f"{server.url}/plain", data=b"x" * (LAMBDA_REQUEST_MAX_BYTES + 1), method="POST",
                                     headers={"content-type": "text/plain"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
    finally:
        server.stop()

    # then
    assert refused.value.code == 413
    assert refused.value.headers["x-amzn-errortype"] == "RequestEntityTooLargeException"
    assert json.loads(refused.value.read()) == {
        "Message": "Request must be smaller than 6291456 bytes for the InvokeFunction operation"}


def test_function_url_response_over_6_mb_is_a_502_response_size_too_large(make_function):
    # given
    fn = make_function("tiny_handlers.control")
    server = FunctionUrlServer(UrlConfig("abc", "us-east-1", "123456789012", "AWS_IAM"), fn)
    server.start()
    try:
        # when
        ok = urllib.request.urlopen(f"{server.url}/bytes/{6 * MB - 1000}", timeout=60)
        with pytest.raises(urllib.error.HTTPError) as too_large:
            urllib.request.urlopen(f"{server.url}/bytes/{6 * MB + 200}", timeout=60)
    finally:
        server.stop()

    # then
    assert ok.status == 200 and len(ok.read()) == 6 * MB - 1000
    assert too_large.value.code == 502
    assert too_large.value.headers["x-amzn-errortype"] == "Function.ResponseSizeTooLarge"


class _FakeSqs:
    """What the poller calls after it received a batch, recorded."""

    def __init__(self):
        self.deleted, self.released = [], []

    def delete_message_batch(self, QueueUrl, Entries):
        self.deleted += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}

    def change_message_visibility_batch(self, QueueUrl, Entries):
        assert all(e["VisibilityTimeout"] == 0 for e in Entries)
        self.released += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def _messages(n: int, body_bytes: int, action: str = "ok", **extra) -> list[dict]:
    return [{"MessageId": f"m{i}", "ReceiptHandle": f"rh{i}", "Attributes": {"ApproximateReceiveCount": "1"},
             "Body": json.dumps({"action": action, "id": f"e{i}", "pad": "x" * body_bytes, **extra})}
            for i in range(n)]


def test_event_source_mapping_batch_over_6_mb_invokes_what_fits_and_releases_the_rest(make_function, read_out):
    # given: ten messages of nearly 1 MiB (SQS's maximum), 10 MB together
    poller = QueuePoller(MappingConfig("u", "q", "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1",
                                       report_batch_item_failures=True),
                         make_function("tiny_handlers.worker", timeout_s=60), lambda: None)
    sqs = _FakeSqs()
    messages = _messages(10, MB - 100)

    # when
    result = poller.poll_once(sqs, messages)

    # then: one invocation under 6 MB with the first five; the other five visible again at once
    assert result.ok, result.describe()
    ran = [r["message_id"] for r in read_out() if r["kind"] == "record"]
    assert ran == [f"m{i}" for i in range(5)]
    assert sqs.deleted == [f"rh{i}" for i in range(5)]
    assert sqs.released == [f"rh{i}" for i in range(5, 10)]
    assert fit_payload([{"body": "x" * (7 * MB)}]) == 1  # a single record always goes (SQS caps it at 1 MiB)


def test_event_source_mapping_worker_response_over_6_mb_fails_the_whole_batch(make_function, tmp_path):
    # given
    fn = make_function("tiny_handlers.worker", timeout_s=60)
    poller = QueuePoller(MappingConfig("u", "q", "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1",
                                       report_batch_item_failures=True), fn, lambda: None)
    sqs = _FakeSqs()

    # when
    result = poller.poll_once(sqs, _messages(2, 10, action="big_response", bytes=6 * MB + 200))

    # then: Lambda's error; nothing deleted, so both messages return after the visibility timeout
    assert (result.status, result.error["errorType"]) == ("function_error", "Function.ResponseSizeTooLarge")
    assert result.error["errorMessage"] == "Response payload size exceeded maximum allowed payload size (6291556 bytes)."
    assert sqs.deleted == []
    log = Path(fn.logs.path(fn.spec.name)).read_text()
    assert ("holds 2 messages: m0 (not a step message, receive count 1); m1 (not a step message, receive count 1)"
            in log)


def test_describe_record_names_the_execution_step_version_branch_and_receive_count_of_a_message():
    # given
    body = {"execution_id": "6f1c2b1e-0000-4000-8000-000000000001", "step": 3, "version": 7, "branch": 12,
            "branch_version": 2}

    # when
    line = describe_record({"messageId": "m-9", "body": json.dumps(body), "attributes": {"ApproximateReceiveCount": "3"}})

    # then
    assert line == "m-9 execution 6f1c2b1e-0000-4000-8000-000000000001 step 3 v7 branch 12, receive count 3"
