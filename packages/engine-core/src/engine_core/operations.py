"""What an operator does to executions: list and search, cancel, redrive, wake, send an event, complete a
callback, and read history in pages.

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

import base64
import datetime as dt
import json
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from . import callbacks, codec, transitions
from .ports import PAGE_BYTES
from .errors import (
    CallbackNotFoundError,
    ExecutionNotFoundError,
    ExecutionStateConflictError,
    InvalidEventError,
    InvalidRequestError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .kinds import KindTable
from .lifecycle import Lifecycle
from .model import Branch, CorruptRecord, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, Status, StepRecord
from .rebuild import this_run
from .registry import EVENT_NAME_RE
from .durable.plan import code_plan
from .steps import StepDef, WorkflowDef, field_problems
from .step_run import this_run_state
from .versions import pinned_definition, read_pins, redrive_onto

log = logging.getLogger("engine_core")
MAX_PAGE = 100
MAX_INDEX_PAGES = 5
"""A list request reads at most this many pages of the list index (500 entries): a filter matching few
executions answers with fewer than ``limit`` and a ``next_token``, never a read of the whole index."""
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


class HistoryView(NamedTuple):
    """One page of an execution's history (``Operator.history_page``)."""

    records: list[Any]
    """Step records, each parallel or map step's branches right after it (StepRecord, Branch, CorruptRecord)."""
    next_token: str | None
    operations: list[Any]
    """The first page of the operator's actions (only with the first history page)."""
    operations_next_token: str | None
    events: list[Any]
    """The first page of the events sent to the execution (only with the first history page)."""
    events_next_token: str | None
    ledger: Any = None
    """The execution's cost ledger (only with the first history page)."""


class _Page:
    """Entries of a history page, within its count and its byte budget."""

    def __init__(self, limit: int):
        self.limit, self.items, self.size = limit, [], 0

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit or self.size >= PAGE_BYTES

    @property
    def room(self) -> int:
        return max(1, self.limit - len(self.items))

    def add(self, item: Any) -> None:
        self.items.append(item)
        self.size += len(item.model_dump_json())

    def shows_step(self, index: int) -> bool:
        return any(isinstance(r, StepRecord) and r.step_index == index and r.kind != "compensation" for r in self.items)


def _fans_out(wf: WorkflowDef | None, r: Any) -> bool:
    if not isinstance(r, StepRecord) or r.kind == "compensation":
        return False
    if r.kind == "fanout":
        return True
    return wf is not None and r.step_index < len(wf.steps) and wf.steps[r.step_index].kind.kind == "fanout"


def _history_cursor(token: str | None) -> dict:
    if token is None:
        return {"after": None}
    value = decode_token(token)
    if isinstance(value, str):  # a token from engine-core before 0.3: the sort key after which to go on
        return {"after": value}
    if not isinstance(value, dict) or "after" not in value or not set(value) <= {"after", "branch_of", "branch", "tail"} \
            or not isinstance(value.get("after"), (str, type(None))) or not all(
            isinstance(value.get(k, 0), int) and not isinstance(value.get(k, 0), bool) for k in ("branch_of", "branch")):
        raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged")
    return value


def _sort_key_token(token: str | None) -> str | None:
    if token is None:
        return None
    value = decode_token(token)
    if not isinstance(value, str):
        raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged")
    return value


class ListResult(NamedTuple):
    executions: list[ListEntry]
    next_token: str | None


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


class Operator:
    """The operator's actions over one lifecycle (the engine's): see the module docstring."""

    def __init__(self, life: Lifecycle, kinds: KindTable):
        self.life, self.kinds = life, kinds

    # -- reads --------------------------------------------------------------------------------------
    def get(self, execution_id: str) -> Execution:
        """The execution, or ExecutionNotFoundError (also for malformed ids and expired items)."""
        e = self.life.store.load(_uuid(execution_id))
        if e is None or e.is_expired(self.life.clock.now()):
            raise ExecutionNotFoundError(execution_id)
        return e

    def state(self, execution_id: str) -> ExecutionState:
        state = self.life.store.load_state(_uuid(execution_id))
        if state is None or state.execution.is_expired(self.life.clock.now()):
            raise ExecutionNotFoundError(execution_id)
        return this_run_state(state)

    def history(self, execution_id: str) -> list[Any]:
        return self.history_of(self.get(execution_id))

    def history_of(self, e: Execution) -> list[Any]:
        return this_run(e, self.life.store.history(e.execution_id), "finished_at")

    def definition(self, e: Execution) -> WorkflowDef | None:
        """The deployed definition the execution runs on; None when it is not deployed here or changed."""
        wf = pinned_definition(self.life.registry, e, read_pins(self.life.store, e.execution_id))
        if wf is None:
            return None
        if wf.code is not None:  # its positions: the history's, and the current one's description
            return code_plan(wf, e, lambda: self.history_of(e))
        return wf

    def list(self, *, workflow: str | None = None, status: str | None = None, started_after: dt.datetime | None = None,
             started_before: dt.datetime | None = None, limit: int = 20, next_token: str | None = None) -> ListResult:
        """Executions newest first, each with its real status. The list index changes only when an
        execution starts or ends (LIVE until then), so a live entry's status (RUNNING, SLEEPING or
        WAITING) is read from the execution items, one batched read per index page. A filter that
        matches little reads at most ``MAX_INDEX_PAGES`` index pages, then answers with what it found
        and a ``next_token`` (fewer than ``limit``, even none)."""
        check_limit(limit)
        if status is not None and status not in LIST_STATUSES:
            raise InvalidRequestError(f"status must be one of {', '.join(LIST_STATUSES)}, got {status!r}")
        cursor = None if next_token is None else decode_token(next_token)
        if cursor is not None and not self.life.store.valid_list_cursor(cursor):
            raise InvalidRequestError("next_token is not a token this API returned; pass it back unchanged")
        found: list[ListEntry] = []
        for _ in range(MAX_INDEX_PAGES):
            page = self.life.store.query_list(limit=MAX_PAGE, cursor=cursor, created_after=started_after,
                                              created_before=started_before)
            entries = [x for x in page.entries if workflow is None or x.workflow == workflow]
            if status is None or status in _LIVE:
                entries = self._with_live_status(entries)
            matching = [x for x in entries if _status_matches(x.status, status)]
            room = limit - len(found)
            found += matching[:room]
            if len(matching) > room or (len(matching) == room and page.cursor is not None):
                return ListResult(found, encode_token(self.life.store.list_cursor(found[-1])))
            cursor = page.cursor
            if cursor is None:
                return ListResult(found, None)
        return ListResult(found, encode_token(cursor))

    def _with_live_status(self, entries: list[ListEntry]) -> list[ListEntry]:
        """Live entries (LIVE in the index) with the status their execution item holds now."""
        live = [x.execution_id for x in entries if x.status == "LIVE"]
        if not live:
            return entries
        now = self.life.store.load_statuses(live)
        return [x.model_copy(update={"status": now.get(x.execution_id, x.status)}) if x.status == "LIVE" else x
                for x in entries]

    def history_page(self, execution_id: str, limit: int = 50, next_token: str | None = None) -> HistoryView:
        """One page of the history: step records in order, each parallel or map step's branches right
        after its record (those of the step fanning out now after the last record). A page holds at most
        ``limit`` entries and about ``PAGE_BYTES`` of them (a Function URL answer is capped at 6 MB);
        ``next_token`` resumes it, inside a step's branches if need be. The first page also carries the
        first page of the operator's actions and of the events, each with a token for its own route."""
        check_limit(limit)
        e = self.get(execution_id)
        cursor = _history_cursor(next_token)
        page, wf = _Page(limit), self.definition(e)
        after = cursor["after"]
        if cursor.get("branch_of") is not None:  # inside a step's branches
            cut = self._add_branches(e, cursor["branch_of"], cursor.get("branch", 0), page)
            if cut is not None:
                return self._view(e, page, {**cursor, "branch": cut}, next_token)
            if cursor.get("tail"):
                return self._view(e, page, None, next_token)
        while True:
            stored = self.life.store.history_page(e.execution_id, page.room, after)
            for record, key in zip(stored.records, stored.keys):
                if page.full:
                    return self._view(e, page, {"after": after}, next_token)
                after = key
                if isinstance(record, StepRecord) and not this_run(e, [record], "finished_at"):
                    continue  # an earlier run's, waiting for its TTL
                page.add(record)
                if _fans_out(wf, record):
                    cut = self._add_branches(e, record.step_index, 0, page)
                    if cut is not None:
                        return self._view(e, page, {"after": after, "branch_of": record.step_index, "branch": cut},
                                          next_token)
            if stored.after is None:
                break
            if page.full:
                return self._view(e, page, {"after": after}, next_token)
        current = e.current_step
        if not e.status.is_terminal and not e.compensating and wf is not None and current < len(wf.steps) \
                and wf.steps[current].kind.kind == "fanout" and not page.shows_step(current):
            cut = self._add_branches(e, current, 0, page)
            if cut is not None:
                return self._view(e, page, {"after": after, "branch_of": current, "branch": cut, "tail": True},
                                  next_token)
        return self._view(e, page, None, next_token)

    def _add_branches(self, e: Execution, step_index: int, start: int, page: _Page) -> int | None:
        """Add the step's branches numbered ``start`` on while the page has room: the number to resume at,
        or None once every branch is on a page."""
        after = None if start == 0 else start - 1
        while True:
            if page.full:
                return start if after is None else after + 1
            stored = self.life.store.branches_page(e.execution_id, step_index, page.room, after)
            for b in stored.records:
                number = b.branch if isinstance(b, Branch) else (0 if after is None else after + 1)
                if page.full:
                    return number
                after = number
                if not isinstance(b, Branch) or this_run(e, [b], "updated_at"):
                    page.add(b)
            if stored.after is None:
                return None

    def _view(self, e: Execution, page: _Page, cursor: dict | None, next_token: str | None) -> HistoryView:
        first = next_token is None
        operations, operations_next = self.operations_page(e, MAX_PAGE) if first else ([], None)
        events, events_next = self.events_page(e, MAX_PAGE) if first else ([], None)
        return HistoryView(page.items, None if cursor is None else encode_token(cursor), operations, operations_next,
                           events, events_next, e.ledger if first else None)

    def events(self, execution_id: str, limit: int = MAX_PAGE, next_token: str | None = None) -> tuple[list[Any], dict[str, int], str | None]:
        """One page of this run's events (EventRecord or CorruptRecord, in key order), which wait step
        consumed each (by event id; an event not in it is still kept for a wait), and the next token."""
        check_limit(limit)
        e = self.get(execution_id)
        events, token = self.events_page(e, limit, next_token)
        consumed = {r.event_id: r.step_index for r in self.history_of(e) if isinstance(r, StepRecord) and r.event_id}
        return events, consumed, token

    def consumed_events(self, execution_id: str) -> dict[str, int]:
        """Which wait step consumed each event this run was sent (by event id)."""
        e = self.get(execution_id)
        return {r.event_id: r.step_index for r in self.history_of(e) if isinstance(r, StepRecord) and r.event_id}

    def events_page(self, e: Execution, limit: int, next_token: str | None = None) -> tuple[list[Any], str | None]:
        page = self.life.store.events_page(e.execution_id, limit, _sort_key_token(next_token), legacy=e.layout == 1)
        return this_run(e, page.records, "sent_at"), (encode_token(page.after) if page.after else None)

    def operations_page(self, e: Execution, limit: int = MAX_PAGE,
                        next_token: str | None = None) -> tuple[list[Any], str | None]:
        page = self.life.store.operations_page(e.execution_id, limit, _sort_key_token(next_token),
                                               legacy=e.layout == 1)
        return this_run(e, page.records, "at"), (encode_token(page.after) if page.after else None)

    def operations(self, execution_id: str, limit: int = MAX_PAGE,
                   next_token: str | None = None) -> tuple[list[Any], str | None]:
        """One page of the operator's actions on the execution (version order) and the next token."""
        check_limit(limit)
        return self.operations_page(self.get(execution_id), limit, next_token)

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
            plan = kind.on_cancel(view) if kind is not None else None
            if plan is not None and not plan.now:
                new = transitions.cancel_requested(e, now, by, reason, plan.until)
                if self._commit(e, new) is not None:
                    self._after(new, "cancel", by, reason, {"requested": True, "takes_effect": "when the running "
                                                            "attempt has ended"}, send=False)
                    return new
                continue
            undo = plan is not None and plan.undo_current
            lease_s = lambda i: self.life.lease_s(e.workflow, i, e.workflow_version)  # noqa: E731
            new = self.kinds.ending.cancelled(view, e, by, reason, undo, lease_s, self.life.retention,
                                              self.life.finalize_grace_s(e))
            applied = self._commit(e, new)
            if applied is None:
                continue
            detail = {"compensate_from": applied.current_step} if applied.compensating else {}
            self._after(applied, "cancel", by, reason, detail, send=applied.compensating)
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
        onto = redrive_onto(self.life.registry, e, to_version, read_pins(self.life.store, e.execution_id))
        failed = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == e.current_step
                       and r.kind != "compensation"), None)
        version = onto.get("workflow_version", e.workflow_version)
        new = transitions.redriven_after_failure(e, self.life.clock.now(), self.life.lease_s(e.workflow, e.current_step,
                                                                                             version)).model_copy(update=onto)
        applied = self._commit(e, new)
        if applied is None:
            raise ExecutionStateConflictError("concurrent_change", f"execution {e.execution_id} changed meanwhile; "
                                              "read it again", e.status.value)
        detail = {"step_index": e.current_step, "error": None if e.error is None else e.error.model_dump(),
                  **({"from_version": e.workflow_version, "to_version": version} if onto else {})}
        if failed is not None:
            detail.update(step_name=failed.name, attempts=failed.attempts)
        self.life.metrics.add_metric("ExecutionsRedriven", "Count", 1)
        self._after(applied, "redrive", by, None, detail, send=True)
        return applied

    def wake(self, execution_id: str, by: str) -> Execution:
        """End the current sleep, retry backoff or event wait now (the operator's "skip the wait"; an
        event wait then times out: it takes its default, or fails and compensates)."""
        for _ in range(_RETRIES):
            e = self.get(execution_id)
            if e.status.is_terminal:
                raise ExecutionStateConflictError(
                    "execution_ended", f"execution {e.execution_id} already ended {e.status.value}", e.status.value)
            view = _View(self, e)
            kind = self.kinds.current(view.wf, e)
            wakeable = kind.on_wake(view) if kind is not None else e.timer is not None and e.timer.value != "lease"
            if not wakeable or e.cancel_requested:
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is not sleeping, waiting to retry or waiting for an "
                    f"event (it is {_doing(e)}); there is nothing to skip", e.status.value)
            applied = self._commit(e, transitions.woken(e, self.life.clock.now()))
            if applied is not None:
                assert e.timer is not None and e.next_wake_at is not None
                self._after(applied, "wake", by, None, {"was": e.timer.value, "due": e.next_wake_at.isoformat()},
                            send=True)
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
            raise InvalidRequestError(f"event_id {event_id!r} is invalid: 1-128 characters from A-Z a-z 0-9 _ . : -")
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
                "event", e.status.value)
        wf = self.definition(e)
        waits = None if wf is None else wf.waits()
        if wf is not None and waits is not None:
            if name not in waits and not _callback:  # a callback's wait is the one its token names
                raise ExecutionStateConflictError(
                    "unknown_event", f"workflow {e.workflow!r} never waits for an event named {name!r}; it waits "
                    "for: " + (", ".join(sorted(waits)) or "no events"), e.status.value)
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
            kind = self.kinds.current(view.wf, e)
            if e.cancel_requested or kind is None or kind.waits_for(view) != name:
                return EventSent(e.execution_id, name, record.event_id, "buffered")
            applied = self._commit(e, transitions.woken(e, self.life.clock.now()))
            if applied is not None:
                self._quietly("send", lambda: self.life.send_at(applied), applied)
                return EventSent(e.execution_id, name, record.event_id, "delivered")
        # It kept changing: the event is kept, and the wait that reads it next consumes it.
        return EventSent(e.execution_id, name, record.event_id, "buffered")

    def complete_callback(self, token: str, data: Any, by: str) -> EventSent:
        """Complete the wait a callback token was issued for (``ctx.callback_token(event)``), once."""
        try:
            execution_id, step_index = callbacks.parse(token)
            e = self.get(execution_id)
            callbacks.verify(token, self.state(execution_id).execution.callback_secret)
            wf = self.definition(e)
            wait = None if wf is None else wf.wait_step(step_index)
            if wait is None:
                raise ValueError("not a wait step")
        except (callbacks.InvalidCallbackTokenError, ExecutionNotFoundError, UnknownWorkflowError, ValueError):
            raise CallbackNotFoundError() from None
        event_id = callbacks.event_id(step_index)
        used = "this callback token was used already; a token completes its wait once"
        if self._sent(e, wait.kind.event, event_id):
            raise ExecutionStateConflictError("callback_used", used, e.status.value)
        answered = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == step_index
                         and r.kind == "event" and r.status.value == "SUCCEEDED"), None)
        if answered is not None:
            how = f"event {answered.event_id!r}" if answered.event_id else "its default, after the timeout"
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
        """Refuse data that the model of the wait it is for (the next wait of that name) refuses."""
        if wf.code is not None:
            model = (wf.code.events or {}).get(name)
        else:
            waits = [s for s in wf.steps if s.kind.kind == "event" and s.kind.event == name]
            ahead = [s for s in waits if s.index >= e.current_step] or waits
            model = next((s.kind.model for s in ahead if s.kind.model is not None), None)
        if model is None:
            return
        from pydantic import ValidationError

        try:
            model.model_validate(data)
        except ValidationError as exc:
            problems = field_problems(exc)
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise InvalidEventError(f"event {name!r} for workflow {wf.name!r} does not fit its wait's model: "
                                    f"{summary}", problems) from None

    def _commit(self, old: Execution, new: Execution) -> Execution | None:
        try:
            return self.life.commit(old, new)
        except TransitionConflictError:
            return None

    def _after(self, e: Execution, op: str, by: str, reason: str | None, detail: dict, send: bool) -> None:
        """An action's housekeeping once its commit applied: its record, and the message that resumes it.
        Neither may fail the action (a lost message is re-driven from the due index)."""
        record = OperationRecord(op=op, by=by, at=e.updated_at, version=e.version, reason=reason, detail=detail,
                                 run=e.run, expires_at=self.life.item_expiry(e, e.updated_at))
        self._quietly("put_operation", lambda: self.life.store.put_operation(e.execution_id, record,
                                                                             legacy=e.layout == 1), e)
        if send:
            self._quietly("send", lambda: self.life.send_at(e), e)

    def _quietly(self, what: str, action: Callable[[], Any], e: Execution) -> None:
        try:
            action()
        except Exception as exc:
            log.warning(f"{what} after a committed operator action failed; the action stands", extra={
                "execution_id": e.execution_id, "workflow": e.workflow, "step": None, "step_index": e.current_step,
                "attempt": None, "error": f"{type(exc).__name__}: {exc}"})


def _status_matches(actual: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    if wanted == "LIVE":
        return actual in _LIVE
    return actual == wanted


def _doing(e: Execution) -> str:
    if e.compensating:
        return f"undoing step {e.current_step}"
    if e.is_claimed:
        return f"running step {e.current_step}"
    return f"at step {e.current_step}, {e.status.value}"


def _uuid(execution_id: Any) -> str:
    try:
        return str(uuid.UUID(execution_id))
    except (ValueError, AttributeError, TypeError):
        raise ExecutionNotFoundError(str(execution_id)) from None
