"""The table's two indexes, read (used by ``DynamoStore``, in ``dynamodb.py``; kept apart to keep that module
small): the list index (GSI2, ``EXECS#<shard>`` / ``<created_at>#<id>``: newest first, its shards merged on
read) and the due index (GSI1, ``DUE#<shard>`` or ``FIN#<shard>`` / the time the execution is due).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..clock import format_ts, parse_ts
from ..model import ListEntry
from ..ports import DuePage, DueRef, ListPage
from ._dynamo_wire import GSI_NAME, LIST_INDEX, _from_item, _to_item, _translated
from ._items import LIVE


def query_list(store, limit: int, cursor: Any | None = None, created_after: dt.datetime | None = None,
               created_before: dt.datetime | None = None) -> ListPage:
    """Newest first across every partition of the list index: each is read newest first (``limit`` + 1
    entries at most, strictly below ``cursor``) and the pages are merged."""
    low = "0" if created_after is None else format_ts(created_after)
    high = "9" if created_before is None else format_ts(created_before) + "#~"
    if cursor is not None:
        high = min(high, cursor)  # inclusive: the cursor's own entry is dropped below
    if high < low:  # a cursor from below the window (a token reused with a later created_after): nothing in it,
        return ListPage([], None, 0)  # and DynamoDB refuses a BETWEEN whose bounds run backwards
    found: list[tuple[str, dict[str, Any]]] = []
    more, scanned = False, 0
    for pk in store.list_partitions():
        args: dict[str, Any] = {
            "TableName": store.table, "IndexName": LIST_INDEX, "Limit": limit + 1, "ScanIndexForward": False,
            "KeyConditionExpression": "GSI2PK = :pk AND GSI2SK BETWEEN :low AND :high",
            "ExpressionAttributeValues": _to_item({":pk": pk, ":low": low, ":high": high}), **store._capacity,
        }
        with _translated("Query"):
            resp = store.client.query(**args)
        scanned += int(resp.get("ScannedCount", 0))
        more = more or "LastEvaluatedKey" in resp
        found.extend((item["GSI2SK"], item) for item in map(_from_item, resp.get("Items", []))
                     if item["GSI2SK"] != cursor)
    # An item seen in two partitions (its shard changed between their reads): one entry.
    found = sorted(dict(found).items(), key=lambda pair: pair[0], reverse=True)
    page = found[:limit]
    entries = []
    for key, item in page:
        created, _, eid = key.partition("#")
        entries.append(ListEntry(execution_id=eid, workflow=item.get("workflow", "?"),
                                 status=item.get("list_status", LIVE), created_at=parse_ts(created)))
    more = more or len(found) > limit
    return ListPage(entries, page[-1][0] if more and page else None, scanned)


def query_index(store, prefix: str, shard: int, now: dt.datetime, limit: int, cursor: Any | None) -> DuePage:
    """One page of the due index's partition ``<prefix>#<shard>`` (``DUE``: live executions by when they are due;
    ``FIN``: ended ones by when their housekeeping is), up to ``now``."""
    args: dict[str, Any] = {
        "TableName": store.table,
        "IndexName": GSI_NAME,
        "KeyConditionExpression": "GSI1PK = :shard AND GSI1SK <= :now",
        "ExpressionAttributeValues": _to_item({":shard": f"{prefix}#{shard}", ":now": format_ts(now)}),
        "Limit": limit,
        **store._capacity,
    }
    if cursor is not None:
        args["ExclusiveStartKey"] = cursor
    with _translated("Query"):
        resp = store.client.query(**args)
    items = [
        DueRef(execution_id=item["PK"].removeprefix("EXEC#"), next_wake_at=parse_ts(item["GSI1SK"]))
        for item in map(_from_item, resp.get("Items", []))
    ]
    return DuePage(items=items, cursor=resp.get("LastEvaluatedKey"), read_count=int(resp.get("ScannedCount", 0)))
