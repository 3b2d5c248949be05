"""A task: a plain function of the context, claimed, run under its budget, and settled once.

Operator actions: a cancel while an attempt holds the step (its lease not yet run out) is a request
that takes effect when that attempt has ended; a cancel of an unclaimed task takes effect at once. A
task is undone by such a cancel when its success is recorded or an attempt of it may have taken effect
(its worker died). Wake ends a retry's backoff.
"""

from __future__ import annotations

from typing import Any

from .. import faults
from ..context import StepContext
from ..model import Execution, StepRecord, StepStatus, Timer
from ..outcome import Outcome
from ..protocol import ActionView, CancelPlan, KindBase, StepOps


class TaskKind(KindBase):
    name = "task"

    def run(self, op: StepOps) -> Outcome:
        e = op.execution
        if not e.is_claimed:
            # Before any write: a claimed-then-abandoned attempt would hold the step for its lease.
            op.check_time(op.timeout_s)
            claimed = op.claim()
            if not isinstance(claimed, Execution):
                return claimed  # lost the claim, or the attempts are used up
            e = claimed
        step, attempt = op.step, e.attempt
        faults.point("worker.after_claim", execution_id=e.execution_id, step=step.index, attempt=attempt)
        op.log("step started")
        ctx = StepContext(execution_id=e.execution_id, workflow=e.workflow, step_index=step.index,
                          step_name=step.name, attempt=attempt, data=op.data or {}, _tokens=op.callback_token)
        body = op.run_body(step.kind.fn, ctx, op.timeout_s)
        op.metric("StepDuration", "Milliseconds", body.duration_ms)
        if body.ok:
            return op.succeed(body.result)
        return op.attempt_failed(body)

    def on_cancel(self, view: ActionView) -> CancelPlan:
        e = view.execution
        if e.is_claimed and e.next_wake_at is not None and e.next_wake_at > view.now():
            return CancelPlan(now=False, until=e.next_wake_at)
        step = view.step
        if step is None or step.compensate is None:
            return CancelPlan(now=True)
        # An attempt whose lease ran out (its worker died) may have taken effect; so may a success
        # recorded just before a crash.
        return CancelPlan(now=True, undo_current=e.is_claimed or e.lost_attempts > 0
                          or succeeded(view.history(), step.index))

    def finish_cancel(self, op: StepOps) -> Outcome:
        e = op.execution
        return op.finish_cancel(undo_current=e.lost_attempts > 0 or succeeded(op.records, e.current_step))

    def on_wake(self, view: ActionView) -> bool:
        # SLEEP: an execution that began sleeping under engine-core 0.2 waits at the step after its sleep.
        return view.execution.timer in (Timer.RETRY, Timer.SLEEP)


def succeeded(records: list[Any], index: int) -> bool:
    """The task at ``index`` has a SUCCEEDED record in this run's history."""
    return any(isinstance(r, StepRecord) and r.step_index == index and r.kind == "task"
               and r.status is StepStatus.SUCCEEDED for r in records)
