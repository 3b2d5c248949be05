"""The fire path on every store (memory and DynamoDB on moto), a manual clock and the real engine: token
idempotency, skip vs allow, late and repeated deliveries, a crash between the claim and the record, and
firings that cannot start."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import BaseModel

from engine_core import ManualClock, Registry, Status, sleep, workflow
from engine_core.schedules.config import Schedules
from engine_core.schedules.fire import execution_id_for, fire
from engine_core.schedules.record import FiringOutcome
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc
T9 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DAY = dt.timedelta(days=1)


class ReportInput(BaseModel):
    scope: str


def make(store, overlap: str = "skip", workflow_name: str = "report", input: dict | None = None):
    registry = Registry()

    def build(ctx):
        return {"built": ctx["scope"]}

    def publish(ctx):
        return {"published": True}

    @workflow("report", registry=registry)
    class Report:
        input_model = ReportInput
        steps = [build, sleep(hours=30), publish]

    runner = LocalRunner(registry, clock=ManualClock(T9), store=store)
    schedules = Schedules.parse(json.dumps([{"name": "daily", "workflow": workflow_name, "expression": "cron(0 9 * * ? *)",
                                             "input": {"scope": "all"} if input is None else input,
                                             "overlap": overlap}]))
    return runner, schedules


def test_fire_starts_one_execution_per_firing_with_the_schedules_input_and_records_it(store):
    # given
    runner, schedules = make(store)

    # when
    result = fire(runner.engine, schedules, "daily", T9)

    # then
    assert (result.outcome, result.execution_id) == ("started", execution_id_for("daily", T9))
    e = runner.engine.state(result.execution_id).execution
    assert (e.workflow, e.started_by) == ("report", "schedule:daily")
    assert runner.context(result.execution_id)["scope"] == "all"
    rec = store.get_schedule("daily")
    assert (rec.outcome, rec.scheduled_at, rec.execution_id, rec.started_id, rec.revision) == (
        FiringOutcome.STARTED, T9, result.execution_id, result.execution_id, 2)


def test_fire_repeated_delivery_starts_nothing_new_and_is_counted(store):
    # given
    runner, schedules = make(store)
    first = fire(runner.engine, schedules, "daily", T9)

    # when: Scheduler delivers the same firing twice more
    again = [fire(runner.engine, schedules, "daily", T9) for _ in range(2)]

    # then
    assert [r.outcome for r in again] == ["duplicate", "duplicate"]
    assert {r.execution_id for r in again} == {first.execution_id}
    assert [e.execution_id for e in runner.engine.operator.list().executions] == [first.execution_id]
    rec = store.get_schedule("daily")
    assert (rec.outcome, rec.duplicates, rec.execution_id) == (FiringOutcome.STARTED, 2, first.execution_id)


def test_fire_skip_while_the_previous_execution_is_live_starts_nothing_then_starts_once_it_ended(store):
    # given: the 09:00 execution sleeps 30 h, so it is still live at the next day's firing
    runner, schedules = make(store, overlap="skip")
    first = fire(runner.engine, schedules, "daily", T9)
    runner.step_once()

    # when
    runner.clock.set(T9 + DAY)
    skipped = fire(runner.engine, schedules, "daily", T9 + DAY)
    runner.clock.advance(hours=8)
    assert runner.run_until_done(first.execution_id).status is Status.COMPLETED
    runner.clock.set(T9 + 2 * DAY)
    third = fire(runner.engine, schedules, "daily", T9 + 2 * DAY)

    # then
    assert (skipped.outcome, skipped.execution_id) == ("skipped", first.execution_id)
    assert (third.outcome, third.execution_id) == ("started", execution_id_for("daily", T9 + 2 * DAY))
    assert len(runner.engine.operator.list().executions) == 2
    rec = store.get_schedule("daily")
    assert (rec.outcome, rec.started_id, rec.started_for) == (FiringOutcome.STARTED, third.execution_id, T9 + 2 * DAY)


def test_fire_allow_while_the_previous_execution_is_live_starts_anyway(store):
    # given
    runner, schedules = make(store, overlap="allow")
    first = fire(runner.engine, schedules, "daily", T9)

    # when
    runner.clock.set(T9 + DAY)
    second = fire(runner.engine, schedules, "daily", T9 + DAY)

    # then
    assert second.outcome == "started" and second.execution_id != first.execution_id
    assert not runner.engine.get(first.execution_id).status.is_terminal
    assert len(runner.engine.operator.list().executions) == 2


def test_fire_late_delivery_of_an_older_firing_starts_nothing_and_never_moves_the_record_back(store):
    # given: 10:00 (the next day) fired first; the 09:00 firing's delivery comes late
    runner, schedules = make(store, overlap="allow")
    newer = fire(runner.engine, schedules, "daily", T9 + DAY)

    # when
    late = fire(runner.engine, schedules, "daily", T9)

    # then
    assert (late.outcome, late.execution_id) == ("late", None)
    assert runner.engine.store.load(execution_id_for("daily", T9)) is None
    assert store.get_schedule("daily").scheduled_at == T9 + DAY
    assert newer.outcome == "started"


def test_fire_late_copy_of_a_firing_that_already_started_is_a_duplicate(store):
    # given
    runner, schedules = make(store, overlap="allow")
    first = fire(runner.engine, schedules, "daily", T9)
    fire(runner.engine, schedules, "daily", T9 + DAY)

    # when: a copy of the first delivery arrives after the second firing
    copy = fire(runner.engine, schedules, "daily", T9)

    # then
    assert (copy.outcome, copy.execution_id) == ("duplicate", first.execution_id)


def test_fire_crash_between_the_claim_and_the_record_is_finished_by_the_retry_with_the_same_execution(store):
    # given: a delivery claimed the firing and started its execution, then died before recording it
    runner, schedules = make(store)
    deadline = T9 + dt.timedelta(seconds=10)
    runner.engine.start("report", {"scope": "all"}, "schedule:daily:2026-03-02T09:00:00Z", by="schedule:daily")
    from engine_core.schedules.record import ScheduleRecord

    eid = execution_id_for("daily", T9)
    store.put_schedule(ScheduleRecord(name="daily", scheduled_at=T9, outcome=FiringOutcome.STARTING, fired_at=T9,
                                      execution_id=eid, started_id=eid, started_for=T9, claim_until=deadline))

    # when: a retry inside the claim is a duplicate; the one after it finishes the firing
    during = fire(runner.engine, schedules, "daily", T9)
    runner.clock.set(deadline + dt.timedelta(seconds=1))
    after = fire(runner.engine, schedules, "daily", T9)

    # then
    assert during.outcome == "duplicate"
    assert (after.outcome, after.execution_id) == ("started", eid)
    assert "already existed" in after.detail
    assert len(runner.engine.operator.list().executions) == 1
    assert store.get_schedule("daily").outcome is FiringOutcome.STARTED


def test_fire_retried_after_a_deploy_changed_its_input_records_the_execution_the_crashed_delivery_started(store):
    # given: a delivery started the firing's execution with input {"scope": "all"}, then died before recording
    # it; a deploy then changed the schedule's input
    runner, _ = make(store)
    runner.engine.start("report", {"scope": "all"}, "schedule:daily:2026-03-02T09:00:00Z", by="schedule:daily")
    eid = execution_id_for("daily", T9)
    _, changed = make(store, input={"scope": "eu"})

    # when: the firing is delivered again, and the next day's with skip
    again = fire(runner.engine, changed, "daily", T9)
    runner.clock.set(T9 + DAY)
    next_day = fire(runner.engine, changed, "daily", T9 + DAY)

    # then: that execution is the firing's (started, not failed input_changed asking for a new token)
    assert (again.outcome, again.execution_id) == ("started", eid) and "it changed since" in again.detail
    rec_outcome = store.get_schedule("daily").outcome
    assert rec_outcome in (FiringOutcome.STARTED, FiringOutcome.SKIPPED)
    assert next_day.outcome == "skipped" and eid in (next_day.detail or "")  # the live one is named
    assert len(runner.engine.operator.list().executions) == 1


def test_fire_skip_counts_a_firing_being_started_as_live(store):
    # given: the 09:00 firing is claimed by a delivery still running (its execution not written yet)
    runner, schedules = make(store, overlap="skip")
    from engine_core.schedules.record import ScheduleRecord

    eid = execution_id_for("daily", T9)
    store.put_schedule(ScheduleRecord(name="daily", scheduled_at=T9, outcome=FiringOutcome.STARTING, fired_at=T9,
                                      execution_id=eid, started_id=eid, started_for=T9,
                                      claim_until=T9 + DAY + dt.timedelta(minutes=1)))
    runner.clock.set(T9 + DAY)

    # when
    result = fire(runner.engine, schedules, "daily", T9 + DAY)

    # then
    assert (result.outcome, result.execution_id) == ("skipped", eid)
    # and: the firing after that skip, the claim still running, is skipped too (the skip's write replaced the
    # claim on the record; it started a second execution)
    runner.clock.set(T9 + DAY + dt.timedelta(seconds=30))
    after = fire(runner.engine, schedules, "daily", T9 + DAY + dt.timedelta(seconds=30))
    assert (after.outcome, after.execution_id) == ("skipped", eid), after
    assert runner.engine.operator.list().executions == []
    # and: once the claim ran out with nothing started (its delivery died), the next firing starts
    runner.clock.set(T9 + 2 * DAY)
    assert fire(runner.engine, schedules, "daily", T9 + 2 * DAY).outcome == "started"


@pytest.mark.parametrize(("workflow_name", "input", "code"), [
    ("gone_workflow", {"scope": "all"}, "unknown_workflow"),
    ("report", {"scope": 7, "extra": True}, "invalid_input"),
])
def test_fire_that_cannot_start_is_recorded_failed_with_its_error_and_not_retried(store, workflow_name, input, code):
    # given
    runner, schedules = make(store, workflow_name=workflow_name, input=input)

    # when
    result = fire(runner.engine, schedules, "daily", T9)
    again = fire(runner.engine, schedules, "daily", T9)

    # then: no exception (a retry could not succeed); recorded, and a repeat is only counted
    assert (result.outcome, result.execution_id) == ("failed", None)
    assert runner.engine.operator.list().executions == []
    rec = store.get_schedule("daily")
    assert (rec.outcome, rec.error.code, rec.started_id) == (FiringOutcome.FAILED, code, None)
    assert (again.outcome, store.get_schedule("daily").duplicates) == ("duplicate", 1)


def test_fire_of_a_step_list_longer_than_the_step_cap_is_recorded_failed_and_starts_nothing(store):
    # given: the report's three steps, and a cap of two
    from engine_core import EngineSettings

    runner, schedules = make(store)
    capped = LocalRunner(runner.engine.registry, clock=runner.clock, store=store, settings=EngineSettings(max_steps=2))
    # when
    result = fire(capped.engine, schedules, "daily", T9)
    # then: recorded failed with the reason, nothing started (not a raise Scheduler would retry in vain)
    assert (result.outcome, result.execution_id) == ("failed", None)
    rec = store.get_schedule("daily")
    assert (rec.outcome, rec.error.code) == (FiringOutcome.FAILED, "over_step_cap")
    assert "LOOM_MAX_STEPS" in rec.error.message and capped.engine.operator.list().executions == []


def test_fire_of_a_schedule_that_is_not_deployed_fails_naming_the_deployed_ones(store):
    # given
    runner, schedules = make(store)

    # when
    result = fire(runner.engine, schedules, "weekly", T9)

    # then
    assert result.outcome == "failed"
    assert "no schedule named 'weekly' is deployed (deployed: daily)" in result.detail
    assert store.get_schedule("weekly") is None


def test_fire_when_the_store_fails_raises_releases_the_claim_and_the_retry_starts_it(store, monkeypatch):
    # given: the start fails once as a storage outage would
    runner, schedules = make(store)
    from engine_core.errors import StorageError

    real_start = runner.engine.start
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise StorageError("DynamoDB TransactWriteItems failed: ServiceUnavailable")
        return real_start(*args, **kwargs)

    monkeypatch.setattr(runner.engine, "start", flaky)

    # when
    with pytest.raises(StorageError):
        fire(runner.engine, schedules, "daily", T9)
    retried = fire(runner.engine, schedules, "daily", T9)

    # then: the released claim did not hold the retry back
    assert retried.outcome == "started"
    assert len(runner.engine.operator.list().executions) == 1


def test_fire_record_expires_after_the_next_firing_plus_retention(store):
    # given
    runner, schedules = make(store)

    # when
    fire(runner.engine, schedules, "daily", T9)

    # then
    life = runner.engine.life
    assert store.get_schedule("daily").expires_at == T9 + DAY + life.retention + life.grace


def test_fire_of_a_disabled_schedule_starts_nothing_and_leaves_its_record(store):
    # given: yesterday's firing started; the schedule was then disabled (Scheduler may still retry a delivery)
    runner, schedules = make(store)
    assert fire(runner.engine, schedules, "daily", T9 - DAY).outcome == "started"
    before = store.get_schedule("daily")
    disabled = Schedules.parse(json.dumps([{"name": "daily", "workflow": "report", "expression": "cron(0 9 * * ? *)",
                                            "input": {"scope": "all"}, "enabled": False}]))

    # when: today's delivery arrives
    result = fire(runner.engine, disabled, "daily", T9)

    # then: skipped, saying why; no execution, and the record still names the last firing
    assert (result.outcome, result.execution_id) == ("skipped", None)
    assert "disabled" in result.detail
    assert runner.engine.store.load(execution_id_for("daily", T9)) is None
    assert store.get_schedule("daily") == before
