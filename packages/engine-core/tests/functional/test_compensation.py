"""Saga compensation: after a final failure or a cancel, the completed steps' compensations run in
reverse order, each durable, retried under its own policy and recorded once. Counted from what really
ran (a journal the step and compensation bodies append to), not from the engine's reports."""

from __future__ import annotations

import pytest

from engine_core import PermanentStepError, Registry, RetryPolicy, Status, StepStatus, faults, sleep, step, workflow
from engine_core.adapters.memory import MemoryStore
from engine_core.errors import ExecutionStateConflictError
from engine_core.testing import LocalRunner


class Journal(list):
    def body(self, name, result=None, fail=None):
        def fn(ctx):
            self.append(("run", name, ctx.idempotency_key))
            if fail is not None and fail(ctx):
                raise PermanentStepError(f"{name} cannot go on")
            return result or {name: True}
        fn.__name__ = name
        return fn

    def undo(self, name, flaky=0, always_fail=False):
        state = {"left": flaky}

        def fn(ctx):
            self.append(("undo", name, ctx.idempotency_key, ctx.result))
            if always_fail:
                raise RuntimeError(f"{name} cannot be undone")
            if state["left"] > 0:
                state["left"] -= 1
                raise RuntimeError("provider busy")
            return {f"undone_{name}": True}
        fn.__name__ = f"undo_{name}"
        return fn


def make(journal, *, ship_fails=True, refund_flaky=0, refund_fails=False, release_retry=None):
    registry = Registry()

    @workflow("saga", registry=registry)
    class Saga:
        steps = [
            step(journal.body("reserve", {"reservation": "r-1"}), compensate=journal.undo("reserve")),
            journal.body("note"),                                   # nothing to undo
            step(journal.body("charge", {"charge_id": "ch-1"}),
                 compensate=step(journal.undo("charge", flaky=refund_flaky, always_fail=refund_fails),
                                 retry=RetryPolicy(max_attempts=4, base=1))),
            sleep(minutes=5),
            step(journal.body("ship", fail=lambda ctx: ship_fails), compensate=journal.undo("ship")),
        ]
        retry = release_retry or RetryPolicy(max_attempts=2, base=1)

    return LocalRunner(registry)


def test_failed_execution_runs_the_completed_steps_compensations_in_reverse_order_once():
    journal = Journal()
    runner = make(journal)
    eid = runner.start("saga", {})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.FAILED and done.compensated is True
    assert done.error.code == "permanent_error" and done.current_step == 4
    undos = [(j[1], j[2], j[3]) for j in journal if j[0] == "undo"]
    assert undos == [("charge", f"{eid}:2", {"charge_id": "ch-1"}), ("reserve", f"{eid}:0", {"reservation": "r-1"})]
    # every compensation ran after every step it undoes
    first_undo = next(i for i, j in enumerate(journal) if j[0] == "undo")
    assert journal.index(("run", "charge", f"{eid}:2")) < first_undo
    assert journal.index(("run", "reserve", f"{eid}:0")) < first_undo
    records = [r for r in runner.store._records(eid) if r.kind == "compensation"]
    assert sorted((r.step_index, r.status) for r in records) == [(0, StepStatus.SUCCEEDED), (2, StepStatus.SUCCEEDED)]


def test_compensation_is_retried_under_its_own_policy():
    journal = Journal()
    runner = make(journal, refund_flaky=2)
    eid = runner.start("saga", {})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.FAILED and done.compensated is True
    assert [j[1] for j in journal if j[0] == "undo"] == ["charge", "charge", "charge", "reserve"]


def test_compensation_that_fails_for_good_ends_compensation_failed_naming_the_step():
    journal = Journal()
    runner = make(journal, refund_fails=True)
    eid = runner.start("saga", {})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.COMPENSATION_FAILED and done.compensated is False
    assert done.compensation_error.step_name == "charge" and done.compensation_error.step_index == 2
    assert done.error.code == "permanent_error"  # the original failure is kept
    assert [j[1] for j in journal if j[0] == "undo"] == ["charge"] * 4  # reserve is never undone
    assert runner.queue.dead_letters and runner.queue.dead_letters[-1]["compensated"] is False
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "ops")
    assert refused.value.code == "not_failed"


def test_cancel_during_a_sleep_compensates_and_ends_cancelled():
    journal = Journal()
    runner = make(journal, ship_fails=False)
    eid = runner.start("saga", {})
    runner.run_until(eid, "SLEEPING")
    # when
    cancelled = runner.engine.operator.cancel(eid, "ops", "customer changed their mind")
    done = runner.run_until_done(eid)
    # then
    assert cancelled.compensating is True
    assert done.status is Status.CANCELLED and done.compensated is True and done.cancelled_by == "ops"
    assert [j[1] for j in journal if j[0] == "undo"] == ["charge", "reserve"]
    assert ("run", "ship", f"{eid}:4") not in journal


def test_redrive_of_a_compensated_execution_is_refused():
    journal = Journal()
    runner = make(journal)
    eid = runner.start("saga", {})
    runner.run_until_done(eid)
    # then
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "ops")
    assert refused.value.code == "compensated"
    # and: a wake's refusal does not send the operator to that redrive
    with pytest.raises(ExecutionStateConflictError) as woken:
        runner.engine.operator.wake(eid, "ops")
    assert woken.value.code == "execution_ended" and "redrive" not in str(woken.value).replace("redriven", "")
    assert "start a new execution" in str(woken.value)


def test_crash_after_a_compensation_record_runs_it_again_after_its_lease_recorded_once_and_goes_on():
    journal = Journal()
    runner = make(journal)
    eid = runner.start("saga", {})
    crashed = []

    def hook(name, info):
        if name == "worker.after_record" and info.get("compensation") and not crashed:
            crashed.append(info)
            raise RuntimeError("worker died after the compensation record")

    faults.install(hook)
    try:
        done = runner.run_until_done(eid)
    finally:
        faults.install(None)
    # then: the commit after the record was lost, so the charge's compensation ran once more after its lease
    # (with the same key, as any step whose attempt's end was lost), is recorded once, then reserve's ran
    assert crashed and done.status is Status.FAILED and done.compensated is True
    undos = [j[1] for j in journal if j[0] == "undo"]
    assert undos == ["charge", "charge", "reserve"], undos
    records = [r for r in runner.store._records(eid) if r.kind == "compensation" and r.status is StepStatus.SUCCEEDED]
    assert len(records) == 2


def test_a_workflow_without_compensations_fails_as_before():
    registry = Registry()

    def first(ctx):
        return {"a": 1}

    def boom(ctx):
        raise PermanentStepError("no")

    @workflow("plain", registry=registry)
    class Plain:
        steps = [first, boom]

    runner = LocalRunner(registry)
    eid = runner.start("plain", {})
    done = runner.run_until_done(eid)
    assert done.status is Status.FAILED and done.compensated is None


class CountingStore(MemoryStore):
    """Counts each delivery's history read (``load_state``): the records it returned."""

    def __init__(self):
        super().__init__()
        self.reads: list[int] = []

    def load_state(self, execution_id, since=None):
        state = super().load_state(execution_id, since)
        if state is not None:
            self.reads.append(len(state.records))
        return state


@pytest.mark.parametrize("style", ["steps", "code"])
def test_undoing_a_long_saga_chains_its_compensations_in_a_delivery_as_steps_chain(style):
    # given: 250 compensable steps, the last failing for good; chains of 100 (the default)
    from engine_core import EngineSettings
    from engine_core.durable import durable
    from engine_core.durable import step as dstep
    from engine_core.registry import build_workflow

    n, undone, registry, store = 250, [], Registry(), CountingStore()

    def body(i):
        if i == n - 1:
            raise PermanentStepError("the last step fails for good")
        return {"last": i}

    if style == "steps":
        registry.register(build_workflow("saga", [
            step(lambda c, i=i: body(i), name=f"s{i}", compensate=lambda c, i=i: undone.append(i)) for i in range(n)]))
    else:
        @durable("saga", registry=registry)
        def saga(input):
            for i in range(n):
                dstep(f"s{i}", body, i, compensate=lambda _, i: undone.append(i))

    runner = LocalRunner(registry, store=store, settings=EngineSettings(max_steps=1000))
    eid = runner.start("saga")
    # when
    e = runner.run_until_done(eid)
    # then: every completed step undone once, newest first
    assert (e.status, e.compensated, undone) == (Status.FAILED, True, list(range(n - 2, -1, -1)))
    # and: the undo took a few deliveries of up to 100 compensations, not one delivery (and one whole
    # history read) per compensation (before: 249 deliveries reading ~250 records each)
    whole = [r for r in store.reads if r >= n - 1]  # an undo's delivery reads the whole history
    assert len(whole) == 3 and store.reads[-3:] == whole, store.reads  # 249 undos: 100, 100, 49
    assert sum(store.reads) < 5 * n, store.reads


@pytest.mark.parametrize("style", ["steps", "code"])
@pytest.mark.parametrize("left_ms, undos", [(60_000, [3]), (7_500, [2, 1])])
def test_an_undo_chains_only_while_the_invocation_has_its_whole_budget_left(style, left_ms, undos):
    # given: three compensable steps (5 s budgets, undo included) and a fourth failing for good; each
    # invocation starts with ``left_ms`` and each undo takes two seconds of it
    from engine_core import EngineSettings
    from engine_core.durable import durable
    from engine_core.durable import step as dstep
    from engine_core.registry import build_workflow

    registry, undone = Registry(), []

    def fail():
        raise PermanentStepError("no")

    if style == "steps":
        registry.register(build_workflow("saga", [
            *[step(lambda c: {}, name=f"s{i}", compensate=lambda c, i=i: undone.append(i)) for i in range(3)],
            step(lambda c: fail(), name="last")], step_timeout_s=5))
    else:
        @durable("saga", registry=registry, step_timeout_s=5)
        def saga(input):
            for i in range(3):
                dstep(f"s{i}", lambda: None, compensate=lambda _, i=i: undone.append(i))
            dstep("last", fail)

    runner = LocalRunner(registry, settings=EngineSettings(time_margin_ms=0))
    eid = runner.start("saga")
    per_delivery = []
    # when
    while not runner.engine.get(eid).status.is_terminal:
        batch = runner.queue.receive()
        assert batch, runner.engine.get(eid)
        for message in batch:
            before = len(undone)
            runner.engine.process(message.body, remaining_ms=lambda: left_ms - 2000 * (len(undone) - before))
            runner.queue.ack(message)
            if len(undone) > before:
                per_delivery.append(len(undone) - before)
    # then: an undo starts in the same invocation only with its whole budget left (7.5 s: two, then 3.5 s
    # left, under the 5 s the third needs: it goes through the queue)
    assert undone == [2, 1, 0] and runner.engine.get(eid).compensated is True
    assert per_delivery == undos, per_delivery
