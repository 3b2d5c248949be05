"""Code-first workflows meet the operator's actions and outside inputs: cancel (of a sleep, of a running
step with compensations), wake, redrive, events (buffered, declared, typed), callback tokens, and the
compensations of a failure. Memory store, manual clock; the operator is the engine's own."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from pydantic import BaseModel

from engine_core import EngineSettings, ExecutionStateConflictError, ManualClock, PermanentStepError, RetryPolicy, Status, StepRecord
from engine_core.durable import durable, map, sleep, step, wait_for_callback, wait_for_event
from engine_core.errors import CallbackNotFoundError, InvalidEventError
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc


def make_runner(registry, **settings) -> LocalRunner:
    clock = ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return LocalRunner(registry, clock=clock, settings=EngineSettings(**{"lease_s": 120, **settings}))


def until(runner, eid, status: Status, rounds: int = 50):
    for _ in range(rounds):
        e = runner.engine.get(eid)
        if e.status is status:
            return e
        runner.step_once()
    raise AssertionError(f"never {status.value}: {runner.engine.get(eid).status.value}")


def finish(runner, eid):
    for _ in range(2_000):
        e = runner.engine.get(eid)
        if e.status.is_terminal:
            return e
        runner.step_once()
    raise AssertionError("did not finish")


def names(runner, eid, kind=None) -> list[str]:
    return [r.name for r in runner.history(eid) if isinstance(r, StepRecord) and (kind is None or r.kind == kind)]


def saga(registry, log: list, fail_ship: dict) -> None:
    def ship(order):
        if fail_ship["now"]:
            raise PermanentStepError("no carrier for this address")
        log.append(("ship", order))
        return "shipped"

    @durable("saga", registry=registry)
    def flow(input):
        reserved = step("reserve", lambda sku: f"res-{sku}", input["sku"],
                        compensate=lambda result, sku: log.append(("release", result, sku)))
        charge = step("charge", lambda amount: {"id": "ch-9", "amount": amount}, input["amount"],
                      compensate=lambda result, amount: log.append(("refund", result["id"], amount)))
        sleep(hours=2)
        return step("ship", ship, reserved)


def test_durable_cancel_during_a_sleep_undoes_the_completed_steps_in_reverse(registry):
    # given
    log, fail = [], {"now": False}
    saga(registry, log, fail)
    runner = make_runner(registry)
    eid = runner.start("saga", {"sku": "mug", "amount": 12})
    until(runner, eid, Status.SLEEPING)

    # when
    cancelled = runner.engine.operator.cancel(eid, "ops", "duplicate order")
    e = finish(runner, eid)

    # then: compensating first (the cancel answers RUNNING), then CANCELLED; each undo got the step's
    # result and its arguments, in reverse order; ship never ran
    assert cancelled.compensating and cancelled.status is Status.RUNNING
    assert e.status is Status.CANCELLED and e.compensated
    assert log == [("refund", "ch-9", 12), ("release", "res-mug", "mug")]


def test_durable_cancel_of_a_running_step_waits_for_it_then_undoes_it_too(registry):
    # given: the cancel arrives while the charge's body runs
    log = []
    box = {}

    def charge(amount):
        box["during"] = runner.engine.operator.cancel(box["eid"], "ops", "stop")
        log.append(("charged", amount))
        return "ch-1"

    @durable("mid", registry=registry)
    def flow(input):
        step("charge", charge, 5, compensate=lambda result, amount: log.append(("refund", result, amount)))
        return step("ship", lambda: log.append(("ship",)) or "shipped")

    runner = make_runner(registry)
    box["eid"] = eid = runner.start("mid")

    # when
    e = finish(runner, eid)

    # then: a request (the body ran on), then the step it let finish was undone; ship never ran
    assert box["during"].cancel_requested and not box["during"].status.is_terminal
    assert e.status is Status.CANCELLED and e.compensated
    assert log == [("charged", 5), ("refund", "ch-1", 5)]


def test_durable_a_step_that_fails_for_good_undoes_the_earlier_steps_and_redrive_goes_on_after_the_fix(registry):
    # given: ship fails permanently; the saga compensates and ends FAILED
    log, fail = [], {"now": True}
    saga(registry, log, fail)
    runner = make_runner(registry)
    eid = runner.start("saga", {"sku": "cup", "amount": 3})
    e = finish(runner, eid)
    assert e.status is Status.FAILED and e.compensated and e.error.code == "permanent_error"
    assert ("refund", "ch-9", 3) in log and ("release", "res-cup", "cup") in log

    # when: a redrive of a compensated execution is refused (what it did was undone)
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "ops")

    # then
    assert refused.value.code == "compensated"


def test_durable_redrive_after_a_failure_resumes_at_the_failed_step_without_running_earlier_ones(registry):
    # given: no compensations; the second step fails until fixed
    runs, fixed = [], {"yes": False}

    def fragile():
        runs.append("fragile")
        if not fixed["yes"]:
            raise PermanentStepError("feed is broken")
        return "imported"

    @durable("fix_me", registry=registry)
    def flow(input):
        step("first", lambda: runs.append("first") or 1)
        return step("fragile", fragile)

    runner = make_runner(registry)
    eid = runner.start("fix_me")
    assert finish(runner, eid).status is Status.FAILED

    # when
    fixed["yes"] = True
    redriven = runner.engine.operator.redrive(eid, "ops")
    e = finish(runner, eid)

    # then
    assert redriven.status is Status.RUNNING and e.status is Status.COMPLETED
    assert runs == ["first", "fragile", "fragile"]


@pytest.mark.parametrize("fix", ["same version", "new version", "returns there", "after a sleep"])
def test_durable_code_that_raised_after_a_step_redriven_after_the_fix_goes_on_from_there(registry, fix):
    # given: the code after step 'a' (or after a sleep after it) raises (workflow_error); fixed in place, or as version 2
    runs, fixed = [], {"yes": False}

    @durable("raises_after_a", registry=registry)
    def flow(input):
        step("a", lambda: runs.append("a") or 1)
        if fix == "after a sleep":
            sleep(seconds=60)
        if not fixed["yes"]:
            raise ValueError("bad code between steps")
        if fix == "returns there":
            return "done early"
        return step("b", lambda: runs.append("b") or 2)

    @durable("raises_after_a", version=2, registry=registry)
    def flow2(input):
        step("a", lambda: runs.append("a2") or 1)
        return step("b", lambda: runs.append("b2") or 2)

    runner = make_runner(registry)
    eid = runner.start("raises_after_a", version=1)
    failed = finish(runner, eid)
    assert (failed.status, failed.error.code, failed.current_step) == (Status.FAILED, "workflow_error",
                                                                      2 if fix == "after a sleep" else 1)

    # when
    fixed["yes"] = True
    runner.engine.operator.redrive(eid, "ops", to_version=2 if fix == "new version" else None)
    e = finish(runner, eid)

    # then: the replay takes a's result and runs what the fixed code calls at position 1, once
    assert e.status is Status.COMPLETED, e.error
    assert (runs, runner.result(eid)) == {"same version": (["a", "b"], 2), "new version": (["a", "b2"], 2),
                                          "returns there": (["a"], "done early"), "after a sleep": (["a", "b"], 2)}[fix]
    assert names(runner, eid, "task") == (["a"] if fix == "returns there" else ["a", "b"])


def test_durable_wake_ends_a_sleep_now(registry):
    # given
    @durable("nap", registry=registry)
    def flow(input):
        sleep(days=30)
        return step("after", lambda: "awake")

    runner = make_runner(registry)
    eid = runner.start("nap")
    until(runner, eid, Status.SLEEPING)
    t0 = runner.clock.now()

    # when
    runner.engine.operator.wake(eid, "ops")
    e = finish(runner, eid)

    # then: done long before thirty days
    assert e.status is Status.COMPLETED and runner.clock.now() - t0 < dt.timedelta(hours=1)
    # and: the wake's record says when the sleep was due, in the API's one time format (before: +00:00)
    (op,), _ = runner.engine.operator.operations(eid)
    assert op.op == "wake" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", op.detail["due"]), op.detail


def test_durable_an_event_sent_before_the_wait_is_kept_for_it(registry):
    # given
    @durable("early", registry=registry)
    def flow(input):
        sleep(minutes=5)
        answer = wait_for_event("approved", timeout=3600)
        return step("record", lambda a: a["by"], answer)

    runner = make_runner(registry)
    eid = runner.start("early")
    until(runner, eid, Status.SLEEPING)

    # when
    sent = runner.engine.operator.send_event(eid, "approved", {"by": "ana"}, "ops")
    e = finish(runner, eid)

    # then
    assert sent.outcome == "buffered" and e.status is Status.COMPLETED
    assert names(runner, eid) == ["sleep", "approved", "record", "return"]


class Approval(BaseModel):
    approved: bool
    approver: str


def test_durable_declared_events_refuse_unknown_names_and_data_that_does_not_fit_at_send(registry):
    # given
    @durable("declared", registry=registry, events={"approved": Approval})
    def flow(input):
        return wait_for_event("approved", timeout=3600, model=Approval)

    runner = make_runner(registry)
    eid = runner.start("declared")
    until(runner, eid, Status.WAITING)
    before = runner.store.calls.get("put_event", 0)

    # when
    with pytest.raises(ExecutionStateConflictError) as unknown:
        runner.engine.operator.send_event(eid, "rejected", {}, "ops")
    with pytest.raises(InvalidEventError) as invalid:
        runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops")
    delivered = runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "ana"}, "ops")
    e = finish(runner, eid)

    # then: the refusals wrote nothing; the fitting one resumed it
    assert unknown.value.code == "unknown_event" and "approved" in str(unknown.value)
    assert {p["field"] for p in invalid.value.problems} == {"approved", "approver"}
    assert runner.store.calls.get("put_event", 0) == before + 1
    assert delivered.outcome == "delivered" and e.status is Status.COMPLETED


def undeclared_approval(registry, model: type | None = None) -> LocalRunner:
    """A function waiting for "approved" with a model and no ``events=``. By default the model is defined in
    here, where nothing outside can find it by name: no send can check an event against it."""
    class LocalApproval(BaseModel):
        approved: bool
        approver: str

    @durable("undeclared", registry=registry)
    def flow(input):
        answer = wait_for_event("approved", timeout=3600, model=model or LocalApproval,
                                 retry=RetryPolicy())  # each timeout waits again, up to three waits
        return step("record", lambda a: a["approver"], answer)

    return make_runner(registry)


def test_durable_a_wait_s_model_checks_a_send_while_the_execution_waits_there(registry):
    # given: no `events=`; the wait's model is a module-level class, so its position names it
    runner = undeclared_approval(registry, model=Approval)
    eid = runner.start("undeclared")
    until(runner, eid, Status.WAITING)
    before = runner.store.calls.get("put_event", 0)

    # when: a misfit is sent while it waits there, then one that fits
    with pytest.raises(InvalidEventError) as invalid:
        runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops")
    written = runner.store.calls.get("put_event", 0) - before
    fits = runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "di"}, "ops")
    e = finish(runner, eid)

    # then: refused at send, naming each field, nothing written; the fitting one completed it
    assert {p["field"] for p in invalid.value.problems} == {"approved", "approver"} and written == 0
    assert str(invalid.value).endswith(f"the wait's model is {__name__}.Approval")
    assert fits.outcome == "delivered" and e.status is Status.COMPLETED and runner.result(eid) == "di"


def test_durable_a_misfit_checked_before_the_execution_reached_its_wait_is_answered_buffered_not_delivered(registry):
    # given: no `events=`; the wait's module-level model can be named only once the execution is at it
    runner = undeclared_approval(registry, model=Approval)
    eid = runner.start("undeclared")
    put_event = runner.store.put_event

    def put_then_the_execution_reaches_its_wait(*args, **kwargs):
        # the send's check saw it not yet waiting; the execution gets to its wait before the send looks again
        written = put_event(*args, **kwargs)
        until(runner, eid, Status.WAITING)
        return written

    runner.store.put_event = put_then_the_execution_reaches_its_wait

    # when: a misfit is sent at that moment
    misfit = runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops", event_id="bad")
    runner.store.put_event = put_event
    waiting = runner.engine.get(eid)
    fits = runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "di"}, "ops",
                                             event_id="good")
    e = finish(runner, eid)

    # then: not "delivered" (the wait passes it over, and it woke nothing); the fitting one completed the wait
    assert misfit.outcome == "buffered"
    assert waiting.status is Status.WAITING and waiting.next_wake_at == waiting.waiting_since + dt.timedelta(hours=1)
    assert fits.outcome == "delivered" and e.status is Status.COMPLETED and runner.result(eid) == "di"
    [wait] = [r for r in runner.history(eid) if r.kind == "event"]
    assert wait.event_id == "good"


def test_durable_a_callback_answered_with_a_misfit_while_its_wait_waits_is_refused_and_the_token_stays_usable(registry):
    # given
    tokens = []

    @durable("signed", registry=registry)
    def flow(input):
        answer = wait_for_callback("approved", tokens.append, timeout=3600, model=Approval)
        return step("record", lambda a: a["approver"], answer)

    runner = make_runner(registry)
    eid = runner.start("signed")
    until(runner, eid, Status.WAITING)

    # when
    with pytest.raises(InvalidEventError):
        runner.engine.operator.complete_callback(tokens[-1], {"approved": "maybe"}, "partner")
    answered = runner.engine.operator.complete_callback(tokens[-1], {"approved": True, "approver": "ed"}, "partner")
    e = finish(runner, eid)

    # then: the misfit did not use the token up
    assert answered.outcome == "delivered" and e.status is Status.COMPLETED and runner.result(eid) == "ed"


def test_durable_an_undeclared_event_that_does_not_fit_is_passed_over_and_the_wait_goes_on_to_its_timeout(registry):
    # given: no `events=`, so no send can check the data; the wait's model can
    runner = undeclared_approval(registry)
    eid = runner.start("undeclared")
    began = until(runner, eid, Status.WAITING).waiting_since
    runner.clock.advance(dt.timedelta(minutes=10))

    # when: a misfit arrives (and wakes the wait), then, later, one that fits
    misfit = runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops", event_id="bad")
    for _ in range(5):
        runner.step_once()
    waiting = runner.engine.get(eid)
    runner.clock.advance(dt.timedelta(minutes=10))
    fits = runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "ana"}, "ops",
                                             event_id="good")
    e = finish(runner, eid)

    # then: still waiting after the misfit, on the same period (its timeout, its attempt), and the fitting
    # event completed the wait; the misfit is left unconsumed
    assert misfit.outcome == "delivered" and fits.outcome == "delivered"
    assert waiting.status is Status.WAITING and waiting.attempt == 1
    assert waiting.next_wake_at == began + dt.timedelta(hours=1)
    assert e.status is Status.COMPLETED and runner.result(eid) == "ana"
    [wait] = [r for r in runner.history(eid) if r.kind == "event"]
    assert (wait.event_id, wait.started_at, wait.attempts) == ("good", began, 1)


def test_durable_a_misfit_whose_wake_message_was_lost_is_passed_over_after_the_sweepers_hand_over(registry):
    # given: a misfit wakes the wait, and the message of that wake is lost
    runner = undeclared_approval(registry)
    eid = runner.start("undeclared")
    began = until(runner, eid, Status.WAITING).waiting_since
    runner.queue.drop_rate = 1.0
    runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops")
    runner.queue.drop_rate = 0.0
    runner.queue.purge()
    # when: the sweeper hands the due execution on (RUNNING, a lease), and that message is delivered
    for _ in range(10):
        runner.clock.advance(dt.timedelta(seconds=30))
        runner.step_once()
    waiting = runner.engine.get(eid)
    runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "cy"}, "ops")
    e = finish(runner, eid)

    # then: it waited on (the same period, to its own timeout); the fitting event completed it, and the
    # wait's record starts when the wait began, not at the hand-over
    assert waiting.status is Status.WAITING and waiting.attempt == 1
    assert waiting.next_wake_at == began + dt.timedelta(hours=1)
    assert e.status is Status.COMPLETED and runner.result(eid) == "cy"
    [wait] = [r for r in runner.history(eid) if r.kind == "event"]
    assert wait.started_at == began


def test_durable_a_misfit_event_does_not_outlive_an_operator_wake_or_the_timeout(registry):
    # given: a misfit kept while the execution waits
    runner = undeclared_approval(registry)
    woken = runner.start("undeclared")
    until(runner, woken, Status.WAITING)
    runner.engine.operator.send_event(woken, "approved", {"approver": 7}, "ops")
    for _ in range(5):
        runner.step_once()
    # when: an operator wakes it (a wait times out now), and another waits out its hour
    runner.engine.operator.wake(woken, "ops")
    woken_end = finish(runner, woken)
    timed = runner.start("undeclared", {"n": 2})
    until(runner, timed, Status.WAITING)
    runner.engine.operator.send_event(timed, "approved", {"approved": None}, "ops")
    runner.clock.advance(dt.timedelta(hours=3))
    for _ in range(20):
        runner.step_once()
    timed_state = runner.engine.get(timed)

    # then: both times out as they would have without the misfit (a retry of the wait, then a failure)
    assert woken_end.status is Status.FAILED and woken_end.error.code == "event_timeout"
    assert timed_state.status is Status.WAITING and timed_state.attempt == 2


def test_durable_a_wait_failed_for_good_redriven_waits_for_a_fitting_event(registry):
    # given: the misfit came, the waits timed out for good
    runner = undeclared_approval(registry)
    eid = runner.start("undeclared")
    until(runner, eid, Status.WAITING)
    runner.engine.operator.send_event(eid, "approved", {"approved": "maybe"}, "ops")
    for _ in range(3):
        runner.clock.advance(dt.timedelta(hours=2))
        for _ in range(10):
            runner.step_once()
    assert runner.engine.get(eid).status is Status.FAILED
    # when
    runner.engine.operator.redrive(eid, "ops")
    redriven = until(runner, eid, Status.WAITING)
    runner.engine.operator.send_event(eid, "approved", {"approved": True, "approver": "bo"}, "ops")
    e = finish(runner, eid)

    # then: the misfit was passed over again; the fitting event completed it
    assert redriven.status is Status.WAITING
    assert e.status is Status.COMPLETED and runner.result(eid) == "bo"


def test_durable_a_callback_token_completes_its_wait_once(registry):
    # given: the submit step hands the token out
    tokens = []

    @durable("callback", registry=registry)
    def flow(input):
        answer = wait_for_callback("signed", tokens.append, timeout=3600)
        return step("file", lambda a: a["doc"], answer)

    runner = make_runner(registry)
    eid = runner.start("callback")
    until(runner, eid, Status.WAITING)

    # when
    first = runner.engine.operator.complete_callback(tokens[0], {"doc": "d-1"}, "signer")
    with pytest.raises(ExecutionStateConflictError) as again:
        runner.engine.operator.complete_callback(tokens[0], {"doc": "d-2"}, "signer")
    with pytest.raises(CallbackNotFoundError):
        runner.engine.operator.complete_callback(tokens[0][:-2] + "xx", {}, "forger")
    e = finish(runner, eid)

    # then
    assert first.outcome == "delivered" and again.value.code == "callback_used"
    assert e.status is Status.COMPLETED and names(runner, eid) == ["signed.submit", "signed", "file", "return"]


def test_durable_a_callback_answered_while_its_submit_step_still_runs_is_kept_for_the_wait(registry):
    # given: the outside system answers inside the submit step (before the wait began)
    box = {}

    def submit(token):
        box["sent"] = runner.engine.operator.complete_callback(token, {"ok": True}, "fast-system")

    @durable("fast_callback", registry=registry)
    def flow(input):
        return wait_for_callback("done", submit, timeout=3600)

    runner = make_runner(registry)
    eid = runner.start("fast_callback")

    # when
    e = finish(runner, eid)

    # then
    assert box["sent"].outcome == "buffered" and e.status is Status.COMPLETED


def test_durable_a_map_branch_that_fails_for_good_fails_the_step_and_undoes_what_completed(registry):
    # given
    log = []

    def resize(size):
        if size == 3:
            raise PermanentStepError("size 3 is not supported")
        return size * 10

    @durable("fan", registry=registry)
    def flow(input):
        step("upload", lambda: "u-1", compensate=lambda result: log.append(("delete", result)))
        return map("resize", resize, [1, 2, 3, 4], max_concurrency=2)

    runner = make_runner(registry)
    eid = runner.start("fan")

    # when
    e = finish(runner, eid)

    # then
    assert e.status is Status.FAILED and e.compensated and "size 3" in e.error.message
    assert log == [("delete", "u-1")]


def test_durable_cancel_of_a_waiting_execution_without_compensations_ends_it_at_once(registry):
    # given
    @durable("waiter", registry=registry)
    def flow(input):
        step("prepare", lambda: 1)
        return wait_for_event("go", timeout=3600)

    runner = make_runner(registry)
    eid = runner.start("waiter")
    until(runner, eid, Status.WAITING)

    # when
    e = runner.engine.operator.cancel(eid, "ops", None)

    # then
    assert e.status is Status.CANCELLED and not e.compensating and e.next_wake_at is None


def test_durable_the_retry_policy_of_a_step_applies_and_wake_ends_its_backoff(registry):
    # given: the step fails twice with a long backoff
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("upstream 503")
        return "ok"

    @durable("backoff", registry=registry)
    def flow(input):
        return step("flaky", flaky, retry=RetryPolicy(max_attempts=3, base=3600, max_delay=3600))

    runner = make_runner(registry)
    eid = runner.start("backoff")
    runner.step_once()
    t0 = runner.clock.now()

    # when: woken out of each backoff
    for _ in range(2):
        runner.engine.operator.wake(eid, "ops")
        for _ in range(3):
            runner.step_once()
    e = finish(runner, eid)

    # then
    assert e.status is Status.COMPLETED and len(attempts) == 3
    assert runner.clock.now() - t0 < dt.timedelta(hours=1)


def test_durable_a_wait_without_retry_waits_once_as_in_a_step_list_and_a_wake_ends_it(registry):
    # given: code-first waits of 60 s, one without retry=, one with two attempts; the workflow retries steps 3 times
    @durable("waits", registry=registry, retry=RetryPolicy(max_attempts=3, base=1.0))
    def flow(input):
        if input.get("twice"):
            return wait_for_event("approved", timeout=60, retry=RetryPolicy(max_attempts=2, base=1.0))
        return wait_for_event("approved", timeout=60)

    runner = make_runner(registry)
    for twice, waits in ((False, 1), (True, 2)):
        eid = runner.start("waits", {"twice": twice})
        until(runner, eid, Status.WAITING)
        began = runner.clock.now()
        e = finish(runner, eid)
        # then: it fails after its own timeout, once per attempt its retry allows (three before: the step policy)
        assert (e.status, e.error.code) == (Status.FAILED, "event_timeout")
        assert f"(wait {waits} of {waits})" in e.error.message
        assert 60 * waits <= (runner.clock.now() - began).total_seconds() < 60 * waits + 30
    # and: an operator's wake ends a wait that is not retried, as it does a step list's
    eid = runner.start("waits", {})
    until(runner, eid, Status.WAITING)
    runner.engine.operator.wake(eid, "ops")
    woke = runner.clock.now()
    e = finish(runner, eid)
    assert (e.status, e.error.code, runner.clock.now()) == (Status.FAILED, "event_timeout", woke)
    assert "operator's wake" in e.error.message and "before its 60 s timeout" in e.error.message, e.error.message
    (failed,) = [r for r in runner.history(eid) if isinstance(r, StepRecord) and r.kind == "event"]
    assert failed.status.value == "FAILED" and failed.started_at is not None and failed.started_at <= woke


def test_durable_a_short_wait_woken_near_its_timeout_still_says_an_operator_ended_it(registry):
    # given: a wait of 2 s, woken after 1.5 s: within the early tolerance (1 s) of its timeout
    import datetime as dt

    @durable("short_wait", registry=registry)
    def flow(input):
        return wait_for_event("go", timeout=2)

    runner = make_runner(registry)
    eid = runner.start("short_wait", {})
    until(runner, eid, Status.WAITING)
    runner.clock.advance(dt.timedelta(seconds=1.5))
    # when
    runner.engine.operator.wake(eid, "ops")
    e = finish(runner, eid)
    # then: the wake is named, not a timeout that never ran its course
    assert (e.status, e.error.code) == (Status.FAILED, "event_timeout")
    assert "an operator's wake (loom wake) ended the wait for 'go' after 1.5 s, before its 2 s timeout" in e.error.message, \
        e.error.message


def test_durable_a_long_wait_woken_after_days_says_its_seconds_without_an_exponent(registry):
    import datetime as dt

    @durable("year_wait", registry=registry)
    def flow(input):
        return wait_for_event("go", timeout=366 * 86400)

    runner = make_runner(registry)
    eid = runner.start("year_wait", {})
    until(runner, eid, Status.WAITING)
    runner.clock.advance(dt.timedelta(days=200, seconds=0.4))
    runner.engine.operator.wake(eid, "ops")
    e = finish(runner, eid)
    assert "after 17280000 s (200 d), before its 31622400 s (366 d) timeout" in e.error.message, e.error.message


@pytest.mark.parametrize("woken", [False, True], ids=["due", "woken"])
def test_durable_a_sleep_that_began_goes_on_to_its_wake_time_after_a_redrive_never_over_again(registry, woken):
    # given: a deploy changes the function while it sleeps an hour; the replay at the wake (due, or an
    # operator's wake: the only ways a delivery reaches a sleep before it is over) fails nondeterministic_replay
    # at the sleep's position
    flag = {"new": False}
    shipped = []

    @durable("sleep_redrive", registry=registry)
    def flow(input):
        step("charge", lambda: "ch-1")
        if flag["new"]:
            step("refund_policy", lambda: 1)
        sleep(hours=1)
        return step("ship", lambda: shipped.append(1) or "shipped")

    runner = make_runner(registry)
    eid = runner.start("sleep_redrive")
    e = until(runner, eid, Status.SLEEPING)
    wake_at = e.next_wake_at
    flag["new"] = True
    if woken:
        runner.engine.operator.wake(eid, "ops")
    else:
        runner.clock.advance(3600)
    failed = finish(runner, eid)
    assert (failed.status, failed.error.code, failed.current_step) == (Status.FAILED, "nondeterministic_replay", 1)
    at_failure = runner.clock.now()
    # when: the deploy is undone and the execution redriven
    flag["new"] = False
    runner.engine.operator.redrive(eid, "ops")
    # then: a sleep that was due, or that the operator woke (a wake is never undone), moves on at once
    done = finish(runner, eid)
    assert done.status is Status.COMPLETED and shipped == [1]
    assert runner.clock.now() < wake_at if woken else runner.clock.now() == at_failure
    sleeps = [r for r in runner.engine.history(eid) if r.kind == "sleep"]
    assert len(sleeps) == 1 and sleeps[0].started_at <= at_failure  # the record of when it began, kept


def test_durable_a_cancel_whose_replay_goes_another_way_fails_and_the_redrive_after_the_fix_undoes(registry):
    # given: a charge to undo, then an hour's sleep; a deploy renames the charge step while it sleeps
    flag = {"new": False}
    refunds: list = []

    @durable("undo_after_fix", registry=registry)
    def flow(input):
        step("charge_v2" if flag["new"] else "charge", lambda: "ch-1", compensate=lambda result: refunds.append(result))
        sleep(hours=1)
        return step("ship", lambda: "shipped")

    runner = make_runner(registry)
    eid = runner.start("undo_after_fix")
    until(runner, eid, Status.SLEEPING)
    flag["new"] = True
    # when: an operator cancels; the undo's replay meets the renamed step
    runner.engine.operator.cancel(eid, "ops", reason="customer left")
    failed = finish(runner, eid)
    # then: FAILED (not COMPENSATION_FAILED: no undo ran, none failed), naming both steps and a remedy that works
    assert (failed.status, failed.error.code) == (Status.FAILED, "nondeterministic_replay"), failed.error
    assert "step('charge_v2')" in failed.error.message and "loom redrive" in failed.error.message
    assert refunds == [] and failed.compensated is None
    # and once the function is as it was, the redrive goes on undoing: the charge is refunded once, and the
    # execution ends as the cancel asked
    flag["new"] = False
    runner.engine.operator.redrive(eid, "ops")
    done = finish(runner, eid)
    assert (done.status, done.compensated) == (Status.CANCELLED, True), (done.status, done.error)
    assert refunds == ["ch-1"]
