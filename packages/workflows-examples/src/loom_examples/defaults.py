"""``defaults_tour``: a workflow that sets nothing: no timeout, no retry policy, no step overrides.

It is here so the defaults are run end to end: every step's budget is derived from the worker's
timeout (``LOOM_FUNCTION_TIMEOUT_S``, minus the engine's margin) and the retry policy is
``RetryPolicy()``. Its second step fails once, so a default retry is exercised too.
"""

from __future__ import annotations

from engine_core import StepContext, sleep, workflow


def count_words(ctx: StepContext) -> dict:
    return {"words": len(str(ctx.get("text", "")).split())}


def flaky_double(ctx: StepContext) -> dict:
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails on purpose: the default retry policy takes it from here")
    return {"doubled": ctx["words"] * 2}


def summarize(ctx: StepContext) -> dict:
    return {"summary": f"{ctx['words']} words, doubled {ctx['doubled']}"}


@workflow("defaults_tour")
class DefaultsTour:
    steps = [count_words, flaky_double, sleep(seconds=2), summarize]
