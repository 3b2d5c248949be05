"""An EventBridge schedule rule, played locally: invoke the target function on every tick.

The period comes from the rule's ``rate(...)`` expression; ``every_s`` overrides it for local use
(``--sweep-every 5``). The event is shaped like EventBridge's "Scheduled Event". Like EventBridge,
a tick does not wait for the previous invocation: overlapping runs are possible, and the sweeper must
(and does) tolerate them.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .functions import Function

Observer = Callable[[str, dict[str, Any]], None]
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


class ScheduleError(ValueError):
    pass


def rate_seconds(expression: str) -> float:
    """Seconds between ticks of an EventBridge ``rate(...)`` expression."""
    m = _RATE.match(expression.strip())
    if not m:
        raise ScheduleError(f"schedule expression {expression!r} is not a rate(N minute(s)|hour(s)|day(s)); the "
                            "local runtime plays rate schedules only (Loom's sweeper uses rate(1 minute))")
    value, unit = int(m.group(1)), m.group(2)
    if value < 1 or (value == 1) != (not unit.endswith("s")):
        raise ScheduleError(f"schedule expression {expression!r} is malformed: EventBridge wants rate(1 minute) "
                            "or rate(N minutes) with N > 1")
    return float(value * _UNIT_S[unit])


@dataclass(frozen=True)
class RuleConfig:
    name: str
    arn: str
    expression: str
    account: str
    region: str
    target_input: str | None = None
    """A target's constant ``Input`` (JSON text), sent instead of the scheduled event."""


def scheduled_event(rule: RuleConfig, when: dt.datetime | None = None) -> dict[str, Any]:
    when = when or dt.datetime.now(dt.timezone.utc)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": rule.account,
        "time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": rule.region,
        "resources": [rule.arn],
        "detail": {},
    }


class Scheduler:
    def __init__(self, rule: RuleConfig, function: Function, every_s: float | None = None,
                 observer: Observer | None = None, first_after_s: float | None = None):
        self.rule, self.function, self.observer = rule, function, observer
        self.period_s = every_s if every_s is not None else rate_seconds(rule.expression)
        if self.period_s <= 0:
            raise ScheduleError(f"the sweep period must be positive, got {self.period_s}")
        self.first_after_s = self.period_s if first_after_s is None else first_after_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.ticks = 0

    def _notify(self, kind: str, **details: Any) -> None:
        if self.observer is not None:
            try:
                self.observer(kind, {"function": self.function.spec.name, "rule": self.rule.name, **details})
            except Exception:  # noqa: BLE001
                pass

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"schedule-{self.rule.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        wait = self.first_after_s
        while not self._stop.wait(wait):
            self.fire()
            wait = self.period_s

    def fire(self) -> threading.Thread:
        """One tick: invoke the target asynchronously (like EventBridge) and return the invoking thread."""
        self.ticks += 1
        tick = self.ticks
        event: Any = scheduled_event(self.rule)
        if self.rule.target_input is not None:
            import json

            event = json.loads(self.rule.target_input)

        def invoke() -> None:
            try:
                result = self.function.invoke(event)
                self._notify("tick_done", tick=tick, status=result.status, payload=result.payload,
                             error=result.error, pid=result.pid)
            except Exception as exc:  # noqa: BLE001 - shutting down under a tick in flight
                if not self._stop.is_set():
                    self._notify("tick_error", tick=tick, error=str(exc))
            finally:
                with self._lock:
                    self._running.discard(threading.current_thread())

        t = threading.Thread(target=invoke, name=f"tick-{self.rule.name}-{tick}", daemon=True)
        with self._lock:
            self._running.add(t)
        self._notify("tick", tick=tick)
        t.start()
        return t
