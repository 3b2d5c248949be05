"""One contract, two adapters: the memory store and the DynamoDB store (on moto) behave the same."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import (
    ErrorInfo,
    Execution,
    ExecutionExistsError,
    ExecutionNotFoundError,
    Status,
    StepBusyError,
    StepSettledError,
    StepStatus,
    Timer,
    TransitionConflictError,
)
from engine_core import transitions
from engine_core.model import CorruptRecord, StepRecord
from engine_core.ports import StepUpdate, Transition
from engine_core.sharding import shard_of
from engine_core.storage.memory import MemoryStore

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RETENTION = dt.timedelta(days=30)


def new_execution(n: int = 1, wake: dt.datetime | None = None, **changes) -> Execution:
    base = dict(
        execution_id=f"00000000-0000-4000-8000-{n:012d}", workflow="wf", status=Status.RUNNING, current_step=0,
        version=1, context_blob='{"a":1}', fingerprint="f" * 32, input_digest="d" * 64, created_at=T0,
        updated_at=T0, next_wake_at=wake or T0 + dt.timedelta(minutes=15), timer=Timer.LEASE,
    )
    base.update(changes)
    return Execution(**base)


def corrupt_meta(store, execution_id: str, attr: str, value) -> None:
    if isinstance(store, MemoryStore):
        store.metas[execution_id][attr] = value
        return
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
    from boto3.dynamodb.types import TypeSerializer

    store.client.update_item(
        TableName=store.table, Key={"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": sort_key}},
        UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": attr},
        ExpressionAttributeValues={":v": TypeSerializer().serialize(value)},
    )


def test_create_then_load_returns_the_same_execution(store):
    # given
    e = new_execution()
    # when
    store.create(e)
    # then
    assert store.load(e.execution_id) == e


def test_load_when_absent_returns_none(store):
    assert store.load("00000000-0000-4000-8000-999999999999") is None


def test_create_when_id_exists_raises_with_the_existing_item(store):
    e = new_execution()
    store.create(e)
    with pytest.raises(ExecutionExistsError) as info:
        store.create(e.model_copy(update={"input_digest": "x" * 64}))
    assert info.value.existing == e


def test_commit_when_version_matches_applies(store):
    e = new_execution()
    store.create(e)
    new = transitions.advanced(e, '{"a":2}', T0, 900, step_count=3, retention=RETENTION)
    store.commit(Transition(0, 1, new))
    assert store.load(e.execution_id) == new
    assert new.version == 2 and new.current_step == 1


def test_commit_when_version_stale_raises_conflict_with_current_item(store):
    # given: someone already advanced step 0
    e = new_execution()
    store.create(e)
    first = transitions.advanced(e, "{}", T0, 900, step_count=3, retention=RETENTION)
    store.commit(Transition(0, 1, first))
    # when: a duplicate delivery tries the same advance
    with pytest.raises(TransitionConflictError) as info:
        store.commit(Transition(0, 1, transitions.advanced(e, "{}", T0, 900, 3, RETENTION)))
    # then: it is told who won, without another read, and nothing changed
    assert info.value.current == first
    assert info.value.already_advanced
    assert store.load(e.execution_id) == first


def test_commit_when_same_step_newer_version_is_a_conflict_not_a_duplicate(store):
    e = new_execution()
    store.create(e)
    store.commit(Transition(0, 1, transitions.claimed(e, T0, 900)))  # the sweeper re-drove it
    with pytest.raises(TransitionConflictError) as info:
        store.commit(Transition(0, 1, transitions.advanced(e, "{}", T0, 900, 3, RETENTION)))
    assert not info.value.already_advanced


def test_commit_when_execution_missing_raises_not_found(store):
    e = new_execution()
    with pytest.raises(ExecutionNotFoundError):
        store.commit(Transition(0, 1, transitions.claimed(e, T0, 900)))


def test_commit_with_step_update_settles_the_record_atomically(store):
    e = new_execution()
    store.create(e)
    store.record_intent(e.execution_id, 0, "reserve", T0, T0 - dt.timedelta(minutes=1))
    new = transitions.advanced(e, "{}", T0, 900, 3, RETENTION)
    store.commit(Transition(0, 1, new, StepUpdate(0, "reserve", StepStatus.SUCCEEDED, T0, result_blob='{"r":1}')))
    [record] = store.history(e.execution_id)
    assert isinstance(record, StepRecord)
    assert (record.status, record.attempts, record.result_blob, record.started_at) == (StepStatus.SUCCEEDED, 1, '{"r":1}', T0)


def test_commit_when_condition_fails_leaves_the_step_record_untouched(store):
    e = new_execution()
    store.create(e)
    store.record_intent(e.execution_id, 0, "reserve", T0, T0)
    with pytest.raises(TransitionConflictError):
        store.commit(Transition(0, 7, transitions.advanced(e, "{}", T0, 900, 3, RETENTION),
                                StepUpdate(0, "reserve", StepStatus.SUCCEEDED, T0, result_blob="{}")))
    [record] = store.history(e.execution_id)
    assert record.status is StepStatus.RUNNING


def test_record_intent_counts_attempts_and_refuses_concurrent_and_settled(store):
    e = new_execution()
    store.create(e)
    early = T0 - dt.timedelta(minutes=5)
    # first attempt
    assert store.record_intent(e.execution_id, 0, "s", T0, early).attempts == 1
    # a duplicate while the first attempt is within its timeout: refused, not counted
    with pytest.raises(StepBusyError):
        store.record_intent(e.execution_id, 0, "s", T0 + dt.timedelta(seconds=5), early)
    # after the first attempt's timeout: a takeover, attempt 2
    later = T0 + dt.timedelta(minutes=10)
    assert store.record_intent(e.execution_id, 0, "s", later, later - dt.timedelta(minutes=1)).attempts == 2
    # a non-final failure allows attempt 3
    store.commit(Transition(0, 1, transitions.retry_scheduled(e, later, later), StepUpdate(
        0, "s", StepStatus.FAILED, later, error=ErrorInfo(code="step_error", message="x"), is_final=False)))
    assert store.record_intent(e.execution_id, 0, "s", later, later).attempts == 3
    # once settled, no more attempts
    e2 = store.load(e.execution_id)
    store.commit(Transition(0, e2.version, transitions.advanced(e2, "{}", later, 900, 3, RETENTION),
                            StepUpdate(0, "s", StepStatus.SUCCEEDED, later, result_blob="{}")))
    with pytest.raises(StepSettledError):
        store.record_intent(e.execution_id, 0, "s", later + dt.timedelta(hours=1), later + dt.timedelta(hours=1))


def test_record_intent_after_final_failure_is_refused(store):
    e = new_execution()
    store.create(e)
    store.record_intent(e.execution_id, 0, "s", T0, T0)
    store.commit(Transition(0, 1, transitions.failed(e, T0, ErrorInfo(code="c", message="m"), RETENTION),
                            StepUpdate(0, "s", StepStatus.FAILED, T0, error=ErrorInfo(code="c", message="m"), is_final=True)))
    with pytest.raises(StepSettledError):
        store.record_intent(e.execution_id, 0, "s", T0 + dt.timedelta(hours=1), T0 + dt.timedelta(hours=1))


def test_query_due_finds_every_due_live_execution_across_shards_and_pages(store):
    # given: 12 due, 3 not yet due, 2 terminal
    due = [new_execution(n, wake=T0 - dt.timedelta(seconds=n)) for n in range(1, 13)]
    later = [new_execution(n, wake=T0 + dt.timedelta(hours=1)) for n in range(20, 23)]
    for e in due + later:
        store.create(e)
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
        store.create(new_execution(n, wake=T0 - dt.timedelta(minutes=n)))
    for shard in range(4):
        page = store.query_due(shard, T0, limit=100)
        times = [ref.next_wake_at for ref in page.items]
        assert times == sorted(times)


def test_terminal_executions_leave_the_due_index(store):
    e = new_execution(wake=T0 - dt.timedelta(seconds=1))
    store.create(e)
    store.commit(Transition(0, 1, transitions.advanced(e, "{}", T0, 900, step_count=1, retention=RETENTION)))
    assert all(not store.query_due(s, T0 + dt.timedelta(days=1), 100).items for s in range(4))


def test_load_when_item_is_corrupt_raises_and_fail_unreadable_ends_it(store):
    from engine_core import CorruptStateError

    e = new_execution()
    store.create(e)
    corrupt_meta(store, e.execution_id, "version", "not-a-number")
    with pytest.raises(CorruptStateError):
        store.load(e.execution_id)
    assert store.fail_unreadable(e.execution_id, ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)
    # it left the due index and cannot be failed twice
    assert not store.query_due(shard_of(e.execution_id, 4), T0 + dt.timedelta(days=1), 10).items
    assert not store.fail_unreadable(e.execution_id, ErrorInfo(code="corrupt_state", message="m"), T0, T0 + RETENTION)


def test_history_flags_a_corrupt_record_and_keeps_the_others(store):
    e = new_execution()
    store.create(e)
    for i, name in enumerate(["a", "b", "c"]):
        store.record_intent(e.execution_id, i, name, T0, T0)
    corrupt_step(store, e.execution_id, "STEP#001#b", "attempts", "many")
    records = store.history(e.execution_id)
    assert [type(r) for r in records] == [StepRecord, CorruptRecord, StepRecord]
    assert records[1].sort_key == "STEP#001#b"
    assert [r.name for r in records if isinstance(r, StepRecord)] == ["a", "c"]


def test_finalize_stamps_retention_on_history_and_marks_the_execution(store):
    e = new_execution()
    store.create(e)
    store.record_intent(e.execution_id, 0, "a", T0, T0)
    done = transitions.advanced(e, "{}", T0, 900, step_count=1, retention=RETENTION)
    store.commit(Transition(0, 1, done, StepUpdate(0, "a", StepStatus.SUCCEEDED, T0, result_blob="{}")))
    store.finalize(e.execution_id, done.version, done.expires_at)
    assert store.load(e.execution_id).finalized
    assert [r.expires_at for r in store.history(e.execution_id)] == [done.expires_at.replace(microsecond=0)]


def test_ended_executions_owing_housekeeping_are_found_until_finalized(store):
    # given: an execution ended by a worker that died before finalizing
    e = new_execution(wake=T0)
    store.create(e)
    done = transitions.advanced(e, "{}", T0, 900, step_count=1, retention=RETENTION, finalize_grace_s=60)
    store.commit(Transition(0, 1, done))
    shard = shard_of(e.execution_id, 4)
    # then: not due work, but owed housekeeping once the grace period is over
    later = T0 + dt.timedelta(minutes=5)
    assert not store.query_due(shard, later, 10).items
    assert not store.query_unfinalized(shard, T0, 10).items
    assert [r.execution_id for r in store.query_unfinalized(shard, later, 10).items] == [e.execution_id]
    # when finalized, it leaves that index too
    store.finalize(e.execution_id, done.version, done.expires_at)
    assert not store.query_unfinalized(shard, later, 10).items
    assert store.load(e.execution_id).finalize_by is None
