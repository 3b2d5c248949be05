"""A code-first function's own code between durable calls, held to its delivery's deadline.

No step timeout covers that code, so without this a function stuck between two calls (a slow library call,
a ``time.sleep``) would run until the runtime ended the invocation: on Lambda its timeout, under ``loom dev``
the process (its watchdog), and again at every delivery that reached the same line. Here it is interrupted
with ``CodeOverran`` shortly before the delivery's end, where the run fails the execution with the line.

A stretch of the function's own code that began late in its delivery (after steps that took most of it, or
in a delivery that began with little time left) is not proof that it is slow: it ends the delivery instead
(``CodeOutOfTime``), moving past the step it settled and sending the execution on, or, having written nothing,
putting its message back, and a fresh delivery runs it with all the time a delivery has. Only a stretch that
had ``FAIR_SHARE`` of that fails the execution.

Only the function's own code is interrupted: while the engine works inside a durable call (a claim, a
body, a commit: ``Replay.in_engine``) the alarm waits and looks again; once the run ended (``Replay.closed``,
``Replay.broken``) and the function caught that end and went on, the end is raised again instead. A step
body runs under its own ``_Deadline``, which puts this one back when the body ends (``rearm``). Armed only
with a real deadline (the system clock and the invocation's time left), on the main thread, where SIGALRM
is delivered.
"""

from __future__ import annotations

import _signal
import logging
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..clock import SystemClock
from ..errors import InsufficientTimeError
from ..outcome import Outcome, log_fields
from .replay import Suspend

log = logging.getLogger("engine_core")
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


def held(replay: Any, remaining_ms: Callable[[], int] | None, clock: Any, margin_ms: float,
         function_timeout_s: float | None = None) -> AbstractContextManager:
    """What holds a run of the function (or a replay of it) to its delivery's deadline: a ``CodeDeadline``, or
    nothing without a real deadline (``deadline_s`` None). ``function_timeout_s``: what a fresh delivery has
    (the worker's timeout; None: this one's time is taken as a fresh delivery's)."""
    seconds = deadline_s(remaining_ms, clock, margin_ms)
    if seconds is None:
        return _UNARMED
    fresh = seconds if function_timeout_s is None else max(seconds, function_timeout_s - margin_ms / 2000)
    return CodeDeadline(replay, seconds, fresh)


FAIR_SHARE = 0.9
"""A stretch of the function's own code that ran for this share of what a fresh delivery gives it is slow
(``CodeOverran``); cut shorter by the delivery's end, it goes on in a fresh delivery (``CodeOutOfTime``)."""


class CodeOverran(BaseException):
    """The function's own code ran past its delivery's deadline, having had (nearly) all a delivery can give
    it. A BaseException, as a step's timeout: an ``except Exception`` around the slow code does not swallow it."""


class CodeOutOfTime(BaseException):
    """The delivery ends while the function's own code runs, but that code began late in it (after steps that
    took most of the delivery, or in a delivery that began with little time left): not proof that it is slow.
    The delivery moves past the step it settled and sends the execution on (``went_on``), or, having written
    nothing, puts its message back (``released``); a fresh delivery runs the code again."""


class CodeDeadline:
    """``with CodeDeadline(replay, seconds):`` around the function's run (``seconds`` None: not armed)."""

    __slots__ = ("replay", "seconds", "fresh", "ends", "previous", "armed")

    def __init__(self, replay: Any, seconds: float | None, fresh: float | None = None):
        self.replay, self.seconds, self.ends, self.previous, self.armed = replay, seconds, 0.0, None, False
        self.fresh = fresh if fresh is not None else seconds

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
        stretch = r.own_code_s()
        if stretch < FAIR_SHARE * (self.fresh or 0.0):
            raise CodeOutOfTime(f"the function's own code ran {stretch:.1f} s to its delivery's deadline; a fresh "
                                f"delivery gives it {self.fresh:.1f} s")
        raise CodeOverran(
            f"the function's own code between durable calls was still running at its delivery's deadline, "
            f"{self.seconds:.1f} s into this run (LOOM_FUNCTION_TIMEOUT_S less half of LOOM_TIME_MARGIN_MS): no "
            "step timeout covers that code, and it would run again at every delivery. Move the slow work into a "
            "step(): it then has a step's timeout and retries")


def released(exc: CodeOutOfTime, run: Any) -> InsufficientTimeError:
    """What a delivery of ``run`` (a ``CodeRun``) that wrote nothing raises when the function met its end late
    (``CodeOutOfTime``): the message goes back on the queue, and a fresh delivery replays to where it stood."""
    log.warning("workflow function's own code met its delivery's end; a fresh delivery runs it again",
                extra={**log_fields(run.execution), "detail": str(exc)})
    left = run.remaining_ms() if run.remaining_ms is not None else 0
    return InsufficientTimeError(left, int((run.settings.function_timeout_s or 0) * 1000))


def went_on(run: Any, exc: CodeOutOfTime) -> Outcome:
    """The same in a delivery of ``run`` that wrote: its message is no longer the execution's, so the settled
    position's move is made without the next call (unknown yet: the next delivery's replay makes it), and a
    message sent. Nothing it wrote is undone: each write is one a crash could have left."""
    if not run.pending:  # nothing written since the message was sent
        raise released(exc, run)
    log.warning("workflow function's own code met its delivery's end; the next delivery goes on",
                extra={**log_fields(run.execution), "detail": str(exc)})
    outcome = run.move_on(None)
    if outcome is not None:
        return outcome
    run.send()
    return Outcome("advanced", run.execution.execution_id, run.execution.current_step, f"{exc}: sent on")
