"""A task: a plain function of the context, claimed, run under its budget, and settled once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import faults
from .._runner import run_body
from ..clock import monotonic_ms
from ..context import StepContext

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..step_run import StepRun


@dataclass(frozen=True)
class TaskKind:
    fn: Callable[..., Any]
    kind = "task"

    def shape(self) -> list[Any]:
        return ["step", None]

    def describe(self) -> dict[str, Any]:
        return {}

    def needs_invocation_time(self) -> bool:
        return True

    def run(self, run: StepRun) -> Outcome:
        e = run.execution
        if not e.is_claimed:
            claimed = run.claim()
            if not isinstance(claimed, type(e)):
                return claimed  # lost the claim, or the attempts are used up
            e = claimed
        step, attempt = run.step, e.attempt
        faults.point("worker.after_claim", execution_id=e.execution_id, step=step.index, attempt=attempt)
        run.log("step started")
        ctx = StepContext(execution_id=e.execution_id, workflow=e.workflow, step_index=step.index,
                          step_name=step.name, attempt=attempt, data=run.data, _tokens=run.callback_token)
        body = run_body(self.fn, ctx, run.timeout_s, monotonic_ms)
        run.metric("StepDuration", "Milliseconds", body.duration_ms)
        if body.ok:
            return run.succeed(body.result)
        return run.attempt_failed(body)
