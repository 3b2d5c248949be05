"""Which events a wait takes, in order: shared by the wait kind (which takes the first that fits) and the
operator's send (which answers ``delivered`` only when that is the event it sent)."""

from __future__ import annotations

from typing import Any

from . import callbacks
from .model import EventRecord, Execution, StepRecord, StepStatus
from .steps import WorkflowDef, wait_model


def pending(records: list[Any], events: list[Any], name: str, step: int) -> list[EventRecord]:
    """The events of ``name`` that no wait step has consumed yet and that are this wait's to take: plain
    events, or ones sent through the callback token of this very step.

    The record of ``step`` (the wait asking) does not count as consuming: it exists only when an earlier
    delivery of this wait recorded its event and died (or lost its commit) before advancing, and that
    event is still this wait's to consume, so it comes first. Then this step's callback answer: only
    this wait can ever take it, where a plain event left over is kept for a later wait of its name (a
    callback and a plain event that both arrived while it waited lose neither). Then the oldest."""
    consumed, mine = set(), None
    for r in records:
        if isinstance(r, StepRecord) and r.event_id:
            if r.step_index != step:
                consumed.add(r.event_id)
            elif r.kind == "event" and r.status is StepStatus.FAILED:  # its data could not join the context
                consumed.add(r.event_id)
            elif r.kind == "event":
                mine = r.event_id
    found = [ev for ev in events if isinstance(ev, EventRecord) and ev.name == name and ev.event_id not in consumed
             and callbacks.is_for_step(ev.event_id, step)]
    return sorted(found, key=lambda ev: (ev.event_id != mine, not callbacks.is_reserved(ev.event_id), ev.sent_at,
                                         ev.event_id))


def wait_model_for(wf: WorkflowDef, e: Execution, name: str) -> Any:
    """The model of the wait an event of ``name`` is for (the next wait of that name), or None. A code-first
    workflow's: the declared one, else that of the wait it is at now (the position's description names it)."""
    if wf.code is not None:
        model = (wf.code.events or {}).get(name)
        at = e.code_position
        if model is None and at is not None and at.kind == "event" and at.event == name:
            model = wait_model(at.model)
        return model
    waits = [s for s in wf.steps if s.kind.kind == "event" and s.kind.event == name]
    ahead = [s for s in waits if s.index >= e.current_step] or waits
    return next((s.kind.model for s in ahead if s.kind.model is not None), None)


def fits_wait(model: Any, data: Any) -> bool:
    """Whether ``data`` fits a wait's ``model``."""
    from pydantic import ValidationError

    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True
