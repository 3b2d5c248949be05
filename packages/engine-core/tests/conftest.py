"""Shared fixtures for engine-core tests: a fresh registry per test and both store adapters."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest

from engine_core import ManualClock, Registry
from engine_core.adapters import STORE_ENV, STORES, build_store
from engine_core.settings import EngineSettings

UTC = dt.timezone.utc
TABLE = "loom-test"
ADAPTER_TESTS = str(Path(__file__).resolve().parent / "adapter")
if ADAPTER_TESTS not in sys.path:  # sqlite_probes: what the store tests do to the SQLite file from outside
    sys.path.insert(0, ADAPTER_TESTS)


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))


def create_table(client, name: str = TABLE) -> None:
    """The design's table, as terraform/modules/table creates it."""
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK")],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{
            "IndexName": "GSI1",
            "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"}, {"AttributeName": "GSI1SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
            "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        }, {
            "IndexName": "GSI2",
            "KeySchema": [{"AttributeName": "GSI2PK", "KeyType": "HASH"}, {"AttributeName": "GSI2SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["workflow", "list_status"]},
            "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        }],
        ProvisionedThroughput={"ReadCapacityUnits": 20, "WriteCapacityUnits": 20},
    )


@pytest.fixture
def dynamo_client():
    from loom_test_support.moto_session import mock_aws

    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(var, value)
    import boto3

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client)
        yield client


@pytest.fixture(params=sorted(STORES))
def store(request):
    """Every store ``LOOM_STORE`` can name, built the way the Lambda bootstrap builds it: a new adapter
    in ``engine_core.adapters.STORES`` runs the whole contract suite."""
    if request.param == "dynamodb":
        request.getfixturevalue("dynamo_client")  # moto, with the table
    env = {STORE_ENV: request.param, "LOOM_TABLE_NAME": TABLE}
    if request.param == "sqlite":  # a fresh file per test, synchronous=FULL as deployed
        env["LOOM_SQLITE_PATH"] = str(request.getfixturevalue("tmp_path") / "loom.db")
    store = build_store(env, EngineSettings(shards=4))
    yield store
    if request.param == "sqlite":
        store.close()


@pytest.fixture
def dynamo_client_factory(request):
    def make():
        from engine_core.adapters.dynamodb import DynamoStore

        client = request.getfixturevalue("dynamo_client")
        return DynamoStore(client, TABLE, shards=4)

    return make
