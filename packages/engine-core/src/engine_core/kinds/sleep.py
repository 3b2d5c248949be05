"""A durable sleep: nothing runs and nothing bills until the wake time; a delayed message or the sweeper
resumes the execution.

The first visit records the sleep (its wake time) and commits SLEEPING at the sleep's own position, with
``attempt`` 1 marking that it began; the visit at the wake time moves past it (and, in a chain, claims
the next step in the same write). Wake ends the sleep now; a cancel takes effect at once. (An execution
that began sleeping under engine-core 0.2 waits at the step after its sleep, attempt 0: that step's
kind runs when it is due.)
"""

from __future__ import annotations

import datetime as dt

from .. import codec, faults, transitions
from ..clock import format_ts, parse_ts
from ..model import OperationRecord, StepRecord, StepStatus, Timer
from ..outcome import Outcome
from ..protocol import ActionView, KindBase, StepOps


class SleepKind(KindBase):
    name = "sleep"

    def run(self, op: StepOps) -> Outcome:
        e, step = op.execution, op.step
        if e.attempt >= 1:
            return op.advance()  # due, woken or re-driven: it began (and was recorded) at an earlier visit
        now = op.now()
        # A redrive at a sleep that began goes on to the wake time its record holds, never over again.
        began = _began(op) if e.redrives else None
        if began is not None and began <= now:
            return op.advance()
        wake_at = began or now + dt.timedelta(seconds=step.kind.seconds)
        if began is None:
            record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=1,
                                version=e.version, started_at=now, finished_at=now, kind="sleep", run=e.run,
                                result_blob=codec.encode({"wake_at": format_ts(wake_at)}), expires_at=op.item_expiry(now))
            outcome = op.put(record)
            if outcome is not None:
                return outcome
            faults.point("worker.after_record", execution_id=e.execution_id, step=step.index)
        outcome = op.commit(transitions.slept(e, now, wake_at))
        if outcome is not None:
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index)
        op.log("sleeping", wake_at=wake_at.isoformat())
        op.send(wake_at)
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("slept", e.execution_id, step.index, f"until {wake_at.isoformat()}")

    def on_wake(self, view: ActionView) -> bool:
        return view.execution.timer is Timer.SLEEP


def _began(op: StepOps) -> dt.datetime | None:
    """When the current sleep, begun before the execution failed (a deploy changed its definition, or a
    code-first replay went another way) and was redriven, ends: the wake time this run's record of it holds,
    or the time an operator woke it, if one did after it began (a wake is never undone by a redrive). None
    when it never began."""
    index = op.step.index
    for r in reversed(op.history()):  # the whole history: read once more only when the delivery read a tail
        if type(r) is StepRecord and r.step_index == index and r.kind == "sleep" and r.status is StepStatus.SUCCEEDED:
            wake_at = (codec.decode(r.result_blob) or {}).get("wake_at") if r.result_blob else None
            if not isinstance(wake_at, str):
                return None
            woken = [o.at for o in op.operations() if type(o) is OperationRecord and o.op == "wake"
                     and o.detail.get("was") == Timer.SLEEP.value and r.started_at <= o.at]
            return min([parse_ts(wake_at), *woken])
    return None
