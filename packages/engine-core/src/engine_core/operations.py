"""What an operator does to executions: list and search, cancel, redrive, wake, and read history in pages.

Each action is one conditional write on the execution item (so it races safely with workers and the
sweeper), is kept in the execution's history as an operation record naming who did it, and refuses
with :class:`ExecutionStateConflictError` (an HTTP 409) when it does not apply, writing nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from . import callbacks, codec, transitions
from .errors import (
    ExecutionNotFoundError,
    ExecutionStateConflictError,
    InvalidRequestError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .lifecycle import Lifecycle
from .model import EventRecord, Execution, ListEntry, OperationRecord, Status, StepRecord, Timer
from .ports import Transition
from .registry import EVENT_NAME_RE

MAX_PAGE = 100
LIST_STATUSES = ("RUNNING", "SLEEPING", "WAITING", "LIVE", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
_LIVE = ("RUNNING", "SLEEPING", "WAITING", "LIVE")
EVENT_ID_RE = re.compile(r"\A[A-Za-z0-9_.:-]{1,128}\Z")
_RETRIES = 5


def encode_token(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except Exception:
        raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged") from None


def check_limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequestError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


@dataclass(frozen=True)
class EventSent:
    execution_id: str
    event: str
    event_id: str
    outcome: str
    """``delivered`` (the execution was waiting for it and resumes now), ``buffered`` (kept until a wait
    of that name consumes it) or ``duplicate`` (that event id was sent before; nothing changed)."""

    def as_dict(self) -> dict[str, str]:
        return {"execution_id": self.execution_id, "event": self.event, "event_id": self.event_id,
                "outcome": self.outcome}


@dataclass(frozen=True)
class ListResult:
    executions: list[ListEntry]
    next_token: str | None


class Operator:
    """The operator's actions over one lifecycle (the engine's): see the module docstring."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.life: Lifecycle = engine.life

    # -- reads --------------------------------------------------------------------------------------
    def list(self, *, workflow: str | None = None, status: str | None = None, started_after: dt.datetime | None = None,
             started_before: dt.datetime | None = None, limit: int = 20, next_token: str | None = None) -> ListResult:
        """Executions newest first. RUNNING and SLEEPING both match live executions (the index knows
        only live or ended; the execution item says which)."""
        check_limit(limit)
        if status is not None and status not in LIST_STATUSES:
            raise InvalidRequestError(f"status must be one of {', '.join(LIST_STATUSES)}, got {status!r}")
        wanted = None if status is None else ("LIVE" if status in _LIVE else status)
        cursor = None if next_token is None else decode_token(next_token)
        if cursor is not None and not self.life.store.valid_list_cursor(cursor):
            raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged")
        found: list[ListEntry] = []
        scanned = 0
        while len(found) < limit:
            page = self.life.store.query_list(limit=MAX_PAGE, cursor=cursor, created_after=started_after,
                                              created_before=started_before)
            scanned += len(page.entries)
            for entry in page.entries:
                if (workflow is None or entry.workflow == workflow) and (wanted is None or entry.status == wanted):
                    found.append(entry)
                    if len(found) == limit:
                        cursor = self.life.store.list_cursor(entry)
                        break
            else:
                cursor = page.cursor
                if cursor is None:
                    break
                continue
            break
        more = cursor is not None and len(found) == limit
        return ListResult(found, encode_token(cursor) if more else None)

    def history_page(self, execution_id: str, limit: int = 50, next_token: str | None = None):
        """One page of step records (and, with the first page, every operation record)."""
        check_limit(limit)
        e = self.engine.get(execution_id)
        after = None if next_token is None else decode_token(next_token)
        if after is not None and not isinstance(after, str):
            raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged")
        page = self.life.store.history_page(e.execution_id, limit, after)
        records = [r for r in page.records if not isinstance(r, StepRecord) or _of_run(r, e)]
        records = self._with_branches(e, records, last_page=page.after is None)
        operations = self.operations(e) if next_token is None else []
        return records, operations, (encode_token(page.after) if page.after else None)

    def events(self, execution_id: str) -> tuple[list[Any], dict[str, int]]:
        """Events sent to the execution (EventRecord or CorruptRecord, in key order), and which wait step
        consumed each (by event id; an event not in it is still kept for a wait)."""
        e = self.engine.get(execution_id)
        events = [ev for ev in self.life.store.list_events(e.execution_id)
                  if not isinstance(ev, EventRecord) or ev.sent_at >= e.created_at]
        consumed = {r.event_id: r.step_index for r in self.engine.history(e.execution_id)
                    if isinstance(r, StepRecord) and r.event_id}
        return events, consumed

    def operations(self, e: Execution) -> list:
        return [op for op in self.life.store.operations(e.execution_id)
                if not isinstance(op, OperationRecord) or op.at >= e.created_at]

    # -- actions ------------------------------------------------------------------------------------
    def cancel(self, execution_id: str, by: str, reason: str | None = None) -> Execution:
        """End a live execution CANCELLED. Cancelling a cancelled one returns it (idempotent); any
        other ended execution is a conflict naming its status."""
        for _ in range(_RETRIES):
            e = self.engine.get(execution_id)
            if e.status is Status.CANCELLED:
                return e
            if e.status.is_terminal:
                raise ExecutionStateConflictError(
                    "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; only a live "
                    "execution can be cancelled", e.status.value)
            if e.compensating:
                return e  # already undoing its steps (after a failure or an earlier cancel)
            now = self.life.clock.now()
            first = self._first_to_undo(e)
            if first is not None:
                # A saga: the completed steps are undone first; it ends CANCELLED with compensated set.
                new = transitions.compensation_started(e, now, None, first, self.life.lease_s(e.workflow, first),
                                                       cancelled_by=by, cancel_reason=reason)
                if self._commit(e, new):
                    self._record(new, "cancel", by, reason, {"compensate_from": first})
                    self.life.send_at(new)
                    return new
                continue
            new = transitions.cancelled(e, now, by, reason, self.life.retention, self.life.finalize_grace_s(e))
            if self._commit(e, new):
                self._record(new, "cancel", by, reason)
                self.life.metrics.add_metric("ExecutionsCancelled", "Count", 1)
                self.life.finalize(new)
                return new
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

    def redrive(self, execution_id: str, by: str) -> Execution:
        """Resume a FAILED execution from its failed step with fresh attempts, under the same id."""
        e = self.engine.get(execution_id)
        if e.status is not Status.FAILED:
            raise ExecutionStateConflictError(
                "not_failed", f"execution {e.execution_id} is {e.status.value}; only a FAILED execution can be "
                "redriven", e.status.value)
        if e.compensated is not None:
            raise ExecutionStateConflictError(
                "compensated", f"execution {e.execution_id} undid its completed steps after the failure "
                "(compensation ran); resuming it would act on undone work. Start a new execution", e.status.value)
        if e.error is not None and e.error.code == "corrupt_state":
            raise ExecutionStateConflictError(
                "corrupt_state", f"execution {e.execution_id} failed because its stored state is unreadable; "
                "a redrive would run on state Loom cannot trust. Start a new execution", e.status.value)
        try:
            wf = self.life.registry.get(e.workflow)
        except UnknownWorkflowError:
            wf = None
        if wf is None or wf.fingerprint != e.fingerprint:
            raise ExecutionStateConflictError(
                "definition_changed", f"workflow {e.workflow!r} is not deployed with the step list this execution "
                f"started with (fingerprint {e.fingerprint}); redriving would run the wrong step. Deploy that "
                "definition again, or start a new execution", e.status.value)
        failed = next((r for r in self.life.store.history(e.execution_id)
                       if isinstance(r, StepRecord) and r.step_index == e.current_step), None)
        new = transitions.redriven_after_failure(e, self.life.clock.now(), self.life.lease_s(e.workflow, e.current_step))
        if not self._commit(e, new):
            raise ExecutionStateConflictError("concurrent_change", f"execution {e.execution_id} changed meanwhile; "
                                              "read it again", e.status.value)
        detail = {"step_index": e.current_step, "error": None if e.error is None else e.error.model_dump()}
        if failed is not None:
            detail.update(step_name=failed.name, attempts=failed.attempts)
        self._record(new, "redrive", by, None, detail)
        self.life.metrics.add_metric("ExecutionsRedriven", "Count", 1)
        self.life.send_at(new)
        return new

    def wake(self, execution_id: str, by: str) -> Execution:
        """End the current sleep or retry backoff now (the operator's "skip the wait")."""
        for _ in range(_RETRIES):
            e = self.engine.get(execution_id)
            if e.status.is_terminal:
                raise ExecutionStateConflictError(
                    "execution_ended", f"execution {e.execution_id} already ended {e.status.value}", e.status.value)
            if e.timer not in (Timer.SLEEP, Timer.RETRY, Timer.EVENT):
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is not sleeping, waiting to retry or waiting for an "
                    f"event (it is running step {e.current_step}); there is nothing to skip", e.status.value)
            new = transitions.woken(e, self.life.clock.now())
            if self._commit(e, new):
                self._record(new, "wake", by, None, {"was": e.timer.value, "due": e.next_wake_at.isoformat()})
                self.life.send_at(new)
                return new
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

    def send_event(self, execution_id: str, name: str, data: Any, by: str, event_id: str | None = None) -> EventSent:
        """Deliver an event to an execution: kept until a ``wait_for_event(name)`` step consumes it (sent
        early, it waits for the step), applied once per ``event_id``, and waking the execution at once
        if it is waiting for it. Refused for an ended execution and for a name its workflow never waits for."""
        if not isinstance(name, str) or not EVENT_NAME_RE.fullmatch(name):
            raise InvalidRequestError(f"event name {name!r} is invalid: 1-64 characters from A-Z a-z 0-9 _ . -")
        if event_id is not None and (not isinstance(event_id, str) or not EVENT_ID_RE.fullmatch(event_id)):
            raise InvalidRequestError(f"event_id {event_id!r} is invalid: 1-128 characters from A-Z a-z 0-9 _ . : -")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidRequestError(f"event data must be a JSON object (it is merged into the context), got "
                                      f"{type(data).__name__}")
        blob = codec.encode(data, "event data")
        self.engine._check_size(f"event {name!r}", blob)
        e = self.engine.get(execution_id)
        if e.status.is_terminal:
            raise ExecutionStateConflictError(
                "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; it waits for no "
                "event", e.status.value)
        waits = self._waits(e)
        if waits is not None and name not in waits:
            raise ExecutionStateConflictError(
                "unknown_event", f"workflow {e.workflow!r} never waits for an event named {name!r}; it waits for: "
                + (", ".join(sorted(waits)) or "no events"), e.status.value)
        record = EventRecord(name=name, event_id=event_id or uuid.uuid4().hex, data=data, sent_at=self.life.clock.now(),
                             by=by)
        if not self.life.store.put_event(e.execution_id, record):
            return EventSent(e.execution_id, name, record.event_id, "duplicate")
        self.life.metrics.add_metric("EventsReceived", "Count", 1)
        for _ in range(_RETRIES):
            e = self.engine.get(execution_id)
            if not (e.status is Status.WAITING and self._waiting_for(e) == name):
                return EventSent(e.execution_id, name, record.event_id, "buffered")
            new = transitions.woken(e, self.life.clock.now())
            if self._commit(e, new):
                self.life.send_at(new)
                return EventSent(e.execution_id, name, record.event_id, "delivered")
        # It kept changing: the event is kept, and the wait that reads it next consumes it.
        return EventSent(e.execution_id, name, record.event_id, "buffered")

    def complete_callback(self, token: str, data: Any, by: str) -> EventSent:
        """Complete the wait a callback token was issued for (``ctx.callback_token(event)``), once."""
        from .errors import CallbackNotFoundError

        try:
            execution_id, step_index = callbacks.parse(token)
            state = self.engine.state(execution_id)
            callbacks.verify(token, state.execution.callback_secret)
            wf = self.life.registry.get(state.execution.workflow)
            kind = wf.steps[step_index].kind
            if kind.kind != "event":
                raise ValueError("not a wait step")
        except (callbacks.InvalidCallbackTokenError, ExecutionNotFoundError, UnknownWorkflowError, IndexError,
                ValueError):
            raise CallbackNotFoundError() from None
        used = ExecutionStateConflictError(
            "callback_used", "this callback token was used already; a token completes its wait once",
            state.execution.status.value)
        event_id = callbacks.event_id(step_index)
        if any(getattr(ev, "event_id", None) == event_id for ev in state.events):
            raise used  # checked first: a used token of an ended execution is "used", not "ended"
        sent = self.send_event(execution_id, kind.event, data, by, event_id=event_id)
        if sent.outcome == "duplicate":
            raise used
        return sent

    def _waits(self, e: Execution) -> set[str] | None:
        """The event names the execution's workflow waits for (None: the workflow is not deployed here)."""
        try:
            wf = self.life.registry.get(e.workflow)
        except UnknownWorkflowError:
            return None
        return {s.kind.event for s in wf.steps if s.kind.kind == "event"}

    def _waiting_for(self, e: Execution) -> str | None:
        try:
            wf = self.life.registry.get(e.workflow)
        except UnknownWorkflowError:
            return None
        if e.current_step >= len(wf.steps) or wf.steps[e.current_step].kind.kind != "event":
            return None
        return wf.steps[e.current_step].kind.event

    def _first_to_undo(self, e: Execution) -> int | None:
        try:
            wf = self.life.registry.get(e.workflow)
        except UnknownWorkflowError:
            return None
        if not any(s.compensate for s in wf.steps[:e.current_step]) or wf.fingerprint != e.fingerprint:
            return None
        from .kinds.compensation import first_to_undo

        return first_to_undo(wf, self.life.store.history(e.execution_id), e.current_step)

    # -- helpers ------------------------------------------------------------------------------------
    def _commit(self, old: Execution, new: Execution) -> bool:
        try:
            self.life.store.commit(Transition(old.current_step, old.version, new))
        except TransitionConflictError:
            return False
        return True

    def _record(self, e: Execution, op: str, by: str, reason: str | None, detail: dict | None = None) -> None:
        self.life.store.put_operation(e.execution_id, OperationRecord(
            op=op, by=by, at=e.updated_at, version=e.version, reason=reason, detail=detail or {}))

    def _with_branches(self, e: Execution, records: list, last_page: bool) -> list:
        """Each parallel or map step's branches (``model.Branch``), listed right after its record; those of
        the step fanning out now (which has no record yet) after the last page's records."""
        try:
            wf = self.life.registry.get(e.workflow)
        except UnknownWorkflowError:
            wf = None

        def fans_out(index: int) -> bool:
            return wf is not None and index < len(wf.steps) and wf.steps[index].kind.kind == "fanout"

        def branches(index: int) -> list:
            return [b for b in self.life.store.branches(e.execution_id, index)
                    if not hasattr(b, "updated_at") or b.updated_at >= e.created_at]

        out, shown = [], set()
        for r in records:
            out.append(r)
            if isinstance(r, StepRecord) and r.kind != "compensation" and r.step_index not in shown \
                    and (r.kind == "fanout" or fans_out(r.step_index)):
                shown.add(r.step_index)
                out.extend(branches(r.step_index))
        current = e.current_step
        if last_page and not e.status.is_terminal and not e.compensating and current not in shown and fans_out(current):
            out.extend(branches(current))
        return out


def _of_run(r: StepRecord, e: Execution) -> bool:
    times = [t for t in (r.started_at, r.finished_at) if t is not None]
    return not times or max(times) >= e.created_at
