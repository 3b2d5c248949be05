"""EventBridge Scheduler's part in the one-process runtime: each enabled schedule of ``LOOM_SCHEDULES`` fires at
its times while the runtime runs, through the control plane's own firing (``engine_core.schedules.fire``: the
same token per firing, overlap policy, records and outcomes as a deployment's).

What differs from Scheduler: a firing time that passed while no runtime ran is not fired afterwards (Scheduler
would have fired it then; Loom does not back-fill), and when this process falls behind (a laptop asleep), only the
latest of the firings it missed is fired, once. A firing whose store write fails is tried again at the next tick,
as Scheduler retries a delivery. Several processes on one file fire the same firing at most once between them
(the token): the others' deliveries are recorded as duplicates.
"""

from __future__ import annotations

import datetime as dt
import logging

from engine_core.clock import Clock
from engine_core.engine import Engine
from engine_core.schedules.config import Schedules
from engine_core.schedules.fire import FireResult, fire

log = logging.getLogger("loom_lite")
MAX_WAIT_S = 1.0
"""The longest the loop sleeps between looks (a stop, or a firing whose time came, is seen within it)."""


class Scheduler:
    """Fires ``schedules`` on ``engine`` at their times after ``since`` (see the module docstring)."""

    def __init__(self, engine: Engine, schedules: Schedules, clock: Clock, claim_s: float,
                 since: dt.datetime | None = None):
        self.engine, self.schedules, self.clock, self.claim_s = engine, schedules, clock, claim_s
        start = since or clock.now()
        self.after = {d.name: start for d in schedules if d.enabled}
        """Each enabled schedule's firings after this time are still to fire here."""
        self.anchor = {name: self._recorded(name) or start for name in self.after}
        """A rate's firings count from its last recorded firing; a schedule new to the file, from this start (as
        Scheduler's count from the schedule's creation)."""

    def _recorded(self, name: str) -> dt.datetime | None:
        try:
            rec = self.engine.store.get_schedule(name)
        except Exception:  # noqa: BLE001 - an unreadable record: GET /schedules names it; the rate counts afresh
            return None
        return None if rec is None else rec.scheduled_at

    def listed(self) -> Schedules:
        """The schedules as ``GET /schedules`` lists them here: a rate that has not fired yet shows the firing this
        process counts toward (on AWS it shows none until its first firing: Scheduler does not say when it made
        the schedule)."""
        return self.schedules.anchored(self.anchor)

    def next_firing(self, name: str) -> dt.datetime | None:
        return self.schedules.next_firing(name, self.after[name], self.anchor[name])

    def tick(self) -> list[FireResult]:
        """Fire what has come due (for each schedule, its latest firing at or before now)."""
        now, fired = self.clock.now(), []
        for name in self.after:
            due = self.next_firing(name)
            if due is None or due > now:
                continue
            missed = 0
            while (later := self.schedules.next_firing(name, due, due)) is not None and later <= now:
                due, missed = later, missed + 1
            if missed:
                log.warning("schedule %s: %d firing(s) before %s were missed (the runtime was busy or asleep); "
                            "only the latest fires", name, missed, due.isoformat())
            try:
                result = fire(self.engine, self.schedules, name, due, now + dt.timedelta(seconds=self.claim_s))
            except Exception:  # noqa: BLE001 - the store failed: the next tick tries this firing again
                log.exception("schedule %s: firing %s failed; the next tick tries again", name, due.isoformat())
                continue
            self.after[name] = self.anchor[name] = due
            log.info("schedule %s fired for %s: %s%s", name, due.isoformat(), result.outcome,
                     f" ({result.execution_id})" if result.execution_id else "")
            fired.append(result)
        return fired

    def wait_s(self) -> float:
        """Seconds until the next firing of any schedule, at most ``MAX_WAIT_S``."""
        now = self.clock.now()
        upcoming = [d for d in (self.next_firing(name) for name in self.after) if d is not None]
        if not upcoming:
            return MAX_WAIT_S
        return max(0.0, min(MAX_WAIT_S, (min(upcoming) - now).total_seconds()))
