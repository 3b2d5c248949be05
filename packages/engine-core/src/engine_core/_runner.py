"""Runs one step body under its timeout budget and reports what happened, never raising for step errors."""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .context import StepContext
from .errors import PermanentStepError


class StepTimeoutError(Exception):
    pass


@dataclass(frozen=True)
class BodyOutcome:
    result: Any = None
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_code is None


@contextmanager
def _deadline(seconds: float):
    # SIGALRM can only interrupt the main thread; elsewhere the Lambda timeout is the backstop.
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def _expired(signum, frame):
        raise StepTimeoutError(f"step exceeded its {seconds:g} s timeout budget")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_body(fn: Callable[[StepContext], Any], ctx: StepContext, timeout_s: float, now_ms: Callable[[], float]) -> BodyOutcome:
    started = now_ms()
    try:
        with _deadline(timeout_s):
            result = fn(ctx)
    except PermanentStepError as exc:
        return BodyOutcome(error_code="permanent_error", error_message=str(exc), duration_ms=now_ms() - started)
    except StepTimeoutError as exc:
        return BodyOutcome(error_code="step_timeout", error_message=str(exc), retryable=True,
                           duration_ms=now_ms() - started)
    except Exception as exc:  # a step's own failure is data for the retry policy, not a crash
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        return BodyOutcome(error_code="step_error", error_message=f"{type(exc).__name__}: {exc}{where}",
                           retryable=True, duration_ms=now_ms() - started)
    return BodyOutcome(result=result, duration_ms=now_ms() - started)
