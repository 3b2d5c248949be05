"""In-memory state store with the same conditions as the DynamoDB adapter.

It keeps flat attribute dicts (what DynamoDB would hold), not model objects, so encoding and
decoding run on both paths alike and tests can corrupt an item the way a disk or a bad deploy would.
Single-threaded by design: the simulation drives it from one thread.
"""

from __future__ import annotations

import bisect
import copy
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from ..clock import format_ts, parse_ts
from ..errors import BranchConflictError, ExecutionExistsError, ExecutionNotFoundError, StepSupersededError, TransitionConflictError
from ..model import CorruptRecord, ErrorInfo, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, Status, StepRecord, StepStatus
from ..ports import PAGE_BYTES, DuePage, DueRef, HistoryPage, ListPage, Transition
from ..settings import EngineSettings
from ..sharding import shard_of
from ..model import Branch, Join
from ..schedules.record import ScheduleRecord
from ._backlog_items import mark_from_attrs, mark_moves_forward, mark_to_attrs
from ._schedule_items import schedule_from_attrs, schedule_replaceable, schedule_to_attrs
from ._items import (
    LIVE,
    list_key,
    valid_list_key,
    older_run,
    same_run,
    step_replaceable,
    branch_from_attrs,
    branch_sort_key,
    branch_to_attrs,
    join_from_attrs,
    join_to_attrs,
    TTL_ATTR,
    _epoch,
    execution_from_attrs,
    execution_to_attrs,
    operation_from_attrs,
    operation_sort_key,
    operation_to_attrs,
    start_attrs,
    step_from_attrs,
    record_sort_key,
    step_sort_key,
    event_from_attrs,
    event_sort_key,
    event_to_attrs,
    step_to_attrs,
    with_start_attrs,
)

_UNFAILABLE = frozenset(s.value for s in (Status.COMPLETED, Status.FAILED, Status.COMPENSATION_FAILED))
"""The statuses ``fail_unreadable`` leaves alone (DynamoStore's condition on the same call)."""


def store_from_env(env: Mapping[str, str], settings: EngineSettings, client_config: Any = None) -> MemoryStore:
    """``LOOM_STORE=memory``: a store in this process (tests; its state goes with the process)."""
    return MemoryStore(shards=settings.shards)


class MemoryStore:
    ledger_reports = ("requests",)
    def __init__(self, shards: int = 1):
        self.shards = shards
        self.metas: dict[str, dict[str, Any]] = {}
        self.inputs: dict[str, str] = {}
        self.starts: dict[str, dict[str, Any]] = {}
        """What the ``#INPUT`` item holds beside the input (the token, who started it)."""
        self.steps: dict[str, dict[str, dict[str, Any]]] = {}
        self._step_keys: dict[str, list[str]] = {}
        """Each execution's history keys in order (a range read is a bisect, as DynamoDB's is a seek)."""
        self.ops: dict[str, dict[str, dict[str, Any]]] = {}
        self.events: dict[str, dict[str, dict[str, Any]]] = {}
        self.joins: dict[str, dict[int, dict[str, Any]]] = {}
        self.branch_items: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        """A fan-out step's branches, by (execution, step): their own partition on DynamoDB."""
        self.schedules: dict[str, dict[str, Any]] = {}
        self.backlog_mark: dict[str, Any] | None = None
        """Schedule records by name (``SCHED#<name>`` on DynamoDB)."""
        self.calls: dict[str, int] = {}
        self.ledger_meters: list[Any] = []
        """The cost ledger's counters of the engines and sweepers on this store (``engine_core.ledger``): each
        store call is reported to them as one request, with no units; only a counter open for a delivery counts."""

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        for meter in self.ledger_meters:
            meter.request()

    # -- executions ---------------------------------------------------------------------------
    def create(self, execution: Execution, input_blob: str, replace_version: int | None = None) -> None:
        self._count("create")
        eid = execution.execution_id
        existing = self.metas.get(eid)
        replaceable = (existing is not None and replace_version is not None and existing.get("version") == replace_version
                       and existing.get(TTL_ATTR, _epoch(execution.created_at) + 1) <= _epoch(execution.created_at))
        if existing is not None and not replaceable:
            raise ExecutionExistsError(execution_from_attrs(eid, copy.deepcopy(existing)))
        self.metas[eid] = execution_to_attrs(execution)
        self.inputs[eid] = input_blob
        self.starts[eid] = start_attrs(execution)

    def load(self, execution_id: str) -> Execution | None:
        self._count("load")
        attrs = self.metas.get(execution_id)
        return None if attrs is None else execution_from_attrs(execution_id, copy.deepcopy(attrs))

    def load_state(self, execution_id: str, since: int | None = None) -> ExecutionState | None:
        self._count("load_state")
        attrs = self.metas.get(execution_id)
        if attrs is None:
            return None
        execution = with_start_attrs(execution_from_attrs(execution_id, dict(attrs)), self.starts.get(execution_id, {}))
        # The execution's one query: operations and events are in it only for the layout before 0.3.
        legacy = execution.layout == 1
        if since is None:
            records = self._records(execution_id)
        else:  # only the history's tail is read (and decoded), as DynamoDB's second query reads only it
            keys, items = self._sorted_keys(execution_id), self.steps.get(execution_id, {})
            records = [step_from_attrs(key, dict(items[key]))
                       for key in keys[bisect.bisect_left(keys, step_sort_key(since, "")):]]
        return ExecutionState(execution, self.inputs.get(execution_id, ""), records,
                              self._operations(execution_id) if legacy and since is None else [],
                              self._events(execution_id) if legacy else [], joins=self._joins(execution_id),
                              records_from=since)

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

    def commit_operation(self, transition: Transition, record: OperationRecord, legacy: bool = False) -> None:
        self.commit(transition)  # raises, writing nothing, when the condition fails
        self.ops.setdefault(transition.new.execution_id, {})[operation_sort_key(record)] = operation_to_attrs(record)

    def put_step(self, execution_id: str, record: StepRecord) -> None:
        # Like a DynamoDB PutItem, it does not look at the execution item: a record of a missing
        # execution is written (and left to its TTL).
        self._count("put_step")
        key = record_sort_key(record)
        items = self.steps.setdefault(execution_id, {})
        old = items.get(key)
        if old is not None and not step_replaceable(old, record):
            raise StepSupersededError(execution_id, record.step_index, record.version, int(old["written_version"]))
        if old is None:
            keys = self._step_keys.get(execution_id)
            if keys is not None and (not keys or keys[-1] < key):
                keys.append(key)
            else:
                self._step_keys.pop(execution_id, None)  # sorted again on the next range read
        items[key] = step_to_attrs(record)

    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        self._count("fail_unreadable")
        attrs = self.metas.get(execution_id)
        if attrs is None or attrs.get("status") in _UNFAILABLE:
            return False
        for gone in ("next_wake_at", "timer", "index_at", "finalize_by"):
            attrs.pop(gone, None)
        attrs.update(status=Status.FAILED.value, error=error.model_dump_json(), updated_at=format_ts(now), finalized=True,
                     **{TTL_ATTR: _epoch(expires_at)})
        return True

    def stamp_items(self, execution_id: str, expires_at: dt.datetime) -> int:
        self._count("stamp_items")
        ttl, stamped = _epoch(expires_at), 0
        for item in self._items_of(execution_id):
            if not isinstance(item.get(TTL_ATTR), int) or item[TTL_ATTR] < ttl:
                item[TTL_ATTR] = ttl
                stamped += 1
        return stamped

    def _items_of(self, execution_id: str) -> list[dict[str, Any]]:
        """Every item of the execution but ``#META``: the input, history, operations, events, joins and branches."""
        items: list[dict[str, Any]] = []
        if execution_id in self.starts:
            items.append(self.starts[execution_id])
        for table in (self.steps, self.ops, self.events):
            items.extend(table.get(execution_id, {}).values())
        items.extend(self.joins.get(execution_id, {}).values())
        for (eid, _), branches in self.branch_items.items():
            if eid == execution_id:
                items.extend(branches.values())
        return items

    def reap_expired(self, now: dt.datetime) -> int:
        """Delete every item whose TTL has passed, as DynamoDB's TTL eventually does (tests and the
        simulation call it to let time delete things). Returns how many it deleted."""
        bound, deleted = _epoch(now), 0

        def gone(attrs: dict[str, Any]) -> bool:
            return isinstance(attrs.get(TTL_ATTR), int) and attrs[TTL_ATTR] <= bound

        for eid in [e for e, attrs in self.metas.items() if gone(attrs)]:
            del self.metas[eid]
            self.inputs.pop(eid, None)
            deleted += 1
        for eid in [e for e, attrs in self.starts.items() if gone(attrs)]:
            del self.starts[eid]
            self.inputs.pop(eid, None)
            deleted += 1
        for table in (self.steps, self.ops, self.events, self.joins, self.branch_items):
            for items in table.values():
                for key in [k for k, attrs in items.items() if gone(attrs)]:
                    del items[key]
                    deleted += 1
        for name in [n for n, attrs in self.schedules.items() if gone(attrs)]:
            del self.schedules[name]
            deleted += 1
        self._step_keys.clear()
        return deleted

    def item_kinds(self, execution_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every item the store holds for the execution, by kind (``#META``, ``#INPUT``, ``STEP``, ``OP``,
        ``EVT``, ``JOIN``, ``BRANCH``): what a test of TTLs enumerates."""
        out: dict[str, list[dict[str, Any]]] = {}
        if execution_id in self.metas:
            out["#META"] = [self.metas[execution_id]]
        if execution_id in self.starts:
            out["#INPUT"] = [self.starts[execution_id]]
        for name, table in (("STEP", self.steps), ("OP", self.ops), ("EVT", self.events), ("JOIN", self.joins)):
            if table.get(execution_id):
                out[name] = list(table[execution_id].values())
        branches = [b for (eid, _), items in self.branch_items.items() if eid == execution_id for b in items.values()]
        if branches:
            out["BRANCH"] = branches
        return out

    def finalize(self, execution_id: str, version: int) -> None:
        self._count("finalize")
        attrs = self.metas.get(execution_id)
        if attrs is not None and attrs.get("version") == version:
            attrs["finalized"] = True
            attrs.pop("finalize_by", None)  # out of the housekeeping index (DynamoDB: REMOVE its GSI1 keys)

    # -- reads --------------------------------------------------------------------------------
    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        self._count("query_due")
        return self._query_index(_due_key, shard, now, limit, cursor)

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Terminal executions in ``shard`` whose housekeeping is overdue (GSI1PK = FIN#<shard>)."""
        self._count("query_unfinalized")
        return self._query_index(lambda attrs: attrs.get("finalize_by"), shard, now, limit, cursor)

    def _query_index(self, key_of, shard: int, now: dt.datetime, limit: int, cursor: Any | None) -> DuePage:
        """One partition of the sparse index: items whose key is at or before ``now``, oldest first."""
        bound = format_ts(now)
        due = sorted(
            (key, eid)
            for eid, attrs in self.metas.items()
            if isinstance(key := key_of(attrs), str)
            and key <= bound
            and shard_of(eid, self.shards) == shard
            and (cursor is None or (key, eid) > cursor)
        )
        page = due[:limit]
        return DuePage(
            items=[DueRef(execution_id=eid, next_wake_at=parse_ts(ts)) for ts, eid in page],
            cursor=page[-1] if len(due) > limit and page else None,
            read_count=len(page),
        )

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        self._count("history")
        return self._records(execution_id)

    def history_page(self, execution_id: str, limit: int, after: str | None = None) -> HistoryPage:
        self._count("history_page")
        return _page(self.steps.get(execution_id, {}), limit, after, step_from_attrs)

    def put_operation(self, execution_id: str, record: OperationRecord, legacy: bool = False) -> None:
        self._count("put_operation")
        self.ops.setdefault(execution_id, {})[operation_sort_key(record)] = operation_to_attrs(record)

    def operations(self, execution_id: str, legacy: bool = False) -> list[OperationRecord | CorruptRecord]:
        self._count("operations")
        return self._operations(execution_id)

    def operations_page(self, execution_id: str, limit: int, after: str | None = None,
                        legacy: bool = False) -> HistoryPage:
        self._count("operations_page")
        return _page(self.ops.get(execution_id, {}), limit, after, operation_from_attrs)

    def events_page(self, execution_id: str, limit: int, after: str | None = None, legacy: bool = False) -> HistoryPage:
        self._count("events_page")
        return _page(self.events.get(execution_id, {}), limit, after, event_from_attrs)

    def put_event(self, execution_id: str, record: EventRecord, legacy: bool = False) -> bool:
        self._count("put_event")
        items = self.events.setdefault(execution_id, {})
        key = event_sort_key(record.name, record.event_id)
        if key in items and not older_run(items[key], record.run, "sent_at"):
            return False  # sent before to this run: applied once
        items[key] = event_to_attrs(record)
        return True

    def list_events(self, execution_id: str, name: str | None = None, legacy: bool = False,
                    limit: int | None = None) -> list[EventRecord | CorruptRecord]:
        self._count("list_events")
        prefix = event_sort_key(name, "") if name is not None else "EVT#"
        items = self.events.get(execution_id, {})
        keys = [k for k in sorted(items) if k.startswith(prefix)]
        return [event_from_attrs(k, dict(items[k])) for k in keys[:limit]]

    def _events(self, execution_id: str) -> list[EventRecord | CorruptRecord]:
        items = self.events.get(execution_id, {})
        return [event_from_attrs(k, dict(items[k])) for k in sorted(items)]

    def _operations(self, execution_id: str) -> list[OperationRecord | CorruptRecord]:
        items = self.ops.get(execution_id, {})
        return [operation_from_attrs(k, dict(items[k])) for k in sorted(items)]

    def query_list(self, limit: int, cursor: Any | None = None, created_after: dt.datetime | None = None,
                   created_before: dt.datetime | None = None) -> ListPage:
        self._count("query_list")
        low = "" if created_after is None else format_ts(created_after)
        high = "\uffff" if created_before is None else format_ts(created_before) + "#~"
        keys = sorted((k for eid, a in self.metas.items()
                       if low <= (k := list_key(parse_ts(a["created_at"]), eid)) <= high and (cursor is None or k < cursor)),
                      reverse=True)
        page = keys[:limit]
        entries = []
        for key in page:
            created, _, eid = key.partition("#")
            entries.append(ListEntry(execution_id=eid, workflow=self.metas[eid]["workflow"],
                                     status=self.metas[eid].get("list_status", LIVE), created_at=parse_ts(created)))
        return ListPage(entries, page[-1] if len(keys) > limit and page else None, len(page))

    def load_statuses(self, execution_ids: list[str]) -> dict[str, str]:
        self._count("load_statuses")
        return {eid: self.metas[eid]["status"] for eid in execution_ids if eid in self.metas}

    def load_versions(self, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
        self._count("load_versions")
        return {eid: (self.metas[eid]["workflow"], int(self.metas[eid].get("wf_version", 1)))
                for eid in execution_ids if eid in self.metas}

    @staticmethod
    def valid_list_cursor(cursor: Any) -> bool:
        return valid_list_key(cursor)

    def list_cursor(self, entry: ListEntry) -> Any:
        """A ``query_list`` cursor that resumes right after ``entry``."""
        return list_key(entry.created_at, entry.execution_id)

    def _sorted_keys(self, execution_id: str) -> list[str]:
        keys = self._step_keys.get(execution_id)
        if keys is None:
            keys = self._step_keys[execution_id] = sorted(self.steps.get(execution_id, {}))
        return keys

    def _records(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        items = self.steps.get(execution_id, {})
        return [step_from_attrs(key, dict(items[key])) for key in sorted(items)]  # flat: values are immutable

    # -- test helpers ---------------------------------------------------------------------------
    def due_ids(self) -> set[str]:
        """Executions the due index holds (the GSI is sparse: only live items carry a key)."""
        return {eid for eid, attrs in self.metas.items() if isinstance(_due_key(attrs), str)}


    # -- parallel and map steps ---------------------------------------------------------------
    def _joins(self, execution_id: str) -> dict[int, Join]:
        out = {}
        for index, attrs in self.joins.get(execution_id, {}).items():
            try:
                out[index] = join_from_attrs(dict(attrs))
            except Exception:  # unreadable: the fan-out begins again (a new generation keeps what succeeded)
                continue
        return out

    def put_join(self, execution_id: str, join: Join) -> bool:
        self._count("put_join")
        joins = self.joins.setdefault(execution_id, {})
        stored = joins.get(join.step_index)
        if stored is not None and not older_run(stored, join.run, "started_at"):
            # Of this run: the same generation (it may count completions already) or a newer fan-out's
            # (this writer read an older execution) is kept. A newer run's is never replaced.
            generation = stored.get("generation")
            if not same_run(stored, join.run) or (isinstance(generation, int) and generation >= join.generation):
                return False
        joins[join.step_index] = join_to_attrs(join)
        return True

    def get_join(self, execution_id: str, step_index: int) -> Join | None:
        self._count("get_join")
        return self._joins(execution_id).get(step_index)

    def _branch(self, execution_id: str, step_index: int, branch: int) -> Branch | CorruptRecord | None:
        attrs = self.branch_items.get((execution_id, step_index), {}).get(branch)
        return None if attrs is None else branch_from_attrs(branch_sort_key(branch), dict(attrs))

    def create_branch(self, execution_id: str, branch: Branch) -> None:
        self._count("create_branch")
        items = self.branch_items.setdefault((execution_id, branch.step_index), {})
        if branch.branch in items and not older_run(items[branch.branch], branch.run, "updated_at"):
            raise BranchConflictError(execution_id, branch.step_index, branch.branch, None,
                                      self._branch(execution_id, branch.step_index, branch.branch))
        items[branch.branch] = branch_to_attrs(branch)

    def get_branch(self, execution_id: str, step_index: int, branch: int) -> Branch | CorruptRecord | None:
        self._count("get_branch")
        return self._branch(execution_id, step_index, branch)

    def _check_branch(self, execution_id: str, branch: Branch, expected_version: int) -> dict[int, dict[str, Any]]:
        items = self.branch_items.get((execution_id, branch.step_index), {})
        stored = items.get(branch.branch)
        if stored is None or stored.get("version") != expected_version:
            raise BranchConflictError(execution_id, branch.step_index, branch.branch, expected_version,
                                      self._branch(execution_id, branch.step_index, branch.branch))
        return items

    def update_branch(self, execution_id: str, branch: Branch, expected_version: int) -> None:
        self._count("update_branch")
        self._check_branch(execution_id, branch, expected_version)[branch.branch] = branch_to_attrs(branch)

    def complete_branch(self, execution_id: str, branch: Branch, expected_version: int) -> None:
        self._count("complete_branch")
        items = self._check_branch(execution_id, branch, expected_version)
        join = self.joins.get(execution_id, {}).get(branch.step_index)
        if join is None or join.get("generation") != branch.generation or not same_run(join, branch.run):
            raise BranchConflictError(execution_id, branch.step_index, branch.branch, expected_version,
                                      self._branch(execution_id, branch.step_index, branch.branch))
        items[branch.branch] = branch_to_attrs(branch)
        join["done"] = join.get("done", 0) + 1

    def branches(self, execution_id: str, step_index: int) -> list[Branch | CorruptRecord]:
        self._count("branches")
        items = self.branch_items.get((execution_id, step_index), {})
        return [branch_from_attrs(branch_sort_key(b), dict(items[b])) for b in sorted(items)]

    def branches_page(self, execution_id: str, step_index: int, limit: int, after: int | None = None) -> HistoryPage:
        self._count("branches_page")
        items = self.branch_items.get((execution_id, step_index), {})
        keyed = {branch_sort_key(b): attrs for b, attrs in items.items()}
        return _page(keyed, limit, None if after is None else branch_sort_key(after), branch_from_attrs)

    # -- schedules -------------------------------------------------------------------------------
    def get_schedule(self, name: str) -> ScheduleRecord | None:
        self._count("get_schedule")
        attrs = self.schedules.get(name)
        return None if attrs is None else schedule_from_attrs(dict(attrs))

    def put_schedule(self, record: ScheduleRecord) -> bool:
        self._count("put_schedule")
        stored = self.schedules.get(record.name)
        if stored is not None and not schedule_replaceable(stored, record):
            return False
        self.schedules[record.name] = schedule_to_attrs(record)
        return True

    # -- the queue's backlog mark ------------------------------------------------------------------
    def get_backlog_mark(self) -> Any | None:
        self._count("get_backlog_mark")
        return None if self.backlog_mark is None else mark_from_attrs(dict(self.backlog_mark))

    def put_backlog_mark(self, mark: Any) -> bool:
        self._count("put_backlog_mark")
        if not mark_moves_forward(self.backlog_mark, mark):
            return False
        self.backlog_mark = mark_to_attrs(mark)
        return True


def _page(items: dict[str, dict[str, Any]], limit: int, after: str | None, decode) -> HistoryPage:
    """A Query page as DynamoDB returns one: items after ``after`` in key order, up to ``limit`` and up to
    1 MB of them (it stops after the item that crosses the megabyte)."""
    keys, size, page = [k for k in sorted(items) if after is None or k > after], 0, []
    for k in keys:
        if len(page) == limit or size >= PAGE_BYTES:
            break
        page.append(k)
        size += len(json.dumps(items[k], default=str)) + len(k)
    more = len(page) < len(keys)
    return HistoryPage([decode(k, dict(items[k])) for k in page], page[-1] if more and page else None, keys=page)


def _due_key(attrs: dict[str, Any]) -> str | None:
    return attrs.get("index_at") or attrs.get("next_wake_at")


__all__ = ["MemoryStore", "StepStatus"]
