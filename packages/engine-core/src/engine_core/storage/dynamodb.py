"""DynamoDB adapter: the design's single table, exactly.

=========  ====================  ===================  ===================================
item       PK                    SK                   GSI1 (sparse)
=========  ====================  ===================  ===================================
execution  ``EXEC#<id>``         ``#META``            ``DUE#<shard>`` / ``<next_wake_at>``
step       ``EXEC#<id>``         ``STEP#<nnn>#<name>``  -
=========  ====================  ===================  ===================================

Only live executions carry GSI1 keys, so the sweeper's query cost follows due work, not table size.
This is the only module that imports boto3; it is not re-exported from ``engine_core``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3  # noqa: F401  (documents the dependency; the client is injected)
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from ..clock import format_ts, parse_ts
from ..errors import (
    ExecutionExistsError,
    ExecutionNotFoundError,
    StepBusyError,
    StepSettledError,
    StorageError,
    TransitionConflictError,
)
from ..model import CorruptRecord, ErrorInfo, Execution, StepRecord
from ..ports import DuePage, DueRef, StepUpdate, Transition
from ..sharding import shard_of
from ._items import TTL_ATTR, _epoch, execution_from_attrs, execution_to_attrs, step_from_attrs, step_sort_key

META_SK = "#META"
GSI_NAME = "GSI1"
_ser, _de = TypeSerializer(), TypeDeserializer()


def _pk(execution_id: str) -> str:
    return f"EXEC#{execution_id}"


def _to_item(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in attrs.items()}


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _de.deserialize(v) for k, v in item.items()}


def _code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def _storage_error(op: str, exc: ClientError) -> StorageError:
    err = exc.response.get("Error", {})
    return StorageError(f"DynamoDB {op} failed: {err.get('Code', '?')}: {err.get('Message', exc)}")


class DynamoStore:
    """State store on one DynamoDB table.

    Example:
        >>> store = DynamoStore(boto3.client("dynamodb"), table="loom-dev", shards=4)
    """

    def __init__(self, client: Any, table: str, shards: int = 1, return_consumed_capacity: bool = False):
        self.client, self.table, self.shards = client, table, shards
        self._capacity = {"ReturnConsumedCapacity": "TOTAL"} if return_consumed_capacity else {}

    # -- item shapes ----------------------------------------------------------------------------
    def _meta_item(self, e: Execution) -> dict[str, Any]:
        attrs = execution_to_attrs(e)
        attrs.update(PK=_pk(e.execution_id), SK=META_SK)
        if e.next_wake_at is not None:
            attrs.update(GSI1PK=f"DUE#{shard_of(e.execution_id, self.shards)}", GSI1SK=format_ts(e.next_wake_at))
        elif e.finalize_by is not None:  # ended, housekeeping owed: the sweeper's second partition
            attrs.update(GSI1PK=f"FIN#{shard_of(e.execution_id, self.shards)}", GSI1SK=format_ts(e.finalize_by))
        return _to_item(attrs)

    def _key(self, execution_id: str, sk: str) -> dict[str, Any]:
        return {"PK": {"S": _pk(execution_id)}, "SK": {"S": sk}}

    def _decode_meta(self, execution_id: str, item: dict[str, Any]) -> Execution:
        attrs = _from_item(item)
        for key in ("PK", "SK", "GSI1PK", "GSI1SK"):
            attrs.pop(key, None)
        return execution_from_attrs(execution_id, attrs)

    # -- executions -----------------------------------------------------------------------------
    def create(self, execution: Execution) -> None:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._meta_item(execution),
                ConditionExpression="attribute_not_exists(PK)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **self._capacity,
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException" and exc.response.get("Item"):
                raise ExecutionExistsError(self._decode_meta(execution.execution_id, exc.response["Item"])) from exc
            raise _storage_error("PutItem", exc) from exc

    def load(self, execution_id: str) -> Execution | None:
        try:
            resp = self.client.get_item(
                TableName=self.table, Key=self._key(execution_id, META_SK), ConsistentRead=True, **self._capacity
            )
        except ClientError as exc:
            raise _storage_error("GetItem", exc) from exc
        item = resp.get("Item")
        return None if item is None else self._decode_meta(execution_id, item)

    def commit(self, transition: Transition) -> None:
        new = transition.new
        # The advance is valid only from the exact (step, version) the caller read: a duplicate,
        # stale or zombie delivery finds a newer version and changes nothing.
        same_step = "current_step = :expected_step"
        same_version = "#version = :expected_version"
        put = {
            "TableName": self.table,
            "Item": self._meta_item(new),
            "ConditionExpression": f"attribute_exists(PK) AND {same_version} AND {same_step}",
            "ExpressionAttributeNames": {"#version": "version"},
            "ExpressionAttributeValues": {
                ":expected_step": {"N": str(transition.expected_step)},
                ":expected_version": {"N": str(transition.expected_version)},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            if transition.step is None:
                self.client.put_item(**put, **self._capacity)
            else:
                self.client.transact_write_items(
                    TransactItems=[{"Put": put}, {"Update": self._settle_step(new.execution_id, transition.step)}],
                    **self._capacity,
                )
        except ClientError as exc:
            old = exc.response.get("Item")
            if _code(exc) == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons") or []
                first = reasons[0] if reasons else {}
                if first.get("Code") != "ConditionalCheckFailed":
                    raise _storage_error("TransactWriteItems", exc) from exc
                old = first.get("Item")
            elif _code(exc) != "ConditionalCheckFailedException":
                raise _storage_error("PutItem", exc) from exc
            if not old:
                raise ExecutionNotFoundError(new.execution_id) from exc
            current = self._decode_meta(new.execution_id, old)
            raise TransitionConflictError(
                new.execution_id, transition.expected_step, transition.expected_version, current
            ) from exc

    def _settle_step(self, execution_id: str, u: StepUpdate) -> dict[str, Any]:
        sets = ["#status = :status", "#name = :name", "step_index = :index", "finished_at = :finished",
                "is_final = :final"]
        removes = []
        values: dict[str, Any] = {
            ":status": {"S": u.status.value}, ":name": {"S": u.name}, ":index": {"N": str(u.step_index)},
            ":finished": {"S": format_ts(u.finished_at)}, ":final": {"BOOL": u.is_final},
        }
        if u.result_blob is not None:
            sets.append("#result = :result")
            values[":result"] = {"S": u.result_blob}
        else:
            removes.append("#result")
        if u.error is not None:
            sets.append("#error = :error")
            values[":error"] = {"S": u.error.model_dump_json()}
        if u.started_at is not None:
            sets += ["started_at = :started", "attempts = if_not_exists(attempts, :zero) + :one"]
            values.update({":started": {"S": format_ts(u.started_at)}, ":zero": {"N": "0"}, ":one": {"N": "1"}})
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "TableName": self.table,
            "Key": self._key(execution_id, step_sort_key(u.step_index, u.name)),
            "UpdateExpression": expression,
            "ExpressionAttributeNames": {"#status": "status", "#name": "name", "#result": "result",
                                         **({"#error": "error"} if u.error is not None else {})},
            "ExpressionAttributeValues": values,
        }

    def record_intent(
        self, execution_id: str, step_index: int, name: str, started_at: dt.datetime, stale_before: dt.datetime
    ) -> StepRecord:
        sk = step_sort_key(step_index, name)
        # An attempt may start only if none settled the step and none is running right now:
        # a retry after a non-final failure, or a takeover of an attempt older than its timeout.
        first_attempt = "attribute_not_exists(PK)"
        retry_allowed = "(#status = :failed AND is_final = :false)"
        stale_running = "(#status = :running AND started_at < :stale_before)"
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=self._key(execution_id, sk),
                UpdateExpression="SET #status = :running, #name = :name, step_index = :index, started_at = :now, "
                "attempts = if_not_exists(attempts, :zero) + :one REMOVE finished_at",
                ConditionExpression=f"{first_attempt} OR {retry_allowed} OR {stale_running}",
                ExpressionAttributeNames={"#status": "status", "#name": "name"},
                ExpressionAttributeValues={
                    ":running": {"S": "RUNNING"}, ":failed": {"S": "FAILED"}, ":false": {"BOOL": False},
                    ":name": {"S": name}, ":index": {"N": str(step_index)}, ":now": {"S": format_ts(started_at)},
                    ":stale_before": {"S": format_ts(stale_before)}, ":zero": {"N": "0"}, ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **self._capacity,
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise _storage_error("UpdateItem", exc) from exc
            old = _from_item(exc.response.get("Item") or {})
            record = step_from_attrs(sk, old)
            record = record if isinstance(record, StepRecord) else None
            if old.get("status") == "RUNNING":
                raise StepBusyError(execution_id, step_index, record) from exc
            raise StepSettledError(execution_id, step_index, record) from exc
        record = step_from_attrs(sk, _from_item(resp["Attributes"]))
        if isinstance(record, CorruptRecord):
            raise StorageError(f"step record {sk} of {execution_id} is unreadable: {record.detail}")
        return record

    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(execution_id, META_SK),
                UpdateExpression="SET #status = :failed, #error = :error, updated_at = :now, #ttl = :ttl "
                "REMOVE next_wake_at, #timer, GSI1PK, GSI1SK",
                ConditionExpression="attribute_exists(PK) AND NOT (#status IN (:completed, :failed))",
                ExpressionAttributeNames={"#status": "status", "#error": "error", "#ttl": TTL_ATTR, "#timer": "timer"},
                ExpressionAttributeValues={
                    ":failed": {"S": "FAILED"}, ":completed": {"S": "COMPLETED"},
                    ":error": {"S": error.model_dump_json()}, ":now": {"S": format_ts(now)},
                    ":ttl": {"N": str(_epoch(expires_at))},
                },
                **self._capacity,
            )
            return True
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise _storage_error("UpdateItem", exc) from exc

    def finalize(self, execution_id: str, version: int, expires_at: dt.datetime) -> None:
        ttl = {":ttl": {"N": str(_epoch(expires_at))}}
        try:
            for sk in self._step_keys(execution_id):
                try:
                    self.client.update_item(
                        TableName=self.table, Key=self._key(execution_id, sk),
                        UpdateExpression="SET #ttl = :ttl", ConditionExpression="attribute_exists(PK)",
                        ExpressionAttributeNames={"#ttl": TTL_ATTR}, ExpressionAttributeValues=ttl, **self._capacity,
                    )
                except ClientError as exc:
                    if _code(exc) != "ConditionalCheckFailedException":
                        raise
            self.client.update_item(
                TableName=self.table, Key=self._key(execution_id, META_SK),
                UpdateExpression="SET finalized = :true REMOVE finalize_by, GSI1PK, GSI1SK",
                ConditionExpression="#version = :version",
                ExpressionAttributeNames={"#version": "version"},
                ExpressionAttributeValues={":true": {"BOOL": True}, ":version": {"N": str(version)}},
                **self._capacity,
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return
            raise _storage_error("UpdateItem", exc) from exc

    def _step_keys(self, execution_id: str) -> list[str]:
        keys: list[str] = []
        for page in self._query_steps(execution_id, projection="SK"):
            keys += [item["SK"]["S"] for item in page]
        return keys

    def _query_steps(self, execution_id: str, projection: str | None = None):
        args: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :step)",
            "ExpressionAttributeValues": {":pk": {"S": _pk(execution_id)}, ":step": {"S": "STEP#"}},
            "ConsistentRead": True,
            **self._capacity,
        }
        if projection:
            args["ProjectionExpression"] = projection
        while True:
            resp = self.client.query(**args)
            yield resp.get("Items", [])
            if "LastEvaluatedKey" not in resp:
                return
            args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # -- reads ----------------------------------------------------------------------------------
    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        return self._query_index("DUE", shard, now, limit, cursor)

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Ended executions whose housekeeping is overdue (GSI1PK = FIN#<shard>)."""
        return self._query_index("FIN", shard, now, limit, cursor)

    def _query_index(self, prefix: str, shard: int, now: dt.datetime, limit: int, cursor: Any | None) -> DuePage:
        args: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": GSI_NAME,
            "KeyConditionExpression": "GSI1PK = :shard AND GSI1SK <= :now",
            "ExpressionAttributeValues": {":shard": {"S": f"{prefix}#{shard}"}, ":now": {"S": format_ts(now)}},
            "Limit": limit,
            **self._capacity,
        }
        if cursor is not None:
            args["ExclusiveStartKey"] = cursor
        try:
            resp = self.client.query(**args)
        except ClientError as exc:
            raise _storage_error("Query", exc) from exc
        items = [
            DueRef(execution_id=item["PK"]["S"].removeprefix("EXEC#"), next_wake_at=parse_ts(item["GSI1SK"]["S"]))
            for item in resp.get("Items", [])
        ]
        return DuePage(items=items, cursor=resp.get("LastEvaluatedKey"), read_count=int(resp.get("ScannedCount", 0)))

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        records: list[StepRecord | CorruptRecord] = []
        try:
            for page in self._query_steps(execution_id):
                for item in page:
                    sk = item.get("SK", {}).get("S", "?")
                    try:
                        attrs = _from_item(item)
                    except Exception as exc:  # an attribute of an unknown type: flag it, keep the rest
                        records.append(CorruptRecord(sort_key=sk, detail=f"{type(exc).__name__}: {exc}"))
                        continue
                    records.append(step_from_attrs(sk, attrs))
        except ClientError as exc:
            raise _storage_error("Query", exc) from exc
        return records
