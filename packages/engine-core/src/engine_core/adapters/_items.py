"""Mapping between domain models and flat item attributes, shared by both adapters.

Values are plain str / int / bool so the memory store holds exactly what DynamoDB would. Key
attributes (PK, SK, GSI1PK, GSI1SK) are added by the DynamoDB adapter only.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any

from ..clock import UTC, format_ts, parse_ts
from ..errors import CorruptStateError
from ..model import (Branch, CorruptRecord, ErrorInfo, EventRecord, Execution, Join, Ledger, OperationRecord,
                     StepRecord, StepStatus)

TTL_ATTR = "expires_at"
INPUT_ATTR = "input"
STEP_PREFIX = "STEP#"
OP_PREFIX = "OP#"
EVENT_PREFIX = "EVT#"
COMPENSATION_SUFFIX = "#compensation"


def step_number(index: int) -> str:
    """A step index as its history key writes it: three digits up to 999 (as every key written so far),
    then ``~`` and six digits, which sorts after them all, so key order stays step order."""
    return f"{index:03d}" if index < 1000 else f"~{index:06d}"


def step_index_of(sort_key: str) -> int:
    """The step index of a history key (``STEP#<number>#<name>...``)."""
    return int(sort_key.split("#")[1].lstrip("~"))


def step_sort_key(index: int, name: str, kind: str = "task") -> str:
    """A step's history key; a compensation's record sits right after the record of the step it undoes."""
    return f"STEP#{step_number(index)}#{name}" + (COMPENSATION_SUFFIX if kind == "compensation" else "")


def record_sort_key(r: StepRecord) -> str:
    return step_sort_key(r.step_index, r.name, r.kind)


def event_sort_key(name: str, event_id: str) -> str:
    return f"{EVENT_PREFIX}{name}#{event_id}"


def event_to_attrs(r: EventRecord) -> dict[str, Any]:
    attrs = {"name": r.name, "event_id": r.event_id, "data": json.dumps(r.data, separators=(",", ":"), sort_keys=True),
             "sent_at": format_ts(r.sent_at)}
    if r.by is not None:
        attrs["by"] = r.by
    return _stamped(attrs, r.run, r.expires_at)


def event_from_attrs(sort_key: str, attrs: dict[str, Any]) -> EventRecord | CorruptRecord:
    try:
        return EventRecord(name=attrs["name"], event_id=attrs["event_id"], data=json.loads(attrs["data"]),
                           sent_at=parse_ts(attrs["sent_at"]), by=attrs.get("by"), run=_run(attrs),
                           expires_at=_expiry(attrs))
    except Exception as exc:
        return CorruptRecord(sort_key=sort_key, detail=f"{type(exc).__name__}: {exc}")


RUN_ATTR = "run"
"""Which run of the execution id wrote an item (``Execution.run``, its start time): a token re-used after
its execution expired starts a new run, and the stores let a newer run replace what an older one left."""


def _epoch(when: dt.datetime) -> int:
    return int(when.timestamp())


def _stamped(attrs: dict[str, Any], run: str | None, expires_at: dt.datetime | None) -> dict[str, Any]:
    """``attrs`` with the run and the TTL attribute, where set."""
    if run is not None:
        attrs[RUN_ATTR] = run
    if expires_at is not None:
        attrs[TTL_ATTR] = _epoch(expires_at)
    return attrs


def _run(attrs: dict[str, Any]) -> str | None:
    value = attrs.get(RUN_ATTR)
    return value if isinstance(value, str) else None


def _expiry(attrs: dict[str, Any]) -> dt.datetime | None:
    return _from_epoch(attrs[TTL_ATTR]) if TTL_ATTR in attrs else None


def _from_epoch(value: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(value), UTC)


def _error_text(error: ErrorInfo | None) -> str | None:
    return None if error is None else error.model_dump_json()


LEDGER_ATTRS = ("cost_req", "cost_rru10", "cost_wru10", "cost_msg", "cost_ms")
"""The ledger on the execution item (and on a branch item): five numbers, units in tenths (DynamoDB numbers
are not floats here)."""


def ledger_to_attrs(ledger: Ledger) -> dict[str, int]:
    return {"cost_req": ledger.requests, "cost_rru10": round(ledger.read_units * 10),
            "cost_wru10": round(ledger.write_units * 10), "cost_msg": ledger.messages, "cost_ms": ledger.lambda_ms}


def ledger_from_attrs(attrs: dict[str, Any]) -> Ledger | None:
    if "cost_req" not in attrs:
        return None
    return Ledger(requests=_int(attrs["cost_req"]), read_units=_int(attrs.get("cost_rru10", 0)) / 10,
                  write_units=_int(attrs.get("cost_wru10", 0)) / 10, messages=_int(attrs.get("cost_msg", 0)),
                  lambda_ms=_int(attrs.get("cost_ms", 0)))


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
    if e.compensating:
        attrs["compensating"] = True
    if e.cancel_requested:
        attrs["cancel_requested"] = True
    if e.waiting_since is not None and _in_wait_period(e):
        attrs["waiting_since"] = format_ts(e.waiting_since)
        if e.wait_woken:
            attrs["wait_woken"] = True
    if e.undo_failed_step:
        attrs["undo_failed_step"] = True
    if e.lost_attempts:
        attrs["lost_attempts"] = e.lost_attempts
    if e.resends:
        attrs["resends"] = e.resends
    if e.layout != 1:
        attrs["layout"] = e.layout
    if e.checkpoint is not None:
        attrs["checkpoint"] = e.checkpoint
    if e.workflow_version != 1:
        attrs["wf_version"] = e.workflow_version
    if e.code_step is not None:
        attrs["code_step"] = e.code_step
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
        "failed_step": e.failed_step,
        "compensated": e.compensated,
        "compensation_error": _error_text(e.compensation_error),
        "compensating_for": _error_text(e.compensating_for),
        "stamped_until": None if e.stamped_until is None else _epoch(e.stamped_until),
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    if e.ledger is not None:
        attrs.update(ledger_to_attrs(e.ledger))
    return attrs


def _in_wait_period(e: Execution) -> bool:
    """Whether a wait period may still be going on (WAITING, or due and handed to a fresh message with no
    attempt holding the step): then its start and an operator's wake are kept on the item."""
    return e.attempt > 0 and e.attempt_started_at is None and not e.status.is_terminal


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
            workflow_version=_int(attrs.get("wf_version", 1)),
            input_digest=attrs["input_digest"],
            created_at=parse_ts(attrs["created_at"]),
            updated_at=parse_ts(attrs["updated_at"]),
            next_wake_at=parse_ts(attrs["next_wake_at"]) if "next_wake_at" in attrs else None,
            timer=attrs.get("timer"),
            index_at=_ts(attrs, "index_at"),
            attempt_started_at=_ts(attrs, "attempt_started_at"),
            attempt_deadline=_ts(attrs, "attempt_deadline"),
            waiting_since=_ts(attrs, "waiting_since"),
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
            compensating=bool(attrs.get("compensating", False)),
            failed_step=_int(attrs["failed_step"]) if "failed_step" in attrs else None,
            compensated=bool(attrs["compensated"]) if "compensated" in attrs else None,
            compensation_error=(ErrorInfo.model_validate_json(attrs["compensation_error"])
                                if "compensation_error" in attrs else None),
            compensating_for=(ErrorInfo.model_validate_json(attrs["compensating_for"])
                              if "compensating_for" in attrs else None),
            cancel_requested=bool(attrs.get("cancel_requested", False)),
            wait_woken=bool(attrs.get("wait_woken", False)),
            undo_failed_step=bool(attrs.get("undo_failed_step", False)),
            lost_attempts=_int(attrs.get("lost_attempts", 0)),
            resends=_int(attrs.get("resends", 0)),
            layout=_int(attrs.get("layout", 1)),
            checkpoint=_int(attrs["checkpoint"]) if "checkpoint" in attrs else None,
            code_step=_str(attrs["code_step"]) if "code_step" in attrs else None,
            stamped_until=_from_epoch(attrs["stamped_until"]) if "stamped_until" in attrs else None,
            ledger=ledger_from_attrs(attrs),
        )
    except Exception as exc:  # any malformed attribute: the caller decides what a corrupt item means
        raise CorruptStateError(execution_id, f"{type(exc).__name__}: {exc}", attrs) from exc


START_ATTRS = ("idempotency_token", "started_by", "callback_secret", "pinned_steps")
"""Written once, at start, beside the input (``#INPUT``) rather than on the execution item, which every
step rewrites: a long token or caller ARN must not push that item past 1 KB (two write units)."""


def start_attrs(e: Execution) -> dict[str, Any]:
    """What ``#INPUT`` holds beside the input: the start's attributes, its run and its TTL."""
    attrs = {k: getattr(e, k) for k in START_ATTRS if getattr(e, k) is not None}
    return _stamped(attrs, e.run, e.stamped_until)


def older_run(stored: dict[str, Any], run: str | None, written_attr: str) -> bool:
    """``stored`` was left by a run older than ``run``: a newer run replaces it whatever else it holds.
    An item from before runs were named is older when it was written (``written_attr``) before ``run``
    began. DynamoDB's conditions say the same: ``#run < :run OR (attribute_not_exists(#run) AND
    <written_attr> < :run)``."""
    if run is None:
        return False
    other = stored.get(RUN_ATTR)
    if isinstance(other, str):
        return other < run
    written = stored.get(written_attr)
    return isinstance(written, str) and written < run


def step_replaceable(stored: dict[str, Any], record: StepRecord) -> bool:
    """May ``record`` replace the stored history item? Yes when it predates written versions (engine-core
    before 0.2), when an older run left it, or when this run wrote it at an earlier version: of two
    copies of one delivery only the first writes, and a stalled older writer never replaces a newer
    record. DynamoDB: ``attribute_not_exists(written_version) OR #run < :run OR (attribute_not_exists(#run)
    AND finished_at < :run) OR ((#run = :run OR attribute_not_exists(#run)) AND written_version < :v)``."""
    written = stored.get("written_version")
    if isinstance(written, bool) or not isinstance(written, (int, Decimal)):
        return True
    if older_run(stored, record.run, "finished_at"):
        return True
    return same_run(stored, record.run) and written < record.version


def same_run(stored: dict[str, Any], run: str | None) -> bool:
    """Written by ``run``, or (items from before runs were named) by no named run at all."""
    other = stored.get(RUN_ATTR)
    return other == run or not isinstance(other, str)


def with_start_attrs(e: Execution, attrs: dict[str, Any]) -> Execution:
    found = {k: attrs[k] for k in START_ATTRS if isinstance(attrs.get(k), str)}
    return e.model_copy(update=found) if found else e


LIST_KEY_RE = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z#[0-9a-f-]{36}\Z")


def list_key(created_at: dt.datetime, execution_id: str) -> str:
    """An execution's key in the list index (GSI2SK): creation time, then id. A list cursor is the key
    of the last entry returned; every store resumes strictly below it, newest first."""
    return f"{format_ts(created_at)}#{execution_id}"


def valid_list_key(value: Any) -> bool:
    return isinstance(value, str) and LIST_KEY_RE.fullmatch(value) is not None


LIVE = "LIVE"
"""The list index's status of an execution that has not ended."""


def list_status(e: Execution) -> str:
    """What the list index shows: LIVE until the execution ends, so a step never rewrites the index."""
    return e.status.value if e.status.is_terminal else LIVE


def operation_sort_key(r: OperationRecord) -> str:
    return f"{OP_PREFIX}{r.version:08d}#{r.op}"


def operation_to_attrs(r: OperationRecord) -> dict[str, Any]:
    attrs = {"op": r.op, "by": r.by, "at": format_ts(r.at), "version": r.version,
             "detail": json.dumps(r.detail, separators=(",", ":"), sort_keys=True)}
    if r.reason is not None:
        attrs["reason"] = r.reason
    return _stamped(attrs, r.run, r.expires_at)


def operation_from_attrs(sort_key: str, attrs: dict[str, Any]) -> OperationRecord | CorruptRecord:
    try:
        return OperationRecord(op=attrs["op"], by=attrs["by"], at=parse_ts(attrs["at"]), version=_int(attrs["version"]),
                               reason=attrs.get("reason"), detail=json.loads(attrs.get("detail") or "{}"),
                               run=_run(attrs), expires_at=_expiry(attrs))
    except Exception as exc:
        return CorruptRecord(sort_key=sort_key, detail=f"{type(exc).__name__}: {exc}")


def step_to_attrs(r: StepRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {"step_index": r.step_index, "name": r.name, "status": r.status.value,
                             "attempts": r.attempts, "is_final": r.is_final, "written_version": r.version}
    if r.kind != "task":
        attrs["kind"] = r.kind
    if r.event_id is not None:
        attrs["event_id"] = r.event_id
    if r.run is not None:
        attrs[RUN_ATTR] = r.run
    if r.context_blob is not None:
        attrs["context"] = r.context_blob
    if r.undo:
        attrs["undo"] = True
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
    """A history record as stored, checked field by field here (a delivery reads many: a code-first one
    reads them all), then built without pydantic's second pass; anything malformed is a CorruptRecord."""
    try:
        index, attempts = _int(attrs["step_index"]), _int(attrs.get("attempts", 0))
        if index < 0 or attempts < 0:
            raise ValueError(f"step_index {index} and attempts {attempts} must not be negative")
        event_id = attrs.get("event_id")
        if event_id is not None and not isinstance(event_id, str):
            raise TypeError(f"event_id must be a string, got {type(event_id).__name__}")
        return StepRecord.trusted(dict(
            step_index=index,
            name=_str(attrs["name"]),
            status=StepStatus(attrs["status"]),
            attempts=attempts,
            started_at=parse_ts(attrs["started_at"]) if "started_at" in attrs else None,
            finished_at=parse_ts(attrs["finished_at"]) if "finished_at" in attrs else None,
            result_blob=_str(attrs["result"]) if "result" in attrs else None,
            error=ErrorInfo.model_validate_json(attrs["error"]) if "error" in attrs else None,
            is_final=bool(attrs.get("is_final", False)),
            expires_at=_from_epoch(attrs[TTL_ATTR]) if TTL_ATTR in attrs else None,
            version=_int(attrs.get("written_version", 0)),
            kind=_str(attrs.get("kind", "task")),
            event_id=event_id,
            run=_run(attrs),
            context_blob=_str(attrs["context"]) if "context" in attrs else None,
            undo=bool(attrs.get("undo", False)),
        ))
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



# -- parallel and map steps: branch items (their own partition) and the join item ----------------
JOIN_PREFIX = "JOIN#"
BRANCH_PREFIX = "B#"


def join_sort_key(step_index: int) -> str:
    return f"{JOIN_PREFIX}{step_index:03d}"


def branch_partition_suffix(step_index: int) -> str:
    """Appended to the execution's partition key: ``EXEC#<id>#S<nnn>`` holds that step's branches."""
    return f"#S{step_index:03d}"


def branch_sort_key(branch: int) -> str:
    return f"{BRANCH_PREFIX}{branch:05d}"


def join_to_attrs(j: Join) -> dict[str, Any]:
    attrs: dict[str, Any] = {"step_index": j.step_index, "total": j.total, "done": j.done,
                             "generation": j.generation, "max_concurrency": j.max_concurrency,
                             "started_at": format_ts(j.started_at)}
    return _stamped(attrs, j.run, j.expires_at)


def join_from_attrs(attrs: dict[str, Any]) -> Join:
    """Raises ValueError (or TypeError) for an unreadable item."""
    return Join(step_index=_int(attrs["step_index"]), total=_int(attrs["total"]), done=_int(attrs.get("done", 0)),
                generation=_int(attrs["generation"]), max_concurrency=_int(attrs["max_concurrency"]),
                started_at=parse_ts(attrs["started_at"]), expires_at=_expiry(attrs), run=_run(attrs))


def branch_to_attrs(b: Branch) -> dict[str, Any]:
    attrs: dict[str, Any] = {"step_index": b.step_index, "branch": b.branch, "status": b.status.value,
                             "version": b.version, "generation": b.generation, "attempt": b.attempt,
                             "updated_at": format_ts(b.updated_at)}
    optional = {
        "next_wake_at": None if b.next_wake_at is None else format_ts(b.next_wake_at),
        "attempt_started_at": None if b.attempt_started_at is None else format_ts(b.attempt_started_at),
        "finished_at": None if b.finished_at is None else format_ts(b.finished_at),
        "result": b.result_blob,
        "error": _error_text(b.error),
        TTL_ATTR: None if b.expires_at is None else _epoch(b.expires_at),
        RUN_ATTR: b.run,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    if b.ledger is not None:
        attrs.update(ledger_to_attrs(b.ledger))
    return attrs


def branch_from_attrs(sort_key: str, attrs: dict[str, Any]) -> Branch | CorruptRecord:
    try:
        return Branch(
            step_index=_int(attrs["step_index"]), branch=_int(attrs["branch"]), status=attrs["status"],
            version=_int(attrs["version"]), generation=_int(attrs["generation"]), attempt=_int(attrs.get("attempt", 0)),
            updated_at=parse_ts(attrs["updated_at"]),
            next_wake_at=_ts(attrs, "next_wake_at"), attempt_started_at=_ts(attrs, "attempt_started_at"),
            finished_at=_ts(attrs, "finished_at"),
            result_blob=_str(attrs["result"]) if "result" in attrs else None,
            error=ErrorInfo.model_validate_json(attrs["error"]) if "error" in attrs else None,
            expires_at=_expiry(attrs), run=_run(attrs), ledger=ledger_from_attrs(attrs),
        )
    except Exception as exc:
        return CorruptRecord(sort_key=sort_key, detail=f"{type(exc).__name__}: {exc}")
