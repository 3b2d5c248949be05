"""An in-process AWS (moto ``mock_aws``) with Loom's table and queues, instrumented clients, and the
engine wired to them the way ``engine_core.adapters.bootstrap`` wires a Lambda."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .wire import WireRecorder

REGION = "us-east-1"
TABLE = "loom-bench"

_FAKE_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SECURITY_TOKEN": "testing",
             "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}


def create_table(client: Any, name: str = TABLE) -> None:
    """The design's table (DESIGN.md "State"): PK/SK, sparse GSI1 on GSI1PK/GSI1SK, KEYS_ONLY, on-demand."""
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK")],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{
            "IndexName": "GSI1",
            "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"}, {"AttributeName": "GSI1SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }, {
            "IndexName": "GSI2",
            "KeySchema": [{"AttributeName": "GSI2PK", "KeyType": "HASH"}, {"AttributeName": "GSI2SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["workflow", "list_status"]},
        }],
    )


@dataclass
class World:
    recorder: WireRecorder
    dynamodb: Any
    dynamodb_side: Any
    dynamodb_seed: Any
    sqs: Any
    queue_url: str
    dlq_url: str


@contextmanager
def aws_world(table: str = TABLE) -> Iterator[World]:
    """moto in-process: the table, the step queue and its DLQ; clients instrumented by a fresh recorder."""
    for key, value in _FAKE_ENV.items():
        os.environ[key] = value
    os.environ.pop("AWS_ENDPOINT_URL", None)
    import boto3
    import moto
    from botocore.config import Config

    with moto.mock_aws():
        recorder = WireRecorder()
        side = boto3.client("dynamodb", region_name=REGION)
        create_table(side, table)
        sqs_setup = boto3.client("sqs", region_name=REGION)
        dlq_url = sqs_setup.create_queue(QueueName="loom-bench-dlq")["QueueUrl"]
        dlq_arn = sqs_setup.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queue_url = sqs_setup.create_queue(QueueName="loom-bench-steps", Attributes={
            "VisibilityTimeout": "360",
            "RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"5"}}',
        })["QueueUrl"]
        dynamodb = recorder.attach(boto3.client("dynamodb", region_name=REGION), side_client=side)
        sqs = recorder.attach(boto3.client("sqs", region_name=REGION))
        # Seeding skips client-side parameter validation: it is a third of the cost of a bulk load on moto.
        seed = boto3.client("dynamodb", region_name=REGION, config=Config(parameter_validation=False))
        yield World(recorder, dynamodb, side, seed, sqs, queue_url, dlq_url)


@contextmanager
def quick_moto_sort() -> Iterator[None]:
    """Make moto's table-wide sort cheap, without changing its order.

    moto 5.2.1 answers every Query, GSI ones included, by sorting *all* the table's items with
    ``DynamoType`` comparisons (each re-derives a Python value): about 7 s per Query at 10,000 items
    on this machine, where DynamoDB reads one index partition. This sorts by the same values,
    derived once per item (identical order; what a Query returns, and its ScannedCount, are
    unchanged). Only the sweeper bench uses it, and only around its own calls.
    """
    from moto.dynamodb.models.table import Table

    original = Table.all_items

    def all_items(self):  # mirrors moto.dynamodb.models.table.Table.all_items
        items = []
        for hash_set in self.items.values():
            if self.range_key_attr:
                items.extend(hash_set.values())
            else:
                items.append(hash_set)
        return sorted(items, key=lambda x: (x.hash_key.cast_value, x.range_key.cast_value)
                      if x.range_key else x.hash_key.cast_value)

    Table.all_items = all_items
    try:
        yield
    finally:
        Table.all_items = original
