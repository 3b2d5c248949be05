"""``loom dlq list`` and ``loom dlq redrive`` against a ``loom dev`` file. Its dead letters are rows of the file's
``dead_letters`` table: failure notices of FAILED executions, and step messages the queue gave up on (received
``max_receives`` times, as SQS's redrive policy moves them to a DLQ). loom-cli finds these two functions under
the ``loom.dlq`` entry point group (it does not import this package), and shows what ``rows`` returns as it
shows an SQS dead-letter queue's messages.

Unlike an SQS queue, the table is read without receiving anything: listing changes nothing, and the runtime
serving the file may keep running (SQLite's locking keeps the two apart; the runtime takes returned messages
at its next poll).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine_core.adapters.sqlite_db import Database
from engine_core.adapters.sqlite_queue import SqliteQueue
from engine_core.settings import ConfigurationError


def _queue(db: str) -> tuple[Database, SqliteQueue]:
    if not Path(db).is_file():
        raise ConfigurationError(f"the `loom dev` file {db} does not exist (moved or deleted?); start `loom dev` on it "
                                 "again, or pass --env-dir terraform/envs/<env> for a deployed stack's DLQ")
    database = Database(db)
    return database, SqliteQueue(database)


def rows(db: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` dead letters of ``db``, oldest first, each as SQS hands out a message (``MessageId``,
    ``Body``: a step message itself, not the row that wraps it; ``Attributes.SentTimestamp``: when it became a
    dead letter)."""
    database, queue = _queue(db)
    try:
        letters = sorted(queue.dead_letters(limit=limit), key=lambda d: d["id"])
    finally:
        database.close()
    out = []
    for d in letters:
        body = d["body"]
        if isinstance(body, dict) and body.get("kind") == "redrive":
            body = body.get("body")
        out.append({"MessageId": str(d["id"]), "Body": json.dumps(body, separators=(",", ":")),
                    "Attributes": {"SentTimestamp": str(int(d["at"] * 1000))}})
    return out


def redrive(db: str, limit: int) -> dict[str, int]:
    """Return up to ``limit`` step messages of ``db``'s dead letters to its step queue (oldest first); the notices
    stay. ``returned`` and ``left`` as ``loom dlq redrive`` reports them."""
    database, queue = _queue(db)
    try:
        return queue.redrive_dead_letters(limit=limit)
    finally:
        database.close()
