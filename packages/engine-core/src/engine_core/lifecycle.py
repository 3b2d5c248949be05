"""The rules the worker and the sweeper share, written once: leases, budgets, "send with a delay if it
fits, else leave it to the sweeper", re-driving, failing an unreadable item, and terminal housekeeping.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import Any

from . import transitions
from .clock import Clock
from .errors import CorruptStateError, TransitionConflictError, UnknownWorkflowError
from .model import ErrorInfo, Execution, Status, StepMessage, StepRecord
from .clock import format_ts
from .ports import EventPublisher, Metrics, NullEvents, StateStore, StepQueue, Transition
from .registry import Registry, WorkflowDef
from .settings import EngineSettings, lease_seconds

log = logging.getLogger("engine_core")


class UsesLifecycle:
    """``store``, ``queue`` and ``clock`` read through to the lifecycle, so replacing one (a test's
    manual clock, a recording queue) replaces it everywhere."""

    life: Lifecycle

    store = property(lambda self: self.life.store, lambda self, v: setattr(self.life, "store", v))
    queue = property(lambda self: self.life.queue, lambda self, v: setattr(self.life, "queue", v))
    clock = property(lambda self: self.life.clock, lambda self, v: setattr(self.life, "clock", v))


def failure_notice(e: Execution) -> dict[str, Any]:
    error = e.error.model_dump() if e.error else None
    notice = {"kind": "loom.execution_failed", "execution_id": e.execution_id, "workflow": e.workflow,
              "step": e.current_step, "error": error}
    if e.compensated is not None:
        notice.update(status=e.status.value, compensated=e.compensated,
                      compensation_error=None if e.compensation_error is None else e.compensation_error.model_dump())
    return notice


def status_event(e: Execution, step_count: int | None) -> dict[str, Any]:
    """The ``Detail`` of a status-change event (documented in terraform/README.md)."""
    error = None
    if e.error is not None:
        error = {k: getattr(e.error, k) for k in ("code", "message", "step_index", "step_name")}
    return {"execution_id": e.execution_id, "workflow": e.workflow, "status": e.status.value, "error": error,
            "current_step": e.current_step, "step_count": step_count, "started_at": format_ts(e.created_at),
            "ended_at": format_ts(e.updated_at), "by": e.cancelled_by, "compensated": e.compensated}


class Lifecycle:
    """Holds the store, queue, clock and settings the worker and the sweeper share."""

    def __init__(self, store: StateStore, queue: StepQueue, registry: Registry, clock: Clock,
                 settings: EngineSettings, metrics: Metrics, events: EventPublisher | None = None):
        self.store, self.queue, self.registry, self.clock = store, queue, registry, clock
        self.settings, self.metrics = settings, metrics
        self.events = events or NullEvents()
        self.retention = dt.timedelta(days=settings.retention_days)
        self.margin_s = settings.time_margin_ms / 1000

    # -- budgets and leases -----------------------------------------------------------------------
    def timeout_s(self, wf: WorkflowDef, index: int) -> float:
        """A step's budget: its own, the workflow's, or the default derived from the function timeout."""
        return wf.timeout_for(index) or self.settings.default_step_timeout_s

    def _workflow(self, name: str) -> WorkflowDef | None:
        try:
            return self.registry.get(name)
        except UnknownWorkflowError:
            return None  # the worker fails it with workflow_definition_mismatch

    def lease_s(self, workflow: str, index: int) -> float:
        """How long a step message in flight is trusted before the sweeper re-drives it."""
        wf = self._workflow(workflow)
        timeout = self.timeout_s(wf, index) if wf is not None and index < len(wf.steps) else 0.0
        return lease_seconds(self.settings, timeout)

    def finalize_grace_s(self, e: Execution) -> float:
        """How long the worker that ends an execution has for its housekeeping before the sweeper does
        it: the lease of the step it just ran, which outlasts that step's whole budget."""
        wf = self._workflow(e.workflow)
        index = min(e.current_step, len(wf.steps) - 1) if wf is not None else 0
        return self.lease_s(e.workflow, index) if wf is not None else lease_seconds(self.settings, 0.0)

    def history_expiry(self, now: dt.datetime) -> dt.datetime:
        """The TTL a history item is written with (see ``EngineSettings.history_grace_s``)."""
        return now + self.retention + dt.timedelta(seconds=self.settings.history_grace_s)

    # -- messages ---------------------------------------------------------------------------------
    def send_at(self, e: Execution, wake_at: dt.datetime | None = None) -> None:
        """Send the message for the execution's current (step, version), delayed until ``wake_at`` if
        SQS can (up to ``max_queue_delay_s``); a longer wait is the sweeper's, from the due index."""
        delay = 0.0 if wake_at is None else (wake_at - self.clock.now()).total_seconds()
        if delay > self.settings.max_queue_delay_s:
            return
        self.queue.send(StepMessage(execution_id=e.execution_id, step=e.current_step, version=e.version),
                        delay_s=max(0, math.ceil(delay)))

    def redrive(self, e: Execution) -> Execution | None:
        """Hand the current step to a fresh message with a fresh lease (a due timer, a lease that ran
        out, or a worker yielding). None if someone else moved the execution first."""
        new = transitions.redriven(e, self.clock.now(), self.lease_s(e.workflow, e.current_step), self.settings.slack_s)
        try:
            self.store.commit(Transition(e.current_step, e.version, new))
        except TransitionConflictError:
            return None
        return new

    # -- endings ----------------------------------------------------------------------------------
    def fail_unreadable(self, execution_id: str, exc: CorruptStateError) -> bool:
        """End an execution whose item cannot be decoded: FAILED ``corrupt_state``, out of the index,
        one failure notice. Never a restart from step 0, never a crash loop."""
        now = self.clock.now()
        error = ErrorInfo(code="corrupt_state", message=f"the execution item could not be decoded: {exc.detail}")
        if not self.store.fail_unreadable(execution_id, error, now, now + self.retention):
            return False
        self.metrics.add_metric("ExecutionsFailed", "Count", 1)
        log.error("execution failed: unreadable state", extra={
            "execution_id": execution_id, "workflow": None, "step": None, "attempt": None, "error": exc.detail})
        notice = {"kind": "loom.execution_failed", "execution_id": execution_id, "workflow": None, "step": None,
                  "error": error.model_dump()}
        if self.events.enabled:
            self.events.publish({"execution_id": execution_id, "workflow": None, "status": Status.FAILED.value,
                                 "error": {k: notice["error"].get(k) for k in ("code", "message", "step_index",
                                                                               "step_name")},
                                 "current_step": None, "step_count": None, "started_at": None,
                                 "ended_at": format_ts(now), "by": None})
        else:
            self.queue.send_dead_letter(notice)
        return True

    def _step_count(self, e: Execution) -> int | None:
        wf = self._workflow(e.workflow)
        return None if wf is None else len(wf.steps)

    def history_outlives(self, records: list[Any], until: dt.datetime) -> bool:
        """Every history item's TTL is at or after ``until``."""
        return all(r.expires_at is None or r.expires_at >= until for r in records if isinstance(r, StepRecord))

    def finalize(self, e: Execution, records: list[Any] | None = None) -> None:
        """Terminal housekeeping: the status-change event when a bus is configured (else, for a FAILED
        execution, a failure notice on the DLQ, so a failure is never silent), the history's TTL where it
        would expire before the execution (long executions only), then the finalized mark. The worker
        that ends an execution does it at once; the sweeper does it if that worker died first.

        With a bus, the DLQ holds only messages the transport gave up on; business failures are events."""
        if self.events.enabled:
            self.events.publish(status_event(e, self._step_count(e)))
        elif e.status in (Status.FAILED, Status.COMPENSATION_FAILED):
            self.queue.send_dead_letter(failure_notice(e))
        assert e.expires_at is not None
        if records is None:
            records = self.store.history(e.execution_id)
        if not self.history_outlives(records, e.expires_at):
            self.store.stamp_history(e.execution_id, e.expires_at)
        self.store.finalize(e.execution_id, e.version)
