"""Wait for an external event: WAITING, costing nothing, until an event of that name arrives (sent
before or after the execution got here) or the timeout passes.

Events are kept as their own items (``EVT#<name>#<event_id>``, written once per id and run) and read
with the execution's one query, so an event sent early is simply there when the wait begins. A wait that
finds none commits WAITING, then looks once more: a sender that saw the execution not yet waiting did
not wake it, and its event was written before that look, so one of the two always sees the other.

The event's data lands in the context under the wait step's name, never over another key, validated by
the wait's model if it declares one; an event whose data does not fit (no send could check it) is passed
over, and the wait goes on to its own timeout. An event sent through a callback token (id
``callback:<step>``) completes only the wait at that step. Wake times the wait out now; a cancel takes
effect at once.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from .. import faults, transitions
from ..errors import NonSerializableResultError, ResultTooLargeError
from ..model import EventRecord, Execution, OperationRecord, StepRecord, StepStatus, Status, Timer
from ..outcome import Outcome
from ..protocol import ActionView, KindBase, StepOps
from ..steps import field_problems
from ..waiting_events import pending


class WaitKind(KindBase):
    name = "event"

    def run(self, op: StepOps) -> Outcome:
        spec = op.step.kind
        # An operator's wake ends this wait period as a timeout: an event sent meanwhile (a send racing the wake)
        # is kept for a later wait of its name, not taken here, so the wake is what was answered.
        event = None if op.execution.wait_woken else _fitting(op)
        if event is not None:
            return _settle(op, event.data, event.event_id)
        if op.execution.attempt > 0:
            # A wait period of this step ended with no event: its timeout passed (the sweeper or a
            # delayed message brought it here), or an operator woke it. The first visit has attempt 0.
            # An event woke it that does not fit the wait's model: the period goes on to its timeout.
            goes_on = _goes_on_until(op)
            return _timed_out(op) if goes_on is None else _wait(op, goes_on)
        return _wait(op)

    def on_wake(self, view: ActionView) -> bool:
        return view.execution.timer is Timer.EVENT

    def waits_for(self, view: ActionView) -> str | None:
        e, step = view.execution, view.step
        if step is None or e.status is not Status.WAITING:
            return None
        return step.kind.event


def _goes_on_until(op: StepOps) -> dt.datetime | None:
    """The timeout of the wait period an event (not an operator) woke before it ran out, else None."""
    e = op.execution
    if e.attempt == 0 or e.wait_woken or e.waiting_since is None:
        return None
    timeout_at = e.waiting_since + dt.timedelta(seconds=op.step.kind.timeout_s)
    return timeout_at if op.now() < timeout_at else None


def _wait(op: StepOps, goes_on_until: dt.datetime | None = None) -> Outcome:
    """Begin a wait period (or go on with the current one, to ``goes_on_until``)."""
    e, spec = op.execution, op.step.kind
    now = op.now()
    if goes_on_until is None:
        timeout_at = now + dt.timedelta(seconds=spec.timeout_s)
        outcome = op.commit(transitions.waiting(e, now, timeout_at))
    else:
        timeout_at = goes_on_until
        outcome = op.commit(transitions.waits_on(e, timeout_at, now))
    if outcome is not None:
        return outcome
    faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=op.step.index)
    late = _fitting(op, quiet=True)  # a misfit seen by the look before the commit was logged there
    if late is not None:
        return _settle(op, late.data, late.event_id)
    op.log("waiting for an event", event=spec.event, timeout_at=timeout_at.isoformat())
    op.send(timeout_at)
    faults.point("worker.after_enqueue", execution_id=e.execution_id, step=op.step.index)
    return Outcome("waiting", e.execution_id, e.current_step, f"for {spec.event!r} until {timeout_at.isoformat()}")


def _settle(op: StepOps, data: dict[str, Any], event_id: str | None) -> Outcome:
    e, step = op.execution, op.step
    try:
        value = step.kind.validate(data)
    except Exception as exc:  # pydantic's ValidationError: only the wait's own default can get here
        return op.fail(op.error("invalid_event", f"the default of wait {step.kind.event!r} does not fit the "
                                                 f"wait's model: {exc}; give the wait a default that fits"))
    try:
        blob, merged, bound = op.merge({step.name: value}, f"event {step.kind.event!r} for step {step.name!r}")
    except (NonSerializableResultError, ResultTooLargeError) as exc:
        if event_id is None:  # the wait's own default: the definition's to fix
            return op.fail(op.error(exc.code, str(exc)))
        return op.fail(op.error(exc.code, _unkept(op, exc, event_id)), started_at=_began(e), event_id=event_id)
    now = op.now()
    record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED,
                        attempts=max(e.attempt, 1), version=e.version, started_at=_began(e), finished_at=now,
                        result_blob=blob, expires_at=op.item_expiry(now), kind="event", event_id=event_id, run=e.run)
    return op.settle(record, merged, bound)


def _unkept(op: StepOps, exc: Exception, event_id: str) -> str:
    """Why an event's data cannot join the context, and what to do: the failed record names the event, so
    the wait a redrive brings back passes it over and waits for another."""
    event = f"the data of event {op.step.kind.event!r} (event_id {event_id!r})"
    if isinstance(exc, ResultTooLargeError):
        why = (f"{event} would make the context {exc.size:,} bytes encoded, over the {exc.limit:,}-byte budget "
               "that keeps the execution inside DynamoDB's 400 KB item limit")
    else:
        why = f"{event} cannot be kept in the context: {exc}"
    return (f"{why}. The event is passed over: `loom redrive {op.execution.execution_id}` brings the wait back, "
            "then send a smaller event: a reference to the payload kept elsewhere (an S3 key), not the payload")


def _timed_out(op: StepOps) -> Outcome:
    e, step = op.execution, op.step
    spec = step.kind
    if spec.has_default:
        return _settle(op, dict(spec.default), None)
    policy = op.wf.policy_for(step.index)
    now, began = op.now(), _began(e)
    waited = (now - began).total_seconds()
    woken = waited < spec.timeout_s - op.settings.early_tolerance_s  # only an operator's wake ends it this early
    if not woken and waited < spec.timeout_s:
        woken = _woken(op, began)
    if woken:
        message = (f"an operator's wake (loom wake) ended the wait for {spec.event!r} after {_seconds(waited)}, "
                   f"before its {_seconds(spec.timeout_s)} timeout, with no event (wait {e.attempt} of "
                   f"{policy.max_attempts})")
    else:
        message = (f"no {spec.event!r} event arrived within {_seconds(spec.timeout_s)} "
                   f"(wait {e.attempt} of {policy.max_attempts})")
    if e.attempt >= policy.max_attempts:
        return op.fail(op.error("event_timeout", message, retryable=False), started_at=began)
    record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.FAILED, attempts=e.attempt,
                        version=e.version, started_at=began, finished_at=now, kind="event", run=e.run,
                        error=op.error("event_timeout", message, retryable=True), expires_at=op.item_expiry(now))
    outcome = op.put(record)
    if outcome is not None:
        return outcome
    return _wait(op)


def _seconds(value: float) -> str:
    """Seconds as a person reads them: a tenth below ten (1.5 s), whole above, never an exponent; past an hour,
    in hours or days too (``172800 s (2 d)``)."""
    text = (f"{value:.1f}".removesuffix(".0") if value < 10 else f"{value:.0f}") + " s"
    for unit, size in (("d", 86400), ("h", 3600)):
        if value >= size:
            return f"{text} ({f'{value / size:.1f}'.removesuffix('.0')} {unit})"
    return text


def _woken(op: StepOps, began: dt.datetime) -> bool:
    """An operator woke this wait: read only when it ended within the early tolerance before its timeout, where
    the time alone cannot tell a wake from the timer's message."""
    return any(type(o) is OperationRecord and o.op == "wake" and o.detail.get("was") == Timer.EVENT.value
               and o.at >= began for o in op.operations())


def _began(e: Execution) -> dt.datetime:
    """When the wait being recorded began: its period's WAITING commit (an event, a wake or the sweeper
    since moved ``updated_at``), or, for an event that was there before the step waited, the step's arrival."""
    return e.waiting_since if e.attempt > 0 and e.waiting_since is not None else e.updated_at


def _fitting(op: StepOps, quiet: bool = False) -> EventRecord | None:
    """The oldest event this wait may take (``pending``) whose data fits the wait's model. One that does not
    fit (an undeclared event of a code-first workflow, which no send could check, or a model changed since
    the send) is passed over and left unconsumed, logged with the fields it misses: it neither fails the
    execution (a redrive would meet it again, oldest first) nor ends the wait."""
    spec = op.step.kind
    events = op.list_events(spec.event)
    if not events:
        return None
    for event in pending(op.history(), events, spec.event, op.step.index):
        if spec.model is None:
            return event
        from pydantic import ValidationError

        try:
            spec.validate(event.data)
        except ValidationError as exc:
            if quiet:
                continue
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in field_problems(exc))
            op.log(f"event {spec.event!r} passed over: its data does not fit the wait's model ({summary}); the wait "
                   "takes the next event that fits", logging.WARNING, event_id=event.event_id)
            op.metric("EventsPassedOver", "Count", 1)
            continue
        return event
    return None
