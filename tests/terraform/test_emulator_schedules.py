"""The schedules part of the loom module, as the emulator holds it after the session's apply of envs/local
(with conftest's LOCAL_SCHEDULES; envs/dev has none): the schedule group and schedules, the role Scheduler
assumes with exactly its two grants, the encrypted DLQ, the alarms, LOOM_SCHEDULES; and bad inputs
refused by validation with their messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from deployed_stacks import SPECS, Deployed, grants_of
from terraform_cases import CRON_REFUSED, CRON_TAKEN, LOCAL_SCHEDULES

from engine_core.schedules.expressions import ExpressionError, parse

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture
def local(lab: Any) -> Deployed:
    return Deployed(SPECS["local"], lab.outputs("local"), lab.emulator)


def _schedules(d: Deployed) -> dict[str, dict[str, Any]]:
    scheduler = d.client("scheduler")
    group = d.out["schedule_group_name"]
    names = [s["Name"] for s in scheduler.list_schedules(GroupName=group)["Schedules"]]
    return {n: scheduler.get_schedule(Name=n, GroupName=group) for n in names}


def test_each_schedule_fires_the_control_plane_with_the_context_attributes_written_literally(local: Deployed) -> None:
    # when
    schedules = _schedules(local)
    cp_arn = local.config("control_plane")["FunctionArn"]

    # then
    assert local.out["schedule_group_name"] == "loom-local"
    assert sorted(schedules) == ["hourly.sync", "nightly-greeting"]
    nightly, hourly = schedules["nightly-greeting"], schedules["hourly.sync"]
    assert (nightly["ScheduleExpression"], nightly["ScheduleExpressionTimezone"], nightly["State"]) == (
        "cron(0 2 * * ? *)", "Europe/Paris", "ENABLED")
    assert (hourly["ScheduleExpression"], hourly["ScheduleExpressionTimezone"], hourly["State"]) == (
        "rate(1 hour)", "UTC", "DISABLED")
    for name, s in schedules.items():
        target = s["Target"]
        assert s["FlexibleTimeWindow"] == {"Mode": "OFF"}
        assert (target["Arn"], target["RoleArn"]) == (cp_arn, local.out["scheduler_role_arn"])
        # jsonencode would write < and > as \u003c/\u003e, which Scheduler does not substitute
        assert json.loads(target["Input"]) == {
            "source": "loom.schedule", "schedule": name, "scheduled_time": "<aws.scheduler.scheduled-time>",
            "schedule_arn": "<aws.scheduler.schedule-arn>", "attempt": "<aws.scheduler.attempt-number>"}
        assert "<aws.scheduler.scheduled-time>" in target["Input"]
        assert target["DeadLetterConfig"]["Arn"].endswith(":loom-local-schedules-dlq")
        assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 10}
    assert local.out["schedule_arns"] == {n: s["Arn"] for n, s in schedules.items()}


def test_scheduler_role_may_only_invoke_the_control_plane_and_send_to_the_schedules_dlq(local: Deployed) -> None:
    # given
    iam = local.client("iam")
    role_name = local.out["scheduler_role_arn"].rsplit("/", 1)[-1]
    dlq_arn = local.client("sqs").get_queue_attributes(QueueUrl=local.out["schedule_dlq_url"],
                                                       AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    # when
    role = iam.get_role(RoleName=role_name)["Role"]
    trust = role["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    docs = [iam.get_role_policy(RoleName=role_name, PolicyName=p)["PolicyDocument"]
            for p in iam.list_role_policies(RoleName=role_name)["PolicyNames"]]
    statements = [s for doc in docs for s in (json.loads(doc) if isinstance(doc, str) else doc)["Statement"]]

    # then
    assert role_name == "loom-local-scheduler-us-east-1"
    assert iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"] == []
    assert grants_of(statements) == {("lambda:InvokeFunction", local.config("control_plane")["FunctionArn"]),
                                     ("sqs:SendMessage", dlq_arn)}
    (assume,) = trust["Statement"]
    group_arn = f"arn:aws:scheduler:us-east-1:{local.account}:schedule-group/loom-local"
    assert (assume["Principal"], assume["Action"]) == ({"Service": "scheduler.amazonaws.com"}, "sts:AssumeRole")
    assert assume["Condition"] == {"StringEquals": {"aws:SourceAccount": local.account},
                                   "ArnEquals": {"aws:SourceArn": group_arn}}


def test_schedules_dlq_is_encrypted_and_alarmed_and_failed_firings_are_alarmed(local: Deployed) -> None:
    # when
    attrs = local.client("sqs").get_queue_attributes(QueueUrl=local.out["schedule_dlq_url"],
                                                     AttributeNames=["All"])["Attributes"]
    alarms = {a["AlarmName"]: a for a in local.client("cloudwatch").describe_alarms(
        AlarmNamePrefix="loom-local-schedule")["MetricAlarms"]}

    # then
    assert attrs["SqsManagedSseEnabled"] == "true" and int(attrs["MessageRetentionPeriod"]) == 1209600
    depth, failed = alarms["loom-local-schedules-dlq-depth"], alarms["loom-local-schedule-firings-failed"]
    assert (depth["MetricName"], depth["Dimensions"]) == (
        "ApproximateNumberOfMessagesVisible", [{"Name": "QueueName", "Value": "loom-local-schedules-dlq"}])
    assert (failed["Namespace"], failed["MetricName"], failed["Dimensions"]) == (
        "Loom/loom-local", "ScheduleFiringsFailed", [{"Name": "service", "Value": "loom-local-control-plane"}])


def test_control_plane_reads_the_schedules_from_loom_schedules(local: Deployed, lab: Any) -> None:
    # when
    env = local.config("control_plane")["Environment"]["Variables"]
    dev_env = Deployed(SPECS["dev"], lab.outputs("dev"), lab.emulator).config("control_plane")["Environment"]["Variables"]

    # then: the input decoded once; defaults filled in; dev (no schedules) has none
    assert json.loads(env["LOOM_SCHEDULES"]) == [
        {"name": s["name"], "workflow": s["workflow"], "expression": s["expression"],
         "timezone": s.get("timezone", "UTC"), "input": json.loads(s.get("input", "{}")),
         "overlap": s["overlap"], "enabled": s.get("enabled", True)} for s in LOCAL_SCHEDULES]
    assert "LOOM_SCHEDULES" not in local.config("worker")["Environment"]["Variables"]
    assert dev_env["LOOM_SCHEDULES"] == ""
    assert lab.outputs("dev").get("schedule_group_name") is None  # `terraform output` leaves null outputs out
    assert lab.outputs("dev")["schedule_arns"] == {}


def test_validate_refuses_bad_schedules_with_what_to_write(lab: Any) -> None:
    # when
    log = lab.failure("single-variable")

    # then
    assert "schedules: expression must be cron(minutes hours day-of-month month day-of-week year) with six fields" in log
    assert "schedules: in a cron expression exactly one of day-of-month (3rd field) and day-of-week (5th field) must be ?" in log
    assert "schedules: overlap must be skip (start nothing while the schedule's previous execution is live) or allow" in log
    assert "schedules: each name must be unique and 1-64 letters, digits, '-', '_' or '.'" in log
    assert "schedules: workflow must be a workflow name (non-empty, no whitespace)" in log
    assert "schedules: input must be a JSON object as text, e.g. input = jsonencode({ scope = \"all\" })" in log


def test_validate_checks_each_cron_field_as_the_control_plane_parser_does(lab: Any) -> None:
    # given: what the control plane's parser does with each expression
    for expression in CRON_TAKEN:
        parse(expression, "Europe/Paris")
    for expression, _ in CRON_REFUSED:
        with pytest.raises(ExpressionError):
            parse(expression, "Europe/Paris")

    # when
    errors = lab.failure("single-variable").split("Error: ")

    # then: each refused expression fails `terraform validate` with its message, the taken ones do not
    def refusals(module: str) -> list[str]:
        return [e for e in errors if f'in module "{module}":' in e]

    assert refusals("schedule_forms_taken") == []
    for i, (expression, message) in enumerate(CRON_REFUSED):
        found = refusals(f"schedule_refused_{i}")
        assert len(found) == 1 and message in found[0], (expression, found)
