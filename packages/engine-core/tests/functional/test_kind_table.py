"""DESIGN.md's kind x situation table, one test per cell: every step kind (task, sleep, wait, parallel/map
branch, compensation) meets every situation (a duplicate delivery, a crash at each fault point and the
lease that follows, cancel, redrive, wake, an event arriving, its token reused after expiry, time passing
retention while it lives, a changed definition).

Engine + memory store + manual clock. Each kind is the middle step of a small workflow
(``pre -> subject -> post``; for compensation, the undo of ``pre`` after ``post`` fails for good), written
in both styles: a step list and a code-first function whose calls are the same positions (``style``). Every
check counts what really happened: a journal the bodies append to, and the store's items.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from engine_core import (
    EngineSettings,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    faults,
    map_,
    sleep,
    step,
    wait_for_event,
    workflow,
)
from engine_core.durable import durable, idempotency_key
from engine_core.durable import map as dmap
from engine_core.durable import sleep as dsleep
from engine_core.durable import step as dstep
from engine_core.durable import wait_for_event as dwait
from engine_core.errors import ExecutionStateConflictError
from engine_core.testing import FakeQueue, LocalRunner

KINDS = ["task", "sleep", "wait", "branch", "compensation"]
STYLES = ["steps", "code"]
SUBJECT = 1
"""The step index of the kind under test (the compensation case undoes step 0)."""
FAST = RetryPolicy(max_attempts=4, base=1, max_delay=1, jitter=False)


class Crash(BaseException):
    """The worker process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


class Case:
    """One execution whose kind under test is ``kind``, with the journal of what its bodies did."""

    def __init__(self, kind: str, *, style: str = "steps", settings: EngineSettings | None = None,
                 queue_dup: bool = False, subject_fails: int = 0, slow_retry: float | None = None,
                 name: str = "subject"):
        self.kind, self.style, self.journal, self.registry = kind, style, [], Registry()
        self.fail_left = {"n": subject_fails}
        self.during: list = []
        """Called inside the subject's (or a branch's) body, each once, before it returns."""
        journal = self.journal
        retry = FAST if slow_retry is None else RetryPolicy(max_attempts=4, base=slow_retry, max_delay=slow_retry,
                                                            jitter=False)

        def pre(ctx=None):
            journal.append(("pre", ctx and ctx.attempt))
            return {"pre": True}

        def undo_pre(ctx=None):
            journal.append(("undo", getattr(ctx, "attempt", None)))
            self._maybe_fail("compensation")

        def subject(ctx=None):
            journal.append(("subject", ctx.idempotency_key if ctx else idempotency_key(), ctx and ctx.attempt))
            self._maybe_fail("task")
            while self.during:
                self.during.pop(0)()
            return {"subject": True}

        def branch(ctx_or_item):
            key, item = (ctx_or_item.idempotency_key, ctx_or_item.item) if style == "steps" \
                else (idempotency_key(), ctx_or_item)
            journal.append(("branch", key, None))
            self._maybe_fail("branch")
            while self.during:
                self.during.pop(0)()
            return item

        def post(ctx_or_value=None):
            journal.append(("post", ctx_or_value.attempt if style == "steps" else None,
                            None if style == "steps" else ctx_or_value))
            if kind == "compensation":
                raise PermanentStepError("post fails for good: pre is undone")
            return {"post": True}

        if style == "code":
            self._code_flow(name, kind, retry, pre, undo_pre, subject, branch, post)
        else:
            middle = {
                "task": step(subject, retry=retry),
                "sleep": sleep(hours=2, name="nap"),
                "wait": wait_for_event("go", timeout=7200, name="wait_go", retry=RetryPolicy(max_attempts=2)),
                "branch": map_(branch, over="items", max_concurrency=2, name="items_done", retry=retry),
                "compensation": subject,
            }[kind]
            first = step(pre, compensate=step(undo_pre, retry=retry)) if kind == "compensation" else pre

            @workflow(name, registry=self.registry)
            class Flow:
                steps = [first, middle, post]
                retry = FAST

        self.settings = settings or EngineSettings()
        queue = None
        if queue_dup:
            from engine_core import ManualClock

            self.clock = ManualClock()
            queue = FakeQueue(self.clock, duplicate_rate=1.0, seed=7)
        self.runner = LocalRunner(self.registry, settings=self.settings, queue=queue,
                                  clock=self.clock if queue_dup else None)
        self.eid = ""
        self.name = name

    def _code_flow(self, name, kind, retry, pre, undo_pre, subject, branch, post) -> None:
        """The same positions as a code-first function: pre, the kind under test, post (which gets its value).
        Its events are declared, so a send of a name it never waits for is refused as for a step list; the
        compensation's retry is the workflow's (a code-first undo retries under it)."""
        @durable(name, registry=self.registry, retry=retry if kind == "compensation" else FAST,
                 events={"go": None} if kind == "wait" else {"never": None})
        def flow(input):
            if kind == "compensation":
                dstep("pre", pre, compensate=lambda result: undo_pre())
            else:
                dstep("pre", pre)
            if kind == "task":
                value = dstep("subject", subject, retry=retry)
            elif kind == "sleep":
                value = dsleep(hours=2, name="nap")
            elif kind == "wait":
                value = dwait("go", timeout=7200, retry=RetryPolicy(max_attempts=2))
            elif kind == "branch":
                value = dmap("items_done", branch, input["items"], max_concurrency=2, retry=retry)
            else:
                value = dstep("subject", subject)
            dstep("post", post, value)

    def _maybe_fail(self, role: str) -> None:
        """The body of the kind under test fails its first ``subject_fails`` runs (retried after ``slow_retry``)."""
        if role == self.kind and self.fail_left["n"] > 0:
            self.fail_left["n"] -= 1
            raise RuntimeError("downstream busy")

    def start(self, token: str | None = None) -> str:
        self.eid = self.runner.engine.start(self.name, {"items": [1, 2, 3]}, token).execution.execution_id
        return self.eid

    def get(self):
        return self.runner.engine.get(self.eid)

    def drive(self, until=None, max_iterations: int = 50_000):
        """Run until ``until(execution)`` (default: it ended), taking crashes as workers that died."""
        for _ in range(max_iterations):
            e = self.get()
            if (until(e) if until else e.status.is_terminal):
                return e
            try:
                self.runner.step_once()
            except Crash:
                continue
        raise AssertionError(f"did not get there: {self.get()}")

    def to_subject(self):
        """Drive until the kind under test is the current step (and, where it waits, waiting)."""
        want = {"task": lambda e: e.current_step == SUBJECT,
                "sleep": lambda e: e.status is Status.SLEEPING,
                "wait": lambda e: e.status is Status.WAITING,
                "branch": lambda e: e.current_step == SUBJECT and e.attempt >= 1,
                "compensation": lambda e: e.compensating}[self.kind]
        return self.drive(want)

    def finish(self):
        """Drive to the end, answering the wait when it is the kind under test."""
        if self.kind == "wait" and not self.get().status.is_terminal:
            self.runner.send_event(self.eid, "go", {"ok": True}, event_id="go-1")
        return self.drive()

    def count(self, what: str) -> int:
        return sum(1 for j in self.journal if j[0] == what)

    def expected_end(self) -> tuple[Status, bool | None]:
        return (Status.FAILED, True) if self.kind == "compensation" else (Status.COMPLETED, None)

    def subject_value(self, name: str):
        """What the kind under test handed on: its entry in the context (a step list), or the value ``post``
        was called with (code-first)."""
        if self.style == "steps":
            return self.runner.context(self.eid)[name]
        return [j[2] for j in self.journal if j[0] == "post"][-1]

    def subject_name(self) -> str:
        """The kind under test's position name in the history."""
        return {"task": "subject", "sleep": "nap", "wait": "wait_go" if self.style == "steps" else "go",
                "branch": "items_done", "compensation": "subject"}[self.kind]


def assert_ran_through(case: Case, e) -> None:
    """The end each case reaches when nothing stops it, each effect counted once per idempotency key."""
    assert (e.status, e.compensated) == case.expected_end(), e
    assert case.count("post") == 1
    keys = Counter(j[1] for j in case.journal if j[0] in ("subject", "branch"))
    if case.kind == "task":
        assert set(keys) == {f"{case.eid}:1"}
    if case.kind == "branch":
        assert set(keys) == {f"{case.eid}:1:{b}" for b in range(3)}
        assert case.subject_value("items_done") == [1, 2, 3]
    if case.kind == "compensation":
        undone = [r for r in case.runner.engine.history(case.eid) if r.kind == "compensation"]
        assert [(r.step_index, r.status.value) for r in undone] == [(0, "SUCCEEDED")]


# -- a duplicate delivery ----------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_delivery_runs_each_body_once_per_claim_and_moves_on_once(kind, style):
    case = Case(kind, style=style, queue_dup=True)  # every message arrives twice
    case.start()
    e = case.finish()
    assert_ran_through(case, e)
    bodies = Counter(j[:2] for j in case.journal if j[0] in ("subject", "branch"))
    assert all(n == 1 for n in bodies.values()), bodies
    assert case.count("undo") == (1 if kind == "compensation" else 0)


# -- a crash at each fault point, and the lease that follows -------------------------------------------------

POINTS = {
    "task": ["worker.after_claim", "step.enter", "step.return", "worker.after_record", "worker.after_checkpoint",
             "worker.after_enqueue"],
    "sleep": ["worker.after_record", "worker.after_checkpoint", "worker.after_enqueue"],
    "wait": ["worker.after_checkpoint", "worker.after_enqueue", "worker.after_record"],
    "branch": ["worker.after_claim", "step.enter", "step.return", "worker.after_record", "worker.after_checkpoint"],
    "compensation": ["worker.after_claim", "step.enter", "step.return", "worker.after_record"],
}
"""The points each kind passes (a compensation's after_checkpoint comes only between two undos:
``test_compensation.py::test_crash_after_a_compensation_record_runs_it_again_after_its_lease_recorded_once_and_goes_on``)."""


def _at_subject(kind: str, info: dict) -> bool:
    if kind == "compensation":
        return bool(info.get("compensation"))
    return info.get("step") == SUBJECT and not info.get("compensation")


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind,point", [(k, p) for k in KINDS for p in POINTS[k]])
def test_crash_at_each_fault_point_loses_nothing_once_its_lease_ran_out(kind, point, style):
    # (a task enqueues only when it does not chain on: after a failed attempt, for its retry)
    case = Case(kind, style=style, subject_fails=1 if (kind, point) == ("task", "worker.after_enqueue") else 0)
    fired = []

    def hook(name, info):
        if name == point and not fired and _at_subject(kind, info):
            fired.append(info)
            raise Crash()

    faults.install(hook)
    case.start()
    if kind == "wait":  # the event comes once it waits (a crash may have left it WAITING without a message)
        case.to_subject()
        case.runner.send_event(case.eid, "go", {"ok": True}, event_id="go-1")
    e = case.finish()
    assert fired, f"{point} never fired for {kind}"
    assert_ran_through(case, e)


# -- cancel -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_cancel_at_each_kind_takes_effect_when_no_work_holds_the_step(kind, style):
    case = Case(kind, style=style)
    answers = []
    if kind in ("task", "branch"):
        # cancelled while a body runs: a request, which the body's end turns into the cancel
        case.during.append(lambda: answers.append(case.runner.engine.operator.cancel(case.eid, "ops")))
        case.start()
        e = case.drive()
        assert answers[0].status is Status.RUNNING and answers[0].cancel_requested
    else:
        case.start()
        case.to_subject()
        answers.append(case.runner.engine.operator.cancel(case.eid, "ops"))
        e = case.drive()
    # then: ended CANCELLED (compensation goes on to its end: it was already undoing after a failure)
    if kind == "compensation":
        assert answers[0].compensating and (e.status, e.compensated) == (Status.FAILED, True)
    else:
        assert e.status is Status.CANCELLED and e.cancelled_by == "ops"
        assert case.count("post") == 0
    if kind == "branch":
        assert case.count("branch") < 3  # no new branch body started after the cancel


# -- redrive -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_redrive_at_each_kind(kind, style):
    case = Case(kind, style=style, subject_fails=100 if kind in ("task", "branch") else 0)
    case.start()
    if kind == "sleep":
        case.to_subject()
        with pytest.raises(ExecutionStateConflictError) as refused:  # a sleep never fails: nothing to redrive
            case.runner.engine.operator.redrive(case.eid, "ops")
        assert refused.value.code == "not_failed"
        return
    failed = case.drive()  # the wait times out (twice), the task/branch exhaust their attempts, post fails
    assert failed.status is Status.FAILED
    if kind == "compensation":
        with pytest.raises(ExecutionStateConflictError) as refused:
            case.runner.engine.operator.redrive(case.eid, "ops")
        assert refused.value.code == "compensated"
        return
    assert failed.error.code in ("attempts_exhausted", "step_error", "event_timeout")
    # when: the cause is fixed and the operator redrives
    case.fail_left["n"] = 0
    redriven = case.runner.engine.operator.redrive(case.eid, "ops")
    assert redriven.status is Status.RUNNING and redriven.current_step == SUBJECT and redriven.attempt == 0
    e = case.finish()
    assert_ran_through(case, e)


# -- wake ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_wake_at_each_kind(kind, style):
    case = Case(kind, style=style, subject_fails=1, slow_retry=3600)  # a first failure, then an hour's backoff
    case.start()
    if kind == "task":
        e = case.drive(lambda e: e.timer is not None and e.timer.value == "retry")
    elif kind == "compensation":
        e = case.drive(lambda e: e.compensating and e.timer is not None and e.timer.value == "retry")
    else:
        e = case.to_subject()
    if kind == "branch":
        with pytest.raises(ExecutionStateConflictError) as refused:  # its retries are the branches' own
            case.runner.engine.operator.wake(case.eid, "ops")
        assert refused.value.code == "not_waiting"
        assert "branches wait for their retries on their own" in str(refused.value)  # why, and where to look
        return
    before = case.runner.clock.now()
    woken = case.runner.engine.operator.wake(case.eid, "ops")
    assert woken.next_wake_at == before
    if kind == "wait":  # a woken wait times out now: its retry waits again, the second wake fails it
        case.drive(lambda e: e.status is Status.WAITING and e.attempt == 2)
        case.runner.engine.operator.wake(case.eid, "ops")
        e = case.drive()
        assert e.status is Status.FAILED and e.error.code == "event_timeout"
        return
    e = case.finish()
    assert_ran_through(case, e)
    assert e.updated_at - before < dt.timedelta(minutes=30)  # the hour-long wait was skipped


# -- an event arriving ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_event_arrival_at_each_kind_wakes_only_the_wait_for_it(kind, style):
    case = Case(kind, style=style, subject_fails=1, slow_retry=600)  # it stops at the kind
    case.start()
    case.to_subject()
    if kind != "wait":
        # no kind but a wait for that name is woken; the workflow never waits for "go" here: refused
        with pytest.raises(ExecutionStateConflictError) as refused:
            case.runner.send_event(case.eid, "go", {})
        assert refused.value.code == "unknown_event"
        e = case.finish()
        assert_ran_through(case, e)
        return
    assert case.runner.send_event(case.eid, "go", {"ok": True}, event_id="go-1") == "delivered"
    e = case.drive()
    assert_ran_through(case, e)
    assert case.subject_value("wait_go") == {"ok": True}


# -- a token reused after expiry -------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_token_reused_after_expiry_at_each_kind_starts_a_run_that_sees_nothing_of_the_old_one(kind, style):
    settings = EngineSettings(retention_days=1, history_grace_s=0)
    case = Case(kind, style=style, settings=settings, subject_fails=1, slow_retry=600)  # it stops at the kind
    first = case.start(token="again")
    case.to_subject()
    if kind == "wait":
        case.runner.send_event(first, "go", {"ok": "old"}, event_id="shared")
        case.runner.engine.operator.cancel(first, "ops")  # the event is consumed... or cancelled first
    if not case.get().status.is_terminal:
        case.runner.engine.operator.cancel(first, "ops")
    case.drive()
    old_items = sum(len(v) for v in case.runner.store.item_kinds(first).values())
    case.runner.clock.advance(hours=48)
    case.journal.clear()
    # when
    again = case.start(token="again")
    assert again == first
    if kind == "wait":  # the old run's event id is the new run's own
        case.to_subject()
        assert case.runner.send_event(again, "go", {"ok": "new"}, event_id="shared") == "delivered"
    e = case.drive() if kind == "wait" else case.finish()
    # then: the new run ran from the start, on its own items only
    assert case.count("pre") == 1 and old_items > 0
    assert_ran_through(case, e)
    names = [r.name for r in case.runner.engine.history(again) if r.kind not in ("compensation", "return")]
    assert names == ["pre", case.subject_name(), "post"]
    if kind == "wait":
        assert case.subject_value("wait_go") == {"ok": "new"}


# -- time passing retention while it lives ----------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_time_past_retention_deletes_nothing_of_a_live_execution_at_each_kind(kind, style):
    settings = EngineSettings(retention_days=0.05, history_grace_s=0)  # 72 minutes
    case = Case(kind, style=style, settings=settings, subject_fails=3, slow_retry=2400)  # each waits 40 minutes
    case.start()
    store = case.runner.store
    for _ in range(50_000):
        e = case.get()
        if e.status.is_terminal:
            break
        if kind == "wait" and e.status is Status.WAITING:
            case.runner.clock.advance(hours=1.5)  # well past retention before the answer
            case.runner.send_event(case.eid, "go", {"ok": True}, event_id="go-1")
        if kind == "sleep" and e.status is Status.SLEEPING:
            case.runner.clock.advance(minutes=100)
        try:
            case.runner.step_once()
        except Crash:
            pass
        store.reap_expired(case.runner.clock.now())
        live = case.get()
        if not live.status.is_terminal:
            now = int(case.runner.clock.now().timestamp())
            assert all(a["expires_at"] > now for kind_items in store.item_kinds(case.eid).values()
                       for a in kind_items if "expires_at" in a), "an item of a live execution expired"
    assert e.updated_at - e.created_at > dt.timedelta(minutes=72)
    assert_ran_through(case, e)


# -- a changed definition ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_definition_at_each_kind_fails_it_without_running_the_wrong_step(kind, style):
    case = Case(kind, style=style, subject_fails=1, slow_retry=600)  # it stops at the kind
    case.start()
    case.to_subject()
    before = list(case.journal)
    # when: a deploy replaces the step list (or the function) under the same name
    changed = Registry()

    def other(ctx=None):
        case.journal.append(("other",))

    if style == "steps":
        @workflow(case.name, registry=changed)
        class Changed:
            steps = [step(other, name="a"), step(other, name="b")]
    else:
        @durable(case.name, registry=changed)
        def changed_flow(input):
            dstep("a", other)
            dstep("b", other)

    case.runner.engine.registry = changed
    case.runner.engine.life.registry = changed
    case.runner.sweeper.registry = changed
    case.runner.sweeper.life.registry = changed
    case.runner.clock.advance(hours=3)
    e = case.drive()
    # then: FAILED workflow_definition_mismatch (a function's replay: nondeterministic_replay), nothing of the
    # new code ran, nothing compensated
    code = "workflow_definition_mismatch" if style == "steps" else "nondeterministic_replay"
    assert e.status is Status.FAILED and e.error.code == code, e.error
    if kind == "compensation":  # it was undoing: still undoing, for the redrive once the deploy is undone
        assert e.compensating and e.compensation_error is None, e
    assert ("other",) not in case.journal and case.count("post") == sum(1 for j in before if j[0] == "post")
    assert case.count("undo") == 0
