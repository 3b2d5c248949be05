"""The worker's backlog gauge and the sweeper's reading of its mark (``engine_core.backlog``)."""

from __future__ import annotations

import datetime as dt
import uuid

from engine_core.adapters.memory import MemoryStore
from engine_core.backlog import BacklogGauge, BacklogMark, behind_backlog, message_visible_at, sent_at_from_ms
from engine_core.clock import ManualClock
from engine_core.errors import StorageError
from engine_core.model import Execution, Status, StepMessage, Timer

LEASE = 100.0
EID = str(uuid.uuid4())


def message(delay_s: int | None = None) -> StepMessage:
    return StepMessage(execution_id=EID, step=0, version=1, delay_s=delay_s)


def gauge(store=None) -> tuple[BacklogGauge, ManualClock, MemoryStore]:
    clock, store = ManualClock(), store or MemoryStore()
    return BacklogGauge(store, clock, LEASE), clock, store


def ago(clock: ManualClock, seconds: float) -> dt.datetime:
    return clock.now() - dt.timedelta(seconds=seconds)


def test_observe_a_record_that_waited_less_than_half_a_lease_writes_nothing():
    g, clock, store = gauge()

    assert g.observe(message(), ago(clock, 49)) is None
    assert store.get_backlog_mark() is None and store.calls.get("put_backlog_mark", 0) == 0


def test_observe_a_record_that_waited_half_a_lease_marks_its_visible_time():
    g, clock, store = gauge()

    written = g.observe(message(), ago(clock, 50))

    assert written == BacklogMark(visible_at=ago(clock, 50), observed_at=clock.now())
    assert store.get_backlog_mark() == written


def test_observe_counts_the_wait_from_the_end_of_the_message_delay():
    g, clock, _ = gauge()

    # sent 130 s ago with a 90 s delay: visible 40 s ago, no backlog
    assert g.observe(message(delay_s=90), ago(clock, 130)) is None
    # sent 150 s ago with a 90 s delay: visible 60 s ago
    assert g.observe(message(delay_s=90), ago(clock, 150)).visible_at == ago(clock, 60)


def test_observe_writes_at_most_once_per_quarter_lease_per_process():
    g, clock, store = gauge()
    assert g.observe(message(), ago(clock, 60))

    clock.advance(LEASE / 4 - 1)
    assert g.observe(message(), ago(clock, 55)) is None
    clock.advance(1)
    assert g.observe(message(), ago(clock, 55)) is not None
    assert store.calls["put_backlog_mark"] == 2 and g.marks_written == 2


def test_observe_when_the_store_fails_logs_and_goes_on():
    class Failing(MemoryStore):
        def put_backlog_mark(self, mark):
            raise StorageError("PutItem throttled")

    g, clock, _ = gauge(Failing())

    assert g.observe(message(), ago(clock, 80)) is None and g.marks_written == 0


def test_observe_when_marks_are_off_or_the_send_time_is_unknown_writes_nothing():
    clock, store = ManualClock(), MemoryStore()
    off = BacklogGauge(store, clock, LEASE, enabled=False)

    assert off.observe(message(), ago(clock, 500)) is None
    assert BacklogGauge(store, clock, LEASE).observe(message(), None) is None
    assert store.get_backlog_mark() is None


def test_sent_at_from_ms_reads_sqs_sent_timestamp_and_ignores_garbage():
    assert sent_at_from_ms("1700000000123") == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    assert sent_at_from_ms(None) is None and sent_at_from_ms("") is None and sent_at_from_ms("soon") is None


def execution(clock: ManualClock, timer: Timer, sent_s_ago: float, wake_s_ago: float) -> Execution:
    now = clock.now()
    wake = now - dt.timedelta(seconds=wake_s_ago)
    return Execution(execution_id=EID, workflow="w", status=Status.RUNNING, current_step=0, version=2,
                     fingerprint="f", input_digest="d", created_at=now - dt.timedelta(hours=1),
                     updated_at=now - dt.timedelta(seconds=sent_s_ago), next_wake_at=wake,
                     index_at=wake + dt.timedelta(seconds=LEASE) if timer is not Timer.LEASE else wake, timer=timer)


def test_message_visible_at_is_the_send_for_a_lease_and_the_timer_for_a_delayed_message():
    clock = ManualClock()
    assert message_visible_at(execution(clock, Timer.LEASE, 300, 200)) == ago(clock, 300)
    assert message_visible_at(execution(clock, Timer.SLEEP, 900, 200)) == ago(clock, 200)


def test_behind_backlog_only_while_the_mark_is_fresh_and_short_of_a_lease_past_the_message():
    clock = ManualClock()
    e = execution(clock, Timer.LEASE, sent_s_ago=300, wake_s_ago=200)  # visible 300 s ago
    fresh = lambda visible_s_ago: BacklogMark(visible_at=ago(clock, visible_s_ago), observed_at=ago(clock, 10))

    assert behind_backlog(e, fresh(250), clock.now(), LEASE)        # workers 50 s past it: maybe queued
    assert behind_backlog(e, fresh(201), clock.now(), LEASE)        # 99 s past it
    assert not behind_backlog(e, fresh(200), clock.now(), LEASE)    # a lease past it: lost
    assert not behind_backlog(e, None, clock.now(), LEASE)          # no backlog seen: the lease decides
    stale = BacklogMark(visible_at=ago(clock, 400), observed_at=ago(clock, 2 * LEASE + 1))
    assert not behind_backlog(e, stale, clock.now(), LEASE)         # nothing seen for two margins (leases)


def test_behind_backlog_with_a_worker_timeout_longer_than_the_lease_waits_that_long_past_the_message():
    # a received record may wait in its batch up to the worker's timeout, unclaimed: the margin covers it
    clock = ManualClock()
    e = execution(clock, Timer.LEASE, sent_s_ago=300, wake_s_ago=200)
    mark = lambda visible_s_ago: BacklogMark(visible_at=ago(clock, visible_s_ago), observed_at=ago(clock, 10))

    assert behind_backlog(e, mark(200), clock.now(), LEASE, function_timeout_s=150)       # 100 s past: maybe in a batch
    assert not behind_backlog(e, mark(150), clock.now(), LEASE, function_timeout_s=150)   # 150 s past: lost
    assert behind_backlog(e, mark(150), clock.now(), LEASE, function_timeout_s=None) is False
    # the mark stays fresh for two margins
    old = BacklogMark(visible_at=ago(clock, 250), observed_at=ago(clock, 250))
    assert behind_backlog(e, old, clock.now(), LEASE, function_timeout_s=150)
    assert not behind_backlog(e, old, clock.now(), LEASE)
