"""Static checks of terraform/envs: the environments differ only in what differs.

envs/dev and envs/prod are the same files but for ``terraform.tfvars`` (the environment's values) and
the backend example's key; ``outputs.tf`` is the same in all three environments. No Terraform run:
these read the files as text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ENVS = Path(__file__).resolve().parents[2] / "terraform" / "envs"
# Files that are an environment's own; every other file of dev and prod is the same in both.
OWN_FILES = {"terraform.tfvars", "backend.hcl.example", "emulator_override.tf.example"}
_ASSIGNED = re.compile(r"^([a-z_]+)\s*=", re.M)
_NO_DEFAULT = re.compile(r'^variable "([a-z_]+)" \{\n(?:  (?!default\b).*\n)*\}', re.M)


def _files(env: str) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((ENVS / env).iterdir())
            if p.is_file() and (p.suffix == ".tf" or p.name in OWN_FILES)}


def test_dev_and_prod_differ_only_in_their_own_files() -> None:
    # given
    dev, prod = _files("dev"), _files("prod")

    # when
    shared = (set(dev) & set(prod)) - OWN_FILES
    differing = sorted(name for name in shared if dev[name] != prod[name])

    # then
    assert {"main.tf", "variables.tf", "outputs.tf", "providers.tf", "versions.tf"} <= shared
    assert set(dev) - OWN_FILES == set(prod) - OWN_FILES, "a .tf file exists in only one of dev and prod"
    assert differing == [], f"{differing} differ between envs/dev and envs/prod: move the value to terraform.tfvars"


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_tfvars_set_exactly_the_variables_without_a_default(env: str) -> None:
    # given
    files = _files(env)
    required = set(_NO_DEFAULT.findall(files["variables.tf"]))

    # when
    assigned = set(_ASSIGNED.findall(files["terraform.tfvars"]))

    # then
    assert required, "the environment's own variables have no default in variables.tf"
    assert assigned == required


def test_outputs_are_the_same_in_every_environment() -> None:
    # given
    outputs = {env.name: (env / "outputs.tf").read_text(encoding="utf-8") for env in sorted(ENVS.iterdir())}

    # then
    assert set(outputs) == {"local", "dev", "prod"}
    assert len(set(outputs.values())) == 1, "envs/*/outputs.tf differ: an environment's extra output goes in its main.tf"
    assert 'output "function_url"' in outputs["dev"]  # `loom --env-dir` reads it by name
