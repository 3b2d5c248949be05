"""Inputs the modules must refuse, with a message saying what to do.

Terraform reports single-variable validations at `validate` time and cross-variable ones (which read
other inputs) only at `plan` time, so there is one configuration per phase; each holds one module
instance per broken rule and every message must appear.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(600)

PROVIDER = """
provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
}
"""


def _workspace(lab: Any, name: str, main_tf: str) -> Any:
    path = lab.tree / "checks" / name
    path.mkdir(parents=True)
    (path / "main.tf").write_text(main_tf + PROVIDER, encoding="utf-8")
    return type(lab.workspaces["local"])(f"checks/{name}", path, lab.workspaces["local"].env)


def _failure(ws: Any, *args: str) -> str:
    ws.init()
    with pytest.raises(Exception, match=r"failed \(exit 1\)"):
        ws.run(*args, "-no-color")
    return " ".join(ws.log_path.read_text(encoding="utf-8").split())


def test_validate_rejects_low_receive_count_wildcard_action_and_bad_shard_count(lab: Any, dist: Path) -> None:
    # given
    ws = _workspace(lab, "single-variable", f"""
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
""")

    # when
    log = _failure(ws, "validate")

    # then
    assert "max_receive_count must be a whole number between 5 and 1000" in log
    assert 'An IAM action contains "*"' in log
    assert "shard_count must be a whole number between 1 and 256" in log


def test_plan_rejects_short_dlq_retention_throttling_concurrency_and_missing_zip(lab: Any, dist: Path) -> None:
    # given
    ws = _workspace(lab, "cross-variable", f"""
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
""")

    # when
    log = _failure(ws, "plan", "-input=false")

    # then
    assert "dlq_message_retention_s must be longer than message_retention_s" in log
    assert "reserved_concurrency must be at least sqs_trigger.maximum_concurrency" in log
    assert "The Lambda zip does not exist: build it first (`make build`" in log


def test_local_env_without_zips_says_run_make_build_local(lab: Any, tmp_path: Path) -> None:
    # given: envs/local pointed at an empty dist directory
    envs = lab.tree / "envs"
    shutil.copytree(envs / "local", envs / "local-nozip",
                    ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "terraform-test.log"))
    ws = type(lab.workspaces["local"])("envs/local (no zips)", envs / "local-nozip", lab.workspaces["local"].env,
                                       {"endpoint": lab.emulator.endpoint, "dist_dir": str(tmp_path)})

    # when
    log = _failure(ws, "plan", "-input=false", *ws.var_args())

    # then
    assert "make build-local" in log
