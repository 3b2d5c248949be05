"""Request and response shapes of the control-plane API, and how a request body becomes a request.

Every rejection is an :class:`ApiError` carrying the HTTP status, a stable code and a message that
says what was wrong and what to do. Validation happens before anything is written or sent.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from engine_core import (
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InvalidInputError,
    NonSerializableResultError,
    ResultTooLargeError,
    UnknownWorkflowError,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator

MAX_BODY_BYTES = 256 * 1024
"""Largest accepted request body. Far below the Function URL's 6 MB and the 400 KB DynamoDB item."""
_WORKFLOW_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TOKEN_MAX = 128


class ApiError(Exception):
    """A request the API refuses, with the response it gets."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}

    def body(self) -> dict[str, str]:
        return ErrorBody(error=self.code, message=self.message).model_dump()


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    error: StrictStr
    """Stable, machine-readable code: invalid_json, invalid_request, unknown_workflow, ..."""
    message: StrictStr


class StartExecutionRequest(BaseModel):
    """Body of ``POST /executions``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workflow: StrictStr
    """A registered workflow name: 1-128 characters from A-Z a-z 0-9 _ . -"""
    input: dict[str, Any]
    """The execution's starting context: a JSON object."""
    idempotency_token: StrictStr | None = None
    """Makes the start repeatable: the same token and input return the first execution."""

    @field_validator("workflow")
    @classmethod
    def _workflow_name(cls, value: str) -> str:
        if not _WORKFLOW_NAME.match(value):
            raise ValueError("must be 1-128 characters from A-Z a-z 0-9 _ . - (see GET /workflows for the names)")
        return value

    @field_validator("idempotency_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not (1 <= len(value) <= _TOKEN_MAX and value.isprintable()):
            raise ValueError(f"must be 1-{_TOKEN_MAX} printable characters (no control characters)")
        return value


class Links(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    self_: StrictStr = Field(alias="self")
    history: StrictStr


class ExecutionStarted(BaseModel):
    """Reply to ``POST /executions``: 202 when this request created the execution, 200 when it existed."""

    model_config = ConfigDict(extra="forbid")

    execution_id: StrictStr
    workflow: StrictStr
    status: StrictStr
    current_step: StrictInt
    created: StrictBool
    links: Links

    @classmethod
    def of(cls, execution_id: str, workflow: str, status: str, current_step: int, created: bool) -> ExecutionStarted:
        base = f"/executions/{execution_id}"
        return cls(execution_id=execution_id, workflow=workflow, status=status, current_step=current_step,
                   created=created, links=Links(self_=base, history=f"{base}/history"))

    def body(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def parse_start_request(body: str | None, is_base64_encoded: bool) -> StartExecutionRequest:
    """Turn a Function URL request body into a start request, or raise the ApiError that explains why not."""
    raw = _body_bytes(body, is_base64_encoded)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "input_too_large", (
            f"request body is {len(raw)} bytes, over the {MAX_BODY_BYTES}-byte (256 KB) limit; keep large "
            "payloads elsewhere (for example S3) and pass a reference in 'input'"))
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ApiError(400, "invalid_json", (
            f"request body is not valid UTF-8 JSON{where}; send a JSON object such as "
            '{"workflow": "order_fulfillment", "input": {}}')) from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", (
            f"request body is a JSON {type(data).__name__}; send an object with 'workflow' and 'input'"))
    try:
        return StartExecutionRequest.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, "invalid_request", _explain(exc)) from None


def _body_bytes(body: str | None, is_base64_encoded: bool) -> bytes:
    if not body:
        raise ApiError(400, "invalid_json", 'request body is empty; send a JSON object such as {"workflow": '
                                            '"order_fulfillment", "input": {}}')
    if not is_base64_encoded:
        return body.encode("utf-8")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_json", "request body is marked base64-encoded but is not valid base64") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_TYPE_WORDS = {"string_type": "must be a string", "dict_type": "must be a JSON object"}


def _explain(exc: ValidationError) -> str:
    allowed = ", ".join(StartExecutionRequest.model_fields)
    problems = []
    for e in exc.errors(include_url=False):
        field = ".".join(str(part) for part in e["loc"]) or "body"
        if e["type"] == "extra_forbidden":
            problems.append(f"'{field}' is not a known field (allowed: {allowed})")
        elif e["type"] == "missing":
            problems.append(f"'{field}' is required")
        else:
            what = _TYPE_WORDS.get(e["type"]) or e["msg"].removeprefix("Value error, ")
            problems.append(f"'{field}' {what}")
    return "; ".join(problems) + "; fix the request body and send it again"


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
        return ApiError(409, "idempotency_conflict", str(exc))
    if isinstance(exc, ResultTooLargeError):
        return ApiError(413, "input_too_large", str(exc))
    if isinstance(exc, (InvalidInputError, NonSerializableResultError)):
        return ApiError(400, "invalid_request", f"{exc}; fix the request body and send it again")
    return None
