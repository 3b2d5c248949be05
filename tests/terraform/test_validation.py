"""Inputs the modules must refuse, each with a message saying what to do.

The broken configurations live in conftest.py (they run in the background with the applies); each
test here checks that every expected message appears in the failed run's output.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(1200)
REPO = Path(__file__).resolve().parents[2]


def test_validate_rejects_low_receive_count_wildcard_action_bad_shard_count_and_bad_event_bus(lab: Any) -> None:
    # when
    log = lab.failure("single-variable")

    # then
    assert "max_receive_count must be a whole number between 5 and 1000" in log
    assert 'An IAM action contains "*"' in log
    assert "shard_count must be a whole number between 1 and 256" in log
    assert "status_events.event_bus_name must be null (create <name>-events), an event bus name" in log
    assert "max_steps must be a whole number between 1 and 100000." in log


def test_validate_rejects_wildcard_worker_statements_an_unknown_architecture_and_bad_access_and_boundary(lab: Any) -> None:
    # when
    log = lab.failure("single-variable")

    # then: each with what to do instead
    assert 'An extra policy statement has an IAM action with "*": list the exact actions' in log
    assert 'An extra policy statement has Resource "*": name the ARNs' in log
    assert "attach a policy to the role (output role_names.worker) outside the module" in log
    assert "architecture must be x86_64 or arm64 (and the zips built for it: `make build LAMBDA_ARCH=arm64`)" in log
    assert "workflow_access: every workflow name and principal must be non-empty with no whitespace" in log
    assert "iam_permissions_boundary_arn must be an IAM policy ARN" in log
    assert "extra_environment_variables: their keys and values come to more than 3,072 characters" in " ".join(log.split())


def test_plan_rejects_short_dlq_retention_throttling_concurrency_and_missing_zip(lab: Any) -> None:
    # when
    log = lab.failure("cross-variable")

    # then
    assert "dlq_message_retention_s must be longer than message_retention_s" in log
    assert "reserved_concurrency must be at least sqs_trigger.maximum_concurrency" in log
    assert "The Lambda zip does not exist: build it first (`make build`" in log
    # 4,095 characters of keys and values, 4,108 bytes as Lambda measures them (the variables as JSON)
    assert "f3: its environment variables are 4108 bytes as Lambda measures them (written out as JSON), over " \
           "Lambda's 4 KB" in " ".join(log.split())


def test_local_env_without_zips_says_run_make_build_local(lab: Any) -> None:
    # when
    log = lab.failure("local-nozip")

    # then
    assert "Lambda zips missing in" in log
    assert "run `make build-local` first" in log


def test_every_root_make_test_leaves_unvalidated_is_planned_or_applied_by_this_suite(lab: Any) -> None:
    # `make test` runs `terraform validate` only in the roots this suite does not plan or apply
    # (mk/terraform.mk TF_PLANNED_BY_SUITE): a plan validates its root and every module it calls
    makefile = (REPO / "mk" / "terraform.mk").read_text()
    listed = re.search(r"^TF_PLANNED_BY_SUITE :=((?:.*\\\n)*.*)$", makefile, re.M)
    assert listed, "mk/terraform.mk no longer defines TF_PLANNED_BY_SUITE"
    roots = listed.group(1).replace("\\\n", " ").split()
    suite = {"terraform/" + ws.path.relative_to(lab.tree).as_posix() for ws in lab.workspaces.values()}
    assert roots and [r for r in roots if r not in suite] == [], (roots, sorted(suite))
    assert all((REPO / r).is_dir() for r in roots), roots
