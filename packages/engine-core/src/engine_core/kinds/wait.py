"""Wait for an external event: WAITING, costing nothing, until an event of that name arrives (sent
before or after the execution got here) or the timeout passes.

Events are kept as their own items (``EVT#<name>#<event_id>``, written once per id) and read with the
execution's one query, so an event sent early is simply there when the wait begins. A wait that finds
none commits WAITING, then looks once more: a sender that saw the execution not yet waiting did not
wake it, and its event was written before that look, so one of the two always sees the other.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import transitions
from ..errors import NonSerializableResultError, ResultTooLargeError
from ..model import EventRecord, StepRecord, StepStatus

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..step_run import StepRun


@dataclass(frozen=True)
class WaitKind:
    event: str
    timeout_s: float
    default: Any = None
    has_default: bool = False
    kind = "event"

    def shape(self) -> list[Any]:
        return ["wait_for_event", self.event]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "wait_for_event", "event": self.event, "timeout_s": self.timeout_s}
        if self.has_default:
            out["default"] = self.default
        return out

    def needs_invocation_time(self) -> bool:
        return False

    def run(self, run: StepRun) -> Outcome:
        event = pending(run.records, run.events, self.event, run.step.index)
        if event is not None:
            return self._consume(run, event)
        if run.execution.attempt > 0:
            # A wait period of this step ended with no event: its timeout passed (the sweeper or a
            # delayed message brought it here), or an operator woke it. The first visit has attempt 0.
            return self._timed_out(run)
        return self._wait(run)

    # -- moves ----------------------------------------------------------------------------------
    def _wait(self, run: StepRun) -> Outcome:
        from ..outcome import Outcome

        e = run.execution
        now = run.now()
        timeout_at = now + dt.timedelta(seconds=self.timeout_s)
        run._keep_history(timeout_at)
        new = transitions.waiting(e, now, timeout_at)
        outcome = run.engine.commit(new, e)
        if outcome is not None:
            return outcome
        run.execution = new
        late = pending(run.records, run.life.store.list_events(e.execution_id, self.event), self.event, run.step.index)
        if late is not None:
            return self._consume(run, late)
        run.log("waiting for an event", event=self.event, timeout_at=timeout_at.isoformat())
        run.life.send_at(new, timeout_at)
        return Outcome("waiting", e.execution_id, e.current_step, f"for {self.event!r} until {timeout_at.isoformat()}")

    def _consume(self, run: StepRun, event: EventRecord) -> Outcome:
        return self._settle(run, event.data, event.event_id)

    def _settle(self, run: StepRun, data: dict[str, Any], event_id: str | None) -> Outcome:
        e, step = run.execution, run.step
        try:
            blob, merged, bound = run.merge(data, f"event {self.event!r} for step {step.name!r}")
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return run.fail(run._error(exc.code, str(exc)))
        now = run.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED,
                            attempts=max(e.attempt, 1), version=e.version, started_at=e.updated_at, finished_at=now,
                            result_blob=blob, expires_at=run.history_expiry(now), kind="event", event_id=event_id)
        return run.settle(record, merged, bound)

    def _timed_out(self, run: StepRun) -> Outcome:
        e, step = run.execution, run.step
        if self.has_default:
            return self._settle(run, dict(self.default), None)
        policy = run.wf.policy_for(step.index)
        message = (f"no {self.event!r} event arrived within {self.timeout_s:g} s "
                   f"(wait {e.attempt} of {policy.max_attempts})")
        if e.attempt >= policy.max_attempts:
            return run.fail(run._error("event_timeout", message, retryable=False))
        now = run.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.FAILED, attempts=e.attempt,
                            version=e.version, started_at=e.updated_at, finished_at=now, kind="event",
                            error=run._error("event_timeout", message, retryable=True),
                            expires_at=run.history_expiry(now))
        outcome = run._put(record)
        if outcome is not None:
            return outcome
        return self._wait(run)


def pending(records: list[Any], events: list[Any], name: str, step: int | None = None) -> EventRecord | None:
    """The oldest event of ``name`` that no wait step has consumed yet. The record of ``step`` (the wait
    asking) does not count: it exists only when an earlier delivery of this wait recorded its event and
    died (or lost its commit) before advancing, and that event is still this wait's to consume."""
    consumed = {r.event_id for r in records if isinstance(r, StepRecord) and r.event_id and r.step_index != step}
    found = [ev for ev in events if isinstance(ev, EventRecord) and ev.name == name and ev.event_id not in consumed]
    return min(found, key=lambda ev: (ev.sent_at, ev.event_id)) if found else None
