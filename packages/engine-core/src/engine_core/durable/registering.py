"""What ``@durable`` checks of the function it registers, and of its arguments, before anything runs it: each
refusal a ``RegistrationError`` naming the workflow and what to change."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..errors import RegistrationError
from ..registry import EVENT_NAME_RE, not_plain


def check_events(events: Any, where: str) -> dict[str, type | None] | None:
    if events is None:
        return None
    if not isinstance(events, dict):
        raise RegistrationError(f"{where}: `events` must be a dict of event name -> pydantic model or None")
    from pydantic import BaseModel

    for event, model in events.items():
        if not isinstance(event, str) or not EVENT_NAME_RE.fullmatch(event):
            raise RegistrationError(f"{where}: event name {event!r} is invalid: 1-64 characters from A-Z a-z 0-9 _ . -")
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise RegistrationError(f"{where}: the model of event {event!r} must be a pydantic BaseModel subclass")
    return dict(events)


def annotated_model(fn: Callable[..., Any], where: str) -> type | None:
    """The pydantic model the function's parameter is annotated with, if any. An annotation that cannot be
    resolved is refused: left out, no start would be validated and the function would get a plain dict."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    raw = inspect.get_annotations(fn).get(params[0].name)
    try:
        hint = eval(raw, getattr(fn, "__globals__", {})) if isinstance(raw, str) else raw  # noqa: S307 - as eval_str
    except Exception as exc:  # noqa: BLE001 - whatever the annotation's text raises
        raise RegistrationError(
            f"{where}: the annotation of its parameter {params[0].name!r} ({raw!r}) cannot be resolved "
            f"({type(exc).__name__}: {exc}); under `from __future__ import annotations` it is looked up in the "
            "module's globals: define the model at the module's top level, or pass input_model=") from None
    try:
        from pydantic import BaseModel

        return hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None
    except TypeError:
        return None


def check_signature(fn: Callable[..., Any], where: str) -> None:
    if not callable(fn):
        raise RegistrationError(f"{where}: @durable decorates a function, got {type(fn).__name__}")
    why = not_plain(fn)
    if why is not None:
        instead = "its steps may run asyncio.run(...) inside" if why == "is async" else "return a list instead"
        raise RegistrationError(f"{where}: {why}; a durable workflow is a plain function ({instead})")
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        raise RegistrationError(f"{where}: must take exactly one argument, the execution's input") from None


def check_timeout(timeout: Any, where: str) -> None:
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not 0 < timeout <= 900):
        raise RegistrationError(f"{where}: a step timeout must be in (0, 900] seconds (Lambda's ceiling)")
