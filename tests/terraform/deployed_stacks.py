"""What the session's applies of envs/local and envs/dev are, read back from the emulator: shared by
test_emulator.py and test_emulator_iam.py (conftest's ``deployed`` fixture hands out one per env)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HANDLERS = {
    "worker": "loom_worker.handler.handler",
    "sweeper": "loom_sweeper.handler.handler",
    "control_plane": "loom_control_plane.handler.handler",
}


@dataclass(frozen=True)
class EnvSpec:
    key: str
    name: str
    runtime: str
    dist_subdir: str
    esm_enabled: bool
    status_events: bool
    """conftest applies dev with status_events = { enabled = true } and local with the default (off)."""
    workflow_access: bool
    """conftest applies local with an allow-list (terraform_cases.LOCAL_WORKFLOW_ACCESS) and dev without one."""


SPECS = {
    "local": EnvSpec("local", "loom-local", "python3.11", "local", esm_enabled=False, status_events=False,
                     workflow_access=True),
    "dev": EnvSpec("dev", "loom-dev", "python3.12", "lambda", esm_enabled=True, status_events=True,
                   workflow_access=False),
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


def role_statements(d: Deployed, role: str) -> list[dict[str, Any]]:
    iam = d.client("iam")
    role_name = d.config(role)["Role"].split("/")[-1]
    assert iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"] == []
    statements = []
    for policy_name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
        doc = json.loads(doc) if isinstance(doc, str) else doc
        statements += doc["Statement"]
    return statements


def grants_of(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    grants = set()
    for s in statements:
        assert s["Effect"] == "Allow"
        actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        resources = [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
        grants |= {(a, r) for a in actions for r in resources}
    return grants
