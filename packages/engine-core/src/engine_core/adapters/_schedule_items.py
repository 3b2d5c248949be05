"""A schedule record (``schedules.record.ScheduleRecord``) as flat item attributes, for both stores.

Times are fixed-width UTC strings (``clock.format_ts``), so the store's condition on ``scheduled_at``
compares them as strings in time order; ``expires_at`` is epoch seconds (the table's TTL attribute).
"""

from __future__ import annotations

from typing import Any

from ..clock import format_ts, parse_ts
from ..errors import CorruptStateError
from ..model import ErrorInfo
from ..schedules.record import FiringOutcome, ScheduleRecord
from ._items import TTL_ATTR, _epoch, _from_epoch

SCHEDULE_PREFIX = "SCHED#"
SCHEDULE_SK = "#SCHEDULE"
_TIMES = ("scheduled_at", "fired_at", "started_for", "claim_until")


def schedule_to_attrs(r: ScheduleRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {"name": r.name, "revision": r.revision, "outcome": r.outcome.value,
                             "duplicates": r.duplicates}
    for key in _TIMES:
        value = getattr(r, key)
        if value is not None:
            attrs[key] = format_ts(value)
    for key in ("execution_id", "started_id"):
        if getattr(r, key) is not None:
            attrs[key] = getattr(r, key)
    if r.error is not None:
        attrs["error"] = r.error.model_dump_json()
    if r.expires_at is not None:
        attrs[TTL_ATTR] = _epoch(r.expires_at)
    return attrs


def schedule_from_attrs(attrs: dict[str, Any]) -> ScheduleRecord:
    """The record, or CorruptStateError naming the schedule's item."""
    try:
        return ScheduleRecord(
            name=attrs["name"], revision=int(attrs["revision"]), outcome=FiringOutcome(attrs["outcome"]),
            duplicates=int(attrs.get("duplicates", 0)),
            **{k: parse_ts(attrs[k]) for k in _TIMES if k in attrs},
            **{k: attrs[k] for k in ("execution_id", "started_id") if k in attrs},
            error=ErrorInfo.model_validate_json(attrs["error"]) if "error" in attrs else None,
            expires_at=_from_epoch(attrs[TTL_ATTR]) if TTL_ATTR in attrs else None)
    except Exception as exc:  # noqa: BLE001 - any undecodable attribute
        raise CorruptStateError(f"{SCHEDULE_PREFIX}{attrs.get('name', '?')}", f"{type(exc).__name__}: {exc}") from None


def schedule_replaceable(stored: dict[str, Any], new: ScheduleRecord) -> bool:
    """The condition both stores apply: a record moves forward in (scheduled_at, revision) order only."""
    stored_at = stored.get("scheduled_at")
    if not isinstance(stored_at, str):
        return True
    return (stored_at, int(stored.get("revision", 0))) < (format_ts(new.scheduled_at), new.revision)
