"""Domain state: executions, step records, retry policies and step messages.

Models never hold DynamoDB keys; mapping to items happens in the store adapters (``adapters/_items.py``, ``adapters/dynamodb.py``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from enum import Enum
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .clock import format_ts
from .code_step import CodeStep


class Status(str, Enum):
    RUNNING = "RUNNING"
    SLEEPING = "SLEEPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    """Ended by an operator (``POST /executions/{id}/cancel``); a running body finishes, nothing after it runs."""
    WAITING = "WAITING"
    """Waiting for an external event (``wait_for_event``); nothing runs until it arrives or times out."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """Failed or cancelled, and a compensation could not undo its step (``compensation_error`` says which)."""

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.COMPENSATION_FAILED})


class StepStatus(str, Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class Timer(str, Enum):
    """What ``next_wake_at`` means while an execution is live."""

    LEASE = "lease"
    """A step message is in flight; if the time passes, the message is presumed lost and re-driven."""
    RETRY = "retry"
    """A failed attempt is backing off; the next attempt may start at ``next_wake_at``."""
    SLEEP = "sleep"
    """A durable sleep; the execution resumes at ``next_wake_at``."""
    EVENT = "event"
    """Waiting for an external event; ``next_wake_at`` is its timeout. A delivered event wakes it at once."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's ``model_copy``, the shallow kind without its general machinery: a frozen model with no
        extra and no private attributes copies as its field dict with ``update`` over it, unvalidated as
        pydantic's is (a test holds the two equal). The engine copies its execution at every commit."""
        if deep or self.__pydantic_private__ is not None:
            return super().model_copy(update=update, deep=deep)
        copied = self.__class__.__new__(self.__class__)
        _set = object.__setattr__
        if update:
            _set(copied, "__dict__", {**self.__dict__, **update})
            _set(copied, "__pydantic_fields_set__", self.__pydantic_fields_set__ | update.keys())
        else:
            _set(copied, "__dict__", dict(self.__dict__))
            _set(copied, "__pydantic_fields_set__", set(self.__pydantic_fields_set__))
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_private__", None)
        return copied


class _FrozenDeferred(_Frozen):
    """For records a cold start rarely touches (operator actions, events, list entries, corrupt items, fan-out
    items): pydantic builds their validators on first use, not at import, so a handler that never meets
    one does not pay for it (issue 15: handlers that start fast)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


MAX_BACKOFF_S = 366 * 24 * 3600.0
"""The longest backoff a retry policy may ask for: the longest sleep (a later time is past any date the clock
can add it to, for a large enough multiplier)."""


class RetryPolicy(_Frozen):
    """Exponential backoff: attempt n waits ``min(max_delay, base * multiplier**(n-1))`` seconds, jittered."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    """Attempts in total, the first one included."""
    base: float = Field(default=1.0, gt=0)
    """Seconds before the first retry, before jitter."""
    max_delay: float = Field(default=300.0, gt=0)
    """Ceiling on any one backoff, in seconds."""
    multiplier: float = Field(default=2.0, ge=1.0)
    jitter: bool = True
    """Spread retries over [delay/2, delay] so a burst of failures does not retry in lockstep."""

    @model_validator(mode="after")
    def _ceiling_above_base(self) -> RetryPolicy:
        if self.max_delay < self.base:
            raise ValueError(f"max_delay ({self.max_delay}) must be >= base ({self.base})")
        if self.max_delay > MAX_BACKOFF_S:
            raise ValueError(f"max_delay ({self.max_delay:g} s) must be at most {MAX_BACKOFF_S:,.0f} s (366 days, the "
                             "longest sleep); for a longer pause, fail the step and redrive it later")
        return self


class ErrorInfo(_Frozen):
    code: str
    """Machine-readable: ``step_error``, ``result_too_large``, ``corrupt_state``, ..."""
    message: str
    """At most about 2 KB; the full traceback is in the worker's log."""
    type: str | None = None
    """The exception's class, for errors a step body raised."""
    step_index: int | None = None
    step_name: str | None = None
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class Ledger:
    """What an execution has spent so far, as its worker deliveries counted it (DESIGN.md "Cost ledger").
    Carried on the execution item by the commits a delivery already makes; ``engine_core.ledger`` counts.
    A plain frozen dataclass, not a model: every commit of a chain builds one, and this is a third of the
    cost of a validated model (the counts it adds come from the counter, never from outside)."""

    requests: int = 0
    """DynamoDB requests (memory store: store calls)."""
    read_units: float = 0.0
    """Read units as DynamoDB reported them (``ConsumedCapacity``); 0 on stores that do not report units."""
    write_units: float = 0.0
    """Write units as DynamoDB reported them; a delivery's carrying write is counted as 1 unit in advance."""
    messages: int = 0
    """SQS messages that delivered a step of it and led to a commit."""
    lambda_ms: int = 0
    """Worker milliseconds (wall clock), from each delivery's first read to its last commit."""

    def plus(self, requests: int, read_units: float, write_units: float, messages: int, lambda_ms: int) -> Ledger:
        return Ledger(max(0, self.requests + requests), round(max(0.0, self.read_units + read_units), 1),
                      round(max(0.0, self.write_units + write_units), 1), max(0, self.messages + messages),
                      max(0, self.lambda_ms + lambda_ms))

    def plus_ledger(self, other: Ledger) -> Ledger:
        """This and ``other`` together (a fan-in adding its branches' ledgers)."""
        return self.plus(other.requests, other.read_units, other.write_units, other.messages, other.lambda_ms)


class Execution(_Frozen):
    execution_id: str
    workflow: str
    status: Status
    current_step: int = Field(ge=0)
    """Index of the next step to run (== number of steps when COMPLETED)."""
    version: int = Field(ge=1)
    """Bumped by one on every transition; every transition is conditional on the previous value."""
    fingerprint: str
    """Digest of the workflow's step list when the execution started."""
    workflow_version: int = Field(default=1, ge=1)
    """The workflow version it started on (or was redriven onto): it runs to its end on that version."""
    pinned_steps: str | None = None
    """Each step's digest as it started (``engine_core.versions``), kept beside the input, read only by
    ``load_state``: a deploy that keeps what it still has to run does not break it. None: not known."""
    input_digest: str
    created_at: dt.datetime
    updated_at: dt.datetime
    next_wake_at: dt.datetime | None = None
    """When the current timer runs out: a lease on in-flight work, a retry backoff or a sleep."""
    timer: Timer | None = None
    index_at: dt.datetime | None = None
    """The due index's key (GSI1SK): the sweeper looks at this execution from then on. Equal to
    ``next_wake_at`` for sleeps and retries; for leases it may be later (by at most the lease), so a
    chain of steps rewrites the index key once per lease period instead of on every step."""
    attempt: int = Field(default=0, ge=0)
    """Attempts started on the current step, counted by the claim that starts each one."""
    attempt_started_at: dt.datetime | None = None
    """When the attempt in flight was claimed; None when no attempt holds the step."""
    attempt_deadline: dt.datetime | None = None
    """The claiming invocation's own deadline: no other worker takes the step over before it."""
    waiting_since: dt.datetime | None = None
    """When the current event wait period began (its record starts here); read at a wait step whose
    ``attempt`` is above 0, stored while a period may go on (``updated_at`` moves with events and wakes)."""
    wait_woken: bool = False
    """An operator woke the wait period (it times out now); an event's wake does not set it."""
    total_attempts: int = 0
    """Step attempts started over the execution's life (capped by ``EngineSettings.max_total_attempts``)."""
    error: ErrorInfo | None = None
    idempotency_token: str | None = None
    expires_at: dt.datetime | None = None
    """Retention: set on terminal executions; DynamoDB's TTL deletes the item some time after."""
    finalized: bool = False
    """Terminal housekeeping is done: history items carry the TTL, a FAILED execution's notice is on the DLQ."""
    started_by: str | None = None
    """Who started it: the caller's IAM principal on AWS, ``local`` on the local stack."""
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    redrives: int = Field(default=0, ge=0)
    """Times an operator resumed it from a failed step (``POST /executions/{id}/redrive``)."""
    compensating: bool = False
    """The execution failed or was cancelled and is undoing its completed steps, in reverse order:
    ``current_step`` is the step whose compensation runs now."""
    failed_step: int | None = None
    """Where the failure (or the cancel) happened, while compensating and after: the context the
    compensations see is the one that step saw."""
    compensated: bool | None = None
    """Set when the execution ends after compensation: True once every compensation finished."""
    compensation_error: ErrorInfo | None = None
    """COMPENSATION_FAILED: the compensation that failed for good, naming the step it could not undo."""
    compensating_for: ErrorInfo | None = None
    """FAILED while still compensating (its undo met a definition that is not deployed, or changed):
    the failure the undo answers, which ``error`` no longer holds. A redrive puts it back as ``error``, so
    the execution ends with the failure it was undoing."""
    callback_secret: str | None = None
    """Signs the execution's callback tokens (kept beside the input, never shown)."""
    finalize_by: dt.datetime | None = None
    """Set by the terminal transition, removed by finalizing. If the worker that ended the execution dies
    before finalizing, and its message is gone (acknowledged by a concurrent delivery, dead-lettered),
    nothing would ever finish the job: the sweeper does it once this time has passed."""
    cancel_requested: bool = False
    """An operator cancelled it while an attempt held the step (or branches of a fan-out were running):
    the cancel takes effect when that work has ended, by its own commit or by its lease running out.
    ``cancelled_by`` and ``cancel_reason`` say who asked and why."""
    resends: int = Field(default=0, ge=0)
    """Times in a row the sweeper re-sent the current step's message because none was claimed within its
    lease (a message lost, or stuck behind a backlog). Each re-send doubles the next lease; a worker's
    commit sets it back to 0."""
    lost_attempts: int = Field(default=0, ge=0)
    """Attempts of the current step that ended without reporting (their worker died, their lease ran
    out): their effect is unknown. A cancel undoes such a step too."""
    undo_failed_step: bool = False
    """While compensating and after: the step at ``failed_step`` is undone too (a cancel caught an attempt
    of it that succeeded or whose outcome is unknown)."""
    checkpoint: int | None = None
    """The latest step whose history record also holds the whole context after it: a delivery rebuilds
    the context from that record and the records after it, however long the history."""
    code_step: str | None = None
    """Code-first executions only: the current position as the function called it (``CodeStep.encode``;
    read it with ``code_position``)."""
    layout: int = Field(default=1, ge=1, le=2)
    """Where the execution's items live: 2 (engine-core 0.3 on): operations and events in partitions of
    their own, which a delivery's query never reads; 1: in the execution's partition, as before."""
    ledger: Ledger | None = None
    """Requests, units, messages and worker time spent on it so far (None: nothing counted yet)."""
    stamped_until: dt.datetime | None = None
    """Every other item of the execution (input, history, events, operations, fan-out items) expires at or
    after this time. The engine pushes it (re-stamping those items) before any timer could outlast it,
    so nothing of a live execution expires. None: started before items carried it."""

    @model_validator(mode="after")
    def _live_iff_due(self) -> Execution:
        if self.status.is_terminal and self.next_wake_at is not None:
            raise ValueError("terminal executions carry no next_wake_at")
        if not self.status.is_terminal and (self.next_wake_at is None or self.timer is None):
            raise ValueError("live executions must carry next_wake_at and a timer")
        if not self.status.is_terminal and self.finalize_by is not None:
            raise ValueError("only terminal executions owe housekeeping")
        return self

    @property
    def code_position(self) -> CodeStep | None:
        """Code-first: the current position as the function called it (None for a step list, or before the
        function's first call)."""
        return CodeStep.decode(self.code_step)

    def is_expired(self, now: dt.datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def due_at(self) -> dt.datetime | None:
        """Where the due index holds this execution (None: not in it)."""
        return self.index_at or self.next_wake_at

    @property
    def run(self) -> str:
        """Names this run of the execution id on every item it writes: a token re-used after its
        execution expired starts a new run under the same id, and nothing of the old run is read."""
        return format_ts(self.created_at)

    @property
    def is_claimed(self) -> bool:
        """An attempt holds the current step (it may have died; ``next_wake_at`` says until when)."""
        return self.attempt_started_at is not None


class StepRecord(_Frozen):
    step_index: int = Field(ge=0)
    name: str
    status: StepStatus
    attempts: int = Field(ge=0)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    result_blob: str | None = None
    error: ErrorInfo | None = None
    is_final: bool = False
    """For FAILED records: no attempt will follow."""
    expires_at: dt.datetime | None = None
    event_id: str | None = None
    """For a ``wait_for_event`` step: the event it consumed (None when it took its default)."""
    kind: str = "task"
    """What wrote it: ``task``, ``sleep``, ``event`` (a wait that ended), ``fanout`` (a parallel or map
    step's fan-in) or ``compensation`` (the undo of the step at ``step_index``)."""
    version: int = 0
    """The execution version its writer acted on (a claim's version for an attempt). A history write
    is refused when the stored record was written at the same or a later version, so of two copies
    of one delivery only the first writes, and a stalled older writer never replaces a newer record."""
    run: str | None = None
    """The run that wrote it (``Execution.run``); None for items written before runs were named."""
    context_blob: str | None = None
    """A checkpoint: the whole context after this step (encoded), so a delivery need not read the records
    before it. Written with the record, on some steps only (``Execution.checkpoint`` names the latest)."""
    undo: bool = False
    """The step has a compensation: what a cancel needs to know when the definition is not deployed here."""

    @classmethod
    def trusted(cls, fields: dict[str, Any]) -> StepRecord:
        """``model_construct`` for a record whose every field the caller checked and gives (the history
        decoder: a delivery reads many records), without its per-field pass over defaults and aliases.
        The result is the same object ``model_construct(**fields)`` builds (a test holds them equal)."""
        if fields.keys() != _STEP_FIELDS:
            raise ValueError(f"a trusted StepRecord needs exactly its fields, got {sorted(fields)}")
        record = cls.__new__(cls)
        _set = object.__setattr__
        _set(record, "__dict__", fields)
        _set(record, "__pydantic_fields_set__", set(fields))
        _set(record, "__pydantic_extra__", None)
        _set(record, "__pydantic_private__", None)
        return record


_STEP_FIELDS = StepRecord.model_fields.keys()


@dataclass(frozen=True)
class ExecutionState:
    """An execution with what its steps need, read together in one query: the start input and the
    history (``StepRecord`` or ``CorruptRecord``, in step order)."""

    execution: Execution
    input_blob: str
    records: list[Any]
    operations: list[Any] = field(default_factory=list)
    """OperationRecord (or CorruptRecord), in version order."""
    events: list[Any] = field(default_factory=list)
    """EventRecord (or CorruptRecord) sent to the execution, in key order."""
    joins: dict[int, Any] = field(default_factory=dict)
    """The join item (``Join``) of each parallel or map step that has fanned out, by step index."""
    records_from: int | None = None
    """None: ``records`` is the whole history. A step index: the history from that step's record on
    (a delivery that read from a checkpoint)."""


class OperationRecord(_FrozenDeferred):
    """An operator's action on an execution (cancel, redrive, wake), kept in its history."""

    op: str
    by: str
    at: dt.datetime
    version: int = Field(ge=1)
    """The execution version the action produced."""
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    """For a redrive: the failed step's record it replaced (index, name, attempts, error)."""
    run: str | None = None
    expires_at: dt.datetime | None = None


class EventRecord(_FrozenDeferred):
    """An external event sent to an execution (``POST /executions/{id}/events/{name}``), kept until a
    ``wait_for_event`` step of that name consumes it. Its id makes a repeated send a no-op."""

    name: str
    event_id: str
    data: dict[str, Any]
    sent_at: dt.datetime
    by: str | None = None
    run: str | None = None
    """The run it was sent to; an event of an earlier run under the same id is never consumed."""
    expires_at: dt.datetime | None = None


class ListEntry(_FrozenDeferred):
    """One execution as the list index holds it (its keys change only when it starts or ends)."""

    execution_id: str
    workflow: str
    status: str
    """LIVE (running or sleeping: read the execution for which), or the terminal status."""
    created_at: dt.datetime


class CorruptRecord(_FrozenDeferred):
    """A history item that could not be decoded; shown flagged, never silently dropped."""

    sort_key: str
    detail: str


class StepMessage(_Frozen):
    """The only thing on the step queue: identifiers, never results (stays far below 4 KB)."""

    execution_id: str
    step: int = Field(ge=0)
    version: int = Field(ge=1)
    branch: int | None = Field(default=None, ge=0)
    """A parallel or map branch of the step (its own item and lifecycle); None for the step itself."""
    branch_version: int | None = Field(default=None, ge=1)
    checkpoint: int | None = Field(default=None, ge=0)
    """The step whose record held the context when the message was sent: the delivery reads the history
    from there on (one read of that tail, not of the whole history). None: from the start."""
    delay_s: int | None = Field(default=None, ge=1, le=900)
    """The ``DelaySeconds`` it was sent with (None: none): the worker adds it to ``SentTimestamp`` to know
    how long the message waited in the queue once visible (``backlog.py``)."""

    @field_validator("execution_id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        return str(uuid.UUID(value))


class BranchStatus(str, Enum):
    PENDING = "PENDING"
    """Created or re-driven: a message is in flight; ``next_wake_at`` is its lease."""
    RUNNING = "RUNNING"
    """An attempt holds it until ``next_wake_at`` (its claim's lease)."""
    RETRY = "RETRY"
    """An attempt failed; the next may start at ``next_wake_at``."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def is_open(self) -> bool:
        return self in (BranchStatus.PENDING, BranchStatus.RUNNING, BranchStatus.RETRY)


class Branch(_FrozenDeferred):
    """One branch of a parallel or map step: its own small state machine, in its own item (its own
    partition, so a delivery's query of the execution never reads it)."""

    step_index: int = Field(ge=0)
    branch: int = Field(ge=0)
    status: BranchStatus
    version: int = Field(ge=1)
    """Bumped by one on every branch transition; each is conditional on the previous value."""
    generation: int = Field(ge=1)
    """The execution's version when this fan-out began: a redrive begins a new generation, which resets
    the branches that did not succeed and keeps those that did."""
    updated_at: dt.datetime
    """Its last write: items older than the execution's ``created_at`` belong to an earlier run under the
    same id (a token re-used after expiry) and count for nothing."""
    attempt: int = Field(default=0, ge=0)
    next_wake_at: dt.datetime | None = None
    """Open branches: the message lease, the claim's lease or the retry time. The fan-out's reconcile
    re-drives an open branch whose time passed."""
    attempt_started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    result_blob: str | None = None
    error: ErrorInfo | None = None
    expires_at: dt.datetime | None = None
    run: str | None = None
    ledger: Ledger | None = None
    """What this branch's own deliveries spent, in every generation (``engine_core.ledger``): added to the
    execution's ledger by the fan-in."""

    @model_validator(mode="after")
    def _open_iff_timed(self) -> Branch:
        if self.status.is_open and self.next_wake_at is None:
            raise ValueError("an open branch carries next_wake_at")
        return self


class Join(_FrozenDeferred):
    """The fan-in counter of a parallel or map step (``JOIN#<nnn>`` beside the execution item)."""

    step_index: int = Field(ge=0)
    total: int = Field(ge=0)
    done: int = Field(default=0, ge=0)
    """Branches SUCCEEDED, counted by the same atomic write that records each completion. Only a
    trigger: the fan-in reads every branch before it writes anything."""
    generation: int = Field(ge=1)
    max_concurrency: int = Field(ge=1)
    started_at: dt.datetime
    expires_at: dt.datetime | None = None
    run: str | None = None
