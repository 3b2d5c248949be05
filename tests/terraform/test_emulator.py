"""envs/local and envs/dev applied to moto's server, read back with boto3, then destroyed.

Each check reads what the emulator holds, not what Terraform says it created. The last test destroys
every apply of the session (conftest runs it after every other test) and asserts that nothing is left.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from deployed_stacks import HANDLERS, Deployed, grants_of, role_statements
from terraform_cases import LOCAL_WORKFLOW_ACCESS

# One apply of each env takes a minute or two (SQS queue creation waits ~25 s per queue); the first
# test to need it waits for it.
pytestmark = pytest.mark.timeout(1200)

REQUIRED_ENV = {
    "LOOM_TABLE_NAME", "LOOM_QUEUE_URL", "LOOM_DLQ_URL", "LOOM_SHARDS", "LOOM_LEASE_S", "LOOM_RETENTION_DAYS",
    "LOOM_MAX_STEPS", "LOOM_MAX_TOTAL_ATTEMPTS", "LOOM_SWEEP_MAX_ITEMS", "LOOM_FUNCTION_TIMEOUT_S", "LOOM_MAX_CHAIN_STEPS", "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE", "LOG_LEVEL", "LOOM_EVENT_BUS_NAME",
}
ROLE_SUFFIX = {"worker": "worker", "sweeper": "sweeper", "control_plane": "control-plane"}
ZIP_NAMES = {"worker": "worker.zip", "sweeper": "sweeper.zip", "control_plane": "control-plane.zip"}
RESERVED = {"worker": 10, "sweeper": 1, "control_plane": 5}


def _sqs_attrs(d: Deployed, url: str) -> dict[str, str]:
    return d.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


# -- table ----------------------------------------------------------------------------------------
def test_table_has_pk_sk_keys_a_sparse_keys_only_gsi1_and_the_list_index(deployed: Deployed) -> None:
    # when
    table = deployed.client("dynamodb").describe_table(TableName=deployed.out["table_name"])["Table"]

    # then
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {"PK": "HASH", "SK": "RANGE"}
    assert {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]} == {
        "PK": "S", "SK": "S", "GSI1PK": "S", "GSI1SK": "S", "GSI2PK": "S", "GSI2SK": "S"}
    indexes = {g["IndexName"]: g for g in table["GlobalSecondaryIndexes"]}
    assert set(indexes) == {"GSI1", "GSI2"}
    gsi = indexes["GSI1"]
    assert {k["AttributeName"]: k["KeyType"] for k in gsi["KeySchema"]} == {"GSI1PK": "HASH", "GSI1SK": "RANGE"}
    assert gsi["Projection"]["ProjectionType"] == "KEYS_ONLY"
    listing = indexes["GSI2"]
    assert {k["AttributeName"]: k["KeyType"] for k in listing["KeySchema"]} == {"GSI2PK": "HASH", "GSI2SK": "RANGE"}
    assert listing["Projection"]["ProjectionType"] == "INCLUDE"
    assert set(listing["Projection"]["NonKeyAttributes"]) == {"workflow", "list_status"}


def test_table_provisioned_capacity_stays_inside_the_free_tier(deployed: Deployed) -> None:
    # when
    table = deployed.client("dynamodb").describe_table(TableName=deployed.out["table_name"])["Table"]

    # then: the table and its two indexes together use exactly the always-free 25 RCU / 25 WCU
    parts = [table, *table["GlobalSecondaryIndexes"]]
    reads = sum(p["ProvisionedThroughput"]["ReadCapacityUnits"] for p in parts)
    writes = sum(p["ProvisionedThroughput"]["WriteCapacityUnits"] for p in parts)
    assert (reads, writes) == (25, 25)


def test_table_has_ttl_pitr_and_encryption(deployed: Deployed) -> None:
    ddb = deployed.client("dynamodb")
    name = deployed.out["table_name"]

    # when
    ttl = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    backups = ddb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
    table = ddb.describe_table(TableName=name)["Table"]

    # then
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    assert table["SSEDescription"]["Status"] == "ENABLED"
    assert table.get("DeletionProtectionEnabled") is False  # both envs must be destroyable


# -- queues ---------------------------------------------------------------------------------------
def test_queue_visibility_timeout_is_at_least_six_worker_timeouts(deployed: Deployed) -> None:
    # given
    worker_timeout = deployed.config("worker")["Timeout"]

    # when
    attrs = _sqs_attrs(deployed, deployed.out["queue_url"])

    # then
    assert int(attrs["VisibilityTimeout"]) >= 6 * worker_timeout
    assert int(attrs["VisibilityTimeout"]) == deployed.out["visibility_timeout_s"]


def test_queue_redrives_to_the_dlq_after_at_least_five_receives(deployed: Deployed) -> None:
    # when
    attrs = _sqs_attrs(deployed, deployed.out["queue_url"])
    dlq_attrs = _sqs_attrs(deployed, deployed.out["dlq_url"])

    # then
    redrive = json.loads(attrs["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == deployed.out["dlq_arn"] == dlq_attrs["QueueArn"]
    assert int(redrive["maxReceiveCount"]) >= 5
    assert int(dlq_attrs["MessageRetentionPeriod"]) > int(attrs["MessageRetentionPeriod"])
    assert attrs["SqsManagedSseEnabled"] == dlq_attrs["SqsManagedSseEnabled"] == "true"


# -- functions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_function_runs_the_contract_handler_from_the_built_zip(deployed: Deployed, role: str, dist: Path,
                                                               code_sha256: Any) -> None:
    # when
    config = deployed.config(role)

    # then
    assert config["Handler"] == HANDLERS[role]
    assert config["Runtime"] == deployed.spec.runtime
    assert config["CodeSha256"] == code_sha256(dist / deployed.spec.dist_subdir / ZIP_NAMES[role])


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_function_environment_names_table_queue_and_shard_count(deployed: Deployed, role: str) -> None:
    # given
    out = deployed.out
    queue_url = deployed.client("sqs").get_queue_url(QueueName=f"{deployed.spec.name}-steps")["QueueUrl"]

    # when
    env = deployed.config(role)["Environment"]["Variables"]

    # then
    assert REQUIRED_ENV <= set(env), f"missing: {sorted(REQUIRED_ENV - set(env))}"
    assert env["LOOM_TABLE_NAME"] == out["table_name"] == deployed.spec.name
    assert env["LOOM_QUEUE_URL"] == out["queue_url"] == queue_url
    assert env["LOOM_DLQ_URL"] == out["dlq_url"]
    assert env["LOOM_SHARDS"] == str(out["shard_count"]) == "4"
    assert float(env["LOOM_LEASE_S"]) == out["visibility_timeout_s"]
    # from the stack's name: two stacks in one account and region keep their metrics and alarms apart
    assert env["POWERTOOLS_SERVICE_NAME"] == out["function_names"][role] == f"{deployed.spec.name}-{ROLE_SUFFIX[role]}"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == f"Loom/{deployed.spec.name}"
    # each function's own timeout, which its AWS clients' read timeout is cut from; the step budget is the worker's
    assert float(env["LOOM_INVOCATION_TIMEOUT_S"]) == deployed.config(role)["Timeout"]
    assert float(env["LOOM_FUNCTION_TIMEOUT_S"]) == deployed.config("worker")["Timeout"]
    # the module's safety caps are the engine's defaults (the attempts cap derived from the steps cap alike)
    from engine_core import EngineSettings

    engine = EngineSettings()
    assert (env["LOOM_MAX_STEPS"], env["LOOM_MAX_TOTAL_ATTEMPTS"]) == (str(engine.max_steps),
                                                                     str(engine.max_total_attempts))
    # the allow-list is the control plane's alone: workflow_access as JSON (a missing send list is null: the
    # operate list) where it is set (local), empty (open) where it is not (dev)
    assert ("LOOM_WORKFLOW_ACCESS" in env) is (role == "control_plane")
    if role == "control_plane" and deployed.spec.workflow_access:
        assert json.loads(env["LOOM_WORKFLOW_ACCESS"]) == {
            name: {"send": None, **lists} for name, lists in LOCAL_WORKFLOW_ACCESS.items()}
    else:
        assert env.get("LOOM_WORKFLOW_ACCESS", "") == ""


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_function_role_is_named_after_the_stack_and_region_at_the_root_path(deployed: Deployed, role: str) -> None:
    # when
    arn = deployed.config(role)["Role"]
    role_doc = deployed.client("iam").get_role(RoleName=arn.rsplit("/", 1)[1])["Role"]

    # then: IAM names are global, so the region keeps one stack name in two regions apart
    assert role_doc["RoleName"] == f"{deployed.spec.name}-{ROLE_SUFFIX[role]}-us-east-1"
    assert role_doc["Path"] == "/" and "PermissionsBoundary" not in role_doc
    assert deployed.config(role)["Architectures"] == ["x86_64"]
    assert deployed.config(role)["TracingConfig"] == {"Mode": "PassThrough"}
    assert not deployed.config(role).get("VpcConfig", {}).get("SubnetIds")


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_function_has_reserved_concurrency_and_a_retained_log_group(deployed: Deployed, role: str) -> None:
    # given
    name = deployed.out["function_names"][role]

    # when
    concurrency = deployed.client("lambda").get_function_concurrency(FunctionName=name)
    groups = deployed.client("logs").describe_log_groups(logGroupNamePrefix=f"/aws/lambda/{name}")["logGroups"]

    # then
    assert concurrency["ReservedConcurrentExecutions"] == RESERVED[role]
    assert [(g["logGroupName"], g.get("retentionInDays")) for g in groups] == [(f"/aws/lambda/{name}", 30)]


def retried_creates(mappings: list[dict[str, Any]], managed: set[str]) -> list[dict[str, Any]]:
    """The mappings no Terraform state holds that pair a queue and a function a managed mapping pairs: what a
    CreateEventSourceMapping the provider sent again (its first answer lost under load) leaves in moto, which
    keeps both where AWS refuses the second (409 ResourceConflictException)."""
    pairs = {(m["FunctionArn"], m["EventSourceArn"]) for m in mappings if m["UUID"] in managed}
    return [m for m in mappings if m["UUID"] not in managed and (m["FunctionArn"], m["EventSourceArn"]) in pairs]


def test_worker_event_source_mapping_reports_batch_item_failures_with_max_concurrency(deployed: Deployed,
                                                                                      lab: Any) -> None:
    # when
    managed = lab.workspaces[deployed.spec.key].managed_ids("aws_lambda_event_source_mapping")
    mappings = [m for m in deployed.client("lambda").list_event_source_mappings()["EventSourceMappings"]
                if m["FunctionArn"] == deployed.out["function_arns"]["worker"]]
    retried = {m["UUID"] for m in retried_creates(mappings, managed)}

    # then: one mapping, the one Terraform manages (and nothing else feeds the worker)
    (m,) = [m for m in mappings if m["UUID"] not in retried]
    assert m["UUID"] in managed
    assert m["EventSourceArn"] == deployed.out["queue_arn"]
    assert m["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert m["ScalingConfig"]["MaximumConcurrency"] == 5
    assert m["ScalingConfig"]["MaximumConcurrency"] <= RESERVED["worker"]
    assert m["BatchSize"] == 10
    # local leaves it disabled (moto would invoke through Docker and swallow messages); dev enables it
    assert (m["State"] == "Enabled") is deployed.spec.esm_enabled


def test_sweeper_runs_every_minute_from_a_scoped_eventbridge_rule(deployed: Deployed) -> None:
    # given
    events = deployed.client("events")
    sweeper_arn = deployed.out["function_arns"]["sweeper"]
    rules = [r for r in events.list_rules()["Rules"] if r["Name"].startswith(deployed.spec.name)]

    # when
    (rule,) = rules
    targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
    policy = json.loads(deployed.client("lambda").get_policy(FunctionName=sweeper_arn)["Policy"])

    # then
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert rule["State"] == "ENABLED"
    assert [t["Arn"] for t in targets] == [sweeper_arn]
    (statement,) = policy["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Action"] == "lambda:InvokeFunction"
    assert statement["Condition"]["ArnLike"]["AWS:SourceArn"] == rule["Arn"]


def test_control_plane_function_url_requires_aws_iam(deployed: Deployed) -> None:
    # when
    url = deployed.client("lambda").get_function_url_config(FunctionName=deployed.out["function_names"]["control_plane"])

    # then
    assert url["AuthType"] == "AWS_IAM"
    assert url["FunctionUrl"].rstrip("/") == deployed.out["function_url"].rstrip("/")
    assert not url.get("Cors")


def test_only_the_control_plane_has_a_function_url(deployed: Deployed) -> None:
    lam = deployed.client("lambda")
    for role in ("worker", "sweeper"):
        with pytest.raises(lam.exceptions.ResourceNotFoundException):
            lam.get_function_url_config(FunctionName=deployed.out["function_names"][role])


# -- alarms ---------------------------------------------------------------------------------------
def _metric_queries(alarm: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, str], str]]:
    return {q["Id"]: (q["MetricStat"]["Metric"]["Namespace"], q["MetricStat"]["Metric"]["MetricName"],
                      {d["Name"]: d["Value"] for d in q["MetricStat"]["Metric"]["Dimensions"]}, q["MetricStat"]["Stat"])
            for q in alarm.get("Metrics", []) if "MetricStat" in q}


def test_alarms_watch_the_queues_functions_failed_executions_throttles_and_the_sweeper(deployed: Deployed) -> None:
    # given
    name = deployed.spec.name
    fns = deployed.out["function_names"]

    # when
    alarms = {a["AlarmName"]: a for a in
              deployed.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"{name}-")["MetricAlarms"]}

    # then
    labels = {role: role.replace("_", "-") for role in fns}
    assert set(alarms) == {
        f"{name}-dlq-depth", f"{name}-step-queue-oldest-message-age", f"{name}-step-queue-age-near-lease",
        f"{name}-executions-failed", f"{name}-sweeper-stopped",
        f"{name}-table-throttles", f"{name}-table-GSI1-throttles", f"{name}-table-GSI2-throttles",
        *(f"{name}-{k}-errors" for k in labels.values()), *(f"{name}-{k}-throttles" for k in labels.values()),
        # envs/local is applied with schedules (test_emulator_schedules.py checks these two)
        *({f"{name}-schedules-dlq-depth", f"{name}-schedule-firings-failed"} if deployed.spec.key == "local" else ())}
    dlq = alarms[f"{name}-dlq-depth"]
    assert (dlq["Namespace"], dlq["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert dlq["Dimensions"] == [{"Name": "QueueName", "Value": f"{name}-steps-dlq"}]
    age = alarms[f"{name}-step-queue-oldest-message-age"]
    assert (age["Namespace"], age["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert age["Dimensions"] == [{"Name": "QueueName", "Value": f"{name}-steps"}]
    for role, fn in fns.items():
        for metric, kind in (("Errors", "errors"), ("Throttles", "throttles")):
            alarm = alarms[f"{name}-{labels[role]}-{kind}"]
            assert (alarm["Namespace"], alarm["MetricName"], alarm["TreatMissingData"]) == ("AWS/Lambda", metric, "notBreaching")
            assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": fn}]

    failed = alarms[f"{name}-executions-failed"]
    assert sorted((ns, metric, tuple(dims.items()), stat) for ns, metric, dims, stat in _metric_queries(failed).values()) == [
        (f"Loom/{name}", "ExecutionsFailed", (("service", fn),), "Sum") for fn in sorted(fns.values())]
    assert failed["TreatMissingData"] == "notBreaching"

    table = deployed.out["table_name"]
    for key, dims in (("table", {"TableName": table}),
                      *((f"table-{i}", {"TableName": table, "GlobalSecondaryIndexName": i}) for i in ("GSI1", "GSI2"))):
        throttles = alarms[f"{name}-{key}-throttles"]
        assert _metric_queries(throttles) == {"reads": ("AWS/DynamoDB", "ReadThrottleEvents", dims, "Sum"),
                                              "writes": ("AWS/DynamoDB", "WriteThrottleEvents", dims, "Sum")}
        assert throttles["TreatMissingData"] == "notBreaching"

    stopped = alarms[f"{name}-sweeper-stopped"]
    assert (stopped["Namespace"], stopped["MetricName"], stopped["Statistic"]) == ("AWS/Lambda", "Invocations", "Sum")
    assert stopped["Dimensions"] == [{"Name": "FunctionName", "Value": fns["sweeper"]}]
    assert (stopped["ComparisonOperator"], stopped["Threshold"], stopped["Period"]) == ("LessThanThreshold", 1.0, 300)
    assert stopped["TreatMissingData"] == "breaching"

    near_lease = alarms[f"{name}-step-queue-age-near-lease"]
    assert (near_lease["Namespace"], near_lease["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert near_lease["Dimensions"] == [{"Name": "QueueName", "Value": f"{name}-steps"}]
    assert near_lease["Threshold"] == deployed.out["lease_s"] // 2 < deployed.out["lease_s"]
    assert near_lease["TreatMissingData"] == "notBreaching"


# -- status-change events -------------------------------------------------------------------------
@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_status_events_bus_environment_and_permission_only_when_enabled(deployed: Deployed, role: str) -> None:
    # given
    out, name = deployed.out, deployed.spec.name
    buses = {b["Name"]: b["Arn"] for b in deployed.client("events").list_event_buses()["EventBuses"]}

    # when
    env = deployed.config(role)["Environment"]["Variables"]
    put_events = {(a, r) for a, r in grants_of(role_statements(deployed, role)) if a.startswith("events:")}

    # then
    if deployed.spec.status_events:
        assert out["status_event_bus_name"] == f"{name}-events" == env["LOOM_EVENT_BUS_NAME"]
        assert buses[f"{name}-events"] == out["status_event_bus_arn"]
        assert put_events == {("events:PutEvents", out["status_event_bus_arn"])}
    else:
        # null outputs are left out of `terraform output`
        assert out.get("status_event_bus_name") is None and out.get("status_event_bus_arn") is None
        assert f"{name}-events" not in buses
        assert env["LOOM_EVENT_BUS_NAME"] == ""  # present, empty: the engine publishes nothing
        assert put_events == set()


# -- idempotency ----------------------------------------------------------------------------------
def test_plan_after_apply_finds_nothing_to_change(deployed: Deployed, lab: Any) -> None:
    # when
    drift = lab.applied(deployed.spec.key).drift

    # then
    assert drift == "", f"a plan right after the apply still wants changes:\n{drift[-3000:]}"


# -- destroy (conftest runs it last) --------------------------------------------------------------------------
def _leftovers(emulator: Any) -> dict[str, list[str]]:
    lam, iam = emulator.client("lambda"), emulator.client("iam")
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    return {
        "tables": emulator.client("dynamodb").list_tables()["TableNames"],
        "queues": emulator.client("sqs").list_queues().get("QueueUrls", []),
        "functions": [f["FunctionName"] for f in lam.list_functions()["Functions"]],
        "event source mappings": [m["UUID"] for m in lam.list_event_source_mappings()["EventSourceMappings"]],
        "roles": roles,
        "role policies": [p for r in roles for p in iam.list_role_policies(RoleName=r)["PolicyNames"]],
        "rules": [r["Name"] for r in emulator.client("events").list_rules()["Rules"]],
        "log groups": [g["logGroupName"] for g in emulator.client("logs").describe_log_groups()["logGroups"]],
        "alarms": [a["AlarmName"] for a in emulator.client("cloudwatch").describe_alarms()["MetricAlarms"]],
        "event buses": [b["Name"] for b in emulator.client("events").list_event_buses()["EventBuses"]
                        if b["Name"] != "default"],
    }


def test_destroy_leaves_nothing(lab: Any) -> None:
    # given: every apply finished (envs/local, envs/dev, examples/vendored), and the emulator holds their resources
    applied = lab.applies
    for env in applied:
        lab.outputs(env)
    before = _leftovers(lab.emulator)
    n = len(applied)
    # envs/local is applied with schedules (conftest's LOCAL_SCHEDULES): one queue more, its schedules' DLQ
    assert len(before["functions"]) == 3 * n and len(before["queues"]) == 2 * n + 1 and len(before["tables"]) == n

    managed = set().union(*(lab.workspaces[env].managed_ids("aws_lambda_event_source_mapping") for env in applied))
    retried = {m["UUID"] for m in retried_creates(
        lab.emulator.client("lambda").list_event_source_mappings()["EventSourceMappings"], managed)}

    # when
    lab.destroyed = True
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(lab.workspaces[env].destroy) for env in applied]:
            f.result()

    # then: nothing is left but what no Terraform state ever held (a create the provider sent twice, see above)
    after = _leftovers(lab.emulator)
    after["event source mappings"] = [u for u in after["event source mappings"] if u not in retried]
    assert {kind: names for kind, names in after.items() if names} == {}
