"""The Terraform the session writes into its scratch copy of terraform/: overrides of the roots it
plans and applies, the broken inputs the modules must refuse, and the team's own resources the vendored
example expects to find in the account."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

BACKEND_OVERRIDE = """\
# Written by tests/terraform: plan with local state instead of the S3 backend. Nothing else changes.
terraform {
  backend "local" {}
}
"""

OFFLINE_PROVIDER = """
provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
}
"""

# Inputs the modules must refuse. Terraform checks single-variable validations at `validate` time and
# cross-variable ones (which read other inputs) only at `plan` time, and stops after the first phase
# that fails; so one configuration per phase, one module instance per broken rule.
SINGLE_VARIABLE_CASES = """
module "receive_count_4" {{
  source             = "../../modules/queue"
  name               = "q"
  consumer_timeout_s = 60
  max_receive_count  = 4
}}

module "wildcard_action" {{
  source            = "../../modules/function"
  name              = "f"
  handler           = "loom_worker.handler.handler"
  zip_path          = "{dist}/local/worker.zip"
  policy_statements = [{{ sid = "All", actions = ["dynamodb:*"], resources = ["arn:aws:dynamodb:us-east-1:123456789012:table/t"] }}]
}}

module "zero_shards" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  shard_count = 0
}}

module "bad_event_bus" {{
  source        = "../../modules/loom"
  lambda_zips   = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  status_events = {{ enabled = true, event_bus_name = "not a bus!" }}
}}

module "wildcard_worker_statement" {{
  source                   = "../../modules/loom"
  lambda_zips              = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  worker_policy_statements = [{{ sid = "All", actions = ["s3:*"], resources = ["arn:aws:s3:::b/*"] }}]
}}

module "star_resource_worker_statement" {{
  source                   = "../../modules/loom"
  lambda_zips              = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  worker_policy_statements = [{{ sid = "Metrics", actions = ["cloudwatch:PutMetricData"], resources = ["*"] }}]
}}

module "max_steps_over_the_engines_cap" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  max_steps   = 100001
}}

module "bad_architecture" {{
  source       = "../../modules/loom"
  lambda_zips  = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  architecture = "x86"
}}

module "bad_access_principal" {{
  source          = "../../modules/loom"
  lambda_zips     = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  workflow_access = {{ order_fulfillment = {{ start = ["two words"], operate = [] }} }}
}}

module "schedule_bad_cron" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  schedules   = [{{ name = "nightly", workflow = "report", expression = "cron(0 2 * * *)" }}]
}}

module "schedule_both_days" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  schedules   = [{{ name = "nightly", workflow = "report", expression = "cron(0 2 * * MON *)" }}]
}}

module "schedule_bad_overlap" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  schedules   = [{{ name = "nightly", workflow = "report", expression = "rate(1 day)", overlap = "queue" }}]
}}

module "schedule_duplicate_names" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  schedules = [
    {{ name = "nightly", workflow = "report", expression = "rate(1 day)" }},
    {{ name = "nightly", workflow = "other", expression = "rate(2 days)" }},
  ]
}}

module "schedule_empty_workflow" {{
  source      = "../../modules/loom"
  lambda_zips = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  schedules   = [{{ name = "nightly", workflow = "", expression = "rate(5 minute)", input = "[1, 2]" }}]
}}

module "bad_boundary" {{
  source                       = "../../modules/loom"
  lambda_zips                  = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  iam_permissions_boundary_arn = "platform-boundary"
}}

module "extra_environment_too_large" {{
  source                      = "../../modules/loom"
  lambda_zips                 = {{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}
  extra_environment_variables = {{ CATALOG = format("%3100s", "x") }}
}}
"""

# Schedule expressions the module's validations must take and refuse, beside what the control plane's
# parser (engine_core.schedules.expressions) does with each: tests/terraform/test_emulator_schedules.py
# checks the two agree. Refused: (expression, what the refusal says).
CRON_TAKEN = [
    "cron(0 9 ? * MON-FRI *)", "cron(0,30 9-17 ? * mon-fri *)", "cron(*/15 * L * ? *)", "cron(0 9 15W * ? *)",
    "cron(0 9 ? * 6L 2026-2030)", "cron(0 9 ? * MON#2 *)", "cron(0 2 * * ? *)", "cron(5/10 * ? JAN-MAR,DEC SUN,SAT *)",
    "cron(0 9 LW * ? *)", "cron(0 9 ? * L *)", "cron(59 23 31 12 ? 2199)", "cron(0 0 1 1 ? 1970)",
    "at(2028-02-29T23:59:59)", "rate(1 minute)", "rate(36500 days)", "rate(52560000 minutes)",
]
_RANGE = "schedules: a cron field is out of its range or form"
_BACKWARDS = "schedules: a cron range runs backwards (such as FRI-MON or 22-2)"
CRON_REFUSED = [
    ("cron(61 9 ? * MON *)", _RANGE), ("cron(0 24 ? * MON *)", _RANGE), ("cron(0 9 32 * ? *)", _RANGE),
    ("cron(0 9 ? * MON#6 *)", _RANGE), ("cron(*/0 9 ? * MON *)", _RANGE), ("cron(0 9 ? 13 MON *)", _RANGE),
    ("cron(0 9 ? * MON 2300)", _RANGE), ("cron(0 9 ? * 8 *)", _RANGE), ("cron(0 9 1,L * ? *)", _RANGE),
    ("cron(0 9 ? * FRI-MON *)", _BACKWARDS), ("cron(0 22-2 ? * MON *)", _BACKWARDS), ("cron(0 9 ? DEC-JAN MON *)", _BACKWARDS),
    ("at(2026-02-30T00:00:00)", "schedules: at(yyyy-mm-ddThh:mm:ss) must name a real date and time"),
    ("rate(3000000 days)", "schedules: a rate's period is at most 36,500 days"),
    ("rate(876001 hours)", "schedules: a rate's period is at most 36,500 days"),
]


def _schedule_cases() -> str:
    taken = ", ".join(f'{{{{ name = "s{i}", workflow = "report", expression = "{e}" }}}}' for i, e in enumerate(CRON_TAKEN))
    blocks = [f"""
module "schedule_forms_taken" {{{{
  source      = "../../modules/loom"
  lambda_zips = {{{{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}}}
  schedules   = [{taken}]
}}}}
"""]
    blocks += [f"""
module "schedule_refused_{i}" {{{{
  source      = "../../modules/loom"
  lambda_zips = {{{{ worker = "w.zip", sweeper = "s.zip", control_plane = "c.zip" }}}}
  schedules   = [{{{{ name = "nightly", workflow = "report", expression = "{e}" }}}}]
}}}}
""" for i, (e, _) in enumerate(CRON_REFUSED)]
    return "".join(blocks)


SINGLE_VARIABLE_CASES += _schedule_cases()

# envs/local is applied with these (tests/terraform/test_emulator_schedules.py reads them back).
LOCAL_SCHEDULES = [
    {"name": "nightly-greeting", "workflow": "flaky_greeting", "expression": "cron(0 2 * * ? *)",
     "timezone": "Europe/Paris", "input": json.dumps({"name": "Ada", "failures": 0}), "overlap": "skip"},
    {"name": "hourly.sync", "workflow": "flaky_greeting", "expression": "rate(1 hour)", "overlap": "allow",
     "enabled": False},
]

# envs/local gets an allow-list (dev does not): the emulator holds both renderings of LOOM_WORKFLOW_ACCESS.
LOCAL_WORKFLOW_ACCESS = {
    "order_fulfillment": {"start": ["local"], "operate": ["arn:aws:iam::123456789012:role/oncall"]},
    "expense_approval": {"start": ["arn:aws:iam::123456789012:role/expenses-app"], "operate": ["local"],
                         "send": ["arn:aws:iam::123456789012:role/approvals-*"]},
}

CROSS_VARIABLE_CASES = """
module "dlq_not_longer" {{
  source                  = "../../modules/queue"
  name                    = "q"
  consumer_timeout_s      = 60
  message_retention_s     = 86400
  dlq_message_retention_s = 86400
}}

module "reserved_below_mapping" {{
  source               = "../../modules/function"
  name                 = "f1"
  handler              = "loom_worker.handler.handler"
  zip_path             = "{dist}/local/worker.zip"
  reserved_concurrency = 2
  sqs_trigger          = {{ queue_arn = "arn:aws:sqs:us-east-1:123456789012:q", maximum_concurrency = 5 }}
}}

module "missing_zip" {{
  source   = "../../modules/function"
  name     = "f2"
  handler  = "loom_worker.handler.handler"
  zip_path = "{dist}/nowhere/worker.zip"
}}

module "environment_over_4kb" {{
  source                = "../../modules/function"
  name                  = "f3"
  handler               = "loom_worker.handler.handler"
  zip_path              = "{dist}/local/worker.zip"
  environment_variables = {{ LOOM_TABLE_NAME = "t", CATALOG = format("%4072s", "x") }}
}}
"""


# status_events with an existing bus, by name and by ARN: no bus created, the ARN built or kept.
EXISTING_BUS_CASES = """
module "bus_by_name" {{
  source        = "../../modules/loom"
  name          = "ev-by-name"
  lambda_zips   = {{ worker = "{dist}/local/worker.zip", sweeper = "{dist}/local/sweeper.zip", control_plane = "{dist}/local/control-plane.zip" }}
  status_events = {{ enabled = true, event_bus_name = "orders" }}
  create_alarms = false
}}

module "bus_by_arn" {{
  source        = "../../modules/loom"
  name          = "ev-by-arn"
  lambda_zips   = {{ worker = "{dist}/local/worker.zip", sweeper = "{dist}/local/sweeper.zip", control_plane = "{dist}/local/control-plane.zip" }}
  status_events = {{ enabled = true, event_bus_name = "arn:aws:events:eu-west-1:210987654321:event-bus/shared" }}
  create_alarms = false
}}

output "by_name" {{
  value = {{ name = module.bus_by_name.status_event_bus_name, arn = module.bus_by_name.status_event_bus_arn }}
}}

output "by_arn" {{
  value = {{ name = module.bus_by_arn.status_event_bus_name, arn = module.bus_by_arn.status_event_bus_arn }}
}}
"""


# The vendored example applied to the emulator: moto answers PutFunctionRecursionConfig with 404, and
# the session destroys what it applied. Nothing else of the team's configuration changes.
VENDORED_OVERRIDE = """\
# Written by tests/terraform: the vendored example applied to moto.
module "loom" {
  manage_recursion_config     = false
  deletion_protection_enabled = false
}
"""

VENDORED_PRINCIPALS = {
    "orders_app_role_arn": "arn:aws:iam::123456789012:role/orders-app",
    "oncall_role_arn": "arn:aws:iam::123456789012:role/oncall",
}


def vendored_inputs(client: Callable[[str], Any], region: str, dist: Path) -> dict[str, str]:
    """What a team's account already has (its network, its boundary policy), made in the emulator, as the
    example's variables."""
    ec2, iam = client("ec2"), client("iam")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.42.{n}.0/24")["Subnet"]["SubnetId"] for n in (1, 2)]
    group = ec2.create_security_group(GroupName="loom-orders-worker", Description="Loom worker", VpcId=vpc)["GroupId"]
    boundary = iam.create_policy(PolicyName="platform-boundary", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["dynamodb:*", "sqs:*", "logs:*", "events:*", "ec2:*", "s3:GetObject",
                                                     "secretsmanager:GetSecretValue"], "Resource": "*"}]}))["Policy"]["Arn"]
    return {
        "region": region,
        "artifacts_dir": str(dist / "lambda"),
        "permissions_boundary_arn": boundary,
        "private_subnet_ids": json.dumps(subnets),
        "worker_security_group_ids": json.dumps([group]),
        "documents_bucket": "acme-orders",
        "payment_api_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:payments/api-key-AbCdEf",
        **VENDORED_PRINCIPALS,
    }
