"""Events into executions: ``POST /executions/{id}/events/{name}`` (``EventSends.send_event``) and
``POST /callbacks/{token}`` (``complete_callback``). An event is kept until a wait of its name takes it,
applied once per event id, and wakes the execution when the wait it is at takes it; a send repeated after
one that died between keeping the event and waking the wait finishes that wake."""

from __future__ import annotations

import re
import uuid
from typing import Any

from . import callbacks, codec, transitions
from .errors import CallbackNotFoundError, ExecutionNotFoundError, ExecutionStateConflictError, InvalidEventError, InvalidRequestError
from .model import EventRecord, Execution, Status, StepRecord, Timer
from .operator_base import RETRIES, ActionBase, EventSent, View
from .rebuild import this_run
from .registry import EVENT_NAME_RE
from .step_reads import EVENT_READ_LIMIT
from .steps import WorkflowDef, field_problems
from .versions import read_pins, resolve
from .waiting_events import fits_wait, pending, wait_model_for

EVENT_ID_RE = re.compile(r"\A[A-Za-z0-9_.:-]{1,128}\Z")


class EventSends(ActionBase):
    """Sending events and completing callbacks (see the module docstring)."""

    def send_event(self, execution_id: str, name: str, data: Any, by: str, event_id: str | None = None) -> EventSent:
        """Deliver an event to an execution: kept until a ``wait_for_event(name)`` step consumes it (sent
        early, it waits for the step), applied once per ``event_id``, and waking the execution at once
        if it is waiting for it. Refused for an ended execution (unless that id was sent before: then
        ``duplicate``), for a name its workflow never waits for, for data its wait's model refuses, and
        for ids reserved for callback tokens (``callback:...``)."""
        return self._send_event(execution_id, name, data, by, event_id)[0]

    def _send_event(self, execution_id: str, name: str, data: Any, by: str, event_id: str | None = None,
                    callback: bool = False) -> tuple[EventSent, Execution | None]:
        """``send_event``, and the execution as the send last read or wrote it (None when it kept nothing new)."""
        if not isinstance(name, str) or not EVENT_NAME_RE.fullmatch(name):
            raise InvalidRequestError(f"event name {name!r} is invalid: 1-64 characters from A-Z a-z 0-9 _ . -")
        if event_id is not None and (not isinstance(event_id, str) or not EVENT_ID_RE.fullmatch(event_id)):
            shown = repr(event_id) if not isinstance(event_id, str) or len(event_id) <= 140 else \
                f"{event_id[:100]!r}... ({len(event_id):,} characters)"
            raise InvalidRequestError(f"event_id {shown} is invalid: 1-128 characters from A-Z a-z 0-9 _ . : -")
        if event_id is not None and callbacks.is_reserved(event_id) and not callback:
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
                return EventSent(e.execution_id, name, event_id, "duplicate"), None
            raise ExecutionStateConflictError(
                "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; it waits for no "
                "event" + ("" if e.status is not Status.FAILED or e.compensated else
                           " (loom redrive resumes it at its failed step; send the event once it waits again)"),
                e.status.value)
        wf = self.definition(e)
        waits = None if wf is None else wf.waits()
        if wf is not None and waits is not None:
            if name not in waits and not callback:  # a callback's wait is the one its token names
                raise ExecutionStateConflictError(
                    "unknown_event", f"workflow {e.workflow!r} never waits for an event named {name!r}; it waits "
                    "for: " + (", ".join(sorted(waits)) or "no events"), e.status.value)
        if e.compensating or e.cancel_requested:
            if event_id is not None and self._sent(e, name, event_id):
                return EventSent(e.execution_id, name, event_id, "duplicate"), None
            raise ExecutionStateConflictError("execution_ended", _ending(e), e.status.value)
        if wf is not None:
            self._check_model(wf, e, name, data)
        now = self.life.clock.now()
        record = EventRecord(name=name, event_id=event_id or uuid.uuid4().hex, data=data, sent_at=now, by=by,
                             run=e.run, expires_at=self.life.item_expiry(e, now))
        if not self.life.store.put_event(e.execution_id, record, legacy=e.layout == 1):
            kept = self._kept(e, name, record.event_id)
            if kept is not None:  # the send that kept it may have died before it woke the wait
                self._wake_for(e, kept, repeated=True)
            return EventSent(e.execution_id, name, record.event_id, "duplicate"), None
        self.life.metrics.add_metric("EventsReceived", "Count", 1)
        outcome, seen = self._wake_for(e, record)
        if outcome == "buffered" and _takes_no_event(seen) and not self._taken(seen, record.event_id):
            # It ended (a cancel, a failure, its return) between the check above and the keep, and no wait took it.
            raise ExecutionStateConflictError("execution_ended", _ended_as_it_came(seen), seen.status.value)
        return EventSent(e.execution_id, name, record.event_id, outcome), seen

    def _wake_for(self, e: Execution, record: EventRecord, repeated: bool = False) -> tuple[str, Execution]:
        """Wake the execution when the wait it is at takes ``record`` next: ``delivered``; else ``buffered``
        (kept for a later wait); and the execution as last read or written. ``repeated``: an event kept by an
        earlier send of its id, which may have died between keeping it and this wake: a wait already woken or
        due is left as it is."""
        for _ in range(RETRIES):
            now_e = self.get(e.execution_id)
            record = self._stamped(now_e, record)
            e = now_e
            if repeated and (e.status is not Status.WAITING or e.timer is not Timer.EVENT or e.next_wake_at is None
                             or e.next_wake_at <= self.life.clock.now()):
                return "buffered", e
            view = View(self, e)
            if view.wf is None:
                if e.cancel_requested or self._wake_unreadable_wait(e):
                    return "buffered", e
                continue
            kind = self.kinds.current(view.wf, e)
            # An operator's wake of this wait came first: it times out, and the event is kept for a later wait.
            taken = None if e.cancel_requested or e.wait_woken or kind is None or kind.waits_for(view) != record.name \
                else self._taken_next(view, record)
            now = self.life.clock.now()
            if taken is None or (taken == "other" and (e.next_wake_at is None or e.next_wake_at <= now)):
                return "buffered", e  # nothing it takes, or what it takes first already woke it
            applied = self._commit(e, transitions.woken(e, now, by_event=True))
            if applied is not None:
                self._send(applied)
                return ("delivered" if taken == "this" else "buffered"), applied
        # It kept changing: the event is kept, and the wait that reads it next consumes it.
        return "buffered", e

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
        if not e.status.is_terminal and (e.compensating or e.cancel_requested):
            raise ExecutionStateConflictError("execution_ended", _ending(e), e.status.value)
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
        kept = self._kept(e, wait.kind.event, event_id)
        if kept is not None:  # used, unless its use died between keeping the answer and waking the wait
            if self._wake_for(e, kept, repeated=True)[0] != "delivered":
                raise ExecutionStateConflictError("callback_used", used, e.status.value)
            return EventSent(e.execution_id, wait.kind.event, event_id, "delivered")
        answered = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == step_index
                         and r.kind == "event" and r.status.value == "SUCCEEDED"), None)
        if answered is not None:
            how = f"event {answered.event_id!r}" if answered.event_id else "its default: its timeout passed or an operator woke it"
            raise ExecutionStateConflictError(
                "callback_used", f"the wait this token was issued for already ended (answered by {how}); a token "
                "completes only its own wait", e.status.value)
        if _woken_at(e, step_index):
            raise ExecutionStateConflictError(
                "callback_used", "the wait this token was issued for was ended by an operator's wake (loom wake) "
                "before this answer came: nothing was kept. The wait ends as the wake said (its default, or it fails "
                "event_timeout); if it waits again under its retry policy, this token completes that wait: send it "
                "again then", e.status.value)
        sent, seen = self._send_event(execution_id, wait.kind.event, data, by, event_id=event_id, callback=True)
        if sent.outcome == "duplicate":
            raise ExecutionStateConflictError("callback_used", used, e.status.value)
        if sent.outcome == "buffered" and seen is not None and _woken_at(seen, step_index):
            # The wake committed between keeping the answer and the write that would have woken the wait for it.
            raise ExecutionStateConflictError(
                "callback_used", "an operator's wake (loom wake) ended the wait this token was issued for as this "
                "answer came: the wait ends as the wake said (its default, or it fails event_timeout). The answer "
                "is kept: if the wait waits again under its retry policy, it takes it then", seen.status.value)
        return sent

    # -- helpers ------------------------------------------------------------------------------------
    def _taken(self, e: Execution, event_id: str) -> bool:
        """A wait of ``e``'s run took the event ``event_id`` (its record names it)."""
        return any(isinstance(r, StepRecord) and r.event_id == event_id for r in self.history_of(e))

    def _sent(self, e: Execution, name: str, event_id: str) -> bool:
        kept = self._kept(e, name, event_id)
        if kept is not None and not e.status.is_terminal:
            self._stamped(e, kept)
        return kept is not None

    def _stamped(self, e: Execution, record: EventRecord) -> EventRecord:
        """``record`` (kept for live ``e``) with no TTL below ``e``'s re-stamp: the execution's items were re-stamped
        while it was written with the TTL of an earlier view, by this send or by an earlier send of its id that
        died before it looked again (its sender, getting no answer, sends it again)."""
        until = e.stamped_until
        if until is None or (record.expires_at is not None
                             and int(record.expires_at.timestamp()) >= int(until.timestamp())):  # whole seconds
            return record
        self._quietly("stamp_items", lambda: self.life.store.stamp_items(e.execution_id, until), e)
        return record.model_copy(update={"expires_at": until})

    def _kept(self, e: Execution, name: str, event_id: str) -> EventRecord | None:
        """The event of ``name`` and ``event_id`` this run keeps, if any."""
        found = self.life.store.list_events(e.execution_id, name, legacy=e.layout == 1)
        return next((ev for ev in this_run(e, found, "sent_at")
                     if isinstance(ev, EventRecord) and ev.event_id == event_id), None)

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

    def _taken_next(self, view: View, record: EventRecord) -> str | None:
        """Which pending event the wait the execution is at takes when it resumes, as far as one can be named
        here: ``this`` (``record``: it fits the wait's model, and no event the wait takes first is pending),
        ``other`` (one it takes first: another of its name sent earlier, or this step's callback answer, whose
        own send may have died before its wake), or None (none fits: the wait waits on). Only ``this`` makes
        the send ``delivered``."""
        e = view.execution
        model = None if view.wf is None else wait_model_for(view.wf, e, record.name)
        at = e.code_position if view.wf is not None and view.wf.code is not None else None
        if model is None and at is not None and at.model:
            return "this"  # a model no send can find (UNNAMED_MODEL): which event fits, only the wait can say
        found = self.life.store.list_events(e.execution_id, record.name, legacy=e.layout == 1, limit=EVENT_READ_LIMIT)
        for event in pending(view.history(), this_run(e, found, "sent_at"), record.name, e.current_step):
            fits = model is None or fits_wait(model, event.data)
            if event.event_id == record.event_id and fits:
                return "this"
            if fits:
                return "other"
        return None
        return False


def _woken_at(e: Execution, step_index: int) -> bool:
    """An operator's wake ended the wait at ``step_index``, and its delivery has not run yet."""
    return e.status is Status.WAITING and e.wait_woken and e.current_step == step_index


def _takes_no_event(e: Execution) -> bool:
    """No wait of ``e`` runs again: being cancelled or undoing its steps, or ended for good (a FAILED execution
    that did not compensate may be redriven to its wait)."""
    return e.cancel_requested or e.compensating or (
        e.status.is_terminal and not (e.status is Status.FAILED and e.compensated is None))


def _why_it_ends(e: Any) -> str:
    """What ends ``e``, as the refusals of an answer say it: its cancel, else its failure (or its return)."""
    if e.cancel_requested or e.cancelled_by:
        return "was cancelled"
    return "completed" if e.status is Status.COMPLETED else "failed"


def _ended_as_it_came(e: Execution) -> str:
    return (f"execution {e.execution_id} {_why_it_ends(e)} as this answer came: no wait of it runs again, so nothing "
            "takes it (the answer was kept just before that was seen; sending it again changes nothing)")


def _ending(e: Any) -> str:
    """Why a live execution that a cancel or a failure is ending takes no event: no wait of it runs again."""
    how = "undoing its completed steps" if e.compensating else "once the attempt that holds its step ends"
    return (f"execution {e.execution_id} {_why_it_ends(e)} and is ending ({how}): no wait of it runs again, so it "
            "takes no event; nothing was kept")
