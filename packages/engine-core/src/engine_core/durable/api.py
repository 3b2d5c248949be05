"""Code-first workflows: a plain Python function whose durable calls are its steps.

    from engine_core.durable import durable, step, sleep

    @durable("nightly_sync")
    def sync(input):
        users = step("fetch", fetch_users, input["team"])
        sleep(hours=1)
        return step("summarize", summarize, users)

Each delivery runs the function from the top. A durable call (``step``, ``sleep``, ``wait_for_event``,
``wait_for_callback``, ``parallel``, ``map``, ``now``, ``new_id``) whose position the history recorded
returns the recorded value, with its exact type; the first one it did not record runs under the same
claim, lease, retry, timeout and idempotency rules as a step-list step, and the function goes on in the
same invocation while its budget allows. ``sleep`` and a wait suspend the execution (nothing runs while
it waits); it resumes from the top when due.

Positions are identified by the order of the calls and their names: a replay that reaches a call other
than the one recorded at that position fails the execution ``nondeterministic_replay``, naming both. So
the code *between* durable calls must decide the same way on every replay: read time and randomness
through ``now()`` and ``new_id()`` (recorded), and everything else from the input and the calls' results.
That code re-runs on every delivery; a durable function called directly from another re-runs its
non-step code with it, while one wrapped in ``step()`` runs once, as a step.

A call is found through a ``ContextVar``: each thread and asyncio task sees its own, a thread the function
starts has none, and a call there is refused. Inside a step body a durable call is not a position: it
runs as a plain call (the body is the unit of durability).
"""

from __future__ import annotations

import datetime as dt
import inspect
import re
import uuid
from threading import get_ident
from functools import partial
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..arguments import sleep_seconds
from ..code_step import code_fingerprint
from ..errors import PermanentStepError, RegistrationError
from ..model import RetryPolicy
from ..registry import (
    DEFAULT_EVENT_TIMEOUT_S,
    EVENT_NAME_RE,
    MAX_SLEEP_S,
    REGISTRY,
    WORKFLOW_NAME_RE,
    Registry,
    check_version,
    default_with_retry,
)
from ..steps import MAX_BRANCHES, SPLIT_ADVICE, CodeSpec, FanOutSpec, SleepSpec, TaskSpec, WaitSpec, WorkflowDef
from . import _current
from .registering import annotated_model, check_events, check_signature, check_timeout
from .replay import NOT_REPLAYED, RefusedCall

F = TypeVar("F", bound=Callable[..., Any])
_NAME_RE = re.compile(r"\A[^#\s]{1,100}\Z")
_GOOD_NAMES: set[str] = set()
"""Step names already found valid: every replay calls ``step()`` again with the same few names."""


def _good_name(name: str) -> bool:
    if not _NAME_RE.fullmatch(name):
        return False
    if len(_GOOD_NAMES) >= 4096:  # names built from data (``f"charge-{i}"``) never grow it past this
        _GOOD_NAMES.clear()
    _GOOD_NAMES.add(name)
    return True
_NO_DEFAULT = object()
_RUN = _current.RUN.get
"""The running function's replay, if any (``_current.RUN``'s lookup, bound once: ``step()`` makes it per call)."""
_OPTIONS = frozenset({"retry", "timeout_s", "compensate"})
"""``step()``'s own keywords; every other goes to its function."""
_WAIT_ONCE = RetryPolicy(max_attempts=1)
"""A wait is not retried unless it says so (as in a step list): its timeout fails it, or returns the
default, at once; an operator's wake ends it the same way."""


class DurableCallError(PermanentStepError, RuntimeError):
    """A durable call made where no execution can hold it (outside a run, in a thread it started, or a wait
    or sleep inside a step body). Inside a body it fails the step at once: a retry would make it again."""


def durable(name: str, *, version: int = 1, registry: Registry | None = None, input_model: type | None = None,
            retry: RetryPolicy | None = None, step_timeout_s: float | None = None,
            events: dict[str, type | None] | None = None) -> Callable[[F], F]:
    """Register ``fn(input)`` as the code-first workflow ``name``.

    ``input_model`` (a pydantic model; or the annotation of the function's parameter) validates the start
    input (a start that does not fit is refused, ``invalid_input``), and the function receives the model
    instance; without one it receives the input as a dict. ``retry`` and ``step_timeout_s`` are the
    defaults of its steps. ``events`` declares the events it may wait for, each with the pydantic model
    its data must fit (or None): a send of another name is then refused (``unknown_event``) and data that
    does not fit is refused when sent (``invalid_event``), as for a step list; undeclared, any event is
    accepted and kept until a wait for it. ``version`` (default 1): a changed function ships as a new
    version beside the old one, and each execution replays the version it started on to its end. The
    function is returned unchanged: calling it directly
    (inside another durable function) runs its calls as the caller's positions."""

    def decorate(fn: F) -> F:
        where = f"durable workflow {name!r} ({fn.__module__}.{fn.__qualname__})"
        model = input_model if input_model is not None else annotated_model(fn, where)
        check_signature(fn, where)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise RegistrationError(f"{where}: `retry` must be a RetryPolicy, got {type(retry).__name__}")
        check_timeout(step_timeout_s, where)
        if model is not None:
            from pydantic import BaseModel

            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise RegistrationError(f"{where}: `input_model` must be a pydantic BaseModel subclass, got {model!r}")
        declared = check_events(events, where)
        definition = WorkflowDef(name=name, steps=(), retry=retry or RetryPolicy(),
                                 step_timeout_s=None if step_timeout_s is None else float(step_timeout_s),
                                 fingerprint=code_fingerprint(name), source=f"{fn.__module__}.{fn.__qualname__}",
                                 input_model=model, code=CodeSpec(fn=fn, model_argument=model is not None,
                                                                   events=declared), version=version)
        (registry or REGISTRY).register(definition)
        fn.__loom_workflow__ = definition  # type: ignore[attr-defined]
        return fn

    if not isinstance(name, str) or not WORKFLOW_NAME_RE.fullmatch(name):
        raise RegistrationError(f"workflow name {name!r} is invalid: use 1-128 characters from A-Z a-z 0-9 _ . -")
    check_version(version, f"durable workflow {name!r}")
    return decorate


def _check_call_timeout(timeout: Any, call: str) -> None:
    """A durable call's ``timeout_s``: over Lambda's ceiling no attempt could ever run, which fails the
    execution ``step_timeout_too_long`` (as one over the worker's timeout does); a wrong type or a value of
    0 or less is the code's mistake (``workflow_error``)."""
    if timeout is None:
        return
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"{call}: timeout_s must be a number of seconds, got {type(timeout).__name__}")
    if not timeout > 0:
        raise ValueError(f"{call}: timeout_s must be more than 0 seconds, got {timeout!r}")
    if timeout > 900:
        raise RefusedCall("step_timeout_too_long", f"{call}: timeout_s={timeout:g} is over 900 seconds, Lambda's "
                          "ceiling, so no attempt could ever run", "Lower it (to at most the worker's timeout, "
                          "Terraform worker_timeout_s), deploy, and redrive")


# -- durable calls ----------------------------------------------------------------------------------
def _run(call: str) -> Any:
    run = _RUN()
    if run is None:
        raise DurableCallError(
            f"{call} was called outside a Loom execution: a durable call runs only inside a function "
            "registered with @durable, run by the engine (engine_core.testing.LocalRunner in tests), and "
            "in its own thread (a thread it starts has no execution)")
    if run.thread != get_ident():
        _refuse_thread(call)
    return run


def _refuse_thread(call: str) -> None:
    """A thread given the run's context (``asyncio.to_thread``, ``contextvars.copy_context().run``) is still
    not the run's: its calls would take positions out of the function's order."""
    raise DurableCallError(
        f"{call} was called from another thread than the function's: durable calls are made in the function's "
        "own thread, one after another (a thread it starts, even one given its context by asyncio.to_thread or "
        "copy_context().run, has no execution). Make the call in the function, or use parallel()/map() for "
        "work that runs side by side")


def _in_body() -> bool:
    return _current.body() is not None


def _check_name(name: Any, call: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"{call}: name {name!r} is invalid: 1-100 characters, no '#' and no whitespace")
    return name


def _check_retry(retry: Any, call: str) -> None:
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ValueError(f"{call}: retry must be a RetryPolicy, got {type(retry).__name__}")


def _body(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[Any], Any]:
    def run_step(ctx: Any) -> Any:
        return _current.in_body(ctx, fn, *args, **kwargs)

    run_step.__name__ = getattr(fn, "__name__", "step")
    return run_step


def _undo(undo: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[Any], Any]:
    def run_undo(ctx: Any) -> Any:
        return _current.in_body(ctx, undo, ctx.result, *args, **kwargs)

    run_undo.__name__ = getattr(undo, "__name__", "undo")
    return run_undo


def step(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` as a durable step named ``name`` and return its result: recorded once
    it returns (any value the codec keeps: tuples, sets, datetimes, bytes, ... come back as they went),
    retried under ``retry`` (the workflow's by default) when it raises, and never run again once recorded.

    Keywords of its own (``__signature__`` below shows them): ``retry`` (a RetryPolicy), ``timeout_s`` (each
    attempt's budget) and ``compensate``, called as ``compensate(result, *args, **kwargs)`` when the execution
    later fails for good or is cancelled (in reverse order of the steps, each durable and retried). Every other
    keyword goes to ``fn``; pass the function's own ``retry``/``timeout_s``/``compensate`` keywords through a
    lambda or functools.partial. Inside a step body, ``step()`` is a plain call."""
    run = _RUN()
    if run is not None and run.body is None and (not kwargs or _OPTIONS.isdisjoint(kwargs)):
        # Every replay of the function makes this call again: a position the history completed as this call hands
        # out a copy of its value (``Replay.replayed`` and ``Replay._value``, inlined for a value already kept; its
        # name was checked when it was recorded). ``fn`` is not looked at: a recorded step is never called again. The step's own keywords
        # are read out of ``kwargs`` below, not declared: filling declared defaults cost a replay a fifth of its time.
        p = run.position
        hit = run.tasks.get(p)
        if hit is not None and hit[3] == name:  # kept with its value: one lookup
            run.position = p + 1
            return hit[1] if hit[2] is None else hit[2](hit[1])
        value = run.replayed(name, "task")  # completed, its value not kept yet (a process's first delivery)
        if value is not NOT_REPLAYED:
            return value
    if kwargs:
        retry, timeout_s, compensate = kwargs.pop("retry", None), kwargs.pop("timeout_s", None), \
            kwargs.pop("compensate", None)
    else:
        retry = timeout_s = compensate = None
    if _in_body():  # inside a step body: a plain call
        return fn(*args, **kwargs)
    # Past the common replay: a thread given the run's context takes no position here (one it replayed there is
    # a recorded value, and the positions it took break the function's replay loudly, naming the calls).
    if run is not None and run.thread != get_ident():
        _refuse_thread(f"step({name!r})")
    # The checks run first, the messages only on a refusal.
    if run is None or type(name) is not str or (name not in _GOOD_NAMES and not _good_name(name)) or not callable(fn) \
            or (retry is not None and not isinstance(retry, RetryPolicy)) \
            or (timeout_s is not None and not isinstance(timeout_s, (int, float))) \
            or (compensate is not None and not callable(compensate)):
        _refuse_step(name, fn, retry, timeout_s, compensate)
    if retry is not None or timeout_s is not None or compensate is not None:  # the common replay above did not look
        if timeout_s is not None:
            _check_call_timeout(timeout_s, f"step({name!r})")
        value = run.replayed(name, "task")
        if value is not NOT_REPLAYED:
            return value
    return run.call(name, TaskSpec(fn=partial(_current.call_in_body, fn, args, kwargs)), retry,
                    None if timeout_s is None else float(timeout_s),
                    None if compensate is None else _undo(compensate, args, kwargs))


def _documented(name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
                timeout_s: float | None = None, compensate: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``step()``'s signature as callers see it (``help``, ``inspect.signature``, editors that read them)."""


step.__signature__ = inspect.signature(_documented)  # type: ignore[attr-defined]


def _refuse_step(name: Any, fn: Any, retry: Any, timeout_s: Any, compensate: Any) -> None:
    call = f"step({name!r})"
    _run(call)
    _check_name(name, call)
    if not callable(fn):
        raise TypeError(f"{call}: the second argument must be the function to run, got {type(fn).__name__}")
    _check_retry(retry, call)
    _check_call_timeout(timeout_s, call)
    if compensate is not None and not callable(compensate):
        raise TypeError(f"{call}: compensate must be a function, got {type(compensate).__name__}")


def sleep(seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0, name: str = "sleep") -> None:
    """Wait durably: the execution is SLEEPING, nothing runs and nothing bills, and the function resumes
    (from the top, its calls replayed) when the time is up or an operator wakes it."""
    total = sleep_seconds("sleep()", seconds, minutes, hours, days)
    if _in_body():
        raise DurableCallError("sleep() inside a step body would block the step; sleep between steps instead")
    call = f"sleep({total:g} s)"
    run = _run(call)
    _check_name(name, call)
    if not 0 < total <= MAX_SLEEP_S:
        raise ValueError(f"{call}: a sleep lasts more than 0 s and at most 366 days")
    run.call(name, SleepSpec(float(total)))


def _wait_spec(event: str, timeout: float, default: Any, model: type | None, call: str) -> WaitSpec:
    if not isinstance(event, str) or not EVENT_NAME_RE.fullmatch(event):
        raise ValueError(f"{call}: event name {event!r} is invalid: 1-64 characters from A-Z a-z 0-9 _ . -")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout <= MAX_SLEEP_S:
        raise ValueError(f"{call}: timeout must be more than 0 s and at most 366 days, in seconds")
    has = default is not _NO_DEFAULT
    if has and not isinstance(default, dict):
        raise ValueError(f"{call}: default must be a dict (what the wait returns when no event came)")
    if model is not None:
        from pydantic import BaseModel

        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ValueError(f"{call}: model must be a pydantic BaseModel subclass, got {model!r}")
    return WaitSpec(event=event, timeout_s=float(timeout), default=default if has else None, has_default=has,
                    model=model)


def wait_for_event(event: str, *, timeout: float = DEFAULT_EVENT_TIMEOUT_S, default: Any = _NO_DEFAULT,
                   model: type | None = None, retry: RetryPolicy | None = None) -> dict[str, Any]:
    """Wait, WAITING and costing nothing, for the event ``event``
    (``POST /executions/{id}/events/{event}``, ``loom send``) and return its data, a dict (validated
    and coerced by ``model`` if given: its fields, a value the codec cannot keep as it is (an enum, a URL) as
    JSON has it). After ``timeout`` seconds it returns
    ``default`` if given, else fails; with ``retry`` each retry waits again (without it, one wait: the
    workflow's retry policy is for steps). An event sent before the wait began is kept for it."""
    call = f"wait_for_event({event!r})"
    if _in_body():
        raise DurableCallError(f"{call} inside a step body would block the step; wait between steps instead")
    run = _run(call)
    _check_retry(retry, call)
    if default is not _NO_DEFAULT and retry is not None and retry.max_attempts > 1:
        raise ValueError(default_with_retry(event, retry.max_attempts))
    if model is None:  # the model the decorator's ``events=`` declares for it, as a step list's wait coerces
        model = run.declared_model(event)
    spec = _wait_spec(event, timeout, default, model, call)
    return run.call(event, spec, retry or _WAIT_ONCE)


def wait_for_callback(event: str, submit: Callable[[str], Any], *, timeout: float = DEFAULT_EVENT_TIMEOUT_S,
                      default: Any = _NO_DEFAULT, model: type | None = None, retry: RetryPolicy | None = None,
                      timeout_s: float | None = None) -> dict[str, Any]:
    """Hand a callback token to an outside system, then wait for it: ``submit(token)`` runs as a step
    (named ``<event>.submit``, retried under ``retry``, else the workflow's policy) and the wait for ``event``
    follows (once, unless ``retry`` says otherwise; with a ``default`` it takes that at its first timeout,
    ``retry`` then retrying the submit step only); the outside
    system completes it with ``POST /callbacks/{token}`` and no other credentials, once. Returns the data
    it sent (or ``default`` after ``timeout``)."""
    call = f"wait_for_callback({event!r})"
    if _in_body():
        raise DurableCallError(f"{call} inside a step body would block the step; wait between steps instead")
    run = _run(call)
    _check_retry(retry, call)
    _check_call_timeout(timeout_s, call)
    spec = _wait_spec(event, timeout, default, model, call)
    if not callable(submit):
        raise TypeError(f"{call}: submit must be a function of the token, got {type(submit).__name__}")

    def submitting(ctx: Any) -> Any:
        return _current.in_body(ctx, submit, ctx.callback_token(event))

    run.call(f"{event}.submit", TaskSpec(fn=submitting), retry, None if timeout_s is None else float(timeout_s),
             callback_event=event)
    return run.call(event, spec, retry or _WAIT_ONCE)


def _fanout(name: str, fns: tuple, values: tuple | None, max_concurrency: int | None, retry: Any,
            timeout_s: Any, call: str) -> list[Any]:
    if _in_body():
        if values is not None:
            return [fns[0](v) for v in values]
        return [fn() for fn in fns]
    run = _run(call)
    _check_name(name, call)
    _check_retry(retry, call)
    _check_call_timeout(timeout_s, call)
    if max_concurrency is not None and (not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool)
                                        or max_concurrency < 1):
        raise ValueError(f"{call}: max_concurrency must be a positive integer, got {max_concurrency!r}")
    count = len(fns) if values is None else len(values)
    if count > MAX_BRANCHES:
        raise RefusedCall("too_many_items", f"{call}: {count} {'branches' if values is None else 'items'}; at most "
                          f"{MAX_BRANCHES}", SPLIT_ADVICE.lstrip(": ").capitalize() + ", deploy, and redrive")
    bodies = tuple(_body(fn, (), {}) for fn in fns) if values is None else (_item_body(fns[0]),)
    spec = FanOutSpec(fns=bodies, max_concurrency=max_concurrency, values=values)
    return run.call(name, spec, retry, None if timeout_s is None else float(timeout_s))


def _item_body(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run_item(ctx: Any) -> Any:
        return _current.in_body(ctx, fn, ctx.item)

    run_item.__name__ = getattr(fn, "__name__", "item")
    return run_item


def parallel(name: str, *fns: Callable[[], Any], max_concurrency: int | None = None,
             retry: RetryPolicy | None = None, timeout_s: float | None = None) -> list[Any]:
    """Run each function (no arguments: bind them with a lambda or functools.partial) as a branch of one
    step, in separate invocations at once, and return their results in order. Each branch is claimed,
    retried and recorded on its own; the step completes when every branch succeeded."""
    call = f"parallel({name!r})"
    for fn in fns:
        if not callable(fn):
            raise TypeError(f"{call}: every branch must be a function, got {type(fn).__name__}")
    if not fns:
        raise ValueError(f"{call}: needs at least one function")
    return _fanout(name, tuple(fns), None, max_concurrency, retry, timeout_s, call)


def map(name: str, fn: Callable[[Any], Any], items: Iterable[Any], *, max_concurrency: int | None = None,  # noqa: A001
        retry: RetryPolicy | None = None, timeout_s: float | None = None) -> list[Any]:
    """Run ``fn(item)`` for each item (at most 1,000, at most ``max_concurrency`` at once) as the branches of
    one step, and return the results in the items' order. The items are the function's own values (they
    must be the same on every replay: a step's result, or the input)."""
    call = f"map({name!r})"
    if not callable(fn):
        raise TypeError(f"{call}: the second argument must be the function to run per item")
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        raise TypeError(f"{call}: the third argument must be the items to map over (a list, tuple or other "
                        f"sequence of values), got {type(items).__name__}")
    return _fanout(name, (fn,), tuple(items), max_concurrency, retry, timeout_s, call)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _new_id() -> str:
    return uuid.uuid4().hex


def now() -> dt.datetime:
    """The current time (UTC), recorded: every replay of this call returns the same instant. A durable
    call of its own (a position, and a write)."""
    if _in_body():
        return _utcnow()
    return step("loom.now", _run("now()").now)


def new_id() -> str:
    """A random id (32 hex digits), recorded: every replay of this call returns the same one."""
    if _in_body():
        return _new_id()
    return step("loom.new_id", _new_id)


def idempotency_key() -> str:
    """Inside a step body: ``{execution_id}:{position}`` (``:{branch}`` for a branch), the same on every
    attempt: pass it to anything with side effects."""
    ctx = _current.body()
    if ctx is None:
        raise DurableCallError("idempotency_key() is only known inside a step body (step(...)'s function)")
    return ctx.idempotency_key


def execution_id() -> str:
    """The running execution's id (inside the function or a step body)."""
    ctx = _current.body()
    if ctx is not None:
        return ctx.execution_id
    return _run("execution_id()").execution_id()
