"""Batched reads of a few attributes of many execution items (``BatchGetItem``, 100 keys a call, keys
DynamoDB leaves unprocessed asked again after a backoff): the list's live statuses and the live executions'
versions."""

from __future__ import annotations

import random
import time
from typing import Any

from ..errors import StorageError
from ._dynamo_wire import _from_item, _translated

META_SK = "#META"
TRIES = 6
BACKOFF_S = 0.05
"""The first wait before unprocessed keys are asked again (then doubled, with jitter: about 1.6 s in all), as
DynamoDB asks: unprocessed keys mean the table was throttled, and asking again at once is throttled again."""


def project(store: Any, execution_ids: list[str], names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``names`` of each execution item found (eventually consistent: a list is), by execution id."""
    aliases = {f"#a{i}": name for i, name in enumerate(names)}
    execution_ids = list(dict.fromkeys(execution_ids))  # DynamoDB refuses a request that names a key twice
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(execution_ids), 100):
        keys = [store._key(eid, META_SK) for eid in execution_ids[start:start + 100]]
        request: dict[str, Any] = {store.table: {"Keys": keys, "ProjectionExpression": ", ".join(["PK", *aliases]),
                                                 "ExpressionAttributeNames": aliases}}
        for attempt in range(TRIES):
            if attempt:
                time.sleep(random.uniform(0.5, 1.0) * BACKOFF_S * 2 ** attempt)
            with _translated("BatchGetItem"):
                resp = store.client.batch_get_item(RequestItems=request, **store._capacity)
            for item in map(_from_item, resp.get("Responses", {}).get(store.table, [])):
                out[item["PK"].removeprefix("EXEC#")] = item
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                break
        else:  # what it could not read would be shown wrong (a list's entry as LIVE): a retryable failure instead
            left = len(request.get(store.table, {}).get("Keys", []))
            raise StorageError(f"DynamoDB BatchGetItem left {left} of {len(keys)} keys unprocessed after {TRIES} tries "
                               "(the table is throttled: raise its read capacity, or retry later)")
    return out


def statuses(store: Any, execution_ids: list[str]) -> dict[str, str]:
    return {eid: item["status"] for eid, item in project(store, execution_ids, ("status",)).items()
            if isinstance(item.get("status"), str)}


def versions(store: Any, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
    return {eid: (item["workflow"], int(item.get("wf_version", 1)))
            for eid, item in project(store, execution_ids, ("workflow", "wf_version")).items()
            if isinstance(item.get("workflow"), str)}
