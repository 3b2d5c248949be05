"""Versions in the API (DESIGN.md "Versions"): a start naming a version, GET /workflows with each version and
its live executions, the status's pinned step list, and redrive onto another version. The route functions run
on the engine's memory store with a manual clock (the handler's wiring is covered by the other files)."""

from __future__ import annotations

import json

import pytest
from engine_core import PermanentStepError, Registry, sleep, workflow
from engine_core.adapters.bootstrap import Runtime
from engine_core.testing import LocalRunner
from loom_control_plane import routes
from loom_control_plane.errors import ApiError, error_for
from loom_control_plane.routes import Request

FIXED = {"on": False}


def a(ctx):
    return {"a": 1}


def b(ctx):
    if not FIXED["on"]:
        raise PermanentStepError("feed missing")
    return {"b": 1}


def c(ctx):
    return {"c": 1}


def deploy(versions=(1, 2)) -> Registry:
    registry = Registry()
    if 1 in versions:
        @workflow("billing", registry=registry)
        class One:
            steps = [a, sleep(hours=1), b]
    if 2 in versions:
        @workflow("billing", registry=registry, version=2)
        class Two:
            steps = [a, sleep(hours=1), c, b]
    return registry


@pytest.fixture
def setup():
    FIXED["on"] = False
    runner = LocalRunner(deploy())
    rt = Runtime.around(runner.engine, runner.sweeper)
    return runner, rt


def send(rt, route, body=None, query=None, **params):
    try:
        return route(rt, Request(params=params, body=None if body is None else json.dumps(body), query=query))
    except Exception as exc:  # as the handler answers it
        error = error_for(exc)
        if error is None:
            raise
        return error.status, error.body()


def test_start_of_a_version_with_more_steps_than_the_cap_is_refused_409_and_writes_nothing():
    # given: version 2 has four steps, one more than LOOM_MAX_STEPS here
    from engine_core import EngineSettings

    runner = LocalRunner(deploy(), settings=EngineSettings(max_steps=3))
    rt = Runtime.around(runner.engine, runner.sweeper)
    # when
    over = send(rt, routes.start_execution, {"workflow": "billing", "input": {}})
    fits = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 1})
    # then: refused before anything is written, saying what to raise (before: it ran three steps, then FAILED)
    assert over[0] == 409 and over[1]["error"] == "over_step_cap", over
    assert "workflow 'billing' version 2 has 4 steps, more than the 3" in over[1]["message"]
    assert "Raise LOOM_MAX_STEPS to at least 4" in over[1]["message"]
    assert fits[0] == 202
    assert [e.execution_id for e in runner.engine.operator.list().executions] == [fits[1]["execution_id"]]


def test_start_naming_a_version_pins_it_and_status_shows_the_pinned_step_list(setup):
    runner, rt = setup
    # when: one start takes the newest, one asks for version 1, one for a version not deployed
    newest = send(rt, routes.start_execution, {"workflow": "billing", "input": {}})
    old = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 1})
    missing = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 5})
    bad = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 0})
    # then
    assert newest[0] == old[0] == 202
    assert missing[0] == 404 and missing[1]["error"] == "unknown_workflow"
    assert "no version 5" in missing[1]["message"] and "deployed versions: 1, 2" in missing[1]["message"]
    assert bad[0] == 400 and bad[1]["error"] == "invalid_request" and "version" in bad[1]["message"]
    _, view_new = send(rt, routes.get_execution, execution_id=newest[1]["execution_id"])
    _, view_old = send(rt, routes.get_execution, execution_id=old[1]["execution_id"])
    assert (view_new["workflow_version"], view_new["steps"]) == (2, ["a", "sleep_3600s", "c", "b"])
    assert (view_old["workflow_version"], view_old["steps"], view_old["step_count"]) == (1, ["a", "sleep_3600s", "b"], 3)


def test_status_of_an_execution_whose_version_is_not_deployed_still_shows_its_pinned_step_list(setup):
    # given: a version-1 execution asleep; a deploy keeps only version 2
    runner, rt = setup
    _, started = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 1})
    eid = started["execution_id"]
    runner.run_until(eid, "SLEEPING")
    runner.deploy(deploy(versions=(2,)))
    rt = Runtime.around(runner.engine, runner.sweeper)
    # when: read before and after its delivery fails workflow_version_missing
    _, asleep = send(rt, routes.get_execution, execution_id=eid)
    runner.engine.operator.wake(eid, "ops")
    failed = runner.run_until_done(eid)
    _, view = send(rt, routes.get_execution, execution_id=eid)
    # then: the step list it pinned at its start, and the step it stands at, as operating.md says
    assert failed.error.code == "workflow_version_missing"
    for doc in (asleep, view):
        assert (doc["workflow_version"], doc["steps"], doc["step_count"]) == (1, ["a", "sleep_3600s", "b"], 3)
        assert doc["current_step_name"] == "sleep_3600s"
    # and: while it sleeps, what its next delivery will fail it with (once failed, the error says it)
    assert asleep["cannot_run"]["code"] == "workflow_version_missing", asleep.get("cannot_run")
    assert "version 1" in asleep["cannot_run"]["message"] and "cannot_run" not in view
    # and: what moves it as it is (live: a wake first; a redrive is refused until it failed), and once failed,
    # the failure's own remedy (a redrive)
    assert "Its next delivery fails it" in asleep["cannot_run"]["message"], asleep["cannot_run"]
    assert "fail it now (loom wake ID) and redrive it onto a deployed version" in asleep["cannot_run"]["message"]
    assert "and redrive it, or redrive it onto" in view["error"]["message"], view["error"]


def test_get_workflows_lists_each_version_with_its_live_executions_and_live_ones_on_undeployed_versions(setup):
    runner, rt = setup
    for version in (1, 1, 2):
        send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": version})
    ended = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 2})[1]["execution_id"]
    runner.engine.operator.cancel(ended, "me")
    # when
    status, body = send(rt, routes.list_workflows, query={})
    # then: the newest describes the workflow; each version counts only its live executions
    (billing,) = body["workflows"]
    assert status == 200 and billing["version"] == 2 and billing["name"] == "billing"
    assert [(v["version"], v["live"], v["steps"]) for v in billing["versions"]] == [
        (1, 2, ["a", "sleep_3600s", "b"]), (2, 1, ["a", "sleep_3600s", "c", "b"])]
    assert body["live"] == {"complete": True, "read": 3} and body["undeployed"] == []
    # ?live=0 leaves the counts out
    quiet = send(rt, routes.list_workflows, query={"live": "0"})[1]
    assert "live" not in quiet and "live" not in quiet["workflows"][0]["versions"][0]
    # a deployment without version 1 names the executions live on it
    only_two = deploy((2,))
    rt2 = Runtime.around(runner.engine, runner.sweeper, only_two)
    assert send(rt2, routes.list_workflows, query={})[1]["undeployed"] == [{"workflow": "billing", "version": 1, "live": 2}]


def test_redrive_to_version_resumes_on_it_when_the_steps_before_the_failed_one_match(setup):
    runner, rt = setup
    eid = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 1})[1]["execution_id"]
    assert runner.run_until_done(eid).error.code == "permanent_error"
    # a body that is not {"to_version": N} is refused, naming what it takes
    wrong = send(rt, routes.redrive_execution, {"version": 2}, execution_id=eid)
    assert wrong[0] == 400 and "to_version" in wrong[1]["message"]
    # when: redriven onto version 2, whose steps before b (a, the sleep) are the same
    FIXED["on"] = True
    status, view = send(rt, routes.redrive_execution, {"to_version": 2}, execution_id=eid)
    # then: it resumes at step 2 on version 2 (c, then b)
    assert status == 202 and view["workflow_version"] == 2 and view["current_step"] == 2
    done = runner.run_until_done(eid)
    assert done.status.value == "COMPLETED" and runner.context(eid) == {"a": 1, "c": 1, "b": 1}


def test_redrive_onto_a_version_longer_than_the_step_cap_is_refused_409_and_changes_nothing():
    # given: version 1 (three steps) failed at b; version 2 has four, and the cap is three
    from engine_core import EngineSettings

    FIXED["on"] = False
    runner = LocalRunner(deploy(), settings=EngineSettings(max_steps=3))
    rt = Runtime.around(runner.engine, runner.sweeper)
    eid = send(rt, routes.start_execution, {"workflow": "billing", "input": {}, "version": 1})[1]["execution_id"]
    failed = runner.run_until_done(eid)
    assert failed.error.code == "permanent_error"
    # when
    status, body = send(rt, routes.redrive_execution, {"to_version": 2}, execution_id=eid)
    # then: refused before anything changed (before: it ran on to step 3 and stopped FAILED step_cap_exceeded)
    assert status == 409 and body["error"] == "over_step_cap", body
    assert "workflow 'billing' version 2 has 4 steps, more than the 3" in body["message"]
    assert runner.engine.get(eid) == failed and runner.engine.operator.history_page(eid).operations == []


def test_redrive_body_parser_refuses_what_is_not_a_version():
    from loom_control_plane.versions import parse_redrive_request

    assert parse_redrive_request(None, False) is None and parse_redrive_request("{}", False) is None
    assert parse_redrive_request('{"to_version": 3}', False) == 3
    for body in ('{"to_version": true}', '{"to_version": "2"}', '{"to_version": 0}', "[2]", '{"x": 1}'):
        with pytest.raises(ApiError) as refused:
            parse_redrive_request(body, False)
        assert refused.value.status == 400 and "to_version" in refused.value.message


def test_get_workflows_names_each_code_first_version_s_function(setup):
    from engine_core.durable import durable, step

    runner, _ = setup
    registry = Registry()

    @durable("report", registry=registry)
    def report_one(input):
        return step("fetch", lambda: 1)

    @durable("report", registry=registry, version=2)
    def report_two(input):
        return step("fetch", lambda: 2)

    rt = Runtime.around(runner.engine, runner.sweeper, registry)
    # when
    (report,) = send(rt, routes.list_workflows, query={})[1]["workflows"]
    # then: each version names its own function, not only the newest
    prefix = f"{__name__}.test_get_workflows_names_each_code_first_version_s_function.<locals>"
    assert report["function"] == f"{prefix}.report_two"
    assert [(v["version"], v["style"], v["function"]) for v in report["versions"]] == [
        (1, "code", f"{prefix}.report_one"), (2, "code", f"{prefix}.report_two")]
