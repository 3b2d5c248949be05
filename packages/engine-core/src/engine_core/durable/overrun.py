"""A code-first function's own code between durable calls, held to its delivery's deadline.

No step timeout covers that code, so without this a function stuck between two calls (a slow library call,
a ``time.sleep``) would run until the runtime ended the invocation: on Lambda its timeout, under ``loom dev``
the process (its watchdog), and again at every delivery that reached the same line. Here it is interrupted
with ``CodeOverran`` shortly before the delivery's end, where the run fails the execution with the line.

Only the function's own code is interrupted: while the engine works inside a durable call (a claim, a
body, a commit: ``Replay.in_engine``) the alarm waits and looks again; once the run ended (``Replay.closed``,
``Replay.broken``) and the function caught that end and went on, the end is raised again instead. A step
body runs under its own ``_Deadline``, which puts this one back when the body ends (``rearm``). Armed only
with a real deadline (the system clock and the invocation's time left), on the main thread, where SIGALRM
is delivered.
"""

from __future__ import annotations

import _signal
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..clock import SystemClock
from .replay import Suspend

_AGAIN_S = 0.02
"""How soon the alarm looks again while the engine is inside a durable call."""


def deadline_s(remaining_ms: Callable[[], int] | None, clock: Any, margin_ms: float) -> float | None:
    """How long the function's own code may run in this delivery: up to half the time margin before its end.
    None without a real deadline (no time left given, or a test's manual clock)."""
    if remaining_ms is None or not isinstance(clock, SystemClock):
        return None
    left = (remaining_ms() - margin_ms / 2) / 1000
    return left if left > 0 else None


_UNARMED = nullcontext()


def held(replay: Any, remaining_ms: Callable[[], int] | None, clock: Any, margin_ms: float) -> AbstractContextManager:
    """What holds a run of the function (or a replay of it) to its delivery's deadline: a ``CodeDeadline``, or
    nothing without a real deadline (``deadline_s`` None)."""
    seconds = deadline_s(remaining_ms, clock, margin_ms)
    return _UNARMED if seconds is None else CodeDeadline(replay, seconds)


class CodeOverran(BaseException):
    """The function's own code ran past its delivery's deadline. A BaseException, as a step's timeout: an
    ``except Exception`` around the slow code does not swallow it."""


class CodeDeadline:
    """``with CodeDeadline(replay, seconds):`` around the function's run (``seconds`` None: not armed)."""

    __slots__ = ("replay", "seconds", "ends", "previous", "armed")

    def __init__(self, replay: Any, seconds: float | None):
        self.replay, self.seconds, self.ends, self.previous, self.armed = replay, seconds, 0.0, None, False

    def __enter__(self) -> CodeDeadline:
        if self.seconds is not None and hasattr(signal, "setitimer") \
                and threading.current_thread() is threading.main_thread():
            self.ends = time.monotonic() + self.seconds
            self.previous = _signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _signal.signal(signal.SIGALRM, self.previous)
            self.armed = False

    def rearm(self) -> None:
        """Set again for what is left (a step body's deadline, ending, cleared the timer)."""
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, max(self.ends - time.monotonic(), 0.001))

    def _expired(self, signum: int, frame: object) -> None:
        r = self.replay
        signal.setitimer(signal.ITIMER_REAL, _AGAIN_S)  # again: the engine's work ends, or the function swallows this
        if r.in_engine:
            return
        if r.closed is not None:  # the run ended (the engine wrote how) and the function caught its end: end it again
            raise Suspend(r.closed)
        if r.broken is not None:  # the same for a replay that went another way
            raise r.broken
        raise CodeOverran(
            f"the function's own code between durable calls was still running at its delivery's deadline, "
            f"{self.seconds:.1f} s into this run (LOOM_FUNCTION_TIMEOUT_S less half of LOOM_TIME_MARGIN_MS): no "
            "step timeout covers that code, and it would run again at every delivery. Move the slow work into a "
            "step(): it then has a step's timeout and retries")
