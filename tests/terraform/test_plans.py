"""Static checks of envs/dev and envs/prod from `terraform show -json` of their plans.

These are the settings the emulator cannot hold or that only matter on AWS: above all the worker's
recursive-loop setting (moto answers PutFunctionRecursionConfig with 404, so the emulator applies run
without it). The plans are made from the unchanged environments; only the backend is swapped for
local state, and the provider talks to the test's moto server instead of AWS.
"""

from __future__ import annotations

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
        (gsi,) = table["global_secondary_index"]
        assert (table["read_capacity"] + gsi["read_capacity"], table["write_capacity"] + gsi["write_capacity"]) == (25, 25)


def test_modules_with_create_false_plan_nothing_and_output_null(lab: Any) -> None:
    # when: terraform/examples/disabled instantiates every module with create = false
    plan = lab.plan("disabled")

    # then
    assert [c["address"] for c in plan.get("resource_changes", []) if c["change"]["actions"] != ["no-op"]] == []
    outputs = {k: v.get("value") for k, v in plan["planned_values"].get("outputs", {}).items()}
    assert outputs["table_name"] is None
    assert outputs["loom_outputs"] and all(v is None for v in outputs["loom_outputs"].values())
