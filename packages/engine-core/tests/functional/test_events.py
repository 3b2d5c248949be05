"""wait_for_event: WAITING until an event arrives (early ones are kept), applied once per event id,
timeouts under the retry policy or a default, and single-use callback tokens. Engine + memory store +
manual clock; every check counts what really happened (body runs, records, messages)."""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager

import pytest

from engine_core import EngineSettings, RegistrationError, Registry, RetryPolicy, Status, StepStatus, wait_for_event, workflow
from engine_core.errors import CallbackNotFoundError, ExecutionStateConflictError, InvalidRequestError
from engine_core.testing import LocalRunner


def make(**wait_kwargs):
    registry = Registry()
    runs = {"before": 0, "after": 0}
    tokens = []

    def before(ctx):
        runs["before"] += 1
        tokens.append(ctx.callback_token("approved"))
        return {"asked": True}

    def after(ctx):
        runs["after"] += 1
        answer = ctx.get("wait_approved") or {}
        return {"approved_by": answer.get("approver"), "note": answer.get("note")}

    @workflow("approval_flow", registry=registry)
    class ApprovalFlow:
        steps = [before, wait_for_event("approved", **wait_kwargs), after]

    return LocalRunner(registry), runs, tokens


@contextmanager
def racing_the_keep(store, action):
    """Run ``action`` (an operator's) right after ``store`` keeps an event: between a send's keep and the
    write that would wake the wait for it."""
    put_event = store.put_event

    def kept_then(*args, **kwargs):
        kept = put_event(*args, **kwargs)
        action()
        return kept

    store.put_event = kept_then
    try:
        yield
    finally:
        del store.put_event


def test_wait_for_event_when_the_event_arrives_merges_it_and_runs_on_once():
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    # given
    waiting = runner.run_until(eid, "WAITING")
    assert waiting.next_wake_at == waiting.updated_at + dt.timedelta(hours=1)
    assert runner.store.due_ids() == {eid}  # costs nothing, but the timeout keeps it in the due index
    # when
    outcome = runner.send_event(eid, "approved", {"approver": "ana"}, event_id="evt-1")
    done = runner.run_until_done(eid)
    # then
    assert outcome == "delivered"
    assert done.status is Status.COMPLETED
    assert runs == {"before": 1, "after": 1}
    assert runner.context(eid)["approved_by"] == "ana"
    wait_record = [r for r in runner.history(eid) if r.kind == "event"]
    assert len(wait_record) == 1 and wait_record[0].event_id == "evt-1"


def test_wait_for_event_a_second_event_sent_before_the_wait_resumed_is_answered_buffered_and_kept():
    runner, _, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    # when: two approvers answer back to back, before the execution resumed
    first, second = (runner.send_event(eid, "approved", {"approver": who}, event_id=key)
                     for who, key in (("ana", "one"), ("bo", "two")))
    done = runner.run_until_done(eid)
    # then: only the first is the wait's; the second is kept, not claimed as delivered
    assert (first, second) == ("delivered", "buffered")
    assert done.status is Status.COMPLETED and runner.context(eid)["approved_by"] == "ana"
    [wait_record] = [r for r in runner.history(eid) if r.kind == "event"]
    assert wait_record.event_id == "one"
    assert {ev.event_id for ev in runner.store.list_events(eid, "approved")} == {"one", "two"}


def test_wait_for_event_sent_before_the_wait_is_kept_and_consumed_when_it_arrives():
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    # when: the event comes before the first step even ran
    assert runner.send_event(eid, "approved", {"approver": "early"}) == "buffered"
    done = runner.run_until_done(eid)
    # then: no WAITING at all; the kept event was consumed
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["wait_approved"]["approver"] == "early"
    assert runs["after"] == 1


def test_wait_for_event_sent_twice_with_the_same_id_is_applied_once():
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    # when
    first = runner.send_event(eid, "approved", {"approver": "ana"}, event_id="same")
    commits = runner.store.calls["commit"]
    again = runner.send_event(eid, "approved", {"approver": "bob"}, event_id="same")
    assert runner.store.calls["commit"] == commits  # the first send woke the wait: nothing more to write
    runner.run_until_done(eid)
    # then
    assert (first, again) == ("delivered", "duplicate")
    assert runner.context(eid)["wait_approved"]["approver"] == "ana"
    assert len(runner.store.events[eid]) == 1
    assert runs["after"] == 1


def test_wait_for_event_racing_the_wait_commit_is_never_lost():
    """The sender reads the execution before it is WAITING (so does not wake it); the wait's second
    look after its commit finds the event."""
    runner, runs, _ = make(timeout=7200)
    eid = runner.start("approval_flow", {})
    store = runner.store
    original = store.list_events
    sent = []

    def send_between_commit_and_look(execution_id, name=None, **kw):
        if not sent:
            sent.append(True)
            # the event lands after the wait read the state but before its second look
            from engine_core.model import EventRecord
            store.put_event(execution_id, EventRecord(name="approved", event_id="racer", data={"approver": "r"},
                                                      sent_at=runner.clock.now()))
        return original(execution_id, name, **kw)

    store.list_events = send_between_commit_and_look
    # when
    done = runner.run_until_done(eid)
    # then: completed without waiting two hours for the timeout
    assert done.status is Status.COMPLETED
    assert done.updated_at - done.created_at < dt.timedelta(minutes=5)
    assert runner.context(eid)["wait_approved"]["approver"] == "r"


def test_wait_for_event_timeout_without_a_default_fails_the_step():
    runner, runs, _ = make(timeout=600)
    eid = runner.start("approval_flow", {})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.FAILED
    assert done.error.code == "event_timeout"
    assert runs["after"] == 0


def test_wait_for_event_timeout_is_retried_by_waiting_again_under_its_retry_policy():
    runner, runs, _ = make(timeout=600, retry=RetryPolicy(max_attempts=3, base=1))
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    # when: two timeouts pass (their delayed messages bring the wait back), then the event comes during
    # the third wait
    for wait in (2, 3):
        runner.clock.advance(601)
        while runner.engine.get(eid).attempt < wait:
            runner.step_once()
        assert runner.engine.get(eid).status is Status.WAITING
    assert runner.engine.get(eid).attempt == 3
    runner.send_event(eid, "approved", {"approver": "late"})
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.COMPLETED
    failed = [r for r in runner.store._records(eid) if r.status is StepStatus.FAILED]
    assert failed == [] or all(r.kind == "event" for r in failed)


def test_wait_for_event_timeout_with_a_default_takes_it():
    runner, runs, _ = make(timeout=60, default={"approver": "nobody", "note": "auto"})
    eid = runner.start("approval_flow", {})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["approved_by"] == "nobody"


def test_callback_token_completes_its_wait_once_and_forged_tokens_are_not_found():
    runner, runs, tokens = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    token = tokens[0]
    # when
    sent = runner.engine.operator.complete_callback(token, {"approver": "partner"}, "local")
    with pytest.raises(ExecutionStateConflictError) as used:
        runner.engine.operator.complete_callback(token, {"approver": "again"}, "local")
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(CallbackNotFoundError):
        runner.engine.operator.complete_callback(forged, {}, "local")
    with pytest.raises(CallbackNotFoundError):
        runner.engine.operator.complete_callback("not-a-token", {}, "local")
    done = runner.run_until_done(eid)
    # then
    assert sent.outcome == "delivered"
    assert used.value.code == "callback_used"
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["wait_approved"]["approver"] == "partner"
    assert runs["after"] == 1


class Killed(BaseException):
    """The control plane's process dies here: nothing after runs."""


def killed_before_its_wake(how: str):
    """A waiting approval whose first send (event ``mail-1``, or the callback token) died between keeping
    the event and the write that wakes the wait; and that send, to make it again."""
    runner, runs, tokens = make(timeout=7 * 24 * 3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    put_event = runner.store.put_event

    def killed_after(*args, **kwargs):
        put_event(*args, **kwargs)
        raise Killed()

    def send(data):
        if how == "event":
            return runner.send_event(eid, "approved", data, event_id="mail-1")
        return runner.engine.operator.complete_callback(tokens[0], data, "partner").outcome

    runner.store.put_event = killed_after
    with pytest.raises(Killed):
        send({"approver": "ana"})
    runner.store.put_event = put_event
    assert runner.engine.get(eid).status is Status.WAITING
    return runner, runs, eid, send


@pytest.mark.parametrize("how", ["event", "callback"])
def test_a_send_repeated_after_one_killed_before_its_wake_wakes_the_wait_now_not_at_its_timeout(how):
    # given
    runner, runs, eid, send = killed_before_its_wake(how)
    # when: the sender, with no answer, sends it again (the same event id, or the same token)
    again = send({"approver": "ana"})
    sent_at = runner.clock.now()
    done = runner.run_until_done(eid)
    # then: the wait takes it now, not when its week runs out, and once
    assert again == ("duplicate" if how == "event" else "delivered")
    assert done.status is Status.COMPLETED and runner.clock.now() - sent_at < dt.timedelta(minutes=5)
    assert runner.context(eid)["approved_by"] == "ana" and runs["after"] == 1
    # and: once taken, the id is a duplicate and the token used
    if how == "event":
        assert send({"approver": "ana"}) == "duplicate"
    else:
        with pytest.raises(ExecutionStateConflictError) as used:
            send({"approver": "ana"})
        assert used.value.code == "callback_used"


@pytest.mark.parametrize("how", ["event", "callback"])
def test_another_event_sent_after_one_killed_before_its_wake_wakes_the_wait_for_the_one_kept_first(how):
    # given
    runner, runs, eid, _ = killed_before_its_wake(how)
    # when: another event of that name comes, never the first again
    second = runner.send_event(eid, "approved", {"approver": "bob"}, event_id="mail-2")
    sent_at = runner.clock.now()
    done = runner.run_until_done(eid)
    # then: it is kept for a later wait (buffered), and the wait it woke takes the first, now
    assert second == "buffered"
    assert done.status is Status.COMPLETED and runner.clock.now() - sent_at < dt.timedelta(minutes=5)
    assert runner.context(eid)["approved_by"] == "ana" and runs["after"] == 1


def test_a_callback_answered_after_a_plain_event_while_the_wait_waits_is_the_one_it_takes():
    # given: a plain event, then the callback's answer, both before the worker picks the wait up again
    runner, runs, tokens = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    plain = runner.send_event(eid, "approved", {"approver": "ops"})
    answered = runner.engine.operator.complete_callback(tokens[0], {"approver": "partner"}, "partner")
    # when
    done = runner.run_until_done(eid)
    # then: the wait takes the callback's answer, which only it can take (the plain event, which a later wait
    # of its name could take, stays kept); before, the plain one won and the partner's answer was dropped
    assert (plain, answered.outcome, done.status) == ("delivered", "delivered", Status.COMPLETED)
    assert runner.context(eid)["wait_approved"]["approver"] == "partner" and runs["after"] == 1
    with pytest.raises(ExecutionStateConflictError) as used:
        runner.engine.operator.complete_callback(tokens[0], {"approver": "again"}, "partner")
    assert used.value.code == "callback_used"


def test_send_event_refusals_write_nothing():
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    # then
    with pytest.raises(ExecutionStateConflictError) as unknown:
        runner.send_event(eid, "shipped", {})
    assert unknown.value.code == "unknown_event"
    with pytest.raises(InvalidRequestError):
        runner.engine.operator.send_event(eid, "approved", [1, 2], "local")
    with pytest.raises(InvalidRequestError):
        runner.engine.operator.send_event(eid, "bad name", {}, "local")
    assert eid not in runner.store.events
    runner.engine.operator.cancel(eid, "ops")
    with pytest.raises(ExecutionStateConflictError) as ended:
        runner.send_event(eid, "approved", {})
    assert ended.value.code == "execution_ended" and "redrive" not in str(ended.value)


def test_an_event_for_a_failed_execution_is_refused_naming_the_redrive_that_brings_its_wait_back():
    # given: the wait timed out with no default, its one wait period spent: FAILED event_timeout
    runner, _, _ = make(timeout=60, retry=RetryPolicy(max_attempts=1))
    eid = runner.start("approval_flow", {})
    failed = runner.run_until_done(eid)
    assert failed.error.code == "event_timeout"
    # the failure says what to do: redrive, then send
    assert failed.error.message.endswith(f"`loom redrive {eid}` and then send it: the redriven wait waits again "
                                         "and takes it (an event sent to the FAILED execution is refused)"), failed.error
    # when
    with pytest.raises(ExecutionStateConflictError) as ended:
        runner.send_event(eid, "approved", {})
    # then: refused, saying how the wait comes back
    assert ended.value.code == "execution_ended" and "loom redrive resumes it" in str(ended.value), ended.value
    # and the redrive does bring it back: the event sent then is taken
    runner.engine.operator.redrive(eid, "ops")
    runner.run_until(eid, "WAITING")
    assert runner.send_event(eid, "approved", {"approver": "ana"}) == "delivered"
    assert runner.run_until_done(eid).status is Status.COMPLETED


def test_wake_of_a_waiting_execution_times_its_wait_out_now():
    runner, runs, _ = make(timeout=86400, default={"approver": "skipped"})
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    # when
    runner.engine.operator.wake(eid, "ops")
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["wait_approved"]["approver"] == "skipped"
    assert done.updated_at - done.created_at < dt.timedelta(hours=1)


def first(ctx):
    return None


def last(ctx):
    return None


@pytest.mark.parametrize("event, kwargs, problem", [
    ("has space", {}, "event name"), ("ok", {"default": [1]}, "default must be a dict"),
    ("ok", {"timeout": 0}, "timeout must be more than 0 s and at most 366 days"),
])
def test_wait_for_event_registration_refuses_bad_names_and_defaults(event, kwargs, problem):
    with pytest.raises(RegistrationError, match=problem):
        @workflow("bad_wait", registry=Registry())
        class Bad:
            steps = [first, wait_for_event(event, **kwargs), last]


def test_wait_for_event_with_a_model_refuses_data_that_does_not_fit_writing_nothing_and_keeps_validated_values():
    from pydantic import BaseModel

    from engine_core.errors import InvalidEventError

    class Answer(BaseModel):
        approved: bool
        approver: str = "unknown"

    registry = Registry()
    seen = []

    def settle(ctx):
        seen.append(ctx["answer"])

    @workflow("typed_wait", registry=registry)
    class TypedWait:
        steps = [wait_for_event("approved", timeout=600, name="answer", model=Answer), settle]

    runner = LocalRunner(registry)
    eid = runner.start("typed_wait", {})
    runner.run_until(eid, "WAITING")
    # when: data that does not fit its model
    with pytest.raises(InvalidEventError) as refused:
        runner.send_event(eid, "approved", {"approved": "maybe"}, event_id="bad")
    # then: refused field by field, nothing written, still waiting
    assert [p["field"] for p in refused.value.problems] == ["approved"]
    assert str(refused.value).endswith("GET /workflows shows the event's JSON Schema (event_schema)")
    assert not runner.store.events.get(eid)
    assert runner.engine.get(eid).status is Status.WAITING
    # and data that fits is kept as the model validated it (its default filled in)
    assert runner.send_event(eid, "approved", {"approved": True}, event_id="good") == "delivered"
    assert runner.run_until_done(eid).status is Status.COMPLETED
    assert seen == [{"approved": True, "approver": "unknown"}]


def test_wait_for_event_model_must_be_a_pydantic_model_and_its_default_must_fit():
    from pydantic import BaseModel

    class Answer(BaseModel):
        approved: bool

    with pytest.raises(RegistrationError, match="pydantic BaseModel"):
        wait_for_event("approved", model=dict)  # checked when the workflow registers
        workflow("bad_model", registry=Registry())(type("Bad", (), {"steps": [wait_for_event("x", model=dict)]}))
    with pytest.raises(RegistrationError, match="does not fit its model"):
        workflow("bad_default", registry=Registry())(
            type("Bad", (), {"steps": [wait_for_event("x", model=Answer, default={"approved": "?"})]}))


def test_a_wait_record_starts_when_the_wait_began_not_when_its_event_or_a_wake_came():
    # given: the execution waits from t0; an event comes ten minutes later (its send rewrites updated_at)
    runner, _, _ = make(timeout=3600, default={"approver": "nobody"})
    eid = runner.start("approval_flow", {})
    began = runner.run_until(eid, "WAITING").waiting_since
    runner.clock.advance(dt.timedelta(minutes=10))
    # when
    runner.send_event(eid, "approved", {"approver": "ana"})
    runner.run_until_done(eid)
    # then: the record spans the ten minutes the step waited
    [record] = [r for r in runner.history(eid) if r.kind == "event"]
    assert record.started_at == began
    assert record.finished_at - record.started_at == dt.timedelta(minutes=10)
    # and the same for a wait an operator woke (its default applies)
    other = runner.start("approval_flow", {"n": 2})
    began = runner.run_until(other, "WAITING").waiting_since
    runner.clock.advance(dt.timedelta(minutes=3))
    runner.engine.operator.wake(other, "ops")
    runner.run_until_done(other)
    [record] = [r for r in runner.history(other) if r.kind == "event"]
    assert (record.started_at, record.finished_at - began) == (began, dt.timedelta(minutes=3))
    # and a stored execution carries the time only while it waits
    assert "waiting_since" not in runner.store.metas[other] and runner.store.load(other).waiting_since is None


def test_a_wake_after_an_event_came_and_before_its_delivery_is_refused_and_the_wait_takes_the_event():
    # given: a waiting execution (no default: a timeout fails it) whose event came; nothing delivered it yet
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    assert runner.send_event(eid, "approved", {"approver": "ana"}, event_id="evt-1") == "delivered"
    # when: an operator wakes it before that delivery
    runner.clock.advance(dt.timedelta(seconds=5))
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.wake(eid, "ops")
    done = runner.run_until_done(eid)
    # then: refused, saying why it is due (the event came): nothing to skip, nothing written
    assert refused.value.code == "not_waiting" and "an event it waits for came" in str(refused.value), refused.value
    assert runner.engine.operator.operations(eid)[0] == []
    # then: the wait takes the event that came; no timeout, no failure
    assert done.status is Status.COMPLETED and runs == {"before": 1, "after": 1}
    assert runner.context(eid)["approved_by"] == "ana"
    [record] = [r for r in runner.history(eid) if r.kind == "event"]
    assert record.event_id == "evt-1" and record.status is StepStatus.SUCCEEDED


def test_a_token_for_a_wait_an_operator_woke_into_its_default_says_the_wake_may_have_ended_it():
    # given: a wait with a default whose token went out, woken by an operator long before its timeout
    runner, _, tokens = make(timeout=3600, default={"approver": "nobody"})
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    runner.engine.operator.wake(eid, "ops")
    assert runner.run_until_done(eid).status is Status.COMPLETED
    # when: the token comes after
    with pytest.raises(ExecutionStateConflictError) as used:
        runner.engine.operator.complete_callback(tokens[0], {"approver": "late"}, "partner")
    # then: used, naming both ways a default ends a wait (the timeout had not passed)
    assert used.value.code == "callback_used" and "operator woke it" in str(used.value), used.value


def test_an_event_id_too_long_is_refused_naming_its_length_not_echoing_it_whole():
    runner, _, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    with pytest.raises(InvalidRequestError) as refused:
        runner.send_event(eid, "approved", {"approver": "ana"}, event_id="x" * 2000)
    message = str(refused.value)
    assert "(2,000 characters)" in message and "1-128 characters" in message and len(message) < 300, message
    assert runner.engine.operator.operations(eid)[0] == [] and runner.engine.get(eid).status is Status.WAITING


@pytest.mark.parametrize("order", ["wake_then_send", "send_recorded_before_the_wake_commit"])
def test_a_send_racing_an_operators_wake_is_kept_and_the_wait_times_out_as_the_wake_said(order):
    # (then a redrive of that timeout waits again and takes the kept event)
    # given: a waiting execution (no default: a timeout fails it)
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    # when: an operator's wake and a send race: the send after the wake's commit, or the send's event written
    # before the wake committed and its own wake lost to it
    if order == "wake_then_send":
        runner.engine.operator.wake(eid, "ops")
        sent = runner.send_event(eid, "approved", {"approver": "ana"}, event_id="evt-1")
        assert sent == "buffered", sent  # it did not wake the wait: the wake had
    else:
        from engine_core.model import EventRecord

        e = runner.engine.get(eid)
        now = runner.clock.now()
        runner.store.put_event(eid, EventRecord(name="approved", event_id="evt-1", data={"approver": "ana"},
                                                sent_at=now, by="x", run=e.run, expires_at=e.expires_at))
        runner.engine.operator.wake(eid, "ops")
    done = runner.run_until_done(eid)
    # then: the wake is what was answered: the wait timed out (no default: failed), the event kept, not taken
    assert done.status is Status.FAILED and done.error.code == "event_timeout", done.error
    assert runs == {"before": 1, "after": 0}
    events, consumed, _ = runner.engine.operator.events(eid)
    assert [ev.event_id for ev in events] == ["evt-1"] and consumed == {}, (events, consumed)
    # and when the failure is redriven: the wait waits again (a new period, not woken) and takes the kept event
    runner.engine.operator.redrive(eid, "ops")
    again = runner.run_until_done(eid)
    assert again.status is Status.COMPLETED, again.error
    assert runner.context(eid)["approved_by"] == "ana" and runs == {"before": 1, "after": 1}, runs
    events, consumed, _ = runner.engine.operator.events(eid)
    assert consumed == {"evt-1": 1}, consumed  # taken by the wait (step 1), once


def test_a_wait_with_both_a_default_and_several_wait_periods_is_refused_saying_which_to_drop(registry):
    from engine_core.durable import durable
    from engine_core.durable import wait_for_event as dwait

    # given / when: a step list's wait with both (before: taken, and the retry never applied)
    with pytest.raises(RegistrationError, match=r"has a default and retry=RetryPolicy\(max_attempts=3\): a timeout "
                                                r"takes the default at once.*drop retry, or drop the default"):
        @workflow("both", registry=registry)
        class Both:
            steps = [wait_for_event("approved", timeout=60, default={"approved": False},
                                    retry=RetryPolicy(max_attempts=3))]

    # and: a code-first one fails where it is called, saying the same
    @durable("both_code", registry=registry)
    def flow(input):
        return dwait("approved", timeout=60, default={"approved": False}, retry=RetryPolicy(max_attempts=3))

    runner = LocalRunner(registry)
    e = runner.run_until_done(runner.start("both_code", {}))
    assert e.status is Status.FAILED and "drop retry, or drop the default" in e.error.message, e.error
    # a default with one wait period (or none said) is taken, as before
    wait_for_event("approved", timeout=60, default={"approved": False}, retry=RetryPolicy(max_attempts=1))


@pytest.mark.parametrize("after_the_wake", ["default", "waits again", "fails"])
def test_a_callback_answered_after_a_wake_of_its_wait_is_refused_and_its_token_is_not_spent(after_the_wake):
    # given: the wait a token was issued for, woken by an operator; its delivery has not run yet
    wait = {"default": {"default": {"approver": "skipped"}}, "waits again": {"retry": RetryPolicy(max_attempts=2)},
            "fails": {"retry": RetryPolicy(max_attempts=1)}}[after_the_wake]
    runner, runs, tokens = make(timeout=86400, **wait)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")
    runner.engine.operator.wake(eid, "ops")

    # when: the partner answers in that window
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(tokens[0], {"approver": "partner"}, "partner")

    # then: 409 callback_used, saying the wake came first; nothing kept for later
    assert refused.value.code == "callback_used" and "loom wake" in str(refused.value), refused.value
    assert eid not in runner.store.events
    # and the wait ends as the wake said; a wait that waits again takes the token then
    if after_the_wake == "waits again":
        for _ in range(10):  # the wake's delivery: the first wait period ends, the second begins
            runner.step_once()
            if not runner.engine.get(eid).wait_woken:
                break
        again = runner.engine.get(eid)
        assert (again.status, again.attempt, again.wait_woken) == (Status.WAITING, 2, False)
        assert runner.engine.operator.complete_callback(tokens[0], {"approver": "partner"}, "partner").outcome \
            == "delivered"
        done = runner.run_until_done(eid)
        assert done.status is Status.COMPLETED and runner.context(eid)["approved_by"] == "partner"
    else:
        done = runner.run_until_done(eid)
        assert done.status is {"default": Status.COMPLETED, "fails": Status.FAILED}[after_the_wake]
        if after_the_wake == "default":
            assert runner.context(eid)["approved_by"] == "skipped"


@pytest.mark.parametrize("after_the_wake", ["default", "waits again", "fails"])
def test_a_callback_whose_answer_is_kept_as_a_wake_of_its_wait_commits_is_refused_naming_the_wake(after_the_wake):
    # given: the wait a token was issued for; an operator's wake commits between the answer being kept and the
    # write that would wake the wait for it
    wait = {"default": {"default": {"approver": "skipped"}}, "waits again": {"retry": RetryPolicy(max_attempts=2)},
            "fails": {"retry": RetryPolicy(max_attempts=1)}}[after_the_wake]
    runner, runs, tokens = make(timeout=86400, **wait)
    eid = runner.start("approval_flow", {})
    runner.run_until(eid, "WAITING")

    # when: the partner answers
    with racing_the_keep(runner.store, lambda: runner.engine.operator.wake(eid, "ops")), \
            pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(tokens[0], {"approver": "partner"}, "partner")

    # then: 409 callback_used, naming the wake, which is what happens (before: answered buffered, as if the
    # wait would take the answer)
    assert refused.value.code == "callback_used" and "loom wake" in str(refused.value), refused.value
    # and the wait ends as the wake said; one that waits again takes the answer kept
    done = runner.run_until_done(eid)
    assert done.status is {"default": Status.COMPLETED, "waits again": Status.COMPLETED,
                           "fails": Status.FAILED}[after_the_wake], done.error
    if done.status is Status.COMPLETED:
        assert runner.context(eid)["approved_by"] == {"default": "skipped", "waits again": "partner"}[after_the_wake]
    # and a repeat of the token is refused as used
    with pytest.raises(ExecutionStateConflictError) as again:
        runner.engine.operator.complete_callback(tokens[0], {"approver": "partner"}, "partner")
    assert again.value.code in ("callback_used", "execution_ended"), again.value


def test_durable_a_callback_whose_answer_is_kept_as_a_wake_of_its_wait_commits_is_refused_the_same_way():
    from engine_core.durable import durable, wait_for_callback
    from engine_core.durable import step as dstep

    # given: a code-first wait_for_callback; the wake commits between the answer being kept and its wake write
    registry, tokens = Registry(), []

    @durable("callback_code", registry=registry)
    def flow(input):
        answer = wait_for_callback("approved", tokens.append, timeout=86400, default={"approver": "skipped"})
        return dstep("after", lambda: answer)

    runner = LocalRunner(registry)
    eid = runner.start("callback_code", {})
    runner.run_until(eid, "WAITING")

    # when / then: refused naming the wake, and the function goes on with the wait's default
    with racing_the_keep(runner.store, lambda: runner.engine.operator.wake(eid, "ops")), \
            pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(tokens[-1], {"approver": "partner"}, "partner")
    assert refused.value.code == "callback_used" and "loom wake" in str(refused.value), refused.value
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED and runner.result(eid) == {"approver": "skipped"}


def test_an_event_whose_data_would_push_the_context_over_the_budget_fails_the_wait_and_a_redrive_passes_it_over():
    # given: a step list whose context is near the item budget, waiting for 'approved'
    registry = Registry()

    def fill(ctx):
        return {"blob": "x" * 3000}

    @workflow("big_context", registry=registry)
    class BigContext:
        steps = [fill, wait_for_event("approved", timeout=3600)]

    runner = LocalRunner(registry, settings=EngineSettings(item_budget_bytes=4096))
    eid = runner.start("big_context", {})
    runner.run_until(eid, "WAITING")

    # when: an event whose data does not fit beside it, which the send cannot know
    sent = runner.send_event(eid, "approved", {"note": "y" * 2000}, event_id="too-big")
    failed = runner.run_until_done(eid)

    # then: FAILED result_too_large naming the event, and what to do
    assert sent == "delivered"
    assert (failed.status, failed.error.code) == (Status.FAILED, "result_too_large"), failed.error
    assert "event 'approved' (event_id 'too-big') would make the context" in failed.error.message
    assert f"`loom redrive {eid}` brings the wait back, then send a smaller event" in failed.error.message
    # and the redrive's wait passes that event over, waits, and takes the smaller one sent then
    runner.engine.operator.redrive(eid, "ops")
    assert runner.run_until(eid, "WAITING").status is Status.WAITING
    assert runner.send_event(eid, "approved", {"note": "s3://bucket/key"}, event_id="small") == "delivered"
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED and runner.context(eid)["wait_approved"] == {"note": "s3://bucket/key"}


@pytest.mark.parametrize("style", ["steps", "code"])
def test_an_answer_sent_while_a_cancel_undoes_the_steps_is_refused_not_kept_for_a_wait_that_never_comes(style):
    # given: cancelled at its wait; the undo backs off, so the execution is RUNNING, compensating
    from engine_core import step as list_step
    from engine_core.durable import durable, step as code_step, wait_for_callback

    registry, tokens, undo = Registry(), [], {"fails": 1}

    def refund(*_):
        if undo["fails"]:
            undo["fails"] -= 1
            raise RuntimeError("refund API slow")

    slow = RetryPolicy(max_attempts=3, base=600, max_delay=600)
    if style == "steps":
        def charge(ctx):
            tokens.append(ctx.callback_token("approved"))
            return {"charged": True}

        @workflow("undoing", registry=registry)
        class Undoing:
            steps = [list_step(charge, compensate=list_step(refund, retry=slow)), wait_for_event("approved", timeout=3600)]
    else:
        @durable("undoing", registry=registry, retry=slow)
        def flow(input):
            code_step("charge", lambda: 1, compensate=refund)
            return wait_for_callback("approved", tokens.append, timeout=3600)
    runner = LocalRunner(registry)
    eid = runner.start("undoing", {})
    runner.run_until(eid, "WAITING")
    runner.engine.operator.cancel(eid, "ops", "stop")
    runner.step_once()  # the undo's first attempt fails: it backs off
    assert runner.engine.get(eid).compensating and runner.engine.get(eid).status is Status.RUNNING

    # when: the approver answers through the token, and another system by a plain event
    with pytest.raises(ExecutionStateConflictError) as by_token:
        runner.engine.operator.complete_callback(tokens[0], {"approved": True}, "approver")
    with pytest.raises(ExecutionStateConflictError) as by_event:
        runner.send_event(eid, "approved", {"approved": True}, event_id="mail-1")

    # then: both 409 execution_ended, saying why, and nothing kept; the cancel ends as it was going to
    for refused in (by_token.value, by_event.value):
        assert refused.code == "execution_ended" and "was cancelled and is ending" in str(refused), refused
    assert eid not in runner.store.events
    done = runner.run_until_done(eid)
    assert (done.status, done.compensated) == (Status.CANCELLED, True)


@pytest.mark.parametrize("send", ["event", "callback"])
@pytest.mark.parametrize("undo", [False, True], ids=["nothing to undo", "undoing"])
def test_an_answer_kept_as_a_cancel_commits_is_refused_execution_ended_not_buffered(send, undo):
    # given: waiting; an operator's cancel commits between the answer being kept and the write that would wake
    # the wait for it (with nothing to undo the execution is CANCELLED at once; else it undoes its step)
    from engine_core import step as list_step

    registry, tokens = Registry(), []

    def charge(ctx):
        tokens.append(ctx.callback_token("approved"))
        return {"charged": True}

    @workflow("cancelled_as_it_came", registry=registry)
    class CancelledAsItCame:
        steps = [list_step(charge, compensate=list_step(lambda ctx: None)) if undo else charge,
                 wait_for_event("approved", timeout=3600)]

    runner = LocalRunner(registry)
    eid = runner.start("cancelled_as_it_came", {})
    runner.run_until(eid, "WAITING")

    # when: the answer comes
    with racing_the_keep(runner.store, lambda: runner.engine.operator.cancel(eid, "ops", "stop")), \
            pytest.raises(ExecutionStateConflictError) as refused:
        if send == "event":
            runner.send_event(eid, "approved", {"approved": True}, event_id="mail-1")
        else:
            runner.engine.operator.complete_callback(tokens[0], {"approved": True}, "approver")

    # then: 409 execution_ended, saying the cancel came as it did and that nothing takes it (before: buffered,
    # as if a later wait would take it); the cancel ends as it was going to
    assert refused.value.code == "execution_ended" and "cancelled" in str(refused.value), refused.value
    assert "as this answer came" in str(refused.value) and "nothing takes it" in str(refused.value), refused.value
    done = runner.run_until_done(eid)
    assert done.status is Status.CANCELLED and done.compensated is (True if undo else None), (done.status, done.error)
    # and a repeat of the event id answers duplicate; of the token, used or ended
    if send == "event":
        assert runner.send_event(eid, "approved", {"approved": True}, event_id="mail-1") == "duplicate"
    else:
        with pytest.raises(ExecutionStateConflictError) as again:
            runner.engine.operator.complete_callback(tokens[0], {"approved": True}, "approver")
        assert again.value.code in ("callback_used", "execution_ended"), again.value


def test_an_event_the_wait_took_as_it_was_kept_is_not_refused_when_the_execution_completed_meanwhile():
    # given: an execution running toward its wait; the send keeps the event, and before the send looks again
    # the worker reaches the wait, takes the event and completes the execution
    runner, runs, _ = make(timeout=3600)
    eid = runner.start("approval_flow", {})
    runner.step_once()  # "before" ran; the wait is next

    # when: the event is sent (found by the end-to-end suite: refused execution_ended, "nothing takes it")
    with racing_the_keep(runner.store, lambda: runner.run_until_done(eid)):
        outcome = runner.send_event(eid, "approved", {"approver": "ana"}, event_id="evt-1")

    # then: answered as a kept event (the wait took it), not refused; the execution completed with it
    assert outcome in ("buffered", "delivered"), outcome
    assert runner.engine.get(eid).status is Status.COMPLETED and runner.context(eid)["approved_by"] == "ana"


class _Died(BaseException):
    """The sender's process died here (nothing after it runs; its caller got no answer)."""


def test_a_send_that_died_after_keeping_its_event_behind_a_re_stamp_is_healed_by_its_sender_sending_again():
    """Composition seed 308053. A send reads the execution, and before it keeps its event the execution moves on
    to a long wait, re-stamping every item to that wait's horizon; the event is kept with the TTL of the send's
    view, and the send dies before it looks again. Its sender got no answer and sends again with the same id:
    that send raises the event's TTL to the re-stamp, so TTL never deletes the event the wait will take."""
    registry = Registry()

    @workflow("two_waits", registry=registry)
    class TwoWaits:
        steps = [wait_for_event("approved", timeout=600), wait_for_event("shipped", timeout=6 * 3600)]

    runner = LocalRunner(registry, settings=EngineSettings(retention_days=0.01, history_grace_s=0))  # 864 s
    store = runner.store
    eid = runner.start("two_waits", {})
    before = runner.run_until(eid, "WAITING")
    put_event = store.put_event

    def moved_on_then_kept_then_died(execution_id, record, legacy=False):
        store.put_event = put_event  # meanwhile: the approval arrives and the execution begins its long wait
        assert runner.send_event(eid, "approved", {"by": "ana"}, event_id="ok-1") == "delivered"
        while runner.engine.get(eid).current_step == 0:
            runner.step_once()
        put_event(execution_id, record, legacy)
        raise _Died()

    store.put_event = moved_on_then_kept_then_died
    with pytest.raises(_Died):
        runner.send_event(eid, "shipped", {"tracking": "T-1"}, event_id="ship-1")
    waiting = runner.engine.get(eid)
    assert waiting.status is Status.WAITING and waiting.current_step == 1
    assert waiting.stamped_until > before.stamped_until  # the long wait re-stamped every item
    kept = store.events[eid]

    def ttl_of_the_event() -> int:
        [ttl] = [attrs["expires_at"] for key, attrs in kept.items() if "ship-1" in key]
        return ttl

    assert ttl_of_the_event() < int(waiting.stamped_until.timestamp())  # what the dead send left
    # when: its sender, having got no answer, sends it again
    outcome = runner.send_event(eid, "shipped", {"tracking": "T-1"}, event_id="ship-1")
    # then: the event outlives the execution's re-stamp, and the wait takes it after time deleted what expired
    assert outcome == "duplicate"
    assert ttl_of_the_event() >= int(waiting.stamped_until.timestamp())
    runner.clock.set(waiting.stamped_until - dt.timedelta(seconds=1))
    gone = store.reap_expired(runner.clock.now())
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED, (done.error, gone)
    assert runner.context(eid)["wait_shipped"] == {"tracking": "T-1"}
