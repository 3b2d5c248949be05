"""Versions end to end (DESIGN.md "Versions"): version 2 of a workflow is deployed while version-1 executions
sleep, and each finishes on its own definition, through the deployed functions.

A team's workflow package (built here, outside packages/, as a platform team ships its own) is built into
the Lambda zips twice: release 1.0 registers version 1 of ``versioned_orders``; release 2.0 registers
version 1 unchanged beside a version 2 with other steps. Release 1.0 is deployed on the session's stack in
place (the table, the queues and every execution in flight stay), and two executions start and fall asleep
for an hour. Release 2.0 is deployed over it with ``terraform apply`` of the new zips, as a team deploys: a
new version of every function's code. ``loom versions check`` refuses a build without version 1 (naming its two
live executions) and passes release 2.0's own zip; ``GET /workflows`` counts them on version 1; a new start
runs version 2; the sleepers are woken; all three end COMPLETED, each on its own steps. The suite's own zips
are deployed again at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = ("worker", "sweeper", "control-plane")
WORKFLOW = "versioned_orders"
SLEEP_S = 3600

PYPROJECT = """[build-system]
requires = ["hatchling==1.27.0"]
build-backend = "hatchling.build"

[project]
name = "versioned-flows"
version = "{release}"
requires-python = ">=3.11"
dependencies = ["loom-engine-core>=0.1"]

[tool.hatch.build.targets.wheel]
packages = ["src/versioned_flows"]

[project.entry-points."loom.workflows"]
versioned = "versioned_flows"
"""

VERSION_1 = f"""
from engine_core import sleep, workflow


def reserve(ctx):
    return {{"reserved_by": "v1"}}


def ship_v1(ctx):
    return {{"shipped_by": "v1"}}


@workflow("{WORKFLOW}")
class OrdersV1:
    steps = [reserve, sleep(seconds={SLEEP_S}), ship_v1]
"""

VERSION_2 = f"""

def pack_v2(ctx):
    return {{"packed_by": "v2"}}


def ship_v2(ctx):
    return {{"shipped_by": "v2"}}


@workflow("{WORKFLOW}", version=2)
class OrdersV2:
    steps = [reserve, sleep(seconds=2), pack_v2, ship_v2]
"""


def _wheel(tmp: Path, release: str, source: str) -> Path:
    root = tmp / f"versioned-flows-{release}"
    package = root / "src" / "versioned_flows"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(release=release))
    (package / "__init__.py").write_text(source)
    out = tmp / f"wheels-{release}"
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(root)],
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1580601600"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def _zips(tmp: Path, release: str, wheel: Path) -> Path:
    zips = tmp / f"zips-{release}"
    for function in FUNCTIONS:
        done = subprocess.run(
            [sys.executable, "tools/build_lambda.py", "zip", function, "--runtime", "local", "--wheels", "dist/wheels",
             "--extra-wheels", str(wheel), "--extra-lock", str(tmp / f"extra-{release}.lock"),
             "--out", str(zips / f"{function}.zip")],
            cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    return zips


def _wait(api, eid: str, statuses: tuple[str, ...], timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        _, e = api.request("GET", f"/executions/{eid}")
        if e["status"] in statuses or time.monotonic() > deadline:
            return e
        time.sleep(0.25)


def _loom(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loom_cli.main", "--url", url, "--no-sign", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(1200)
def test_version_2_deployed_while_version_1_executions_sleep_both_finish_on_their_own_definitions(loom, tmp_path):
    # given: release 1.0 (version 1) and release 2.0 (versions 1 and 2) of the team's package, built into zips
    zips_1 = _zips(tmp_path, "1.0", _wheel(tmp_path, "1.0", VERSION_1))
    zips_2 = _zips(tmp_path, "2.0", _wheel(tmp_path, "2.0", VERSION_1 + VERSION_2))
    api = loom.api
    with loom.deployed(zips_1):
        # and release 1.0 deployed, with two executions asleep on version 1
        sleepers = []
        for n in range(2):
            status, started = api.request("POST", "/executions", {"workflow": WORKFLOW, "input": {"order": n}})
            assert status == 202, started
            sleepers.append(started["execution_id"])
        for eid in sleepers:
            e = _wait(api, eid, ("SLEEPING", "FAILED", "COMPLETED"))
            assert (e["status"], e["workflow_version"]) == ("SLEEPING", 1), e

        # when: release 2.0 is deployed over it (every function's code replaced; the table and the queues kept)
        deployed = loom.stack.redeploy(zips_2, via="terraform")  # as a team deploys: make build, terraform apply
        assert {role: f.zip_path.parent for role, f in deployed.functions.items()} == {
            role: zips_2.resolve() for role in ("worker", "sweeper", "control-plane")}
        # then: the deploy check refuses a build without version 1, naming its live executions, and passes 2.0's zip
        only_2 = tmp_path / "only-v2.json"
        only_2.write_text(json.dumps({"workflows": {WORKFLOW: {"2": "x"}}}))
        refused = _loom(loom.url, "versions", "check", "--manifest", str(only_2))
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"version 1 of workflow '{WORKFLOW}': 2 live execution(s) run on it" in refused.stderr
        built = tmp_path / "release-2.json"
        made = subprocess.run([sys.executable, "-m", "engine_core.manifest", "--zip", str(zips_2 / "worker.zip"),
                               "--out", str(built)], capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        passed = _loom(loom.url, "versions", "check", "--manifest", str(built))
        assert passed.returncode == 0, passed.stdout + passed.stderr
        # GET /workflows: both versions, the sleepers counted on version 1
        status, listing = api.request("GET", "/workflows")
        (orders,) = [w for w in listing["workflows"] if w["name"] == WORKFLOW]
        assert status == 200 and orders["version"] == 2
        live = {v["version"]: v["live"] for v in orders["versions"]}
        assert live[1] == 2 and live[2] == 0, orders["versions"]
        # a new start takes version 2
        status, started = api.request("POST", "/executions", {"workflow": WORKFLOW, "input": {"order": 9}})
        assert status == 202, started
        newer = started["execution_id"]
        # the sleepers' hour is skipped with the operator's wake (on the new deployment)
        for eid in sleepers:
            status, woken = api.request("POST", f"/executions/{eid}/wake")
            assert status == 200, woken
        # and every execution ends COMPLETED on the definition it started on
        for eid in sleepers:
            e = _wait(api, eid, ("COMPLETED", "FAILED"))
            assert (e["status"], e["workflow_version"]) == ("COMPLETED", 1), e
            assert e["steps"] == ["reserve", f"sleep_{SLEEP_S}s", "ship_v1"] and e["context"]["shipped_by"] == "v1"
            _, history = api.request("GET", f"/executions/{eid}/history")
            assert [s["name"] for s in history["steps"]] == ["reserve", f"sleep_{SLEEP_S}s", "ship_v1"]
        e = _wait(api, newer, ("COMPLETED", "FAILED"))
        assert (e["status"], e["workflow_version"]) == ("COMPLETED", 2), e
        assert e["context"] == {"order": 9, "reserved_by": "v1", "packed_by": "v2", "shipped_by": "v2"}
        _, history = api.request("GET", f"/executions/{newer}/history")
        assert [s["name"] for s in history["steps"]] == ["reserve", "sleep_2s", "pack_v2", "ship_v2"]
