"""DynamoDB capacity units from item sizes, by the rules in the DynamoDB Developer Guide.

moto's ``ConsumedCapacity`` is not faithful (a 3 KB PutItem reports 1.0 WCU, a consistent GetItem
0.5, TransactWriteItems nothing), so the bench computes units itself from the items actually stored
before and after each write. The rules, as documented (checked 2026-11-29):

- Item size = sum over attributes of (UTF-8 bytes of the name) + (size of the value):
  String: UTF-8 bytes; Number: 1 byte per two significant digits + 1; Binary: raw bytes;
  Boolean / Null: 1; List / Map: 3 + sum of (element size + 1); sets: sum of element sizes.
  ("DynamoDB item sizes and formats", developerguide/CapacityUnitCalculations.html)
- Write: 1 WCU per 1 KB, rounded up, of the *larger* of the item before and after the write
  (PutItem, UpdateItem, DeleteItem); a failed conditional write still consumes, sized on the
  existing item, at least 1. ("DynamoDB read and write operations", read-write-operations.html)
- Read: 1 RCU per 4 KB, rounded up, strongly consistent; half for eventually consistent.
  Query sums the sizes of all items it examines, then rounds up to 4 KB.
- Transactions: every item costs two underlying reads or writes (prepare + commit), so 2x.
  (transaction-apis.html, "Capacity management for transactions")
- Global secondary indexes: a write that adds an item to the index costs one index write, one
  that removes it one, and one that changes an index key attribute two (delete + put). With a
  KEYS_ONLY projection nothing else propagates; with INCLUDE, a change to a projected attribute
  (keys unchanged) costs one. Index entries are keys only (< 1 KB), so each
  index write is 1 WCU. (developerguide/GSI.html, "Provisioned throughput considerations for
  global secondary indexes"). The guide says transactions propagate to GSIs after they commit;
  it does not say index writes are doubled, so they are counted once.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
TRANSACTION_FACTOR = 2


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def number_size(text: str) -> int:
    """Bytes a DynamoDB Number takes: one per two significant digits, plus one."""
    digits = str(text).strip().lstrip("+-")
    if "e" in digits.lower():
        digits = format(Decimal(digits), "f")
    digits = digits.replace(".", "")
    significant = digits.strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def _binary_size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(bytes(value))
    return len(base64.b64decode(value))  # the JSON wire form is base64; size counts raw bytes


def value_size(value: Mapping[str, Any]) -> int:
    """Size of one attribute value in DynamoDB JSON (``{"S": "abc"}``), without its name."""
    ((kind, v),) = value.items()
    if kind == "S":
        return _utf8(v)
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return _binary_size(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(x) for x in v)
    if kind == "NS":
        return sum(number_size(x) for x in v)
    if kind == "BS":
        return sum(_binary_size(x) for x in v)
    if kind == "L":
        return 3 + sum(value_size(x) + 1 for x in v)
    if kind == "M":
        return 3 + sum(_utf8(k) + value_size(x) + 1 for k, x in v.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Size of an item in DynamoDB JSON: attribute names plus values. 0 for no item."""
    if not item:
        return 0
    return sum(_utf8(name) + value_size(value) for name, value in item.items())


def write_units(size_before: int, size_after: int, transactional: bool = False) -> int:
    """WCU for one item write: the larger of before/after, per started KB, at least 1."""
    units = max(1, math.ceil(max(size_before, size_after) / WRITE_UNIT_BYTES))
    return units * (TRANSACTION_FACTOR if transactional else 1)


def read_units(size: int, consistent: bool, transactional: bool = False) -> float:
    """RCU for reading ``size`` bytes (one item, or the sum a Query examined), at least one 4 KB block."""
    blocks = max(1, math.ceil(size / READ_UNIT_BYTES))
    if transactional:
        return blocks * 2.0
    return float(blocks) if consistent else blocks / 2


def gsi_writes(keys_before: tuple | None, keys_after: tuple | None) -> int:
    """Index writes a table write causes on a KEYS_ONLY GSI, given the item's index keys before/after.

    ``None`` means the item is not in the (sparse) index.
    """
    if keys_before is None and keys_after is None:
        return 0
    if keys_before is None or keys_after is None:
        return 1
    return 0 if keys_before == keys_after else 2


def index_keys(item: Mapping[str, Any] | None, hash_attr: str, range_attr: str | None) -> tuple | None:
    """The item's GSI key values, or None when it lacks them (not in a sparse index)."""
    if not item or hash_attr not in item or (range_attr is not None and range_attr not in item):
        return None
    return (repr(item[hash_attr]), repr(item[range_attr]) if range_attr else None)


def index_entry(item: Mapping[str, Any] | None, hash_attr: str, range_attr: str | None,
                projected: tuple[str, ...] = ()) -> tuple | None:
    """The item's entry in a GSI: its keys and the values of the projected (INCLUDE) attributes."""
    keys = index_keys(item, hash_attr, range_attr)
    if keys is None:
        return None
    return keys, tuple(repr(item.get(a)) for a in projected)


def index_entry_writes(before: tuple | None, after: tuple | None) -> int:
    """Index writes for a GSI entry (see :func:`index_entry`): keys as in :func:`gsi_writes`; with the
    keys unchanged, a changed projected attribute rewrites the entry once."""
    if before is None or after is None or before[0] != after[0]:
        return gsi_writes(None if before is None else before[0], None if after is None else after[0])
    return 0 if before[1] == after[1] else 1


def sqs_billed_requests(payload_bytes: int) -> int:
    """SQS bills each 64 KB chunk of a request's payload as one request."""
    return max(1, math.ceil(payload_bytes / (64 * 1024)))
