"""EventBridge Scheduler played locally: schedules read from the emulator, fired on a manual clock with the
context attributes filled in, repeated on demand, function errors retried as Lambda's async invoke does."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from loom_local.functions import InvokeResult
from loom_local.scheduler import ScheduleConfig, SchedulePlayer, read_schedules, render_input

UTC = dt.timezone.utc
CREATED = dt.datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC)
INPUT = ('{"source":"loom.schedule","schedule":"daily","scheduled_time":"<aws.scheduler.scheduled-time>",'
         '"schedule_arn":"<aws.scheduler.schedule-arn>","attempt":"<aws.scheduler.attempt-number>"}')


class FakeFunction:
    """Records the events it is invoked with; fails the first ``failures`` invocations."""

    def __init__(self, failures: int = 0):
        self.events, self.failures = [], failures
        self.spec = type("Spec", (), {"name": "loom-local-control-plane"})()

    def invoke(self, event):
        self.events.append(event)
        if len(self.events) <= self.failures:
            return InvokeResult("r", "function_error", error={"errorMessage": "boom"})
        return InvokeResult("r", "ok", payload={"outcome": "started"})


def config(name: str = "daily", expression: str = "cron(0 9 * * ? *)", tz: str = "UTC", enabled: bool = True) -> ScheduleConfig:
    return ScheduleConfig(name=name, group="loom-local", arn=f"arn:aws:scheduler:us-east-1:123456789012:schedule/loom-local/{name}",
                          expression=expression, timezone=tz, enabled=enabled,
                          target_arn="arn:aws:lambda:us-east-1:123456789012:function:loom-local-control-plane",
                          input=INPUT.replace('"daily"', json.dumps(name)), created=CREATED)


def test_render_input_fills_in_the_context_attributes_as_scheduler_does():
    # when
    event = render_input(config(), dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC), attempt=2)

    # then
    assert event == {"source": "loom.schedule", "schedule": "daily", "scheduled_time": "2026-03-02T09:00:00Z",
                     "schedule_arn": "arn:aws:scheduler:us-east-1:123456789012:schedule/loom-local/daily", "attempt": "2"}


def test_manual_clock_fires_a_daily_schedule_three_times_in_order_and_skips_disabled_ones():
    # given
    fn = FakeFunction()
    player = SchedulePlayer([config(), config("paused", enabled=False)], fn, manual_start=CREATED)

    # when
    deliveries = player.advance_to(CREATED + dt.timedelta(days=3))

    # then
    assert [(d.schedule, d.scheduled_at.isoformat(), d.status) for d in deliveries] == [
        ("daily", "2026-03-02T09:00:00+00:00", "ok"),
        ("daily", "2026-03-03T09:00:00+00:00", "ok"), ("daily", "2026-03-04T09:00:00+00:00", "ok")]
    assert [e["scheduled_time"] for e in fn.events] == ["2026-03-02T09:00:00Z", "2026-03-03T09:00:00Z",
                                                       "2026-03-04T09:00:00Z"]
    assert player.advance_to(CREATED + dt.timedelta(days=3, hours=1)) == []


def test_manual_clock_follows_the_schedules_time_zone():
    # given: 09:00 in New York, the day of the spring change and the day after
    import dataclasses

    fn, start = FakeFunction(), dt.datetime(2026, 3, 8, 0, 0, tzinfo=UTC)
    player = SchedulePlayer([dataclasses.replace(config(tz="America/New_York"), created=start)], fn, manual_start=start)

    # when
    player.advance_to(dt.datetime(2026, 3, 10, 0, 0, tzinfo=UTC))

    # then
    assert [e["scheduled_time"] for e in fn.events] == ["2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"]


def test_deliver_repeats_a_firing_on_demand_and_retries_a_function_error_twice():
    # given
    fn = FakeFunction(failures=2)
    player = SchedulePlayer([config()], fn, manual_start=CREATED)
    at = dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    # when
    first = player.deliver("daily", at)
    again = player.deliver("daily", at)

    # then
    assert (first.attempts, first.status, again.attempts) == (3, "ok", 1)
    assert [e["attempt"] for e in fn.events] == ["1", "2", "3", "1"]
    assert {e["scheduled_time"] for e in fn.events} == {"2026-03-02T09:00:00Z"}


def test_advance_to_refuses_to_go_back_or_to_move_the_wall_clock():
    player = SchedulePlayer([config()], FakeFunction(), manual_start=CREATED)
    with pytest.raises(ValueError, match="cannot go back"):
        player.advance_to(CREATED - dt.timedelta(minutes=1))
    with pytest.raises(RuntimeError, match="manual schedule clock"):
        SchedulePlayer([config()], FakeFunction()).advance_to(CREATED)


def test_an_expression_the_evaluator_refuses_is_reported_and_never_fires():
    # given
    seen = []
    player = SchedulePlayer([config(expression="cron(0 9 * * *)")], FakeFunction(), manual_start=CREATED,
                            observer=lambda kind, details: seen.append((kind, details)))

    # then
    assert player.advance_to(CREATED + dt.timedelta(days=2)) == []
    assert seen[0][0] == "schedule_unsupported" and "six fields" in seen[0][1]["error"]


def test_read_schedules_keeps_those_that_target_the_given_functions():
    # given: moto holds two schedules, one aimed elsewhere
    import boto3
    import moto

    for var, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}.items():
        os.environ.setdefault(var, value)
    with moto.mock_aws():
        client = boto3.client("scheduler", region_name="us-east-1")
        client.create_schedule_group(Name="loom-local")
        target = "arn:aws:lambda:us-east-1:123456789012:function:loom-local-control-plane"
        client.create_schedule(Name="daily", GroupName="loom-local", ScheduleExpression="cron(0 9 * * ? *)",
                               ScheduleExpressionTimezone="Europe/Paris", FlexibleTimeWindow={"Mode": "OFF"},
                               Target={"Arn": target, "RoleArn": "arn:aws:iam::123456789012:role/r", "Input": INPUT})
        client.create_schedule(Name="other", ScheduleExpression="rate(1 hour)", FlexibleTimeWindow={"Mode": "OFF"},
                               State="DISABLED", Target={"Arn": "arn:aws:sqs:us-east-1:123456789012:q",
                                                         "RoleArn": "arn:aws:iam::123456789012:role/r"})

        # when
        found = read_schedules(client, {target})

    # then
    assert [(c.name, c.group, c.timezone, c.enabled, c.input) for c in found] == [
        ("daily", "loom-local", "Europe/Paris", True, INPUT)]
