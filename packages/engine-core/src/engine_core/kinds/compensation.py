"""Saga compensation: when an execution fails for good, or is cancelled, the compensations of the
steps that completed run in reverse order (``step(charge, compensate=refund)``).

Compensating is a phase of the execution, not a step kind of its own: the execution stays live with
``compensating`` set and ``current_step`` at the step being undone, so each compensation is claimed,
leased, retried under its own policy and recorded once (``STEP#<nnn>#<name>#compensation``) by the
same moves as a task, and the sweeper re-drives it like any other step. It ends FAILED (or CANCELLED)
with ``compensated: true``, or COMPENSATION_FAILED naming the step that could not be undone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import codec, faults, transitions
from .._runner import run_body
from ..clock import monotonic_ms
from ..context import StepContext
from ..model import ErrorInfo, Execution, Status, StepRecord, StepStatus

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..step_run import StepRun
    from ..registry import WorkflowDef

log = logging.getLogger("engine_core")

NOT_COMPENSATED = frozenset({"workflow_definition_mismatch", "corrupt_state"})
"""Failures that end an execution without compensating: its definition or its state cannot be trusted
to say what ran."""


def _done(records: list[Any], index: int, kind: str) -> StepRecord | None:
    for r in records:
        if isinstance(r, StepRecord) and r.step_index == index and r.kind == kind and r.status is StepStatus.SUCCEEDED:
            return r
    return None


def first_to_undo(wf: WorkflowDef, records: list[Any], below: int) -> int | None:
    """The latest step before ``below`` that completed, has a compensation, and was not undone yet."""
    for index in range(min(below, len(wf.steps)) - 1, -1, -1):
        if wf.steps[index].compensate is not None and _done(records, index, "task") is not None \
                and _done(records, index, "compensation") is None:
            return index
    return None


def begin(run: StepRun, error: ErrorInfo | None, first: int) -> Outcome:
    """Turn a final failure of the current step into compensation, starting with step ``first``."""
    from ..outcome import Outcome

    e = run.execution
    new = transitions.compensation_started(e, run.now(), error, first, run.life.lease_s(e.workflow, first))
    outcome = run.engine.commit(new, e)
    if outcome is not None:
        return outcome
    run.execution = new
    run.metric("ExecutionsCompensating", "Count", 1)
    log.warning("step failed for good; compensating the completed steps", extra={
        "execution_id": e.execution_id, "workflow": e.workflow, "step": run.wf.steps[e.current_step].name
        if e.current_step < len(run.wf.steps) else None, "step_index": e.current_step, "attempt": None,
        "error_code": None if error is None else error.code, "compensate_from": first})
    run.life.send_at(new)
    return Outcome("compensating", e.execution_id, e.current_step, f"undoing step {first}")


def run(run: StepRun) -> Outcome:
    """One attempt of the compensation of ``run.step`` (claimed first, like a task)."""
    wf, step = run.wf, run.step
    policy = wf.compensation_policy(step.index)
    timeout = step.compensate_timeout_s or run.timeout_s
    e = run.execution
    if not e.is_claimed:
        run._check_time(timeout)
        claimed = run.claim(policy, timeout)
        if not isinstance(claimed, Execution):
            return claimed
        e = claimed
    faults.point("worker.after_claim", execution_id=e.execution_id, step=step.index, attempt=e.attempt,
                 compensation=True)
    original = _done(run.records, step.index, "task")
    result = None if original is None or original.result_blob is None else codec.decode(original.result_blob)
    ctx = StepContext(execution_id=e.execution_id, workflow=e.workflow, step_index=step.index, step_name=step.name,
                      attempt=e.attempt, data=run.data or {}, result=result, compensating=True)
    run.log("compensation started")
    body = run_body(step.compensate, ctx, timeout, monotonic_ms)
    run.metric("CompensationDuration", "Milliseconds", body.duration_ms)
    if not body.ok:
        return run.attempt_failed(body, policy=policy, kind="compensation",
                                  prefix=f"compensation of step {step.name!r} failed: ")
    return _succeeded(run, body.result)


def _succeeded(run: StepRun, value: Any) -> Outcome:
    from ..outcome import Outcome

    e, step = run.execution, run.step
    now = run.now()
    try:
        blob = codec.encode(value if isinstance(value, dict) else {}, "result")
    except Exception:
        blob = codec.encode({})
    record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=e.attempt,
                        version=e.version, started_at=e.attempt_started_at, finished_at=now, result_blob=blob,
                        expires_at=run.history_expiry(now), kind="compensation")
    outcome = run._put(record)
    if outcome is not None:
        return outcome
    faults.point("worker.after_record", execution_id=e.execution_id, step=step.index, compensation=True)
    run.records.append(record)
    run.metric("StepsCompensated", "Count", 1)
    run.log("compensation succeeded")
    nxt = first_to_undo(run.wf, run.records, step.index)
    if nxt is not None:
        new = transitions.compensation_next(e, now, nxt, run.life.lease_s(e.workflow, nxt))
        outcome = run.engine.commit(new, e)
        if outcome is not None:
            return outcome
        run.execution = new
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index, compensation=True)
        run.life.send_at(new)
        return Outcome("compensated_step", e.execution_id, step.index, f"next: step {nxt}")
    return _end(run, None)


def give_up(run: StepRun, error: ErrorInfo) -> Outcome:
    """A compensation failed for good: COMPENSATION_FAILED, naming the step it could not undo."""
    return _end(run, error)


def _end(run: StepRun, error: ErrorInfo | None) -> Outcome:
    from ..outcome import Outcome

    e = run.execution
    new = transitions.compensation_ended(e, run.now(), run.life.retention, run.life.finalize_grace_s(e), error)
    outcome = run.engine.commit(new, e)
    if outcome is not None:
        return outcome
    run.execution = new
    if new.status is Status.COMPENSATION_FAILED:
        run.metric("ExecutionsFailed", "Count", 1)
        log.error("compensation failed; execution ended COMPENSATION_FAILED", extra={
            "execution_id": e.execution_id, "workflow": e.workflow, "step": error.step_name if error else None,
            "step_index": e.current_step, "attempt": e.attempt or None, "error": error.message if error else None})
    else:
        run.metric("ExecutionsFailed" if new.status is Status.FAILED else "ExecutionsCancelled", "Count", 1)
        log.info("compensation finished", extra={"execution_id": e.execution_id, "workflow": e.workflow,
                                                  "step": None, "step_index": new.current_step, "attempt": None,
                                                  "status": new.status.value})
    run.life.finalize(new, run.records)
    kind = {Status.COMPENSATION_FAILED: "compensation_failed", Status.CANCELLED: "cancelled"}.get(new.status, "failed")
    return Outcome(kind, e.execution_id, e.current_step, "compensated" if error is None else error.code)
