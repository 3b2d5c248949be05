"""The local stack's table, kept across ``make down`` / ``make up`` (``make reset`` starts clean).

Each run starts a fresh emulator, so without this every execution would vanish with ``make down``.
The stack that ``make up`` runs saves the Loom table's items (a consistent Scan, every page) to a file
when it stops, and writes them back (BatchWriteItem, 25 at a time, unprocessed items retried) into the
freshly applied table before the functions, the pollers and the schedule start.

The file is DynamoDB's JSON wire format (binary values base64, as ``aws dynamodb scan`` prints them)
with a small header; it is replaced atomically, so a crash while saving leaves the previous save.

SQS messages are not kept: every live execution carries its due-index key (``next_wake_at`` and a
timer, GSI1), so when its lease or timer runs out the sweeper re-drives it with a fresh message.
What is lost is only time (at most a lease, with the local ``lease_s=5`` a few seconds), and the
DLQ's failure notices (the FAILED executions themselves stay in the table).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "loom-local-table/1"
BATCH = 25  # BatchWriteItem's limit


class StateFileError(Exception):
    """The saved file cannot be used; the message says why."""


@dataclass(frozen=True)
class Snapshot:
    table: str
    saved_at: str
    items: list[dict[str, Any]]


# -- DynamoDB wire JSON <-> boto3's low-level values (only binary differs) ----------------------------------
def _encode(value: dict[str, Any]) -> dict[str, Any]:
    (kind, v), = value.items()
    if kind == "B":
        return {"B": base64.b64encode(bytes(v)).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(bytes(b)).decode() for b in v]}
    if kind == "M":
        return {"M": {k: _encode(x) for k, x in v.items()}}
    if kind == "L":
        return {"L": [_encode(x) for x in v]}
    return {kind: v}


def _decode(value: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not a DynamoDB attribute value: {value!r:.80}")
    (kind, v), = value.items()
    if kind == "B":
        return {"B": base64.b64decode(v, validate=True)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b, validate=True) for b in v]}
    if kind == "M":
        return {"M": {k: _decode(x) for k, x in v.items()}}
    if kind == "L":
        return {"L": [_decode(x) for x in v]}
    if kind not in ("S", "N", "SS", "NS", "BOOL", "NULL"):
        raise ValueError(f"unknown DynamoDB attribute type {kind!r}")
    return {kind: v}


def encode_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _encode(v) for k, v in item.items()}


def decode_item(item: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(item, dict) or not item:
        raise ValueError(f"not a DynamoDB item: {item!r:.80}")
    return {k: _decode(v) for k, v in item.items()}


# -- save -----------------------------------------------------------------------------------------------------
def scan(client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of ``table`` (a consistent Scan, all pages), as boto3's low-level client returns them."""
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(page.get("Items", []))
    return items


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # the rename itself survives a crash of the machine too
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def save(client: Any, table: str, path: Path, now: Callable[[], dt.datetime] | None = None) -> Snapshot:
    """Scan ``table`` and replace ``path`` with its items, atomically."""
    items = scan(client, table)
    saved_at = (now or (lambda: dt.datetime.now(dt.timezone.utc)))().isoformat(timespec="seconds")
    body = {"format": FORMAT, "table": table, "saved_at": saved_at, "count": len(items),
            "items": [encode_item(i) for i in items]}
    write_atomically(path, json.dumps(body, separators=(",", ":")) + "\n")
    return Snapshot(table=table, saved_at=saved_at, items=items)


# -- load and restore ---------------------------------------------------------------------------------------------
def load(path: Path) -> Snapshot:
    """Read a saved file; :class:`StateFileError` says why it cannot be used."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise StateFileError(f"it is not readable JSON ({exc})") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else type(body).__name__
        raise StateFileError(f"its format is {found!r}, expected {FORMAT!r}")
    raw = body.get("items")
    if not isinstance(raw, list):
        raise StateFileError("it has no list of items")
    if isinstance(body.get("count"), int) and body["count"] != len(raw):
        raise StateFileError(f"it says {body['count']} items but holds {len(raw)} (truncated?)")
    items = []
    for n, item in enumerate(raw):
        try:
            items.append(decode_item(item))
        except (ValueError, TypeError, AttributeError) as exc:
            raise StateFileError(f"item {n} is malformed ({exc})") from exc
    return Snapshot(table=str(body.get("table") or ""), saved_at=str(body.get("saved_at") or "?"), items=items)


def batch_write(client: Any, table: str, requests: Iterable[dict[str, Any]], *, max_rounds: int = 12,
                sleep: Callable[[float], None] = time.sleep) -> int:
    """BatchWriteItem ``requests`` (PutRequest/DeleteRequest), 25 at a time, retrying UnprocessedItems."""
    requests = list(requests)
    done = 0
    for start in range(0, len(requests), BATCH):
        pending = requests[start:start + BATCH]
        for round_ in range(max_rounds):
            reply = client.batch_write_item(RequestItems={table: pending})
            left = (reply.get("UnprocessedItems") or {}).get(table) or []
            done += len(pending) - len(left)
            if not left:
                break
            pending = left
            sleep(min(2.0, 0.05 * 2 ** round_))
        else:
            raise RuntimeError(f"{len(pending)} item(s) stayed unprocessed after {max_rounds} BatchWriteItem rounds")
    return done


def restore(client: Any, table: str, items: list[dict[str, Any]], **kw: Any) -> int:
    """Put ``items`` into ``table``; returns how many were written."""
    return batch_write(client, table, ({"PutRequest": {"Item": i}} for i in items), **kw)


def clear(client: Any, table: str) -> int:
    """Delete every item (after a restore that failed half-way: start clean rather than half-restored)."""
    keys = [a["AttributeName"] for a in client.describe_table(TableName=table)["Table"]["KeySchema"]]
    return batch_write(client, table, ({"DeleteRequest": {"Key": {k: i[k] for k in keys}}} for i in scan(client, table)))


def set_aside(path: Path) -> Path:
    """Move an unusable file out of the way (never deleted: it may be restorable by hand)."""
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.stem}.unreadable-{stamp}{path.suffix}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.stem}.unreadable-{stamp}-{n}{path.suffix}")
    os.replace(path, target)
    return target
