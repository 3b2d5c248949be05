"""What a step list is written with: ``step(...)`` overrides, ``parallel``/``map_``, ``wait_for_event`` and
``sleep`` markers. Each only records what it was given (a sleep's or a wait's numbers checked where they are
passed); ``registry.build_workflow`` validates the list and turns each into a ``StepDef``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .arguments import number, sleep_seconds
from .model import RetryPolicy

# SQS DelaySeconds tops out at 900 s; the engine uses it for short waits and the sweeper for the rest.
MAX_SLEEP_S = 366 * 24 * 3600.0
DEFAULT_EVENT_TIMEOUT_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Step:
    """A step with overrides: ``step(charge, retry=RetryPolicy(max_attempts=5), timeout_s=30)``."""

    fn: Callable[..., Any]
    name: str | None = None
    retry: RetryPolicy | None = None
    timeout_s: float | None = None
    compensate: Any = None
    """A function, or ``step(fn, retry=..., timeout_s=...)`` for its own policy and budget."""


@dataclass(frozen=True)
class FanOut:
    """``parallel(a, b, c)`` (``fns``) or ``map(fn, over="items")`` (``over``)."""

    fns: tuple[Callable[..., Any], ...]
    over: str | None = None
    max_concurrency: int | None = None
    name: str | None = None
    retry: RetryPolicy | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class WaitForEvent:
    event: str
    timeout_s: float
    default: Any = None
    has_default: bool = False
    name: str | None = None
    retry: RetryPolicy | None = None
    model: type | None = None


@dataclass(frozen=True)
class Sleep:
    seconds: float
    name: str | None = None


def step(
    fn: Callable[..., Any], *, name: str | None = None, retry: RetryPolicy | None = None, timeout_s: float | None = None,
    compensate: Any = None,
) -> Step:
    """Wrap a step function with a per-step retry policy, a timeout budget and/or a compensation.

    ``compensate`` (a function, or ``step(undo, retry=...)``) runs when the execution fails for good or
    is cancelled after this step completed: the completed steps' compensations run in reverse order,
    each durable and retried, handed the step's result (``ctx.result``) and its idempotency key.
    """
    return Step(fn=fn, name=name, retry=retry, timeout_s=timeout_s, compensate=compensate)


def parallel(*fns: Callable[..., Any], name: str | None = None, retry: RetryPolicy | None = None,
             timeout_s: float | None = None, max_concurrency: int | None = None) -> FanOut:
    """One step whose branches (each a plain function of the context) run as separate deliveries, so
    separate invocations run them at once. Each branch has its own idempotency key
    (``{execution_id}:{step_index}:{branch}``), retries and history record; the step completes once,
    when every branch succeeded, and merges ``{step_name: [result of each branch, in order]}``."""
    return FanOut(fns=tuple(fns), name=name, retry=retry, timeout_s=timeout_s, max_concurrency=max_concurrency)


def map_(fn: Callable[..., Any], *, over: str, max_concurrency: int | None = None, name: str | None = None,
         retry: RetryPolicy | None = None, timeout_s: float | None = None) -> FanOut:
    """One step that runs ``fn`` once per element of the list ``ctx[over]`` (at most 1,000), at most
    ``max_concurrency`` at a time; each branch reads its element as ``ctx.item``. The step merges
    ``{step_name: [result of each element, in order]}``. Exported as ``engine_core.map``."""
    return FanOut(fns=(fn,), over=over, max_concurrency=max_concurrency, name=name, retry=retry, timeout_s=timeout_s)


_NO_DEFAULT = object()


def wait_for_event(event: str, *, timeout: float = DEFAULT_EVENT_TIMEOUT_S, default: Any = _NO_DEFAULT,
                   name: str | None = None, retry: RetryPolicy | None = None, model: type | None = None) -> WaitForEvent:
    """Wait, in status WAITING and costing nothing, for the event ``event``
    (``POST /executions/{id}/events/{event}``, or ``POST /callbacks/{token}`` with a token from
    ``ctx.callback_token(event)``).

    The event's JSON object lands in the context under the wait step's name (``name``, default
    ``wait_<event>``): ``ctx["wait_approved"] == {"approved": True}``. A sender never writes any other
    key, so an event cannot replace the input or an earlier step's result. ``model`` (a pydantic model)
    validates it: a send that does not fit is refused (HTTP 400 ``invalid_event``), and the context
    holds the validated values. After ``timeout`` seconds the step fails under ``retry`` (each retry
    waits again), or takes ``default`` (a dict, in the same place) if given."""
    has = default is not _NO_DEFAULT
    timeout_s = number(f"wait_for_event({event!r})", "timeout", timeout)
    return WaitForEvent(event=event, timeout_s=timeout_s, default=default if has else None, has_default=has,
                        name=name, retry=retry, model=model)


def sleep(seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0, name: str | None = None) -> Sleep:
    """A durable wait between steps. Nothing runs (or bills) while it lasts."""
    total = sleep_seconds("sleep()", seconds, minutes, hours, days)
    return Sleep(seconds=total, name=name)
