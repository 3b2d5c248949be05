"""Run workflows in-process: memory store, manual clock, and a queue that misbehaves on request.

The runner drives the same ``Engine.process`` and ``Sweeper.sweep`` the Lambdas call, so a test of a
workflow here exercises the real transitions. Time only moves when nothing is ready, straight to the
next message or sweeper tick, so a two-hour sleep takes microseconds.

Example:
    >>> runner = LocalRunner()
    >>> execution_id = runner.start("order_fulfillment", {"order_id": "o-1"})
    >>> runner.run_until_done(execution_id).status
    <Status.COMPLETED: 'COMPLETED'>
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from .clock import ManualClock
from .engine import Engine, Outcome
from .model import Execution, StepMessage
from .registry import REGISTRY, Registry
from .settings import EngineSettings
from .storage.memory import MemoryStore
from .sweeper import Sweeper


@dataclass
class QueuedMessage:
    message_id: int
    body: StepMessage
    visible_at: dt.datetime
    receive_count: int = 0


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
            visible = self.clock.now() + dt.timedelta(seconds=delay_s + extra)
            self.messages.append(QueuedMessage(self._next_id, message, visible))

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

    def purge(self) -> None:
        self.messages.clear()

    def next_visible_at(self) -> dt.datetime | None:
        return min((m.visible_at for m in self.messages), default=None)


class LocalRunner:
    """Engine + sweeper on a memory store, a manual clock and a fake queue, all in this process."""

    def __init__(self, registry: Registry = REGISTRY, *, clock: ManualClock | None = None,
                 store: MemoryStore | None = None, queue: FakeQueue | None = None,
                 settings: EngineSettings | None = None, sweep_interval_s: float = 60.0):
        if registry is REGISTRY:
            # Like a Lambda at cold start: installed workflow packages (``loom.workflows``) register.
            registry.load_entry_points()
        self.clock = clock or ManualClock()
        self.settings = settings or EngineSettings()
        self.store = store or MemoryStore(shards=self.settings.shards)
        self.queue = queue or FakeQueue(self.clock)
        self.engine = Engine(self.store, self.queue, registry, self.clock, self.settings)
        self.sweeper = Sweeper(self.store, self.queue, self.clock, self.settings, registry)
        self.sweep_interval = dt.timedelta(seconds=sweep_interval_s)
        self.next_sweep_at = self.clock.now() + self.sweep_interval
        self.outcomes: list[Outcome] = []
        self.errors: list[Exception] = []

    def start(self, workflow: str, input: dict[str, Any] | None = None, token: str | None = None) -> str:
        return self.engine.start(workflow, input or {}, token).execution.execution_id

    def step_once(self) -> bool:
        """Deliver one batch of ready messages, or move time to the next event. False if idle."""
        batch = self.queue.receive()
        if batch:
            for m in batch:
                try:
                    self.outcomes.append(self.engine.process(m.body))
                except Exception as exc:  # like a failed batch item: not acknowledged, redelivered later
                    self.errors.append(exc)
                    continue
                self.queue.ack(m)
            return True
        upcoming = [t for t in (self.queue.next_visible_at(), self.next_sweep_at) if t is not None]
        target = min(upcoming)
        if target > self.clock.now():
            self.clock.set(target)
        if self.clock.now() >= self.next_sweep_at:
            self.sweeper.sweep()
            self.next_sweep_at = self.clock.now() + self.sweep_interval
        return bool(self.queue.messages) or bool(self.store.due_ids())

    def run_until_done(self, execution_id: str, max_iterations: int = 100_000) -> Execution:
        for _ in range(max_iterations):
            e = self.engine.get(execution_id)
            if e.status.is_terminal:
                return e
            self.step_once()
        raise RuntimeError(f"execution {execution_id} did not finish within {max_iterations} iterations")

    def history(self, execution_id: str):
        return self.engine.history(execution_id)

    def send_event(self, execution_id: str, name: str, data: dict[str, Any] | None = None,
                   event_id: str | None = None, by: str = "local") -> str:
        """Send an event as ``POST /executions/{id}/events/{name}`` does; returns the outcome
        (``delivered``, ``buffered`` or ``duplicate``)."""
        return self.engine.operator.send_event(execution_id, name, data or {}, by, event_id).outcome

    def run_until(self, execution_id: str, status: str, max_iterations: int = 10_000) -> Execution:
        """Drive the execution until it reaches ``status`` (e.g. ``WAITING``)."""
        for _ in range(max_iterations):
            e = self.engine.get(execution_id)
            if e.status.value == status:
                return e
            if e.status.is_terminal:
                raise RuntimeError(f"execution {execution_id} ended {e.status.value} before reaching {status}")
            self.step_once()
        raise RuntimeError(f"execution {execution_id} did not reach {status} within {max_iterations} iterations")

    def context(self, execution_id: str) -> dict[str, Any]:
        """The accumulated context: the input merged with every completed step's result."""
        return self.engine.context(execution_id)
