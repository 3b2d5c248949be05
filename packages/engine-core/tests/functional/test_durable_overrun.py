"""A code-first function's own code between durable calls is held to its delivery's deadline (``durable.overrun``):
interrupted shortly before the delivery's end and failed with its line, where the runtime ended the invocation
(under ``loom dev``, the process) at every delivery that reached it. Real time: the system clock and a real
deadline, a few seconds each."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections import Counter
from typing import Any

import pytest

from engine_core import Engine, EngineSettings, InsufficientTimeError, PermanentStepError, Registry, Status, SystemClock
from engine_core.sweeper import Sweeper
from engine_core.adapters.fake_queue import FakeQueue
from engine_core.adapters.memory import MemoryStore
from engine_core.durable import durable, parallel, sleep, step
from engine_core.durable.overrun import deadline_s
from engine_core.clock import ManualClock

MARGIN_MS = 1000
DELIVERY_S = 3.0


def deliver(engine: Engine, queue: FakeQueue, eid: str, limit: int = 5, released: list | None = None) -> None:
    """Each visible message of ``eid`` as a worker delivers it: ``DELIVERY_S`` of real time left; a delivery
    that asks for more time (``InsufficientTimeError``) puts its message back, as the workers do."""
    for _ in range(limit):
        batch = queue.receive()
        if not batch:
            return
        for m in batch:
            ends = time.monotonic() + DELIVERY_S
            try:
                engine.process(m.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000))
            except InsufficientTimeError:
                queue.release(m)
                if released is not None:
                    released.append(m.body.step)
                continue
            queue.ack(m)


def measured(pattern: str, message: str, code_s: float, budget_and_margin_s: float) -> None:
    """``message`` gives, through ``pattern``'s two groups, the seconds of code before a call and what the call needs:
    measured, so a loaded machine adds a little to ``code_s``; what it needs is that code plus the budget and margin."""
    found = re.search(pattern, message)
    assert found, message
    took, needed = (float(g) for g in found.groups())
    assert code_s <= took < code_s + 0.5 and needed == pytest.approx(took + budget_and_margin_s, abs=0.11), message


def refused(engine: Engine, queue: FakeQueue, eid: str, step: str | None) -> Any:
    """Deliver ``eid`` until nothing is left; it ended FAILED ``step_timeout_too_long`` at ``step`` with no message
    put back: the execution as it ended."""
    released: list = []
    deliver(engine, queue, eid, released=released)
    e = engine.get(eid)
    assert (e.status, e.error.code, e.error.step_name) == (Status.FAILED, "step_timeout_too_long", step), e.error
    assert not released, released
    return e


def redriven_after_the_fix(engine: Engine, queue: FakeQueue, eid: str, fixed: dict) -> Any:
    """The code fixed (``fixed["yes"]``), ``eid`` redriven and delivered to its end with no message put back."""
    fixed["yes"] = True
    engine.operator.redrive(eid, "ops")
    released: list = []
    deliver(engine, queue, eid, released=released)
    assert not released, released
    return engine.get(eid)


def make(registry: Registry) -> tuple[Engine, FakeQueue]:
    clock = SystemClock()
    settings = EngineSettings(time_margin_ms=MARGIN_MS, function_timeout_s=DELIVERY_S)
    queue = FakeQueue(clock)
    return Engine(MemoryStore(shards=settings.shards), queue, registry, clock, settings), queue


def cancel_meets_the_slow_line(engine: Engine, queue: FakeQueue, eid: str) -> None:
    """An operator cancels ``eid``, and its undo's replay reaches code that runs 30 s: the delivery ends at its
    deadline with the execution FAILED during the cancel (which its error names), still compensating."""
    engine.operator.cancel(eid, "ops", reason="no longer needed")
    began = time.monotonic()
    deliver(engine, queue, eid)
    e = engine.get(eid)
    assert e.status is Status.FAILED and e.error.code == "workflow_error" and e.compensating, e.error
    assert e.cancelled_by == "ops" and "for a cancel" in e.error.message
    assert time.monotonic() - began < DELIVERY_S + 0.5


@pytest.mark.parametrize("where", ["after a step", "after a body that used most of the delivery",
                                   "swallowed by except Exception"])
def test_durable_code_between_calls_past_the_deadline_fails_the_execution_with_its_line(where):
    # given: code between two steps that would run 30 s in a 3 s delivery
    registry, runs = Registry(), Counter()

    @durable("slow_between", registry=registry)
    def flow(input):
        runs["function"] += 1
        step("a", lambda: time.sleep(1.6) if where.startswith("after a body") else 1, timeout_s=1.75)
        if where.startswith("swallowed"):
            try:
                time.sleep(30)
            except Exception:  # noqa: BLE001 - the overrun is a BaseException: this does not catch it
                runs["swallowed"] += 1
        else:
            time.sleep(30)  # the slow line
        return step("b", lambda: 2)

    engine, queue = make(registry)
    eid = engine.start("slow_between", {}).execution.execution_id

    # when
    began, released = time.monotonic(), []
    deliver(engine, queue, eid, released=released)
    took = time.monotonic() - began

    # then: FAILED at the deadline (the delivery less half the margin), naming the line and what to do;
    # the step before it kept, the one after never run; nothing left on the queue to run it again. Where
    # the slow code began late in its delivery (after a body that took most of it), that delivery moved past
    # the step and sent the execution on instead, and the next one, which gave the code all a delivery has,
    # failed it
    e = engine.get(eid)
    assert e.status is Status.FAILED and e.error.code == "workflow_error", e.error
    assert "between durable calls" in e.error.message and "test_durable_overrun.py" in e.error.message
    assert "Move the slow work into a step()" in e.error.message
    deliveries = 2 if where.startswith("after a body") else 1
    assert deliveries * (DELIVERY_S - MARGIN_MS / 1000) <= took < deliveries * DELIVERY_S + 0.5, took
    assert not released, released  # each delivery wrote (a step ran): nothing is put back
    assert runs == Counter({"function": deliveries}) and not queue.receive()
    names = [r.name for r in engine.life.store.history(eid) if hasattr(r, "name")]
    assert "a" in names and "b" not in names


def test_durable_code_that_fits_a_delivery_but_began_late_in_one_goes_on_in_a_fresh_one_not_failed():
    # given: code between two steps that takes 1.5 s (a delivery gives it 2.5 s), after a body that took 1.6 s
    registry, runs = Registry(), Counter()

    @durable("late_between", registry=registry)
    def flow(input):
        runs["function"] += 1
        step("a", lambda: time.sleep(1.6) or runs.update(["a"]), timeout_s=1.75)
        time.sleep(1.5)  # fits a delivery, not what is left of this one
        return step("b", lambda: runs.update(["b"]) or 2, timeout_s=0.3)

    engine, queue = make(registry)
    eid = engine.start("late_between", {}).execution.execution_id

    # when
    released = []
    deliver(engine, queue, eid, released=released)

    # then: the first delivery ended at its deadline without failing anything: it moved past "a" and sent
    # the execution on; the next one replayed "a" (not run again) and ran the code and "b": COMPLETED
    # (before: FAILED workflow_error, as if the code were slow)
    e = engine.get(eid)
    assert e.status is Status.COMPLETED, e.error
    assert not released and runs == Counter({"function": 2, "a": 1, "b": 1}), (released, runs)


def test_durable_a_cancel_during_the_step_before_late_code_is_undone_when_the_delivery_sends_it_on():
    # given: a compensable step whose body takes 1.6 s, during which an operator cancels; then 1.5 s of code
    registry, runs, seen = Registry(), Counter(), {}

    def charge():
        time.sleep(0.3)
        seen["engine"].operator.cancel(seen["eid"], "ops", reason="no longer needed")  # while the attempt runs
        time.sleep(1.3)
        runs["charge"] += 1
        return 1

    @durable("cancel_then_late", registry=registry)
    def flow(input):
        step("charge", charge, timeout_s=1.75, compensate=lambda result: runs.update(["refund"]))
        time.sleep(1.5)
        return step("ship", lambda: runs.update(["ship"]), timeout_s=0.3)

    engine, queue = make(registry)
    seen["engine"] = engine
    eid = seen["eid"] = engine.start("cancel_then_late", {}).execution.execution_id

    # when: the code after the charge meets the delivery's end, and the delivery makes the charge's move
    deliver(engine, queue, eid)

    # then: that move finds the cancel, and the charge is undone once; nothing after it ran
    e = engine.get(eid)
    assert (e.status, e.compensated, e.cancelled_by) == (Status.CANCELLED, True, "ops"), (e.status, e.error)
    assert runs == Counter({"charge": 1, "refund": 1})


def test_durable_deliveries_begun_with_little_time_left_move_on_or_put_their_message_back_never_fail():
    # given: an execution asleep after "a"; after the sleep, code that takes 1.5 s (a delivery gives it 2.5 s)
    registry, runs = Registry(), Counter()

    @durable("late_delivery", registry=registry)
    def flow(input):
        step("a", lambda: runs.update(["a"]))
        sleep(3600)
        runs["after the sleep"] += 1
        time.sleep(1.5)
        return step("b", lambda: runs.update(["b"]) or 2, timeout_s=0.3)

    engine, queue = make(registry)
    eid = engine.start("late_delivery", {}).execution.execution_id
    deliver(engine, queue, eid)
    assert engine.get(eid).status is Status.SLEEPING
    engine.operator.wake(eid, "ops")

    def late(seconds_left: float):  # a batch's last record: little of the invocation left
        (m,) = queue.receive()
        ends = time.monotonic() + seconds_left
        try:
            kind = engine.process(m.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000)).kind
        except InsufficientTimeError:
            queue.release(m)
            return "released"
        queue.ack(m)
        return kind

    # when: the wake's message is delivered with 1.6 s left, then the next one with 1.6 s left too
    woke = late(1.6)
    again = late(1.6)

    # then: neither failed anything. The first ended the sleep (a write) and was sent on past it; the second
    # wrote nothing and put its message back (before: both FAILED workflow_error, as if the code were slow)
    assert (woke, again) == ("advanced", "released")
    assert engine.get(eid).status is Status.RUNNING and runs == Counter({"a": 1, "after the sleep": 2})
    # and a delivery with its whole time runs the code and "b"
    deliver(engine, queue, eid)
    e = engine.get(eid)
    assert e.status is Status.COMPLETED, e.error
    assert runs == Counter({"a": 1, "after the sleep": 3, "b": 1})


@pytest.mark.parametrize("before", ["at the top", "after a compensable step"])
def test_durable_a_step_no_delivery_has_time_for_after_the_code_before_it_fails_at_once_and_a_fixed_redrive_goes_on(
        before):
    # given: 1.2 s of the function's own code before a step with a 1.5 s budget: with the 1 s margin, 3.7 s
    # of a 3 s delivery (each fits alone: the code a delivery, the budget the worker's timeout)
    registry, runs, fixed = Registry(), Counter(), {"yes": False}

    @durable("late_step", registry=registry)
    def flow(input):
        runs["function"] += 1
        if before.startswith("after"):
            step("charge", lambda: runs.update(["charge"]) or 1, timeout_s=0.5,  # its undo fits after the code
                 compensate=lambda result: runs.update(["refund"]))
        time.sleep(0.1 if fixed["yes"] else 1.2)
        return step("ship", lambda: runs.update(["ship"]) or 2, timeout_s=1.5)

    engine, queue = make(registry)
    eid = engine.start("late_step", {}).execution.execution_id

    # when
    e = refused(engine, queue, eid, "ship")

    # then: the delivery that reaches the call fails the execution there, naming it, the numbers and what to do; the step
    # never ran and what ran before is undone (before: the message was put back at every delivery, for ever,
    # the execution RUNNING with no error)
    measured(r"comes after ([\d.]+) s of the function's own code.* it needs ([\d.]+) s, and the worker's timeout is "
             r"3 s", e.error.message, 1.2, 1.5 + 1)
    assert "Move the slow code before the call into a step" in e.error.message and "then redrive" in e.error.message
    # (after "charge", the first delivery sent the execution on; the second failed it, the third undid "charge")
    assert runs["function"] == (3 if before.startswith("after") else 1) and runs["ship"] == 0
    assert runs["refund"] == runs["charge"] == (1 if before.startswith("after") else 0)
    if before.startswith("after"):
        assert e.compensated is True
        return
    # and once the code before it is fixed, a redrive runs the step
    e = redriven_after_the_fix(engine, queue, eid, fixed)
    assert e.status is Status.COMPLETED and runs["ship"] == 1, (e.status, e.error)


def test_durable_a_fan_out_whose_branches_no_delivery_has_time_for_after_the_replay_to_it_fails_before_it_begins():
    # given: 1.5 s of own code before a parallel step whose branches have the default budget (1 s in a 3 s
    # worker): each branch's delivery replays that code first, 3.5 s with the budget and the margin
    registry, runs, fixed = Registry(), Counter(), {"yes": False}

    @durable("late_fan_out", registry=registry)
    def flow(input):
        step("a", lambda: 1)
        time.sleep(0.1 if fixed["yes"] else 1.5)
        return parallel("both", lambda: runs.update(["left"]) or "l", lambda: runs.update(["right"]) or "r")

    engine, queue = make(registry)
    eid = engine.start("late_fan_out", {}).execution.execution_id

    # when
    e = refused(engine, queue, eid, "both")

    # then: the step fails before it fans out, naming its branches' budget (before: it fanned out, and every
    # branch's delivery put its message back, for ever)
    measured(r"comes after ([\d.]+) s .* with its branches' 1 s budget and the 1 s margin it needs ([\d.]+) s",
             e.error.message, 1.5, 1 + 1)
    assert "no delivery can run a branch of it" in e.error.message
    assert not runs and not engine.life.store.branches(eid, 1)
    # and once the code is fixed, a redrive fans out and each branch runs once
    e = redriven_after_the_fix(engine, queue, eid, fixed)
    assert e.status is Status.COMPLETED and runs == Counter({"left": 1, "right": 1}), (e.status, e.error, runs)


def test_durable_an_undo_no_delivery_has_time_for_after_the_replay_ends_failed_still_compensating_and_a_fixed_redrive_undoes():
    # given: a compensable step with the default budget (1 s in a 3 s worker: its undo's too), then 1.2 s of the
    # function's own code and a step that fails for good: undoing "charge" replays that code first
    registry, runs, fixed = Registry(), Counter(), {"yes": False}

    def ship():
        runs["ship"] += 1
        raise PermanentStepError("the carrier refused the parcel")

    @durable("late_undo", registry=registry)
    def flow(input):
        step("charge", lambda: runs.update(["charge"]) or 1, compensate=lambda result: runs.update(["refund"]))
        time.sleep(0.1 if fixed["yes"] else 1.2)
        return step("ship", ship, timeout_s=0.5)

    engine, queue = make(registry)
    eid = engine.start("late_undo", {}).execution.execution_id

    # when
    e = refused(engine, queue, eid, None)  # the undo's error names its position, not a step of the list

    # then: the delivery that would undo "charge" ends the execution FAILED, still compensating, naming the undo,
    # the numbers and what to do; nothing was undone (before: its message was put back at every delivery, for ever)
    assert e.compensating and e.error.step_index == 0, e.error
    measured(r"the undo of position 0, 'charge', comes after the replay that says what to undo, ([\d.]+) s .* it "
             r"needs ([\d.]+) s, and the worker's timeout is 3 s", e.error.message, 1.2, 1 + 1)
    assert "then a redrive goes on undoing them" in e.error.message
    assert runs == Counter({"charge": 1, "ship": 1})
    # and once the code is fixed, a redrive undoes "charge" once
    e = redriven_after_the_fix(engine, queue, eid, fixed)
    assert (e.status, e.compensated) == (Status.FAILED, True), (e.status, e.error)
    assert runs == Counter({"charge": 1, "ship": 1, "refund": 1})


def test_durable_a_step_body_and_a_sleep_are_not_cut_by_the_functions_deadline():
    # given: a body that takes most of the delivery (its own timeout covers it), then a durable sleep
    registry = Registry()

    @durable("body_long", registry=registry)
    def flow(input):
        step("long", lambda: time.sleep(1.2) or "done", timeout_s=1.5)
        sleep(1)
        return step("after", lambda: "ok")

    engine, queue = make(registry)
    eid = engine.start("body_long", {}).execution.execution_id

    # when: delivered, then a second delivery once the sleep is due
    deliver(engine, queue, eid)
    time.sleep(1.1)
    deliver(engine, queue, eid)

    # then
    e = engine.get(eid)
    assert e.status is Status.COMPLETED, e.error


def test_the_deadline_is_armed_only_with_a_real_clock_and_time_left():
    assert deadline_s(None, SystemClock(), 3000) is None
    assert deadline_s(lambda: 10_000, ManualClock(), 3000) is None
    assert deadline_s(lambda: 10_000, SystemClock(), 3000) == 8.5
    assert deadline_s(lambda: 1000, SystemClock(), 3000) is None


def test_durable_a_function_that_caught_its_deliverys_end_and_went_on_is_ended_as_the_engine_wrote_it():
    # given: a function that swallows the end of its delivery (a durable sleep) and then blocks
    registry, caught = Registry(), Counter()

    @durable("swallows_its_end", registry=registry)
    def flow(input):
        step("a", lambda: 1)
        try:
            sleep(3600)
        except BaseException:  # noqa: BLE001 - the engine's unwind, swallowed: a mistake this survives
            caught["end"] += 1
            time.sleep(30)
        return step("b", lambda: 2)

    engine, queue = make(registry)
    eid = engine.start("swallows_its_end", {}).execution.execution_id

    # when
    began = time.monotonic()
    deliver(engine, queue, eid, limit=1)

    # then: the delivery ended at the deadline as the engine had written it (sleeping), not failed over it
    e = engine.get(eid)
    assert caught["end"] == 1 and e.status is Status.SLEEPING, (e.status, e.error)
    assert time.monotonic() - began < DELIVERY_S + 0.5


def test_durable_the_replay_that_says_what_to_undo_is_held_to_the_deadline_too():
    # given: a compensable step, then code that runs 30 s: the run fails at the deadline, and the replay that
    # learns the step's compensation goes through the same line
    registry, runs, fixed = Registry(), Counter(), {"now": False}

    def slow() -> None:
        runs["slow line"] += 1
        time.sleep(30)

    @durable("slow_then_undo", registry=registry)
    def flow(input):
        step("a", lambda: 1, compensate=lambda result: runs.update(["undo"]))
        if fixed["now"]:
            step("moved", lambda: None)  # the fix the message asks for (a test's stand-in: the undo needs no time)
        else:
            slow()
        return step("b", lambda: 2)

    engine, queue = make(registry)
    eid = engine.start("slow_then_undo", {}).execution.execution_id

    # when: delivered until nothing is left to deliver
    began = time.monotonic()
    deliver(engine, queue, eid)
    took = time.monotonic() - began

    # then: the run and the replay each ended at their delivery's deadline (not the runtime's end of the
    # invocation, at every redelivery); the execution is FAILED, still compensating, nothing undone and
    # saying how to go on; nothing left on the queue
    e = engine.get(eid)
    assert e.status is Status.FAILED and e.error.code == "workflow_error" and e.compensating, e.error
    assert "which says what to undo" in e.error.message and "test_durable_overrun.py" in e.error.message
    assert "move that code into a step() and deploy it; then a redrive goes on undoing them" in e.error.message
    assert runs == Counter({"slow line": 2}) and not queue.receive()
    assert took < 2 * DELIVERY_S + 0.5, took

    # and once fixed, a redrive goes on undoing: the step's compensation runs once, and the execution ends
    # FAILED as it was, compensated
    fixed["now"] = True
    engine.operator.redrive(eid, "ops")
    deliver(engine, queue, eid)
    done = engine.get(eid)
    assert done.status is Status.FAILED and done.compensated is True and not done.compensating, done.error
    assert runs == Counter({"slow line": 2, "undo": 1})


def test_durable_a_cancels_undo_stuck_in_the_functions_own_code_ends_failed_with_the_cancel_kept():
    # given: an execution sleeping after a compensable step; a deploy then made the code before the sleep slow
    registry, runs, slow = Registry(), Counter(), {"now": False}

    @durable("cancel_slow_undo", registry=registry)
    def flow(input):
        step("a", lambda: 1, compensate=lambda result: runs.update(["undo"]))
        if slow["now"]:
            time.sleep(30)
        sleep(3600)
        return step("b", lambda: 2)

    engine, queue = make(registry)
    eid = engine.start("cancel_slow_undo", {}).execution.execution_id
    deliver(engine, queue, eid)
    assert engine.get(eid).status is Status.SLEEPING

    # when: an operator cancels it, and its undo's replay reaches the slow line
    slow["now"] = True
    cancel_meets_the_slow_line(engine, queue, eid)

    # then: ended at the deadline, FAILED during the cancel (which it names), nothing undone
    assert runs["undo"] == 0

    # and once the code is quick again, a redrive undoes the step once and ends as the cancel asked
    slow["now"] = False
    engine.operator.redrive(eid, "ops")
    deliver(engine, queue, eid)
    done = engine.get(eid)
    assert (done.status, done.compensated) == (Status.CANCELLED, True), (done.status, done.error)
    assert runs["undo"] == 1


class _Later(SystemClock):
    """The system clock moved on by ``offset`` (a real clock: the deadline is armed; its lease can run out)."""

    def __init__(self) -> None:
        self.offset = dt.timedelta(0)

    def now(self) -> dt.datetime:
        return super().now() + self.offset


def _later_engine(registry: Registry) -> tuple[Engine, FakeQueue, _Later]:
    """An engine of ``registry`` on a ``_Later`` clock (a 3 s worker, a 1 s margin), its queue and its clock."""
    clock = _Later()
    settings = EngineSettings(time_margin_ms=MARGIN_MS, function_timeout_s=DELIVERY_S)
    queue = FakeQueue(clock)
    return Engine(MemoryStore(shards=settings.shards), queue, registry, clock, settings), queue, clock


def _fanned_out_then_slow(runs: Counter, slow: dict, undo: bool) -> tuple[Engine, FakeQueue, _Later, str]:
    """A code-first execution whose parallel step fanned out after step "a" (compensable if ``undo``), then a
    deploy made the code between the two slow: the engine, its queue and clock, the execution's id."""
    registry = Registry()

    @durable("slow_branch_replay", registry=registry)
    def flow(input):
        step("a", lambda: 1, compensate=(lambda result: runs.update(["undo"])) if undo else None)
        if slow["now"]:
            runs["slow line"] += 1
            time.sleep(30)
        return parallel("both", lambda: runs.update(["left"]), lambda: runs.update(["right"]))

    engine, queue, clock = _later_engine(registry)
    eid = engine.start("slow_branch_replay", {}).execution.execution_id
    for m in queue.receive():  # the step's own delivery: "a", then the fan-out, which sends one message a branch
        engine.process(m.body)
        queue.ack(m)
    assert engine.get(eid).status is Status.RUNNING
    slow["now"] = True
    return engine, queue, clock, eid


def _deliver_branches(engine: Engine, queue: FakeQueue) -> list:
    outcomes = []
    for _ in range(3):
        for m in queue.receive():
            ends = time.monotonic() + DELIVERY_S
            began = time.monotonic()
            outcomes.append(engine.process(m.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000)))
            assert time.monotonic() - began < DELIVERY_S, "the branch's replay ran past its delivery"
            queue.ack(m)
    return outcomes


def test_durable_a_branchs_replay_stuck_in_the_functions_own_code_ends_at_its_deadline_and_the_step_fails_there():
    # given: a parallel step fanned out; a deploy then made the code before it slow, so a branch's delivery,
    # which replays the function to the fan-out to learn its branches, reaches the slow line
    runs, slow = Counter(), {"now": False}
    engine, queue, clock, eid = _fanned_out_then_slow(runs, slow, undo=False)

    # when: the branches' messages are delivered, each with a real deadline
    outcomes = _deliver_branches(engine, queue)

    # then: each ended at its deadline, ran no branch body and wrote nothing: the execution is as it was
    assert [o.kind for o in outcomes] == ["stale", "stale"], outcomes
    assert all("ran past its delivery" in o.detail and "test_durable_overrun.py" in o.detail for o in outcomes), outcomes
    assert runs == Counter({"slow line": 2}) and engine.get(eid).status is Status.RUNNING

    # and: once the fan-out's lease ran out, the sweeper re-drives the step, and its own delivery (held to
    # the deadline as every run is) fails the execution at the slow line, naming it
    clock.offset = dt.timedelta(hours=1)
    Sweeper(engine.life.store, queue, clock, engine.settings, engine.registry).sweep()
    deliver(engine, queue, eid)
    e = engine.get(eid)
    assert e.status is Status.FAILED and e.error.code == "workflow_error", e.error
    assert "test_durable_overrun.py" in e.error.message
    assert runs == Counter({"slow line": 3})

    # and once the code is quick again, a redrive fans out again: each branch runs once and the function returns
    slow["now"] = False
    engine.operator.redrive(eid, "ops")
    deliver(engine, queue, eid)
    done = engine.get(eid)
    assert done.status is Status.COMPLETED, (done.status, done.error)
    assert runs == Counter({"slow line": 3, "left": 1, "right": 1})


def _slowed_fan_out(undo: bool = True, slow: dict | None = None) -> tuple[Engine, FakeQueue, Any, str, Counter]:
    """A parallel step fanned out after a compensable "a"; a deploy then made the code before it take 1.5 s,
    which each branch's delivery replays first: the branches' default budget (1 s) and the 1 s margin no longer
    fit a 3 s delivery. The engine, its queue and clock, the execution, and what ran."""
    registry, runs, slow = Registry(), Counter(), {"s": 0.0} if slow is None else slow
    compensate = (lambda result: runs.update(["undo"])) if undo else None

    @durable("slowed_fan_out", registry=registry)
    def flow(input):
        step("a", lambda: 1, timeout_s=0.3, compensate=compensate)  # its undo fits
        time.sleep(slow["s"])
        return parallel("both", lambda: runs.update(["left"]), lambda: runs.update(["right"]))

    engine, queue, clock = _later_engine(registry)
    eid = engine.start("slowed_fan_out", {}).execution.execution_id
    (m,) = queue.receive()
    ends = time.monotonic() + DELIVERY_S
    assert engine.process(m.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000)).kind == "fanned_out"
    queue.ack(m)
    slow["s"] = 1.5
    return engine, queue, clock, eid, runs


def _failed_naming_its_branches(engine: Engine, eid: str, runs: Counter) -> None:
    """The step failed, naming its branches' budget; "a" undone once; no branch body ran."""
    e = engine.get(eid)
    assert e.status is Status.FAILED, (e.status, runs)
    assert (e.error.code, e.error.step_name) == ("step_timeout_too_long", "both"), e.error
    assert "no delivery can run a branch of it" in e.error.message, e.error.message
    assert e.compensated and runs == Counter({"undo": 1}), (e.compensated, runs)


def test_durable_a_fan_out_whose_code_before_it_became_slow_after_it_began_fails_at_its_first_branch_delivery():
    # given: the fan-out began; then its code became slow
    engine, queue, _clock, eid, runs = _slowed_fan_out()

    # when: a branch's delivery finds too little time left after its replay to the fan-out
    released: list = []
    deliver(engine, queue, eid, released=released)

    # then: it fails the step there, naming its branches' budget, and "a" is undone (before: each branch put its
    # message back at every delivery until the step's lease ran out, a reconcile later)
    assert not released, released
    _failed_naming_its_branches(engine, eid, runs)


def test_durable_a_fan_out_a_branch_failed_for_its_slow_code_runs_each_branch_once_redriven_after_the_fix():
    # given: no undo to run, so the execution stays redrivable; a branch's delivery failed the step for the slow code
    slow = {"s": 0.0}
    engine, queue, _clock, eid, runs = _slowed_fan_out(undo=False, slow=slow)
    deliver(engine, queue, eid)
    failed = engine.get(eid)
    assert (failed.status, failed.error.code, failed.compensated) == (Status.FAILED, "step_timeout_too_long", None)

    # when: the code is quick again and an operator redrives it
    slow["s"] = 0.0
    engine.operator.redrive(eid, "ops")
    released: list = []
    deliver(engine, queue, eid, released=released)

    # then: a new generation runs the branch the fit check failed, and the other, once each, and completes
    e = engine.get(eid)
    assert e.status is Status.COMPLETED and not released, (e.status, e.error, released)
    assert runs == Counter({"left": 1, "right": 1}), runs


def test_durable_a_fan_out_whose_code_before_it_became_slow_after_it_began_fails_at_its_next_reconcile():
    # given: the fan-out began; then its code became slow, and its branch messages were lost
    engine, queue, clock, eid, runs = _slowed_fan_out()
    queue.purge()

    # when: the fan-out's lease runs out and the sweeper re-drives the step
    clock.offset = dt.timedelta(hours=1)
    Sweeper(engine.life.store, queue, clock, engine.settings, engine.registry).sweep()
    deliver(engine, queue, eid)

    # then: the step's own delivery, which replays the same code, fails it (before: it re-sent the branches,
    # put back at every delivery, for ever)
    _failed_naming_its_branches(engine, eid, runs)


def test_durable_a_cancel_while_a_branchs_replay_is_stuck_undoes_nothing_and_ends_failed_naming_the_cancel():
    # given: the branches' replays ended at their deadlines, no branch body ran
    runs, slow = Counter(), {"now": False}
    engine, queue, clock, eid = _fanned_out_then_slow(runs, slow, undo=True)
    assert [o.kind for o in _deliver_branches(engine, queue)] == ["stale", "stale"]

    # when: an operator cancels (no branch runs: it takes effect at once), and its undo's replay, which says
    # what "a" undoes, reaches the slow line
    cancel_meets_the_slow_line(engine, queue, eid)

    # then: ended at the deadline, FAILED during the cancel, nothing undone, no branch run
    assert runs == Counter({"slow line": 3})

    # and once the code is quick again, a redrive undoes "a" once and ends as the cancel asked, no branch run
    slow["now"] = False
    engine.operator.redrive(eid, "ops")
    deliver(engine, queue, eid)
    done = engine.get(eid)
    assert (done.status, done.compensated) == (Status.CANCELLED, True), (done.status, done.error)
    assert runs == Counter({"slow line": 3, "undo": 1})


def test_durable_a_branch_delivered_with_little_time_left_puts_its_message_back_and_runs_in_a_fresh_one():
    # given: 1.5 s of code before a parallel step (a delivery gives it 2.5 s); the step fanned out
    registry, runs = Registry(), Counter()

    @durable("late_branch", registry=registry)
    def flow(input):
        step("a", lambda: 1)
        time.sleep(1.5)
        return parallel("both", lambda: runs.update(["left"]) or "l", lambda: runs.update(["right"]) or "r",
                        timeout_s=0.3)

    engine, queue = make(registry)
    eid = engine.start("late_branch", {}).execution.execution_id
    (m,) = queue.receive()
    ends = time.monotonic() + DELIVERY_S
    assert engine.process(m.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000)).kind == "fanned_out"
    queue.ack(m)

    # when: a branch's message is delivered with 1.6 s left (its replay to the fan-out needs 1.5 s)
    branch, *others = queue.receive()
    for other in others:  # not delivered now
        queue.release(other)
    ends = time.monotonic() + 1.6
    with pytest.raises(InsufficientTimeError):
        engine.process(branch.body, remaining_ms=lambda: int((ends - time.monotonic()) * 1000))
    queue.release(branch)

    # then: nothing ran and nothing failed; delivered with its whole time, each branch runs once
    assert engine.get(eid).status is Status.RUNNING and not runs
    deliver(engine, queue, eid)
    e = engine.get(eid)
    assert e.status is Status.COMPLETED, e.error
    assert runs == Counter({"left": 1, "right": 1})
