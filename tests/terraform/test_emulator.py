"""envs/local and envs/dev applied to moto's server, read back with boto3, then destroyed.

Each check reads what the emulator holds, not what Terraform says it created. The last test destroys
both environments and asserts that nothing is left; it must stay last in this file.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# One apply of each env takes a minute or two (SQS queue creation waits ~25 s per queue); the first
# test to need it waits for it.
pytestmark = pytest.mark.timeout(1200)

REQUIRED_ENV = {
    "LOOM_TABLE_NAME", "LOOM_QUEUE_URL", "LOOM_DLQ_URL", "LOOM_SHARDS", "LOOM_LEASE_S", "LOOM_RETENTION_DAYS",
    "LOOM_MAX_STEPS", "LOOM_MAX_TOTAL_ATTEMPTS", "LOOM_SWEEP_MAX_ITEMS", "LOOM_FUNCTION_TIMEOUT_S", "LOOM_MAX_CHAIN_STEPS", "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE", "LOG_LEVEL", "LOOM_EVENT_BUS_NAME",
}
HANDLERS = {
    "worker": "loom_worker.handler.handler",
    "sweeper": "loom_sweeper.handler.handler",
    "control_plane": "loom_control_plane.handler.handler",
}
SERVICE_NAMES = {"worker": "loom-worker", "sweeper": "loom-sweeper", "control_plane": "loom-control-plane"}
ZIP_NAMES = {"worker": "worker.zip", "sweeper": "sweeper.zip", "control_plane": "control-plane.zip"}
RESERVED = {"worker": 10, "sweeper": 1, "control_plane": 5}


@dataclass(frozen=True)
class EnvSpec:
    key: str
    name: str
    runtime: str
    dist_subdir: str
    esm_enabled: bool
    status_events: bool
    """conftest applies dev with status_events = { enabled = true } and local with the default (off)."""


SPECS = {
    "local": EnvSpec("local", "loom-local", "python3.11", "local", esm_enabled=False, status_events=False),
    "dev": EnvSpec("dev", "loom-dev", "python3.12", "lambda", esm_enabled=True, status_events=True),
}


@dataclass(frozen=True)
class Deployed:
    spec: EnvSpec
    out: dict[str, Any]
    emulator: Any

    def client(self, service: str) -> Any:
        return self.emulator.client(service)

    @property
    def account(self) -> str:
        return self.out["table_arn"].split(":")[4]

    def function(self, role: str) -> dict[str, Any]:
        return self.client("lambda").get_function(FunctionName=self.out["function_names"][role])

    def config(self, role: str) -> dict[str, Any]:
        return self.function(role)["Configuration"]


# Function-scoped on purpose: a module-scoped parametrized fixture would let pytest reorder tests
# around test_destroy_leaves_nothing. The applies themselves happen once per session (see conftest).
@pytest.fixture(params=sorted(SPECS))
def deployed(request: pytest.FixtureRequest, lab: Any) -> Deployed:
    spec = SPECS[request.param]
    if lab.destroyed:
        pytest.fail("the environments were already destroyed: keep test_destroy_leaves_nothing last in this file")
    return Deployed(spec, lab.outputs(spec.key), lab.emulator)


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
    assert env["POWERTOOLS_SERVICE_NAME"] == SERVICE_NAMES[role]
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Loom"


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


def test_worker_event_source_mapping_reports_batch_item_failures_with_max_concurrency(deployed: Deployed) -> None:
    # when
    mappings = [m for m in deployed.client("lambda").list_event_source_mappings()["EventSourceMappings"]
                if m["FunctionArn"] == deployed.out["function_arns"]["worker"]]

    # then
    (m,) = mappings
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


# -- IAM ------------------------------------------------------------------------------------------
def _role_statements(d: Deployed, role: str) -> list[dict[str, Any]]:
    iam = d.client("iam")
    role_name = d.config(role)["Role"].split("/")[-1]
    assert iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"] == []
    statements = []
    for policy_name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
        doc = json.loads(doc) if isinstance(doc, str) else doc
        statements += doc["Statement"]
    return statements


def _grants(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    grants = set()
    for s in statements:
        assert s["Effect"] == "Allow"
        actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        resources = [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
        grants |= {(a, r) for a in actions for r in resources}
    return grants


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_role_policy_has_no_wildcard_action_or_resource(deployed: Deployed, role: str) -> None:
    # given
    own_log_streams = (f"arn:aws:logs:us-east-1:{deployed.account}:log-group:"
                       f"/aws/lambda/{deployed.out['function_names'][role]}:*")

    # when
    grants = _grants(_role_statements(deployed, role))

    # then
    assert grants
    for action, resource in grants:
        assert "*" not in action, f"wildcard action {action}"
        assert resource != "*", f"{action} on every resource"
        # The only "*" allowed: the stream names of the function's own log group.
        assert "*" not in resource or resource == own_log_streams, f"{action} on {resource}"


@pytest.mark.parametrize("role", sorted(HANDLERS))
def test_role_policy_grants_exactly_the_contract(deployed: Deployed, role: str) -> None:
    # given
    out = deployed.out
    table, queue, dlq = out["table_arn"], out["queue_arn"], out["dlq_arn"]
    logs = {(a, f"arn:aws:logs:us-east-1:{deployed.account}:log-group:/aws/lambda/{out['function_names'][role]}:*")
            for a in ("logs:CreateLogStream", "logs:PutLogEvents")}
    expected = {
        "worker": {(f"dynamodb:{a}", table) for a in ("GetItem", "PutItem", "UpdateItem", "Query")}
        | {(f"sqs:{a}", queue) for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes",
                                          "ChangeMessageVisibility", "SendMessage")}
        | {("sqs:SendMessage", dlq)},
        "sweeper": {("dynamodb:Query", f"{table}/index/GSI1")}
        | {(f"dynamodb:{a}", table) for a in ("GetItem", "PutItem", "UpdateItem", "Query")}
        | {("sqs:SendMessage", queue), ("sqs:SendMessage", dlq)},
        "control_plane": {(f"dynamodb:{a}", table) for a in ("PutItem", "GetItem", "UpdateItem", "Query")}
        | {("dynamodb:Query", f"{table}/index/GSI2"), ("sqs:SendMessage", queue)},
    }[role] | logs
    if deployed.spec.status_events:
        expected |= {("events:PutEvents", out["status_event_bus_arn"])}

    # when
    grants = _grants(_role_statements(deployed, role))

    # then
    assert grants == expected
    assert not any(a == "dynamodb:DeleteItem" for a, _ in grants)


_ENGINE = Path(__file__).resolve().parents[2] / "packages" / "engine-core" / "src" / "engine_core"
# boto3 operation -> the IAM actions it needs. TransactWriteItems is authorized per item action.
_IAM_FOR = {
    "get_item": {"dynamodb:GetItem"}, "put_item": {"dynamodb:PutItem"}, "update_item": {"dynamodb:UpdateItem"},
    "query": {"dynamodb:Query"}, "transact_write_items": {"dynamodb:PutItem", "dynamodb:UpdateItem"},
    "send_message": {"sqs:SendMessage"},
}


def test_worker_role_covers_every_aws_call_engine_core_makes(deployed: Deployed) -> None:
    # given: the boto3 operations engine-core's adapters call (the worker runs every path)
    sources = [_ENGINE / "adapters" / name for name in ("dynamodb.py", "_dynamo_branches.py", "sqs.py")]
    calls = {op for src in sources for op in re.findall(r"(?:self|store)\.client\.([a-z_]+)\(", src.read_text("utf-8"))}
    unknown = calls - set(_IAM_FOR)
    assert not unknown, (f"engine-core now calls {sorted(unknown)}: grant it in terraform/modules/loom/iam.tf "
                         "(least privilege, per function) and add it to _IAM_FOR here")
    transact_kinds = {kind for src in sources[:2]
                      for kind in re.findall(r'\{"(Put|Update|Delete|ConditionCheck)":', src.read_text("utf-8"))}
    assert transact_kinds <= {"Put", "Update"}, f"transactions now hold {transact_kinds}: grant the item actions"

    # when
    actions = {a for a, _ in _grants(_role_statements(deployed, "worker"))}

    # then
    assert set().union(*(_IAM_FOR[op] for op in calls)) <= actions


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
        *(f"{name}-{k}-errors" for k in labels.values()), *(f"{name}-{k}-throttles" for k in labels.values())}
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
        ("Loom", "ExecutionsFailed", (("service", s),), "Sum") for s in ("loom-control-plane", "loom-sweeper", "loom-worker")]
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
    put_events = {(a, r) for a, r in _grants(_role_statements(deployed, role)) if a.startswith("events:")}

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


# -- destroy (keep last) --------------------------------------------------------------------------
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
    # given: both applies finished, and the emulator holds their resources
    for env in SPECS:
        lab.outputs(env)
    before = _leftovers(lab.emulator)
    assert len(before["functions"]) == 6 and len(before["queues"]) == 4 and len(before["tables"]) == 2

    # when
    lab.destroyed = True
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(lab.workspaces[env].destroy) for env in SPECS]:
            f.result()

    # then
    after = _leftovers(lab.emulator)
    assert {kind: names for kind, names in after.items() if names} == {}
