"""The Terraform step: which variables an environment takes, where the CLI configuration comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom_local import terraform
from loom_local.terraform import TerraformError


def _env(tmp_path: Path) -> Path:
    env = tmp_path / "env"
    env.mkdir()
    (env / "variables.tf").write_text('variable "endpoint" {\n  type = string\n}\n\n  variable "lease_s" {}\n')
    (env / "main.tf").write_text('# variable "commented_out" {}\nlocals {}\n')
    return env


def test_declared_variables_reads_every_tf_file(tmp_path):
    assert terraform.declared_variables(_env(tmp_path)) == {"endpoint", "lease_s"}


def test_an_undeclared_variable_is_refused_before_terraform_runs(tmp_path):
    env = _env(tmp_path)
    with pytest.raises(TerraformError, match="does not declare the variable.s. worker_timeout_s"):
        terraform.apply(env, tmp_path / "state", {"endpoint": "x", "worker_timeout_s": "60"}, tmp_path / "tf.log",
                        terraform="/bin/false")
    assert not (tmp_path / "tf.log").exists()


def test_an_empty_directory_is_not_an_environment(tmp_path):
    with pytest.raises(TerraformError, match="has no Terraform configuration"):
        terraform.apply(tmp_path, tmp_path / "state", {}, tmp_path / "tf.log")


def test_a_failing_terraform_says_where_its_output_is(tmp_path):
    env = _env(tmp_path)
    fake = tmp_path / "terraform"
    fake.write_text("#!/bin/sh\necho 'Error: something broke'\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(TerraformError) as exc:
        terraform.apply(env, tmp_path / "state", {"endpoint": "x"}, tmp_path / "tf.log", terraform=str(fake))
    assert "failed (exit 3)" in str(exc.value) and "Error: something broke" in str(exc.value)
    assert str(tmp_path / "tf.log") in str(exc.value)


def test_the_cli_configuration_comes_from_the_option_then_the_environment_then_the_build(tmp_path, monkeypatch):
    explicit, from_env, built = tmp_path / "a.rc", tmp_path / "b.rc", tmp_path / "build" / "terraform" / "terraformrc"
    built.parent.mkdir(parents=True)
    for f in (explicit, from_env, built):
        f.write_text("")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(from_env))
    assert terraform.cli_config(tmp_path, explicit) == explicit
    assert terraform.cli_config(tmp_path) == from_env
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(tmp_path / "missing.rc"))  # as on this machine by default
    assert terraform.cli_config(tmp_path) == built
    built.unlink()
    with pytest.raises(TerraformError, match="make tf-config"):
        terraform.cli_config(tmp_path)
