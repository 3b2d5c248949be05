"""Mapping between domain models and flat item attributes, shared by both adapters.

Values are plain str / int / bool so the memory store holds exactly what DynamoDB would. Key
attributes (PK, SK, GSI1PK, GSI1SK) are added by the DynamoDB adapter only.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from ..clock import UTC, format_ts, parse_ts
from ..errors import CorruptStateError
from ..model import CorruptRecord, ErrorInfo, Execution, OperationRecord, StepRecord

TTL_ATTR = "expires_at"
INPUT_ATTR = "input"
STEP_PREFIX = "STEP#"
OP_PREFIX = "OP#"


def step_sort_key(index: int, name: str) -> str:
    return f"STEP#{index:03d}#{name}"


def _epoch(when: dt.datetime) -> int:
    return int(when.timestamp())


def _from_epoch(value: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(value), UTC)


def _error_text(error: ErrorInfo | None) -> str | None:
    return None if error is None else error.model_dump_json()


def execution_to_attrs(e: Execution) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "execution_id": e.execution_id,
        "workflow": e.workflow,
        "status": e.status.value,
        "current_step": e.current_step,
        "version": e.version,
        "attempt": e.attempt,
        "fingerprint": e.fingerprint,
        "input_digest": e.input_digest,
        "created_at": format_ts(e.created_at),
        "updated_at": format_ts(e.updated_at),
        "total_attempts": e.total_attempts,
        "finalized": e.finalized,
        "redrives": e.redrives,
        "list_status": list_status(e),
    }
    optional = {
        "next_wake_at": None if e.next_wake_at is None else format_ts(e.next_wake_at),
        "timer": None if e.timer is None else e.timer.value,
        "index_at": None if e.index_at is None else format_ts(e.index_at),
        "attempt_started_at": None if e.attempt_started_at is None else format_ts(e.attempt_started_at),
        "attempt_deadline": None if e.attempt_deadline is None else format_ts(e.attempt_deadline),
        "error": _error_text(e.error),
        TTL_ATTR: None if e.expires_at is None else _epoch(e.expires_at),
        "finalize_by": None if e.finalize_by is None else format_ts(e.finalize_by),
        "cancelled_by": e.cancelled_by,
        "cancel_reason": e.cancel_reason,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    return attrs


def execution_from_attrs(execution_id: str, attrs: dict[str, Any]) -> Execution:
    try:
        return Execution(
            execution_id=attrs["execution_id"],
            workflow=attrs["workflow"],
            status=attrs["status"],
            current_step=_int(attrs["current_step"]),
            version=_int(attrs["version"]),
            attempt=_int(attrs.get("attempt", 0)),
            fingerprint=attrs["fingerprint"],
            input_digest=attrs["input_digest"],
            created_at=parse_ts(attrs["created_at"]),
            updated_at=parse_ts(attrs["updated_at"]),
            next_wake_at=parse_ts(attrs["next_wake_at"]) if "next_wake_at" in attrs else None,
            timer=attrs.get("timer"),
            index_at=_ts(attrs, "index_at"),
            attempt_started_at=_ts(attrs, "attempt_started_at"),
            attempt_deadline=_ts(attrs, "attempt_deadline"),
            total_attempts=_int(attrs.get("total_attempts", 0)),
            error=ErrorInfo.model_validate_json(attrs["error"]) if "error" in attrs else None,
            idempotency_token=attrs.get("idempotency_token"),
            expires_at=_from_epoch(attrs[TTL_ATTR]) if TTL_ATTR in attrs else None,
            finalized=bool(attrs.get("finalized", False)),
            finalize_by=parse_ts(attrs["finalize_by"]) if "finalize_by" in attrs else None,
            started_by=attrs.get("started_by"),
            cancelled_by=attrs.get("cancelled_by"),
            cancel_reason=attrs.get("cancel_reason"),
            redrives=_int(attrs.get("redrives", 0)),
        )
    except Exception as exc:  # any malformed attribute: the caller decides what a corrupt item means
        raise CorruptStateError(execution_id, f"{type(exc).__name__}: {exc}", attrs) from exc


START_ATTRS = ("idempotency_token", "started_by")
"""Written once, at start, beside the input (``#INPUT``) rather than on the execution item, which every
step rewrites: a long token or caller ARN must not push that item past 1 KB (two write units)."""


def start_attrs(e: Execution) -> dict[str, Any]:
    return {k: getattr(e, k) for k in START_ATTRS if getattr(e, k) is not None}


def with_start_attrs(e: Execution, attrs: dict[str, Any]) -> Execution:
    found = {k: attrs[k] for k in START_ATTRS if isinstance(attrs.get(k), str)}
    return e.model_copy(update=found) if found else e


def list_status(e: Execution) -> str:
    """What the list index shows: LIVE until the execution ends, so a step never rewrites the index."""
    return e.status.value if e.status.is_terminal else "LIVE"


def operation_sort_key(r: OperationRecord) -> str:
    return f"{OP_PREFIX}{r.version:08d}#{r.op}"


def operation_to_attrs(r: OperationRecord) -> dict[str, Any]:
    attrs = {"op": r.op, "by": r.by, "at": format_ts(r.at), "version": r.version,
             "detail": json.dumps(r.detail, separators=(",", ":"), sort_keys=True)}
    if r.reason is not None:
        attrs["reason"] = r.reason
    return attrs


def operation_from_attrs(sort_key: str, attrs: dict[str, Any]) -> OperationRecord | CorruptRecord:
    try:
        return OperationRecord(op=attrs["op"], by=attrs["by"], at=parse_ts(attrs["at"]), version=_int(attrs["version"]),
                               reason=attrs.get("reason"), detail=json.loads(attrs.get("detail") or "{}"))
    except Exception as exc:
        return CorruptRecord(sort_key=sort_key, detail=f"{type(exc).__name__}: {exc}")


def step_to_attrs(r: StepRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {"step_index": r.step_index, "name": r.name, "status": r.status.value,
                             "attempts": r.attempts, "is_final": r.is_final, "written_version": r.version}
    optional = {
        "started_at": None if r.started_at is None else format_ts(r.started_at),
        "finished_at": None if r.finished_at is None else format_ts(r.finished_at),
        "result": r.result_blob,
        "error": _error_text(r.error),
        TTL_ATTR: None if r.expires_at is None else _epoch(r.expires_at),
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    return attrs


def step_from_attrs(sort_key: str, attrs: dict[str, Any]) -> StepRecord | CorruptRecord:
    try:
        return StepRecord(
            step_index=_int(attrs["step_index"]),
            name=attrs["name"],
            status=attrs["status"],
            attempts=_int(attrs.get("attempts", 0)),
            started_at=parse_ts(attrs["started_at"]) if "started_at" in attrs else None,
            finished_at=parse_ts(attrs["finished_at"]) if "finished_at" in attrs else None,
            result_blob=_str(attrs["result"]) if "result" in attrs else None,
            error=ErrorInfo.model_validate_json(attrs["error"]) if "error" in attrs else None,
            is_final=bool(attrs.get("is_final", False)),
            expires_at=_from_epoch(attrs[TTL_ATTR]) if TTL_ATTR in attrs else None,
            version=_int(attrs.get("written_version", 0)),
        )
    except Exception as exc:
        return CorruptRecord(sort_key=sort_key, detail=f"{type(exc).__name__}: {exc}")


def _ts(attrs: dict[str, Any], name: str) -> dt.datetime | None:
    return parse_ts(attrs[name]) if name in attrs else None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)) or int(value) != value:
        raise TypeError(f"expected an integer, got {value!r}")
    return int(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value

