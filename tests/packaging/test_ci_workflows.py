"""The GitHub Actions workflows (.github/workflows) do what docs/releasing.md says, and run nothing but
make targets, so CI never runs a command a developer cannot run with make.

`make test-ci` runs this file after jactionlint has linted the same workflows.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
_PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in doc:  # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def _workflow(name: str) -> dict[str, Any]:
    return _load(ROOT / ".github" / "workflows" / name)


def _steps(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job, step) for job, spec in doc["jobs"].items() for step in spec.get("steps", [])]


def _make_targets() -> set[str]:
    """Every target make knows in this repository (its database, without running a recipe)."""
    done = subprocess.run(["make", "-C", str(ROOT), "-pRrq", "--no-print-directory", ":"], capture_output=True,
                          text=True, timeout=60)
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(?!=)", done.stdout, re.M)}


def _commands(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    found = []
    for job, step in _steps(doc):
        for line in step.get("run", "").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                found.append((job, shlex.split(line)))
    return found


def test_workflows_when_listed_are_ci_and_release_and_every_job_has_a_timeout():
    # then
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "release.yml"}
    for path in WORKFLOWS:
        for job, spec in _load(path)["jobs"].items():
            assert isinstance(spec.get("timeout-minutes"), int), f"{path.name}: job {job} has no timeout-minutes"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_command_a_workflow_runs_is_a_make_target(path: Path):
    # given
    targets = _make_targets()
    commands = _commands(_load(path))

    # then: `make <target>... [VAR=value]...` and nothing else, each target one make knows
    assert commands, f"{path.name} runs nothing"
    for job, words in commands:
        assert words[0] == "make", f"{path.name} ({job}) runs `{shlex.join(words)}`: make it a make target"
        named = [w for w in words[1:] if not _ASSIGNMENT.match(w)]
        assert named and all(not w.startswith("-") for w in named), f"{path.name} ({job}): `{shlex.join(words)}`"
        missing = [t for t in named if t not in targets]
        assert not missing, f"{path.name} ({job}) runs make targets that do not exist: {missing}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_and_names_its_version(path: Path):
    # given
    text = path.read_text(encoding="utf-8")

    # when
    uses = re.findall(r"uses:\s*(\S+)(.*)$", text, re.M)

    # then
    assert uses
    for action, rest in uses:
        assert _PINNED.match(action), f"{path.name}: {action} is not pinned to a full commit SHA"
        assert re.search(r"#\s*v\d+\.\d+\.\d+", rest), f"{path.name}: {action} has no `# vX.Y.Z` comment"


def test_ci_runs_make_test_on_pushes_and_pull_requests_with_full_history_and_caches():
    # given
    ci = _workflow("ci.yml")
    (job,) = ci["jobs"].values()
    steps = job["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    caches = {s["with"]["path"] for s in steps if s.get("uses", "").startswith("actions/cache@")}

    # then
    assert set(ci["on"]) == {"push", "pull_request"}
    assert runs[-1] == "make test"
    assert runs.index("make tf-mirror") < runs.index("make test") and "make ci-deps" in runs
    (checkout,) = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0  # earlier engine-core wheels are rebuilt from git history
    assert caches == {ci["env"]["PIP_CACHE_DIR"], ci["env"]["TF_PLUGIN_MIRROR"]}
    assert ci["permissions"] == {"contents": "read"}


def test_release_builds_on_both_tags_and_publishes_engine_core_only_when_an_index_is_configured():
    # given
    release = _workflow("release.yml")
    jobs = release["jobs"]

    # then
    assert release["on"] == {"push": {"tags": ["engine-core-v*", "loom-v*"]}}
    assert [s["run"] for s in jobs["build"]["steps"] if "run" in s] == ["make release"]
    assert jobs["build"]["env"]["RELEASE_TAG"] == "${{ github.ref_name }}"
    (checkout,) = [s for s in jobs["build"]["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0
    assert not [s for s in jobs["build"]["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert [s["run"] for s in jobs["github-release"]["steps"] if "run" in s] == ["make github-release"]
    assert jobs["github-release"]["permissions"] == {"contents": "write"}
    publish = jobs["publish-engine-core"]
    assert "startsWith(github.ref_name, 'engine-core-v')" in publish["if"]
    assert "vars.ENGINE_CORE_INDEX_URL != ''" in publish["if"]
    assert publish["env"]["TWINE_PASSWORD"] == "${{ secrets.ENGINE_CORE_INDEX_TOKEN }}"
    assert [s["run"] for s in publish["steps"] if "run" in s] == ["make publish-engine-core"]
    assert release["permissions"] == {"contents": "read"}


def test_tf_mirror_version_when_compared_is_the_one_the_environments_pin():
    # given
    pinned = {re.search(r'^\s+version\s*=\s*"([^"]+)"', p.read_text(), re.M).group(1)
              for p in (ROOT / "terraform" / "envs").glob("*/versions.tf")}

    # when
    mirrored = re.search(r"^TF_AWS_PROVIDER_VERSION := (\S+)$", (ROOT / "mk" / "ci.mk").read_text(), re.M).group(1)

    # then
    assert pinned == {mirrored}


def test_tf_mirror_when_the_mirror_is_missing_mirrors_from_the_registry_with_the_default_cli_config(tmp_path):
    # when: a dry run (prints the commands, runs none)
    done = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "tf-mirror",
                           f"TF_PLUGIN_MIRROR={tmp_path}/mirror"], capture_output=True, text=True, check=True)

    # then: the registry (no TF_CLI_CONFIG_FILE) into the mirror, for the platform CI runs on
    script = " ".join(done.stdout.replace("\\\n", " ").split())
    assert "env -u TF_CLI_CONFIG_FILE terraform -chdir=terraform/envs/dev providers mirror -platform=linux_amd64" in script
    assert f'"{tmp_path}/mirror"' in script


def test_publish_engine_core_when_not_configured_refuses_before_installing_anything(tmp_path):
    # when
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "publish-engine-core",
                           "RELEASE_TAG=engine-core-v0.0.1", "ENGINE_CORE_INDEX_URL=", f"TWINE_VENV={tmp_path}/venv"],
                          capture_output=True, text=True)
    wrong_tag = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "publish-engine-core",
                                "RELEASE_TAG=loom-v0.0.1"], capture_output=True, text=True)

    # then
    assert done.returncode != 0 and "ENGINE_CORE_INDEX_URL is empty" in done.stderr
    assert wrong_tag.returncode != 0 and "publishes an engine-core-vX.Y.Z release" in wrong_tag.stderr
    assert not (tmp_path / "venv").exists()


def test_github_release_without_a_tag_or_a_built_release_refuses_before_calling_gh(tmp_path):
    # when
    untagged = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "github-release", "RELEASE_TAG="],
                              capture_output=True, text=True)
    unbuilt = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "github-release",
                              "RELEASE_TAG=loom-v0.0.1", f"RELEASE_DIR={tmp_path}/release"],
                             capture_output=True, text=True)
    dry = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "github-release",
                          "RELEASE_TAG=loom-v0.0.1"], capture_output=True, text=True, check=True)

    # then: what is missing and the command that makes it; the release itself is gh's, checked first
    assert untagged.returncode != 0 and "usage: make github-release RELEASE_TAG=" in untagged.stderr
    assert unbuilt.returncode != 0 and "run make release RELEASE_TAG=loom-v0.0.1 first" in unbuilt.stderr
    assert "sha256sum --check --strict SHA256SUMS" in dry.stdout
    assert 'gh release create "loom-v0.0.1" --verify-tag' in dry.stdout
