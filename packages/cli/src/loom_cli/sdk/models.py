"""The API's documents as pydantic models: the same fields as the control plane's own reply models
(``loom_control_plane.responses``; a test keeps the two from drifting), defined here so a client never
needs the control plane installed.

Every model keeps what it does not know (``extra="allow"``) and gives every field but the identifiers a
default, so a client reads a newer API (more fields) and an older one (fewer) alike. ``document()``
gives back the JSON the API sent, unknown fields included, exactly as ``--json`` prints it.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

RUNNING, SLEEPING, WAITING = "RUNNING", "SLEEPING", "WAITING"
COMPLETED, FAILED, CANCELLED, COMPENSATION_FAILED = "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED"
LIVE_STATUSES = (RUNNING, SLEEPING, WAITING)
ENDED_STATUSES = (COMPLETED, FAILED, CANCELLED, COMPENSATION_FAILED)
STATUSES = LIVE_STATUSES + ENDED_STATUSES


class Document(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    def document(self) -> dict[str, Any]:
        """The JSON document as the API sent it (what ``loom --json`` prints)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class ErrorInfo(Document):
    """A failure: of a step, a branch, an execution, a compensation."""

    code: str
    message: str = ""
    type: str | None = None
    step_index: int | None = None
    step_name: str | None = None
    retryable: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ErrorDocument(Document):
    """A refusal: ``{"error", "message", "execution_status"?, "problems"?}`` (see :class:`~.errors.LoomError`)."""

    error: str
    message: str = ""
    execution_status: str | None = None
    problems: list[dict[str, str]] | None = None


# -- start ------------------------------------------------------------------------------------------------
class Links(Document):
    self_: str | None = Field(default=None, alias="self")
    history: str | None = None


class Started(Document):
    """``POST /executions``: ``created`` is False when the same idempotency token and input started it before."""

    execution_id: str
    workflow: str
    status: str = RUNNING
    current_step: int = 0
    created: bool = True
    links: Links | None = None


# -- an execution ---------------------------------------------------------------------------------------
class WaitingFor(Document):
    event: str | None = None
    timeout_at: str | None = None
    arrived: bool = False
    """An event came and woke the wait: its delivery (due now) resumes the execution with it."""


class FanOutProgress(Document):
    branches: int = 0
    succeeded: int = 0
    max_concurrency: int | None = None
    step_index: int | None = None
    """In ``Execution.fanouts``: the parallel or map step's index."""


class Cost(Document):
    """An execution's cost ledger: what its worker deliveries spent so far (``loom cost`` prices it)."""

    requests: int = 0
    """DynamoDB requests."""
    read_units: float = 0.0
    write_units: float = 0.0
    """Read and write units as DynamoDB reported them."""
    messages: int = 0
    """SQS messages that delivered its steps."""
    lambda_ms: int = 0
    """Worker milliseconds, from each delivery's first read to its last commit."""


class Execution(Document):
    """``GET /executions/{id}``, and what cancel, redrive and wake answer with."""

    execution_id: str
    workflow: str
    status: str
    current_step: int = 0
    version: int = 0
    context: Any = None
    error: ErrorInfo | None = None
    next_wake_at: str | None = None
    timer: str | None = None
    """``lease``, ``retry``, ``sleep`` or ``event``: what ``next_wake_at`` is while it is live."""
    total_attempts: int = 0
    attempt: int = 0
    attempt_started_at: str | None = None
    started_by: str | None = None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    cancel_requested: bool = False
    """A cancel waits for the attempt holding the step (or its running branches) to end."""
    redrives: int = 0
    waiting_for: WaitingFor | None = None
    compensating: bool = False
    compensated: bool | None = None
    failed_step: int | None = None
    compensation_error: ErrorInfo | None = None
    compensating_for: ErrorInfo | None = None
    """FAILED while still undoing its completed steps (``error`` says why the undo stopped): the failure the
    undo answers; a redrive goes on undoing, and the execution ends with it."""
    created_at: str | None = None
    updated_at: str | None = None
    expires_at: str | None = None
    context_error: str | None = None
    fanout: FanOutProgress | None = None
    """Only while a parallel or map step fans out: its progress."""
    fanouts: list[FanOutProgress] = Field(default_factory=list)
    """Each parallel or map step of this run that fanned out (``step_index``, ``branches``, ``succeeded``,
    ``max_concurrency``): how many branches it has, where a history shows only those that began."""
    step_count: int | None = None
    workflow_version: int = 1
    """The workflow version it is pinned to (it runs to its end on that version's steps)."""
    steps: list[str] | None = None
    """The step list it is pinned to, by name (a step list deployed here; else None)."""
    current_step_name: str | None = None
    style: str | None = None
    """``steps`` (a step list) or ``code`` (a code-first function)."""
    cannot_run: ErrorInfo | None = None
    """A live execution whose workflow version is not deployed there: what its next delivery fails it with."""
    result: Any = None
    """A code-first execution's return value, once COMPLETED."""
    cost: Cost | None = None
    """Its cost ledger (absent until a delivery counted something)."""

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES


# -- history ----------------------------------------------------------------------------------------------
class CorruptRecord(Document):
    """An item the API could not read: shown, flagged, never a failed request."""

    corrupt: bool = True
    sort_key: str = ""
    detail: str = ""


class StepRecord(Document):
    """A step's record. ``kind``: ``task`` (a sleep's record is one too, its result ``{"wake_at"}``),
    ``event`` (a wait that ended), ``fanout`` (a parallel or map step's fan-in: ``attempts`` counts its
    branches) or ``compensation`` (the undo of step ``step_index``)."""

    step_index: int
    name: str
    status: str
    attempts: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    result: Any = None
    error: ErrorInfo | None = None
    final: bool = False
    kind: str = "task"
    event_id: str | None = None
    corrupt: bool | None = None
    detail: str | None = None


class BranchRecord(Document):
    """One branch of a parallel or map step (``kind: "branch"``), listed after its step's record."""

    step_index: int
    branch: int
    kind: str = "branch"
    name: str | None = None
    """Its step's name, as the deployed definition knows it."""
    status: str
    attempts: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    next_wake_at: str | None = None
    result: Any = None
    error: ErrorInfo | None = None
    generation: int = 0
    result_omitted: bool | None = None
    corrupt: bool | None = None
    detail: str | None = None


class Operation(Document):
    """An operator's action: ``op`` (cancel, redrive, wake), who, when, why, what it replaced."""

    op: str
    by: str | None = None
    at: str | None = None
    version: int = 0
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Event(Document):
    """An event sent to the execution; ``consumed_by_step`` is None while it is kept for a wait."""

    event: str
    event_id: str
    sent_at: str | None = None
    by: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    consumed_by_step: int | None = None


def _record(doc: Any) -> Any:
    if isinstance(doc, dict):
        if doc.get("kind") == "branch" or "branch" in doc:
            return BranchRecord.model_validate(doc)
        if "step_index" not in doc and doc.get("corrupt"):
            return CorruptRecord.model_validate(doc)
        return StepRecord.model_validate(doc)
    return doc


def _or_corrupt(model: type[Document]):
    def parse(doc: Any) -> Any:
        if isinstance(doc, dict) and doc.get("corrupt") and "sort_key" in doc:
            return CorruptRecord.model_validate(doc)
        return model.model_validate(doc) if isinstance(doc, dict) else doc
    return parse


AnyRecord = Annotated[Union[StepRecord, BranchRecord, CorruptRecord], BeforeValidator(_record)]
AnyOperation = Annotated[Union[Operation, CorruptRecord], BeforeValidator(_or_corrupt(Operation))]
AnyEvent = Annotated[Union[Event, CorruptRecord], BeforeValidator(_or_corrupt(Event))]


class HistoryPage(Document):
    """One page of ``GET /executions/{id}/history``; the first page of ``operations`` and ``events`` come
    with the first, each with the token of its own route for the rest."""

    execution_id: str
    steps: list[AnyRecord] = Field(default_factory=list)
    operations: list[AnyOperation] = Field(default_factory=list)
    next_token: str | None = None
    events: list[AnyEvent] | None = None
    operations_next_token: str | None = None
    events_next_token: str | None = None
    cost: Cost | None = None
    """With the first page: the execution's cost ledger."""


class EventsPage(Document):
    """One page of ``GET /executions/{id}/events``."""

    execution_id: str
    events: list[AnyEvent] = Field(default_factory=list)
    next_token: str | None = None


class OperationsPage(Document):
    """One page of ``GET /executions/{id}/operations``."""

    execution_id: str
    operations: list[AnyOperation] = Field(default_factory=list)
    next_token: str | None = None


class History(HistoryPage):
    """Every page of an execution's history as one document (``next_token`` is None)."""

    def records(self) -> list[StepRecord]:
        """The steps' own records (no branches, no compensations, nothing corrupt)."""
        return [r for r in self.steps if isinstance(r, StepRecord) and r.kind != "compensation"]

    def branches(self, step_index: int) -> list[BranchRecord]:
        return [r for r in self.steps if isinstance(r, BranchRecord) and r.step_index == step_index]

    def compensations(self) -> list[StepRecord]:
        return [r for r in self.steps if isinstance(r, StepRecord) and r.kind == "compensation"]


# -- lists, events, workflows -----------------------------------------------------------------------------
class ListEntry(Document):
    execution_id: str
    workflow: str
    status: str
    created_at: str | None = None


class ListPage(Document):
    """``GET /executions``: newest first; pass ``next_token`` back for the next page."""

    executions: list[ListEntry] = Field(default_factory=list)
    next_token: str | None = None


class EventSent(Document):
    """``POST /executions/{id}/events/{name}`` and ``POST /callbacks/{token}``: ``outcome`` is ``delivered``
    (it was waiting and resumes), ``buffered`` (kept until it waits) or ``duplicate`` (that id was sent before)."""

    execution_id: str
    event: str
    event_id: str
    outcome: str


class RetryPolicy(Document):
    max_attempts: int = 3
    base: float = 1.0
    max_delay: float = 300.0
    multiplier: float = 2.0
    jitter: bool = True


class WorkflowStep(Document):
    """A step of ``GET /workflows``: ``kind`` is ``step``, ``sleep``, ``wait_for_event``, ``map`` or
    ``parallel``, with the keys that kind adds."""

    index: int | None = None
    name: str
    kind: str = "step"
    sleep_s: float | None = None
    event: str | None = None
    timeout_s: float | None = None
    default: Any = None
    event_schema: dict[str, Any] | None = None
    """A ``wait_for_event`` step's model: the JSON Schema an event's data must fit."""
    max_concurrency: int | None = None
    over: str | None = None
    branch: str | None = None
    branches: list[str] | None = None
    retry: RetryPolicy | None = None
    compensate: str | None = None


class WorkflowVersion(Document):
    """One deployed version of a workflow and how many executions are live on it."""

    version: int
    fingerprint: str | None = None
    style: str = "steps"
    steps: list[str] = Field(default_factory=list)
    live: int | None = None
    """Executions live on it (None: the API was asked not to count)."""
    function: str | None = None
    """A code-first version's function (``module.qualname``)."""


class Workflow(Document):
    name: str
    version: int = 1
    """The newest version (what a start without ``version`` runs); ``versions`` lists every deployed one."""
    versions: list[WorkflowVersion] = Field(default_factory=list)
    fingerprint: str | None = None
    retry: RetryPolicy | None = None
    step_timeout_s: float | None = None
    input_schema: dict[str, Any] | None = None
    steps: list[WorkflowStep] = Field(default_factory=list)
    style: str = "steps"
    """``steps`` (a step list: ``steps`` lists them) or ``code`` (a code-first function, ``function``:
    its steps are the calls it makes, known as each execution runs)."""
    function: str | None = None
    events: list[str] | None = None
    """A code-first function's declared events (None: it accepts any)."""

    def waits_for(self) -> list[str]:
        """The events its ``wait_for_event`` steps wait for, in step order."""
        return [s.event for s in self.steps if s.kind == "wait_for_event" and s.event]

    def step(self, index: int | None) -> WorkflowStep | None:
        return self.steps[index] if index is not None and 0 <= index < len(self.steps) else None
