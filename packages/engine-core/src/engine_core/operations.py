"""What an operator does to executions: list and search, cancel, redrive, wake, and read history in pages.

Each action is one conditional write on the execution item (so it races safely with workers and the
sweeper), is kept in the execution's history as an operation record naming who did it, and refuses
with :class:`ExecutionStateConflictError` (an HTTP 409) when it does not apply, writing nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from . import transitions
from .errors import (
    ExecutionStateConflictError,
    InvalidRequestError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .lifecycle import Lifecycle
from .model import Execution, ListEntry, OperationRecord, Status, StepRecord, Timer
from .ports import Transition

MAX_PAGE = 100
LIST_STATUSES = ("RUNNING", "SLEEPING", "LIVE", "COMPLETED", "FAILED", "CANCELLED")
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
        wanted = None if status is None else ("LIVE" if status in ("RUNNING", "SLEEPING", "LIVE") else status)
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
        operations = self.operations(e) if next_token is None else []
        return records, operations, (encode_token(page.after) if page.after else None)

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
            now = self.life.clock.now()
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
            if e.timer not in (Timer.SLEEP, Timer.RETRY):
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is not sleeping or waiting to retry (it is running "
                    f"step {e.current_step}); there is nothing to skip", e.status.value)
            new = transitions.woken(e, self.life.clock.now())
            if self._commit(e, new):
                self._record(new, "wake", by, None, {"was": e.timer.value, "due": e.next_wake_at.isoformat()})
                self.life.send_at(new)
                return new
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

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


def _of_run(r: StepRecord, e: Execution) -> bool:
    times = [t for t in (r.started_at, r.finished_at) if t is not None]
    return not times or max(times) >= e.created_at
