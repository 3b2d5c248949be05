"""``flaky_greeting``: a step that fails on its first attempts, then succeeds.

Input (``GreetingInput``, validated at start): ``{"name": str, "failures": int}`` (``name`` defaults to
"world", ``failures`` to 2, at most 4).

Whether to fail is decided from ``ctx.attempt``, which the engine counts in the step's history
record, so the behaviour is the same however many processes or Lambda containers the attempts
land on. A process-global counter would reset on every cold start.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engine_core import PermanentStepError, RetryPolicy, StepContext, workflow

MAX_ATTEMPTS = 5


class GreetingInput(BaseModel):
    name: str = "world"
    failures: int = Field(default=2, ge=0, le=MAX_ATTEMPTS - 1, description="Attempts that fail before one succeeds")


class TransientGreetingError(RuntimeError):
    """Stands in for a timeout or a 503 from a downstream service: worth retrying."""


def compose_greeting(ctx: StepContext) -> dict[str, Any]:
    name, failures = ctx.get("name", "world"), ctx.get("failures", 2)
    if not isinstance(name, str) or type(failures) is not int or not 0 <= failures < MAX_ATTEMPTS:
        raise PermanentStepError(f"input needs a string 'name' and an integer 'failures' in 0..{MAX_ATTEMPTS - 1}")
    if ctx.attempt <= failures:
        raise TransientGreetingError(f"simulated transient failure on attempt {ctx.attempt} (fails {failures} times)")
    return {"greeting": f"Hello, {name}!", "succeeded_on_attempt": ctx.attempt}


def deliver_greeting(ctx: StepContext) -> dict[str, Any]:
    return {"delivered": ctx["greeting"]}


@workflow("flaky_greeting")
class FlakyGreeting:
    steps = [compose_greeting, deliver_greeting]
    retry = RetryPolicy(max_attempts=MAX_ATTEMPTS, base=1.0, max_delay=4.0)
    step_timeout_s = 10
    input_model = GreetingInput
