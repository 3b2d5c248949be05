"""A step queue on the SQLite store's file: the ``StepQueue`` port (send with a delay, the dead-letter
notices), plus what a runtime needs of SQS: receive with a visibility timeout, ack, release.

SQS's semantics, on one table:

- ``send(message, delay_s)``: visible ``delay_s`` (0-900) seconds from now. Durable before it returns.
- ``receive(n, visibility_timeout_s)``: up to ``n`` visible messages, oldest first, each hidden for the
  visibility timeout under a fresh receipt and its receive count raised; a message received
  ``max_receives`` times already goes to the dead letters instead (SQS's redrive policy). Two receivers,
  threads or processes, never get one message at once within its visibility timeout.
- ``ack(receipt)`` deletes it, ``release(receipt)`` makes it visible now; a receipt from before the
  message was received again is stale and changes nothing.

Losing a receive's or an ack's write in a power loss only brings a message back, which the engine answers
as a stale copy; they do not wait for the disk. Times are the injected clock's (epoch seconds), so a
manual clock drives the queue in tests.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from ..clock import Clock, SystemClock
from ..model import StepMessage
from .sqlite_db import Database

log = logging.getLogger("engine_core")

MAX_DELAY_S = 900


@dataclass(frozen=True)
class Received:
    """A message handed to one receiver: its body (a step message's JSON, parsed by the worker) and the
    receipt that acknowledges or releases this delivery of it."""

    message_id: int
    body: str
    receipt: str
    receive_count: int
    sent_at: float | None = None
    """When it was sent (epoch seconds, SQS's ``SentTimestamp``)."""


class SqliteQueue:
    """The step queue and the dead-letter notices, in the tables ``queue`` and ``dead_letters`` of ``db``.

    Example:
        >>> queue = SqliteQueue(store.db)
        >>> queue.send(StepMessage(execution_id=eid, step=0, version=1))
        >>> [m] = queue.receive(1, visibility_timeout_s=60)
        >>> queue.ack(m.receipt)
    """

    def __init__(self, db: Database, clock: Clock | None = None, max_receives: int = 10):
        if max_receives < 1:
            raise ValueError(f"max_receives must be at least 1, got {max_receives}")
        self.db, self.clock, self.max_receives = db, clock or SystemClock(), max_receives
        self.sent = threading.Event()
        """Set by every send of this process: a receiver in it waits on this rather than polling."""

    def _now(self) -> float:
        return self.clock.now().timestamp()

    # -- the port ----------------------------------------------------------------------------------------
    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        if not 0 <= delay_s <= MAX_DELAY_S:
            raise ValueError(f"delay_s must be 0-{MAX_DELAY_S} (SQS DelaySeconds), got {delay_s}; longer waits "
                             "belong to the sweeper")
        now = self._now()
        with self.db.write() as conn:
            conn.execute("INSERT INTO queue (body, visible_at, sent_at) VALUES (?, ?, ?)",
                         (message.model_dump_json(exclude_none=True), now + delay_s, now))
        self.sent.set()

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        with self.db.write() as conn:
            conn.execute("INSERT INTO dead_letters (body, at) VALUES (?, ?)",
                         (json.dumps(body, separators=(",", ":")), self._now()))

    # -- what a runtime needs --------------------------------------------------------------------------------
    def receive(self, max_messages: int = 1, visibility_timeout_s: float = 60.0) -> list[Received]:
        now = self._now()
        with self.db.read() as conn:  # nothing visible: no write lock taken (idle receivers poll cheaply)
            if conn.execute("SELECT 1 FROM queue WHERE visible_at <= ? LIMIT 1", (now,)).fetchone() is None:
                return []
        out: list[Received] = []
        given_up: list[tuple[Any, int]] = []
        with self.db.write(durable=False) as conn:
            rows = conn.execute("SELECT id, body, receive_count, sent_at FROM queue WHERE visible_at <= ? ORDER BY visible_at, id "
                                "LIMIT ?", (now, max_messages * 2 + 8)).fetchall()
            for message_id, body, count, sent_at in rows:
                if len(out) == max_messages:
                    break
                if count >= self.max_receives:  # SQS moves it on the receive after maxReceiveCount
                    message = _parsed(body)
                    conn.execute("DELETE FROM queue WHERE id = ?", (message_id,))
                    conn.execute("INSERT INTO dead_letters (body, at) VALUES (?, ?)", (json.dumps(
                        {"kind": "redrive", "receive_count": count, "body": message}, separators=(",", ":")), now))
                    given_up.append((message, count))
                    continue
                receipt = uuid.uuid4().hex
                conn.execute("UPDATE queue SET receive_count = ?, visible_at = ?, receipt = ? WHERE id = ?",
                             (count + 1, now + visibility_timeout_s, receipt, message_id))
                out.append(Received(message_id, body, receipt, count + 1, sent_at))
        for message, count in given_up:  # what an SQS DLQ's depth alarm would say
            log.warning("a step message was received %d times and never acknowledged: moved to the dead letters "
                        "(`loom dlq list` shows it, `loom dlq redrive` returns it to the queue): %s", count,
                        json.dumps(message, separators=(",", ":"))[:300])
        return out

    def ack(self, receipt: str) -> bool:
        """Delete the message this receipt was given for; False when the receipt is stale or unknown."""
        with self.db.write(durable=False) as conn:
            return conn.execute("DELETE FROM queue WHERE receipt = ?", (receipt,)).rowcount == 1

    def release(self, receipt: str) -> bool:
        """Make the message visible again now (SQS ChangeMessageVisibility 0)."""
        with self.db.write(durable=False) as conn:
            changed = conn.execute("UPDATE queue SET visible_at = ? WHERE receipt = ?", (self._now(), receipt)).rowcount
        if changed:
            self.sent.set()
        return changed == 1

    def next_visible_in(self) -> float | None:
        """Seconds until the next message becomes visible (0 if one is), None when the queue is empty."""
        with self.db.read() as conn:
            row = conn.execute("SELECT MIN(visible_at) FROM queue").fetchone()
        return None if row[0] is None else max(0.0, row[0] - self._now())

    def depth(self) -> dict[str, int]:
        """Messages visible now, in flight or delayed, and dead letters (``loom dev``'s status line)."""
        now = self._now()
        with self.db.read() as conn:
            visible, hidden, received = conn.execute(
                "SELECT COALESCE(SUM(visible_at <= ?), 0), COALESCE(SUM(visible_at > ?), 0), "
                "COALESCE(SUM(visible_at > ? AND receipt IS NOT NULL), 0) FROM queue", (now, now, now)).fetchone()
            (dead,) = conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()
        return {"visible": visible, "in_flight": received, "delayed": hidden - received, "dead_letters": dead}

    def dead_letters(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest dead letters: failure notices of FAILED executions, and messages given up on."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT id, body, at FROM dead_letters ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [{"id": i, "at": at, "body": _parsed(body)} for i, body, at in rows]

    def redrive_dead_letters(self, limit: int = 100) -> dict[str, int]:
        """Return up to ``limit`` of the step messages given up on (oldest first) to the step queue, visible now,
        their receive count starting again; failure notices and unreadable rows stay. One transaction: a row is
        either still a dead letter or back on the queue. ``returned``: moved; ``left``: the dead letters now."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        now, returned = self._now(), 0
        with self.db.write() as conn:
            for row_id, body in conn.execute("SELECT id, body FROM dead_letters ORDER BY id").fetchall():
                if returned == limit:
                    break
                letter = _parsed(body)
                try:  # only what the queue itself gave up on, and only a step message: as it was sent
                    message = StepMessage.model_validate(letter["body"]) if letter.get("kind") == "redrive" else None
                except (AttributeError, KeyError, TypeError, ValueError):
                    message = None
                if message is None:
                    continue  # a failure notice, or a row no worker could take: not work to redo
                conn.execute("INSERT INTO queue (body, visible_at, sent_at) VALUES (?, ?, ?)",
                             (message.model_dump_json(exclude_none=True), now, now))
                conn.execute("DELETE FROM dead_letters WHERE id = ?", (row_id,))
                returned += 1
            (left,) = conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()
        if returned:
            self.sent.set()
        return {"returned": returned, "left": left}


def _parsed(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return {"unreadable": str(body)[:2000]}


__all__ = ["MAX_DELAY_S", "Received", "SqliteQueue"]
