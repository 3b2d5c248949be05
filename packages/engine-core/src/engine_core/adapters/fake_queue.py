"""A fake SQS queue for the StepQueue port: delays, visibility timeout, redrive to a DLQ, injectable faults.

In-process and boto3-free; ``engine_core.testing`` re-exports it (``engine_core.testing.FakeQueue``).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from ..clock import ManualClock
from ..model import StepMessage


@dataclass
class QueuedMessage:
    message_id: int
    body: StepMessage
    visible_at: dt.datetime
    receive_count: int = 0
    sent_at: dt.datetime | None = None
    """When it was sent (SQS's ``SentTimestamp``)."""


@dataclass
class FakeQueue:
    """An SQS stand-in: delays, visibility timeout, redrive to a DLQ, plus injectable faults.

    ``duplicate_rate`` sends a second copy, ``drop_rate`` loses a send, ``max_extra_delay_s`` delays
    delivery by a random amount, and ``reorder`` hands out ready messages in random order.
    """

    clock: ManualClock
    seed: int = 0
    duplicate_rate: float = 0.0
    drop_rate: float = 0.0
    max_extra_delay_s: float = 0.0
    reorder: bool = False
    visibility_timeout_s: float = 360.0
    max_receives: int = 5
    messages: list[QueuedMessage] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    sent: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._next_id = 0

    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        if not 0 <= delay_s <= 900:
            raise ValueError(f"DelaySeconds must be 0-900, got {delay_s}")
        self.sent += 1
        if self.drop_rate and self._rng.random() < self.drop_rate:
            return
        copies = 2 if self.duplicate_rate and self._rng.random() < self.duplicate_rate else 1
        for _ in range(copies):
            extra = self._rng.uniform(0, self.max_extra_delay_s) if self.max_extra_delay_s else 0.0
            self._next_id += 1
            now = self.clock.now()
            self.messages.append(QueuedMessage(self._next_id, message, now + dt.timedelta(seconds=delay_s + extra),
                                               sent_at=now))

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        self.dead_letters.append(body)

    def receive(self, max_messages: int = 10) -> list[QueuedMessage]:
        now = self.clock.now()
        ready = [m for m in self.messages if m.visible_at <= now]
        if self.reorder:
            self._rng.shuffle(ready)
        else:
            ready.sort(key=lambda m: (m.visible_at, m.message_id))
        batch = []
        for m in ready[:max_messages]:
            if m.receive_count >= self.max_receives:
                # SQS moves a message to the DLQ on the receive after maxReceiveCount.
                self.messages.remove(m)
                self.dead_letters.append({"kind": "redrive", "body": m.body.model_dump(exclude_none=True)})
                continue
            m.receive_count += 1
            m.visible_at = now + dt.timedelta(seconds=self.visibility_timeout_s)
            batch.append(m)
        return batch

    def ack(self, message: QueuedMessage) -> None:
        if message in self.messages:
            self.messages.remove(message)

    def release(self, receipt_handle: Any) -> None:
        """Make a received message visible now (SQS ChangeMessageVisibility 0); ``receipt_handle`` is the
        QueuedMessage or its id."""
        wanted = getattr(receipt_handle, "message_id", receipt_handle)
        for m in self.messages:
            if m.message_id == wanted:
                m.visible_at = self.clock.now()

    def purge(self) -> None:
        self.messages.clear()

    def next_visible_at(self) -> dt.datetime | None:
        return min((m.visible_at for m in self.messages), default=None)


__all__ = ["FakeQueue", "QueuedMessage"]
