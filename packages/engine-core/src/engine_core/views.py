"""JSON views of executions and history, the shapes the control plane's API returns."""

from __future__ import annotations

from typing import Any

from . import codec
from .clock import format_ts
from .engine import rebuild_context
from .model import CorruptRecord, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, Status, StepRecord, StepStatus
from .model import Branch
from .registry import Registry


def _ts(value) -> str | None:
    return None if value is None else format_ts(value)


def _context(state: ExecutionState, registry: Registry | None) -> Any:
    e = state.execution
    upto = e.failed_step if e.failed_step is not None else e.current_step
    if registry is not None and e.workflow in registry and registry.get(e.workflow).fingerprint == e.fingerprint:
        return rebuild_context(state.input_blob, state.records, registry.get(e.workflow), upto)
    data = codec.decode(state.input_blob)  # an unknown definition: every settled result, in order
    for r in state.records:
        if isinstance(r, StepRecord) and r.step_index < upto and r.status is StepStatus.SUCCEEDED \
                and r.result_blob is not None and r.kind != "compensation":
            data.update(codec.decode(r.result_blob))
    return data


def execution_view(state: ExecutionState, registry: Registry | None = None) -> dict[str, Any]:
    """The execution with its context (rebuilt from the input and the history, as the worker does)."""
    e = state.execution
    try:
        context: Any = codec.to_plain(_context(state, registry))
        context_error = None
    except Exception as exc:  # shown, flagged: a status read must never 500 on bad data
        context, context_error = None, f"stored context is unreadable: {exc}"
    view: dict[str, Any] = {
        "execution_id": e.execution_id,
        "workflow": e.workflow,
        "status": e.status.value,
        "current_step": e.current_step,
        "version": e.version,
        "context": context,
        "error": None if e.error is None else e.error.model_dump(),
        "next_wake_at": _ts(e.next_wake_at),
        "timer": None if e.timer is None else e.timer.value,
        "total_attempts": e.total_attempts,
        "attempt": e.attempt,
        "attempt_started_at": _ts(e.attempt_started_at),
        "started_by": e.started_by,
        "cancelled_by": e.cancelled_by,
        "cancel_reason": e.cancel_reason,
        "redrives": e.redrives,
        "waiting_for": _waiting_for(e, registry),
        "compensating": e.compensating,
        "compensated": e.compensated,
        "failed_step": e.failed_step,
        "compensation_error": None if e.compensation_error is None else e.compensation_error.model_dump(),
        "created_at": _ts(e.created_at),
        "updated_at": _ts(e.updated_at),
        "expires_at": _ts(e.expires_at),
    }
    if context_error:
        view["context_error"] = context_error
    join = state.joins.get(e.current_step)
    if join is not None and not e.status.is_terminal and not e.compensating:  # a parallel or map step fanning out
        view["fanout"] = {"branches": join.total, "succeeded": join.done, "max_concurrency": join.max_concurrency}
    if registry is not None and e.workflow in registry:
        wf = registry.get(e.workflow)
        view["step_count"] = len(wf.steps)
        view["current_step_name"] = wf.steps[e.current_step].name if e.current_step < len(wf.steps) else None
    return view


def _waiting_for(e: Execution, registry: Registry | None) -> dict[str, Any] | None:
    if e.status is not Status.WAITING:
        return None
    event = None
    if registry is not None and e.workflow in registry:
        steps = registry.get(e.workflow).steps
        if e.current_step < len(steps):
            event = getattr(steps[e.current_step].kind, "event", None)
    return {"event": event, "timeout_at": _ts(e.next_wake_at)}


def event_view(r: EventRecord | CorruptRecord, consumed_by: dict[str, int] | None = None) -> dict[str, Any]:
    if isinstance(r, CorruptRecord):
        return {"corrupt": True, "sort_key": r.sort_key, "detail": r.detail}
    step = (consumed_by or {}).get(r.event_id)
    return {"event": r.name, "event_id": r.event_id, "sent_at": _ts(r.sent_at), "by": r.by, "data": r.data,
            "consumed_by_step": step}


def events_view(events: list[Any], records: list[Any]) -> list[dict[str, Any]]:
    """Events sent to an execution, each with the step that consumed it (None: still kept for a wait)."""
    consumed = {r.event_id: r.step_index for r in records if isinstance(r, StepRecord) and r.event_id}
    return [event_view(ev, consumed) for ev in events]


def record_view(r: StepRecord | CorruptRecord) -> dict[str, Any]:
    if isinstance(r, Branch):  # a parallel or map step's branch, listed after its step
        return branch_view(r)
    if isinstance(r, CorruptRecord):
        return {"corrupt": True, "sort_key": r.sort_key, "detail": r.detail}
    result: Any = None
    view: dict[str, Any] = {}
    if r.result_blob is not None:
        try:
            result = codec.to_plain(codec.decode(r.result_blob))
        except Exception as exc:
            view = {"corrupt": True, "detail": f"stored result is unreadable: {exc}"}
    return {
        "step_index": r.step_index,
        "name": r.name,
        "status": r.status.value,
        "attempts": r.attempts,
        "started_at": _ts(r.started_at),
        "finished_at": _ts(r.finished_at),
        "result": result,
        "error": None if r.error is None else r.error.model_dump(),
        "final": r.is_final,
        "kind": r.kind,
        **({"event_id": r.event_id} if r.event_id else {}),
        **view,
    }


def operation_view(r: OperationRecord | CorruptRecord) -> dict[str, Any]:
    if isinstance(r, CorruptRecord):
        return {"corrupt": True, "sort_key": r.sort_key, "detail": r.detail}
    return {"op": r.op, "by": r.by, "at": _ts(r.at), "version": r.version, "reason": r.reason, "detail": r.detail}


def list_entry_view(entry: ListEntry) -> dict[str, Any]:
    return {"execution_id": entry.execution_id, "workflow": entry.workflow, "status": entry.status,
            "created_at": _ts(entry.created_at)}


BRANCH_RESULT_SHOWN_BYTES = 2048
"""A branch's result is shown in the history up to this size (the step's own record holds them all)."""


def branch_view(b: Branch) -> dict[str, Any]:
    """One branch of a parallel or map step (``model.Branch``), as a history record: ``kind: "branch"``."""
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
    return {
        "step_index": b.step_index,
        "branch": b.branch,
        "kind": "branch",
        "status": b.status.value,
        "attempts": b.attempt,
        "started_at": _ts(b.attempt_started_at),
        "finished_at": _ts(b.finished_at),
        "next_wake_at": _ts(b.next_wake_at) if b.status.is_open else None,
        "result": result,
        "error": None if b.error is None else b.error.model_dump(),
        "generation": b.generation,
        **extra,
    }
