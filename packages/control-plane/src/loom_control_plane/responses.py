"""Every reply shape of the control-plane API, as pydantic models, and how each is built from the engine's
domain objects. This is the one home of the API's documents: the engine returns executions, records and
events; what the JSON looks like is decided here (docs/api.md documents it).

A model's optional fields that only some replies carry (``context_error``, ``step_count``, ...) are left
unset, and ``dump`` leaves unset fields out, so a reply never carries a key that does not apply.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from engine_core import codec
from engine_core.clock import format_ts
from engine_core.rebuild import context_of
from engine_core.model import (
    Branch,
    CorruptRecord,
    ErrorInfo,
    EventRecord,
    Execution,
    ExecutionState,
    ListEntry,
    OperationRecord,
    Status,
    StepRecord,
)
from engine_core.registry import Registry, WorkflowDef
from engine_core.versions import cannot_go_on, decode_pins, is_code_first, pinned_definition
from pydantic import BaseModel, ConfigDict, Field

BRANCH_RESULT_SHOWN_BYTES = 2048
"""A branch's result is shown in the history up to this size (the step's own record holds them all)."""


def _ts(value) -> str | None:
    return None if value is None else format_ts(value)


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


class _Reply(BaseModel):
    # Built on first use, not at import: a cold start pays only for the replies its route sends.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


# -- errors ---------------------------------------------------------------------------------------------
class ErrorBody(_Reply):
    error: str
    """Stable, machine-readable code: invalid_json, invalid_request, unknown_workflow, ..."""
    message: str
    execution_status: str | None = None
    """On a 409 from cancel, redrive, wake or an event: the execution's status now (RUNNING, FAILED, ...)."""
    problems: list[dict[str, str]] | None = None
    """On a 400 ``invalid_input``: each field the workflow's input model refused (field, problem, type)."""


# -- start ----------------------------------------------------------------------------------------------
class Links(_Reply):
    self_: str = Field(alias="self")
    history: str


class ExecutionStarted(_Reply):
    """Reply to ``POST /executions``: 202 when this request created the execution, 200 when it existed."""

    execution_id: str
    workflow: str
    status: str
    current_step: int
    created: bool
    links: Links

    @classmethod
    def of(cls, e: Execution, created: bool) -> ExecutionStarted:
        base = f"/executions/{e.execution_id}"
        return cls(execution_id=e.execution_id, workflow=e.workflow, status=e.status.value,
                   current_step=e.current_step, created=created, links=Links(self_=base, history=f"{base}/history"))


# -- an execution ---------------------------------------------------------------------------------------
class WaitingFor(_Reply):
    event: str | None
    timeout_at: str | None
    arrived: bool = False
    """An event came and woke the wait: its delivery (due now) resumes the execution with it."""


class FanOutProgress(_Reply):
    branches: int
    succeeded: int
    max_concurrency: int | None
    step_index: int | None = None
    """In ``fanouts``: the parallel or map step's index."""


class CostView(_Reply):
    """What the execution's worker deliveries spent so far: its cost ledger (DESIGN.md "Cost ledger")."""

    requests: int
    """DynamoDB requests."""
    read_units: float
    write_units: float
    """Read and write units as DynamoDB reported them."""
    messages: int
    """SQS messages that delivered its steps."""
    lambda_ms: int
    """Worker milliseconds, from each delivery's first read to its last commit."""

    @classmethod
    def of(cls, ledger: Any) -> CostView:
        return cls(requests=ledger.requests, read_units=ledger.read_units, write_units=ledger.write_units,
                   messages=ledger.messages, lambda_ms=ledger.lambda_ms)


class ExecutionView(_Reply):
    """``GET /executions/{id}`` (and the execution cancel, redrive and wake answer with)."""

    execution_id: str
    workflow: str
    status: str
    current_step: int
    version: int
    context: Any
    """The start input merged with every completed step's result, rebuilt as the worker does."""
    error: ErrorInfo | None
    next_wake_at: str | None
    timer: str | None
    total_attempts: int
    attempt: int
    attempt_started_at: str | None
    started_by: str | None
    cancelled_by: str | None
    cancel_reason: str | None
    cancel_requested: bool = False
    """A cancel waits for the attempt that holds the step (or its running branches) to end; then it takes
    effect (``cancelled_by`` and ``cancel_reason`` say who asked and why)."""
    redrives: int
    waiting_for: WaitingFor | None
    """While WAITING: the event it waits for and when the wait times out."""
    compensating: bool
    compensated: bool | None
    failed_step: int | None
    compensation_error: ErrorInfo | None
    compensating_for: ErrorInfo | None = None
    """FAILED while still undoing its completed steps (``error`` says why the undo stopped): the failure the
    undo answers. A redrive goes on undoing, and the execution ends with this failure."""
    created_at: str | None
    updated_at: str | None
    expires_at: str | None
    context_error: str | None = None
    """Only when the stored context cannot be read (shown, flagged: a status read never fails on bad data)."""
    fanout: FanOutProgress | None = None
    """Only while a parallel or map step fans out."""
    fanouts: list[FanOutProgress] | None = None
    """Each parallel or map step of this run that fanned out, by ``step_index`` (absent: none did): its branch
    count, how many succeeded, its ``max_concurrency``. A history has a row for each branch that began; once
    the execution ended, the branches without one never will."""
    workflow_version: int = 1
    """The workflow version it is pinned to: it runs to its end on that version's steps."""
    step_count: int | None = None
    """Only when the workflow is deployed here, as a step list (a code-first function's count is known
    only when it returns)."""
    steps: list[str] | None = None
    """The step list it is pinned to, by name (a step list only; absent when this deployment cannot run it)."""
    current_step_name: str | None = None
    style: str | None = None
    """``steps`` (a step list) or ``code`` (a code-first function), when the workflow is deployed here."""
    cannot_run: ErrorInfo | None = None
    """Only for a live execution whose workflow version is not deployed here: the error its next delivery
    fails it with (``workflow_version_missing``), and what to do."""
    result: Any = None
    """Code-first only: what the function returned, once COMPLETED (None when it returned None)."""
    cost: CostView | None = None
    """Its cost ledger; absent until a delivery counted something (or with the ledger off)."""

    @classmethod
    def of(cls, state: ExecutionState, registry: Registry | None = None) -> ExecutionView:
        e = state.execution
        extra: dict[str, Any] = {}
        if e.ledger is not None:
            extra["cost"] = CostView.of(e.ledger)
        try:
            context: Any = codec.to_plain(context_of(state, registry))
        except Exception as exc:
            context, extra["context_error"] = None, f"stored context is unreadable: {exc}"
        join = state.joins.get(e.current_step)
        if join is not None and not e.status.is_terminal and not e.compensating:
            extra["fanout"] = FanOutProgress(branches=join.total, succeeded=join.done,
                                             max_concurrency=join.max_concurrency)
        if state.joins:
            extra["fanouts"] = [FanOutProgress(step_index=i, branches=j.total, succeeded=j.done, max_concurrency=j.max_concurrency)
                                for i, j in sorted(state.joins.items())]
        wf = pinned_definition(registry, e) if registry is not None else None
        problem = cannot_go_on(registry, e) if registry is not None and wf is None else None
        if problem is not None:
            extra["cannot_run"] = problem
        if wf is not None and wf.code is not None:
            extra["style"] = "code"
            position = e.code_position
            # where it failed or was cancelled is named too (a completed one has returned: no position)
            extra["current_step_name"] = None if position is None or e.status is Status.COMPLETED else position.name
            if e.compensating and not e.status.is_terminal:  # the position being undone, walking back
                extra["current_step_name"] = next((r.name for r in state.records if isinstance(r, StepRecord)
                                                   and r.step_index == e.current_step and r.kind != "compensation"),
                                                  extra["current_step_name"])
            returned = next((r for r in state.records if isinstance(r, StepRecord) and r.kind == "return"), None)
            if returned is not None and returned.result_blob is not None and e.status is Status.COMPLETED:
                try:
                    extra["result"] = codec.to_plain(codec.decode(returned.result_blob))
                except Exception as exc:
                    extra["context_error"] = f"stored return value is unreadable: {exc}"
        elif wf is not None:
            extra["style"] = "steps"
            extra["step_count"], extra["steps"] = len(wf.steps), [s.name for s in wf.steps]
            extra["current_step_name"] = wf.steps[e.current_step].name if e.current_step < len(wf.steps) else None
        elif not is_code_first(e) and (pins := decode_pins(e.pinned_steps, e.fingerprint)) is not None:
            # its version is not deployed here: the step list it pinned at its start still names its steps
            extra["style"] = "steps"
            extra["step_count"], extra["steps"] = len(pins), [p.name for p in pins]
            extra["current_step_name"] = pins[e.current_step].name if e.current_step < len(pins) else None
        return cls(
            execution_id=e.execution_id, workflow=e.workflow, status=e.status.value, current_step=e.current_step,
            version=e.version, workflow_version=e.workflow_version, context=context, error=e.error, next_wake_at=_ts(e.next_wake_at),
            timer=None if e.timer is None else e.timer.value, total_attempts=e.total_attempts, attempt=e.attempt,
            attempt_started_at=_ts(e.attempt_started_at), started_by=e.started_by, cancelled_by=e.cancelled_by,
            cancel_reason=e.cancel_reason, cancel_requested=e.cancel_requested, redrives=e.redrives,
            waiting_for=_waiting_for(e, wf),
            compensating=e.compensating, compensated=e.compensated, failed_step=e.failed_step,
            compensation_error=e.compensation_error, compensating_for=e.compensating_for, created_at=_ts(e.created_at), updated_at=_ts(e.updated_at),
            expires_at=_ts(e.expires_at), **extra)


def _waiting_for(e: Execution, wf: WorkflowDef | None) -> WaitingFor | None:
    if e.status is not Status.WAITING:
        return None
    event = timeout_s = None
    if wf is not None and wf.code is not None:
        if e.code_position is not None:
            event, timeout_s = e.code_position.event, e.code_position.timeout_s
    elif wf is not None and e.current_step < len(wf.steps):
        kind = wf.steps[e.current_step].kind
        event, timeout_s = getattr(kind, "event", None), getattr(kind, "timeout_s", None)
    timeout_at, arrived = e.next_wake_at, False
    if timeout_s is not None and e.waiting_since is not None and not e.wait_woken:
        # An event that woke the wait made it due now (its delivery is on its way); the wait still times
        # out when it would have, which is what to show, not the moment the event came.
        timeout_at = e.waiting_since + dt.timedelta(seconds=timeout_s)
        arrived = e.next_wake_at is not None and e.next_wake_at < timeout_at
    return WaitingFor(event=event, timeout_at=_ts(timeout_at), arrived=arrived)


# -- history ----------------------------------------------------------------------------------------------
class CorruptView(_Reply):
    corrupt: bool
    sort_key: str
    detail: str


class StepRecordView(_Reply):
    step_index: int
    name: str
    status: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    result: Any
    error: ErrorInfo | None
    final: bool
    kind: str
    """task, sleep, event (a wait that ended), fanout (a parallel or map step's fan-in) or compensation."""
    event_id: str | None = None
    """For a wait: the event it consumed."""
    corrupt: bool | None = None
    detail: str | None = None


class BranchView(_Reply):
    """One branch of a parallel or map step, listed after its step's record: ``kind: "branch"``."""

    step_index: int
    branch: int
    kind: str
    """Always ``branch``."""
    name: str | None = None
    """Its step's name (None when the deployed definition does not know the step)."""
    status: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    next_wake_at: str | None
    result: Any
    error: ErrorInfo | None
    generation: int
    result_omitted: bool | None = None
    """The result is over ``BRANCH_RESULT_SHOWN_BYTES`` (the fan-in record holds every result)."""
    corrupt: bool | None = None
    detail: str | None = None


def record_view(r: StepRecord | Branch | CorruptRecord, step_names: dict[int, str] | None = None) -> dict[str, Any]:
    if isinstance(r, CorruptRecord):
        return dump(CorruptView(corrupt=True, sort_key=r.sort_key, detail=r.detail))
    if isinstance(r, Branch):
        return dump(_branch_view(r, (step_names or {}).get(r.step_index)))
    result: Any = None
    flagged: dict[str, Any] = {}
    if r.result_blob is not None:
        try:
            result = codec.to_plain(codec.decode(r.result_blob))
        except Exception as exc:
            flagged = {"corrupt": True, "detail": f"stored result is unreadable: {exc}"}
    extra = {"event_id": r.event_id} if r.event_id else {}
    return dump(StepRecordView(step_index=r.step_index, name=r.name, status=r.status.value, attempts=r.attempts,
                               started_at=_ts(r.started_at), finished_at=_ts(r.finished_at), result=result,
                               error=r.error, final=r.is_final, kind=r.kind, **extra, **flagged))


def _branch_view(b: Branch, name: str | None = None) -> BranchView:
    result: Any = None
    extra: dict[str, Any] = {}
    if b.result_blob is not None:
        if len(b.result_blob.encode("utf-8")) > BRANCH_RESULT_SHOWN_BYTES:
            extra["result_omitted"] = True
        else:
            try:
                result = codec.to_plain(codec.decode(b.result_blob))
            except Exception as exc:
                extra = {"corrupt": True, "detail": f"stored result is unreadable: {exc}"}
    return BranchView(step_index=b.step_index, branch=b.branch, kind="branch", name=name, status=b.status.value,
                      attempts=b.attempt,
                      started_at=_ts(b.attempt_started_at), finished_at=_ts(b.finished_at),
                      next_wake_at=_ts(b.next_wake_at) if b.status.is_open else None, result=result, error=b.error,
                      generation=b.generation, **extra)


class OperationView(_Reply):
    op: str
    by: str
    at: str | None
    version: int
    reason: str | None
    detail: dict[str, Any]


def operation_view(r: OperationRecord | CorruptRecord) -> dict[str, Any]:
    if isinstance(r, CorruptRecord):
        return dump(CorruptView(corrupt=True, sort_key=r.sort_key, detail=r.detail))
    return dump(OperationView(op=r.op, by=r.by, at=_ts(r.at), version=r.version, reason=r.reason, detail=r.detail))


class EventView(_Reply):
    event: str
    event_id: str
    sent_at: str | None
    by: str | None
    data: dict[str, Any]
    consumed_by_step: int | None
    """The wait step that consumed it; None while it is kept for a wait."""


def event_view(r: EventRecord | CorruptRecord, consumed_by: dict[str, int]) -> dict[str, Any]:
    if isinstance(r, CorruptRecord):
        return dump(CorruptView(corrupt=True, sort_key=r.sort_key, detail=r.detail))
    return dump(EventView(event=r.name, event_id=r.event_id, sent_at=_ts(r.sent_at), by=r.by, data=r.data,
                          consumed_by_step=consumed_by.get(r.event_id)))


def history_reply(execution_id: str, view: Any, consumed: dict[str, int] | None) -> dict[str, Any]:
    """``GET /executions/{id}/history``: a page of step records (branches after their step), at most
    ``limit`` entries and about 1 MB; with the first page, the first page of the operator's actions and
    of the events (each with the token its own route resumes)."""
    reply: dict[str, Any] = {"execution_id": execution_id, "steps": [record_view(r, view.step_names) for r in view.records],
                             "operations": [operation_view(r) for r in view.operations], "next_token": view.next_token}
    if consumed is not None:
        if getattr(view, "ledger", None) is not None:
            reply["cost"] = dump(CostView.of(view.ledger))
        reply["events"] = [event_view(ev, consumed) for ev in view.events]
        reply["operations_next_token"] = view.operations_next_token
        reply["events_next_token"] = view.events_next_token
    return reply


def events_reply(execution_id: str, events: list, consumed: dict[str, int], next_token: str | None) -> dict[str, Any]:
    """``GET /executions/{id}/events``: a page of the events sent to the execution, in key order."""
    return {"execution_id": execution_id, "events": [event_view(ev, consumed) for ev in events],
            "next_token": next_token}


def operations_reply(execution_id: str, operations: list, next_token: str | None) -> dict[str, Any]:
    """``GET /executions/{id}/operations``: a page of the operator's actions, in version order."""
    return {"execution_id": execution_id, "operations": [operation_view(r) for r in operations],
            "next_token": next_token}


# -- lists, events, workflows -----------------------------------------------------------------------------
class ListEntryView(_Reply):
    execution_id: str
    workflow: str
    status: str
    """RUNNING, SLEEPING, WAITING or the terminal status (LIVE only if the execution item could not be read)."""
    created_at: str | None


class ListReply(_Reply):
    executions: list[ListEntryView]
    next_token: str | None

    @classmethod
    def of(cls, entries: list[ListEntry], next_token: str | None) -> ListReply:
        return cls(executions=[ListEntryView(execution_id=x.execution_id, workflow=x.workflow, status=x.status,
                                             created_at=_ts(x.created_at)) for x in entries], next_token=next_token)


class EventSentView(_Reply):
    """Reply to ``POST /executions/{id}/events/{name}`` and ``POST /callbacks/{token}``."""

    execution_id: str
    event: str
    event_id: str
    outcome: str
    """delivered (it was waiting and resumes now), buffered (kept for its wait) or duplicate (sent before)."""


def workflow_view(wf: WorkflowDef) -> dict[str, Any]:
    """One workflow of ``GET /workflows``: its steps (each kind adds what it is), policies and input schema."""
    steps = []
    for s in wf.steps:
        view: dict[str, Any] = {"index": s.index, "name": s.name,
                                "kind": {"sleep": "sleep", "task": "step"}.get(s.kind.kind, s.kind.kind),
                                **s.kind.describe()}
        if s.retry:
            view["retry"] = s.retry.model_dump()
        if s.timeout_s:
            view["timeout_s"] = s.timeout_s
        if s.compensate:
            view["compensate"] = getattr(s.compensate, "__name__", "compensate")
        steps.append(view)
    out = {"name": wf.name, "fingerprint": wf.fingerprint, "retry": wf.retry.model_dump(),
           "step_timeout_s": wf.step_timeout_s, "input_schema": wf.input_schema(), "steps": steps,
           "style": "steps" if wf.code is None else "code"}
    if wf.code is not None:  # its steps are the calls the function makes: known as each execution runs
        out["function"] = wf.source
        if wf.code.events is not None:
            out["events"] = sorted(wf.code.events)
    return out
