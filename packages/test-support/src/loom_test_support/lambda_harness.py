"""Drive the Lambda handlers the way AWS does, on moto, from the event files in ``tests/events/``.

Each Lambda package's ``tests/conftest.py`` imports the fixtures (``clock``, ``world``, ``logs``,
``lambdas``) from here; the tests use:

- :func:`aws_world`: moto with the design's table (PK/SK, GSI1 KEYS_ONLY), the step queue and its
  DLQ (redrive after ``MAX_RECEIVES``), and the LOOM_* / POWERTOOLS_* environment a function gets;
- :func:`load_handler`: a fresh import of a handler module, i.e. a cold start, on a manual clock;
- :class:`Pump`: plays the SQS event source mapping (receive, invoke with a real-shaped batch,
  delete what succeeded) and the EventBridge schedule (advance the clock a minute, run the sweeper).

moto's SQS honours DelaySeconds in real time and its event source mapping is not faithful
(aws-pitfalls.md section 3), so time moves on the manual clock and the sweeper re-drives due timers.
"""

from __future__ import annotations

import copy
import datetime as dt
import gc
import hashlib
import importlib
import importlib.util
import io
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# The event files stay in the repository (tests/packaging feeds them to the built zips by path too).
# This package is installed editable into the dev venv only, so they are found from its source.
EVENTS_DIR = Path(__file__).resolve().parents[4] / "tests" / "events"
REGION = "us-east-1"
TABLE = "loom-test"
MAX_RECEIVES = 3
SHARDS = 4
START = dt.datetime(2026, 11, 29, 13, 0, tzinfo=dt.timezone.utc)


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS_DIR / f"{name}.json").read_text())


@dataclass
class FakeContext:
    """The attributes of the Lambda context object that handlers and Powertools read."""

    remaining_ms: int = 600_000
    function_name: str = "loom-test-function"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:loom-test-function"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/loom-test-function"
    log_stream_name: str = "2026/11/29/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class AwsWorld:
    dynamodb: Any
    sqs: Any
    queue_url: str
    dlq_url: str
    env: dict[str, str]

    def items(self) -> list[dict[str, Any]]:
        """Every item in the table, sorted, in DynamoDB's wire format (for before/after comparisons)."""
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=TABLE, ConsistentRead=True)
        items = [item for page in pages for item in page["Items"]]
        return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))

    def meta(self, execution_id: str) -> dict[str, Any]:
        key = {"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": "#META"}}
        return self.dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True).get("Item", {})

    def drain(self, url: str) -> list[dict[str, Any]]:
        """Receive and delete everything visible on a queue; returns the messages."""
        out = []
        while True:
            got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
            messages = got.get("Messages", [])
            if not messages:
                return out
            for m in messages:
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            out.extend(messages)

    def dead_letters(self) -> list[dict[str, Any]]:
        bodies = [m["Body"] for m in self.drain(self.dlq_url)]
        return [json.loads(b) if b.startswith("{") else {"raw": b} for b in bodies]

    def visible_count(self, url: str) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def create_table(client) -> None:
    """The design's single table, as terraform/modules/table declares it."""
    client.create_table(
        TableName=TABLE,
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK")],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{
            "IndexName": "GSI1",
            "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"},
                          {"AttributeName": "GSI1SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }, {
            "IndexName": "GSI2",
            "KeySchema": [{"AttributeName": "GSI2PK", "KeyType": "HASH"}, {"AttributeName": "GSI2SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["workflow", "list_status"]},
        }],
        BillingMode="PAY_PER_REQUEST",
    )


@contextmanager
def aws_world(monkeypatch, **env_overrides: str) -> Iterator[AwsWorld]:
    import boto3

    from .moto_session import fake_credentials, mock_aws

    fake_credentials(monkeypatch)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        dynamodb, sqs = boto3.client("dynamodb", region_name=REGION), boto3.client("sqs", region_name=REGION)
        create_table(dynamodb)
        dlq_url = sqs.create_queue(QueueName="loom-steps-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        # Visibility 0: a record the worker fails is visible again at once, so tests see redelivery
        # without waiting; the receive count still grows and the redrive still happens.
        queue_url = sqs.create_queue(QueueName="loom-steps", Attributes={
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)}),
        })["QueueUrl"]
        env = {
            "LOOM_TABLE_NAME": TABLE, "LOOM_QUEUE_URL": queue_url, "LOOM_DLQ_URL": dlq_url,
            "LOOM_SHARDS": str(SHARDS), "LOOM_LEASE_S": "120",
            # One step per delivery, so a test sees each transition; chaining has tests of its own.
            "LOOM_MAX_CHAIN_STEPS": "1",
            "POWERTOOLS_SERVICE_NAME": "loom-test", "POWERTOOLS_METRICS_NAMESPACE": "LoomTest", "LOG_LEVEL": "INFO",
            **env_overrides,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield AwsWorld(dynamodb, sqs, queue_url, dlq_url, env)


class LogCapture:
    """The JSON lines a handler's Powertools logger (and engine-core, through it) wrote."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines() if line.strip()]


def load_handler(module: str, clock, logs: LogCapture | None = None, *, as_name: str | None = None) -> ModuleType:
    """Import ``module`` afresh (a cold start) and put its runtime on ``clock``.

    ``as_name`` loads a second, independent copy (another Lambda container) under that name.
    """
    try:
        if as_name is None:
            sys.modules.pop(module, None)
            mod = importlib.import_module(module)
        else:
            # Named inside the handler's package, so its relative imports resolve.
            package = module.rpartition(".")[0]
            spec = importlib.util.spec_from_file_location(f"{package}.{as_name}", importlib.util.find_spec(module).origin)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
    finally:
        # A handler's init turns the collector off and freezes what it finds (lambda_runtime.init_done): right
        # for one environment's life, not for a test process that cold-starts handlers hundreds of times.
        gc.unfreeze()
        gc.enable()
    mod.runtime.engine.clock = clock
    mod.runtime.sweeper.clock = clock
    if logs is not None:
        # Powertools binds its handler to sys.stdout once per service name; point it at this test.
        mod.logger.registered_handler.setStream(logs.stream)
    return mod


class SerializedClient:
    """Wraps a boto3 client so calls from many threads reach moto one at a time.

    moto is not atomic under threads (aws-pitfalls.md 0.2); DynamoDB applies each conditional write
    atomically, which is what one-call-at-a-time models. The interleaving between calls stays free.
    """

    def __init__(self, client: Any, lock: threading.Lock):
        self._client, self._lock = client, lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """An SQS event as the event source mapping builds it, from ReceiveMessage results."""
    template = load_event("sqs_step_batch")["Records"][0]
    records = []
    for m in messages:
        record = copy.deepcopy(template)
        attrs = m.get("Attributes", {})
        record.update(messageId=m["MessageId"], receiptHandle=m["ReceiptHandle"], body=m["Body"],
                      md5OfBody=hashlib.md5(m["Body"].encode()).hexdigest(), eventSourceARN=queue_arn)
        record["attributes"].update({k: attrs[k] for k in ("ApproximateReceiveCount", "SentTimestamp",
                                                          "ApproximateFirstReceiveTimestamp") if k in attrs})
        records.append(record)
    return {"Records": records}


def records_event(bodies: list[str], sent_s_ago: float = 0.0) -> dict[str, Any]:
    """An SQS event with the given bodies and fresh message ids (for batches built by hand), sent
    ``sent_s_ago`` seconds ago (``SentTimestamp``: how long the records waited in the queue)."""
    template = load_event("sqs_step_batch")["Records"][0]
    records = []
    sent_ms = str(int((time.time() - sent_s_ago) * 1000))
    for body in bodies:
        record = copy.deepcopy(template)
        record.update(messageId=str(uuid.uuid4()), body=body, md5OfBody=hashlib.md5(body.encode()).hexdigest())
        record["attributes"]["SentTimestamp"] = sent_ms
        records.append(record)
    return {"Records": records}


def function_url_event(method: str, path: str, body: str | bytes | None = None, *, base64: bool = False) -> dict:
    """A Function URL request (payload 2.0, AWS_IAM caller) for ``method path``."""
    import base64 as b64

    event = load_event("function_url_post_execution" if body is not None else "function_url_get_execution")
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["requestId"] = str(uuid.uuid4())
    if body is None:
        event.pop("body", None)
        return event
    raw = body.encode() if isinstance(body, str) else body
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        base64 = True  # Lambda base64-encodes bodies that are not text
    event["headers"]["content-length"] = str(len(raw))
    event["body"] = b64.b64encode(raw).decode() if base64 else raw.decode()
    event["isBase64Encoded"] = base64
    return event


class Pump:
    """Plays SQS -> worker and EventBridge -> sweeper until executions settle."""

    def __init__(self, world: AwsWorld, worker: ModuleType, sweeper: ModuleType, clock):
        self.world, self.worker, self.sweeper, self.clock = world, worker, sweeper, clock
        attrs = world.sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["QueueArn"])
        self.queue_arn = attrs["Attributes"]["QueueArn"]
        self.bodies: list[str] = []
        self.responses: list[dict[str, Any]] = []

    def deliver(self, context: FakeContext | None = None) -> int:
        """One receive + invoke + delete round; returns how many records were delivered."""
        got = self.world.sqs.receive_message(QueueUrl=self.world.queue_url, MaxNumberOfMessages=10,
                                             AttributeNames=["All"])
        messages = got.get("Messages", [])
        if not messages:
            return 0
        self.bodies.extend(m["Body"] for m in messages)
        response = self.worker.handler(sqs_event(messages, self.queue_arn), context or FakeContext())
        self.responses.append(response)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for m in messages:
            if m["MessageId"] not in failed:
                self.world.sqs.delete_message(QueueUrl=self.world.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return len(messages)

    def tick(self) -> dict[str, Any]:
        """A minute passes and the schedule fires the sweeper once."""
        self.clock.advance(60)
        return self.sweeper.handler(load_event("eventbridge_scheduled"), FakeContext())

    def run_until_settled(self, execution_id: str, max_rounds: int = 200) -> str:
        for _ in range(max_rounds):
            status = self.world.meta(execution_id)["status"]["S"]
            if status in ("COMPLETED", "FAILED"):
                return status
            if not self.deliver():
                self.tick()
        raise AssertionError(f"execution {execution_id} did not settle in {max_rounds} rounds")


class Lambdas:
    """The three functions, each cold-started on first use, sharing one moto world and clock."""

    def __init__(self, world: AwsWorld, clock, logs: LogCapture):
        self.world, self.clock, self.logs = world, clock, logs

    @cached_property
    def worker(self) -> ModuleType:
        return load_handler("loom_worker.handler", self.clock, self.logs)

    @cached_property
    def sweeper(self) -> ModuleType:
        return load_handler("loom_sweeper.handler", self.clock, self.logs)

    @cached_property
    def control_plane(self) -> ModuleType:
        return load_handler("loom_control_plane.handler", self.clock, self.logs)

    @cached_property
    def pump(self) -> Pump:
        return Pump(self.world, self.worker, self.sweeper, self.clock)


# -- pytest fixtures (each package's conftest imports these names) --------------------------------
@pytest.fixture
def clock():
    from engine_core import ManualClock

    return ManualClock(START)


@pytest.fixture
def world(monkeypatch) -> Iterator[AwsWorld]:
    with aws_world(monkeypatch) as w:
        yield w


@pytest.fixture
def logs() -> LogCapture:
    return LogCapture()


@pytest.fixture
def lambdas(world, clock, logs) -> Lambdas:
    return Lambdas(world, clock, logs)
