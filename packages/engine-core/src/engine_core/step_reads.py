"""What a step kind reads of one delivery (``StepReads``): its step and budget, the clock and the time left,
the history, events and fan-out items, log and metric lines, errors and callback tokens. The read side of
``protocol.StepOps``; ``step_run.StepRun`` adds the moves (claim, settle, advance, retry, fail) and the loop.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from . import callbacks
from ._runner import truncate
from .errors import InsufficientTimeError
from .fanout_items import FanOutItems
from .lifecycle import Lifecycle
from .model import Branch, CorruptRecord, ErrorInfo, Execution
from .outcome import log_fields
from .rebuild import this_run
from .settings import EngineSettings
from .steps import StepDef, WorkflowDef

log = logging.getLogger("engine_core")
EVENT_READ_LIMIT = 1000
"""A wait reads at most this many events of its name (in event id order) per delivery: buffered events
cannot make a delivery's read unbounded."""


class StepReads:
    """The reads of a delivery, over what ``StepRun`` holds (its execution as last read or written, the
    workflow, the lifecycle, the fan-out items, the invocation's time left)."""

    life: Lifecycle
    wf: WorkflowDef
    execution: Execution
    settings: EngineSettings
    items: FanOutItems
    remaining_ms: Callable[[], int] | None
    _whole: list[Any] | None
    _whole_positions: dict[tuple[int, bool], int] | None

    @property
    def step(self) -> StepDef:
        return self.wf.steps[self.execution.current_step]

    @property
    def timeout_s(self) -> float:
        return self.life.timeout_s(self.wf, self.execution.current_step)

    def now(self) -> dt.datetime:
        return self.clock.now()

    def lease_s(self, index: int) -> float:
        return self.life.lease_for(self.wf, index)

    def finalize_grace_s(self) -> float:
        return self.life.finalize_grace_s(self.execution)

    def item_expiry(self, now: dt.datetime) -> dt.datetime:
        return self.life.item_expiry(self.execution, now)

    def stamp_horizon(self, due: dt.datetime) -> dt.datetime:
        return self.life.start_horizon(due)

    def history(self) -> list[Any]:
        """This run's whole history (read once more when the delivery read only the tail after a checkpoint)."""
        if self._whole is None:
            e = self.execution
            self._whole = this_run(e, self.life.store.history(e.execution_id), "finished_at")
            self._whole_positions = None
        return self._whole

    def operations(self) -> list[Any]:
        """This run's operator actions, every page of them (a redrive at a sleep that began asks)."""
        e, found, after = self.execution, [], None
        while True:
            page = self.life.store.operations_page(e.execution_id, 100, after, legacy=e.layout == 1)
            found += page.records
            if page.after is None:
                return this_run(e, found, "at")
            after = page.after

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]:
        return self.items.branches(step_index)

    def metric(self, name: str, unit: str, value: float) -> None:
        self.life.metrics.add_metric(name, unit, value)

    def log(self, text: str, level: int = logging.INFO, **extra: Any) -> None:
        if not log.isEnabledFor(level):  # a step writes two lines: no fields built for a level that is off
            return
        e = self.execution
        step = self.step if e.current_step < len(self.wf.steps) else None
        log.log(level, text, extra={**log_fields(e, step, e.attempt or None), **extra})

    def error(self, code: str, message: str, retryable: bool = False, kind: str | None = None) -> ErrorInfo:
        e = self.execution
        step = self.step if e.current_step < len(self.wf.steps) else None
        return ErrorInfo(code=code, message=truncate(message), type=kind, retryable=retryable,
                         step_index=e.current_step, step_name=None if step is None else step.name)

    def branch_room(self, timeout_s: float) -> ErrorInfo | None:
        return None  # a step list's branch delivery reaches its body a read in: ``check_fits`` held its budget

    def check_time(self, timeout_s: float) -> None:
        if self.remaining_ms is None:
            return
        needed = int(timeout_s * 1000) + self.settings.time_margin_ms
        left = self.remaining_ms()
        if left < needed:
            raise InsufficientTimeError(left, needed)

    def deadline(self) -> dt.datetime | None:
        """When this invocation ends at the latest: Lambda's remaining time is whole milliseconds, cut down,
        so the end is before the next millisecond (a claim held to it never lapses while the invocation
        still runs, even with no margin)."""
        if self.remaining_ms is None:
            return None
        return self.clock.now() + dt.timedelta(milliseconds=self.remaining_ms() + 1)

    def check_size(self, what: str, blob: str) -> None:
        self.life.check_size(what, blob)

    def callback_token(self, event: str) -> str:
        """The token of the first ``wait_for_event(event)`` step from the current one on."""
        e = self.execution
        for s in self.wf.steps[e.current_step:]:
            if s.kind.kind == "event" and s.kind.event == event:
                if not e.callback_secret:
                    raise RuntimeError(f"execution {e.execution_id} started before callback tokens existed")
                return callbacks.issue(e.callback_secret, e.execution_id, s.index)
        raise ValueError(f"workflow {self.wf.name!r} has no wait_for_event({event!r}) step after step "
                         f"{e.current_step} {self.step.name!r}")

    def list_events(self, name: str) -> list[Any]:
        """This run's events of ``name``: one bounded query (a delivery reads at most ``EVENT_READ_LIMIT``)."""
        e = self.execution
        found = self.life.store.list_events(e.execution_id, name, legacy=e.layout == 1, limit=EVENT_READ_LIMIT)
        return this_run(e, found, "sent_at")
