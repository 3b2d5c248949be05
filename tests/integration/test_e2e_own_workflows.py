"""A platform team's own workflows, end to end: a package that lives outside packages/ (tests/fixtures/
acme-flows) is built into the Lambda zips with the documented option, deployed on the local stack,
started, woken out of its 24-hour sleep with the operator's wake, and read back from the history.
Nothing in this repository is edited to ship it. The zips are deployed on the session's stack in place
(``terraform apply`` of the new build), and the suite's own zips again afterwards."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = ("worker", "sweeper", "control-plane")


def _fixture():
    spec = importlib.util.spec_from_file_location("acme_flows_fixture", REPO / "tests/fixtures/acme_flows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
def test_acme_flows_from_outside_the_repo_build_deploy_start_wake_and_history(loom, tmp_path):
    # given: the team's wheel, built outside packages/, and the Loom zips built with it (hash-locked)
    acme = _fixture()
    wheel = acme.build_wheel(tmp_path / "acme-wheels")
    zips = tmp_path / "zips"
    lock = tmp_path / "acme-extra.lock"
    for function in FUNCTIONS:
        done = subprocess.run(
            [sys.executable, "tools/build_lambda.py", "zip", function, "--runtime", "local", "--wheels", "dist/wheels",
             "--extra-wheels", str(wheel), "--extra-lock", str(lock), "--out", str(zips / f"{function}.zip")],
            cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    with loom.deployed(zips):
        api = loom.api
        # when: the team's workflow is there, and runs
        status, workflows = api.request("GET", "/workflows")
        assert status == 200 and acme.WORKFLOW in [w["name"] for w in workflows["workflows"]]
        status, started = api.request("POST", "/executions", {"workflow": acme.WORKFLOW, "input": {"account": "a-1"}})
        assert status == 202, started
        eid = started["execution_id"]
        deadline = time.monotonic() + 90
        while True:
            _, e = api.request("GET", f"/executions/{eid}")
            if e["status"] == "SLEEPING" or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert e["status"] == "SLEEPING", e
        # the 24-hour sleep, skipped with the operator's wake
        status, woken = api.request("POST", f"/executions/{eid}/wake")
        assert status == 200, woken
        deadline = time.monotonic() + 90
        while e["status"] not in ("COMPLETED", "FAILED") and time.monotonic() < deadline:
            time.sleep(0.25)
            _, e = api.request("GET", f"/executions/{eid}")
        # then
        assert e["status"] == "COMPLETED", e
        assert e["context"]["welcomed"] == "acct-a-1" and e["context"]["opened_by"] == "acme_flows"
        _, history = api.request("GET", f"/executions/{eid}/history")
        assert [s["name"] for s in history["steps"]] == ["open_account", "sleep_86400s", "send_welcome"]
        assert [op["op"] for op in history["operations"]] == ["wake"]
