"""What the store tests do to the SQLite store's file from outside it: read an item as stored, write one as
an earlier engine-core (or a bad disk) left it, and count the statements an operation makes.

The other stores have their own ways (the memory store's dicts, boto3 calls on moto); the shared tests
call these for the SQLite store. Every helper opens its own connection to the file, as another process
would.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from engine_core.adapters.sqlite import SqliteStore


def is_sqlite(store: Any) -> bool:
    return isinstance(store, SqliteStore)


def _connect(store: SqliteStore) -> sqlite3.Connection:
    conn = sqlite3.connect(store.path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def item(store: SqliteStore, pk: str, sk: str) -> dict[str, Any] | None:
    """The item's attributes with its index columns (``gsi1pk``, ``gsi1sk``, ``gsi2sk``), or None."""
    conn = _connect(store)
    try:
        row = conn.execute("SELECT attrs, gsi1pk, gsi1sk, gsi2sk, expires_at FROM items WHERE pk = ? AND sk = ?",
                           (pk, sk)).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    attrs = json.loads(row[0])
    columns = {k: v for k, v in zip(("gsi1pk", "gsi1sk", "gsi2sk"), row[1:4]) if v is not None}
    return {**attrs, **columns, "_ttl_column": row[4]}


def meta(store: SqliteStore, execution_id: str) -> dict[str, Any] | None:
    return item(store, f"EXEC#{execution_id}", "#META")


def set_attr(store: SqliteStore, pk: str, sk: str, attr: str, value: Any) -> None:
    """Change one attribute of a stored item in place (no condition, no index update)."""
    conn = _connect(store)
    try:
        (raw,) = conn.execute("SELECT attrs FROM items WHERE pk = ? AND sk = ?", (pk, sk)).fetchone()
        attrs = json.loads(raw)
        attrs[attr] = value
        conn.execute("UPDATE items SET attrs = ? WHERE pk = ? AND sk = ?", (json.dumps(attrs), pk, sk))
    finally:
        conn.close()


def raw_put(store: SqliteStore, pk: str, sk: str, attrs: dict[str, Any]) -> None:
    """Write an item exactly as given (no validation, no condition)."""
    conn = _connect(store)
    try:
        conn.execute("INSERT OR REPLACE INTO items (pk, sk, attrs, expires_at) VALUES (?, ?, ?, ?)",
                     (pk, sk, json.dumps(attrs), attrs.get("expires_at")))
    finally:
        conn.close()


def items_of(store: SqliteStore, execution_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every item the file holds for the execution, by kind (``#META``, ``#INPUT``, ``STEP``, ``OP``, ``EVT``,
    ``JOIN``, ``BRANCH``), as the other stores' tests group theirs."""
    pk = f"EXEC#{execution_id}"
    conn = _connect(store)
    try:
        rows = conn.execute("SELECT pk, sk, attrs FROM items WHERE pk = ? OR (pk > ? AND pk < ?)",
                            (pk, pk + "#", pk + "$")).fetchall()
    finally:
        conn.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for item_pk, sk, raw in rows:
        suffix = item_pk[len(pk):]
        kind = ({"#E": "EVT", "#O": "OP"}.get(suffix, "BRANCH") if suffix else
                sk if sk in ("#META", "#INPUT") else sk.split("#", 1)[0])
        out.setdefault(kind, []).append(json.loads(raw))
    return out


def calls_during(store: SqliteStore, action: Callable[[], Any]) -> Counter:
    """What ``action`` asked of SQLite, counted from the statements SQLite ran: ``query`` for a read outside
    a write transaction, ``write`` for each write transaction (``BEGIN IMMEDIATE`` .. ``COMMIT``, or one
    INSERT, UPDATE or DELETE on its own, which is its own transaction)."""
    seen: list[str] = []
    store.db.set_trace(seen.append)
    try:
        action()
    finally:
        store.db.set_trace(None)
    counts: Counter = Counter()
    in_write = False
    for statement in (s.strip().upper() for s in seen):
        if statement.startswith("BEGIN IMMEDIATE"):
            in_write = True
            counts["write"] += 1
        elif statement.startswith(("COMMIT", "ROLLBACK")):
            in_write = False
        elif statement.startswith("SELECT") and not in_write:
            counts["query"] += 1
        elif statement.startswith(("INSERT", "UPDATE", "DELETE")) and not in_write:
            counts["write"] += 1
    return counts
