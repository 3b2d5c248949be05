"""examples/vendored: a platform team's root module calling the vendored composition with what account
guardrails ask for (a permissions boundary and role path, the worker in private subnets, the AWS calls
of its workflow steps) and a per-workflow allow-list.

Planned as it is (the static checks), then applied to moto, with the team's network and boundary policy
created there first, and read back with boto3. conftest destroys it with the environments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loom_control_plane.access import AccessPolicy
from loom_control_plane.errors import ApiError

pytestmark = pytest.mark.timeout(1200)

NAME = "loom-orders"
REGION = "us-east-1"  # the emulator's (conftest passes it as the example's region)
ROLES = {"worker": f"{NAME}-worker-{REGION}", "sweeper": f"{NAME}-sweeper-{REGION}",
         "control_plane": f"{NAME}-control-plane-{REGION}"}
VPC_POLICY = "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
STEP_STATEMENTS = [
    {"Sid": "ReadOrderDocuments", "Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": ["arn:aws:s3:::acme-orders/incoming/*"]},
    {"Sid": "ReadPaymentApiKey", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"],
     "Resource": ["arn:aws:secretsmanager:us-east-1:123456789012:secret:payments/api-key-AbCdEf"]},
]
APP = "arn:aws:iam::123456789012:role/orders-app"  # conftest's orders_app_role_arn; oncall_role_arn is role/oncall


def _resources(module: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(module.get("resources", []))
    for child in module.get("child_modules", []):
        found += _resources(child)
    return found


def _of(resources: list[dict[str, Any]], rtype: str) -> dict[str, dict[str, Any]]:
    return {r["address"]: r["values"] for r in resources if r["type"] == rtype}


def _role_key(address: str) -> str:
    return address.split("module.loom.module.")[1].split(".")[0]


def _allowed(policy: AccessPolicy, action: str, workflow: str, caller: str) -> bool:
    try:
        policy.check(action, workflow, caller)
    except ApiError as refused:
        assert refused.status == 403, refused.message
        return False
    return True


def _check_access(raw: str) -> None:
    """The allow-list the control plane gets, as its own parser reads it."""
    policy = AccessPolicy.parse(raw)
    session = "arn:aws:sts::123456789012:assumed-role/oncall/ana"
    assert policy.problem is None
    assert _allowed(policy, "start", "order_fulfillment", APP)
    assert not _allowed(policy, "start", "order_fulfillment", session)
    assert _allowed(policy, "operate", "order_fulfillment", session) and _allowed(policy, "send", "order_fulfillment", session)
    assert not _allowed(policy, "operate", "order_fulfillment", APP)
    assert _allowed(policy, "start", "expense_approval", session) and not _allowed(policy, "start", "expense_approval", APP)


# -- the plan -----------------------------------------------------------------------------------------
def test_vendored_plan_sets_boundary_role_path_and_region_in_role_names(lab: Any) -> None:
    # when
    roles = _of(_resources(lab.plan("vendored")["planned_values"]["root_module"]), "aws_iam_role")

    # then
    assert {_role_key(a): r["name"] for a, r in roles.items()} == ROLES
    for role in roles.values():
        assert role["path"] == "/loom/"
        assert role["permissions_boundary"] == lab.vendored_inputs["permissions_boundary_arn"]


def test_vendored_plan_puts_only_the_worker_in_the_vpc_with_its_managed_policy(lab: Any) -> None:
    # given
    resources = _resources(lab.plan("vendored")["planned_values"]["root_module"])

    # when
    functions = {_role_key(a): f for a, f in _of(resources, "aws_lambda_function").items()}
    attached = {(_role_key(a), p["policy_arn"]) for a, p in _of(resources, "aws_iam_role_policy_attachment").items()}

    # then
    (vpc,) = functions["worker"]["vpc_config"]
    assert sorted(vpc["subnet_ids"]) == sorted(json.loads(lab.vendored_inputs["private_subnet_ids"]))
    assert sorted(vpc["security_group_ids"]) == json.loads(lab.vendored_inputs["worker_security_group_ids"])
    assert functions["sweeper"]["vpc_config"] == [] and functions["control_plane"]["vpc_config"] == []
    assert attached == {("worker", VPC_POLICY)}
    assert {k: f["architectures"] for k, f in functions.items()} == {k: ["x86_64"] for k in ROLES}


def test_vendored_plan_gives_the_worker_its_step_statements_in_a_policy_of_their_own(lab: Any) -> None:
    # given
    resources = _resources(lab.plan("vendored")["planned_values"]["root_module"])

    # when
    # (Loom's own policies name ARNs known only after the apply; the team's statements are known now)
    policies = {r["name"]: json.loads(r["policy"]) for r in _of(resources, "aws_iam_role_policy").values()
                if "policy" in r}
    recursion = _of(resources, "aws_lambda_function_recursion_config")

    # then: the team's statements in a policy of their own, on the worker only
    assert policies[f"{NAME}-worker-workflow-steps"]["Statement"] == STEP_STATEMENTS
    assert {n for n in policies if n.endswith("-workflow-steps")} == {f"{NAME}-worker-workflow-steps"}
    assert [r["recursive_loop"] for r in recursion.values()] == ["Allow"]  # as it is: the emulator apply drops it


def test_vendored_plan_outputs_what_the_cli_reads(lab: Any) -> None:
    # when
    outputs = lab.plan("vendored")["configuration"]["root_module"]["outputs"]

    # then: `loom --env-dir` reads function_url, `loom dlq` queue_url, dlq_url and region
    assert {"function_url", "queue_url", "dlq_url", "region"} <= set(outputs)


# -- applied to moto ----------------------------------------------------------------------------------
@pytest.fixture
def applied(lab: Any) -> dict[str, Any]:
    if lab.destroyed:
        pytest.fail("the applies were already destroyed: conftest runs test_destroy_leaves_nothing last")
    assert lab.vendored_inputs["orders_app_role_arn"] == APP
    return lab.outputs("vendored")


def test_vendored_apply_creates_roles_with_path_boundary_and_their_policies(lab: Any, applied: dict[str, Any]) -> None:
    # given
    iam = lab.emulator.client("iam")

    # when
    roles = {key: iam.get_role(RoleName=name)["Role"] for key, name in ROLES.items()}
    attached = {key: [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]]
                for key, name in ROLES.items()}
    inline = {key: sorted(iam.list_role_policies(RoleName=name)["PolicyNames"]) for key, name in ROLES.items()}
    steps = iam.get_role_policy(RoleName=ROLES["worker"], PolicyName=f"{NAME}-worker-workflow-steps")["PolicyDocument"]

    # then
    for role in roles.values():
        assert role["Path"] == "/loom/"
        assert role["PermissionsBoundary"]["PermissionsBoundaryArn"] == lab.vendored_inputs["permissions_boundary_arn"]
    assert attached == {"worker": [VPC_POLICY], "sweeper": [], "control_plane": []}
    assert inline["worker"] == [f"{NAME}-worker-least-privilege", f"{NAME}-worker-workflow-steps"]
    assert inline["sweeper"] == [f"{NAME}-sweeper-least-privilege"]
    assert (json.loads(steps) if isinstance(steps, str) else steps)["Statement"] == STEP_STATEMENTS
    assert sorted(applied["role_names"].values()) == sorted(ROLES.values())


def test_vendored_apply_runs_the_worker_in_the_team_subnets_and_the_allow_list_in_the_control_plane(
        lab: Any, applied: dict[str, Any]) -> None:
    # given
    lam = lab.emulator.client("lambda")

    # when
    configs = {key: lam.get_function(FunctionName=f"{NAME}-{key.replace('_', '-')}")["Configuration"] for key in ROLES}

    # then
    vpc = configs["worker"]["VpcConfig"]
    assert sorted(vpc["SubnetIds"]) == sorted(json.loads(lab.vendored_inputs["private_subnet_ids"]))
    assert vpc["SecurityGroupIds"] == json.loads(lab.vendored_inputs["worker_security_group_ids"])
    assert not configs["sweeper"].get("VpcConfig", {}).get("SubnetIds")
    assert {k: c["Role"] for k, c in configs.items()} == {
        k: f"arn:aws:iam::123456789012:role/loom/{name}" for k, name in ROLES.items()}
    _check_access(configs["control_plane"]["Environment"]["Variables"]["LOOM_WORKFLOW_ACCESS"])
    assert not {"LOOM_WORKFLOW_ACCESS"} & (set(configs["worker"]["Environment"]["Variables"])
                                           | set(configs["sweeper"]["Environment"]["Variables"]))


def test_vendored_apply_outputs_the_queues_and_url_the_cli_reads(lab: Any, applied: dict[str, Any]) -> None:
    # given
    sqs = lab.emulator.client("sqs")

    # then
    assert applied["queue_url"] == sqs.get_queue_url(QueueName=f"{NAME}-steps")["QueueUrl"]
    assert applied["dlq_url"] == sqs.get_queue_url(QueueName=f"{NAME}-steps-dlq")["QueueUrl"]
    assert applied["function_url"].startswith("http") and applied["region"] == REGION
    assert lab.applied("vendored").drift == "", f"a plan right after the apply wants changes:\n{lab.applied('vendored').drift}"


def test_stacks_in_one_account_and_region_keep_metrics_alarms_and_roles_apart(lab: Any) -> None:
    # given: three stacks applied to one account and region
    lam, cloudwatch = lab.emulator.client("lambda"), lab.emulator.client("cloudwatch")
    seen: dict[str, set[tuple[str, str]]] = {}
    roles: list[str] = []

    # when
    for stack in lab.applies:
        out = lab.outputs(stack)
        for fn in out["function_names"].values():
            config = lam.get_function(FunctionName=fn)["Configuration"]
            env = config["Environment"]["Variables"]
            seen.setdefault(stack, set()).add((env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"]))
            roles.append(config["Role"].rsplit("/", 1)[1])
        (alarm,) = cloudwatch.describe_alarms(AlarmNames=[f"{out['table_name']}-executions-failed"])["MetricAlarms"]
        read = {(q["MetricStat"]["Metric"]["Namespace"], d["Value"]) for q in alarm["Metrics"] if "MetricStat" in q
                for d in q["MetricStat"]["Metric"]["Dimensions"]}
        # then: each stack's failed-executions alarm reads its own series only
        assert read == seen[stack], stack

    # then: no namespace/service pair and no role name is shared by two stacks
    pairs = [pair for stack in lab.applies for pair in seen[stack]]
    assert len(lab.applies) == 3 and len(pairs) == len(set(pairs)) == 9
    assert len({ns for ns, _ in pairs}) == 3
    assert len(roles) == len(set(roles)) == 9 and all(r.endswith(f"-{REGION}") for r in roles)
