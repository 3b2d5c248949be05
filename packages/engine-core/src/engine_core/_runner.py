"""Runs one step body under its timeout budget and reports what happened, never raising for step errors."""

from __future__ import annotations

import logging
import _signal
import signal
import threading
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from . import faults
from .context import StepContext
from .errors import PermanentStepError

log = logging.getLogger("engine_core")
MAX_ERROR_MESSAGE_CHARS = 2048
"""Stored error text is cut here; the full traceback goes to the log only (a huge message must never
push a history item past DynamoDB's 400 KB)."""


class StepTimeoutError(BaseException):
    """The step ran past its budget. A BaseException on purpose: a body's ``except Exception`` in a
    retry loop cannot swallow it and run on while another worker may take the step over."""


class BodyOutcome(NamedTuple):
    result: Any = None
    error_code: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    retryable: bool = False
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_code is None


def truncate(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    """At most ``limit`` characters, and always valid UTF-8 (a lone surrogate becomes U+FFFD)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    return text[: limit - 40] + f"... [{len(text) - limit + 40} more characters in the log]"


class _Deadline:
    """Interrupts the body with StepTimeoutError once ``seconds`` pass (SIGALRM), then puts back the
    handler it found. SIGALRM can only interrupt the main thread; elsewhere the overrun check after the
    body and the Lambda timeout are the backstops."""

    __slots__ = ("seconds", "previous", "armed")

    def __init__(self, seconds: float):
        self.seconds, self.previous, self.armed = seconds, None, False

    def __enter__(self) -> None:
        if _ITIMER and threading.current_thread() is threading.main_thread():
            # _signal: signal.signal's own C call, without the wrapper that looks the handler it returns up
            # in an enum (a ValueError raised and caught inside it for every function handler, every step)
            self.previous = _signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _signal.signal(signal.SIGALRM, self.previous)
            outer = getattr(self.previous, "__self__", None)  # a deadline around the body's caller, if any
            if outer is not None and hasattr(outer, "rearm"):  # (``durable.overrun.CodeDeadline``)
                outer.rearm()

    def _expired(self, signum: int, frame: object) -> None:
        # Re-armed: a body that swallows the first one (``except BaseException``) is interrupted again.
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        raise StepTimeoutError(f"step exceeded its {self.seconds:g} s timeout budget")


_ITIMER = hasattr(signal, "setitimer")


def run_body(fn: Callable[[StepContext], Any], ctx: StepContext, timeout_s: float, now_ms: Callable[[], float]) -> BodyOutcome:
    started = now_ms()
    where = {"execution_id": ctx.execution_id, "workflow": ctx.workflow, "step": ctx.step_index,
             "step_name": ctx.step_name, "attempt": ctx.attempt, "branch": ctx.branch,
             "compensation": ctx.compensating}
    try:
        with _Deadline(timeout_s):
            faults.point("step.enter", **where)  # a raise here is the body's own failure
            result = fn(ctx)
            faults.point("step.return", **where)
    except PermanentStepError as exc:
        # Logged whole: the recorded message is cut to MAX_ERROR_MESSAGE_CHARS and says the rest is here.
        log.warning("step body failed for good", exc_info=True, extra={"execution_id": ctx.execution_id,
                                                                      "step": ctx.step_name, "attempt": ctx.attempt})
        return _failed("permanent_error", exc, False, now_ms() - started)
    except StepTimeoutError as exc:
        return _failed("step_timeout", exc, True, now_ms() - started)
    except SystemExit as exc:
        # sys.exit() in a body (its own, a library's, a CLI's it calls) is the step's failure, retried like any:
        # let through, it would end the worker (all of `loom dev`) with no word, and again at every retry.
        log.warning("step body called sys.exit()", exc_info=True, extra={"execution_id": ctx.execution_id,
                                                                      "step": ctx.step_name, "attempt": ctx.attempt})
        return _failed("step_error", exc, True, now_ms() - started, note=(
            "; the step body called sys.exit(): Loom records that as this attempt's failure and the worker goes on. "
            "Raise an exception instead (PermanentStepError to fail at once)"))
    except Exception as exc:  # a step's own failure is data for the retry policy, not a crash
        log.warning("step body raised", exc_info=True, extra={"execution_id": ctx.execution_id,
                                                               "step": ctx.step_name, "attempt": ctx.attempt})
        return _failed("step_error", exc, True, now_ms() - started)
    elapsed = now_ms() - started
    if elapsed > timeout_s * 1000:
        # The body returned, but after its budget: another worker may already own the step.
        return BodyOutcome(error_code="step_timeout", error_type="StepTimeoutError", retryable=True,
                           error_message=f"step exceeded its {timeout_s:g} s timeout budget "
                                         f"(returned after {elapsed / 1000:.1f} s)", duration_ms=elapsed)
    if type(result) in _NEVER_RAN:
        return _never_ran(result, elapsed)
    return BodyOutcome(result=result, duration_ms=elapsed)


_ASYNC = "Loom runs plain functions: run an async body inside one, with asyncio.run(...)"
_NEVER_RAN = {types.CoroutineType: f"a coroutine: the step's function is async, so its body never ran; {_ASYNC}",
              types.GeneratorType: "a generator: the step's function yields, so its body never ran; return a list "
                                   "(list(...)) instead",
              types.AsyncGeneratorType: f"an async generator, so its body never ran; {_ASYNC}"}


def _never_ran(result: Any, elapsed: float) -> BodyOutcome:
    """A body that returned a coroutine or a generator did none of its work: fail it at once, saying why (a
    retry would do the same). A coroutine is closed, so nothing warns that it was never awaited."""
    if type(result) is not types.AsyncGeneratorType:
        result.close()
    message = f"the step returned {_NEVER_RAN[type(result)]}"
    return BodyOutcome(error_code="non_serializable_result", error_type=type(result).__name__, retryable=False,
                       error_message=message, duration_ms=elapsed)


def _failed(code: str, exc: BaseException, retryable: bool, duration_ms: float, note: str = "") -> BodyOutcome:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})" if tb is not None and code == "step_error" else ""
    try:
        text = str(exc) if not isinstance(exc, SystemExit) else str(exc.code)  # sys.exit(): "None", not ""
    except Exception as err:  # a broken __str__ must not crash the worker
        text = f"<unprintable {type(exc).__name__}: {type(err).__name__}>"
    kind = type(exc).__qualname__
    message = (text if code != "step_error" else f"{kind}: {text}") + note
    return BodyOutcome(error_code=code, error_type=kind, error_message=truncate(message) + where, retryable=retryable,
                       duration_ms=duration_ms)
