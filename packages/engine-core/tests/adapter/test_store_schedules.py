"""The schedule record's two store operations, on every store in ``STORES`` (the ``store`` fixture)."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import CorruptStateError, ErrorInfo
from engine_core.adapters.memory import MemoryStore
from engine_core.adapters.sqlite import SqliteStore
from engine_core.schedules.record import FiringOutcome, ScheduleRecord

UTC = dt.timezone.utc
T9 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
T10 = T9 + dt.timedelta(hours=1)


def rec(at: dt.datetime = T9, revision: int = 1, outcome: FiringOutcome = FiringOutcome.STARTED, **changes) -> ScheduleRecord:
    base = dict(name="nightly", scheduled_at=at, revision=revision, outcome=outcome, fired_at=at + dt.timedelta(seconds=3),
                execution_id="e-1", started_id="e-1", started_for=at, expires_at=at + dt.timedelta(days=31))
    base.update(changes)
    return ScheduleRecord(**base)


def test_get_schedule_when_absent_returns_none(store):
    assert store.get_schedule("nightly") is None


def test_put_schedule_then_get_returns_every_field(store):
    # given
    written = rec(outcome=FiringOutcome.FAILED, execution_id=None, error=ErrorInfo(code="unknown_workflow", message="no"),
                  duplicates=2, claim_until=T9 + dt.timedelta(seconds=10))

    # when
    assert store.put_schedule(written) is True

    # then
    assert store.get_schedule("nightly") == written
    assert store.get_schedule("other") is None


def test_put_schedule_of_a_newer_firing_replaces_and_an_older_one_is_refused(store):
    # given
    assert store.put_schedule(rec(T9))

    # when
    newer = store.put_schedule(rec(T10, execution_id="e-2"))
    late = store.put_schedule(rec(T9, revision=7, execution_id="e-late"))

    # then
    assert (newer, late) == (True, False)
    assert store.get_schedule("nightly").execution_id == "e-2"


def test_put_schedule_of_the_same_firing_needs_a_later_revision(store):
    # given
    assert store.put_schedule(rec(T9, revision=1, outcome=FiringOutcome.STARTING))

    # when
    same = store.put_schedule(rec(T9, revision=1, outcome=FiringOutcome.STARTED))
    later = store.put_schedule(rec(T9, revision=2, outcome=FiringOutcome.STARTED))
    stale = store.put_schedule(rec(T9, revision=2, outcome=FiringOutcome.FAILED))

    # then
    assert (same, later, stale) == (False, True, False)
    assert store.get_schedule("nightly").outcome is FiringOutcome.STARTED


def test_schedule_records_are_kept_per_schedule_name(store):
    # when
    store.put_schedule(rec(T10, name="a"))
    store.put_schedule(rec(T9, name="b"))

    # then: b's older time is not compared with a's record
    assert store.get_schedule("a").scheduled_at == T10
    assert store.get_schedule("b").scheduled_at == T9


def test_get_schedule_of_an_undecodable_record_raises_corrupt_state(store):
    # given
    store.put_schedule(rec())
    if isinstance(store, MemoryStore):
        store.schedules["nightly"]["outcome"] = "exploded"
    elif isinstance(store, SqliteStore):
        with store.db.write() as conn:
            conn.execute("UPDATE items SET attrs = json_set(attrs, '$.outcome', 'exploded') "
                         "WHERE pk = 'SCHED#nightly' AND sk = '#SCHEDULE'")
    else:
        store.client.update_item(TableName=store.table, Key={"PK": {"S": "SCHED#nightly"}, "SK": {"S": "#SCHEDULE"}},
                                 UpdateExpression="SET outcome = :x", ExpressionAttributeValues={":x": {"S": "exploded"}})

    # when / then
    with pytest.raises(CorruptStateError, match="SCHED#nightly"):
        store.get_schedule("nightly")


def test_schedule_record_carries_its_ttl_and_lives_beside_no_execution(store):
    # when
    store.put_schedule(rec())

    # then: the TTL attribute is set; the item is its own partition (not an execution's)
    if isinstance(store, MemoryStore):
        assert store.schedules["nightly"]["expires_at"] == int((T9 + dt.timedelta(days=31)).timestamp())
        assert store.metas == {}
    elif isinstance(store, SqliteStore):
        with store.db.read() as conn:
            rows = conn.execute("SELECT pk, sk, expires_at, gsi1pk, gsi2sk FROM items").fetchall()
        assert rows == [("SCHED#nightly", "#SCHEDULE", int((T9 + dt.timedelta(days=31)).timestamp()), None, None)]
    else:
        item = store.client.get_item(TableName=store.table, Key={"PK": {"S": "SCHED#nightly"}, "SK": {"S": "#SCHEDULE"}})["Item"]
        assert item["expires_at"] == {"N": str(int((T9 + dt.timedelta(days=31)).timestamp()))}
        assert "GSI1PK" not in item and "GSI2PK" not in item
