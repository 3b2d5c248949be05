"""``GET /schedules``'s document as pydantic models (the control plane builds it in
``loom_control_plane/schedules.py``): each deployed schedule with its next firing and its last one."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .models import Document


class FiringError(Document):
    code: str
    message: str = ""


class LastFiring(Document):
    scheduled_at: str
    """The firing's scheduled time (Scheduler's), UTC."""
    outcome: str = ""
    """``started``, ``skipped``, ``failed`` (or ``starting`` while a delivery starts it)."""
    execution_id: str | None = None
    """The firing's execution (started), or the live one it skipped for (skipped)."""
    fired_at: str | None = None
    duplicates: int = 0
    """Repeated deliveries of this firing that started nothing new."""
    error: FiringError | None = None


class LastStarted(Document):
    execution_id: str
    scheduled_at: str | None = None


class Schedule(Document):
    name: str
    workflow: str = ""
    expression: str = ""
    timezone: str = "UTC"
    overlap: str = "skip"
    enabled: bool = True
    input: dict[str, Any] = Field(default_factory=dict)
    next_firing: str | None = None
    """None when disabled, past its last firing, or a rate schedule that has not fired yet."""
    last_firing: LastFiring | None = None
    last_started: LastStarted | None = None
    problem: str | None = None
    """What stops its firings from starting anything (its workflow is not deployed), if anything."""


class ScheduleList(Document):
    now: str | None = None
    schedules: list[Schedule] = Field(default_factory=list)


__all__ = ["FiringError", "LastFiring", "LastStarted", "Schedule", "ScheduleList"]
