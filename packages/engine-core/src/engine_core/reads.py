"""What an operator reads: an execution and its state, the list of executions (filtered, paged through the
list index), and an execution's history, events and operator actions in pages.

Every read answers for the execution's current run (an earlier run's records wait for their TTL and are
left out) and never reads more than a page's worth: a list reads at most ``MAX_INDEX_PAGES`` index
pages, a history page at most ``limit`` entries and about ``PAGE_BYTES`` of them. A ``next_token`` is
opaque to callers; one this API did not return is refused with ``InvalidRequestError``. The actions that
change an execution are ``operations.Operator``'s, which reads through this class.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from typing import Any, NamedTuple

from .durable.plan import code_plan
from .errors import ExecutionNotFoundError, InvalidRequestError
from .lifecycle import Lifecycle
from .model import Branch, Execution, ExecutionState, ListEntry, Status, StepRecord
from .ports import PAGE_BYTES
from .rebuild import this_run
from .rebuild import this_run_state
from .steps import WorkflowDef
from .versions import pinned_definition, read_pins


MAX_PAGE = 100
MAX_INDEX_PAGES = 5
"""A list request reads at most this many pages of the list index (500 entries): a filter matching few
executions answers with fewer than ``limit`` and a ``next_token``, never a read of the whole index."""
LIST_STATUSES = ("RUNNING", "SLEEPING", "WAITING", "LIVE", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
_LIVE = ("RUNNING", "SLEEPING", "WAITING", "LIVE")


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
    step_names: dict[int, str] = {}
    """The name of each step whose branches the page lists (a step fanning out now has no record to name it)."""


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
    if isinstance(value, str) and value.startswith("STEP#"):  # from engine-core before 0.3: the record's sort key
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


class Reader:
    """The operator's reads over one lifecycle (the engine's): see the module docstring."""

    def __init__(self, life: Lifecycle):
        self.life = life

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
        after its record (those of the step fanning out now, or where a cancel stopped the execution, after the
        last record). A page holds at most
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
                return self._view(e, wf, page, {**cursor, "branch": cut}, next_token)
            if cursor.get("tail"):
                return self._view(e, wf, page, None, next_token)
        while True:
            stored = self.life.store.history_page(e.execution_id, page.room, after)
            for record, key in zip(stored.records, stored.keys):
                if page.full:
                    return self._view(e, wf, page, {"after": after}, next_token)
                after = key
                if isinstance(record, StepRecord) and not this_run(e, [record], "finished_at"):
                    continue  # an earlier run's, waiting for its TTL
                page.add(record)
                if _fans_out(wf, record):
                    cut = self._add_branches(e, record.step_index, 0, page)
                    if cut is not None:
                        return self._view(e, wf, page, {"after": after, "branch_of": record.step_index, "branch": cut},
                                          next_token)
            if stored.after is None:
                break
            if page.full:
                return self._view(e, wf, page, {"after": after}, next_token)
        # The branches of a parallel or map step with no record of its own: fanning out now, or cancelled there
        # (a step that failed has its record, and its branches are listed after it). What each branch began
        # and did before the cancel is still the operator's to see.
        current = e.current_step
        if (not e.status.is_terminal or e.status is Status.CANCELLED) and not e.compensating and wf is not None \
                and current < len(wf.steps) \
                and wf.steps[current].kind.kind == "fanout" and not page.shows_step(current):
            cut = self._add_branches(e, current, 0, page)
            if cut is not None:
                return self._view(e, wf, page, {"after": after, "branch_of": current, "branch": cut, "tail": True},
                                  next_token)
        return self._view(e, wf, page, None, next_token)

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

    def _view(self, e: Execution, wf: WorkflowDef | None, page: _Page, cursor: dict | None,
              next_token: str | None) -> HistoryView:
        first = next_token is None
        operations, operations_next = self.operations_page(e, MAX_PAGE) if first else ([], None)
        events, events_next = self.events_page(e, MAX_PAGE) if first else ([], None)
        steps = () if wf is None else wf.steps
        names = {b.step_index: steps[b.step_index].name for b in page.items
                 if isinstance(b, Branch) and b.step_index < len(steps)}
        return HistoryView(page.items, None if cursor is None else encode_token(cursor), operations, operations_next,
                           events, events_next, e.ledger if first else None, names)

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

def _status_matches(actual: str, wanted: str | None) -> bool:
    if wanted is None:
        return True
    if wanted == "LIVE":
        return actual in _LIVE
    return actual == wanted


def _uuid(execution_id: Any) -> str:
    try:
        return str(uuid.UUID(execution_id))
    except (ValueError, AttributeError, TypeError):
        raise ExecutionNotFoundError(str(execution_id)) from None


__all__ = ["LIST_STATUSES", "MAX_INDEX_PAGES", "MAX_PAGE", "HistoryView", "ListResult", "Reader", "check_limit",
           "decode_token", "encode_token"]
