"""How a request becomes a request: the body and query-string models of every route, and the parsers
that check them. Every rejection is an :class:`~.errors.ApiError` that says what was wrong and what to
do; validation happens before anything is written or sent. Reply shapes are in ``responses.py``."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

from engine_core.errors import InvalidRequestError
from engine_core.reads import decode_token
from engine_core.registry import WORKFLOW_NAME_RE
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from .errors import ApiError

MAX_BODY_BYTES = 256 * 1024
"""Largest accepted request body. Far below the Function URL's 6 MB and the 400 KB DynamoDB item."""
_WORKFLOW_NAME = WORKFLOW_NAME_RE  # the registry's own pattern (anchored \A...\Z, used with fullmatch)
_TOKEN_MAX = 128


class StartExecutionRequest(BaseModel):
    """Body of ``POST /executions``."""

    # Each request model is built on its route's first use, not at import (a cold start pays for its route only).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    workflow: StrictStr
    """A registered workflow name: 1-128 characters from A-Z a-z 0-9 _ . -"""
    input: dict[str, Any]
    """The execution's starting context: a JSON object."""
    idempotency_token: StrictStr | None = None
    """Makes the start repeatable: the same token and input return the first execution."""
    version: int | None = Field(default=None, ge=1)
    """The workflow version to run (GET /workflows lists them); None: the newest deployed."""

    @field_validator("workflow")
    @classmethod
    def _workflow_name(cls, value: str) -> str:
        if not _WORKFLOW_NAME.fullmatch(value):
            raise ValueError("must be 1-128 characters from A-Z a-z 0-9 _ . - (see GET /workflows for the names)")
        return value

    @field_validator("idempotency_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not (1 <= len(value) <= _TOKEN_MAX and value.isprintable()):
            raise ValueError(f"must be 1-{_TOKEN_MAX} printable characters (no control characters)")
        return value


def parse_start_request(body: str | None, is_base64_encoded: bool) -> StartExecutionRequest:
    """Turn a Function URL request body into a start request, or raise the ApiError that explains why not."""
    raw = _body_bytes(body, is_base64_encoded)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "input_too_large", (
            f"request body is {len(raw)} bytes, over the {MAX_BODY_BYTES}-byte (256 KB) limit; keep large "
            "payloads elsewhere (for example S3) and pass a reference in 'input'"))
    rejected: list[_Number] = []
    try:
        text = raw.decode("utf-8")
        if _MAYBE_OUT_OF_RANGE.search(text) is None:
            data = json.loads(text, parse_constant=_reject_constant)
        else:  # slower: every number through Python, to name the one that does not fit
            data = json.loads(text, parse_constant=_reject_constant,
                              parse_int=lambda t: _parse_int(t, rejected), parse_float=lambda t: _parse_float(t, rejected))
    except RecursionError:
        raise ApiError(400, "invalid_request", (
            "request body is nested too deeply to read; Loom stores values nested at most 64 levels deep, "
            "so flatten 'input' and send it again")) from None
    except (UnicodeDecodeError, ValueError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ApiError(400, "invalid_json", (
            f"request body is not valid UTF-8 JSON{where}; send a JSON object such as "
            '{"workflow": "order_fulfillment", "input": {}}')) from None
    if rejected:
        path, number = _find(data, rejected[0])
        raise ApiError(400, "invalid_request", (
            f"value at {path} is {number.why}; send it as a string instead, and send the request again"))
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
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in the event's text; Lambda base64-encodes real bytes
            raise ApiError(400, "invalid_json", "request body is not valid UTF-8 text; send UTF-8 JSON") from None
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_json", "request body is marked base64-encoded but is not valid base64") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Conservative: any JSON number that overflows a float or passes the int-to-str limit (>= 640 digits) has
# 200 digits in a row or a 3-digit exponent; text without either is parsed at full speed.
_MAYBE_OUT_OF_RANGE = re.compile(r"\d{200}|[eE][+-]?\d{3}")


class _Number:
    """A JSON number Python cannot hold as itself; stands in the parsed body until the request is refused."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str):
        self.text, self.why = text, why


def _parse_int(text: str, rejected: list[_Number]) -> Any:
    try:
        return int(text)
    except ValueError:  # past sys.get_int_max_str_digits(); the engine could not store it either
        digits = len(text.lstrip("-"))
        number = _Number(text, f"an integer of {digits} digits, past the limit of "
                               f"{sys.get_int_max_str_digits()} digits Loom can store")
        rejected.append(number)
        return number


def _parse_float(text: str, rejected: list[_Number]) -> Any:
    value = float(text)
    if math.isfinite(value):
        return value
    number = _Number(text, f"the number {_clip(text)}, too large for a 64-bit float (it would become infinity)")
    rejected.append(number)
    return number


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _find(data: Any, target: _Number) -> tuple[str, _Number]:
    """Where ``target`` sits in the parsed body, in the codec's path notation (iterative: bodies nest deeply)."""
    stack: list[tuple[Any, str]] = [(data, "body")]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path, target
        if isinstance(node, dict):
            stack.extend((v, f"{k}" if path == "body" else f"{path}[{k!r}]") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return "body", target


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


# -- operator routes: list, cancel, redrive, wake, history pages ------------------------------------
LIST_LIMIT_DEFAULT, HISTORY_LIMIT_DEFAULT, PAGE_MAX = 20, 50, 100
LIST_STATUSES = ("RUNNING", "SLEEPING", "WAITING", "LIVE", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
"""What ``status=`` filters on: a status, or LIVE for any of RUNNING, SLEEPING and WAITING."""
_TOKEN_CHARS = re.compile(r"\A[A-Za-z0-9_-]{1,2048}\Z")
_REASON_MAX = 1024


@dataclass(frozen=True)
class ListQuery:
    """``GET /executions``'s query string, checked."""

    workflow: str | None = None
    status: str | None = None
    started_after: dt.datetime | None = None
    started_before: dt.datetime | None = None
    limit: int = LIST_LIMIT_DEFAULT
    next_token: str | None = None


@dataclass(frozen=True)
class PageQuery:
    """``GET /executions/{id}/history``'s query string, checked."""

    limit: int = HISTORY_LIMIT_DEFAULT
    next_token: str | None = None


def parse_list_query(params: dict[str, str] | None) -> ListQuery:
    """The list filters from a query string, or the ApiError (400 invalid_request) that says what is wrong."""
    p = _known_params(params, ("workflow", "status", "started_after", "started_before", "limit", "next_token"))
    workflow = p.get("workflow")
    if workflow is not None and not _WORKFLOW_NAME.fullmatch(workflow):
        raise _bad("workflow", "must be 1-128 characters from A-Z a-z 0-9 _ . - (GET /workflows lists the names)")
    status = p.get("status")
    if status is not None:
        status = status.upper()
        if status not in LIST_STATUSES:
            raise _bad("status", f"must be one of {', '.join(LIST_STATUSES)}")
    after, before = _time(p, "started_after"), _time(p, "started_before")
    if after is not None and before is not None and after >= before:
        raise _bad("started_after", "must be earlier than started_before")
    token = _token(p)
    if token is not None:
        _check_list_token(token)
    # The index reads both ends inclusively; the API's window is [started_after, started_before).
    before = None if before is None else before - dt.timedelta(microseconds=1)
    return ListQuery(workflow, status, after, before, _limit(p, LIST_LIMIT_DEFAULT), token)


def parse_page_query(params: dict[str, str] | None, default_limit: int = HISTORY_LIMIT_DEFAULT) -> PageQuery:
    """``limit`` and ``next_token`` of a paged read (the engine checks the token is one it returned)."""
    p = _known_params(params, ("limit", "next_token"))
    token = _token(p)
    if token is not None:
        _decoded(token)
    return PageQuery(_limit(p, default_limit), token)


def _check_list_token(token: str) -> None:
    """A list token names the list index's last entry returned (``<created_at>#<id>``)."""
    key = _decoded(token)
    if not (isinstance(key, str) and 40 <= len(key) <= 80 and "#" in key):
        raise _not_ours()


def _decoded(token: str) -> Any:
    try:
        return decode_token(token)
    except InvalidRequestError:
        raise _not_ours() from None


def _not_ours() -> ApiError:
    return _bad("next_token", "is not a token this API returned; pass the last reply's next_token back unchanged")


def _known_params(params: dict[str, str] | None, allowed: tuple[str, ...]) -> dict[str, str]:
    params = params or {}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ApiError(400, "invalid_request", (
            f"unknown query parameter {', '.join(repr(u) for u in unknown)}; allowed: {', '.join(allowed)}"))
    return params


def _bad(name: str, what: str) -> ApiError:
    return ApiError(400, "invalid_request", f"query parameter '{name}' {what}; fix it and send the request again")


def _limit(p: dict[str, str], default: int) -> int:
    text = p.get("limit")
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= PAGE_MAX):
        raise _bad("limit", f"must be a whole number from 1 to {PAGE_MAX}, got {_clip(text)!r}")
    return int(text)


def _token(p: dict[str, str]) -> str | None:
    token = p.get("next_token")
    if token is not None and not _TOKEN_CHARS.fullmatch(token):
        raise _not_ours()
    return token


def _time(p: dict[str, str], name: str) -> dt.datetime | None:
    text = p.get(name)
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _bad(name, f"must be an ISO-8601 time such as 2026-03-01T12:00:00Z, got {_clip(text)!r}") from None
    if when.tzinfo is None:  # no offset: UTC, as every time Loom returns is
        when = when.replace(tzinfo=dt.timezone.utc)
    try:
        year = when.astimezone(dt.timezone.utc).year
    except OverflowError:  # an offset that takes year 1 or 9999 past the calendar's ends
        year = when.year
    if not 1970 <= year <= 9998:
        raise _bad(name, "must be between 1970 and 9998")
    return when


class CancelRequest(BaseModel):
    """Optional body of ``POST /executions/{id}/cancel``."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    reason: StrictStr | None = None
    """Why, in a line: kept on the execution and in its history."""

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str | None) -> str | None:
        if value is not None and not (1 <= len(value) <= _REASON_MAX and value.isprintable()):
            raise ValueError(f"must be 1-{_REASON_MAX} printable characters (no control characters)")
        return value


def parse_cancel_request(body: str | None, is_base64_encoded: bool) -> CancelRequest:
    """An empty body is a cancel without a reason; anything else must be ``{"reason": "..."}``."""
    if not body:
        return CancelRequest()
    raw = _body_bytes(body, is_base64_encoded)
    if len(raw) > 16 * 1024:
        raise ApiError(413, "input_too_large", f"request body is {len(raw)} bytes; a cancel takes at most 16 KB")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ApiError(400, "invalid_json", 'request body is not valid UTF-8 JSON; send {"reason": "..."} or '
                                            "nothing") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", f"request body is a JSON {type(data).__name__}; send an object "
                                               'such as {"reason": "duplicate order"} or nothing')
    try:
        return CancelRequest.model_validate(data)
    except ValidationError as exc:
        raise _refused_body(exc, "reason") from None


def _refused_body(exc: ValidationError, allowed: str, words: dict[str, str] | None = None) -> ApiError:
    """A 400 naming each field of a small request body that did not fit (``words``: a field's own wording)."""
    problems = []
    for e in exc.errors(include_url=False):
        field = ".".join(str(part) for part in e["loc"]) or "body"
        if e["type"] == "extra_forbidden":
            problems.append(f"'{field}' is not a known field (allowed: {allowed})")
        elif field in (words or {}):
            problems.append((words or {})[field])
        else:
            problems.append(f"'{field}' {_TYPE_WORDS.get(e['type']) or e['msg'].removeprefix('Value error, ')}")
    return ApiError(400, "invalid_request", "; ".join(problems) + "; fix the request body and send it again")


class EventRequest(BaseModel):
    """Body of ``POST /executions/{id}/events/{name}`` and ``POST /callbacks/{token}``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    data: dict[str, Any] = Field(default_factory=dict)
    """A JSON object: the wait that consumes it keeps it in the context under the wait step's name."""
    event_id: StrictStr | None = None
    """Makes a repeated send a no-op (the same id is applied once). Default: a fresh id per send."""


_EVENT_MAX = 256 * 1024


def parse_event_request(body: str | None, is_base64_encoded: bool, route: str, allow_id: bool = True) -> EventRequest:
    """``{"data": {...}, "event_id": "..."}``; an empty body sends an event with no data."""
    if not body:
        return EventRequest()
    raw = _body_bytes(body, is_base64_encoded)
    if len(raw) > _EVENT_MAX:
        raise ApiError(413, "input_too_large", f"request body is {len(raw)} bytes; {route} takes at most "
                                               f"{_EVENT_MAX // 1024} KB (keep large payloads elsewhere, send a reference)")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ApiError(400, "invalid_json", f'request body is not valid UTF-8 JSON; send {{"data": {{...}}}} to {route}') from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", f"request body is a JSON {type(data).__name__}; send an object such as "
                                               '{"data": {"approved": true}}')
    allowed = "data, event_id" if allow_id else "data"
    if not allow_id and "event_id" in data:
        raise ApiError(400, "invalid_request", f"'event_id' is not a known field here (allowed: {allowed}): a "
                                               "callback token is its own event id")
    try:
        return EventRequest.model_validate(data)
    except ValidationError as exc:
        raise _refused_body(exc, allowed, {"data": "'data' must be a JSON object (the wait that takes it puts it in "
                                                   "the context under the wait step's name)"}) from None


def no_body(body: str | None, route: str) -> None:
    """Redrive and wake take no body; refuse one rather than ignore what the caller meant by it."""
    if body not in (None, "", "{}"):
        raise ApiError(400, "invalid_request", f"{route} takes no request body; send the request without one")


def caller_identity(request_context: dict[str, Any] | None) -> str:
    """Who is calling: on AWS the IAM principal the Function URL authenticated (its ARN, else its
    caller id, else its account), and ``local`` when the request carries no IAM identity."""
    iam = ((request_context or {}).get("authorizer") or {}).get("iam") or {}
    for key in ("userArn", "callerId", "accountId"):
        value = iam.get(key)
        if isinstance(value, str) and value:
            return value[:512]
    return "local"
