"""A schedule's record: what its newest firing did, and which execution ``skip`` must wait for.

One small item per schedule (``SCHED#<name>``), written by the fire path only, through the store's two
operations (``ports.StateStore.get_schedule`` / ``put_schedule``). The store writes a record only when it
moves forward in ``(scheduled_at, revision)`` order, so a late delivery of an older firing, or a copy
that lost a race, never replaces what a newer one wrote.
"""

from __future__ import annotations

import datetime as dt
from enum import Enum

from pydantic import BaseModel, ConfigDict

from ..model import ErrorInfo


class FiringOutcome(str, Enum):
    STARTING = "starting"
    """Claimed: the firing's execution is being started (``claim_until`` bounds how long that may take)."""
    STARTED = "started"
    SKIPPED = "skipped"
    """``skip`` and the schedule's previous execution was still live: nothing started."""
    FAILED = "failed"
    """Nothing could be started (the workflow is not deployed, the input does not fit it)."""


class ScheduleRecord(BaseModel):
    # Built on first use: only the control plane's firings and GET /schedules read or write one, and the
    # worker and sweeper import it (through the store port) at every cold start.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    scheduled_at: dt.datetime
    """The scheduled time of the newest firing handled (Scheduler's ``<aws.scheduler.scheduled-time>``)."""
    revision: int = 1
    """Bumped by every write of the same firing (its claim, its outcome, a repeated delivery counted)."""
    outcome: FiringOutcome
    fired_at: dt.datetime
    """When the control plane handled that firing (its claim, for ``starting``)."""
    execution_id: str | None = None
    """The firing's execution (started, starting), or the live one it skipped for (skipped)."""
    started_id: str | None = None
    """The schedule's newest execution started (or being started): what ``skip`` checks."""
    started_for: dt.datetime | None = None
    """The scheduled time of the firing that started ``started_id``."""
    claim_until: dt.datetime | None = None
    """``starting``: the claiming invocation's deadline; after it, the claim is over either way. ``skipped``: the
    same deadline carried over from the claim of ``started_id`` it skipped for (that start may still be running)."""
    error: ErrorInfo | None = None
    duplicates: int = 0
    """Repeated deliveries of ``scheduled_at`` that started nothing new."""
    expires_at: dt.datetime | None = None
    """DynamoDB's TTL: past the schedule's next firing plus retention, so a live record never expires."""

    @property
    def order(self) -> tuple[dt.datetime, int]:
        return self.scheduled_at, self.revision


__all__ = ["FiringOutcome", "ScheduleRecord"]
