"""An execution's operation records and events (used by ``DynamoStore``, in ``dynamodb.py``; kept apart to keep
that module small). Each has its own partition, ``EXEC#<id>#O`` and ``EXEC#<id>#E`` (the execution's own
partition, ``legacy``, for executions started before engine-core 0.3), so the delivery's one query of
``EXEC#<id>`` never reads them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from ..model import CorruptRecord, EventRecord, OperationRecord
from ..ports import HistoryPage
from ._dynamo_wire import (
    EVENTS_PARTITION,
    OPS_PARTITION,
    _ConditionFailed,
    _decoded,
    _pk,
    _sort_key,
    _to_item,
    _TransactionConflict,
    _translated,
)
from ._items import (
    EVENT_PREFIX,
    OP_PREFIX,
    RUN_ATTR,
    event_from_attrs,
    event_sort_key,
    event_to_attrs,
    operation_from_attrs,
    operation_sort_key,
    operation_to_attrs,
)


def ops_pk(execution_id: str, legacy: bool) -> str:
    return _pk(execution_id) + ("" if legacy else OPS_PARTITION)


def events_pk(execution_id: str, legacy: bool) -> str:
    return _pk(execution_id) + ("" if legacy else EVENTS_PARTITION)


CONFLICT_RETRIES = 5
"""A transaction that only collided with another one on the same items (TransactionConflict) is sent again,
after a short random wait, this many times."""


def operation_put(store, execution_id: str, record: OperationRecord, legacy: bool) -> dict[str, Any]:
    """The Put of an operation record (a PutItem's arguments, or a transaction's Put)."""
    return {"TableName": store.table, "Item": _to_item({**operation_to_attrs(record), "PK": ops_pk(execution_id, legacy),
                                                        "SK": operation_sort_key(record)})}


def put_operation(store, execution_id: str, record: OperationRecord, legacy: bool = False) -> None:
    with _translated("PutItem"):
        store.client.put_item(**operation_put(store, execution_id, record, legacy), **store._capacity)


def transact(store, puts: list[dict[str, Any]]) -> None:
    """The Puts in one TransactWriteItems: all applied or none (``_ConditionFailed`` with the item of the Put
    whose condition failed). botocore sends the same ClientRequestToken on its own retries, so a transaction
    whose response was lost is not applied twice, nor reported as a conflict."""
    resend_on_conflict(lambda: store.client.transact_write_items(
        TransactItems=[{"Put": put} for put in puts], **store._capacity), "TransactWriteItems")


def resend_on_conflict(call: Callable[[], Any], op: str) -> None:
    """``call``, sent again after a short random wait when a transaction on its items refused it
    (``_TransactionConflict``: nothing applied), up to ``CONFLICT_RETRIES`` times."""
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            with _translated(op):
                call()
            return
        except _TransactionConflict:
            if attempt == CONFLICT_RETRIES:
                raise
            time.sleep(random.uniform(0, 0.02 * 2 ** attempt))


def operations(store, execution_id: str, legacy: bool = False) -> list[OperationRecord | CorruptRecord]:
    return [decode_operation(_sort_key(item), item)
            for page in store._query_partition(ops_pk(execution_id, legacy), OP_PREFIX) for item in page]


def operations_page(store, execution_id: str, limit: int, after: str | None = None,
                    legacy: bool = False) -> HistoryPage:
    return store._page(ops_pk(execution_id, legacy), OP_PREFIX, limit, after, decode_operation)


def events_page(store, execution_id: str, limit: int, after: str | None = None, legacy: bool = False) -> HistoryPage:
    return store._page(events_pk(execution_id, legacy), EVENT_PREFIX, limit, after, decode_event)


def put_event(store, execution_id: str, record: EventRecord, legacy: bool = False) -> bool:
    """Keep an event until a wait consumes it; False (nothing written) when its id was sent to this run
    before. An event an earlier run under the same id left is replaced."""
    older = "" if record.run is None else " OR #run < :run OR (attribute_not_exists(#run) AND sent_at < :run)"
    extra: dict[str, Any] = {} if record.run is None else {
        "ExpressionAttributeNames": {"#run": RUN_ATTR}, "ExpressionAttributeValues": _to_item({":run": record.run})}
    try:
        with _translated("PutItem"):
            store.client.put_item(TableName=store.table, Item=_to_item({
                **event_to_attrs(record), "PK": events_pk(execution_id, legacy),
                "SK": event_sort_key(record.name, record.event_id)}),
                ConditionExpression="attribute_not_exists(PK)" + older, **extra, **store._capacity)
    except _ConditionFailed:
        return False
    return True


def list_events(store, execution_id: str, name: str | None = None, legacy: bool = False,
                limit: int | None = None) -> list[EventRecord | CorruptRecord]:
    prefix = EVENT_PREFIX if name is None else event_sort_key(name, "")
    out: list[EventRecord | CorruptRecord] = []
    for page in store._query_partition(events_pk(execution_id, legacy), prefix, limit=limit):
        out.extend(decode_event(_sort_key(item), item) for item in page)
        if limit is not None and len(out) >= limit:
            return out[:limit]
    return out


def decode_event(sk: str, item: dict[str, Any]) -> EventRecord | CorruptRecord:
    return _decoded(sk, item, event_from_attrs)


def decode_operation(sk: str, item: dict[str, Any]) -> OperationRecord | CorruptRecord:
    return _decoded(sk, item, operation_from_attrs)
