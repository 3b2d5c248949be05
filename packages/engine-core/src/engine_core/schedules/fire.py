"""One firing of a schedule: what the control plane does with each Scheduler delivery.

A firing is named by its schedule and its scheduled time, and its execution's idempotency token derives
from both (``schedule:<name>:<time>``), so however often Scheduler delivers it (at-least-once, retries,
a replay) it starts at most one execution. The schedule's record (``record.py``) orders firings:

1. a delivery older than the newest firing the schedule handled is ``late`` (or ``duplicate`` when its own
   execution exists): Loom does not back-fill, and the record never moves back;
2. a repeated delivery of the newest firing is a ``duplicate`` (counted on the record), unless the
   delivery that claimed it died before finishing (its claim ran out): then this one finishes it;
3. a new firing of a disabled schedule (a delivery Scheduler retried after it was disabled) is
   ``skipped``, and so is one under ``skip`` whose previous execution is still live (or being started
   right now); otherwise the firing is *claimed* on the record (``starting``, one conditional write that
   only a newer firing may pass), its execution started with the token, and ``started`` recorded;
4. a firing that cannot start (the workflow is not deployed, the input does not fit it) is ``failed``:
   recorded with the error and counted, never retried (a retry could not succeed). Anything else (the
   store failing) raises, so Lambda retries the delivery: the token makes the retry safe.

Example:
    >>> result = fire(engine, Schedules.parse(text), "nightly-report", scheduled_at)
    >>> result.outcome            # "started", "duplicate", "late", "skipped" or "failed"
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from ..clock import format_ts
from ..engine import _TOKEN_NAMESPACE, Engine
from ..errors import IdempotencyConflictError, InvalidInputError, InvalidRequestError, StepCapError, UnknownWorkflowError
from ..model import ErrorInfo
from .config import ScheduleDef, Schedules
from .record import FiringOutcome, ScheduleRecord

log = logging.getLogger("engine_core")
DEFAULT_CLAIM_S = 60.0
"""How long a claim holds a firing when the caller gives no deadline (tests and local use)."""
_PERMANENT = (UnknownWorkflowError, InvalidInputError, InvalidRequestError, StepCapError)
_ROUNDS = 8
"""Re-reads when a concurrent delivery moved the record between this one's read and its write."""


@dataclass(frozen=True)
class FireResult:
    schedule: str
    scheduled_at: dt.datetime
    outcome: str
    """``started``, ``duplicate``, ``late``, ``skipped`` or ``failed``."""
    execution_id: str | None = None
    """The firing's execution (started, duplicate), or the live one it skipped for."""
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["scheduled_at"] = format_ts(self.scheduled_at)
        return out


def token_for(name: str, scheduled_at: dt.datetime) -> str:
    """The idempotency token of a firing (its execution id derives from it, as every start's does)."""
    return f"schedule:{name}:{scheduled_at.astimezone(dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def execution_id_for(name: str, scheduled_at: dt.datetime) -> str:
    return str(uuid.uuid5(_TOKEN_NAMESPACE, token_for(name, scheduled_at)))


class _Firing:
    def __init__(self, engine: Engine, schedules: Schedules, sched: ScheduleDef, scheduled_at: dt.datetime,
                 deadline: dt.datetime | None):
        self.engine, self.schedules, self.sched = engine, schedules, sched
        self.store, self.now = engine.store, engine.clock.now()
        self.at = scheduled_at.astimezone(dt.timezone.utc).replace(microsecond=0)
        self.eid = execution_id_for(sched.name, self.at)
        self.claim_until = deadline or self.now + dt.timedelta(seconds=DEFAULT_CLAIM_S)

    def result(self, outcome: str, execution_id: str | None = None, detail: str | None = None) -> FireResult:
        self.engine.metrics.add_metric(f"ScheduleFirings{outcome.capitalize()}", "Count", 1)
        level = logging.ERROR if outcome == "failed" else logging.INFO
        log.log(level, "schedule fired", extra={"schedule": self.sched.name, "scheduled_at": format_ts(self.at),
                                                "outcome": outcome, "execution_id": execution_id, "detail": detail})
        return FireResult(self.sched.name, self.at, outcome, execution_id, detail)

    def expires_at(self) -> dt.datetime:
        """Retention past the schedule's next firing, so a record the schedule still needs never expires."""
        following = self.schedules.next_firing(self.sched.name, self.at, last=self.at) or self.now
        life = self.engine.life
        return max(self.now, following) + life.retention + life.grace

    def record(self, base: ScheduleRecord | None, **fields: Any) -> ScheduleRecord:
        same = base is not None and base.scheduled_at == self.at
        carried = {} if base is None else {"started_id": base.started_id, "started_for": base.started_for}
        values = {"name": self.sched.name, "scheduled_at": self.at, "fired_at": self.now, "expires_at": self.expires_at(),
                  "revision": base.revision + 1 if same and base is not None else 1,
                  "duplicates": base.duplicates if same and base is not None else 0, **carried, **fields}
        return ScheduleRecord(**values)

    def live(self, rec: ScheduleRecord | None) -> str | None:
        """The schedule's previous execution if it is still live (or being started by a running claim)."""
        if rec is None or rec.started_id is None:
            return None
        prev = self.store.load(rec.started_id)
        if prev is not None and not prev.status.is_terminal and not prev.is_expired(self.now):
            return prev.execution_id
        # A claim still running, on the record or carried over it by a skip (the skip's write replaces the claim:
        # without it, the firing after the skip would find nothing live and start a second one)
        claimed = rec.outcome in (FiringOutcome.STARTING, FiringOutcome.SKIPPED) and rec.claim_until is not None \
            and rec.claim_until > self.now
        return rec.started_id if prev is None and claimed else None

    def run(self) -> FireResult:
        for _ in range(_ROUNDS):
            rec = self.store.get_schedule(self.sched.name)
            if rec is not None and rec.scheduled_at > self.at:
                mine = self.store.load(self.eid)
                if mine is not None:
                    return self.result("duplicate", self.eid, "a repeated delivery of an earlier firing")
                return self.result("late", None, f"the schedule already fired for {format_ts(rec.scheduled_at)}; "
                                                 "Loom does not back-fill older firings")
            if rec is not None and rec.scheduled_at == self.at:
                claim_running = rec.outcome is FiringOutcome.STARTING and (rec.claim_until or self.now) > self.now
                if claim_running:
                    return self.result("duplicate", rec.execution_id, "another delivery of this firing is starting it")
                if rec.outcome is not FiringOutcome.STARTING:
                    if self.store.put_schedule(self.record(rec, outcome=rec.outcome, execution_id=rec.execution_id,
                                                           error=rec.error, duplicates=rec.duplicates + 1,
                                                           fired_at=rec.fired_at)):
                        return self.result("duplicate", rec.execution_id, f"this firing was already {rec.outcome.value}")
                    continue
                # The delivery that claimed it died before recording; its decision to start stands.
                claim = self.record(rec, outcome=FiringOutcome.STARTING, execution_id=self.eid,
                                    claim_until=self.claim_until)
                if not self.store.put_schedule(claim):
                    continue
                return self.start(claim, previous=rec)
            if not self.sched.enabled:  # a delivery made (or retried) after the schedule was disabled
                return self.result("skipped", None, "the schedule is disabled (enabled = false): a delivery "
                                   "Scheduler made or retried after that starts nothing")
            if self.sched.overlap == "skip" and (live := self.live(rec)) is not None:
                carried = rec.claim_until if rec is not None and rec.started_id == live else None
                if self.store.put_schedule(self.record(rec, outcome=FiringOutcome.SKIPPED, execution_id=live,
                                                       claim_until=carried)):
                    return self.result("skipped", live, f"the previous execution {live} is still live (overlap skip)")
                continue
            claim = self.record(rec, outcome=FiringOutcome.STARTING, execution_id=self.eid, started_id=self.eid,
                                started_for=self.at, claim_until=self.claim_until)
            if self.store.put_schedule(claim):
                return self.start(claim, previous=rec)
        raise RuntimeError(f"schedule {self.sched.name!r}: the record kept moving under {_ROUNDS} attempts to fire "
                           f"{format_ts(self.at)}; the delivery is retried")

    def start(self, claim: ScheduleRecord, previous: ScheduleRecord | None) -> FireResult:
        try:
            started = self.engine.start(self.sched.workflow, dict(self.sched.input), token_for(self.sched.name, self.at),
                                        by=f"schedule:{self.sched.name}")
        except IdempotencyConflictError as exc:
            # The firing's own token: a delivery that crashed started its execution, with the schedule's input as
            # it was then (a deploy changed the input since). That execution is this firing's.
            self.store.put_schedule(self.record(claim, outcome=FiringOutcome.STARTED, execution_id=exc.execution_id))
            return self.result("started", exc.execution_id, "its execution already existed: a delivery that crashed "
                               "had started it, with the schedule's input as it was then (it changed since)")
        except _PERMANENT as exc:
            error = ErrorInfo(code=_code(exc), message=str(exc)[:2000], type=type(exc).__name__)
            # Nothing started: skip keeps waiting for the execution before this one.
            kept = {"started_id": None if previous is None else previous.started_id,
                    "started_for": None if previous is None else previous.started_for}
            self.store.put_schedule(self.record(claim, outcome=FiringOutcome.FAILED, execution_id=None, error=error,
                                                **kept))
            return self.result("failed", None, str(exc))
        except Exception:
            # Release the claim at once, so Lambda's retry of this delivery need not wait for it to run out.
            try:
                self.store.put_schedule(self.record(claim, outcome=FiringOutcome.STARTING, execution_id=self.eid,
                                                    claim_until=self.now))
            except Exception:  # noqa: BLE001 - the claim runs out at its deadline anyway
                log.warning("could not release a schedule's claim", exc_info=True)
            raise
        self.store.put_schedule(self.record(claim, outcome=FiringOutcome.STARTED, execution_id=self.eid))
        detail = None if started.created else "its execution already existed: a crashed delivery had started it"
        return self.result("started", self.eid, detail)


def _code(exc: Exception) -> str:
    return {UnknownWorkflowError: "unknown_workflow", InvalidInputError: "invalid_input",
            StepCapError: StepCapError.code}.get(type(exc), "invalid_request")


def fire(engine: Engine, schedules: Schedules, name: str, scheduled_at: dt.datetime,
         deadline: dt.datetime | None = None) -> FireResult:
    """Handle one delivery of schedule ``name``'s firing at ``scheduled_at`` (aware). ``deadline``: when the
    calling invocation ends (its claim on the firing lasts until then)."""
    sched = schedules.get(name)
    if sched is None:
        known = ", ".join(sorted(schedules.defs)) or "none"
        detail = (f"no schedule named {name!r} is deployed (deployed: {known}); it was removed while a delivery "
                  "was in flight, or the event was not sent by this deployment's Scheduler")
        engine.metrics.add_metric("ScheduleFiringsFailed", "Count", 1)
        log.error("schedule fired", extra={"schedule": name, "outcome": "failed", "detail": detail})
        return FireResult(name, scheduled_at, "failed", None, detail)
    return _Firing(engine, schedules, sched, scheduled_at, deadline).run()


__all__ = ["FireResult", "execution_id_for", "fire", "token_for"]
