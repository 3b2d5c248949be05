"""The API's errors: :class:`ApiError` (a refusal with its HTTP status, stable code and message) and the
one mapping from engine errors to them (``error_for``). Every refusal says what was wrong and what to do."""

from __future__ import annotations

from typing import Any

from engine_core import (
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InvalidInputError,
    NonSerializableResultError,
    ResultTooLargeError,
    UnknownWorkflowError,
)
from engine_core.errors import (
    CallbackNotFoundError,
    ExecutionStateConflictError,
    InvalidEventError,
    InvalidRequestError,
    StepCapError,
    StorageError,
)

from .responses import ErrorBody, dump


class ApiError(Exception):
    """A request the API refuses, with the response it gets."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 execution_status: str | None = None, problems: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
        self.execution_status, self.problems = execution_status, problems

    def body(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.execution_status is not None:
            fields["execution_status"] = self.execution_status
        if self.problems is not None:
            fields["problems"] = self.problems
        return dump(ErrorBody(**fields))



def error_for(exc: Exception) -> ApiError | None:
    """The API error an engine exception stands for; None for anything unexpected (a 500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, UnknownWorkflowError):
        return ApiError(404, "unknown_workflow", f"{exc}; GET /workflows lists them")
    if isinstance(exc, ExecutionNotFoundError):
        return ApiError(404, "execution_not_found", (
            f"{exc}; use the execution_id returned by POST /executions"))
    if isinstance(exc, IdempotencyConflictError):
        return ApiError(409, "idempotency_conflict", str(exc), execution_status=exc.status)
    if isinstance(exc, ResultTooLargeError):
        return ApiError(413, "input_too_large", str(exc))
    if isinstance(exc, NonSerializableResultError):
        # The engine words it for step results; at start the value is the request's input.
        detail = str(exc).partition(" cannot be stored: ")[2] or str(exc)
        return ApiError(400, "invalid_request", (
            f"value at {exc.path} cannot be stored: {detail}; fix the request body and send it again"))
    if isinstance(exc, InvalidEventError):  # the wait's model refused the event's data: name every field
        return ApiError(400, "invalid_event", str(exc), problems=exc.problems)  # it says where the model is
    if isinstance(exc, InvalidInputError):
        if exc.problems:  # the workflow's input_model refused it: name every field
            return ApiError(400, "invalid_input", f"{exc}; GET /workflows shows the input's JSON Schema",
                            problems=exc.problems)
        return ApiError(400, "invalid_request", f"{exc}; fix the request body and send it again")
    if isinstance(exc, StepCapError):
        return ApiError(409, exc.code, str(exc))
    if isinstance(exc, CallbackNotFoundError):
        return ApiError(404, "callback_not_found", str(exc))
    if isinstance(exc, ExecutionStateConflictError):
        return ApiError(409, exc.code, str(exc), execution_status=exc.status)
    if isinstance(exc, InvalidRequestError):
        return ApiError(400, "invalid_request", str(exc))
    if isinstance(exc, StorageError):  # the store (or the queue) failed: its message says why and what to do
        return ApiError(503, "store_unavailable", f"{exc}. Retry the request (a start with an idempotency_token "
                                                  "is safe to repeat; read an execution before repeating an action)")
    return None
