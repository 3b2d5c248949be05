"""The SQLite store's indexes (used by ``SqliteStore``, in ``sqlite.py``; kept apart to keep that module small):
the due index and the housekeeping index (``gsi1pk`` ``DUE#<shard>`` / ``FIN#<shard>``, keyed by ``gsi1sk``,
oldest first) and the list index (``gsi2sk`` = ``<created_at>#<id>``, newest first), each a partial index
of the items table: only execution items carry their columns, and only while they belong there."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..clock import format_ts, parse_ts
from ..model import ListEntry
from ..ports import DuePage, DueRef, ListPage
from ._items import LIVE, list_key
from .sqlite_db import Database, exec_pk, readable

_IN_CHUNK = 500
"""Execution ids per ``IN (...)`` of ``load_statuses`` (well under SQLite's limit on bound parameters)."""


def query(db: Database, prefix: str, shard: int, now: dt.datetime, limit: int, cursor: Any | None) -> DuePage:
    """One shard of the due (``DUE``) or housekeeping (``FIN``) index: keys at or before ``now``, oldest first;
    the cursor is the last (key, item) returned when more follow."""
    sql, args = "SELECT gsi1sk, pk FROM items WHERE gsi1pk = ? AND gsi1sk <= ?", [f"{prefix}#{shard}", format_ts(now)]
    if cursor is not None:
        sql += " AND (gsi1sk, pk) > (?, ?)"
        args += [str(cursor[0]), str(cursor[1])]
    with db.read() as conn:
        rows = conn.execute(sql + " ORDER BY gsi1sk, pk LIMIT ?", (*args, limit + 1)).fetchall()
    page = rows[:limit]
    return DuePage(items=[DueRef(execution_id=pk.removeprefix("EXEC#"), next_wake_at=parse_ts(key)) for key, pk in page],
                   cursor=[page[-1][0], page[-1][1]] if len(rows) > limit and page else None, read_count=len(page))


def due_ids(db: Database) -> set[str]:
    with db.read() as conn:
        rows = conn.execute("SELECT pk FROM items WHERE gsi1pk LIKE 'DUE#%'").fetchall()
    return {pk.removeprefix("EXEC#") for (pk,) in rows}


def query_list(db: Database, limit: int, cursor: Any | None, created_after: dt.datetime | None,
               created_before: dt.datetime | None) -> ListPage:
    low = "0" if created_after is None else format_ts(created_after)
    high = "9" if created_before is None else format_ts(created_before) + "#~"
    sql, args = "SELECT gsi2sk, attrs FROM items WHERE gsi2sk >= ? AND gsi2sk <= ?", [low, high]
    if cursor is not None:
        sql += " AND gsi2sk < ?"
        args.append(str(cursor))
    with db.read() as conn:
        rows = conn.execute(sql + " ORDER BY gsi2sk DESC LIMIT ?", (*args, limit + 1)).fetchall()
    entries = []
    for key, raw in rows[:limit]:
        created, _, eid = key.partition("#")
        attrs = readable(raw) or {}
        workflow, status = attrs.get("workflow"), attrs.get("list_status")
        entries.append(ListEntry(execution_id=eid, workflow=workflow if isinstance(workflow, str) else "?",
                                 status=status if isinstance(status, str) else LIVE, created_at=parse_ts(created)))
    more = len(rows) > limit
    return ListPage(entries, list_key(entries[-1].created_at, entries[-1].execution_id) if more and entries else None,
                    len(entries))


def load_statuses(db: Database, execution_ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    with db.read() as conn:
        for start in range(0, len(execution_ids), _IN_CHUNK):
            chunk = [exec_pk(eid) for eid in execution_ids[start:start + _IN_CHUNK]]
            marks = ",".join("?" * len(chunk))
            for pk, raw in conn.execute(f"SELECT pk, attrs FROM items WHERE sk = '#META' AND pk IN ({marks})", chunk):
                status = (readable(raw) or {}).get("status")
                if isinstance(status, str):
                    out[pk.removeprefix("EXEC#")] = status
    return out


def load_versions(db: Database, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    with db.read() as conn:
        for start in range(0, len(execution_ids), _IN_CHUNK):
            chunk = [exec_pk(eid) for eid in execution_ids[start:start + _IN_CHUNK]]
            marks = ",".join("?" * len(chunk))
            for pk, raw in conn.execute(f"SELECT pk, attrs FROM items WHERE sk = '#META' AND pk IN ({marks})", chunk):
                attrs = readable(raw) or {}
                version = attrs.get("wf_version", 1)
                if isinstance(attrs.get("workflow"), str) and isinstance(version, int):
                    out[pk.removeprefix("EXEC#")] = (attrs["workflow"], version)
    return out
