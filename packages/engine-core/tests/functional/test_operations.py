"""The operator's actions on the real engine (memory store, manual clock): list, cancel, redrive, wake,
history pages, and who did what. Each refused action writes nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import (
    ExecutionNotFoundError,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    StepStatus,
    sleep,
    step,
    workflow,
)
from engine_core.errors import ExecutionStateConflictError, InvalidRequestError
from engine_core.testing import LocalRunner


class Switch:
    """A step that fails permanently until it is switched on (the "fix" an operator deploys)."""

    def __init__(self):
        self.on, self.runs, self.during = False, 0, None

    def __call__(self, ctx):
        self.runs += 1
        if self.during is not None:
            self.during()
        if not self.on:
            raise PermanentStepError("the upstream file is missing")
        return {"imported": True}


def make(switch: Switch | None = None):
    registry = Registry()
    switch = switch or Switch()

    def first(ctx):
        return {"first": 1}

    def fragile(ctx):
        return switch(ctx)

    def last(ctx):
        return {"last": ctx["first"] + 1}

    @workflow("ops_flow", registry=registry)
    class OpsFlow:
        steps = [first, sleep(hours=2), step(fragile, retry=RetryPolicy(max_attempts=2, base=1)), last]

    return LocalRunner(registry), switch


def writes(runner) -> int:
    return sum(runner.store.calls.get(op, 0) for op in ("commit", "put_step", "put_operation", "create"))


def run_to_sleep(runner, eid):
    for _ in range(20):
        if runner.engine.get(eid).status is Status.SLEEPING:
            return
        runner.step_once()
    raise AssertionError("never slept")


def test_wake_ends_a_two_hour_sleep_now_and_records_who_did_it():
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    before = runner.clock.now()
    # when
    woken = runner.engine.operator.wake(eid, "arn:aws:iam::123:user/ops")
    for _ in range(10):
        for m in runner.queue.receive():  # deliver what is ready; the clock does not move
            runner.engine.process(m.body)
            runner.queue.ack(m)
    # then: it completed without the clock reaching the wake time
    done = runner.engine.get(eid)
    assert done.status is Status.COMPLETED and runner.clock.now() < before + dt.timedelta(hours=2)
    assert woken.next_wake_at == before
    (op,), _ = runner.engine.operator.operations(done.execution_id)
    assert (op.op, op.by, op.detail["was"]) == ("wake", "arn:aws:iam::123:user/ops", "sleep")


def test_wake_when_nothing_waits_is_a_conflict_and_writes_nothing():
    runner, _ = make()
    eid = runner.start("ops_flow", {})
    before = writes(runner)
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.wake(eid, "me")
    assert refused.value.code == "not_waiting" and writes(runner) == before


def test_a_second_wake_of_a_sleep_already_due_is_refused_and_records_nothing():
    # given: an operator's wake ended the sleep; its delivery has not run yet
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    runner.engine.operator.wake(eid, "first")
    before = writes(runner)
    # when: a second wake (sent at the same time, or a retried request) arrives before the delivery
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.wake(eid, "second")
    # then: refused, saying it is due already; one wake in the audit trail, nothing written
    assert refused.value.code == "not_waiting" and "already due" in str(refused.value), refused.value
    assert writes(runner) == before
    ops, _ = runner.engine.operator.operations(eid)
    assert [(op.op, op.by) for op in ops] == [("wake", "first")]


def test_a_redrive_that_loses_the_race_to_another_says_what_the_execution_is_now():
    # given: a FAILED execution; a second redrive's write lands between this one's read and its write
    runner, switch = make()
    eid = runner.start("ops_flow", {})
    assert runner.run_until_done(eid).status is Status.FAILED
    operator = runner.engine.operator
    real = operator._commit

    def racing(e, new, op=None):
        operator._commit = real
        assert real(e, new, op) is not None  # the other request's redrive lands first
        return None  # and this one's conditional write then finds a newer version

    operator._commit = racing
    # when
    with pytest.raises(ExecutionStateConflictError) as refused:
        operator.redrive(eid, "second")
    # then: not an unexplained "changed meanwhile": it is not FAILED any more, and the answer says so
    assert refused.value.code == "not_failed" and refused.value.status == "RUNNING", refused.value
    assert "is RUNNING now" in str(refused.value) and "another change came first" in str(refused.value)


def test_cancel_a_sleeping_execution_leaves_the_due_index_at_once_and_never_resumes():
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    # when
    cancelled = runner.engine.operator.cancel(eid, "ops@example", "customer withdrew the order")
    # then
    assert cancelled.status is Status.CANCELLED and eid not in runner.store.due_ids()
    assert (cancelled.cancelled_by, cancelled.cancel_reason) == ("ops@example", "customer withdrew the order")
    runner.clock.advance(hours=3)
    for _ in range(5):
        runner.step_once()
    assert runner.engine.get(eid).status is Status.CANCELLED and switch.runs == 0
    # twice: the same answer, nothing written
    before = writes(runner)
    assert runner.engine.operator.cancel(eid, "someone else").status is Status.CANCELLED
    assert writes(runner) == before


def test_cancel_while_a_body_runs_is_a_request_that_its_commit_completes_and_nothing_after_runs():
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    runner.engine.operator.wake(eid, "me")
    answers = []
    switch.during = lambda: answers.append(runner.engine.operator.cancel(eid, "ops", "stop"))  # while the body runs
    # when
    for _ in range(5):
        for m in runner.queue.receive():
            runner.outcomes.append(runner.engine.process(m.body))
            runner.queue.ack(m)
    # then: the cancel was a request while the attempt held the step; the body ran to its end, its commit
    # found the request and ended the execution; nothing after it ran
    assert [(a.status, a.cancel_requested) for a in answers] == [(Status.RUNNING, True)]
    e = runner.engine.get(eid)
    assert switch.runs == 1 and e.status is Status.CANCELLED and e.current_step == 2 and not e.cancel_requested
    assert (e.cancelled_by, e.cancel_reason) == ("ops", "stop")
    assert "cancelled" in {o.kind for o in runner.outcomes}
    assert [r.name for r in runner.engine.history(eid)] == ["first", "sleep_7200s", "fragile"]


def test_cancel_an_ended_execution_is_a_conflict_with_its_status():
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    assert runner.run_until_done(eid).status is Status.COMPLETED
    before = writes(runner)
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.cancel(eid, "me")
    assert (refused.value.code, refused.value.status) == ("execution_ended", "COMPLETED") and writes(runner) == before


def test_wake_of_a_failed_execution_is_a_conflict_that_names_redrive():
    runner, _ = make()  # the fragile step fails for good while its switch is off
    eid = runner.start("ops_flow", {})
    assert runner.run_until_done(eid).status is Status.FAILED
    before = writes(runner)
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.wake(eid, "me")
    assert (refused.value.code, refused.value.status) == ("execution_ended", "FAILED") and writes(runner) == before
    assert "loom redrive resumes it" in str(refused.value)


def test_redrive_resumes_a_failed_execution_at_its_failed_step_with_fresh_attempts_under_the_same_id():
    runner, switch = make()
    eid = runner.start("ops_flow", {"order": 7})
    failed = runner.run_until_done(eid)
    assert failed.status is Status.FAILED and failed.current_step == 2 and switch.runs == 1
    # when: the operator fixes the cause, then redrives
    switch.on = True
    again = runner.engine.operator.redrive(eid, "oncall")
    done = runner.run_until_done(eid)
    # then
    assert again.execution_id == eid and again.attempt == 0 and again.redrives == 1
    assert done.status is Status.COMPLETED and runner.engine.context(eid) == {"order": 7, "first": 1, "imported": True,
                                                                               "last": 2}
    history = {r.name: r for r in runner.engine.history(eid)}
    assert history["fragile"].status is StepStatus.SUCCEEDED and history["fragile"].attempts == 1
    (op,), _ = runner.engine.operator.operations(done.execution_id)
    assert (op.op, op.by, op.detail["step_name"], op.detail["attempts"]) == ("redrive", "oncall", "fragile", 1)
    assert op.detail["error"]["code"] == "permanent_error"


def test_redrive_refuses_what_is_not_failed_a_changed_definition_and_corrupt_state():
    runner, switch = make()
    eid = runner.start("ops_flow", {})
    before = writes(runner)
    with pytest.raises(ExecutionStateConflictError) as live:
        runner.engine.operator.redrive(eid, "me")
    assert (live.value.code, live.value.status) == ("not_failed", "RUNNING") and writes(runner) == before
    runner.run_until_done(eid)
    # a changed definition: the registered fingerprint no longer matches
    attrs = runner.store.metas[eid]
    attrs["fingerprint"] = "0" * 32
    with pytest.raises(ExecutionStateConflictError) as changed:
        runner.engine.operator.redrive(eid, "me")
    assert changed.value.code == "definition_changed"
    # corrupt state
    other = runner.start("ops_flow", {})
    runner.store.inputs[other] = "{not json"
    assert runner.run_until_done(other).error.code == "corrupt_state"
    with pytest.raises(ExecutionStateConflictError) as corrupt:
        runner.engine.operator.redrive(other, "me")
    assert corrupt.value.code == "corrupt_state"


def test_list_newest_first_filters_by_workflow_status_and_time_and_pages_with_an_opaque_token():
    runner, switch = make()
    ids = []
    for i in range(5):
        ids.append(runner.start("ops_flow", {"i": i}))
        runner.clock.advance(minutes=1)
    runner.engine.operator.cancel(ids[1], "me")
    op = runner.engine.operator
    # newest first, paged
    first = op.list(limit=2)
    second = op.list(limit=2, next_token=first.next_token)
    third = op.list(limit=2, next_token=second.next_token)
    assert [e.execution_id for e in first.executions + second.executions + third.executions] == ids[::-1]
    assert third.next_token is None
    # filters
    assert [e.execution_id for e in op.list(status="CANCELLED").executions] == [ids[1]]
    assert len(op.list(status="RUNNING").executions) == 4
    assert op.list(workflow="nope").executions == []
    created = runner.engine.get(ids[2]).created_at
    window = op.list(started_after=created, started_before=created + dt.timedelta(seconds=61))
    assert [e.execution_id for e in window.executions] == [ids[3], ids[2]]


def test_list_refuses_bad_arguments():
    runner, _ = make()
    from engine_core.reads import encode_token

    for kwargs in ({"limit": 0}, {"limit": 101}, {"status": "DONE"}, {"next_token": "garbage!"},
                   {"next_token": encode_token({})}, {"next_token": encode_token([1, 2])}):
        with pytest.raises(InvalidRequestError):
            runner.engine.operator.list(**kwargs)


def test_history_refuses_a_token_another_route_returned_and_takes_an_old_step_key():
    # given: an execution with events, so the events route hands out a token of its own
    from engine_core.reads import encode_token

    runner, switch = make()
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    op = runner.engine.operator
    # when / then: an events or operations key as a history token is not one the history returned
    for foreign in ("EVT#approved#evt-1", "OP#00000003#wake"):
        with pytest.raises(InvalidRequestError, match="not a token this API returned"):
            op.history_page(eid, limit=1, next_token=encode_token(foreign))
    # and: a step's sort key (the token engine-core before 0.3 returned) still resumes after that step
    view = op.history_page(eid, limit=10, next_token=encode_token("STEP#000#first"))
    assert [r.name for r in view.records][:1] == ["sleep_7200s"]


def test_history_pages_hold_every_step_once_and_operations_on_the_first_page():
    runner, switch = make()
    switch.on = True
    eid = runner.start("ops_flow", {})
    run_to_sleep(runner, eid)
    runner.engine.operator.wake(eid, "me")
    runner.run_until_done(eid)
    op = runner.engine.operator
    names, token, pages = [], None, 0
    while True:
        view = op.history_page(eid, limit=1, next_token=token)
        records, operations, token = view.records, view.operations, view.next_token
        names += [r.name for r in records]
        pages += 1
        assert (pages == 1) == bool(operations)
        if token is None:
            break
    assert names == ["first", "sleep_7200s", "fragile", "last"]


def test_actions_on_an_unknown_execution_are_not_found():
    runner, _ = make()
    for action in (runner.engine.operator.cancel, runner.engine.operator.redrive, runner.engine.operator.wake):
        with pytest.raises(ExecutionNotFoundError):
            action("00000000-0000-4000-8000-000000000001", "me")


def test_start_records_who_started_it():
    runner, _ = make()
    eid = runner.engine.start("ops_flow", {}, by="arn:aws:iam::123:role/deployer").execution.execution_id
    # kept beside the input (written once), not on the execution item every step rewrites
    assert runner.engine.state(eid).execution.started_by == "arn:aws:iam::123:role/deployer"
    assert "started_by" not in runner.store.metas[eid]


class Bus:
    enabled = True

    def __init__(self):
        self.events = []

    def publish(self, detail):
        self.events.append(detail)


def test_with_a_bus_every_ending_is_an_event_and_the_dlq_holds_no_business_failure():
    from engine_core import Engine, Sweeper
    from engine_core.testing import FakeQueue

    runner, switch = make()
    bus = Bus()
    runner.engine = Engine(runner.store, runner.queue, runner.engine.registry, runner.clock, runner.settings, events=bus)
    runner.sweeper = Sweeper(runner.store, runner.queue, runner.clock, runner.settings, runner.engine.registry, events=bus)
    failed = runner.start("ops_flow", {"n": 1})
    assert runner.run_until_done(failed).status is Status.FAILED
    switch.on = True
    done = runner.start("ops_flow", {"n": 2})
    assert runner.run_until_done(done).status is Status.COMPLETED
    gone = runner.start("ops_flow", {"n": 3})
    runner.engine.operator.cancel(gone, "ops", "duplicate order")
    # then: one event per ending, in the documented shape; nothing on the DLQ
    by_id = {e["execution_id"]: e for e in bus.events}
    assert len(bus.events) == 3 and runner.queue.dead_letters == []
    assert by_id[failed]["status"] == "FAILED" and by_id[failed]["error"]["code"] == "permanent_error"
    assert by_id[failed]["error"]["step_name"] == "fragile" and by_id[failed]["step_count"] == 4
    assert by_id[done]["status"] == "COMPLETED" and by_id[done]["error"] is None
    assert by_id[gone]["status"] == "CANCELLED" and by_id[gone]["by"] == "ops"
    assert set(by_id[done]) == {"execution_id", "workflow", "status", "error", "current_step", "step_count",
                                "started_at", "ended_at", "by", "compensated"}


def test_without_a_bus_a_failed_execution_still_leaves_one_notice_on_the_dlq():
    runner, _ = make()
    failed = runner.start("ops_flow", {})
    assert runner.run_until_done(failed).status is Status.FAILED
    assert [n["execution_id"] for n in runner.queue.dead_letters if n.get("kind") == "loom.execution_failed"] == [failed]


def test_an_event_that_could_not_be_published_is_published_by_the_sweeper_later():
    from engine_core import Engine, Sweeper

    class FlakyBus(Bus):
        def __init__(self):
            super().__init__()
            self.failures = 1

        def publish(self, detail):
            if self.failures:
                self.failures -= 1
                raise RuntimeError("EventBridge unavailable")
            super().publish(detail)

    runner, switch = make()
    switch.on = True
    bus = FlakyBus()
    runner.engine = Engine(runner.store, runner.queue, runner.engine.registry, runner.clock, runner.settings, events=bus)
    runner.sweeper = Sweeper(runner.store, runner.queue, runner.clock, runner.settings, runner.engine.registry, events=bus)
    eid = runner.start("ops_flow", {})
    e = runner.run_until_done(eid)
    assert e.status is Status.COMPLETED and not e.finalized and bus.events == []
    # when: the housekeeping deadline passes and the sweeper runs
    runner.clock.advance(hours=1)
    runner.sweeper.sweep()
    # then
    assert [x["execution_id"] for x in bus.events] == [eid] and runner.engine.get(eid).finalized


def test_history_pages_stay_under_a_megabyte_and_resume_inside_a_fan_outs_branches():
    # given: a map whose 40 branch results are 60 KB each (2.4 MB of branches) between two steps
    from engine_core import map_

    registry = Registry()

    def before(ctx):
        return {"items": list(range(40))}

    def big(ctx):
        return "x" * 60_000

    def after(ctx):
        return {"after": True}

    @workflow("big_map", registry=registry)
    class BigMap:
        steps = [before, map_(big, over="items", name="bigs"), after]

    runner = LocalRunner(registry)
    eid = runner.start("big_map", {})
    # the results together exceed the item budget: the step fails, but its 40 branches are in the history
    done = runner.run_until_done(eid)
    assert done.status is Status.FAILED and done.error.code == "result_too_large"
    # when: the history is read page by page with the largest limit
    op = runner.engine.operator
    seen, sizes, token = [], [], None
    while True:
        view = op.history_page(eid, limit=100, next_token=token)
        seen += [(type(r).__name__, getattr(r, "branch", getattr(r, "step_index", None))) for r in view.records]
        sizes.append(sum(len(r.model_dump_json()) for r in view.records))
        token = view.next_token
        if token is None:
            break
    # then: every entry once, in order (each branch right after its step's record), each page under ~1 MB
    assert len(sizes) >= 3 and max(sizes) <= 1024 * 1024 + 70_000
    assert seen[0] == ("StepRecord", 0) and seen[1] == ("StepRecord", 1)
    assert [b for kind, b in seen if kind == "Branch"] == list(range(40))


def test_a_list_filter_that_matches_nothing_reads_a_bounded_part_of_the_index_per_request():
    runner, switch = make()
    for _ in range(1200):
        runner.engine.start("ops_flow", {})
    store = runner.store
    # when: a filter no execution matches
    before = store.calls.get("query_list", 0)
    page = runner.engine.operator.list(workflow="nothing_like_this", limit=20)
    reads = store.calls["query_list"] - before
    # then: at most five index pages read, nothing found, and a token to go on
    assert page.executions == [] and page.next_token is not None and reads == 5
    # and following the tokens reaches the end of the index
    pages = 1
    while page.next_token is not None:
        page = runner.engine.operator.list(workflow="nothing_like_this", limit=20, next_token=page.next_token)
        pages += 1
    assert pages == 3


def test_a_list_shows_each_live_executions_real_status_and_filters_by_it():
    runner, switch = make()
    switch.on = True
    sleeping = runner.start("ops_flow", {})
    run_to_sleep(runner, sleeping)
    running = runner.engine.start("ops_flow", {}).execution.execution_id
    done = runner.start("ops_flow", {})
    runner.engine.operator.cancel(done, "ops")
    listed = {x.execution_id: x.status for x in runner.engine.operator.list().executions}
    assert listed == {sleeping: "SLEEPING", running: "RUNNING", done: "CANCELLED"}
    assert [x.execution_id for x in runner.engine.operator.list(status="SLEEPING").executions] == [sleeping]
    assert [x.execution_id for x in runner.engine.operator.list(status="RUNNING").executions] == [running]
    assert {x.execution_id for x in runner.engine.operator.list(status="LIVE").executions} == {sleeping, running}


class Killed(BaseException):
    """The control plane's process dies here (a Lambda timeout, a SIGKILL): nothing after runs."""


class KilledAfter:
    """The store, with the process killed right after its ``at``-th call returned (that call applied)."""

    def __init__(self, inner, at: int):
        self.inner, self.at, self.calls = inner, at, 0

    def __getattr__(self, name):
        method = getattr(self.inner, name)
        if not callable(method) or name.startswith("_"):
            return method

        def call(*args, **kwargs):
            result = method(*args, **kwargs)
            self.calls += 1
            if self.calls == self.at:
                raise Killed(name)
            return result
        return call


def _ready_for(action: str):
    """A runner and an execution ``action`` applies to: sleeping (wake, cancel) or FAILED (redrive)."""
    runner, switch = make()
    eid = runner.start("ops_flow", {})
    if action == "redrive":
        assert runner.run_until_done(eid).status is Status.FAILED
    else:
        run_to_sleep(runner, eid)
    return runner, eid


@pytest.mark.parametrize("action", ["cancel", "redrive", "wake"])
def test_an_action_killed_after_any_store_call_is_never_applied_without_its_record(action):
    # given: how many store calls the action makes when nothing dies
    runner, eid = _ready_for(action)
    counting = KilledAfter(runner.engine.life.store, at=0)
    runner.engine.life.store = counting
    getattr(runner.engine.operator, action)(eid, "ops")
    total = counting.calls
    assert total >= 2
    for at in range(1, total + 1):
        runner, eid = _ready_for(action)
        store = runner.engine.life.store
        before = store.load(eid)
        runner.engine.life.store = KilledAfter(store, at)
        # when: the process dies right after store call `at` returned
        with pytest.raises(Killed):
            getattr(runner.engine.operator, action)(eid, "ops")
        # then: either nothing changed, or the action stands with its record (who did it)
        after = store.load(eid)
        records = [(o.op, o.by) for o in store.operations(eid)]
        assert after == before and records == [] or (action, "ops") in records, (at, records)
