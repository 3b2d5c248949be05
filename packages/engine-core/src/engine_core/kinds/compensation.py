"""Saga compensation: when an execution fails for good, or is cancelled, the compensations of the steps
that completed run in reverse order (``step(charge, compensate=refund)``).

Compensating is a phase of the live execution: ``compensating`` is set and ``current_step`` is the step
being undone, so each compensation is claimed, leased, retried under its own policy and recorded once
(``STEP#<nnn>#<name>#compensation``) by the same moves as a task, and the sweeper re-drives it like any
other step. It ends FAILED (or CANCELLED) with ``compensated: true``, or COMPENSATION_FAILED naming the
step that could not be undone.

This module plays two roles behind the protocol: the kind that runs while an execution compensates
(``CompensationKind.run``), and the ending every failure and cancel goes through (``on_failure``,
``cancelled``), which decides whether there is anything to undo. A cancel that caught a step mid-attempt
(``undo_failed_step``) undoes that step too, first.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from .. import codec, faults, transitions
from ..code_step import CodeStep
from ..context import StepContext
from ..errors import ExecutionStateConflictError
from ..model import ErrorInfo, Execution, Status, StepRecord, StepStatus, Timer
from ..outcome import Outcome, log_fields
from ..protocol import ActionView, KindBase, StepOps
from ..steps import WorkflowDef

log = logging.getLogger("engine_core")

NOT_COMPENSATED = frozenset({"workflow_definition_mismatch", "corrupt_state", "nondeterministic_replay"})
"""Failures that end an execution without compensating: its definition, its state or (code-first) its
function cannot be trusted to say what ran."""


def _done(records: list[Any], index: int, kind: str) -> StepRecord | None:
    for r in records:
        if isinstance(r, StepRecord) and r.step_index == index and r.kind == kind and r.status is StepStatus.SUCCEEDED:
            return r
    return None


def first_to_undo(wf: WorkflowDef, records: list[Any], below: int, also: int | None = None) -> int | None:
    """The latest step before ``below`` that has a compensation, completed (or is ``also``: a step a
    cancel caught mid-attempt), and was not undone yet."""
    for index in range(min(below, len(wf.steps)) - 1, -1, -1):
        if wf.steps[index].compensate is None or _done(records, index, "compensation") is not None:
            continue
        if index == also or _done(records, index, "task") is not None:
            return index
    return None


class CompensationKind(KindBase):
    name = "compensation"

    # -- the kind: one attempt of the compensation of op.step ----------------------------------------
    def run(self, op: StepOps) -> Outcome:
        wf, step = op.wf, op.step
        policy = wf.compensation_policy(step.index)
        timeout = step.compensate_timeout_s or op.timeout_s
        e = op.execution
        if not e.is_claimed:
            op.check_time(timeout)
            claimed = op.claim(policy, timeout)
            if not isinstance(claimed, Execution):
                return claimed
            e = claimed
        faults.point("worker.after_claim", execution_id=e.execution_id, step=step.index, attempt=e.attempt,
                     compensation=True)
        original = _done(op.history(), step.index, "task")
        result = None if original is None or original.result_blob is None else codec.decode(original.result_blob)
        ctx = StepContext(execution_id=e.execution_id, workflow=e.workflow, step_index=step.index, step_name=step.name,
                          attempt=e.attempt, data=op.data or {}, result=result, compensating=True)
        op.log("compensation started")
        body = op.run_body(step.compensate, ctx, timeout)
        op.metric("CompensationDuration", "Milliseconds", body.duration_ms)
        if not body.ok:
            return op.attempt_failed(body, policy=policy, kind="compensation",
                                     prefix=f"compensation of step {step.name!r} failed: ")
        return _succeeded(op, body.result)

    def on_wake(self, view: ActionView) -> bool:
        return view.execution.timer is Timer.RETRY

    # -- the ending -----------------------------------------------------------------------------------
    def on_failure(self, op: StepOps, error: ErrorInfo) -> Outcome | None:
        e = op.execution
        if e.compensating:
            return _end(op, error)  # a compensation failed for good: COMPENSATION_FAILED, naming its step
        if error.code in NOT_COMPENSATED or not any(s.compensate for s in op.wf.steps[:e.current_step]):
            return None
        first = first_to_undo(op.wf, op.history(), e.current_step)
        if first is None:
            return None
        new = transitions.compensation_started(e, op.now(), error, first, op.lease_s(first))
        outcome = op.commit(new)
        if outcome is not None:
            return outcome
        op.metric("ExecutionsCompensating", "Count", 1)
        log.warning("step failed for good; compensating the completed steps", extra={
            **log_fields(e), "step": op.wf.steps[e.current_step].name if e.current_step < len(op.wf.steps) else None,
            "error_code": error.code, "compensate_from": first})
        op.send()
        return Outcome("compensating", e.execution_id, e.current_step, f"undoing step {first}")

    def cancel_undeployed(self, records: list[Any], e: Execution, now: dt.datetime, retention: dt.timedelta,
                          grace_s: float) -> Execution | None:
        return cancel_without_definition(records, e, now, retention, grace_s)

    def cancelled(self, view: ActionView, e: Execution, by: str | None, reason: str | None, undo_current: bool,
                  lease_s: Callable[[int], float], retention: dt.timedelta, grace_s: float) -> Execution:
        wf, now = view.wf, view.now()
        if wf is None:
            _refuse_what_cannot_be_undone(view.history(), e, undo_current)
        first = None
        if wf is not None and wf.fingerprint == e.fingerprint and \
                any(s.compensate for s in wf.steps[: e.current_step + 1]):
            also = e.current_step if undo_current else None
            first = first_to_undo(wf, view.history(), e.current_step + (1 if undo_current else 0), also)
        if first is not None:
            # A saga: what completed (or may have) is undone first; it ends CANCELLED with compensated set.
            return transitions.compensation_started(e, now, None, first, lease_s(first), cancelled_by=by,
                                                    cancel_reason=reason, undo_failed_step=undo_current)
        return transitions.cancelled(e, now, by, reason, retention, grace_s)


def _refuse_what_cannot_be_undone(records: list[Any], e: Execution, undo_current: bool) -> None:
    """A cancel without the definition ``e`` runs on (its version removed, or its steps changed under it)
    cannot undo a completed step that has a compensation (its record says so, ``undo``), nor the current
    one when an attempt of it may have run (``undo_current``) and the item says it has one (a code-first
    position's ``code_step``; a step list's item does not say): refused, naming them, rather than ending
    CANCELLED with them left done for good."""
    done = [r.name for r in records if isinstance(r, StepRecord) and r.status is StepStatus.SUCCEEDED
            and r.kind != "compensation" and r.undo]
    here = CodeStep.decode(e.code_step) if undo_current else None
    maybe = here.name if here is not None and here.kind == "task" and here.undo and here.name not in done else None
    if done or maybe:
        names = ", ".join([*dict.fromkeys(done), *([f"{maybe}, whose attempt may have run"] if maybe else [])])
        raise ExecutionStateConflictError("definition_changed", (
            f"execution {e.execution_id} completed steps that have compensations ({names}), "
            f"and version {e.workflow_version} of workflow {e.workflow!r} as it started is not deployed here, so a "
            f"cancel could not undo them. Deploy version {e.workflow_version} again beside the newer ones, then "
            "cancel it. It runs nothing meanwhile: its next delivery ends it FAILED"), e.status.value)


def cancel_without_definition(records: list[Any], e: Execution, now: dt.datetime, retention: dt.timedelta,
                              grace_s: float) -> Execution | None:
    """A requested cancel of ``e``, whose definition is not deployed here, finished now: CANCELLED when
    nothing it did needs undoing (as an operator's cancel would end it now), else None (the cancel
    waits for the definition: ``_refuse_what_cannot_be_undone``)."""
    try:
        _refuse_what_cannot_be_undone(records, e, e.lost_attempts > 0)
    except ExecutionStateConflictError:
        return None
    return transitions.cancelled(e, now, e.cancelled_by or "operator", e.cancel_reason, retention, grace_s)


def _succeeded(op: StepOps, value: Any) -> Outcome:
    e, step = op.execution, op.step
    now = op.now()
    try:
        blob = codec.encode(value if isinstance(value, dict) else {}, "result")
    except Exception:
        blob = codec.encode({})
    record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=e.attempt,
                        version=e.version, started_at=e.attempt_started_at, finished_at=now, result_blob=blob,
                        expires_at=op.item_expiry(now), kind="compensation", run=e.run)
    outcome = op.put(record)
    if outcome is not None:
        return outcome
    faults.point("worker.after_record", execution_id=e.execution_id, step=step.index, compensation=True)
    op.metric("StepsCompensated", "Count", 1)
    op.log("compensation succeeded")
    also = e.failed_step if e.undo_failed_step else None
    nxt = first_to_undo(op.wf, op.history(), step.index, also)
    if nxt is not None:
        outcome = op.commit(transitions.compensation_next(e, now, nxt, op.lease_s(nxt)))
        if outcome is not None:
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index, compensation=True)
        if op.chain_undo(nxt):  # the next undo claims in this invocation: no message, no second history read
            return Outcome("chained", e.execution_id, step.index, f"next: step {nxt}")
        op.send()
        return Outcome("compensated_step", e.execution_id, step.index, f"next: step {nxt}")
    return _end(op, None)


def _end(op: StepOps, error: ErrorInfo | None) -> Outcome:
    e = op.execution
    new = transitions.compensation_ended(e, op.now(), op.retention, op.finalize_grace_s(), error)
    if new.status is Status.COMPENSATION_FAILED:
        log.error("compensation failed; execution ended COMPENSATION_FAILED", extra={
            **log_fields(e, attempt=e.attempt or None), "step": error.step_name if error else None,
            "error": error.message if error else None})
        metric, kind = "ExecutionsFailed", "compensation_failed"
    else:
        metric = "ExecutionsFailed" if new.status is Status.FAILED else "ExecutionsCancelled"
        kind = "cancelled" if new.status is Status.CANCELLED else "failed"
    return op.end(new, kind, "compensated" if error is None else error.code, metric=metric)

