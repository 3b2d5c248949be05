"""The two ports the engine talks through: a state store and a step queue.

Adapters (``engine_core.adapters``): ``memory.MemoryStore`` and ``dynamodb.DynamoStore`` for state (chosen by
``LOOM_STORE``); ``fake_queue.FakeQueue`` and ``sqs.SqsQueue`` for messages.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from .backlog import BacklogMark
from .model import CorruptRecord, ErrorInfo, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, StepMessage, StepRecord
from .schedules.record import ScheduleRecord


class Transition(NamedTuple):
    """Replace the execution at (expected_step, expected_version) by ``new`` (the ``#META`` item only)."""

    expected_step: int
    expected_version: int
    new: Execution


@dataclass(frozen=True)
class HistoryPage:
    records: list[Any]
    after: str | None
    """The last sort key returned when more may follow (pass back as ``after``), else None."""
    keys: list[str] = field(default_factory=list)
    """The sort key of each record, in order (a reader may stop inside the page and resume after one)."""


PAGE_BYTES = 1024 * 1024
"""A Query page of DynamoDB: at most 1 MB of items, whatever its Limit (every store pages the same way)."""


class ListPage(NamedTuple):
    entries: list[ListEntry]
    cursor: Any | None
    read_count: int = 0


class DueRef(NamedTuple):
    execution_id: str
    next_wake_at: dt.datetime


class DuePage(NamedTuple):
    items: list[DueRef]
    cursor: Any | None
    """Opaque; pass back to continue. None when the shard has no more due items."""
    read_count: int = 0
    """Index items the query examined (the sweeper's cost grows with this, not the table)."""


class StateStore(Protocol):
    def create(self, execution: Execution, input_blob: str, replace_version: int | None = None) -> None:
        """Write a new execution and its input; raise ExecutionExistsError carrying the existing one.

        ``replace_version``: an expired execution at that version under the same id is replaced. Its
        history items stay until their TTL deletes them; the engine reads only the items of the run
        that started at the execution's ``created_at`` or later."""
        ...

    def load(self, execution_id: str) -> Execution | None:
        """Strongly consistent read of the execution item; None if absent; CorruptStateError if undecodable."""
        ...

    def load_state(self, execution_id: str, since: int | None = None) -> ExecutionState | None:
        """The execution, its input and its history, strongly consistent (None if absent): one query of the
        execution's partition; with ``since`` (a checkpoint's step), two bounded ones: the execution, its
        input and its joins, then the history from that step's record on (``records_from``)."""
        ...

    def commit(self, transition: Transition) -> None:
        """Apply conditionally; TransitionConflictError (with the current item) or ExecutionNotFoundError.
        A write that applied but whose response was lost (and was retried) counts as applied."""
        ...

    def commit_operation(self, transition: Transition, record: OperationRecord, legacy: bool = False) -> None:
        """``commit``, and the operator's record of the action it applies (``put_operation``) in the same
        atomic write: both or neither, so a control plane killed mid-action never leaves an action applied
        without its record. Raises as ``commit`` does, having written nothing."""
        ...

    def put_step(self, execution_id: str, record: StepRecord) -> None:
        """Write a step's history record, unless a later attempt already wrote one
        (StepSupersededError): the attempt that holds the step is the only writer."""
        ...

    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        """End an execution whose item cannot be decoded. False if it was already terminal or gone."""
        ...

    def stamp_history(self, execution_id: str, expires_at: dt.datetime) -> None:
        """Set the retention TTL on every history item (for executions that outlive the TTL written)."""
        ...

    def finalize(self, execution_id: str, version: int) -> None:
        """Mark an ended execution's housekeeping done (out of the housekeeping index)."""
        ...

    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Executions in ``shard`` whose due-index key <= now, oldest first. Eventually consistent."""
        ...

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Ended executions in ``shard`` whose housekeeping is overdue (their ``finalize_by`` passed)."""
        ...

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        ...

    def history_page(self, execution_id: str, limit: int, after: str | None = None) -> HistoryPage:
        """Up to ``limit`` step records in order (and at most ``PAGE_BYTES`` of them), starting after the
        sort key ``after``."""
        ...

    # Operations and events live in partitions of their own (``legacy``: in the execution's partition,
    # where executions started before engine-core 0.3 keep them), so a delivery's one query never reads them.
    def put_operation(self, execution_id: str, record: OperationRecord, legacy: bool = False) -> None:
        """Keep an operator's action (cancel, redrive, wake) in the execution's history."""
        ...

    def operations_page(self, execution_id: str, limit: int, after: str | None = None,
                        legacy: bool = False) -> HistoryPage:
        """Up to ``limit`` operation records in version order (at most ``PAGE_BYTES``), after ``after``."""
        ...

    def put_event(self, execution_id: str, record: EventRecord, legacy: bool = False) -> bool:
        """Keep an external event (``EVT#<name>#<event_id>``) until a wait consumes it. False, writing
        nothing, when that event id was sent to this run before (a repeated send is applied once)."""
        ...

    def list_events(self, execution_id: str, name: str | None = None, legacy: bool = False,
                    limit: int | None = None) -> list[EventRecord | CorruptRecord]:
        """The execution's events (of ``name`` only, if given), strongly consistent, in key order; at most
        ``limit`` of them."""
        ...

    def events_page(self, execution_id: str, limit: int, after: str | None = None,
                    legacy: bool = False) -> HistoryPage:
        """Up to ``limit`` events in key order (at most ``PAGE_BYTES``), after the sort key ``after``."""
        ...

    def query_list(self, limit: int, cursor: Any | None = None, created_after: dt.datetime | None = None,
                   created_before: dt.datetime | None = None) -> ListPage:
        """Executions newest first from the list index (GSI2), optionally within a creation window.
        Eventually consistent; entries carry the workflow and LIVE or the terminal status."""
        ...

    def load_statuses(self, execution_ids: list[str]) -> dict[str, str]:
        """The status each execution item holds now (one batched read; missing ones are left out)."""
        ...

    def load_versions(self, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
        """The workflow and pinned version each execution item holds (batched; missing ones left out)."""
        ...

    def list_cursor(self, entry: ListEntry) -> Any:
        """A ``query_list`` cursor resuming right after ``entry`` (JSON-serialisable)."""
        ...

    def valid_list_cursor(self, cursor: Any) -> bool:
        """Whether a cursor that came back from a client has the shape this store's cursors have."""
        ...

    # -- parallel and map steps: the join item (beside the execution) and the branch items ---------
    def put_join(self, execution_id: str, join: Any) -> bool:
        """Write the join item of a fan-out step, replacing one of an older generation; False (nothing
        written) when a join of the same generation exists (a racing copy began this generation first) or
        of a newer one (this writer read an older execution version; the newer fan-out is kept)."""
        ...

    def get_join(self, execution_id: str, step_index: int) -> Any | None:
        """The join item (``model.Join``), strongly consistent; None if absent."""
        ...

    def create_branch(self, execution_id: str, branch: Any) -> None:
        """Create a branch item that does not exist yet; BranchConflictError (with the stored branch) if it does."""
        ...

    def get_branch(self, execution_id: str, step_index: int, branch: int) -> Any | None:
        """The branch (``model.Branch`` or CorruptRecord), strongly consistent; None if absent."""
        ...

    def update_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        """Replace the branch at ``expected_version`` by ``branch``; BranchConflictError otherwise."""
        ...

    def complete_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        """One atomic write: the branch at ``expected_version`` becomes ``branch`` (SUCCEEDED) and the join
        of its generation counts it (``done + 1``). BranchConflictError, with nothing written or counted,
        if either condition fails: a completion is recorded once and counted once."""
        ...

    def branches(self, execution_id: str, step_index: int) -> list[Any]:
        """Every branch of the step (``Branch`` or CorruptRecord) in branch order: one strongly consistent query."""
        ...

    def branches_page(self, execution_id: str, step_index: int, limit: int, after: int | None = None) -> HistoryPage:
        """Up to ``limit`` branches of the step in branch order (at most ``PAGE_BYTES``), after branch ``after``."""
        ...

    # -- schedules: one record per schedule (``SCHED#<name>``), written only by the fire path --------
    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule's record, strongly consistent; None if absent; CorruptStateError if undecodable."""
        ...

    def put_schedule(self, record: ScheduleRecord) -> bool:
        """Write the record if it moves the stored one forward in ``(scheduled_at, revision)`` order (or none
        is stored); False, writing nothing, otherwise: a late older firing, or a copy of the same firing that
        read before another wrote, never replaces a newer record. One conditional write, no read."""
        ...


    # -- the queue's backlog mark (``backlog.py``): one item, written by workers, read by the sweeper ---------
    def get_backlog_mark(self) -> BacklogMark | None:
        """The mark, strongly consistent; None if none was written (or the table's TTL removed it)."""
        ...

    def put_backlog_mark(self, mark: BacklogMark) -> bool:
        """Write the mark if its ``visible_at`` is later than the stored one's (or none is stored); False,
        writing nothing, otherwise. One conditional write, no read."""
        ...


class StepQueue(Protocol):
    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        """Enqueue a step message; ``delay_s`` is at most 900 (SQS DelaySeconds)."""
        ...

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        """Put a notice on the dead-letter queue (a failed execution, named)."""
        ...


class EventPublisher(Protocol):
    def publish(self, detail: dict[str, Any]) -> None:
        """Publish one status-change event (EventBridge ``PutEvents``); raise to have it retried."""
        ...


class NullEvents:
    """Status-change events switched off (no bus configured)."""

    enabled = False

    def publish(self, detail: dict[str, Any]) -> None:
        return None


class Metrics(Protocol):
    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class NullMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None
