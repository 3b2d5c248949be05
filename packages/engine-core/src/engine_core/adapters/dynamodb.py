"""DynamoDB adapter: the design's single table, exactly.

=========  ====================  =====================  ==========================================
item       PK                    SK                     GSI1 (sparse, KEYS_ONLY)
=========  ====================  =====================  ==========================================
execution  ``EXEC#<id>``         ``#META``              ``DUE#<shard>`` / ``<index_at>`` while live,
                                                        ``FIN#<shard>`` / ``<finalize_by>`` after
input      ``EXEC#<id>``         ``#INPUT``             -
operation  ``EXEC#<id>``         ``OP#<version>#<op>``  -
step       ``EXEC#<id>``         ``STEP#<nnn>#<name>``  -
=========  ====================  =====================  ==========================================

``#INPUT`` < ``#META`` < ``OP#...`` < ``STEP#...`` in key order, so one Query reads a whole execution.
Every execution item also carries ``GSI2PK = EXECS#<shard>`` / ``GSI2SK = <created_at>#<id>`` (the list index, sharded
like the due index, merged on read). Only live
executions carry due keys, so the sweeper's query cost follows due work, not table size.
The helper modules keep this one small: parallel and map steps' items (``_dynamo_branches.py``), operation
records and events (``_dynamo_records.py``), the two indexes' reads (``_dynamo_indexes.py``), housekeeping
(``_dynamo_housekeeping.py``), batched reads (``_dynamo_batch.py``) and one-item records
(``_dynamo_singletons.py``). Only ``engine_core.adapters`` imports boto3;
nothing here is re-exported from ``engine_core``. Every item is written with ``_to_item`` and read with
``_from_item`` (boto3's TypeSerializer), and every ClientError becomes an engine error in ``_translated``
(both in ``_dynamo_wire.py``).
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Mapping
from typing import Any

from ..clock import format_ts
from ..errors import (
    CorruptStateError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    StepSupersededError,
    TransitionConflictError,
)
from ..model import CorruptRecord, ErrorInfo, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, StepRecord
from ..ports import DuePage, HistoryPage, ListPage, Transition
from ..settings import EngineSettings, require_env
from ..sharding import shard_of
from ._items import (
    list_key,
    valid_list_key,
    RUN_ATTR,
    INPUT_ATTR,
    START_ATTRS,
    OP_PREFIX,
    STEP_PREFIX,
    TTL_ATTR,
    _epoch,
    execution_from_attrs,
    execution_to_attrs,
    start_attrs,
    step_from_attrs,
    record_sort_key,
    step_sort_key,
    EVENT_PREFIX,
    step_to_attrs,
    with_start_attrs,
)
from . import _dynamo_batch as _batch
from . import clients
from . import _dynamo_branches as _fanout_items
from . import _dynamo_housekeeping as _housekeeping
from . import _dynamo_indexes as _indexes
from . import _dynamo_records as _records
from . import _dynamo_singletons as _singletons
from ._dynamo_wire import (
    INPUT_SK,
    LIST_PK,
    META_SK,
    WRITE_TOKEN,
    _KEYS,
    _attr,
    _ConditionFailed,
    _decoded,
    _from_item,
    _pk,
    _sort_key,
    _to_item,
    _translated,
)



def store_from_env(env: Mapping[str, str], settings: EngineSettings, client_config: Any = None) -> DynamoStore:
    """``LOOM_STORE=dynamodb`` (the default): the table ``LOOM_TABLE_NAME``, on boto3's own endpoint configuration."""
    return DynamoStore(clients.client("dynamodb", client_config), table=require_env("LOOM_TABLE_NAME", env),
                       shards=settings.shards)


def _capacity_reporter(meters: list[Any]):
    """A botocore ``after-call`` handler: one request to each counter, with its ``ConsumedCapacity`` as read
    or write units by the operation (a refused conditional write reports none: a request only)."""
    def report(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if not meters:
            return
        consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        units = 0.0
        if consumed is not None:
            for one in consumed if isinstance(consumed, list) else (consumed,):
                units += float(one.get("CapacityUnits", 0.0))
        is_write = model.name in _WRITE_OPS
        for meter in meters:
            if is_write:
                meter.request(write_units=units)
            else:
                meter.request(read_units=units)
    return report


_TOTAL = {"ReturnConsumedCapacity": "TOTAL"}
_WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})


class DynamoStore:
    """State store on one DynamoDB table.

    Example:
        >>> store = DynamoStore(boto3.client("dynamodb"), table="loom-dev", shards=4)
    """

    ledger_reports = ("requests", "units")

    def __init__(self, client: Any, table: str, shards: int = 1, return_consumed_capacity: bool = False):
        self.client, self.table, self.shards = client, table, shards
        self._return_capacity = return_consumed_capacity
        self.ledger_meters: list[Any] = []
        """The cost ledger's counters (``engine_core.ledger``) this store's requests are reported to, with the
        units DynamoDB returns for each; while there is one, every request asks for them."""
        client.meta.events.register("after-call.dynamodb", _capacity_reporter(self.ledger_meters),
                                    unique_id=f"loom-ledger-{id(self)}")

    @property
    def _capacity(self) -> dict[str, str]:
        return _TOTAL if self._return_capacity or self.ledger_meters else {}

    # -- item shapes ----------------------------------------------------------------------------
    def _meta_attrs(self, e: Execution) -> dict[str, Any]:
        attrs = execution_to_attrs(e)
        shard = shard_of(e.execution_id, self.shards)
        attrs.update(PK=_pk(e.execution_id), SK=META_SK, GSI2PK=f"{LIST_PK}#{shard}",
                     GSI2SK=list_key(e.created_at, e.execution_id))
        if e.due_at is not None:
            attrs.update(GSI1PK=f"DUE#{shard}", GSI1SK=format_ts(e.due_at))
        elif e.finalize_by is not None:  # ended, housekeeping owed: the sweeper's second partition
            attrs.update(GSI1PK=f"FIN#{shard}", GSI1SK=format_ts(e.finalize_by))
        return attrs

    def _meta_item(self, e: Execution) -> dict[str, Any]:
        """The execution item as DynamoDB stores it (the bench seeds tables with it)."""
        return _to_item(self._meta_attrs(e))

    def _key(self, execution_id: str, sk: str) -> dict[str, Any]:
        return _to_item({"PK": _pk(execution_id), "SK": sk})

    def _decode_meta(self, execution_id: str, item: dict[str, Any]) -> Execution:
        attrs = _from_item(item)
        for key in _KEYS:
            attrs.pop(key, None)
        return execution_from_attrs(execution_id, attrs)

    # -- executions -----------------------------------------------------------------------------
    def create(self, execution: Execution, input_blob: str, replace_version: int | None = None) -> None:
        eid = execution.execution_id
        if replace_version is not None:
            # Only an expired execution at that version is replaced (a run that reached the same
            # version number since is not expired, so a late replacement cannot overwrite it).
            condition = "#version = :replace AND #ttl <= :created"
            names = {"#version": "version", "#ttl": TTL_ATTR}
            values = {":replace": replace_version, ":created": _epoch(execution.created_at)}
        else:
            condition, names, values = "attribute_not_exists(PK)", {}, {}
        meta = {
            "TableName": self.table, "Item": _to_item(self._meta_attrs(execution)),
            "ConditionExpression": condition, "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **({"ExpressionAttributeNames": names, "ExpressionAttributeValues": _to_item(values)} if values else {}),
        }
        stored_input = {"TableName": self.table, "Item": _to_item(
            {"PK": _pk(eid), "SK": INPUT_SK, INPUT_ATTR: input_blob, **start_attrs(execution)})}
        try:
            with _translated("TransactWriteItems"):
                self.client.transact_write_items(TransactItems=[{"Put": meta}, {"Put": stored_input}], **self._capacity)
        except _ConditionFailed as lost:
            if lost.item is None:
                raise ExecutionNotFoundError(eid) from None
            raise ExecutionExistsError(self._decode_meta(eid, lost.item)) from None

    def load(self, execution_id: str) -> Execution | None:
        with _translated("GetItem"):
            resp = self.client.get_item(
                TableName=self.table, Key=self._key(execution_id, META_SK), ConsistentRead=True, **self._capacity
            )
        item = resp.get("Item")
        return None if item is None else self._decode_meta(execution_id, item)

    def load_state(self, execution_id: str, since: int | None = None) -> ExecutionState | None:
        meta, input_blob, records, operations, events, started = None, "", [], [], [], {}
        joins: dict[int, Any] = {}
        if since is None:
            pages = self._query_execution(execution_id, None)
        else:  # the execution, its input (and events before 0.3) and its joins; then the history's tail
            pages = itertools.chain(self._query_range(execution_id, INPUT_SK, "JOIN#~"),
                                    self._query_range(execution_id, step_sort_key(since, ""), None))
        for page in pages:
            for item in page:
                sk = _sort_key(item)
                if sk == META_SK:
                    meta = self._decode_meta(execution_id, item)
                elif sk == INPUT_SK:
                    stored = _from_item(item)
                    input_blob = stored.get(INPUT_ATTR, "")
                    started = {k: v for k, v in stored.items() if k in START_ATTRS}
                elif sk.startswith(STEP_PREFIX):
                    records.append(self._decode_step(sk, item))
                elif sk.startswith(OP_PREFIX):
                    operations.append(_records.decode_operation(sk, item))
                elif sk.startswith(EVENT_PREFIX):
                    events.append(_records.decode_event(sk, item))
                elif sk.startswith("JOIN#") and (join := _fanout_items.decode_join(item)) is not None:
                    joins[join.step_index] = join
        if meta is None:
            return None
        return ExecutionState(with_start_attrs(meta, started), input_blob, records, operations, events, joins=joins,
                              records_from=since)

    def _query_range(self, execution_id: str, low: str, high: str | None):
        """Pages of the execution's items whose sort key lies in [low, high] (no upper end: None)."""
        condition = "PK = :pk AND " + ("SK BETWEEN :low AND :high" if high is not None else "SK >= :low")
        values = {":pk": _pk(execution_id), ":low": low, **({":high": high} if high is not None else {})}
        args: dict[str, Any] = {"TableName": self.table, "KeyConditionExpression": condition,
                                "ExpressionAttributeValues": _to_item(values), "ConsistentRead": True, **self._capacity}
        while True:
            with _translated("Query"):
                resp = self.client.query(**args)
            yield resp.get("Items", [])
            if "LastEvaluatedKey" not in resp:
                return
            args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def commit(self, transition: Transition) -> None:
        self._commit(transition, None)

    def commit_operation(self, transition: Transition, record: OperationRecord, legacy: bool = False) -> None:
        # One transaction (twice a commit's write units: operator actions are few)
        self._commit(transition, _records.operation_put(self, transition.new.execution_id, record, legacy))

    def _commit(self, transition: Transition, operation: dict[str, Any] | None) -> None:
        new = transition.new
        token = uuid.uuid4().hex
        # The advance is valid only from the exact (step, version) the caller read: a duplicate,
        # stale or zombie delivery finds a newer version and changes nothing.
        put = {"TableName": self.table, "Item": _to_item({**self._meta_attrs(new), WRITE_TOKEN: token}),
               "ConditionExpression": "attribute_exists(PK) AND #version = :version AND current_step = :step",
               "ExpressionAttributeNames": {"#version": "version"},
               "ExpressionAttributeValues": _to_item({":version": transition.expected_version,
                                                      ":step": transition.expected_step}),
               "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        try:
            if operation is None:  # sent again if an operator's transaction held the item (nothing applied)
                _records.resend_on_conflict(lambda: self.client.put_item(**put, **self._capacity), "PutItem")
            else:
                _records.transact(self, [put, operation])
        except _ConditionFailed as lost:
            if lost.item is None:
                raise ExecutionNotFoundError(new.execution_id) from None
            if _attr(lost.item, WRITE_TOKEN) == token:
                return  # our own write, applied before its response was lost and the call retried
            current = self._decode_meta(new.execution_id, lost.item)
            raise TransitionConflictError(
                new.execution_id, transition.expected_step, transition.expected_version, current
            ) from None

    def put_step(self, execution_id: str, record: StepRecord) -> None:
        sk = record_sort_key(record)
        token = uuid.uuid4().hex
        # First writer at a version of this run wins; a later version replaces; an older one never does.
        # A newer run (a token re-used after expiry) replaces what an older run left; a record from
        # before written versions (engine-core < 0.2) is replaced by any writer. (_items.step_replaceable)
        if record.run is None:
            condition = ("attribute_not_exists(PK) OR attribute_not_exists(written_version) OR "
                         "(attribute_not_exists(#run) AND written_version < :version)")
            values: dict[str, Any] = {":version": record.version}
        else:
            condition = ("attribute_not_exists(PK) OR attribute_not_exists(written_version) OR #run < :run OR "
                         "(attribute_not_exists(#run) AND finished_at < :run) OR "
                         "((#run = :run OR attribute_not_exists(#run)) AND written_version < :version)")
            values = {":version": record.version, ":run": record.run}
        try:
            with _translated("PutItem"):
                self.client.put_item(
                    TableName=self.table,
                    Item=_to_item({**step_to_attrs(record), "PK": _pk(execution_id), "SK": sk, WRITE_TOKEN: token}),
                    ConditionExpression=condition, ExpressionAttributeNames={"#run": RUN_ATTR},
                    ExpressionAttributeValues=_to_item(values),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **self._capacity,
                )
        except _ConditionFailed as lost:
            stored = _from_item(lost.item or {})
            if stored.get(WRITE_TOKEN) == token:
                return  # our own write, applied before its response was lost and the call retried
            stored_version = int(stored.get("written_version", 0))
            raise StepSupersededError(execution_id, record.step_index, record.version, stored_version) from None

    # -- housekeeping (``_dynamo_housekeeping.py``) ---------------------------------------------------
    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        return _housekeeping.fail_unreadable(self, execution_id, error, now, expires_at)

    def stamp_items(self, execution_id: str, expires_at: dt.datetime) -> int:
        return _housekeeping.stamp_items(self, execution_id, expires_at)

    def finalize(self, execution_id: str, version: int) -> None:
        _housekeeping.finalize(self, execution_id, version)

    # -- history --------------------------------------------------------------------------------
    def _query_execution(self, execution_id: str, prefix: str | None, projection: str | None = None):
        """Pages of the execution's items (all of them, or those whose sort key starts with ``prefix``)."""
        return self._query_partition(_pk(execution_id), prefix, projection)

    def _query_partition(self, pk: str, prefix: str | None, projection: str | None = None, limit: int | None = None):
        """Pages of one partition's items (all of them, or those whose sort key starts with ``prefix``)."""
        condition, values = "PK = :pk", {":pk": pk}
        if prefix:
            condition += " AND begins_with(SK, :prefix)"
            values[":prefix"] = prefix
        args: dict[str, Any] = {"TableName": self.table, "KeyConditionExpression": condition,
                                "ExpressionAttributeValues": _to_item(values), "ConsistentRead": True, **self._capacity}
        if projection:
            args["ProjectionExpression"] = projection
        if limit is not None:
            args["Limit"] = limit
        while True:
            with _translated("Query"):
                resp = self.client.query(**args)
            yield resp.get("Items", [])
            if "LastEvaluatedKey" not in resp:
                return
            args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    @staticmethod
    def _decode_step(sk: str, item: dict[str, Any]) -> StepRecord | CorruptRecord:
        return _decoded(sk, item, step_from_attrs)

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        return [self._decode_step(_sort_key(item), item)
                for page in self._query_execution(execution_id, STEP_PREFIX) for item in page]

    def history_page(self, execution_id: str, limit: int, after: str | None = None) -> HistoryPage:
        return self._page(_pk(execution_id), STEP_PREFIX, limit, after, self._decode_step)

    def _page(self, pk: str, prefix: str, limit: int, after: str | None, decode) -> HistoryPage:
        """One Query page of ``pk``'s items under ``prefix``: ``limit`` items, or DynamoDB's 1 MB."""
        args: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "Limit": limit,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :prefix)",
            "ExpressionAttributeValues": _to_item({":pk": pk, ":prefix": prefix}), **self._capacity,
        }
        if after is not None and not after.startswith(prefix):
            # Not a key of this listing (a token from another, or made up): DynamoDB refuses a start key outside
            # the key condition, so it is read as the memory and SQLite stores read it, as a position among keys.
            if after > prefix:
                return HistoryPage([], None, keys=[])
            after = None
        if after is not None:
            args["ExclusiveStartKey"] = _to_item({"PK": pk, "SK": after})
        with _translated("Query"):
            resp = self.client.query(**args)
        items = resp.get("Items", [])
        keys = [_sort_key(item) for item in items]
        more = "LastEvaluatedKey" in resp and items
        return HistoryPage([decode(k, item) for k, item in zip(keys, items)], keys[-1] if more else None, keys=keys)

    # -- operation records and events, each in its own partition (``_dynamo_records.py``) ---------------
    def put_operation(self, execution_id: str, record: OperationRecord, legacy: bool = False) -> None:
        _records.put_operation(self, execution_id, record, legacy)

    def operations(self, execution_id: str, legacy: bool = False) -> list[OperationRecord | CorruptRecord]:
        return _records.operations(self, execution_id, legacy)

    def operations_page(self, execution_id: str, limit: int, after: str | None = None,
                        legacy: bool = False) -> HistoryPage:
        return _records.operations_page(self, execution_id, limit, after, legacy)

    def events_page(self, execution_id: str, limit: int, after: str | None = None, legacy: bool = False) -> HistoryPage:
        return _records.events_page(self, execution_id, limit, after, legacy)

    def put_event(self, execution_id: str, record: EventRecord, legacy: bool = False) -> bool:
        return _records.put_event(self, execution_id, record, legacy)

    def list_events(self, execution_id: str, name: str | None = None, legacy: bool = False,
                    limit: int | None = None) -> list[EventRecord | CorruptRecord]:
        return _records.list_events(self, execution_id, name, legacy, limit)

    @staticmethod
    def valid_list_cursor(cursor: Any) -> bool:
        """A list index key the store made (``list_cursor``): creation time and id."""
        return valid_list_key(cursor)

    def list_cursor(self, entry: ListEntry) -> Any:
        """A ``query_list`` cursor that resumes right after ``entry``."""
        return list_key(entry.created_at, entry.execution_id)

    def load_statuses(self, execution_ids: list[str]) -> dict[str, str]:
        """BatchGetItem of the execution items' status (``_dynamo_batch``)."""
        return _batch.statuses(self, execution_ids)

    def load_versions(self, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
        """BatchGetItem of the execution items' workflow and pinned version (``_dynamo_batch``)."""
        return _batch.versions(self, execution_ids)

    def list_partitions(self) -> list[str]:
        """The list index's partitions: one per shard (an execution's is ``EXECS#<shard>``), and ``EXECS``,
        where executions written before the index was sharded stay until they are next written."""
        return [LIST_PK] + [f"{LIST_PK}#{shard}" for shard in range(self.shards)]

    # -- the list index and the due index (``_dynamo_indexes.py``) -------------------------------------
    def query_list(self, limit: int, cursor: Any | None = None, created_after: dt.datetime | None = None,
                   created_before: dt.datetime | None = None) -> ListPage:
        return _indexes.query_list(self, limit, cursor, created_after, created_before)

    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        return _indexes.query_index(self, "DUE", shard, now, limit, cursor)

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Ended executions whose housekeeping is overdue (GSI1PK = FIN#<shard>)."""
        return _indexes.query_index(self, "FIN", shard, now, limit, cursor)

    # -- parallel and map steps (``_dynamo_branches.py``) ---------------------------------------
    def put_join(self, execution_id: str, join: Any) -> bool:
        return _fanout_items.put_join(self, execution_id, join)

    def get_join(self, execution_id: str, step_index: int) -> Any | None:
        return _fanout_items.get_join(self, execution_id, step_index)

    def create_branch(self, execution_id: str, branch: Any) -> None:
        _fanout_items.create_branch(self, execution_id, branch)

    def get_branch(self, execution_id: str, step_index: int, branch: int) -> Any | None:
        return _fanout_items.get_branch(self, execution_id, step_index, branch)

    def update_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        _fanout_items.update_branch(self, execution_id, branch, expected_version)

    def complete_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        _fanout_items.complete_branch(self, execution_id, branch, expected_version)

    def branches(self, execution_id: str, step_index: int) -> list[Any]:
        return _fanout_items.branches(self, execution_id, step_index)

    def branches_page(self, execution_id: str, step_index: int, limit: int, after: int | None = None) -> HistoryPage:
        return _fanout_items.branches_page(self, execution_id, step_index, limit, after)

    # -- one-item records (``_dynamo_singletons.py``): schedules, the queue's backlog mark -------------------
    def get_schedule(self, name: str) -> Any | None:
        return _singletons.get_schedule(self, name)

    def put_schedule(self, record: Any) -> bool:
        return _singletons.put_schedule(self, record)

    def get_backlog_mark(self) -> Any | None:
        return _singletons.get_backlog_mark(self)

    def put_backlog_mark(self, mark: Any) -> bool:
        return _singletons.put_backlog_mark(self, mark)


__all__ = ["DynamoStore", "CorruptStateError"]
