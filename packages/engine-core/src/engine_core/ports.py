"""The two ports the engine talks through: a state store and a step queue.

Adapters: ``storage.memory.MemoryStore`` and ``storage.dynamodb.DynamoStore`` for state;
``testing.FakeQueue`` and the SQS queue the Lambda handlers build for messages.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

from .model import CorruptRecord, ErrorInfo, Execution, StepMessage, StepRecord, StepStatus


@dataclass(frozen=True)
class StepUpdate:
    """How a transition settles the current step's history record (attempts are left as counted)."""

    step_index: int
    name: str
    status: StepStatus
    finished_at: dt.datetime
    result_blob: str | None = None
    error: ErrorInfo | None = None
    is_final: bool = False
    started_at: dt.datetime | None = None
    """Set only by transitions that write a record without an intent (sleeps)."""


@dataclass(frozen=True)
class Transition:
    """Replace the execution at (expected_step, expected_version) by ``new``; optionally settle a step."""

    expected_step: int
    expected_version: int
    new: Execution
    step: StepUpdate | None = None


@dataclass(frozen=True)
class DueRef:
    execution_id: str
    next_wake_at: dt.datetime


@dataclass(frozen=True)
class DuePage:
    items: list[DueRef]
    cursor: Any | None
    """Opaque; pass back to continue. None when the shard has no more due items."""
    read_count: int = 0
    """Index items the query examined (the sweeper's cost grows with this, not the table)."""


class StateStore(Protocol):
    def create(self, execution: Execution) -> None:
        """Write a new execution; raise ExecutionExistsError carrying the existing one."""
        ...

    def load(self, execution_id: str) -> Execution | None:
        """Strongly consistent read; None if absent; CorruptStateError if undecodable."""
        ...

    def record_intent(
        self, execution_id: str, step_index: int, name: str, started_at: dt.datetime, stale_before: dt.datetime
    ) -> StepRecord:
        """Mark a step attempt as started (attempts + 1), before its body runs.

        Refuses with StepSettledError when the step already SUCCEEDED or finally FAILED, and with
        StepBusyError when another attempt started after ``stale_before`` is still RUNNING.
        """
        ...

    def commit(self, transition: Transition) -> None:
        """Apply atomically; TransitionConflictError (with the current item) or ExecutionNotFoundError."""
        ...

    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        """End an execution whose item cannot be decoded. False if it was already terminal or gone."""
        ...

    def finalize(self, execution_id: str, version: int, expires_at: dt.datetime) -> None:
        """Stamp the retention TTL on every history item, then mark the execution finalized."""
        ...

    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Executions in ``shard`` whose next_wake_at <= now, oldest first. Eventually consistent."""
        ...

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Ended executions in ``shard`` whose housekeeping is overdue (their ``finalize_by`` passed)."""
        ...

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        ...


class StepQueue(Protocol):
    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        """Enqueue a step message; ``delay_s`` is at most 900 (SQS DelaySeconds)."""
        ...

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        """Put a notice on the dead-letter queue (a failed execution, named)."""
        ...


class Metrics(Protocol):
    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class NullMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None
