"""DynamoDB items of parallel and map steps (used by ``DynamoStore``, in ``dynamodb.py``; kept apart to keep that
module small).

=========  ========================  ===============  =========================================
item       PK                        SK               attributes
=========  ========================  ===============  =========================================
join       ``EXEC#<id>``             ``JOIN#<nnn>``   total, done, generation, max_concurrency
branch     ``EXEC#<id>#S<nnn>``      ``B#<bbbbb>``    status, version, generation, attempt, ...
=========  ========================  ===============  =========================================

The join sits in the execution's partition (``#INPUT`` < ``#META`` < ``JOIN#`` < ``OP#`` < ``STEP#``), so
the delivery's one Query reads it; the branches have a partition per step, which that Query never
reads: only a branch's own delivery (GetItem), the fan-out's reconcile and its fan-in (one Query each).
"""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import BranchConflictError
from ..model import Branch, CorruptRecord, Join
from ._items import (
    BRANCH_PREFIX,
    RUN_ATTR,
    branch_from_attrs,
    branch_partition_suffix,
    branch_sort_key,
    branch_to_attrs,
    join_from_attrs,
    join_sort_key,
    join_to_attrs,
)
from ._dynamo_records import resend_on_conflict
from ._dynamo_wire import _KEYS, WRITE_TOKEN, _attr, _ConditionFailed, _from_item, _pk, _sort_key, _to_item, _translated


def _branch_key(execution_id: str, step_index: int, branch: int) -> dict[str, Any]:
    return _to_item({"PK": _pk(execution_id) + branch_partition_suffix(step_index), "SK": branch_sort_key(branch)})


def _decode_branch(item: dict[str, Any]) -> Branch | CorruptRecord:
    sk = _sort_key(item)
    try:
        attrs = {k: v for k, v in _from_item(item).items() if k not in _KEYS}
    except Exception as exc:
        return CorruptRecord(sort_key=sk, detail=f"{type(exc).__name__}: {exc}")
    return branch_from_attrs(sk, attrs)


def decode_join(item: dict[str, Any]) -> Join | None:
    """The join in a load_state page; None when unreadable (the fan-out then begins a new generation)."""
    try:
        return join_from_attrs({k: v for k, v in _from_item(item).items() if k not in _KEYS})
    except Exception:
        return None


def _conflict(store: Any, execution_id: str, branch: Branch, expected: int | None, item: dict | None) -> BranchConflictError:
    current = None if not item else _decode_branch(item)
    return BranchConflictError(execution_id, branch.step_index, branch.branch, expected,
                               current if isinstance(current, Branch) else None)


def put_join(store: Any, execution_id: str, join: Join) -> bool:
    # A join of the same generation is never replaced: it may already count completions. Nor is a newer
    # generation's: a delivery that read an older execution version must not turn the fan-out back. An
    # older run's (a token re-used after expiry) is. (memory.MemoryStore.put_join says the same.)
    if join.run is None:
        condition = "attribute_not_exists(PK) OR (attribute_not_exists(#run) AND generation < :generation)"
        values: dict[str, Any] = {":generation": join.generation}
    else:
        condition = ("attribute_not_exists(PK) OR #run < :run OR (attribute_not_exists(#run) AND started_at < :run) OR "
                     "((#run = :run OR attribute_not_exists(#run)) AND generation < :generation)")
        values = {":generation": join.generation, ":run": join.run}
    try:
        with _translated("PutItem"):
            store.client.put_item(TableName=store.table, Item=_to_item(
                {**join_to_attrs(join), "PK": _pk(execution_id), "SK": join_sort_key(join.step_index)}),
                ConditionExpression=condition, ExpressionAttributeNames={"#run": RUN_ATTR},
                ExpressionAttributeValues=_to_item(values), **store._capacity)
    except _ConditionFailed:
        return False
    return True


def get_join(store: Any, execution_id: str, step_index: int) -> Join | None:
    with _translated("GetItem"):
        resp = store.client.get_item(TableName=store.table, ConsistentRead=True, **store._capacity,
                                     Key=_to_item({"PK": _pk(execution_id), "SK": join_sort_key(step_index)}))
    item = resp.get("Item")
    return None if item is None else decode_join(item)


def _put_branch(store: Any, execution_id: str, branch: Branch, condition: str, values: dict[str, Any],
                expected: int | None, names: dict[str, str]) -> None:
    token = uuid.uuid4().hex
    item = {**branch_to_attrs(branch), "PK": _pk(execution_id) + branch_partition_suffix(branch.step_index),
            "SK": branch_sort_key(branch.branch), WRITE_TOKEN: token}
    try:
        with _translated("PutItem"):
            store.client.put_item(TableName=store.table, Item=_to_item(item), ConditionExpression=condition,
                                  ReturnValuesOnConditionCheckFailure="ALL_OLD", **store._capacity,
                                  **({"ExpressionAttributeNames": names} if names else {}),
                                  **({"ExpressionAttributeValues": _to_item(values)} if values else {}))
    except _ConditionFailed as lost:
        if lost.item is not None and _attr(lost.item, WRITE_TOKEN) == token:
            return  # our own write, applied before its response was lost and the call retried
        raise _conflict(store, execution_id, branch, expected, lost.item) from None


def create_branch(store: Any, execution_id: str, branch: Branch) -> None:
    if branch.run is None:
        _put_branch(store, execution_id, branch, "attribute_not_exists(PK)", {}, None, {})
        return
    # An older run's branch (a token re-used after expiry) is replaced; this run's never is.
    _put_branch(store, execution_id, branch,
                "attribute_not_exists(PK) OR #run < :run OR (attribute_not_exists(#run) AND updated_at < :run)",
                {":run": branch.run}, None, {"#run": RUN_ATTR})


def get_branch(store: Any, execution_id: str, step_index: int, branch: int) -> Branch | CorruptRecord | None:
    with _translated("GetItem"):
        resp = store.client.get_item(TableName=store.table, Key=_branch_key(execution_id, step_index, branch),
                                     ConsistentRead=True, **store._capacity)
    item = resp.get("Item")
    return None if item is None else _decode_branch(item)


def update_branch(store: Any, execution_id: str, branch: Branch, expected_version: int) -> None:
    # Every branch transition is valid only from the version its writer read.
    _put_branch(store, execution_id, branch, "#version = :expected", {":expected": expected_version}, expected_version,
                {"#version": "version"})


def complete_branch(store: Any, execution_id: str, branch: Branch, expected_version: int) -> None:
    pk = _pk(execution_id)
    # Recorded once (the branch is still at the version its attempt claimed) and counted once (the
    # same transaction adds it to the join of its own generation; a redrive's new join refuses it).
    branch_put = {"TableName": store.table, "Item": _to_item({
        **branch_to_attrs(branch), "PK": pk + branch_partition_suffix(branch.step_index),
        "SK": branch_sort_key(branch.branch)}),
        "ConditionExpression": "#version = :expected", "ExpressionAttributeNames": {"#version": "version"},
        "ExpressionAttributeValues": _to_item({":expected": expected_version}),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    same_run = "" if branch.run is None else " AND (attribute_not_exists(#run) OR #run = :run)"
    join_count = {"TableName": store.table, "Key": _to_item({"PK": pk, "SK": join_sort_key(branch.step_index)}),
                  "UpdateExpression": "ADD done :one", "ConditionExpression": "generation = :generation" + same_run,
                  "ExpressionAttributeValues": _to_item({":one": 1, ":generation": branch.generation,
                                                         **({} if branch.run is None else {":run": branch.run})}),
                  **({} if branch.run is None else {"ExpressionAttributeNames": {"#run": RUN_ATTR}})}
    # botocore sends the same ClientRequestToken on its own retries, so a transaction whose response
    # was lost is not applied twice (nor reported as a conflict). Another transaction holding the join
    # (two branches completing at once) refuses it, nothing applied: it is sent again.
    try:
        resend_on_conflict(lambda: store.client.transact_write_items(
            TransactItems=[{"Put": branch_put}, {"Update": join_count}], **store._capacity), "TransactWriteItems")
    except _ConditionFailed as lost:
        raise _conflict(store, execution_id, branch, expected_version, lost.item) from None


def branches(store: Any, execution_id: str, step_index: int) -> list[Branch | CorruptRecord]:
    args: dict[str, Any] = {"TableName": store.table, "ConsistentRead": True, "KeyConditionExpression": "PK = :pk",
                            "ExpressionAttributeValues": _to_item({":pk": _pk(execution_id) + branch_partition_suffix(step_index)}),
                            **store._capacity}
    out: list[Branch | CorruptRecord] = []
    while True:
        with _translated("Query"):
            resp = store.client.query(**args)
        out.extend(_decode_branch(item) for item in resp.get("Items", []))
        if "LastEvaluatedKey" not in resp:
            return out
        args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def branches_page(store: Any, execution_id: str, step_index: int, limit: int, after: int | None) -> Any:
    from ._items import branch_sort_key as key_of

    return store._page(_pk(execution_id) + branch_partition_suffix(step_index), BRANCH_PREFIX, limit,
                       None if after is None else key_of(after), lambda sk, item: _decode_branch(item))
