"""Pure functions from one execution state to the next. Each bumps ``version`` by exactly one.

The store applies them conditionally on the previous (current_step, version), which is what turns
at-least-once delivery into at-most-once advancement.
"""

from __future__ import annotations

import datetime as dt

from .model import ErrorInfo, Execution, Status, Timer


def _next(e: Execution, now: dt.datetime, **changes) -> Execution:
    return e.model_copy(update={"version": e.version + 1, "updated_at": now, **changes})


def claimed(e: Execution, now: dt.datetime, lease_s: float) -> Execution:
    """A due timer (sleep, retry) or an expired lease is taken over: RUNNING with a fresh lease."""
    return _next(e, now, status=Status.RUNNING, timer=Timer.LEASE, next_wake_at=now + dt.timedelta(seconds=lease_s))


def advanced(e: Execution, context_blob: str, now: dt.datetime, lease_s: float, step_count: int,
             retention: dt.timedelta, finalize_grace_s: float = 0.0) -> Execution:
    """The current step succeeded: move to the next one, or COMPLETED after the last."""
    step = e.current_step + 1
    base = {"current_step": step, "context_blob": context_blob, "total_attempts": e.total_attempts + 1}
    if step >= step_count:
        return _next(e, now, status=Status.COMPLETED, next_wake_at=None, timer=None,
                     expires_at=now + retention, finalize_by=now + dt.timedelta(seconds=finalize_grace_s), **base)
    return _next(e, now, status=Status.RUNNING, timer=Timer.LEASE,
                 next_wake_at=now + dt.timedelta(seconds=lease_s), **base)


def slept(e: Execution, now: dt.datetime, wake_at: dt.datetime) -> Execution:
    """The current step is a sleep: pass it and wait, with nothing running, until ``wake_at``."""
    return _next(e, now, status=Status.SLEEPING, current_step=e.current_step + 1, timer=Timer.SLEEP,
                 next_wake_at=wake_at)


def retry_scheduled(e: Execution, now: dt.datetime, retry_at: dt.datetime) -> Execution:
    return _next(e, now, status=Status.RUNNING, timer=Timer.RETRY, next_wake_at=retry_at,
                 total_attempts=e.total_attempts + 1)


def failed(e: Execution, now: dt.datetime, error: ErrorInfo, retention: dt.timedelta,
           attempts_spent: int = 1, finalize_grace_s: float = 0.0) -> Execution:
    return _next(e, now, status=Status.FAILED, error=error, next_wake_at=None, timer=None,
                 expires_at=now + retention, total_attempts=e.total_attempts + attempts_spent,
                 finalize_by=now + dt.timedelta(seconds=finalize_grace_s))
