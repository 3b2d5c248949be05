"""What an operator does to executions: cancel, redrive, wake, send an event, complete a callback (the
reads, listing and history pages among them, are ``reads.Reader``'s).

Each action is one conditional write on the execution item (so it races safely with workers and the
sweeper), is kept in the execution's history as an operation record naming who did it, and refuses
with :class:`ExecutionStateConflictError` (an HTTP 409) when it does not apply, writing nothing. What an
action means for the current step is its kind's answer (``protocol.StepKind``): a cancel of a step an
attempt holds is a request that takes effect when that attempt has ended, a wake applies only where
the kind waits, an event wakes only the wait for it. Housekeeping after a committed action (its record,
the message, the ending's notice) never turns the answer into an error: the sweeper finishes what a
failed message or notice left.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from . import callbacks, caps, codec, transitions
from .clock import format_ts
from .errors import (
    CallbackNotFoundError,
    ExecutionNotFoundError,
    ExecutionStateConflictError,
    InvalidEventError,
    InvalidRequestError,
    TransitionConflictError,
)
from .kinds import KindTable
from .lifecycle import Lifecycle
from .protocol import CancelPlan
from .model import (Branch, BranchStatus, CorruptRecord, EventRecord, Execution, OperationRecord, Status, StepRecord,
                    StepStatus, Timer)
from .rebuild import this_run
from .registry import EVENT_NAME_RE
from .step_reads import EVENT_READ_LIMIT
from .steps import StepDef, WorkflowDef, field_problems
from .reads import Reader
from .versions import MISSING_VERSION, is_code_first, pinned_step, read_pins, redrive_onto, resolve, step_change
from .waiting_events import fits_wait, pending, wait_model_for

log = logging.getLogger("engine_core")
EVENT_ID_RE = re.compile(r"\A[A-Za-z0-9_.:-]{1,128}\Z")
_RETRIES = 5


class _Op(NamedTuple):
    """An operator's action, as its record keeps it (who, why, what it replaced)."""
    op: str
    by: str
    reason: str | None
    detail: dict[str, Any]


class EventSent(NamedTuple):
    execution_id: str
    event: str
    event_id: str
    outcome: str
    """``delivered`` (the execution was waiting for it and resumes now), ``buffered`` (kept until a wait
    of that name consumes it) or ``duplicate`` (that event id was sent before; nothing changed)."""

    def as_dict(self) -> dict[str, str]:
        return {"execution_id": self.execution_id, "event": self.event, "event_id": self.event_id,
                "outcome": self.outcome}


class _View:
    """``protocol.ActionView`` of one execution as an operator's action found it."""

    def __init__(self, operator: Operator, e: Execution):
        self.operator, self.execution = operator, e
        self.wf = operator.definition(e)
        self._history: list[Any] | None = None

    @property
    def step(self) -> StepDef | None:
        if self.wf is None or not 0 <= self.execution.current_step < len(self.wf.steps):
            return None
        return self.wf.steps[self.execution.current_step]

    def now(self) -> dt.datetime:
        return self.operator.life.clock.now()

    def history(self) -> list[Any]:
        if self._history is None:
            self._history = self.operator.history_of(self.execution)
        return self._history

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]:
        return self.operator.life.store.branches(self.execution.execution_id, step_index)


def _undeployed_cancel(view: _View, now: dt.datetime) -> CancelPlan:
    """What a cancel means where no deployed definition says what the current step is: a request while an
    attempt's claim holds it, or holds a branch of it (a fan-out's; that attempt, running the definition it
    started on, finishes the cancel, or the delivery after its lease does), else now, undoing the current
    step too if an attempt of it may have run (what can be undone without the definition is the
    compensation kind's to say)."""
    e = view.execution
    if e.is_claimed and e.next_wake_at is not None and e.next_wake_at > now:
        return CancelPlan(now=False, until=e.next_wake_at)
    if not e.is_claimed and e.attempt > 0 and e.status is Status.RUNNING:  # it may have fanned out
        held = [b.next_wake_at for b in this_run(e, view.branches(e.current_step), "updated_at")
                if isinstance(b, Branch) and b.status is BranchStatus.RUNNING and b.next_wake_at is not None
                and b.next_wake_at > now]
        if held:
            return CancelPlan(now=False, until=max(held))
    return CancelPlan(now=True, undo_current=e.is_claimed or e.lost_attempts > 0)


class Operator(Reader):
    """The operator's actions over one lifecycle (the engine's), and its reads (``reads.Reader``): see the
    module docstring."""

    def __init__(self, life: Lifecycle, kinds: KindTable):
        super().__init__(life)
        self.kinds = kinds

    # -- actions ------------------------------------------------------------------------------------
    def cancel(self, execution_id: str, by: str, reason: str | None = None) -> Execution:
        """End a live execution CANCELLED (undoing what it completed, when its steps say how). While an
        attempt holds the current step, the cancel is a request that takes effect when that attempt
        ends. Cancelling a cancelled (or cancel-requested, or compensating) one returns it; any other
        ended execution is a conflict naming its status."""
        for _ in range(_RETRIES):
            e = self.get(execution_id)
            if e.status is Status.CANCELLED:
                return e
            if e.status.is_terminal:
                raise ExecutionStateConflictError(
                    "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; only a live "
                    "execution can be cancelled", e.status.value)
            if e.compensating or e.cancel_requested:
                return e  # already undoing its steps, or waiting for the running attempt to end
            view = _View(self, e)
            kind = self.kinds.current(view.wf, e)
            now = self.life.clock.now()
            plan = kind.on_cancel(view) if kind is not None else _undeployed_cancel(view, now)
            if plan is not None and not plan.now:
                new = transitions.cancel_requested(e, now, by, reason, plan.until)
                applied = self._commit(e, new, _Op("cancel", by, reason, {
                    "requested": True, "takes_effect": "when the running attempt has ended"}))
                if applied is not None:
                    return applied
                continue
            undo = plan is not None and plan.undo_current
            lease_s = lambda i: self.life.lease_s(e.workflow, i, e.workflow_version)  # noqa: E731
            new = self.kinds.ending.cancelled(view, e, by, reason, undo, lease_s, self.life.retention,
                                              self.life.finalize_grace_s(e))
            detail = {"compensate_from": new.current_step} if new.compensating else {}
            applied = self._commit(e, new, _Op("cancel", by, reason, detail))
            if applied is None:
                continue
            if applied.compensating:
                self._send(applied)
            if applied.status.is_terminal:
                self.life.metrics.add_metric("ExecutionsCancelled", "Count", 1)
                self._quietly("finalize", lambda: self.life.finalize(applied), applied)
            return applied
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

    def redrive(self, execution_id: str, by: str, to_version: int | None = None) -> Execution:
        """Resume a FAILED execution from its failed step with fresh attempts, under the same id (on
        ``to_version`` when given: its steps before the failed one must be the same there)."""
        e = self.get(execution_id)
        if e.status is not Status.FAILED:
            hint = ""
            if not e.status.is_terminal:
                _, problem = resolve(self.life.registry, e, read_pins(self.life.store, e.execution_id))
                if problem is not None:  # it cannot go on here: its next delivery fails it, then it can move
                    why = ("is not deployed" if problem.code == MISSING_VERSION else "changed under it")
                    hint = (f". It cannot go on here ({problem.code}: version {e.workflow_version} of workflow "
                            f"{e.workflow!r} as it started {why}); its next delivery fails it (`loom wake "
                            f"{e.execution_id}` brings that on now if it sleeps or waits), then redrive it with "
                            "--to-version N onto a deployed version")
            raise ExecutionStateConflictError(
                "not_failed", f"execution {e.execution_id} is {e.status.value}; only a FAILED execution can be "
                f"redriven{hint}", e.status.value)
        if e.compensated is not None:
            raise ExecutionStateConflictError(
                "compensated", f"execution {e.execution_id} undid its completed steps after the failure "
                "(compensation ran); resuming it would act on undone work. Start a new execution", e.status.value)
        if e.error is not None and e.error.code == "corrupt_state":
            raise ExecutionStateConflictError(
                "corrupt_state", f"execution {e.execution_id} failed because its stored state is unreadable; "
                "a redrive would run on state Loom cannot trust. Start a new execution", e.status.value)
        pins = functools.cache(read_pins(self.life.store, e.execution_id))  # read once, if at all
        onto = redrive_onto(self.life.registry, e, to_version, pins)
        target = onto.get("workflow_version")
        caps.refuse_redrive(e, self.life.settings,
                            None if target is None else self.life.registry.get(e.workflow, target))
        if onto and not is_code_first(e):
            self._refuse_mixed_branches(e, onto["workflow_version"], pins)
        # the step whose attempts failed it, if one did (not a sleep it stood in when its version went missing)
        failed = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == e.current_step
                       and r.kind != "compensation" and r.status is StepStatus.FAILED), None)
        version = onto.get("workflow_version", e.workflow_version)
        new = transitions.redriven_after_failure(e, self.life.clock.now(), self.life.lease_s(e.workflow, e.current_step,
                                                                                             version)).model_copy(update=onto)
        detail = {"step_index": e.current_step, "error": None if e.error is None else e.error.model_dump(),
                  **({"from_version": e.workflow_version, "to_version": version} if onto else {})}
        if failed is not None:
            detail.update(step_name=failed.name, attempts=failed.attempts)
        applied = self._commit(e, new, _Op("redrive", by, None, detail))
        if applied is None:
            now_e = self.get(execution_id)
            if now_e.status is not Status.FAILED:  # a redrive sent at the same time, or another change, won
                raise ExecutionStateConflictError(
                    "not_failed", f"execution {e.execution_id} is {now_e.status.value} now: another change came first "
                    f"(a redrive sent at the same time?); only a FAILED execution can be redriven", now_e.status.value)
            raise ExecutionStateConflictError("concurrent_change", f"execution {e.execution_id} changed meanwhile; "
                                              "read it again", e.status.value)
        self.life.metrics.add_metric("ExecutionsRedriven", "Count", 1)
        self._send(applied)
        return applied

    def _refuse_mixed_branches(self, e: Execution, version: int, pins: Callable[[], str | None]) -> None:
        """A redrive onto ``version`` keeps the failed step's branches that succeeded (they do not run again);
        when that version changed the fan-out itself, they would be handed on as its results: refused."""
        target = self.life.registry.get(e.workflow, version)
        step = target.steps[e.current_step]
        pin = pinned_step(self.life.registry, e, e.current_step, pins)
        if pin is None or "fanout" not in (pin.kind, step.kind.kind):
            return
        change = step_change(pin, step, target.step_prints[e.current_step])
        if change is None:
            return
        after: int | None = None
        while True:
            page = self.life.store.branches_page(e.execution_id, e.current_step, 100, after)
            branches = [b for b in page.records if isinstance(b, Branch)]
            kept = [b for b in branches if b.status is BranchStatus.SUCCEEDED and this_run(e, [b], "updated_at")]
            if kept:
                own = (f"without --to-version (version {e.workflow_version} is deployed)"
                       if e.workflow_version in self.life.registry.versions(e.workflow)
                       else f"on version {e.workflow_version} (deploy it again)")
                raise ExecutionStateConflictError("steps_differ", (
                    f"execution {e.execution_id} failed at step {e.current_step} {pin.name!r}, which version {version} "
                    f"{change}, and branch {kept[0].branch} of it already succeeded on version {e.workflow_version}: a "
                    f"redrive keeps such branches, so their results would pass for version {version}'s. Redrive it "
                    f"{own}, or start a new execution"), e.status.value)
            if page.after is None or not branches:
                return
            after = branches[-1].branch

    def wake(self, execution_id: str, by: str) -> Execution:
        """End the current sleep, retry backoff or event wait now (the operator's "skip the wait"; an
        event wait then times out: it takes its default, or fails and compensates)."""
        for _ in range(_RETRIES):
            e = self.get(execution_id)
            if e.status.is_terminal:
                raise ExecutionStateConflictError("execution_ended", f"execution {e.execution_id} already ended "
                                                  f"{e.status.value}: {_after_the_end(e)}", e.status.value)
            view = _View(self, e)
            kind = self.kinds.current(view.wf, e)
            wakeable = kind.on_wake(view) if kind is not None else e.timer is not None and e.timer.value != "lease"
            if not wakeable or e.cancel_requested:
                why = "" if kind is None or e.compensating or not kind.wake_refused else f": {kind.wake_refused}"
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is not sleeping, waiting to retry or waiting for an "
                    f"event (it is {_doing(e)}); there is nothing to skip{why}", e.status.value)
            now = self.life.clock.now()
            if e.next_wake_at is not None and e.next_wake_at <= now:
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is already due (since {e.next_wake_at.isoformat()}: an "
                    f"event it waits for came, an earlier wake, or its time came) and its delivery is on its way; "
                    "there is nothing to skip",
                    e.status.value)
            assert e.timer is not None and e.next_wake_at is not None
            applied = self._commit(e, transitions.woken(e, now), _Op("wake", by, None, {
                "was": e.timer.value, "due": format_ts(e.next_wake_at)}))
            if applied is not None:
                self._send(applied)
                return applied
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

    def send_event(self, execution_id: str, name: str, data: Any, by: str, event_id: str | None = None,
                   _callback: bool = False) -> EventSent:
        """Deliver an event to an execution: kept until a ``wait_for_event(name)`` step consumes it (sent
        early, it waits for the step), applied once per ``event_id``, and waking the execution at once
        if it is waiting for it. Refused for an ended execution (unless that id was sent before: then
        ``duplicate``), for a name its workflow never waits for, for data its wait's model refuses, and
        for ids reserved for callback tokens (``callback:...``)."""
        if not isinstance(name, str) or not EVENT_NAME_RE.fullmatch(name):
            raise InvalidRequestError(f"event name {name!r} is invalid: 1-64 characters from A-Z a-z 0-9 _ . -")
        if event_id is not None and (not isinstance(event_id, str) or not EVENT_ID_RE.fullmatch(event_id)):
            shown = repr(event_id) if not isinstance(event_id, str) or len(event_id) <= 140 else \
                f"{event_id[:100]!r}... ({len(event_id):,} characters)"
            raise InvalidRequestError(f"event_id {shown} is invalid: 1-128 characters from A-Z a-z 0-9 _ . : -")
        if event_id is not None and callbacks.is_reserved(event_id) and not _callback:
            raise InvalidRequestError(f"event_id {event_id!r} is reserved for callback tokens (ids starting with "
                                      f"{callbacks.CALLBACK_PREFIX!r}); choose another id, or complete the wait with "
                                      "POST /callbacks/{token}")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidRequestError(f"event data must be a JSON object (the wait's step keeps it in the "
                                      f"context under its name), got {type(data).__name__}")
        blob = codec.encode(data, "event data")
        self.life.check_size(f"event {name!r}", blob)
        e = self.get(execution_id)
        if e.status.is_terminal:
            if event_id is not None and self._sent(e, name, event_id):
                return EventSent(e.execution_id, name, event_id, "duplicate")
            raise ExecutionStateConflictError(
                "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; it waits for no "
                "event" + ("" if e.status is not Status.FAILED or e.compensated else
                           " (loom redrive resumes it at its failed step; send the event once it waits again)"),
                e.status.value)
        wf = self.definition(e)
        waits = None if wf is None else wf.waits()
        if wf is not None and waits is not None:
            if name not in waits and not _callback:  # a callback's wait is the one its token names
                raise ExecutionStateConflictError(
                    "unknown_event", f"workflow {e.workflow!r} never waits for an event named {name!r}; it waits "
                    "for: " + (", ".join(sorted(waits)) or "no events"), e.status.value)
        if wf is not None:
            self._check_model(wf, e, name, data)
        now = self.life.clock.now()
        record = EventRecord(name=name, event_id=event_id or uuid.uuid4().hex, data=data, sent_at=now, by=by,
                             run=e.run, expires_at=self.life.item_expiry(e, now))
        if not self.life.store.put_event(e.execution_id, record, legacy=e.layout == 1):
            return EventSent(e.execution_id, name, record.event_id, "duplicate")
        self.life.metrics.add_metric("EventsReceived", "Count", 1)
        for _ in range(_RETRIES):
            now_e = self.get(execution_id)
            if now_e.stamped_until != e.stamped_until and now_e.stamped_until is not None:
                # The execution's items were re-stamped while this event was written with the earlier TTL.
                self._quietly("stamp_items", lambda: self.life.store.stamp_items(e.execution_id, now_e.stamped_until),
                              now_e)
            e = now_e
            view = _View(self, e)
            if view.wf is None:
                if e.cancel_requested or self._wake_unreadable_wait(e):
                    return EventSent(e.execution_id, name, record.event_id, "buffered")
                continue
            kind = self.kinds.current(view.wf, e)
            # An operator's wake of this wait came first: it times out, and the event is kept for a later wait.
            if e.cancel_requested or e.wait_woken or kind is None or kind.waits_for(view) != name \
                    or not self._taken_next(view, record):
                return EventSent(e.execution_id, name, record.event_id, "buffered")
            applied = self._commit(e, transitions.woken(e, self.life.clock.now(), by_event=True))
            if applied is not None:
                self._quietly("send", lambda: self.life.send_at(applied), applied)
                return EventSent(e.execution_id, name, record.event_id, "delivered")
        # It kept changing: the event is kept, and the wait that reads it next consumes it.
        return EventSent(e.execution_id, name, record.event_id, "buffered")

    def _wake_unreadable_wait(self, e: Execution) -> bool:
        """An event for an execution waiting on a definition not deployed here (its version removed, or changed
        under it): which wait takes the event only a delivery can say, so the wait is woken as an event
        wakes it. Its worker takes the event, or fails the execution at once naming the problem, instead of
        leaving it waiting to its timeout. True once there is nothing more to do (also: no such wait, or it
        is already due); False when it changed meanwhile."""
        now = self.life.clock.now()
        if e.status is not Status.WAITING or e.timer is not Timer.EVENT or (
                e.next_wake_at is not None and e.next_wake_at <= now):
            return True
        applied = self._commit(e, transitions.woken(e, now, by_event=True))
        if applied is None:
            return False
        self._quietly("send", lambda: self.life.send_at(applied), applied)
        return True

    def complete_callback(self, token: str, data: Any, by: str) -> EventSent:
        """Complete the wait a callback token was issued for (``ctx.callback_token(event)``), once."""
        try:
            execution_id, step_index = callbacks.parse(token)
            e = self.get(execution_id)
            callbacks.verify(token, self.state(execution_id).execution.callback_secret)
        except (callbacks.InvalidCallbackTokenError, ExecutionNotFoundError, ValueError):
            raise CallbackNotFoundError() from None
        # A genuine token: which wait it completes is the definition's to say.
        wf = self.definition(e)
        if wf is None and e.status.is_terminal:  # answered as with the definition: used, or too late
            if any(isinstance(r, StepRecord) and r.step_index == step_index and r.kind == "event"
                   and r.status.value == "SUCCEEDED" for r in self.history_of(e)):
                raise ExecutionStateConflictError("callback_used", "the wait this token was issued for already ended; "
                                                  "a token completes its wait once", e.status.value)
            _, problem = resolve(self.life.registry, e, read_pins(self.life.store, e.execution_id))
            raise ExecutionStateConflictError("execution_ended", f"execution {e.execution_id} already ended "
                                              f"{e.status.value}" + ("" if problem is None else (
                                                  f" ({problem.code}); the token is not used up: deploy its "
                                                  "definition, redrive it, then send the token again")),
                                              e.status.value)
        if wf is None:
            _, problem = resolve(self.life.registry, e, read_pins(self.life.store, e.execution_id))
            why = problem.message if problem is not None else f"workflow {e.workflow!r} is not deployed here"
            raise ExecutionStateConflictError(
                problem.code if problem is not None else "workflow_version_missing",
                f"this callback token is genuine, but its execution cannot take it now: {why}. The token is "
                "not used up: send it again once the execution's definition is deployed", e.status.value)
        wait = wf.wait_step(step_index)
        if wait is None:
            raise CallbackNotFoundError()
        event_id = callbacks.event_id(step_index)
        used = "this callback token was used already; a token completes its wait once"
        if self._sent(e, wait.kind.event, event_id):
            raise ExecutionStateConflictError("callback_used", used, e.status.value)
        answered = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == step_index
                         and r.kind == "event" and r.status.value == "SUCCEEDED"), None)
        if answered is not None:
            how = f"event {answered.event_id!r}" if answered.event_id else "its default: its timeout passed or an operator woke it"
            raise ExecutionStateConflictError(
                "callback_used", f"the wait this token was issued for already ended (answered by {how}); a token "
                "completes only its own wait", e.status.value)
        sent = self.send_event(execution_id, wait.kind.event, data, by, event_id=event_id, _callback=True)
        if sent.outcome == "duplicate":
            raise ExecutionStateConflictError("callback_used", used, e.status.value)
        return sent

    # -- helpers ------------------------------------------------------------------------------------
    def _sent(self, e: Execution, name: str, event_id: str) -> bool:
        found = self.life.store.list_events(e.execution_id, name, legacy=e.layout == 1)
        return any(getattr(ev, "event_id", None) == event_id for ev in this_run(e, found, "sent_at"))

    def _check_model(self, wf: WorkflowDef, e: Execution, name: str, data: dict[str, Any]) -> None:
        """Refuse data that the model of the wait it is for (``wait_model_for``) refuses."""
        model = wait_model_for(wf, e, name)
        if model is None:
            return
        from pydantic import ValidationError

        try:
            model.model_validate(data)
        except ValidationError as exc:
            problems = field_problems(exc)
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            where = (f"the wait's model is {model.__module__}.{model.__qualname__}" if wf.code is not None
                     else "GET /workflows shows the event's JSON Schema (event_schema)")
            raise InvalidEventError(f"event {name!r} for workflow {wf.name!r} does not fit its wait's model: "
                                    f"{summary}; {where}", problems) from None

    def _taken_next(self, view: _View, record: EventRecord) -> bool:
        """Whether the wait the execution is at takes ``record`` when it resumes: it fits the wait's model (as
        far as one can be named here) and no event the wait takes first is pending (another of its name sent
        earlier, which already woke it, or this step's callback answer). Otherwise the send is ``buffered``:
        kept, and not taken by this wait now, which a ``delivered`` would claim."""
        e = view.execution
        model = None if view.wf is None else wait_model_for(view.wf, e, record.name)
        if model is not None and not fits_wait(model, record.data):
            return False  # the execution got to its wait after the send was checked: the wait passes it over
        at = e.code_position if view.wf is not None and view.wf.code is not None else None
        if model is None and at is not None and at.model:
            return True  # a model no send can find (UNNAMED_MODEL): which event fits, only the wait can say
        found = self.life.store.list_events(e.execution_id, record.name, legacy=e.layout == 1, limit=EVENT_READ_LIMIT)
        for event in pending(view.history(), this_run(e, found, "sent_at"), record.name, e.current_step):
            if event.event_id == record.event_id:
                return True
            if model is None or fits_wait(model, event.data):
                return False
        return False

    def _commit(self, old: Execution, new: Execution, op: _Op | None = None) -> Execution | None:
        """``old`` -> ``new``, with the operator's record of ``op`` in the same write (both or neither); None
        when another change came first."""
        record = None if op is None else lambda e: OperationRecord(  # noqa: E731 -- made from what is written
            op=op.op, by=op.by, at=e.updated_at, version=e.version, reason=op.reason, detail=op.detail, run=e.run,
            expires_at=self.life.item_expiry(e, e.updated_at))
        try:
            return self.life.commit(old, new, carry=False, operation=record)
        except TransitionConflictError:
            return None

    def _send(self, e: Execution) -> None:
        """The message that resumes ``e`` after an action's commit; a lost one is re-driven from the due index,
        so it never fails the action."""
        self._quietly("send", lambda: self.life.send_at(e), e)

    def _quietly(self, what: str, action: Callable[[], Any], e: Execution) -> None:
        try:
            action()
        except Exception as exc:
            log.warning(f"{what} after a committed operator action failed; the action stands", extra={
                "execution_id": e.execution_id, "workflow": e.workflow, "step": None, "step_index": e.current_step,
                "attempt": None, "error": f"{type(exc).__name__}: {exc}"})


def _after_the_end(e: Execution) -> str:
    """What an operator can do instead of waking an ended execution."""
    if e.status is not Status.FAILED:
        return "there is no wait left to skip"
    if e.compensated:
        return "its completed steps were undone (compensated), so it cannot be redriven; start a new execution"
    return "loom redrive resumes it at its failed step"


def _doing(e: Execution) -> str:
    if e.compensating:
        return f"undoing step {e.current_step}"
    if e.is_claimed:
        return f"running step {e.current_step}"
    return f"at step {e.current_step}, {e.status.value}"
