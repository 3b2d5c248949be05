"""Where a code-first call finds its execution: a ``ContextVar`` per thread and asyncio task.

``RUN`` holds the run of the function the worker is replaying (``replay.Replay``); ``BODY`` the step
context while one of its step bodies runs, and then ``RUN`` holds nothing (a durable call there is a
plain call, and ``step()`` finds out with a single lookup). A thread the function starts has neither,
and a durable call there is refused with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

RUN: ContextVar[Any] = ContextVar("loom_durable_run", default=None)
BODY: ContextVar[Any] = ContextVar("loom_durable_body", default=None)


def in_body(ctx: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as (part of) the step body whose context is ``ctx``."""
    return call_in_body(fn, args, kwargs, ctx)


def call_in_body(fn: Callable[..., Any], args: tuple, kwargs: dict, ctx: Any) -> Any:
    """``in_body(ctx, fn, *args, **kwargs)``, its arguments in the order ``functools.partial`` binds them
    (a ``step()`` body is ``partial(call_in_body, fn, args, kwargs)``: no closure built per call)."""
    body, run = BODY.set(ctx), RUN.set(None)
    try:
        return fn(*args, **kwargs)
    finally:
        RUN.reset(run)
        BODY.reset(body)
