"""The DynamoDB adapter's wire: items in and out through boto3's one serialiser, and the one place a ClientError
becomes an engine error. ``dynamodb.py`` (the store) and its helper modules (``_dynamo_*.py``) use it; the table's fixed keys
and index names are here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from ..errors import StorageError
from ..model import CorruptRecord

WRITE_TOKEN = "write_token"
"""A random value each commit writes on ``#META``: when botocore retries a write that already applied
and the retry fails its condition, the stored token tells "my own write" from someone else's."""
META_SK = "#META"
EVENTS_PARTITION = "#E"
"""``EXEC#<id>#E`` holds the execution's events, ``EXEC#<id>#O`` its operation records (engine-core 0.3 on):
the delivery's one query of ``EXEC#<id>`` never reads them, however many there are."""
OPS_PARTITION = "#O"
INPUT_SK = "#INPUT"
GSI_NAME = "GSI1"
LIST_INDEX = "GSI2"
LIST_PK = "EXECS"
"""The list index (GSI2, projecting workflow and list_status): one partition keyed by creation time.
Its keys and projected attributes change only when an execution starts or ends, never on a step."""
_KEYS = ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK", WRITE_TOKEN)
_ser, _de = TypeSerializer(), TypeDeserializer()


def _pk(execution_id: str) -> str:
    return f"EXEC#{execution_id}"


def _to_item(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in attrs.items()}


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _de.deserialize(v) for k, v in item.items()}


def _attr(item: dict[str, Any], name: str, default: Any = None) -> Any:
    """One attribute of a stored item, decoded (``default`` when absent)."""
    value = item.get(name)
    return default if value is None else _de.deserialize(value)


def _sort_key(item: dict[str, Any]) -> str:
    return _attr(item, "SK", "?")


def _decoded(sk: str, item: dict[str, Any], from_attrs: Callable[[str, dict[str, Any]], Any]) -> Any:
    """A history-like item (step, operation, event, branch) through ``from_attrs``, without its keys. An
    attribute of an unknown type flags that one record as corrupt; the others still read."""
    try:
        attrs = {k: v for k, v in _from_item(item).items() if k not in _KEYS}
    except Exception as exc:
        return CorruptRecord(sort_key=sk, detail=f"{type(exc).__name__}: {exc}")
    return from_attrs(sk, attrs)


class _ConditionFailed(Exception):
    """A conditional write lost; ``item`` is the stored item DynamoDB returned (ALL_OLD), if any."""

    def __init__(self, item: dict[str, Any] | None):
        self.item = item or None


class _TransactionConflict(StorageError):
    """A write refused only because a transaction held its item (a transaction's TransactionConflict, or a
    plain write's TransactionConflictException while an operator's transaction held the execution item):
    nothing was applied, and it is safe to send again as it is. A caller that does not retry sees the
    StorageError it is."""


@contextmanager
def _translated(op: str) -> Iterator[None]:
    """The one place a ClientError becomes an engine error: a lost condition becomes _ConditionFailed
    (with the item), a write that only collided with a transaction _TransactionConflict, anything else
    StorageError naming the operation."""
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "")
        if code == "ConditionalCheckFailedException":
            raise _ConditionFailed(exc.response.get("Item")) from exc
        if code == "TransactionCanceledException":
            reasons = exc.response.get("CancellationReasons") or []
            failed = [r for r in reasons if r.get("Code") == "ConditionalCheckFailed"]
            if failed:
                raise _ConditionFailed(failed[0].get("Item")) from exc
            if any(r.get("Code") == "TransactionConflict" for r in reasons):
                raise _TransactionConflict(f"DynamoDB {op} failed: {code}: {err.get('Message', exc)}") from exc
        if code == "TransactionConflictException":
            raise _TransactionConflict(f"DynamoDB {op} failed: {code}: {err.get('Message', exc)}") from exc
        raise StorageError(f"DynamoDB {op} failed: {code or '?'}: {err.get('Message', exc)}") from exc
