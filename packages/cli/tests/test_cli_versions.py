"""``loom`` and versions: start --version, redrive --to-version, `loom workflows` with each version's live
executions, and `loom versions check` against a build's manifest (the control plane faked over HTTP)."""

from __future__ import annotations

import json

import pytest
from test_cli import EID, api  # noqa: F401 - the fake control plane's fixture

from loom_cli.main import main

LISTING = {
    "workflows": [{"name": "orders", "version": 2, "retry": {"max_attempts": 3, "base": 2, "max_delay": 60},
                   "steps": [{"name": "a"}, {"name": "c"}], "style": "steps",
                   "versions": [{"version": 1, "fingerprint": "f1", "style": "steps", "steps": ["a", "b"], "live": 4},
                                {"version": 2, "fingerprint": "f2", "style": "steps", "steps": ["a", "c"], "live": 1}]}],
    "live": {"complete": True, "read": 7},
    "undeployed": [{"workflow": "billing", "version": 3, "live": 2}],
}


@pytest.fixture
def listing(api):  # noqa: F811
    def route(method, path, query, body):
        if method == "GET" and path == "/workflows":
            return 200, LISTING
        if method == "POST" and path == f"/executions/{EID}/redrive":
            return 202, {**api.execution(), "status": "RUNNING", "workflow_version": body["to_version"], "redrives": 1}
        return None

    api.extra_route = route
    return api


def manifest(tmp_path, workflows) -> str:
    path = tmp_path / "workflows.json"
    path.write_text(json.dumps({"workflows": workflows}))
    return str(path)


def test_versions_start_and_redrive_send_the_version_asked_for(listing, capsys):
    assert main(["--url", listing.url, "start", "orders", "--version", "1"]) == 0
    assert main(["--url", listing.url, "redrive", EID, "--to-version", "2"]) == 0
    start, redrive = (r for r in listing.requests if r["method"] == "POST")
    assert json.loads(start["raw"])["version"] == 1 and json.loads(redrive["raw"]) == {"to_version": 2}
    assert "on version 2" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--url", listing.url, "start", "orders", "--version", "0"])


def test_versions_workflows_lists_each_version_with_its_live_executions_and_warns_of_undeployed_ones(listing, capsys):
    assert main(["--url", listing.url, "workflows"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("orders")]
    assert [(r[1], r[2], r[3]) for r in rows] == [("2", "1", "2"), ("1", "4", "2")]
    assert "a > c" in out and "a > b" in out
    assert "WARNING: 2 live execution(s) run on version 3 of 'billing', which is not deployed" in out


def test_versions_check_refuses_a_build_that_drops_a_live_version_naming_it_with_its_count(listing, tmp_path, capsys):
    # given: a build that keeps only version 2 of orders, and billing version 3
    drops = manifest(tmp_path, {"orders": {"2": "f2"}, "billing": {"3": "fb"}})
    # when / then: refused (exit 1), naming version 1 and its 4 live executions
    assert main(["--url", listing.url, "versions", "check", "--manifest", drops]) == 1
    err = capsys.readouterr().err
    assert "refused: version 1 of workflow 'orders': 4 live execution(s) run on it" in err
    assert "would strand 4 live execution(s)" in err
    # --warn-only says the same, loudly, and lets the deploy go on
    assert main(["--url", listing.url, "versions", "check", "--manifest", drops, "--warn-only"]) == 0
    assert "WARNING: version 1 of workflow 'orders': 4 live execution(s)" in capsys.readouterr().err


def test_versions_check_passes_a_build_that_keeps_every_live_version_and_warns_of_a_changed_one(listing, tmp_path, capsys):
    keeps = manifest(tmp_path, {"orders": {"1": "f1", "2": "f2"}, "billing": {"3": "fb"}})
    assert main(["--url", listing.url, "versions", "check", "--manifest", keeps]) == 0
    assert "ok: every version the 7 live execution(s) run on is in this build" in capsys.readouterr().out
    changed = manifest(tmp_path, {"orders": {"1": "other", "2": "f2"}, "billing": {"3": "fb"}})
    assert main(["--url", listing.url, "versions", "check", "--manifest", changed]) == 0
    err = capsys.readouterr().err
    assert "version 1 of workflow 'orders' changes its step list in this build, with 4 live" in err
    assert "ship the change as version 3" in err  # past version 2, which the build and the stack already have


def test_versions_check_with_an_unreadable_manifest_says_how_to_write_one(listing, tmp_path, capsys):
    assert main(["--url", listing.url, "versions", "check", "--manifest", str(tmp_path / "none.json")]) == 2
    assert "python -m engine_core.manifest" in capsys.readouterr().err


def test_versions_check_with_a_manifest_of_another_shape_shows_the_shape_it_needs(listing, tmp_path, capsys):
    wrong = tmp_path / "wrong.json"
    wrong.write_text("{}")
    assert main(["--url", listing.url, "versions", "check", "--manifest", str(wrong)]) == 2
    assert 'does not hold {"workflows": {name: {version: fingerprint}}};' in capsys.readouterr().err


def test_versions_console_shows_each_version_with_its_live_executions_and_the_pinned_version_of_an_execution():
    from loom_cli.console import pages
    from loom_cli.sdk.models import Execution, History, Workflow

    # given: a workflow with two versions, and an execution pinned to the older one
    wf = Workflow.model_validate(LISTING["workflows"][0])
    e = Execution.model_validate({"execution_id": EID, "workflow": "orders", "status": "SLEEPING", "current_step": 1,
                                  "version": 3, "workflow_version": 1, "steps": ["a", "b"], "step_count": 2})
    # when
    listing = pages.workflows_page([wf], "t")
    fragment = pages.execution_fragment(e, History.model_validate({"execution_id": EID, "steps": []}), None)
    # then
    assert "versions: v2 (newest): 1 live · v1: 4 live" in listing
    assert "<dt>version</dt><dd>1 (pinned: a → b)</dd>" in fragment


def test_versions_a_code_first_workflow_s_older_version_names_its_own_function(api, capsys):  # noqa: F811
    from loom_cli.console import pages
    from loom_cli.sdk.models import Workflow

    # given: a code-first workflow whose version 1 is another function than its newest
    code = {"name": "report", "version": 2, "style": "code", "function": "flows.report_v2", "steps": [],
            "versions": [{"version": 1, "style": "code", "steps": [], "function": "flows.report", "live": 2},
                         {"version": 2, "style": "code", "steps": [], "function": "flows.report_v2", "live": 0}]}
    api.extra_route = lambda method, path, query, body: (200, {"workflows": [code]}) if path == "/workflows" else None
    # when
    assert main(["--url", api.url, "workflows"]) == 0
    out = capsys.readouterr().out
    page = pages.workflows_page([Workflow.model_validate(code)], "t")
    # then: the CLI's row and the console's card name each version's function
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("report")}
    assert rows["2"].endswith("code-first: flows.report_v2") and rows["1"].endswith("code-first: flows.report")
    assert "code-first: <code>flows.report_v2</code>" in page and "v1: 2 live (flows.report)" in page
