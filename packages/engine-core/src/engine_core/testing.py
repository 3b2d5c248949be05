"""Run workflows in-process: memory store, manual clock, and a queue that misbehaves on request.

The runner drives the same ``Engine.process`` and ``Sweeper.sweep`` the Lambdas call, so a test of a
workflow here exercises the real transitions. Time only moves when nothing is ready, straight to the
next message or sweeper tick (``run_until_done`` and ``run_until`` skip the ticks that would find nothing),
so a two-hour sleep takes microseconds, and a year's few steps.

Example:
    >>> runner = LocalRunner()
    >>> execution_id = runner.start("order_fulfillment", {"order_id": "o-1"})
    >>> runner.run_until_done(execution_id).status
    <Status.COMPLETED: 'COMPLETED'>
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .adapters.fake_queue import FakeQueue, QueuedMessage
from .adapters.memory import MemoryStore
from .clock import ManualClock
from .engine import Engine, Outcome
from .model import Execution
from .registry import REGISTRY, Registry
from .settings import EngineSettings
from .sweeper import Sweeper


class LocalRunner:
    """Engine + sweeper on a store (the memory store unless one is given), a manual clock and a fake queue,
    all in this process."""

    def __init__(self, registry: Registry = REGISTRY, *, clock: ManualClock | None = None,
                 store: Any = None, queue: FakeQueue | None = None,
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

    def start(self, workflow: str, input: dict[str, Any] | None = None, token: str | None = None,
              version: int | None = None) -> str:
        return self.engine.start(workflow, input or {}, token, version=version).execution.execution_id

    def deploy(self, registry: Registry) -> None:
        """Swap the deployed workflows, as a deploy does while executions are in flight."""
        self.engine.registry = self.engine.life.registry = registry
        self.sweeper.registry = self.sweeper.life.registry = registry

    def step_once(self, skip_idle_ticks: bool = False) -> bool:
        """Deliver one batch of ready messages, or move time to the next event: a message coming visible, or the
        next sweeper tick. False if idle. ``skip_idle_ticks``: with no message on its way, straight to the first
        tick that finds something due (``run_until_done`` and ``run_until`` do: a 90-day sleep is a few steps,
        not 130,000 empty sweeps); without it each call moves one tick at most, for a test that acts between."""
        batch = self.queue.receive()
        if batch:
            for m in batch:
                self.engine.backlog.observe(m.body, m.sent_at)
                try:
                    self.outcomes.append(self.engine.process(m.body))
                except Exception as exc:  # like a failed batch item: not acknowledged, redelivered later
                    self.errors.append(exc)
                    continue
                self.queue.ack(m)
            return True
        visible = self.queue.next_visible_at()
        if visible is None and skip_idle_ticks:  # only the sweeper can move anything: skip the empty ticks
            self.next_sweep_at = self._first_useful_sweep()
        target = self.next_sweep_at if visible is None else min(visible, self.next_sweep_at)
        if target > self.clock.now():
            self.clock.set(target)
        if self.clock.now() >= self.next_sweep_at:
            self.sweeper.sweep()
            self.next_sweep_at = self.clock.now() + self.sweep_interval
        return bool(self.queue.messages) or self._anything_due()

    def _first_useful_sweep(self) -> dt.datetime:
        """The first sweeper tick (on the ``sweep_interval`` grid) that finds something: an execution due, as its
        look-ahead sees it, or housekeeping owed. The ticks before it would find nothing, so a 90-day sleep is
        a few steps, not 130,000 sweeps."""
        far = self.clock.now() + dt.timedelta(days=400)
        firsts = [page.items[0].next_wake_at - dt.timedelta(seconds=self.settings.slack_s)
                  for shard in range(self.settings.shards) for page in (self.store.query_due(shard, far, 1),)
                  if page.items]
        firsts += [page.items[0].next_wake_at for shard in range(self.settings.shards)
                   for page in (self.store.query_unfinalized(shard, far, 1),) if page.items]
        if not firsts or min(firsts) <= self.next_sweep_at:
            return self.next_sweep_at
        ticks = -(-(min(firsts) - self.next_sweep_at) // self.sweep_interval)  # rounded up
        return self.next_sweep_at + ticks * self.sweep_interval

    def _anything_due(self) -> bool:
        """Any live execution in the due index (whenever it is due): the store's own index, so the runner
        works on every store."""
        far = self.clock.now() + dt.timedelta(days=400)
        return any(self.store.query_due(shard, far, 1).items for shard in range(self.settings.shards))

    def run_until_done(self, execution_id: str, max_iterations: int = 100_000) -> Execution:
        for _ in range(max_iterations):
            e = self.engine.get(execution_id)
            if e.status.is_terminal:
                return e
            self.step_once(skip_idle_ticks=True)
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
            self.step_once(skip_idle_ticks=True)
        raise RuntimeError(f"execution {execution_id} did not reach {status} within {max_iterations} iterations")

    def context(self, execution_id: str) -> dict[str, Any]:
        """The accumulated context: the input merged with every completed step's result."""
        return self.engine.context(execution_id)

    def result(self, execution_id: str) -> Any:
        """What a code-first function returned (None until it completed, or when it returned None)."""
        from . import codec
        from .model import StepRecord

        returned = [r for r in self.history(execution_id) if isinstance(r, StepRecord) and r.kind == "return"]
        return codec.decode(returned[-1].result_blob) if returned and returned[-1].result_blob else None


__all__ = ["FakeQueue", "LocalRunner", "QueuedMessage"]
