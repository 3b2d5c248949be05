"""What to do about a failure, added to the message of an execution that ends FAILED with nothing undone
(docs/operating.md "What a failure's code means" lists every code). Codes whose message already says
what to do (``result_too_large``, ``nondeterministic_replay``, the caps...) are left as they are."""

from __future__ import annotations

from ._runner import MAX_ERROR_MESSAGE_CHARS, truncate
from .model import ErrorInfo

_ADVICE = {
    "step_error": "Fix the cause (the worker's log has the traceback), then `loom redrive {id}`: the step runs "
                  "again with fresh attempts, under the same idempotency key",
    "event_timeout": "If the event is still wanted, `loom redrive {id}` and then send it: the redriven wait "
                     "waits again and takes it (an event sent to the FAILED execution is refused)",
    "workflow_error": "Fix the function and deploy it (as a new version if its durable calls change), then "
                      "`loom redrive {id}`: the replay takes every recorded result and goes on from here",
}


def advised(error: ErrorInfo, execution_id: str) -> ErrorInfo:
    """``error`` with what to do next at the end of its message, when its code has advice."""
    advice = _ADVICE.get(error.code)
    if advice is None:
        return error
    advice = advice.format(id=execution_id)
    said = truncate(error.message.rstrip("."), max(MAX_ERROR_MESSAGE_CHARS - len(advice) - 2, 200))
    return error.model_copy(update={"message": f"{said}. {advice}"})
