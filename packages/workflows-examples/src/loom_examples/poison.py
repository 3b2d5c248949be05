"""``poison_pill``: a step that always fails.

After its attempts run out the execution ends FAILED, the error is in its history, and one notice
naming the execution goes to the dead-letter queue. The step after it never runs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from engine_core import RetryPolicy, StepContext, workflow

MAX_ATTEMPTS = 3


class PoisonInput(BaseModel):
    """Any object: the poison is in the step, not the input. Declared so the schema says so."""

    model_config = ConfigDict(extra="allow")

    note: str | None = None


class PoisonError(RuntimeError):
    pass


def accept(ctx: StepContext) -> dict[str, Any]:
    return {"accepted": True}


def swallow_poison(ctx: StepContext) -> dict[str, Any]:
    raise PoisonError("this step always fails")


def never_reached(ctx: StepContext) -> dict[str, Any]:
    return {"reached": True}


@workflow("poison_pill")
class PoisonPill:
    steps = [accept, swallow_poison, never_reached]
    retry = RetryPolicy(max_attempts=MAX_ATTEMPTS, base=1.0, max_delay=2.0)
    step_timeout_s = 10
    input_model = PoisonInput
