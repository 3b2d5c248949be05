"""A code-first execution's current position as the execution item describes it (``Execution.code_step``):
what an operator's action or an outside input needs to know of it without running the function."""

from __future__ import annotations

import hashlib
from typing import NamedTuple


def code_fingerprint(name: str) -> str:
    """A code-first workflow's fingerprint: its name only. A changed function is caught where it differs,
    by the replay (``nondeterministic_replay``), not by refusing every execution in flight. An execution
    carries it from its start, so it says the execution is code-first even where its function is not
    deployed."""
    return hashlib.sha256(f"loom-code\n{name}".encode()).hexdigest()[:32]


UNNAMED_MODEL = "?"
"""``CodeStep.model`` of a wait whose model cannot be found by name."""


def encode_code_step(name: str, kind: str, event: str | None, undo: bool, timeout_s: float | None,
                     model: str | None = None) -> str:
    """``CodeStep(...).encode()`` without building the tuple: ``name#kind#event#undo#timeout[#model]`` (step
    names, events and ``module:qualname`` paths never hold ``#``)."""
    text = f"{name}#{kind}#{event or ''}#{'1' if undo else ''}#{'' if timeout_s is None else repr(timeout_s)}"
    return text if model is None else f"{text}#{model}"


class CodeStep(NamedTuple):
    """A code-first execution's current position, as the function called it (``engine_core.durable``):
    what an operator's action or an outside input needs to know of it without running the function.
    Stored on the execution item as one short string (``Execution.code_step``), rewritten by every step."""

    name: str
    kind: str
    """``task``, ``sleep``, ``event`` or ``fanout``."""
    event: str | None = None
    """A wait's event; for a task that issues a callback token (``wait_for_callback``), the event of the
    wait right after it."""
    undo: bool = False
    """It has a compensation."""
    timeout_s: float | None = None
    model: str | None = None
    """A wait's pydantic model, ``module:qualname``: the events route checks a send against it while the
    execution waits there (``steps.wait_model``). ``UNNAMED_MODEL`` for a model no name finds (a class
    defined inside the function): the wait has one, which only the running function can apply."""

    def encode(self) -> str:
        return encode_code_step(*self)

    @classmethod
    def decode(cls, text: str | None) -> CodeStep | None:
        if not text:
            return None
        name, kind, event, undo, timeout, model = (text.split("#") + ["", "", "", "", ""])[:6]
        return cls(name, kind, event or None, undo == "1", float(timeout) if timeout else None, model or None)
