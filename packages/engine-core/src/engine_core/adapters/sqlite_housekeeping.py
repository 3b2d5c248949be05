"""The SQLite store's housekeeping writes (used by ``SqliteStore``, in ``sqlite.py``; kept apart to keep that module
small): ending an execution whose item cannot be read, raising every item's TTL, marking an ending's
housekeeping done, and deleting what the TTL passed (what DynamoDB's TTL does in the background)."""

from __future__ import annotations

import datetime as dt

from ..clock import format_ts
from ..model import ErrorInfo, Status
from ._items import TTL_ATTR, _epoch
from .sqlite_db import Database, dumps, exec_pk, get_raw, readable

META_SK = "#META"
_UNFAILABLE = frozenset(s.value for s in (Status.COMPLETED, Status.FAILED, Status.COMPENSATION_FAILED))
"""The statuses ``fail_unreadable`` leaves alone (the other stores' condition on the same call)."""


def fail_unreadable(db: Database, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
    """FAILED, out of the due and housekeeping indexes, with its TTL; False if already ended or gone."""
    with db.write() as conn:
        raw = get_raw(conn, exec_pk(execution_id), META_SK)
        if raw is None:
            return False
        attrs = readable(raw)
        if attrs is None:  # the bytes themselves are damaged: keep them, shown, beside the ending
            attrs = {"execution_id": execution_id, "damaged": str(raw)}
        if attrs.get("status") in _UNFAILABLE:
            return False
        for gone in ("next_wake_at", "timer", "index_at", "finalize_by"):
            attrs.pop(gone, None)
        attrs.update(status=Status.FAILED.value, list_status=Status.FAILED.value, error=error.model_dump_json(),
                     updated_at=format_ts(now), finalized=True, **{TTL_ATTR: _epoch(expires_at)})
        conn.execute("UPDATE items SET attrs = ?, expires_at = ?, gsi1pk = NULL, gsi1sk = NULL WHERE pk = ? AND sk = ?",
                     (dumps(attrs), attrs[TTL_ATTR], exec_pk(execution_id), META_SK))
    return True


def stamp_items(db: Database, execution_id: str, expires_at: dt.datetime) -> int:
    ttl, pk = _epoch(expires_at), exec_pk(execution_id)
    with db.write() as conn:
        rows = conn.execute(
            "SELECT pk, sk, attrs FROM items WHERE (pk = ? OR (pk > ? AND pk < ?)) AND sk != ? "
            "AND (expires_at IS NULL OR expires_at < ?)", (pk, pk + "#", pk + "$", META_SK, ttl)).fetchall()
        for item_pk, sk, raw in rows:
            attrs = readable(raw)
            if attrs is None:  # damaged: its bytes stay as they are; the TTL column still moves
                conn.execute("UPDATE items SET expires_at = ? WHERE pk = ? AND sk = ?", (ttl, item_pk, sk))
                continue
            attrs[TTL_ATTR] = ttl
            conn.execute("UPDATE items SET attrs = ?, expires_at = ? WHERE pk = ? AND sk = ?",
                         (dumps(attrs), ttl, item_pk, sk))
    return len(rows)


def finalize(db: Database, execution_id: str, version: int) -> None:
    with db.write() as conn:
        attrs = readable(get_raw(conn, exec_pk(execution_id), META_SK))
        if attrs is None or attrs.get("version") != version:
            return  # someone else finalized it, or it moved on
        attrs["finalized"] = True
        attrs.pop("finalize_by", None)  # out of the housekeeping index too
        conn.execute("UPDATE items SET attrs = ?, gsi1pk = NULL, gsi1sk = NULL WHERE pk = ? AND sk = ?",
                     (dumps(attrs), exec_pk(execution_id), META_SK))


def reap_expired(db: Database, now: dt.datetime, limit: int = 1000) -> int:
    with db.write() as conn:
        return conn.execute("DELETE FROM items WHERE (pk, sk) IN (SELECT pk, sk FROM items WHERE expires_at <= ? "
                            "LIMIT ?)", (_epoch(now), limit)).rowcount
