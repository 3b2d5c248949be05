"""DynamoDB items that stand alone, one per name (used by ``DynamoStore``, in ``dynamodb.py``; kept apart to keep
that module small).

=============  ===================  ===============  ==================================================
item           PK                   SK               attributes
=============  ===================  ===============  ==================================================
schedule       ``SCHED#<name>``     ``#SCHEDULE``    scheduled_at, revision, outcome, ... (``_schedule_items``)
backlog mark   ``QUEUE#backlog``    ``#MARK``        visible_ms, observed_ms, expires_at (``_backlog_items``)
=============  ===================  ===============  ==================================================

Each is read with one strongly consistent GetItem and written with one conditional PutItem that only moves it
forward, so two writers racing never put an older value back.
"""

from __future__ import annotations

from typing import Any

from ..clock import format_ts
from ._backlog_items import BACKLOG_PK, BACKLOG_SK, mark_from_attrs, mark_to_attrs
from ._dynamo_wire import _KEYS, _ConditionFailed, _from_item, _to_item, _translated
from ._schedule_items import SCHEDULE_PREFIX, SCHEDULE_SK, schedule_from_attrs, schedule_to_attrs


def _get(store, pk: str, sk: str) -> dict[str, Any] | None:
    with _translated("GetItem"):
        resp = store.client.get_item(TableName=store.table, ConsistentRead=True, **store._capacity,
                                     Key=_to_item({"PK": pk, "SK": sk}))
    item = resp.get("Item")
    if item is None:
        return None
    attrs = _from_item(item)
    for key in _KEYS:
        attrs.pop(key, None)
    return attrs


def _put(store, attrs: dict[str, Any], condition: str, values: dict[str, Any]) -> bool:
    try:
        with _translated("PutItem"):
            store.client.put_item(TableName=store.table, Item=_to_item(attrs), ConditionExpression=condition,
                                  ExpressionAttributeValues=_to_item(values), **store._capacity)
    except _ConditionFailed:
        return False
    return True


def get_schedule(store, name: str) -> Any | None:
    attrs = _get(store, SCHEDULE_PREFIX + name, SCHEDULE_SK)
    return None if attrs is None else schedule_from_attrs(attrs)


def put_schedule(store, record: Any) -> bool:
    # The record only moves forward in (scheduled_at, revision) order: a late older firing, or a copy of
    # the same firing that read before another one wrote, loses and writes nothing.
    newer_firing = "scheduled_at < :at"
    same_firing_later_revision = "(scheduled_at = :at AND (attribute_not_exists(revision) OR revision < :rev))"
    return _put(store, {**schedule_to_attrs(record), "PK": SCHEDULE_PREFIX + record.name, "SK": SCHEDULE_SK},
                f"attribute_not_exists(scheduled_at) OR {newer_firing} OR {same_firing_later_revision}",
                {":at": format_ts(record.scheduled_at), ":rev": record.revision})


def get_backlog_mark(store) -> Any | None:
    attrs = _get(store, BACKLOG_PK, BACKLOG_SK)
    return None if attrs is None else mark_from_attrs(attrs)


def put_backlog_mark(store, mark: Any) -> bool:
    attrs = mark_to_attrs(mark)
    return _put(store, {**attrs, "PK": BACKLOG_PK, "SK": BACKLOG_SK},
                "attribute_not_exists(visible_ms) OR visible_ms < :v", {":v": attrs["visible_ms"]})
