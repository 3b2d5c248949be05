"""Typed errors. Nothing above the adapters (``engine_core.adapters``) ever sees a botocore ClientError."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Execution, StepRecord


class EngineError(Exception):
    """Base of every error engine-core raises on purpose."""

    retryable: bool = False


class RegistrationError(EngineError):
    """A workflow definition is invalid; raised at import time, before anything runs."""


class UnknownWorkflowError(EngineError):
    def __init__(self, name: str, known: list[str]):
        hint = ", ".join(sorted(known)) or "none are registered: is the workflow package installed?"
        super().__init__(f"no workflow named {name!r}; registered workflows: {hint}")
        self.name = name


class UnknownWorkflowVersionError(UnknownWorkflowError):
    """The workflow is registered, but not at the version asked for (a start's ``version``, a
    ``--to-version``, or the version an execution is pinned to)."""

    def __init__(self, name: str, version: int, known: list[int]):
        deployed = ", ".join(str(v) for v in sorted(known)) or "none"
        EngineError.__init__(self, f"workflow {name!r} has no version {version} deployed here (deployed versions: "
                             f"{deployed})")
        self.name, self.version, self.known = name, version, sorted(known)


class StorageError(EngineError):
    """The store failed in a way the engine cannot interpret (throttling, network, permissions)."""

    retryable = True


class ExecutionNotFoundError(EngineError):
    def __init__(self, execution_id: str):
        if execution_id and execution_id.isprintable() and execution_id == execution_id.strip():
            text = f"execution {execution_id} does not exist (or has expired)"
        else:  # a pasted id with a space or a line break: shown quoted, or the message looks like the right id
            text = (f"execution {execution_id!r} does not exist (or has expired): the id has blank or unprintable "
                    "characters in it; copy it again without them")
        super().__init__(text)
        self.execution_id = execution_id


class ExecutionExistsError(EngineError):
    """A create found an item under the same id (an idempotent start that already happened)."""

    def __init__(self, existing: Execution):
        super().__init__(f"execution {existing.execution_id} already exists")
        self.existing = existing


class TransitionConflictError(EngineError):
    """A conditional advance lost: the execution is no longer at (step, version).

    ``current`` is the item as the store saw it when the condition failed (DynamoDB returns it
    with ReturnValuesOnConditionCheckFailure=ALL_OLD), so callers classify without another read.
    """

    retryable = True

    def __init__(self, execution_id: str, expected_step: int, expected_version: int, current: Execution):
        super().__init__(
            f"execution {execution_id}: expected step {expected_step} at version {expected_version}, "
            f"found step {current.current_step} at version {current.version} ({current.status.value})"
        )
        self.execution_id = execution_id
        self.expected_step = expected_step
        self.expected_version = expected_version
        self.current = current

    @property
    def already_advanced(self) -> bool:
        """True when someone else finished this step (or the execution ended): a duplicate, not a race."""
        return self.current.status.is_terminal or self.current.current_step > self.expected_step


class StepSupersededError(EngineError):
    """A history write found a record written at the same or a later execution version: another copy
    of this delivery got there first, or this attempt was taken over (a zombie)."""

    def __init__(self, execution_id: str, step_index: int, version: int, stored_version: int):
        super().__init__(f"execution {execution_id}: the history record of step {step_index} was written at "
                         f"version {stored_version}; this writer acted on version {version} and stops")
        self.execution_id, self.step_index = execution_id, step_index
        self.version, self.stored_version = version, stored_version


class IdempotencyConflictError(EngineError):
    def __init__(self, token: str, execution_id: str, reason: str, status: str | None = None):
        super().__init__(
            f"idempotency token {token!r} was already used for execution {execution_id} {reason}; "
            "use a new token to start a different execution"
        )
        self.token, self.execution_id = token, execution_id
        self.status = status
        """The status of the execution the token started (its ``status.value``)."""


class CorruptStateError(EngineError):
    """A stored item could not be decoded into the model."""

    def __init__(self, execution_id: str, detail: str, raw: Any = None):
        super().__init__(f"execution {execution_id}: stored state is unreadable: {detail}")
        self.execution_id, self.detail, self.raw = execution_id, detail, raw


class InsufficientTimeError(EngineError):
    """Too little invocation time is left for a step's timeout budget; leave it for redelivery."""

    retryable = True

    def __init__(self, remaining_ms: int, needed_ms: int):
        super().__init__(f"{remaining_ms} ms left in this invocation, the step needs {needed_ms} ms")
        self.remaining_ms, self.needed_ms = remaining_ms, needed_ms


class MalformedMessageError(EngineError):
    """A queue message body is not a Loom step message; it belongs in the DLQ."""


class NonSerializableResultError(EngineError):
    """A step result holds a value Loom cannot store without changing its type or value."""

    code = "non_serializable_result"

    def __init__(self, path: str, detail: str):
        # ``path`` begins with what the value is ("result", "return value", "input", "event data", "context")
        what = "step result at " if path.startswith("result") else ""
        super().__init__(f"{what}{path} cannot be stored: {detail}")
        self.path = path


class ResultTooLargeError(EngineError):
    code = "result_too_large"

    def __init__(self, what: str, size: int, limit: int):
        super().__init__(
            f"{what} is {size} bytes encoded, over the {limit}-byte budget that keeps the execution "
            f"inside DynamoDB's 400 KB item limit; store large payloads elsewhere and return a reference"
        )
        self.size, self.limit = size, limit


class PermanentStepError(EngineError):
    """Raise from a step to fail the execution at once, without retries.

    Example:
        >>> def charge(ctx):
        ...     if ctx["amount"] < 0:
        ...         raise PermanentStepError("amount must be positive")
    """

    code = "permanent_error"


class ExecutionStateConflictError(EngineError):
    """An operator's action does not apply to the execution as it is now (an HTTP 409).

    ``code`` is machine-readable (``execution_ended``, ``not_failed``, ``not_waiting``,
    ``definition_changed``, ``corrupt_state``, ``concurrent_change``); ``status`` the current status."""

    def __init__(self, code: str, message: str, status: str | None = None):
        super().__init__(message)
        self.code, self.status = code, status


class StepCapError(EngineError):
    """A start refused because the step list has more steps than ``LOOM_MAX_STEPS`` lets an execution run
    (an HTTP 409 ``over_step_cap``): it would run the first ones and stop FAILED at the cap."""

    code = "over_step_cap"


class InvalidRequestError(EngineError):
    """A malformed argument to a read or an operation (a bad page token, a limit out of range)."""


class InvalidInputError(EngineError):
    """The start input is not acceptable: not an object, or refused by the workflow's ``input_model``
    (``problems`` lists each field: ``{"field", "problem", "type"}``)."""

    def __init__(self, message: str, problems: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.problems = problems or []


class InvalidEventError(InvalidInputError):
    """An event's data does not fit the model its ``wait_for_event`` declares (``problems`` lists each
    field), or the event is otherwise unacceptable before anything is written (an HTTP 400)."""


class BranchConflictError(EngineError):
    """A conditional write of a parallel or map branch lost: the branch (``current``, None when it is
    gone) is not at the version the writer read, or its fan-out moved to another generation."""

    retryable = True

    def __init__(self, execution_id: str, step_index: int, branch: int, expected_version: int | None,
                 current: Any = None):
        super().__init__(f"execution {execution_id} step {step_index} branch {branch}: "
                         f"expected version {expected_version}, found "
                         f"{'nothing' if current is None else f'v{current.version} {current.status.value}'}")
        self.execution_id, self.step_index, self.branch = execution_id, step_index, branch
        self.expected_version, self.current = expected_version, current


class CallbackNotFoundError(EngineError):
    """A callback token Loom did not issue, or for an execution that is gone (an HTTP 404). The reply
    never says which, so a guessed token learns nothing."""

    def __init__(self) -> None:
        super().__init__("no wait matches this callback token; check it was copied whole")
