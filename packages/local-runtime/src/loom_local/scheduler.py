"""EventBridge Scheduler, played locally: the deployed schedules (read from the emulator) fire their target.

moto stores Scheduler's schedules whole (expression, time zone, state, start date, creation date, the
target with its input, role, dead-letter queue and retry policy) but never fires them. The player reads
them, computes each firing with engine-core's evaluator (the same cron/rate/at rules, time zones and DST
handling the control plane uses for ``next_firing``) and invokes the target function with the target's
input, its ``<aws.scheduler.*>`` context attributes filled in as Scheduler fills them.

The clock is either the wall clock (``make up``: firings happen at their times) or a manual one that
tests move (``advance_to``): a daily schedule fires in seconds, each firing delivered in scheduled-time
order and waited for. ``deliver`` sends one firing again, as Scheduler's at-least-once delivery may.

Where it differs from Scheduler: it waits for each invocation (Scheduler invokes Lambda asynchronously)
and retries a function error twice at once (Lambda's asynchronous retries wait about 1 and 2 minutes);
a rate schedule counts from its start date, else its creation; the flexible time window is ignored (Loom
deploys it OFF); the invocation is made by the runtime, not under the schedule's role (the role's policy
is checked by tests/terraform instead).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine_core.schedules.expressions import ExpressionError, parse

from .functions import Function

UTC = dt.timezone.utc
Observer = Callable[[str, dict[str, Any]], None]
LAMBDA_ASYNC_RETRIES = 2


@dataclass(frozen=True)
class ScheduleConfig:
    """One Scheduler schedule as the emulator holds it."""

    name: str
    group: str
    arn: str
    expression: str
    timezone: str
    enabled: bool
    target_arn: str
    input: str
    """The target's input template (JSON text with ``<aws.scheduler.*>`` placeholders)."""
    created: dt.datetime
    start: dt.datetime | None = None


def _aware(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def read_schedules(scheduler: Any, function_arns: set[str]) -> list[ScheduleConfig]:
    """Every schedule (all groups) whose target is one of ``function_arns``."""
    out = []
    for page in scheduler.get_paginator("list_schedules").paginate():
        for summary in page.get("Schedules", []):
            s = scheduler.get_schedule(Name=summary["Name"], GroupName=summary.get("GroupName") or "default")
            target = s.get("Target") or {}
            if target.get("Arn") not in function_arns:
                continue
            out.append(ScheduleConfig(
                name=s["Name"], group=s.get("GroupName") or "default", arn=s["Arn"],
                expression=s["ScheduleExpression"], timezone=s.get("ScheduleExpressionTimezone") or "UTC",
                enabled=s.get("State", "ENABLED") == "ENABLED", target_arn=target["Arn"], input=target.get("Input") or "{}",
                created=_aware(s.get("CreationDate")) or dt.datetime.now(UTC), start=_aware(s.get("StartDate"))))
    return sorted(out, key=lambda c: c.name)


def scheduler_time(when: dt.datetime) -> str:
    """``<aws.scheduler.scheduled-time>`` as Scheduler writes it: 2022-03-22T18:59:00Z."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_input(config: ScheduleConfig, when: dt.datetime, attempt: int) -> Any:
    """The event the target receives: the input with the context attributes filled in."""
    text = (config.input.replace("<aws.scheduler.scheduled-time>", scheduler_time(when))
            .replace("<aws.scheduler.schedule-arn>", config.arn)
            .replace("<aws.scheduler.attempt-number>", str(attempt))
            .replace("<aws.scheduler.execution-id>", uuid.uuid4().hex[:16]))
    try:
        return json.loads(text)
    except ValueError:
        return text  # Scheduler delivers a non-JSON input as a string


@dataclass
class Delivery:
    schedule: str
    scheduled_at: dt.datetime
    attempts: int = 0
    status: str = ""
    """The last invocation's status (ok, function_error, timeout, ...)."""
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass
class _State:
    config: ScheduleConfig
    since: dt.datetime
    expression: Any = None
    problem: str | None = None
    delivered: list[Delivery] = field(default_factory=list)


class SchedulePlayer:
    def __init__(self, schedules: list[ScheduleConfig], function: Function, manual_start: dt.datetime | None = None,
                 observer: Observer | None = None, poll_s: float = 1.0):
        self.function, self.observer, self.poll_s = function, observer, poll_s
        self.manual = manual_start is not None
        self._now = manual_start
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.states: dict[str, _State] = {}
        for c in schedules:
            state = _State(c, since=min(c.created, c.start or c.created) - dt.timedelta(seconds=1))
            try:
                state.expression = parse(c.expression, c.timezone)
            except ExpressionError as exc:
                state.problem = str(exc)
                self._notify("schedule_unsupported", schedule=c.name, error=str(exc))
            self.states[c.name] = state

    def _notify(self, kind: str, **details: Any) -> None:
        if self.observer is not None:
            try:
                self.observer(kind, {"function": self.function.spec.name, **details})
            except Exception:  # noqa: BLE001
                pass

    def now(self) -> dt.datetime:
        return self._now if self._now is not None else dt.datetime.now(UTC)

    def next_firing(self, name: str) -> dt.datetime | None:
        s = self.states[name]
        if s.expression is None or not s.config.enabled:
            return None
        anchor = s.config.start or s.config.created
        return s.expression.next_after(s.since, anchor=anchor)

    def due(self, until: dt.datetime) -> list[tuple[dt.datetime, str]]:
        """Every firing at or before ``until`` not delivered yet, in scheduled-time order (and claims them)."""
        out = []
        with self._lock:
            for name, s in self.states.items():
                while (t := self.next_firing(name)) is not None and t <= until:
                    out.append((t, name))
                    s.since = t
        return sorted(out)

    def deliver(self, name: str, scheduled_at: dt.datetime) -> Delivery:
        """Invoke the target with this firing (again, if it was delivered before), as Lambda's asynchronous
        invocation would: a function error is retried twice."""
        s = self.states[name]
        d = Delivery(name, scheduled_at)
        for attempt in range(1, LAMBDA_ASYNC_RETRIES + 2):
            event = render_input(s.config, scheduled_at, attempt)
            self._notify("schedule_fire", schedule=name, scheduled_at=scheduler_time(scheduled_at), attempt=attempt)
            r = self.function.invoke(event)
            d.attempts, d.status, d.result, d.error = attempt, r.status, r.payload, r.error
            self._notify("schedule_fired", schedule=name, scheduled_at=scheduler_time(scheduled_at), status=r.status,
                         result=r.payload, error=r.error)
            if r.status == "ok":
                break
        with self._lock:
            s.delivered.append(d)
        return d

    def advance_to(self, when: dt.datetime) -> list[Delivery]:
        """Manual clock: move to ``when`` and deliver every firing due by then, in order, waiting for each."""
        if not self.manual:
            raise RuntimeError("the schedule clock follows the wall clock; start the stack with a manual schedule "
                               "clock (StackOptions.schedule_clock_start) to move it")
        with self._lock:
            if when < self.now():
                raise ValueError(f"the schedule clock is at {self.now().isoformat()}; it cannot go back to {when.isoformat()}")
            self._now = when
        return [self.deliver(name, t) for t, name in self.due(when)]

    def start(self) -> None:
        if self.manual:
            return
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            for t, name in self.due(self.now()):
                if self._stop.is_set():
                    return
                threading.Thread(target=self._deliver_quietly, args=(name, t), name=f"fire-{name}", daemon=True).start()

    def _deliver_quietly(self, name: str, when: dt.datetime) -> None:
        try:
            self.deliver(name, when)
        except Exception as exc:  # noqa: BLE001 - stopping under a firing in flight
            if not self._stop.is_set():
                self._notify("schedule_error", schedule=name, error=str(exc))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
