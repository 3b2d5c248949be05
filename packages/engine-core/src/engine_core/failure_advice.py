"""What to do about a failure, added to the message of an execution that ends FAILED with nothing undone
(docs/operating.md "What a failure's code means" lists every code). Codes whose message already says
what to do (``nondeterministic_replay``, ``step_timeout_too_long``, the caps...) are left as they are."""

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
    "permanent_error": "Fix the data or the call it names, then `loom redrive {id}`: the step runs again",
    "step_timeout": "Make the step shorter or give it more time (its timeout_s; Terraform worker_timeout_s), "
                    "deploy, then `loom redrive {id}`",
    "attempts_exhausted": "Read the worker's log for those attempts (out of memory? the Lambda timeout?), fix the "
                          "cause, then `loom redrive {id}`: the step starts again with fresh attempts",
    "invalid_result": "Change what the step returns, deploy, then `loom redrive {id}`",
    "non_serializable_result": "Change what the step returns, deploy, then `loom redrive {id}`",
    "result_too_large": "Change what the step returns, deploy, then `loom redrive {id}`",
}


def advised(error: ErrorInfo, execution_id: str) -> ErrorInfo:
    """``error`` with what to do next at the end of its message, when its code has advice."""
    advice = _ADVICE.get(error.code)
    if advice is None or "`loom redrive" in error.message:  # none, or the message says it already
        return error
    advice = advice.format(id=execution_id)
    said = truncate(error.message.rstrip("."), max(MAX_ERROR_MESSAGE_CHARS - len(advice) - 2, 200))
    return error.model_copy(update={"message": f"{said}. {advice}"})
