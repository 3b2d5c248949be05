"""An execution's housekeeping on DynamoDB (used by ``DynamoStore``, in ``dynamodb.py``; kept apart to keep that
module small): an unreadable execution failed in place, every item's TTL raised to the execution's, and the
ending's housekeeping marked done. Each is a conditional write that applies only where it still moves the
item forward, so a worker, the sweeper and an operator may race through any of them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..clock import format_ts
from ..model import ErrorInfo, Status
from ._dynamo_wire import (
    EVENTS_PARTITION,
    META_SK,
    OPS_PARTITION,
    _ConditionFailed,
    _from_item,
    _pk,
    _to_item,
    _translated,
)
from ._items import JOIN_PREFIX, TTL_ATTR, _epoch, branch_partition_suffix


def fail_unreadable(store, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
    try:
        with _translated("UpdateItem"):
            store.client.update_item(
                TableName=store.table,
                Key=store._key(execution_id, META_SK),
                UpdateExpression="SET #status = :failed, #error = :error, updated_at = :now, #ttl = :ttl, "
                "finalized = :true REMOVE next_wake_at, #timer, index_at, finalize_by, GSI1PK, GSI1SK",
                ConditionExpression="attribute_exists(PK) AND NOT (#status IN (:completed, :failed, :cfailed))",
                ExpressionAttributeNames={"#status": "status", "#error": "error", "#ttl": TTL_ATTR, "#timer": "timer"},
                ExpressionAttributeValues=_to_item({
                    ":failed": Status.FAILED.value, ":completed": Status.COMPLETED.value,
                    ":cfailed": Status.COMPENSATION_FAILED.value,
                    ":error": error.model_dump_json(), ":now": format_ts(now), ":ttl": _epoch(expires_at),
                    ":true": True,
                }),
                **store._capacity,
            )
        return True
    except _ConditionFailed:
        return False


def stamp_items(store, execution_id: str, expires_at: dt.datetime) -> int:
    """Raise the TTL of every item of the execution but ``#META`` (input, history, operations, events,
    joins, and the branches of each step that fanned out) to ``expires_at``; never lowers one."""
    ttl, stamped = _epoch(expires_at), 0
    keys = [key for pk in (_pk(execution_id), _pk(execution_id) + EVENTS_PARTITION, _pk(execution_id) + OPS_PARTITION)
            for key in item_keys(store, pk, ttl)]
    for pk, sk in list(keys):
        if sk.startswith(JOIN_PREFIX):
            keys.extend(item_keys(store, _pk(execution_id) + branch_partition_suffix(int(sk[len(JOIN_PREFIX):])), ttl))
    for pk, sk in keys:
        if sk == META_SK:
            continue
        try:
            with _translated("UpdateItem"):
                store.client.update_item(
                    TableName=store.table, Key=_to_item({"PK": pk, "SK": sk}),
                    UpdateExpression="SET #ttl = :ttl",
                    ConditionExpression="attribute_exists(PK) AND (attribute_not_exists(#ttl) OR #ttl < :ttl)",
                    ExpressionAttributeNames={"#ttl": TTL_ATTR},
                    ExpressionAttributeValues=_to_item({":ttl": ttl}), **store._capacity,
                )
            stamped += 1
        except _ConditionFailed:
            pass  # deleted, or stamped later meanwhile
    return stamped


def item_keys(store, pk: str, below_ttl: int) -> list[tuple[str, str]]:
    """Keys of the partition's items whose TTL is missing or below ``below_ttl`` (JOIN# items always:
    their step's branch partition is stamped next)."""
    args: dict[str, Any] = {"TableName": store.table, "KeyConditionExpression": "PK = :pk",
                            "ExpressionAttributeValues": _to_item({":pk": pk}), "ConsistentRead": True,
                            "ProjectionExpression": "PK, SK, #ttl", "ExpressionAttributeNames": {"#ttl": TTL_ATTR},
                            **store._capacity}
    out: list[tuple[str, str]] = []
    while True:
        with _translated("Query"):
            resp = store.client.query(**args)
        for item in map(_from_item, resp.get("Items", [])):
            ttl = item.get(TTL_ATTR)
            if ttl is None or int(ttl) < below_ttl or str(item["SK"]).startswith(JOIN_PREFIX):
                out.append((item["PK"], item["SK"]))
        if "LastEvaluatedKey" not in resp:
            return out
        args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def finalize(store, execution_id: str, version: int) -> None:
    try:
        with _translated("UpdateItem"):
            store.client.update_item(
                TableName=store.table, Key=store._key(execution_id, META_SK),
                UpdateExpression="SET finalized = :true REMOVE finalize_by, GSI1PK, GSI1SK",
                ConditionExpression="#version = :version",
                ExpressionAttributeNames={"#version": "version"},
                ExpressionAttributeValues=_to_item({":true": True, ":version": version}),
                **store._capacity,
            )
    except _ConditionFailed:
        pass  # someone else finalized it, or it moved on
