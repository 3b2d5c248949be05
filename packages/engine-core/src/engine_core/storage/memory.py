"""In-memory state store with the same conditions as the DynamoDB adapter.

It keeps flat attribute dicts (what DynamoDB would hold), not model objects, so encoding and
decoding run on both paths alike and tests can corrupt an item the way a disk or a bad deploy would.
Single-threaded by design: the simulation drives it from one thread.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from ..clock import format_ts, parse_ts
from ..errors import (
    ExecutionExistsError,
    ExecutionNotFoundError,
    StepBusyError,
    StepSettledError,
    TransitionConflictError,
)
from ..model import CorruptRecord, ErrorInfo, Execution, StepRecord, StepStatus
from ..ports import DuePage, DueRef, StepUpdate, Transition
from ..sharding import shard_of
from ._items import (
    TTL_ATTR,
    _epoch,
    execution_from_attrs,
    execution_to_attrs,
    step_from_attrs,
    step_sort_key,
    step_to_attrs,
)

_TERMINAL = ("COMPLETED", "FAILED")


class MemoryStore:
    def __init__(self, shards: int = 1):
        self.shards = shards
        self.metas: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, dict[str, dict[str, Any]]] = {}
        self.calls: dict[str, int] = {}

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    # -- executions ---------------------------------------------------------------------------
    def create(self, execution: Execution) -> None:
        self._count("create")
        existing = self.metas.get(execution.execution_id)
        if existing is not None:
            raise ExecutionExistsError(execution_from_attrs(execution.execution_id, copy.deepcopy(existing)))
        self.metas[execution.execution_id] = execution_to_attrs(execution)

    def load(self, execution_id: str) -> Execution | None:
        self._count("load")
        attrs = self.metas.get(execution_id)
        return None if attrs is None else execution_from_attrs(execution_id, copy.deepcopy(attrs))

    def commit(self, transition: Transition) -> None:
        self._count("commit")
        new = transition.new
        current = self.metas.get(new.execution_id)
        if current is None:
            raise ExecutionNotFoundError(new.execution_id)
        if current.get("version") != transition.expected_version or current.get("current_step") != transition.expected_step:
            raise TransitionConflictError(
                new.execution_id, transition.expected_step, transition.expected_version,
                execution_from_attrs(new.execution_id, copy.deepcopy(current)),
            )
        self.metas[new.execution_id] = execution_to_attrs(new)
        if transition.step is not None:
            self._settle_step(new.execution_id, transition.step)

    def _settle_step(self, execution_id: str, update: StepUpdate) -> None:
        key = step_sort_key(update.step_index, update.name)
        items = self.steps.setdefault(execution_id, {})
        item = items.get(key, {})
        settled = step_to_attrs(
            StepRecord(
                step_index=update.step_index, name=update.name, status=update.status,
                attempts=int(item.get("attempts", 0)) + (1 if update.started_at else 0),
                finished_at=update.finished_at, result_blob=update.result_blob, error=update.error,
                is_final=update.is_final,
            )
        )
        merged = {k: v for k, v in item.items() if k not in ("result",)}
        merged.update(settled)
        if update.started_at is not None:
            merged["started_at"] = format_ts(update.started_at)
        items[key] = merged

    def record_intent(
        self, execution_id: str, step_index: int, name: str, started_at: dt.datetime, stale_before: dt.datetime
    ) -> StepRecord:
        self._count("record_intent")
        key = step_sort_key(step_index, name)
        items = self.steps.setdefault(execution_id, {})
        old = items.get(key)
        if old is not None:
            status = old.get("status")
            retry_allowed = status == "FAILED" and not old.get("is_final", False)
            stale_running = status == "RUNNING" and old.get("started_at", "") < format_ts(stale_before)
            if not (retry_allowed or stale_running):
                record = step_from_attrs(key, copy.deepcopy(old))
                record = record if isinstance(record, StepRecord) else None
                if status == "RUNNING":
                    raise StepBusyError(execution_id, step_index, record)
                raise StepSettledError(execution_id, step_index, record)
        item = dict(old or {})
        item.update(step_index=step_index, name=name, status="RUNNING", started_at=format_ts(started_at),
                    attempts=int(item.get("attempts", 0)) + 1)
        item.pop("finished_at", None)
        items[key] = item
        record = step_from_attrs(key, copy.deepcopy(item))
        assert isinstance(record, StepRecord)
        return record

    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        self._count("fail_unreadable")
        attrs = self.metas.get(execution_id)
        if attrs is None or attrs.get("status") in _TERMINAL:
            return False
        for gone in ("next_wake_at", "timer"):
            attrs.pop(gone, None)
        attrs.update(status="FAILED", error=error.model_dump_json(), updated_at=format_ts(now),
                     **{TTL_ATTR: _epoch(expires_at)})
        return True

    def finalize(self, execution_id: str, version: int, expires_at: dt.datetime) -> None:
        self._count("finalize")
        for item in self.steps.get(execution_id, {}).values():
            item[TTL_ATTR] = _epoch(expires_at)
        attrs = self.metas.get(execution_id)
        if attrs is not None and attrs.get("version") == version:
            attrs["finalized"] = True
            attrs.pop("finalize_by", None)  # out of the housekeeping index (DynamoDB: REMOVE its GSI1 keys)

    # -- reads --------------------------------------------------------------------------------
    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        self._count("query_due")
        return self._query_index("next_wake_at", shard, now, limit, cursor)

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Terminal executions in ``shard`` whose housekeeping is overdue (GSI1PK = FIN#<shard>)."""
        self._count("query_unfinalized")
        return self._query_index("finalize_by", shard, now, limit, cursor)

    def _query_index(self, attr: str, shard: int, now: dt.datetime, limit: int, cursor: Any | None) -> DuePage:
        """One partition of the sparse index: items carrying ``attr`` at or before ``now``, oldest first."""
        bound = format_ts(now)
        due = sorted(
            (attrs[attr], eid)
            for eid, attrs in self.metas.items()
            if isinstance(attrs.get(attr), str)
            and attrs[attr] <= bound
            and shard_of(eid, self.shards) == shard
            and (cursor is None or (attrs[attr], eid) > cursor)
        )
        page = due[:limit]
        return DuePage(
            items=[DueRef(execution_id=eid, next_wake_at=parse_ts(ts)) for ts, eid in page],
            cursor=page[-1] if len(due) > limit and page else None,
            read_count=len(page),
        )

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        self._count("history")
        items = self.steps.get(execution_id, {})
        return [step_from_attrs(key, copy.deepcopy(items[key])) for key in sorted(items)]

    # -- test helpers ---------------------------------------------------------------------------
    def step_items(self, execution_id: str) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self.steps.get(execution_id, {}))

    def due_ids(self) -> set[str]:
        """Executions the due index holds (the GSI is sparse: only items with next_wake_at)."""
        return {eid for eid, attrs in self.metas.items() if "next_wake_at" in attrs}


__all__ = ["MemoryStore", "StepStatus"]
