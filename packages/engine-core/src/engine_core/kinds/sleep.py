"""A durable sleep: nothing runs and nothing bills until the wake time; the sweeper or a delayed
message resumes the execution."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import codec
from ..clock import format_ts
from ..model import StepRecord, StepStatus

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..step_run import StepRun


@dataclass(frozen=True)
class SleepKind:
    seconds: float
    kind = "sleep"

    def shape(self) -> list[Any]:
        return ["sleep", self.seconds]

    def describe(self) -> dict[str, Any]:
        return {"sleep_s": self.seconds}

    def needs_invocation_time(self) -> bool:
        return False

    def run(self, run: StepRun) -> Outcome:
        now = run.now()
        wake_at = now + dt.timedelta(seconds=self.seconds)
        record = StepRecord(step_index=run.step.index, name=run.step.name, status=StepStatus.SUCCEEDED, attempts=1,
                            version=run.execution.version,
                            started_at=now, finished_at=now, result_blob=codec.encode({"wake_at": format_ts(wake_at)}),
                            expires_at=run.history_expiry(now))
        return run.sleep_until(wake_at, record)
