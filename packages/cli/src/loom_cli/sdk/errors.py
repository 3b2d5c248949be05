"""The SDK's one exception type: :class:`LoomError`, for a refusal of the API and for every other failure
(unreachable, misconfigured, a wait that timed out), so a caller has one thing to catch."""

from __future__ import annotations

from typing import Any

CONFIGURATION = "configuration"
"""No URL, an unusable URL, no credentials or region for signing: something to fix before any request."""
UNREACHABLE = "unreachable"
"""The control plane could not be reached (refused, DNS, TLS, a timeout)."""
BAD_RESPONSE = "bad_response"
"""It answered, but not with JSON."""
WAIT_TIMEOUT = "wait_timeout"
"""``LoomClient.wait`` ran out of time; ``execution_status`` is the last status seen."""
INVALID_ARGUMENT = "invalid_argument"
"""An argument of an SDK call that no request could carry (a page size, a poll interval, an event name):
refused before any request."""
ENDED_ELSEWHERE = "execution_ended"
"""``LoomClient.wait`` saw the execution end in a status it was not waiting for (the API's code for an ended
execution, without an HTTP status: nothing was refused)."""


class LoomError(Exception):
    """A request the API refused, or one that could not be made.

    Attributes:
        code: the API's stable code (``execution_not_found``, ``not_failed``, ``invalid_input``, ...), or
            one of the SDK's own: ``configuration``, ``unreachable``, ``bad_response``, ``wait_timeout``.
        message: what was wrong and what to do, as the API (or the SDK) words it.
        status: the HTTP status of a refusal (4xx) or of the API's own failure (5xx: ``internal_error``,
            ``store_unavailable``); None when no answer came from the API.
        execution_status: the execution's status when the API names it (every 409 does).
        problems: for ``invalid_input``, each field the workflow's input model refused.
        document: the API's whole error document (``{"error", "message", ...}``).

    Example:
        >>> try:
        ...     client.redrive(execution_id)
        ... except LoomError as exc:
        ...     if exc.code == "not_failed":
        ...         print("it is", exc.execution_status)
    """

    def __init__(self, code: str, message: str, *, status: int | None = None, execution_status: str | None = None,
                 problems: list[dict[str, Any]] | None = None, document: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status
        self.execution_status, self.problems = execution_status, problems
        self.document = document if document is not None else {"error": code, "message": message}

    @classmethod
    def from_document(cls, status: int, document: dict[str, Any]) -> LoomError:
        """A refusal, from the API's error document."""
        problems = document.get("problems")
        return cls(str(document.get("error")), str(document.get("message", "")), status=status,
                   execution_status=document.get("execution_status"),
                   problems=problems if isinstance(problems, list) else None, document=document)

    @property
    def is_refusal(self) -> bool:
        """True when the API answered and refused (a 4xx: it changed nothing); False when no request got
        through, or the API failed on its side (a 5xx: ``status`` says which, and retrying may work)."""
        return self.status is not None and self.status < 500

    def __str__(self) -> str:
        return f"{self.code} (HTTP {self.status}): {self.message}" if self.status is not None else self.message

    def __repr__(self) -> str:
        return f"LoomError({self.code!r}, {self.message!r}, status={self.status!r})"
