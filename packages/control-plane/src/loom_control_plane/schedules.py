"""Schedules in the control plane: the firing event EventBridge Scheduler sends when it invokes the function
directly (not through the Function URL), and ``GET /schedules``.

The schedule event is the Scheduler target's input, as terraform/modules/loom renders it::

    {"source": "loom.schedule", "schedule": "<name>", "scheduled_time": "<aws.scheduler.scheduled-time>",
     "schedule_arn": "<aws.scheduler.schedule-arn>", "attempt": "<aws.scheduler.attempt-number>"}

It names the schedule and the scheduled time only: the workflow, input and overlap policy come from the
deployment (``LOOM_SCHEDULES``), so whoever may invoke the function can fire only what is deployed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine_core.adapters.bootstrap import Runtime
from engine_core.clock import format_ts
from engine_core.errors import CorruptStateError, UnknownWorkflowError
from engine_core.schedules.config import ENV, Schedules
from engine_core.schedules.fire import FireResult, fire
from engine_core.settings import ConfigurationError

from .errors import ApiError

SOURCE = "loom.schedule"
DEADLINE_MARGIN_MS = 1000
"""A claim on a firing ends this long before the invocation's own deadline."""


class ScheduleEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first firing, not at every cold start

    source: str
    schedule: str
    scheduled_time: dt.datetime
    schedule_arn: str | None = None
    attempt: str | None = None


def is_schedule_event(event: Any) -> bool:
    """A Scheduler firing, as opposed to a Function URL request (which carries ``requestContext.http``)."""
    return isinstance(event, dict) and event.get("source") == SOURCE and "requestContext" not in event


def load(env: Mapping[str, str]) -> tuple[Schedules, str | None]:
    """The deployed schedules, or none and the problem (logged at start-up; the API keeps serving)."""
    try:
        return Schedules.from_env(env), None
    except ConfigurationError as exc:
        return Schedules(), f"{exc}. Fix the Terraform schedules input and apply again"


def on_schedule(rt: Runtime, schedules: Schedules, problem: str | None, event: dict[str, Any],
                remaining_ms: int | None) -> FireResult:
    """Fire one delivery. Raises (so Lambda retries the delivery) on a malformed event, an invalid
    ``LOOM_SCHEDULES`` or a store failure; a firing that cannot start is recorded, not raised."""
    if problem is not None:
        raise ConfigurationError(f"cannot fire schedule {event.get('schedule')!r}: {ENV} is invalid: {problem}")
    try:
        parsed = ScheduleEvent.model_validate(event)
    except ValidationError as exc:
        raise ValueError(f"malformed schedule event (want source, schedule, scheduled_time): {exc}") from None
    if parsed.scheduled_time.tzinfo is None:
        raise ValueError(f"schedule event's scheduled_time {event.get('scheduled_time')!r} has no time zone "
                         "(Scheduler sends UTC, e.g. 2026-03-22T18:59:00Z)")
    now = rt.engine.clock.now()
    deadline = None if remaining_ms is None else now + dt.timedelta(milliseconds=max(0, remaining_ms - DEADLINE_MARGIN_MS))
    return fire(rt.engine, schedules, parsed.schedule, parsed.scheduled_time, deadline)


def _view(rt: Runtime, schedules: Schedules, name: str, now: dt.datetime) -> dict[str, Any]:
    d = schedules.defs[name]
    problem = None
    try:
        rt.registry.get(d.workflow)
    except UnknownWorkflowError:
        problem = (f"workflow {d.workflow!r} is not deployed in this control plane: each firing fails until it is "
                   "(GET /workflows lists the deployed ones)")
    try:
        rec = rt.engine.store.get_schedule(name)
    except CorruptStateError as exc:
        rec, problem = None, f"the schedule's record is unreadable: {exc.detail}"
    nxt = schedules.next_firing(name, now, None if rec is None else rec.scheduled_at) if d.enabled else None
    expression = schedules.expressions[name]
    if problem is None and d.enabled and rec is None and expression.kind == "at" and expression.when <= now:
        kept = rt.engine.life.retention + rt.engine.life.grace  # how long a firing's record outlives its firing
        if now - expression.when < kept:
            problem = (f"its one firing, {format_ts(expression.when)}, has passed and none is recorded: a one-time "
                       "schedule fires once, at its time, so it will not fire now; set a future at() to run it")
        else:  # the record of a firing it made has expired by now: whether it fired, nothing here says
            problem = (f"its one firing, {format_ts(expression.when)}, passed over {kept.days} days ago (longer than "
                       "a firing's record is kept): it will not fire again; remove it, or set a future at() to run "
                       "it again")
    last = None if rec is None else {
        "scheduled_at": format_ts(rec.scheduled_at), "outcome": rec.outcome.value, "execution_id": rec.execution_id,
        "fired_at": format_ts(rec.fired_at), "duplicates": rec.duplicates,
        "error": None if rec.error is None else {"code": rec.error.code, "message": rec.error.message}}
    started = None if rec is None or rec.started_id is None else {
        "execution_id": rec.started_id, "scheduled_at": None if rec.started_for is None else format_ts(rec.started_for)}
    return {"name": d.name, "workflow": d.workflow, "expression": d.expression, "timezone": d.timezone,
            "overlap": d.overlap, "enabled": d.enabled, "input": d.input,
            "next_firing": None if nxt is None else format_ts(nxt), "last_firing": last, "last_started": started,
            "problem": problem}


def list_schedules(rt: Runtime, req: Any) -> tuple[int, dict[str, Any]]:
    """``GET /schedules``: every deployed schedule with its next firing and its last one."""
    if req.query:
        raise ApiError(400, "invalid_request", f"GET /schedules takes no query parameters, got {sorted(req.query)}")
    if req.schedules_problem is not None:
        raise ApiError(500, "schedules_invalid", f"{ENV} is invalid: {req.schedules_problem}")
    now = rt.engine.clock.now()
    return 200, {"now": format_ts(now), "schedules": [_view(rt, req.schedules, name, now)
                                                      for name in sorted(req.schedules.defs)]}


__all__ = ["SOURCE", "is_schedule_event", "list_schedules", "load", "on_schedule"]
