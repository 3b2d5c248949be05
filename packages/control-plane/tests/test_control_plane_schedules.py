"""The control plane as EventBridge Scheduler's target (a direct invocation with the schedule's firing) and
``GET /schedules``, on moto with the deployed LOOM_SCHEDULES."""

from __future__ import annotations

import copy
import datetime as dt
import json

import pytest
from loom_test_support.lambda_harness import START, FakeContext, function_url_event, load_event

SCHEDULES = [
    {"name": "nightly-greeting", "workflow": "flaky_greeting", "expression": "cron(0 13 * * ? *)",
     "timezone": "UTC", "input": {"name": "Ada", "failures": 0}, "overlap": "skip"},
    {"name": "paris-morning", "workflow": "flaky_greeting", "expression": "cron(0 9 ? * MON-FRI *)",
     "timezone": "Europe/Paris", "input": {"name": "Bo", "failures": 0}, "overlap": "allow", "enabled": False},
    {"name": "retired", "workflow": "no_such_workflow", "expression": "rate(1 hour)"},
]


@pytest.fixture
def deployed(monkeypatch, lambdas):
    monkeypatch.setenv("LOOM_SCHEDULES", json.dumps(SCHEDULES))
    return lambdas


def firing(name: str = "nightly-greeting", at: str = "2026-11-29T13:00:00Z") -> dict:
    event = copy.deepcopy(load_event("scheduler_firing"))
    event.update(schedule=name, scheduled_time=at)
    return event


def get_schedules(module) -> tuple[int, dict]:
    reply = module.handler(function_url_event("GET", "/schedules"), FakeContext())
    return reply["statusCode"], json.loads(reply["body"])


def test_scheduler_event_as_stored_starts_the_schedules_workflow_once(deployed, world):
    # when
    first = deployed.control_plane.handler(load_event("scheduler_firing"), FakeContext())
    again = deployed.control_plane.handler(load_event("scheduler_firing"), FakeContext())

    # then
    assert first["outcome"] == "started" and again["outcome"] == "duplicate"
    assert again["execution_id"] == first["execution_id"]
    assert deployed.pump.run_until_settled(first["execution_id"]) == "COMPLETED"
    queued_starts = [i for i in world.items() if i["SK"]["S"] == "#META"]
    assert len(queued_starts) == 1


def test_scheduler_event_claims_the_firing_until_the_invocations_deadline_then_records_it(deployed, world):
    # given: every record the fire path writes, in order
    from engine_core.schedules.fire import execution_id_for

    store = deployed.control_plane.runtime.engine.store
    written, put = [], store.put_schedule
    store.put_schedule = lambda record: written.append(record) or put(record)

    # when
    result = deployed.control_plane.handler(firing(), FakeContext(remaining_ms=5000))

    # then: claimed until 1 s before the invocation's deadline, then started
    assert result["execution_id"] == execution_id_for("nightly-greeting", START)
    assert [(r.outcome.value, r.revision) for r in written] == [("starting", 1), ("started", 2)]
    assert written[0].claim_until == START + dt.timedelta(seconds=4)
    item = world.dynamodb.get_item(TableName="loom-test", Key={"PK": {"S": "SCHED#nightly-greeting"},
                                                                "SK": {"S": "#SCHEDULE"}}, ConsistentRead=True)["Item"]
    assert (item["outcome"]["S"], item["execution_id"]["S"]) == ("started", result["execution_id"])


def test_scheduler_event_for_an_undeployed_workflow_is_recorded_failed_without_raising(deployed, world):
    # when
    result = deployed.control_plane.handler(firing("retired", "2026-11-29T13:00:00Z"), FakeContext())

    # then
    assert result["outcome"] == "failed" and "no workflow named 'no_such_workflow'" in result["detail"]
    status, body = get_schedules(deployed.control_plane)
    retired = next(s for s in body["schedules"] if s["name"] == "retired")
    assert retired["last_firing"]["outcome"] == "failed"
    assert retired["last_firing"]["error"]["code"] == "unknown_workflow"
    assert "workflow 'no_such_workflow' is not deployed in this control plane" in retired["problem"]


@pytest.mark.parametrize(("event", "says"), [
    ({"source": "loom.schedule", "schedule": "nightly-greeting"}, "malformed schedule event"),
    ({"source": "loom.schedule", "schedule": "nightly-greeting", "scheduled_time": "<aws.scheduler.scheduled-time>"},
     "malformed schedule event"),
    ({"source": "loom.schedule", "schedule": "nightly-greeting", "scheduled_time": "2026-11-29T13:00:00"}, "has no time zone"),
])
def test_scheduler_event_malformed_raises_so_lambda_retries_and_starts_nothing(deployed, world, event, says):
    # when
    with pytest.raises(ValueError, match=says):
        deployed.control_plane.handler(event, FakeContext())

    # then
    assert not [i for i in world.items() if i["SK"]["S"] == "#META"]


def test_scheduler_event_with_invalid_schedules_config_raises_naming_the_problem(monkeypatch, lambdas, world):
    # given
    monkeypatch.setenv("LOOM_SCHEDULES", json.dumps([{**SCHEDULES[0], "expression": "cron(0 13 * * *)"}]))

    # when / then
    with pytest.raises(Exception, match="a cron expression has six fields"):
        lambdas.control_plane.handler(firing(), FakeContext())
    status, body = get_schedules(lambdas.control_plane)
    assert (status, body["error"]) == (500, "schedules_invalid")
    assert "schedule 'nightly-greeting'" in body["message"] and "Fix the Terraform schedules input" in body["message"]


def test_get_schedules_lists_each_schedule_with_its_next_and_last_firing(deployed, clock):
    # given: the 13:00 firing happened; it is now 13:00 UTC on Sunday 29 November 2026
    started = deployed.control_plane.handler(firing(), FakeContext())

    # when
    status, body = get_schedules(deployed.control_plane)

    # then
    assert status == 200 and body["now"] == "2026-11-29T13:00:00.000000Z"
    by_name = {s["name"]: s for s in body["schedules"]}
    assert list(by_name) == ["nightly-greeting", "paris-morning", "retired"]
    nightly = by_name["nightly-greeting"]
    assert nightly["next_firing"] == "2026-11-30T13:00:00.000000Z"
    assert nightly["last_firing"] == {"scheduled_at": "2026-11-29T13:00:00.000000Z", "outcome": "started",
                                      "execution_id": started["execution_id"], "fired_at": "2026-11-29T13:00:00.000000Z",
                                      "duplicates": 0, "error": None}
    assert nightly["last_started"] == {"execution_id": started["execution_id"], "scheduled_at": "2026-11-29T13:00:00.000000Z"}
    assert (nightly["overlap"], nightly["input"], nightly["problem"]) == ("skip", {"name": "Ada", "failures": 0}, None)
    # disabled: no next firing; a rate that never fired: unknown until its first firing
    assert (by_name["paris-morning"]["enabled"], by_name["paris-morning"]["next_firing"]) == (False, None)
    assert by_name["retired"]["next_firing"] is None and by_name["retired"]["last_firing"] is None


def test_get_schedules_next_firing_follows_the_schedules_time_zone(monkeypatch, lambdas, clock):
    # given: Friday 27 March 2026, 12:00 UTC; Paris moves to summer time on Sunday 29th
    monkeypatch.setenv("LOOM_SCHEDULES", json.dumps([dict(SCHEDULES[1], enabled=True)]))
    deployed = lambdas
    clock.set(dt.datetime(2026, 3, 27, 12, 0, tzinfo=dt.timezone.utc))

    # when
    status, body = get_schedules(deployed.control_plane)

    # then: Monday 09:00 in Paris is 07:00 UTC
    assert body["schedules"][0]["next_firing"] == "2026-03-30T07:00:00.000000Z"


def test_get_schedules_when_none_are_deployed_is_an_empty_list(lambdas):
    status, body = get_schedules(lambdas.control_plane)
    assert (status, body["schedules"]) == (200, [])


def test_get_schedules_with_a_query_is_refused_naming_it(deployed):
    # given
    event = function_url_event("GET", "/schedules")
    event.update(rawQueryString="limit=3", queryStringParameters={"limit": "3"})

    # when
    reply = deployed.control_plane.handler(event, FakeContext())

    # then
    assert reply["statusCode"] == 400
    assert "GET /schedules takes no query parameters, got ['limit']" in json.loads(reply["body"])["message"]


def test_get_schedules_document_has_the_fields_the_cli_reads(deployed):
    # given: the document the CLI, console and MCP tests are served (packages/cli/tests/documents)
    from pathlib import Path

    fixture = json.loads((Path(__file__).resolve().parents[2] / "cli" / "tests" / "documents" / "schedules.json")
                         .read_text())
    deployed.control_plane.handler(firing("retired"), FakeContext())

    # when
    _, body = get_schedules(deployed.control_plane)

    # then: the same keys at every level
    assert set(body) == set(fixture)
    real, shown = body["schedules"][-1], fixture["schedules"][-1]
    assert set(real) == set(shown)
    assert set(real["last_firing"]) == set(shown["last_firing"])
    assert set(real["last_firing"]["error"]) == set(shown["last_firing"]["error"])


def test_get_schedules_says_a_one_time_schedule_whose_time_passed_unfired_will_not_fire(monkeypatch, lambdas, clock):
    # given: it is 13:00 UTC on 29 November 2026; one at() passed with no firing recorded, one passed and fired,
    # one is still to come
    monkeypatch.setenv("LOOM_SCHEDULES", json.dumps([
        {"name": "missed", "workflow": "flaky_greeting", "expression": "at(2026-11-01T09:00:00)"},
        {"name": "fired", "workflow": "flaky_greeting", "expression": "at(2026-11-29T12:00:00)",
         "input": {"name": "Ada", "failures": 0}},
        {"name": "coming", "workflow": "flaky_greeting", "expression": "at(2026-12-24T18:00:00)"},
        {"name": "long_ago", "workflow": "flaky_greeting", "expression": "at(2026-09-01T09:00:00)"}]))
    lambdas.control_plane.handler(firing("fired", "2026-11-29T12:00:00Z"), FakeContext())

    # when
    status, body = get_schedules(lambdas.control_plane)

    # then: the missed one says so and what to do; the others have no problem
    by_name = {s["name"]: s for s in body["schedules"]}
    assert status == 200 and by_name["missed"]["next_firing"] is None
    assert by_name["missed"]["problem"] == (
        "its one firing, 2026-11-01T09:00:00.000000Z, has passed and none is recorded: a one-time schedule fires "
        "once, at its time, so it will not fire now; set a future at() to run it"), by_name["missed"]
    assert (by_name["fired"]["problem"], by_name["fired"]["last_firing"]["outcome"]) == (None, "started")
    assert (by_name["coming"]["problem"], by_name["coming"]["next_firing"]) == (None, "2026-12-24T18:00:00.000000Z")
    # and: one whose time passed longer ago than a firing's record is kept is not said to have been missed
    # (before: a schedule that fired, once its record expired, read "none is recorded ... set a future at()")
    long_ago = by_name["long_ago"]["problem"]
    assert "passed over 31 days ago (longer than a firing's record is kept)" in long_ago, long_ago
    assert "none is recorded" not in long_ago and "remove it" in long_ago
