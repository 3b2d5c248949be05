"""Static checks of terraform/: each module documents its interface, each checkov skip its reason.

No Terraform run: these read the .tf files as text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TERRAFORM = Path(__file__).resolve().parents[2] / "terraform"
MODULES = sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir())
_BLOCK = re.compile(r'^(variable|output) "([^"]+)" \{', re.M)
_SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?$", re.M)


def _declared(module: Path, kind: str) -> set[str]:
    return {name for tf in module.glob("*.tf") for k, name in _BLOCK.findall(tf.read_text(encoding="utf-8"))
            if k == kind}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_has_the_standard_files(module: Path) -> None:
    # then
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (module / name).is_file(), f"{module.name}/{name} is missing"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_readme_lists_every_input_and_output(module: Path) -> None:
    # given
    readme = (module / "README.md").read_text(encoding="utf-8")

    # when
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme, re.M))

    # then
    assert _declared(module, "variable") <= documented, f"inputs missing: {_declared(module, 'variable') - documented}"
    assert _declared(module, "output") <= documented, f"outputs missing: {_declared(module, 'output') - documented}"
    assert documented <= _declared(module, "variable") | _declared(module, "output"), "README lists removed names"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_variables_are_typed_and_described(module: Path) -> None:
    # given
    text = (module / "variables.tf").read_text(encoding="utf-8")

    # when
    blocks = re.split(r'^variable "', text, flags=re.M)[1:]

    # then
    assert blocks
    for block in blocks:
        name = block.split('"', 1)[0]
        assert re.search(r"^  description\s*=", block, re.M), f"{module.name}: variable {name} has no description"
        assert re.search(r"^  type\s*=", block, re.M), f"{module.name}: variable {name} has no type"


def test_every_checkov_skip_states_its_reason() -> None:
    # when
    skips = [(tf.relative_to(TERRAFORM), check, reason) for tf in TERRAFORM.rglob("*.tf")
             if ".terraform" not in tf.parts for check, reason in _SKIP.findall(tf.read_text(encoding="utf-8"))]

    # then
    assert skips
    unexplained = [(str(f), c) for f, c, reason in skips if len((reason or "").strip()) < 20]
    assert unexplained == []


def test_readme_status_events_sample_is_the_validated_example() -> None:
    # given: the HCL sample of terraform/README.md's "Status-change events" section
    readme = (TERRAFORM / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Status-change events", 1)[1].split("\n## ", 1)[0]
    (sample,) = [b for b in re.findall(r"```hcl\n(.*?)```", section, re.S) if "aws_cloudwatch_event_rule" in b]

    # when: the part of examples/status-events between its sample markers (make tf-validate validates it)
    example = (TERRAFORM / "examples" / "status-events" / "main.tf").read_text(encoding="utf-8")
    tested = example.split("# -- sample: begin", 1)[1].split("\n", 1)[1].split("# -- sample: end", 1)[0]

    # then
    assert sample.strip() == tested.strip(), "README sample and examples/status-events differ: copy one into the other"
    for field in ('"execution_id"', '"workflow"', '"status"', '"error"', '"current_step"', '"step_count"',
                  '"started_at"', '"ended_at"', '"by"', '"source": "loom"', '"detail-type": "Loom Execution Status Change"'):
        assert field in section, f"the documented event lacks {field}"


def test_documented_local_visibility_timeout_is_six_local_worker_timeouts() -> None:
    # given: envs/local's worker timeout, of which the queue's visibility timeout is six
    variables = (TERRAFORM / "envs" / "local" / "variables.tf").read_text(encoding="utf-8")
    worker_timeout_s = int(re.search(r'variable "worker_timeout_s" \{.*?default\s*=\s*(\d+)', variables, re.S).group(1))

    # when
    readme = (TERRAFORM / "README.md").read_text(encoding="utf-8")
    runtime = (TERRAFORM.parent / "packages" / "local-runtime" / "README.md").read_text(encoding="utf-8")

    # then
    assert f"{6 * worker_timeout_s} s in\n  `local`" in readme
    assert f"queue's {6 * worker_timeout_s} s visibility timeout" in runtime


@pytest.mark.parametrize("role, row", [("worker", "worker"), ("sweeper", "sweeper"), ("control_plane", "control plane")])
def test_module_readme_iam_table_names_every_dynamodb_action_the_role_is_granted(role: str, row: str) -> None:
    # given: the role's statements in iam.tf (permissions boundaries are built from this table: deploying.md)
    iam = (TERRAFORM / "modules" / "loom" / "iam.tf").read_text(encoding="utf-8")
    block = iam.split(f"  {role}_statements = concat([", 1)[1].split("\n  ], ", 1)[0]
    granted = set(re.findall(r'"dynamodb:([A-Za-z]+)"', block))
    indexes = {"GSI1" if "gsi_name" in line else "GSI2" for line in block.splitlines() if "/index/" in line}

    # when
    readme = (TERRAFORM / "modules" / "loom" / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith(f"| {row} |")]
    documented = set(re.findall(r"`([A-Z][A-Za-z]+)`", line.split("|")[2]))

    # then
    assert granted and granted <= documented, f"{row}: granted {sorted(granted)}, the table says {line}"
    assert all(f"table/index/{index}" in line for index in indexes), line


def test_operator_policy_uses_the_kms_key_when_one_encrypts_the_queues() -> None:
    iam = (TERRAFORM / "modules" / "loom" / "iam.tf").read_text(encoding="utf-8")
    loom = (TERRAFORM / "modules" / "loom" / "main.tf").read_text(encoding="utf-8")
    assert "kms_master_key_id       = var.kms_key_arn" in loom  # the step queue and its DLQ are encrypted with it
    policy = iam.split("operator_policy_json = ", 1)[1].split("\n}", 1)[0]
    assert "local.operator_kms_statements" in policy
    statement = iam.split("operator_kms_statements = ", 1)[1].split("}]", 1)[0]
    assert '"kms:Decrypt", "kms:GenerateDataKey"' in statement and "var.kms_key_arn" in statement
