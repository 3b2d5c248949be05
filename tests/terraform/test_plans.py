"""Static checks of envs/dev and envs/prod from `terraform show -json` of their plans.

These are the settings the emulator cannot hold or that only matter on AWS: above all the worker's
recursive-loop setting (moto answers PutFunctionRecursionConfig with 404, so the emulator applies run
without it). The plans are made from the unchanged environments; only the backend is swapped for
local state, and the provider talks to the test's moto server instead of AWS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(1200)

ENVS = {"dev": "loom-dev", "prod": "loom-prod"}


def _resources(module: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(module.get("resources", []))
    for child in module.get("child_modules", []):
        found += _resources(child)
    return found


@pytest.fixture(params=sorted(ENVS))
def planned(request: pytest.FixtureRequest, lab: Any) -> tuple[str, list[dict[str, Any]]]:
    plan = lab.plan(request.param)
    return request.param, _resources(plan["planned_values"]["root_module"])


def _only(resources: list[dict[str, Any]], rtype: str) -> dict[str, Any]:
    matches = [r for r in resources if r["type"] == rtype]
    assert len(matches) == 1, f"expected one {rtype}, found {[r['address'] for r in matches]}"
    return matches[0]["values"]


def _by_address(resources: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    (match,) = [r for r in resources if r["address"].endswith(suffix)]
    return match["values"]


def test_plan_sets_worker_recursive_loop_to_allow(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # given
    env, resources = planned

    # when
    recursion = _only(resources, "aws_lambda_function_recursion_config")

    # then: only the worker, and Allow (Lambda would otherwise stop a workflow after ~16 chained steps)
    assert recursion == {**recursion, "function_name": f"{ENVS[env]}-worker", "recursive_loop": "Allow"}


def test_plan_enables_worker_mapping_with_report_batch_item_failures(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # given
    env, resources = planned
    worker = _by_address(resources, "module.worker.aws_lambda_function.this[0]")

    # when
    esm = _only(resources, "aws_lambda_event_source_mapping")

    # then
    assert esm["function_response_types"] == ["ReportBatchItemFailures"]
    assert esm["enabled"] is True
    (scaling,) = esm["scaling_config"]
    assert 2 <= scaling["maximum_concurrency"] <= worker["reserved_concurrent_executions"]


def test_plan_derives_visibility_timeout_from_the_worker_timeout(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # given
    env, resources = planned
    worker = _by_address(resources, "module.worker.aws_lambda_function.this[0]")
    esm = _only(resources, "aws_lambda_event_source_mapping")

    # when
    queue = _by_address(resources, "module.queue.aws_sqs_queue.this[0]")

    # then
    assert queue["visibility_timeout_seconds"] == 6 * worker["timeout"] + esm["maximum_batching_window_in_seconds"]
    assert queue["sqs_managed_sse_enabled"] is True


def test_plan_deploys_the_python312_zips_from_make_build(planned: tuple[str, list[dict[str, Any]]], dist: Path,
                                                          code_sha256: Any) -> None:
    # given
    env, resources = planned

    # when
    functions = {r["values"]["function_name"]: r["values"] for r in resources if r["type"] == "aws_lambda_function"}

    # then
    assert set(functions) == {f"{ENVS[env]}-{s}" for s in ("worker", "sweeper", "control-plane")}
    for name, f in functions.items():
        zip_path = dist / "lambda" / f"{name.removeprefix(ENVS[env] + '-')}.zip"
        assert f["runtime"] == "python3.12"
        assert Path(f["filename"]).resolve().name == zip_path.name and "lambda" in Path(f["filename"]).parts
        assert f["source_code_hash"] == code_sha256(zip_path)
        assert f["reserved_concurrent_executions"] >= 1


def test_plan_control_plane_url_uses_aws_iam(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # when
    url = _only(planned[1], "aws_lambda_function_url")

    # then
    assert url["authorization_type"] == "AWS_IAM"
    assert url["cors"] == []


def test_plan_sweeper_schedule_is_one_minute(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # when
    rule = _only(planned[1], "aws_cloudwatch_event_rule")

    # then
    assert rule["schedule_expression"] == "rate(1 minute)"
    assert rule["state"] == "ENABLED"


def test_plan_table_billing_and_protection_per_environment(planned: tuple[str, list[dict[str, Any]]]) -> None:
    # given
    env, resources = planned

    # when
    table = _only(resources, "aws_dynamodb_table")

    # then
    assert table["point_in_time_recovery"][0]["enabled"] is True
    assert table["server_side_encryption"][0]["enabled"] is True
    assert table["ttl"][0] == {**table["ttl"][0], "attribute_name": "expires_at", "enabled": True}
    if env == "prod":
        assert table["billing_mode"] == "PAY_PER_REQUEST"
        assert table["deletion_protection_enabled"] is True
    else:
        assert table["billing_mode"] == "PROVISIONED"
        indexes = table["global_secondary_index"]
        assert len(indexes) == 2
        assert (table["read_capacity"] + sum(g["read_capacity"] for g in indexes),
                table["write_capacity"] + sum(g["write_capacity"] for g in indexes)) == (25, 25)


def test_modules_with_create_false_plan_nothing_and_output_null(lab: Any) -> None:
    # when: terraform/examples/disabled instantiates every module with create = false
    plan = lab.plan("disabled")

    # then
    assert [c["address"] for c in plan.get("resource_changes", []) if c["change"]["actions"] != ["no-op"]] == []
    outputs = {k: v.get("value") for k, v in plan["planned_values"].get("outputs", {}).items()}
    assert outputs["table_name"] is None
    assert outputs["loom_outputs"] and all(v is None for v in outputs["loom_outputs"].values())


# -- alarms ---------------------------------------------------------------------------------------
def _alarms(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["values"]["alarm_name"]: r["values"] for r in resources if r["type"] == "aws_cloudwatch_metric_alarm"}


def _queried(alarm: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, str], str]]:
    """The metrics a metric-math alarm reads: id -> (namespace, metric, dimensions, stat)."""
    return {q["id"]: (m["namespace"], m["metric_name"], m["dimensions"], m["stat"])
            for q in alarm["metric_query"] for m in q["metric"]}


def _expression(alarm: dict[str, Any]) -> str:
    (returned,) = [q for q in alarm["metric_query"] if q["return_data"]]
    return returned["expression"]


def test_plan_alarms_on_failed_executions_throttles_a_stopped_sweeper_and_step_age_near_the_lease(
        planned: tuple[str, list[dict[str, Any]]]) -> None:
    # given
    env, resources = planned
    name = ENVS[env]
    queue = _by_address(resources, "module.queue.aws_sqs_queue.this[0]")

    # when
    alarms = _alarms(resources)

    # then: the base three, plus every optional one (all on by default)
    functions = {"worker": f"{name}-worker", "sweeper": f"{name}-sweeper", "control-plane": f"{name}-control-plane"}
    assert set(alarms) == {
        f"{name}-dlq-depth", f"{name}-step-queue-oldest-message-age", f"{name}-step-queue-age-near-lease",
        f"{name}-executions-failed", f"{name}-sweeper-stopped",
        f"{name}-table-throttles", f"{name}-table-GSI1-throttles", f"{name}-table-GSI2-throttles",
        *(f"{name}-{k}-errors" for k in functions), *(f"{name}-{k}-throttles" for k in functions)}

    failed = alarms[f"{name}-executions-failed"]
    assert sorted((ns, metric, tuple(dims.items()), stat) for ns, metric, dims, stat in _queried(failed).values()) == [
        (f"Loom/{name}", "ExecutionsFailed", (("service", fn),), "Sum") for fn in sorted(functions.values())]
    assert _expression(failed) == " + ".join(f"FILL({i}, 0)" for i in sorted(_queried(failed)))
    assert (failed["comparison_operator"], failed["threshold"], failed["treat_missing_data"]) == (
        "GreaterThanOrEqualToThreshold", 1, "notBreaching")

    for key, dimensions in (("table", {"TableName": name}),
                            ("table-GSI1", {"TableName": name, "GlobalSecondaryIndexName": "GSI1"}),
                            ("table-GSI2", {"TableName": name, "GlobalSecondaryIndexName": "GSI2"})):
        throttles = alarms[f"{name}-{key}-throttles"]
        assert _queried(throttles) == {"reads": ("AWS/DynamoDB", "ReadThrottleEvents", dimensions, "Sum"),
                                       "writes": ("AWS/DynamoDB", "WriteThrottleEvents", dimensions, "Sum")}
        assert _expression(throttles) == "FILL(reads, 0) + FILL(writes, 0)"
        assert (throttles["threshold"], throttles["treat_missing_data"]) == (1, "notBreaching")

    for key, fn in functions.items():
        throttles = alarms[f"{name}-{key}-throttles"]
        assert (throttles["namespace"], throttles["metric_name"], throttles["dimensions"], throttles["statistic"]) == (
            "AWS/Lambda", "Throttles", {"FunctionName": fn}, "Sum")
        assert throttles["treat_missing_data"] == "notBreaching"

    stopped = alarms[f"{name}-sweeper-stopped"]
    assert (stopped["namespace"], stopped["metric_name"], stopped["dimensions"], stopped["statistic"]) == (
        "AWS/Lambda", "Invocations", {"FunctionName": functions["sweeper"]}, "Sum")
    assert (stopped["comparison_operator"], stopped["threshold"], stopped["period"]) == ("LessThanThreshold", 1, 300)
    assert stopped["treat_missing_data"] == "breaching"  # no invocations, no datapoint: that is the failure

    near_lease = alarms[f"{name}-step-queue-age-near-lease"]
    lease_s = queue["visibility_timeout_seconds"]  # LOOM_LEASE_S defaults to it
    assert (near_lease["namespace"], near_lease["metric_name"], near_lease["dimensions"]) == (
        "AWS/SQS", "ApproximateAgeOfOldestMessage", {"QueueName": f"{name}-steps"})
    assert (near_lease["statistic"], near_lease["period"], near_lease["evaluation_periods"]) == ("Maximum", 60, 1)
    assert near_lease["comparison_operator"] == "GreaterThanOrEqualToThreshold"
    # fires before a waiting message's age reaches the lease, with at least one datapoint to spare
    assert near_lease["threshold"] == lease_s // 2 and near_lease["threshold"] + near_lease["period"] < lease_s
    assert near_lease["treat_missing_data"] == "notBreaching"


# -- status-change events -------------------------------------------------------------------------
def test_plan_without_status_events_has_no_bus(planned: tuple[str, list[dict[str, Any]]], lab: Any) -> None:
    # given
    env, resources = planned

    # when
    outputs = lab.plan(env)["planned_values"]["outputs"]

    # then: off by default in dev and prod
    assert [r["address"] for r in resources if r["type"] == "aws_cloudwatch_event_bus"] == []
    assert outputs["status_event_bus_name"].get("value") is None
    assert outputs["status_event_bus_arn"].get("value") is None


def test_status_events_example_creates_the_bus_and_routes_failed_executions_to_sns(lab: Any) -> None:
    # given: terraform/examples/status-events, the documented sample
    plan = lab.plan("status-events")
    resources = _resources(plan["planned_values"]["root_module"])

    # when
    bus = _only(resources, "aws_cloudwatch_event_bus")
    rule = _by_address(resources, "aws_cloudwatch_event_rule.order_failed")
    target = _by_address(resources, "aws_cloudwatch_event_target.order_failed_to_sns")

    # then
    assert bus["name"] == "loom-example-events"
    assert plan["planned_values"]["outputs"]["status_event_bus_name"]["value"] == "loom-example-events"
    assert rule["event_bus_name"] == target["event_bus_name"] == "loom-example-events"
    assert json.loads(rule["event_pattern"]) == {
        "source": ["loom"], "detail-type": ["Loom Execution Status Change"],
        "detail": {"workflow": ["order_fulfillment"], "status": ["FAILED"]}}
    assert [r["type"] for r in resources if r["type"].startswith("aws_sns_")] == ["aws_sns_topic", "aws_sns_topic_policy"]


def test_status_events_on_an_existing_bus_create_no_bus_and_target_its_arn(lab: Any) -> None:
    # given: modules/loom with status_events.event_bus_name set to a name, and to an ARN
    plan = lab.plan("existing-bus")

    # when
    resources = _resources(plan["planned_values"]["root_module"])
    outputs = {k: v["value"] for k, v in plan["planned_values"]["outputs"].items()}

    # then
    assert [r["address"] for r in resources if r["type"] == "aws_cloudwatch_event_bus"] == []
    assert outputs["by_name"] == {"name": "orders", "arn": "arn:aws:events:us-east-1:123456789012:event-bus/orders"}
    assert outputs["by_arn"] == {"name": "shared", "arn": "arn:aws:events:eu-west-1:210987654321:event-bus/shared"}


def _documented_event() -> dict[str, Any]:
    readme = (Path(__file__).resolve().parents[2] / "terraform" / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Status-change events", 1)[1]
    return json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])


def test_documented_event_matches_the_example_rule_and_other_statuses_and_workflows_do_not(lab: Any) -> None:
    # given: the example's rule on a bus of the emulator, delivering to a queue
    rule = _by_address(_resources(lab.plan("status-events")["planned_values"]["root_module"]),
                       "aws_cloudwatch_event_rule.order_failed")
    events, sqs = lab.emulator.client("events"), lab.emulator.client("sqs")
    bus = events.create_event_bus(Name="replay-status-events")["EventBusArn"]
    queue_url = sqs.create_queue(QueueName="replay-status-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="replay", EventBusName=bus, EventPattern=rule["event_pattern"])
    events.put_targets(Rule="replay", EventBusName=bus, Targets=[{"Id": "q", "Arn": queue_arn}])
    documented = _documented_event()
    variants = {
        "documented": documented["detail"],
        "completed": {**documented["detail"], "status": "COMPLETED", "error": None},
        "cancelled": {**documented["detail"], "status": "CANCELLED", "error": None, "by": "arn:aws:iam::1:user/ops"},
        "other workflow": {**documented["detail"], "workflow": "flaky_greeting"},
    }
    try:
        # when: the engine's PutEvents entry for each
        for label, detail in variants.items():
            events.put_events(Entries=[{"Source": documented["source"], "DetailType": documented["detail-type"],
                                        "Detail": json.dumps({**detail, "label": label}), "EventBusName": bus}])
        received = []
        for _ in range(5):
            batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
            received += [json.loads(m["Body"])["detail"]["label"] for m in batch]

        # then: only the FAILED order_fulfillment execution
        assert received == ["documented"]
    finally:
        events.remove_targets(Rule="replay", EventBusName=bus, Ids=["q"])
        events.delete_rule(Name="replay", EventBusName=bus)
        events.delete_event_bus(Name="replay-status-events")
        sqs.delete_queue(QueueUrl=queue_url)
