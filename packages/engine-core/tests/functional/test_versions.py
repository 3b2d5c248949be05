"""Versions: executions in flight across a deploy (DESIGN.md "Versions"). Each test deploys a new set of
workflows (``LocalRunner.deploy``) while executions started on the old one are asleep, retrying, crashed,
cancelled or failed, and checks which definition's steps really ran (a journal the bodies write)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine_core import PermanentStepError, Registry, RetryPolicy, Status, faults, sleep, step, workflow
from engine_core import map as map_
from engine_core.durable import durable
from engine_core.durable import map as dmap
from engine_core.durable import sleep as dsleep
from engine_core.durable import step as dstep
from engine_core.errors import ExecutionStateConflictError, IdempotencyConflictError, UnknownWorkflowVersionError
from engine_core.lifecycle import failure_notice, status_event
from engine_core.testing import LocalRunner

NAME = "orders"


class Journal(list):
    def body(self, label: str, fail: bool = False):
        def fn(ctx):
            self.append((label, ctx.execution_id))
            if fail:
                raise PermanentStepError(f"{label} failed")
            return {label: True}
        fn.__name__ = label
        return fn

    def ran(self, eid: str) -> list[str]:
        return [label for label, who in self if who == eid]


def v1(registry: Registry, j: Journal, *, wait=sleep(days=3), extra=(), fail_b=False, version=1):
    @workflow(NAME, registry=registry, version=version)
    class V1:
        steps = [j.body("a"), wait, j.body("b", fail=fail_b), *extra]
    return V1


def v2(registry: Registry, j: Journal):
    @workflow(NAME, registry=registry, version=2)
    class V2:
        steps = [j.body("a"), sleep(days=3), j.body("c"), j.body("d")]
    return V2


def drive_until(runner: LocalRunner, eid: str, done) -> None:
    for _ in range(10_000):
        if done(runner.engine.get(eid)):
            return
        runner.step_once()
    raise AssertionError(f"{eid} never got there")


def asleep_on_v1(j: Journal) -> tuple[LocalRunner, str]:
    """A runner with version 1 deployed, and an execution of it asleep after step a."""
    runner = LocalRunner(deployed(lambda r: v1(r, j)))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "SLEEPING")
    return runner, eid


def deployed(*builders) -> Registry:
    registry = Registry()
    for build in builders:
        build(registry)
    return registry


def test_versions_a_version_2_deployed_while_version_1_sleeps_both_finish_on_their_own_definitions():
    # given: version 1 only, one execution asleep in its three-day sleep
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j)))
    old = runner.start(NAME, {})
    assert runner.run_until(old, "SLEEPING").workflow_version == 1
    # when: version 2 is deployed beside version 1, and a new execution starts
    runner.deploy(deployed(lambda r: v1(r, j), lambda r: v2(r, j)))
    new = runner.start(NAME, {})
    # then: each runs its own steps to the end
    assert runner.run_until_done(old).status is Status.COMPLETED
    assert runner.run_until_done(new).status is Status.COMPLETED
    assert j.ran(old) == ["a", "b"] and j.ran(new) == ["a", "c", "d"]
    assert runner.engine.get(new).workflow_version == 2 and runner.engine.get(new).current_step == 4
    assert runner.engine.get(old).workflow_version == 1 and runner.engine.get(old).current_step == 3


def test_versions_a_start_naming_a_version_runs_on_it_and_an_unknown_version_is_refused_naming_the_deployed_ones():
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j), lambda r: v2(r, j)))
    # when: a start asks for version 1 although 2 is newer
    eid = runner.start(NAME, {}, version=1)
    # then: it runs version 1's steps
    runner.run_until_done(eid)
    assert j.ran(eid) == ["a", "b"]
    with pytest.raises(UnknownWorkflowVersionError) as missing:
        runner.start(NAME, {}, version=7)
    assert "no version 7" in str(missing.value) and "deployed versions: 1, 2" in str(missing.value)
    # and a token re-used for another version is a conflict, not a silent answer on the first one
    runner.start(NAME, {"n": 1}, token="t-1", version=1)
    with pytest.raises(IdempotencyConflictError):
        runner.start(NAME, {"n": 1}, token="t-1", version=2)


def test_versions_an_execution_whose_version_was_removed_fails_naming_it_and_runs_again_once_it_is_back():
    # given: a version-1 execution asleep
    j = Journal()
    runner, eid = asleep_on_v1(j)
    # when: a deploy keeps only version 2, and the sleep ends
    runner.deploy(deployed(lambda r: v2(r, j)))
    failed = runner.run_until_done(eid)
    # then: FAILED workflow_version_missing naming the version; nothing of version 2 ran
    assert failed.status is Status.FAILED and failed.error.code == "workflow_version_missing"
    assert "version 1" in failed.error.message and "deployed versions: 2" in failed.error.message
    assert "keep its @workflow(..., version=1) registered" in failed.error.message
    assert j.ran(eid) == ["a"]
    # redriving it on its own version is refused while that version is missing
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "oncall")
    assert refused.value.code == "definition_changed"
    assert str(refused.value).count("--to-version") == 1, str(refused.value)  # the remedy named once
    # when: version 1 is deployed again and the operator redrives
    runner.deploy(deployed(lambda r: v1(r, j), lambda r: v2(r, j)))
    runner.engine.operator.redrive(eid, "oncall")
    # then: it ends on version 1's steps
    assert runner.run_until_done(eid).status is Status.COMPLETED and j.ran(eid) == ["a", "b"]
    # and: the redrive's record names where it stood and the failure, and no step's attempts (none failed it)
    (op,), _ = runner.engine.operator.operations(eid)
    assert op.detail["step_index"] == 1 and op.detail["error"]["code"] == "workflow_version_missing", op.detail
    assert "attempts" not in op.detail and "step_name" not in op.detail, op.detail


def test_versions_an_execution_whose_whole_workflow_was_removed_fails_version_missing_and_runs_again_once_it_is_back():
    # given: a version-1 execution asleep; a deploy drops the workflow altogether (another one stays)
    j = Journal()
    runner, eid = asleep_on_v1(j)

    def other(r):
        @workflow("unrelated", registry=r)
        class Unrelated:
            steps = [j.body("z")]

    runner.deploy(deployed(other))
    # when
    failed = runner.run_until_done(eid)
    # then: as for a removed version: workflow_version_missing, naming it and the remedy
    assert failed.status is Status.FAILED and failed.error.code == "workflow_version_missing", failed.error
    assert f"no version of {NAME!r} is deployed here" in failed.error.message
    assert f"keep its @workflow({NAME!r}, version=1) registered) and redrive it" in failed.error.message
    # and once it is deployed again, the redrive runs it to the end on its own steps
    runner.deploy(deployed(lambda r: v1(r, j), other))
    runner.engine.operator.redrive(eid, "oncall")
    assert runner.run_until_done(eid).status is Status.COMPLETED and j.ran(eid) == ["a", "b"]


def test_versions_a_same_version_redeploy_of_what_the_digest_does_not_see_runs_the_new_code_as_documented():
    # given: an execution asleep before a map, its charge compensable; docs/workflows.md says a step's body,
    # its compensation and a map's branch function are not in the digest
    from engine_core import map_

    ran = []

    def charge(ctx):
        ran.append("charge")
        return {"charged": True}

    def build(r, branch, undo):
        @workflow(NAME, registry=r)
        class Flow:
            steps = [step(charge, compensate=undo), sleep(seconds=60), map_(branch, over="items", name="labels")]

    def label(ctx):
        ran.append(("old", ctx.item))
        return ctx.item

    def relabel(ctx):
        ran.append(("new", ctx.item))
        return ctx.item

    runner = LocalRunner(deployed(lambda r: build(r, label, lambda ctx: ran.append("refund"))))
    eid = runner.start(NAME, {"items": [1, 2]})
    runner.run_until(eid, "SLEEPING")
    # when: the same version is redeployed with another branch function and no compensation
    runner.deploy(deployed(lambda r: build(r, relabel, None)))
    # then: not detected: the execution in flight runs the new branch function (ship it as a version instead)
    assert runner.run_until_done(eid).status is Status.COMPLETED
    assert ran == ["charge", ("new", 1), ("new", 2)]


def test_versions_a_retuned_sleep_that_passed_and_appended_steps_do_not_break_an_execution_in_flight():
    # given: an execution past its sleep (retrying b), and one inside the sleep
    j = Journal()
    flaky = {"left": 1}

    def b(ctx):
        j.append(("b", ctx.execution_id))
        if flaky["left"]:
            flaky["left"] -= 1
            raise RuntimeError("upstream down")
        return {"b": True}

    def build(r, hours, extra=()):
        @workflow(NAME, registry=r)
        class Flow:
            steps = [j.body("a"), sleep(hours=hours), step(b, retry=RetryPolicy(max_attempts=3, base=600, max_delay=600)), *extra]

    runner = LocalRunner(deployed(lambda r: build(r, 1)))
    past = runner.start(NAME, {})
    drive_until(runner, past, lambda e: e.current_step == 2 and e.timer.value == "retry")
    inside = runner.start(NAME, {})
    runner.run_until(inside, "SLEEPING")
    # when: the same version is redeployed with the sleep retuned and a step appended
    runner.deploy(deployed(lambda r: build(r, 5, extra=[j.body("appended")])))
    # then: both finish on the steps they started with; the appended step runs only for new starts
    assert runner.run_until_done(past).status is Status.COMPLETED
    assert runner.run_until_done(inside).status is Status.COMPLETED
    assert j.ran(past) == ["a", "b", "b"] and j.ran(inside) == ["a", "b"]
    assert runner.engine.get(inside).current_step == 3
    fresh = runner.start(NAME, {})
    runner.run_until_done(fresh)
    assert j.ran(fresh) == ["a", "b", "appended"]
    assert runner.context(past) == {"a": True, "b": True}


@pytest.mark.parametrize("change, named", [
    ("changed_remaining", "step 2 'b', which this execution still has to run, changed (now 'b2')"),
    ("inserted_before_remaining", "step 2 'b', which this execution still has to run, changed (now 'new')"),
    ("changed_completed", "step 0 was 'a' (task) and is now 'a0' (task)"),
    ("dropped_remaining", "it dropped step 3 'z', which this execution still has to run"),
])
def test_versions_a_same_version_deploy_that_changes_what_an_execution_still_runs_fails_it_naming_the_step(change, named):
    # given: an execution asleep after a
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j, extra=[j.body("z")])))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "SLEEPING")
    lists = {
        "changed_remaining": [j.body("a"), sleep(days=3), j.body("b2"), j.body("z")],
        "inserted_before_remaining": [j.body("a"), sleep(days=3), j.body("new"), j.body("b"), j.body("z")],
        "changed_completed": [j.body("a0"), sleep(days=3), j.body("b"), j.body("z")],
        "dropped_remaining": [j.body("a"), sleep(days=3), j.body("b")],
    }
    registry = Registry()

    @workflow(NAME, registry=registry)
    class Changed:
        steps = lists[change]
    # when: the same version is redeployed with that change, and the sleep ends
    runner.deploy(registry)
    e = runner.run_until_done(eid)
    # then: FAILED workflow_definition_mismatch naming what differs; nothing of the new list ran
    assert e.status is Status.FAILED and e.error.code == "workflow_definition_mismatch"
    assert named in e.error.message and "version=2" in e.error.message
    assert j.ran(eid) == ["a"]


def test_versions_redrive_onto_another_version_resumes_at_the_failed_step_only_when_the_steps_before_it_match():
    # given: a version-1 execution failed for good at b
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j, fail_b=True)))
    eid = runner.start(NAME, {})
    failed = runner.run_until_done(eid)
    assert failed.status is Status.FAILED and failed.current_step == 2

    def fixed(r):  # version 2 keeps a and the sleep, fixes b and adds a step
        @workflow(NAME, registry=r, version=2)
        class Fixed:
            steps = [j.body("a"), sleep(days=3), j.body("b_fixed"), j.body("notify")]

    def reordered(r):  # version 3 changes a step before the failed one
        @workflow(NAME, registry=r, version=3)
        class Reordered:
            steps = [j.body("a2"), sleep(days=3), j.body("b_fixed")]

    runner.deploy(deployed(lambda r: v1(r, j, fail_b=True), fixed, reordered))
    # when: redriven onto version 3, whose step 0 differs: refused, nothing written
    with pytest.raises(ExecutionStateConflictError) as differ:
        runner.engine.operator.redrive(eid, "oncall", to_version=3)
    assert differ.value.code == "steps_differ" and "step 0 was 'a' (task) and is now 'a2' (task)" in str(differ.value)
    assert runner.engine.get(eid).version == failed.version
    with pytest.raises(UnknownWorkflowVersionError):
        runner.engine.operator.redrive(eid, "oncall", to_version=9)
    # when: redriven onto version 2, whose steps before b are the same
    again = runner.engine.operator.redrive(eid, "oncall", to_version=2)
    # then: it resumes at step 2 on version 2's steps, and says so in its operation record
    assert again.workflow_version == 2 and again.current_step == 2
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED and j.ran(eid) == ["a", "b", "b_fixed", "notify"]
    (op,), _ = runner.engine.operator.operations(eid)
    assert (op.op, op.detail["from_version"], op.detail["to_version"]) == ("redrive", 1, 2)


def test_versions_a_cancel_after_a_deploy_undoes_with_the_pinned_versions_compensations():
    # given: version 1 charges (with a refund) then sleeps
    j = Journal()

    def refund(ctx):
        j.append(("refund_v1", ctx.execution_id))

    def charged(r):
        @workflow(NAME, registry=r)
        class Charged:
            steps = [step(j.body("charge"), compensate=refund), sleep(days=3), j.body("ship")]

    runner = LocalRunner(deployed(charged))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "SLEEPING")
    # when: version 2 (no compensation at all) is deployed, then the operator cancels
    runner.deploy(deployed(charged, lambda r: v2(r, j)))
    runner.engine.operator.cancel(eid, "oncall")
    e = runner.run_until_done(eid)
    # then: version 1's refund ran, once; nothing of version 2 ran
    assert e.status is Status.CANCELLED and e.compensated is True
    assert j.ran(eid) == ["charge", "refund_v1"]


class Killed(BaseException):
    """The worker process dying (a BaseException the engine never catches: a body's SystemExit is a failure)."""


def _die_inside(runner: LocalRunner, step_name: str, done=None) -> list[int]:
    """Step ``runner`` until ``done()`` (default: until the worker died), the worker dying once on the way out
    of ``step_name``'s body (after its side effect, before its record). Returns the attempt that died."""
    died: list[int] = []

    def hook(name, info):
        if name == "step.return" and info.get("step_name") == step_name and not died:
            died.append(info["attempt"])
            raise Killed("killed")

    faults.install(hook)
    try:
        for _ in range(10_000):
            if (done or (lambda: bool(died)))():
                break
            try:
                runner.step_once()
            except Killed:
                pass
    finally:
        faults.install(None)
    return died


def test_versions_a_worker_killed_inside_a_step_after_a_deploy_reruns_the_pinned_versions_step():
    # given: version 1 asleep; version 2 deployed; the worker dies inside b (after its side effect)
    j = Journal()
    runner, eid = asleep_on_v1(j)
    runner.deploy(deployed(lambda r: v1(r, j), lambda r: v2(r, j)))
    assert _die_inside(runner, "b") == [1]
    # when: the claim's lease runs out and the sweeper re-drives it
    e = runner.run_until_done(eid)
    # then: b ran again (same version), c and d never ran; the second attempt completed it
    assert e.status is Status.COMPLETED and e.workflow_version == 1
    assert j.ran(eid) == ["a", "b", "b"]


def test_versions_a_duplicate_message_delivered_after_a_deploy_advances_once():
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j)))
    eid = runner.start(NAME, {})
    copies = list(runner.queue.messages)
    runner.deploy(deployed(lambda r: v1(r, j), lambda r: v2(r, j)))
    # when: the first message is delivered twice
    first = runner.engine.process(copies[0].body)
    second = runner.engine.process(copies[0].body)
    # then: one delivery ran version 1's step a; the copy was stale
    assert first.kind != "stale" and second.kind == "stale"
    assert runner.run_until_done(eid).status is Status.COMPLETED and j.ran(eid) == ["a", "b"]


def _code_versions(registry: Registry, j: Journal, versions=(1, 2)) -> None:
    if 1 in versions:
        @durable("code_orders", registry=registry)
        def one(input):
            dstep("a", lambda: j.append(("a", "code")) or True)
            dsleep(days=1)
            dstep("b", lambda: j.append(("b_v1", "code")) or True)
            return {"version": 1}
    if 2 in versions:
        @durable("code_orders", registry=registry, version=2)
        def two(input):
            dstep("a", lambda: j.append(("a", "code")) or True)
            dstep("c", lambda: j.append(("c_v2", "code")) or True)
            return {"version": 2}


def test_versions_code_first_each_execution_replays_the_version_it_started_on_and_a_removed_one_is_refused():
    # given: a code-first version-1 execution asleep
    j = Journal()
    runner = LocalRunner(deployed(lambda r: _code_versions(r, j, (1,))))
    old = runner.start("code_orders", {})
    runner.run_until(old, "SLEEPING")
    # when: version 2 is deployed beside it, and a new execution starts
    runner.deploy(deployed(lambda r: _code_versions(r, j)))
    new = runner.start("code_orders", {})
    # then: each returns its own version's result
    assert runner.run_until_done(old).status is Status.COMPLETED and runner.result(old) == {"version": 1}
    assert runner.run_until_done(new).status is Status.COMPLETED and runner.result(new) == {"version": 2}
    # and: with version 1 removed, a version-1 execution is refused naming it, not replayed on version 2
    gone = runner.start("code_orders", {"order": "o-1"}, version=1)
    runner.run_until(gone, "SLEEPING")
    runner.deploy(deployed(lambda r: _code_versions(r, j, (2,))))
    e = runner.run_until_done(gone)
    assert e.status is Status.FAILED and e.error.code == "workflow_version_missing"
    assert "version 1" in e.error.message and "keep its @durable(..., version=1) registered" in e.error.message
    # and: its context reads as a code-first one's (its input), though no deployed function says it is one
    assert runner.context(gone) == {"order": "o-1"}
    # and: what the message offers, a redrive onto version 2 without version 1 deployed, is taken; the replay
    # checks the recorded calls there (version 2 calls "c" where version 1 slept: refused, nothing run)
    runner.engine.operator.redrive(gone, "oncall", to_version=2)
    e = runner.run_until_done(gone)
    assert e.workflow_version == 2 and e.error.code == "nondeterministic_replay" and "'c'" in e.error.message
    assert j.count(("c_v2", "code")) == 1  # only the execution started on version 2 ran it


def test_versions_the_worker_refuses_to_start_when_an_older_versions_step_cannot_fit_its_timeout():
    from engine_core import ConfigurationError, check_fits, step
    from engine_core.settings import EngineSettings

    # given: version 1 has a 50 s step; version 2 (the newest) only short ones
    j = Journal()
    registry = Registry()

    @workflow(NAME, registry=registry)
    class Slow:
        steps = [step(j.body("a"), timeout_s=50)]

    @workflow(NAME, registry=registry, version=2)
    class Quick:
        steps = [step(j.body("a"), timeout_s=5)]

    # when / then: the old version still runs executions in flight, so it must fit too
    with pytest.raises(ConfigurationError, match=r"workflow 'orders' step 'a' has a 50 s budget"):
        check_fits(registry, EngineSettings(function_timeout_s=30))


def test_versions_an_event_for_a_wait_only_the_pinned_version_has_is_delivered_after_a_deploy():
    from engine_core import wait_for_event

    # given: version 1 waits for "approved"; version 2, deployed while it waits, waits for nothing
    j = Journal()

    def waits(r):
        @workflow(NAME, registry=r)
        class Approval:
            steps = [j.body("a"), wait_for_event("approved", timeout=3600), j.body("b")]

    runner = LocalRunner(deployed(waits))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "WAITING")
    runner.deploy(deployed(waits, lambda r: v2(r, j)))
    # when: the event arrives (and a version-2 execution, which never waits, is sent one)
    outcome = runner.send_event(eid, "approved", {"ok": True})
    other = runner.start(NAME, {})
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.send_event(other, "approved", {"ok": True})
    # then: the pinned version's wait takes it and the execution ends on version 1's steps
    assert outcome == "delivered" and refused.value.code == "unknown_event"
    assert runner.run_until_done(eid).status is Status.COMPLETED and j.ran(eid) == ["a", "b"]
    assert runner.context(eid)["wait_approved"] == {"ok": True}


def _code_failing(registry: Registry, versions, v2_call: str) -> None:
    def boom():
        raise PermanentStepError("feed missing")

    if 1 in versions:
        @durable("code_fix", registry=registry)
        def one(input):
            dstep("a", lambda: 1)
            dstep("b", boom)
            return {"version": 1}
    if 2 in versions:
        @durable("code_fix", registry=registry, version=2)
        def two(input):
            dstep("a", lambda: 1)
            dstep(v2_call, lambda: 2)
            return {"version": 2}


@pytest.mark.parametrize("v2_call, ends", [("b", "COMPLETED"), ("b_renamed", "FAILED")])
def test_versions_code_first_redrive_onto_another_version_replays_its_recorded_calls_there(v2_call, ends):
    # given: a code-first version-1 execution failed for good at its call "b"
    runner = LocalRunner(deployed(lambda r: _code_failing(r, (1,), v2_call)))
    eid = runner.start("code_fix", {})
    assert runner.run_until_done(eid).error.code == "permanent_error"
    runner.deploy(deployed(lambda r: _code_failing(r, (1, 2), v2_call)))
    # when: redriven onto version 2
    runner.engine.operator.redrive(eid, "oncall", to_version=2)
    e = runner.run_until_done(eid)
    # then: version 2 replays the recorded calls; the failed call must keep its name there, or the replay
    # refuses it (nondeterministic_replay) rather than run something the history does not describe
    assert e.status.value == ends and e.workflow_version == 2
    if ends == "COMPLETED":
        assert runner.result(eid) == {"version": 2}
    else:
        assert e.error.code == "nondeterministic_replay" and "b_renamed" in e.error.message
        # and the remedy it names works: moved back, it replays its own calls again (and b fails as before)
        assert "A redrive moved it onto version 2 (--to-version) from version 1" in e.error.message, e.error.message
        assert e.error.message.endswith("redrive it --to-version 1")
        runner.engine.operator.redrive(eid, "oncall", to_version=1)
        back = runner.run_until_done(eid)
        assert (back.workflow_version, back.error.code) == (1, "permanent_error"), back.error


def _compensable(registry: Registry, undone: list, style: str, versions=(1, 2)) -> None:
    def charge(ctx):
        return {"charge": "ch-1"}

    def refund(ctx):
        undone.append(ctx.result["charge"])

    if style == "steps":
        if 1 in versions:
            @workflow("pay", registry=registry)
            class One:
                steps = [step(charge, compensate=refund), sleep(hours=1), Journal().body("ship")]
        if 2 in versions:
            @workflow("pay", registry=registry, version=2)
            class Two:
                steps = [Journal().body("ship")]
        return
    if 1 in versions:
        @durable("pay", registry=registry)
        def one(input):
            dstep("charge", lambda: "ch-1", compensate=lambda charged: undone.append(charged))
            dsleep(hours=1)
            return dstep("ship", lambda: 1)
    if 2 in versions:
        @durable("pay", registry=registry, version=2)
        def two(input):
            return dstep("ship", lambda: 2)


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_cancel_that_could_not_undo_completed_steps_because_their_version_is_gone_is_refused(style):
    # given: a version-1 execution that completed a step with a compensation, asleep; a deploy drops version 1
    undone: list = []
    runner = LocalRunner(deployed(lambda r: _compensable(r, undone, style)))
    eid = runner.start("pay", {}, version=1)
    runner.run_until(eid, "SLEEPING")
    runner.deploy(deployed(lambda r: _compensable(r, undone, style, (2,))))
    before = runner.engine.store.load_state(eid).execution
    # when: an operator cancels it
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.cancel(eid, "oncall")
    # then: refused, naming the step and the remedy; nothing written (it did not end CANCELLED, un-refunded)
    assert refused.value.code == "definition_changed"
    message = str(refused.value)
    assert "(charge)" in message and "have compensations" in message and "Deploy version 1 again" in message
    assert runner.engine.store.load_state(eid).execution == before and undone == []
    # when: version 1 is deployed again beside version 2, and the operator cancels
    runner.deploy(deployed(lambda r: _compensable(r, undone, style)))
    runner.engine.operator.cancel(eid, "oncall")
    e = runner.run_until_done(eid)
    # then: the charge is refunded once, as any cancel of a saga does
    assert e.status is Status.CANCELLED and e.compensated is True and undone == ["ch-1"]


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_cancel_with_nothing_to_undo_ends_an_execution_whose_version_is_gone(style):
    # given: a version-1 execution asleep that completed steps, none with a compensation
    j = Journal()
    name = "code_orders" if style == "code" else NAME
    keep = (lambda r: _code_versions(r, j, (1,))) if style == "code" else (lambda r: v1(r, j))
    drop = (lambda r: _code_versions(r, j, (2,))) if style == "code" else (lambda r: v2(r, j))
    runner = LocalRunner(deployed(keep))
    eid = runner.start(name, {})
    runner.run_until(eid, "SLEEPING")
    runner.deploy(deployed(drop))
    # when / then: cancelled at once (its records say none of its completed steps has anything to undo)
    assert runner.engine.operator.cancel(eid, "oncall").status is Status.CANCELLED


def _cancel_in_flight(registry: Registry, undone: list, ran: list, style: str, versions=(1, 2),
                      refund: bool = True) -> None:
    """Version 1 charges (with a refund unless not ``refund``), then packs (where a worker dies), then ships;
    version 2 only ships."""
    def pack():
        ran.append("pack")
        return "packed"

    if style == "steps":
        if 1 in versions:
            @workflow("pay", registry=registry)
            class One:
                steps = [step(lambda ctx: {"charge": "ch-1"}, name="charge",
                              compensate=(lambda ctx: undone.append(ctx.result["charge"])) if refund else None),
                         step(lambda ctx: {"pack": pack()}, name="pack"),
                         step(lambda ctx: {"shipped": ran.append("ship")}, name="ship")]
        if 2 in versions:
            @workflow("pay", registry=registry, version=2)
            class Two:
                steps = [step(lambda ctx: {"shipped": ran.append("ship")}, name="ship")]
        return
    if 1 in versions:
        @durable("pay", registry=registry)
        def one(input):
            dstep("charge", lambda: "ch-1", compensate=(lambda charged: undone.append(charged)) if refund else None)
            dstep("pack", pack)
            return dstep("ship", lambda: ran.append("ship"))
    if 2 in versions:
        @durable("pay", registry=registry, version=2)
        def two(input):
            return dstep("ship", lambda: ran.append("ship"))


def _killed_in_pack_then_cancelled(runner: LocalRunner, eid: str, ran: list) -> None:
    """The worker dies inside "pack" (after its side effect), and an operator asks to cancel meanwhile (a
    request: the dead attempt's claim still holds the step)."""
    _die_inside(runner, "pack", lambda: bool(ran))
    assert ran == ["pack"]
    assert runner.engine.operator.cancel(eid, "oncall").cancel_requested


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_cancel_requested_before_the_version_went_is_finished_by_the_redrive_not_forgotten(style):
    # given: a version-1 execution charged (with a refund); its worker died inside "pack", and an operator
    # asked to cancel meanwhile
    undone: list = []
    ran: list = []
    runner = LocalRunner(deployed(lambda r: _cancel_in_flight(r, undone, ran, style)))
    eid = runner.start("pay", {}, version=1)
    _killed_in_pack_then_cancelled(runner, eid, ran)
    # when: a deploy drops version 1 before the claim's lease ends; the next delivery cannot run it
    runner.deploy(deployed(lambda r: _cancel_in_flight(r, undone, ran, style, (2,))))
    e = runner.run_until_done(eid)
    # then: FAILED workflow_version_missing, the cancel still requested and its message saying so
    assert e.status is Status.FAILED and e.error.code == "workflow_version_missing" and e.cancel_requested
    message = e.error.message
    assert "A cancel was requested (by oncall)" in message and "a redrive finishes that cancel" in message
    # when: version 1 is deployed again and the operator redrives it
    runner.deploy(deployed(lambda r: _cancel_in_flight(r, undone, ran, style)))
    runner.engine.operator.redrive(eid, "oncall")
    e = runner.run_until_done(eid)
    # then: the cancel is finished, not forgotten: the charge refunded once, nothing after pack ran
    assert e.status is Status.CANCELLED and e.compensated is True and e.cancelled_by == "oncall"
    assert undone == ["ch-1"] and ran == ["pack"]


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_cancel_requested_before_the_version_went_with_nothing_to_undo_ends_it_cancelled(style):
    # given: as above, but no step has a compensation
    undone: list = []
    ran: list = []
    runner = LocalRunner(deployed(lambda r: _cancel_in_flight(r, undone, ran, style, refund=False)))
    eid = runner.start("pay", {}, version=1)
    _killed_in_pack_then_cancelled(runner, eid, ran)
    # when: a deploy drops version 1 before the claim's lease ends
    runner.deploy(deployed(lambda r: _cancel_in_flight(r, undone, ran, style, (2,), refund=False)))
    e = runner.run_until_done(eid)
    # then: the delivery after the lease finishes the cancel, as the operator's cancel would now: CANCELLED
    assert e.status is Status.CANCELLED and e.error is None and e.cancelled_by == "oncall"
    assert not e.cancel_requested and ran == ["pack"]


def test_versions_a_cancel_of_a_code_first_step_that_may_have_run_with_its_version_gone_waits_to_undo_it():
    # given: a code-first version-1 execution whose worker died inside "charge", which has a refund
    undone: list = []
    ran: list = []

    def build(versions):
        def deploy(registry):
            if 1 in versions:
                @durable("pay", registry=registry)
                def one(input):
                    dstep("charge", lambda: ran.append("charge") or "ch-1",
                          compensate=lambda charged: undone.append(charged))
                    return dstep("ship", lambda: 1)
            if 2 in versions:
                @durable("pay", registry=registry, version=2)
                def two(input):
                    return dstep("ship", lambda: 2)
        return deployed(deploy)

    runner = LocalRunner(build((1, 2)))
    eid = runner.start("pay", {}, version=1)

    _die_inside(runner, "charge", lambda: bool(ran))
    runner.deploy(build((2,)))
    assert runner.engine.operator.cancel(eid, "oncall").cancel_requested
    # when: the claim's lease ends and the next delivery finds version 1 gone
    e = runner.run_until_done(eid)
    # then: not CANCELLED with the charge left done: FAILED with the cancel kept, naming the charge
    assert e.status is Status.FAILED and e.cancel_requested and "a redrive finishes that cancel" in e.error.message
    # when: version 1 comes back and the operator redrives it: the charge, which may have run, is refunded
    # (with no result: its attempt recorded none), and nothing runs again
    runner.deploy(build((1, 2)))
    runner.engine.operator.redrive(eid, "oncall")
    e = runner.run_until_done(eid)
    assert e.status is Status.CANCELLED and e.compensated is True and undone == [None] and ran == ["charge"]


def _cancelled_inside(style: str, where: str) -> tuple[LocalRunner, str, list, list, Callable]:
    """Version 1 charges (with a refund), ships (a task, or a map over two items), then closes; version 2 only
    closes. Inside the body ``where`` says ("charge", or the map's first branch) a deploy drops version 1 and
    an operator cancels (a Lambda deploy lets the running invocation finish on its old code). Runs it to its
    end: (runner, eid, the cancel's answers, what was undone, the builder of both versions)."""
    undone: list = []
    answers: list = []
    box: dict = {}

    def body(here: str, value):
        if here == where and not answers:
            runner = box["runner"]
            runner.deploy(deployed(lambda r: build(r, (2,))))
            answers.append(runner.engine.operator.cancel(box["eid"], "oncall"))
        return value

    def build(registry, versions=(1, 2)):
        if style == "steps":
            if 1 in versions:
                ship = (map_(lambda ctx: body("map", ctx.item), over="items", name="ship") if where == "map" else
                        step(lambda ctx: {"shipped": True}, name="ship"))

                @workflow("pay", registry=registry)
                class One:
                    steps = [step(lambda ctx: {"charge": body("charge", "ch-1"), "items": [1, 2]}, name="charge",
                                  compensate=lambda ctx: undone.append(ctx.result["charge"])),
                             ship, step(lambda ctx: {"closed": True}, name="close")]
            if 2 in versions:
                @workflow("pay", registry=registry, version=2)
                class Two:
                    steps = [step(lambda ctx: {"closed": True}, name="close")]
            return
        if 1 in versions:
            @durable("pay", registry=registry)
            def one(input):
                dstep("charge", lambda: body("charge", "ch-1"), compensate=lambda charged: undone.append(charged))
                if where == "map":
                    dmap("ship", lambda item: body("map", item), [1, 2])
                else:
                    dstep("ship", lambda: 1)
                return dstep("close", lambda: 1)
        if 2 in versions:
            @durable("pay", registry=registry, version=2)
            def two(input):
                return dstep("close", lambda: 2)

    runner = box["runner"] = LocalRunner(deployed(build))
    eid = box["eid"] = runner.start("pay", {}, version=1)
    runner.run_until_done(eid)
    return runner, eid, answers, undone, build


@pytest.mark.parametrize("style", ["steps", "code"])
@pytest.mark.parametrize("where", ["charge", "map"])
def test_versions_a_cancel_while_an_attempt_of_a_removed_version_runs_waits_for_it_and_undoes_it(style, where):
    # given / when: a cancel while the charge's attempt runs, or a branch of the map after it, when a deploy
    # drops version 1
    runner, eid, answers, undone, build = _cancelled_inside(style, where)
    e = runner.engine.get(eid)
    # then: the cancel was a request (the attempt held the step, or a branch of it: before, a branch was not
    # seen without the definition, and the cancel was refused definition_changed); the attempt, on the code it
    # started on, finished it: undoing the charge needs version 1: FAILED, saying so
    assert answers and answers[0].cancel_requested and answers[0].status is not Status.CANCELLED, answers
    assert e.status is Status.FAILED and e.error.code == "workflow_version_missing" and undone == [], e.error
    # when: version 1 is deployed again and the operator redrives it
    runner.deploy(deployed(build))
    runner.engine.operator.redrive(eid, "oncall")
    e = runner.run_until_done(eid)
    # then: the cancel is finished: the charge refunded once; nothing after the cancelled step ran
    assert (e.status, e.compensated, undone) == (Status.CANCELLED, True, ["ch-1"]), (e.status, e.error)
    assert [r.name for r in runner.engine.history(eid) if getattr(r, "kind", None) == "task"] == ["charge"]


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_callback_for_an_execution_whose_version_was_removed_is_refused_naming_it_and_stays_usable(style):
    from engine_core import wait_for_event
    from engine_core.durable import wait_for_callback
    from engine_core.errors import CallbackNotFoundError

    # given: version 1 hands out a callback token and waits for it; a deploy then keeps only version 2
    j, tokens = Journal(), []

    def waits(r):
        if style == "steps":
            @workflow(NAME, registry=r)
            class Approval:
                steps = [lambda_named("issue", lambda ctx: tokens.append(ctx.callback_token("approved")) or {}),
                         wait_for_event("approved", timeout=3600), j.body("b")]
        else:
            @durable(NAME, registry=r)
            def approval(input):
                wait_for_callback("approved", tokens.append, timeout=3600)
                return dstep("b", lambda: j.append(("b", "code")) or 1)

    runner = LocalRunner(deployed(waits))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "WAITING")
    (token,) = tokens
    runner.deploy(deployed(lambda r: v2(r, j)))
    # when: the outside system answers
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(token, {"ok": True}, "partner")
    # then: a conflict naming the missing version and what to do (it was 404 "check it was copied whole")
    assert refused.value.code == "workflow_version_missing"
    assert "version 1" in str(refused.value) and "not used up" in str(refused.value)
    with pytest.raises(CallbackNotFoundError):  # a forged token is still not found
        runner.engine.operator.complete_callback(token[:-2] + ("AA" if not token.endswith("AA") else "BB"), {}, "x")
    # and: once version 1 is back, the same token completes the wait
    runner.deploy(deployed(waits, lambda r: v2(r, j)))
    assert runner.engine.operator.complete_callback(token, {"ok": True}, "partner").outcome == "delivered"
    assert runner.run_until_done(eid).status is Status.COMPLETED


def lambda_named(name, fn):
    fn.__name__ = name
    return fn


def test_versions_a_callback_for_an_execution_that_ended_while_its_version_was_gone_says_so_and_how_to_go_on():
    from engine_core import wait_for_event

    # given: version 1 waits for a callback; only version 2 is deployed, and a delivery failed it
    j, tokens = Journal(), []

    def waits(r):
        @workflow(NAME, registry=r)
        class Approval:
            steps = [lambda_named("issue", lambda ctx: tokens.append(ctx.callback_token("approved")) or {}),
                     wait_for_event("approved", timeout=3600), j.body("b")]

    runner = LocalRunner(deployed(waits))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "WAITING")
    runner.deploy(deployed(lambda r: v2(r, j)))
    runner.engine.operator.wake(eid, "ops")
    assert runner.run_until_done(eid).error.code == "workflow_version_missing"
    # when
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(tokens[0], {"ok": True}, "partner")
    # then: ended, with the way back; and after it, the same token completes the wait
    assert refused.value.code == "execution_ended" and "not used up" in str(refused.value)
    runner.deploy(deployed(waits, lambda r: v2(r, j)))
    runner.engine.operator.redrive(eid, "ops")
    runner.run_until(eid, "WAITING")
    assert runner.engine.operator.complete_callback(tokens[0], {"ok": True}, "partner").outcome == "delivered"
    assert runner.run_until_done(eid).status is Status.COMPLETED


def test_versions_redrive_onto_a_version_that_changed_the_failed_map_is_refused_once_a_branch_succeeded():
    # given: version 1 maps over "items"; branch 1 fails for good, branches 0 and 2 succeed
    from engine_core import map_

    j = Journal()

    def prep(ctx):
        return {"items": ["x", "bad", "y"], "items2": ["p"]}

    def label(ctx):
        item = ctx.item
        j.append((f"label:{item}", ctx.execution_id))
        if item == "bad":
            raise PermanentStepError("bad item")
        return item

    def over(key, version):
        def build(r):
            @workflow("mapped", registry=r, version=version)
            class Mapped:
                steps = [prep, map_(label, over=key, name="m")]
        return build

    runner = LocalRunner(deployed(over("items", 1)))
    eid = runner.start("mapped", {})
    failed = runner.run_until_done(eid)
    assert failed.status is Status.FAILED and failed.current_step == 1

    # when: redriven onto version 2, which maps over another key
    runner.deploy(deployed(over("items", 1), over("items2", 2)))
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "oncall", to_version=2)

    # then: refused, naming the step, what changed and a branch that would pass for version 2's; nothing written
    message = str(refused.value)
    assert refused.value.code == "steps_differ", message
    assert "step 1 'm', which version 2 changed its branches" in message and "without --to-version (version 1 is deployed)" in message
    assert runner.engine.get(eid).version == failed.version
    # and: onto a version whose map is unchanged (a fixed branch function), the kept branches do not run again
    runner.deploy(deployed(over("items", 1), over("items", 3)))
    runner.engine.operator.redrive(eid, "oncall", to_version=3)
    done = runner.run_until_done(eid)
    assert done.status is Status.FAILED and j.ran(eid).count("label:x") == 1, j.ran(eid)


def test_versions_a_same_version_change_to_a_step_still_to_run_says_what_changed_in_it():
    # given: a version-1 map waits behind a sleep; a redeploy of version 1 maps over another key
    from engine_core import map_

    def label(ctx):
        return ctx.item

    def build(key):
        def b(r):
            @workflow("mapped", registry=r)
            class Mapped:
                steps = [sleep(days=1), map_(label, over=key, name="m")]
        return b

    runner = LocalRunner(deployed(build("items")))
    eid = runner.start("mapped", {"items": [1], "other": [2]})
    drive_until(runner, eid, lambda e: e.status is Status.SLEEPING)
    runner.deploy(deployed(build("other")))

    # when
    runner.engine.operator.wake(eid, "oncall")
    e = runner.run_until_done(eid)

    # then: the failure names the step and what changed in it, not a rename to its own name
    assert e.error.code == "workflow_definition_mismatch", e.error
    assert "step 1 'm', which this execution still has to run, changed its branches (a map's over= key" in e.error.message


@pytest.mark.parametrize("change", ["version removed", "event renamed at the same version"])
def test_versions_an_event_for_a_wait_no_longer_deployed_fails_the_execution_at_once_and_is_kept(change):
    from engine_core import wait_for_event

    # given: version 1 waits 7 days for "approved"; a deploy then drops version 1, or renames its event
    j = Journal()

    def waits(event, version=1):
        def build(r):
            @workflow(NAME, registry=r, version=version)
            class Approval:
                steps = [j.body("a"), wait_for_event(event, timeout=7 * 86400, name="approval"), j.body("b")]
        return build

    runner = LocalRunner(deployed(waits("approved")))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "WAITING")
    later = waits("approved", 2) if change == "version removed" else waits("approved2")
    runner.deploy(deployed(later))

    # when: the event comes
    sent_at = runner.clock.now()
    sent = runner.engine.operator.send_event(eid, "approved", {"ok": True}, "partner")
    e = runner.run_until_done(eid)

    # then: kept, and the execution fails at once naming the problem (it waited to its 7-day timeout)
    assert sent.outcome == "buffered"
    assert (e.updated_at - sent_at).total_seconds() < 60, e.updated_at
    expected = "workflow_version_missing" if change == "version removed" else "workflow_definition_mismatch"
    assert e.status is Status.FAILED and e.error.code == expected, e.error
    assert j.ran(eid) == ["a"]
    if change == "version removed":
        # and: redriven onto version 2, its wait takes the event that came
        runner.engine.operator.redrive(eid, "oncall", to_version=2)
        assert runner.run_until_done(eid).status is Status.COMPLETED and j.ran(eid) == ["a", "b"]


def test_versions_a_redrive_of_a_waiting_execution_whose_version_is_gone_says_how_to_move_it():
    from engine_core import wait_for_event

    # given: a version-1 execution waits; only version 2 is deployed now
    j = Journal()

    def waits(version):
        def build(r):
            @workflow(NAME, registry=r, version=version)
            class Approval:
                steps = [j.body("a"), wait_for_event("approved", timeout=3600), j.body("b")]
        return build

    runner = LocalRunner(deployed(waits(1)))
    eid = runner.start(NAME, {})
    runner.run_until(eid, "WAITING")
    runner.deploy(deployed(waits(2)))

    # when
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "oncall", to_version=2)

    # then: it says why it cannot go on and what to do, in that order
    message = str(refused.value)
    assert refused.value.code == "not_failed" and "workflow_version_missing" in message
    assert f"`loom wake {eid}`" in message and "then redrive it with --to-version" in message


def test_versions_a_redrive_of_a_sleeping_execution_whose_definition_changed_says_it_changed():
    # given: a version-1 execution sleeps; a same-version redeploy renames the step after the sleep
    j = Journal()
    runner, eid = asleep_on_v1(j)

    def renamed(r):
        @workflow(NAME, registry=r)
        class Renamed:
            steps = [j.body("a"), sleep(days=3), j.body("b2")]

    runner.deploy(deployed(renamed))
    # when
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "oncall")
    # then
    message = str(refused.value)
    assert refused.value.code == "not_failed" and "workflow_definition_mismatch" in message
    assert "as it started changed under it" in message and "is not deployed" not in message, message


def _undo_backs_off(registry: Registry, undone: list, style: str, versions=(1, 2)) -> None:
    """Version 1 charges (its refund fails once, then backs off before the retry), then ships, which fails
    for good; version 2 only ships."""
    def refund(charged):
        undone.append(charged)
        if len(undone) == 1:
            raise RuntimeError("refund service unavailable")

    def ship():
        raise PermanentStepError("address rejected")

    if style == "steps":
        if 1 in versions:
            @workflow("pay", registry=registry)
            class One:
                steps = [step(lambda ctx: {"charge": "ch-1"}, name="charge",
                              compensate=lambda ctx: refund(ctx.result["charge"])),
                         step(lambda ctx: ship(), name="ship")]
        if 2 in versions:
            @workflow("pay", registry=registry, version=2)
            class Two:
                steps = [step(lambda ctx: {"shipped": True}, name="ship")]
        return
    if 1 in versions:
        @durable("pay", registry=registry)
        def one(input):
            dstep("charge", lambda: "ch-1", compensate=refund)
            return dstep("ship", ship)
    if 2 in versions:
        @durable("pay", registry=registry, version=2)
        def two(input):
            return dstep("ship", lambda: True)


@pytest.mark.parametrize("style", ["steps", "code"])
def test_versions_a_failure_whose_undo_a_deploy_interrupted_keeps_its_error_through_the_redrive(style):
    # given: ship failed for good (permanent_error); the charge's refund failed once and backs off
    undone: list = []
    runner = LocalRunner(deployed(lambda r: _undo_backs_off(r, undone, style)))
    eid = runner.start("pay", {}, version=1)
    drive_until(runner, eid, lambda e: e.compensating and e.timer is not None and e.timer.value == "retry")
    assert runner.engine.get(eid).error.code == "permanent_error" and undone == ["ch-1"]
    # when: a deploy drops version 1 while the undo backs off; the retry's delivery cannot run it
    runner.deploy(deployed(lambda r: _undo_backs_off(r, undone, style, (2,))))
    stopped = runner.run_until_done(eid)
    assert (stopped.status, stopped.error.code) == (Status.FAILED, "workflow_version_missing"), stopped.error
    assert stopped.compensating and stopped.compensating_for.code == "permanent_error"  # kept, and shown
    assert status_event(stopped, None)["compensating_for"]["code"] == "permanent_error"  # in its status event
    assert failure_notice(stopped)["compensating_for"]["message"].endswith("address rejected")  # or DLQ notice
    # and: version 1 is deployed again and the operator redrives it
    runner.deploy(deployed(lambda r: _undo_backs_off(r, undone, style)))
    runner.engine.operator.redrive(eid, "oncall")
    e = runner.run_until_done(eid)
    # then: the refund ran again and the execution ends FAILED, compensated, with the failure the undo
    # answered (not the deploy's, and not none)
    assert (e.status, e.compensated, undone) == (Status.FAILED, True, ["ch-1", "ch-1"])
    assert e.error is not None and e.error.code == "permanent_error", e.error
    assert "address rejected" in e.error.message
    assert e.compensating_for is None


def test_versions_a_stopped_undo_is_redriven_onto_another_version_only_if_the_steps_it_undoes_stand_there():
    # given: a step list's failure whose undo a deploy of version 2 alone stopped (its step 0 is not the charge)
    undone: list = []
    runner = LocalRunner(deployed(lambda r: _undo_backs_off(r, undone, "steps")))
    eid = runner.start("pay", {}, version=1)
    drive_until(runner, eid, lambda e: e.compensating and e.timer is not None and e.timer.value == "retry")
    runner.deploy(deployed(lambda r: _undo_backs_off(r, undone, "steps", (2,))))
    assert runner.run_until_done(eid).compensating
    # when: redriven onto version 2
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "oncall", to_version=2)
    # then: refused, naming the step it undoes and what to do (before: taken, as its undo stood at step 0 and
    # nothing before it was compared; version 2's step 0 has no undo: COMPENSATION_FAILED, the charge never
    # refunded)
    assert refused.value.code == "steps_differ", refused.value
    assert "step 0 was 'charge' (task) and is now 'ship' (task)" in str(refused.value)
    assert runner.engine.get(eid).status is Status.FAILED and undone == ["ch-1"]
    # and: onto version 1 deployed again, it finishes its undo and ends with the failure it answered
    runner.deploy(deployed(lambda r: _undo_backs_off(r, undone, "steps")))
    runner.engine.operator.redrive(eid, "oncall", to_version=1)
    e = runner.run_until_done(eid)
    assert (e.status, e.compensated, e.error.code, undone) == (Status.FAILED, True, "permanent_error", ["ch-1", "ch-1"])


def _renamed_at_failure(registry: Registry, versions, fixed_name: str) -> None:
    def a(ctx):
        return {"a": 1}

    def boom(ctx):
        raise PermanentStepError("the carrier is down")

    def fixed(ctx):
        return {"b": 10}

    def total(ctx):
        return {"total": ctx["a"] + ctx["b"]}

    if 1 in versions:
        workflow("renamed_fix", registry=registry)(type("V1", (), {"steps": [a, boom]}))
    if 2 in versions:
        workflow("renamed_fix", version=2, registry=registry)(
            type("V2", (), {"steps": [a, step(fixed, name=fixed_name), sleep(hours=1), total]}))


@pytest.mark.parametrize("fixed_name", ["authorize", "zzz_authorize"], ids=["sorts before the failed", "sorts after"])
def test_versions_a_redrive_onto_a_version_whose_step_at_the_failure_has_another_name_reads_that_steps_result(fixed_name):
    # given: version 1 failed for good at "boom"; version 2 has another step there, then a sleep and a step
    # reading its result (the failed step's record stays in the history beside the new step's)
    runner = LocalRunner(deployed(lambda r: _renamed_at_failure(r, (1,), fixed_name)))
    eid = runner.start("renamed_fix", {})
    assert runner.run_until_done(eid).error.code == "permanent_error"
    runner.deploy(deployed(lambda r: _renamed_at_failure(r, (1, 2), fixed_name)))

    # when
    runner.engine.operator.redrive(eid, "oncall", to_version=2)
    asleep = runner.run_until(eid, "SLEEPING")
    context_while_asleep = runner.engine.context(eid)
    e = runner.run_until_done(eid)

    # then: the new step's result is the context's, before and after the sleep, not "missing" (corrupt_state)
    assert asleep.workflow_version == 2 and context_while_asleep == {"a": 1, "b": 10}
    assert e.status is Status.COMPLETED, e.error
    assert runner.engine.context(eid) == {"a": 1, "b": 10, "total": 11}


def test_versions_a_mismatch_says_to_ship_the_change_past_the_newest_version_deployed():
    # given: versions 1 and 2 deployed, an execution of version 1 asleep
    j = Journal()
    runner = LocalRunner(deployed(lambda r: v1(r, j, extra=[j.body("z")]), lambda r: v2(r, j)))
    eid = runner.start(NAME, {}, version=1)
    runner.run_until(eid, "SLEEPING")
    # when: version 1's list is changed in place under it (version 2 kept)
    registry = deployed(lambda r: v2(r, j))

    @workflow(NAME, registry=registry)
    class Changed:
        steps = [j.body("a"), sleep(days=3), j.body("b2")]
    runner.deploy(registry)
    e = runner.run_until_done(eid)
    # then: the advice names version 3, not version 2 (which is already another list)
    assert e.error.code == "workflow_definition_mismatch" and "version=3" in e.error.message, e.error.message
