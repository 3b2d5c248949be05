"""The rules the worker and the sweeper share, written once: leases, budgets, "send with a delay if it
fits, else leave it to the sweeper", re-driving, failing an unreadable item, and terminal housekeeping.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable
from typing import Any

from . import transitions
from .clock import Clock, format_ts
from .errors import CorruptStateError, ResultTooLargeError, TransitionConflictError, UnknownWorkflowError
from .ledger import Meter
from .model import ErrorInfo, Execution, OperationRecord, Status, StepMessage, Timer
from .ports import EventPublisher, Metrics, NullEvents, StateStore, StepQueue, Transition
from .registry import Registry
from .settings import EngineSettings, lease_seconds
from .steps import StepDef, WorkflowDef

RESTAMP_MARGIN_S = 3600.0
"""Items are re-stamped when a timer would end within this much (plus a lease and the index slack) of
their earliest TTL: room for a late sweep, and for a writer that read the execution just before a
re-stamp and wrote an item with the earlier TTL."""

log = logging.getLogger("engine_core")


class UsesLifecycle:
    """``store``, ``queue`` and ``clock`` read through to the lifecycle, so replacing one (a test's
    manual clock, a recording queue) replaces it everywhere."""

    life: Lifecycle

    store = property(lambda self: self.life.store, lambda self, v: setattr(self.life, "store", v))
    queue = property(lambda self: self.life.queue, lambda self, v: setattr(self.life, "queue", v))
    clock = property(lambda self: self.life.clock, lambda self, v: setattr(self.life, "clock", v))


def message_checkpoint(e: Execution) -> int | None:
    """Where a delivery of ``e`` may start reading its history: its checkpoint, unless it compensates
    (each compensation reads the result of the step it undoes, wherever that lies)."""
    return None if e.compensating else e.checkpoint


def failure_notice(e: Execution) -> dict[str, Any]:
    error = e.error.model_dump() if e.error else None
    notice = {"kind": "loom.execution_failed", "execution_id": e.execution_id, "workflow": e.workflow,
              "step": e.current_step, "error": error}
    if e.compensated is not None:
        notice.update(status=e.status.value, compensated=e.compensated,
                      compensation_error=None if e.compensation_error is None else e.compensation_error.model_dump())
    if e.compensating_for is not None:  # its undo stopped: a redrive goes on undoing, for this failure
        notice["compensating_for"] = e.compensating_for.model_dump()
    return notice


def status_event(e: Execution, step_count: int | None) -> dict[str, Any]:
    """The ``Detail`` of a status-change event (documented in terraform/README.md)."""
    def brief(error: ErrorInfo | None) -> dict[str, Any] | None:
        return None if error is None else {k: getattr(error, k) for k in ("code", "message", "step_index", "step_name")}

    detail = {"execution_id": e.execution_id, "workflow": e.workflow, "status": e.status.value, "error": brief(e.error),
              "current_step": e.current_step, "step_count": step_count, "started_at": format_ts(e.created_at),
              "ended_at": format_ts(e.updated_at), "by": e.cancelled_by, "compensated": e.compensated}
    if e.compensating_for is not None:
        detail["compensating_for"] = brief(e.compensating_for)
    return detail


class Lifecycle:
    """Holds the store, queue, clock and settings the worker and the sweeper share."""

    def __init__(self, store: StateStore, queue: StepQueue, registry: Registry, clock: Clock,
                 settings: EngineSettings, metrics: Metrics, events: EventPublisher | None = None):
        self.store, self.queue, self.registry, self.clock = store, queue, registry, clock
        self.settings, self.metrics = settings, metrics
        self.events = events or NullEvents()
        self.retention = dt.timedelta(days=settings.retention_days)
        self.margin_s = settings.time_margin_ms / 1000
        self.grace = dt.timedelta(seconds=settings.history_grace_s)
        self.restamp_slack = dt.timedelta(seconds=settings.lease_s + settings.slack_s + RESTAMP_MARGIN_S)
        self.meter = Meter(enabled=settings.ledger)
        meters = getattr(store, "ledger_meters", None)  # a store that reports its requests (ledger.py)
        if meters is not None and settings.ledger:
            reports = getattr(store, "ledger_reports", ())
            self.meter.reports_requests, self.meter.reports_units = "requests" in reports, "units" in reports
            meters.append(self.meter)

    # -- budgets and leases -----------------------------------------------------------------------
    def timeout_s(self, wf: WorkflowDef, index: int) -> float:
        """A step's budget: its own, the workflow's, or the default derived from the function timeout."""
        return self.budget(wf, wf.steps[index])

    def budget(self, wf: WorkflowDef, d: StepDef) -> float:
        """``timeout_s`` of the step ``d`` of ``wf`` (a code-first position is not found by its index)."""
        return d.timeout_s or wf.step_timeout_s or self.settings.default_step_timeout_s

    def _workflow(self, name: str, version: int | None = None) -> WorkflowDef | None:
        try:
            return self.registry.get(name, version)
        except UnknownWorkflowError:
            return None  # the worker fails it (workflow_version_missing, workflow_definition_mismatch)

    def lease_s(self, workflow: str, index: int, version: int | None = None) -> float:
        """How long a step message in flight is trusted before the sweeper re-drives it (``version``: the
        one the execution is pinned to; None, the newest)."""
        return self.lease_for(self._workflow(workflow, version), index)

    def lease_for(self, wf: WorkflowDef | None, index: int) -> float:
        """``lease_s`` for the definition ``wf`` (None: not deployed here)."""
        timeout = self.timeout_s(wf, index) if wf is not None and index < len(wf.steps) else 0.0
        return lease_seconds(self.settings, timeout)

    def finalize_grace_s(self, e: Execution) -> float:
        """How long the worker that ends an execution has for its housekeeping before the sweeper does
        it: the lease of the step it just ran, which outlasts that step's whole budget."""
        wf = self._workflow(e.workflow, e.workflow_version)
        if wf is None or not wf.steps:  # not deployed here, or code-first (no step list)
            return lease_seconds(self.settings, 0.0 if wf is None else wf.step_timeout_s or 0.0)
        return self.lease_for(wf, min(e.current_step, len(wf.steps) - 1))

    def item_expiry(self, e: Execution, now: dt.datetime) -> dt.datetime:
        """The TTL an item of ``e`` written now carries: retention plus ``history_grace_s`` from now, and
        never before the execution's ``stamped_until`` (so that stays the earliest TTL of its items)."""
        expiry = now + self.retention + self.grace
        return expiry if e.stamped_until is None else max(expiry, e.stamped_until)

    def check_size(self, what: str, blob: str) -> None:
        size = len(blob.encode("utf-8"))
        if size > self.settings.item_budget_bytes:
            raise ResultTooLargeError(what, size, self.settings.item_budget_bytes)

    def start_horizon(self, first_due: dt.datetime) -> dt.datetime:
        """What a new execution's items are stamped with: past its first lease, by the same rule a commit
        re-stamps by, so a first delivery that dies leaves nothing to expire before the sweeper's re-drive
        (even with a retention shorter than the lease)."""
        return first_due + self.restamp_slack + self.retention + self.grace

    # -- commits ----------------------------------------------------------------------------------
    def commit(self, old: Execution, new: Execution, carry: bool = True,
               operation: Callable[[Execution], OperationRecord] | None = None) -> Execution:
        """Apply ``old`` -> ``new`` conditionally (TransitionConflictError, ExecutionNotFoundError) and
        return what was written. A live ``new`` whose timer could outlast the earliest TTL of the
        execution's other items first re-stamps them, and carries the new ``stamped_until``; after the
        commit they are stamped once more, for any item a concurrent writer made with the earlier TTL.
        Nothing of a live execution expires. ``carry=False``: an operator's commit, which carries no
        delivery's cost ledger (in one process with a worker, the API's cancel must not carry the counts of
        a delivery of the same execution whose own commit has applied and not yet been marked carried).
        ``operation``: the operator's record of the action, made from what is written and written with it
        (``commit_operation``: both or neither)."""
        new = self._due_key(new)
        until = new.due_at
        restamp = (not new.status.is_terminal and until is not None
                   and (old.stamped_until is None or until + self.restamp_slack >= old.stamped_until))
        if restamp:
            horizon = until + self.restamp_slack + self.retention + self.grace
            self.store.stamp_items(new.execution_id, horizon)
            new = transitions.restamped(new, horizon)
        if carry:
            new = self.meter.carry(new, finalizes=new.status.is_terminal and not new.finalized)
        transition = Transition(old.current_step, old.version, new)
        if operation is None:
            self.store.commit(transition)
        else:
            self.store.commit_operation(transition, operation(new), legacy=new.layout == 1)
        if carry:
            self.meter.carried()
        if restamp:
            self.store.stamp_items(new.execution_id, new.stamped_until)
        return new

    # -- messages ---------------------------------------------------------------------------------
    def send_at(self, e: Execution, wake_at: dt.datetime | None = None) -> None:
        """Send the message for the execution's current (step, version), delayed until ``wake_at`` if
        SQS can (up to ``max_queue_delay_s``); a longer wait is the sweeper's, from the due index."""
        delay = 0.0 if wake_at is None else (wake_at - self.clock.now()).total_seconds()
        if delay > self.settings.max_queue_delay_s:
            return
        delay_s = max(0, math.ceil(delay))
        self.queue.send(StepMessage(execution_id=e.execution_id, step=e.current_step, version=e.version,
                                    checkpoint=message_checkpoint(e), delay_s=delay_s or None), delay_s=delay_s)

    def _due_key(self, new: Execution) -> Execution:
        """A timer (sleep, retry, event timeout, a wake) short enough to ride SQS ``DelaySeconds`` has its
        message sent with the commit: the sweeper must not send a second one when the timer comes due,
        only when that message, too, is late. So the due key is the timer plus the message's lease."""
        if new.status.is_terminal or new.timer in (None, Timer.LEASE) or new.next_wake_at is None:
            return new
        delay_s = (new.next_wake_at - new.updated_at).total_seconds()
        if delay_s > self.settings.max_queue_delay_s:
            return new  # no message: the sweeper dispatches it when it is due
        lease = dt.timedelta(seconds=self.lease_s(new.workflow, new.current_step, new.workflow_version))
        return new.model_copy(update={"index_at": new.next_wake_at + lease})

    def redrive(self, e: Execution) -> Execution | None:
        """Hand the current step to a fresh message with a fresh lease (a due timer, or a lease that ran
        out). None if someone else moved the execution first."""
        lease_s = self.lease_s(e.workflow, e.current_step, e.workflow_version)
        new = transitions.redriven(e, self.clock.now(), lease_s, self.settings.slack_s,
                                   self.settings.max_resend_doublings)
        try:
            return self.commit(e, new)
        except TransitionConflictError:
            return None

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
        wf = self._workflow(e.workflow, e.workflow_version)
        return None if wf is None else len(wf.steps)

    def items_outlive(self, e: Execution) -> bool:
        """Every item of the ended ``e`` already expires at or after ``e.expires_at``: nothing to stamp."""
        return e.stamped_until is not None and e.expires_at is not None and e.stamped_until >= e.expires_at

    def finalize(self, e: Execution) -> None:
        """Terminal housekeeping: the status-change event when a bus is configured (else, for a FAILED
        execution, a failure notice on the DLQ, so a failure is never silent), every item's TTL where it
        would expire before the execution (those that ran or slept longer than ``history_grace_s``),
        then the finalized mark. The worker that ends an execution does it at once; the sweeper does it
        if that worker died first.

        With a bus, the DLQ holds only messages the transport gave up on; business failures are events."""
        if self.events.enabled:
            self.events.publish(status_event(e, self._step_count(e)))
        elif e.status in (Status.FAILED, Status.COMPENSATION_FAILED):
            self.queue.send_dead_letter(failure_notice(e))
        assert e.expires_at is not None
        if not self.items_outlive(e):
            self.store.stamp_items(e.execution_id, e.expires_at)
        self.store.finalize(e.execution_id, e.version)
