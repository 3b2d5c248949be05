"""Where a code-first call finds its execution: a ``ContextVar`` per thread and asyncio task.

``RUN`` holds the run of the function the worker is replaying (``replay.Replay``). While one of its step
bodies runs, the run holds the body's step context (``Replay.body``: a durable call there is a plain call);
a body that runs with no run around it (a branch's delivery, a compensation) has it in ``BODY`` instead.
``body()`` reads either. A thread the function starts has neither, and a durable call there is refused
with a clear error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..errors import PermanentStepError

RUN: ContextVar[Any] = ContextVar("loom_durable_run", default=None)
BODY: ContextVar[Any] = ContextVar("loom_durable_body", default=None)


def in_body(ctx: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as (part of) the step body whose context is ``ctx``."""
    return call_in_body(fn, args, kwargs, ctx)


def call_in_body(fn: Callable[..., Any], args: tuple, kwargs: dict, ctx: Any) -> Any:
    """``in_body(ctx, fn, *args, **kwargs)``, its arguments in the order ``functools.partial`` binds them
    (a ``step()`` body is ``partial(call_in_body, fn, args, kwargs)``: no closure built per call)."""
    run = RUN.get()
    # Marked on the run when there is one: a context change on each side of every step body cost a step as much
    # as the rest of its replay bookkeeping (the context is copied on each change).
    if run is None:
        before = BODY.set(ctx)
    else:
        before, run.body = run.body, ctx
    try:
        return fn(*args, **kwargs)
    except TypeError as exc:
        # Raised by the call itself (no frame of ``fn`` under it), for arguments its signature refuses: the
        # step() call's mistake, which no retry mends. A TypeError from inside ``fn`` is the body's own.
        if exc.__traceback__ is not None and exc.__traceback__.tb_next is None and not _fits(fn, args, kwargs):
            raise _call_refused(fn, ctx, exc) from exc
        raise
    finally:
        if run is None:
            BODY.reset(before)
        else:
            run.body = before


def body() -> Any:
    """The step context of the step body running here, if any (None: the function's own code, or no run)."""
    ctx = BODY.get()
    if ctx is None and (run := RUN.get()) is not None:
        return run.body
    return ctx


def _fits(fn: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): the TypeError is taken as the body's
        return True
    return True


def _call_refused(fn: Callable[..., Any], ctx: Any, exc: TypeError) -> PermanentStepError:
    code = getattr(fn, "__code__", None)
    defined = f" (defined at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    name = getattr(ctx, "step_name", "?")
    what = f"the compensation of step {name!r}" if getattr(ctx, "compensating", False) else f"step({name!r})"
    passed = ("its result and the step's arguments after the function" if getattr(ctx, "compensating", False)
              else "the arguments after the function")
    return PermanentStepError(
        f"{what}: its function {getattr(fn, '__qualname__', fn)!r}{defined} cannot take {passed} ({exc}), "
        "so it is not retried: every attempt would make the same call")
