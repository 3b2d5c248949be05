"""One contract, two adapters: the memory store and the DynamoDB store (on moto) behave the same."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from engine_core import (
    CorruptStateError,
    ErrorInfo,
    Execution,
    ExecutionExistsError,
    ExecutionNotFoundError,
    ExecutionState,
    Status,
    StepStatus,
    StepSupersededError,
    Timer,
    TransitionConflictError,
    transitions,
)
from engine_core.model import CorruptRecord, StepRecord
from engine_core.ports import Transition
from engine_core.sharding import shard_of
from engine_core.adapters.memory import MemoryStore

import sqlite_probes
from sqlite_probes import is_sqlite

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RETENTION = dt.timedelta(days=30)
INPUT = '{"a":1}'


def new_execution(n: int = 1, wake: dt.datetime | None = None, **changes) -> Execution:
    base = dict(
        execution_id=f"00000000-0000-4000-8000-{n:012d}", workflow="wf", status=Status.RUNNING, current_step=0,
        version=1, fingerprint="f" * 32, input_digest="d" * 64, created_at=T0,
        updated_at=T0, next_wake_at=wake or T0 + dt.timedelta(minutes=15), timer=Timer.LEASE,
    )
    base.update(changes)
    return Execution(**base)


def record(index: int, name: str, attempts: int = 1, status: StepStatus = StepStatus.SUCCEEDED, **changes) -> StepRecord:
    base = dict(step_index=index, name=name, status=status, attempts=attempts, started_at=T0, finished_at=T0,
                result_blob='{"r":%d}' % index if status is StepStatus.SUCCEEDED else None,
                error=None if status is StepStatus.SUCCEEDED else ErrorInfo(code="step_error", message="x"),
                expires_at=T0 + RETENTION)
    base.update(changes)
    return StepRecord(**base)


def advance(e: Execution, step_count: int = 3, **kw) -> Execution:
    return transitions.advanced(e, T0, step_count, RETENTION, lease_s=900, slack_s=0, **kw)


def claim(e: Execution, now: dt.datetime = T0) -> Execution:
    return transitions.claimed(e, now, now + dt.timedelta(seconds=63), None, 0)


def is_dynamo(store) -> bool:
    return not isinstance(store, MemoryStore) and not is_sqlite(store)


def corrupt_meta(store, execution_id: str, attr: str, value) -> None:
    if isinstance(store, MemoryStore):
        store.metas[execution_id][attr] = value
        return
    if is_sqlite(store):
        return sqlite_probes.set_attr(store, f"EXEC#{execution_id}", "#META", attr, value)
    from boto3.dynamodb.types import TypeSerializer

    store.client.update_item(
        TableName=store.table, Key={"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": "#META"}},
        UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": attr},
        ExpressionAttributeValues={":v": TypeSerializer().serialize(value)},
    )


def corrupt_step(store, execution_id: str, sort_key: str, attr: str, value) -> None:
    if isinstance(store, MemoryStore):
        store.steps[execution_id][sort_key][attr] = value
        return
    if is_sqlite(store):
        return sqlite_probes.set_attr(store, f"EXEC#{execution_id}", sort_key, attr, value)
    from boto3.dynamodb.types import TypeSerializer

    store.client.update_item(
        TableName=store.table, Key={"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": sort_key}},
        UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": attr},
        ExpressionAttributeValues={":v": TypeSerializer().serialize(value)},
    )


class CountingClient:
    """Wraps a boto3 client and counts the API calls made through it."""

    def __init__(self, client):
        self._client, self.calls = client, Counter()

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def calls_during(store, action) -> Counter:
    """The store operations (memory), DynamoDB API calls (DynamoDB) or SQLite queries and write transactions
    (SQLite) that ``action`` makes."""
    if is_sqlite(store):
        return sqlite_probes.calls_during(store, action)
    if isinstance(store, MemoryStore):
        before = Counter(store.calls)
        action()
        return Counter(store.calls) - before
    counting = CountingClient(store.client)
    store.client = counting
    try:
        action()
    finally:
        store.client = counting._client
    return counting.calls


# -- create / load / load_state ------------------------------------------------------------------------

def test_create_then_load_returns_the_same_execution(store):
    # given
    e = new_execution()
    # when
    store.create(e, INPUT)
    # then
    assert store.load(e.execution_id) == e


def test_load_when_absent_returns_none(store):
    assert store.load("00000000-0000-4000-8000-999999999999") is None
    assert store.load_state("00000000-0000-4000-8000-999999999999") is None


def test_create_when_id_exists_raises_with_the_existing_item(store):
    e = new_execution()
    store.create(e, INPUT)
    with pytest.raises(ExecutionExistsError) as info:
        store.create(e.model_copy(update={"input_digest": "x" * 64}), '{"b":2}')
    assert info.value.existing == e
    assert store.load_state(e.execution_id).input_blob == INPUT


def test_load_state_reads_execution_input_and_history_in_step_order_in_one_query(store):
    # given: records written out of order
    e = new_execution()
    store.create(e, INPUT)
    for i, name in [(2, "c"), (0, "a"), (1, "b")]:
        store.put_step(e.execution_id, record(i, name))
    # when
    holder = {}
    calls = calls_during(store, lambda: holder.update(state=store.load_state(e.execution_id)))
    # then
    state = holder["state"]
    assert isinstance(state, ExecutionState)
    assert state.execution == e and state.input_blob == INPUT
    assert [(r.step_index, r.name) for r in state.records] == [(0, "a"), (1, "b"), (2, "c")]
    assert state.records[1] == record(1, "b")
    if isinstance(store, MemoryStore):
        assert calls == Counter(load_state=1)
    else:  # one DynamoDB Query; one SQLite SELECT
        assert calls == Counter(query=1)


def test_create_with_replace_version_replaces_an_expired_execution_and_leaves_its_history_to_ttl(store):
    # given: an ended execution with history
    old = new_execution()
    store.create(old, INPUT)
    for i, name in enumerate("abc"):
        store.put_step(old.execution_id, record(i, name))
    ended = transitions.failed(old, T0, ErrorInfo(code="c", message="m"), RETENTION)
    store.commit(Transition(0, 1, ended))
    # when: the same id starts again over it
    fresh = new_execution(created_at=T0 + RETENTION, updated_at=T0 + RETENTION, input_digest="e" * 64)
    store.create(fresh, '{"new":true}', replace_version=ended.version)
    # then: the new run is there; the old run's items stay (with their TTL) and are older than it, which
    # is how the engine tells them apart (a delete would need BatchWriteItem rights nothing else needs)
    state = store.load_state(old.execution_id)
    assert state.execution == fresh and state.input_blob == '{"new":true}'
    assert all(r.finished_at < fresh.created_at for r in state.records)


def test_create_with_a_wrong_replace_version_leaves_the_existing_execution_and_history_alone(store):
    # given: the run that replaced the expired one is already under way
    e = new_execution()
    store.create(e, INPUT)
    store.put_step(e.execution_id, record(0, "a"))
    # when: a second, late replacement names the old version
    with pytest.raises(ExecutionExistsError) as info:
        store.create(new_execution(input_digest="e" * 64), '{"late":1}', replace_version=7)
    # then
    assert info.value.existing == e
    state = store.load_state(e.execution_id)
    assert state.execution == e and state.input_blob == INPUT
    assert [r.name for r in state.records] == ["a"]


# -- commit --------------------------------------------------------------------------------------------

def test_commit_when_version_matches_applies(store):
    e = new_execution()
    store.create(e, INPUT)
    new = advance(e)
    store.commit(Transition(0, 1, new))
    assert store.load(e.execution_id) == new
    assert new.version == 2 and new.current_step == 1


def test_commit_of_a_claim_stores_the_attempt_and_its_lease(store):
    e = new_execution()
    store.create(e, INPUT)
    deadline = T0 + dt.timedelta(seconds=50)
    claimed = transitions.claimed(e, T0, T0 + dt.timedelta(seconds=63), deadline, 0)
    store.commit(Transition(0, 1, claimed))
    loaded = store.load(e.execution_id)
    assert loaded == claimed and loaded.is_claimed
    assert (loaded.attempt, loaded.total_attempts, loaded.attempt_started_at, loaded.attempt_deadline) == (1, 1, T0, deadline)


def test_commit_when_version_stale_raises_conflict_with_current_item(store):
    # given: someone already advanced step 0
    e = new_execution()
    store.create(e, INPUT)
    first = advance(e)
    store.commit(Transition(0, 1, first))
    # when: a duplicate delivery tries the same advance
    with pytest.raises(TransitionConflictError) as info:
        store.commit(Transition(0, 1, advance(e)))
    # then: it is told who won, without another read, and nothing changed
    assert info.value.current == first
    assert info.value.already_advanced
    assert store.load(e.execution_id) == first


def test_commit_when_same_step_newer_version_is_a_conflict_not_a_duplicate(store):
    e = new_execution()
    store.create(e, INPUT)
    store.commit(Transition(0, 1, claim(e)))  # another delivery claimed the step
    with pytest.raises(TransitionConflictError) as info:
        store.commit(Transition(0, 1, advance(e)))
    assert not info.value.already_advanced and info.value.current.version == 2


def test_commit_when_step_differs_at_the_same_version_is_refused(store):
    e = new_execution()
    store.create(e, INPUT)
    with pytest.raises(TransitionConflictError):
        store.commit(Transition(1, 1, advance(e.model_copy(update={"current_step": 1}))))
    assert store.load(e.execution_id) == e


def test_commit_when_execution_missing_raises_not_found(store):
    e = new_execution()
    with pytest.raises(ExecutionNotFoundError):
        store.commit(Transition(0, 1, claim(e)))


def _cancel_record(version: int):
    from engine_core.model import OperationRecord

    return OperationRecord(op="cancel", by="ops", at=T0, version=version, reason="stop", expires_at=T0 + RETENTION)


@pytest.mark.parametrize("layout", [1, 2])
def test_commit_operation_writes_the_execution_and_the_operators_record_together(store, layout):
    # given: a live execution (layout 1 keeps its operations in its own partition)
    e = new_execution(layout=layout)
    store.create(e, INPUT)
    new = claim(e)
    # when
    store.commit_operation(Transition(0, 1, new), _cancel_record(new.version), legacy=layout == 1)
    # then: both written
    assert store.load(e.execution_id) == new
    ops = store.operations(e.execution_id, legacy=layout == 1)
    assert [(o.op, o.by, o.version, o.reason) for o in ops] == [("cancel", "ops", 2, "stop")]


def test_commit_operation_that_loses_its_condition_writes_neither(store):
    # given: another change came first
    e = new_execution(layout=2)
    store.create(e, INPUT)
    first = claim(e)
    store.commit(Transition(0, 1, first))
    # when: an operator's commit from the version it read
    with pytest.raises(TransitionConflictError) as info:
        store.commit_operation(Transition(0, 1, advance(e)), _cancel_record(2))
    # then: told who won, and no record of an action that did not apply
    assert info.value.current == first and store.load(e.execution_id) == first
    assert store.operations(e.execution_id) == []


def test_commit_operation_of_a_missing_execution_writes_nothing(store):
    e = new_execution(layout=2)
    with pytest.raises(ExecutionNotFoundError):
        store.commit_operation(Transition(0, 1, claim(e)), _cancel_record(2))
    assert store.operations(e.execution_id) == []


# -- put_step --------------------------------------------------------------------------------------------

def test_put_step_writes_once_per_version_and_a_later_version_replaces_it(store):
    e = new_execution()
    store.create(e, INPUT)
    failed = record(0, "a", attempts=1, status=StepStatus.FAILED, version=2)
    store.put_step(e.execution_id, failed)
    assert store.history(e.execution_id) == [failed]
    # a second copy of the same delivery (same version) is refused: the first writer won
    with pytest.raises(StepSupersededError):
        store.put_step(e.execution_id, record(0, "a", attempts=1, status=StepStatus.FAILED, version=2))
    ok = record(0, "a", attempts=2, version=4)
    store.put_step(e.execution_id, ok)
    assert store.history(e.execution_id) == [ok]


def test_put_step_from_a_writer_that_acted_on_an_older_version_is_refused(store):
    # given: attempt 2 (claimed at version 4) took the step over and wrote its record
    e = new_execution()
    store.create(e, INPUT)
    later = record(0, "a", attempts=2, version=4)
    store.put_step(e.execution_id, later)
    # when: the zombie attempt 1 (claimed at version 2) finishes
    with pytest.raises(StepSupersededError) as info:
        store.put_step(e.execution_id, record(0, "a", attempts=1, result_blob='{"zombie":1}', version=2))
    # then
    assert (info.value.version, info.value.stored_version) == (2, 4)
    assert store.history(e.execution_id) == [later]


# -- the due index ---------------------------------------------------------------------------------------

def test_query_due_finds_every_due_live_execution_across_shards_and_pages(store):
    # given: 12 due, 3 not yet due, 2 terminal
    due = [new_execution(n, wake=T0 - dt.timedelta(seconds=n)) for n in range(1, 13)]
    later = [new_execution(n, wake=T0 + dt.timedelta(hours=1)) for n in range(20, 23)]
    for e in due + later:
        store.create(e, INPUT)
    for n in (1, 2):
        e = store.load(due[n - 1].execution_id)
        store.commit(Transition(0, 1, transitions.failed(e, T0, ErrorInfo(code="c", message="m"), RETENTION)))
    # when: every shard, in pages of 2
    found = []
    for shard in range(4):
        cursor = None
        while True:
            page = store.query_due(shard, T0, limit=2, cursor=cursor)
            found += [(shard, ref.execution_id) for ref in page.items]
            cursor = page.cursor
            if cursor is None:
                break
    # then: exactly the 10 live, due ones, each in its own shard
    expected = {e.execution_id for e in due[2:]}
    assert {eid for _, eid in found} == expected
    assert len(found) == len(expected)
    assert all(shard == shard_of(eid, 4) for shard, eid in found)


def test_query_due_orders_by_wake_time_within_a_shard(store):
    for n in range(1, 9):
        store.create(new_execution(n, wake=T0 - dt.timedelta(minutes=n)), INPUT)
    for shard in range(4):
        page = store.query_due(shard, T0, limit=100)
        times = [ref.next_wake_at for ref in page.items]
        assert times == sorted(times)


def test_query_due_keys_on_index_at_not_on_the_lease(store):
    # given: a lease that runs out at T0, indexed 5 minutes later (the sticky index key)
    e = new_execution(wake=T0, index_at=T0 + dt.timedelta(minutes=5))
    store.create(e, INPUT)
    shard = shard_of(e.execution_id, 4)
    # then: not seen before its index key, seen from it on, and the ref carries the key
    assert not store.query_due(shard, T0 + dt.timedelta(minutes=4), 10).items
    [ref] = store.query_due(shard, T0 + dt.timedelta(minutes=5), 10).items
    assert (ref.execution_id, ref.next_wake_at) == (e.execution_id, T0 + dt.timedelta(minutes=5))


def test_a_chain_of_commits_within_the_slack_keeps_the_index_key(store):
    # given: slack 300 s; step commits every 10 s, each with a fresh 63 s lease
    e = new_execution(wake=T0 + dt.timedelta(seconds=63),
                      index_at=transitions.index_key(None, T0 + dt.timedelta(seconds=63), Timer.LEASE, 300))
    store.create(e, INPUT)
    keys = []
    for n in range(1, 6):
        now = T0 + dt.timedelta(seconds=10 * n)
        cur = store.load(e.execution_id)
        new = transitions.advanced(cur, now, 10, RETENTION, lease_s=63, slack_s=300,
                                   claim_expiry_at=now + dt.timedelta(seconds=63))
        store.commit(Transition(cur.current_step, cur.version, new))
        keys.append(store.load(e.execution_id).index_at)
    # then: one key for the whole chain, never before the current lease runs out
    assert len(set(keys)) == 1
    final = store.load(e.execution_id)
    assert final.index_at >= final.next_wake_at
    assert not store.query_due(shard_of(e.execution_id, 4), final.next_wake_at, 10).items


def test_terminal_executions_leave_the_due_index(store):
    e = new_execution(wake=T0 - dt.timedelta(seconds=1))
    store.create(e, INPUT)
    store.commit(Transition(0, 1, advance(e, step_count=1)))
    assert all(not store.query_due(s, T0 + dt.timedelta(days=1), 100).items for s in range(4))


# -- corrupt items -----------------------------------------------------------------------------------------

def test_load_when_item_is_corrupt_raises_and_fail_unreadable_ends_it(store):
    e = new_execution()
    store.create(e, INPUT)
    corrupt_meta(store, e.execution_id, "version", "not-a-number")
    with pytest.raises(CorruptStateError):
        store.load(e.execution_id)
    with pytest.raises(CorruptStateError):
        store.load_state(e.execution_id)
    assert store.fail_unreadable(e.execution_id, ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)
    # it left the due index, carries its TTL, and cannot be failed twice
    assert not store.query_due(shard_of(e.execution_id, 4), T0 + dt.timedelta(days=1), 10).items
    assert not store.query_unfinalized(shard_of(e.execution_id, 4), T0 + dt.timedelta(days=1), 10).items
    assert not store.fail_unreadable(e.execution_id, ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)


def test_fail_unreadable_on_an_ended_or_missing_execution_changes_nothing(store):
    e = new_execution()
    store.create(e, INPUT)
    done = advance(e, step_count=1, finalized=True)
    store.commit(Transition(0, 1, done))
    assert not store.fail_unreadable(e.execution_id, ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)
    assert store.load(e.execution_id) == done
    assert not store.fail_unreadable("00000000-0000-4000-8000-999999999999",
                                     ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)


def test_history_flags_a_corrupt_record_and_keeps_the_others(store):
    e = new_execution()
    store.create(e, INPUT)
    for i, name in enumerate(["a", "b", "c"]):
        store.put_step(e.execution_id, record(i, name))
    corrupt_step(store, e.execution_id, "STEP#001#b", "attempts", "many")
    for records in (store.history(e.execution_id), store.load_state(e.execution_id).records):
        assert [type(r) for r in records] == [StepRecord, CorruptRecord, StepRecord]
        assert records[1].sort_key == "STEP#001#b"
        assert [r.name for r in records if isinstance(r, StepRecord)] == ["a", "c"]


# -- housekeeping ------------------------------------------------------------------------------------------

def test_stamp_items_sets_the_ttl_on_every_history_item(store):
    e = new_execution()
    store.create(e, INPUT)
    for i, name in enumerate("ab"):
        store.put_step(e.execution_id, record(i, name, expires_at=T0 + dt.timedelta(days=1)))
    later = T0 + dt.timedelta(days=90, microseconds=5)
    store.stamp_items(e.execution_id, later)
    assert [r.expires_at for r in store.history(e.execution_id)] == [later.replace(microsecond=0)] * 2


def test_finalize_marks_the_execution_at_its_version_only(store):
    e = new_execution()
    store.create(e, INPUT)
    done = advance(e, step_count=1, finalize_grace_s=60)
    store.commit(Transition(0, 1, done))
    store.finalize(e.execution_id, done.version - 1)  # a stale finalize: no effect
    assert not store.load(e.execution_id).finalized
    store.finalize(e.execution_id, done.version)
    loaded = store.load(e.execution_id)
    assert loaded.finalized and loaded.finalize_by is None and loaded.version == done.version


def test_ended_executions_owing_housekeeping_are_found_until_finalized(store):
    # given: an execution ended by a worker that died before finalizing
    e = new_execution(wake=T0)
    store.create(e, INPUT)
    done = advance(e, step_count=1, finalize_grace_s=60)
    store.commit(Transition(0, 1, done))
    shard = shard_of(e.execution_id, 4)
    # then: not due work, but owed housekeeping once the grace period is over
    later = T0 + dt.timedelta(minutes=5)
    assert not store.query_due(shard, later, 10).items
    assert not store.query_unfinalized(shard, T0, 10).items
    assert [r.execution_id for r in store.query_unfinalized(shard, later, 10).items] == [e.execution_id]
    # when finalized, it leaves that index too
    store.finalize(e.execution_id, done.version)
    assert not store.query_unfinalized(shard, later, 10).items
    assert store.load(e.execution_id).finalize_by is None


def test_an_execution_ended_already_finalized_never_enters_the_housekeeping_index(store):
    e = new_execution(wake=T0)
    store.create(e, INPUT)
    store.commit(Transition(0, 1, advance(e, step_count=1, finalized=True)))
    shard = shard_of(e.execution_id, 4)
    assert not store.query_unfinalized(shard, T0 + dt.timedelta(days=1), 10).items
    assert not store.query_due(shard, T0 + dt.timedelta(days=1), 10).items


# -- DynamoDB only: a write whose response was lost ---------------------------------------------------------

class RetriedWrites:
    """A client whose chosen put_item calls apply and are then sent again, as botocore does when the
    response to a write that applied is lost: the second send fails its condition."""

    def __init__(self, client, when):
        self._client, self.when, self.replayed = client, when, 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_item(self, **kwargs):
        response = self._client.put_item(**kwargs)
        if self.when(kwargs):
            self.replayed += 1
            return self._client.put_item(**kwargs)  # raises ConditionalCheckFailedException
        return response


def _is_meta_commit(kwargs) -> bool:
    return kwargs["Item"]["SK"]["S"] == "#META" and "current_step" in kwargs.get("ConditionExpression", "")


def test_dynamo_commit_whose_response_was_lost_and_retried_counts_as_applied(dynamo_client_factory):
    store = dynamo_client_factory()
    e = new_execution()
    store.create(e, INPUT)
    store.client = RetriedWrites(store.client, _is_meta_commit)
    new = advance(e)
    # when: the write applies, its retry fails the condition against our own write
    store.commit(Transition(0, 1, new))
    # then: no conflict reported; the stored item is ours
    assert store.client.replayed == 1
    assert store.load(e.execution_id) == new


class HeldByATransaction:
    """A client whose first ``times`` calls of ``method`` are refused as DynamoDB refuses a write to an item a
    transaction holds (nothing applied): TransactionConflictException for a plain write, a cancelled
    transaction with a TransactionConflict reason for TransactWriteItems."""

    def __init__(self, client, method: str, times: int = 1):
        self._client, self.method, self.left, self.refused = client, method, times, 0

    def __getattr__(self, name):
        call = getattr(self._client, name)
        if name != self.method:
            return call

        def refusing(**kwargs):
            if self.left > 0:
                from botocore.exceptions import ClientError

                self.left -= 1
                self.refused += 1
                if name == "transact_write_items":
                    reasons = [{"Code": "TransactionConflict"}] + [{"Code": "None"}] * (len(kwargs["TransactItems"]) - 1)
                    raise ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "held"},
                                       "CancellationReasons": reasons}, name)
                raise ClientError({"Error": {"Code": "TransactionConflictException", "Message": "held"}}, name)
            return call(**kwargs)
        return refusing


@pytest.mark.parametrize("method", ["put_item", "transact_write_items"])
def test_dynamo_commit_refused_while_a_transaction_holds_the_item_is_sent_again(dynamo_client_factory, method):
    # given: a worker's commit (PutItem) or an operator's (TransactWriteItems) lands while another
    # writer's transaction holds the execution item
    from engine_core.model import OperationRecord

    store = dynamo_client_factory()
    e = new_execution(layout=2)
    store.create(e, INPUT)
    store.client = HeldByATransaction(store.client, method, times=2)
    new = claim(e)
    # when
    if method == "put_item":
        store.commit(Transition(0, 1, new))
    else:
        store.commit_operation(Transition(0, 1, new), OperationRecord(op="wake", by="me", at=T0, version=2))
    # then: sent again until it applied, not failed as a storage error
    assert store.client.refused == 2
    assert store.load(e.execution_id) == new


def test_dynamo_commit_lost_to_another_writer_is_still_a_conflict(dynamo_client_factory):
    store = dynamo_client_factory()
    e = new_execution()
    store.create(e, INPUT)
    store.commit(Transition(0, 1, claim(e)))  # another writer, another token
    with pytest.raises(TransitionConflictError):
        store.commit(Transition(0, 1, advance(e)))


def test_dynamo_step_record_whose_response_was_lost_and_retried_is_accepted(dynamo_client_factory):
    store = dynamo_client_factory()
    e = new_execution()
    store.create(e, INPUT)
    store.client = RetriedWrites(store.client, lambda kw: kw["Item"]["SK"]["S"].startswith("STEP#"))
    store.put_step(e.execution_id, record(0, "a"))  # same attempt twice: passes its condition
    assert store.client.replayed == 1 and store.history(e.execution_id) == [record(0, "a")]


# -- operator reads and records (issue: operate it at 3 a.m.) -------------------------------------------

def test_list_index_returns_executions_newest_first_in_pages_and_within_a_window(store):
    from engine_core.model import ListEntry

    made = [new_execution(n, created_at=T0 + dt.timedelta(minutes=n), updated_at=T0 + dt.timedelta(minutes=n))
            for n in range(1, 6)]
    for e in made:
        store.create(e, INPUT)
    ended = transitions.failed(made[0], T0 + dt.timedelta(hours=1), ErrorInfo(code="x", message="y"), RETENTION)
    store.commit(Transition(0, 1, ended))
    # newest first, two at a time, resuming from a cursor
    first = store.query_list(limit=2)
    assert [e.execution_id for e in first.entries] == [made[4].execution_id, made[3].execution_id]
    rest = store.query_list(limit=10, cursor=store.list_cursor(first.entries[-1]))
    assert [e.execution_id for e in rest.entries] == [e.execution_id for e in made[2::-1]]
    assert isinstance(rest.entries[-1], ListEntry) and rest.entries[-1].status == "FAILED"
    assert {e.status for e in rest.entries[:-1]} == {"LIVE"} and rest.entries[0].workflow == "wf"
    # a creation window
    window = store.query_list(limit=10, created_after=T0 + dt.timedelta(minutes=2),
                              created_before=T0 + dt.timedelta(minutes=3))
    assert [e.execution_id for e in window.entries] == [made[2].execution_id, made[1].execution_id]


def test_history_page_returns_steps_in_order_with_a_resumable_position(store):
    e = new_execution()
    store.create(e, INPUT)
    for i in range(5):
        store.put_step(e.execution_id, record(i, f"s{i}", version=2 + i))
    names, after = [], None
    while True:
        page = store.history_page(e.execution_id, 2, after)
        names += [r.name for r in page.records]
        after = page.after
        if after is None:
            break
    assert names == ["s0", "s1", "s2", "s3", "s4"]


def test_operations_are_kept_in_version_order_apart_from_what_a_delivery_reads(store):
    from engine_core.model import OperationRecord

    e = new_execution(layout=2)
    store.create(e, INPUT)
    store.put_step(e.execution_id, record(0, "a", version=2))
    store.put_operation(e.execution_id, OperationRecord(op="wake", by="me", at=T0, version=3, detail={"was": "sleep"}))
    store.put_operation(e.execution_id, OperationRecord(op="cancel", by="ops", at=T0, version=4, reason="stop"))
    ops = store.operations(e.execution_id)
    assert [(o.op, o.by, o.version) for o in ops] == [("wake", "me", 3), ("cancel", "ops", 4)]
    assert ops[0].detail == {"was": "sleep"} and ops[1].reason == "stop"
    first = store.operations_page(e.execution_id, 1)
    rest = store.operations_page(e.execution_id, 1, first.after)
    assert [o.op for o in first.records + rest.records] == ["wake", "cancel"] and rest.after is None
    state = store.load_state(e.execution_id)  # a delivery's one query: the history, not the operations
    assert [r.name for r in state.records] == ["a"] and state.operations == []
    assert [r.name for r in store.history(e.execution_id)] == ["a"]


def test_operations_and_events_of_an_execution_from_before_0_3_stay_beside_its_history(store):
    from engine_core.model import EventRecord, OperationRecord

    e = new_execution()  # layout 1
    store.create(e, INPUT)
    store.put_operation(e.execution_id, OperationRecord(op="wake", by="me", at=T0, version=3), legacy=True)
    store.put_event(e.execution_id, EventRecord(name="ok", event_id="1", data={}, sent_at=T0), legacy=True)
    state = store.load_state(e.execution_id)
    assert [o.op for o in state.operations] == ["wake"] and [ev.event_id for ev in state.events] == ["1"]
    assert [o.op for o in store.operations(e.execution_id, legacy=True)] == ["wake"]
    assert [ev.event_id for ev in store.list_events(e.execution_id, "ok", legacy=True)] == ["1"]


def test_events_are_read_bounded_and_paged_apart_from_what_a_delivery_reads(store):
    from engine_core.model import EventRecord

    e = new_execution(layout=2)
    store.create(e, INPUT)
    for i in range(5):
        store.put_event(e.execution_id, EventRecord(name="ok", event_id=f"e{i}", data={"i": i}, sent_at=T0))
    store.put_event(e.execution_id, EventRecord(name="other", event_id="x", data={}, sent_at=T0))
    assert [ev.event_id for ev in store.list_events(e.execution_id, "ok", limit=3)] == ["e0", "e1", "e2"]
    assert len(store.list_events(e.execution_id)) == 6
    pages, after = [], None
    while True:
        page = store.events_page(e.execution_id, 4, after)
        pages.append([ev.event_id for ev in page.records])
        if page.after is None:
            break
        after = page.after
    assert pages == [["e0", "e1", "e2", "e3"], ["e4", "x"]]
    assert store.load_state(e.execution_id).events == []


def test_history_and_branch_pages_stop_at_a_megabyte_whatever_their_limit(store):
    e = _with_fanout(store)
    big = '"' + "x" * 300_000 + '"'
    for i in range(5):
        store.put_step(e.execution_id, record(i, f"s{i}", result_blob=big))
        store.create_branch(e.execution_id, _branch(i, result_blob=big))
    first = store.history_page(e.execution_id, 100)
    assert 3 <= len(first.records) <= 4 and first.after is not None and first.keys[-1] == first.after
    rest = store.history_page(e.execution_id, 100, first.after)
    assert len(first.records) + len(rest.records) == 5
    branches = store.branches_page(e.execution_id, 1, 100)
    assert 3 <= len(branches.records) <= 4 and branches.after is not None


def test_list_with_a_cursor_below_its_window_is_an_empty_last_page(store):
    # given: a cursor from an unfiltered page, below a later window (a page token reused with created_after)
    made = [new_execution(n, created_at=T0 + dt.timedelta(minutes=n), updated_at=T0 + dt.timedelta(minutes=n))
            for n in range(1, 4)]
    for e in made:
        store.create(e, INPUT)
    oldest = store.query_list(limit=10).entries[-1]
    client = getattr(store, "client", None)
    if client is not None:  # DynamoDB refuses BETWEEN bounds that run backwards (moto answers nothing)
        query = client.query

        def strict(**args):
            values = args.get("ExpressionAttributeValues", {})
            if "BETWEEN" in args.get("KeyConditionExpression", "") and values[":low"]["S"] > values[":high"]["S"]:
                raise AssertionError(f"DynamoDB would refuse this Query (ValidationException): {args}")
            return query(**args)

        client.query = strict
    try:
        # when
        page = store.query_list(limit=10, cursor=store.list_cursor(oldest), created_after=T0 + dt.timedelta(minutes=2))
    finally:
        if client is not None:
            client.query = query
    # then
    assert (page.entries, page.cursor) == ([], None)


def test_a_history_page_after_a_key_of_another_listing_reads_it_as_a_position_among_the_keys(store):
    # given: three step records; positions that are no step record's key (a token of the operations
    # listing, or made up), below and above every step key
    e = new_execution()
    store.create(e, INPUT)
    for i in range(3):
        store.put_step(e.execution_id, record(i, f"s{i}", version=2 + i))
    client = getattr(store, "client", None)
    if client is not None:  # DynamoDB refuses a start key outside the key condition (moto answers rows)
        query = client.query

        def strict(**args):
            start = args.get("ExclusiveStartKey", {}).get("SK", {}).get("S")
            prefix = args.get("ExpressionAttributeValues", {}).get(":prefix", {}).get("S")
            if start is not None and prefix is not None and not start.startswith(prefix):
                raise AssertionError(f"DynamoDB would refuse this Query (ValidationException): {args}")
            return query(**args)

        client.query = strict
    try:
        # when
        below = [store.history_page(e.execution_id, 10, after) for after in ("A", "OP#2026")]
        above = store.history_page(e.execution_id, 10, "ZZZ")
    finally:
        if client is not None:
            client.query = query
    # then: below every key reads them all, above them none
    assert [[r.name for r in page.records] for page in below] == [["s0", "s1", "s2"]] * 2
    assert (above.records, above.after) == ([], None)


def test_list_cursors_the_store_makes_are_valid_and_others_are_not(store):
    import json

    e = new_execution()
    store.create(e, INPUT)
    (entry,) = store.query_list(limit=5).entries
    cursor = json.loads(json.dumps(store.list_cursor(entry)))  # as it comes back through a page token
    assert store.valid_list_cursor(cursor)
    for bad in ({}, [], ["a"], [1, 2], {"PK": "x"}, "text", None):
        assert not store.valid_list_cursor(bad)


# -- parallel and map steps: the join item and the branch items (issue 12) --------------------------------------

def _branch(b: int, version: int = 1, generation: int = 2, status: str = "PENDING", **changes):
    from engine_core.model import Branch, BranchStatus

    base = dict(step_index=1, branch=b, status=BranchStatus(status), version=version, generation=generation, updated_at=T0,
                next_wake_at=None if status in ("SUCCEEDED", "FAILED") else T0 + dt.timedelta(minutes=15),
                expires_at=T0 + RETENTION)
    base.update(changes)
    return Branch(**base)


def _join(generation: int = 2, total: int = 3, done: int = 0):
    from engine_core.model import Join

    return Join(step_index=1, total=total, done=done, generation=generation, max_concurrency=2, started_at=T0,
                expires_at=T0 + RETENTION)


def _with_fanout(store) -> Execution:
    e = new_execution()
    store.create(e, INPUT)
    assert store.put_join(e.execution_id, _join())
    return e


def test_branch_create_when_it_exists_is_refused_with_the_stored_branch(store):
    from engine_core.errors import BranchConflictError

    e = _with_fanout(store)
    store.create_branch(e.execution_id, _branch(0))
    with pytest.raises(BranchConflictError) as info:
        store.create_branch(e.execution_id, _branch(0, version=7))
    assert info.value.current == _branch(0)
    assert store.get_branch(e.execution_id, 1, 0) == _branch(0)
    assert store.get_branch(e.execution_id, 1, 1) is None


def test_update_branch_applies_at_its_version_only(store):
    from engine_core.errors import BranchConflictError

    e = _with_fanout(store)
    store.create_branch(e.execution_id, _branch(0))
    claimed = _branch(0, version=2, status="RUNNING", attempt=1, attempt_started_at=T0)
    store.update_branch(e.execution_id, claimed, 1)
    assert store.get_branch(e.execution_id, 1, 0) == claimed
    with pytest.raises(BranchConflictError) as info:  # a second claim from the same message
        store.update_branch(e.execution_id, _branch(0, version=2, status="RUNNING", attempt=1), 1)
    assert info.value.current == claimed
    with pytest.raises(BranchConflictError):
        store.update_branch(e.execution_id, _branch(5, version=2), 1)  # absent


def test_complete_branch_records_and_counts_once_and_a_second_completion_is_refused_and_not_counted(store):
    from engine_core.errors import BranchConflictError

    # given: a claimed branch
    e = _with_fanout(store)
    store.create_branch(e.execution_id, _branch(0))
    store.update_branch(e.execution_id, _branch(0, version=2, status="RUNNING", attempt=1), 1)
    done = _branch(0, version=3, status="SUCCEEDED", attempt=1, result_blob='{"r":1}', finished_at=T0)
    # when: it completes, then a second completion of the same claim arrives
    store.complete_branch(e.execution_id, done, 2)
    with pytest.raises(BranchConflictError):
        store.complete_branch(e.execution_id, done.model_copy(update={"result_blob": '{"r":2}'}), 2)
    # then: recorded once, counted once
    assert store.get_branch(e.execution_id, 1, 0) == done
    assert store.get_join(e.execution_id, 1).done == 1
    assert store.load_state(e.execution_id).joins[1].done == 1


def test_complete_branch_of_an_older_generation_is_refused_by_the_new_join_and_counts_nothing_until_adopted(store):
    from engine_core.errors import BranchConflictError

    e = _with_fanout(store)  # generation 2
    store.create_branch(e.execution_id, _branch(0, version=2, status="RUNNING", attempt=1))
    assert store.put_join(e.execution_id, _join(generation=5))  # a redrive began generation 5
    with pytest.raises(BranchConflictError):
        store.complete_branch(e.execution_id, _branch(0, version=3, status="SUCCEEDED", result_blob="1"), 2)
    assert store.get_branch(e.execution_id, 1, 0).status.value == "RUNNING"
    assert store.get_join(e.execution_id, 1).done == 0
    # and the attempt that still holds it completes into the new generation (the engine's adoption), counted once
    adopted = _branch(0, version=3, status="SUCCEEDED", result_blob="1").model_copy(update={"generation": 5})
    store.complete_branch(e.execution_id, adopted, 2)
    assert store.get_branch(e.execution_id, 1, 0) == adopted
    assert store.get_join(e.execution_id, 1).done == 1


def test_put_join_refuses_its_own_generation_again_and_replaces_an_older_one(store):
    e = _with_fanout(store)
    store.create_branch(e.execution_id, _branch(0, version=2, status="RUNNING"))
    store.complete_branch(e.execution_id, _branch(0, version=3, status="SUCCEEDED", result_blob="1"), 2)
    assert not store.put_join(e.execution_id, _join(done=0))  # a racing copy: the count it holds is kept
    assert store.get_join(e.execution_id, 1).done == 1
    assert store.put_join(e.execution_id, _join(generation=9, done=1))
    assert store.get_join(e.execution_id, 1) == _join(generation=9, done=1)


def test_put_join_of_an_older_generation_keeps_the_newer_fan_out(store):
    # given: a redrive began generation 9, and one of its branches completed
    e = _with_fanout(store)
    assert store.put_join(e.execution_id, _join(generation=9))
    # when: a delivery that read an older execution version starts its (stale) fan-out
    replaced = store.put_join(e.execution_id, _join(generation=4))
    # then: refused; the newer fan-out's join is kept as it was
    assert not replaced
    assert store.get_join(e.execution_id, 1) == _join(generation=9)


def test_branches_are_read_in_order_apart_from_the_execution_which_reads_only_its_joins(store):
    e = _with_fanout(store)
    for b in (2, 0, 11, 1):
        store.create_branch(e.execution_id, _branch(b))
    store.put_step(e.execution_id, record(0, "a"))
    assert [b.branch for b in store.branches(e.execution_id, 1)] == [0, 1, 2, 11]
    assert store.branches(e.execution_id, 0) == []
    state = store.load_state(e.execution_id)
    assert state.joins == {1: _join()}
    assert [r.name for r in state.records] == ["a"] and [r.name for r in store.history(e.execution_id)] == ["a"]


def test_dynamo_branch_completion_retries_a_transaction_conflict_and_counts_once(dynamo_client_factory):
    from botocore.exceptions import ClientError

    store = dynamo_client_factory()
    e = _with_fanout(store)
    store.create_branch(e.execution_id, _branch(0, version=2, status="RUNNING"))

    class Contended:
        def __init__(self, client):
            self._client, self.refused = client, 0

        def __getattr__(self, name):
            return getattr(self._client, name)

        def transact_write_items(self, **kwargs):
            if self.refused < 2:  # another branch's transaction held the join item
                self.refused += 1
                raise ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                                   "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}]},
                                  "TransactWriteItems")
            return self._client.transact_write_items(**kwargs)

    store.client = Contended(store.client)
    store.complete_branch(e.execution_id, _branch(0, version=3, status="SUCCEEDED", result_blob="1"), 2)
    assert store.client.refused == 2
    assert store.get_join(e.execution_id, 1).done == 1
    assert store.get_branch(e.execution_id, 1, 0).status.value == "SUCCEEDED"


# -- one contract for every store operation, the upgrade path included (issue 19, defect 7) --------------------

RUN_A = "2026-03-01T12:00:00.000000Z"
RUN_B = "2026-04-15T08:00:00.000000Z"
"""Two runs of one execution id (a token reused after the first run expired): B started after A."""


def raw_put(store, pk_suffix: str, sort_key: str, execution_id: str, attrs: dict) -> None:
    """Write an item exactly as an earlier engine-core left it (no validation, no condition)."""
    if isinstance(store, MemoryStore):
        table = {"STEP#": store.steps, "EVT#": store.events}[sort_key[:4] if sort_key.startswith("EVT#") else "STEP#"]
        table.setdefault(execution_id, {})[sort_key] = dict(attrs)
        return
    if is_sqlite(store):
        return sqlite_probes.raw_put(store, f"EXEC#{execution_id}{pk_suffix}", sort_key, attrs)
    from boto3.dynamodb.types import TypeSerializer

    ser = TypeSerializer()
    item = {"PK": f"EXEC#{execution_id}{pk_suffix}", "SK": sort_key, **attrs}
    store.client.put_item(TableName=store.table, Item={k: ser.serialize(v) for k, v in item.items()})


def test_put_step_replaces_a_record_written_before_versions_on_every_store(store):
    # given: engine-core before 0.2 wrote this record, with no written_version
    e = new_execution()
    store.create(e, INPUT)
    raw_put(store, "", "STEP#000#a", e.execution_id, {"step_index": 0, "name": "a", "status": "FAILED",
                                                       "attempts": 1, "is_final": False})
    # when: an attempt of today writes the step's record
    fresh = record(0, "a", attempts=2, version=3)
    store.put_step(e.execution_id, fresh)
    # then: it replaced the old one (no store refuses it forever)
    assert store.history(e.execution_id) == [fresh]


def test_put_step_and_put_event_of_a_missing_execution_write_on_every_store(store):
    from engine_core.model import EventRecord

    # A PutItem cannot see another item; no store pretends it can. The orphan is left to its TTL.
    eid = new_execution(77).execution_id
    store.put_step(eid, record(0, "a", version=2))
    assert store.put_event(eid, EventRecord(name="go", event_id="e-1", data={}, sent_at=T0))
    assert [r.name for r in store.history(eid)] == ["a"]
    assert [ev.event_id for ev in store.list_events(eid)] == ["e-1"]


def test_a_newer_run_replaces_the_history_record_an_older_run_left_whatever_its_version(store):
    # given: run A wrote step 0 at a high version; run B (the same id, restarted at version 1) writes it
    e = new_execution()
    store.create(e, INPUT)
    old = record(0, "a", version=9, run=RUN_A)
    store.put_step(e.execution_id, old)
    new = record(0, "a", version=2, run=RUN_B, finished_at=T0 + dt.timedelta(days=45))
    # when / then: B's record replaces A's; A's writer can never replace B's again
    store.put_step(e.execution_id, new)
    assert store.history(e.execution_id) == [new]
    with pytest.raises(StepSupersededError):
        store.put_step(e.execution_id, record(0, "a", version=10, run=RUN_A))
    assert store.history(e.execution_id) == [new]


def test_an_event_id_an_older_run_used_is_the_newer_runs_to_use_once(store):
    from engine_core.model import EventRecord

    e = new_execution()
    store.create(e, INPUT)
    sent_b = T0 + dt.timedelta(days=45)
    assert store.put_event(e.execution_id, EventRecord(name="ok", event_id="mail-1", data={"run": "A"}, sent_at=T0,
                                                       run=RUN_A))
    # when: run B sends the same id: it is B's first use (replacing A's item), and its second is a duplicate
    assert store.put_event(e.execution_id, EventRecord(name="ok", event_id="mail-1", data={"run": "B"}, sent_at=sent_b,
                                                       run=RUN_B))
    assert not store.put_event(e.execution_id, EventRecord(name="ok", event_id="mail-1", data={"run": "B2"},
                                                           sent_at=sent_b, run=RUN_B))
    # and A can no longer write over B's
    assert not store.put_event(e.execution_id, EventRecord(name="ok", event_id="mail-1", data={"run": "A2"},
                                                           sent_at=T0, run=RUN_A))
    assert [(ev.data, ev.run) for ev in store.list_events(e.execution_id)] == [({"run": "B"}, RUN_B)]


def test_a_newer_run_replaces_the_fan_out_items_an_older_run_left(store):
    from engine_core.errors import BranchConflictError

    e = new_execution()
    store.create(e, INPUT)
    assert store.put_join(e.execution_id, _join(generation=9).model_copy(update={"run": RUN_A}))
    store.create_branch(e.execution_id, _branch(0, generation=9, run=RUN_A))
    # when: run B fans out the same step at a lower generation
    later = T0 + dt.timedelta(days=45)
    join_b = _join(generation=2).model_copy(update={"run": RUN_B, "started_at": later})
    branch_b = _branch(0, generation=2, run=RUN_B, updated_at=later)
    assert store.put_join(e.execution_id, join_b)
    store.create_branch(e.execution_id, branch_b)
    # then: B's items replaced A's, and B's own are never replaced by a create again
    assert store.get_join(e.execution_id, 1) == join_b
    assert store.get_branch(e.execution_id, 1, 0) == branch_b
    with pytest.raises(BranchConflictError):
        store.create_branch(e.execution_id, _branch(0, generation=2, run=RUN_B, updated_at=later))
    assert not store.put_join(e.execution_id, _join(generation=11).model_copy(update={"run": RUN_A}))


def test_stamp_items_raises_the_ttl_of_every_item_but_the_execution_and_never_lowers_one(store):
    from engine_core.model import EventRecord, OperationRecord

    e = _with_fanout(store)
    store.put_step(e.execution_id, record(0, "a"))
    store.put_event(e.execution_id, EventRecord(name="ok", event_id="1", data={}, sent_at=T0, expires_at=T0))
    store.put_operation(e.execution_id, OperationRecord(op="wake", by="me", at=T0, version=2, expires_at=T0))
    store.create_branch(e.execution_id, _branch(0))
    far = T0 + dt.timedelta(days=400)
    store.stamp_items(e.execution_id, T0 + dt.timedelta(days=90))
    store.stamp_items(e.execution_id, far)
    store.stamp_items(e.execution_id, T0 + dt.timedelta(days=10))  # lower: changes nothing
    want = far.replace(microsecond=0)
    assert [r.expires_at for r in store.history(e.execution_id)] == [want]
    assert [ev.expires_at for ev in store.list_events(e.execution_id)] == [want]
    assert [op.expires_at for op in store.operations(e.execution_id)] == [want]
    assert store.get_join(e.execution_id, 1).expires_at == want
    assert store.get_branch(e.execution_id, 1, 0).expires_at == want
    assert store.load(e.execution_id).expires_at is None  # the live execution's own item carries none


def items_of(store, execution_id: str) -> dict[str, list[dict]]:
    """Every item the store holds for the execution, by kind: what each store really wrote."""
    if isinstance(store, MemoryStore):
        return store.item_kinds(execution_id)
    if is_sqlite(store):
        return sqlite_probes.items_of(store, execution_id)
    from boto3.dynamodb.types import TypeDeserializer

    de, out = TypeDeserializer(), {}
    scan: dict = {"TableName": store.table}
    while True:
        page = store.client.scan(**scan)
        for item in page["Items"]:
            attrs = {k: de.deserialize(v) for k, v in item.items()}
            pk, sk = attrs["PK"], attrs["SK"]
            if not pk.startswith(f"EXEC#{execution_id}"):
                continue
            suffix = pk[len(f"EXEC#{execution_id}"):]
            kind = ({"#E": "EVT", "#O": "OP"}.get(suffix, "BRANCH") if suffix else
                    sk if sk in ("#META", "#INPUT") else sk.split("#", 1)[0])
            out.setdefault(kind, []).append(attrs)
        if "LastEvaluatedKey" not in page:
            return out
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_every_item_type_an_execution_writes_carries_a_ttl_on_every_store(store, clock):
    # given: a run that writes every item type: input, history, events, operations, joins, branches
    from engine_core import Registry, parallel, sleep, step, wait_for_event, workflow
    from engine_core.testing import LocalRunner

    registry = Registry()

    def reserve(ctx):
        return {"r": 1}

    def release(ctx):
        return None

    @workflow("every_item", registry=registry)
    class EveryItem:
        steps = [step(reserve, compensate=release), parallel(reserve, reserve, name="both"), sleep(hours=1),
                 wait_for_event("ok", timeout=600)]

    runner = LocalRunner(registry, clock=clock, store=store)
    eid = runner.start("every_item", {})
    runner.send_event(eid, "ok", {}, event_id="early")
    runner.run_until(eid, "SLEEPING")
    runner.engine.operator.wake(eid, "ops")
    # then, while it lives: every kind of item, each with a TTL in the future (the execution's own has none)
    found = items_of(store, eid)
    assert set(found) == {"#META", "#INPUT", "STEP", "OP", "EVT", "JOIN", "BRANCH"}
    now = int(clock.now().timestamp())
    assert "expires_at" not in found["#META"][0]
    assert all(a["expires_at"] > now for kind, items in found.items() if kind != "#META" for a in items), found
    # and at the end: every one outlives the execution's retention
    e = runner.run_until_done(eid)
    ends = int(e.expires_at.timestamp())
    assert all(a["expires_at"] >= ends for items in items_of(store, eid).values() for a in items)


def test_dynamo_list_index_is_sharded_and_merged_newest_first_with_executions_from_before_sharding(dynamo_client_factory):
    from boto3.dynamodb.types import TypeSerializer

    store = dynamo_client_factory()  # 4 shards
    made = [new_execution(n, created_at=T0 + dt.timedelta(seconds=n)) for n in range(1, 13)]
    for e in made:
        store.create(e, INPUT)
    # an execution written before the index was sharded (GSI2PK = EXECS), never written since
    ser = TypeSerializer()
    old = {**store._meta_attrs(new_execution(99, created_at=T0 + dt.timedelta(seconds=6, microseconds=5))),
           "GSI2PK": "EXECS"}
    store.client.put_item(TableName=store.table, Item={k: ser.serialize(v) for k, v in old.items()})
    partitions = {i["GSI2PK"]["S"] for i in store.client.scan(TableName=store.table)["Items"] if "GSI2PK" in i}
    assert len(partitions) >= 3 and "EXECS" in partitions  # spread over the shards
    # when: paged three at a time
    seen, cursor = [], None
    while True:
        page = store.query_list(3, cursor)
        seen += [x.execution_id for x in page.entries]
        cursor = page.cursor
        if cursor is None:
            break
    # then: every execution once, newest first across every partition
    want = sorted([(e.created_at, e.execution_id) for e in made] +
                  [(T0 + dt.timedelta(seconds=6, microseconds=5), new_execution(99).execution_id)], reverse=True)
    assert seen == [eid for _, eid in want]


def test_load_statuses_reads_each_execution_items_status(store):
    live = new_execution(1)
    ended = new_execution(2)
    store.create(live, INPUT)
    store.create(ended, INPUT)
    store.commit(Transition(0, 1, transitions.failed(ended, T0, ErrorInfo(code="x", message="y"), RETENTION)))
    got = store.load_statuses([live.execution_id, ended.execution_id, new_execution(3).execution_id])
    assert got == {live.execution_id: "RUNNING", ended.execution_id: "FAILED"}


def test_load_state_since_a_checkpoint_reads_the_execution_its_input_joins_and_the_history_from_there(store):
    e = new_execution(layout=2)
    store.create(e, INPUT)
    assert store.put_join(e.execution_id, _join())
    for i in range(1003):
        store.put_step(e.execution_id, record(i, f"s{i}", version=2))
    state = store.load_state(e.execution_id, since=998)
    assert state.execution.execution_id == e.execution_id and state.input_blob == INPUT
    assert state.joins == {1: _join()} and state.records_from == 998
    # key order is step order past 999 too (STEP#999 < STEP#~001000)
    assert [r.step_index for r in state.records] == [998, 999, 1000, 1001, 1002]
    assert [r.step_index for r in store.load_state(e.execution_id).records] == list(range(1003))


def test_a_code_first_execution_keeps_its_position_description_and_its_records_their_undo_flag(store):
    # given: what a code-first execution writes (engine_core.durable): its current position on the item,
    # and on a step's record whether the step has a compensation
    from engine_core.code_step import CodeStep

    e = new_execution(60, code_step=CodeStep("signed.submit", "task", "signed", True, 30.0).encode())
    store.create(e, INPUT)
    store.put_step(e.execution_id, record(0, "charge", undo=True))
    store.put_step(e.execution_id, record(1, "ship"))

    # when
    state = store.load_state(e.execution_id)
    moved = transitions.advanced(state.execution, T0, 5, RETENTION, lease_s=60, slack_s=0)
    moved = moved.model_copy(update={"code_step": CodeStep("approved", "event", "approved").encode()})
    store.commit(Transition(e.current_step, e.version, moved))

    # then
    assert state.execution.code_position == CodeStep("signed.submit", "task", "signed", True, 30.0)
    assert [(r.name, r.undo) for r in state.records] == [("charge", True), ("ship", False)]
    assert store.load(e.execution_id).code_position == CodeStep("approved", "event", "approved")
