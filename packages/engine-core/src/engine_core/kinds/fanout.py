"""Parallel and map steps: one step whose branches run as separate deliveries (fan-out), completing once
when every branch succeeded (fan-in). The step's own deliveries are in ``_fanout_parent.py``, a
branch's in ``_fanout_branch.py``.

Operator actions: a cancel while an attempt holds any branch is a request; no new branch body starts,
and the cancel takes effect when no attempt holds a branch any more (each ended, or its lease ran out).
A redrive begins a new generation that keeps the branches that succeeded and never resets a branch an
attempt still holds. Wake does not apply (the branches' retries are their own).
"""

from __future__ import annotations

from .. import transitions
from ..model import Branch
from ..outcome import Outcome
from ..protocol import ActionView, CancelPlan, KindBase, StepOps
from ..model import StepMessage
from . import _fanout_branch
from ._fanout_parent import FanOut, of_run, running


class FanOutKind(KindBase):
    name = "fanout"
    wake_refused = ("its step is a parallel or map step, whose branches wait for their retries on their own (loom "
                    "history and loom console show each branch's next attempt)")

    def run(self, op: StepOps) -> Outcome:
        return FanOut(op).deliver()

    def run_branch(self, op: StepOps, message: StepMessage) -> Outcome:
        return _fanout_branch.deliver(op, message)

    def on_cancel(self, view: ActionView) -> CancelPlan:
        e, step = view.execution, view.step
        if step is None:
            return CancelPlan(now=True)
        known = {b.branch: b for b in view.branches(step.index) if isinstance(b, Branch) and of_run(b, e)}
        held = running(known, view.now())
        if held:
            return CancelPlan(now=False, until=max(b.next_wake_at for b in held if b.next_wake_at is not None))
        return CancelPlan(now=True)

    def finish_cancel(self, op: StepOps) -> Outcome:
        fan = FanOut(op)
        known = fan.read()
        if not isinstance(known, dict):
            return known
        now = op.now()
        held = running(known, now)
        if not held:
            return op.finish_cancel(undo_current=False)
        until = max(b.next_wake_at for b in held if b.next_wake_at is not None)
        outcome = op.commit(transitions.fanned_out(op.execution, now, (until - now).total_seconds() + 1))
        if outcome is not None:
            return outcome
        return Outcome("cancel_pending", op.execution.execution_id, fan.index,
                       f"{len(held)} branches still held by an attempt")

