"""The two ports the engine talks through: a state store and a step queue.

Adapters: ``storage.memory.MemoryStore`` and ``storage.dynamodb.DynamoStore`` for state;
``testing.FakeQueue`` and the SQS queue the Lambda handlers build for messages.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

from .model import CorruptRecord, ErrorInfo, Execution, ExecutionState, StepMessage, StepRecord


@dataclass(frozen=True)
class Transition:
    """Replace the execution at (expected_step, expected_version) by ``new`` (the ``#META`` item only)."""

    expected_step: int
    expected_version: int
    new: Execution


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
    def create(self, execution: Execution, input_blob: str, replace_version: int | None = None) -> None:
        """Write a new execution and its input; raise ExecutionExistsError carrying the existing one.

        ``replace_version``: an expired execution at that version under the same id is replaced, and
        its history deleted first, so the new run's history holds only its own steps."""
        ...

    def load(self, execution_id: str) -> Execution | None:
        """Strongly consistent read of the execution item; None if absent; CorruptStateError if undecodable."""
        ...

    def load_state(self, execution_id: str) -> ExecutionState | None:
        """The execution, its input and its history in one strongly consistent query (None if absent)."""
        ...

    def commit(self, transition: Transition) -> None:
        """Apply conditionally; TransitionConflictError (with the current item) or ExecutionNotFoundError.
        A write that applied but whose response was lost (and was retried) counts as applied."""
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
